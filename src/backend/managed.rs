//! Placing managed (unified) memory: where to prefetch it
//! ([`ManagedPlace`]) and the hints the driver takes about it ([`Advice`]),
//! for [`MemoryDevice::prefetch_managed`](super::MemoryDevice::prefetch_managed)
//! and [`MemoryDevice::advise_managed`](super::MemoryDevice::advise_managed)
//! (`cuMemPrefetchAsync`/`cuMemAdvise`, `hipMemPrefetchAsync`/`hipMemAdvise`).

use std::fmt;

use super::{DeviceMemory, MemoryKind};
use crate::error::memory::MemoryError;
use crate::error::Result;

/// Where managed memory is placed: host memory, or device `N` of the
/// memory's backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ManagedPlace {
    /// Host memory.
    Host,
    /// The device with this ordinal.
    Device(usize),
}

impl fmt::Display for ManagedPlace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ManagedPlace::Host => write!(f, "the host"),
            ManagedPlace::Device(n) => write!(f, "device {n}"),
        }
    }
}

/// A hint about managed memory (CUDA's `CUmem_advise`, HIP's
/// `hipMemoryAdvise`: both number them 1 to 6 in this order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Advice {
    /// Mostly read: each reader may keep a read-only copy.
    SetReadMostly,
    /// Undoes [`SetReadMostly`](Self::SetReadMostly).
    UnsetReadMostly,
    /// Prefer to keep the pages at the place given.
    SetPreferredLocation,
    /// Undoes [`SetPreferredLocation`](Self::SetPreferredLocation).
    UnsetPreferredLocation,
    /// The place given accesses the memory: keep it mapped there.
    SetAccessedBy,
    /// Undoes [`SetAccessedBy`](Self::SetAccessedBy).
    UnsetAccessedBy,
}

impl Advice {
    /// Every advice, in the vendors' order.
    pub const ALL: [Advice; 6] = [
        Advice::SetReadMostly,
        Advice::UnsetReadMostly,
        Advice::SetPreferredLocation,
        Advice::UnsetPreferredLocation,
        Advice::SetAccessedBy,
        Advice::UnsetAccessedBy,
    ];

    /// The vendors' number (1 to 6).
    pub fn code(self) -> u32 {
        match self {
            Advice::SetReadMostly => 1,
            Advice::UnsetReadMostly => 2,
            Advice::SetPreferredLocation => 3,
            Advice::UnsetPreferredLocation => 4,
            Advice::SetAccessedBy => 5,
            Advice::UnsetAccessedBy => 6,
        }
    }

    /// The name the Python API takes (`"set_read_mostly"`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Advice::SetReadMostly => "set_read_mostly",
            Advice::UnsetReadMostly => "unset_read_mostly",
            Advice::SetPreferredLocation => "set_preferred_location",
            Advice::UnsetPreferredLocation => "unset_preferred_location",
            Advice::SetAccessedBy => "set_accessed_by",
            Advice::UnsetAccessedBy => "unset_accessed_by",
        }
    }

    /// The advice whose [`name`](Self::name) is `name`;
    /// [`Error::InvalidArgument`](crate::error::Error::InvalidArgument), listing
    /// the names, for any other.
    ///
    /// ```
    /// use gpuport::Advice;
    /// assert_eq!(Advice::named("set_read_mostly")?, Advice::SetReadMostly);
    /// assert!(Advice::named("loud").unwrap_err().to_string().contains("one of set_read_mostly, "));
    /// # Ok::<(), gpuport::Error>(())
    /// ```
    pub fn named(name: &str) -> Result<Advice> {
        Advice::ALL.into_iter().find(|a| a.name() == name).ok_or_else(|| {
            let names: Vec<&str> = Advice::ALL.iter().map(|a| a.name()).collect();
            crate::error::Error::InvalidArgument {
                name: "advice",
                reason: format!("unknown advice '{name}'; one of {}", names.join(", ")),
            }
        })
    }
}

/// [`MemoryError::NotManaged`] unless `memory` is managed memory.
pub(crate) fn check_managed<M: DeviceMemory + ?Sized>(op: &'static str, memory: &M) -> Result<()> {
    match memory.kind() {
        MemoryKind::Managed => Ok(()),
        kind => Err(MemoryError::NotManaged { op, kind: format!("{kind:?}").to_lowercase() }.into()),
    }
}

/// [`MemoryError::NotAccessible`] unless `place` names the host or one of
/// `count` devices.
pub(crate) fn check_place(op: &'static str, place: ManagedPlace, count: usize) -> Result<()> {
    match place {
        ManagedPlace::Device(n) if n >= count => Err(MemoryError::NotAccessible {
            op,
            place: place.to_string(),
            reason: format!("there is no such device ({count} of this backend)"),
        }
        .into()),
        _ => Ok(()),
    }
}

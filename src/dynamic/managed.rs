//! Managed memory at run time: which memory an array's device copy is
//! ([`ArrayMemory`](super::array::ArrayMemory), `MemArray(..., memory=...)`), where a caller asks to
//! place managed memory ([`ManagedTarget`]), and an [`AnyArray`]'s
//! `prefetch` and `advise` (`MemArray::prefetch`, `MemArray::advise` in
//! `src/array/memarray/managed.rs`). On the host backend managed memory is
//! the heap: arrays of it are made, checked and placed, and nothing moves.
//!
//! ```
//! use gpuport::dynamic::array::{new_checked_in, ArrayMemory};
//! use gpuport::dynamic::managed::ManagedTarget;
//! use gpuport::dynamic::{AnyArray, AnyStream, DType};
//! use gpuport::Advice;
//! let dev = gpuport::open("host")?;
//! let memory = ArrayMemory::named("managed")?;
//! let mut a = AnyArray::Owned(new_checked_in(&dev, DType::Float32, &[4], memory)?);
//! assert!(a.is_managed());
//! a.advise(Advice::SetReadMostly, &ManagedTarget::Own, None)?;
//! a.prefetch(&ManagedTarget::named("host")?, &AnyStream::default_for(&dev), None)?;
//! # Ok::<(), gpuport::Error>(())
//! ```

use super::array::AnyArray;
use super::stream::AnyStream;
use crate::array::{ImportRefusal, LockId};
use crate::backend::registry::AnyDevice;
use crate::backend::{Advice, ManagedPlace};
use crate::error::{Error, Result};

/// Where a caller asks to place managed memory.
#[derive(Debug, Clone)]
pub enum ManagedTarget {
    /// The device that owns the memory.
    Own,
    /// Host memory.
    Host,
    /// A device, which must be of the owner's backend.
    Device(AnyDevice),
}

impl ManagedTarget {
    /// A target by name: `"device"` (the owner's device), `"host"` or
    /// `"cpu"` (host memory), else a device spec such as `"cuda:1"`
    /// (opened; its errors are [`crate::open`]'s).
    pub fn named(name: &str) -> Result<ManagedTarget> {
        Ok(match name {
            "device" => ManagedTarget::Own,
            "host" | "cpu" => ManagedTarget::Host,
            spec => ManagedTarget::Device(crate::open(spec)?),
        })
    }

    /// The place this target names for managed memory of `owner`: a
    /// device of another backend is [`Error::InvalidArgument`].
    pub fn place_for(&self, owner: &AnyDevice) -> Result<ManagedPlace> {
        match self {
            ManagedTarget::Own => Ok(ManagedPlace::Device(owner.info().ordinal)),
            ManagedTarget::Host => Ok(ManagedPlace::Host),
            ManagedTarget::Device(d) if d.backend() == owner.backend() => Ok(ManagedPlace::Device(d.info().ordinal)),
            ManagedTarget::Device(d) => Err(Error::InvalidArgument {
                name: "location",
                reason: format!(
                    "managed memory of {} is placed on the host or a device of its backend, not on {}",
                    owner.info().spec(),
                    d.info().spec()
                ),
            }),
        }
    }
}

impl AnyArray {
    /// Whether the array's device copy is managed memory (an import: no,
    /// whatever its memory; its producer places it).
    pub fn is_managed(&self) -> bool {
        match self {
            AnyArray::Owned(a) => a.is_managed(),
            AnyArray::Imported(_) => false,
        }
    }

    /// Enqueues on `s` moving a managed array's device copy toward `to`
    /// (see `MemArray::prefetch`: [`MemoryError::NotManaged`] for an array
    /// that is not managed). An import is
    /// [`ImportRefusal::ProducerOnly`].
    ///
    /// [`MemoryError::NotManaged`]: crate::memory::MemoryError::NotManaged
    pub fn prefetch(&mut self, to: &ManagedTarget, s: &AnyStream, lock: Option<LockId>) -> Result<()> {
        match self {
            AnyArray::Owned(a) => {
                let place = to.place_for(&a.device())?;
                a.prefetch(place, s, lock)
            }
            AnyArray::Imported(_) => Err(ImportRefusal::ProducerOnly { op: "prefetch" }.into()),
        }
    }

    /// Gives the driver `advice` about a managed array's device copy for
    /// `place` (see `MemArray::advise`); errors as [`prefetch`](Self::prefetch)'s.
    pub fn advise(&mut self, advice: Advice, place: &ManagedTarget, lock: Option<LockId>) -> Result<()> {
        match self {
            AnyArray::Owned(a) => {
                let place = place.place_for(&a.device())?;
                a.advise(advice, place, lock)
            }
            AnyArray::Imported(_) => Err(ImportRefusal::ProducerOnly { op: "advise" }.into()),
        }
    }
}

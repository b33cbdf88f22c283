//! [`Any`]: one value of any compiled-in backend, and the one macro that
//! runs generic code on it, [`on_backend!`](crate::on_backend).
//!
//! `Any<F>` is the closed enum every run-time type is made of: `F` names
//! what each variant holds for its backend (a device, a stream, an
//! allocation, a communicator), so the three variants are written here once,
//! not once per type. A device of any backend is `Any<Devices>`
//! ([`AnyDevice`]); the layers above add their own families (`dynamic`'s
//! streams and arrays, `collective`'s communicators). [`DynDevice`] moves a
//! value of a known backend into and out of the enum.

use std::fmt;
use std::sync::Arc;

use super::host::{Host, HostDevice};
use super::{Backend, Device, DeviceInfo};
use crate::error::BackendKind;

#[cfg(feature = "cuda")]
use super::cuda::{Cuda, CudaDevice};
#[cfg(feature = "rocm")]
use super::hip::{Rocm, RocmDevice};

/// What a value of [`Any`] holds for each backend `B`.
pub trait PerBackend: 'static {
    /// The value for backend `B`.
    type Of<B: Backend>: Send + Sync + fmt::Debug;
}

/// A value of any compiled-in backend: `F::Of<Host>`, `F::Of<Cuda>` or
/// `F::Of<Rocm>`.
#[non_exhaustive]
pub enum Any<F: PerBackend> {
    /// The host backend's.
    Host(F::Of<Host>),
    /// The CUDA backend's.
    #[cfg(feature = "cuda")]
    Cuda(F::Of<Cuda>),
    /// The ROCm (HIP) backend's.
    #[cfg(feature = "rocm")]
    Rocm(F::Of<Rocm>),
}

pub(crate) use per_kind::PerHostOrGpu;

/// Kept private to the crate: the GPU side names the crate's `gpu::Driver`.
mod per_kind {
    use std::fmt;

    /// A type for the host backend and one for the GPU backend over any
    /// driver. A family names through it (`backend::sealed::Sealed::Pick`)
    /// a type per backend that needs more of the backend than [`Backend`](super::Backend)
    /// says: a communicator needs `collective::CollectiveBackend`, which
    /// `Backend` cannot name, yet every backend has (`src/collective/any.rs`).
    pub trait PerHostOrGpu: 'static {
        /// The host backend's type.
        type Host: Send + Sync + fmt::Debug;
        /// The GPU backend's type over driver `D`.
        #[cfg(any(feature = "cuda", feature = "rocm"))]
        type Gpu<D: crate::backend::gpu::Driver>: Send + Sync + fmt::Debug;
    }
}

/// `Any`'s variants under names that exist whatever features gpuport was
/// built with: the variant of a backend that is not compiled in is named
/// `Host` again. [`on_backend!`](crate::on_backend) matches all three
/// names, so its expansion compiles in any crate (a `#[cfg]` in an
/// exported macro would test the calling crate's features, not gpuport's);
/// an arm for a missing backend repeats the host arm and is never taken.
#[doc(hidden)]
pub mod variant {
    pub use super::Any::Host;

    #[cfg(feature = "cuda")]
    pub use super::Any::Cuda;
    #[cfg(not(feature = "cuda"))]
    pub use super::Any::Host as Cuda;

    #[cfg(not(feature = "rocm"))]
    pub use super::Any::Host as Rocm;
    #[cfg(feature = "rocm")]
    pub use super::Any::Rocm;
}

/// Runs generic code on whichever backend an [`Any`] holds (an
/// [`AnyDevice`], a stream, a communicator).
///
/// - `on_backend!(value, v => body)` evaluates `body` with `v` bound to the
///   variant's contents (by value, `&` or `&mut`, as `value` is); `body` is
///   compiled once per compiled-in backend.
/// - `on_backend!((a, b), (x, y) => body, else => other)`: `body` when `a`
///   and `b` are of one backend, else `other`.
///
/// - `on_backend!(map value, v => body)`: the same variant, holding `body`
///   (a stream of a device's backend from the device, say).
///
/// ```
/// use gpuport::{on_backend, Device};
/// let dev = gpuport::open("host")?;
/// let name = on_backend!(&dev, d => d.info().name.clone());
/// assert!(name.starts_with("host"));
/// let same = on_backend!((&dev, &dev), (a, b) => a.info().ordinal == b.info().ordinal, else => false);
/// assert!(same);
/// let copy: gpuport::AnyDevice = on_backend!(map &dev, d => d.clone());
/// assert_eq!(copy.backend(), dev.backend());
/// # Ok::<(), gpuport::Error>(())
/// ```
#[macro_export]
macro_rules! on_backend {
    (map $value:expr, $v:pat => $body:expr) => {
        match $value {
            $crate::backend::any::variant::Host($v) => $crate::backend::any::variant::Host($body),
            #[allow(unreachable_patterns)]
            $crate::backend::any::variant::Cuda($v) => $crate::backend::any::variant::Cuda($body),
            #[allow(unreachable_patterns)]
            $crate::backend::any::variant::Rocm($v) => $crate::backend::any::variant::Rocm($body),
            // Outside gpuport the enum is `#[non_exhaustive]`.
            #[allow(unreachable_patterns)]
            _ => ::core::unreachable!("an Any of a backend on_backend! does not know"),
        }
    };
    (($a:expr, $b:expr), ($x:pat, $y:pat) => $body:expr, else => $other:expr) => {
        match ($a, $b) {
            ($crate::backend::any::variant::Host($x), $crate::backend::any::variant::Host($y)) => $body,
            #[allow(unreachable_patterns)]
            ($crate::backend::any::variant::Cuda($x), $crate::backend::any::variant::Cuda($y)) => $body,
            #[allow(unreachable_patterns)]
            ($crate::backend::any::variant::Rocm($x), $crate::backend::any::variant::Rocm($y)) => $body,
            #[allow(unreachable_patterns)]
            _ => $other,
        }
    };
    ($value:expr, $v:pat => $body:expr) => {
        match $value {
            $crate::backend::any::variant::Host($v) => $body,
            #[allow(unreachable_patterns)]
            $crate::backend::any::variant::Cuda($v) => $body,
            #[allow(unreachable_patterns)]
            $crate::backend::any::variant::Rocm($v) => $body,
            // Outside gpuport the enum is `#[non_exhaustive]`.
            #[allow(unreachable_patterns)]
            _ => ::core::unreachable!("an Any of a backend on_backend! does not know"),
        }
    };
}

impl<F: PerBackend> Any<F> {
    /// The backend of the value.
    pub fn backend(&self) -> BackendKind {
        match self {
            Any::Host(_) => BackendKind::Host,
            #[cfg(feature = "cuda")]
            Any::Cuda(_) => BackendKind::Cuda,
            #[cfg(feature = "rocm")]
            Any::Rocm(_) => BackendKind::Rocm,
        }
    }
}

impl<F: PerBackend> fmt::Debug for Any<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        crate::on_backend!(self, v => fmt::Debug::fmt(v, f))
    }
}

/// What [`AnyDevice`] holds per backend: the device.
#[derive(Debug)]
pub struct Devices;

impl PerBackend for Devices {
    type Of<B: Backend> = Arc<B::Device>;
}

/// A device of any compiled-in backend, chosen at run time:
/// `AnyDevice::Host(d)`, `AnyDevice::Cuda(d)` or `AnyDevice::Rocm(d)`, with
/// `d` an `Arc` of the backend's device. [`on_backend!`](crate::on_backend)
/// runs generic code on it.
pub type AnyDevice = Any<Devices>;

impl Clone for AnyDevice {
    fn clone(&self) -> Self {
        crate::on_backend!(map self, d => d.clone())
    }
}

impl AnyDevice {
    /// The device's properties.
    pub fn info(&self) -> &DeviceInfo {
        crate::on_backend!(self, d => d.info())
    }
}

/// A device whose values move in and out of [`Any`]: the device of every
/// compiled-in backend. Sealed: implemented here for the three devices.
pub trait DynDevice: Device + sealed::Sealed {
    /// Wraps a value of this device's backend.
    fn wrap<F: PerBackend>(v: F::Of<Self::B>) -> Any<F>;
    /// The value, if it is of this device's backend.
    fn get<F: PerBackend>(a: &Any<F>) -> Option<&F::Of<Self::B>>;
    /// The value, if it is of this device's backend.
    fn get_mut<F: PerBackend>(a: &mut Any<F>) -> Option<&mut F::Of<Self::B>>;
    /// The device as an [`AnyDevice`].
    fn any_device(d: &Arc<Self>) -> AnyDevice;
}

mod sealed {
    pub trait Sealed {}
}

/// Implements [`DynDevice`] for one backend's device and variant.
macro_rules! dyn_device {
    ($(#[$cfg:meta])* $dev:ty, $variant:ident) => {
        $(#[$cfg])*
        impl sealed::Sealed for $dev {}
        $(#[$cfg])*
        impl DynDevice for $dev {
            fn wrap<F: PerBackend>(v: F::Of<Self::B>) -> Any<F> {
                Any::$variant(v)
            }
            fn get<F: PerBackend>(a: &Any<F>) -> Option<&F::Of<Self::B>> {
                match a {
                    Any::$variant(v) => Some(v),
                    #[allow(unreachable_patterns)]
                    _ => None,
                }
            }
            fn get_mut<F: PerBackend>(a: &mut Any<F>) -> Option<&mut F::Of<Self::B>> {
                match a {
                    Any::$variant(v) => Some(v),
                    #[allow(unreachable_patterns)]
                    _ => None,
                }
            }
            fn any_device(d: &Arc<Self>) -> AnyDevice {
                Any::$variant(d.clone())
            }
        }
    };
}

dyn_device!(HostDevice, Host);
dyn_device!(
    #[cfg(feature = "cuda")]
    CudaDevice,
    Cuda
);
dyn_device!(
    #[cfg(feature = "rocm")]
    RocmDevice,
    Rocm
);

//! [`Any`]: one value of any compiled-in backend, and the macros that run
//! generic code on it.
//!
//! `Any<F>` is the closed enum every run-time type of this layer is made of:
//! `F` names what each variant holds for its backend (a stream, an event, an
//! allocation), so the three variants are written here once, not once per
//! type. `on_backend!` (crate-internal) runs a generic body on whichever variant is there,
//! compiled once per backend; [`DynDevice`] moves a value of a known backend
//! into and out of the enum.

use std::fmt;
use std::sync::Arc;

use crate::backend::host::{Host, HostDevice};
use crate::backend::registry::AnyDevice;
use crate::backend::{Backend, Device};
use crate::error::{BackendKind, Error};

#[cfg(feature = "cuda")]
use crate::backend::cuda::{Cuda, CudaDevice};
#[cfg(feature = "rocm")]
use crate::backend::hip::{Hip, HipDevice};

/// What a value of [`Any`] holds for each backend `B`.
pub trait PerBackend: 'static {
    /// The value for backend `B`.
    type Of<B: Backend>: Send + Sync + fmt::Debug;
}

/// A value of any compiled-in backend: `F::Of<Host>`, `F::Of<Cuda>` or
/// `F::Of<Hip>`.
#[non_exhaustive]
pub enum Any<F: PerBackend> {
    /// The host backend's.
    Host(F::Of<Host>),
    /// The CUDA backend's.
    #[cfg(feature = "cuda")]
    Cuda(F::Of<Cuda>),
    /// The ROCm (HIP) backend's.
    #[cfg(feature = "rocm")]
    Rocm(F::Of<Hip>),
}

/// `on_backend!(value, v => body)`: evaluates `body` with `v` bound to the
/// variant's contents (by value, `&` or `&mut`, as `value` is), compiled once
/// per compiled-in backend.
macro_rules! on_backend {
    ($value:expr, $v:pat => $body:expr) => {
        match $value {
            $crate::dynamic::any::Any::Host($v) => $body,
            #[cfg(feature = "cuda")]
            $crate::dynamic::any::Any::Cuda($v) => $body,
            #[cfg(feature = "rocm")]
            $crate::dynamic::any::Any::Rocm($v) => $body,
        }
    };
}

/// `on_backends!((a, b), (x, y) => body, else => other)`: `body` when `a`
/// and `b` are of one backend, else `other`.
macro_rules! on_backends {
    (($a:expr, $b:expr), ($x:pat, $y:pat) => $body:expr, else => $other:expr) => {
        match ($a, $b) {
            ($crate::dynamic::any::Any::Host($x), $crate::dynamic::any::Any::Host($y)) => $body,
            #[cfg(feature = "cuda")]
            ($crate::dynamic::any::Any::Cuda($x), $crate::dynamic::any::Any::Cuda($y)) => $body,
            #[cfg(feature = "rocm")]
            ($crate::dynamic::any::Any::Rocm($x), $crate::dynamic::any::Any::Rocm($y)) => $body,
            #[allow(unreachable_patterns)]
            _ => $other,
        }
    };
}

pub(crate) use {on_backend, on_backends};

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
        on_backend!(self, v => fmt::Debug::fmt(v, f))
    }
}

/// A value of backend `B` and the device it belongs to.
pub struct OnDevice<B: Backend, T> {
    /// The device.
    pub device: Arc<B::Device>,
    /// The value.
    pub item: T,
}

impl<B: Backend, T: Clone> Clone for OnDevice<B, T> {
    fn clone(&self) -> Self {
        OnDevice { device: self.device.clone(), item: self.item.clone() }
    }
}

impl<B: Backend, T: fmt::Debug> fmt::Debug for OnDevice<B, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} on {}", self.item, self.device.info().spec())
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
                AnyDevice::$variant(d.clone())
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
    HipDevice,
    Rocm
);

/// Whether two handles name the same device.
pub fn same_device(a: &AnyDevice, b: &AnyDevice) -> bool {
    a.backend() == b.backend() && a.info().ordinal == b.info().ordinal
}

/// The error for a value of device `found` given where `expected`'s was needed.
pub fn mismatch(what: &'static str, expected: &AnyDevice, found: &AnyDevice) -> Error {
    Error::DeviceMismatch { what, expected: expected.info().spec(), found: found.info().spec() }
}

/// `rewrap!(value, v => expr)`: the same variant of `Any`, holding `expr`
/// (with `v` bound to the variant's contents).
macro_rules! rewrap {
    ($value:expr, $v:pat => $body:expr) => {
        match $value {
            $crate::dynamic::any::Any::Host($v) => $crate::dynamic::any::Any::Host($body),
            #[cfg(feature = "cuda")]
            $crate::dynamic::any::Any::Cuda($v) => $crate::dynamic::any::Any::Cuda($body),
            #[cfg(feature = "rocm")]
            $crate::dynamic::any::Any::Rocm($v) => $crate::dynamic::any::Any::Rocm($body),
        }
    };
}

pub(crate) use rewrap;

//! [`AnyCommunicator`]: a communicator of a backend chosen at run time, for
//! bindings (the Python package's `gpuport.distributed`), as
//! [`crate::dynamic`] holds streams and arrays of any backend.

use std::time::Duration;

use crate::backend::registry::AnyDevice;
use crate::backend::Device;
use crate::dynamic::{AnyStream, DynDevice};
use crate::error::{Error, Result};
use crate::Host;

use super::{CallMode, Communicator, Op, TcpStore};

#[cfg(feature = "cuda")]
use crate::backend::cuda::Cuda;
#[cfg(feature = "rocm")]
use crate::backend::hip::Hip;

/// A communicator of any compiled-in backend.
#[derive(Debug)]
#[non_exhaustive]
pub enum AnyCommunicator {
    /// The host backend's.
    Host(Communicator<Host>),
    /// A CUDA device's (NCCL).
    #[cfg(feature = "cuda")]
    Cuda(Communicator<Cuda>),
    /// A ROCm device's (RCCL).
    #[cfg(feature = "rocm")]
    Rocm(Communicator<Hip>),
}

/// `on_comm!(value, c => body)`: `body` with `c` bound to the variant's communicator.
macro_rules! on_comm {
    ($value:expr, $c:ident => $body:expr) => {
        match $value {
            AnyCommunicator::Host($c) => $body,
            #[cfg(feature = "cuda")]
            AnyCommunicator::Cuda($c) => $body,
            #[cfg(feature = "rocm")]
            AnyCommunicator::Rocm($c) => $body,
        }
    };
}

/// `on_device!(device, d, Variant => body)`: `body` with `d` the typed
/// device and `Variant` the matching `AnyCommunicator` constructor.
macro_rules! on_device {
    ($dev:expr, $d:ident, $variant:ident, $get:ident => $body:expr) => {
        match $dev {
            AnyDevice::Host($d) => {
                #[allow(unused_imports)]
                use AnyCommunicator::Host as $variant;
                let $get = AnyDevice::as_host;
                $body
            }
            #[cfg(feature = "cuda")]
            AnyDevice::Cuda($d) => {
                #[allow(unused_imports)]
                use AnyCommunicator::Cuda as $variant;
                let $get = AnyDevice::as_cuda;
                $body
            }
            #[cfg(feature = "rocm")]
            AnyDevice::Rocm($d) => {
                #[allow(unused_imports)]
                use AnyCommunicator::Rocm as $variant;
                let $get = AnyDevice::as_rocm;
                $body
            }
        }
    };
}

/// [`Communicator::new_id`] of device `d`'s backend.
fn id_for<D: Device>(d: &std::sync::Arc<D>) -> Result<Vec<u8>>
where
    D::B: super::CollectiveBackend,
{
    Communicator::<D::B>::new_id(d)
}

impl AnyCommunicator {
    /// [`Communicator::init_rank_with`] on a device of any backend.
    ///
    /// ```
    /// use std::time::Duration;
    /// use gpuport::collective::{AnyCommunicator, CallMode, TcpStore};
    /// let store = TcpStore::host("127.0.0.1:0".parse().unwrap(), Duration::from_secs(30))?;
    /// let comm = AnyCommunicator::init_rank(&gpuport::open("host")?, 0, 1, &store, CallMode::from_env())?;
    /// assert_eq!((comm.rank(), comm.size(), comm.engine().as_str()), (0, 1, "host"));
    /// # Ok::<(), gpuport::Error>(())
    /// ```
    pub fn init_rank(device: &AnyDevice, rank: usize, size: usize, store: &TcpStore, mode: CallMode) -> Result<Self> {
        on_device!(device, d, V, _get => Ok(V(Communicator::init_rank_with(d, rank, size, store, mode)?)))
    }

    /// [`Communicator::new_id`] for a device of any backend.
    pub fn new_id(device: &AnyDevice) -> Result<Vec<u8>> {
        on_device!(device, d, _V, _get => id_for(d))
    }

    /// [`Communicator::init_with_id_mode`] on a device of any backend;
    /// `timeout` `None` is `GPUPORT_COLLECTIVE_TIMEOUT`'s (300 s when unset).
    ///
    /// ```
    /// use gpuport::collective::{AnyCommunicator, CallMode};
    /// let dev = gpuport::open("host")?;
    /// let id = AnyCommunicator::new_id(&dev)?;
    /// assert_eq!(AnyCommunicator::init_with_id(&dev, 0, 1, &id, None, CallMode::Bounded)?.size(), 1);
    /// # Ok::<(), gpuport::Error>(())
    /// ```
    pub fn init_with_id(
        device: &AnyDevice,
        rank: usize,
        size: usize,
        id: &[u8],
        timeout: Option<Duration>,
        mode: CallMode,
    ) -> Result<Self> {
        let timeout = match timeout {
            Some(t) => t,
            None => super::communicator::timeout_from_env()?,
        };
        on_device!(device, d, V, _get => Ok(V(Communicator::init_with_id_mode(d, rank, size, id, timeout, mode)?)))
    }

    /// [`Communicator::init_all_with`] on devices of one backend.
    pub fn init_all(devices: &[AnyDevice], mode: CallMode) -> Result<Vec<Self>> {
        let Some(first) = devices.first() else {
            return Err(Error::InvalidArgument {
                name: "devices",
                reason: "a communicator needs at least one device".into(),
            });
        };
        on_device!(first, d, V, get => {
            let typed = devices
                .iter()
                .map(|x| {
                    get(x).cloned().ok_or_else(|| Error::DeviceMismatch {
                        what: "devices",
                        expected: format!("a {} device", d.info().backend.name()),
                        found: x.info().spec(),
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            Ok(Communicator::init_all_with(&typed, mode)?.into_iter().map(V).collect())
        })
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        on_comm!(self, c => c.rank())
    }

    /// The number of ranks.
    pub fn size(&self) -> usize {
        on_comm!(self, c => c.size())
    }

    /// This rank's device.
    pub fn device(&self) -> AnyDevice {
        on_comm!(self, c => DynDevice::any_device(c.device()))
    }

    /// The engine's name and version.
    pub fn engine(&self) -> String {
        on_comm!(self, c => c.engine())
    }

    /// See [`Communicator::mode`].
    pub fn mode(&self) -> CallMode {
        on_comm!(self, c => c.mode())
    }

    /// See [`Communicator::set_checks`].
    pub fn set_checks(&self, on: bool) -> Result<()> {
        on_comm!(self, c => c.set_checks(on))
    }

    /// See [`Communicator::set_timeout`].
    pub fn set_timeout(&mut self, timeout: Duration) -> Result<()> {
        on_comm!(self, c => c.set_timeout(timeout))
    }

    /// See [`Communicator::timeout`].
    pub fn timeout(&self) -> Duration {
        on_comm!(self, c => c.timeout())
    }

    /// See [`Communicator::abort`].
    pub fn abort(&self) -> Result<()> {
        on_comm!(self, c => c.abort())
    }

    /// See [`Communicator::is_aborted`].
    pub fn is_aborted(&self) -> bool {
        on_comm!(self, c => c.is_aborted())
    }

    /// [`Communicator::enqueue_raw`] on a stream of the communicator's device.
    ///
    /// # Safety
    /// As [`Communicator::enqueue_raw`]'s.
    pub unsafe fn enqueue_raw(&self, op: &Op, send: u64, recv: u64, stream: &AnyStream) -> Result<()> {
        // SAFETY: the caller's promise, passed on.
        on_comm!(self, c => unsafe { c.enqueue_raw(op, send, recv, stream.of(c.device())?) })
    }

    /// See [`Communicator::synchronize`].
    pub fn synchronize(&self, stream: &AnyStream) -> Result<()> {
        on_comm!(self, c => c.synchronize(stream.of(c.device())?))
    }

    /// Runs `f` as one group of the backend of `comms` (see [`Communicator::group`]).
    pub fn group<R>(backend: crate::BackendKind, f: impl FnOnce() -> Result<R>) -> Result<R> {
        match backend {
            #[cfg(feature = "cuda")]
            crate::BackendKind::Cuda => Communicator::<Cuda>::group(f),
            #[cfg(feature = "rocm")]
            crate::BackendKind::Rocm => Communicator::<Hip>::group(f),
            _ => Communicator::<Host>::group(f),
        }
    }
}

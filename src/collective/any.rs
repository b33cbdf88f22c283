//! [`AnyCommunicator`]: a communicator of a backend chosen at run time, for
//! bindings (the Python package's `gpuport.distributed`): the backend
//! layer's [`Any`] over [`Communicators`], as [`crate::dynamic`]'s streams
//! and arrays are, dispatched with [`on_backend!`](crate::on_backend).

use std::sync::Arc;
use std::time::Duration;

use crate::backend::any::{Any, DynDevice, PerBackend, PerHostOrGpu};
use crate::backend::registry::{AnyDevice, Devices};
use crate::backend::sealed::Sealed;
use crate::backend::{Backend, Device};
use crate::dynamic::AnyStream;
use crate::error::{Error, Result};
use crate::{on_backend, Host};

use super::{CallMode, Communicator, Op, TcpStore};

#[cfg(feature = "cuda")]
use crate::backend::cuda::Cuda;
#[cfg(any(feature = "cuda", feature = "rocm"))]
use crate::backend::gpu::{Driver, Gpu};
#[cfg(feature = "rocm")]
use crate::backend::hip::Rocm;

/// What [`AnyCommunicator`] holds per backend: a communicator
/// (`Communicator<Host>`, NCCL's `Communicator<Cuda>`, RCCL's
/// `Communicator<Rocm>`).
#[derive(Debug)]
pub struct Communicators;

// `Communicator<B>` needs `B: CollectiveBackend`, which a `PerBackend` type
// cannot ask of its `B`; every backend is the host or a `Gpu<D>`, both
// collective backends, so the type is named per kind of backend.
impl PerHostOrGpu for Communicators {
    type Host = Communicator<Host>;
    #[cfg(any(feature = "cuda", feature = "rocm"))]
    type Gpu<D: Driver> = Communicator<Gpu<D>>;
}

impl PerBackend for Communicators {
    type Of<B: Backend> = <B as Sealed>::Pick<Self>;
}

/// A communicator of any compiled-in backend: `AnyCommunicator::Host(c)`,
/// `AnyCommunicator::Cuda(c)` (NCCL) or `AnyCommunicator::Rocm(c)` (RCCL).
pub type AnyCommunicator = Any<Communicators>;

/// `comm`, a communicator on `_device`, as an [`AnyCommunicator`].
fn wrap<D: DynDevice>(_device: &Arc<D>, comm: <Communicators as PerBackend>::Of<D::B>) -> AnyCommunicator {
    D::wrap(comm)
}

/// [`Communicator::new_id`] of `device`'s backend.
fn new_id_on<D: Device>(device: &Arc<D>) -> Result<Vec<u8>>
where
    D::B: super::CollectiveBackend,
{
    Communicator::<D::B>::new_id(device)
}

/// `device` as a device of `_like`'s backend, if it is one.
fn typed_like<'a, D: DynDevice>(_like: &Arc<D>, device: &'a AnyDevice) -> Option<&'a Arc<<D::B as Backend>::Device>> {
    D::get::<Devices>(device)
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
        on_backend!(device, d => Ok(wrap(d, Communicator::init_rank_with(d, rank, size, store, mode)?)))
    }

    /// Tells the other ranks forming a communicator through `store` that
    /// this rank failed before [`init_rank`](Self::init_rank) could start
    /// (a binding could not open its device): writes `reason` as this
    /// rank's status, as `init_rank` writes its own failures, so the
    /// others fail within about 20 ms with
    /// [`CollectiveErrorKind::PeerInitFailed`](crate::CollectiveErrorKind::PeerInitFailed)
    /// naming it, and uses up the communicator's number, as `init_rank`
    /// would have. A store that fails too leaves them to its timeout.
    pub fn report_failed_init(rank: usize, size: usize, store: &TcpStore, reason: &str) {
        super::rendezvous::report_failed_formation(store, rank, size, reason);
    }

    /// [`Communicator::new_id`] for a device of any backend.
    pub fn new_id(device: &AnyDevice) -> Result<Vec<u8>> {
        on_backend!(device, d => new_id_on(d))
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
        on_backend!(device, d => Ok(wrap(d, Communicator::init_with_id_mode(d, rank, size, id, timeout, mode)?)))
    }

    /// [`Communicator::init_all_with`] on devices of one backend.
    pub fn init_all(devices: &[AnyDevice], mode: CallMode) -> Result<Vec<Self>> {
        let Some(first) = devices.first() else {
            return Err(Error::InvalidArgument {
                name: "devices",
                reason: "a communicator needs at least one device".into(),
            });
        };
        on_backend!(first, d => {
            let typed = devices
                .iter()
                .map(|x| {
                    typed_like(d, x).cloned().ok_or_else(|| Error::DeviceMismatch {
                        what: "devices",
                        expected: format!("a {} device", d.info().backend.name()),
                        found: x.info().spec(),
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            Ok(Communicator::init_all_with(&typed, mode)?.into_iter().map(|c| wrap(d, c)).collect())
        })
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        on_backend!(self, c => c.rank())
    }

    /// The number of ranks.
    pub fn size(&self) -> usize {
        on_backend!(self, c => c.size())
    }

    /// This rank's device.
    pub fn device(&self) -> AnyDevice {
        on_backend!(self, c => DynDevice::any_device(c.device()))
    }

    /// The engine's name and version.
    pub fn engine(&self) -> String {
        on_backend!(self, c => c.engine())
    }

    /// See [`Communicator::mode`].
    pub fn mode(&self) -> CallMode {
        on_backend!(self, c => c.mode())
    }

    /// See [`Communicator::set_checks`].
    pub fn set_checks(&self, on: bool) -> Result<()> {
        on_backend!(self, c => c.set_checks(on))
    }

    /// See [`Communicator::set_timeout`].
    pub fn set_timeout(&mut self, timeout: Duration) -> Result<()> {
        on_backend!(self, c => c.set_timeout(timeout))
    }

    /// See [`Communicator::timeout`].
    pub fn timeout(&self) -> Duration {
        on_backend!(self, c => c.timeout())
    }

    /// See [`Communicator::abort`].
    pub fn abort(&self) -> Result<()> {
        on_backend!(self, c => c.abort())
    }

    /// See [`Communicator::split`].
    pub fn split(&self, color: i32, key: i32) -> Result<Option<Self>> {
        on_backend!(self, c => Ok(c.split(color, key)?.map(|child| wrap(c.device(), child))))
    }

    /// See [`Communicator::shrink`].
    pub fn shrink(&self, exclude: &[usize]) -> Result<Self> {
        on_backend!(self, c => Ok(wrap(c.device(), c.shrink(exclude)?)))
    }

    /// See [`Communicator::is_aborted`].
    pub fn is_aborted(&self) -> bool {
        on_backend!(self, c => c.is_aborted())
    }

    /// [`Communicator::enqueue_raw`] on a stream of the communicator's device.
    ///
    /// # Safety
    /// As [`Communicator::enqueue_raw`]'s.
    pub unsafe fn enqueue_raw(&self, op: &Op, send: u64, recv: u64, stream: &AnyStream) -> Result<()> {
        // SAFETY: the caller's promise, passed on.
        on_backend!(self, c => unsafe { c.enqueue_raw(op, send, recv, stream.of(c.device())?) })
    }

    /// See [`Communicator::synchronize`].
    pub fn synchronize(&self, stream: &AnyStream) -> Result<()> {
        on_backend!(self, c => c.synchronize(stream.of(c.device())?))
    }

    /// Runs `f` as one group of the backend of `comms` (see [`Communicator::group`]).
    pub fn group<R>(backend: crate::BackendKind, f: impl FnOnce() -> Result<R>) -> Result<R> {
        match backend {
            #[cfg(feature = "cuda")]
            crate::BackendKind::Cuda => Communicator::<Cuda>::group(f),
            #[cfg(feature = "rocm")]
            crate::BackendKind::Rocm => Communicator::<Rocm>::group(f),
            _ => Communicator::<Host>::group(f),
        }
    }
}

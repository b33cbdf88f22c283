//! [`Communicator`]: one rank of a group, over its backend's engine; the
//! checks every collective passes, the optional cross-rank check, and the
//! watchdog that turns a hang into an error.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::backend::{Device, DeviceMemory, Stream};
use crate::error::{CollectiveErrorKind, Error, Result};

use super::array::GROUP_DEPTH;
use super::engine::{CallMode, CollectiveBackend, Engine, Op, OpKind};
use super::poll::Poll;
use super::rendezvous::Meeting;
use super::TcpStore;

/// How long [`Communicator::synchronize`], and the calls of a
/// [`CallMode::Bounded`] communicator that wait for other ranks on the
/// host, wait by default:
/// `GPUPORT_COLLECTIVE_TIMEOUT` (seconds), else 300 s. A value that is not
/// a positive number of seconds that a `Duration` holds (`1e30`, `soon`)
/// makes the communicator's initialisation a
/// [`StoreErrorKind::Config`](crate::StoreErrorKind::Config).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

/// One rank of a group of devices that run collectives together (see the
/// [module docs](super)). Dropping it releases the engine's communicator.
pub struct Communicator<B: CollectiveBackend> {
    pub(super) engine: B::Engine,
    pub(super) device: Arc<B::Device>,
    pub(super) rank: usize,
    pub(super) size: usize,
    aborted: AtomicBool,
    pub(super) timeout: Duration,
    /// Cross-rank checks of each collective, through the store (see
    /// [`set_checks`](Self::set_checks)).
    checks: Mutex<Option<Checks>>,
    /// The store and key the communicator was made with, for checks,
    /// splits and shrinks.
    pub(super) store: Option<(TcpStore, String)>,
    /// Splits and shrinks so far: the number names the same one on every
    /// rank (see `regroup.rs`).
    pub(super) regroups: AtomicU64,
    /// Unique in the process: a `RangeRegistration` names its maker by it.
    pub(super) serial: u64,
}

/// The state of the cross-rank check: how many collectives were checked.
struct Checks {
    seq: u64,
}

impl<B: CollectiveBackend> fmt::Debug for Communicator<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Communicator({}, rank {} of {}, {})",
            self.engine.name(),
            self.rank,
            self.size,
            self.device.info().spec()
        )
    }
}

/// `GPUPORT_COLLECTIVE_TIMEOUT`'s timeout, [`DEFAULT_TIMEOUT`] when unset.
pub(crate) fn timeout_from_env() -> Result<Duration> {
    collective_timeout(std::env::var("GPUPORT_COLLECTIVE_TIMEOUT").ok().as_deref())
}

/// The timeout `GPUPORT_COLLECTIVE_TIMEOUT=value` sets: a positive number
/// of seconds that a `Duration` holds, else a
/// [`StoreErrorKind::Config`](crate::StoreErrorKind::Config).
fn collective_timeout(value: Option<&str>) -> Result<Duration> {
    match value.filter(|v| !v.is_empty()) {
        None => Ok(DEFAULT_TIMEOUT),
        Some(v) => super::store::seconds("GPUPORT_COLLECTIVE_TIMEOUT", v).map_err(|reason| Error::Store {
            addr: String::new(),
            kind: crate::error::StoreErrorKind::Config,
            reason,
        }),
    }
}

impl<B: CollectiveBackend> Communicator<B> {
    pub(super) fn new(
        engine: B::Engine,
        device: Arc<B::Device>,
        rank: usize,
        size: usize,
        store: Option<(TcpStore, String)>,
        timeout: Duration,
    ) -> Self {
        static NEXT_SERIAL: AtomicU64 = AtomicU64::new(1);
        let checks = std::env::var("GPUPORT_COLLECTIVE_CHECKS").is_ok_and(|v| v == "1") && store.is_some();
        // The engine and the store were made with this timeout or another
        // (a user's store); a failure here leaves that one.
        let _ = engine.set_timeout(timeout);
        if let Some((s, _)) = &store {
            let _ = s.set_timeout(timeout);
        }
        Communicator {
            engine,
            device,
            rank,
            size,
            aborted: AtomicBool::new(false),
            timeout,
            checks: Mutex::new(checks.then_some(Checks { seq: 0 })),
            store,
            regroups: AtomicU64::new(0),
            serial: NEXT_SERIAL.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// One communicator per device, all driven by this process: rank `i`
    /// runs on `devices[i]`. Call their collectives inside
    /// [`group`](Self::group) when one thread drives them all. Their
    /// [`timeout`](Self::timeout) is `GPUPORT_COLLECTIVE_TIMEOUT`'s (300 s
    /// when unset); their [`CallMode`] is [`CallMode::from_env`]'s, and a
    /// `Bounded` one's timeout also bounds the initialisation.
    pub fn init_all(devices: &[Arc<B::Device>]) -> Result<Vec<Self>> {
        Self::init_all_with(devices, CallMode::from_env())
    }

    /// [`init_all`](Self::init_all) with NCCL's and RCCL's calls made in
    /// `mode` (`init_all` takes [`CallMode::from_env`]'s).
    ///
    /// ```
    /// use gpuport::{Device, Host, HostDevice};
    /// use gpuport::collective::{CallMode, Communicator};
    /// let dev = HostDevice::open(0)?;
    /// let comms = Communicator::<Host>::init_all_with(&[dev.clone(), dev], CallMode::Blocking)?;
    /// assert_eq!(comms.len(), 2);
    /// # Ok::<(), gpuport::Error>(())
    /// ```
    pub fn init_all_with(devices: &[Arc<B::Device>], mode: CallMode) -> Result<Vec<Self>> {
        if devices.is_empty() {
            return Err(Error::InvalidArgument {
                name: "devices",
                reason: "a communicator needs at least one device".into(),
            });
        }
        let timeout = timeout_from_env()?;
        let engines = B::Engine::init_all(devices, timeout, mode)?;
        let size = devices.len();
        Ok(engines
            .into_iter()
            .zip(devices)
            .enumerate()
            .map(|(rank, (e, d))| Self::new(e, d.clone(), rank, size, None, timeout))
            .collect())
    }

    /// Joins `device` to a group of `size` ranks as `rank`, meeting the
    /// other ranks through `store`. Every rank calls it; the ranks'
    /// communicators made on one store pair up in the order they are made.
    /// Waiting for the other ranks is bounded by the store's timeout (a
    /// [`StoreErrorKind::Timeout`](crate::StoreErrorKind::Timeout) or, in
    /// NCCL's or RCCL's own initialisation, a
    /// [`CollectiveErrorKind::Timeout`]); the communicator's
    /// [`timeout`](Self::timeout) then is `GPUPORT_COLLECTIVE_TIMEOUT`'s.
    /// A rank that fails before the engine's initialisation (its library
    /// missing, its device bad, rank 0's id not made) writes why to the
    /// store, and the ranks waiting for it fail within about 20 ms with
    /// [`CollectiveErrorKind::PeerInitFailed`] naming it, whatever the
    /// [`CallMode`]; ranks whose engines' versions differ each fail with
    /// [`CollectiveErrorKind::VersionMismatch`] naming both versions.
    ///
    /// ```
    /// use std::time::Duration;
    /// use gpuport::{Device, Host, HostDevice};
    /// use gpuport::collective::{Communicator, TcpStore};
    /// let store = TcpStore::host("127.0.0.1:0".parse().unwrap(), Duration::from_secs(30))?;
    /// let addr = store.addr();
    /// let other = std::thread::spawn(move || -> gpuport::Result<usize> {
    ///     let store = TcpStore::connect(addr, Duration::from_secs(30))?;
    ///     let comm = Communicator::<Host>::init_rank(&HostDevice::open(0)?, 1, 2, &store)?;
    ///     Ok(comm.rank())
    /// });
    /// let comm = Communicator::<Host>::init_rank(&HostDevice::open(0)?, 0, 2, &store)?;
    /// assert_eq!((comm.rank(), comm.size()), (0, 2));
    /// assert_eq!(other.join().unwrap()?, 1);
    /// # Ok::<(), gpuport::Error>(())
    /// ```
    pub fn init_rank(device: &Arc<B::Device>, rank: usize, size: usize, store: &TcpStore) -> Result<Self> {
        Self::init_rank_with(device, rank, size, store, CallMode::from_env())
    }

    /// [`init_rank`](Self::init_rank) with NCCL's and RCCL's calls made in
    /// `mode` (`init_rank` takes [`CallMode::from_env`]'s): `Bounded` gives
    /// up on a peer gone before its first connection after the
    /// communicator's [`timeout`](Self::timeout), at a cost per call.
    ///
    /// ```
    /// use std::time::Duration;
    /// use gpuport::{Device, Host, HostDevice};
    /// use gpuport::collective::{CallMode, Communicator, TcpStore};
    /// let store = TcpStore::host("127.0.0.1:0".parse().unwrap(), Duration::from_secs(30))?;
    /// let comm = Communicator::<Host>::init_rank_with(&HostDevice::open(0)?, 0, 1, &store, CallMode::Bounded)?;
    /// assert_eq!(comm.size(), 1);
    /// # Ok::<(), gpuport::Error>(())
    /// ```
    pub fn init_rank_with(
        device: &Arc<B::Device>,
        rank: usize,
        size: usize,
        store: &TcpStore,
        mode: CallMode,
    ) -> Result<Self> {
        check_rank(rank, size)?;
        let formation = super::rendezvous::formation_key(store, rank)?;
        let (key, round) = (formation.key, formation.round);
        // Every local step that can fail comes first: the library and its
        // symbols, the device, rank 0's id (published before its status).
        // Then the handshake (`rendezvous.rs`): each rank writes "ready" or
        // why it failed, and waits for every rank's, so a failure reaches
        // the others before any calls its library's initialisation.
        let local = B::Engine::prepare(device).and_then(|version| {
            super::rendezvous::injected_failure(&version, rank)?;
            let version = super::rendezvous::claimed_version(version);
            if rank == 0 {
                let id = B::Engine::new_id(device)?;
                Meeting { store, key: &key, round, rank, size, engine: &version }.publish("id", &id)?;
            }
            Ok(version)
        });
        let engine = local.as_ref().map_or(String::new(), Clone::clone);
        let meeting = Meeting { store, key: &key, round, rank, size, engine: &engine };
        meeting.handshake(local)?;
        let id = meeting.wait("id").inspect_err(|e| meeting.report(e))?;
        // The engine's wait looks for the others' failures; this rank's is reported.
        let engine = super::rendezvous::injected_engine_failure(&engine, rank)
            .and_then(|()| {
                B::Engine::init_watched(device, rank, size, &id, store.timeout(), mode, &|| meeting.failed())
            })
            .inspect_err(|e| meeting.report(e))?;
        let own = store.reconnect()?;
        Ok(Self::new(engine, device.clone(), rank, size, Some((own, key)), timeout_from_env()?))
    }

    /// The engine a communicator on `device` runs, with its version
    /// (`"NCCL 2.28.5"`, `"host"`), loading its library: a missing or too
    /// old NCCL or RCCL is a [`CollectiveErrorKind::Library`].
    ///
    /// ```
    /// use gpuport::{Device, Host, HostDevice};
    /// use gpuport::collective::Communicator;
    /// assert_eq!(Communicator::<Host>::engine_on(&HostDevice::open(0)?)?, "host");
    /// # Ok::<(), gpuport::Error>(())
    /// ```
    pub fn engine_on(device: &Arc<B::Device>) -> Result<String> {
        B::Engine::prepare(device)
    }

    /// A new id naming one communicator, for ranks that meet through
    /// something other than a [`TcpStore`] (an MPI broadcast, another
    /// library's store): rank 0 makes it and sends it to every rank, and
    /// each calls [`init_with_id`](Self::init_with_id).
    ///
    /// ```
    /// use gpuport::{Device, Host, HostDevice};
    /// use gpuport::collective::Communicator;
    /// let dev = HostDevice::open(0)?;
    /// let id = Communicator::<Host>::new_id(&dev)?;
    /// let comm = Communicator::<Host>::init_with_id(&dev, 0, 1, &id)?;
    /// assert_eq!(comm.size(), 1);
    /// # Ok::<(), gpuport::Error>(())
    /// ```
    pub fn new_id(device: &Arc<B::Device>) -> Result<Vec<u8>> {
        B::Engine::new_id(device)
    }

    /// Joins `device` to a group of `size` ranks as `rank`, with the id
    /// rank 0 made by [`new_id`](Self::new_id). Every rank must call it:
    /// the engine's initialisation waits for all of them: without a bound
    /// in [`CallMode::Blocking`], for up to `GPUPORT_COLLECTIVE_TIMEOUT`
    /// seconds (300 s when unset) in [`CallMode::Bounded`] (the mode is
    /// [`CallMode::from_env`]'s; [`init_with_id_timeout`](Self::init_with_id_timeout)
    /// is bounded and takes the timeout as an argument). Cross-rank checks
    /// are not available without a store.
    pub fn init_with_id(device: &Arc<B::Device>, rank: usize, size: usize, id: &[u8]) -> Result<Self> {
        Self::init_with_id_mode(device, rank, size, id, timeout_from_env()?, CallMode::from_env())
    }

    /// [`init_with_id`](Self::init_with_id) with [`CallMode::Bounded`]
    /// calls, waiting up to `timeout` for the other ranks: past it, a rank
    /// that never came is a
    /// [`CollectiveErrorKind::Timeout`] naming this rank and the timeout
    /// (on NCCL and RCCL 2.14 and newer; older ones wait without a bound)
    /// or, on the host engine, a
    /// [`StoreErrorKind::Timeout`](crate::StoreErrorKind::Timeout). The
    /// communicator's [`timeout`](Self::timeout) starts as `timeout`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use gpuport::{Device, Error, Host, HostDevice, StoreErrorKind};
    /// use gpuport::collective::Communicator;
    /// let dev = HostDevice::open(0)?;
    /// let id = Communicator::<Host>::new_id(&dev)?;
    /// // Rank 1 of 2 never comes.
    /// let e = Communicator::<Host>::init_with_id_timeout(&dev, 0, 2, &id, Duration::from_millis(200)).unwrap_err();
    /// assert!(matches!(e, Error::Store { kind: StoreErrorKind::Timeout, .. }), "{e}");
    /// # Ok::<(), gpuport::Error>(())
    /// ```
    pub fn init_with_id_timeout(
        device: &Arc<B::Device>,
        rank: usize,
        size: usize,
        id: &[u8],
        timeout: Duration,
    ) -> Result<Self> {
        Self::init_with_id_mode(device, rank, size, id, timeout, CallMode::Bounded)
    }

    /// [`init_with_id`](Self::init_with_id) with NCCL's and RCCL's calls
    /// made in `mode`, waiting up to `timeout` for the other ranks where
    /// the mode bounds the wait (as [`init_with_id_timeout`](Self::init_with_id_timeout)
    /// for `Bounded`); the communicator's [`timeout`](Self::timeout) starts
    /// as `timeout`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use gpuport::{Device, Host, HostDevice};
    /// use gpuport::collective::{CallMode, Communicator};
    /// let dev = HostDevice::open(0)?;
    /// let id = Communicator::<Host>::new_id(&dev)?;
    /// let comm = Communicator::<Host>::init_with_id_mode(&dev, 0, 1, &id, Duration::from_secs(5), CallMode::Blocking)?;
    /// assert_eq!(comm.timeout(), Duration::from_secs(5));
    /// # Ok::<(), gpuport::Error>(())
    /// ```
    pub fn init_with_id_mode(
        device: &Arc<B::Device>,
        rank: usize,
        size: usize,
        id: &[u8],
        timeout: Duration,
        mode: CallMode,
    ) -> Result<Self> {
        check_rank(rank, size)?;
        let engine = B::Engine::init_with_id(device, rank, size, id, timeout, mode)?;
        Ok(Self::new(engine, device.clone(), rank, size, None, timeout))
    }

    /// [`init_rank`](Self::init_rank) with the rank, the size and the store
    /// from the environment: `GPUPORT_RANK` and `GPUPORT_WORLD_SIZE` (or
    /// torchrun's `RANK` and `WORLD_SIZE`, or Open MPI's
    /// `OMPI_COMM_WORLD_RANK` and `OMPI_COMM_WORLD_SIZE`), and
    /// [`TcpStore::from_env`].
    pub fn from_env(device: &Arc<B::Device>) -> Result<Self> {
        let (rank, size) = rank_and_size_from_env()?;
        let store = TcpStore::from_env(rank)?;
        Self::init_rank(device, rank, size, &store)
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The number of ranks.
    pub fn size(&self) -> usize {
        self.size
    }

    /// This rank's device.
    pub fn device(&self) -> &Arc<B::Device> {
        &self.device
    }

    /// The engine's name and version (`"NCCL 2.28.5"`, `"host"`).
    pub fn engine(&self) -> String {
        self.engine.name()
    }

    /// How this communicator's calls wait (see [`CallMode`]): the mode it
    /// was made in, except that the host engine is always `Bounded` and an
    /// NCCL or RCCL older than 2.14 always `Blocking`.
    pub fn mode(&self) -> CallMode {
        self.engine.mode()
    }

    /// How long [`synchronize`](Self::synchronize) waits before it aborts,
    /// and how long a call may wait for other ranks on the host: in a
    /// [`CallMode::Bounded`] communicator, NCCL's and RCCL's (2.14 and
    /// newer) first connection to a peer inside a collective, a send, a
    /// receive or the end of a [`group`](Self::group); the host engine's
    /// store reads; the cross-rank checks. Past it the
    /// communicator is aborted and the call is a
    /// [`CollectiveErrorKind::Timeout`].
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Sets [`timeout`](Self::timeout). Any `Duration` is accepted: one
    /// past what the clock counts (`Duration::MAX`) waits without a deadline.
    pub fn set_timeout(&mut self, timeout: Duration) -> Result<()> {
        self.timeout = timeout;
        self.engine.set_timeout(timeout)?;
        if let Some((store, _)) = &self.store {
            store.set_timeout(timeout)?;
        }
        Ok(())
    }

    /// Turns the cross-rank check on or off: before each collective, the
    /// ranks compare what they call (which collective, element type, count
    /// and root) through the store, and a difference is a
    /// [`CollectiveErrorKind::Mismatch`] on every rank instead of a hang or
    /// wrong data. It costs a store round trip per collective. On by default
    /// when `GPUPORT_COLLECTIVE_CHECKS=1`; the host engine always checks.
    /// Only communicators made with a store ([`init_rank`](Self::init_rank))
    /// can check; every rank must set the same.
    pub fn set_checks(&self, on: bool) -> Result<()> {
        if on && self.store.is_none() {
            return Err(Error::InvalidArgument {
                name: "checks",
                reason: "only a communicator made with a store (init_rank) can compare calls across ranks".into(),
            });
        }
        let mut checks = self.checks.lock().unwrap_or_else(|p| p.into_inner());
        *checks = on.then_some(checks.take().unwrap_or(Checks { seq: 0 }));
        Ok(())
    }

    /// Whether [`abort`](Self::abort) ran, or a failure (a timeout)
    /// aborted the communicator.
    pub fn is_aborted(&self) -> bool {
        self.aborted.load(Ordering::Acquire) || self.engine.is_aborted()
    }

    /// Stops every collective of this communicator; later calls give
    /// [`CollectiveErrorKind::Aborted`].
    pub fn abort(&self) -> Result<()> {
        if self.aborted.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        self.engine.abort()
    }

    pub(crate) fn error(&self, kind: CollectiveErrorKind, reason: String) -> Error {
        Error::Collective { engine: self.engine.name(), rank: Some(self.rank), kind, reason }
    }

    /// Runs `f` as one group: calls of several communicators driven by one
    /// thread (from [`init_all`](Self::init_all)), or several sends and
    /// receives, are enqueued together at its end, as NCCL's
    /// `ncclGroupStart`/`ncclGroupEnd` do. The end waits for the group's
    /// communicators up to their [`timeout`](Self::timeout)s: a peer
    /// that is gone before a first connection makes it a
    /// [`CollectiveErrorKind::Timeout`], and aborts the communicators.
    ///
    /// Only the unsafe [`enqueue`](Self::enqueue) and
    /// [`enqueue_raw`](Self::enqueue_raw) belong inside: [`run`](Self::run)
    /// and the array collectives refuse to, as their borrows would end
    /// before the group runs them. A panic in `f` ends the group: the host
    /// engine drops the calls `f` queued; NCCL and RCCL cannot drop them,
    /// and run them (`ncclGroupEnd`).
    ///
    /// The owners that [`AnyCommunicator::collective`](super::AnyCommunicator::collective)'s
    /// callers keep for the group's calls are kept from the group's end on
    /// (see [`keep`](crate::dynamic::keep)), when the engine has enqueued them.
    pub fn group<R>(f: impl FnOnce() -> Result<R>) -> Result<R> {
        struct Depth;
        impl Drop for Depth {
            fn drop(&mut self) {
                GROUP_DEPTH.with(|d| d.set(d.get().saturating_sub(1)));
            }
        }
        crate::dynamic::keep::deferring(|| {
            GROUP_DEPTH.with(|d| d.set(d.get() + 1));
            let _depth = Depth;
            Self::group_unchecked(f)
        })
    }

    /// [`group`](Self::group) for this crate's own grouped calls, which
    /// array collectives may make.
    pub(crate) fn group_unchecked<R>(f: impl FnOnce() -> Result<R>) -> Result<R> {
        /// Abandons the engine's group if `f` panics.
        struct Open<B: CollectiveBackend>(std::marker::PhantomData<B>);
        impl<B: CollectiveBackend> Drop for Open<B> {
            fn drop(&mut self) {
                B::Engine::group_abandon();
            }
        }
        B::Engine::group_start()?;
        let open = Open::<B>(std::marker::PhantomData);
        let out = f();
        std::mem::forget(open);
        let end = B::Engine::group_end();
        let out = out?;
        end?;
        Ok(out)
    }

    /// Checks `op` against this communicator before it is enqueued.
    fn check_op(&self, op: &Op) -> Result<()> {
        if self.is_aborted() {
            return Err(self.error(
                CollectiveErrorKind::Aborted,
                format!("{op} on a communicator that was aborted; make a new one"),
            ));
        }
        let (what, rank) = match op.kind {
            OpKind::Broadcast { root } | OpKind::Reduce { root, .. } => ("root", root),
            OpKind::Send { peer } | OpKind::Recv { peer } => ("peer", peer),
            _ => ("root", 0),
        };
        if rank >= self.size {
            return Err(Error::InvalidArgument {
                name: what,
                reason: format!("{op}: {what} {rank} is not a rank of this group of {}", self.size),
            });
        }
        if matches!(op.kind, OpKind::Send { .. } | OpKind::Recv { .. }) && rank == self.rank {
            return Err(Error::InvalidArgument {
                name: what,
                reason: format!("{op}: a rank cannot send to or receive from itself"),
            });
        }
        self.engine.supports(op)?;
        self.check_across_ranks(op)
    }

    /// The cross-rank check of [`set_checks`](Self::set_checks).
    fn check_across_ranks(&self, op: &Op) -> Result<()> {
        if matches!(op.kind, OpKind::Send { .. } | OpKind::Recv { .. }) {
            return Ok(());
        }
        let mut checks = self.checks.lock().unwrap_or_else(|p| p.into_inner());
        let (Some(checks), Some((store, key))) = (checks.as_mut(), &self.store) else { return Ok(()) };
        let seq = checks.seq;
        checks.seq += 1;
        let prefix = format!("{key}/check/{seq}");
        let mine = op.to_string();
        store.set(&format!("{prefix}/{}", self.rank), mine.as_bytes())?;
        let mut differ = Vec::new();
        for r in (0..self.size).filter(|&r| r != self.rank) {
            let theirs = store.get(&format!("{prefix}/{r}"))?;
            if theirs != mine.as_bytes() {
                differ.push(format!("rank {r} called {}", String::from_utf8_lossy(&theirs)));
            }
        }
        if store.add(&format!("{prefix}/read"), 1)? == i64::try_from(self.size).unwrap_or(i64::MAX) {
            for r in 0..self.size {
                store.delete(&format!("{prefix}/{r}"))?;
            }
            store.delete(&format!("{prefix}/read"))?;
        }
        if differ.is_empty() {
            Ok(())
        } else {
            Err(self.error(
                CollectiveErrorKind::Mismatch,
                format!(
                    "this rank called {mine}, but {}; every rank must call the same collectives in the same order",
                    differ.join(", ")
                ),
            ))
        }
    }

    fn check_buffer<M: DeviceMemory<B = B> + ?Sized>(
        &self,
        what: &'static str,
        m: &M,
        elems: usize,
        op: &Op,
    ) -> Result<u64> {
        if m.ordinal() != self.device.info().ordinal {
            return Err(Error::DeviceMismatch {
                what,
                expected: self.device.info().spec(),
                found: format!("{}:{}", B::KIND.name(), m.ordinal()),
            });
        }
        let bytes = elems.checked_mul(op.dtype.itemsize()).ok_or_else(|| Error::InvalidArgument {
            name: "count",
            reason: format!("{op}: {elems} elements overflow the address space"),
        })?;
        if bytes > m.len() {
            return Err(Error::OutOfBounds { what, offset: 0, len: bytes, capacity: m.len() });
        }
        Ok(m.device_ptr())
    }

    /// Enqueues `op` on `stream`, reading `send` and writing `recv`, after
    /// checking the buffers' devices and sizes. `recv` may be `send` itself
    /// (in place) where NCCL allows it. Returns once enqueued: at once, or
    /// after NCCL has connected to a peer for the first time, which waits
    /// up to [`timeout`](Self::timeout) (then a
    /// [`CollectiveErrorKind::Timeout`], and the communicator is aborted).
    ///
    /// # Safety
    /// `send` and `recv` stay alive, and nothing else writes `recv` or
    /// `send`, until `stream` has passed this point
    /// ([`synchronize`](Self::synchronize) waits for it); inside a
    /// [`group`](Self::group), until the group has ended and then `stream`
    /// has passed it, even when the group's function panics.
    pub unsafe fn enqueue<S, R>(&self, op: &Op, send: &S, recv: &R, stream: &Stream<B>) -> Result<()>
    where
        S: DeviceMemory<B = B> + ?Sized,
        R: DeviceMemory<B = B> + ?Sized,
    {
        let send = self.check_buffer("send", send, op.send_len(self.size), op)?;
        let recv = self.check_buffer("recv", recv, op.recv_len(self.size), op)?;
        // SAFETY: both ranges were checked above against the buffers, which
        // the caller keeps alive until the stream passes.
        unsafe { self.enqueue_raw(op, send, recv, stream) }
    }

    /// [`enqueue`](Self::enqueue) on addresses, for bindings that hold
    /// foreign memory (a torch tensor through DLPack).
    ///
    /// # Safety
    /// `send` and `recv` address [`Op::send_len`] and [`Op::recv_len`]
    /// elements on this communicator's device (0 where the length is 0),
    /// alive and not written by anything else until `stream` has passed
    /// this point (inside a [`group`](Self::group), as
    /// [`enqueue`](Self::enqueue) says).
    pub unsafe fn enqueue_raw(&self, op: &Op, send: u64, recv: u64, stream: &Stream<B>) -> Result<()> {
        self.check_op(op)?;
        // SAFETY: `op` passed `supports` and the rank checks; the caller
        // vouches for the addresses.
        match unsafe { self.engine.enqueue(op, send, recv, stream) } {
            // The host engine waits for other ranks through the store: a
            // rank that never answers, or a broken store, ends this
            // communicator as `synchronize`'s watchdog does.
            Err(Error::Store { kind, reason, addr }) => {
                let _ = self.abort();
                let kind = match kind {
                    crate::error::StoreErrorKind::Timeout => CollectiveErrorKind::Timeout,
                    _ => CollectiveErrorKind::RemoteFailure,
                };
                Err(self.error(kind, format!("{op}: {reason} (store at {addr}); the communicator was aborted")))
            }
            other => other,
        }
    }

    /// Runs `op` on buffers and waits for it ([`synchronize`](Self::synchronize)).
    /// Refused inside [`group`](Self::group) (an `InvalidArgument` named
    /// `"group"`): the group would run it after `run` returned and its
    /// borrows ended; grouped calls take the unsafe [`enqueue`](Self::enqueue).
    ///
    /// ```
    /// use gpuport::{Device, Host, HostDevice};
    /// use gpuport::collective::{Communicator, Op, OpKind, ReduceOp};
    /// use gpuport::dynamic::DType;
    /// let dev = HostDevice::open(0)?;
    /// let comm = Communicator::<Host>::init_all(&[dev.clone()])?.remove(0);
    /// let mut x = dev.alloc(16)?;
    /// dev.copy_to_device(&[1.5f32.to_ne_bytes(); 4].concat(), &mut x, 0)?;
    /// let op = Op { kind: OpKind::AllReduce(ReduceOp::Sum), dtype: DType::Float32, count: 4 };
    /// let mut y = dev.alloc(16)?;
    /// comm.run(&op, &x, &mut y, dev.default_stream())?;
    /// let mut out = [0u8; 16];
    /// dev.copy_to_host(&y, 0, &mut out)?;
    /// assert_eq!(out, x_bytes(&dev, &x)?);
    /// # fn x_bytes(d: &std::sync::Arc<HostDevice>, x: &gpuport::Buffer<Host>) -> gpuport::Result<[u8; 16]> {
    /// #     let mut b = [0u8; 16]; d.copy_to_host(x, 0, &mut b)?; Ok(b) }
    /// # Ok::<(), gpuport::Error>(())
    /// ```
    pub fn run<S, R>(&self, op: &Op, send: &S, recv: &mut R, stream: &Stream<B>) -> Result<()>
    where
        S: DeviceMemory<B = B> + ?Sized,
        R: crate::backend::DeviceMemoryMut<B = B> + ?Sized,
    {
        if GROUP_DEPTH.with(std::cell::Cell::get) > 0 {
            return Err(Error::InvalidArgument {
                name: "group",
                reason: format!(
                    "{op}: run cannot be called inside Communicator::group: the group would run the collective at \
                     its end, after run returned and its borrows of the buffers ended; call run outside the group, \
                     or the unsafe enqueue inside it and synchronize after it"
                ),
            });
        }
        // SAFETY: outside a group (checked above; a group of the engine
        // that this crate opens runs no user code) the engine enqueues the
        // call now, and `synchronize` below waits for the stream while both
        // borrows hold; `recv` is borrowed mutably, so nothing else writes it.
        unsafe { self.enqueue(op, send, &*recv, stream)? };
        self.synchronize(stream)
    }

    /// Waits until `stream` has run everything enqueued on it, watching the
    /// engine: an asynchronous error of the engine (a rank died, a network
    /// failed) aborts the communicator and is a
    /// [`CollectiveErrorKind::RemoteFailure`]; no progress within
    /// [`timeout`](Self::timeout) aborts it and is a
    /// [`CollectiveErrorKind::Timeout`]. Never hangs.
    pub fn synchronize(&self, stream: &Stream<B>) -> Result<()> {
        // Yield, not sleep, through the first millisecond: a small
        // collective takes tens of microseconds, and a sleep at least 50
        // (src/collective/poll.rs).
        let mut poll = Poll::new(Instant::now(), Duration::from_millis(1));
        loop {
            if self.device.is_idle(stream)? {
                return self.engine.async_error();
            }
            if let Err(e) = self.engine.async_error() {
                let _ = self.abort();
                return Err(
                    self.error(CollectiveErrorKind::RemoteFailure, format!("{e}; the communicator was aborted"))
                );
            }
            let elapsed = poll.elapsed();
            if elapsed > self.timeout {
                let _ = self.abort();
                return Err(self.error(
                    CollectiveErrorKind::Timeout,
                    format!(
                        "the stream's collectives did not finish in {:?}: a rank may have died, or the ranks called \
                         different collectives (turn on set_checks to compare them); the communicator was aborted \
                         (set GPUPORT_COLLECTIVE_TIMEOUT to wait longer)",
                        self.timeout
                    ),
                ));
            }
            poll.pause(self.timeout - elapsed);
        }
    }
}

/// Refuses a rank that is not below the group's size.
fn check_rank(rank: usize, size: usize) -> Result<()> {
    if size == 0 || rank >= size {
        return Err(Error::InvalidArgument {
            name: "rank",
            reason: format!("rank {rank} is not below the group's size {size}"),
        });
    }
    Ok(())
}

/// `(rank, size)` from `GPUPORT_RANK`/`GPUPORT_WORLD_SIZE`, torchrun's
/// `RANK`/`WORLD_SIZE`, or Open MPI's `OMPI_COMM_WORLD_RANK`/`_SIZE`.
pub fn rank_and_size_from_env() -> Result<(usize, usize)> {
    let pairs = [
        ("GPUPORT_RANK", "GPUPORT_WORLD_SIZE"),
        ("RANK", "WORLD_SIZE"),
        ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
    ];
    for (r, s) in pairs {
        let (Ok(rank), Ok(size)) = (std::env::var(r), std::env::var(s)) else { continue };
        let parse = |name: &'static str, v: &str| {
            v.trim().parse::<usize>().map_err(|_| Error::Store {
                addr: String::new(),
                kind: crate::error::StoreErrorKind::Config,
                reason: format!("{name}={v:?} is not a non-negative integer"),
            })
        };
        return Ok((parse(r, &rank)?, parse(s, &size)?));
    }
    Err(Error::Store {
        addr: String::new(),
        kind: crate::error::StoreErrorKind::Config,
        reason: "no rank in the environment: set GPUPORT_RANK and GPUPORT_WORLD_SIZE (or RANK and WORLD_SIZE, as \
                 torchrun does; or run under mpirun)"
            .into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_collective_timeout_past_what_a_duration_holds_is_a_config_error() {
        assert_eq!(collective_timeout(None).unwrap(), DEFAULT_TIMEOUT);
        assert_eq!(collective_timeout(Some("")).unwrap(), DEFAULT_TIMEOUT);
        assert_eq!(collective_timeout(Some("0.25")).unwrap(), Duration::from_millis(250));
        for bad in ["1e30", "inf", "0", "-3", "later"] {
            let e = collective_timeout(Some(bad)).unwrap_err();
            assert!(
                matches!(&e, Error::Store { kind: crate::error::StoreErrorKind::Config, reason, .. }
                    if reason.contains("GPUPORT_COLLECTIVE_TIMEOUT")),
                "{bad}: {e}"
            );
        }
    }
}

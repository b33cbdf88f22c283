//! A rank's NCCL or RCCL communicator from rank 0's id, failing fast.
//!
//! `ncclCommInitRank` waits inside the library until every rank has
//! joined, so a rank whose peer failed meanwhile would wait there for good.
//! Where the library has `ncclCommInitRankConfig` (NCCL and RCCL 2.14 on)
//! the communicator is started non-blocking instead (`blocking = 0`) and
//! its state polled with `ncclCommGetAsyncError` until it is
//! `ncclSuccess`; every [`rendezvous::POLL`](super::super::rendezvous::POLL)
//! the poll also asks the caller whether another rank reported a failure
//! (the store's failure key, `rendezvous.rs`), and on one aborts the
//! communicator (`ncclCommAbort`) and returns that rank's
//! `PeerInitFailed`.
//!
//! This applies to `Bounded` communicators, which are non-blocking anyway.
//! Failures before the library's initialisation (its loading, the device,
//! rank 0's id, another version) are caught in both modes by the handshake
//! that comes before it (`src/collective/rendezvous.rs`).
//! A `Blocking` one (the default) still starts with the blocking
//! `ncclCommInitRank`, so a peer's failure that comes while this rank waits
//! inside the library is not seen until the library gives up. Starting it
//! non-blocking and splitting it into a blocking communicator once the
//! ranks had met (`ncclCommSplit` with `blocking = 1`) was tried: on two
//! H200s with NCCL 2.28.9 and 2.28.3 that split returned no communicator,
//! so every blocking init failed, and the path was taken out.

use std::ffi::c_int;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::backend::gpu::{Driver, GpuDevice};
use crate::error::Result;

use super::super::engine::CallMode;
use super::{comm, rank_int, refuse_in_group, status_error, sys, unique_id, wait, NcclEngine};

/// Whether `lib` makes communicators asked for in `mode` non-blocking:
/// `Bounded` ones, where the library is 2.14 or newer.
pub(super) fn made_non_blocking(lib: &sys::Nccl, mode: CallMode) -> bool {
    mode == CallMode::Bounded && lib.api.non_blocking.is_some()
}

/// Starts rank `rank`'s communicator of `size` on the current device:
/// `ncclCommInitRankConfig` with `blocking = 0` when `non_blocking` (the
/// library has it: the caller checked), else `ncclCommInitRank`. Returns
/// the call's name, its status and the communicator (null if none was made).
pub(super) fn init_rank_call(
    lib: &sys::Nccl,
    size: c_int,
    id: sys::ncclUniqueId,
    rank: c_int,
    non_blocking: bool,
) -> (&'static str, c_int, usize) {
    let mut comm: sys::ncclComm_t = std::ptr::null_mut();
    let (call, status) = match lib.api.non_blocking.as_ref().filter(|_| non_blocking) {
        Some(nb) => {
            let mut config = sys::ncclConfig_t::with_blocking(false);
            // SAFETY: the caller bound the device; `comm` receives the
            // communicator; `config` is a whole, initialised config, read
            // during the call only.
            ("ncclCommInitRankConfig", unsafe { (nb.ncclCommInitRankConfig)(&mut comm, size, id, rank, &mut config) })
        }
        // SAFETY: as above, without a config.
        None => ("ncclCommInitRank", unsafe { (lib.api.fns.ncclCommInitRank)(&mut comm, size, id, rank) }),
    };
    (call, status, comm as usize)
}

impl<D: Driver> NcclEngine<D> {
    /// `Engine::init_watched` (see the module docs): `peer_failed` is
    /// polled while the library waits for the other ranks.
    pub(super) fn init_rank_watched(
        device: &Arc<GpuDevice<D>>,
        rank: usize,
        size: usize,
        id: &[u8],
        timeout: Duration,
        mode: CallMode,
        peer_failed: &dyn Fn() -> Result<()>,
    ) -> Result<Self> {
        let lib = super::library(D::KIND)?;
        let unique = unique_id::<D>(lib, id)?;
        let (size_c, rank_c) = (rank_int("size", size)?, rank_int("rank", rank)?);
        refuse_in_group("init_with_id")?;
        device.driver().bind()?;
        let start = Instant::now();
        // Only `Bounded` communicators start non-blocking (see the module docs).
        let non_blocking = made_non_blocking(lib, mode);
        let (call, status, handle) = init_rank_call(lib, size_c, unique, rank_c, non_blocking);
        if handle == 0 {
            return Err(status_error(D::KIND, lib, Some(rank), 0, call, status));
        }
        let engine = NcclEngine { comm: Arc::new(comm::Comm::new(handle, device, lib, rank, timeout, non_blocking)) };
        // A failure leaves a communicator that cannot be used: abort it
        // (ncclCommDestroy would wait for peers that may never come).
        let check = wait::init_check(size);
        let started = engine.comm.settle_watched(call, status, start, &check, peer_failed);
        if let Err(e) = started {
            let _ = engine.comm.abort();
            return Err(e);
        }
        if let Err(e) = engine.connect(start, &check) {
            let _ = engine.comm.abort();
            return Err(e);
        }
        Ok(engine)
    }
}

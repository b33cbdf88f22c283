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
//! A non-blocking communicator stays non-blocking, and from NCCL 2.23 on
//! its calls go through the library's helper thread (see the `nccl` module
//! docs). So a rank asked for a `Blocking` one, once the ranks have met,
//! splits it into a blocking communicator of the same ranks
//! (`ncclCommSplit` with `blocking = 1`, every rank one color, keyed by its
//! rank) and frees the first: a second initialisation, among ranks known
//! to be there; where the library refuses that split before making a
//! communicator, the first is kept, non-blocking. A library without
//! `ncclCommSplit` (2.14 to 2.17) keeps the blocking `ncclCommInitRank`,
//! and one without `ncclCommInitRankConfig` keeps it in either mode.

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

/// Whether a rank's initialisation in `mode` runs non-blocking, so that
/// its wait can look for other ranks' failures: in `Bounded` mode where
/// the library can, in `Blocking` mode where it can also split the
/// communicator into a blocking one afterwards.
fn starts_non_blocking(lib: &sys::Nccl, mode: CallMode) -> bool {
    made_non_blocking(lib, mode) || (lib.api.non_blocking.is_some() && lib.api.split.is_some())
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
        let non_blocking = starts_non_blocking(lib, mode);
        let (call, status, handle) = init_rank_call(lib, size_c, unique, rank_c, non_blocking);
        if handle == 0 {
            return Err(status_error(D::KIND, lib, Some(rank), 0, call, status));
        }
        let engine = NcclEngine { comm: Arc::new(comm::Comm::new(handle, device, lib, rank, timeout, non_blocking)) };
        // A failure leaves a communicator that cannot be used: abort it
        // (ncclCommDestroy would wait for peers that may never come).
        let check = wait::init_check(size);
        let started = engine.comm.settle_watched(call, status, start, &check, peer_failed);
        let engine = match started {
            Ok(()) if non_blocking && !made_non_blocking(lib, mode) => engine.into_blocking(),
            Ok(()) => Ok(engine),
            Err(e) => {
                let _ = engine.comm.abort();
                Err(e)
            }
        }?;
        if let Err(e) = engine.connect(start, &check) {
            let _ = engine.comm.abort();
            return Err(e);
        }
        Ok(engine)
    }

    /// A blocking communicator of the same ranks, split from this
    /// non-blocking one, which is then freed. Where the library refuses
    /// the split before making a communicator (a check every rank makes
    /// alike), this one is kept, non-blocking (its `mode` says so).
    fn into_blocking(self) -> Result<Self> {
        let lib = self.comm.lib;
        let Some(api) = lib.api.split.as_ref() else { return Ok(self) };
        let key = rank_int("rank", self.comm.rank)?;
        let config = sys::ncclConfig_t::with_blocking(true);
        let child = match self.split_with(api, Some(0), key, Some(config)) {
            Ok(Some(child)) => child,
            Err(_) if !self.comm.is_aborted() && self.comm.state().is_ok_and(|s| s == sys::ncclSuccess) => {
                return Ok(self)
            }
            Ok(None) => {
                let _ = self.comm.abort();
                return Err(self.comm.error_of(
                    crate::error::CollectiveErrorKind::Engine,
                    "ncclCommSplit gave no communicator for a color every rank chose".into(),
                ));
            }
            Err(e) => {
                let _ = self.comm.abort();
                return Err(e);
            }
        };
        // The first communicator is freed (at the drop of `self`) without
        // waiting for its peers, which free theirs too.
        let _ = self.comm.abort();
        Ok(child.engine)
    }
}

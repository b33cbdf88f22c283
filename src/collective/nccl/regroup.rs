//! NCCL's and RCCL's own new communicators from an existing one
//! (`ncclCommSplit`, `ncclCommShrink`) and buffer registration
//! (`ncclCommRegister`/`ncclCommDeregister`), each where the library has
//! it (`sys.rs`); `super::super::regroup` falls back to the store where it
//! has not. A new communicator inherits its parent's configuration (a null
//! config), so a non-blocking parent makes a non-blocking child, whose
//! start is waited for as `init_with_id`'s is.

use std::ffi::{c_int, c_void};
use std::sync::Arc;
use std::time::Instant;

use crate::backend::address_to_usize;
use crate::backend::gpu::Driver;
use crate::error::{Error, Result};

use super::super::engine::Regrouped;
use super::{comm, rank_int, refuse_in_group, sys, NcclEngine};

impl<D: Driver> NcclEngine<D> {
    /// Owns `handle`, a communicator `call` made (returning `status` at
    /// `start`; `non_blocking` as its config says), once it has started:
    /// its rank and size then come from `rank_and_size`. On a failure it
    /// is aborted.
    fn adopt(
        &self,
        handle: sys::ncclComm_t,
        call: &str,
        status: c_int,
        start: Instant,
        non_blocking: bool,
        rank_and_size: impl FnOnce(&comm::Comm<D>) -> Result<(usize, usize)>,
    ) -> Result<Regrouped<Self>> {
        let parent = &self.comm;
        let mut child =
            comm::Comm::new(handle as usize, &parent.device, parent.lib, parent.rank, parent.timeout(), non_blocking);
        let started = child.settle(call, status, start, "that every rank of the new communicator called it");
        let placed = started.and_then(|()| rank_and_size(&child));
        let (rank, size) = match placed {
            Ok(p) => p,
            Err(e) => {
                let _ = child.abort();
                return Err(e);
            }
        };
        child.rank = rank;
        Ok(Regrouped { engine: NcclEngine { comm: Arc::new(child) }, rank, size })
    }

    /// `ncclCommSplit` of this communicator: `None` for `color` is
    /// `NCCL_SPLIT_NOCOLOR`; the new one inherits this one's configuration.
    pub(super) fn split_with(
        &self,
        api: &sys::SplitApi,
        color: Option<u32>,
        key: i32,
    ) -> Result<Option<Regrouped<Self>>> {
        self.comm.refuse_if_released("ncclCommSplit")?;
        refuse_in_group("split")?;
        let color = match color {
            Some(c) => rank_int("color", usize::try_from(c).unwrap_or(usize::MAX))?,
            None => sys::NCCL_SPLIT_NOCOLOR,
        };
        self.comm.device.driver().bind()?;
        let start = Instant::now();
        let mut new: sys::ncclComm_t = std::ptr::null_mut();
        let non_blocking = self.comm.non_blocking;
        // SAFETY: a live communicator of this engine (not released), its
        // device bound; `new` receives the new communicator; a null config
        // makes it inherit this one's.
        let status = unsafe { (api.ncclCommSplit)(self.comm.raw(), color, key, &mut new, std::ptr::null_mut()) };
        if new.is_null() {
            // No color, or a failure before a communicator was made.
            self.comm.check("ncclCommSplit", status)?;
            return Ok(None);
        }
        let placed = |c: &comm::Comm<D>| {
            let (mut rank, mut size): (c_int, c_int) = (0, 0);
            // SAFETY: `c` is the live communicator the split made; each call writes one int.
            let status = unsafe { (api.ncclCommUserRank)(c.raw(), &mut rank) };
            c.check("ncclCommUserRank", status)?;
            // SAFETY: as above.
            let status = unsafe { (api.ncclCommCount)(c.raw(), &mut size) };
            c.check("ncclCommCount", status)?;
            Ok((usize::try_from(rank).unwrap_or(0), usize::try_from(size).unwrap_or(0)))
        };
        self.adopt(new, "ncclCommSplit", status, start, non_blocking, placed).map(Some)
    }

    /// `ncclCommShrink` of this communicator without `exclude` (sorted,
    /// without this rank), ending its operations first `after_error`.
    pub(super) fn shrink_with(
        &self,
        api: &sys::ShrinkApi,
        size: usize,
        exclude: &[usize],
        after_error: bool,
    ) -> Result<Regrouped<Self>> {
        self.comm.refuse_if_released("ncclCommShrink")?;
        refuse_in_group("shrink")?;
        let mut list = exclude.iter().map(|&r| rank_int("exclude", r)).collect::<Result<Vec<_>>>()?;
        let count = rank_int("exclude", list.len())?;
        let flags = if after_error { sys::NCCL_SHRINK_ABORT } else { sys::NCCL_SHRINK_DEFAULT };
        self.comm.device.driver().bind()?;
        let start = Instant::now();
        let mut new: sys::ncclComm_t = std::ptr::null_mut();
        // SAFETY: a live communicator of this engine, its device bound;
        // `list` holds `count` ranks, read during the call; `new` receives
        // the new communicator; a null config inherits this one's.
        let status = unsafe {
            (api.ncclCommShrink)(self.comm.raw(), list.as_mut_ptr(), count, &mut new, std::ptr::null_mut(), flags)
        };
        if new.is_null() {
            self.comm.check("ncclCommShrink", status)?;
            return Err(Error::Collective {
                engine: super::engine_name(D::KIND, self.comm.lib),
                rank: Some(self.comm.rank),
                kind: crate::error::CollectiveErrorKind::Engine,
                reason: "ncclCommShrink returned no communicator for a rank it keeps".into(),
            });
        }
        // The survivors keep their order: a rank moves down by the excluded ranks below it.
        let rank = self.comm.rank - exclude.iter().filter(|&&r| r < self.comm.rank).count();
        let placed = |_: &comm::Comm<D>| Ok((rank, size - exclude.len()));
        self.adopt(new, "ncclCommShrink", status, start, self.comm.non_blocking, placed)
    }

    /// `ncclCommRegister` of `bytes` at `address`: the handle, or 0 where
    /// the library cannot register.
    pub(super) fn register_with(&self, address: u64, bytes: usize) -> Result<usize> {
        let Some(api) = self.comm.lib.api.register.as_ref() else { return Ok(0) };
        self.comm.refuse_if_released("ncclCommRegister")?;
        self.comm.device.driver().bind()?;
        let mut handle: *mut c_void = std::ptr::null_mut();
        // SAFETY: a live communicator, its device bound; the caller
        // (`Communicator::register`) checked that the range is memory of
        // this device and keeps it alive until `deregister_with`.
        let status = unsafe {
            (api.ncclCommRegister)(self.comm.raw(), address_to_usize(address) as *mut c_void, bytes, &mut handle)
        };
        self.comm.check("ncclCommRegister", status)?;
        Ok(handle as usize)
    }

    /// `ncclCommDeregister` of a [`register_with`](Self::register_with)
    /// handle; nothing for 0, or once the communicator was freed (which
    /// released its registrations).
    pub(super) fn deregister_with(&self, handle: usize) -> Result<()> {
        let Some(api) = self.comm.lib.api.register.as_ref() else { return Ok(()) };
        if handle == 0 || self.comm.released.load(std::sync::atomic::Ordering::Acquire) {
            return Ok(());
        }
        self.comm.device.driver().bind()?;
        // SAFETY: a live communicator and a handle its `ncclCommRegister` returned, released once.
        let status = unsafe { (api.ncclCommDeregister)(self.comm.raw(), handle as *mut c_void) };
        self.comm.check("ncclCommDeregister", status)
    }
}

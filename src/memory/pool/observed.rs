//! What a caching pool tells others: the out-of-memory observers
//! (`memory/oom.rs`) and the allocation history (`memory/history/`), each
//! called with no lock of the pool held.

use crate::backend::{Backend, Device, Stream};
use crate::error::{Error, GraphErrorKind};

use super::state::st_ordinal;
use super::{CachingPool, Storage};
use crate::memory::history;

impl<B: Backend, S: Storage<B>> CachingPool<B, S> {
    /// Tells the out-of-memory observers (`memory/oom.rs`) of `e` if it is
    /// an out-of-memory error; returns it.
    #[cold]
    pub(super) fn out_of_memory_observed(&self, e: Error, bytes: usize, stream: &Stream<B>, in_capture: bool) -> Error {
        let oom = matches!(e, Error::OutOfMemory { .. } | Error::Graph { kind: GraphErrorKind::OutOfMemory, .. });
        if oom && history::recording() {
            let free = self.dev().memory_info().map_or(0, |m| m.free);
            history::record_oom(self.history_key(), bytes, self.dev().stream_id(stream).unwrap_or(0), free);
        }
        if oom && crate::memory::oom::observed() {
            let report = self.report();
            let device = self.dev().info().spec();
            let key = self.history_key();
            crate::memory::oom::notify(&crate::memory::oom::OutOfMemoryEvent {
                device,
                device_key: key,
                requested: bytes,
                in_capture,
                report: &report,
            });
        }
        e
    }

    /// The device as the allocation history names it.
    pub(super) fn history_key(&self) -> history::DeviceKey {
        history::DeviceKey { backend: <B as Backend>::KIND, ordinal: st_ordinal(self.dev()) }
    }

    /// Records a block handed out or taken back (the lock is not held: the
    /// history's frame source may run foreign code).
    #[cold]
    #[inline(never)]
    pub(super) fn record_block(&self, action: history::Action, ptr: u64, bytes: usize, stream: &Stream<B>) {
        let stream = self.dev().stream_id(stream).unwrap_or(0);
        history::record_block(action, self.history_key(), ptr, bytes, stream);
    }
}

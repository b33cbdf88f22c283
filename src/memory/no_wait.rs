//! Allocations that never wait for another thread, so that a caller holding
//! a lock others need (Python's GIL) can skip releasing it.
//!
//! Inside [`without_waiting`], the caching pool refuses, with
//! [`MemoryError::WouldWait`], every allocation that would wait: for a
//! capture beginning or ending on its stream, for its lock, for device work
//! after an out-of-memory, or for its upkeep (frees held back, graph
//! pools to reclaim), and every allocation on a capturing stream. Nothing
//! has changed then: the caller allocates again outside, after releasing
//! its lock. The Python binding's `gpuport.memory.alloc` does this: the GIL
//! stays held on the fast path (about 0.05 µs of a 0.4 µs call).
//!
//! ```
//! use gpuport::memory::{current_resource, without_waiting};
//! use gpuport::{Device, DeviceMemory};
//! let dev = gpuport::HostDevice::open(0)?;
//! let pool = current_resource::<gpuport::Host>(&dev)?;
//! let a = match without_waiting(|| pool.alloc(1024, dev.default_stream())) {
//!     Err(e) if gpuport::memory::would_wait(&e) => pool.alloc(1024, dev.default_stream())?,
//!     other => other?,
//! };
//! assert!(a.len() >= 1024);
//! # Ok::<(), gpuport::Error>(())
//! ```

use std::cell::Cell;

use super::MemoryError;
use crate::error::Error;

thread_local! {
    static REFUSED: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` with this thread's pool allocations refusing to wait (see the
/// module docs). Nests; the previous setting comes back after `f`, also
/// when it panics.
pub fn without_waiting<R>(f: impl FnOnce() -> R) -> R {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            let _ = REFUSED.try_with(|r| r.set(self.0));
        }
    }
    let _restore = Restore(REFUSED.try_with(|r| r.replace(true)).unwrap_or(false));
    f()
}

/// Whether this thread is inside [`without_waiting`].
pub(crate) fn waiting_refused() -> bool {
    REFUSED.try_with(Cell::get).unwrap_or(false)
}

/// The error of an allocation refused inside [`without_waiting`].
pub(crate) fn refused(resource: &'static str) -> Error {
    MemoryError::WouldWait { resource }.into()
}

/// Whether `e` is an allocation refused inside [`without_waiting`].
pub fn would_wait(e: &Error) -> bool {
    matches!(e, Error::Memory(MemoryError::WouldWait { .. }))
}

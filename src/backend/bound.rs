//! Making a device current once per operation instead of once per driver
//! call.
//!
//! A GPU driver call needs its device current on the calling thread, and
//! another library (PyTorch's `set_device`, cuda-python) may change which
//! one is between any two of gpuport's calls. So `Driver::bind` asks the
//! driver every time (`cuCtxGetCurrent`, `hipGetDevice`), as cudarc's
//! `bind_to_thread` does. One operation of the run-time layer (a Python
//! `launch_kernel`: the prune of finished work, the launch, the marker's
//! record) would then ask several times in a row, with nothing else
//! running on the thread in between.
//!
//! A [`BindScope`] marks such a stretch. Inside one, [`bind_once`]
//! remembers the device it made current and does not ask again for it;
//! outside any scope, and for another device, it asks as before. The
//! memory ends with the outermost scope.
//!
//! Scopes are opened by `dynamic::runtime::launch_and_keep` (prune, launch,
//! marker), `MemArray`'s kernel methods (launch and pending event:
//! `kernel_bind_scope` in `src/array/memarray/capture.rs`),
//! `MemArray::upload_from_slice` (pieces and pending event) and
//! `GraphExec::launch` (waits, launch, records: `graph.rs`).
//!
//! # The invariant a scope relies on
//!
//! While a scope is open on a thread, nothing but [`bind_once`] changes the
//! thread's current device: the code inside runs no caller code (no
//! callbacks, no drops of a caller's owners, which may be Python objects
//! with finalizers) and no library that sets the device itself (NCCL).
//! Open scopes only around such code, and drop the owners a scope's work
//! released after it ends. `bind_once`'s tests show what a stale memory
//! would do: they fail if the memory outlives its scope.

use std::cell::Cell;
use std::marker::PhantomData;

use crate::error::{BackendKind, Result};

thread_local! {
    /// Open scopes on this thread, and the device [`bind_once`] made
    /// current inside them: (backend, the driver's key of the device).
    static SCOPE: Cell<(usize, Option<(BackendKind, usize)>)> = const { Cell::new((0, None)) };
}

/// An open stretch in which a bound device stays bound (see the module
/// docs); ends when dropped. Not `Send`: it belongs to its thread.
#[must_use = "the scope ends when the guard is dropped"]
pub(crate) struct BindScope {
    _thread: PhantomData<*const ()>,
}

/// Opens a scope on this thread (scopes nest; see the module docs for what
/// the code inside may do).
pub(crate) fn scope() -> BindScope {
    let _ = SCOPE.try_with(|s| {
        let (depth, bound) = s.get();
        s.set((depth + 1, bound));
    });
    BindScope { _thread: PhantomData }
}

impl Drop for BindScope {
    fn drop(&mut self) {
        let _ = SCOPE.try_with(|s| {
            let (depth, bound) = s.get();
            let depth = depth.saturating_sub(1);
            // The outermost scope ends: forget the device, which anyone may change now.
            s.set((depth, if depth == 0 { None } else { bound }));
        });
    }
}

/// Whether a scope is open on this thread (for tests of the code that opens them).
#[cfg(test)]
pub(crate) fn scope_open() -> bool {
    SCOPE.try_with(|s| s.get().0 > 0).unwrap_or(false)
}

/// Makes device `key` of `backend` current with `bind` (which asks the
/// driver and sets it where needed), unless a scope is open on this thread
/// in which this very device was made current already.
#[cfg_attr(not(any(feature = "cuda", feature = "rocm")), allow(dead_code))]
pub(crate) fn bind_once(backend: BackendKind, key: usize, bind: impl FnOnce() -> Result<()>) -> Result<()> {
    let (depth, bound) = SCOPE.try_with(Cell::get).unwrap_or((0, None));
    if depth > 0 && bound == Some((backend, key)) {
        return Ok(());
    }
    let result = bind();
    if depth > 0 {
        // After a failed bind the current device is unknown: ask next time.
        let now = result.is_ok().then_some((backend, key));
        let _ = SCOPE.try_with(|s| s.set((depth, now)));
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in for a driver's bind that counts how often it is asked.
    fn bind_counting(asked: &Cell<usize>) -> impl FnOnce() -> Result<()> + '_ {
        move || {
            asked.set(asked.get() + 1);
            Ok(())
        }
    }

    #[test]
    fn inside_a_scope_a_bound_device_is_asked_for_once() {
        let asked = Cell::new(0);
        {
            let _scope = scope();
            for _ in 0..3 {
                bind_once(BackendKind::Cuda, 1, bind_counting(&asked)).unwrap();
            }
            assert_eq!(asked.get(), 1);
            // Another device is asked for; then the first one again.
            bind_once(BackendKind::Cuda, 2, bind_counting(&asked)).unwrap();
            bind_once(BackendKind::Cuda, 1, bind_counting(&asked)).unwrap();
            assert_eq!(asked.get(), 3);
            // Another backend's device with the same key is another device.
            bind_once(BackendKind::Rocm, 1, bind_counting(&asked)).unwrap();
            assert_eq!(asked.get(), 4);
        }
    }

    #[test]
    fn outside_a_scope_every_bind_asks_and_a_scope_forgets_at_its_end() {
        let asked = Cell::new(0);
        bind_once(BackendKind::Cuda, 1, bind_counting(&asked)).unwrap();
        bind_once(BackendKind::Cuda, 1, bind_counting(&asked)).unwrap();
        assert_eq!(asked.get(), 2);
        {
            let _outer = scope();
            {
                let _inner = scope();
                bind_once(BackendKind::Cuda, 1, bind_counting(&asked)).unwrap();
            }
            // The inner scope's end keeps what the outer one knows.
            bind_once(BackendKind::Cuda, 1, bind_counting(&asked)).unwrap();
            assert_eq!(asked.get(), 3);
        }
        // Another library may change the device between operations: asked again.
        bind_once(BackendKind::Cuda, 1, bind_counting(&asked)).unwrap();
        assert_eq!(asked.get(), 4);
        let _next = scope();
        bind_once(BackendKind::Cuda, 1, bind_counting(&asked)).unwrap();
        assert_eq!(asked.get(), 5, "a new scope remembered the device of an ended one");
    }

    #[test]
    fn a_failed_bind_is_asked_again() {
        let asked = Cell::new(0);
        let _scope = scope();
        let failed = bind_once(BackendKind::Cuda, 1, || {
            asked.set(asked.get() + 1);
            Err(crate::error::Error::InvalidArgument { name: "test", reason: "failed on purpose".into() })
        });
        assert!(failed.is_err());
        bind_once(BackendKind::Cuda, 1, bind_counting(&asked)).unwrap();
        assert_eq!(asked.get(), 2);
    }
}

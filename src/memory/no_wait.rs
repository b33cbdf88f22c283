//! Allocations and frees that never wait for another thread, so that a
//! caller holding a lock others need (Python's GIL) can skip releasing it.
//!
//! Inside [`without_waiting`], the caching pool refuses, with
//! [`MemoryError::WouldWait`], every allocation that would wait: for a
//! capture beginning or ending on its stream, for its lock, for device work
//! after an out-of-memory, or for its upkeep (frees held back, graph
//! pools to reclaim), and every allocation on a capturing stream. Nothing
//! has changed then: the caller allocates again outside, after releasing
//! its lock. A free that would wait (the same causes, a borrowed stream,
//! or segments to give back to the driver) is not made: the allocation's
//! drop hands it to the [`RefusedFrees`] that `without_waiting` returns,
//! which makes it when finished or dropped (after the caller released its
//! lock). The Python binding's `gpuport.memory.alloc` and
//! `Allocation.free` do this: the GIL stays held on the fast paths.
//!
//! ```
//! use gpuport::memory::{current_resource, without_waiting};
//! use gpuport::{Device, DeviceMemory};
//! let dev = gpuport::HostDevice::open(0)?;
//! let pool = current_resource::<gpuport::Host>(&dev)?;
//! let (a, _frees) = without_waiting(|| pool.alloc(1024, dev.default_stream()));
//! let a = match a {
//!     Err(e) if gpuport::memory::would_wait(&e) => pool.alloc(1024, dev.default_stream())?,
//!     other => other?,
//! };
//! assert!(a.len() >= 1024);
//! let ((), frees) = without_waiting(|| drop(a));
//! frees.finish(); // nothing left here: the pool took the block back at once
//! # Ok::<(), gpuport::Error>(())
//! ```

use std::any::Any;
use std::cell::{Cell, RefCell};

use super::{Block, MemoryError};
use crate::backend::{Backend, Event, Stream};
use crate::error::Error;

/// A free to make later, where waiting is allowed.
type Free = Box<dyn FnOnce() + Send>;

/// A block a resource sent back, with what its `deallocate` was given.
pub(crate) type Bounced<B> = (Block<B>, Stream<B>, Vec<Event<B>>);

/// This thread's state: one thread-local, so that `without_waiting` looks
/// it up once (a lookup is a call in a shared library such as the Python
/// extension).
struct NoWait {
    /// Whether the thread is inside `without_waiting`.
    refused: Cell<bool>,
    /// Frees refused inside `without_waiting`, for its caller.
    frees: RefCell<Vec<Free>>,
}

thread_local! {
    static STATE: NoWait = const { NoWait { refused: Cell::new(false), frees: RefCell::new(Vec::new()) } };
    /// The block a resource refused to free, for its allocator to take back.
    static BOUNCED: RefCell<Option<Box<dyn Any>>> = const { RefCell::new(None) };
}

/// Frees refused inside [`without_waiting`]; [`finish`](Self::finish) (or
/// the drop) makes them, waiting as needed.
#[must_use = "dropping it makes the frees at once, waiting as needed"]
pub struct RefusedFrees(Vec<Free>);

impl RefusedFrees {
    /// Whether there is no free to make.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Makes the frees.
    pub fn finish(self) {
        drop(self);
    }
}

impl Drop for RefusedFrees {
    #[inline]
    fn drop(&mut self) {
        // Most calls refuse nothing: no drain then (it was a tenth of a
        // Python alloc+free's instructions in the core).
        if !self.0.is_empty() {
            self.0.drain(..).for_each(|free| free());
        }
    }
}

impl std::fmt::Debug for RefusedFrees {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RefusedFrees({})", self.0.len())
    }
}

/// Runs `f` with this thread's pool calls refusing to wait (see the module
/// docs), and returns the frees refused meanwhile. Nests; the previous
/// setting comes back after `f`, also when it panics.
#[inline]
pub fn without_waiting<R>(f: impl FnOnce() -> R) -> (R, RefusedFrees) {
    let scope = Scope::enter();
    let r = f();
    (r, scope.leave())
}

/// The inside of one [`without_waiting`] call: entered before `f`, left
/// after it (also on a panic, by the drop). Not generic, and `f` runs
/// outside the thread-local's closure, so that `f`'s result is not moved
/// through it (an allocation is 128 bytes).
struct Scope {
    /// The setting before, and how many refused frees the thread held
    /// then; `None` without the thread's locals (an exit handler), where
    /// nothing is refused.
    before: Option<(bool, usize)>,
}

impl Scope {
    #[inline]
    fn enter() -> Scope {
        Scope { before: STATE.try_with(|st| (st.refused.replace(true), st.frees.borrow().len())).ok() }
    }

    /// Restores the setting and takes the frees refused since `enter`.
    #[inline]
    fn leave(self) -> RefusedFrees {
        let frees = match self.before {
            Some((refused, len)) => STATE
                .try_with(|st| {
                    st.refused.set(refused);
                    let mut q = st.frees.borrow_mut();
                    // Most calls refuse nothing: no new vector then.
                    if q.len() > len {
                        q.split_off(len)
                    } else {
                        Vec::new()
                    }
                })
                .unwrap_or_default(),
            None => Vec::new(),
        };
        std::mem::forget(self); // restored above
        RefusedFrees(frees)
    }
}

impl Drop for Scope {
    /// `f` panicked: the setting comes back; the refused frees stay queued
    /// for the enclosing `without_waiting`, or the thread's next one.
    fn drop(&mut self) {
        if let Some((refused, _)) = self.before {
            let _ = STATE.try_with(|st| st.refused.set(refused));
        }
    }
}

/// Whether this thread is inside [`without_waiting`] (inlined: every
/// allocation and free asks).
#[inline]
pub(crate) fn waiting_refused() -> bool {
    STATE.try_with(|st| st.refused.get()).unwrap_or(false)
}

/// The error of an allocation refused inside [`without_waiting`].
pub(crate) fn refused(resource: &'static str) -> Error {
    MemoryError::WouldWait { resource }.into()
}

/// Whether `e` is an allocation refused inside [`without_waiting`].
pub fn would_wait(e: &Error) -> bool {
    matches!(e, Error::Memory(MemoryError::WouldWait { .. }))
}

/// For a resource's `deallocate` inside [`without_waiting`] that would
/// wait: keeps the block for the allocator (which makes the free later) and
/// returns the error to return.
pub(crate) fn bounce<B: Backend>(
    resource: &'static str,
    block: Block<B>,
    stream: &Stream<B>,
    after: Vec<Event<B>>,
) -> Error {
    let kept: Box<dyn Any> = Box::new((block, stream.clone(), after) as Bounced<B>);
    // Without the thread's locals (an exit handler), the block is dropped
    // unfreed: leaked, never freed under a user.
    let _ = BOUNCED.try_with(|b| *b.borrow_mut() = Some(kept));
    refused(resource)
}

/// The block [`bounce`] kept, if it is of backend `B`.
pub(crate) fn take_bounced<B: Backend>() -> Option<Bounced<B>> {
    let kept = BOUNCED.try_with(|b| b.borrow_mut().take()).ok().flatten()?;
    kept.downcast().ok().map(|b| *b)
}

/// Queues `free` for the caller of [`without_waiting`] (made at once outside one).
pub(crate) fn refuse_free(free: Free) {
    let mut free = Some(free);
    if waiting_refused() {
        let _ = STATE.try_with(|st| st.frees.borrow_mut().extend(free.take()));
    }
    if let Some(free) = free {
        free();
    }
}

//! [`Exclusive`]: a value that several threads may call at once, one at a
//! time, behind a lock that a binding can keep from deadlocking with its
//! interpreter's lock (Python's GIL).
//!
//! A binding's objects release their interpreter lock inside long calls
//! (PyO3's `Python::detach`), so a second thread can call an object while
//! the first is inside it. Such objects keep their mutable state in an
//! `Exclusive`: a call that finds it busy waits, and the binding's waiting
//! hook ([`Exclusive::lock_with`]) releases the interpreter lock for that
//! wait, so the holder can take the interpreter lock back and finish. The
//! rule that excludes a deadlock: nobody blocks on an `Exclusive` while
//! holding the interpreter lock (the holder may wait for the interpreter
//! lock; a holder of the interpreter lock never waits for the `Exclusive`).
//! A free value is taken and given back
//! with one atomic operation each; the internal `std` mutex and condvar
//! serve only threads that must wait, and the mutex is never held across a
//! wait for the interpreter lock or for the binding's code.
//!
//! A thread that already holds the value and locks it again (a callback of
//! the binding run under the lock, such as Python's `__index__` or
//! `__del__`) gets [`LockError::Busy`] instead of deadlocking on itself.
//!
//! ```
//! use gpuport::dynamic::exclusive::Exclusive;
//! let counter = Exclusive::new(0u32, "Counter");
//! std::thread::scope(|s| {
//!     for _ in 0..4 {
//!         s.spawn(|| *counter.lock().unwrap() += 1);
//!     }
//! });
//! let held = counter.lock()?;
//! assert_eq!(*held, 4);
//! assert!(counter.lock().is_err(), "re-entry on one thread is an error, not a deadlock");
//! # Ok::<(), gpuport::Error>(())
//! ```
//!
//! A guard shares its value between threads only where the value may be
//! shared (`T: Sync`), as `std::sync::MutexGuard` does:
//!
//! ```compile_fail
//! use gpuport::dynamic::exclusive::Exclusive;
//! let cell = Exclusive::new(std::cell::Cell::new(0), "Cell");
//! let guard = cell.lock().unwrap();
//! std::thread::scope(|s| {
//!     s.spawn(|| guard.set(1)); // `&Cell` on two threads: refused
//!     guard.set(2);
//! });
//! ```

use std::cell::UnsafeCell;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};

use crate::array::LockError;
use crate::error::Result;

/// `Exclusive::state`'s bit that says a thread waits for the holder.
/// Tokens are addresses of 8-byte-aligned thread-locals, so it is free.
const WAITING: usize = 1;

/// This thread's token: the address of a thread-local, distinct between
/// live threads and never 0. Cheaper than `thread::current().id()`
/// (which clones an `Arc`); a holder is a live thread as long as guards
/// are dropped on the thread that took them, and a guard moved to another
/// thread at worst makes a new thread that reuses the token see
/// [`LockError::Busy`] (an error, never a second guard).
fn token() -> usize {
    thread_local! {
        static TOKEN: u64 = const { 0 };
    }
    TOKEN.with(|t| std::ptr::from_ref(t) as usize)
}

/// A value that one thread at a time may use (see the module docs).
pub struct Exclusive<T> {
    // `state` is 0 when free, else the holder's `token()`, with `WAITING`
    // set while another thread waits: taking and releasing a free value is
    // one atomic operation each. Waiters sleep on `released` under `sleep`,
    // which only the slow path touches.
    state: AtomicUsize,
    sleep: Mutex<()>,
    released: Condvar,
    value: UnsafeCell<T>,
    /// The object's name in errors ("MemArray").
    what: &'static str,
}

// SAFETY: the value is reached only through an `ExclusiveGuard`, and a
// guard exists only while `state` holds the token its `lock_with` took (set
// by a successful compare-exchange from 0, cleared when the guard drops),
// so sharing the `Exclusive` between threads hands `&mut T` to one thread
// at a time: `T: Send` suffices.
unsafe impl<T: Send> Sync for Exclusive<T> {}

impl<T> Exclusive<T> {
    fn sleep(&self) -> MutexGuard<'_, ()> {
        // Poisoning cannot leave `()` inconsistent.
        self.sleep.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Frees the value and wakes the threads waiting for it.
    fn release(&self) {
        let was = self.state.swap(0, Ordering::Release);
        // A waiter set `WAITING` under `sleep` before waiting; taking
        // `sleep` here waits until it sleeps, so the notification is not
        // lost. Every waiter wakes, one takes the value, the others mark
        // `WAITING` again and sleep.
        if was & WAITING != 0 {
            let _sleeping = self.sleep();
            self.released.notify_all();
        }
    }

    /// Blocks until `state` holds `me` (taken from 0).
    fn wait_until_taken(&self, me: usize) {
        let mut sleeping = self.sleep();
        loop {
            let s = self.state.load(Ordering::Relaxed);
            if s == 0 {
                if self.state.compare_exchange(0, me, Ordering::Acquire, Ordering::Relaxed).is_ok() {
                    return;
                }
                continue;
            }
            // Say that someone waits (under `sleep`, so the holder's
            // release, which takes `sleep` before notifying, cannot
            // notify between this and the wait below), then wait.
            if s & WAITING == 0
                && self.state.compare_exchange(s, s | WAITING, Ordering::Relaxed, Ordering::Relaxed).is_err()
            {
                continue;
            }
            sleeping = self.released.wait(sleeping).unwrap_or_else(|p| p.into_inner());
        }
    }
}

/// Frees the value if a waiting hook took it and then unwound.
struct TakenByWait<'a, T> {
    owner: &'a Exclusive<T>,
    taken: &'a AtomicBool,
}

impl<T> Drop for TakenByWait<'_, T> {
    fn drop(&mut self) {
        if self.taken.load(Ordering::Relaxed) {
            self.owner.release();
        }
    }
}

impl<T: Send> Exclusive<T> {
    /// A free value named `what` in errors.
    pub fn new(value: T, what: &'static str) -> Self {
        Exclusive {
            state: AtomicUsize::new(0),
            sleep: Mutex::new(()),
            released: Condvar::new(),
            value: UnsafeCell::new(value),
            what,
        }
    }

    /// The value, blocking this thread while another thread holds it;
    /// [`LockError::Busy`] when this thread holds it. Never call it holding
    /// a binding's interpreter lock (see the module docs): use
    /// [`lock_with`](Self::lock_with) there.
    pub fn lock(&self) -> Result<ExclusiveGuard<'_, T>> {
        self.lock_with(|wait| wait())
    }

    /// As [`lock`](Self::lock), but a wait (another thread holds the value)
    /// runs inside `hook`, which gets the wait and calls it once: a binding
    /// releases its interpreter lock around it (PyO3: `|wait| py.detach(wait)`).
    /// A hook that does not call the wait gets it called after it returns;
    /// one that unwinds after the wait frees the value again.
    pub fn lock_with(&self, hook: impl FnOnce(&(dyn Fn() + Sync))) -> Result<ExclusiveGuard<'_, T>> {
        let me = token();
        match self.state.compare_exchange(0, me, Ordering::Acquire, Ordering::Relaxed) {
            Ok(_) => return Ok(ExclusiveGuard::taken(self)),
            Err(holder) if holder & !WAITING == me => return Err(LockError::Busy { what: self.what }.into()),
            Err(_) => {}
        }
        // Another thread holds it, maybe waiting for the interpreter lock.
        // `me` is this thread's token wherever the hook runs the wait.
        let taken = AtomicBool::new(false);
        let wait = || {
            if !taken.load(Ordering::Relaxed) {
                self.wait_until_taken(me);
                taken.store(true, Ordering::Relaxed);
            }
        };
        let unwinding = TakenByWait { owner: self, taken: &taken };
        hook(&wait);
        // A hook that ran the wait on another thread joined it before
        // returning (the wait borrows locals of this call), so `taken` is seen.
        wait();
        std::mem::forget(unwinding);
        Ok(ExclusiveGuard::taken(self))
    }

    /// The value without a lock, through exclusive access to the `Exclusive`.
    pub fn get_mut(&mut self) -> &mut T {
        self.value.get_mut()
    }
}

/// Access to an [`Exclusive`]'s value; dropping it lets the next thread in.
/// `Send` and `Sync` as `&mut T` is (the value moves with it; shared, it
/// is shared).
pub struct ExclusiveGuard<'a, T> {
    owner: &'a Exclusive<T>,
    _value: PhantomData<&'a mut T>,
}

impl<'a, T> ExclusiveGuard<'a, T> {
    /// The guard of a value whose `state` this call just set to its token.
    fn taken(owner: &'a Exclusive<T>) -> Self {
        ExclusiveGuard { owner, _value: PhantomData }
    }
}

impl<T> Deref for ExclusiveGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: this guard is the only one (see `Exclusive`'s `Sync`), so
        // no `&mut T` exists elsewhere while the returned borrow of `self` lives.
        unsafe { &*self.owner.value.get() }
    }
}

impl<T> DerefMut for ExclusiveGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`; `&mut self` excludes other borrows through this guard.
        unsafe { &mut *self.owner.value.get() }
    }
}

impl<T> Drop for ExclusiveGuard<'_, T> {
    fn drop(&mut self) {
        self.owner.release();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicU32;
    use std::sync::{mpsc, Arc};
    use std::time::Duration;

    use super::*;
    use crate::Error;

    #[test]
    fn a_second_thread_waits_for_the_holder_and_then_gets_the_value() {
        let shared = Arc::new(Exclusive::new(Vec::new(), "Log"));
        let mut held = shared.lock().unwrap();
        held.push(1);
        let (started, waiting) = mpsc::channel();
        let other = {
            let shared = shared.clone();
            std::thread::spawn(move || {
                started.send(()).unwrap();
                shared.lock().unwrap().push(2);
            })
        };
        waiting.recv().unwrap();
        std::thread::sleep(Duration::from_millis(50));
        held.push(3);
        drop(held);
        other.join().unwrap();
        assert_eq!(*shared.lock().unwrap(), [1, 3, 2], "the waiter ran after the holder let go");
    }

    #[test]
    fn many_threads_take_turns_without_losing_an_update() {
        let shared = Exclusive::new(0u64, "Counter");
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    for _ in 0..1000 {
                        *shared.lock().unwrap() += 1;
                    }
                });
            }
        });
        assert_eq!(*shared.lock().unwrap(), 8000);
    }

    #[test]
    fn locking_again_on_the_holding_thread_is_busy_not_a_deadlock() {
        let shared = Exclusive::new(5, "MemArray");
        let held = shared.lock().unwrap();
        match shared.lock_with(|_| panic!("no wait: the holder is this thread")) {
            Err(Error::Lock(LockError::Busy { what: "MemArray" })) => {}
            Err(e) => panic!("expected LockError::Busy, got {e:?}"),
            Ok(_) => panic!("expected LockError::Busy, got a second guard"),
        }
        drop(held);
        assert_eq!(*shared.lock().unwrap(), 5, "free again after the error");
    }

    #[test]
    fn the_hook_runs_only_when_the_value_is_held_elsewhere() {
        let shared = Arc::new(Exclusive::new((), "Thing"));
        let hooks = AtomicU32::new(0);
        drop(
            shared
                .lock_with(|wait| {
                    hooks.fetch_add(1, Ordering::Relaxed);
                    wait()
                })
                .unwrap(),
        );
        assert_eq!(hooks.load(Ordering::Relaxed), 0, "a free value is taken at once");
        let held = shared.lock().unwrap();
        std::thread::scope(|s| {
            let waiter = s.spawn(|| {
                let guard = shared
                    .lock_with(|wait| {
                        hooks.fetch_add(1, Ordering::Relaxed);
                        // The wait may run on another thread the hook joins.
                        std::thread::scope(|inner| inner.spawn(wait).join().unwrap());
                    })
                    .unwrap();
                drop(guard);
            });
            std::thread::sleep(Duration::from_millis(50));
            drop(held);
            waiter.join().unwrap();
        });
        assert_eq!(hooks.load(Ordering::Relaxed), 1);
        drop(shared.lock().unwrap());
    }

    #[test]
    fn a_hook_that_skips_the_wait_still_gets_the_value_only_after_the_holder() {
        let shared = Arc::new(Exclusive::new(0, "Thing"));
        let held = shared.lock().unwrap();
        std::thread::scope(|s| {
            let waiter = s.spawn(|| *shared.lock_with(|_| {}).unwrap() += 1);
            std::thread::sleep(Duration::from_millis(50));
            drop(held);
            waiter.join().unwrap();
        });
        assert_eq!(*shared.lock().unwrap(), 1);
    }

    #[test]
    fn a_hook_that_unwinds_after_the_wait_leaves_the_value_free() {
        let shared = Arc::new(Exclusive::new(0, "Thing"));
        let held = shared.lock().unwrap();
        std::thread::scope(|s| {
            let waiter = s.spawn(|| {
                shared.lock_with(|wait| {
                    wait();
                    panic!("the hook fails after the wait");
                })
            });
            std::thread::sleep(Duration::from_millis(50));
            drop(held);
            assert!(waiter.join().is_err(), "the hook's panic reaches the caller");
        });
        *shared.lock().unwrap() += 1;
        assert_eq!(*shared.lock().unwrap(), 1);
    }
}

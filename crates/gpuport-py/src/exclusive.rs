//! [`Exclusive`]: the state of a Python object that several threads may
//! call at once, behind a lock that never deadlocks with the GIL.
//!
//! PyO3's own borrow checking of a mutable `#[pyclass]` fails (raising, or
//! panicking through `borrow_mut`) when a second thread calls the object
//! while the first has released the GIL (`Python::detach`) inside a method.
//! Objects that do that are `frozen` and keep their mutable state in an
//! `Exclusive` instead: a call that finds it busy waits, *with the GIL
//! released*, so the holder can take the GIL back and finish. The rule that
//! excludes a deadlock: nobody blocks on an `Exclusive` while holding the
//! GIL (the holder may wait for the GIL; a GIL holder never waits for the
//! `Exclusive`). A free value is taken and given back with one atomic
//! operation each; the internal `std` mutex and condvar serve only threads
//! that must wait, and the mutex is never held across a wait for the GIL or
//! for Python code.
//!
//! A thread that already holds the state and calls the object again (a
//! Python callback run under the lock, such as `__index__` or `__del__`)
//! gets a `LockError` instead of deadlocking on itself.

use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};

use pyo3::prelude::*;

use crate::errors;

/// `Exclusive::state`'s bit that says a thread waits for the holder.
/// Tokens are addresses of 8-byte-aligned thread-locals, so it is free.
const WAITING: usize = 1;

/// This thread's token: the address of a thread-local, distinct between
/// live threads and never 0. Cheaper than `thread::current().id()`
/// (which clones an `Arc`), and a holder is always a live thread (its
/// guard is dropped on the thread that took it).
fn token() -> usize {
    thread_local! {
        static TOKEN: u64 = const { 0 };
    }
    TOKEN.with(|t| std::ptr::from_ref(t) as usize)
}

/// A value that one thread at a time may use (see the module docs).
///
/// `state` is 0 when free, else the holder's [`token`], with [`WAITING`]
/// set while another thread waits: taking and releasing a free value is one
/// atomic operation each. Waiters sleep on `released` under `sleep`, which
/// only the slow path touches.
pub struct Exclusive<T> {
    state: AtomicUsize,
    sleep: Mutex<()>,
    released: Condvar,
    value: UnsafeCell<T>,
    /// The object's name in errors ("MemArray").
    what: &'static str,
}

// SAFETY: the value is reached only through an `ExclusiveGuard`, and a
// guard exists only while `state` holds its thread's token (set by a
// successful compare-exchange from 0, cleared when the guard drops), so
// sharing the `Exclusive` between threads hands `&mut T` to one thread at
// a time: `T: Send` suffices.
unsafe impl<T: Send> Sync for Exclusive<T> {}

impl<T> Exclusive<T> {
    fn sleep(&self) -> MutexGuard<'_, ()> {
        // Poisoning cannot leave `()` inconsistent.
        self.sleep.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl<T: Send> Exclusive<T> {
    pub fn new(value: T, what: &'static str) -> Self {
        Exclusive {
            state: AtomicUsize::new(0),
            sleep: Mutex::new(()),
            released: Condvar::new(),
            value: UnsafeCell::new(value),
            what,
        }
    }

    /// The value, waiting (with the GIL released) while another thread holds it.
    pub fn lock(&self, py: Python<'_>) -> PyResult<ExclusiveGuard<'_, T>> {
        let me = token();
        match self.state.compare_exchange(0, me, Ordering::Acquire, Ordering::Relaxed) {
            Ok(_) => return Ok(ExclusiveGuard { owner: self }),
            Err(holder) if holder & !WAITING == me => {
                return Err(errors::lock(
                    py,
                    format!(
                        "this {} is busy in this thread: a call on it is still running and the Python code it ran \
                         (a callback such as __index__, __dlpack__ or __del__) called it again; call it after that call returns",
                        self.what
                    ),
                ))
            }
            Err(_) => {}
        }
        // Another thread holds it, maybe waiting for the GIL: wait without it.
        py.detach(|| {
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
        });
        Ok(ExclusiveGuard { owner: self })
    }

    /// The value without a lock, through exclusive access to the `Exclusive`.
    pub fn get_mut(&mut self) -> &mut T {
        self.value.get_mut()
    }
}

/// Access to an [`Exclusive`]'s value; dropping it lets the next thread in.
pub struct ExclusiveGuard<'a, T> {
    owner: &'a Exclusive<T>,
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
        let was = self.owner.state.swap(0, Ordering::Release);
        // A waiter set `WAITING` under `sleep` before waiting; taking
        // `sleep` here waits until it sleeps, so the notification is not
        // lost. Every waiter wakes, one takes the value, the others mark
        // `WAITING` again and sleep.
        if was & WAITING != 0 {
            let _sleeping = self.owner.sleep();
            self.owner.released.notify_all();
        }
    }
}

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
//! `Exclusive`). The internal `std` mutex is held only for a few
//! instructions, never across a wait for the GIL or for Python code.
//!
//! A thread that already holds the state and calls the object again (a
//! Python callback run under the lock, such as `__index__` or `__del__`)
//! gets a `LockError` instead of deadlocking on itself.

use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::thread::{self, ThreadId};

use pyo3::prelude::*;

use crate::errors;

/// Who holds the state.
#[derive(Default)]
struct Holder {
    thread: Option<ThreadId>,
    /// Threads waiting in `lock` for the holder to let go: only then does
    /// a release notify (the futex behind `Condvar::notify_one` is a system
    /// call even when nobody waits, which every call on an array paid).
    waiting: usize,
}

/// A value that one thread at a time may use (see the module docs).
pub struct Exclusive<T> {
    holder: Mutex<Holder>,
    released: Condvar,
    value: UnsafeCell<T>,
    /// The object's name in errors ("MemArray").
    what: &'static str,
}

// SAFETY: the value is reached only through an `ExclusiveGuard`, and
// `holder.thread` admits one guard at a time (set under the mutex before a
// guard exists, cleared when it drops), so sharing the `Exclusive` between
// threads hands `&mut T` to one thread at a time: `T: Send` suffices.
unsafe impl<T: Send> Sync for Exclusive<T> {}

impl<T> Exclusive<T> {
    fn holder(&self) -> MutexGuard<'_, Holder> {
        // Poisoning cannot leave `Holder` inconsistent (one plain field).
        self.holder.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl<T: Send> Exclusive<T> {
    pub fn new(value: T, what: &'static str) -> Self {
        Exclusive {
            holder: Mutex::new(Holder::default()),
            released: Condvar::new(),
            value: UnsafeCell::new(value),
            what,
        }
    }

    /// The value, waiting (with the GIL released) while another thread holds it.
    pub fn lock(&self, py: Python<'_>) -> PyResult<ExclusiveGuard<'_, T>> {
        let me = thread::current().id();
        {
            let mut h = self.holder();
            match h.thread {
                None => {
                    h.thread = Some(me);
                    return Ok(ExclusiveGuard { owner: self });
                }
                Some(t) if t == me => {
                    return Err(errors::lock(
                        py,
                        format!(
                            "this {} is busy in this thread: a call on it is still running and the Python code it ran \
                             (a callback such as __index__, __dlpack__ or __del__) called it again; call it after that call returns",
                            self.what
                        ),
                    ))
                }
                Some(_) => {}
            }
        }
        // Another thread holds it, maybe waiting for the GIL: wait without it.
        py.detach(|| {
            let mut h = self.holder();
            h.waiting += 1;
            while h.thread.is_some() {
                h = self.released.wait(h).unwrap_or_else(|p| p.into_inner());
            }
            h.waiting -= 1;
            h.thread = Some(me);
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
        let waiting = {
            let mut h = self.owner.holder();
            h.thread = None;
            h.waiting
        };
        // A waiter counted itself under the mutex before waiting, so it is
        // seen here, and the condvar does not lose a notification given
        // after it released the mutex to wait.
        if waiting > 0 {
            self.owner.released.notify_one();
        }
    }
}

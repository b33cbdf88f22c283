//! Operands of asynchronous work, kept alive until the work has run.
//!
//! A binding that enqueues a copy or a launch on memory its caller owns
//! parks the owners here with [`keep_until_done`]; [`prune`] drops those
//! whose work is complete. The caller decides when to prune (the Python
//! package does it at each runtime call, with the interpreter lock held, so
//! the owners it drops are Python objects released under that lock).
//!
//! ```
//! use gpuport::dynamic::{keep, AnyStream};
//! let dev = gpuport::open("host")?;
//! let s = AnyStream::default_for(&dev);
//! keep::keep_until_done(&s, Box::new(vec![0u8; 16]))?;
//! s.synchronize()?;
//! keep::prune();
//! assert_eq!(keep::pending(), 0);
//! # Ok::<(), gpuport::Error>(())
//! ```

use std::sync::Mutex;

use super::stream::{AnyEvent, AnyStream};
use crate::error::Result;

struct Parked {
    done: AnyEvent,
    _owners: Box<dyn Send>,
}

static PARKED: Mutex<Vec<Parked>> = Mutex::new(Vec::new());

/// Owners of work captured into graphs gpuport cannot see (see the module docs).
static FOREIGN: Mutex<Vec<Box<dyn Send>>> = Mutex::new(Vec::new());

/// Keeps `owners` alive until the work enqueued on `stream` so far has run,
/// or, on a capturing stream, as long as the graph (see the module docs).
pub fn keep_until_done(stream: &AnyStream, owners: Box<dyn Send>) -> Result<()> {
    let owners = match super::graph::keep_for_capture(stream, owners) {
        Ok(()) => return Ok(()),
        Err(owners) => owners,
    };
    // A stream whose state cannot be asked (CUDA's legacy default stream
    // while another blocking stream captures) is not capturing itself.
    if stream.capture_status().is_ok_and(|s| s.is_capturing()) {
        FOREIGN.lock().unwrap_or_else(|e| e.into_inner()).push(owners);
        return Ok(());
    }
    let done = stream.record()?;
    PARKED.lock().unwrap_or_else(|e| e.into_inner()).push(Parked { done, _owners: owners });
    Ok(())
}

/// Whether an event of `dev` may be queried now: not while a capture on the
/// device forbids waits (CUDA and HIP count an event query among the calls
/// that invalidate a capture in Global mode, from any thread, or in
/// ThreadLocal mode, from its thread); such owners wait for the next prune.
fn may_query(dev: &crate::AnyDevice) -> bool {
    crate::backend::graph::check_device_wide_wait(dev.backend(), dev.info().ordinal, "prune").is_ok()
}

/// Drops the owners of completed work (an event that cannot be queried
/// counts as complete: its device failed, and nothing will run). Work on a
/// device where a capture forbids event queries is left for a later prune.
pub fn prune() {
    let done: Vec<Parked> = {
        let mut p = PARKED.lock().unwrap_or_else(|e| e.into_inner());
        let (done, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut *p)
            .into_iter()
            .partition(|x| may_query(&x.done.device()) && x.done.is_complete().unwrap_or(true));
        *p = keep;
        done
    };
    // Dropped outside the lock: an owner's drop may park more work.
    drop(done);
}

/// Number of parked operations, completed or not.
pub fn pending() -> usize {
    PARKED.lock().unwrap_or_else(|e| e.into_inner()).len()
}

/// Number of operations whose owners are kept for captures gpuport did not begin.
pub fn kept_for_foreign_captures() -> usize {
    FOREIGN.lock().unwrap_or_else(|e| e.into_inner()).len()
}

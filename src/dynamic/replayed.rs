//! [`ReplayedArray`]: an array whose device copy a graph captured work on
//! (`AnyArray::add_index`, a collective), ordered with each replay of that
//! graph. The array is shared as the binding holds it, an
//! `Arc<Exclusive<AnyArray>>` ([`SharedArray`]), so a replay takes the
//! array's lock itself and never calls back into the binding.
//!
//! A replay waits for the array's lock with [`Exclusive::lock`]: a binding
//! replays with its interpreter lock released (`super::exclusive`'s rule).
//!
//! For ordering alone this is redundant: the graph and the array share a
//! replay link (`src/array/memarray/replay.rs`), through which
//! `GraphExec::launch` already orders each replay after the array's work
//! and makes it the array's pending work (`MemArray::before_replay`'s doc).
//! No test fails when `before_replay` or `after_replay` is skipped here;
//! what this type adds that a test checks is the lock (`tests/replayed.rs`):
//! a replay waits for a thread that holds the array, and a replay on that
//! thread is `LockError::Busy`.

use std::sync::Arc;

use super::array::AnyArray;
use super::exclusive::Exclusive;
use super::graph::{use_in_replays, ReplayUse};
use super::stream::AnyStream;
use crate::array::DeviceCopyToken;
use crate::error::Result;

/// An array that several objects and threads share, one call at a time.
pub type SharedArray = Arc<Exclusive<AnyArray>>;

/// An array a graph captured work on: each replay is ordered after the
/// array's pending work, and becomes its pending work.
pub struct ReplayedArray {
    array: SharedArray,
    /// The device copy the graph uses.
    used: DeviceCopyToken,
    /// Whether the graph writes it (then it becomes the current copy).
    writes: bool,
}

impl ReplayedArray {
    /// Orders the replays on `stream` of the graph it is capturing with the
    /// captured work on `array`'s device copy `used` (as `add_index` or
    /// `collective::Captured` gave it; `writes`: the work writes it).
    /// Whether a gpuport capture runs on `stream` and took it; where none
    /// does (another library's capture, such as torch's or CuPy's: its
    /// replays are not seen; README: Graphs) there is nothing to order.
    pub fn order_replays(stream: &AnyStream, array: &SharedArray, used: DeviceCopyToken, writes: bool) -> bool {
        let user = Arc::new(ReplayedArray { array: array.clone(), used, writes });
        use_in_replays(stream, user).is_ok()
    }
}

impl ReplayUse for ReplayedArray {
    fn before(&self, stream: &AnyStream) -> Result<()> {
        self.array.lock()?.before_replay(stream)
    }

    fn after(&self, stream: &AnyStream) -> Result<()> {
        self.array.lock()?.after_replay(stream, &self.used, self.writes)
    }
}

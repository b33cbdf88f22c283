//! Large host-to-host copies split over threads.
//!
//! One core's `memcpy` moves about 10 GB/s between cache-cold buffers, so a
//! 64 MiB array read from NumPy into its pinned host copy took longer than
//! the H2D copy after it. Several threads together reach the memory's
//! bandwidth. Written here rather than taken from rayon: it is one scoped
//! split, and the library has no other use for a thread pool.

/// Copies at or above this many bytes are split over threads.
pub(crate) const PARALLEL_FROM: usize = 8 << 20;

/// Each thread copies at least this many bytes.
const PER_THREAD: usize = 4 << 20;

/// At most this many threads copy: beyond it, memory bandwidth, not
/// threads, is the limit.
const MAX_THREADS: usize = 8;

/// The cores this process may use, asked once: `available_parallelism`
/// reads the cgroup's CPU quota from files on Linux, too slow to repeat
/// per copy.
fn cores() -> usize {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// Copies `src` to `dst`, on several threads when it is large.
///
/// # Safety
/// `dst` must be valid for writes of `src.len()` elements, must not overlap
/// `src`, and no one else may read or write it during the call.
pub(crate) unsafe fn copy_nonoverlapping<T: Copy + Sync>(src: &[T], dst: *mut T) {
    let bytes = std::mem::size_of_val(src);
    let threads = if bytes < PARALLEL_FROM { 1 } else { (bytes / PER_THREAD).min(cores()).min(MAX_THREADS) };
    if threads < 2 {
        // SAFETY: the caller's contract.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len()) };
        return;
    }
    let per = src.len().div_ceil(threads);
    // The destination's address crosses to the threads as an integer (raw
    // pointers are not `Send`); each thread writes its own disjoint range.
    let base = dst as usize;
    std::thread::scope(|scope| {
        for (i, piece) in src.chunks(per).enumerate() {
            scope.spawn(move || {
                let to = (base as *mut T).wrapping_add(i * per);
                // SAFETY: `to..to + piece.len()` is the `i`-th of the
                // disjoint ranges `dst` was cut into, valid for writes and
                // used by no one else (the caller's contract), and it does
                // not overlap `piece`, a part of `src`.
                unsafe { std::ptr::copy_nonoverlapping(piece.as_ptr(), to, piece.len()) };
            });
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_and_small_copies_land_whole() {
        for len in [0usize, 7, PARALLEL_FROM / 8 + 3, 3 * PARALLEL_FROM / 8 + 5] {
            let src: Vec<u64> = (0..len as u64).collect();
            let mut dst = vec![u64::MAX; len];
            // SAFETY: `dst` has `len` elements, is distinct from `src` and
            // borrowed mutably here.
            unsafe { copy_nonoverlapping(&src, dst.as_mut_ptr()) };
            assert_eq!(dst, src, "len {len}");
        }
    }
}

//! Large host-to-host copies split over threads.
//!
//! One core's `memcpy` moves about 10 GB/s between cache-cold buffers, so a
//! 64 MiB array read from NumPy into its pinned host copy took longer than
//! the H2D copy after it. Several threads together reach the memory's
//! bandwidth. The pieces run on rayon's pool, whose threads are started
//! once and wait for work: on the H100 machine that read 64 MiB in 1.9 ms
//! where a thread spawned per piece took 2.5 ms (benches/creation.py
//! `--breakdown`, run 33). Below 8 MiB one thread copies: splitting 1 MiB
//! into four pieces did not make its read faster there (95.6 µs against
//! 102.4 µs, same run), the pool's wake-up costing what the split saved.

use rayon::prelude::*;

/// Copies at or above this many bytes are split over threads.
pub(crate) const PARALLEL_FROM: usize = 8 << 20;

/// Each thread copies at least this many bytes.
const PER_THREAD: usize = 1 << 20;

/// At most this many threads copy: beyond it, memory bandwidth, not
/// threads, is the limit.
const MAX_THREADS: usize = 8;

/// The threads rayon's pool has (the cores this process may use, unless the
/// application configured the pool otherwise).
fn threads() -> usize {
    rayon::current_num_threads()
}

/// Copies `src` to `dst`, on several threads when it is large.
///
/// # Safety
/// `dst` must be valid for writes of `src.len()` elements, must not overlap
/// `src`, and no one else may read or write it during the call.
pub(crate) unsafe fn copy_nonoverlapping<T: Copy + Sync>(src: &[T], dst: *mut T) {
    let bytes = std::mem::size_of_val(src);
    let pieces = if bytes < PARALLEL_FROM { 1 } else { (bytes / PER_THREAD).min(threads()).min(MAX_THREADS) };
    if pieces < 2 {
        // SAFETY: the caller's contract.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len()) };
        return;
    }
    let per = src.len().div_ceil(pieces);
    // The destination's address crosses to the threads as an integer (raw
    // pointers are not `Send`); each piece writes its own disjoint range.
    let base = dst as usize;
    src.par_chunks(per).enumerate().for_each(|(i, piece)| {
        let to = (base as *mut T).wrapping_add(i * per);
        // SAFETY: `to..to + piece.len()` is the `i`-th of the disjoint
        // ranges `dst` was cut into, valid for writes and used by no one
        // else (the caller's contract), and it does not overlap `piece`, a
        // part of `src`. `for_each` returns once every piece is copied.
        unsafe { std::ptr::copy_nonoverlapping(piece.as_ptr(), to, piece.len()) };
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

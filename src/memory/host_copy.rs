//! Large host-to-host copies split over threads.
//!
//! One core's `memcpy` moves about 10 GB/s between cache-cold buffers, so a
//! 64 MiB array read from NumPy into its pinned host copy took longer than
//! the H2D copy after it. Several threads together reach the memory's
//! bandwidth. The pieces run on rayon's pool, whose threads are started
//! once and wait for work: on the H100 machine that read 64 MiB in 1.9 ms
//! where a thread spawned per piece took 2.5 ms (benches/creation.py
//! `--breakdown`). Below 8 MiB one thread copies: splitting 1 MiB
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

/// How many threads copy `bytes` bytes.
fn pieces_for(bytes: usize) -> usize {
    if bytes < PARALLEL_FROM {
        1
    } else {
        (bytes / PER_THREAD).min(threads()).min(MAX_THREADS)
    }
}

/// Copies `src` to `dst`, on several threads when it is large.
///
/// # Safety
/// `dst` must be valid for writes of `src.len()` elements, must not overlap
/// `src`, and no one else may read or write it during the call.
pub(crate) unsafe fn copy_nonoverlapping<T: Copy + Sync>(src: &[T], dst: *mut T) {
    let pieces = pieces_for(std::mem::size_of_val(src));
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

/// Copies `src` into `dst` (same length) with non-temporal stores, which
/// do not read the destination into the cache first, on several threads
/// when it is large (as [`copy_nonoverlapping`]). Elsewhere than x86-64, an
/// ordinary copy.
pub(crate) fn copy_streaming(dst: &mut [u8], src: &[u8]) {
    assert_eq!(dst.len(), src.len(), "copy_streaming needs equal lengths");
    let pieces = pieces_for(src.len());
    if pieces < 2 {
        return streaming_or_plain(dst, src);
    }
    let per = src.len().div_ceil(pieces);
    dst.par_chunks_mut(per).zip(src.par_chunks(per)).for_each(|(d, s)| streaming_or_plain(d, s));
}

fn streaming_or_plain(dst: &mut [u8], src: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    return streaming_copy(dst, src);
    #[cfg(not(target_arch = "x86_64"))]
    dst.copy_from_slice(src);
}

/// `dst.copy_from_slice(src)` with SSE2 non-temporal stores for the 16-byte
/// aligned middle of `dst`. Written by hand: `copy_from_slice` (glibc's
/// memcpy) switches to non-temporal stores only for copies far larger than a
/// chunk, and no maintained crate offers a streaming copy.
#[cfg(target_arch = "x86_64")]
pub(crate) fn streaming_copy(dst: &mut [u8], src: &[u8]) {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_sfence, _mm_stream_si128};
    assert_eq!(dst.len(), src.len(), "streaming_copy needs equal lengths");
    const BLOCK: usize = 64;
    let head = dst.as_ptr().align_offset(16).min(dst.len());
    let body = (dst.len() - head) / BLOCK * BLOCK;
    dst[..head].copy_from_slice(&src[..head]);
    let (d, s) = (dst[head..].as_mut_ptr(), src[head..].as_ptr());
    for offset in (0..body).step_by(BLOCK) {
        // SAFETY: SSE2 is part of x86-64. `offset + 64 <= body`, and `body`
        // bytes past `head` lie inside both slices (equal lengths); `d +
        // head` is 16-byte aligned (align_offset), as `_mm_stream_si128`
        // needs, and so is every 16-byte step from it; loads are unaligned.
        unsafe {
            for lane in (0..BLOCK).step_by(16) {
                let v = _mm_loadu_si128(s.add(offset + lane).cast::<__m128i>());
                _mm_stream_si128(d.add(offset + lane).cast::<__m128i>(), v);
            }
        }
    }
    // SAFETY: SSE2 is part of x86-64; the fence orders the streaming stores
    // before whatever this thread does next (the copy is then visible to
    // the DMA engine and to other threads like ordinary stores).
    unsafe { _mm_sfence() };
    dst[head + body..].copy_from_slice(&src[head + body..]);
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

    #[test]
    fn streaming_copies_land_whole_at_any_offset() {
        for (offset, len) in [(0usize, 0usize), (3, 100), (1, PARALLEL_FROM + 77)] {
            #[allow(clippy::cast_possible_truncation)] // a byte pattern
            let src: Vec<u8> = (0..len).map(|i| (i * 7 + 1) as u8).collect();
            let mut dst = vec![0u8; len + offset + 5];
            copy_streaming(&mut dst[offset..offset + len], &src);
            assert!(dst[offset..offset + len] == src[..], "offset {offset}, len {len}");
            assert!(dst[..offset].iter().chain(&dst[offset + len..]).all(|&b| b == 0), "wrote outside");
        }
    }
}

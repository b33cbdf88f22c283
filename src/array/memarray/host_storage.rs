//! The host copy of a [`MemArray`](super::MemArray): [`HostStorage`], a
//! heap or pinned block written lazily (zeros on first access), and
//! [`zeroed_vec`].

use std::ptr::NonNull;
use std::sync::{Arc, Once};

use super::Exportable;
use crate::array::Element;
use crate::backend::{Backend, Device, HostMemory};
use crate::error::{BackendKind, Error, Result};
use crate::memory::{current_resource, GuardedRelease, PinnedFlags};

/// The host copy: a heap block shared between the array and its DLPack
/// exports, so an export keeps it alive after the array is dropped.
///
/// It is a raw pointer rather than a `Box<[T]>` because exports and the
/// array reach the same bytes through raw pointers; who may write when is
/// governed by `&mut MemArray` and the lock, not by this type.
///
/// On a GPU device the block is page-locked memory from the device's current
/// resource when it can be had (`pinned` owns it; the caching pool keeps
/// idle pinned blocks, since `cuMemHostAlloc` + `cuMemFreeHost` of 1 MiB made
/// creating a 1 MiB array from Python take 1.3 ms on the H100, benches/peers.py,
/// 2026-11-22, `git log -p BENCHMARKS.md`): copies from and to pageable memory are not asynchronous on CUDA
/// (a D2H copy into pageable memory returns only when it is done; seen on
/// the H100), so `move_to(.., Transfer::Async)` needs a pinned mirror to
/// return before the copy runs.
///
/// A zero-filled array's pinned block is zeroed lazily, on its first access
/// ([`HostStorage::zeroed_for_device`]): an array that is created and then
/// filled from NumPy, or whose first use is on the device, never pays a
/// memset of the whole block on the host.
pub(crate) struct HostStorage<T> {
    ptr: NonNull<T>,
    len: usize,
    pinned: Option<Box<dyn Exportable>>,
    /// Completed once every element of the block holds a valid `T`. Every
    /// access to the block goes through [`HostStorage::ptr`], which
    /// completes it (writing the zeros) first, so no one can read the block
    /// before it is written; [`HostStorage::overwrite_from`] and
    /// [`HostStorage::overwrite_with`] complete it by writing every element.
    written: Once,
}

// SAFETY: `T: Element` is `Send + Sync` plain data; the storage only frees
// its block on drop, and accesses are synchronized by its users
// (`&mut MemArray` for writes, consumers' contracts for exports).
unsafe impl<T: Element> Send for HostStorage<T> {}
// SAFETY: as above.
unsafe impl<T: Element> Sync for HostStorage<T> {}

impl<T: Element> HostStorage<T> {
    pub(super) fn from_vec(v: Vec<T>) -> Self {
        let len = v.len();
        let ptr = NonNull::from(Box::leak(v.into_boxed_slice())).cast::<T>();
        HostStorage::written(ptr, len, None)
    }

    /// A block whose elements are all written already.
    pub(super) fn written(ptr: NonNull<T>, len: usize, pinned: Option<Box<dyn Exportable>>) -> Self {
        let written = Once::new();
        written.call_once(|| {});
        HostStorage { ptr, len, pinned, written }
    }

    /// A pinned block of `bytes` from `device`'s current resource for a host
    /// mirror, or `None` on the host backend, for zero bytes, or when pinning
    /// fails (callers then fall back to a `Vec`, whose copies are synchronous
    /// but correct).
    pub(super) fn pinned_block<D: Device>(device: &Arc<D>, bytes: usize) -> Option<(NonNull<T>, Box<dyn Exportable>)> {
        if <D::B as Backend>::KIND == BackendKind::Host || bytes == 0 {
            return None;
        }
        let mut pinned =
            current_resource::<D::B>(device).and_then(|a| a.alloc_pinned(bytes, PinnedFlags::PORTABLE)).ok()?;
        let ptr = NonNull::new(pinned.as_mut_slice().as_mut_ptr())?;
        // Page-locked allocations are page aligned, so any element type fits.
        if !(ptr.as_ptr() as usize).is_multiple_of(std::mem::align_of::<T>()) {
            return None;
        }
        // The block's address does not move with `pinned`.
        Some((ptr.cast::<T>(), Box::new(GuardedRelease::new(pinned, device, false))))
    }

    /// The host mirror for an array on `device`: pinned memory of the
    /// device's current resource holding `v` on GPU backends (falling back to
    /// `v` itself if pinning fails), `v` on the host backend, whose copies
    /// are asynchronous either way.
    pub(super) fn for_device<D: Device>(device: &Arc<D>, v: Vec<T>) -> Self {
        let bytes = std::mem::size_of_val(v.as_slice());
        let Some((ptr, held)) = Self::pinned_block(device, bytes) else { return Self::from_vec(v) };
        // SAFETY: the pinned block holds at least `bytes` writable bytes that
        // no one else uses (fresh, or idle in the pool since its last holder
        // dropped it); `T: Element` is plain data and `v` has exactly `bytes`
        // bytes. Every byte is overwritten, so nothing of a previous array
        // survives.
        unsafe { std::ptr::copy_nonoverlapping(v.as_ptr(), ptr.as_ptr(), v.len()) };
        HostStorage::written(ptr, v.len(), Some(held))
    }

    /// A zero-filled host mirror of `len` elements on `device`. A pinned
    /// block is zeroed in place on its first access, not here: creating a
    /// 1 MiB array and filling it from NumPy wrote the megabyte twice
    /// (benches/peers.py `new_1MiB`). Without a pinned block, the same from
    /// a heap block.
    pub(super) fn zeroed_for_device<D: Device>(device: &Arc<D>, len: usize) -> Result<Self> {
        let bytes = len * std::mem::size_of::<T>(); // checked by the caller
        let Some((ptr, held)) = Self::pinned_block(device, bytes) else { return Self::unwritten_heap(len) };
        Ok(HostStorage { ptr, len, pinned: Some(held), written: Once::new() })
    }

    /// A heap block of `len` elements, zeroed on its first access.
    pub(super) fn unwritten_heap(len: usize) -> Result<Self> {
        let layout = heap_layout::<T>(len)?;
        let ptr = if layout.size() == 0 {
            NonNull::dangling()
        } else {
            // SAFETY: the layout's size is not zero.
            NonNull::new(unsafe { std::alloc::alloc(layout) }.cast::<T>()).ok_or_else(|| out_of_memory::<T>(len))?
        };
        Ok(HostStorage { ptr, len, pinned: None, written: Once::new() })
    }

    /// Whether the block's elements have been written (zeros included).
    /// `false` means every element is still zero, without a byte of the
    /// block written: moving such an array to the device can set the device
    /// copy to zero instead of copying.
    pub(super) fn is_written(&self) -> bool {
        self.written.is_completed()
    }

    /// Runs `write`, which writes every element of the block, and records
    /// the block as written (so its zeros are never written after it).
    fn write_whole(&self, write: impl FnOnce()) {
        let mut write = Some(write);
        self.written.call_once(|| {
            if let Some(w) = write.take() {
                w();
            }
        });
        if let Some(w) = write {
            w();
        }
    }

    /// Whether the block is page-locked memory (asynchronous copies from
    /// and to it return before they run).
    pub(super) fn is_pinned(&self) -> bool {
        self.pinned.is_some()
    }

    /// Writes `src` into the block (a pinned block with non-temporal stores,
    /// as [`overwrite_in_pieces`](Self::overwrite_in_pieces)).
    ///
    /// # Safety
    /// `src.len()` is the block's length, and no one else may read or write
    /// the block meanwhile.
    pub(super) unsafe fn overwrite_from(&self, src: &[T]) {
        // SAFETY: the caller's contract; one piece of the whole length.
        unsafe { self.overwrite_in_pieces(src, src.len().max(1), |_, _| {}) };
    }

    /// Writes `src` into the block `piece` elements at a time, calling
    /// `written(part, at)` after each piece with that piece of the block
    /// (`part`, starting at element `at`), so a caller can start copying it
    /// elsewhere while the next piece is written.
    ///
    /// A pinned block is written with non-temporal stores
    /// (`memory::host_copy::copy_streaming`), which do not read it into the
    /// cache first (the DMA reads it from memory right after anyway), unless
    /// `GPUPORT_UPLOAD_STREAMING=0` ([`streaming_stores`]).
    ///
    /// # Safety
    /// `src.len()` is the block's length, and no one else may read or write
    /// the block meanwhile; `written` may read the parts it is given (and
    /// hand them to asynchronous readers) but must not write the block.
    /// `piece > 0`.
    pub(super) unsafe fn overwrite_in_pieces(&self, src: &[T], piece: usize, mut written: impl FnMut(&[T], usize)) {
        debug_assert_eq!(src.len(), self.len);
        debug_assert!(piece > 0);
        let base = self.ptr.as_ptr();
        let streaming = self.pinned.is_some() && streaming_stores();
        self.write_whole(|| {
            for (i, from) in src.chunks(piece).enumerate() {
                let at = i * piece;
                if streaming {
                    let bytes = std::mem::size_of_val(from);
                    // SAFETY: as below for the range; a pinned block's bytes
                    // are initialized memory of its resource (`HostMemory`
                    // hands them out as a slice), and `T: Element` has no
                    // padding, so both sides are plain bytes.
                    let (to, from_bytes) = unsafe {
                        (
                            std::slice::from_raw_parts_mut(base.add(at).cast::<u8>(), bytes),
                            std::slice::from_raw_parts(from.as_ptr().cast::<u8>(), bytes),
                        )
                    };
                    crate::memory::host_copy::copy_streaming(to, from_bytes);
                } else {
                    // SAFETY: `at..at + from.len()` lies in the block's `len`
                    // writable elements (the chunks of `src`, whose length is
                    // `len`, cut at the same offsets), no one else uses it
                    // (the caller's contract), and `from` is part of a
                    // distinct live slice. Every element is written once the
                    // loop ends.
                    unsafe { crate::memory::host_copy::copy_nonoverlapping(from, base.add(at)) };
                }
                // SAFETY: that range now holds valid elements; `written`
                // only reads it, and the rest of the loop writes other ranges.
                written(unsafe { std::slice::from_raw_parts(base.add(at), from.len()) }, at);
            }
        });
    }

    /// Sets every element of the block to `value`.
    ///
    /// # Safety
    /// No one else may read or write the block meanwhile.
    pub(super) unsafe fn overwrite_with(&self, value: T) {
        // SAFETY: `ptr` holds `len` writable elements, which the caller lets
        // no one else use; each is written through a raw pointer (the block
        // may not be written yet, so no slice of it is formed first).
        self.write_whole(|| unsafe {
            for i in 0..self.len {
                self.ptr.as_ptr().add(i).write(value);
            }
        });
    }

    /// The block's address is about to be handed out: a pinned block then
    /// synchronizes the device before it goes back to the pool.
    pub(super) fn mark_exported(&self) {
        if let Some(p) = &self.pinned {
            p.mark_exported();
        }
    }

    /// The block's address, after its zeros are written if they were
    /// still owed: every access to the block goes through here.
    pub(super) fn ptr(&self) -> *mut T {
        // SAFETY: the block holds `len` writable elements. Until `written`
        // completes, no one has the address (every route to it is this
        // function, which waits for the `Once`), so nothing else reads or
        // writes it while the zeros go in; all-zero bytes are a valid `T`
        // (`Element`'s contract).
        self.written.call_once(|| unsafe { std::ptr::write_bytes(self.ptr.as_ptr(), 0, self.len) });
        self.ptr.as_ptr()
    }

    /// # Safety
    /// No one may write the block while the returned slice is alive.
    pub(super) unsafe fn slice(&self) -> &[T] {
        // SAFETY: `ptr..ptr+len` is the live boxed slice (dangling but aligned
        // when `len == 0`); the caller excludes writers.
        unsafe { std::slice::from_raw_parts(self.ptr(), self.len) }
    }

    /// # Safety
    /// No one else may read or write the block while the slice is alive.
    #[allow(clippy::mut_from_ref)]
    pub(super) unsafe fn slice_mut(&self) -> &mut [T] {
        // SAFETY: as in `slice`, and the caller guarantees exclusivity.
        unsafe { std::slice::from_raw_parts_mut(self.ptr(), self.len) }
    }

    pub(super) fn bytes_ptr(&self) -> *mut u8 {
        self.ptr().cast::<u8>()
    }
}

impl<T> Drop for HostStorage<T> {
    fn drop(&mut self) {
        if let Some(pinned) = self.pinned.take() {
            drop(pinned); // back to the resource's pinned pool (see `memory::GuardedRelease`)
            return;
        }
        // SAFETY: `ptr`/`len` came from `Box::leak` of a `Box<[T]>` in
        // `from_vec`, or from the global allocator with the layout of `len`
        // elements in `unwritten_heap` (the layout a `Box<[T]>` of `len`
        // frees with), and are freed exactly once, here. Dropped as
        // `MaybeUninit<T>` (same layout; `T` has no drop glue), since an
        // unwritten block holds no valid `T`.
        unsafe {
            drop(Box::from_raw(std::ptr::slice_from_raw_parts_mut(
                self.ptr.as_ptr().cast::<std::mem::MaybeUninit<T>>(),
                self.len,
            )))
        }
    }
}

/// Whether host data is written into pinned host copies with non-temporal
/// stores: on unless `GPUPORT_UPLOAD_STREAMING=0` (read once), the switch
/// `benches/creation.py` compares both ways with.
fn streaming_stores() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("GPUPORT_UPLOAD_STREAMING").map_or(true, |v| v != "0"))
}

/// Allocates `len` zeroed elements, turning allocation failure into an
/// error. The block comes from the allocator's zeroed allocation
/// (`calloc`), which for large blocks maps zero pages instead of writing
/// them: a 64 MiB host array costs no memset until it is touched.
pub(super) fn zeroed_vec<T: Element>(len: usize) -> Result<Vec<T>> {
    let layout = heap_layout::<T>(len)?;
    if layout.size() == 0 {
        return Ok(Vec::new());
    }
    // SAFETY: the layout's size is not zero.
    let ptr = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<T>();
    if ptr.is_null() {
        return Err(out_of_memory::<T>(len));
    }
    // SAFETY: `ptr` comes from the global allocator with the layout of
    // `len` elements of `T` (so capacity `len`), and all its bytes are zero,
    // a valid `T` (`Element`'s contract).
    Ok(unsafe { Vec::from_raw_parts(ptr, len, len) })
}

/// The heap layout of `len` elements of `T` (the layout a `Box<[T]>` or a
/// `Vec<T>` of capacity `len` has), or the out-of-memory error for a length
/// no layout can hold.
fn heap_layout<T>(len: usize) -> Result<std::alloc::Layout> {
    std::alloc::Layout::array::<T>(len).map_err(|_| out_of_memory::<T>(len))
}

/// Host memory for `len` elements of `T` could not be had.
fn out_of_memory<T>(len: usize) -> Error {
    Error::OutOfMemory { backend: BackendKind::Host, ordinal: 0, bytes: len.saturating_mul(std::mem::size_of::<T>()) }
}

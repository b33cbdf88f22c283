//! Filling a [`MemArray`] from host data and uploading it in one pass
//! ([`MemArray::upload_from_slice`]): the upload of each piece is enqueued
//! as soon as the piece is in the pinned host copy, so the device copy fills
//! while the host copy is still being written.
//!
//! Why: [`MemArray::copy_from_slice`] then [`MemArray::move_to`] runs the
//! host copy and the DMA one after the other. For 1 MiB on the H100 machine
//! that was about 95 µs of host copy, then the whole DMA, where torch's
//! `from_numpy(x).to("cuda")` overlaps its staging copy with its DMA
//! (2026-11-23; `git log -p BENCHMARKS.md`).

use super::{Location, LockId, MemArray, Residency, Transfer};
use crate::array::Element;
use crate::backend::{Backend, Device, Stream};
use crate::error::{BackendKind, Result};
use crate::memory::StreamUse;

/// Uploads of at most this many bytes go in one piece: below it, one more
/// enqueue costs about what the overlap saves.
const ONE_PIECE_UP_TO: usize = 512 << 10;

/// The smallest and largest piece of a pipelined upload. Pieces are a
/// quarter of the upload within these bounds: four pieces let the DMA of
/// the first three run behind the host copy, and 8 MiB pieces are still
/// copied by several threads each (`memory::host_copy`).
const PIECE_BYTES: (usize, usize) = (256 << 10, 8 << 20);

/// Elements per piece when uploading `len` elements of `T`.
fn piece_len<T>(len: usize) -> usize {
    let size = std::mem::size_of::<T>().max(1);
    let bytes = len * size;
    if bytes <= ONE_PIECE_UP_TO {
        return len.max(1);
    }
    ((bytes / 4).clamp(PIECE_BYTES.0, PIECE_BYTES.1) / size).max(1)
}

impl<T: Element, const N: usize, D: Device> MemArray<T, N, D> {
    /// Copies `src` (row-major, `len()` elements) into the host copy, which
    /// becomes the only current copy, as
    /// [`copy_from_slice`](Self::copy_from_slice) does; but when the data
    /// lives on a GPU device (the device copy is current, the array is
    /// untouched since it was created, or its last read was staged), the
    /// copy is also uploaded as it is made, on `stream`, as
    /// [`upload_from_slice`](Self::upload_from_slice) does. That upload is
    /// staged: the host copy is still the one reported current (host
    /// consumers such as NumPy keep reading it), and a later
    /// `move_to(Location::Device, ..)` only marks the device copy current,
    /// ordered after the upload. Any write first clears it.
    ///
    /// Why: reading host data into an array bound for the device, then
    /// moving it, ran the host copy and the whole DMA one after the other
    /// (the seed's `read_numpy_array` + `move_memory`, 1.23–1.28× torch's
    /// `from_numpy(x).to("cuda")` for 1 MiB on the H100, 2026-11-23,
    /// `git log -p BENCHMARKS.md`). An array whose host copy is in use gets
    /// the plain copy, so host-side work never pays for an upload it did not
    /// ask for; so does an array with a live export, which may write the
    /// host copy without the array seeing it (the move must copy those
    /// writes).
    ///
    /// Errors: locked without the id, a length other than `len()`, or a
    /// copy error of the upload.
    ///
    /// ```
    /// use gpuport::{Device, array::{MemArray, Residency}};
    /// let dev = gpuport::HostDevice::open(0)?;
    /// let mut a = MemArray::<f32, 1, _>::zeros(&dev, [3])?;
    /// a.read_from_slice(&[1.0, 2.0, 3.0], dev.default_stream(), None)?;
    /// assert_eq!(a.residency(), Residency::Host);
    /// assert_eq!(a.as_slice(None)?, &[1.0, 2.0, 3.0]);
    /// # Ok::<(), gpuport::Error>(())
    /// ```
    pub fn read_from_slice(&mut self, src: &[T], stream: &Stream<D::B>, lock: Option<LockId>) -> Result<()> {
        // A live export may write the host copy after this read without the
        // array seeing it; the move must copy those writes, so nothing is
        // staged while one exists.
        if !self.lives_on_device() || self.live_exports() > 0 {
            return self.copy_from_slice(src, lock);
        }
        self.upload_from_slice(src, stream, lock)?;
        if self.residency == Residency::Both {
            self.set_residency(Residency::Host);
            self.staged = true;
        }
        Ok(())
    }

    /// Whether the array's data belongs on its device: a GPU device whose
    /// copy is current, whose last read was staged there, or whose host
    /// copy is untouched since creation.
    fn lives_on_device(&self) -> bool {
        <D::B as Backend>::KIND != BackendKind::Host
            && (self.residency.includes(Location::Device) || self.staged || !self.host.is_written())
    }

    /// Copies `src` (row-major, `len()` elements) into the host copy and
    /// uploads it to the device copy on `stream`, piece by piece as it is
    /// copied. Afterwards both copies are current and the upload is
    /// pending, as after [`copy_from_slice`](Self::copy_from_slice) then
    /// [`move_to`](Self::move_to) with [`Transfer::Async`]: later work on
    /// `stream` sees the data, host access through the array and other
    /// streams wait for it.
    ///
    /// The pieces overlap the host copy with the DMA where the host copy is
    /// page-locked (a GPU device's pinned pool) and on the host backend;
    /// otherwise (pinning refused) this is `copy_from_slice` then `move_to`.
    ///
    /// Errors: locked without the id, a length other than `len()`, a
    /// capturing `stream` (as `move_to`), or the backend's copy error (the
    /// host copy is then current and complete, the device copy stale).
    ///
    /// ```
    /// use gpuport::{Device, array::{MemArray, Residency}};
    /// let dev = gpuport::HostDevice::open(0)?;
    /// let mut a = MemArray::<f32, 1, _>::zeros(&dev, [3])?;
    /// a.upload_from_slice(&[1.0, 2.0, 3.0], dev.default_stream(), None)?;
    /// assert_eq!(a.residency(), Residency::Both);
    /// assert_eq!(a.as_slice(None)?, &[1.0, 2.0, 3.0]);
    /// # Ok::<(), gpuport::Error>(())
    /// ```
    pub fn upload_from_slice(&mut self, src: &[T], stream: &Stream<D::B>, lock: Option<LockId>) -> Result<()> {
        // No capture begins between the check below and the pending event
        // recorded after the pieces (`gate.rs`): every piece runs, and the
        // event waits for them.
        let _section = self.section(stream);
        self.check_lock("upload_from_slice", lock)?;
        self.check_len("upload_from_slice", src.len())?;
        // The host backend's copies run on its stream's thread, after the
        // call, whatever the memory; a GPU's read pageable memory before the
        // call returns (no overlap, so one piece does as well).
        let overlaps = self.host.is_pinned() || <D::B as Backend>::KIND == BackendKind::Host;
        if self.len == 0 || !overlaps || self.device.capture_status(stream)?.is_capturing() {
            // A capturing stream gets `move_to`'s error, after the host write.
            self.copy_from_slice(src, lock)?;
            return self.move_to(Location::Device, stream, Transfer::Async, lock);
        }
        // No copy may still read or write the host block, nor the device
        // copy, when the pieces start.
        self.synchronize()?;
        let copy = self.ensure_buffer(stream)?;
        // One device check for the pieces and the pending event's record
        // (`src/backend/bound.rs`): opened after the allocation, which may
        // run the current memory resource (code of the caller's choosing);
        // from here on only gpuport's own code runs. After `copy`, so that
        // the copy is dropped after the scope ends.
        let _bound = crate::backend::bound::scope();
        let size = std::mem::size_of::<T>();
        let mut failed = None;
        {
            // Through a `StreamUse`, as in `move_to`.
            let buffer: StreamUse<'_, D::B> = copy.use_on(stream)?;
            let device = &self.device;
            let enqueue = |part: &[T], at: usize| {
                if failed.is_some() {
                    return;
                }
                // SAFETY: `part` is initialized memory of the block, of
                // `size_of_val(part)` bytes.
                let bytes =
                    unsafe { std::slice::from_raw_parts(part.as_ptr().cast::<u8>(), std::mem::size_of_val(part)) };
                // SAFETY: the block, which `self.host` keeps alive until the
                // upload is done (host writes and `Drop` wait for `pending`,
                // recorded below; on an error the stream is synchronized
                // before returning), is not written at `part` again meanwhile;
                // the device copy is held by `self.buffer`, and its resource
                // reuses it only after this use. `at..at + part.len()` lies in
                // the device copy, which has `len` elements.
                if let Err(e) = unsafe { device.copy_to_device_async(bytes, &buffer, at * size, stream) } {
                    failed = Some(e);
                }
            };
            // SAFETY: `src` has `len` elements (checked) and is a slice the
            // caller owns, distinct from the block; `&mut self` and the
            // finished copies (synchronized above) exclude every other user
            // of the block. `enqueue` only reads the parts it is given.
            unsafe { self.host.overwrite_in_pieces(src, piece_len::<T>(self.len), enqueue) };
        }
        // The host copy is whole either way.
        self.set_residency(Residency::Host);
        let recorded = match failed {
            Some(e) => Err(e),
            None => self.record_pending(stream),
        };
        if let Err(e) = recorded {
            // Pieces already enqueued read the host block: wait for them
            // before the block can be written again.
            let _ = self.device.synchronize(stream);
            return Err(e);
        }
        self.set_residency(Residency::Both);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_cover_the_upload_in_few_parts() {
        assert_eq!(piece_len::<u8>(0), 1);
        assert_eq!(piece_len::<u8>(1000), 1000);
        assert_eq!(piece_len::<u8>(ONE_PIECE_UP_TO), ONE_PIECE_UP_TO);
        assert_eq!(piece_len::<u8>(1 << 20), 256 << 10);
        assert_eq!(piece_len::<f32>(1 << 20), (1 << 20) / 4); // 4 MiB: 1 MiB pieces
        assert_eq!(piece_len::<u8>(64 << 20), 8 << 20);
        assert_eq!(piece_len::<f64>(600 << 10), (600 << 10) / 4); // 4.7 MiB: four pieces
        assert_eq!(piece_len::<u8>(600 << 10), 256 << 10); // a quarter is below the smallest piece
    }
}

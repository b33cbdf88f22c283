//! Work that another module enqueues on an array's device copy (the
//! collectives of `crate::collective`), ordered as the kernel methods are.

use super::{DeviceCopyToken, Location, MemArray, Residency};
use crate::array::{Element, LockId, Transfer};
use crate::backend::{Device, DeviceMemory, Stream};
use crate::error::Result;

impl<T: Element, const N: usize, D: Device> MemArray<T, N, D> {
    /// Runs `enqueue` with the address of the array's device copy (0 for an
    /// empty array), ordered on `stream` like a kernel method: the data is
    /// moved to the device first, `stream` waits for the array's pending
    /// work, and the enqueued work becomes the array's pending work, which
    /// host access and drop wait for. `writes`: the device copy becomes the
    /// only current one.
    ///
    /// On a capturing stream the work is captured as a kernel method is
    /// (see `prepare_captured_kernel`): the device copy must be current and
    /// any pending work on this stream or done; the graph keeps the copy;
    /// the copy is returned ([`device_copy_token`](Self::device_copy_token),
    /// for [`after_replay`](Self::after_replay), which replays no longer
    /// need: `GraphExec::launch` orders them). `None` otherwise.
    ///
    /// `enqueue` must only enqueue work on `stream` that uses the address
    /// and must not keep it: the address is valid until that work has run
    /// (every replay's, for a captured one).
    pub(crate) fn with_device_data<R>(
        &mut self,
        what: &'static str,
        writes: bool,
        stream: &Stream<D::B>,
        lock: Option<LockId>,
        enqueue: impl FnOnce(u64) -> Result<R>,
    ) -> Result<(R, Option<DeviceCopyToken>)> {
        let _section = self.section(stream); // as in `move_to`
        let captured = self.device.capture_status(stream)?.is_capturing();
        if captured {
            self.check_capturable(what, stream, lock, writes)?;
        } else {
            self.move_to(Location::Device, stream, Transfer::Async, lock)?;
            self.order_stream(stream)?;
        }
        let copy = self.device_copy(what, lock)?.cloned();
        if writes {
            self.set_residency(Residency::Device);
        }
        let out = match &copy {
            // Captured as kernel methods are: the graph keeps the copy, and
            // no cross-stream wait (`use_on`) may enter the capture.
            Some(c) if captured => enqueue(c.device_ptr())?,
            Some(c) => {
                let on = c.use_on(stream)?;
                enqueue(on.device_ptr())?
            }
            None => enqueue(0)?,
        };
        if captured {
            // An event recorded inside a capture means nothing until a
            // replay: `pending` stays, and each launch orders its replay.
            return Ok((out, copy.as_ref().map(DeviceCopyToken::of)));
        }
        self.record_pending(stream)?;
        Ok((out, None))
    }
}

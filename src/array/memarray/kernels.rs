//! The built-in kernels as [`MemArray`] methods: `add_index`, `scale` and
//! `axpy`, ordered with the array's copies and pending work, and captured
//! on a capturing stream.

/// The built-in kernels as array methods (docs/design.md#the-test-kernel).
///
/// Each moves the data to the device first if it is not current there (on
/// `stream`, asynchronously), makes `stream` wait for the array's pending
/// copy or kernel (which may be on another stream), enqueues the kernel on
/// `stream`, and leaves the device copy as the only current one. Host access
/// afterwards waits for the kernel: it is recorded as the array's pending work.
use std::sync::Arc;

use super::capture::kernel_bind_scope;
use super::{DeviceCopy, Element, Location, LockId, MemArray, Residency, Transfer};
use crate::array::ShapeError;
use crate::backend::graph::capture_section;
use crate::backend::order::hold_in_order;
use crate::backend::{Device, DeviceMemory, Stream};
use crate::error::{Error, Result};
use crate::kernels::{self, Scalar};

impl<T: Element + Scalar, const N: usize, D: Device> MemArray<T, N, D> {
    /// Adds to every element the sum of its indices.
    ///
    /// ```
    /// use gpuport::{Device, array::{Location, MemArray, Transfer}};
    /// let dev = gpuport::HostDevice::open(0)?;
    /// let mut a = MemArray::<f32, 2, _>::from_vec(&dev, [2, 3], vec![2.0; 6])?;
    /// a.add_index(dev.default_stream(), None)?;
    /// a.move_to(Location::Host, dev.default_stream(), Transfer::Sync, None)?;
    /// assert_eq!(a.get([1, 2], None)?, 2.0 + 1.0 + 2.0);
    /// # Ok::<(), gpuport::Error>(())
    /// ```
    pub fn add_index(&mut self, stream: &Stream<D::B>, lock: Option<LockId>) -> Result<()> {
        let _section = self.section(stream); // as in `move_to`
        let (copy, captured) = self.prepare_kernel(stream, lock)?;
        let _bound = kernel_bind_scope();
        let shape = self.shape_i64();
        {
            let on = if captured { None } else { copy.as_ref().map(|c| c.use_on(stream)).transpose()? };
            let data = match (&on, &copy) {
                (Some(u), _) => u.device_ptr(),
                (None, Some(c)) => c.device_ptr(),
                (None, None) => 0,
            };
            // SAFETY: `data` is the device copy of `len` elements (0 for an
            // empty array). Run now: the copy lives in `self`, whose drop and
            // host accesses wait for the event `record_pending` records after
            // the launch, and `on` records the use for the resource.
            // Captured: the graph keeps the copy (`prepare_captured_kernel`)
            // and its drop waits for its replays.
            unsafe { kernels::add_index_async::<D, T, N>(&self.device, data, shape, stream)? };
        }
        self.finish_kernel(stream, captured)
    }

    /// Multiplies every element by `alpha`.
    pub fn scale(&mut self, alpha: T::Compute, stream: &Stream<D::B>, lock: Option<LockId>) -> Result<()> {
        let _section = self.section(stream); // as in `move_to`
        let (copy, captured) = self.prepare_kernel(stream, lock)?;
        let _bound = kernel_bind_scope();
        match &copy {
            // SAFETY: as in `add_index`.
            Some(copy) if captured => unsafe { kernels::scale_async::<D, T, _>(&self.device, &**copy, alpha, stream)? },
            Some(copy) => {
                let on = copy.use_on(stream)?;
                // SAFETY: as in `add_index`.
                unsafe { kernels::scale_async::<D, T, _>(&self.device, &on, alpha, stream)? };
            }
            None => {}
        }
        self.finish_kernel(stream, captured)
    }

    /// `self += alpha * x`, element by element; `x` (same shape, same device)
    /// is moved to the device too.
    pub fn axpy(
        &mut self,
        alpha: T::Compute,
        x: &mut MemArray<T, N, D>,
        stream: &Stream<D::B>,
        lock: Option<LockId>,
    ) -> Result<()> {
        if x.shape != self.shape {
            return Err(ShapeError::ShapeMismatch {
                what: "x",
                expected: self.shape.to_vec(),
                found: x.shape.to_vec(),
            }
            .into());
        }
        if !Arc::ptr_eq(&x.device, &self.device) {
            return Err(Error::DeviceMismatch {
                what: "x",
                expected: self.device.info().spec(),
                found: x.device.info().spec(),
            });
        }
        // As in `move_to`, for both arrays (`src/backend/order.rs`).
        let _order = hold_in_order(self.order_lock().into_iter().chain(x.order_lock()));
        let _section = capture_section::<D::B>(stream);
        if self.device.capture_status(stream)?.is_capturing() {
            // `x` is only read: captured as `self` is, but its residency stays.
            x.check_capturable("kernel", stream, None, false)?;
            if let (Some(y), Some(xb)) = (self.prepare_captured_kernel(stream, lock)?, x.buffer.clone()) {
                // SAFETY: as in `add_index`, captured: the graph keeps both copies.
                unsafe { kernels::axpy_async::<D, T, _, _>(&self.device, &*y, &*xb, alpha, stream)? };
            }
            return Ok(());
        }
        x.move_to(Location::Device, stream, Transfer::Async, None)?;
        x.order_stream(stream)?;
        let (y, xb) = (self.prepare_kernel(stream, lock)?.0, x.buffer.clone());
        // After `y` and `xb`, so they are dropped after the scope ends.
        let _bound = kernel_bind_scope();
        if let (Some(y), Some(xb)) = (&y, &xb) {
            let (y_on, x_on) = (y.use_on(stream)?, xb.use_on(stream)?);
            // SAFETY: as in `add_index`; `x` also records the kernel as pending.
            unsafe { kernels::axpy_async::<D, T, _, _>(&self.device, &y_on, &x_on, alpha, stream)? };
            x.record_pending(stream)?;
        }
        self.record_pending(stream)
    }

    /// Moves the data to the device if needed, orders `stream` after the
    /// array's pending work, makes the device copy the only current one, and
    /// returns it (`None` for an empty array), with whether `stream` is
    /// capturing (then see [`prepare_captured_kernel`](Self::prepare_captured_kernel)).
    fn prepare_kernel(
        &mut self,
        stream: &Stream<D::B>,
        lock: Option<LockId>,
    ) -> Result<(Option<Arc<DeviceCopy<D>>>, bool)> {
        if self.device.capture_status(stream)?.is_capturing() {
            return Ok((self.prepare_captured_kernel(stream, lock)?, true));
        }
        self.move_to(Location::Device, stream, Transfer::Async, lock)?;
        self.order_stream(stream)?;
        let copy = self.device_copy("kernel", lock)?.cloned();
        self.set_residency(Residency::Device);
        Ok((copy, false))
    }
}

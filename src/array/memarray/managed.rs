//! Arrays whose device copy is managed memory (`cuMemAllocManaged`,
//! `hipMallocManaged`): [`MemArray::managed`], and placing that copy with
//! [`MemArray::prefetch`] and [`MemArray::advise`]
//! (`MemoryDevice::prefetch_managed`, `advise_managed`). The host copy and
//! the moves between the copies are those of every array; only where the
//! device copy's memory comes from, and who may place it, differ. On the
//! host backend the memory is the heap and placing it does nothing.

use std::sync::Arc;

use super::{HostStorage, MemArray};
use crate::array::{checked_len, Element, LockId};
use crate::backend::{Advice, Device, ManagedPlace, MemoryDevice, Stream};
use crate::error::memory::MemoryError;
use crate::error::Result;
use crate::memory::{current_resource, Allocator, ManagedResource};

impl<T: Element, const N: usize, D: Device> MemArray<T, N, D> {
    /// The resource the array's device copies on `device` come from: a
    /// [`ManagedResource`] for a managed array, else the device's current one.
    pub(super) fn resource_on(&self, device: &Arc<D>) -> Result<Allocator<D::B>> {
        match self.managed {
            true => Ok(Allocator::new(ManagedResource::<D::B>::new(device.clone())?)),
            false => current_resource::<D::B>(device),
        }
    }

    /// Whether the array's device copy is managed memory ([`managed`](Self::managed)).
    pub fn is_managed(&self) -> bool {
        self.managed
    }
}

impl<T: Element, const N: usize, D: Device + MemoryDevice> MemArray<T, N, D> {
    /// A zero-filled array of `shape` on `device` whose device copy is
    /// managed memory, allocated at once (the host copy is current, as
    /// [`zeros`](MemArray::zeros)'s). [`Error::Unsupported`](crate::Error::Unsupported)
    /// where the device has no managed memory.
    ///
    /// ```
    /// use gpuport::{Advice, Device, ManagedPlace, array::MemArray};
    /// let dev = gpuport::HostDevice::open(0)?;
    /// let mut a = MemArray::<f32, 1, _>::managed(&dev, [1024])?;
    /// a.advise(Advice::SetReadMostly, ManagedPlace::Device(0), None)?;
    /// a.prefetch(ManagedPlace::Device(0), dev.default_stream(), None)?; // the host backend: nothing moves
    /// assert!(a.is_managed());
    /// # Ok::<(), gpuport::Error>(())
    /// ```
    pub fn managed(device: &Arc<D>, shape: [usize; N]) -> Result<Self> {
        let len = checked_len(&shape, std::mem::size_of::<T>())?;
        let mut array = Self::with_host(device, shape, len, HostStorage::zeroed_for_device(device, len)?);
        array.managed = true;
        if len > 0 {
            array.ensure_buffer(device.default_stream())?;
        }
        Ok(array)
    }

    /// Enqueues on `stream` moving the device copy's managed memory toward
    /// `to` (a device, or the host), after the array's pending work; the
    /// copy's contents and which copy is current do not change, and the
    /// copy is not released before the move has run. Errors:
    /// [`MemoryError::NotManaged`] for an array that is not
    /// [`managed`](Self::managed), [`MemoryError::NotAccessible`] for a
    /// place that cannot take the memory (no such device, or one without
    /// concurrent managed access), and the lock's.
    pub fn prefetch(&mut self, to: ManagedPlace, stream: &Stream<D::B>, lock: Option<LockId>) -> Result<()> {
        self.check_lock("prefetch", lock)?;
        self.check_managed("prefetch")?;
        if self.len == 0 {
            return Ok(());
        }
        let copy = self.ensure_buffer(stream)?;
        self.order_stream(stream)?;
        // The use records an event on `stream` when dropped, after the
        // prefetch is enqueued: the copy's release waits for it.
        let _on = copy.use_on(stream)?;
        let buffer = copy.buffer().ok_or_else(|| not_managed("prefetch"))?;
        self.device.prefetch_managed(buffer, to, stream)
    }

    /// Gives the driver `advice` about the device copy's managed memory for
    /// `place` (the read-mostly advice ignores `place`). Errors as
    /// [`prefetch`](Self::prefetch)'s.
    pub fn advise(&mut self, advice: Advice, place: ManagedPlace, lock: Option<LockId>) -> Result<()> {
        self.check_lock("advise", lock)?;
        self.check_managed("advise")?;
        if self.len == 0 {
            return Ok(());
        }
        let device = self.device.clone();
        let copy = self.ensure_buffer(device.default_stream())?;
        let buffer = copy.buffer().ok_or_else(|| not_managed("advise"))?;
        self.device.advise_managed(buffer, advice, place)
    }

    fn check_managed(&self, op: &'static str) -> Result<()> {
        match self.managed {
            true => Ok(()),
            false => Err(not_managed(op)),
        }
    }
}

/// The refusal of an array whose device copy is device memory, not managed.
fn not_managed(op: &'static str) -> crate::Error {
    MemoryError::NotManaged { op, kind: "device".to_string() }.into()
}

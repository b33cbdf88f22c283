//! A GPU's [`GrowableRange`], over the driver's virtual memory management
//! ([`VmmCalls`]): addresses reserved once, and one physical allocation of
//! one granule mapped per granule as the range grows, unmapped and freed
//! as it shrinks. One granule per allocation lets the range shrink at any
//! granule boundary (a physical allocation is mapped and unmapped whole).

use std::sync::Arc;

use super::driver::{Driver, VmmCalls};
use super::error::out_of_memory;
use crate::backend::growable::{round_up, too_large, GrowableRange};
use crate::backend::MAX_RESERVATION;
use crate::error::{Error, Result};

/// A reservation on a GPU; see the [module docs](self).
pub(crate) struct GpuGrowable<D: Driver> {
    driver: Arc<D>,
    ordinal: usize,
    base: u64,
    reserved: usize,
    granularity: usize,
    /// One physical allocation per mapped granule, in address order.
    granules: Vec<u64>,
}

impl<D: Driver> std::fmt::Debug for GpuGrowable<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GpuGrowable({:#x}, {} of {} bytes mapped)", self.base, self.mapped(), self.reserved)
    }
}

impl<D: Driver> GpuGrowable<D> {
    /// Reserves `bytes` (rounded up to the granularity) on device `ordinal`:
    /// [`Error::Unsupported`] without virtual memory management,
    /// [`MemoryError::AddressSpace`](crate::memory::MemoryError::AddressSpace)
    /// past the address space.
    pub(crate) fn reserve(driver: &Arc<D>, ordinal: usize, name: &str, bytes: usize) -> Result<Self> {
        if bytes > MAX_RESERVATION {
            return Err(too_large(bytes, MAX_RESERVATION, "more than the address space"));
        }
        if !D::Vmm::supported(driver, ordinal)? {
            return Err(Error::Unsupported {
                op: "growable ranges (virtual memory management)",
                backend: D::KIND,
                hint: Some(format!("{name} or its driver does not support virtual memory management")),
            });
        }
        driver.bind()?;
        let granularity = D::Vmm::granularity(driver, ordinal)?.max(1);
        let reserved = round_up(bytes.max(1), granularity)?;
        // SAFETY: the device is current; size and alignment are granule multiples.
        let base = unsafe { D::Vmm::reserve(driver, reserved, granularity) }
            .map_err(|e| too_large(bytes, reserved, &format!("the driver refused it ({e})")))?;
        Ok(GpuGrowable { driver: driver.clone(), ordinal, base, reserved, granularity, granules: Vec::new() })
    }

    /// Maps one more granule at the end; nothing changes on failure.
    fn map_granule(&mut self) -> Result<()> {
        let (d, g) = (&*self.driver, self.granularity);
        let at = self.base + self.mapped() as u64;
        // SAFETY: the device is current (bound by the caller); `g` is the granularity.
        let handle =
            unsafe { D::Vmm::create(d, self.ordinal, g) }.map_err(|e| out_of_memory::<D>(e, self.ordinal, g))?;
        // SAFETY: `at..at+g` lies in the reservation (checked by `grow_to`)
        // past the mapped part, so nothing is mapped there; the handle is live.
        let mut mapped = unsafe { D::Vmm::map(d, at, g, handle) };
        if mapped.is_ok() {
            // SAFETY: the range was just mapped.
            mapped = unsafe { D::Vmm::set_access(d, at, g, self.ordinal) };
            if mapped.is_err() {
                // SAFETY: mapped just above and used by nothing yet.
                let _ = unsafe { D::Vmm::unmap(d, at, g) };
            }
        }
        if let Err(e) = mapped {
            // SAFETY: created above, mapped nowhere, released once.
            let _ = unsafe { D::Vmm::release(d, handle) };
            return Err(out_of_memory::<D>(e, self.ordinal, g));
        }
        self.granules.push(handle);
        Ok(())
    }

    /// Unmaps and frees the last granule.
    ///
    /// # Safety
    /// Nothing uses it; the device is current.
    unsafe fn unmap_granule(&mut self) -> Result<()> {
        let Some(&handle) = self.granules.last() else { return Ok(()) };
        let at = self.base + (self.mapped() - self.granularity) as u64;
        // SAFETY: the caller's contract; `at` is the last granule's one whole mapping.
        unsafe { D::Vmm::unmap(&self.driver, at, self.granularity) }?;
        self.granules.pop();
        // SAFETY: unmapped above; released once (popped).
        unsafe { D::Vmm::release(&self.driver, handle) }
    }
}

// SAFETY: the reservation is fresh from the driver and this struct's alone;
// granules are fresh physical allocations of the device, mapped in order
// from `base` with read-write access for it, so `base..base+mapped` is valid
// memory of the device until unmapped (`shrink_to`, drop). `mapped` is the
// granule count times the granularity, kept within `reserved` by `grow_to`.
unsafe impl<D: Driver> GrowableRange for GpuGrowable<D> {
    fn base(&self) -> u64 {
        self.base
    }
    fn reserved(&self) -> usize {
        self.reserved
    }
    fn mapped(&self) -> usize {
        self.granules.len() * self.granularity
    }
    fn granularity(&self) -> usize {
        self.granularity
    }
    fn ordinal(&self) -> usize {
        self.ordinal
    }
    fn is_virtual(&self) -> bool {
        true
    }
    fn grow_to(&mut self, bytes: usize) -> Result<()> {
        let want = round_up(bytes, self.granularity)?;
        if want > self.reserved {
            return Err(too_large(want, self.reserved, "past the end of the reservation"));
        }
        if want <= self.mapped() {
            return Ok(());
        }
        self.driver.bind()?;
        let before = self.granules.len();
        while self.mapped() < want {
            if let Err(e) = self.map_granule() {
                // Undo this call's granules: nothing changes on failure.
                while self.granules.len() > before {
                    // SAFETY: mapped by this call, handed to no one yet.
                    if unsafe { self.unmap_granule() }.is_err() {
                        break;
                    }
                }
                return Err(e);
            }
        }
        Ok(())
    }
    unsafe fn shrink_to(&mut self, bytes: usize) -> Result<()> {
        let keep = round_up(bytes, self.granularity)?;
        if keep >= self.mapped() {
            return Ok(());
        }
        self.driver.bind()?;
        while self.mapped() > keep {
            // SAFETY: the caller's contract: nothing uses the memory past `keep`.
            unsafe { self.unmap_granule() }?;
        }
        Ok(())
    }
}

impl<D: Driver> Drop for GpuGrowable<D> {
    fn drop(&mut self) {
        if self.driver.bind().is_err() {
            return; // leaked: without the context nothing can be unmapped
        }
        while !self.granules.is_empty() {
            // SAFETY: the range's owner is gone, and with it every user of its memory.
            if unsafe { self.unmap_granule() }.is_err() {
                return; // leaked rather than freed while mapped
            }
        }
        // SAFETY: the whole reservation, with nothing mapped any more.
        let _ = unsafe { D::Vmm::free_addresses(&self.driver, self.base, self.reserved) };
    }
}

//! HIP's virtual memory management calls ([`VmmCalls`]): `hipMemAddressReserve`,
//! `hipMemAddressFree`, `hipMemCreate`, `hipMemRelease`, `hipMemMap`,
//! `hipMemUnmap`, `hipMemSetAccess`, `hipMemGetAllocationGranularity`, and
//! `hipDeviceAttributeVirtualMemoryManagementSupported`. Optional symbols: a
//! runtime without them reports no support, and the pool keeps plain
//! segments. HIP's allocation properties take one handle type (CUDA's take
//! a mask) and have no fabric handles; gpuport asks for none.

use std::ffi::{c_int, c_void};

use super::info::attribute;
use super::sys::{self, attr};
use super::{check, dptr, HipDriver};
use crate::backend::gpu::VmmCalls;
use crate::error::{Error, Result};

/// HIP's virtual memory management calls.
pub struct HipVmm;

fn device_id(ordinal: usize) -> Result<c_int> {
    c_int::try_from(ordinal).map_err(|e| Error::InvalidArgument { name: "device", reason: e.to_string() })
}

/// Pinned device memory of device `ordinal`, with no shareable handle.
fn properties(ordinal: usize) -> Result<sys::hipMemAllocationProp> {
    Ok(sys::hipMemAllocationProp {
        type_: sys::hipMemAllocationTypePinned,
        requested_handle_type: sys::hipMemHandleTypeNone,
        location: sys::hipMemLocation { type_: sys::hipMemLocationTypeDevice, id: device_id(ordinal)? },
        win32_handle_meta_data: std::ptr::null_mut(),
        alloc_flags: [0; 2],
        usage: 0,
    })
}

/// The handle as the `u64` the generic core keeps, and back.
fn to_u64(handle: sys::hipMemGenericAllocationHandle_t) -> u64 {
    handle as u64
}
fn from_u64(handle: u64) -> sys::hipMemGenericAllocationHandle_t {
    // Every handle came from `to_u64` of a pointer: it fits a usize.
    usize::try_from(handle).unwrap_or(0) as *mut c_void
}

// SAFETY: each method makes the HIP call its name says and reports failure
// as an error; allocations are pinned device memory without shareable handles.
unsafe impl VmmCalls<HipDriver> for HipVmm {
    fn supported(d: &HipDriver, ordinal: usize) -> Result<bool> {
        let api = d.api();
        let all = api.hipMemAddressReserve.is_some()
            && api.hipMemAddressFree.is_some()
            && api.hipMemCreate.is_some()
            && api.hipMemRelease.is_some()
            && api.hipMemMap.is_some()
            && api.hipMemUnmap.is_some()
            && api.hipMemSetAccess.is_some()
            && api.hipMemGetAllocationGranularity.is_some();
        Ok(all && attribute(d.rt, device_id(ordinal)?, attr::VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED)? != 0)
    }

    fn granularity(d: &HipDriver, ordinal: usize) -> Result<usize> {
        let f = d
            .api()
            .hipMemGetAllocationGranularity
            .ok_or_else(|| d.missing_function("hipMemGetAllocationGranularity", "growable ranges"))?;
        let prop = properties(ordinal)?;
        let mut granularity = 0usize;
        // SAFETY: `prop` is a valid description; the call writes one size_t.
        check("hipMemGetAllocationGranularity", unsafe {
            f(&mut granularity, &prop, sys::hipMemAllocationGranularityRecommended)
        })?;
        Ok(granularity)
    }

    unsafe fn reserve(d: &HipDriver, bytes: usize, align: usize) -> Result<u64> {
        let f = d
            .api()
            .hipMemAddressReserve
            .ok_or_else(|| d.missing_function("hipMemAddressReserve", "growable ranges"))?;
        let mut ptr: *mut c_void = std::ptr::null_mut();
        // SAFETY: the caller's contract; no fixed address, flags must be 0.
        check("hipMemAddressReserve", unsafe { f(&mut ptr, bytes, align, std::ptr::null_mut(), 0) })?;
        Ok(ptr as u64)
    }

    unsafe fn free_addresses(d: &HipDriver, ptr: u64, bytes: usize) -> Result<()> {
        let f = d.api().hipMemAddressFree.ok_or_else(|| d.missing_function("hipMemAddressFree", "growable ranges"))?;
        // SAFETY: the caller's contract: a whole reservation, nothing mapped.
        check("hipMemAddressFree", unsafe { f(dptr(ptr), bytes) })
    }

    unsafe fn create(d: &HipDriver, ordinal: usize, bytes: usize) -> Result<u64> {
        let f = d.api().hipMemCreate.ok_or_else(|| d.missing_function("hipMemCreate", "growable ranges"))?;
        let prop = properties(ordinal)?;
        let mut handle: sys::hipMemGenericAllocationHandle_t = std::ptr::null_mut();
        // SAFETY: the caller's contract (a granule multiple); flags must be 0.
        check("hipMemCreate", unsafe { f(&mut handle, bytes, &prop, 0) })?;
        Ok(to_u64(handle))
    }

    unsafe fn release(d: &HipDriver, handle: u64) -> Result<()> {
        let f = d.api().hipMemRelease.ok_or_else(|| d.missing_function("hipMemRelease", "growable ranges"))?;
        // SAFETY: the caller's contract: a live handle, released once.
        check("hipMemRelease", unsafe { f(from_u64(handle)) })
    }

    unsafe fn map(d: &HipDriver, ptr: u64, bytes: usize, handle: u64) -> Result<()> {
        let f = d.api().hipMemMap.ok_or_else(|| d.missing_function("hipMemMap", "growable ranges"))?;
        // SAFETY: the caller's contract; offset and flags must be 0.
        check("hipMemMap", unsafe { f(dptr(ptr), bytes, 0, from_u64(handle), 0) })
    }

    unsafe fn set_access(d: &HipDriver, ptr: u64, bytes: usize, ordinal: usize) -> Result<()> {
        let f = d.api().hipMemSetAccess.ok_or_else(|| d.missing_function("hipMemSetAccess", "growable ranges"))?;
        let desc = sys::hipMemAccessDesc {
            location: sys::hipMemLocation { type_: sys::hipMemLocationTypeDevice, id: device_id(ordinal)? },
            flags: sys::hipMemAccessFlagsProtReadWrite,
        };
        // SAFETY: the caller's contract: a mapped range; one descriptor.
        check("hipMemSetAccess", unsafe { f(dptr(ptr), bytes, &desc, 1) })
    }

    unsafe fn unmap(d: &HipDriver, ptr: u64, bytes: usize) -> Result<()> {
        let f = d.api().hipMemUnmap.ok_or_else(|| d.missing_function("hipMemUnmap", "growable ranges"))?;
        // SAFETY: the caller's contract: one whole mapping nothing uses.
        check("hipMemUnmap", unsafe { f(dptr(ptr), bytes) })
    }
}

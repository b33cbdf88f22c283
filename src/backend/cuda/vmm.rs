//! CUDA's virtual memory management calls ([`VmmCalls`]): `cuMemAddressReserve`,
//! `cuMemAddressFree`, `cuMemCreate`, `cuMemRelease`, `cuMemMap`,
//! `cuMemUnmap`, `cuMemSetAccess`, `cuMemGetAllocationGranularity` (CUDA
//! 10.2 and later), and the device's
//! `CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED`. Pinned device
//! memory with no shareable handle type; never multicast objects.

use cudarc::driver::result as cu;
use cudarc::driver::sys;

use super::info::attribute;
use super::{check, CudaDriver};
use crate::backend::gpu::{self, VmmCalls};
use crate::error::{Error, Result};

/// CUDA's virtual memory management calls.
pub struct CudaVmm;

fn status(call: &'static str, s: sys::CUresult) -> Result<()> {
    gpu::check::<CudaDriver>(call, s)
}

fn device_id(ordinal: usize) -> Result<i32> {
    i32::try_from(ordinal).map_err(|e| Error::InvalidArgument { name: "device", reason: e.to_string() })
}

/// Device memory of device `ordinal`, pinned, with no shareable handle.
fn properties(ordinal: usize) -> Result<sys::CUmemAllocationProp> {
    // SAFETY: a plain C struct of integers, enums whose 0 is valid and a
    // null pointer: all zeros is a valid value (the documented default).
    let mut prop: sys::CUmemAllocationProp = unsafe { std::mem::zeroed() };
    prop.type_ = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.requestedHandleTypes = sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_NONE;
    prop.location =
        sys::CUmemLocation { type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE, id: device_id(ordinal)? };
    Ok(prop)
}

// SAFETY: each method makes the CUDA call its name says and reports failure
// as an error; allocations are pinned device memory without shareable handles.
unsafe impl VmmCalls<CudaDriver> for CudaVmm {
    fn supported(_: &CudaDriver, ordinal: usize) -> Result<bool> {
        let dev = check("cuDeviceGet", cu::device::get(device_id(ordinal)?))?;
        let attr = sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED;
        Ok(attribute(dev, attr)? != 0)
    }

    fn granularity(_: &CudaDriver, ordinal: usize) -> Result<usize> {
        let prop = properties(ordinal)?;
        let mut granularity = 0usize;
        let option = sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_RECOMMENDED;
        // SAFETY: `prop` is a valid description; the call writes one size_t.
        status("cuMemGetAllocationGranularity", unsafe {
            sys::cuMemGetAllocationGranularity(&mut granularity, &prop, option)
        })?;
        Ok(granularity)
    }

    unsafe fn reserve(_: &CudaDriver, bytes: usize, align: usize) -> Result<u64> {
        let mut ptr: sys::CUdeviceptr = 0;
        // SAFETY: the caller's contract; no fixed address, flags must be 0.
        status("cuMemAddressReserve", unsafe { sys::cuMemAddressReserve(&mut ptr, bytes, align, 0, 0) })?;
        Ok(ptr)
    }

    unsafe fn free_addresses(_: &CudaDriver, ptr: u64, bytes: usize) -> Result<()> {
        // SAFETY: the caller's contract: a whole reservation, nothing mapped.
        status("cuMemAddressFree", unsafe { sys::cuMemAddressFree(ptr, bytes) })
    }

    unsafe fn create(_: &CudaDriver, ordinal: usize, bytes: usize) -> Result<u64> {
        let prop = properties(ordinal)?;
        let mut handle: sys::CUmemGenericAllocationHandle = 0;
        // SAFETY: the caller's contract (a granule multiple); flags must be 0.
        status("cuMemCreate", unsafe { sys::cuMemCreate(&mut handle, bytes, &prop, 0) })?;
        Ok(handle)
    }

    unsafe fn release(_: &CudaDriver, handle: u64) -> Result<()> {
        // SAFETY: the caller's contract: a live handle, released once.
        status("cuMemRelease", unsafe { sys::cuMemRelease(handle) })
    }

    unsafe fn map(_: &CudaDriver, ptr: u64, bytes: usize, handle: u64) -> Result<()> {
        // SAFETY: the caller's contract; offset and flags must be 0.
        status("cuMemMap", unsafe { sys::cuMemMap(ptr, bytes, 0, handle, 0) })
    }

    unsafe fn set_access(_: &CudaDriver, ptr: u64, bytes: usize, ordinal: usize) -> Result<()> {
        let desc = sys::CUmemAccessDesc {
            location: sys::CUmemLocation {
                type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
                id: device_id(ordinal)?,
            },
            flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
        };
        // SAFETY: the caller's contract: a mapped range; one descriptor.
        status("cuMemSetAccess", unsafe { sys::cuMemSetAccess(ptr, bytes, &desc, 1) })
    }

    unsafe fn unmap(_: &CudaDriver, ptr: u64, bytes: usize) -> Result<()> {
        // SAFETY: the caller's contract: one whole mapping nothing uses.
        status("cuMemUnmap", unsafe { sys::cuMemUnmap(ptr, bytes) })
    }
}

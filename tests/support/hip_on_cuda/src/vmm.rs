//! Virtual memory management: `hipMemAddressReserve`, `hipMemAddressFree`,
//! `hipMemCreate`, `hipMemRelease`, `hipMemMap`, `hipMemUnmap`,
//! `hipMemSetAccess`, `hipMemGetAllocationGranularity`, on their `cuMem*`
//! twins. HIP's `hipMemAllocationProp` has one handle type where CUDA's has
//! a mask (the values of "none" and a POSIX descriptor agree, 0 and 1) and
//! 4 bytes fewer at its end; its handles are pointers where CUDA's are
//! 64-bit integers, passed through as the same bits.

use std::ffi::{c_int, c_uchar, c_ushort, c_void};

use cudarc::driver::sys as cu;

use super::{bind, guard, hip, try_hip, HipError, HipMemLocation, HIP_ERROR_INVALID_VALUE, HIP_SUCCESS};

/// `hipMemAllocationProp` (ROCm 6 and 7 layout).
#[repr(C)]
pub struct HipMemAllocationProp {
    type_: c_int,
    requested_handle_type: c_int,
    location: HipMemLocation,
    win32_handle_meta_data: *mut c_void,
    compression_type: c_uchar,
    gpu_direct_rdma_capable: c_uchar,
    usage: c_ushort,
}

/// `hipMemAccessDesc`.
#[repr(C)]
pub struct HipMemAccessDesc {
    location: HipMemLocation,
    flags: c_int,
}

fn location(l: HipMemLocation) -> cu::CUmemLocation {
    use cu::CUmemLocationType::*;
    // HIP's location types take CUDA's numbers; anything else is invalid (0).
    let type_ = match l.type_ {
        1 => CU_MEM_LOCATION_TYPE_DEVICE,
        2 => CU_MEM_LOCATION_TYPE_HOST,
        _ => CU_MEM_LOCATION_TYPE_INVALID,
    };
    cu::CUmemLocation { type_, id: l.id }
}

/// CUDA's properties for HIP's.
///
/// # Safety
/// `prop` must be readable.
unsafe fn cuda_prop(prop: *const HipMemAllocationProp) -> cu::CUmemAllocationProp {
    // SAFETY: the caller's contract.
    let p = unsafe { &*prop };
    // SAFETY: all zeros is a valid CUmemAllocationProp (integers, enums with a 0, a null pointer).
    let mut c: cu::CUmemAllocationProp = unsafe { std::mem::zeroed() };
    c.type_ = match p.type_ {
        1 => cu::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED,
        _ => cu::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_INVALID,
    };
    c.requestedHandleTypes = cu::CUmemAllocationHandleType_enum(p.requested_handle_type as u32);
    c.location = location(p.location);
    c.win32HandleMetaData = p.win32_handle_meta_data;
    c.allocFlags.compressionType = p.compression_type;
    c.allocFlags.gpuDirectRDMACapable = p.gpu_direct_rdma_capable;
    c.allocFlags.usage = p.usage;
    c
}

/// `hipError_t hipMemGetAllocationGranularity(size_t*, const hipMemAllocationProp*, hipMemAllocationGranularity_flags)`.
///
/// # Safety
/// `granularity` writable, `prop` readable.
#[no_mangle]
pub unsafe extern "C" fn hipMemGetAllocationGranularity(
    granularity: *mut usize,
    prop: *const HipMemAllocationProp,
    option: c_int,
) -> HipError {
    guard(|| {
        if granularity.is_null() || prop.is_null() {
            return HIP_ERROR_INVALID_VALUE;
        }
        try_hip!(bind());
        // SAFETY: checked non-null.
        let c = unsafe { cuda_prop(prop) };
        let option = if option == 1 {
            cu::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_RECOMMENDED
        } else {
            cu::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM
        };
        // SAFETY: checked non-null; `c` is a valid description.
        hip(unsafe { cu::cuMemGetAllocationGranularity(granularity, &c, option) })
    })
}

/// `hipError_t hipMemAddressReserve(void** ptr, size_t size, size_t alignment, void* addr, unsigned long long flags)`.
///
/// # Safety
/// `ptr` writable.
#[no_mangle]
pub unsafe extern "C" fn hipMemAddressReserve(
    ptr: *mut *mut c_void,
    size: usize,
    alignment: usize,
    addr: *mut c_void,
    flags: u64,
) -> HipError {
    guard(|| {
        if ptr.is_null() {
            return HIP_ERROR_INVALID_VALUE;
        }
        try_hip!(bind());
        let mut out: cu::CUdeviceptr = 0;
        // SAFETY: writes one address.
        try_hip!(hip(unsafe { cu::cuMemAddressReserve(&mut out, size, alignment, addr as usize as u64, flags) }));
        // SAFETY: checked non-null.
        unsafe { *ptr = out as usize as *mut c_void };
        HIP_SUCCESS
    })
}

/// `hipError_t hipMemAddressFree(void* devPtr, size_t size)`.
#[no_mangle]
pub extern "C" fn hipMemAddressFree(ptr: *mut c_void, size: usize) -> HipError {
    guard(|| {
        try_hip!(bind());
        // SAFETY: the driver checks that this is a reservation.
        hip(unsafe { cu::cuMemAddressFree(ptr as usize as u64, size) })
    })
}

/// `hipError_t hipMemCreate(hipMemGenericAllocationHandle_t*, size_t, const hipMemAllocationProp*, unsigned long long)`.
///
/// # Safety
/// `handle` writable, `prop` readable.
#[no_mangle]
pub unsafe extern "C" fn hipMemCreate(
    handle: *mut *mut c_void,
    size: usize,
    prop: *const HipMemAllocationProp,
    flags: u64,
) -> HipError {
    guard(|| {
        if handle.is_null() || prop.is_null() {
            return HIP_ERROR_INVALID_VALUE;
        }
        try_hip!(bind());
        // SAFETY: checked non-null.
        let c = unsafe { cuda_prop(prop) };
        let mut h: cu::CUmemGenericAllocationHandle = 0;
        // SAFETY: writes one handle; `c` is a valid description.
        try_hip!(hip(unsafe { cu::cuMemCreate(&mut h, size, &c, flags) }));
        // SAFETY: checked non-null.
        unsafe { *handle = h as usize as *mut c_void };
        HIP_SUCCESS
    })
}

/// `hipError_t hipMemRelease(hipMemGenericAllocationHandle_t)`.
#[no_mangle]
pub extern "C" fn hipMemRelease(handle: *mut c_void) -> HipError {
    guard(|| {
        try_hip!(bind());
        // SAFETY: the driver checks the handle.
        hip(unsafe { cu::cuMemRelease(handle as usize as u64) })
    })
}

/// `hipError_t hipMemMap(void* ptr, size_t size, size_t offset, hipMemGenericAllocationHandle_t, unsigned long long)`.
#[no_mangle]
pub extern "C" fn hipMemMap(ptr: *mut c_void, size: usize, offset: usize, handle: *mut c_void, flags: u64) -> HipError {
    guard(|| {
        try_hip!(bind());
        // SAFETY: the driver checks the range and the handle.
        hip(unsafe { cu::cuMemMap(ptr as usize as u64, size, offset, handle as usize as u64, flags) })
    })
}

/// `hipError_t hipMemUnmap(void* ptr, size_t size)`.
#[no_mangle]
pub extern "C" fn hipMemUnmap(ptr: *mut c_void, size: usize) -> HipError {
    guard(|| {
        try_hip!(bind());
        // SAFETY: the driver checks the range.
        hip(unsafe { cu::cuMemUnmap(ptr as usize as u64, size) })
    })
}

/// `hipError_t hipMemSetAccess(void* ptr, size_t size, const hipMemAccessDesc* desc, size_t count)`.
///
/// # Safety
/// `desc` must point to `count` readable descriptors.
#[no_mangle]
pub unsafe extern "C" fn hipMemSetAccess(
    ptr: *mut c_void,
    size: usize,
    desc: *const HipMemAccessDesc,
    count: usize,
) -> HipError {
    guard(|| {
        if desc.is_null() && count != 0 {
            return HIP_ERROR_INVALID_VALUE;
        }
        try_hip!(bind());
        let descs: Vec<cu::CUmemAccessDesc> = (0..count)
            .map(|i| {
                // SAFETY: the caller's contract: `count` readable descriptors.
                let d = unsafe { &*desc.add(i) };
                cu::CUmemAccessDesc {
                    location: location(d.location),
                    // HIP's access flags take CUDA's numbers (0, 1, 3).
                    flags: match d.flags {
                        1 => cu::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READ,
                        3 => cu::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
                        _ => cu::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_NONE,
                    },
                }
            })
            .collect();
        // SAFETY: `descs` holds `count` descriptors.
        hip(unsafe { cu::cuMemSetAccess(ptr as usize as u64, size, descs.as_ptr(), count) })
    })
}

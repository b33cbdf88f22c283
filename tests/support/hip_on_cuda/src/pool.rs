//! Stream-ordered memory pools (`hipMemPoolCreate`, `hipMallocFromPoolAsync`
//! and the pool attributes) on their `cuMemPool*` twins, the pools whose
//! memory other processes import (one exported descriptor per pool, owned
//! by the pool, as ROCm does), and HIP's IPC memory handles. A module of
//! its own so that lib.rs stays under 800 lines; the functions are the
//! ones lib.rs held before, unchanged.

use super::*;

// ---- stream-ordered memory pools --------------------------------------------------------

/// The CUDA attribute for a `hipMemPoolAttr` (HIP took CUDA's numbering: 1 to 8).
fn cuda_pool_attribute(attr: c_int) -> Option<P> {
    Some(match attr {
        1 => P::CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES,
        2 => P::CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC,
        3 => P::CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES,
        4 => P::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
        5 => P::CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT,
        6 => P::CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH,
        7 => P::CU_MEMPOOL_ATTR_USED_MEM_CURRENT,
        8 => P::CU_MEMPOOL_ATTR_USED_MEM_HIGH,
        _ => return None,
    })
}

/// `hipError_t hipDeviceGetDefaultMemPool(hipMemPool_t*, int device)`.
///
/// # Safety
/// `pool` must be writable.
#[no_mangle]
pub unsafe extern "C" fn hipDeviceGetDefaultMemPool(pool: *mut cu::CUmemoryPool, device: c_int) -> HipError {
    guard(|| {
        try_hip!(init());
        let mut dev = 0;
        // SAFETY: writes one CUdevice; an invalid ordinal is an error.
        try_hip!(hip(unsafe { cu::cuDeviceGet(&mut dev, device) }));
        // SAFETY: the caller passes a writable handle.
        hip(unsafe { cu::cuDeviceGetDefaultMemPool(pool, dev) })
    })
}

/// `hipError_t hipMemPoolSetAttribute(hipMemPool_t, hipMemPoolAttr, void* value)`;
/// an attribute outside HIP's enum is `hipErrorInvalidValue`.
///
/// # Safety
/// `pool` must be live; `value` must point to the attribute's type (int or uint64_t).
#[no_mangle]
pub unsafe extern "C" fn hipMemPoolSetAttribute(pool: cu::CUmemoryPool, attr: c_int, value: *mut c_void) -> HipError {
    guard(|| {
        let Some(cuda_attr) = cuda_pool_attribute(attr) else { return HIP_ERROR_INVALID_VALUE };
        try_hip!(bind());
        // SAFETY: as documented for the caller; CUDA's attribute has the same value type.
        hip(unsafe { cu::cuMemPoolSetAttribute(pool, cuda_attr, value) })
    })
}

/// `hipError_t hipMemPoolGetAttribute(hipMemPool_t, hipMemPoolAttr, void* value)`;
/// an attribute outside HIP's enum is `hipErrorInvalidValue`.
///
/// # Safety
/// `pool` must be live; `value` must be writable as the attribute's type.
#[no_mangle]
pub unsafe extern "C" fn hipMemPoolGetAttribute(pool: cu::CUmemoryPool, attr: c_int, value: *mut c_void) -> HipError {
    guard(|| {
        let Some(cuda_attr) = cuda_pool_attribute(attr) else { return HIP_ERROR_INVALID_VALUE };
        try_hip!(bind());
        // SAFETY: as documented for the caller; CUDA's attribute has the same value type.
        hip(unsafe { cu::cuMemPoolGetAttribute(pool, cuda_attr, value) })
    })
}

/// `hipError_t hipMemPoolTrimTo(hipMemPool_t, size_t min_bytes_to_hold)`.
///
/// # Safety
/// `pool` must be live.
#[no_mangle]
pub unsafe extern "C" fn hipMemPoolTrimTo(pool: cu::CUmemoryPool, keep: usize) -> HipError {
    guard(|| {
        try_hip!(bind());
        // SAFETY: as documented for the caller.
        hip(unsafe { cu::cuMemPoolTrimTo(pool, keep) })
    })
}

// ---- pools of the caller's own, and their IPC -------------------------------------------
//
// HIP's structs have CUDA's layouts and HIP's enums CUDA's values for what is
// used here (pinned = 1, POSIX fd = 1, device location = 1, read-write = 3);
// what differs: a HIP location names a device by ordinal, a CUDA one by
// CUdevice; HIP's flags are `unsigned int`, CUDA's `unsigned long long`; and
// ROCm returns one descriptor per pool, which the pool owns, where CUDA makes
// a new one per export that the caller owns. The shim does as ROCm does.

/// `hipMemAccessDesc`: `{ hipMemLocation location; hipMemAccessFlags flags; }`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct HipMemAccessDesc {
    location: HipMemLocation,
    flags: c_int,
}

/// `hipMemPoolProps` as ROCm 6+ declares it (`maxSize`, then `reserved[56]`;
/// ROCm 5 has `reserved[64]` there: same size and offsets).
#[repr(C)]
pub struct HipMemPoolProps {
    alloc_type: c_int,
    handle_types: c_int,
    location: HipMemLocation,
    win32_security_attributes: *mut c_void,
    max_size: usize,
    reserved: [u8; 56],
}

/// `hipMemLocationTypeDevice`, `hipMemAllocationTypePinned`: 1 in HIP and CUDA.
const HIP_MEM_LOCATION_TYPE_DEVICE: c_int = 1;
const HIP_MEM_ALLOCATION_TYPE_PINNED: c_int = 1;

/// A HIP device location as CUDA's (the ordinal's CUdevice).
fn cuda_location(location: &HipMemLocation) -> Result<cu::CUmemLocation, HipError> {
    if location.type_ != HIP_MEM_LOCATION_TYPE_DEVICE {
        return Err(HIP_ERROR_INVALID_VALUE);
    }
    try_ok(init())?;
    let mut dev = 0;
    // SAFETY: writes one CUdevice; an invalid ordinal is an error.
    try_ok(hip(unsafe { cu::cuDeviceGet(&mut dev, location.id) }))?;
    Ok(cu::CUmemLocation { type_: cu::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE, id: dev })
}

/// `hipMemAccessFlags` as CUDA's (none 0, read 1, read-write 3 in both).
fn cuda_access(flags: c_int) -> Option<cu::CUmemAccess_flags> {
    use cu::CUmemAccess_flags::*;
    Some(match flags {
        0 => CU_MEM_ACCESS_FLAGS_PROT_NONE,
        1 => CU_MEM_ACCESS_FLAGS_PROT_READ,
        3 => CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
        _ => return None,
    })
}

/// The descriptor each exported pool was given (ROCm: one per pool, closed with it).
fn exported_pools() -> &'static Mutex<HashMap<usize, c_int>> {
    static EXPORTED: OnceLock<Mutex<HashMap<usize, c_int>>> = OnceLock::new();
    EXPORTED.get_or_init(Default::default)
}

/// `hipError_t hipMemPoolCreate(hipMemPool_t*, const hipMemPoolProps*)`: `cuMemPoolCreate`
/// with the props translated (allocation type, handle types, device location, maxSize).
///
/// # Safety
/// `pool` must be writable; `props` readable.
#[no_mangle]
pub unsafe extern "C" fn hipMemPoolCreate(pool: *mut cu::CUmemoryPool, props: *const HipMemPoolProps) -> HipError {
    guard(|| {
        if pool.is_null() || props.is_null() {
            return HIP_ERROR_INVALID_VALUE;
        }
        // SAFETY: checked non-null; the caller passes a readable struct.
        let props = unsafe { &*props };
        if props.alloc_type != HIP_MEM_ALLOCATION_TYPE_PINNED {
            return HIP_ERROR_INVALID_VALUE;
        }
        let location = match cuda_location(&props.location) {
            Ok(l) => l,
            Err(e) => return e,
        };
        try_hip!(bind());
        // SAFETY: CUmemPoolProps is a C struct for which all zero is valid
        // (and what the driver requires of the fields not set below).
        let mut cuda: cu::CUmemPoolProps = unsafe { std::mem::zeroed() };
        cuda.allocType = cu::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
        cuda.handleTypes = cu::CUmemAllocationHandleType(props.handle_types as u32);
        cuda.location = location;
        cuda.win32SecurityAttributes = props.win32_security_attributes;
        cuda.maxSize = props.max_size;
        // SAFETY: the caller passes a writable handle; `cuda` is read during the call.
        hip(unsafe { cu::cuMemPoolCreate(pool, &cuda) })
    })
}

/// `hipError_t hipMemPoolDestroy(hipMemPool_t)`; closes the pool's exported descriptor, as ROCm does.
///
/// # Safety
/// `pool` must be live, and not used after.
#[no_mangle]
pub unsafe extern "C" fn hipMemPoolDestroy(pool: cu::CUmemoryPool) -> HipError {
    guard(|| {
        try_hip!(bind());
        // SAFETY: as documented for the caller.
        let r = hip(unsafe { cu::cuMemPoolDestroy(pool) });
        if r == HIP_SUCCESS {
            let fd = exported_pools().lock().unwrap_or_else(|p| p.into_inner()).remove(&(pool as usize));
            if let Some(fd) = fd {
                // SAFETY: the descriptor cuMemPoolExportToShareableHandle gave this pool, owned here.
                drop(unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) });
            }
        }
        r
    })
}

/// `hipError_t hipMallocFromPoolAsync(void**, size_t, hipMemPool_t, hipStream_t)`.
///
/// # Safety
/// `ptr` must be writable; `pool` live; `stream` a live stream or null.
#[no_mangle]
pub unsafe extern "C" fn hipMallocFromPoolAsync(
    ptr: *mut *mut c_void,
    size: usize,
    pool: cu::CUmemoryPool,
    stream: cu::CUstream,
) -> HipError {
    guard(|| {
        if ptr.is_null() {
            return HIP_ERROR_INVALID_VALUE;
        }
        try_hip!(bind());
        let mut d = 0;
        // SAFETY: writes one device pointer; pool and stream are the caller's.
        try_hip!(hip(unsafe { cu::cuMemAllocFromPoolAsync(&mut d, size, pool, stream) }));
        // SAFETY: checked non-null.
        unsafe { *ptr = d as usize as *mut c_void };
        HIP_SUCCESS
    })
}

/// `hipError_t hipMemPoolExportToShareableHandle(void*, hipMemPool_t, hipMemAllocationHandleType,
/// unsigned flags)`: writes the pool's one descriptor (made by the first export, kept by the pool).
///
/// # Safety
/// `handle` must be writable as an int; `pool` live.
#[no_mangle]
pub unsafe extern "C" fn hipMemPoolExportToShareableHandle(
    handle: *mut c_void,
    pool: cu::CUmemoryPool,
    handle_type: c_int,
    flags: c_uint,
) -> HipError {
    guard(|| {
        if handle.is_null() {
            return HIP_ERROR_INVALID_VALUE;
        }
        try_hip!(bind());
        let mut exported = exported_pools().lock().unwrap_or_else(|p| p.into_inner());
        let fd = match exported.get(&(pool as usize)) {
            Some(&fd) => fd,
            None => {
                let mut fd: c_int = -1;
                // SAFETY: for a POSIX descriptor the driver writes one int; the pool is the caller's.
                try_hip!(hip(unsafe {
                    cu::cuMemPoolExportToShareableHandle(
                        &mut fd as *mut c_int as *mut c_void,
                        pool,
                        cu::CUmemAllocationHandleType(handle_type as u32),
                        flags as u64,
                    )
                }));
                exported.insert(pool as usize, fd);
                fd
            }
        };
        // SAFETY: checked non-null; the caller passes a writable int.
        unsafe { *(handle as *mut c_int) = fd };
        HIP_SUCCESS
    })
}

/// `hipError_t hipMemPoolImportFromShareableHandle(hipMemPool_t*, void* handle,
/// hipMemAllocationHandleType, unsigned flags)`: the descriptor's value cast to a pointer, as in CUDA.
///
/// # Safety
/// `pool` must be writable; `handle` an open pool descriptor (as a pointer value).
#[no_mangle]
pub unsafe extern "C" fn hipMemPoolImportFromShareableHandle(
    pool: *mut cu::CUmemoryPool,
    handle: *mut c_void,
    handle_type: c_int,
    flags: c_uint,
) -> HipError {
    guard(|| {
        try_hip!(bind());
        // SAFETY: as documented for the caller; the driver does not take the descriptor.
        hip(unsafe {
            cu::cuMemPoolImportFromShareableHandle(
                pool,
                handle,
                cu::CUmemAllocationHandleType(handle_type as u32),
                flags as u64,
            )
        })
    })
}

/// `hipError_t hipMemPoolExportPointer(hipMemPoolPtrExportData*, void*)`; both export data are 64 bytes.
///
/// # Safety
/// `data` must be writable.
#[no_mangle]
pub unsafe extern "C" fn hipMemPoolExportPointer(data: *mut cu::CUmemPoolPtrExportData, ptr: *mut c_void) -> HipError {
    guard(|| {
        try_hip!(bind());
        // SAFETY: `hipMemPoolPtrExportData` and `CUmemPoolPtrExportData` are both 64 bytes; writable (the caller's).
        hip(unsafe { cu::cuMemPoolExportPointer(data, ptr as usize as u64) })
    })
}

/// `hipError_t hipMemPoolImportPointer(void**, hipMemPool_t, hipMemPoolPtrExportData*)`.
///
/// # Safety
/// `ptr` must be writable; `pool` an imported pool; `data` 64 readable bytes.
#[no_mangle]
pub unsafe extern "C" fn hipMemPoolImportPointer(
    ptr: *mut *mut c_void,
    pool: cu::CUmemoryPool,
    data: *mut cu::CUmemPoolPtrExportData,
) -> HipError {
    guard(|| {
        if ptr.is_null() {
            return HIP_ERROR_INVALID_VALUE;
        }
        try_hip!(bind());
        let mut d = 0;
        // SAFETY: as documented for the caller; writes one device pointer.
        try_hip!(hip(unsafe { cu::cuMemPoolImportPointer(&mut d, pool, data) }));
        // SAFETY: checked non-null.
        unsafe { *ptr = d as usize as *mut c_void };
        HIP_SUCCESS
    })
}

/// `hipError_t hipMemPoolGetAccess(hipMemAccessFlags*, hipMemPool_t, hipMemLocation*)`.
///
/// # Safety
/// `flags` must be writable as an int; `location` readable; `pool` live.
#[no_mangle]
pub unsafe extern "C" fn hipMemPoolGetAccess(
    flags: *mut c_int,
    pool: cu::CUmemoryPool,
    location: *mut HipMemLocation,
) -> HipError {
    guard(|| {
        if flags.is_null() || location.is_null() {
            return HIP_ERROR_INVALID_VALUE;
        }
        // SAFETY: checked non-null; the caller passes a readable location.
        let mut location = match cuda_location(unsafe { &*location }) {
            Ok(l) => l,
            Err(e) => return e,
        };
        try_hip!(bind());
        let mut access = cu::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_NONE;
        // SAFETY: writes one flags value; the pool is the caller's.
        try_hip!(hip(unsafe { cu::cuMemPoolGetAccess(&mut access, pool, &mut location) }));
        // SAFETY: checked non-null; HIP's flags have CUDA's values.
        unsafe { *flags = access as c_int };
        HIP_SUCCESS
    })
}

/// `hipError_t hipMemPoolSetAccess(hipMemPool_t, const hipMemAccessDesc*, size_t count)`.
///
/// # Safety
/// `descs` must point to `count` descriptors; `pool` live.
#[no_mangle]
pub unsafe extern "C" fn hipMemPoolSetAccess(
    pool: cu::CUmemoryPool,
    descs: *const HipMemAccessDesc,
    count: usize,
) -> HipError {
    guard(|| {
        if descs.is_null() && count > 0 {
            return HIP_ERROR_INVALID_VALUE;
        }
        let descs = if count == 0 {
            &[][..]
        } else {
            // SAFETY: checked non-null; the caller passes `count` descriptors.
            unsafe { std::slice::from_raw_parts(descs, count) }
        };
        let mut cuda = Vec::with_capacity(count);
        for d in descs {
            let (location, flags) = match (cuda_location(&d.location), cuda_access(d.flags)) {
                (Ok(l), Some(f)) => (l, f),
                (Err(e), _) => return e,
                (_, None) => return HIP_ERROR_INVALID_VALUE,
            };
            cuda.push(cu::CUmemAccessDesc { location, flags });
        }
        try_hip!(bind());
        // SAFETY: `cuda` holds `count` descriptors, read during the call; the pool is the caller's.
        hip(unsafe { cu::cuMemPoolSetAccess(pool, cuda.as_ptr(), cuda.len()) })
    })
}

// ---- IPC ----------------------------------------------------------------------------------

/// `hipIpcMemLazyEnablePeerAccess` of the ROCm 6+ headers this shim emulates
/// (0 before ROCm 6.0); `hipIpcOpenMemHandle` accepts no other flags, as ROCm's does.
const HIP_IPC_MEM_LAZY_ENABLE_PEER_ACCESS: c_uint = 1;

/// `hipError_t hipIpcGetMemHandle(hipIpcMemHandle_t*, void* devPtr)`; both handles are 64 bytes.
///
/// # Safety
/// `handle` must be writable.
#[no_mangle]
pub unsafe extern "C" fn hipIpcGetMemHandle(handle: *mut cu::CUipcMemHandle, ptr: *mut c_void) -> HipError {
    guard(|| {
        try_hip!(bind());
        // SAFETY: `hipIpcMemHandle_t` and `CUipcMemHandle` are both `char[64]`; the caller passes a writable one.
        hip(unsafe { cu::cuIpcGetMemHandle(handle, ptr as usize as u64) })
    })
}

/// `hipError_t hipIpcOpenMemHandle(void** devPtr, hipIpcMemHandle_t, unsigned flags)`:
/// `hipErrorInvalidValue` unless `flags` is ROCm 6's `hipIpcMemLazyEnablePeerAccess` (1).
///
/// # Safety
/// `dev_ptr` must be writable.
#[no_mangle]
pub unsafe extern "C" fn hipIpcOpenMemHandle(
    dev_ptr: *mut *mut c_void,
    handle: cu::CUipcMemHandle,
    flags: c_uint,
) -> HipError {
    guard(|| {
        if dev_ptr.is_null() || flags != HIP_IPC_MEM_LAZY_ENABLE_PEER_ACCESS {
            return HIP_ERROR_INVALID_VALUE;
        }
        try_hip!(bind());
        let mut d = 0;
        let lazy = cu::CUipcMem_flags::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS as c_uint;
        // SAFETY: writes one device pointer; a stale or foreign handle is an error.
        try_hip!(hip(unsafe { cu::cuIpcOpenMemHandle_v2(&mut d, handle, lazy) }));
        // SAFETY: checked non-null.
        unsafe { *dev_ptr = d as usize as *mut c_void };
        HIP_SUCCESS
    })
}

/// `hipError_t hipIpcCloseMemHandle(void* devPtr)`.
///
/// # Safety
/// `ptr` must come from `hipIpcOpenMemHandle`.
#[no_mangle]
pub unsafe extern "C" fn hipIpcCloseMemHandle(ptr: *mut c_void) -> HipError {
    guard(|| {
        try_hip!(bind());
        // SAFETY: as documented for the caller.
        hip(unsafe { cu::cuIpcCloseMemHandle(ptr as usize as u64) })
    })
}

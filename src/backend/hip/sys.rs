//! Hand-declared HIP runtime and hiprtc bindings, loaded at run time.
//!
//! # Why no crate
//! `hip-sys` and `hip-runtime-sys` declare `links = "amdhip64"` and link the
//! library at build time, so a binary built with `--features cuda,rocm`
//! would not even start on a machine without ROCm (docs/design.md#loading-vendor-libraries).
//! `cubecl-hip-sys` is bindgen output per HIP version and links too.
//! gpuport needs about fifty functions, so this file declares exactly those,
//! by hand, and resolves them with `libloading` when the backend is first
//! used. A missing library or symbol is an [`Error`](crate::Error), never a panic.
//!
//! # Where the declarations come from
//! Every signature, constant and enum value below is copied from the HIP
//! headers `hip/hip_runtime_api.h` and `hip/hiprtc.h`, checked against both
//! ROCm 5.2 (Debian 12's `libamdhip64-dev` 5.2.3, the version CI installs)
//! and the ROCm 7 headers (`ROCm/rocm-systems`, `include/hip/...`). The C
//! signatures of these calls and the values used here are the same in both;
//! `hipDeviceAttribute_t` kept its numbering from 5.2 to 7.x.
//!
//! `hipIpcMemLazyEnablePeerAccess` is the other exception: 0 through ROCm
//! 5.7, 1 from ROCm 6.0 (ROCm/HIP 8bb3011, "[ABI Break] changed
//! hipIpcMemLazyEnablePeerAccess flag value"), and `hipIpcOpenMemHandle`
//! rejects any other value with hipErrorInvalidValue in both (ROCm/clr,
//! `hip_memory.cpp`). [`ipc_open_flags`] picks it by runtime version.
//!
//! `hipDeviceProp_t` is the exception: its layout changed in ROCm 6.0 (the
//! `R0600` layout, exported as `hipGetDevicePropertiesR0600`). gpuport reads
//! only `gcnArchName` from it, through an oversized zeroed buffer and the
//! field's offset in each layout; see [`GCN_ARCH_NAME_OFFSET_R0600`].
//!
//! # Library search
//! [`HIP_SPEC`] and [`HIPRTC_SPEC`] give `crate::backend::library` the
//! names, the override variable and the pip wheel folders; it searches a
//! copy already loaded, `GPUPORT_HIP_LIBRARY` / `GPUPORT_HIPRTC_LIBRARY`
//! (the test shim uses them), wheels (`torch/lib`, TheRock's
//! `_rocm_sdk_core/lib`), the loader path, `$ROCM_PATH/lib`,
//! `$HIP_PATH/lib`, then `/opt/rocm/lib`, each with the unversioned name
//! and then `.so.7`, `.so.6`, `.so.5` (ROCm 7-only installs ship no
//! unversioned name: ROCm/TheRock#1204; Debian ships only `.so.5` without
//! the `-dev` package). The libraries are never unloaded: unloading ROCm
//! has crashed in its own teardown (ROCm/rocm-systems#4442).
#![allow(non_camel_case_types, non_snake_case, non_upper_case_globals)]

use std::ffi::{c_char, c_int, c_uint, c_void};

use libloading::Library;

// ---- types (hip_runtime_api.h, hiprtc.h) -------------------------------------------

/// `hipError_t`: a C enum, `int`-sized.
pub type hipError_t = c_int;
/// `hiprtcResult`: a C enum, `int`-sized.
pub type hiprtcResult = c_int;
/// `hipDevice_t`: `typedef int hipDevice_t;`.
pub type hipDevice_t = c_int;
/// `hipDeviceAttribute_t`: a C enum, `int`-sized.
pub type hipDeviceAttribute_t = c_int;
/// `hipDeviceptr_t`: `typedef void* hipDeviceptr_t;`.
pub type hipDeviceptr_t = *mut c_void;
/// `hipMemPoolAttr`: a C enum, `int`-sized.
pub type hipMemPoolAttr = c_int;

/// `HIP_IPC_HANDLE_SIZE`: bytes in an IPC memory handle.
pub const HIP_IPC_HANDLE_SIZE: usize = 64;

/// `hipIpcMemHandle_t`: `struct { char reserved[HIP_IPC_HANDLE_SIZE]; }`, passed by value
/// to `hipIpcOpenMemHandle`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct hipIpcMemHandle_t {
    /// The handle's opaque bytes.
    pub reserved: [c_char; HIP_IPC_HANDLE_SIZE],
}

/// `hipMemLocation`: `struct { hipMemLocationType type; int id; }`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct hipMemLocation {
    /// `hipMemLocationType` (a C enum): [`hipMemLocationTypeDevice`] for a GPU.
    pub type_: c_int,
    /// The device ordinal for [`hipMemLocationTypeDevice`].
    pub id: c_int,
}

/// `hipMemAccessDesc`: `struct { hipMemLocation location; hipMemAccessFlags flags; }`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct hipMemAccessDesc {
    /// The device whose access changes.
    pub location: hipMemLocation,
    /// `hipMemAccessFlags` (a C enum), e.g. [`hipMemAccessFlagsProtReadWrite`].
    pub flags: c_int,
}

/// `hipMemAllocationProp`: `struct { hipMemAllocationType type;
/// hipMemAllocationHandleType requestedHandleType; hipMemLocation location;
/// void* win32HandleMetaData; struct { unsigned char compressionType,
/// gpuDirectRDMACapable; unsigned short usage; } allocFlags; }` (32 bytes;
/// CUDA's twin has 4 reserved bytes more at the end, padding here). The
/// handle type is one value, not CUDA's mask, and HIP has no fabric handles.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct hipMemAllocationProp {
    /// `hipMemAllocationType`: [`hipMemAllocationTypePinned`].
    pub type_: c_int,
    /// `hipMemAllocationHandleType`: [`hipMemHandleTypeNone`].
    pub requested_handle_type: c_int,
    /// Where the memory lives.
    pub location: hipMemLocation,
    /// Windows only; null.
    pub win32_handle_meta_data: *mut c_void,
    /// `allocFlags.compressionType`, `gpuDirectRDMACapable`; 0.
    pub alloc_flags: [u8; 2],
    /// `allocFlags.usage`; 0.
    pub usage: u16,
}

/// `hipMemHandleTypeNone`.
pub const hipMemHandleTypeNone: c_int = 0;
/// `hipMemAllocationGranularityRecommended`.
pub const hipMemAllocationGranularityRecommended: c_int = 1;
/// `hipMemGenericAllocationHandle_t`: an opaque pointer.
pub type hipMemGenericAllocationHandle_t = *mut c_void;

/// `hipMemPoolProps`. ROCm 5.2 declares `allocType`, `handleTypes`,
/// `location`, `void* win32SecurityAttributes` and `unsigned char
/// reserved[64]`; later ROCm names the first 8 reserved bytes `size_t
/// maxSize` (0: no limit) and keeps `reserved[56]`. Same size (88 bytes) and
/// offsets either way; gpuport leaves every reserved byte (and `maxSize`) 0.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct hipMemPoolProps {
    /// `hipMemAllocationType`: [`hipMemAllocationTypePinned`].
    pub allocType: c_int,
    /// `hipMemAllocationHandleType` bits, e.g. [`hipMemHandleTypePosixFileDescriptor`].
    pub handleTypes: c_int,
    /// Where the pool's memory lives.
    pub location: hipMemLocation,
    /// Windows only; null.
    pub win32SecurityAttributes: *mut c_void,
    /// `maxSize` (ROCm 6+) and reserved bytes; all 0.
    pub reserved: [u8; 64],
}

/// `hipMemPoolPtrExportData`: `struct { unsigned char reserved[64]; }`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct hipMemPoolPtrExportData {
    /// The export's opaque bytes.
    pub reserved: [u8; 64],
}

macro_rules! opaque {
    ($($(#[$m:meta])* $name:ident => $handle:ident;)*) => { $(
        $(#[$m])*
        #[repr(C)]
        pub struct $name {
            _opaque: [u8; 0],
        }
        #[doc = concat!("`", stringify!($handle), "`: a pointer to `", stringify!($name), "`.")]
        pub type $handle = *mut $name;
    )* };
}

opaque! {
    /// The runtime's stream object (`struct ihipStream_t`).
    ihipStream_t => hipStream_t;
    /// The runtime's event object (`struct ihipEvent_t`).
    ihipEvent_t => hipEvent_t;
    /// The runtime's module object (`struct ihipModule_t`).
    ihipModule_t => hipModule_t;
    /// The runtime's kernel object (`struct ihipModuleSymbol_t`).
    ihipModuleSymbol_t => hipFunction_t;
    /// hiprtc's program object (`struct _hiprtcProgram`).
    _hiprtcProgram => hiprtcProgram;
    /// A stream-ordered memory pool (`struct ihipMemPoolHandle_t`).
    ihipMemPoolHandle_t => hipMemPool_t;
    /// A graph (`struct ihipGraph`).
    ihipGraph => hipGraph_t;
    /// An executable graph (`struct hipGraphExec`).
    hipGraphExec => hipGraphExec_t;
    /// A node of a graph (`struct hipGraphNode`).
    hipGraphNode => hipGraphNode_t;
    /// A user object a graph holds (`struct hipUserObject`).
    hipUserObject => hipUserObject_t;
}

// ---- constants (hip_runtime_api.h, hiprtc.h) ---------------------------------------

/// `hipSuccess`.
pub const hipSuccess: hipError_t = 0;
/// `hipErrorInvalidValue`.
pub const hipErrorInvalidValue: hipError_t = 1;
/// `hipErrorOutOfMemory` (also `hipErrorMemoryAllocation`).
pub const hipErrorOutOfMemory: hipError_t = 2;
/// `hipErrorInvalidDeviceFunction`.
pub const hipErrorInvalidDeviceFunction: hipError_t = 98;
/// `hipErrorNoDevice`: "Call to hipGetDeviceCount returned 0 devices".
pub const hipErrorNoDevice: hipError_t = 100;
/// `hipErrorInvalidDevice`; ROCm 5.2's `hipInit` returns it when there is no GPU (seen in CI).
pub const hipErrorInvalidDevice: hipError_t = 101;
/// `hipErrorNotFound`.
pub const hipErrorNotFound: hipError_t = 500;
/// `hipErrorNotReady`: queried work has not completed yet.
pub const hipErrorNotReady: hipError_t = 600;
/// `hipErrorPeerAccessAlreadyEnabled`: `hipDeviceEnablePeerAccess` had already run for the pair.
pub const hipErrorPeerAccessAlreadyEnabled: hipError_t = 704;
/// `hipErrorStreamCaptureInvalidated`: the capture was invalidated by an earlier error.
pub const hipErrorStreamCaptureInvalidated: hipError_t = 901;
/// `hipErrorGraphExecUpdateFailure`: `hipGraphExecUpdate` refused the graph.
pub const hipErrorGraphExecUpdateFailure: hipError_t = 910;

/// `hipStreamCaptureMode` (a C enum): `hipStreamCaptureModeGlobal` 0,
/// `hipStreamCaptureModeThreadLocal` 1, `hipStreamCaptureModeRelaxed` 2.
pub type hipStreamCaptureMode = c_int;
/// `hipStreamCaptureStatus` (a C enum): `hipStreamCaptureStatusNone` 0,
/// `hipStreamCaptureStatusActive` 1, `hipStreamCaptureStatusInvalidated` 2.
pub type hipStreamCaptureStatus = c_int;
/// `hipGraphExecUpdateResult` (a C enum): `hipGraphExecUpdateSuccess` 0,
/// then error 1, topology changed 2, node type changed 3, function changed
/// 4, parameters changed 5, not supported 6, unsupported function change 7.
pub type hipGraphExecUpdateResult = c_int;

/// `HIPRTC_SUCCESS`.
pub const HIPRTC_SUCCESS: hiprtcResult = 0;
/// `HIPRTC_ERROR_COMPILATION`: the source was rejected; the log says why.
pub const HIPRTC_ERROR_COMPILATION: hiprtcResult = 6;

/// `hipStreamNonBlocking`: no implicit synchronization with the null stream.
pub const hipStreamNonBlocking: c_uint = 0x1;
/// `hipEventDefault`.
pub const hipEventDefault: c_uint = 0x0;
/// `hipEventDisableTiming`.
pub const hipEventDisableTiming: c_uint = 0x2;
/// `hipHostMallocPortable`: pinned for every device.
pub const hipHostMallocPortable: c_uint = 0x1;
/// `hipHostMallocMapped`: mapped into the device's address space (`hipHostGetDevicePointer`).
pub const hipHostMallocMapped: c_uint = 0x2;
/// `hipHostMallocWriteCombined`: write-combined (fast host writes, slow host reads).
pub const hipHostMallocWriteCombined: c_uint = 0x4;
/// `hipHostRegisterPortable`: pinned for every device.
pub const hipHostRegisterPortable: c_uint = 0x1;
/// `hipHostRegisterMapped`: mapped into the device's address space (`hipHostGetDevicePointer`).
pub const hipHostRegisterMapped: c_uint = 0x2;
/// `hipMemAttachGlobal`: managed memory reachable from every stream.
pub const hipMemAttachGlobal: c_uint = 0x1;
/// `hipMemPoolAttrReleaseThreshold` (`uint64_t`): bytes the pool keeps across synchronizations.
pub const hipMemPoolAttrReleaseThreshold: hipMemPoolAttr = 0x4;
/// `hipMemPoolAttrReservedMemCurrent` (`uint64_t`): bytes the pool holds from the driver now.
pub const hipMemPoolAttrReservedMemCurrent: hipMemPoolAttr = 0x5;
/// `hipMemLocationTypeDevice`: a [`hipMemLocation`] naming a GPU by ordinal.
pub const hipMemLocationTypeDevice: c_int = 1;
/// `hipMemAllocationTypePinned`, the one pool allocation type ROCm 5.2 accepts.
pub const hipMemAllocationTypePinned: c_int = 1;
/// `hipMemHandleTypePosixFileDescriptor`: a pool exportable as a file descriptor.
pub const hipMemHandleTypePosixFileDescriptor: c_int = 1;
/// `hipMemAccessFlagsProtReadWrite`.
pub const hipMemAccessFlagsProtReadWrite: c_int = 3;
/// `hipIpcMemLazyEnablePeerAccess` in the ROCm 5.x headers (the only value 5.x accepts).
pub const hipIpcMemLazyEnablePeerAccess_R0000: c_uint = 0;
/// `hipIpcMemLazyEnablePeerAccess` from ROCm 6.0 on (the only value 6.0+ accepts).
pub const hipIpcMemLazyEnablePeerAccess_R0600: c_uint = 0x1;

/// The `hipIpcOpenMemHandle` flags a runtime of `HIP_VERSION` `version` accepts:
/// `hipIpcMemLazyEnablePeerAccess` as that version's headers define it.
pub fn ipc_open_flags(version: c_int) -> c_uint {
    if version >= 60_000_000 {
        hipIpcMemLazyEnablePeerAccess_R0600
    } else {
        hipIpcMemLazyEnablePeerAccess_R0000
    }
}

/// `hipDeviceAttribute_t` values used by gpuport (same numbering in ROCm 5.2 and 7.x).
pub mod attr {
    use super::hipDeviceAttribute_t as A;
    /// `hipDeviceAttributeComputeCapabilityMajor`.
    pub const COMPUTE_CAPABILITY_MAJOR: A = 23;
    /// `hipDeviceAttributeConcurrentManagedAccess`.
    pub const CONCURRENT_MANAGED_ACCESS: A = 9;
    /// `hipDeviceAttributeManagedMemory`.
    pub const MANAGED_MEMORY: A = 24;
    /// `hipDeviceAttributeVirtualMemoryManagementSupported` (the end of the
    /// CUDA-compatible block in ROCm 6 and 7's numbering).
    pub const VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: A = 89;
    /// `hipDeviceAttributeMaxBlockDimX` (Y and Z follow).
    pub const MAX_BLOCK_DIM_X: A = 26;
    /// `hipDeviceAttributeMaxBlockDimY`.
    pub const MAX_BLOCK_DIM_Y: A = 27;
    /// `hipDeviceAttributeMaxBlockDimZ`.
    pub const MAX_BLOCK_DIM_Z: A = 28;
    /// `hipDeviceAttributeMaxGridDimX`.
    pub const MAX_GRID_DIM_X: A = 29;
    /// `hipDeviceAttributeMaxGridDimY`.
    pub const MAX_GRID_DIM_Y: A = 30;
    /// `hipDeviceAttributeMaxGridDimZ`.
    pub const MAX_GRID_DIM_Z: A = 31;
    /// `hipDeviceAttributeMaxThreadsPerBlock`.
    pub const MAX_THREADS_PER_BLOCK: A = 56;
    /// `hipDeviceAttributeComputeCapabilityMinor`.
    pub const COMPUTE_CAPABILITY_MINOR: A = 61;
    /// `hipDeviceAttributeMultiprocessorCount` (compute units).
    pub const MULTIPROCESSOR_COUNT: A = 63;
    /// `hipDeviceAttributeMaxSharedMemoryPerBlock`.
    pub const MAX_SHARED_MEMORY_PER_BLOCK: A = 74;
    /// `hipDeviceAttributeSharedMemPerBlockOptin`.
    pub const SHARED_MEM_PER_BLOCK_OPTIN: A = 75;
    /// `hipDeviceAttributeWarpSize`.
    pub const WARP_SIZE: A = 87;
    /// `hipDeviceAttributeMemoryPoolsSupported` (stream-ordered allocation).
    pub const MEMORY_POOLS_SUPPORTED: A = 88;
    /// `hipDeviceAttributeWallClockRate` in kHz (AMD-specific; not in ROCm 5.2).
    pub const WALL_CLOCK_RATE: A = 10017;
}

/// Size of the buffer handed to `hipGetDeviceProperties*`: more than five
/// times the largest layout (1472 bytes for `R0600`, 792 for ROCm 5.2), so a
/// later ROCm that grows the struct again cannot write past it.
pub const DEVICE_PROP_BUFFER_BYTES: usize = 8192;
/// Offset of `char gcnArchName[256]` in `hipDeviceProp_tR0600` (ROCm 6.0+,
/// filled by `hipGetDevicePropertiesR0600`); computed with `offsetof` over
/// the struct as declared in ROCm 7's `hip_runtime_api.h`, whose reserved
/// arrays keep it fixed across 6.x and 7.x.
pub const GCN_ARCH_NAME_OFFSET_R0600: usize = 1160;
/// Offset of `gcnArchName` in the ROCm 5.x `hipDeviceProp_t` (filled by
/// `hipGetDeviceProperties`); `offsetof` with Debian's ROCm 5.2 header.
pub const GCN_ARCH_NAME_OFFSET_R0000: usize = 396;
/// Length of `gcnArchName`.
pub const GCN_ARCH_NAME_LEN: usize = 256;

// ---- function tables -----------------------------------------------------------------

/// Looks up the first of `names` that `lib` exports.
///
/// # Safety
/// `T` must be the function-pointer type of every symbol in `names`.
unsafe fn lookup<T: Copy>(lib: &Library, names: &[&str]) -> Option<T> {
    // SAFETY: the caller guarantees `T` matches the symbols' signature.
    names.iter().find_map(|name| unsafe { lib.get::<T>(*name) }.ok().map(|sym| *sym))
}

/// Declares a table of C functions resolved from a library: `required`
/// entries must all exist (each missing one is reported); an entry may name
/// alternative symbols after `=`. `optional` entries are `Option`s.
macro_rules! function_table {
    (
        $(#[$meta:meta])* $table:ident;
        required { $( $(#[$fm:meta])* fn $f:ident($($arg:ty),* $(,)?) -> $ret:ty $(= [$($alt:literal),+])?; )* }
        optional { $( $(#[$om:meta])* fn $o:ident($($oarg:ty),* $(,)?) -> $oret:ty; )* }
    ) => {
        $(#[$meta])*
        pub struct $table {
            $( $(#[$fm])* pub $f: unsafe extern "C" fn($($arg),*) -> $ret, )*
            $( $(#[$om])* pub $o: Option<unsafe extern "C" fn($($oarg),*) -> $oret>, )*
        }

        impl $table {
            /// Resolves every function; on failure, the names of the missing required ones.
            ///
            /// # Safety
            /// `lib` must stay loaded while the table is used, and export these
            /// symbols with the declared signatures (the HIP headers').
            pub unsafe fn resolve(lib: &Library) -> Result<Self, Vec<&'static str>> {
                let mut missing = Vec::new();
                $(
                    // SAFETY: the type is the header's signature for this symbol.
                    let $f = unsafe {
                        lookup::<unsafe extern "C" fn($($arg),*) -> $ret>(lib, &[stringify!($f) $($(, $alt)+)?])
                    };
                    if $f.is_none() {
                        missing.push(stringify!($f));
                    }
                )*
                $(
                    // SAFETY: as above.
                    let $o = unsafe { lookup::<unsafe extern "C" fn($($oarg),*) -> $oret>(lib, &[stringify!($o)]) };
                )*
                match ($($f,)*) {
                    ($(Some($f),)*) => Ok(Self { $($f,)* $($o,)* }),
                    _ => Err(missing),
                }
            }
        }
    };
}

function_table! {
    /// The HIP runtime calls gpuport makes (`hip/hip_runtime_api.h`).
    HipApi;
    required {
        /// `hipError_t hipInit(unsigned int flags);`
        fn hipInit(c_uint) -> hipError_t;
        /// `hipError_t hipRuntimeGetVersion(int* runtimeVersion);`
        fn hipRuntimeGetVersion(*mut c_int) -> hipError_t;
        /// `const char* hipGetErrorName(hipError_t hip_error);`
        fn hipGetErrorName(hipError_t) -> *const c_char;
        /// `const char* hipGetErrorString(hipError_t hipError);`
        fn hipGetErrorString(hipError_t) -> *const c_char;
        /// `hipError_t hipGetDeviceCount(int* count);`
        fn hipGetDeviceCount(*mut c_int) -> hipError_t;
        /// `hipError_t hipGetDevice(int* deviceId);`
        fn hipGetDevice(*mut c_int) -> hipError_t;
        /// `hipError_t hipSetDevice(int deviceId);`
        fn hipSetDevice(c_int) -> hipError_t;
        /// `hipError_t hipDeviceGet(hipDevice_t* device, int ordinal);`
        fn hipDeviceGet(*mut hipDevice_t, c_int) -> hipError_t;
        /// `hipError_t hipDeviceGetName(char* name, int len, hipDevice_t device);`
        fn hipDeviceGetName(*mut c_char, c_int, hipDevice_t) -> hipError_t;
        /// `hipError_t hipDeviceGetAttribute(int* pi, hipDeviceAttribute_t attr, int deviceId);`
        fn hipDeviceGetAttribute(*mut c_int, hipDeviceAttribute_t, c_int) -> hipError_t;
        /// `hipError_t hipDeviceTotalMem(size_t* bytes, hipDevice_t device);`
        fn hipDeviceTotalMem(*mut usize, hipDevice_t) -> hipError_t;
        /// `hipError_t hipMemGetInfo(size_t* free, size_t* total);`
        fn hipMemGetInfo(*mut usize, *mut usize) -> hipError_t;
        /// `hipError_t hipMalloc(void** ptr, size_t size);`
        fn hipMalloc(*mut *mut c_void, usize) -> hipError_t;
        /// `hipError_t hipFree(void* ptr);`
        fn hipFree(*mut c_void) -> hipError_t;
        /// `hipError_t hipMallocManaged(void** dev_ptr, size_t size, unsigned int flags);`
        fn hipMallocManaged(*mut *mut c_void, usize, c_uint) -> hipError_t;
        /// `hipError_t hipHostMalloc(void** ptr, size_t size, unsigned int flags);`
        /// (`hipHostAlloc` has the same signature and replaces it in later ROCm.)
        fn hipHostMalloc(*mut *mut c_void, usize, c_uint) -> hipError_t = ["hipHostAlloc"];
        /// `hipError_t hipHostFree(void* ptr);`
        fn hipHostFree(*mut c_void) -> hipError_t;
        /// `hipError_t hipHostRegister(void* hostPtr, size_t sizeBytes, unsigned int flags);`
        fn hipHostRegister(*mut c_void, usize, c_uint) -> hipError_t;
        /// `hipError_t hipHostUnregister(void* hostPtr);`
        fn hipHostUnregister(*mut c_void) -> hipError_t;
        /// `hipError_t hipStreamCreateWithFlags(hipStream_t* stream, unsigned int flags);`
        fn hipStreamCreateWithFlags(*mut hipStream_t, c_uint) -> hipError_t;
        /// `hipError_t hipStreamDestroy(hipStream_t stream);`
        fn hipStreamDestroy(hipStream_t) -> hipError_t;
        /// `hipError_t hipDeviceSynchronize(void);`
        fn hipDeviceSynchronize() -> hipError_t;
        /// `hipError_t hipStreamSynchronize(hipStream_t stream);`
        fn hipStreamSynchronize(hipStream_t) -> hipError_t;
        /// `hipError_t hipStreamQuery(hipStream_t stream);`
        fn hipStreamQuery(hipStream_t) -> hipError_t;
        /// `hipError_t hipStreamWaitEvent(hipStream_t stream, hipEvent_t event, unsigned int flags);`
        fn hipStreamWaitEvent(hipStream_t, hipEvent_t, c_uint) -> hipError_t;
        /// `hipError_t hipEventCreateWithFlags(hipEvent_t* event, unsigned flags);`
        fn hipEventCreateWithFlags(*mut hipEvent_t, c_uint) -> hipError_t;
        /// `hipError_t hipEventDestroy(hipEvent_t event);`
        fn hipEventDestroy(hipEvent_t) -> hipError_t;
        /// `hipError_t hipEventRecord(hipEvent_t event, hipStream_t stream);`
        fn hipEventRecord(hipEvent_t, hipStream_t) -> hipError_t;
        /// `hipError_t hipEventSynchronize(hipEvent_t event);`
        fn hipEventSynchronize(hipEvent_t) -> hipError_t;
        /// `hipError_t hipEventQuery(hipEvent_t event);`
        fn hipEventQuery(hipEvent_t) -> hipError_t;
        /// `hipError_t hipEventElapsedTime(float* ms, hipEvent_t start, hipEvent_t stop);`
        fn hipEventElapsedTime(*mut f32, hipEvent_t, hipEvent_t) -> hipError_t;
        /// `hipError_t hipMemcpyHtoDAsync(hipDeviceptr_t dst, void* src, size_t sizeBytes, hipStream_t stream);`
        fn hipMemcpyHtoDAsync(hipDeviceptr_t, *mut c_void, usize, hipStream_t) -> hipError_t;
        /// `hipError_t hipMemcpyDtoHAsync(void* dst, hipDeviceptr_t src, size_t sizeBytes, hipStream_t stream);`
        fn hipMemcpyDtoHAsync(*mut c_void, hipDeviceptr_t, usize, hipStream_t) -> hipError_t;
        /// `hipError_t hipMemcpyDtoDAsync(hipDeviceptr_t dst, hipDeviceptr_t src, size_t sizeBytes, hipStream_t stream);`
        fn hipMemcpyDtoDAsync(hipDeviceptr_t, hipDeviceptr_t, usize, hipStream_t) -> hipError_t;
        /// `hipError_t hipMemsetD8Async(hipDeviceptr_t dest, unsigned char value, size_t count, hipStream_t stream);`
        fn hipMemsetD8Async(hipDeviceptr_t, u8, usize, hipStream_t) -> hipError_t;
        /// `hipError_t hipModuleLoadData(hipModule_t* module, const void* image);`
        fn hipModuleLoadData(*mut hipModule_t, *const c_void) -> hipError_t;
        /// `hipError_t hipModuleUnload(hipModule_t module);`
        fn hipModuleUnload(hipModule_t) -> hipError_t;
        /// `hipError_t hipModuleGetFunction(hipFunction_t* function, hipModule_t module, const char* kname);`
        fn hipModuleGetFunction(*mut hipFunction_t, hipModule_t, *const c_char) -> hipError_t;
        /// `hipError_t hipModuleLaunchKernel(hipFunction_t f, unsigned int gridDimX, unsigned int gridDimY,
        /// unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
        /// unsigned int sharedMemBytes, hipStream_t stream, void** kernelParams, void** extra);`
        fn hipModuleLaunchKernel(
            hipFunction_t, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, hipStream_t,
            *mut *mut c_void, *mut *mut c_void,
        ) -> hipError_t;
        /// `hipError_t hipModuleOccupancyMaxPotentialBlockSize(int* gridSize, int* blockSize,
        /// hipFunction_t f, size_t dynSharedMemPerBlk, int blockSizeLimit);`
        fn hipModuleOccupancyMaxPotentialBlockSize(*mut c_int, *mut c_int, hipFunction_t, usize, c_int) -> hipError_t;
    }
    optional {
        /// `hipError_t hipMallocAsync(void** dev_ptr, size_t size, hipStream_t stream);` (ROCm 5.1+)
        fn hipMallocAsync(*mut *mut c_void, usize, hipStream_t) -> hipError_t;
        /// `hipError_t hipFreeAsync(void* dev_ptr, hipStream_t stream);` (ROCm 5.1+)
        fn hipFreeAsync(*mut c_void, hipStream_t) -> hipError_t;
        /// `hipError_t hipGetDevicePropertiesR0600(hipDeviceProp_tR0600* prop, int deviceId);` (ROCm 6.0+)
        fn hipGetDevicePropertiesR0600(*mut c_void, c_int) -> hipError_t;
        /// `hipError_t hipGetDeviceProperties(hipDeviceProp_t* prop, int deviceId);` with the
        /// ROCm 5.x layout (`hipDeviceProp_tR0000` in ROCm 6+, which may drop the symbol).
        fn hipGetDeviceProperties(*mut c_void, c_int) -> hipError_t;
        // The memory layer's calls (`crate::backend::MemoryDevice`). All are in
        // ROCm 5.2 (the pool calls since 5.1), but optional: a runtime without
        // one still runs everything else, and the call says it is missing.
        /// `hipError_t hipMemPrefetchAsync(const void* dev_ptr, size_t count, int device, hipStream_t stream);`
        fn hipMemPrefetchAsync(*const c_void, usize, c_int, hipStream_t) -> hipError_t;
        /// `hipError_t hipMemAdvise(const void* dev_ptr, size_t count, hipMemoryAdvise advice, int device);`
        /// (`hipMemoryAdvise`: a C enum, `int`-sized; 1 to 6 as CUDA's.)
        fn hipMemAdvise(*const c_void, usize, c_int, c_int) -> hipError_t;
        // Virtual memory management (ROCm 5.3+; PyTorch's expandable
        // segments use them from ROCm 7).
        /// `hipError_t hipMemAddressReserve(void** ptr, size_t size, size_t alignment, void* addr, unsigned long long flags);`
        fn hipMemAddressReserve(*mut *mut c_void, usize, usize, *mut c_void, u64) -> hipError_t;
        /// `hipError_t hipMemAddressFree(void* devPtr, size_t size);`
        fn hipMemAddressFree(*mut c_void, usize) -> hipError_t;
        /// `hipError_t hipMemCreate(hipMemGenericAllocationHandle_t* handle, size_t size,
        /// const hipMemAllocationProp* prop, unsigned long long flags);`
        fn hipMemCreate(*mut hipMemGenericAllocationHandle_t, usize, *const hipMemAllocationProp, u64) -> hipError_t;
        /// `hipError_t hipMemRelease(hipMemGenericAllocationHandle_t handle);`
        fn hipMemRelease(hipMemGenericAllocationHandle_t) -> hipError_t;
        /// `hipError_t hipMemMap(void* ptr, size_t size, size_t offset, hipMemGenericAllocationHandle_t handle,
        /// unsigned long long flags);`
        fn hipMemMap(*mut c_void, usize, usize, hipMemGenericAllocationHandle_t, u64) -> hipError_t;
        /// `hipError_t hipMemUnmap(void* ptr, size_t size);`
        fn hipMemUnmap(*mut c_void, usize) -> hipError_t;
        /// `hipError_t hipMemSetAccess(void* ptr, size_t size, const hipMemAccessDesc* desc, size_t count);`
        fn hipMemSetAccess(*mut c_void, usize, *const hipMemAccessDesc, usize) -> hipError_t;
        /// `hipError_t hipMemGetAllocationGranularity(size_t* granularity, const hipMemAllocationProp* prop,
        /// hipMemAllocationGranularity_flags option);`
        fn hipMemGetAllocationGranularity(*mut usize, *const hipMemAllocationProp, c_int) -> hipError_t;
        /// `hipError_t hipHostGetDevicePointer(void** devPtr, void* hstPtr, unsigned int flags);`
        fn hipHostGetDevicePointer(*mut *mut c_void, *mut c_void, c_uint) -> hipError_t;
        /// `hipError_t hipDeviceGetDefaultMemPool(hipMemPool_t* mem_pool, int device);` (ROCm 5.1+)
        fn hipDeviceGetDefaultMemPool(*mut hipMemPool_t, c_int) -> hipError_t;
        /// `hipError_t hipMemPoolSetAttribute(hipMemPool_t mem_pool, hipMemPoolAttr attr, void* value);` (ROCm 5.1+)
        fn hipMemPoolSetAttribute(hipMemPool_t, hipMemPoolAttr, *mut c_void) -> hipError_t;
        /// `hipError_t hipMemPoolGetAttribute(hipMemPool_t mem_pool, hipMemPoolAttr attr, void* value);` (ROCm 5.1+)
        fn hipMemPoolGetAttribute(hipMemPool_t, hipMemPoolAttr, *mut c_void) -> hipError_t;
        /// `hipError_t hipMemPoolTrimTo(hipMemPool_t mem_pool, size_t min_bytes_to_hold);` (ROCm 5.1+)
        fn hipMemPoolTrimTo(hipMemPool_t, usize) -> hipError_t;
        /// `hipError_t hipMemGetAddressRange(hipDeviceptr_t* pbase, size_t* psize, hipDeviceptr_t dptr);`
        fn hipMemGetAddressRange(*mut hipDeviceptr_t, *mut usize, hipDeviceptr_t) -> hipError_t;
        /// `hipError_t hipIpcGetMemHandle(hipIpcMemHandle_t* handle, void* devPtr);`
        fn hipIpcGetMemHandle(*mut hipIpcMemHandle_t, *mut c_void) -> hipError_t;
        /// `hipError_t hipIpcOpenMemHandle(void** devPtr, hipIpcMemHandle_t handle, unsigned int flags);`
        fn hipIpcOpenMemHandle(*mut *mut c_void, hipIpcMemHandle_t, c_uint) -> hipError_t;
        /// `hipError_t hipIpcCloseMemHandle(void* devPtr);`
        fn hipIpcCloseMemHandle(*mut c_void) -> hipError_t;
        // Pools of gpuport's own that other processes import (declared, and
        // exported by Debian's 5.2.3, since ROCm 5.1). An early ROCm/clr
        // `hip_mempool.cpp` (2022) has the four IPC calls as stubs that
        // return hipSuccess and write nothing; the backend checks what they wrote.
        /// `hipError_t hipMemPoolCreate(hipMemPool_t* mem_pool, const hipMemPoolProps* pool_props);`
        fn hipMemPoolCreate(*mut hipMemPool_t, *const hipMemPoolProps) -> hipError_t;
        /// `hipError_t hipMemPoolDestroy(hipMemPool_t mem_pool);`
        fn hipMemPoolDestroy(hipMemPool_t) -> hipError_t;
        /// `hipError_t hipMallocFromPoolAsync(void** dev_ptr, size_t size, hipMemPool_t mem_pool, hipStream_t stream);`
        fn hipMallocFromPoolAsync(*mut *mut c_void, usize, hipMemPool_t, hipStream_t) -> hipError_t;
        /// `hipError_t hipMemPoolExportToShareableHandle(void* shared_handle, hipMemPool_t mem_pool,
        /// hipMemAllocationHandleType handle_type, unsigned int flags);`
        fn hipMemPoolExportToShareableHandle(*mut c_void, hipMemPool_t, c_int, c_uint) -> hipError_t;
        /// `hipError_t hipMemPoolImportFromShareableHandle(hipMemPool_t* mem_pool, void* shared_handle,
        /// hipMemAllocationHandleType handle_type, unsigned int flags);`
        fn hipMemPoolImportFromShareableHandle(*mut hipMemPool_t, *mut c_void, c_int, c_uint) -> hipError_t;
        /// `hipError_t hipMemPoolExportPointer(hipMemPoolPtrExportData* export_data, void* dev_ptr);`
        fn hipMemPoolExportPointer(*mut hipMemPoolPtrExportData, *mut c_void) -> hipError_t;
        /// `hipError_t hipMemPoolImportPointer(void** dev_ptr, hipMemPool_t mem_pool,
        /// hipMemPoolPtrExportData* export_data);`
        fn hipMemPoolImportPointer(*mut *mut c_void, hipMemPool_t, *mut hipMemPoolPtrExportData) -> hipError_t;
        /// `hipError_t hipMemPoolGetAccess(hipMemAccessFlags* flags, hipMemPool_t mem_pool, hipMemLocation* location);`
        fn hipMemPoolGetAccess(*mut c_int, hipMemPool_t, *mut hipMemLocation) -> hipError_t;
        /// `hipError_t hipMemPoolSetAccess(hipMemPool_t mem_pool, const hipMemAccessDesc* desc_list, size_t count);`
        fn hipMemPoolSetAccess(hipMemPool_t, *const hipMemAccessDesc, usize) -> hipError_t;
        // Peer access and copies (every ROCm release has them), optional so
        // that a runtime without them fails only peer operations.
        /// `hipError_t hipDeviceCanAccessPeer(int* canAccessPeer, int deviceId, int peerDeviceId);`
        fn hipDeviceCanAccessPeer(*mut c_int, c_int, c_int) -> hipError_t;
        /// `hipError_t hipDeviceEnablePeerAccess(int peerDeviceId, unsigned int flags);`
        fn hipDeviceEnablePeerAccess(c_int, c_uint) -> hipError_t;
        /// `hipError_t hipMemcpyPeerAsync(void* dst, int dstDeviceId, const void* src, int srcDevice,
        /// size_t sizeBytes, hipStream_t stream);`
        fn hipMemcpyPeerAsync(*mut c_void, c_int, *const c_void, c_int, usize, hipStream_t) -> hipError_t;
        // Stream capture and graphs (`crate::backend::graph`; ROCm 5.3+ has
        // them all): optional, so a runtime without them fails only graphs.
        /// `hipError_t hipStreamBeginCapture(hipStream_t stream, hipStreamCaptureMode mode);`
        fn hipStreamBeginCapture(hipStream_t, hipStreamCaptureMode) -> hipError_t;
        /// `hipError_t hipStreamEndCapture(hipStream_t stream, hipGraph_t* pGraph);`
        fn hipStreamEndCapture(hipStream_t, *mut hipGraph_t) -> hipError_t;
        /// `hipError_t hipStreamIsCapturing(hipStream_t stream, hipStreamCaptureStatus* pCaptureStatus);`
        fn hipStreamIsCapturing(hipStream_t, *mut hipStreamCaptureStatus) -> hipError_t;
        /// `hipError_t hipThreadExchangeStreamCaptureMode(hipStreamCaptureMode* mode);`
        fn hipThreadExchangeStreamCaptureMode(*mut hipStreamCaptureMode) -> hipError_t;
        /// `hipError_t hipGraphGetNodes(hipGraph_t graph, hipGraphNode_t* nodes, size_t* numNodes);`
        fn hipGraphGetNodes(hipGraph_t, *mut hipGraphNode_t, *mut usize) -> hipError_t;
        /// `hipError_t hipGraphInstantiateWithFlags(hipGraphExec_t* pGraphExec, hipGraph_t graph,
        /// unsigned long long flags);`
        fn hipGraphInstantiateWithFlags(*mut hipGraphExec_t, hipGraph_t, u64) -> hipError_t;
        /// `hipError_t hipGraphLaunch(hipGraphExec_t graphExec, hipStream_t stream);`
        fn hipGraphLaunch(hipGraphExec_t, hipStream_t) -> hipError_t;
        /// `hipError_t hipGraphExecUpdate(hipGraphExec_t hGraphExec, hipGraph_t hGraph,
        /// hipGraphNode_t* hErrorNode_out, hipGraphExecUpdateResult* updateResult_out);`
        fn hipGraphExecUpdate(hipGraphExec_t, hipGraph_t, *mut hipGraphNode_t, *mut hipGraphExecUpdateResult)
            -> hipError_t;
        /// `hipError_t hipGraphDestroy(hipGraph_t graph);`
        fn hipGraphDestroy(hipGraph_t) -> hipError_t;
        /// `hipError_t hipGraphExecDestroy(hipGraphExec_t graphExec);`
        fn hipGraphExecDestroy(hipGraphExec_t) -> hipError_t;
        /// `hipError_t hipStreamGetCaptureInfo_v2(hipStream_t stream, hipStreamCaptureStatus* captureStatus_out,
        /// unsigned long long* id_out, hipGraph_t* graph_out, const hipGraphNode_t** dependencies_out,
        /// size_t* numDependencies_out);`
        fn hipStreamGetCaptureInfo_v2(
            hipStream_t, *mut hipStreamCaptureStatus, *mut u64, *mut hipGraph_t, *mut *const hipGraphNode_t, *mut usize,
        ) -> hipError_t;
        /// `hipError_t hipUserObjectCreate(hipUserObject_t* object_out, void* ptr, hipHostFn_t destroy,
        /// unsigned int initialRefcount, unsigned int flags);`
        fn hipUserObjectCreate(
            *mut hipUserObject_t, *mut c_void, Option<unsafe extern "C" fn(*mut c_void)>, c_uint, c_uint,
        ) -> hipError_t;
        /// `hipError_t hipGraphRetainUserObject(hipGraph_t graph, hipUserObject_t object, unsigned int count,
        /// unsigned int flags);`
        fn hipGraphRetainUserObject(hipGraph_t, hipUserObject_t, c_uint, c_uint) -> hipError_t;
    }
}

function_table! {
    /// The hiprtc calls gpuport makes (`hip/hiprtc.h`).
    RtcApi;
    required {
        /// `const char* hiprtcGetErrorString(hiprtcResult result);`
        fn hiprtcGetErrorString(hiprtcResult) -> *const c_char;
        /// `hiprtcResult hiprtcCreateProgram(hiprtcProgram* prog, const char* src, const char* name,
        /// int numHeaders, const char** headers, const char** includeNames);`
        fn hiprtcCreateProgram(
            *mut hiprtcProgram, *const c_char, *const c_char, c_int, *const *const c_char, *const *const c_char,
        ) -> hiprtcResult;
        /// `hiprtcResult hiprtcCompileProgram(hiprtcProgram prog, int numOptions, const char** options);`
        fn hiprtcCompileProgram(hiprtcProgram, c_int, *const *const c_char) -> hiprtcResult;
        /// `hiprtcResult hiprtcGetProgramLogSize(hiprtcProgram prog, size_t* logSizeRet);`
        fn hiprtcGetProgramLogSize(hiprtcProgram, *mut usize) -> hiprtcResult;
        /// `hiprtcResult hiprtcGetProgramLog(hiprtcProgram prog, char* log);`
        fn hiprtcGetProgramLog(hiprtcProgram, *mut c_char) -> hiprtcResult;
        /// `hiprtcResult hiprtcGetCodeSize(hiprtcProgram prog, size_t* codeSizeRet);`
        fn hiprtcGetCodeSize(hiprtcProgram, *mut usize) -> hiprtcResult;
        /// `hiprtcResult hiprtcGetCode(hiprtcProgram prog, char* code);`
        fn hiprtcGetCode(hiprtcProgram, *mut c_char) -> hiprtcResult;
        /// `hiprtcResult hiprtcDestroyProgram(hiprtcProgram* prog);`
        fn hiprtcDestroyProgram(*mut hiprtcProgram) -> hiprtcResult;
    }
    optional {}
}

// ---- library search --------------------------------------------------------------

/// Forces the HIP runtime library to this path (no search).
pub const HIP_LIBRARY_ENV: &str = "GPUPORT_HIP_LIBRARY";
/// Forces the hiprtc library to this path (no search).
pub const HIPRTC_LIBRARY_ENV: &str = "GPUPORT_HIPRTC_LIBRARY";

/// File names of the HIP runtime, most general first.
pub const HIP_NAMES: [&str; 4] = ["libamdhip64.so", "libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5"];
/// File names of hiprtc. ROCm 5.2 has no separate hiprtc: its calls are in
/// `libamdhip64` (seen in Debian's 5.2.3), which the backend's hiprtc loader tries last.
pub const HIPRTC_NAMES: [&str; 4] = ["libhiprtc.so", "libhiprtc.so.7", "libhiprtc.so.6", "libhiprtc.so.5"];

/// Where pip wheels put the ROCm libraries under a site-packages folder:
/// torch's ROCm wheels, and AMD's TheRock wheels (`rocm-sdk-core`, and
/// `rocm-sdk-libraries-<gfx family>` for RCCL).
pub const ROCM_WHEEL_DIRS: [&str; 4] =
    ["torch/lib", "_rocm_sdk_core/lib", "_rocm_sdk_libraries/lib", "_rocm_sdk_libraries_*/lib"];

/// The search for the HIP runtime (see [`crate::backend::library`]).
pub const HIP_SPEC: LibrarySpec = LibrarySpec {
    backend: BackendKind::Rocm,
    library: "libamdhip64",
    names: &HIP_NAMES,
    override_env: HIP_LIBRARY_ENV,
    wheel_dirs: &ROCM_WHEEL_DIRS,
    rocm: true,
};

/// The search for hiprtc.
pub const HIPRTC_SPEC: LibrarySpec = LibrarySpec {
    backend: BackendKind::Rocm,
    library: "libhiprtc",
    names: &HIPRTC_NAMES,
    override_env: HIPRTC_LIBRARY_ENV,
    wheel_dirs: &ROCM_WHEEL_DIRS,
    rocm: true,
};

use crate::backend::library::LibrarySpec;
pub(crate) use crate::backend::library::{search, Loaded};
use crate::error::BackendKind;

/// Formats `HIP_VERSION` (`major * 10^7 + minor * 10^5 + patch`) as `5.2.21153`.
pub fn version_string(v: c_int) -> String {
    format!("{}.{}.{}", v / 10_000_000, (v / 100_000) % 100, v % 100_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipc_open_flags_follow_the_rocm_6_abi_break() {
        assert_eq!(ipc_open_flags(50221153), 0, "ROCm 5.2");
        assert_eq!(ipc_open_flags(50731921), 0, "ROCm 5.7");
        assert_eq!(ipc_open_flags(60032830), 1, "ROCm 6.0");
        assert_eq!(ipc_open_flags(70151000), 1, "ROCm 7.1");
    }

    #[test]
    fn ipc_handles_have_the_header_size() {
        assert_eq!(std::mem::size_of::<hipIpcMemHandle_t>(), 64);
        assert_eq!(HIP_IPC_HANDLE_SIZE, std::mem::size_of::<crate::backend::IpcBytes>());
    }

    #[test]
    fn pool_structs_have_the_header_layout() {
        use std::mem::{offset_of, size_of};
        assert_eq!(size_of::<hipMemLocation>(), 8);
        assert_eq!(size_of::<hipMemAccessDesc>(), 12);
        assert_eq!(size_of::<hipMemPoolProps>(), 88, "4 + 4 + 8 + 8 + 64, in ROCm 5.2 and later");
        assert_eq!(offset_of!(hipMemPoolProps, win32SecurityAttributes), 16);
        assert_eq!(offset_of!(hipMemPoolProps, reserved), 24, "where ROCm 6+ puts maxSize");
        assert_eq!(size_of::<hipMemPoolPtrExportData>(), size_of::<crate::backend::IpcBytes>());
    }

    #[test]
    fn hip_versions_format_as_major_minor_patch() {
        assert_eq!(version_string(50221153), "5.2.21153");
        assert_eq!(version_string(70151000), "7.1.51000");
    }
}

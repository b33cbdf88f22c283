//! The DLPack 1.x C ABI, written by hand from `dlpack/dlpack.h`.
//!
//! Why not the `dlpark` crate: its 0.10 `ffi` module has every struct and
//! flag needed here (it is bindgen output of the same header), but it needs
//! Rust 1.88 and edition 2024 while gpuport supports Rust 1.80, its safe
//! layers were rewritten in most 0.x releases, and they do not fit our
//! ownership model (an `Arc` of backend storage as the manager context, the
//! device type derived from backend and memory kind). The ABI below is a
//! few plain structs; the `const` assertions pin their sizes and offsets to
//! the ones the C header gives on 64-bit targets.

use std::ffi::c_void;

/// The DLPack major version this module implements (ABI of
/// [`DLManagedTensorVersioned`]).
pub const DLPACK_MAJOR_VERSION: u32 = 1;
/// The DLPack minor version gpuport claims as a producer. Tensors with any
/// minor version of major 1 are accepted on import; unknown enum values are
/// rejected field by field.
pub const DLPACK_MINOR_VERSION: u32 = 1;

/// Bit in [`DLManagedTensorVersioned::flags`]: the consumer must not write.
pub const DLPACK_FLAG_BITMASK_READ_ONLY: u64 = 1 << 0;
/// Bit in [`DLManagedTensorVersioned::flags`]: the producer made a copy for
/// this export, so the consumer may write without affecting the producer.
pub const DLPACK_FLAG_BITMASK_IS_COPIED: u64 = 1 << 1;
/// Bit in [`DLManagedTensorVersioned::flags`] (DLPack 1.1): the tensor's
/// sub-byte elements (fp6, fp4) are padded, one element in the low bits of
/// each byte, rather than packed (the default). gpuport holds sub-byte
/// elements padded, sets this bit on every such export, and imports only
/// tensors that carry it.
pub const DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED: u64 = 1 << 2;

/// A DLPack version (major changes the ABI; minor only adds enum values).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DLPackVersion {
    /// Major version.
    pub major: u32,
    /// Minor version.
    pub minor: u32,
}

/// DLPack device type codes (`DLDeviceType`, a C enum of `int` size).
///
/// A newtype, not a Rust `enum`, because a foreign producer may send a value
/// this build does not know; reading that into a Rust enum would be UB.
#[repr(transparent)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DLDeviceType(pub u32);

impl DLDeviceType {
    /// `kDLCPU`: ordinary host memory.
    pub const CPU: Self = Self(1);
    /// `kDLCUDA`: CUDA device memory.
    pub const CUDA: Self = Self(2);
    /// `kDLCUDAHost`: pinned host memory from `cudaMallocHost`.
    pub const CUDA_HOST: Self = Self(3);
    /// `kDLOpenCL`.
    pub const OPENCL: Self = Self(4);
    /// `kDLVulkan`.
    pub const VULKAN: Self = Self(7);
    /// `kDLMetal`.
    pub const METAL: Self = Self(8);
    /// `kDLVPI`.
    pub const VPI: Self = Self(9);
    /// `kDLROCM`: ROCm/HIP device memory.
    pub const ROCM: Self = Self(10);
    /// `kDLROCMHost`: pinned host memory from `hipHostMalloc`.
    pub const ROCM_HOST: Self = Self(11);
    /// `kDLExtDev`.
    pub const EXT_DEV: Self = Self(12);
    /// `kDLCUDAManaged`: CUDA managed (unified) memory.
    pub const CUDA_MANAGED: Self = Self(13);
    /// `kDLOneAPI`.
    pub const ONE_API: Self = Self(14);
    /// `kDLWebGPU`.
    pub const WEBGPU: Self = Self(15);
    /// `kDLHexagon`.
    pub const HEXAGON: Self = Self(16);
    /// `kDLMAIA`.
    pub const MAIA: Self = Self(17);

    /// The header's name for this code, or `None` for a code it does not define.
    pub fn name(self) -> Option<&'static str> {
        Some(match self.0 {
            1 => "kDLCPU",
            2 => "kDLCUDA",
            3 => "kDLCUDAHost",
            4 => "kDLOpenCL",
            7 => "kDLVulkan",
            8 => "kDLMetal",
            9 => "kDLVPI",
            10 => "kDLROCM",
            11 => "kDLROCMHost",
            12 => "kDLExtDev",
            13 => "kDLCUDAManaged",
            14 => "kDLOneAPI",
            15 => "kDLWebGPU",
            16 => "kDLHexagon",
            17 => "kDLMAIA",
            _ => return None,
        })
    }
}

/// Where a tensor's memory is: device type and device index.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DLDevice {
    /// The device type.
    pub device_type: DLDeviceType,
    /// The device index (0 for host, pinned and managed memory).
    pub device_id: i32,
}

/// DLPack data type codes (`DLDataTypeCode`, stored as `u8`).
#[repr(transparent)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DLDataTypeCode(pub u8);

impl DLDataTypeCode {
    /// Signed integer.
    pub const INT: Self = Self(0);
    /// Unsigned integer.
    pub const UINT: Self = Self(1);
    /// IEEE floating point.
    pub const FLOAT: Self = Self(2);
    /// Opaque handle (testing only).
    pub const OPAQUE_HANDLE: Self = Self(3);
    /// bfloat16.
    pub const BFLOAT: Self = Self(4);
    /// Complex number, a compact (re, im) pair.
    pub const COMPLEX: Self = Self(5);
    /// Boolean (8 bits per element).
    pub const BOOL: Self = Self(6);
    /// `kDLFloat8_e3m4` (DLPack 1.1): 3 exponent, 4 mantissa bits, IEEE-style infinities and NaNs.
    pub const FLOAT8_E3M4: Self = Self(7);
    /// `kDLFloat8_e4m3` (DLPack 1.1): 4 exponent, 3 mantissa bits, IEEE-style infinities and NaNs.
    pub const FLOAT8_E4M3: Self = Self(8);
    /// `kDLFloat8_e4m3b11fnuz` (DLPack 1.1): e4m3 with exponent bias 11, finite, unsigned zero.
    pub const FLOAT8_E4M3B11FNUZ: Self = Self(9);
    /// `kDLFloat8_e4m3fn` (DLPack 1.1): the OCP/NVIDIA e4m3: finite (no infinities), NaN = S.1111.111.
    pub const FLOAT8_E4M3FN: Self = Self(10);
    /// `kDLFloat8_e4m3fnuz` (DLPack 1.1): e4m3, finite, unsigned zero (the 0x80 pattern is NaN).
    pub const FLOAT8_E4M3FNUZ: Self = Self(11);
    /// `kDLFloat8_e5m2` (DLPack 1.1): 5 exponent, 2 mantissa bits, IEEE-style.
    pub const FLOAT8_E5M2: Self = Self(12);
    /// `kDLFloat8_e5m2fnuz` (DLPack 1.1): e5m2, finite, unsigned zero.
    pub const FLOAT8_E5M2FNUZ: Self = Self(13);
    /// `kDLFloat8_e8m0fnu` (DLPack 1.1): an 8-bit power of two (the MX scale type), unsigned, no zero.
    pub const FLOAT8_E8M0FNU: Self = Self(14);
    /// `kDLFloat6_e2m3fn` (DLPack 1.1): 6 bits, 2 exponent, 3 mantissa, finite.
    pub const FLOAT6_E2M3FN: Self = Self(15);
    /// `kDLFloat6_e3m2fn` (DLPack 1.1): 6 bits, 3 exponent, 2 mantissa, finite.
    pub const FLOAT6_E3M2FN: Self = Self(16);
    /// `kDLFloat4_e2m1fn` (DLPack 1.1): 4 bits, 2 exponent, 1 mantissa, finite.
    pub const FLOAT4_E2M1FN: Self = Self(17);

    /// The header's name for this code (`kDLFloat8_e4m3fn`), or `None` for
    /// a code it does not define.
    pub fn name(self) -> Option<&'static str> {
        Some(match self.0 {
            0 => "kDLInt",
            1 => "kDLUInt",
            2 => "kDLFloat",
            3 => "kDLOpaqueHandle",
            4 => "kDLBfloat",
            5 => "kDLComplex",
            6 => "kDLBool",
            7 => "kDLFloat8_e3m4",
            8 => "kDLFloat8_e4m3",
            9 => "kDLFloat8_e4m3b11fnuz",
            10 => "kDLFloat8_e4m3fn",
            11 => "kDLFloat8_e4m3fnuz",
            12 => "kDLFloat8_e5m2",
            13 => "kDLFloat8_e5m2fnuz",
            14 => "kDLFloat8_e8m0fnu",
            15 => "kDLFloat6_e2m3fn",
            16 => "kDLFloat6_e3m2fn",
            17 => "kDLFloat4_e2m1fn",
            _ => return None,
        })
    }

    /// The oldest DLPack minor version (of major 1) whose header defines this
    /// code: 1 for the fp8/fp6/fp4 codes (7 to 17), 0 for the others.
    pub fn since_minor(self) -> u32 {
        if (7..=17).contains(&self.0) {
            1
        } else {
            0
        }
    }
}

/// An element type: code, bits per lane, lanes (e.g. float4 = FLOAT, 32, 4).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DLDataType {
    /// Base type code.
    pub code: DLDataTypeCode,
    /// Bits per lane.
    pub bits: u8,
    /// Lanes (1 for scalars).
    pub lanes: u16,
}

/// A plain tensor description; owns nothing.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct DLTensor {
    /// Base address (a device address for device memory); null for size 0.
    pub data: *mut c_void,
    /// Where the memory is.
    pub device: DLDevice,
    /// Number of dimensions.
    pub ndim: i32,
    /// Element type.
    pub dtype: DLDataType,
    /// `ndim` extents (may be null when `ndim == 0`).
    pub shape: *mut i64,
    /// `ndim` strides in elements; null means compact row-major (before DLPack 1.2).
    pub strides: *mut i64,
    /// Offset in bytes from `data` to the first element.
    pub byte_offset: u64,
}

/// The legacy (unversioned) managed tensor.
#[repr(C)]
#[derive(Debug)]
pub struct DLManagedTensor {
    /// The tensor.
    pub dl_tensor: DLTensor,
    /// The producer's context.
    pub manager_ctx: *mut c_void,
    /// Frees the tensor and its context; called once by the consumer.
    pub deleter: Option<unsafe extern "C" fn(*mut DLManagedTensor)>,
}

/// The versioned managed tensor (DLPack 1.x).
#[repr(C)]
#[derive(Debug)]
pub struct DLManagedTensorVersioned {
    /// ABI version; a consumer must only call `deleter` if `major` differs.
    pub version: DLPackVersion,
    /// The producer's context.
    pub manager_ctx: *mut c_void,
    /// Frees the tensor and its context; called once by the consumer.
    pub deleter: Option<unsafe extern "C" fn(*mut DLManagedTensorVersioned)>,
    /// `DLPACK_FLAG_BITMASK_*` bits.
    pub flags: u64,
    /// The tensor.
    pub dl_tensor: DLTensor,
}

// Layout checks against the C header (64-bit targets).
#[cfg(target_pointer_width = "64")]
const _: () = {
    use std::mem::{align_of, offset_of, size_of};
    assert!(size_of::<DLPackVersion>() == 8);
    assert!(size_of::<DLDevice>() == 8 && align_of::<DLDevice>() == 4);
    assert!(size_of::<DLDataType>() == 4 && align_of::<DLDataType>() == 2);
    assert!(offset_of!(DLDataType, bits) == 1 && offset_of!(DLDataType, lanes) == 2);
    assert!(size_of::<DLTensor>() == 48);
    assert!(offset_of!(DLTensor, device) == 8);
    assert!(offset_of!(DLTensor, ndim) == 16);
    assert!(offset_of!(DLTensor, dtype) == 20);
    assert!(offset_of!(DLTensor, shape) == 24);
    assert!(offset_of!(DLTensor, strides) == 32);
    assert!(offset_of!(DLTensor, byte_offset) == 40);
    assert!(size_of::<DLManagedTensor>() == 64);
    assert!(offset_of!(DLManagedTensor, manager_ctx) == 48);
    assert!(offset_of!(DLManagedTensor, deleter) == 56);
    assert!(size_of::<DLManagedTensorVersioned>() == 80);
    assert!(offset_of!(DLManagedTensorVersioned, manager_ctx) == 8);
    assert!(offset_of!(DLManagedTensorVersioned, deleter) == 16);
    assert!(offset_of!(DLManagedTensorVersioned, flags) == 24);
    assert!(offset_of!(DLManagedTensorVersioned, dl_tensor) == 32);
};

// ---- the C exchange API (DLPack 1.3) ------------------------------------------------
//
// From the "DLPack `__dlpack_c_exchange_api__` fast exchange protocol
// definitions" section of dlpack/dlpack.h at version 1.3 (dmlc/dlpack
// PRs #174 and #180): a producer type offers, as the class attribute
// `__dlpack_c_exchange_api__`, a `PyCapsule` named "dlpack_exchange_api"
// whose pointer is a `DLPackExchangeAPI` that lives for the whole process.
// Every function returns 0 on success and -1 on failure; the `PyObject`
// functions and `current_work_stream` leave a Python exception set on
// failure, the allocator reports through its `SetError` callback instead.

/// The name of the `PyCapsule` that holds a [`DLPackExchangeAPI`].
pub const DLPACK_EXCHANGE_API_CAPSULE_NAME: &std::ffi::CStr = c"dlpack_exchange_api";

/// The class attribute that holds the capsule (looked up on the type).
pub const DLPACK_EXCHANGE_API_ATTRIBUTE: &str = "__dlpack_c_exchange_api__";

/// The minor version gpuport's table states in its header: 1.3 is the
/// header version that defines `DLPackExchangeAPI` with this layout (the
/// tensors the table produces state [`DLPACK_MINOR_VERSION`], as every
/// gpuport export does).
pub const DLPACK_EXCHANGE_API_MINOR_VERSION: u32 = 3;

/// `SetError(error_ctx, kind, message)`: how `DLPackManagedTensorAllocator`
/// reports a failure (`kind` names the error, e.g. a Python exception class).
pub type DLPackSetError =
    unsafe extern "C" fn(error_ctx: *mut c_void, kind: *const std::ffi::c_char, message: *const std::ffi::c_char);

/// `DLPackManagedTensorAllocator`: a new tensor of the `prototype`'s dtype,
/// ndim, shape and device (its other fields are not read) into `*out`;
/// calls `SetError` exactly when it fails.
pub type DLPackManagedTensorAllocator = unsafe extern "C" fn(
    prototype: *mut DLTensor,
    out: *mut *mut DLManagedTensorVersioned,
    error_ctx: *mut c_void,
    set_error: Option<DLPackSetError>,
) -> std::ffi::c_int;

/// `DLPackManagedTensorFromPyObjectNoSync`: an owning tensor of
/// `py_object` (a `PyObject*` of the type the table came from) into
/// `*out`, without stream synchronization.
pub type DLPackManagedTensorFromPyObjectNoSync =
    unsafe extern "C" fn(py_object: *mut c_void, out: *mut *mut DLManagedTensorVersioned) -> std::ffi::c_int;

/// `DLPackManagedTensorToPyObjectNoSync`: the producer's Python object over
/// `tensor`, whose ownership is stolen (on failure too), into `*out_py_object`.
pub type DLPackManagedTensorToPyObjectNoSync =
    unsafe extern "C" fn(tensor: *mut DLManagedTensorVersioned, out_py_object: *mut *mut c_void) -> std::ffi::c_int;

/// `DLPackDLTensorFromPyObjectNoSync`: a non-owning description of
/// `py_object` into `*out`, valid until control returns to the producer.
pub type DLPackDLTensorFromPyObjectNoSync =
    unsafe extern "C" fn(py_object: *mut c_void, out: *mut DLTensor) -> std::ffi::c_int;

/// `DLPackCurrentWorkStream`: the stream the producer works on for the
/// device, into `*out_current_stream` (NULL for host memory, and CUDA's
/// legacy default stream).
pub type DLPackCurrentWorkStream = unsafe extern "C" fn(
    device_type: DLDeviceType,
    device_id: i32,
    out_current_stream: *mut *mut c_void,
) -> std::ffi::c_int;

/// `DLPackExchangeAPIHeader`: the part of the table that stays the same in
/// every version.
#[repr(C)]
#[derive(Debug)]
pub struct DLPackExchangeAPIHeader {
    /// `version`: a consumer checks the major version before reading further.
    pub version: DLPackVersion,
    /// `prev_api`: a table of an older version, or null; a consumer that
    /// does not know `version.major` may walk this chain.
    pub prev_api: *mut DLPackExchangeAPIHeader,
}

/// `DLPackExchangeAPI`: the function table of a producer type.
#[repr(C)]
#[derive(Debug)]
pub struct DLPackExchangeAPI {
    /// `header`.
    pub header: DLPackExchangeAPIHeader,
    /// `managed_tensor_allocator` (the header: must not be NULL).
    pub managed_tensor_allocator: Option<DLPackManagedTensorAllocator>,
    /// `managed_tensor_from_py_object_no_sync` (must not be NULL).
    pub managed_tensor_from_py_object_no_sync: Option<DLPackManagedTensorFromPyObjectNoSync>,
    /// `managed_tensor_to_py_object_no_sync` (must not be NULL).
    pub managed_tensor_to_py_object_no_sync: Option<DLPackManagedTensorToPyObjectNoSync>,
    /// `dltensor_from_py_object_no_sync` (may be NULL).
    pub dltensor_from_py_object_no_sync: Option<DLPackDLTensorFromPyObjectNoSync>,
    /// `current_work_stream` (must not be NULL).
    pub current_work_stream: Option<DLPackCurrentWorkStream>,
}

// SAFETY: a table is immutable plain data (function pointers and a pointer
// to another table) that the header requires to stay alive, unchanged, for
// the whole process; reading it from any thread is sound.
unsafe impl Sync for DLPackExchangeAPI {}
// SAFETY: as above.
unsafe impl Send for DLPackExchangeAPI {}

impl DLPackExchangeAPI {
    /// The table of major version [`DLPACK_MAJOR_VERSION`] that `header`
    /// leads to: the table itself, or the first one down its `prev_api`
    /// chain (at most 64 links are followed), or `None`.
    ///
    /// # Safety
    /// `header` is null or the header of a live `DLPackExchangeAPI` (as a
    /// `__dlpack_c_exchange_api__` capsule holds), every `prev_api` link is
    /// null or such a header, and those tables stay alive and unchanged for
    /// `'a` (the header requires the whole process).
    pub unsafe fn find_major<'a>(header: *const DLPackExchangeAPIHeader) -> Option<&'a DLPackExchangeAPI> {
        let mut h = header;
        for _ in 0..64 {
            if h.is_null() {
                return None;
            }
            // SAFETY: per the contract, `h` is a live header.
            let v = unsafe { &*h };
            if v.version.major == DLPACK_MAJOR_VERSION {
                // SAFETY: a table whose major version is ours has our layout,
                // with the header as its first field (`#[repr(C)]`).
                return Some(unsafe { &*h.cast::<DLPackExchangeAPI>() });
            }
            h = v.prev_api;
        }
        None
    }
}

// Layout checks of the exchange table against the C header (64-bit targets).
#[cfg(target_pointer_width = "64")]
const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(size_of::<DLPackExchangeAPIHeader>() == 16);
    assert!(offset_of!(DLPackExchangeAPIHeader, prev_api) == 8);
    assert!(size_of::<DLPackExchangeAPI>() == 56);
    assert!(offset_of!(DLPackExchangeAPI, managed_tensor_allocator) == 16);
    assert!(offset_of!(DLPackExchangeAPI, managed_tensor_from_py_object_no_sync) == 24);
    assert!(offset_of!(DLPackExchangeAPI, managed_tensor_to_py_object_no_sync) == 32);
    assert!(offset_of!(DLPackExchangeAPI, dltensor_from_py_object_no_sync) == 40);
    assert!(offset_of!(DLPackExchangeAPI, current_work_stream) == 48);
};

//! [`DLPackError`]: a DLPack tensor that [`crate::dlpack`] cannot import, or
//! a request it cannot serve.
//!
//! Public as `gpuport::dlpack::DLPackError`. It is defined in the error
//! layer, beside the [`Error`](super::Error) that wraps it, because the DLPack
//! layer builds on this one: the error layer names nothing above it.

/// A DLPack tensor gpuport cannot import or a request it cannot serve.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DLPackError {
    /// A required pointer was null.
    #[error("DLPack tensor has a null {what}")]
    NullPointer {
        /// Which pointer.
        what: &'static str,
    },
    /// The versioned tensor's major version is not 1.
    #[error("DLPack version {major}.{minor} is not supported; accepted: major version 1")]
    UnsupportedVersion {
        /// Major version found.
        major: u32,
        /// Minor version found.
        minor: u32,
    },
    /// The data type is not one gpuport can hold.
    #[error("DLPack dtype (code {code}, bits {bits}, lanes {lanes}) is not supported; accepted: bool, int/uint 8-64, float 16/32/64, bfloat16, complex 32/64/128, the DLPack 1.1 float8 types (codes 7-14, 8 bits), each with 1 or more lanes, and float6_e2m3fn/float6_e3m2fn (codes 15-16, 6 bits) and float4_e2m1fn (code 17, 4 bits) with 1 lane")]
    UnknownDType {
        /// Type code.
        code: u8,
        /// Bits per lane.
        bits: u8,
        /// Lanes.
        lanes: u16,
    },
    /// A sub-byte (fp6, fp4) tensor in a layout gpuport does not hold, or an
    /// export that could not say its layout.
    #[error("{dtype}: {problem}; gpuport accepts sub-byte types padded only: one element in the low bits of each byte, in a versioned tensor flagged DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED")]
    SubByteLayout {
        /// The element type's name (`float4_e2m1fn`).
        dtype: String,
        /// What was wrong (`the tensor is packed, ...`).
        problem: &'static str,
    },
    /// The tensor holds a different element type than requested.
    #[error("DLPack tensor holds {found}, but {expected} was requested")]
    DTypeMismatch {
        /// The requested type's name.
        expected: String,
        /// The tensor's type's name.
        found: String,
    },
    /// The device type is not one gpuport can use.
    #[error("DLPack device type {device_type} (id {device_id}) is not supported; accepted: kDLCPU, kDLCUDA, kDLCUDAHost, kDLCUDAManaged, kDLROCM, kDLROCMHost")]
    UnsupportedDevice {
        /// The device type code.
        device_type: u32,
        /// The device id.
        device_id: i32,
    },
    /// The operation needs memory in another place (e.g. host-readable).
    #[error("{op} needs {needed} memory, but the tensor is on {found}")]
    WrongDevice {
        /// The operation.
        op: &'static str,
        /// What it needs.
        needed: &'static str,
        /// The tensor's device type name.
        found: String,
    },
    /// `ndim` is negative or does not match the requested rank.
    #[error("DLPack tensor has ndim {found}, expected {expected}")]
    RankMismatch {
        /// The rank requested (or `"a non-negative value"`).
        expected: String,
        /// The tensor's `ndim`.
        found: i32,
    },
    /// An extent is negative.
    #[error("DLPack tensor has extent {value} on axis {axis}; extents must be >= 0")]
    NegativeExtent {
        /// The axis.
        axis: usize,
        /// The extent.
        value: i64,
    },
    /// Sizes or offsets overflow the address space.
    #[error("DLPack tensor shape {shape:?} with strides {strides:?} and byte offset {byte_offset} overflows the address space")]
    Overflow {
        /// Extents.
        shape: Vec<i64>,
        /// Strides in elements.
        strides: Vec<i64>,
        /// Byte offset.
        byte_offset: u64,
    },
    /// The first element is not aligned for the element type.
    #[error("DLPack data address {address:#x} is not aligned to {align} bytes for {dtype}")]
    Misaligned {
        /// Address of the first element.
        address: usize,
        /// Needed alignment.
        align: usize,
        /// Element type name.
        dtype: String,
    },
    /// A contiguous slice was requested from a strided tensor.
    #[error("DLPack tensor with shape {shape:?} and strides {strides:?} is not compact row-major; use a strided view instead")]
    NotContiguous {
        /// Extents.
        shape: Vec<i64>,
        /// Strides in elements.
        strides: Vec<i64>,
    },
    /// Mutable access to a tensor its producer marked read-only.
    #[error("DLPack tensor is read-only (DLPACK_FLAG_BITMASK_READ_ONLY); mutable access is refused")]
    ReadOnly,
    /// The bytes are not valid values of the element type (e.g. a bool of 2).
    #[error("DLPack tensor holds bytes that are not valid {dtype} values")]
    InvalidValues {
        /// Element type name.
        dtype: String,
    },
    /// An export request (`__dlpack__`'s `dl_device`, `copy`, `max_version`)
    /// that cannot be served as asked.
    #[error("{reason}")]
    Refused {
        /// What was asked and why it cannot be done.
        reason: String,
    },
    /// A `stream` argument that is not valid for the memory's device type.
    #[error("{reason}")]
    BadStream {
        /// The value and what is accepted.
        reason: String,
    },
    /// A DLPack device type that names no copy of an array: neither host
    /// memory nor the device memory of the array's device.
    #[error("DLPack device type {device_type} names no copy of an array on {device}: its device copy is DLPack type {device_copy}, its host copy type 1 (kDLCPU); ask for Location::Device for the device copy")]
    NoCopyOn {
        /// The device type asked for.
        device_type: i64,
        /// The array's device, e.g. `cuda:0`.
        device: String,
        /// The DLPack device type of the array's device copy.
        device_copy: u32,
    },
    /// A view over borrowed memory has no owner to keep alive in an export.
    #[error("this view borrows memory it cannot keep alive, so it cannot be exported as a managed tensor; export the MemArray it came from, or use to_dlpack() for a borrowed DLTensor")]
    NoOwner,
    /// An export through a lock context whose block has ended
    /// (`src/dynamic/lock_context.rs`).
    #[error("the lock context with id {id} has exited; the array may have moved or changed since, so make a new LockContext (tensors exported inside stay valid)")]
    BlockEnded {
        /// The block's lock id.
        id: u64,
    },
    /// A tensor with a lazy-view bit set (torch's conjugate or negative
    /// bit): its memory holds the values without it applied.
    #[error("from_dlpack: the {type_name} has the {bit} bit set (a lazy view: its memory holds the values without the {bit} applied, which DLPack cannot describe); call .{resolve} on it first, as its own __dlpack__ requires")]
    LazyView {
        /// The tensor's type name.
        type_name: String,
        /// `"conjugate"` or `"negative"`.
        bit: &'static str,
        /// The call that resolves it, e.g. `"resolve_conj()"`.
        resolve: &'static str,
    },
}

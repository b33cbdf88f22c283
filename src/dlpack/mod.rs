//! DLPack: the C ABI ([`ffi`]), export of arrays and views as managed
//! tensors ([`export`]), and zero-copy import of any producer's tensors
//! ([`import`]).
//!
//! Ownership in the types (after dlpark's local/foreign split):
//! [`ManagedTensor`]/[`ManagedTensorVersioned`] are tensors gpuport produced
//! and still owns until [`into_raw`](ManagedTensor::into_raw) hands them to
//! a consumer; an [`ImportedTensor`] is a foreign tensor, validated field by
//! field, whose producer's deleter runs exactly once when it is dropped.

use crate::backend::MemoryKind;
use crate::error::BackendKind;

pub mod export;
pub mod ffi;
pub mod import;

pub use export::{ExportSource, ManagedTensor, ManagedTensorVersioned};
pub use ffi::{DLDataType, DLDataTypeCode, DLDevice, DLDeviceType, DLPackVersion, DLTensor};
pub use import::ImportedTensor;
// Defined in the error layer, beside the `Error` that wraps it.
pub use crate::error::dlpack::DLPackError;

/// The DLPack device for memory of `kind` on device `ordinal` of `backend`:
/// where the memory really is.
///
/// | backend | Device | Pinned | Managed | Host |
/// | --- | --- | --- | --- | --- |
/// | host | kDLCPU | kDLCPU | kDLCPU | kDLCPU |
/// | cuda | kDLCUDA, ordinal | kDLCUDAHost | kDLCUDAManaged | kDLCPU |
/// | rocm | kDLROCM, ordinal | kDLROCMHost | kDLROCM, ordinal | kDLCPU |
///
/// DLPack has no ROCm managed type; HIP managed memory is device memory
/// that the host may also touch, so it is described as `kDLROCM` (what
/// CuPy and PyTorch do for it).
pub fn dl_device(backend: BackendKind, kind: MemoryKind, ordinal: usize) -> DLDevice {
    let id = i32::try_from(ordinal).unwrap_or(i32::MAX);
    let (device_type, device_id) = match (backend, kind) {
        (BackendKind::Host, _) | (_, MemoryKind::Host) => (DLDeviceType::CPU, 0),
        (BackendKind::Cuda, MemoryKind::Device) => (DLDeviceType::CUDA, id),
        (BackendKind::Cuda, MemoryKind::Pinned) => (DLDeviceType::CUDA_HOST, 0),
        (BackendKind::Cuda, MemoryKind::Managed) => (DLDeviceType::CUDA_MANAGED, 0),
        (BackendKind::Rocm, MemoryKind::Device | MemoryKind::Managed) => (DLDeviceType::ROCM, id),
        (BackendKind::Rocm, MemoryKind::Pinned) => (DLDeviceType::ROCM_HOST, 0),
    };
    DLDevice { device_type, device_id }
}

/// Whether memory of this DLPack device type is host memory, plain or
/// pinned by a GPU runtime: the host device's, which no GPU stream orders.
pub fn is_host_memory(device_type: DLDeviceType) -> bool {
    matches!(device_type, DLDeviceType::CPU | DLDeviceType::CUDA_HOST | DLDeviceType::ROCM_HOST)
}

/// Whether the host can read memory of this DLPack device type directly:
/// host memory, and CUDA managed memory.
pub fn is_host_accessible(device_type: DLDeviceType) -> bool {
    is_host_memory(device_type) || device_type == DLDeviceType::CUDA_MANAGED
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_error_names_the_major_version_gpuport_accepts() {
        let e = DLPackError::UnsupportedVersion { major: ffi::DLPACK_MAJOR_VERSION + 1, minor: 0 };
        assert!(e.to_string().ends_with(&format!("accepted: major version {}", ffi::DLPACK_MAJOR_VERSION)), "{e}");
    }
}

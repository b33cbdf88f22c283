//! What a CUDA device is: its [`DeviceInfo`] from the driver's attributes.

use cudarc::driver::result as cu;
use cudarc::driver::sys;

use super::check;
use crate::backend::{DeviceInfo, DeviceLimits};
use crate::error::{BackendKind, Result};

pub(super) fn attribute(dev: sys::CUdevice, attr: sys::CUdevice_attribute) -> Result<i32> {
    // SAFETY: `dev` came from `cuDeviceGet`; the call writes one int.
    check("cuDeviceGetAttribute", unsafe { cu::device::get_attribute(dev, attr) })
}

pub(super) fn query_info(dev: sys::CUdevice, ordinal: usize) -> Result<DeviceInfo> {
    use sys::CUdevice_attribute::*;
    // A negative attribute (never reported) reads as 0, as `max(0)` did.
    let a = |attr| attribute(dev, attr).map(|v| u32::try_from(v).unwrap_or(0));
    Ok(DeviceInfo {
        backend: BackendKind::Cuda,
        ordinal,
        name: check("cuDeviceGetName", cu::device::get_name(dev))?,
        arch: format!(
            "sm_{}{}",
            a(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
            a(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?
        ),
        multiprocessors: a(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?,
        // SAFETY: `dev` came from `cuDeviceGet`.
        total_memory: check("cuDeviceTotalMem", unsafe { cu::device::total_mem(dev) })?,
        managed_memory: a(CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY)? != 0,
        stream_ordered_alloc: a(CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED)? != 0,
        limits: DeviceLimits {
            max_threads_per_block: a(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?,
            max_block_dim: [
                a(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X)?,
                a(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y)?,
                a(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z)?,
            ],
            max_grid_dim: [
                a(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X)?,
                a(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y)?,
                a(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z)?,
            ],
            max_shared_memory_per_block: a(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)? as usize,
            warp_size: a(CU_DEVICE_ATTRIBUTE_WARP_SIZE)?,
        },
    })
}

//! CUDA's calls that place managed memory ([`ManagedCalls`]):
//! `cuMemPrefetchAsync_v2` and `cuMemAdvise_v2`, which take a
//! `CUmemLocation` (the CUDA 13 forms; driver 12.2 and later), and the
//! device's `CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS`.

use cudarc::driver::result as cu;
use cudarc::driver::sys;

use super::info::attribute;
use super::{check, CudaDriver};
use crate::backend::gpu::{self, ManagedCalls};
use crate::backend::{Advice, ManagedPlace};
use crate::error::{BackendKind, Error, Result};

/// First driver version (12.2) with the `_v2` calls.
const DRIVER_12_2: i32 = 12020;

/// CUDA's managed-memory calls.
pub struct CudaManaged;

fn status(call: &'static str, s: sys::CUresult) -> Result<()> {
    gpu::check::<CudaDriver>(call, s)
}

fn location(place: ManagedPlace) -> sys::CUmemLocation {
    use sys::CUmemLocationType::{CU_MEM_LOCATION_TYPE_DEVICE, CU_MEM_LOCATION_TYPE_HOST};
    match place {
        ManagedPlace::Host => sys::CUmemLocation { type_: CU_MEM_LOCATION_TYPE_HOST, id: 0 },
        // Ordinals below the device count fit an int (checked by the caller).
        ManagedPlace::Device(n) => {
            sys::CUmemLocation { type_: CU_MEM_LOCATION_TYPE_DEVICE, id: i32::try_from(n).unwrap_or(i32::MAX) }
        }
    }
}

fn advice(a: Advice) -> sys::CUmem_advise {
    use sys::CUmem_advise::*;
    match a {
        Advice::SetReadMostly => CU_MEM_ADVISE_SET_READ_MOSTLY,
        Advice::UnsetReadMostly => CU_MEM_ADVISE_UNSET_READ_MOSTLY,
        Advice::SetPreferredLocation => CU_MEM_ADVISE_SET_PREFERRED_LOCATION,
        Advice::UnsetPreferredLocation => CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION,
        Advice::SetAccessedBy => CU_MEM_ADVISE_SET_ACCESSED_BY,
        Advice::UnsetAccessedBy => CU_MEM_ADVISE_UNSET_ACCESSED_BY,
    }
}

/// `Unsupported` on a driver older than 12.2 (the `_v2` symbols would be missing).
fn needs_v2(d: &CudaDriver, op: &'static str) -> Result<()> {
    if d.driver_version < DRIVER_12_2 {
        return Err(Error::Unsupported {
            op,
            backend: BackendKind::Cuda,
            hint: Some(format!("needs CUDA driver 12.2 or later; this one is {}", d.driver_version)),
        });
    }
    Ok(())
}

// SAFETY: each method makes the CUDA call its name says on the range and
// place given, and reports failure as an error.
unsafe impl ManagedCalls<CudaDriver> for CudaManaged {
    fn concurrent_managed_access(_: &CudaDriver, ordinal: usize) -> Result<bool> {
        let id =
            i32::try_from(ordinal).map_err(|e| Error::InvalidArgument { name: "device", reason: e.to_string() })?;
        let dev = check("cuDeviceGet", cu::device::get(id))?;
        Ok(attribute(dev, sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS)? != 0)
    }

    unsafe fn prefetch(d: &CudaDriver, ptr: u64, len: usize, to: ManagedPlace, stream: sys::CUstream) -> Result<()> {
        needs_v2(d, "prefetching managed memory")?;
        // SAFETY: the caller's contract: live managed memory, a stream of
        // this context (current), and an existing place; flags must be 0.
        status("cuMemPrefetchAsync_v2", unsafe { sys::cuMemPrefetchAsync_v2(ptr, len, location(to), 0, stream) })
    }

    unsafe fn advise(d: &CudaDriver, ptr: u64, len: usize, a: Advice, place: ManagedPlace) -> Result<()> {
        needs_v2(d, "advice on managed memory")?;
        // SAFETY: the caller's contract: live managed memory and an existing place.
        status("cuMemAdvise_v2", unsafe { sys::cuMemAdvise_v2(ptr, len, advice(a), location(place)) })
    }
}

//! HIP's calls that place managed memory ([`ManagedCalls`]):
//! `hipMemPrefetchAsync` and `hipMemAdvise` (device `hipCpuDeviceId`, -1,
//! for the host; the same signatures from ROCm 5.2 to 7), and
//! `hipDeviceAttributeConcurrentManagedAccess`. Optional symbols: a runtime
//! without them fails these calls alone, with
//! [`Error::Unsupported`](crate::Error::Unsupported).

use std::ffi::c_int;

use super::info::attribute;
use super::sys::{self, attr};
use super::{check, dptr, HipDriver};
use crate::backend::gpu::ManagedCalls;
use crate::backend::{Advice, ManagedPlace};
use crate::error::{Error, Result};

/// HIP's managed-memory calls.
pub struct HipManaged;

/// `hipCpuDeviceId`: the host, where HIP takes a device id.
const CPU_DEVICE_ID: c_int = -1;

fn device_id(place: ManagedPlace) -> Result<c_int> {
    match place {
        ManagedPlace::Host => Ok(CPU_DEVICE_ID),
        ManagedPlace::Device(n) => {
            c_int::try_from(n).map_err(|e| Error::InvalidArgument { name: "device", reason: e.to_string() })
        }
    }
}

// SAFETY: each method makes the HIP call its name says on the range and
// device given, and reports failure as an error.
unsafe impl ManagedCalls<HipDriver> for HipManaged {
    fn concurrent_managed_access(d: &HipDriver, ordinal: usize) -> Result<bool> {
        Ok(attribute(d.rt, device_id(ManagedPlace::Device(ordinal))?, attr::CONCURRENT_MANAGED_ACCESS)? != 0)
    }

    unsafe fn prefetch(d: &HipDriver, ptr: u64, len: usize, to: ManagedPlace, stream: sys::hipStream_t) -> Result<()> {
        let f = d.api().hipMemPrefetchAsync.ok_or_else(|| d.missing_function("hipMemPrefetchAsync", "prefetch"))?;
        let device = device_id(to)?;
        // SAFETY: the caller's contract: live managed memory, a stream of
        // this device (current), and an existing place.
        check("hipMemPrefetchAsync", unsafe { f(dptr(ptr).cast_const(), len, device, stream) })
    }

    unsafe fn advise(d: &HipDriver, ptr: u64, len: usize, advice: Advice, place: ManagedPlace) -> Result<()> {
        let f = d.api().hipMemAdvise.ok_or_else(|| d.missing_function("hipMemAdvise", "advise"))?;
        let device = device_id(place)?;
        // The codes are 1 to 6: they fit an int.
        let code = c_int::try_from(advice.code()).unwrap_or(0);
        // SAFETY: the caller's contract: live managed memory and an existing place.
        check("hipMemAdvise", unsafe { f(dptr(ptr).cast_const(), len, code, device) })
    }
}

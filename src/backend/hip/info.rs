//! What a HIP device is: its [`DeviceInfo`] from the runtime's attributes
//! and, for the architecture, `hipDeviceProp_t`.

use std::ffi::{c_char, c_int, c_void, CStr};

use super::runtime::Runtime;
use super::{check, sys};
use crate::backend::{DeviceInfo, DeviceLimits};
use crate::error::{BackendKind, Error, Result};

/// `ordinal` as the HIP runtime's device id (a C int), or
/// [`Error::InvalidDeviceSpec`] where it is out of that range.
pub(super) fn device_id(ordinal: usize) -> Result<c_int> {
    c_int::try_from(ordinal).map_err(|_| Error::InvalidDeviceSpec {
        spec: format!("rocm:{ordinal}"),
        reason: "the ordinal is out of the runtime's int range".into(),
    })
}

pub(super) fn attribute(rt: &Runtime, ordinal: c_int, attr: sys::hipDeviceAttribute_t) -> Result<i32> {
    let mut value = 0;
    // SAFETY: `ordinal` is a valid device; the call writes one int.
    check("hipDeviceGetAttribute", unsafe { (rt.api().hipDeviceGetAttribute)(&mut value, attr, ordinal) })?;
    Ok(value)
}

/// The device's target id (`gfx90a:sramecc+:xnack-`) from `hipDeviceProp_t.gcnArchName`.
///
/// The struct's layout depends on the ROCm version, so it is never declared
/// here: the runtime fills a zeroed buffer much larger than any layout
/// ([`sys::DEVICE_PROP_BUFFER_BYTES`]), and the name is read at the field's
/// offset in the layout of the symbol that was called. A name that does not
/// look like a target (`gfx…`, or `sm_…` from the test shim) falls back to
/// a scan of the buffer for a field starting with `gfx`. `None` if neither
/// works; hiprtc then compiles for the current device.
pub(super) fn target_id(rt: &Runtime, ordinal: c_int) -> Option<String> {
    let api = rt.api();
    let (get, offset) = match (api.hipGetDevicePropertiesR0600, api.hipGetDeviceProperties) {
        (Some(f), _) => (f, sys::GCN_ARCH_NAME_OFFSET_R0600),
        (None, Some(f)) => (f, sys::GCN_ARCH_NAME_OFFSET_R0000),
        (None, None) => return None,
    };
    let mut buf = vec![0u64; sys::DEVICE_PROP_BUFFER_BYTES / 8];
    // SAFETY: the buffer is zeroed, 8-byte aligned and more than five times
    // the size of either layout, so the runtime's write stays inside it.
    if unsafe { get(buf.as_mut_ptr().cast::<c_void>(), ordinal) } != sys::hipSuccess {
        return None;
    }
    // SAFETY: `buf` is `DEVICE_PROP_BUFFER_BYTES` initialized bytes.
    let bytes = unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), sys::DEVICE_PROP_BUFFER_BYTES) };
    parse_target_id(bytes, offset)
}

/// Reads a target id at `offset` in a `hipDeviceProp_t` image, or scans for one.
fn parse_target_id(bytes: &[u8], offset: usize) -> Option<String> {
    let field = |at: usize| -> Option<&str> {
        let f = bytes.get(at..at.checked_add(sys::GCN_ARCH_NAME_LEN)?)?;
        let end = f.iter().position(|&b| b == 0)?;
        std::str::from_utf8(&f[..end]).ok()
    };
    let plausible = |s: &str| {
        (s.starts_with("gfx") || s.starts_with("sm_")) && s.len() > 3 && s.bytes().all(|b| b.is_ascii_graphic())
    };
    if let Some(s) = field(offset).filter(|s| plausible(s)) {
        return Some(s.to_string());
    }
    (0..bytes.len())
        .filter(|&i| (i == 0 || bytes[i - 1] == 0) && bytes[i..].starts_with(b"gfx"))
        .find_map(|i| field(i).filter(|s| plausible(s)).map(str::to_string))
}

pub(super) fn query_info(
    rt: &Runtime,
    dev: sys::hipDevice_t,
    ordinal: usize,
    target: Option<&str>,
) -> Result<DeviceInfo> {
    use sys::attr::*;
    let id = device_id(ordinal)?;
    // A negative attribute (never reported) reads as 0, as `max(0)` did.
    let a = |attr| attribute(rt, id, attr).map(|v| u32::try_from(v).unwrap_or(0));
    let mut name = [0 as c_char; 256];
    // SAFETY: `name` has room for 256 chars including the NUL; `dev` came from `hipDeviceGet`.
    check("hipDeviceGetName", unsafe { (rt.api().hipDeviceGetName)(name.as_mut_ptr(), 256, dev) })?;
    let mut total_memory = 0usize;
    // SAFETY: writes one size_t.
    check("hipDeviceTotalMem", unsafe { (rt.api().hipDeviceTotalMem)(&mut total_memory, dev) })?;
    // Opt-in shared memory is the launch limit where reported; older runtimes
    // report 0 or fail, and then the plain per-block maximum is the limit.
    let shared = match a(SHARED_MEM_PER_BLOCK_OPTIN) {
        Ok(v) if v > 0 => v,
        _ => a(MAX_SHARED_MEMORY_PER_BLOCK)?,
    };
    Ok(DeviceInfo {
        backend: BackendKind::Rocm,
        ordinal,
        // SAFETY: hipDeviceGetName wrote a NUL-terminated string into `name` (zeroed past it).
        name: unsafe { CStr::from_ptr(name.as_ptr()) }.to_string_lossy().into_owned(),
        arch: match target {
            Some(t) => t.split(':').next().unwrap_or(t).to_string(),
            None => format!(
                "unknown (compute capability {}.{})",
                a(COMPUTE_CAPABILITY_MAJOR)?,
                a(COMPUTE_CAPABILITY_MINOR)?
            ),
        },
        multiprocessors: a(MULTIPROCESSOR_COUNT)?,
        total_memory,
        managed_memory: a(MANAGED_MEMORY)? != 0,
        stream_ordered_alloc: a(MEMORY_POOLS_SUPPORTED).unwrap_or(0) != 0
            && rt.api().hipMallocAsync.is_some()
            && rt.api().hipFreeAsync.is_some(),
        limits: DeviceLimits {
            max_threads_per_block: a(MAX_THREADS_PER_BLOCK)?,
            max_block_dim: [a(MAX_BLOCK_DIM_X)?, a(MAX_BLOCK_DIM_Y)?, a(MAX_BLOCK_DIM_Z)?],
            max_grid_dim: [a(MAX_GRID_DIM_X)?, a(MAX_GRID_DIM_Y)?, a(MAX_GRID_DIM_Z)?],
            max_shared_memory_per_block: shared as usize,
            warp_size: a(WARP_SIZE)?,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_id_is_read_at_the_layout_offset() {
        let mut props = vec![0u8; sys::DEVICE_PROP_BUFFER_BYTES];
        props[..18].copy_from_slice(b"AMD Instinct MI210");
        let id = b"gfx90a:sramecc+:xnack-";
        let at = sys::GCN_ARCH_NAME_OFFSET_R0600;
        props[at..at + id.len()].copy_from_slice(id);
        assert_eq!(parse_target_id(&props, at).as_deref(), Some("gfx90a:sramecc+:xnack-"));
    }

    #[test]
    fn target_id_is_found_by_scanning_when_the_offset_is_wrong() {
        let mut props = vec![0u8; sys::DEVICE_PROP_BUFFER_BYTES];
        let at = sys::GCN_ARCH_NAME_OFFSET_R0000;
        props[at..at + 7].copy_from_slice(b"gfx1030");
        assert_eq!(parse_target_id(&props, sys::GCN_ARCH_NAME_OFFSET_R0600).as_deref(), Some("gfx1030"));
        assert_eq!(parse_target_id(&vec![0u8; 4096], 396), None);
    }
}

//! Which copy of an array a move or an export goes to, as a binding's
//! caller names it: `"host"`, `"device"`, a backend's name, or a DLPack
//! device type, with an optional device id that must be the array's own.
//!
//! ```
//! use gpuport::array::Location;
//! use gpuport::dynamic::target::{move_target, TargetName};
//! let dev = gpuport::open("host")?;
//! assert_eq!(move_target(&dev, TargetName::Name("CPU"), None)?, Location::Host);
//! assert_eq!(move_target(&dev, TargetName::Name("device"), Some(0))?, Location::Device);
//! assert!(move_target(&dev, TargetName::DLPack(2), None).is_err()); // kDLCUDA: no CUDA copy on host
//! # Ok::<(), gpuport::Error>(())
//! ```

use crate::array::Location;
use crate::backend::registry::AnyDevice;
use crate::backend::MemoryKind;
use crate::dlpack::{dl_device, DLDevice, DLDeviceType, DLPackError};
use crate::error::{BackendKind, Error, Result};

/// A target as the caller wrote it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetName<'a> {
    /// `"host"` or `"cpu"` (the host copy), `"device"`, or the array's
    /// backend and anything after it (`"cuda"`, `"cuda:0"`: the device copy
    /// of a GPU array); any case.
    Name(&'a str),
    /// A DLPack device type: `kDLCPU` or `kDLCUDAHost` for the host copy,
    /// the device memory type of a GPU array's backend for its device copy.
    DLPack(i64),
}

/// The DLPack device of `device`'s device memory (type `kDLCUDA`,
/// `kDLROCM`; `kDLCPU` for the host backend; id the ordinal).
pub fn device_copy_dl(device: &AnyDevice) -> DLDevice {
    dl_device(device.backend(), MemoryKind::Device, device.info().ordinal)
}

/// The copy that `target` names of an array on `device`, where a
/// `device_id`, if given, must be `device`'s ordinal when the device copy
/// is named (the host copy takes any).
///
/// Refused: a name that is neither a copy nor the array's backend
/// ([`Error::InvalidArgument`]); a DLPack device type that is neither host
/// memory nor `device`'s device memory ([`DLPackError::NoCopyOn`]: a host
/// array has no copy on a GPU); a device id of another device
/// ([`Error::DeviceMismatch`]).
pub fn move_target(device: &AnyDevice, target: TargetName<'_>, device_id: Option<usize>) -> Result<Location> {
    let on_gpu = device.backend() != BackendKind::Host;
    let own = device_copy_dl(device).device_type;
    let is = |t: i64, d: DLDeviceType| t == i64::from(d.0);
    let to = match target {
        TargetName::Name(name) => match name.to_ascii_lowercase().as_str() {
            "host" | "cpu" => Location::Host,
            "device" => Location::Device,
            other if on_gpu && other.starts_with(device.backend().name()) => Location::Device,
            other => {
                return Err(Error::InvalidArgument {
                    name: "device_type",
                    reason: format!(
                    "unknown target {other:?}; use \"host\", \"device\" or a DLPack device type (the array is on {})",
                    device.info().spec()
                ),
                })
            }
        },
        TargetName::DLPack(t) if is(t, DLDeviceType::CPU) || is(t, DLDeviceType::CUDA_HOST) => Location::Host,
        TargetName::DLPack(t) if on_gpu && is(t, own) => Location::Device,
        TargetName::DLPack(t) => {
            return Err(
                DLPackError::NoCopyOn { device_type: t, device: device.info().spec(), device_copy: own.0 }.into()
            )
        }
    };
    match device_id {
        Some(id) if to == Location::Device && id != device.info().ordinal => Err(Error::DeviceMismatch {
            what: "device_id",
            expected: device.info().spec(),
            found: format!("{}:{id}", device.backend()),
        }),
        _ => Ok(to),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host() -> AnyDevice {
        crate::open("host").unwrap()
    }

    #[test]
    fn names_pick_the_host_or_the_device_copy_in_any_case() {
        let dev = host();
        for (name, to) in [("host", Location::Host), ("CPU", Location::Host), ("Device", Location::Device)] {
            assert_eq!(move_target(&dev, TargetName::Name(name), None).unwrap(), to, "{name}");
        }
    }

    #[test]
    fn a_host_array_has_no_backend_named_copy() {
        // "host" is a copy's name, not the backend's: "host:0" names nothing.
        let e = move_target(&host(), TargetName::Name("host:0"), None).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { name: "device_type", .. }), "{e}");
        let e = move_target(&host(), TargetName::Name("tpu"), None).unwrap_err();
        assert!(e.to_string().contains("unknown target \"tpu\""), "{e}");
    }

    #[test]
    fn dlpack_host_types_name_the_host_copy_and_others_name_no_copy_of_a_host_array() {
        let dev = host();
        for t in [DLDeviceType::CPU, DLDeviceType::CUDA_HOST] {
            assert_eq!(move_target(&dev, TargetName::DLPack(t.0.into()), None).unwrap(), Location::Host);
        }
        for t in [DLDeviceType::CUDA, DLDeviceType::ROCM, DLDeviceType::CUDA_MANAGED] {
            let e = move_target(&dev, TargetName::DLPack(t.0.into()), None).unwrap_err();
            let Error::DLPack(DLPackError::NoCopyOn { device_type, device_copy, .. }) = e else { panic!("{e}") };
            assert_eq!((device_type, device_copy), (t.0.into(), DLDeviceType::CPU.0));
        }
    }

    #[test]
    fn a_device_id_is_checked_only_for_the_device_copy() {
        let dev = host();
        assert_eq!(move_target(&dev, TargetName::Name("host"), Some(3)).unwrap(), Location::Host);
        assert_eq!(move_target(&dev, TargetName::Name("device"), Some(0)).unwrap(), Location::Device);
        let e = move_target(&dev, TargetName::Name("device"), Some(3)).unwrap_err();
        let Error::DeviceMismatch { what, expected, found } = e else { panic!("{e}") };
        assert_eq!((what, expected.as_str(), found.as_str()), ("device_id", "host", "host:3"));
    }
}

//! Run-time choice of backend and device.
//!
//! [`backends`] lists every backend gpuport knows, whether it is compiled in,
//! whether it loaded, and why not. [`open`] opens a device from a spec
//! (`"host"`, `"cuda:0"`, `"rocm:1"`), [`default_device`] from
//! `GPUPORT_DEVICE` or the first GPU, else the host.
//!
//! The result is an [`AnyDevice`], an [`Any`](super::any::Any) over the compiled-in
//! backends; [`on_backend!`](crate::on_backend) runs generic code on it.

use std::fmt;
use std::sync::Once;

pub use super::any::{AnyDevice, Devices};
use super::host::HostDevice;
use super::library::{self, LibraryChoice};
use super::{Device, DeviceInfo};
use crate::error::{BackendKind, Error, Result};

#[cfg(feature = "cuda")]
use super::cuda::CudaDevice;
#[cfg(feature = "rocm")]
use super::hip::RocmDevice;

/// The environment variable naming the default device spec.
pub const DEVICE_ENV: &str = "GPUPORT_DEVICE";

/// What one backend looks like from this process.
///
/// Display writes one line that names the backend once: `host: 1 device(s)`,
/// `cuda: unavailable: could not load libcuda (tried …)`, `rocm: not compiled
/// in (rebuild with `--features rocm`)`.
#[derive(Debug)]
pub struct BackendStatus {
    /// The backend.
    pub kind: BackendKind,
    /// Whether this binary was built with it.
    pub compiled: bool,
    /// Its devices, or why there are none.
    pub devices: Result<Vec<DeviceInfo>>,
    /// The vendor libraries it loaded so far: which file, and why
    /// (docs/design.md#loading-vendor-libraries).
    pub libraries: Vec<LibraryChoice>,
}

impl fmt::Display for BackendStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = self.kind;
        match &self.devices {
            Ok(devices) => write!(f, "{kind}: {} device(s)", devices.len()),
            Err(Error::BackendNotCompiled { feature, .. }) => {
                write!(f, "{kind}: not compiled in (rebuild with `--features {feature}`)")
            }
            Err(why) => {
                // The error names the backend itself ("cuda is unavailable: ...").
                let why = why.to_string();
                let (unavailable, named) = (format!("{kind} is unavailable: "), format!("{kind}: "));
                let reason = why.strip_prefix(&unavailable).or_else(|| why.strip_prefix(&named)).unwrap_or(&why);
                write!(f, "{kind}: unavailable: {reason}")
            }
        }
    }
}

fn not_compiled(kind: BackendKind) -> Error {
    Error::BackendNotCompiled { backend: kind, feature: kind.feature().unwrap_or("") }
}

/// Every device of backend `D`, or why there are none.
fn list<D: Device>() -> Result<Vec<DeviceInfo>> {
    (0..D::count()?).map(|i| D::open(i).map(|d| d.info().clone())).collect()
}

/// Lists every backend gpuport knows: compiled in or not, loaded or not, and its devices.
///
/// ```
/// for status in gpuport::backends() {
///     println!("{status}"); // "cuda: unavailable: could not load libcuda (tried …)"
///     if let Ok(devices) = &status.devices {
///         for d in devices {
///             println!("  {} {}", d.spec(), d.name);
///         }
///     }
/// }
/// ```
pub fn backends() -> Vec<BackendStatus> {
    BackendKind::ALL
        .into_iter()
        .map(|kind| {
            let (compiled, devices) = match kind {
                BackendKind::Host => (true, list::<HostDevice>()),
                #[cfg(feature = "cuda")]
                BackendKind::Cuda => (true, list::<CudaDevice>()),
                #[cfg(feature = "rocm")]
                BackendKind::Rocm => (true, list::<RocmDevice>()),
                #[allow(unreachable_patterns)]
                _ => (false, Err(not_compiled(kind))),
            };
            BackendStatus { kind, compiled, devices, libraries: library::chosen_for(kind) }
        })
        .collect()
}

/// Parses a device spec into a backend and an ordinal.
///
/// Accepted: `host`, `host:0`, `cuda`, `cuda:N`, `rocm`, `rocm:N` (case-insensitive;
/// `hip` is accepted for `rocm`). A missing ordinal means 0.
pub fn parse_spec(spec: &str) -> Result<(BackendKind, usize)> {
    let invalid = |reason: String| Error::InvalidDeviceSpec { spec: spec.to_string(), reason };
    let lowered = spec.trim().to_ascii_lowercase();
    let (name, ordinal) = match lowered.split_once(':') {
        Some((name, ord)) => {
            let ordinal = ord
                .parse::<usize>()
                .map_err(|_| invalid(format!("{ord:?} is not a device number (expected 0, 1, ...)")))?;
            (name, ordinal)
        }
        None => (lowered.as_str(), 0),
    };
    let kind = match name {
        "host" | "cpu" => BackendKind::Host,
        "cuda" => BackendKind::Cuda,
        "rocm" | "hip" => BackendKind::Rocm,
        "" => return Err(invalid("empty spec".into())),
        other => return Err(invalid(format!("unknown backend {other:?}"))),
    };
    Ok((kind, ordinal))
}

/// Opens a device from a spec such as `"host"`, `"cuda:0"` or `"rocm:1"`.
///
/// ```
/// let dev = gpuport::open("host").unwrap();
/// assert_eq!(dev.backend(), gpuport::BackendKind::Host);
/// assert!(gpuport::open("tpu:0").is_err());
/// ```
pub fn open(spec: &str) -> Result<AnyDevice> {
    let (kind, ordinal) = parse_spec(spec)?;
    open_kind(kind, ordinal)
}

/// Opens device `ordinal` of backend `kind`: [`open`] without the spec
/// string, for callers that hold the two numbers (an allocator hook).
///
/// ```
/// let dev = gpuport::open_kind(gpuport::BackendKind::Host, 0).unwrap();
/// assert_eq!(dev.info().spec(), "host");
/// ```
pub fn open_kind(kind: BackendKind, ordinal: usize) -> Result<AnyDevice> {
    match kind {
        BackendKind::Host => Ok(AnyDevice::Host(HostDevice::open(ordinal)?)),
        #[cfg(feature = "cuda")]
        BackendKind::Cuda => Ok(AnyDevice::Cuda(CudaDevice::open(ordinal)?)),
        #[cfg(feature = "rocm")]
        BackendKind::Rocm => Ok(AnyDevice::Rocm(RocmDevice::open(ordinal)?)),
        #[allow(unreachable_patterns)]
        other => Err(not_compiled(other)),
    }
}

/// The default device and, where a GPU was passed over, why.
///
/// Display shows the device's spec followed by the reasons, e.g.
/// `host (passed over: cuda is unavailable: could not load libcuda (tried …))`.
#[derive(Debug, Clone)]
pub struct DefaultDevice {
    /// The chosen device.
    pub device: AnyDevice,
    /// One line per backend that was tried and could not be used.
    pub notes: Vec<String>,
}

impl fmt::Display for DefaultDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.device.info().spec())?;
        if !self.notes.is_empty() {
            write!(f, " (passed over: {})", self.notes.join("; "))?;
        }
        Ok(())
    }
}

/// Opens the default device: `GPUPORT_DEVICE` if set, else the first GPU of
/// any compiled-in backend that loads, else the host. The notes say why each
/// skipped GPU backend was unavailable, so callers can print a clear message;
/// the result's Display shows them too.
///
/// A fallback is also logged through the [`log`] facade, once per process:
/// a warning when a compiled-in GPU backend could not be used, at info level
/// when no GPU backend is compiled in (the build chose the host).
///
/// An invalid `GPUPORT_DEVICE` is an error, never silently replaced.
pub fn default_device() -> Result<DefaultDevice> {
    if let Ok(spec) = std::env::var(DEVICE_ENV) {
        if !spec.trim().is_empty() {
            return open(&spec).map(|device| DefaultDevice { device, notes: vec![] }).map_err(|e| match e {
                Error::InvalidDeviceSpec { spec, reason } => {
                    Error::InvalidDeviceSpec { spec, reason: format!("{reason} (from {DEVICE_ENV})") }
                }
                other => other,
            });
        }
    }
    let mut notes = Vec::new();
    let mut gpu_compiled = false;
    for kind in [BackendKind::Cuda, BackendKind::Rocm] {
        match open(&format!("{kind}:0")) {
            Ok(device) => return Ok(DefaultDevice { device, notes }),
            Err(e) => {
                gpu_compiled |= !matches!(e, Error::BackendNotCompiled { .. });
                notes.push(e.to_string());
            }
        }
    }
    let chosen = DefaultDevice { device: open("host")?, notes };
    static LOGGED: Once = Once::new();
    log_fallback(&LOGGED, &chosen, gpu_compiled);
    Ok(chosen)
}

/// Logs a fallback to the host once per `once` (see [`default_device`]).
fn log_fallback(once: &Once, chosen: &DefaultDevice, gpu_compiled: bool) {
    once.call_once(|| {
        let level = if gpu_compiled { log::Level::Warn } else { log::Level::Info };
        log::log!(level, "default device: {chosen}");
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_to_backend_and_ordinal() {
        assert_eq!(parse_spec("host").unwrap(), (BackendKind::Host, 0));
        assert_eq!(parse_spec(" CUDA:3 ").unwrap(), (BackendKind::Cuda, 3));
        assert_eq!(parse_spec("rocm").unwrap(), (BackendKind::Rocm, 0));
        assert_eq!(parse_spec("hip:1").unwrap(), (BackendKind::Rocm, 1));
        for bad in ["", "gpu", "cuda:", "cuda:-1", "cuda:x", "host:1:2"] {
            assert!(matches!(parse_spec(bad), Err(Error::InvalidDeviceSpec { .. })), "{bad:?} should be invalid");
        }
    }

    /// Keeps every record logged in this test binary.
    struct Recorder(std::sync::Mutex<Vec<(log::Level, String)>>);

    impl log::Log for Recorder {
        fn enabled(&self, _: &log::Metadata<'_>) -> bool {
            true
        }
        fn log(&self, record: &log::Record<'_>) {
            let mut records = self.0.lock().unwrap_or_else(|p| p.into_inner());
            records.push((record.level(), record.args().to_string()));
        }
        fn flush(&self) {}
    }

    static RECORDER: Recorder = Recorder(std::sync::Mutex::new(Vec::new()));

    #[test]
    fn a_status_line_names_its_backend_once() {
        let status = |kind, devices| BackendStatus { kind, compiled: true, devices, libraries: vec![] }.to_string();
        let missing =
            Error::LibraryNotFound { backend: BackendKind::Cuda, library: "libcuda", tried: "libcuda.so.1".into() };
        assert_eq!(
            status(BackendKind::Cuda, Err(missing)),
            "cuda: unavailable: could not load libcuda (tried libcuda.so.1); it comes with the NVIDIA driver, and the \
             loader searches LD_LIBRARY_PATH"
        );
        let hip = Error::LibraryNotFound { backend: BackendKind::Rocm, library: "libamdhip64", tried: "x".into() };
        assert!(hip.to_string().contains("GPUPORT_HIP_LIBRARY=") && hip.to_string().contains("ROCM_PATH="), "{hip}");
        let none = Error::NoDevice { backend: BackendKind::Rocm, reason: "ROCm loaded, no device".into() };
        assert_eq!(status(BackendKind::Rocm, Err(none)), "rocm: unavailable: ROCm loaded, no device");
        assert_eq!(
            status(BackendKind::Rocm, Err(not_compiled(BackendKind::Rocm))),
            "rocm: not compiled in (rebuild with `--features rocm`)"
        );
        let driver = Error::Driver(crate::DriverError {
            backend: BackendKind::Cuda,
            call: "cuInit",
            code: 100,
            name: "CUDA_ERROR_NO_DEVICE".into(),
            message: "no CUDA-capable device is detected".into(),
        });
        assert_eq!(
            status(BackendKind::Cuda, Err(driver)),
            "cuda: unavailable: cuInit failed with CUDA_ERROR_NO_DEVICE (100): no CUDA-capable device is detected"
        );
        assert_eq!(status(BackendKind::Host, Ok(vec![])), "host: 0 device(s)");
    }

    #[test]
    fn a_fallback_shows_its_reasons_and_is_logged_once() {
        let _ = log::set_logger(&RECORDER);
        log::set_max_level(log::LevelFilter::Trace);
        let notes = vec![
            "cuda is unavailable: could not load libcuda (tried libcuda.so.1)".to_string(),
            not_compiled(BackendKind::Rocm).to_string(),
        ];
        let chosen = DefaultDevice { device: open("host").unwrap(), notes: notes.clone() };
        let shown = chosen.to_string();
        assert!(shown.starts_with("host (passed over: "), "{shown}");
        for note in &notes {
            assert!(shown.contains(note.as_str()), "{shown} lacks {note}");
        }
        let plain = DefaultDevice { device: open("host").unwrap(), notes: vec![] };
        assert_eq!(plain.to_string(), "host");

        let once = Once::new();
        for _ in 0..3 {
            log_fallback(&once, &chosen, true);
        }
        let records = RECORDER.0.lock().unwrap_or_else(|p| p.into_inner());
        let ours: Vec<_> =
            records.iter().filter(|(_, m)| m.contains("could not load libcuda (tried libcuda.so.1)")).collect();
        assert_eq!(ours.len(), 1, "{records:?}");
        assert_eq!(ours[0].0, log::Level::Warn);
        assert_eq!(ours[0].1, format!("default device: {shown}"));
    }

    #[test]
    fn every_backend_is_listed_with_a_reason_when_unavailable() {
        let all = backends();
        assert_eq!(all.len(), BackendKind::ALL.len());
        for s in &all {
            if let Err(e) = &s.devices {
                assert!(!e.to_string().is_empty());
            }
            let line = s.to_string();
            let rest = line.strip_prefix(&format!("{}: ", s.kind)).unwrap_or_else(|| panic!("{line}"));
            assert!(!rest.contains(&format!("{} is unavailable", s.kind)), "{line}");
            assert!(!rest.contains(&format!("the {} backend", s.kind)), "{line}");
        }
        let host = all.iter().find(|s| s.kind == BackendKind::Host).unwrap();
        assert_eq!(host.devices.as_ref().unwrap().len(), 1);
    }
}

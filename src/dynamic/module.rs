//! Modules and kernels of any backend, and launching them on an [`AnyStream`].
//!
//! ```
//! use gpuport::dynamic::{AnyModule, AnyStream, Code};
//! use gpuport::{builtin, KernelArgs, LaunchConfig};
//! let dev = gpuport::open("host")?;
//! let module = AnyModule::load(&dev, &Code::Builtin, "builtins", &[])?;
//! let kernel = module.kernel(builtin::EMPTY)?;
//! let s = AnyStream::default_for(&dev);
//! // SAFETY: the empty kernel takes no arguments and touches no memory.
//! unsafe { kernel.launch(LaunchConfig::linear(1, 1), &KernelArgs::new(), &s)? };
//! s.synchronize()?;
//! # Ok::<(), gpuport::Error>(())
//! ```

use std::sync::Arc;

use super::any::{mismatch, on_backend, Any, DynDevice, OnDevice, PerBackend};
use super::stream::AnyStream;
use crate::backend::registry::AnyDevice;
use crate::backend::{Backend, Device, Kernel, KernelArgs, LaunchConfig, Module, ModuleSource};
use crate::error::{Error, Result};

/// What a module is loaded from.
#[derive(Debug, Clone)]
pub enum Code {
    /// gpuport's built-in kernels.
    Builtin,
    /// Kernel source, compiled by NVRTC or hiprtc.
    Source(String),
    /// PTX text (CUDA).
    Ptx(String),
    /// A cubin, fatbin or HIP code object.
    Binary(Vec<u8>),
}

impl Code {
    /// A module's code from its bytes and `kind` ("builtin", "source",
    /// "ptx", "binary"; `None`: inferred): bytes that start with ELF or
    /// fatbin magic, or are not UTF-8, are a binary; text with `.version`
    /// and `.target` lines is PTX; other text is kernel source. Source and
    /// PTX must be UTF-8; another kind is an [`Error::InvalidArgument`].
    ///
    /// ```
    /// use gpuport::dynamic::Code;
    /// let ptx = ".version 8.0\n.target sm_90\n";
    /// assert!(matches!(Code::from_bytes(ptx.into(), None)?, Code::Ptx(_)));
    /// assert!(matches!(Code::from_bytes(b"\x7fELF...".to_vec(), None)?, Code::Binary(_)));
    /// assert!(matches!(Code::from_bytes(b"__global__ void k() {}".to_vec(), None)?, Code::Source(_)));
    /// assert!(Code::from_bytes(vec![0xff], Some("source")).is_err());
    /// # Ok::<(), gpuport::Error>(())
    /// ```
    pub fn from_bytes(bytes: Vec<u8>, kind: Option<&str>) -> Result<Code> {
        /// The magic of a fatbin (`__cudaFatFormat`'s, little-endian `0xba55ed50`).
        const FATBIN_MAGIC: [u8; 4] = [0x50, 0xed, 0x55, 0xba];
        let binary_magic = bytes.starts_with(b"\x7fELF") || bytes.starts_with(&FATBIN_MAGIC);
        let text = std::str::from_utf8(&bytes).ok();
        let kind = match kind {
            Some(k) => k,
            None if binary_magic || text.is_none() => "binary",
            None if text.is_some_and(|t| t.contains(".version") && t.contains(".target")) => "ptx",
            None => "source",
        };
        let need_text = || -> Result<String> {
            let reason = "kernel source and PTX must be UTF-8 text".to_string();
            text.map(str::to_owned).ok_or(Error::InvalidArgument { name: "code", reason })
        };
        Ok(match kind {
            "builtin" => Code::Builtin,
            "source" => Code::Source(need_text()?),
            "ptx" => Code::Ptx(need_text()?),
            "binary" => Code::Binary(bytes),
            other => {
                return Err(Error::InvalidArgument {
                    name: "kind",
                    reason: format!("module kind {other:?}: use \"builtin\", \"source\", \"ptx\" or \"binary\""),
                })
            }
        })
    }
}

/// What [`AnyModule`] holds per backend.
#[derive(Debug)]
pub struct Modules;
impl PerBackend for Modules {
    type Of<B: Backend> = OnDevice<B, Arc<Module<B>>>;
}

/// What [`AnyKernel`] holds per backend: the kernel, and its module, kept
/// alive with it.
#[derive(Debug)]
pub struct Kernels;
impl PerBackend for Kernels {
    type Of<B: Backend> = KernelOn<B>;
}

/// A kernel of backend `B` with its module and device.
pub type KernelOn<B> = OnDevice<B, (Kernel<B>, Arc<Module<B>>)>;

/// A loaded module of any backend.
pub type AnyModule = Any<Modules>;

/// A kernel of any backend; keeps its module alive.
pub type AnyKernel = Any<Kernels>;

impl Clone for AnyKernel {
    fn clone(&self) -> Self {
        on_backend!(map self, v => v.clone())
    }
}

fn load_on<D: DynDevice>(d: &Arc<D>, code: &Code, name: &str, options: &[String]) -> Result<AnyModule> {
    let opts: Vec<&str> = options.iter().map(|s| s.as_str()).collect();
    let module = d.load_module(match code {
        Code::Builtin => ModuleSource::Builtin,
        Code::Source(s) => ModuleSource::Source { code: s, name, options: &opts },
        Code::Ptx(s) => ModuleSource::Ptx(s),
        Code::Binary(b) => ModuleSource::Binary(b),
    })?;
    Ok(D::wrap::<Modules>(OnDevice { device: d.clone(), item: Arc::new(module) }))
}

fn kernel_of<B: Backend>(m: &OnDevice<B, Arc<Module<B>>>, name: &str) -> Result<KernelOn<B>> {
    let k = m.device.kernel(&m.item, name)?;
    Ok(OnDevice { device: m.device.clone(), item: (k, m.item.clone()) })
}

impl AnyModule {
    /// Loads a module on `dev` (`name` and `options` are for source code).
    pub fn load(dev: &AnyDevice, code: &Code, name: &str, options: &[String]) -> Result<AnyModule> {
        on_backend!(dev, d => load_on(d, code, name, options))
    }

    /// The module's device.
    pub fn device(&self) -> AnyDevice {
        on_backend!(self, v => DynDevice::any_device(&v.device))
    }

    /// The kernel called `name`.
    pub fn kernel(&self, name: &str) -> Result<AnyKernel> {
        Ok(on_backend!(map self, m => kernel_of(m, name)?))
    }
}

impl AnyKernel {
    /// The kernel's device.
    pub fn device(&self) -> AnyDevice {
        on_backend!(self, v => DynDevice::any_device(&v.device))
    }

    /// Launches the kernel on `stream` (a stream of its device) without waiting.
    ///
    /// # Safety
    /// As for [`Device::launch`]: `args` match the kernel's parameters, and
    /// the memory they point to stays alive and unaliased until the launch
    /// has run.
    pub unsafe fn launch(&self, config: LaunchConfig, args: &KernelArgs, stream: &AnyStream) -> Result<()> {
        on_backend!((self, stream), (k, s) => {
            if k.device.info().ordinal != s.device.info().ordinal {
                return Err(mismatch("stream", &self.device(), &stream.device()));
            }
            // SAFETY: forwarded caller contract.
            unsafe { k.device.launch(&k.item.0, config, args, &s.item) }
        }, else => Err(mismatch("stream", &self.device(), &stream.device())))
    }
}

/// A string for a C array of `const char*` (compile options, names) that
/// holds a NUL byte, which would end it early.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{list}: item {item} contains a NUL byte")]
pub struct InteriorNul {
    /// The list's name, e.g. `"ListOfBytes"`.
    pub list: &'static str,
    /// The item's index.
    pub item: usize,
}

/// Item `item` of the list `list` as a NUL-terminated C string: `bytes`
/// and a NUL; bytes holding a NUL themselves are [`InteriorNul`].
///
/// ```
/// use gpuport::dynamic::module::c_string;
/// assert_eq!(&*c_string("ListOfBytes", 0, b"-O3")?, b"-O3\0");
/// assert!(c_string("ListOfBytes", 1, b"a\0b").is_err());
/// # Ok::<(), gpuport::dynamic::module::InteriorNul>(())
/// ```
pub fn c_string(list: &'static str, item: usize, bytes: &[u8]) -> std::result::Result<Box<[u8]>, InteriorNul> {
    let c = std::ffi::CString::new(bytes).map_err(|_| InteriorNul { list, item })?;
    Ok(c.into_bytes_with_nul().into_boxed_slice())
}

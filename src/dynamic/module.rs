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

use super::any::{mismatch, on_backend, rewrap, Any, DynDevice, OnDevice, PerBackend};
use super::stream::AnyStream;
use crate::backend::registry::AnyDevice;
use crate::backend::{Backend, Device, Kernel, KernelArgs, LaunchConfig, Module, ModuleSource};
use crate::error::Result;

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
        rewrap!(self, v => v.clone())
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
        Ok(rewrap!(self, m => kernel_of(m, name)?))
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

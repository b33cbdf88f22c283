//! Modules, kernels, and what is known of a kernel's parameters.

use std::fmt;
use std::sync::Arc;

use super::driver::{Driver, Params};
use super::stream::apart_from_captures;
use crate::backend::array_kernels::{all_kernel_names, single_kernel_program};
use crate::backend::{builtin, check_kernel_args, KernelArgs};
use crate::error::{Error, Result};

/// Headers the array kernels include, served to the compiler from memory
/// (the same files for every dialect).
pub(crate) const BUILTIN_HEADERS: &[(&str, &str)] = &[
    ("array_indexer.h", include_str!("../../../kernels/common/array_indexer.h")),
    ("array_ops.h", include_str!("../../../kernels/common/array_ops.h")),
];

/// A built-in kernel for a GPU backend: from the runtime module (`runtime`
/// looks it up there) when `name` is one of the runtime's kernels
/// ([`builtin::ALL`](crate::backend::builtin::ALL)) or the module holds every
/// kernel (`runtime_has_all`: an ahead-of-time image loaded), else from
/// `cache`, else compiled alone from `dialect_source` by `build` (given the
/// one-kernel program) and cached.
///
/// The runtime module is asked only for kernels it can hold: a lookup that
/// fails is a driver error (`CUDA_ERROR_NOT_FOUND`), which compute-sanitizer
/// reports on every array kernel's first use.
pub(crate) fn builtin_kernel_from<K: Clone>(
    runtime: impl FnOnce() -> Result<K>,
    runtime_has_all: bool,
    cache: &std::sync::Mutex<std::collections::HashMap<String, K>>,
    dialect_source: &str,
    name: &str,
    build: impl FnOnce(&str) -> Result<K>,
) -> Result<K> {
    if runtime_has_all || builtin::ALL.contains(&name) {
        match runtime() {
            Err(Error::KernelNotFound { .. }) => {}
            found => return found,
        }
    }
    let mut cache = cache.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(kernel) = cache.get(name) {
        return Ok(kernel.clone());
    }
    let program = single_kernel_program(dialect_source, name)
        .ok_or_else(|| Error::KernelNotFound { name: name.to_string(), available: all_kernel_names().join(", ") })?;
    let kernel = build(&program)?;
    cache.insert(name.to_string(), kernel.clone());
    Ok(kernel)
}

struct ModuleInner<D: Driver> {
    raw: D::Module,
    /// Whether this is one of the library's own modules (the built-ins, an
    /// array kernel), whose kernels' parameters are known without the driver.
    builtin: bool,
    driver: Arc<D>,
}

// SAFETY: the driver's contract: its handles may be used from any thread.
unsafe impl<D: Driver> Send for ModuleInner<D> {}
// SAFETY: as above.
unsafe impl<D: Driver> Sync for ModuleInner<D> {}

impl<D: Driver> Drop for ModuleInner<D> {
    fn drop(&mut self) {
        if self.driver.bind().is_ok() {
            // SAFETY: loaded by this driver, unloaded once after the last
            // kernel handle (which holds the module) is gone.
            let _ = apart_from_captures(&*self.driver, || unsafe { self.driver.module_unload(self.raw) });
        }
    }
}

/// A loaded module of a GPU device; clones name the same module.
pub struct GpuModule<D: Driver> {
    inner: Arc<ModuleInner<D>>,
}

impl<D: Driver> Clone for GpuModule<D> {
    fn clone(&self) -> Self {
        GpuModule { inner: self.inner.clone() }
    }
}

impl<D: Driver> fmt::Debug for GpuModule<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}Module({}:{}, {:p})", D::NAME, D::KIND, self.inner.driver.ordinal(), self.inner.raw)
    }
}

impl<D: Driver> GpuModule<D> {
    /// Takes ownership of `raw`, loaded by `driver`.
    pub(crate) fn new(driver: Arc<D>, raw: D::Module, builtin: bool) -> Self {
        GpuModule { inner: Arc::new(ModuleInner { raw, builtin, driver }) }
    }

    pub(crate) fn raw(&self) -> D::Module {
        self.inner.raw
    }

    pub(crate) fn is_builtin(&self) -> bool {
        self.inner.builtin
    }

    /// The ordinal of the device the module is loaded on.
    pub(crate) fn ordinal(&self) -> usize {
        self.inner.driver.ordinal()
    }

    /// An owner that keeps the module loaded (for graphs that launch its kernels).
    pub(crate) fn owner(&self) -> crate::backend::graph::Owner {
        self.inner.clone()
    }
}

/// A kernel; keeps its module loaded.
pub struct GpuKernel<D: Driver> {
    func: D::Function,
    name: Arc<str>,
    /// What is known of the kernel's parameters, to check launch arguments.
    params: Params,
    module: GpuModule<D>,
}

impl<D: Driver> Clone for GpuKernel<D> {
    fn clone(&self) -> Self {
        GpuKernel { func: self.func, name: self.name.clone(), params: self.params.clone(), module: self.module.clone() }
    }
}

// SAFETY: the driver's contract: its handles may be used from any thread
// (the function handle while its module, held here, is loaded).
unsafe impl<D: Driver> Send for GpuKernel<D> {}
// SAFETY: as above.
unsafe impl<D: Driver> Sync for GpuKernel<D> {}

impl<D: Driver> fmt::Debug for GpuKernel<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}Kernel({}, params {:?})", D::NAME, self.name, self.params)
    }
}

impl<D: Driver> GpuKernel<D> {
    /// The kernel `func` of `module`.
    pub(crate) fn new(module: &GpuModule<D>, func: D::Function, name: &str, params: Params) -> Self {
        GpuKernel { func, name: name.into(), params, module: module.clone() }
    }

    pub(crate) fn func(&self) -> D::Function {
        self.func
    }

    /// The ordinal of the device the kernel's module is loaded on.
    pub(crate) fn ordinal(&self) -> usize {
        self.module.ordinal()
    }

    /// An owner that keeps the kernel's module loaded.
    pub(crate) fn owner(&self) -> crate::backend::graph::Owner {
        self.module.owner()
    }

    /// Checks `args` against what is known of the parameters, asking the
    /// driver for sizes not yet known. A prefix cannot tell a launch with too
    /// few arguments; the launch is `unsafe` and its contract requires
    /// matching arguments.
    pub(crate) fn check_args(&self, args: &KernelArgs) -> Result<()> {
        match &self.params {
            Params::Exact(sizes) => check_kernel_args(&self.name, sizes, args),
            Params::Unknown => Ok(()),
            Params::Prefix(known) => {
                let mut known = known.lock().unwrap_or_else(|p| p.into_inner());
                while known.len() < args.len() {
                    // SAFETY: the function is alive while this kernel holds its module.
                    match unsafe { self.module.inner.driver.param_size(self.func, known.len()) } {
                        Some(size) => known.push(size),
                        None => {
                            return Err(Error::KernelArguments {
                                kernel: self.name.to_string(),
                                reason: format!("takes {} arguments, {} were given", known.len(), args.len()),
                            })
                        }
                    }
                }
                check_kernel_args(&self.name, &known[..args.len()], args)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::BUILTIN_HEADERS;

    #[test]
    fn builtin_programs_include_only_headers_they_are_given() {
        let sources = [
            include_str!("../../../kernels/cuda/builtins.cu"),
            include_str!("../../../kernels/cuda/array_ops.cu"),
            include_str!("../../../kernels/hip/builtins.hip"),
            include_str!("../../../kernels/hip/array_ops.hip"),
        ];
        for line in sources.iter().chain(BUILTIN_HEADERS.iter().map(|(_, t)| t)).flat_map(|s| s.lines()) {
            if let Some(rest) = line.trim().strip_prefix("#include") {
                let name = rest.trim().trim_matches(|c| c == '"' || c == '<' || c == '>');
                // The compilers provide these themselves.
                let system = ["stdint.h", "hip/hip_runtime.h"];
                assert!(
                    BUILTIN_HEADERS.iter().any(|(n, _)| *n == name) || system.contains(&name),
                    "{name} is included but not served to the compiler"
                );
            }
        }
    }
}

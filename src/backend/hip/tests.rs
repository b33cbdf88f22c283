//! Tests of the ROCm backend's kernel sources and of the memory layer's
//! symbols in the loaded runtime.

use super::*;
use crate::backend::builtin;

#[test]
fn builtin_source_defines_every_builtin_kernel() {
    for name in builtin::ALL {
        assert!(BUILTINS_SOURCE.contains(&format!("void {name}(")), "{name} missing from kernels/hip/builtins.hip");
    }
}

#[test]
fn builtin_sources_of_both_backends_define_the_same_kernels() {
    let cuda = include_str!("../../../kernels/cuda/builtins.cu");
    for name in builtin::ALL {
        let sig = format!("extern \"C\" __global__ void {name}(");
        assert!(cuda.contains(&sig), "{name} missing from kernels/cuda/builtins.cu");
        assert!(BUILTINS_SOURCE.contains(&sig), "{name} missing from kernels/hip/builtins.hip");
    }
}

#[test]
fn the_memory_layer_calls_resolve_in_the_loaded_runtime() {
    // CI loads Debian's ROCm 5.2 (no device), the GPU machine the shim;
    // where no HIP runtime loads there is nothing to check.
    let Ok(rt) = driver() else { return };
    let api = rt.api();
    macro_rules! missing {
        ($($f:ident),*) => { [$((stringify!($f), api.$f.is_some())),*]
            .into_iter().filter(|(_, found)| !found).map(|(name, _)| name).collect::<Vec<_>>() };
    }
    let mut missing = missing!(
        hipHostGetDevicePointer,
        hipMemGetAddressRange,
        hipIpcGetMemHandle,
        hipIpcOpenMemHandle,
        hipIpcCloseMemHandle
    );
    // The stream-ordered pool calls came with ROCm 5.1.
    if rt.version >= 50_100_000 {
        missing.extend(missing!(
            hipDeviceGetDefaultMemPool,
            hipMemPoolSetAttribute,
            hipMemPoolGetAttribute,
            hipMemPoolTrimTo,
            hipMemPoolCreate,
            hipMemPoolDestroy,
            hipMallocFromPoolAsync,
            hipMemPoolExportToShareableHandle,
            hipMemPoolImportFromShareableHandle,
            hipMemPoolExportPointer,
            hipMemPoolImportPointer,
            hipMemPoolGetAccess,
            hipMemPoolSetAccess
        ));
    }
    assert!(missing.is_empty(), "{} (HIP {}) lacks {missing:?}", rt.loaded.path, sys::version_string(rt.version));
}

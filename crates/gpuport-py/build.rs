//! Compiles `csrc/torch_hook.cpp`, the C++ allocation function that lets
//! PyTorch's `CUDAPluggableAllocator` see gpuport's failures as exceptions
//! (see that file). The `cc` crate is the field's standard for this.
//!
//! `GPUPORT_HOOK_CXX` (set by `ci/wheel`): the GNU C++ compiler for the
//! hook, whose runtime (`libstdc++.so.6`, `libgcc_s.so.1`) is linked by path.
//! Without it a `maturin --zig` build compiles the hook with zig's clang and
//! links LLVM's libc++ and libunwind statically: an exception thrown there
//! is not one PyTorch's libstdc++ can catch, and the process aborts where
//! torch should raise `RuntimeError`. Linking the two GNU libraries by path
//! (zig maps `-lstdc++` and `-lgcc_s` to its own copies) makes the hook and
//! Rust's unwinding use the same runtime as PyTorch.
use std::{env, process::Command};

fn main() {
    println!("cargo:rerun-if-changed=csrc/torch_hook.cpp");
    println!("cargo:rerun-if-env-changed=GPUPORT_HOOK_CXX");
    let mut build = cc::Build::new();
    build.cpp(true).file("csrc/torch_hook.cpp").flag_if_supported("-std=c++17");
    if let Some(cxx) = env::var_os("GPUPORT_HOOK_CXX") {
        build.compiler(&cxx).cpp_link_stdlib(None);
        for lib in ["libstdc++.so.6", "libgcc_s.so.1"] {
            let out = Command::new(&cxx)
                .arg(format!("-print-file-name={lib}"))
                .output()
                .unwrap_or_else(|e| panic!("GPUPORT_HOOK_CXX={cxx:?} does not run: {e}"));
            let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
            // An unknown file prints back its bare name.
            assert!(path.contains('/'), "GPUPORT_HOOK_CXX={cxx:?} does not know where {lib} is");
            println!("cargo:rustc-link-arg={path}");
        }
    }
    build.compile("gpuport_torch_hook");
}

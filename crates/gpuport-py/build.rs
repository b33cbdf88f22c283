//! Compiles `csrc/torch_hook.cpp`, the C++ allocation function that lets
//! PyTorch's `CUDAPluggableAllocator` see gpuport's failures as exceptions
//! (see that file). The `cc` crate is the field's standard for this.
fn main() {
    println!("cargo:rerun-if-changed=csrc/torch_hook.cpp");
    cc::Build::new()
        .cpp(true)
        .file("csrc/torch_hook.cpp")
        .flag_if_supported("-std=c++17")
        .compile("gpuport_torch_hook");
}

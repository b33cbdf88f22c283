//! Checks on the kernel sources that need no GPU: they parse as C++ with
//! every template instantiated, and they define exactly the kernels the host
//! backend and the Rust launchers name.

use std::process::Command;

mod common;

fn compiler() -> Option<String> {
    ["c++", "g++", "clang++"]
        .into_iter()
        .find(|c| Command::new(c).arg("--version").output().map(|o| o.status.success()).unwrap_or(false))
        .map(String::from)
}

/// Preprocesses (or syntax-checks) the common array kernels under the host prelude.
fn run_cxx(extra: &[&str]) -> Option<std::process::Output> {
    let Some(cxx) = compiler() else {
        use std::io::Write;
        let _ = writeln!(std::io::stderr(), "skipped: no C++ compiler (c++, g++, clang++) to check kernel sources");
        return None;
    };
    let root = common::source_root();
    let src = "#include \"kernel_prelude.h\"\n#include \"array_ops.h\"\nGPUPORT_ALL_ARRAY_KERNELS\n";
    let dir = std::env::temp_dir().join(format!("gpuport-kernel-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("check.cpp");
    std::fs::write(&file, src).unwrap();
    let out = Command::new(cxx)
        .args(["-std=c++17", "-Wall", "-Wno-unknown-pragmas"])
        .args(extra)
        .arg(format!("-I{}", root.join("kernels/common").display()))
        .arg(format!("-I{}", root.join("tests/support").display()))
        .arg(&file)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    Some(out)
}

#[test]
fn array_kernels_parse_as_cxx_with_every_instantiation() {
    let Some(out) = run_cxx(&["-fsyntax-only", "-Werror"]) else { return };
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn every_kernel_the_launchers_name_is_defined_in_the_sources() {
    let Some(out) = run_cxx(&["-E", "-P"]) else { return };
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let expanded = String::from_utf8_lossy(&out.stdout).replace(char::is_whitespace, "");
    let runtime = include_str!("../kernels/cuda/builtins.cu");
    for name in gpuport::kernels::all_kernel_names() {
        let defined = format!("void{name}(");
        assert!(
            expanded.contains(&defined) || runtime.contains(&format!("void {name}(")),
            "{name} is launched by src/kernels but not defined in kernels/"
        );
    }
}

#[test]
fn the_cuda_and_hip_dialect_files_instantiate_the_same_kernels() {
    let root = common::source_root();
    for file in ["kernels/cuda/array_ops.cu", "kernels/hip/array_ops.hip"] {
        let path = root.join(file);
        if !path.exists() {
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "skipped: {file} does not exist yet");
            continue;
        }
        let text = std::fs::read_to_string(path).unwrap();
        assert!(text.contains("#include \"array_ops.h\""), "{file} must include the common kernels");
        assert!(text.contains("GPUPORT_ALL_ARRAY_KERNELS"), "{file} must instantiate every kernel");
    }
}

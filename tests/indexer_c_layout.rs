//! The C twin `kernels/common/array_indexer.h` has the Rust layout: a C and
//! a C++ program including the header print sizeof/offsetof, compared here
//! with `size_of`/`offset_of!` of `ArrayIndexer<T, N>`. Skips with a reason
//! when the system has no C compiler.

use std::path::PathBuf;
use std::process::Command;

use gpuport::ArrayIndexer;

mod common;

fn layout<T, const N: usize>() -> String {
    let [size, data, shape] = ArrayIndexer::<T, N>::LAYOUT;
    format!("{size} {data} {shape}")
}

fn compile_and_run(compiler: &str, lang: &str, src: &str) -> Option<String> {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("indexer_layout_{lang}"));
    std::fs::create_dir_all(&dir).ok()?;
    let ext = if lang == "c" { "c" } else { "cpp" };
    let file = dir.join(format!("probe.{ext}"));
    std::fs::write(&file, src).ok()?;
    let exe = dir.join("probe");
    let include = common::source_root().join("kernels/common");
    let out = match Command::new(compiler)
        .arg("-Wall")
        .arg("-Werror")
        .arg("-I")
        .arg(&include)
        .arg(&file)
        .arg("-o")
        .arg(&exe)
        .output()
    {
        Ok(o) => o,
        Err(e) => {
            println!("skipped: {lang} layout check: no `{compiler}` ({e})");
            return None;
        }
    };
    assert!(out.status.success(), "{compiler} failed:\n{}", String::from_utf8_lossy(&out.stderr));
    let run = Command::new(&exe).output().expect("the probe we just built runs");
    assert!(run.status.success(), "the {lang} probe's own checks failed: {:?}", run.status);
    Some(String::from_utf8(run.stdout).expect("probe prints ASCII"))
}

const CASES: &str = "f32:float:1;f32:float:3;f64:double:2;u8:unsigned char:4;i64:int64_t:8";

fn expected() -> String {
    let mut s = String::new();
    s += &(layout::<f32, 1>() + "\n");
    s += &(layout::<f32, 3>() + "\n");
    s += &(layout::<f64, 2>() + "\n");
    s += &(layout::<u8, 4>() + "\n");
    s += &(layout::<i64, 8>() + "\n");
    s
}

#[test]
fn the_c_header_has_the_rust_layout() {
    let mut decls = String::new();
    let mut prints = String::new();
    for (i, case) in CASES.split(';').enumerate() {
        let mut parts = case.split(':');
        let (_, cty, n) = (parts.next().unwrap(), parts.next().unwrap(), parts.next().unwrap());
        decls += &format!("GPUPORT_ARRAY_INDEXER({cty}, {n}, ix{i})\n");
        prints +=
            &format!("  printf(\"%zu %zu %zu\\n\", sizeof(ix{i}), offsetof(ix{i}, data), offsetof(ix{i}, shape));\n");
    }
    let src = format!(
        "#include <stddef.h>\n#include <stdio.h>\n#include \"array_indexer.h\"\n{decls}int main(void) {{\n{prints}  return 0;\n}}\n"
    );
    let Some(got) = compile_and_run("cc", "c", &src) else { return };
    assert_eq!(got, expected());
}

#[test]
fn the_cpp_template_has_the_rust_layout() {
    let mut decls = String::new();
    let mut prints = String::new();
    for (i, case) in CASES.split(';').enumerate() {
        let mut parts = case.split(':');
        let (_, cty, n) = (parts.next().unwrap(), parts.next().unwrap(), parts.next().unwrap());
        // A typedef: `offsetof` is a macro and the template's comma would split its arguments.
        decls += &format!("typedef gpuport::ArrayIndexer<{cty}, {n}> ix{i};\n");
        prints += &format!(
            "  std::printf(\"%zu %zu %zu\\n\", sizeof(ix{i}), offsetof(ix{i}, data), offsetof(ix{i}, shape));\n"
        );
    }
    let src = format!(
        "#include <cstddef>\n#include <cstdio>\n#include \"array_indexer.h\"\n{decls}int main() {{\n{prints}  gpuport::ArrayIndexer<float, 2> ix{{nullptr, {{3, 4}}}};\n  gpuport_i64 idx[2];\n  ix.indices(7, idx);\n  if (ix.linear({{1, 3}}) != 7 || idx[0] != 1 || idx[1] != 3 || ix.size() != 12) return 1;\n  return 0;\n}}\n"
    );
    let Some(got) = compile_and_run("c++", "cpp", &src) else { return };
    assert_eq!(got, expected());
}

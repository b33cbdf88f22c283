//! The search order on fake site-packages layouts, on the host: the files
//! are empty where only the list is checked, and tiny shared libraries
//! built with the system C compiler where one is loaded.

use std::path::{Path, PathBuf};

use super::*;

const NAMES: [&str; 2] = ["libgpuport_test.so", "libgpuport_test.so.1"];

fn spec(names: &'static [&'static str], rocm: bool) -> LibrarySpec {
    LibrarySpec {
        backend: BackendKind::Rocm,
        library: "libgpuport_test",
        names,
        override_env: "GPUPORT_TEST_LIBRARY",
        wheel_dirs: &["torch/lib", "_rocm_sdk_libraries_*/lib"],
        rocm,
    }
}

/// A fresh folder for one test.
fn scratch(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("gpuport-library-{}-{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn touch(path: &Path) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, b"").unwrap();
}

#[test]
fn the_search_goes_wheels_then_loader_path_then_rocm_path_then_opt_rocm() {
    let site = scratch("order");
    touch(&site.join("torch/lib/libgpuport_test.so.1"));
    let env = SearchEnv {
        override_path: None,
        site_packages: vec![PathBuf::from("/nonexistent/site"), site.clone()],
        rocm_roots: vec!["/x/rocm/".into()],
    };
    let list = candidates(&spec(&NAMES, true), &env, None);
    let wheel = site.join("torch/lib/libgpuport_test.so.1").to_string_lossy().into_owned();
    assert_eq!(list[0], Candidate { path: wheel, source: Source::Wheel(site.clone()) });
    assert_eq!(list[1], Candidate { path: "libgpuport_test.so".into(), source: Source::LoaderPath });
    assert_eq!(list[3], Candidate { path: "/x/rocm/lib/libgpuport_test.so".into(), source: Source::RocmPath });
    assert_eq!(list[5], Candidate { path: "/opt/rocm/lib/libgpuport_test.so".into(), source: Source::OptRocm });
    assert_eq!(list.len(), 7, "only wheel files that exist are listed: {list:?}");
    assert!(candidates(&spec(&NAMES, false), &env, None).iter().all(|c| !c.path.contains("rocm")));
}

#[test]
fn a_wheel_folder_pattern_matches_every_gpu_family_folder() {
    let site = scratch("pattern");
    touch(&site.join("_rocm_sdk_libraries_gfx94X/lib/libgpuport_test.so"));
    touch(&site.join("_rocm_sdk_libraries_gfx110X/lib/libgpuport_test.so"));
    let env = SearchEnv { site_packages: vec![site.clone()], ..Default::default() };
    let wheels: Vec<_> = candidates(&spec(&NAMES, false), &env, None)
        .into_iter()
        .filter(|c| c.source == Source::Wheel(site.clone()))
        .map(|c| c.path)
        .collect();
    assert_eq!(wheels.len(), 2, "{wheels:?}");
    assert!(wheels[0].contains("gfx110X") && wheels[1].contains("gfx94X"), "in name order: {wheels:?}");
}

#[test]
fn an_override_or_a_loaded_copy_is_the_only_candidate() {
    let site = scratch("only");
    touch(&site.join("torch/lib/libgpuport_test.so"));
    let env = SearchEnv {
        override_path: Some("/forced/libgpuport_test.so".into()),
        site_packages: vec![site],
        rocm_roots: vec![],
    };
    let list = candidates(&spec(&NAMES, true), &env, None);
    assert_eq!(
        list,
        [Candidate { path: "/forced/libgpuport_test.so".into(), source: Source::Override("GPUPORT_TEST_LIBRARY") }]
    );
    let list = candidates(&spec(&NAMES, true), &env, Some("/already/libgpuport_test.so.1".into()));
    assert_eq!(list, [Candidate { path: "/already/libgpuport_test.so.1".into(), source: Source::AlreadyLoaded }]);
}

#[test]
fn versioned_file_names_count_as_the_library() {
    assert!(is_named("libamdhip64.so.6.2.41133", &["libamdhip64.so"]));
    assert!(is_named("libamdhip64.so", &["libamdhip64.so"]));
    assert!(!is_named("libamdhip64.sox", &["libamdhip64.so"]));
    assert!(!is_named("libnvrtc-builtins.so.13", &["libnvrtc.so"]));
}

#[test]
fn sources_say_why_in_words() {
    assert_eq!(Source::Wheel("/s".into()).to_string(), "pip wheel in /s");
    assert_eq!(Source::Override("GPUPORT_HIP_LIBRARY").to_string(), "set by GPUPORT_HIP_LIBRARY");
    assert_eq!(Source::AlreadyLoaded.to_string(), "already loaded in the process");
}

/// Builds a shared library exporting `symbol` at `path` with the system C
/// compiler; `None` (with the reason printed) where there is none.
#[cfg(any(feature = "cuda", feature = "rocm"))]
fn build_library(path: &Path, symbol: &str) -> Option<()> {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let source = path.with_extension("c");
    std::fs::write(&source, format!("int {symbol}(void) {{ return 7; }}\n")).unwrap();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    match std::process::Command::new(&cc).args(["-shared", "-fPIC", "-o"]).arg(path).arg(&source).status() {
        Ok(s) if s.success() => Some(()),
        other => {
            eprintln!("skipped: no C compiler to build a test library ({cc}: {other:?})");
            None
        }
    }
}

/// The "table" of a test library: one symbol.
///
/// # Safety
/// Only the symbol's presence is checked.
#[cfg(any(feature = "cuda", feature = "rocm"))]
unsafe fn has_test_symbol(lib: &libloading::Library) -> Result<(), Vec<&'static str>> {
    // SAFETY: the symbol is looked up, never called.
    unsafe { lib.get::<*const u8>(b"gpuport_test_symbol\0") }.map(|_| ()).map_err(|_| vec!["gpuport_test_symbol"])
}

#[cfg(any(feature = "cuda", feature = "rocm"))]
#[test]
fn a_copy_already_loaded_wins_over_an_override_and_a_wheel_copy() {
    const LOADED: [&str; 1] = ["libgpuport_test_loaded.so"];
    let dir = scratch("loaded");
    let (first, wheel, forced) = (
        dir.join("elsewhere/libgpuport_test_loaded.so"),
        dir.join("site/torch/lib/libgpuport_test_loaded.so"),
        dir.join("forced/libgpuport_test_loaded.so"),
    );
    for path in [&first, &wheel, &forced] {
        if build_library(path, "gpuport_test_symbol").is_none() {
            return;
        }
    }
    // SAFETY: a library built above, with no initializers.
    let _held = unsafe { libloading::Library::new(&first) }.unwrap();
    let loaded = loaded_copy(&LOADED);
    assert_eq!(loaded.as_deref().map(Path::new), Some(first.as_path()), "found by its path in the process");
    let env = SearchEnv {
        override_path: Some(forced.to_string_lossy().into_owned()),
        site_packages: vec![dir.join("site")],
        rocm_roots: vec![],
    };
    let list = candidates(&spec(&LOADED, false), &env, loaded);
    // SAFETY: test libraries built above.
    let lib = unsafe { open_first(&list, has_test_symbol) }.unwrap();
    assert_eq!((Path::new(&lib.path), &lib.source), (first.as_path(), &Source::AlreadyLoaded));
}

#[cfg(any(feature = "cuda", feature = "rocm"))]
#[test]
fn a_wheel_copy_that_lacks_a_symbol_is_named_and_the_search_goes_on() {
    const NAMES: [&str; 1] = ["libgpuport_test_wheel.so"];
    let dir = scratch("lacks");
    let (bad, good) =
        (dir.join("a/torch/lib/libgpuport_test_wheel.so"), dir.join("b/torch/lib/libgpuport_test_wheel.so"));
    if build_library(&bad, "gpuport_other_symbol").is_none() || build_library(&good, "gpuport_test_symbol").is_none() {
        return;
    }
    let env = SearchEnv { site_packages: vec![dir.join("a"), dir.join("b")], ..Default::default() };
    let list = candidates(&spec(&NAMES, false), &env, None);
    // SAFETY: test libraries built above.
    let lib = unsafe { open_first(&list, has_test_symbol) }.unwrap();
    assert_eq!((Path::new(&lib.path), &lib.source), (good.as_path(), &Source::Wheel(dir.join("b"))));

    // Alone, the one that lacks it is an error that names the symbol and why it was tried.
    // SAFETY: as above.
    let tried = unsafe { open_first(&list[..1], has_test_symbol) }.err().unwrap();
    assert!(tried.contains("lacks gpuport_test_symbol") && tried.contains("[pip wheel in"), "{tried}");
}

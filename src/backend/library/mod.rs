//! Finding and loading a vendor library at run time, in one order for
//! every backend (docs/design.md#loading-vendor-libraries):
//!
//! 1. a copy already loaded in the process ([`Source::AlreadyLoaded`]);
//! 2. the library's `GPUPORT_*_LIBRARY` variable ([`Source::Override`]);
//! 3. pip wheel copies under each site-packages folder ([`Source::Wheel`]):
//!    `GPUPORT_SITE_PACKAGES` (`:`-separated), then the folders given to
//!    [`set_site_packages`] (the Python package passes `sys.path`);
//! 4. the dynamic loader's own search by file name ([`Source::LoaderPath`]);
//! 5. `$ROCM_PATH/lib` and `$HIP_PATH/lib` ([`Source::RocmPath`]);
//! 6. `/opt/rocm/lib` ([`Source::OptRocm`]).
//!
//! A copy already loaded is the only one tried, and so is an override: a
//! second copy of a runtime in one process (next to the one torch or CuPy
//! loaded) splits its state in two. Each library that loads is recorded
//! with the file and the reason ([`chosen`]), for `gpuport info` and the
//! Python `backend_status()`. This module makes no vendor call: the
//! backends hand it a [`LibrarySpec`] and a function that resolves their
//! table (`hip/sys.rs`, `cuda/loading.rs`, `collective/nccl/sys.rs`).

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::error::BackendKind;

#[cfg(any(feature = "cuda", feature = "rocm"))]
mod load;
#[cfg(any(feature = "cuda", feature = "rocm"))]
pub(crate) use load::{open_first, search, Loaded};
// The CUDA backend loads its picks ahead of cudarc (`cuda/loading.rs`).
#[cfg(feature = "cuda")]
pub(crate) use load::plan;

#[cfg(test)]
mod tests;

/// Where a library is looked for, for one library.
#[derive(Debug, Clone, Copy)]
pub struct LibrarySpec {
    /// The backend that uses it.
    pub backend: BackendKind,
    /// The library's name in messages, e.g. `libamdhip64`.
    pub library: &'static str,
    /// File names, most general first (`libamdhip64.so`, `libamdhip64.so.7`, …).
    pub names: &'static [&'static str],
    /// The variable that names one file and replaces the search.
    pub override_env: &'static str,
    /// Folders under a site-packages folder that pip wheels put it in.
    pub wheel_dirs: &'static [&'static str],
    /// Whether `$ROCM_PATH`, `$HIP_PATH` and `/opt/rocm` are searched.
    pub rocm: bool,
}

/// Why a library file was chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A copy was already loaded in the process (by torch, CuPy, …).
    AlreadyLoaded,
    /// The variable named here pointed at it.
    Override(&'static str),
    /// A pip wheel's copy under this site-packages folder.
    Wheel(PathBuf),
    /// The dynamic loader found it by name (`LD_LIBRARY_PATH`, `ld.so.cache`).
    LoaderPath,
    /// Under `$ROCM_PATH` (or `$HIP_PATH`).
    RocmPath,
    /// Under `/opt/rocm`.
    OptRocm,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::AlreadyLoaded => f.write_str("already loaded in the process"),
            Source::Override(var) => write!(f, "set by {var}"),
            Source::Wheel(site) => write!(f, "pip wheel in {}", site.display()),
            Source::LoaderPath => f.write_str("loader path"),
            Source::RocmPath => f.write_str("$ROCM_PATH"),
            Source::OptRocm => f.write_str("/opt/rocm"),
        }
    }
}

/// One file to try, and why it is on the list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// A path, or a bare name for the loader to resolve.
    pub path: String,
    /// Why it is tried.
    pub source: Source,
}

/// What the search reads from the process, gathered once per search so a
/// test can give its own ([`SearchEnv::from_process`] reads the real one).
#[derive(Debug, Clone, Default)]
pub struct SearchEnv {
    /// The override variable's value.
    pub override_path: Option<String>,
    /// Site-packages folders, in order.
    pub site_packages: Vec<PathBuf>,
    /// `$ROCM_PATH`, then `$HIP_PATH`.
    pub rocm_roots: Vec<String>,
}

/// The variable with extra site-packages folders, `:`-separated.
pub const SITE_PACKAGES_ENV: &str = "GPUPORT_SITE_PACKAGES";

static SITE_PACKAGES: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// Adds site-packages folders to search for pip wheel copies of vendor
/// libraries (after `GPUPORT_SITE_PACKAGES`'s). The Python package passes
/// `sys.path` at import; a Rust program that embeds Python, or ships the
/// wheels' folders, can call it before the first device is opened.
pub fn set_site_packages(dirs: impl IntoIterator<Item = PathBuf>) {
    let mut list = SITE_PACKAGES.lock().unwrap_or_else(|p| p.into_inner());
    for dir in dirs {
        if !list.contains(&dir) {
            list.push(dir);
        }
    }
}

impl SearchEnv {
    /// The process's environment for `spec`.
    pub fn from_process(spec: &LibrarySpec) -> SearchEnv {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let mut site_packages: Vec<PathBuf> =
            var(SITE_PACKAGES_ENV).map(|v| std::env::split_paths(&v).collect()).unwrap_or_default();
        for dir in SITE_PACKAGES.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            if !site_packages.contains(dir) {
                site_packages.push(dir.clone());
            }
        }
        let rocm_roots =
            if spec.rocm { ["ROCM_PATH", "HIP_PATH"].into_iter().filter_map(var).collect() } else { vec![] };
        SearchEnv { override_path: var(spec.override_env), site_packages, rocm_roots }
    }
}

/// The files to try for `spec`, in the search order of the module docs.
/// `loaded` is the path of a copy already in the process
/// ([`loaded_copy`]): then it is the only candidate, and so is an override.
/// Wheel copies are listed only where the file exists.
pub fn candidates(spec: &LibrarySpec, env: &SearchEnv, loaded: Option<String>) -> Vec<Candidate> {
    if let Some(path) = loaded {
        return vec![Candidate { path, source: Source::AlreadyLoaded }];
    }
    if let Some(path) = &env.override_path {
        return vec![Candidate { path: path.clone(), source: Source::Override(spec.override_env) }];
    }
    let mut out: Vec<Candidate> = Vec::new();
    let mut push = |path: String, source: Source| {
        if !out.iter().any(|c| c.path == path) {
            out.push(Candidate { path, source });
        }
    };
    for site in &env.site_packages {
        for dir in spec.wheel_dirs.iter().flat_map(|d| wheel_dirs(site, d)) {
            for name in spec.names {
                let file = dir.join(name);
                if file.is_file() {
                    push(file.to_string_lossy().into_owned(), Source::Wheel(site.clone()));
                }
            }
        }
    }
    spec.names.iter().for_each(|n| push(n.to_string(), Source::LoaderPath));
    if spec.rocm {
        for root in &env.rocm_roots {
            let root = root.trim_end_matches('/');
            spec.names.iter().for_each(|n| push(format!("{root}/lib/{n}"), Source::RocmPath));
        }
        spec.names.iter().for_each(|n| push(format!("/opt/rocm/lib/{n}"), Source::OptRocm));
    }
    out
}

/// The folders `pattern` names under `site`: `torch/lib` as it is; a
/// first part ending in `*` (`_rocm_sdk_libraries_*/lib`, one folder per
/// GPU family) stands for every folder of `site` that begins so, in name order.
fn wheel_dirs(site: &Path, pattern: &str) -> Vec<PathBuf> {
    let (first, rest) = pattern.split_once('/').unwrap_or((pattern, ""));
    let Some(prefix) = first.strip_suffix('*') else { return vec![site.join(pattern)] };
    let Ok(entries) = std::fs::read_dir(site) else { return vec![] };
    let mut found: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| e.file_name().to_str().is_some_and(|n| n.starts_with(prefix)))
        .map(|e| e.path().join(rest))
        .collect();
    found.sort();
    found
}

/// Whether `file` (a path's last part) is one of `names`, or a longer
/// version of one (`libamdhip64.so.6.2.41133` for `libamdhip64.so`).
fn is_named(file: &str, names: &[&str]) -> bool {
    names.iter().any(|n| file == *n || file.strip_prefix(n).is_some_and(|rest| rest.starts_with('.')))
}

/// The path of a library named one of `names` that is mapped in the
/// process already, if any.
///
/// Written over `dl_iterate_phdr` rather than `dlopen(name, RTLD_NOLOAD)`:
/// `RTLD_NOLOAD` matches only the names and sonames the loader recorded,
/// so it misses a copy opened by path under another file name (torch's
/// `torch/lib/libamdhip64.so` has soname `libamdhip64.so.6`), and it does
/// not say which file it found; the loaded objects' own paths say both.
pub fn loaded_copy(names: &[&str]) -> Option<String> {
    let mut paths: Vec<String> = Vec::new();
    unsafe extern "C" fn visit(info: *mut libc::dl_phdr_info, _size: usize, data: *mut libc::c_void) -> libc::c_int {
        // SAFETY: `data` is the `&mut Vec<String>` passed below, alive for
        // the call; `info` is valid for this callback per dl_iterate_phdr(3).
        let (paths, name) = unsafe { (&mut *data.cast::<Vec<String>>(), (*info).dlpi_name) };
        if !name.is_null() {
            // SAFETY: dlpi_name is a NUL-terminated string owned by the loader.
            let name = unsafe { std::ffi::CStr::from_ptr(name) }.to_string_lossy();
            if !name.is_empty() {
                paths.push(name.into_owned());
            }
        }
        0
    }
    // SAFETY: `visit` only reads `info` and appends to `paths`, which
    // outlives the call.
    unsafe { libc::dl_iterate_phdr(Some(visit), (&mut paths as *mut Vec<String>).cast()) };
    paths.into_iter().find(|p| Path::new(p).file_name().and_then(|f| f.to_str()).is_some_and(|f| is_named(f, names)))
}

/// A vendor library gpuport loaded: which file, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LibraryChoice {
    /// The backend that uses it.
    pub backend: BackendKind,
    /// The library's name, e.g. `libamdhip64`.
    pub library: &'static str,
    /// The file (or the name the loader resolved).
    pub path: String,
    /// Why it was chosen.
    pub source: Source,
}

impl fmt::Display for LibraryChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} from {} ({})", self.library, self.path, self.source)
    }
}

static CHOSEN: Mutex<Vec<LibraryChoice>> = Mutex::new(Vec::new());

/// Notes that `spec`'s library was loaded from `path` for `source`.
// Called by the loaders, which exist only with a GPU backend compiled in.
#[cfg_attr(not(any(feature = "cuda", feature = "rocm")), allow(dead_code))]
pub(crate) fn record(spec: &LibrarySpec, path: &str, source: &Source) {
    let mut list = CHOSEN.lock().unwrap_or_else(|p| p.into_inner());
    if !list.iter().any(|c| c.library == spec.library) {
        list.push(LibraryChoice {
            backend: spec.backend,
            library: spec.library,
            path: path.to_string(),
            source: source.clone(),
        });
    }
}

/// Every vendor library loaded so far, in loading order.
pub fn chosen() -> Vec<LibraryChoice> {
    CHOSEN.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

/// The vendor libraries of `backend` loaded so far.
pub fn chosen_for(backend: BackendKind) -> Vec<LibraryChoice> {
    chosen().into_iter().filter(|c| c.backend == backend).collect()
}

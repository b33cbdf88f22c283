//! Which libcuda and NVRTC the CUDA backend uses.
//!
//! cudarc opens both itself, by file name (`cudarc::get_lib_name_candidates`),
//! so gpuport first runs the search of `crate::backend::library` and loads
//! the file it picks, for the life of the process: the dynamic loader then
//! hands cudarc that copy for any name equal to the file's soname, or to a
//! link to the same file. Where an earlier name of cudarc's list is another
//! file on the loader path, cudarc takes that one; so the file cudarc really
//! uses is read back (`dladdr` on one of its symbols) and that is what is
//! recorded. [`driver`] loads and initializes libcuda once, with this search.

use std::ffi::c_void;
use std::sync::OnceLock;

use cudarc::driver::{result as cu, sys};
use libloading::Library;

use super::{check, status};
use crate::backend::library::{self, LibrarySpec, Loaded, Source};
use crate::error::{BackendKind, Error, Result};

/// The search for the driver library. No wheel ships it: it comes with
/// the kernel driver.
pub(super) const CUDA_SPEC: LibrarySpec = LibrarySpec {
    backend: BackendKind::Cuda,
    library: "libcuda",
    names: &["libcuda.so.1", "libcuda.so"],
    override_env: "GPUPORT_CUDA_LIBRARY",
    wheel_dirs: &[],
    rocm: false,
};

/// The search for NVRTC: the CUDA 13 wheels put it in `nvidia/cu13/lib`,
/// the CUDA 12 ones (`nvidia-cuda-nvrtc-cu12`) in `nvidia/cuda_nvrtc/lib`.
pub(super) const NVRTC_SPEC: LibrarySpec = LibrarySpec {
    backend: BackendKind::Cuda,
    library: "libnvrtc",
    names: &["libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"],
    override_env: "GPUPORT_NVRTC_LIBRARY",
    wheel_dirs: &["nvidia/cu13/lib", "nvidia/cuda_nvrtc/lib"],
    rocm: false,
};

/// A library's table here is one symbol that proves it is the right one.
///
/// # Safety
/// Loading `lib` ran its initializers; only the symbol's address is read.
unsafe fn exports(lib: &Library, symbol: &'static str) -> Result<*const c_void, Vec<&'static str>> {
    let name = format!("{symbol}\0");
    // SAFETY: the address is only compared, never called through here.
    unsafe { lib.get::<*const c_void>(name.as_bytes()) }.map(|s| *s).map_err(|_| vec![symbol])
}

/// # Safety
/// As [`exports`].
unsafe fn has_cu_init(lib: &Library) -> Result<*const c_void, Vec<&'static str>> {
    // SAFETY: forwarded.
    unsafe { exports(lib, "cuInit") }
}

/// # Safety
/// As [`exports`].
unsafe fn has_nvrtc_version(lib: &Library) -> Result<*const c_void, Vec<&'static str>> {
    // SAFETY: forwarded.
    unsafe { exports(lib, "nvrtcVersion") }
}

/// The file gpuport loaded for a library, kept loaded for the process.
struct Preloaded(Loaded<*const c_void>);

// SAFETY: the address is only compared; `Library` is Send and Sync.
unsafe impl Send for Preloaded {}
// SAFETY: as above.
unsafe impl Sync for Preloaded {}

static CUDA: OnceLock<Result<Preloaded, String>> = OnceLock::new();
static NVRTC: OnceLock<Result<Preloaded, String>> = OnceLock::new();

/// The cell of `spec`'s preloaded file, and the function that checks it.
fn cell(spec: &LibrarySpec) -> (&'static OnceLock<Result<Preloaded, String>>, Resolve) {
    if spec.library == CUDA_SPEC.library {
        (&CUDA, has_cu_init)
    } else {
        (&NVRTC, has_nvrtc_version)
    }
}

type Resolve = unsafe fn(&Library) -> Result<*const c_void, Vec<&'static str>>;

/// Loads the file the search picks for `spec` (libcuda or NVRTC) before
/// cudarc opens it; the error lists what was tried and why.
pub(super) fn preload(spec: &'static LibrarySpec) -> Result<(), String> {
    let (cell, resolve) = cell(spec);
    let state = cell.get_or_init(|| {
        // SAFETY: loads only the CUDA driver or NVRTC candidates; one symbol is looked up.
        unsafe { library::open_first(&library::plan(spec, Vec::new()), resolve) }.map(Preloaded)
    });
    state.as_ref().map(|_| ()).map_err(Clone::clone)
}

/// Records which file cudarc opened for `spec`, from the address of
/// `symbol` in cudarc's `lib`: the preloaded file, with the search's
/// reason, or another one cudarc found on the loader path by an earlier name.
pub(super) fn record_used(spec: &'static LibrarySpec, lib: &Library, symbol: &'static str) {
    // SAFETY: the library is cudarc's, loaded; the address is only looked up.
    let Ok(address) = (unsafe { exports(lib, symbol) }) else { return };
    let Some(file) = file_of(address) else { return };
    let source = match cell(spec).0.get() {
        Some(Ok(Preloaded(ours))) if same_file(&ours.path, &file) || ours.source == Source::LoaderPath => {
            ours.source.clone()
        }
        _ => Source::LoaderPath,
    };
    library::record(spec, &file, &source);
}

/// The file that holds `address`, from `dladdr`.
fn file_of(address: *const c_void) -> Option<String> {
    let mut info = std::mem::MaybeUninit::<libc::Dl_info>::zeroed();
    // SAFETY: dladdr only reads the loader's tables and fills `info`.
    if unsafe { libc::dladdr(address, info.as_mut_ptr()) } == 0 {
        return None;
    }
    // SAFETY: dladdr returned non-zero, so it filled `info`.
    let info = unsafe { info.assume_init() };
    if info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dli_fname is a NUL-terminated string owned by the loader.
    Some(unsafe { std::ffi::CStr::from_ptr(info.dli_fname) }.to_string_lossy().into_owned())
}

/// Whether `candidate` (a path or a bare name) is the file `loaded`.
fn same_file(candidate: &str, loaded: &str) -> bool {
    if candidate == loaded {
        return true;
    }
    let canon = |p: &str| std::fs::canonicalize(p).ok();
    candidate.contains('/') && canon(candidate).is_some_and(|c| Some(c) == canon(loaded))
}

/// The library names cudarc tries for `lib`, without repeats and without
/// `searched` (tried already by gpuport's search), comma separated.
pub(super) fn candidates(lib: &str, searched: &[&str]) -> String {
    let mut names = cudarc::get_lib_name_candidates(lib);
    let mut seen: std::collections::HashSet<String> = searched.iter().map(|s| s.to_string()).collect();
    names.retain(|n| seen.insert(n.clone()));
    names.join(", ")
}

/// Loads and initializes the driver once; the outcome (and why it failed) is cached.
pub(crate) fn driver() -> Result<i32> {
    static STATE: OnceLock<std::result::Result<i32, String>> = OnceLock::new();
    let state = STATE.get_or_init(|| {
        let searched = preload(&CUDA_SPEC);
        // SAFETY: only tries `dlopen` on cudarc's candidate names.
        if !unsafe { sys::is_culib_present() } {
            let tried = searched.err().unwrap_or_default();
            return Err(format!("libcuda: tried {tried}, then cudarc's names {}", candidates("cuda", CUDA_SPEC.names)));
        }
        check("cuInit", cu::init()).map_err(|e| e.to_string())?;
        // SAFETY: cuInit went through cudarc's library, so it is loaded.
        record_used(&CUDA_SPEC, unsafe { sys::culib() }, "cuInit");
        let mut version = 0;
        // SAFETY: writes one int; the library is loaded (probed above).
        status("cuDriverGetVersion", unsafe { sys::cuDriverGetVersion(&mut version) }).map_err(|e| e.to_string())?;
        Ok(version)
    });
    match state {
        Ok(v) => Ok(*v),
        Err(msg) if msg.starts_with("libcuda: tried ") => Err(Error::LibraryNotFound {
            backend: BackendKind::Cuda,
            library: "libcuda",
            tried: msg.trim_start_matches("libcuda: tried ").to_string(),
        }),
        Err(msg) => Err(Error::NoDevice { backend: BackendKind::Cuda, reason: msg.clone() }),
    }
}

//! Loading a vendor library at run time: the first of a list of candidates
//! that loads and exports every function of its table. Shared by the HIP
//! runtime and hiprtc (`hip/sys.rs`) and by NCCL/RCCL (`collective/nccl/sys.rs`).

use libloading::Library;

/// A library that loaded and exports every required function of table `T`.
pub struct Loaded<T> {
    /// The candidate that loaded (a path, or a name the loader resolved).
    pub path: String,
    /// The resolved functions; valid while `lib` is loaded.
    pub api: T,
    /// Kept loaded for the life of the process (see the module docs).
    // Read only by the HIP backend (its optional symbols); NCCL's table
    // keeps it for the loading alone.
    #[cfg_attr(not(feature = "rocm"), allow(dead_code))]
    pub lib: Library,
}

/// Opens the first candidate that loads and resolves with `resolve`.
///
/// On failure, returns one entry per candidate: its name, and why it failed
/// where that is more than "not found".
///
/// # Safety
/// Loading a library runs its initializers; the candidates must be the
/// vendor libraries (or stand-ins) exporting the signatures `resolve` declares.
pub unsafe fn open_first<T>(
    candidates: &[String],
    resolve: unsafe fn(&Library) -> Result<T, Vec<&'static str>>,
) -> Result<Loaded<T>, String> {
    let mut tried = Vec::with_capacity(candidates.len());
    for candidate in candidates {
        // SAFETY: the caller accepts running the library's initializers.
        match unsafe { Library::new(candidate.as_str()) } {
            // SAFETY: `lib` is moved into the returned `Loaded` with the table.
            Ok(lib) => match unsafe { resolve(&lib) } {
                Ok(api) => return Ok(Loaded { path: candidate.clone(), api, lib }),
                Err(missing) => tried.push(format!("{candidate} (loaded, but lacks {})", missing.join(", "))),
            },
            Err(e) => {
                // libloading's own message is only "dlopen failed"; dlerror()'s is in the source.
                let msg = std::error::Error::source(&e).map_or_else(|| e.to_string(), |s| s.to_string());
                if msg.contains("No such file or directory") {
                    tried.push(candidate.clone());
                } else {
                    tried.push(format!("{candidate} ({msg})"));
                }
            }
        }
    }
    Err(tried.join(", "))
}

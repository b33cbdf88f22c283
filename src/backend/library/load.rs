//! Loading the library the search of `super` picks: the first candidate
//! that loads and resolves a backend's function table.

use libloading::Library;

use super::{candidates, loaded_copy, record, Candidate, LibrarySpec, SearchEnv, Source};

/// A library that loaded and exports every required function of table `T`.
pub(crate) struct Loaded<T> {
    /// The candidate that loaded (a path, or a name the loader resolved).
    pub path: String,
    /// Why it was chosen.
    pub source: Source,
    /// The resolved functions; valid while `lib` is loaded.
    pub api: T,
    /// Held, never read: the functions of `api` are valid while it is
    /// loaded, and it is kept for the life of the process (vendor
    /// runtimes have crashed in their own teardown: `hip/sys.rs`).
    pub _lib: Library,
}

/// Searches for `spec` in the process's environment and opens the first
/// candidate that loads and resolves with `resolve`; records the choice.
/// `extra` candidates are tried after the search (hiprtc's: the HIP
/// runtime, which holds hiprtc in ROCm 5.2).
///
/// On failure, returns one entry per candidate: its name, why it was
/// tried, and why it failed where that is more than "not found" (a symbol
/// it lacks is named).
///
/// # Safety
/// Loading a library runs its initializers; the candidates must be the
/// vendor libraries (or stand-ins) exporting the signatures `resolve` declares.
pub(crate) unsafe fn search<T>(
    spec: &LibrarySpec,
    extra: Vec<Candidate>,
    resolve: unsafe fn(&Library) -> Result<T, Vec<&'static str>>,
) -> Result<Loaded<T>, String> {
    // SAFETY: forwarded caller contract.
    let lib = unsafe { open_first(&plan(spec, extra), resolve) }?;
    record(spec, &lib.path, &lib.source);
    Ok(lib)
}

/// The candidates [`search`] tries for `spec` in this process: the
/// search's, then `extra` unless a loaded copy or an override is the only one.
pub(crate) fn plan(spec: &LibrarySpec, extra: Vec<Candidate>) -> Vec<Candidate> {
    let (loaded, env) = (loaded_copy(spec.names), SearchEnv::from_process(spec));
    let only_one = loaded.is_some() || env.override_path.is_some();
    let mut list = candidates(spec, &env, loaded);
    if !only_one {
        list.extend(extra.into_iter().filter(|c| !list.iter().any(|l| l.path == c.path)).collect::<Vec<_>>());
    }
    list
}

/// Opens the first of `candidates` that loads and resolves with `resolve`
/// (see [`search`], which lists them).
///
/// # Safety
/// As [`search`].
pub(crate) unsafe fn open_first<T>(
    candidates: &[Candidate],
    resolve: unsafe fn(&Library) -> Result<T, Vec<&'static str>>,
) -> Result<Loaded<T>, String> {
    let mut tried = Vec::with_capacity(candidates.len());
    for Candidate { path, source } in candidates {
        // SAFETY: the caller accepts running the library's initializers.
        match unsafe { Library::new(path.as_str()) } {
            // SAFETY: `lib` is moved into the returned `Loaded` with the table.
            Ok(lib) => match unsafe { resolve(&lib) } {
                Ok(api) => return Ok(Loaded { path: path.clone(), source: source.clone(), api, _lib: lib }),
                Err(missing) => tried.push(format!("{path} [{source}] (loaded, but lacks {})", missing.join(", "))),
            },
            Err(e) => {
                // libloading's own message is only "dlopen failed"; dlerror()'s is in the source.
                let msg = std::error::Error::source(&e).map_or_else(|| e.to_string(), |s| s.to_string());
                if msg.contains("No such file or directory") {
                    tried.push(format!("{path} [{source}]"));
                } else {
                    tried.push(format!("{path} [{source}] ({msg})"));
                }
            }
        }
    }
    Err(tried.join(", "))
}

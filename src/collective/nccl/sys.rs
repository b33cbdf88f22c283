//! The NCCL C API, declared by hand and loaded at run time; RCCL exports
//! the same `nccl*` symbols with the same signatures, so this one table
//! serves both (`libnccl.so.2` for CUDA devices, `librccl.so.1` for ROCm).
//!
//! # Why no crate
//! cudarc's `nccl` module loads only NCCL's library names and takes
//! cudarc's own stream type; the `rccl-sys` crates link RCCL at build time.
//! gpuport needs eighteen functions from either library, so this file
//! declares exactly those and resolves them with `libloading`. Every
//! signature, constant and enum value is copied from `nccl.h` (NCCL 2.28's
//! `src/nccl.h.in`), and RCCL's `rccl.h` declares the same ones.
//!
//! Only vendor declarations live here; `super` turns statuses into errors.
#![allow(non_camel_case_types, non_snake_case, non_upper_case_globals)]

use std::ffi::{c_char, c_int, c_void};

use libloading::Library;

use crate::backend::library::{open_first, Loaded};

/// `ncclResult_t`: a C enum, `int`-sized.
pub type ncclResult_t = c_int;
/// `ncclSuccess`.
pub const ncclSuccess: ncclResult_t = 0;
/// `ncclInProgress`: a non-blocking call has not finished.
pub const ncclInProgress: ncclResult_t = 7;

/// `ncclDataType_t`: a C enum, `int`-sized.
pub type ncclDataType_t = c_int;
/// `ncclRedOp_t`: a C enum, `int`-sized.
pub type ncclRedOp_t = c_int;

/// `ncclComm_t`: a pointer to the library's communicator.
pub type ncclComm_t = *mut c_void;
/// `cudaStream_t` / `hipStream_t`: a pointer.
pub type stream_t = *mut c_void;

/// `NCCL_UNIQUE_ID_BYTES`.
pub const NCCL_UNIQUE_ID_BYTES: usize = 128;

/// `ncclUniqueId`: `struct { char internal[NCCL_UNIQUE_ID_BYTES]; }`, passed by value.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ncclUniqueId {
    /// The id's opaque bytes.
    pub internal: [c_char; NCCL_UNIQUE_ID_BYTES],
}

macro_rules! table {
    ($( $name:ident : fn($($arg:ty),*) -> $ret:ty; )*) => {
        /// The resolved functions of one NCCL or RCCL library.
        pub struct Api { $(
            #[doc = concat!("`", stringify!($name), "`.")]
            pub $name: unsafe extern "C" fn($($arg),*) -> $ret,
        )* }

        /// Resolves every function of [`Api`] in `lib`, or names those missing.
        ///
        /// # Safety
        /// `lib` is an NCCL or RCCL library, whose symbols have the types
        /// declared here, and it outlives the table.
        unsafe fn resolve(lib: &Library) -> Result<Api, Vec<&'static str>> {
            let mut missing = Vec::new();
            $(
                // SAFETY: the symbol's type is the one `nccl.h` declares (the caller's promise).
                let $name = unsafe { lib.get::<unsafe extern "C" fn($($arg),*) -> $ret>(concat!(stringify!($name), "\0").as_bytes()) }
                    .map(|s| *s)
                    .map_err(|_| missing.push(stringify!($name)))
                    .ok();
            )*
            match ($($name,)*) {
                ($(Some($name),)*) => Ok(Api { $($name,)* }),
                _ => Err(missing),
            }
        }
    };
}

table! {
    ncclGetVersion: fn(*mut c_int) -> ncclResult_t;
    ncclGetUniqueId: fn(*mut ncclUniqueId) -> ncclResult_t;
    ncclCommInitRank: fn(*mut ncclComm_t, c_int, ncclUniqueId, c_int) -> ncclResult_t;
    ncclCommInitAll: fn(*mut ncclComm_t, c_int, *const c_int) -> ncclResult_t;
    ncclCommDestroy: fn(ncclComm_t) -> ncclResult_t;
    ncclCommAbort: fn(ncclComm_t) -> ncclResult_t;
    ncclCommGetAsyncError: fn(ncclComm_t, *mut ncclResult_t) -> ncclResult_t;
    ncclGetErrorString: fn(ncclResult_t) -> *const c_char;
    ncclGetLastError: fn(ncclComm_t) -> *const c_char;
    ncclAllReduce: fn(*const c_void, *mut c_void, usize, ncclDataType_t, ncclRedOp_t, ncclComm_t, stream_t) -> ncclResult_t;
    ncclBroadcast: fn(*const c_void, *mut c_void, usize, ncclDataType_t, c_int, ncclComm_t, stream_t) -> ncclResult_t;
    ncclReduce: fn(*const c_void, *mut c_void, usize, ncclDataType_t, ncclRedOp_t, c_int, ncclComm_t, stream_t) -> ncclResult_t;
    ncclAllGather: fn(*const c_void, *mut c_void, usize, ncclDataType_t, ncclComm_t, stream_t) -> ncclResult_t;
    ncclReduceScatter: fn(*const c_void, *mut c_void, usize, ncclDataType_t, ncclRedOp_t, ncclComm_t, stream_t) -> ncclResult_t;
    ncclSend: fn(*const c_void, usize, ncclDataType_t, c_int, ncclComm_t, stream_t) -> ncclResult_t;
    ncclRecv: fn(*mut c_void, usize, ncclDataType_t, c_int, ncclComm_t, stream_t) -> ncclResult_t;
    ncclGroupStart: fn() -> ncclResult_t;
    ncclGroupEnd: fn() -> ncclResult_t;
}

/// A library's table and its version.
pub struct Versioned {
    /// The functions.
    pub fns: Api,
    /// `ncclGetVersion`'s code, e.g. 22805 for 2.28.5.
    pub version: i32,
}

/// An opened NCCL or RCCL library with its table and version; never
/// unloaded (other libraries in the process, PyTorch's among them, may share it).
pub type Nccl = Loaded<Versioned>;

/// [`resolve`], then the version: a library whose `ncclGetVersion` fails
/// counts as one that lacks it, and the search goes on.
///
/// # Safety
/// As [`resolve`]'s.
unsafe fn resolve_versioned(lib: &Library) -> Result<Versioned, Vec<&'static str>> {
    // SAFETY: the caller's promise, passed on.
    let fns = unsafe { resolve(lib) }?;
    let mut version: c_int = 0;
    // SAFETY: `ncclGetVersion` writes one int; it needs no initialisation.
    if unsafe { (fns.ncclGetVersion)(&mut version) } != ncclSuccess {
        return Err(vec!["a working ncclGetVersion"]);
    }
    Ok(Versioned { fns, version })
}

/// Opens the first of `candidates` that loads, has every function of
/// [`Api`] and answers `ncclGetVersion`; else the list of what was tried
/// and why each failed.
pub fn open(candidates: &[String]) -> Result<Nccl, String> {
    // SAFETY: loading runs the library's initialisers; NCCL's and RCCL's
    // only set up their own state, and `resolve` declares their signatures.
    unsafe { open_first(candidates, resolve_versioned) }
}

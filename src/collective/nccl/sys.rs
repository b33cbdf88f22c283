//! The NCCL C API, declared by hand and loaded at run time; RCCL exports
//! the same `nccl*` symbols with the same signatures, so this one table
//! serves both (`libnccl.so.2` for CUDA devices, `librccl.so.1` for ROCm).
//!
//! # Why no crate
//! cudarc's `nccl` module loads only NCCL's library names and takes
//! cudarc's own stream type; the `rccl-sys` crates link RCCL at build time.
//! gpuport needs eighteen functions from either library, so this file
//! declares exactly those and resolves them with `libloading`, plus the
//! optional ones, each used where the library has it: NCCL 2.14's
//! non-blocking init ([`NonBlockingApi`]), 2.18's split ([`SplitApi`]),
//! 2.19's buffer registration ([`RegisterApi`]) and 2.27's shrink
//! ([`ShrinkApi`]).
//! Every signature, constant and enum value is copied from `nccl.h` (NCCL
//! 2.28's `src/nccl.h.in`; [`ncclConfig_t`] from 2.14.3's), and RCCL's
//! `rccl.h` declares the same ones.
//!
//! Only vendor declarations live here; `super` turns statuses into errors.
#![allow(non_camel_case_types, non_snake_case, non_upper_case_globals)]

use std::ffi::{c_char, c_int, c_void};

use libloading::Library;

use crate::backend::library::{search, LibrarySpec, Loaded};

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

/// `NCCL_CONFIG_UNDEF_INT` (`INT_MIN`): "not set, take the library's default".
pub const NCCL_CONFIG_UNDEF_INT: c_int = c_int::MIN;
/// `ncclConfig_t::magic` as `NCCL_CONFIG_INITIALIZER` sets it (`NCCL_API_MAGIC`).
pub const NCCL_CONFIG_MAGIC: u32 = 0xcafe_beef;
/// The header [`ncclConfig_t`] models: `NCCL_VERSION(2, 14, 0)`, the
/// struct's own name (`ncclConfig_v21400`) and the first NCCL with it.
pub const NCCL_CONFIG_VERSION: u32 = 21400;

/// `ncclConfig_t` as NCCL 2.14 to 2.16 declare it (`ncclConfig_v21400`).
///
/// The struct is versioned: a library copies `min(size, its own sizeof)`
/// bytes and, from 2.17 on, resets every field newer than `version` to its
/// default (`parseCommConfig` in `src/init.cc`), so a newer NCCL or RCCL
/// reads this one as "blocking set, everything else default".
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ncclConfig_t {
    /// `sizeof(ncclConfig_t)`: 24.
    pub size: usize,
    /// [`NCCL_CONFIG_MAGIC`].
    pub magic: u32,
    /// [`NCCL_CONFIG_VERSION`].
    pub version: u32,
    /// 0: every call returns at once (`ncclInProgress` while it runs on).
    pub blocking: c_int,
    /// C's tail padding after `blocking`, made explicit: a library from
    /// 2.17 on copies it into `cgaClusterSize` (then resets that, as the
    /// version is older), so it holds [`NCCL_CONFIG_UNDEF_INT`].
    pub undef_tail: c_int,
}

impl ncclConfig_t {
    /// `NCCL_CONFIG_INITIALIZER` of `ncclConfig_v21400` (size, magic and
    /// version as the 2.14.0 header's macro sets them), with `blocking` set.
    pub fn with_blocking(blocking: bool) -> Self {
        ncclConfig_t {
            size: std::mem::size_of::<ncclConfig_t>(),
            magic: NCCL_CONFIG_MAGIC,
            version: NCCL_CONFIG_VERSION,
            blocking: c_int::from(blocking),
            undef_tail: NCCL_CONFIG_UNDEF_INT,
        }
    }
}

macro_rules! table {
    ($api:ident, $resolve:ident, $what:literal; $( $name:ident : fn($($arg:ty),*) -> $ret:ty; )*) => {
        #[doc = $what]
        pub struct $api { $(
            #[doc = concat!("`", stringify!($name), "`.")]
            pub $name: unsafe extern "C" fn($($arg),*) -> $ret,
        )* }

        /// Resolves every function of the table in `lib`, or names those missing.
        ///
        /// # Safety
        /// `lib` is an NCCL or RCCL library, whose symbols have the types
        /// declared here, and it outlives the table.
        unsafe fn $resolve(lib: &Library) -> Result<$api, Vec<&'static str>> {
            let mut missing = Vec::new();
            $(
                // SAFETY: the symbol's type is the one `nccl.h` declares (the caller's promise).
                let $name = unsafe { lib.get::<unsafe extern "C" fn($($arg),*) -> $ret>(concat!(stringify!($name), "\0").as_bytes()) }
                    .map(|s| *s)
                    .map_err(|_| missing.push(stringify!($name)))
                    .ok();
            )*
            match ($($name,)*) {
                ($(Some($name),)*) => Ok($api { $($name,)* }),
                _ => Err(missing),
            }
        }
    };
}

table! {
    Api, resolve, "The resolved functions of one NCCL or RCCL library.";
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

table! {
    NonBlockingApi, resolve_non_blocking, "The functions of non-blocking communicators (NCCL and RCCL 2.14 on).";
    ncclCommInitRankConfig: fn(*mut ncclComm_t, c_int, ncclUniqueId, c_int, *mut ncclConfig_t) -> ncclResult_t;
}

table! {
    SplitApi, resolve_split, "Splitting a communicator (NCCL 2.18 on), with the new one's rank and size.";
    ncclCommSplit: fn(ncclComm_t, c_int, c_int, *mut ncclComm_t, *mut ncclConfig_t) -> ncclResult_t;
    ncclCommCount: fn(ncclComm_t, *mut c_int) -> ncclResult_t;
    ncclCommUserRank: fn(ncclComm_t, *mut c_int) -> ncclResult_t;
}

table! {
    ShrinkApi, resolve_shrink, "Shrinking a communicator (NCCL 2.27 on).";
    ncclCommShrink: fn(ncclComm_t, *mut c_int, c_int, *mut ncclComm_t, *mut ncclConfig_t, c_int) -> ncclResult_t;
}

table! {
    RegisterApi, resolve_register, "Registering user buffers with a communicator (NCCL 2.19 on).";
    ncclCommRegister: fn(ncclComm_t, *mut c_void, usize, *mut *mut c_void) -> ncclResult_t;
    ncclCommDeregister: fn(ncclComm_t, *mut c_void) -> ncclResult_t;
}

/// `NCCL_SPLIT_NOCOLOR`: a rank of no new communicator.
pub const NCCL_SPLIT_NOCOLOR: c_int = -1;
/// `NCCL_SHRINK_DEFAULT`: shrink a communicator in a good state.
pub const NCCL_SHRINK_DEFAULT: c_int = 0x00;
/// `NCCL_SHRINK_ABORT`: end the parent's operations first (after an error).
pub const NCCL_SHRINK_ABORT: c_int = 0x01;

/// A library's table and its version.
pub struct Versioned {
    /// The functions.
    pub fns: Api,
    /// `ncclGetVersion`'s code, e.g. 22805 for 2.28.5.
    pub version: i32,
    /// The non-blocking API, where the library is 2.14 or newer and has it.
    pub non_blocking: Option<NonBlockingApi>,
    /// `ncclCommSplit` and its helpers, where the library has them.
    pub split: Option<SplitApi>,
    /// `ncclCommShrink`, where the library has it.
    pub shrink: Option<ShrinkApi>,
    /// `ncclCommRegister`/`ncclCommDeregister`, where the library has them.
    pub register: Option<RegisterApi>,
}

/// An opened NCCL or RCCL library with its table and version; never
/// unloaded (other libraries in the process, PyTorch's among them, may share it).
pub type Nccl = Loaded<Versioned>;

/// [`resolve`], then the version: a library whose `ncclGetVersion` fails
/// counts as one that lacks it, and the search goes on. The non-blocking
/// API is optional: a library older than 2.14, or without it, gets `None`.
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
    let non_blocking = if u32::try_from(version).is_ok_and(|v| v >= NCCL_CONFIG_VERSION) {
        // SAFETY: the caller's promise, passed on.
        unsafe { resolve_non_blocking(lib) }.ok()
    } else {
        None
    };
    // Each table below is optional: a library without one runs without it.
    // SAFETY: the caller's promise, passed on.
    let split = unsafe { resolve_split(lib) }.ok();
    // SAFETY: as above.
    let shrink = unsafe { resolve_shrink(lib) }.ok();
    // SAFETY: as above.
    let register = unsafe { resolve_register(lib) }.ok();
    Ok(Versioned { fns, version, non_blocking, split, shrink, register })
}

/// Searches for `spec`'s library (`crate::backend::library`) and opens the
/// first that loads, has every function of [`Api`] and answers
/// `ncclGetVersion` (with [`NonBlockingApi`] where it has it); else the
/// list of what was tried and why each failed.
pub fn open(spec: &LibrarySpec) -> Result<Nccl, String> {
    // SAFETY: loading runs the library's initialisers; NCCL's and RCCL's
    // only set up their own state, and `resolve` declares their signatures.
    unsafe { search(spec, Vec::new(), resolve_versioned) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `ncclConfig_v21400`'s layout, by offset: `size_t size; unsigned
    /// magic; unsigned version; int blocking;`, 24 bytes with C's padding.
    #[test]
    fn the_config_has_the_headers_layout() {
        assert_eq!(std::mem::size_of::<ncclConfig_t>(), 24);
        assert_eq!(std::mem::align_of::<ncclConfig_t>(), std::mem::align_of::<usize>());
        assert_eq!(std::mem::offset_of!(ncclConfig_t, size), 0);
        assert_eq!(std::mem::offset_of!(ncclConfig_t, magic), 8);
        assert_eq!(std::mem::offset_of!(ncclConfig_t, version), 12);
        assert_eq!(std::mem::offset_of!(ncclConfig_t, blocking), 16);
        // Where 2.17's `cgaClusterSize` lies.
        assert_eq!(std::mem::offset_of!(ncclConfig_t, undef_tail), 20);
    }

    #[test]
    fn the_config_is_the_initializer_with_blocking_set() {
        let c = ncclConfig_t::with_blocking(false);
        assert_eq!((c.size, c.magic, c.version, c.blocking), (24, 0xcafebeef, 21400, 0));
        assert_eq!(c.undef_tail, i32::MIN);
        assert_eq!(ncclConfig_t::with_blocking(true).blocking, 1);
    }
}

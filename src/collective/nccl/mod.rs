//! The GPU backends' collective engine: NCCL for CUDA devices, RCCL for
//! ROCm devices, through one function table (`sys.rs`) loaded at run time.
//! Written once over the vendor `Driver`, as the rest of the GPU core is.
//!
//! # Which library
//! The search of `crate::backend::library` (a copy already loaded, the
//! override, pip wheels, the loader path, then for RCCL `$ROCM_PATH` and
//! `/opt/rocm`), with `NCCL_SPEC` and `RCCL_SPEC`:
//! - CUDA: `GPUPORT_NCCL_LIBRARY`; `libnccl.so.2`, `libnccl.so`; the
//!   `nvidia-nccl-cu*` wheel's `nvidia/nccl/lib`.
//! - ROCm: `GPUPORT_RCCL_LIBRARY`; `librccl.so.1`, `librccl.so`; torch's
//!   `torch/lib` and TheRock's `_rocm_sdk_libraries*/lib`.
//!
//! # Timeouts
//! Communicators are blocking by default ([`CallMode::Blocking`], NCCL's
//! own default and its fastest). With [`CallMode::Bounded`] (NCCL or RCCL
//! 2.14 and newer) they are non-blocking (`ncclCommInitRankConfig` with
//! `blocking = 0`): every call returns at once, `ncclInProgress` while it
//! goes on in the library's thread, and the engine polls
//! `ncclCommGetAsyncError` for up to the communicator's timeout. So
//! initialisation with a rank that never comes, and a first connection to
//! a peer that is gone (inside a send, a receive, a collective or
//! `ncclGroupEnd`), abort the communicator and are a
//! `CollectiveErrorKind::Timeout` instead of a hang. From NCCL 2.23 on,
//! each call of a non-blocking communicator launches its work through a
//! helper thread: small all-reduces took about 3x the time of blocking
//! ones on two H200s (BENCHMARKS.md), which is why it is not the
//! default. An older library makes blocking communicators in either mode.
//!
//! Through a store, every rank loads its library, binds its device and
//! (rank 0) makes the id before any calls the library's initialisation, and
//! the ranks exchange their status and version first
//! (`src/collective/rendezvous.rs`), so such a failure fails the others
//! fast in both modes; a `Bounded` initialisation also watches for
//! failures while it waits inside the library (`init.rs`).
//!
//! NCCL older than [`MIN_VERSION`] is refused at load time. Element types:
//! reductions take NCCL's numeric types (fp8 from NCCL 2.24 on CUDA);
//! broadcast, all-gather, send and receive move bytes, so they take any type.

mod comm;
mod init;
mod regroup;
mod sys;
mod wait;

use init::{init_rank_call, made_non_blocking};

use std::ffi::{c_int, c_void, CStr};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use crate::array::dtype::DType;
use crate::backend::gpu::{Driver, Gpu, GpuDevice, RawAddress};
use crate::backend::library::LibrarySpec;
use crate::backend::{address_to_usize, Device, DeviceMemory, Stream};
use crate::error::{BackendKind, CollectiveErrorKind, Error, Result};

use super::engine::{sealed, CallMode, CollectiveBackend, Engine, Op, OpKind, ReduceOp, Regrouped};

pub use sys::NCCL_UNIQUE_ID_BYTES;

/// The oldest NCCL (or RCCL, which reports NCCL's numbering) gpuport
/// accepts: 2.12, the first with `ncclAvg`, `ncclGetLastError` and
/// `ncclCommGetAsyncError` as used here. From 2.14 on communicators are
/// non-blocking, with timeouts (see the module docs).
pub const MIN_VERSION: i32 = 21200;

/// NCCL's version code from which `ncclFloat8e4m3`/`ncclFloat8e5m2` exist.
const FP8_VERSION: i32 = 22400;

impl<D: Driver> sealed::Sealed for Gpu<D> {}

impl<D: Driver> CollectiveBackend for Gpu<D> {
    type Engine = NcclEngine<D>;
}

/// The search for NCCL: the `nvidia-nccl-cu*` wheels put it in
/// `nvidia/nccl/lib`, the CUDA 13 toolkit wheels in `nvidia/cu13/lib`.
const NCCL_SPEC: LibrarySpec = LibrarySpec {
    backend: BackendKind::Cuda,
    library: "libnccl",
    names: &["libnccl.so.2", "libnccl.so"],
    override_env: "GPUPORT_NCCL_LIBRARY",
    wheel_dirs: &["nvidia/nccl/lib", "nvidia/cu13/lib"],
    rocm: false,
};

/// The search for RCCL: torch's ROCm wheels and TheRock's share the HIP
/// runtime's folders.
const RCCL_SPEC: LibrarySpec = LibrarySpec {
    backend: BackendKind::Rocm,
    library: "librccl",
    names: &["librccl.so.1", "librccl.so"],
    override_env: "GPUPORT_RCCL_LIBRARY",
    wheel_dirs: &["torch/lib", "_rocm_sdk_libraries/lib", "_rocm_sdk_libraries_*/lib", "_rocm_sdk_core/lib"],
    rocm: true,
};

/// The library's name in messages and its search, for a backend.
fn library_for(kind: BackendKind) -> (&'static str, &'static LibrarySpec) {
    match kind {
        BackendKind::Rocm => ("RCCL", &RCCL_SPEC),
        _ => ("NCCL", &NCCL_SPEC),
    }
}

/// The library of backend `kind`, loaded once per process.
fn library(kind: BackendKind) -> Result<&'static sys::Nccl> {
    static NCCL: OnceLock<std::result::Result<sys::Nccl, String>> = OnceLock::new();
    static RCCL: OnceLock<std::result::Result<sys::Nccl, String>> = OnceLock::new();
    let (name, spec) = library_for(kind);
    let env = spec.override_env;
    let cell = if kind == BackendKind::Rocm { &RCCL } else { &NCCL };
    let loaded = cell.get_or_init(|| {
        let lib = sys::open(spec).map_err(|tried| {
            format!("could not load {name} (tried {tried}); install it, or set {env}=/path/to/the/library")
        })?;
        if lib.api.version < MIN_VERSION {
            return Err(format!(
                "{} ({}) is {name} {}, older than the {} gpuport needs; set {env} to a newer one",
                lib.path,
                lib.source,
                version_text(lib.api.version),
                version_text(MIN_VERSION)
            ));
        }
        Ok(lib)
    });
    loaded.as_ref().map_err(|reason| Error::Collective {
        engine: name.into(),
        rank: None,
        kind: CollectiveErrorKind::Library,
        reason: reason.clone(),
    })
}

/// `22805` as `"2.28.5"`.
fn version_text(code: i32) -> String {
    format!("{}.{}.{}", code / 10000, code / 100 % 100, code % 100)
}

/// One rank's NCCL or RCCL communicator on a device of driver `D`.
pub struct NcclEngine<D: Driver> {
    /// Shared with this thread's open group, which polls it at its end.
    comm: Arc<comm::Comm<D>>,
}

/// `"NCCL 2.28.5"`.
fn engine_name(kind: BackendKind, lib: &sys::Nccl) -> String {
    let name = if kind == BackendKind::Rocm { "RCCL" } else { "NCCL" };
    format!("{name} {}", version_text(lib.api.version))
}

/// An engine error for `call`'s `status`, with the library's own words.
fn status_error(
    kind: BackendKind,
    lib: &sys::Nccl,
    rank: Option<usize>,
    comm: usize,
    call: &str,
    status: c_int,
) -> Error {
    // SAFETY: both return pointers to static or communicator-owned C strings
    // (or null), which are read at once.
    let text = |p: *const std::ffi::c_char| {
        if p.is_null() {
            String::new()
        } else {
            // SAFETY: a NUL-terminated string from the library (see above).
            unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
        }
    };
    // SAFETY: `ncclGetErrorString` takes any status; `ncclGetLastError`
    // takes a live communicator or null.
    let (what, last) = unsafe {
        (text((lib.api.fns.ncclGetErrorString)(status)), text((lib.api.fns.ncclGetLastError)(comm as *mut c_void)))
    };
    let kind_of = if status == 6 { CollectiveErrorKind::RemoteFailure } else { CollectiveErrorKind::Engine };
    let mut reason = format!("{call} failed: {what} (status {status})");
    if !last.is_empty() {
        reason.push_str(&format!("; {last}"));
    }
    Error::Collective { engine: engine_name(kind, lib), rank, kind: kind_of, reason }
}

impl<D: Driver> NcclEngine<D> {
    fn lib(&self) -> &'static sys::Nccl {
        self.comm.lib
    }

    /// One all-reduce of one element while every rank is known to be
    /// there (just after initialisation), waited for until `start` plus
    /// the timeout: NCCL connects its peers on a communicator's first
    /// collective. Collectives of other algorithms and sends may still
    /// connect later; on a non-blocking communicator those are bounded
    /// too (`Comm::settle`).
    fn connect(&self, start: Instant, check: &str) -> Result<()> {
        let device = &self.comm.device;
        let buf = device.alloc(4)?;
        let stream = device.default_stream();
        let op = Op { kind: OpKind::AllReduce(ReduceOp::Sum), dtype: DType::Float32, count: 1 };
        let p = buf.device_ptr();
        // SAFETY: `buf` holds one float32 and lives until the stream has
        // passed it, or the communicator was aborted (by the wait below).
        unsafe { self.enqueue(&op, p, p, stream)? };
        let waited = wait::until_done(start, self.comm.timeout(), || {
            let state = self.comm.state()?;
            if state != sys::ncclSuccess {
                return Ok(state);
            }
            Ok(if device.is_idle(stream)? { sys::ncclSuccess } else { sys::ncclInProgress })
        })?;
        self.comm.finish("the first all-reduce (connecting the ranks)", waited, check)
    }

    /// NCCL's element type for a reduction over `dtype`.
    fn reduction_type(&self, dtype: DType) -> Option<c_int> {
        Some(match dtype {
            DType::Int8 => 0,
            DType::UInt8 => 1,
            DType::Int32 => 2,
            DType::UInt32 => 3,
            DType::Int64 => 4,
            DType::UInt64 => 5,
            DType::Float16 => 6,
            DType::Float32 => 7,
            DType::Float64 => 8,
            DType::BFloat16 => 9,
            DType::Float8E4M3Fn if D::KIND == BackendKind::Cuda && self.lib().api.version >= FP8_VERSION => 10,
            DType::Float8E5M2 if D::KIND == BackendKind::Cuda && self.lib().api.version >= FP8_VERSION => 11,
            _ => return None,
        })
    }
}

/// `ncclGroupStart` or `ncclGroupEnd` (`call`) of backend `D`'s library: its status.
fn group_call<D: Driver>(call: impl FnOnce(&sys::Api) -> c_int) -> Result<(&'static sys::Nccl, c_int)> {
    let lib = library(D::KIND)?;
    Ok((lib, call(&lib.api.fns)))
}

fn reduce_op(op: ReduceOp) -> c_int {
    match op {
        ReduceOp::Sum => 0,
        ReduceOp::Prod => 1,
        ReduceOp::Max => 2,
        ReduceOp::Min => 3,
        ReduceOp::Avg => 4,
    }
}

fn rank_int(what: &'static str, v: usize) -> Result<c_int> {
    c_int::try_from(v)
        .map_err(|_| Error::InvalidArgument { name: what, reason: format!("{v} does not fit NCCL's int") })
}

/// `id`'s bytes as an `ncclUniqueId`, or why they are not one.
fn unique_id<D: Driver>(lib: &sys::Nccl, id: &[u8]) -> Result<sys::ncclUniqueId> {
    if id.len() != sys::NCCL_UNIQUE_ID_BYTES {
        return Err(Error::InvalidArgument {
            name: "id",
            reason: format!(
                "{} bytes; an {} unique id has {} (from Communicator::new_id on a {} device)",
                id.len(),
                engine_name(D::KIND, lib),
                sys::NCCL_UNIQUE_ID_BYTES,
                D::KIND.name()
            ),
        });
    }
    let mut unique = sys::ncclUniqueId { internal: [0; sys::NCCL_UNIQUE_ID_BYTES] };
    for (c, b) in unique.internal.iter_mut().zip(id) {
        *c = std::ffi::c_char::from_ne_bytes([*b]);
    }
    Ok(unique)
}

// SAFETY: every call passes the communicator this engine made, on its
// device (bound first), with a stream of that device; `enqueue` passes the
// caller's ranges with the element counts `Op` says (data movement as bytes:
// `count * itemsize` of `ncclUint8`), so NCCL touches nothing else. Every
// status is checked, and a communicator that was aborted is never passed
// again (`Comm::refuse_if_released`).
unsafe impl<D: Driver> Engine<Gpu<D>> for NcclEngine<D> {
    fn name(&self) -> String {
        engine_name(D::KIND, self.lib())
    }

    fn mode(&self) -> CallMode {
        if self.comm.non_blocking {
            CallMode::Bounded
        } else {
            CallMode::Blocking
        }
    }

    fn prepare(device: &Arc<GpuDevice<D>>) -> Result<String> {
        let lib = library(D::KIND)?;
        device.driver().bind()?;
        Ok(engine_name(D::KIND, lib))
    }

    fn new_id(device: &Arc<GpuDevice<D>>) -> Result<Vec<u8>> {
        let lib = library(D::KIND)?;
        device.driver().bind()?;
        let mut id = sys::ncclUniqueId { internal: [0; sys::NCCL_UNIQUE_ID_BYTES] };
        // SAFETY: writes the 128-byte id.
        let status = unsafe { (lib.api.fns.ncclGetUniqueId)(&mut id) };
        if status != sys::ncclSuccess {
            return Err(status_error(D::KIND, lib, Some(0), 0, "ncclGetUniqueId", status));
        }
        Ok(id.internal.iter().map(|c| c.to_ne_bytes()[0]).collect())
    }

    fn init_with_id(
        device: &Arc<GpuDevice<D>>,
        rank: usize,
        size: usize,
        id: &[u8],
        timeout: Duration,
        mode: CallMode,
    ) -> Result<Self> {
        Self::init_watched(device, rank, size, id, timeout, mode, &|| Ok(()))
    }

    fn init_watched(
        device: &Arc<GpuDevice<D>>,
        rank: usize,
        size: usize,
        id: &[u8],
        timeout: Duration,
        mode: CallMode,
        peer_failed: &dyn Fn() -> Result<()>,
    ) -> Result<Self> {
        Self::init_rank_watched(device, rank, size, id, timeout, mode, peer_failed)
    }

    fn init_all(devices: &[Arc<GpuDevice<D>>], timeout: Duration, mode: CallMode) -> Result<Vec<Self>> {
        let lib = library(D::KIND)?;
        let size = rank_int("devices", devices.len())?;
        if !made_non_blocking(lib, mode) {
            return init_all_blocking(lib, devices, timeout);
        }
        // ncclCommInitAll has no config: the same, as NCCL does it (one id,
        // one rank per device inside a group), with non-blocking
        // communicators, so that they can share groups with any other.
        let id = unique_id::<D>(lib, &Self::new_id(&devices[0])?)?;
        let ranks = (0..devices.len()).map(|r| rank_int("rank", r)).collect::<Result<Vec<_>>>()?;
        refuse_in_group("init_all")?;
        let start = Instant::now();
        // SAFETY: no arguments; per-thread state of the library.
        let opened = unsafe { (lib.api.fns.ncclGroupStart)() };
        if opened != sys::ncclSuccess {
            return Err(status_error(D::KIND, lib, None, 0, "ncclGroupStart", opened));
        }
        let mut first_error = None;
        let mut comms = Vec::with_capacity(devices.len());
        // No early return until ncclGroupEnd.
        for (rank, device) in devices.iter().enumerate() {
            if let Err(e) = device.driver().bind() {
                first_error.get_or_insert(e);
                continue;
            }
            let (call, status, handle) = init_rank_call(lib, size, id, ranks[rank], true);
            if handle == 0 || (status != sys::ncclSuccess && status != sys::ncclInProgress) {
                first_error.get_or_insert(status_error(D::KIND, lib, Some(rank), handle, call, status));
            }
            if handle != 0 {
                comms.push(Arc::new(comm::Comm::new(handle, device, lib, rank, timeout, true)));
            }
        }
        // SAFETY: no arguments; ends the group opened above on this thread.
        let ended = unsafe { (lib.api.fns.ncclGroupEnd)() };
        let members: Vec<Arc<dyn comm::Member>> = comms.iter().map(|c| c.clone() as Arc<dyn comm::Member>).collect();
        let ready = match first_error {
            Some(e) => Err(e),
            None if ended == sys::ncclInProgress || ended == sys::ncclSuccess => {
                comm::settle_group(&members, "ncclCommInitRankConfig", start, &wait::init_check(devices.len()))
            }
            None => Err(status_error(D::KIND, lib, None, 0, "ncclGroupEnd", ended)),
        };
        if let Err(e) = ready {
            for c in &comms {
                let _ = c.abort();
            }
            return Err(e);
        }
        Ok(comms.into_iter().map(|comm| NcclEngine { comm }).collect())
    }

    fn supports(&self, op: &Op) -> Result<()> {
        if op.kind.reduction().is_some() && self.reduction_type(op.dtype).is_none() {
            return Err(Error::InvalidArgument {
                name: "dtype",
                reason: format!(
                    "{op}: {} reduces int8, uint8, int32, uint32, int64, uint64, float16, bfloat16, float32 and \
                     float64{}; broadcast, all_gather, send and recv take any type",
                    self.name(),
                    if D::KIND == BackendKind::Cuda { " (and float8_e4m3fn, float8_e5m2 from NCCL 2.24)" } else { "" }
                ),
            });
        }
        Ok(())
    }

    unsafe fn enqueue(&self, op: &Op, send: u64, recv: u64, stream: &Stream<Gpu<D>>) -> Result<()> {
        let device = &self.comm.device;
        if stream.driver().ordinal() != device.info().ordinal {
            return Err(Error::DeviceMismatch {
                what: "stream",
                expected: device.info().spec(),
                found: format!("{}:{}", D::KIND.name(), stream.driver().ordinal()),
            });
        }
        self.comm.refuse_if_released(op)?;
        device.driver().bind()?;
        let api = &self.lib().api.fns;
        let (comm, s) = (self.comm.raw(), stream.raw().address() as *mut c_void);
        let (sp, rp) = (address_to_usize(send) as *const c_void, address_to_usize(recv) as *mut c_void);
        let bytes = op.count * op.dtype.itemsize();
        let typed = self.reduction_type(op.dtype).unwrap_or(1);
        let start = Instant::now();
        // SAFETY: every call below gets the live communicator on the
        // current device, `s`, a stream of that device, and ranges that
        // hold what `Op` says (the caller's promise).
        let (call, status) = unsafe {
            match op.kind {
                OpKind::AllReduce(how) => {
                    ("ncclAllReduce", (api.ncclAllReduce)(sp, rp, op.count, typed, reduce_op(how), comm, s))
                }
                OpKind::Reduce { op: how, root } => (
                    "ncclReduce",
                    (api.ncclReduce)(sp, rp, op.count, typed, reduce_op(how), rank_int("root", root)?, comm, s),
                ),
                OpKind::ReduceScatter(how) => {
                    ("ncclReduceScatter", (api.ncclReduceScatter)(sp, rp, op.count, typed, reduce_op(how), comm, s))
                }
                OpKind::Broadcast { root } => {
                    ("ncclBroadcast", (api.ncclBroadcast)(sp, rp, bytes, 1, rank_int("root", root)?, comm, s))
                }
                OpKind::AllGather => ("ncclAllGather", (api.ncclAllGather)(sp, rp, bytes, 1, comm, s)),
                OpKind::Send { peer } => ("ncclSend", (api.ncclSend)(sp, bytes, 1, rank_int("peer", peer)?, comm, s)),
                OpKind::Recv { peer } => ("ncclRecv", (api.ncclRecv)(rp, bytes, 1, rank_int("peer", peer)?, comm, s)),
            }
        };
        // Inside a group the work starts at ncclGroupEnd, which polls this
        // communicator with the group's others.
        if comm::join_group(&self.comm) && status == sys::ncclInProgress {
            return Ok(());
        }
        self.comm.settle(call, status, start, wait::PEER_CHECK)
    }

    fn group_start() -> Result<()> {
        // SAFETY: no arguments; per-thread state of the library.
        let (lib, status) = group_call::<D>(|api| unsafe { (api.ncclGroupStart)() })?;
        if status != sys::ncclSuccess {
            return Err(status_error(D::KIND, lib, None, 0, "ncclGroupStart", status));
        }
        comm::group_opened();
        Ok(())
    }

    fn group_end() -> Result<()> {
        let start = Instant::now();
        // SAFETY: as `group_start`.
        let ended = group_call::<D>(|api| unsafe { (api.ncclGroupEnd)() });
        let members = comm::group_closed();
        let (lib, status) = ended?;
        match status {
            // Non-blocking communicators: the group goes on in the
            // library's thread; every member must leave ncclInProgress.
            sys::ncclInProgress => comm::settle_group(&members, "ncclGroupEnd", start, wait::PEER_CHECK),
            sys::ncclSuccess => Ok(()),
            _ => Err(status_error(D::KIND, lib, None, 0, "ncclGroupEnd", status)),
        }
    }

    fn set_timeout(&self, timeout: Duration) -> Result<()> {
        self.comm.set_timeout(timeout);
        Ok(())
    }

    fn abort(&self) -> Result<()> {
        self.comm.abort()
    }

    fn is_aborted(&self) -> bool {
        self.comm.released.load(std::sync::atomic::Ordering::Acquire)
    }

    fn async_error(&self) -> Result<()> {
        if self.is_aborted() {
            return Ok(());
        }
        let state = self.comm.state()?;
        if state == sys::ncclSuccess || state == sys::ncclInProgress {
            Ok(())
        } else {
            self.comm.check("a collective (asynchronous error)", state)
        }
    }

    fn split(&self, color: Option<u32>, key: i32) -> Option<Result<Option<Regrouped<Self>>>> {
        let api = self.lib().api.split.as_ref()?;
        Some(self.split_with(api, color, key))
    }

    /// `None` (the store's re-init) for a communicator that was aborted:
    /// `ncclCommAbort` freed it, and `ncclCommShrink` needs it.
    fn shrink(&self, size: usize, exclude: &[usize], after_error: bool) -> Option<Result<Regrouped<Self>>> {
        let api = self.lib().api.shrink.as_ref()?;
        if self.is_aborted() {
            return None;
        }
        let after_error = after_error || self.async_error().is_err();
        if exclude.is_empty() && !after_error {
            // NCCL 2.28.3 answered a shrink that excludes no rank with
            // "invalid argument" (tests/collective.rs, on two H100s): a
            // split of every rank into one color makes the same communicator.
            let split = self.lib().api.split.as_ref()?;
            let key = match rank_int("rank", self.comm.rank) {
                Ok(k) => k,
                Err(e) => return Some(Err(e)),
            };
            return Some(self.split_with(split, Some(0), key).and_then(|c| {
                c.ok_or_else(|| Error::Collective {
                    engine: engine_name(D::KIND, self.comm.lib),
                    rank: Some(self.comm.rank),
                    kind: crate::error::CollectiveErrorKind::Engine,
                    reason: "ncclCommSplit gave no communicator for a color every rank chose".into(),
                })
            }));
        }
        Some(self.shrink_with(api, size, exclude, after_error))
    }

    fn register(&self, address: u64, bytes: usize) -> Result<usize> {
        self.register_with(address, bytes)
    }

    fn deregister(&self, handle: usize) -> Result<()> {
        self.deregister_with(handle)
    }
}

/// Refuses `what` (an initialisation) inside a group: NCCL would start it
/// at the group's end, after this call had waited for it in vain.
fn refuse_in_group(what: &str) -> Result<()> {
    if !comm::in_group() {
        return Ok(());
    }
    Err(Error::InvalidArgument {
        name: "group",
        reason: format!("{what} inside Communicator::group: make communicators outside groups"),
    })
}

/// `ncclCommInitAll`: blocking communicators (one process, so no rank can
/// be missing).
fn init_all_blocking<D: Driver>(
    lib: &'static sys::Nccl,
    devices: &[Arc<GpuDevice<D>>],
    timeout: Duration,
) -> Result<Vec<NcclEngine<D>>> {
    let ordinals = devices.iter().map(|d| rank_int("device", d.info().ordinal)).collect::<Result<Vec<_>>>()?;
    let mut comms: Vec<sys::ncclComm_t> = vec![std::ptr::null_mut(); devices.len()];
    devices[0].driver().bind()?;
    // SAFETY: `comms` has one slot per ordinal.
    let status = unsafe {
        (lib.api.fns.ncclCommInitAll)(comms.as_mut_ptr(), rank_int("devices", devices.len())?, ordinals.as_ptr())
    };
    if status != sys::ncclSuccess {
        return Err(status_error(D::KIND, lib, None, 0, "ncclCommInitAll", status));
    }
    Ok(comms
        .into_iter()
        .zip(devices)
        .enumerate()
        .map(|(rank, (c, d))| NcclEngine { comm: Arc::new(comm::Comm::new(c as usize, d, lib, rank, timeout, false)) })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_codes_read_as_nccl_writes_them() {
        assert_eq!(version_text(22805), "2.28.5");
        assert_eq!(version_text(MIN_VERSION), "2.12.0");
    }

    #[test]
    fn the_library_searches_name_their_variables_and_wheels() {
        let (name, spec) = library_for(BackendKind::Rocm);
        assert_eq!((name, spec.override_env, spec.names[0]), ("RCCL", "GPUPORT_RCCL_LIBRARY", "librccl.so.1"));
        assert!(spec.rocm && spec.wheel_dirs.contains(&"torch/lib"));
        let (name, spec) = library_for(BackendKind::Cuda);
        assert_eq!((name, spec.override_env, spec.names[0]), ("NCCL", "GPUPORT_NCCL_LIBRARY", "libnccl.so.2"));
        assert!(!spec.rocm && spec.wheel_dirs.contains(&"nvidia/nccl/lib"));
    }
}

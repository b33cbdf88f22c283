//! IPC of stream-ordered pool memory: the pool that
//! [`NativePoolResource::shareable`](super::NativePoolResource::shareable)
//! creates, how another process takes its file descriptor, and the pools
//! that process imports.
//!
//! # How a block travels
//! The driver's documented way (CUDA's `streamOrderedAllocationIPC` sample;
//! HIP's twins of the same calls):
//! 1. The exporter creates its own pool with a shareable handle type
//!    (`cuMemPoolCreate` with `CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR`; the
//!    device's default pool has none, which is why `cuIpcGetMemHandle`
//!    refuses `cuMemAllocAsync` memory).
//! 2. It exports the pool once as a POSIX file descriptor
//!    (`cuMemPoolExportToShareableHandle`, cached per pool) and each block as
//!    64 bytes (`cuMemPoolExportPointer`). The [`IpcHandle`] carries the 64
//!    bytes, the exporter's pid, the descriptor's number there and a pool id.
//! 3. The importer takes the descriptor out of the exporter with
//!    `pidfd_open(pid)` + `pidfd_getfd(pidfd, fd)` (Linux 5.6+), as PyTorch's
//!    expandable segments do. Opening `/proc/<pid>/fd/<n>` does not work for
//!    CUDA's descriptors, and the handle is text (no socket to pass a
//!    descriptor over with `SCM_RIGHTS`).
//! 4. It imports the pool (`cuMemPoolImportFromShareableHandle`, once per
//!    exporter and pool: see below), closes its copy of the descriptor, and
//!    maps the block (`cuMemPoolImportPointer`).
//!
//! `pidfd_getfd` needs ptrace access to the exporter: the same user, and
//! under Yama's `kernel.yama.ptrace_scope = 1` (Ubuntu's default) an importer
//! that is an ancestor of the exporter, or an exporter that allowed it with
//! [`allow_pool_importers`]. A refusal is an [`Error::Unsupported`] saying so.
//!
//! # Lifetimes
//! - The exporter's pool lives as long as its resource; dropping the resource
//!   synchronizes the device and destroys the pool. A handle can be opened
//!   only while its exporter lives and still has the pool.
//! - The importer keeps one imported pool per (backend, device, exporter pid,
//!   pool id), counting the blocks open from it; closing the last one frees
//!   it and destroys the imported pool (opening a block of it again imports
//!   the pool again).
//! - As the drivers require, a block must be closed in every importer before
//!   the exporter frees it, and must not be used before its allocation (and
//!   the exporter's writes) completed in the exporter's stream order.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use crate::backend::{Backend, Buffer, Device, Stream};
use crate::error::{BackendKind, Error, Result};

use super::block::Block;
use super::ext::{ExportedPoolFd, MemoryDevice, RawPool};
use super::ipc_handle::{IpcHandle, IpcKind};

/// What to do instead when a pool descriptor cannot be taken.
const FALLBACK: &str = "or allocate through CachingPool or PlainResource, whose IPC handles \
    (cuIpcGetMemHandle/hipIpcGetMemHandle) need no file descriptor";

// ---- the exporter's side ------------------------------------------------------------

/// Process-unique pool numbers (a pool's driver handle may be reused once it is destroyed).
static NEXT_POOL_ID: AtomicU64 = AtomicU64::new(1);

/// A stream-ordered pool of the memory layer's own whose blocks other
/// processes can import; destroyed on drop.
pub(crate) struct ShareablePool<B: Backend> {
    device: Arc<B::Device>,
    raw: RawPool,
    id: u64,
    /// The pool's descriptor, once exported (one per pool, for every handle).
    exported: Mutex<Option<ExportedPoolFd>>,
}

impl<B: Backend> fmt::Debug for ShareablePool<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "shareable pool #{}", self.id)
    }
}

impl<B: Backend> ShareablePool<B> {
    /// Creates the pool, with `release_threshold` set where given.
    pub(crate) fn new(device: Arc<B::Device>, release_threshold: Option<u64>) -> Result<Self> {
        let raw = device.create_shareable_pool()?;
        let id = NEXT_POOL_ID.fetch_add(1, Ordering::Relaxed);
        // Made before the threshold is set, so a failure below destroys the pool.
        let pool: Self = ShareablePool { device, raw, id, exported: Mutex::new(None) };
        if let Some(bytes) = release_threshold {
            // SAFETY: `raw` is this device's, alive until `pool` drops.
            unsafe { pool.device.pool_set_release_threshold(pool.raw, bytes) }?;
        }
        Ok(pool)
    }

    /// Allocates `bytes` in the order of `stream`.
    pub(crate) fn alloc(&self, bytes: usize, stream: &Stream<B>) -> Result<Buffer<B>> {
        // SAFETY: `raw` is this device's, alive while `self` is.
        unsafe { self.device.pool_alloc(self.raw, bytes, stream) }
    }

    /// Returns unused memory to the driver, keeping `keep` bytes.
    pub(crate) fn trim(&self, keep: usize) -> Result<()> {
        // SAFETY: as in `alloc`.
        unsafe { self.device.pool_trim(self.raw, keep) }
    }

    /// The handle of `block` (allocated by [`alloc`](Self::alloc)).
    pub(crate) fn export(&self, block: &Block<B>) -> Result<IpcHandle> {
        let fd = {
            let mut exported = self.exported.lock().unwrap_or_else(|p| p.into_inner());
            match *exported {
                Some(e) => e.fd,
                None => {
                    // SAFETY: as in `alloc`.
                    let e = unsafe { self.device.pool_export(self.raw) }?;
                    if e.caller_closes {
                        // Ours: not for the processes this one starts (importers take it by pid).
                        close_on_exec(e.fd);
                    }
                    *exported = Some(e);
                    e.fd
                }
            }
        };
        let data = self.device.pool_export_pointer(block.ptr())?;
        let info = self.device.info();
        Ok(IpcHandle {
            backend: info.backend,
            ordinal: info.ordinal,
            kind: IpcKind::PoolBlock { pid: std::process::id(), fd, pool: self.id },
            handle: data,
            offset: 0,
            len: block.len(),
        })
    }
}

impl<B: Backend> Drop for ShareablePool<B> {
    fn drop(&mut self) {
        // Frees still queued on other streams complete first (the driver
        // would also defer the release until they do).
        let _ = self.device.synchronize_device();
        // SAFETY: created by `create_shareable_pool`, destroyed once, here;
        // the resource that owned it (and so every allocation) is gone.
        let _ = unsafe { self.device.pool_destroy(self.raw) };
        if let Some(e) = self.exported.get_mut().unwrap_or_else(|p| p.into_inner()).take() {
            if e.caller_closes {
                drop(Descriptor(e.fd));
            }
        }
    }
}

// ---- taking the exporter's descriptor ---------------------------------------------

/// A descriptor this process owns; closed on drop.
struct Descriptor(i32);

impl Descriptor {
    /// The descriptor a successful (non-negative) `syscall` returned.
    #[cfg(target_os = "linux")]
    #[allow(clippy::cast_possible_truncation)] // a descriptor is a C int, widened to c_long by syscall
    fn from_syscall(fd: libc::c_long) -> Self {
        Descriptor(fd as i32)
    }
}

impl Drop for Descriptor {
    fn drop(&mut self) {
        // SAFETY: the descriptor is ours (from pidfd_open/pidfd_getfd or a
        // caller-owned export) and closed once, here.
        unsafe { libc::close(self.0) };
    }
}

/// Sets `FD_CLOEXEC` on a descriptor of ours.
fn close_on_exec(fd: i32) {
    #[cfg(unix)]
    // SAFETY: sets a flag on an open descriptor; touches no memory.
    unsafe {
        libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
    }
    #[cfg(not(unix))]
    let _ = fd;
}

/// Who may take this process's pool descriptors with `pidfd_getfd`, under
/// Yama's ptrace restrictions (`prctl(PR_SET_PTRACER)`); see [`allow_pool_importers`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolImporters {
    /// Any process of the same user (`PR_SET_PTRACER_ANY`).
    Any,
    /// One process, by pid (replaces an earlier choice).
    Process(u32),
    /// Yama's default again: only ancestors of this process.
    AncestorsOnly,
}

/// Lets other processes take this process's pool descriptors, where Yama's
/// `kernel.yama.ptrace_scope` is 1 and would allow only this process's
/// ancestors. This is `prctl(PR_SET_PTRACER, ...)`: it allows *ptrace* of
/// this process by those processes (the access `pidfd_getfd` checks), for
/// the whole process, until changed. Call it in the exporter, before
/// importers open its handles. Without Yama (or on other systems) it does
/// nothing; it cannot lift `ptrace_scope` 2 or 3, a different user, or a
/// container's seccomp filter.
pub fn allow_pool_importers(who: PoolImporters) -> Result<()> {
    #[cfg(target_os = "linux")]
    {
        if !std::path::Path::new("/proc/sys/kernel/yama").exists() {
            return Ok(());
        }
        /// `PR_SET_PTRACER_ANY` (`((unsigned long)-1)`; the libc crate lacks it for glibc).
        const PR_SET_PTRACER_ANY: libc::c_ulong = libc::c_ulong::MAX;
        let arg: libc::c_ulong = match who {
            PoolImporters::Any => PR_SET_PTRACER_ANY,
            PoolImporters::Process(pid) => libc::c_ulong::from(pid),
            PoolImporters::AncestorsOnly => 0,
        };
        // SAFETY: PR_SET_PTRACER takes one integer argument and touches no memory of ours.
        if unsafe { libc::prctl(libc::PR_SET_PTRACER, arg, 0 as libc::c_ulong, 0 as libc::c_ulong, 0 as libc::c_ulong) }
            != 0
        {
            return Err(Error::InvalidArgument {
                name: "who",
                reason: format!("prctl(PR_SET_PTRACER, {who:?}) failed: {}", std::io::Error::last_os_error()),
            });
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = who;
    Ok(())
}

/// The error for a descriptor that could not be taken.
fn cannot_take(backend: BackendKind, why: String) -> Error {
    Error::Unsupported { op: "importing another process's stream-ordered pool", backend, hint: Some(why) }
}

/// Duplicates descriptor `fd` of process `pid` into this process.
#[cfg(target_os = "linux")]
fn take_descriptor(backend: BackendKind, pid: u32, fd: i32) -> Result<Descriptor> {
    use std::io::Error as OsError;
    let errno = |e: &OsError| e.raw_os_error().unwrap_or(0);
    let pid_t = libc::pid_t::try_from(pid).map_err(|_| Error::InvalidArgument {
        name: "IPC handle",
        reason: format!("pid {pid} is past the largest process id ({})", libc::pid_t::MAX),
    })?;
    // SAFETY: pidfd_open takes a pid and flags (0) and returns a new descriptor or -1.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid_t, 0 as libc::c_uint) };
    if pidfd < 0 {
        let e = OsError::last_os_error();
        return Err(cannot_take(
            backend,
            match errno(&e) {
                libc::ESRCH => format!(
                    "process {pid}, which exported the pool, has exited (pidfd_open: {e}); a pool handle \
                     can be opened only while its exporter lives"
                ),
                libc::ENOSYS => format!("this kernel has no pidfd_open (Linux 5.3+; pidfd_getfd 5.6+); {FALLBACK}"),
                _ => format!("pidfd_open({pid}) failed: {e}; {FALLBACK}"),
            },
        ));
    }
    let pidfd = Descriptor::from_syscall(pidfd);
    // SAFETY: pidfd_getfd takes a pidfd, a descriptor number of that process
    // and flags (0), and returns a new descriptor of ours or -1.
    let local = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.0, fd, 0 as libc::c_uint) };
    if local < 0 {
        let e = OsError::last_os_error();
        return Err(cannot_take(
            backend,
            match errno(&e) {
                libc::EPERM => format!(
                    "pidfd_getfd of descriptor {fd} of process {pid} was refused ({e}): taking another \
                     process's descriptor needs ptrace access to it: the same user, and where \
                     /proc/sys/kernel/yama/ptrace_scope is 1, this process being an ancestor of the exporter \
                     or the exporter calling gpuport::memory::allow_pool_importers first (scope 2 needs \
                     CAP_SYS_PTRACE, 3 forbids it); in a container, seccomp may also need \
                     --cap-add=SYS_PTRACE; {FALLBACK}"
                ),
                libc::EBADF => {
                    format!("process {pid} has no descriptor {fd} ({e}): the exporting resource (and its pool) is gone")
                }
                libc::ENOSYS => format!("this kernel has no pidfd_getfd (Linux 5.6+); {FALLBACK}"),
                _ => format!("pidfd_getfd of descriptor {fd} of process {pid} failed: {e}; {FALLBACK}"),
            },
        ));
    }
    Ok(Descriptor::from_syscall(local))
}

#[cfg(not(target_os = "linux"))]
fn take_descriptor(backend: BackendKind, _pid: u32, _fd: i32) -> Result<Descriptor> {
    Err(cannot_take(backend, format!("taking another process's descriptor needs Linux's pidfd_getfd; {FALLBACK}")))
}

// ---- the importer's side ----------------------------------------------------------------

/// An imported pool: (backend, device ordinal, exporter pid, exporter's pool id).
pub(crate) type PoolKey = (BackendKind, usize, u32, u64);

struct ImportedPool {
    raw: RawPool,
    /// Blocks open from it.
    open: usize,
}

fn imported_pools() -> &'static Mutex<HashMap<PoolKey, ImportedPool>> {
    static POOLS: OnceLock<Mutex<HashMap<PoolKey, ImportedPool>>> = OnceLock::new();
    POOLS.get_or_init(Default::default)
}

/// Maps the block of `handle` (an [`IpcKind::PoolBlock`]) on `device`,
/// importing its pool unless a block of it is open already. Returns the
/// block's address and the pool's key for [`close_pool_block`].
pub(crate) fn open_pool_block<D: MemoryDevice>(device: &D, handle: &IpcHandle) -> Result<(u64, PoolKey)> {
    let IpcKind::PoolBlock { pid, fd, pool } = handle.kind else {
        return Err(Error::InvalidArgument { name: "IPC handle", reason: "not a pool block's handle".into() });
    };
    let backend = <D::B as Backend>::KIND;
    let key = (backend, device.info().ordinal, pid, pool);
    // Held across the import, so two threads opening blocks of one pool import it once.
    let mut pools = imported_pools().lock().unwrap_or_else(|p| p.into_inner());
    let raw = match pools.get(&key) {
        Some(p) => p.raw,
        None => {
            let local = take_descriptor(backend, pid, fd)?;
            // SAFETY: `local` is open, a duplicate of the exporter's pool
            // descriptor; ours to close (dropped below), which the drivers allow.
            let raw = unsafe { device.pool_import(local.0) }?;
            pools.insert(key, ImportedPool { raw, open: 0 });
            raw
        }
    };
    // SAFETY: `raw` is an imported pool of this device, alive while it is in the map.
    match unsafe { device.pool_import_pointer(raw, &handle.handle) } {
        Ok(ptr) => {
            if let Some(p) = pools.get_mut(&key) {
                p.open += 1;
            }
            Ok((ptr, key))
        }
        Err(e) => {
            if pools.get(&key).is_some_and(|p| p.open == 0) {
                pools.remove(&key);
                // SAFETY: imported above, no block open from it, out of the map: destroyed once.
                let _ = unsafe { device.pool_destroy(raw) };
            }
            Err(e)
        }
    }
}

/// Frees a block from [`open_pool_block`], and destroys its imported pool
/// when it was the pool's last open block.
///
/// # Safety
/// `ptr` and `key` came from one `open_pool_block` on `device`, are closed
/// once, and no queued work uses the block any more.
pub(crate) unsafe fn close_pool_block<D: MemoryDevice>(device: &D, key: PoolKey, ptr: u64) -> Result<()> {
    let mut pools = imported_pools().lock().unwrap_or_else(|p| p.into_inner());
    // SAFETY: the caller's contract.
    let freed = unsafe { device.pool_free_imported(ptr) };
    if let Some(p) = pools.get_mut(&key) {
        p.open = p.open.saturating_sub(1);
        if p.open == 0 {
            let raw = p.raw;
            pools.remove(&key);
            // SAFETY: no block of it is open and it left the map: destroyed once.
            let destroyed = unsafe { device.pool_destroy(raw) };
            return freed.and(destroyed);
        }
    }
    freed
}

/// Number of pools this process has imported and not yet destroyed (for tests and reports).
pub fn imported_pool_count() -> usize {
    imported_pools().lock().unwrap_or_else(|p| p.into_inner()).len()
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    /// Set in the child of `a_child_takes_a_descriptor_of_its_parent`: `pid:fd` to take.
    const CHILD_ENV: &str = "GPUPORT_TAKE_DESCRIPTOR_CHILD";

    /// (device, inode) of an open descriptor.
    fn identity(fd: i32) -> (u64, u64) {
        // SAFETY: `stat` is plain old data, written by fstat below.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: `fd` is open; fstat writes one struct.
        assert_eq!(unsafe { libc::fstat(fd, &mut st) }, 0, "fstat({fd})");
        (st.st_dev, st.st_ino)
    }

    fn temp_file(name: &str) -> std::fs::File {
        let path = std::env::temp_dir().join(format!("gpuport-{name}-{}", std::process::id()));
        let file = std::fs::File::create(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        file
    }

    #[test]
    fn a_descriptor_of_this_process_is_taken_as_a_duplicate() {
        let file = temp_file("take-self");
        let taken = take_descriptor(BackendKind::Cuda, std::process::id(), file.as_raw_fd()).unwrap();
        assert_ne!(taken.0, file.as_raw_fd());
        assert_eq!(identity(taken.0), identity(file.as_raw_fd()), "the same open file");
    }

    #[test]
    fn a_missing_descriptor_or_process_is_a_typed_error_saying_so() {
        match take_descriptor(BackendKind::Rocm, std::process::id(), 1 << 20) {
            Err(Error::Unsupported { backend: BackendKind::Rocm, hint: Some(h), .. }) => {
                assert!(h.contains("has no descriptor"), "{h}")
            }
            other => panic!("{:?}", other.map(|d| d.0)),
        }
        // Above the largest pid_max (2^22): no such process.
        match take_descriptor(BackendKind::Cuda, 1 << 30, 3) {
            Err(Error::Unsupported { hint: Some(h), .. }) => assert!(h.contains("has exited"), "{h}"),
            other => panic!("{:?}", other.map(|d| d.0)),
        }
        // Past pid_t: refused as such, not wrapped to a negative pid.
        match take_descriptor(BackendKind::Cuda, u32::MAX, 3) {
            Err(Error::InvalidArgument { name: "IPC handle", reason }) => {
                assert!(reason.contains("past the largest"), "{reason}")
            }
            other => panic!("{:?}", other.map(|d| d.0)),
        }
    }

    /// The real direction: an importer started by the exporter takes the
    /// exporter's descriptor, which Yama's ptrace_scope 1 allows only after
    /// `allow_pool_importers`.
    #[test]
    fn a_child_takes_a_descriptor_of_its_parent() {
        if let Ok(spec) = std::env::var(CHILD_ENV) {
            let (pid, fd) = spec.split_once(':').unwrap();
            match take_descriptor(BackendKind::Cuda, pid.parse().unwrap(), fd.parse().unwrap()) {
                Ok(local) => println!("taken {:?}", identity(local.0)),
                Err(e) => println!("refused {e}"),
            }
            return;
        }
        allow_pool_importers(PoolImporters::Any).unwrap();
        let file = temp_file("take-parent");
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["memory::ipc::tests::a_child_takes_a_descriptor_of_its_parent", "--exact", "--nocapture"])
            .env(CHILD_ENV, format!("{}:{}", std::process::id(), file.as_raw_fd()))
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
        if let Some(line) = stdout.lines().find(|l| l.starts_with("refused")) {
            // Seccomp or ptrace_scope 2/3, which the process cannot lift.
            assert!(line.contains("pidfd_"), "{line}");
            let _ = std::io::Write::write_all(&mut std::io::stderr(), format!("skipped: {line}\n").as_bytes());
            return;
        }
        let expected = format!("taken {:?}", identity(file.as_raw_fd()));
        assert!(stdout.contains(&expected), "expected {expected:?} in:\n{stdout}");
        allow_pool_importers(PoolImporters::AncestorsOnly).unwrap();
    }
}

//! [`IpcMemory`]: device memory of another process, opened from an
//! [`IpcHandle`] by [`open_ipc`] and closed on drop, whichever kind of
//! handle it is (a driver IPC memory handle, or a block of a shareable pool
//! through [`crate::memory::ipc`]).

use crate::backend::Backend;
use std::fmt;
use std::sync::Arc;

use crate::backend::{Device, DeviceMemory, DeviceMemoryMut, MemoryKind};
use crate::error::{Error, Result};

use super::ext::MemoryDevice;
use super::ipc::{close_pool_block, open_pool_block, PoolKey};
use super::ipc_handle::{IpcHandle, IpcKind};

/// Device memory of another process, opened from an [`IpcHandle`]; closed on drop.
pub struct IpcMemory<B: Backend> {
    device: Arc<B::Device>,
    ptr: u64,
    len: usize,
    opened: Opened,
}

/// What [`open_ipc`] did, to undo on drop.
enum Opened {
    /// `ipc_import` mapped the allocation at `base`.
    Memory { base: u64 },
    /// `open_pool_block` mapped a block of an imported pool at `ptr`.
    PoolBlock { key: PoolKey, ptr: u64 },
}

impl<B: Backend> fmt::Debug for IpcMemory<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "IpcMemory({:#x}, {} bytes)", self.ptr, self.len)
    }
}

/// Opens an [`IpcHandle`] exported by another process.
///
/// The returned memory must not be used by work that is still queued when
/// it is dropped (closing unmaps it); synchronize first. A pool block must
/// be closed here before the exporter frees it, and opening one takes the
/// pool's descriptor out of the exporter ([`crate::memory::ipc`] says what
/// that needs).
///
/// Checked here: the device, that the range `offset..offset + len` is not
/// empty, does not overflow and fits in the device's memory; the driver
/// checks that the 64 handle bytes name a live allocation (or pool block).
///
/// # Safety
/// Nothing checks `offset` and `len` against the allocation the handle
/// opens, and the returned [`IpcMemory`] is [`DeviceMemory`] of exactly that
/// range, which safe copies and memsets then write. So `handle` must be what
/// [`Allocator::ipc_handle`](super::Allocator::ipc_handle) returned in the
/// exporter (directly or through [`IpcHandle::to_text`]/[`IpcHandle::from_text`]),
/// unmodified, for an allocation the exporter keeps alive until the
/// returned memory is dropped here. Text from an untrusted source must not
/// reach this call.
pub unsafe fn open_ipc<B: Backend>(device: &Arc<B::Device>, handle: &IpcHandle) -> Result<IpcMemory<B>> {
    let info = device.info();
    if handle.backend != info.backend || handle.ordinal != info.ordinal {
        return Err(Error::DeviceMismatch {
            what: "IPC handle",
            expected: info.spec(),
            found: format!("{}:{}", handle.backend, handle.ordinal),
        });
    }
    let bad = |reason: String| Error::InvalidArgument { name: "IPC handle", reason };
    let end = handle.offset.checked_add(handle.len as u64);
    match end {
        _ if handle.len == 0 => return Err(bad("the length is 0".into())),
        Some(end) if end <= info.total_memory as u64 => {}
        _ => {
            return Err(bad(format!(
                "offset {} + length {} reaches past the {} bytes of {}'s memory",
                handle.offset,
                handle.len,
                info.total_memory,
                info.spec()
            )))
        }
    }
    let (at, opened) = match handle.kind {
        IpcKind::Memory => {
            let base = device.ipc_import(&handle.handle)?;
            (base, Opened::Memory { base })
        }
        IpcKind::PoolBlock { .. } => {
            let (ptr, key) = open_pool_block(device.as_ref(), handle)?;
            (ptr, Opened::PoolBlock { key, ptr })
        }
    };
    // Closed on drop whatever happens next.
    let mut memory = IpcMemory { device: device.clone(), ptr: at, len: 0, opened };
    match at.checked_add(handle.offset).filter(|p| p.checked_add(handle.len as u64).is_some()) {
        Some(ptr) => {
            (memory.ptr, memory.len) = (ptr, handle.len);
            Ok(memory)
        }
        None => Err(bad(format!("the block at {at:#x} + {} + {} bytes wraps around", handle.offset, handle.len))),
    }
}

// SAFETY: `ptr..ptr+len` lies in the mapping `opened` keeps open until drop
// (`open_ipc`'s contract and its range checks).
unsafe impl<B: Backend> DeviceMemory for IpcMemory<B> {
    type B = B;
    fn len(&self) -> usize {
        self.len
    }
    fn device_ptr(&self) -> u64 {
        self.ptr
    }
    fn ordinal(&self) -> usize {
        self.device.info().ordinal
    }
    fn kind(&self) -> MemoryKind {
        MemoryKind::Device
    }
}

// SAFETY: an `IpcMemory` is not `Clone`. Its memory is GPU device memory (the
// host backend has no IPC), which safe code reaches only through driver
// copies, never through Rust references, so another opening of the same
// handle cannot alias a reference.
unsafe impl<B: Backend> DeviceMemoryMut for IpcMemory<B> {}

impl<B: Backend> Drop for IpcMemory<B> {
    fn drop(&mut self) {
        let _ = match self.opened {
            // SAFETY: `base` came from `ipc_import` on this device and is closed
            // once, here; the type's contract says no queued work uses it any more.
            Opened::Memory { base } => unsafe { self.device.ipc_close(base) },
            // SAFETY: `key` and `ptr` came from one `open_pool_block` on this
            // device and are closed once, here; no queued work uses the block (as above).
            Opened::PoolBlock { key, ptr } => unsafe { close_pool_block(self.device.as_ref(), key, ptr) },
        };
    }
}

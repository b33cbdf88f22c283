//! [`IpcHandle`]: what an exporter hands another process to reach one of its
//! allocations, and its text form. [`open_ipc`](super::open_ipc) maps it there
//! (`ipc_memory.rs`); the pool-block machinery behind [`IpcKind::PoolBlock`]
//! is in [`crate::memory::ipc`].

use crate::error::{BackendKind, Error, Result};

use super::ext::IpcBytes;

/// A handle another process opens with [`open_ipc`](super::open_ipc) to reach an allocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpcHandle {
    /// Backend of the exporting device.
    pub backend: BackendKind,
    /// Ordinal of the exporting device.
    pub ordinal: usize,
    /// What `handle` is, and what else opening it takes.
    pub kind: IpcKind,
    /// The driver's 64 bytes: an IPC memory handle, or a pool block's export data.
    pub handle: IpcBytes,
    /// Offset of the exported block from the address `handle` opens as.
    pub offset: u64,
    /// Length of the exported block in bytes.
    pub len: usize,
}

/// The two kinds of [`IpcHandle`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum IpcKind {
    /// `handle` is the driver's IPC memory handle (`cuIpcGetMemHandle`,
    /// `hipIpcGetMemHandle`) of the allocation holding the block, which
    /// starts `offset` bytes into it: memory of [`PlainResource`](super::PlainResource) and
    /// [`CachingPool`](super::CachingPool).
    #[default]
    Memory,
    /// `handle` is the block's export data (`cuMemPoolPtrExportData`,
    /// `hipMemPoolPtrExportData`) from a pool of
    /// [`NativePoolResource::shareable`](super::NativePoolResource::shareable); the pool itself is reached through
    /// descriptor `fd` of process `pid` (see [`crate::memory::ipc`]).
    PoolBlock {
        /// The exporting process.
        pid: u32,
        /// The pool's file descriptor in that process.
        fd: i32,
        /// The pool's number in that process (imported once per exporter and pool).
        pool: u64,
    },
}

impl IpcHandle {
    /// A printable form, for environment variables, pipes or files:
    /// `backend:ordinal:offset:len:hex` for [`IpcKind::Memory`] (as before
    /// pool handles existed), followed by `:pool:pid:fd:pool-id` for
    /// [`IpcKind::PoolBlock`] (which an older parser rejects rather than misreads).
    pub fn to_text(&self) -> String {
        let hex: String = self.handle.iter().map(|b| format!("{b:02x}")).collect();
        let text = format!("{}:{}:{}:{}:{hex}", self.backend, self.ordinal, self.offset, self.len);
        match self.kind {
            IpcKind::Memory => text,
            IpcKind::PoolBlock { pid, fd, pool } => format!("{text}:pool:{pid}:{fd}:{pool}"),
        }
    }

    /// Parses [`to_text`](Self::to_text)'s output; anything else is
    /// [`Error::InvalidArgument`] saying what is wrong.
    pub fn from_text(text: &str) -> Result<Self> {
        let bad = |reason: &str| Error::InvalidArgument { name: "IPC handle", reason: reason.to_string() };
        let parts: Vec<&str> = text.trim().split(':').collect();
        let (common, kind) = match parts[..] {
            [_, _, _, _, _] => (&parts[..], None),
            [_, _, _, _, _, "pool", pid, fd, pool] => (&parts[..5], Some((pid, fd, pool))),
            [_, _, _, _, _, kind, _, _, _] => {
                return Err(bad(&format!("unknown handle kind {kind:?}; the one kind after the hex is \"pool\"")))
            }
            _ => {
                return Err(bad("expected backend:ordinal:offset:len:hex, optionally followed by :pool:pid:fd:pool-id"))
            }
        };
        let &[backend, ordinal, offset, len, hex] = common else { unreachable!("five parts matched above") };
        let backend =
            BackendKind::ALL.into_iter().find(|b| b.name() == backend).ok_or_else(|| bad("unknown backend name"))?;
        let num = |s: &str| s.parse::<u64>().map_err(|_| bad("offset, ordinal and length must be integers"));
        let size = |s: &str| usize::try_from(num(s)?).map_err(|_| bad("the ordinal and length must fit a usize here"));
        if hex.len() != 128 || !hex.is_ascii() {
            return Err(bad("the handle must be 128 hex digits"));
        }
        let mut handle = [0u8; 64];
        for (i, byte) in handle.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).map_err(|_| bad("the handle must be hex"))?;
        }
        let kind = match kind {
            None => IpcKind::Memory,
            Some((pid, fd, pool)) => IpcKind::PoolBlock {
                pid: pid.parse().ok().filter(|&p| p > 0).ok_or_else(|| bad("the pid must be a positive integer"))?,
                fd: fd.parse().ok().filter(|&f| f >= 0).ok_or_else(|| bad("the fd must be a non-negative integer"))?,
                pool: pool.parse().map_err(|_| bad("the pool id must be an integer"))?,
            },
        };
        Ok(IpcHandle { backend, ordinal: size(ordinal)?, kind, handle, offset: num(offset)?, len: size(len)? })
    }
}

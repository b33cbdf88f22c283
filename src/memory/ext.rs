//! What the memory layer needs from a backend: [`MemoryDevice`], which
//! lives in the backend layer (`Backend::Device` requires it, so every
//! memory type is generic over a plain [`Backend`](crate::backend::Backend))
//! and is re-exported here.

pub use crate::backend::{ExportedPoolFd, IpcBytes, MemoryDevice, RawPool};

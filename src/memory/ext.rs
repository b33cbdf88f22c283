//! What the memory layer needs from a backend: [`MemoryDevice`], which
//! lives in the backend layer (`Backend::Device` requires it) and is
//! re-exported here, and [`MemoryBackend`], the bound every memory type takes.

use crate::backend::Backend;
pub use crate::backend::{ExportedPoolFd, IpcBytes, MemoryDevice, RawPool};

/// A backend whose devices implement [`MemoryDevice`]; every memory type is
/// generic over it. Every [`Backend`] is one: `Backend::Device` requires
/// `MemoryDevice`, so code generic over `D: Device` can use the memory layer
/// for `D::B` (as `MemArray` does).
pub trait MemoryBackend: Backend {}

// The bound stays on `Backend::Device` rather than here: a where-clause
// `Backend<Device: MemoryDevice>` would make rustc normalize `<D::B as
// Backend>::Device` to `D` and then ask for `D: MemoryDevice`, which code
// generic over `D: Device` cannot show.
impl<B: Backend> MemoryBackend for B {}

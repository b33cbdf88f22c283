//! [`GuardedRelease`]: memory whose release waits for the whole device once its
//! address has been handed to code we do not see.

use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::backend::Device;

/// Memory of the device's current resource (an allocation, a pinned block)
/// that goes back to the resource when dropped; if its address was ever
/// handed to code we do not see ([`mark_exported`](Self::mark_exported)),
/// the whole device is synchronized first, as a synchronous `cudaFree`
/// would, so the resource cannot hand it out again while a consumer's
/// queued work still uses it. If that synchronization fails the memory is
/// leaked, never reused; if a running capture forbids it (a `Global`
/// capture: waiting would invalidate it), the release is deferred to the
/// capture's end.
///
/// `MemArray` holds its device copy and pinned host block in one; the
/// Python `gpuport.runtime.malloc` holds its memory in one, exported from
/// the start.
pub struct GuardedRelease<M: Send + Sync + 'static, D: Device> {
    memory: ManuallyDrop<M>,
    device: Arc<D>,
    exported: AtomicBool,
}

impl<M: Send + Sync + 'static, D: Device> GuardedRelease<M, D> {
    /// Holds `memory` of `device`; `exported` says its address is already out.
    pub fn new(memory: M, device: &Arc<D>, exported: bool) -> Self {
        GuardedRelease {
            memory: ManuallyDrop::new(memory),
            device: device.clone(),
            exported: AtomicBool::new(exported),
        }
    }

    /// Records that the memory's address was handed out.
    pub fn mark_exported(&self) {
        self.exported.store(true, Ordering::Relaxed);
    }

    /// Whether the memory's address was handed out.
    pub fn is_exported(&self) -> bool {
        self.exported.load(Ordering::Relaxed)
    }
}

impl<M: Send + Sync + 'static, D: Device> std::ops::Deref for GuardedRelease<M, D> {
    type Target = M;
    fn deref(&self) -> &M {
        &self.memory
    }
}

impl<M: Send + Sync + 'static, D: Device> Drop for GuardedRelease<M, D> {
    fn drop(&mut self) {
        if *self.exported.get_mut() {
            match self.device.synchronize_device() {
                Ok(()) => {}
                Err(crate::Error::Graph { kind: crate::GraphErrorKind::SynchronousCall, .. }) => {
                    // SAFETY: `memory` is taken once, here, and not used
                    // afterwards (the drop below is skipped).
                    let memory = unsafe { ManuallyDrop::take(&mut self.memory) };
                    let later = GuardedRelease::new(memory, &self.device, true);
                    let info = self.device.info();
                    crate::backend::graph::defer_until_device_waits_allowed(
                        info.backend,
                        info.ordinal,
                        Box::new(later),
                    );
                    return;
                }
                Err(_) => return, // a consumer may still use it: leak rather than let it be reused
            }
        }
        // SAFETY: `memory` is dropped once, here, and not used afterwards.
        unsafe { ManuallyDrop::drop(&mut self.memory) }
    }
}

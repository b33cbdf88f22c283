//! The per-device current resource.

use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use crate::backend::{Backend, Device};
use crate::error::{BackendKind, Error, Result};

use super::ext::MemoryBackend;
use super::pool::{CachingPool, PoolConfig};
use super::resource::Allocator;

struct Slot {
    /// An `Allocator<B>` for the slot's backend.
    allocator: Box<dyn Any + Send + Sync>,
    /// Whether `current_resource` has handed it out.
    used: bool,
}

fn slots() -> &'static Mutex<HashMap<(BackendKind, usize), Slot>> {
    static SLOTS: OnceLock<Mutex<HashMap<(BackendKind, usize), Slot>>> = OnceLock::new();
    SLOTS.get_or_init(Default::default)
}

fn mismatch(spec: String) -> Error {
    Error::InvalidArgument { name: "current resource", reason: format!("{spec}: stored allocator has another backend") }
}

/// The device's current resource: what every allocation of the library on
/// that device goes through. A [`CachingPool`] unless
/// [`set_current_resource`] replaced it before this first call.
pub fn current_resource<B: MemoryBackend>(device: &Arc<B::Device>) -> Result<Allocator<B>> {
    let key = (B::KIND, device.info().ordinal);
    let mut slots = slots().lock().unwrap_or_else(|p| p.into_inner());
    let slot = slots.entry(key).or_insert_with(|| Slot {
        allocator: Box::new(Allocator::<B>::new(CachingPool::new(device.clone(), PoolConfig::default()))),
        used: false,
    });
    slot.used = true;
    slot.allocator.downcast_ref::<Allocator<B>>().cloned().ok_or_else(|| mismatch(device.info().spec()))
}

/// Replaces the device's current resource. Refused with
/// [`Error::InvalidArgument`] once [`current_resource`] has handed the old
/// one out, since memory of two resources would then be mixed.
pub fn set_current_resource<B: MemoryBackend>(allocator: Allocator<B>) -> Result<()> {
    let device = allocator.device().clone();
    let key = (<B as Backend>::KIND, device.info().ordinal);
    let mut slots = slots().lock().unwrap_or_else(|p| p.into_inner());
    if slots.get(&key).is_some_and(|s| s.used) {
        return Err(Error::InvalidArgument {
            name: "current resource",
            reason: format!(
                "{} already allocates through its current resource; replace it before the first use",
                device.info().spec()
            ),
        });
    }
    slots.insert(key, Slot { allocator: Box::new(allocator), used: false });
    Ok(())
}

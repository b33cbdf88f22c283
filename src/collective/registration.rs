//! [`Communicator::register`]: memory that lives long, registered with the
//! engine so that its collectives on it skip the library's staging copies
//! (NCCL's `ncclCommRegister`, 2.19 on). The [`Registration`] borrows the
//! memory and the communicator, and deregisters when dropped. On the host
//! engine, and with a library without registration, it holds nothing.

use std::marker::PhantomData;

use crate::backend::{Device, DeviceMemory};
use crate::error::{Error, Result};

use super::engine::{CollectiveBackend, Engine};
use super::Communicator;

/// Memory registered with a communicator's engine, until dropped.
#[must_use = "dropping a registration deregisters the memory at once"]
pub struct Registration<'a, B: CollectiveBackend> {
    comm: &'a Communicator<B>,
    /// The engine's handle; 0 where it keeps none.
    handle: usize,
    bytes: usize,
    /// The memory stays borrowed, so it outlives the registration.
    _memory: PhantomData<&'a ()>,
}

impl<B: CollectiveBackend> std::fmt::Debug for Registration<'_, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Registration({} bytes with {:?}, held: {})", self.bytes, self.comm, self.is_held())
    }
}

impl<B: CollectiveBackend> Registration<'_, B> {
    /// Whether the engine holds a registration (false on the host engine
    /// and with a library that cannot register).
    pub fn is_held(&self) -> bool {
        self.handle != 0
    }
}

impl<B: CollectiveBackend> Drop for Registration<'_, B> {
    fn drop(&mut self) {
        // A failure cannot be returned from a drop; the communicator's own
        // release frees what is left.
        let _ = self.comm.engine.deregister(self.handle);
    }
}

impl<B: CollectiveBackend> Communicator<B> {
    /// Registers `memory` (all of it) with the engine, for collectives on
    /// it while the returned [`Registration`] lives: NCCL then reads and
    /// writes it without staging copies. Memory of another device is a
    /// [`Error::DeviceMismatch`]. On the host engine, or a library without
    /// `ncclCommRegister`, it registers nothing ([`Registration::is_held`]
    /// is false) and collectives run as before. The registration borrows
    /// `memory`, so it cannot be freed while registered (NCCL asks for the
    /// deregistration first); collectives on it go through
    /// [`enqueue`](Self::enqueue), which takes it shared.
    ///
    /// ```
    /// use gpuport::{Device, Host, HostDevice};
    /// use gpuport::collective::Communicator;
    /// let dev = HostDevice::open(0)?;
    /// let comm = Communicator::<Host>::init_all(&[dev.clone()])?.remove(0);
    /// let buffer = dev.alloc(1024)?;
    /// let registered = comm.register(&buffer)?;
    /// assert!(!registered.is_held());
    /// # Ok::<(), gpuport::Error>(())
    /// ```
    pub fn register<'a, M>(&'a self, memory: &'a M) -> Result<Registration<'a, B>>
    where
        M: DeviceMemory<B = B> + ?Sized,
    {
        let ordinal = self.device.info().ordinal;
        if memory.ordinal() != ordinal {
            return Err(Error::DeviceMismatch {
                what: "registered memory",
                expected: self.device.info().spec(),
                found: format!("{}:{}", B::KIND.name(), memory.ordinal()),
            });
        }
        if self.is_aborted() {
            return Err(self.error(
                crate::error::CollectiveErrorKind::Aborted,
                "register on a communicator that was aborted; make a new one".into(),
            ));
        }
        let handle = self.engine.register(memory.device_ptr(), memory.len())?;
        Ok(Registration { comm: self, handle, bytes: memory.len(), _memory: PhantomData })
    }
}

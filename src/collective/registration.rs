//! [`Communicator::register`]: memory that lives long, registered with the
//! engine so that its collectives on it skip the library's staging copies
//! (NCCL's `ncclCommRegister`, 2.19 on). The [`Registration`] borrows the
//! memory and the communicator, and deregisters when dropped. A binding,
//! which holds the memory's owner itself, registers a range instead
//! ([`AnyCommunicator::register_range`], a [`RangeRegistration`]). On the
//! host engine, and with a library without registration, they hold nothing.

use std::marker::PhantomData;

use crate::backend::{Device, DeviceMemory};
use crate::error::{Error, Result};

use crate::dynamic::any::mismatch;
use crate::dynamic::raw::{Place, RawRange};
use crate::dynamic::same_device;
use crate::on_backend;

use super::engine::{CollectiveBackend, Engine};
use super::{AnyCommunicator, Communicator};

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
        let handle = self.register_address(memory.device_ptr(), memory.len())?;
        Ok(Registration { comm: self, handle, bytes: memory.len(), _memory: PhantomData })
    }
}

/// A registration a binding holds apart from its communicator: made by
/// [`AnyCommunicator::register_range`], given back to the same
/// communicator's [`AnyCommunicator::deregister`]. Neither clonable nor
/// made outside this module, so each engine handle is released at most
/// once, by the communicator that made it. Dropped without `deregister`,
/// the engine keeps the registration until the communicator is freed.
#[derive(Debug)]
#[must_use = "give a registration back to AnyCommunicator::deregister"]
pub struct RangeRegistration {
    /// The engine's handle; 0 where it keeps none.
    handle: usize,
    bytes: usize,
    /// The serial of the communicator that made it, to refuse another's.
    owner: u64,
}

impl RangeRegistration {
    /// Whether the engine holds a registration (false on the host engine
    /// and with a library that cannot register).
    pub fn is_held(&self) -> bool {
        self.handle != 0
    }

    /// The registered bytes.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

impl<B: CollectiveBackend> Communicator<B> {
    /// [`register`](Self::register) of `bytes` at `address`, checked by the caller.
    fn register_address(&self, address: u64, bytes: usize) -> Result<usize> {
        if self.is_aborted() {
            return Err(self.error(
                crate::error::CollectiveErrorKind::Aborted,
                "register on a communicator that was aborted; make a new one".into(),
            ));
        }
        self.engine.register(address, bytes)
    }
}

impl AnyCommunicator {
    /// Registers `range` with the engine, as [`Communicator::register`]
    /// does, for a binding that holds the memory's owner itself. Memory of
    /// another device is a [`Error::DeviceMismatch`], host memory on a GPU
    /// an [`ArgumentError::HostMemory`](crate::collective::ArgumentError),
    /// a range of unknown size an [`Error::InvalidArgument`].
    ///
    /// # Safety
    /// The memory of `range` stays allocated until the registration is
    /// given to [`deregister`](Self::deregister) or this communicator is
    /// dropped (NCCL asks that registered memory be deregistered before
    /// it is freed).
    ///
    /// ```
    /// use gpuport::collective::{AnyCommunicator, CallMode};
    /// use gpuport::dynamic::raw::{Place, RawRange};
    /// let comm = AnyCommunicator::init_all(&[gpuport::open("host")?], CallMode::Blocking)?.remove(0);
    /// let mut x = vec![0u8; 64];
    /// // SAFETY: `x` outlives the registration, and nothing else touches it.
    /// let range = unsafe { RawRange::new(x.as_mut_ptr() as u64, Place::Host, Some(64), None, true) };
    /// // SAFETY: as above.
    /// let registered = unsafe { comm.register_range(&range)? };
    /// assert_eq!((registered.is_held(), registered.bytes()), (false, 64));
    /// comm.deregister(registered)?;
    /// # Ok::<(), gpuport::Error>(())
    /// ```
    pub unsafe fn register_range(&self, range: &RawRange) -> Result<RangeRegistration> {
        let Some(bytes) = range.known_size() else {
            return Err(Error::InvalidArgument {
                name: "memory",
                reason: "a bare address has no size to register; pass the array or tensor object".into(),
            });
        };
        range.check_size(bytes, "registered memory")?;
        let device = self.device();
        // Memory of another device is refused on every engine, the host's too.
        if let Place::Device(Some(d)) | Place::Managed(d) = range.place() {
            if !same_device(d, &device) {
                return Err(mismatch("registered memory", &device, d));
            }
        }
        super::operands::check_place(range, "registered memory", &device)?;
        on_backend!(self, c => {
            let handle = c.register_address(range.addr(), bytes)?;
            Ok(RangeRegistration { handle, bytes, owner: c.serial })
        })
    }

    /// Releases `registration`, which this communicator's
    /// [`register_range`](Self::register_range) made, once the device has
    /// finished its work (collectives on the memory among it). Another
    /// communicator's is an [`Error::InvalidArgument`], and stays with the
    /// engine that made it until that communicator is freed.
    pub fn deregister(&self, registration: RangeRegistration) -> Result<()> {
        on_backend!(self, c => {
            if registration.owner != c.serial {
                return Err(Error::InvalidArgument {
                    name: "registration",
                    reason: "made by another communicator; deregister it with the one that registered it".into(),
                });
            }
            if registration.is_held() && !c.is_aborted() {
                // Collectives this device enqueued on the memory finish
                // before the library forgets it.
                c.device.synchronize_device()?;
            }
            c.engine.deregister(registration.handle)
        })
    }
}

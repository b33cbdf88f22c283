//! One collective as a binding calls it: its buffers ([`Operands`]) and the
//! whole call on them ([`AnyCommunicator::collective`]).
//!
//! A binding converts each of its objects into an [`Operand`] (a gpuport
//! array, or a [`RawRange`] whose owner it holds), its strings into an
//! [`Op`] and a [`StreamChoice`], and makes one call. The call picks the
//! stream, checks each buffer against the collective and the
//! communicator's device, enqueues the collective (a gpuport array's device
//! copy ordered by the array, as its kernel methods are), and returns the
//! [`Enqueued`] work: the caller keeps its owners with [`Enqueued::keep`]
//! until the stream has run it (inside a [`group`](AnyCommunicator::group),
//! from the group's end on, when the engine enqueues its calls).

use crate::array::DeviceCopyToken;
use crate::backend::registry::AnyDevice;
use crate::dynamic::any::mismatch;
use crate::dynamic::raw::{Place, RawRange};
use crate::dynamic::runtime::{Enqueued, StreamChoice};
use crate::dynamic::{same_device, AnyArray};
use crate::error::collective::ArgumentError;
use crate::error::{BackendKind, Result};

use super::{AnyCommunicator, Op};

/// One side of a collective: what it reads (send) or writes (receive).
pub enum Operand<'a> {
    /// No buffer: the collective has nothing on this side (a send's
    /// receive side).
    None,
    /// A gpuport array, owned or imported: its data on the device, ordered
    /// by the array (an owned array moves there first and records the
    /// collective as its pending work).
    Array(&'a mut AnyArray),
    /// Memory named by address, checked against what is known of it (see
    /// [`RawRange::new`] for what its maker promises).
    Raw(RawRange),
}

impl Operand<'_> {
    /// The address a raw operand names (0 otherwise).
    fn addr(&self) -> u64 {
        match self {
            Operand::Raw(r) => r.addr(),
            _ => 0,
        }
    }

    /// Checks this operand as side `what` of `op` on `dev`: `elems`
    /// elements, written where `writes`.
    fn check(&self, op: &Op, what: &'static str, elems: usize, writes: bool, dev: &AnyDevice) -> Result<()> {
        let bytes = || {
            elems.checked_mul(op.dtype.itemsize()).ok_or_else(|| ArgumentError::TooManyElements { op: op.to_string() })
        };
        match self {
            Operand::None if elems > 0 => Err(ArgumentError::Missing { op: op.to_string(), what, elems }.into()),
            Operand::None => Ok(()),
            Operand::Array(a) => {
                let need = bytes()?;
                let found = a.device();
                if !same_device(&found, dev) {
                    return Err(mismatch(what, dev, &found));
                }
                let have = a.shape().iter().product::<usize>().saturating_mul(a.dtype().itemsize());
                if have < need {
                    return Err(ArgumentError::TooSmall { op: op.to_string(), what, have, need }.into());
                }
                Ok(())
            }
            Operand::Raw(r) => {
                let need = bytes()?;
                r.check_size(need, what)?;
                if writes && !r.is_writable() {
                    return Err(ArgumentError::ReadOnly { op: op.to_string(), what }.into());
                }
                if need > 0 {
                    check_place(r, what, dev)?;
                }
                Ok(())
            }
        }
    }
}

/// Refuses memory the communicator's engine cannot use: a GPU engine's
/// operands are its device's memory (host memory would be a fault on the
/// device); the host engine reads and writes held host memory only.
fn check_place(r: &RawRange, what: &'static str, dev: &AnyDevice) -> Result<()> {
    if dev.backend() == BackendKind::Host {
        if r.host_accessible() && r.is_held() {
            return Ok(());
        }
        return Err(ArgumentError::NotHeld { what }.into());
    }
    match r.place() {
        Place::Host | Place::Pinned(_) | Place::Null => {
            Err(ArgumentError::HostMemory { what, device: dev.info().spec() }.into())
        }
        Place::Device(Some(d)) | Place::Managed(d) if !same_device(d, dev) => Err(mismatch(what, dev, d)),
        _ => Ok(()),
    }
}

/// The send and receive sides of one collective.
pub struct Operands<'a> {
    send: Operand<'a>,
    /// `None` in place: `send` is read and written.
    recv: Option<Operand<'a>>,
}

impl<'a> Operands<'a> {
    /// A collective that reads `send` and writes `recv`.
    pub fn new(send: Operand<'a>, recv: Operand<'a>) -> Self {
        Operands { send, recv: Some(recv) }
    }

    /// A collective in place: `x` is both read and written (the send and
    /// receive addresses are one, as NCCL's in-place calls take them). It
    /// is checked as both sides, and an array is entered once.
    pub fn in_place(x: Operand<'a>) -> Self {
        Operands { send: x, recv: None }
    }
}

/// The device copies of array operands that a capturing stream's graph
/// uses (none off a capture): each array's replays are to be ordered with
/// its copy ([`graph::use_in_replays`](crate::dynamic::graph::use_in_replays),
/// [`AnyArray::before_replay`], [`AnyArray::after_replay`]). The graph reads
/// the send copy and writes the receive one; in place, only `recv` is set.
#[derive(Default)]
#[must_use = "a captured array's replays must be ordered with its device copy"]
pub struct Captured {
    /// The send array's device copy, read by each replay.
    pub send: Option<DeviceCopyToken>,
    /// The receive array's device copy, written by each replay.
    pub recv: Option<DeviceCopyToken>,
}

impl AnyCommunicator {
    /// Enqueues `op` on `stream` (of the communicator's device), reading
    /// the send side of `operands` and writing the receive side, after
    /// checking each: present where `op` has elements on that side, large
    /// enough, writable where written, and memory the engine can use (its
    /// device's; held host memory on the host backend). A gpuport array
    /// gives its device copy, ordered like its kernel methods; an import's
    /// memory is kept by the returned [`Enqueued`] with the caller's owners.
    ///
    /// Returns the work left on the stream (keep the owners of the raw
    /// operands' memory with [`Enqueued::keep`]: until the stream has run
    /// the collective, from the group's end on inside
    /// [`group`](Self::group), or as long as the graph on a capturing
    /// stream) and, on a capturing stream, the array copies the graph uses.
    ///
    /// ```
    /// use gpuport::collective::{AnyCommunicator, CallMode, Op, OpKind, Operand, Operands, ReduceOp};
    /// use gpuport::dynamic::raw::{Place, RawRange};
    /// use gpuport::dynamic::runtime::StreamChoice;
    /// use gpuport::dynamic::DType;
    /// let comm = AnyCommunicator::init_all(&[gpuport::open("host")?], CallMode::Bounded)?.remove(0);
    /// let mut x = vec![1.5f32; 4];
    /// // SAFETY: `x` holds the 16 bytes and outlives the collective, which
    /// // `synchronize` waits for below.
    /// let x_range = unsafe { RawRange::new(x.as_mut_ptr() as u64, Place::Host, Some(16), None, true) };
    /// let op = Op { kind: OpKind::AllReduce(ReduceOp::Max), dtype: DType::Float32, count: 4 };
    /// let (enqueued, _) = comm.collective(&op, Operands::in_place(Operand::Raw(x_range)), &StreamChoice::Default)?;
    /// comm.synchronize(enqueued.stream().expect("work on a stream"))?;
    /// enqueued.keep(())?;
    /// assert_eq!(x, [1.5; 4]); // one rank
    /// # Ok::<(), gpuport::Error>(())
    /// ```
    pub fn collective(&self, op: &Op, operands: Operands<'_>, stream: &StreamChoice) -> Result<(Enqueued, Captured)> {
        let dev = self.device();
        let s = stream.on(&dev)?;
        let size = self.size();
        let Operands { send, recv } = operands;
        send.check(op, "send", op.send_len(size), false, &dev)?;
        recv.as_ref().unwrap_or(&send).check(op, "recv", op.recv_len(size), true, &dev)?;
        // An import's memory is its producer's: kept with the caller's owners.
        let imports = [Some(&send), recv.as_ref()]
            .into_iter()
            .flatten()
            .filter_map(|o| match o {
                Operand::Array(AnyArray::Imported(f)) => Some(f.keeper()),
                _ => None,
            })
            .collect();
        let name = op.kind.name();
        let run = |sp: u64, rp: u64| {
            // SAFETY: a raw operand was checked above against what its range
            // holds or states (a bare device address is its maker's word),
            // and its memory stays valid until the stream has run the
            // collective: `RawRange::new`'s contract, which the caller meets
            // by keeping the owners with the returned `Enqueued` (from the
            // group's end on, in a group; by the graph, in a capture). An
            // array gives its device copy through `with_device_data`, which
            // records the collective as the array's pending work (or has the
            // graph keep the copy, in a capture); an import's memory is kept
            // by the `Enqueued` too.
            unsafe { self.enqueue_raw(op, sp, rp, &s) }
        };
        let mut captured = Captured::default();
        match (send, recv) {
            (Operand::Array(a), None) => captured.recv = a.with_device_data(name, true, &s, &mut |p| run(p, p))?,
            (Operand::Array(a), Some(Operand::Array(b))) => {
                (captured.send, captured.recv) =
                    AnyArray::with_device_data_pair(a, b, name, &s, &mut |sp, rp| run(sp, rp))?;
            }
            (Operand::Array(a), Some(r)) => {
                captured.send = a.with_device_data(name, false, &s, &mut |p| run(p, r.addr()))?;
            }
            (x, Some(Operand::Array(b))) => {
                captured.recv = b.with_device_data(name, true, &s, &mut |p| run(x.addr(), p))?;
            }
            (x, None) => run(x.addr(), x.addr())?,
            (x, Some(r)) => run(x.addr(), r.addr())?,
        }
        Ok((Enqueued::at_scope_end(s, imports), captured))
    }
}

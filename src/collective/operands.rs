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
//!
//! Before converting, a binding sorts its caller's objects into [`Sides`]:
//! one object given as both sides is one operand, in place, converted and
//! entered once. A binding's group whose body fails in the binding's own
//! terms (a Python exception) runs through
//! [`group_with`](AnyCommunicator::group_with), which says whose error wins.

use crate::array::DeviceCopyToken;
use crate::backend::registry::AnyDevice;
use crate::dynamic::any::mismatch;
use crate::dynamic::raw::{Place, RawRange};
use crate::dynamic::runtime::{Enqueued, StreamChoice};
use crate::dynamic::{same_device, AnyArray};
use crate::error::collective::ArgumentError;
use crate::error::{BackendKind, Error, Result};

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
pub(super) fn check_place(r: &RawRange, what: &'static str, dev: &AnyDevice) -> Result<()> {
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

/// One object of a binding's caller, converted: a gpuport array object
/// `A`, whose state the binding enters for the call, or another object's
/// memory `R`, which names a [`RawRange`] and keeps it alive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Given<A, R> {
    /// A gpuport array object.
    Array(A),
    /// Another object's memory.
    Raw(R),
}

impl<A, R> Given<A, R> {
    /// The array object, whose state is to be entered for the call.
    pub fn array(&self) -> Option<&A> {
        match self {
            Given::Array(a) => Some(a),
            Given::Raw(_) => None,
        }
    }

    /// The core's operand: the entered array's state, else the range
    /// `range` reads off the memory; an array not entered is no operand.
    pub fn operand<'s>(&self, entered: Option<&'s mut AnyArray>, range: impl FnOnce(&R) -> RawRange) -> Operand<'s> {
        match (self, entered) {
            (_, Some(a)) => Operand::Array(a),
            (Given::Raw(r), None) => Operand::Raw(range(r)),
            (Given::Array(_), None) => Operand::None,
        }
    }

    /// What must stay alive until the stream has run the collective: the
    /// memory, or the array object as `keep_array` makes it one (an
    /// import's memory lives as long as its array object).
    pub fn into_kept(self, keep_array: impl FnOnce(A) -> R) -> R {
        match self {
            Given::Raw(r) => r,
            Given::Array(a) => keep_array(a),
        }
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

/// A collective's objects as a binding's caller passed them, before they
/// are converted: one object given as both sides (the same object, not
/// two over one memory) is one operand, in place; else each side is its
/// own, either absent.
///
/// ```
/// use gpuport::collective::operands::Sides;
/// let same = |a: &&str, b: &&str| a == b;
/// assert!(Sides::of(Some("x"), Some("x"), same).is_in_place());
/// assert!(!Sides::of(Some("x"), Some("y"), same).is_in_place());
/// assert_eq!(Sides::of(None, None, same).into_vec(), Vec::<&str>::new());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sides<T> {
    /// One object, read and written.
    InPlace(T),
    /// The object read and the object written, where given.
    Apart(Option<T>, Option<T>),
}

impl<T> Sides<T> {
    /// Sorts `send` and `recv`; `same` says whether two objects are one
    /// (Python's `is`).
    pub fn of(send: Option<T>, recv: Option<T>, same: impl FnOnce(&T, &T) -> bool) -> Self {
        match (send, recv) {
            (Some(a), Some(b)) if same(&a, &b) => Sides::InPlace(a),
            (send, recv) => Sides::Apart(send, recv),
        }
    }

    /// Whether one object is both sides.
    pub fn is_in_place(&self) -> bool {
        matches!(self, Sides::InPlace(_))
    }

    /// Each object converted once by `f`, which is told its side (`"send"`;
    /// in place, the one object is the send side).
    pub fn try_map<U, E>(
        self,
        mut f: impl FnMut(T, &'static str) -> std::result::Result<U, E>,
    ) -> std::result::Result<Sides<U>, E> {
        Ok(match self {
            Sides::InPlace(x) => Sides::InPlace(f(x, "send")?),
            Sides::Apart(s, r) => {
                Sides::Apart(s.map(|s| f(s, "send")).transpose()?, r.map(|r| f(r, "recv")).transpose()?)
            }
        })
    }

    /// Each object converted once by `f`.
    pub fn map<U>(self, mut f: impl FnMut(T) -> U) -> Sides<U> {
        match self {
            Sides::InPlace(x) => Sides::InPlace(f(x)),
            Sides::Apart(s, r) => Sides::Apart(s.map(&mut f), r.map(f)),
        }
    }

    /// The objects, borrowed.
    pub fn as_ref(&self) -> Sides<&T> {
        match self {
            Sides::InPlace(x) => Sides::InPlace(x),
            Sides::Apart(s, r) => Sides::Apart(s.as_ref(), r.as_ref()),
        }
    }

    /// The objects, borrowed mutably.
    pub fn as_mut(&mut self) -> Sides<&mut T> {
        match self {
            Sides::InPlace(x) => Sides::InPlace(x),
            Sides::Apart(s, r) => Sides::Apart(s.as_mut(), r.as_mut()),
        }
    }

    /// The object read (in place: the one).
    pub fn send(&self) -> Option<&T> {
        match self {
            Sides::InPlace(x) => Some(x),
            Sides::Apart(s, _) => s.as_ref(),
        }
    }

    /// The object written (in place: the one).
    pub fn recv(&self) -> Option<&T> {
        match self {
            Sides::InPlace(x) => Some(x),
            Sides::Apart(_, r) => r.as_ref(),
        }
    }

    /// Each object once.
    pub fn into_vec(self) -> Vec<T> {
        match self {
            Sides::InPlace(x) => vec![x],
            Sides::Apart(s, r) => s.into_iter().chain(r).collect(),
        }
    }
}

impl<'a> From<Sides<Operand<'a>>> for Operands<'a> {
    /// In place as [`Operands::in_place`]; an absent side is [`Operand::None`].
    fn from(sides: Sides<Operand<'a>>) -> Self {
        match sides {
            Sides::InPlace(x) => Operands::in_place(x),
            Sides::Apart(s, r) => Operands::new(s.unwrap_or(Operand::None), r.unwrap_or(Operand::None)),
        }
    }
}

/// Why a binding's group ([`AnyCommunicator::group_with`]) failed.
#[derive(Debug)]
pub enum GroupFailure<E> {
    /// The body failed with the binding's own error: it comes first, as
    /// the cause of whatever the group's end then reported.
    Body(E),
    /// The body succeeded and the group's end failed (e.g. a peer did not
    /// join the group's collectives in time).
    End(Error),
}

impl AnyCommunicator {
    /// Runs `f` as one group of `backend` (see [`AnyCommunicator::group`])
    /// for a binding whose body fails with an error of its own (a Python
    /// exception): the body's error is reported before the end's, which
    /// still runs (the engine may run the calls the body queued).
    ///
    /// ```
    /// use gpuport::collective::operands::GroupFailure;
    /// use gpuport::collective::AnyCommunicator;
    /// use gpuport::BackendKind;
    /// let failed = AnyCommunicator::group_with(BackendKind::Host, || Err::<(), _>("the body raised"));
    /// assert!(matches!(failed, Err(GroupFailure::Body("the body raised"))));
    /// assert_eq!(AnyCommunicator::group_with(BackendKind::Host, || Ok::<_, ()>(7)).ok(), Some(7));
    /// ```
    pub fn group_with<R, E>(
        backend: BackendKind,
        f: impl FnOnce() -> std::result::Result<R, E>,
    ) -> std::result::Result<R, GroupFailure<E>> {
        let mut body = None;
        let ended = AnyCommunicator::group(backend, || {
            f().map_err(|e| {
                body = Some(e);
                // Stands for the body's error inside the group; never returned.
                Error::InvalidArgument { name: "group", reason: "the group's body failed".into() }
            })
        });
        match (body, ended) {
            (Some(e), _) => Err(GroupFailure::Body(e)),
            (None, Err(e)) => Err(GroupFailure::End(e)),
            (None, Ok(r)) => Ok(r),
        }
    }
}

/// The device copies of array operands that a capturing stream's graph
/// uses (none off a capture). Each replay is ordered with those arrays by
/// the core (`AnyGraphExec::launch`); the tokens only name the copies
/// (`MemArray::device_copy_token`). The graph reads the send copy and
/// writes the receive one; in place, only `recv` is set.
#[derive(Default)]
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
    pub fn collective(
        &self,
        op: &Op,
        operands: Operands<'_>,
        stream: &StreamChoice<'_>,
    ) -> Result<(Enqueued, Captured)> {
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
                Operand::Array(AnyArray::Imported(f)) => Some(f.owner()),
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

//! What a backend's collective engine does, and the description of one
//! collective ([`Op`]) that the layers above hand it.

use std::fmt;
use std::sync::Arc;

use crate::array::dtype::DType;
use crate::backend::{Backend, Stream};
use crate::error::collective::ArgumentError;
use crate::error::Result;

/// How a reduction combines the ranks' elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// The sum.
    Sum,
    /// The product.
    Prod,
    /// The largest.
    Max,
    /// The smallest.
    Min,
    /// The mean: the sum divided by the number of ranks (integers divide
    /// toward zero, as NCCL does).
    Avg,
}

impl ReduceOp {
    /// Every operation, in NCCL's numbering (`ncclRedOp_t`).
    pub const ALL: [ReduceOp; 5] = [ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Max, ReduceOp::Min, ReduceOp::Avg];

    /// The lower-case name (`"sum"`).
    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Prod => "prod",
            ReduceOp::Max => "max",
            ReduceOp::Min => "min",
            ReduceOp::Avg => "avg",
        }
    }

    /// The operation named `name` (`"sum"`, `"prod"`, `"max"`, `"min"`, `"avg"`).
    pub fn from_name(name: &str) -> Option<ReduceOp> {
        ReduceOp::ALL.into_iter().find(|op| op.name() == name)
    }
}

/// Which collective, with its root, peer or reduction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OpKind {
    /// Every rank gets the reduction of every rank's buffer.
    AllReduce(ReduceOp),
    /// Every rank gets `root`'s buffer.
    Broadcast {
        /// The rank whose buffer is sent.
        root: usize,
    },
    /// `root` gets the reduction of every rank's buffer.
    Reduce {
        /// The reduction.
        op: ReduceOp,
        /// The rank that receives it.
        root: usize,
    },
    /// Every rank gets every rank's buffer, in rank order.
    AllGather,
    /// Rank `r` gets block `r` of the reduction of every rank's buffer.
    ReduceScatter(ReduceOp),
    /// Sends the buffer to `peer`, which receives it.
    Send {
        /// The receiving rank.
        peer: usize,
    },
    /// Receives a buffer that `peer` sends.
    Recv {
        /// The sending rank.
        peer: usize,
    },
}

impl OpKind {
    /// The collective's name (`"all_reduce"`).
    pub fn name(self) -> &'static str {
        match self {
            OpKind::AllReduce(_) => "all_reduce",
            OpKind::Broadcast { .. } => "broadcast",
            OpKind::Reduce { .. } => "reduce",
            OpKind::AllGather => "all_gather",
            OpKind::ReduceScatter(_) => "reduce_scatter",
            OpKind::Send { .. } => "send",
            OpKind::Recv { .. } => "recv",
        }
    }

    /// The collective named `name` (as [`name`](Self::name) writes it),
    /// with what it takes: the reduction named `op` (`"sum"`, …; read by
    /// all-reduce, reduce and reduce-scatter only), the `root` rank
    /// (broadcast, reduce) and the `peer` rank (send, receive). Whether
    /// `root` and `peer` are ranks of the group is the communicator's check.
    ///
    /// ```
    /// use gpuport::collective::{OpKind, ReduceOp};
    /// assert_eq!(OpKind::from_name("reduce", "max", 1, 0)?, OpKind::Reduce { op: ReduceOp::Max, root: 1 });
    /// assert_eq!(OpKind::from_name("send", "sum", 0, 3)?, OpKind::Send { peer: 3 });
    /// // A collective without a reduction does not read `op`.
    /// assert_eq!(OpKind::from_name("broadcast", "mean", 2, 0)?, OpKind::Broadcast { root: 2 });
    /// assert!(OpKind::from_name("all_reduce", "mean", 0, 0).is_err());
    /// assert!(OpKind::from_name("scan", "sum", 0, 0).is_err());
    /// # Ok::<(), gpuport::Error>(())
    /// ```
    pub fn from_name(name: &str, op: &str, root: usize, peer: usize) -> Result<OpKind> {
        let reduction = || ReduceOp::from_name(op).ok_or_else(|| ArgumentError::UnknownReduction(op.to_string()));
        Ok(match name {
            "all_reduce" => OpKind::AllReduce(reduction()?),
            "broadcast" => OpKind::Broadcast { root },
            "reduce" => OpKind::Reduce { op: reduction()?, root },
            "all_gather" => OpKind::AllGather,
            "reduce_scatter" => OpKind::ReduceScatter(reduction()?),
            "send" => OpKind::Send { peer },
            "recv" => OpKind::Recv { peer },
            other => return Err(ArgumentError::UnknownCollective(other.to_string()).into()),
        })
    }

    /// The reduction, for the reducing collectives.
    pub fn reduction(self) -> Option<ReduceOp> {
        match self {
            OpKind::AllReduce(op) | OpKind::Reduce { op, .. } | OpKind::ReduceScatter(op) => Some(op),
            _ => None,
        }
    }
}

/// One collective as a rank calls it: which, of what element type, and how
/// many elements (NCCL's `count`: per rank for all-gather's input and
/// reduce-scatter's output, see [`send_len`](Self::send_len)).
///
/// ```
/// use gpuport::collective::{Op, OpKind, ReduceOp};
/// use gpuport::dynamic::DType;
/// let gather = Op { kind: OpKind::AllGather, dtype: DType::Float32, count: 4 };
/// assert_eq!((gather.send_len(2), gather.recv_len(2)), (4, 8));
/// let sum = Op { kind: OpKind::AllReduce(ReduceOp::Sum), dtype: DType::Int32, count: 4 };
/// assert_eq!(sum.to_string(), "all_reduce(sum) of 4 int32");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Op {
    /// Which collective.
    pub kind: OpKind,
    /// The element type.
    pub dtype: DType,
    /// The element count, as NCCL counts it.
    pub count: usize,
}

impl Op {
    /// Elements read from the send buffer, in a group of `size` ranks.
    pub fn send_len(&self, size: usize) -> usize {
        match self.kind {
            OpKind::ReduceScatter(_) => self.count.saturating_mul(size),
            OpKind::Recv { .. } => 0,
            _ => self.count,
        }
    }

    /// Elements written to the receive buffer, in a group of `size` ranks.
    pub fn recv_len(&self, size: usize) -> usize {
        match self.kind {
            OpKind::AllGather => self.count.saturating_mul(size),
            OpKind::Send { .. } => 0,
            _ => self.count,
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.kind.name())?;
        match self.kind {
            OpKind::AllReduce(op) | OpKind::ReduceScatter(op) => write!(f, "({})", op.name())?,
            OpKind::Reduce { op, root } => write!(f, "({}, root {root})", op.name())?,
            OpKind::Broadcast { root } => write!(f, "(root {root})")?,
            OpKind::Send { peer } | OpKind::Recv { peer } => write!(f, "(peer {peer})")?,
            OpKind::AllGather => {}
        }
        write!(f, " of {} {}", self.count, self.dtype.name())
    }
}

/// A backend with a collective engine: the host backend, CUDA (NCCL) and
/// ROCm (RCCL). Sealed: gpuport implements it for its backends.
pub trait CollectiveBackend: Backend + sealed::Sealed {
    /// The engine's communicator for one rank.
    #[doc(hidden)]
    type Engine: Engine<Self>;
}

pub(crate) mod sealed {
    pub trait Sealed {}
}

/// How the library calls of NCCL and RCCL communicators wait (the host
/// engine's waits are always bounded by its store's timeout).
///
/// ```
/// use gpuport::collective::CallMode;
/// assert_eq!(CallMode::default(), CallMode::Blocking);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CallMode {
    /// Each call returns once its work is enqueued (NCCL's own default, and
    /// its fastest). A peer gone before its first connection (a first
    /// send or receive) blocks that call; later failures are caught by
    /// `synchronize`'s timeout. `ncclCommInitRank` waits without a bound;
    /// through a store, a rank whose library, device or id fails is seen
    /// before it is called (`rendezvous.rs`), a failure inside it is not
    /// (`nccl/init.rs`).
    #[default]
    Blocking,
    /// Non-blocking communicators (NCCL and RCCL 2.14 and newer): every
    /// call, initialisation included, gives up after the communicator's
    /// timeout with a `Timeout` and aborts it. From NCCL 2.23 on each call
    /// then goes through the library's helper thread: small all-reduces
    /// measured about 3x the time of blocking ones (BENCHMARKS.md).
    Bounded,
}

impl CallMode {
    /// The mode's name: `"blocking"` or `"bounded"`.
    pub fn name(self) -> &'static str {
        match self {
            CallMode::Blocking => "blocking",
            CallMode::Bounded => "bounded",
        }
    }

    /// The mode [`name`](Self::name) names, or `None`.
    ///
    /// ```
    /// use gpuport::collective::CallMode;
    /// assert_eq!(CallMode::from_name("bounded"), Some(CallMode::Bounded));
    /// assert_eq!(CallMode::from_name("eager"), None);
    /// ```
    pub fn from_name(name: &str) -> Option<Self> {
        [CallMode::Blocking, CallMode::Bounded].into_iter().find(|m| m.name() == name)
    }

    /// `Bounded` when `GPUPORT_COLLECTIVE_BOUNDED=1`, else `Blocking`.
    pub fn from_env() -> Self {
        if std::env::var("GPUPORT_COLLECTIVE_BOUNDED").is_ok_and(|v| v.trim() == "1") {
            CallMode::Bounded
        } else {
            CallMode::Blocking
        }
    }
}

/// One rank's communicator of a backend's engine.
///
/// Public in name only: it lives in a private module, so no crate outside
/// gpuport can name, implement or call it.
///
/// # Safety
/// [`Communicator`](super::Communicator) trusts an engine to touch no
/// memory but the element counts of [`Op::send_len`] and [`Op::recv_len`]
/// at the addresses it is given, in the order of the stream it is given,
/// and to report every failure as an `Err`.
pub unsafe trait Engine<B: Backend>: Send + Sync + Sized + 'static {
    /// The engine's name and version (`"NCCL 2.28.5"`).
    fn name(&self) -> String;

    /// How this communicator's calls wait: `Bounded` for a non-blocking
    /// NCCL or RCCL communicator and for the host engine (whose waits the
    /// store's timeout bounds), `Blocking` otherwise (also for a `Bounded`
    /// request on a library older than 2.14).
    fn mode(&self) -> CallMode;

    /// Loads what the engine needs on `device` (NCCL's or RCCL's library)
    /// and returns the engine's name and version, as [`name`](Self::name)
    /// will: the ranks of one communicator must agree on it.
    fn prepare(device: &Arc<B::Device>) -> Result<String>;

    /// A new id naming one communicator: rank 0 makes it, every rank
    /// passes it to [`init_with_id`](Self::init_with_id).
    fn new_id(device: &Arc<B::Device>) -> Result<Vec<u8>>;

    /// Joins `device` to a group of `size` ranks as `rank`, with the id
    /// rank 0 made, its library calls made in `mode`; waits up to `timeout`
    /// for the other ranks, then fails (a `Timeout`, or the host engine's
    /// store timeout), except NCCL's and RCCL's in `CallMode::Blocking`, or
    /// on a library without `ncclCommInitRankConfig`, which wait without a
    /// bound (`nccl/init.rs`). The engine's timeout
    /// ([`set_timeout`](Self::set_timeout)) starts as `timeout`.
    fn init_with_id(
        device: &Arc<B::Device>,
        rank: usize,
        size: usize,
        id: &[u8],
        timeout: std::time::Duration,
        mode: CallMode,
    ) -> Result<Self>;

    /// [`init_with_id`](Self::init_with_id) while the other ranks may
    /// fail: `peer_failed` is the failure another rank reported (a
    /// `PeerInitFailed`), else `Ok`. An engine that waits for the others
    /// inside its library (NCCL's and RCCL's non-blocking init,
    /// `nccl/init.rs`) asks it as it waits, and gives up with that error;
    /// the default does not ask.
    fn init_watched(
        device: &Arc<B::Device>,
        rank: usize,
        size: usize,
        id: &[u8],
        timeout: std::time::Duration,
        mode: CallMode,
        peer_failed: &dyn Fn() -> Result<()>,
    ) -> Result<Self> {
        let _ = peer_failed;
        Self::init_with_id(device, rank, size, id, timeout, mode)
    }

    /// One communicator per device of a group driven by this process; rank
    /// `i` is `devices[i]`. As [`init_with_id`](Self::init_with_id) for `timeout`.
    fn init_all(devices: &[Arc<B::Device>], timeout: std::time::Duration, mode: CallMode) -> Result<Vec<Self>>;

    /// Whether the engine can run `op` (its element type and reduction).
    fn supports(&self, op: &Op) -> Result<()>;

    /// Enqueues `op` on `stream`.
    ///
    /// # Safety
    /// `send` and `recv` hold [`Op::send_len`] and [`Op::recv_len`]
    /// elements of `op.dtype` on this communicator's device (addresses of
    /// host memory on the host backend) and stay valid until `stream` has
    /// passed this point; `op` was checked with [`supports`](Self::supports)
    /// and its root or peer is below the group's size.
    unsafe fn enqueue(&self, op: &Op, send: u64, recv: u64, stream: &Stream<B>) -> Result<()>;

    /// Begins a group of calls on this thread; they run at [`group_end`](Self::group_end).
    fn group_start() -> Result<()>;

    /// Ends the group: its calls are enqueued together.
    fn group_end() -> Result<()>;

    /// Ends the group after its function panicked: an engine that can drop
    /// the group's calls drops them; the others end it as
    /// [`group_end`](Self::group_end) does. Never panics.
    fn group_abandon() {
        let _ = Self::group_end();
    }

    /// How long a call of the engine may wait for other ranks on the host
    /// (the host engine's store reads; NCCL's and RCCL's calls that stay
    /// `ncclInProgress`, such as a first connection to a peer).
    fn set_timeout(&self, timeout: std::time::Duration) -> Result<()>;

    /// Stops every collective of this communicator; it cannot be used again.
    fn abort(&self) -> Result<()>;

    /// Whether the engine aborted the communicator, by [`abort`](Self::abort)
    /// or itself (a call that timed out); later calls are refused.
    fn is_aborted(&self) -> bool {
        false
    }

    /// The engine's asynchronous error, if it reported one.
    fn async_error(&self) -> Result<()>;

    /// The engine's own split (NCCL's and RCCL's `ncclCommSplit`): ranks
    /// of one `color` form a communicator, ordered by `key` and then by
    /// their rank here; `None` for `color` takes this rank in none. `None`
    /// where the engine has no split of its own: the communicator then
    /// meets the other ranks through its store (`regroup.rs`).
    fn split(&self, _color: Option<u32>, _key: i32) -> Option<Result<Option<Regrouped<Self>>>> {
        None
    }

    /// The engine's own shrink (NCCL's `ncclCommShrink`, 2.27 on) of this
    /// group of `size`: every rank but `exclude` (sorted, without this
    /// rank), in their order here; `after_error` when the communicator
    /// failed or was aborted. `None` where the engine has none, as for
    /// [`split`](Self::split).
    fn shrink(&self, _size: usize, _exclude: &[usize], _after_error: bool) -> Option<Result<Regrouped<Self>>> {
        None
    }

    /// The store the engine itself meets through, and its key (the host
    /// engine's), for splits and shrinks of a communicator made without one.
    fn store(&self) -> Option<(&super::TcpStore, &str)> {
        None
    }

    /// Registers `bytes` at `address` of this communicator's device with
    /// the engine, for collectives that skip its staging copies (NCCL's
    /// `ncclCommRegister`); the handle to [`deregister`](Self::deregister).
    /// 0 where the engine keeps nothing (the host engine, a library
    /// without registration).
    fn register(&self, _address: u64, _bytes: usize) -> Result<usize> {
        Ok(0)
    }

    /// Releases a [`register`](Self::register)ation; a 0 handle is nothing.
    fn deregister(&self, _handle: usize) -> Result<()> {
        Ok(())
    }
}

/// A communicator an engine made from another one, with this rank's
/// place in it.
pub struct Regrouped<E> {
    /// The new communicator.
    pub engine: E,
    /// This rank in it.
    pub rank: usize,
    /// Its number of ranks.
    pub size: usize,
}

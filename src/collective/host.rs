//! The host backend's collective engine: ranks (threads or processes)
//! exchange their buffers through the job's [`TcpStore`] and each rank
//! computes the result itself. It is meant for testing the API and
//! programs without a GPU, not for speed: every byte goes through rank 0's
//! store.
//!
//! Each collective is one round: rank `r` sets `KEY/SEQ/r` to its call's
//! description and its data, reads every rank's entry, checks that the
//! descriptions agree ([`CollectiveErrorKind::Mismatch`] otherwise, on every
//! rank), and the last rank to finish reading deletes the round's keys.
//! A send sets `KEY/p2p/FROM-TO/N`, which the receive reads and deletes.
//!
//! A call waits for the stream's earlier work, then runs on the calling
//! thread; inside a group, calls are queued and run together, one thread
//! each, when the group ends (or dropped, when the group's function panics).

use std::cell::RefCell;
use std::collections::HashMap;
use std::net::ToSocketAddrs;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use half::{bf16, f16};

use crate::array::dtype::DType;
use crate::backend::host::{Host, HostDevice};
use crate::backend::{address_to_usize, Device, Stream};
use crate::error::{CollectiveErrorKind, Error, Result};

use super::engine::{sealed, CallMode, CollectiveBackend, Engine, Op, OpKind, ReduceOp};
use super::TcpStore;

impl sealed::Sealed for Host {}

impl CollectiveBackend for Host {
    type Engine = HostEngine;
}

/// One rank's host communicator.
pub struct HostEngine {
    inner: Arc<Inner>,
}

struct Inner {
    store: TcpStore,
    key: String,
    rank: usize,
    size: usize,
    /// Rounds of collectives so far.
    seq: Mutex<u64>,
    /// Messages sent to and received from each peer so far.
    sent: Mutex<HashMap<usize, u64>>,
    received: Mutex<HashMap<usize, u64>>,
    aborted: AtomicBool,
    /// Rank 0 of a group that met through an id: its connection keeps the
    /// group's store running, so its drop waits for the others to leave.
    hosts_store: bool,
}

impl Drop for Inner {
    /// Leaving: every rank counts itself out; the rank that runs the store
    /// waits (at most 10 s) for the others, which may still be reading its
    /// last messages.
    fn drop(&mut self) {
        if self.aborted.load(Ordering::Acquire) {
            return;
        }
        let key = format!("{}/departed", self.key);
        let Ok(mut left) = self.store.add(&key, 1) else { return };
        if !self.hosts_store {
            return;
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while usize::try_from(left).unwrap_or(0) < self.size && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(1));
            let Ok(now) = self.store.add(&key, 0) else { return };
            left = now;
        }
    }
}

/// A call queued in a group: its communicator (by address), whether it
/// only sends (writes to the store without waiting), and the call.
struct Queued {
    comm: usize,
    sends: bool,
    call: Box<dyn FnOnce() -> Result<()> + Send>,
}

/// Stores rank 0 hosts for ids from `new_id`, until its `init_with_id`.
fn hosted() -> std::sync::MutexGuard<'static, HashMap<String, TcpStore>> {
    static HOSTED: std::sync::OnceLock<Mutex<HashMap<String, TcpStore>>> = std::sync::OnceLock::new();
    HOSTED.get_or_init(Mutex::default).lock().unwrap_or_else(|p| p.into_inner())
}

/// This thread's open group.
struct Group {
    /// Its calls, in order.
    calls: Vec<Queued>,
    /// For each open level, how many calls were queued when it began.
    starts: Vec<usize>,
}

thread_local! {
    static GROUP: RefCell<Group> = const { RefCell::new(Group { calls: Vec::new(), starts: Vec::new() }) };
}

fn error(rank: usize, kind: CollectiveErrorKind, reason: String) -> Error {
    Error::Collective { engine: "host".into(), rank: Some(rank), kind, reason }
}

/// The element types a host reduction computes on: NCCL's.
fn reducible(dtype: DType) -> bool {
    matches!(
        dtype,
        DType::Int8
            | DType::UInt8
            | DType::Int32
            | DType::UInt32
            | DType::Int64
            | DType::UInt64
            | DType::Float16
            | DType::BFloat16
            | DType::Float32
            | DType::Float64
    )
}

/// `acc = acc (op) x`, element by element, on native-endian bytes.
fn combine(dtype: DType, op: ReduceOp, acc: &mut [u8], x: &[u8]) {
    macro_rules! ints {
        ($t:ty) => {{
            const W: usize = std::mem::size_of::<$t>();
            for (a, b) in acc.chunks_exact_mut(W).zip(x.chunks_exact(W)) {
                let (p, q) = (
                    <$t>::from_ne_bytes(a.try_into().unwrap_or_default()),
                    <$t>::from_ne_bytes(b.try_into().unwrap_or_default()),
                );
                let r = match op {
                    ReduceOp::Sum | ReduceOp::Avg => p.wrapping_add(q),
                    ReduceOp::Prod => p.wrapping_mul(q),
                    ReduceOp::Max => p.max(q),
                    ReduceOp::Min => p.min(q),
                };
                a.copy_from_slice(&r.to_ne_bytes());
            }
        }};
    }
    macro_rules! floats {
        ($t:ty, $to:expr, $from:expr) => {{
            const W: usize = std::mem::size_of::<$t>();
            for (a, b) in acc.chunks_exact_mut(W).zip(x.chunks_exact(W)) {
                let p: f64 = $to(<$t>::from_ne_bytes(a.try_into().unwrap_or_default()));
                let q: f64 = $to(<$t>::from_ne_bytes(b.try_into().unwrap_or_default()));
                let r = match op {
                    ReduceOp::Sum | ReduceOp::Avg => p + q,
                    ReduceOp::Prod => p * q,
                    ReduceOp::Max => p.max(q),
                    ReduceOp::Min => p.min(q),
                };
                let r: $t = $from(r);
                a.copy_from_slice(&r.to_ne_bytes());
            }
        }};
    }
    match dtype {
        DType::Int8 => ints!(i8),
        DType::UInt8 => ints!(u8),
        DType::Int32 => ints!(i32),
        DType::UInt32 => ints!(u32),
        DType::Int64 => ints!(i64),
        DType::UInt64 => ints!(u64),
        DType::Float16 => floats!(f16, |v: f16| f64::from(v), f16::from_f64),
        DType::BFloat16 => floats!(bf16, |v: bf16| f64::from(v), bf16::from_f64),
        #[allow(clippy::cast_possible_truncation)]
        DType::Float32 => floats!(f32, f64::from, |v: f64| v as f32),
        DType::Float64 => floats!(f64, |v| v, |v| v),
        _ => {}
    }
}

/// Divides every element by `n` (the mean of [`ReduceOp::Avg`]).
fn divide(dtype: DType, acc: &mut [u8], n: usize) {
    macro_rules! by {
        ($t:ty, $div:expr) => {{
            const W: usize = std::mem::size_of::<$t>();
            for a in acc.chunks_exact_mut(W) {
                let v = <$t>::from_ne_bytes(a.try_into().unwrap_or_default());
                let r: $t = $div(v);
                a.copy_from_slice(&r.to_ne_bytes());
            }
        }};
    }
    // The group's size fits every integer type's range where it matters:
    // a group larger than a type's maximum divides by its maximum.
    macro_rules! int_n {
        ($t:ty) => {
            <$t>::try_from(n).unwrap_or(<$t>::MAX)
        };
    }
    #[allow(clippy::cast_precision_loss)]
    let nf = n as f64;
    match dtype {
        DType::Int8 => by!(i8, |v: i8| v / int_n!(i8)),
        DType::UInt8 => by!(u8, |v: u8| v / int_n!(u8)),
        DType::Int32 => by!(i32, |v: i32| v / int_n!(i32)),
        DType::UInt32 => by!(u32, |v: u32| v / int_n!(u32)),
        DType::Int64 => by!(i64, |v: i64| v / int_n!(i64)),
        DType::UInt64 => by!(u64, |v: u64| v / int_n!(u64)),
        DType::Float16 => by!(f16, |v: f16| f16::from_f64(f64::from(v) / nf)),
        DType::BFloat16 => by!(bf16, |v: bf16| bf16::from_f64(f64::from(v) / nf)),
        #[allow(clippy::cast_possible_truncation)]
        DType::Float32 => by!(f32, |v: f32| (f64::from(v) / nf) as f32),
        DType::Float64 => by!(f64, |v: f64| v / nf),
        _ => {}
    }
}

/// `[description length: u32][description][data]`.
fn message(description: &str, data: &[u8]) -> Vec<u8> {
    let len = u32::try_from(description.len()).unwrap_or(u32::MAX);
    let mut m = Vec::with_capacity(4 + description.len() + data.len());
    m.extend_from_slice(&len.to_le_bytes());
    m.extend_from_slice(description.as_bytes());
    m.extend_from_slice(data);
    m
}

/// The description and the data of a [`message`].
fn parse(m: &[u8]) -> Option<(&str, &[u8])> {
    let len = usize::try_from(u32::from_le_bytes(m.get(..4)?.try_into().ok()?)).ok()?;
    let text = std::str::from_utf8(m.get(4..4 + len)?).ok()?;
    Some((text, &m[4 + len..]))
}

impl Inner {
    /// A rank's engine over its own connection to the group's store.
    fn engine(store: TcpStore, key: String, rank: usize, size: usize, hosts_store: bool) -> HostEngine {
        HostEngine {
            inner: Arc::new(Inner {
                store,
                key,
                rank,
                size,
                seq: Mutex::new(0),
                sent: Mutex::default(),
                received: Mutex::default(),
                aborted: AtomicBool::new(false),
                hosts_store,
            }),
        }
    }

    fn error(&self, kind: CollectiveErrorKind, reason: String) -> Error {
        error(self.rank, kind, reason)
    }

    fn bad_message(&self, key: &str) -> Error {
        self.error(CollectiveErrorKind::Engine, format!("the store's entry {key:?} is not a host collective's message"))
    }

    /// Refuses a message whose data is not the `want` bytes its description says.
    fn check_length(&self, key: &str, description: &str, data: &[u8], want: usize) -> Result<()> {
        if data.len() == want {
            return Ok(());
        }
        Err(self.error(
            CollectiveErrorKind::Engine,
            format!(
                "the store's entry {key:?} ({description}) holds {} bytes of data, not {want}: the message was cut \
                 short or forged",
                data.len()
            ),
        ))
    }

    /// `elems` elements of `op`'s type, in bytes.
    fn bytes(&self, op: &Op, elems: usize) -> Result<usize> {
        elems.checked_mul(op.dtype.itemsize()).ok_or_else(|| {
            self.error(CollectiveErrorKind::Engine, format!("{op}: {elems} elements overflow the address space"))
        })
    }

    /// Runs `op`, reading `send` and writing `recv` (host addresses).
    ///
    /// # Safety
    /// As [`Engine::enqueue`]'s: the ranges are valid host memory.
    unsafe fn run(&self, op: Op, send: u64, recv: u64) -> Result<()> {
        if self.aborted.load(Ordering::Acquire) {
            return Err(self.error(CollectiveErrorKind::Aborted, format!("{op} on an aborted communicator")));
        }
        let send_bytes = self.bytes(&op, op.send_len(self.size))?;
        let recv_bytes = self.bytes(&op, op.recv_len(self.size))?;
        let sends = match op.kind {
            OpKind::Broadcast { root } => root == self.rank,
            OpKind::Recv { .. } => false,
            _ => true,
        };
        let data: &[u8] = if sends && send_bytes > 0 {
            // SAFETY: `send` holds `send_len` elements (the caller's promise).
            unsafe { std::slice::from_raw_parts(address_to_usize(send) as *const u8, send_bytes) }
        } else {
            &[]
        };
        let description = op.to_string();
        let result: Option<Vec<u8>> = match op.kind {
            OpKind::Send { peer } => {
                let n = Self::next(&self.sent, peer);
                let key = format!("{}/p2p/{}-{peer}/{n}", self.key, self.rank);
                let what = format!("{} {}", op.count, op.dtype.name());
                self.store.set(&key, &message(&what, data))?;
                None
            }
            OpKind::Recv { peer } => {
                let n = Self::next(&self.received, peer);
                let key = format!("{}/p2p/{peer}-{}/{n}", self.key, self.rank);
                let m = self.store.get(&key)?;
                self.store.delete(&key)?;
                let (what, payload) = parse(&m).ok_or_else(|| self.bad_message(&key))?;
                let expected = format!("{} {}", op.count, op.dtype.name());
                if what != expected {
                    return Err(self.error(
                        CollectiveErrorKind::Mismatch,
                        format!("this rank receives {expected} from rank {peer}, which sent {what}"),
                    ));
                }
                self.check_length(&key, what, payload, recv_bytes)?;
                Some(payload.to_vec())
            }
            _ => Some(self.round(&op, &description, data)?).filter(|_| match op.kind {
                OpKind::Reduce { root, .. } => root == self.rank,
                _ => true,
            }),
        };
        if let Some(out) = result {
            if out.len() != recv_bytes {
                return Err(self.error(
                    CollectiveErrorKind::Engine,
                    format!("{op} computed {} bytes for a receive buffer of {recv_bytes}", out.len()),
                ));
            }
            if recv_bytes > 0 {
                // SAFETY: `recv` holds `recv_len` elements (the caller's
                // promise); `out` is a separate vector, so the ranges may
                // overlap `send` (in place).
                unsafe { std::ptr::copy(out.as_ptr(), address_to_usize(recv) as *mut u8, recv_bytes) };
            }
        }
        Ok(())
    }

    fn next(counters: &Mutex<HashMap<usize, u64>>, peer: usize) -> u64 {
        let mut c = counters.lock().unwrap_or_else(|p| p.into_inner());
        let n = c.entry(peer).or_insert(0);
        *n += 1;
        *n - 1
    }

    /// One round of a collective: every rank's message, checked and combined.
    fn round(&self, op: &Op, description: &str, data: &[u8]) -> Result<Vec<u8>> {
        let seq = {
            let mut s = self.seq.lock().unwrap_or_else(|p| p.into_inner());
            *s += 1;
            *s - 1
        };
        let prefix = format!("{}/{seq}", self.key);
        self.store.set(&format!("{prefix}/{}", self.rank), &message(description, data))?;
        let mut messages = Vec::with_capacity(self.size);
        for r in 0..self.size {
            let key = format!("{prefix}/{r}");
            messages
                .push((key.clone(), if r == self.rank { message(description, data) } else { self.store.get(&key)? }));
        }
        if self.store.add(&format!("{prefix}/read"), 1)? == i64::try_from(self.size).unwrap_or(i64::MAX) {
            for (key, _) in &messages {
                self.store.delete(key)?;
            }
            self.store.delete(&format!("{prefix}/read"))?;
        }
        let mut parts = Vec::with_capacity(self.size);
        let mut differ = Vec::new();
        let block = self.bytes(op, op.count)?;
        let sent = self.bytes(op, op.send_len(self.size))?;
        for (r, (key, m)) in messages.iter().enumerate() {
            let (what, payload) = parse(m).ok_or_else(|| self.bad_message(key))?;
            if what != description {
                differ.push(format!("rank {r} called {what}"));
                continue;
            }
            // A broadcast's data comes from its root alone.
            let want = match op.kind {
                OpKind::Broadcast { root } if r != root => 0,
                _ => sent,
            };
            self.check_length(key, what, payload, want)?;
            parts.push(payload);
        }
        if !differ.is_empty() {
            return Err(self.error(
                CollectiveErrorKind::Mismatch,
                format!(
                    "this rank called {description}, but {}; every rank must call the same collectives in the same order",
                    differ.join(", ")
                ),
            ));
        }
        let part = |r: usize| parts.get(r).copied().ok_or_else(|| self.bad_message(&format!("{prefix}/{r}")));
        Ok(match op.kind {
            OpKind::Broadcast { root } => part(root)?.to_vec(),
            OpKind::AllGather => parts.concat(),
            OpKind::AllReduce(how) | OpKind::Reduce { op: how, .. } | OpKind::ReduceScatter(how) => {
                let mut acc = part(0)?.to_vec();
                for p in parts.iter().skip(1) {
                    combine(op.dtype, how, &mut acc, p);
                }
                if how == ReduceOp::Avg {
                    divide(op.dtype, &mut acc, self.size);
                }
                if matches!(op.kind, OpKind::ReduceScatter(_)) {
                    let mine = self.rank.checked_mul(block).and_then(|at| acc.get(at..at.checked_add(block)?));
                    mine.ok_or_else(|| self.bad_message(&format!("{prefix}/{}", self.rank)))?.to_vec()
                } else {
                    acc
                }
            }
            OpKind::Send { .. } | OpKind::Recv { .. } => Vec::new(),
        })
    }
}

// SAFETY: `run` touches only `send_len`/`recv_len` elements at the given
// addresses, after the stream's earlier work and before `enqueue` returns
// (or, in a group, before `group_end` returns; a group abandoned by a panic
// drops its calls unrun), and reports every failure as an `Err`.
unsafe impl Engine<Host> for HostEngine {
    fn name(&self) -> String {
        "host".into()
    }

    fn mode(&self) -> CallMode {
        CallMode::Bounded
    }

    fn prepare(_device: &Arc<HostDevice>) -> Result<String> {
        Ok("host".into())
    }

    fn new_id(_device: &Arc<HostDevice>) -> Result<Vec<u8>> {
        // Rank 0 hosts the group's own store; the id is its address (on
        // `GPUPORT_MASTER_ADDR` when set, so that other machines reach it)
        // and a name. The store waits in `HOSTED` for rank 0's init.
        let host = std::env::var("GPUPORT_MASTER_ADDR").ok().filter(|a| !a.is_empty());
        let ip = host.as_deref().unwrap_or("127.0.0.1");
        let addr = (ip, 0).to_socket_addrs().ok().and_then(|mut a| a.next()).ok_or_else(|| {
            error(0, CollectiveErrorKind::Engine, format!("GPUPORT_MASTER_ADDR={ip:?} does not resolve"))
        })?;
        let store = TcpStore::host(addr, super::communicator::timeout_from_env()?)?;
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let id =
            format!("gpuport-host {} {}-{}", store.addr(), std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
        hosted().insert(id.clone(), store);
        Ok(id.into_bytes())
    }

    fn init_with_id(
        _device: &Arc<HostDevice>,
        rank: usize,
        size: usize,
        id: &[u8],
        timeout: std::time::Duration,
        _mode: CallMode,
    ) -> Result<Self> {
        let bad = || Error::InvalidArgument {
            name: "id",
            reason: "not a host communicator's id (from Communicator::new_id on the host device)".into(),
        };
        let text = std::str::from_utf8(id).map_err(|_| bad())?;
        let mut parts = text.split(' ');
        let (Some("gpuport-host"), Some(addr), Some(_name), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(bad());
        };
        let addr: std::net::SocketAddr = addr.parse().map_err(|_| bad())?;
        // Rank 0 made the id and owns the store: its connection keeps the
        // server running (other ranks may be threads of the same process).
        let own = if rank == 0 { hosted().remove(text) } else { None };
        let hosts_store = own.is_some();
        let store = match own {
            Some(own) => own.reconnect()?,
            None => TcpStore::connect(addr, timeout)?,
        };
        store.set_timeout(timeout)?;
        // Every rank's arrival: the communicator exists once all have come.
        store.barrier_as(&format!("{text}/init"), rank, size)?;
        Ok(Inner::engine(store, text.to_string(), rank, size, hosts_store))
    }

    fn init_all(devices: &[Arc<HostDevice>], timeout: std::time::Duration, _mode: CallMode) -> Result<Vec<Self>> {
        let store = TcpStore::host("127.0.0.1:0".parse().expect("a literal address"), timeout)?;
        let size = devices.len();
        (0..size)
            .map(|rank| Ok(Inner::engine(store.reconnect()?, "gpuport/communicator/all".into(), rank, size, false)))
            .collect()
    }

    fn supports(&self, op: &Op) -> Result<()> {
        match op.kind.reduction() {
            Some(how) if !reducible(op.dtype) => Err(Error::InvalidArgument {
                name: "dtype",
                reason: format!(
                    "{op}: {} reductions compute on int8, uint8, int32, uint32, int64, uint64, float16, bfloat16, \
                     float32 and float64 (NCCL's types); broadcast, all_gather, send and recv take any type",
                    how.name()
                ),
            }),
            _ => Ok(()),
        }
    }

    unsafe fn enqueue(&self, op: &Op, send: u64, recv: u64, stream: &Stream<Host>) -> Result<()> {
        HostDevice::open(0)?.synchronize(stream)?;
        let inner = self.inner.clone();
        let op = *op;
        let comm = Arc::as_ptr(&inner) as usize;
        // SAFETY: the caller's promise, passed on; in a group the buffers
        // stay valid until `group_end` ran the call.
        let call = move || unsafe { inner.run(op, send, recv) };
        let mut call = Some(call);
        GROUP.with(|g| {
            let mut g = g.borrow_mut();
            if !g.starts.is_empty() {
                if let Some(c) = call.take() {
                    let sends = matches!(op.kind, OpKind::Send { .. });
                    g.calls.push(Queued { comm, sends, call: Box::new(c) });
                }
            }
        });
        match call {
            Some(c) => c(),
            None => Ok(()),
        }
    }

    fn group_start() -> Result<()> {
        GROUP.with(|g| {
            let mut g = g.borrow_mut();
            let queued = g.calls.len();
            g.starts.push(queued);
        });
        Ok(())
    }

    /// Drops the calls queued since this level began: its function
    /// panicked, and the buffers they address may be gone.
    fn group_abandon() {
        let dropped = GROUP.with(|g| {
            let mut g = g.borrow_mut();
            let start = g.starts.pop().unwrap_or(0).min(g.calls.len());
            g.calls.split_off(start)
        });
        drop(dropped);
    }

    fn group_end() -> Result<()> {
        let calls = GROUP.with(|g| {
            let mut g = g.borrow_mut();
            g.starts.pop();
            if g.starts.is_empty() {
                std::mem::take(&mut g.calls)
            } else {
                Vec::new()
            }
        });
        // Calls of different communicators (ranks driven by this thread)
        // wait for each other's messages: one thread per communicator. One
        // communicator's calls share its store connection, which a waiting
        // read holds: they run in turn, sends first, so a receive never
        // holds the connection that the matching send of this rank needs.
        let mut per_comm: Vec<(usize, Vec<Queued>)> = Vec::new();
        for q in calls {
            match per_comm.iter_mut().find(|(c, _)| *c == q.comm) {
                Some((_, list)) => list.push(q),
                None => per_comm.push((q.comm, vec![q])),
            }
        }
        std::thread::scope(|s| {
            let handles: Vec<_> = per_comm
                .into_iter()
                .map(|(_, mut list)| {
                    list.sort_by_key(|q| !q.sends);
                    s.spawn(move || list.into_iter().try_for_each(|q| (q.call)()))
                })
                .collect();
            handles.into_iter().try_for_each(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(error(0, CollectiveErrorKind::Engine, "a grouped call panicked".into())))
            })
        })
    }

    fn set_timeout(&self, timeout: std::time::Duration) -> Result<()> {
        self.inner.store.set_timeout(timeout)
    }

    fn abort(&self) -> Result<()> {
        self.inner.aborted.store(true, Ordering::Release);
        Ok(())
    }

    fn is_aborted(&self) -> bool {
        self.inner.aborted.load(Ordering::Acquire)
    }

    fn async_error(&self) -> Result<()> {
        Ok(())
    }

    fn store(&self) -> Option<(&TcpStore, &str)> {
        Some((&self.inner.store, &self.inner.key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rank 1 of 2 on a fresh store under `key`, and a connection to that store.
    fn rank_one(key: &str) -> (HostEngine, TcpStore) {
        let store = TcpStore::host("127.0.0.1:0".parse().unwrap(), std::time::Duration::from_secs(5)).unwrap();
        let engine = Inner::engine(store.reconnect().unwrap(), key.into(), 1, 2, false);
        (engine, store)
    }

    /// Runs `op` on rank 1 with `send`, into a zeroed receive buffer: its result and the buffer.
    fn run_rank_one(engine: &HostEngine, op: Op, send: &[u8]) -> (Result<()>, Vec<u8>) {
        let mut recv = vec![0u8; op.recv_len(2) * op.dtype.itemsize()];
        assert_eq!(send.len(), op.send_len(2) * op.dtype.itemsize());
        // SAFETY: both vectors hold what `op` reads and writes, and outlive the call.
        let r = unsafe { engine.inner.run(op, send.as_ptr() as u64, recv.as_mut_ptr() as u64) };
        (r, recv)
    }

    fn is_engine_error(r: &Result<()>) -> bool {
        matches!(r, Err(Error::Collective { kind: CollectiveErrorKind::Engine, .. }))
    }

    #[test]
    fn a_short_message_with_the_right_description_is_an_error_not_a_skip_or_a_panic() {
        for kind in [OpKind::AllReduce(ReduceOp::Sum), OpKind::ReduceScatter(ReduceOp::Sum), OpKind::AllGather] {
            let op = Op { kind, dtype: DType::Int32, count: 4 };
            let (engine, store) = rank_one("short");
            // Rank 0's entry of round 0: the right description, 4 bytes of data.
            store.set("short/0/0", &message(&op.to_string(), &[1, 0, 0, 0])).unwrap();
            let send = vec![1u8; op.send_len(2) * 4];
            let (r, recv) = run_rank_one(&engine, op, &send);
            assert!(is_engine_error(&r), "{op}: {r:?}");
            assert!(format!("{r:?}").contains("holds 4 bytes"), "{op}: {r:?}");
            assert!(recv.iter().all(|&b| b == 0), "{op}: the receive buffer was written");
        }
    }

    #[test]
    fn a_broadcast_root_must_send_the_whole_buffer() {
        let op = Op { kind: OpKind::Broadcast { root: 0 }, dtype: DType::Float32, count: 4 };
        let (engine, store) = rank_one("bcast");
        store.set("bcast/0/0", &message(&op.to_string(), &[0; 12])).unwrap();
        let (r, recv) = run_rank_one(&engine, op, &[0; 16]);
        assert!(is_engine_error(&r) && format!("{r:?}").contains("holds 12 bytes"), "{r:?}");
        assert_eq!(recv, [0; 16]);
    }

    #[test]
    fn a_short_message_to_a_receive_is_an_error() {
        let op = Op { kind: OpKind::Recv { peer: 0 }, dtype: DType::UInt8, count: 16 };
        let (engine, store) = rank_one("p2p");
        store.set("p2p/p2p/0-1/0", &message("16 uint8", &[9; 3])).unwrap();
        let (r, recv) = run_rank_one(&engine, op, &[]);
        assert!(is_engine_error(&r) && format!("{r:?}").contains("holds 3 bytes"), "{r:?}");
        assert_eq!(recv, [0; 16]);
    }
}

//! The listening side of [`TcpStore`](super::TcpStore), owned by rank 0,
//! and the wire format both sides speak.
//!
//! Anything that reaches the port can talk to the server, so it trusts no
//! length it reads: a value is read as its bytes arrive, never allocated
//! ahead from its header; once a request's first byte has come, the rest
//! must come within [`Limits::request_time`] plus one second per
//! [`Limits::min_rate`] bytes of its value, and replies are written under
//! the same bound; at most [`Limits::connections`] connections are served
//! at once (one thread each), later ones are closed at once; the values
//! held and being read together stay under [`Limits::stored_bytes`] (a
//! request that would pass it closes its connection). A connection may
//! stay idle between requests for as long as it likes: ranks are idle
//! between collectives.

use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::store_error;
use crate::error::{Result, StoreErrorKind};

pub(super) const SET: u8 = 1;
pub(super) const GET: u8 = 2;
pub(super) const ADD: u8 = 3;
pub(super) const DELETE: u8 = 4;
pub(super) const MAX_KEY: usize = 64 << 10;
pub(super) const MAX_VALUE: u64 = 1 << 30;

/// How much one value's read grows its buffer at a time.
const CHUNK: usize = 64 << 10;

/// Stack of a connection's thread: it only parses and copies.
const PEER_STACK: usize = 256 << 10;

/// What the server allows its clients.
#[derive(Clone, Copy, Debug)]
pub(super) struct Limits {
    /// Connections served at once.
    pub connections: usize,
    /// How long a request, or a reply, may take besides its value.
    pub request_time: Duration,
    /// The slowest a value may arrive or leave, in bytes per second.
    pub min_rate: u64,
    /// The most bytes of values held and being read, all keys together.
    pub stored_bytes: u64,
}

impl Limits {
    /// The server's defaults.
    pub(super) const DEFAULT: Limits =
        Limits { connections: 4096, request_time: Duration::from_secs(60), min_rate: 1 << 20, stored_bytes: 4 << 30 };

    /// When a transfer of `bytes` that starts now must be done.
    fn deadline(&self, bytes: u64) -> Option<Instant> {
        let extra = Duration::from_secs(bytes / self.min_rate.max(1));
        self.request_time.checked_add(extra).and_then(|t| Instant::now().checked_add(t))
    }
}

#[derive(Default)]
struct Table {
    values: Mutex<HashMap<String, Vec<u8>>>,
    changed: Condvar,
    stopping: AtomicBool,
    /// Bytes of the values held and being read, against `Limits::stored_bytes`.
    bytes: AtomicU64,
}

impl Table {
    /// Counts `n` more bytes if that stays within `cap`; whether it did.
    fn reserve(&self, n: u64, cap: u64) -> bool {
        self.bytes.fetch_update(Ordering::AcqRel, Ordering::Acquire, |b| b.checked_add(n).filter(|&t| t <= cap)).is_ok()
    }

    fn release(&self, n: impl TryInto<u64>) {
        // Lengths of values in memory: they fit u64.
        self.bytes.fetch_sub(n.try_into().unwrap_or(u64::MAX), Ordering::AcqRel);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<u8>>> {
        // A panic under the lock leaves a whole map: every insert is one call.
        self.values.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The connections being served: a clone of each, to shut it down when
/// the server stops.
#[derive(Default)]
struct Peers {
    open: Mutex<HashMap<u64, TcpStream>>,
    next: AtomicU64,
    count: AtomicUsize,
}

/// Removes a served connection from [`Peers`] when its thread ends.
struct Served<'a> {
    peers: &'a Peers,
    id: u64,
}

impl Drop for Served<'_> {
    fn drop(&mut self) {
        self.peers.open.lock().unwrap_or_else(|p| p.into_inner()).remove(&self.id);
        self.peers.count.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The listening side, owned by rank 0's [`TcpStore`](super::TcpStore); stops on drop.
pub(super) struct Server {
    pub(super) addr: SocketAddr,
    table: Arc<Table>,
    accept: Option<JoinHandle<()>>,
    peers: Arc<Peers>,
}

impl Server {
    pub(super) fn start(addr: SocketAddr, limits: Limits) -> Result<Server> {
        let listener = TcpListener::bind(addr).map_err(|e| {
            store_error(
                addr,
                StoreErrorKind::Bind,
                format!("rank 0 cannot listen there ({e}); choose another GPUPORT_MASTER_PORT, or stop what holds it"),
            )
        })?;
        let addr = listener.local_addr().map_err(|e| store_error(addr, StoreErrorKind::Bind, e.to_string()))?;
        let table = Arc::new(Table::default());
        let peers = Arc::new(Peers::default());
        let (t, p) = (table.clone(), peers.clone());
        let accept = std::thread::Builder::new()
            .name("gpuport-store".into())
            .spawn(move || accept_loop(&listener, &t, &p, limits))
            .map_err(|e| store_error(addr, StoreErrorKind::Bind, format!("cannot start the server thread: {e}")))?;
        Ok(Server { addr, table, accept: Some(accept), peers })
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.table.stopping.store(true, Ordering::Release);
        self.table.changed.notify_all();
        for peer in self.peers.open.lock().unwrap_or_else(|p| p.into_inner()).values() {
            let _ = peer.shutdown(Shutdown::Both);
        }
        // Wakes the accept loop, which then sees `stopping`.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
    }
}

fn accept_loop(listener: &TcpListener, table: &Arc<Table>, peers: &Arc<Peers>, limits: Limits) {
    for conn in listener.incoming() {
        if table.stopping.load(Ordering::Acquire) {
            return;
        }
        let Ok(conn) = conn else { continue };
        // Over the limit: closed at once (dropped), without a thread.
        if peers.count.load(Ordering::Acquire) >= limits.connections {
            continue;
        }
        let Ok(clone) = conn.try_clone() else { continue };
        let _ = conn.set_nodelay(true);
        let id = peers.next.fetch_add(1, Ordering::Relaxed);
        peers.count.fetch_add(1, Ordering::AcqRel);
        peers.open.lock().unwrap_or_else(|p| p.into_inner()).insert(id, clone);
        let (table, served) = (table.clone(), peers.clone());
        let spawned =
            std::thread::Builder::new().name("gpuport-store-peer".into()).stack_size(PEER_STACK).spawn(move || {
                let _served = Served { peers: &served, id };
                serve(conn, &table, limits);
            });
        if spawned.is_err() {
            // The closure, and with it the connection, was dropped unrun.
            peers.open.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
            peers.count.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// Answers one rank's requests until it disconnects, breaks the protocol
/// or the limits, or the server stops.
fn serve(mut conn: TcpStream, table: &Table, limits: Limits) {
    // Each request's value arrives counted in `table.bytes`: a SET keeps it
    // there with the value; every other request gives it back.
    while let Ok(Some((op, key, value))) = read_request(&mut conn, table, limits) {
        let counted = value.len();
        if op != SET {
            table.release(counted);
        }
        let reply = match op {
            SET => {
                if let Some(old) = table.lock().insert(key, value) {
                    table.release(old.len());
                }
                table.changed.notify_all();
                Vec::new()
            }
            GET => {
                let mut values = table.lock();
                loop {
                    if let Some(v) = values.get(&key) {
                        break v.clone();
                    }
                    if table.stopping.load(Ordering::Acquire) {
                        return;
                    }
                    values = table.changed.wait(values).unwrap_or_else(|p| p.into_inner());
                }
            }
            ADD => {
                let Ok(delta) = <[u8; 8]>::try_from(value.as_slice()).map(i64::from_le_bytes) else { return };
                let mut values = table.lock();
                let now = values
                    .get(&key)
                    .and_then(|v| <[u8; 8]>::try_from(v.as_slice()).ok())
                    .map_or(0, i64::from_le_bytes)
                    .saturating_add(delta);
                // A counter's 8 bytes are counted past the cap: they replace a request's.
                table.bytes.fetch_add(8, Ordering::AcqRel);
                if let Some(old) = values.insert(key, now.to_le_bytes().to_vec()) {
                    table.release(old.len());
                }
                table.changed.notify_all();
                now.to_le_bytes().to_vec()
            }
            DELETE => {
                if let Some(old) = table.lock().remove(&key) {
                    table.release(old.len());
                }
                Vec::new()
            }
            _ => return,
        };
        let deadline = limits.deadline(reply.len() as u64);
        if write_value(&mut conn, &reply, deadline).is_err() {
            return;
        }
    }
}

// ---- wire format -------------------------------------------------------------------------

fn timed_out() -> std::io::Error {
    ErrorKind::TimedOut.into()
}

/// Reads exactly `buf.len()` bytes; with a deadline, each read waits only
/// until it (the connection's own timeout applies otherwise).
fn read_full(conn: &mut TcpStream, buf: &mut [u8], deadline: Option<Instant>) -> std::io::Result<()> {
    let mut filled = 0;
    while filled < buf.len() {
        if let Some(d) = deadline {
            let left = d.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(timed_out());
            }
            conn.set_read_timeout(Some(left))?;
        }
        match conn.read(&mut buf[filled..]) {
            Ok(0) => return Err(ErrorKind::UnexpectedEof.into()),
            Ok(n) => filled += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// One request, `None` at a clean end of stream. Waits for its first byte
/// without a bound; the rest must come within `limits`.
/// A value comes counted in `table`'s bytes (refused, `InvalidData`, past
/// [`Limits::stored_bytes`]).
fn read_request(conn: &mut TcpStream, table: &Table, limits: Limits) -> std::io::Result<Option<(u8, String, Vec<u8>)>> {
    conn.set_read_timeout(None)?;
    let mut op = [0u8; 1];
    match read_full(conn, &mut op, None) {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let deadline = limits.deadline(0);
    let mut len = [0u8; 4];
    read_full(conn, &mut len, deadline)?;
    let key_len = usize::try_from(u32::from_le_bytes(len)).unwrap_or(usize::MAX);
    if key_len > MAX_KEY {
        return Err(ErrorKind::InvalidData.into());
    }
    let mut key = vec![0u8; key_len];
    read_full(conn, &mut key, deadline)?;
    let key = String::from_utf8(key).map_err(|_| std::io::Error::from(ErrorKind::InvalidData))?;
    let mut value = Vec::new();
    if op[0] != GET {
        let mut admitted = 0;
        let read = read_value_into(conn, Some(limits), &mut value, |len| {
            let ok = table.reserve(len, limits.stored_bytes);
            admitted = if ok { len } else { 0 };
            ok
        });
        if let Err(e) = read {
            table.release(admitted);
            return Err(e);
        }
    }
    Ok(Some((op[0], key, value)))
}

/// A value: its u64 length, then its bytes, read as they arrive (a length
/// alone allocates nothing). With `limits`, it must arrive within them.
pub(super) fn read_value(conn: &mut TcpStream, limits: Option<Limits>) -> std::io::Result<Vec<u8>> {
    let mut value = Vec::new();
    read_value_into(conn, limits, &mut value, |_| true)?;
    Ok(value)
}

/// [`read_value`] into `value`, which grows with the bytes that arrived.
/// `admit` is asked for the length first (`InvalidData` if it says no).
fn read_value_into(
    conn: &mut TcpStream,
    limits: Option<Limits>,
    value: &mut Vec<u8>,
    admit: impl FnOnce(u64) -> bool,
) -> std::io::Result<()> {
    let mut len = [0u8; 8];
    read_full(conn, &mut len, limits.and_then(|l| l.deadline(0)))?;
    let len = u64::from_le_bytes(len);
    if len > MAX_VALUE || !admit(len) {
        return Err(ErrorKind::InvalidData.into());
    }
    let len = usize::try_from(len).map_err(|_| std::io::Error::from(ErrorKind::InvalidData))?;
    let deadline = limits.and_then(|l| l.deadline(len as u64));
    value.clear();
    while value.len() < len {
        let start = value.len();
        value.resize(start + (len - start).min(CHUNK), 0);
        read_full(conn, &mut value[start..], deadline)?;
    }
    Ok(())
}

/// Writes `value` with its length; with a deadline, each write waits only until it.
pub(super) fn write_value(conn: &mut TcpStream, value: &[u8], deadline: Option<Instant>) -> std::io::Result<()> {
    let len = u64::try_from(value.len()).map_err(|_| std::io::Error::from(ErrorKind::InvalidData))?;
    let mut msg = Vec::with_capacity(8 + value.len());
    msg.extend_from_slice(&len.to_le_bytes());
    msg.extend_from_slice(value);
    let mut sent = 0;
    while sent < msg.len() {
        if let Some(d) = deadline {
            let left = d.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(timed_out());
            }
            conn.set_write_timeout(Some(left))?;
        }
        match conn.write(&msg[sent..]) {
            Ok(0) => return Err(ErrorKind::WriteZero.into()),
            Ok(n) => sent += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both ends of a loopback connection.
    fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        (client, listener.accept().unwrap().0)
    }

    #[test]
    fn a_value_header_alone_allocates_nothing_ahead() {
        let (mut client, mut server) = pair();
        // Announces the largest value, sends 100 KiB of it and hangs up.
        client.write_all(&MAX_VALUE.to_le_bytes()).unwrap();
        client.write_all(&[7u8; 100 << 10]).unwrap();
        client.shutdown(Shutdown::Write).unwrap();
        let mut value = Vec::new();
        let e = read_value_into(&mut server, Some(Limits::DEFAULT), &mut value, |_| true).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::UnexpectedEof, "{e}");
        assert!(value.capacity() <= 4 << 20, "{} bytes held for 100 KiB that came", value.capacity());
    }

    #[test]
    fn a_value_longer_than_the_cap_is_refused_before_its_bytes() {
        let (mut client, mut server) = pair();
        client.write_all(&(MAX_VALUE + 1).to_le_bytes()).unwrap();
        let e = read_value(&mut server, Some(Limits::DEFAULT)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidData, "{e}");
    }
}

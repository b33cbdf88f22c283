//! [`TcpStore`]: the key-value store that ranks of a multi-process job use
//! to meet, as `torch.distributed`'s `TCPStore` does. Rank 0 listens on
//! `GPUPORT_MASTER_ADDR:GPUPORT_MASTER_PORT`; every rank, rank 0 included,
//! connects to it. Keys are set once and read by anyone; a read waits until
//! the key is set, up to the store's timeout. A communicator's bootstrap
//! (NCCL's unique id) goes through it; so do barriers.
//!
//! Written by hand: the protocol is five messages over one TCP connection
//! per rank, and the crates that offer a rendezvous store bring an async
//! runtime or a whole RPC framework, which a library that only needs to
//! swap a few hundred bytes at start-up should not carry.
//!
//! ```
//! use std::time::Duration;
//! use gpuport::collective::TcpStore;
//! let host = TcpStore::host("127.0.0.1:0".parse().unwrap(), Duration::from_secs(10))?;
//! let addr = host.addr();
//! let worker = std::thread::spawn(move || -> gpuport::Result<Vec<u8>> {
//!     let store = TcpStore::connect(addr, Duration::from_secs(10))?;
//!     store.set("rank1/ready", b"yes")?;
//!     store.get("id")
//! });
//! host.set("id", b"the unique id")?;
//! assert_eq!(host.get("rank1/ready")?, b"yes");
//! assert_eq!(worker.join().unwrap()?, b"the unique id");
//! # Ok::<(), gpuport::Error>(())
//! ```
//!
//! ## The protocol
//! Each request is one opcode byte, a key (u32 length, little-endian, then
//! UTF-8 bytes) and, for `SET`, `ADD` and `DELETE`, a value (u64 length,
//! then bytes; `ADD`'s is an i64, `DELETE`'s empty). The server answers
//! `SET` and `DELETE` with an empty value, `GET`
//! (once the key exists) and `ADD` with the value. A connection that breaks
//! the protocol is closed. Keys are at most 64 KiB and values 1 GiB.

use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::error::{Error, Result, StoreErrorKind};

const SET: u8 = 1;
const GET: u8 = 2;
const ADD: u8 = 3;
const DELETE: u8 = 4;
const MAX_KEY: usize = 64 << 10;
const MAX_VALUE: u64 = 1 << 30;

/// The default for reads and connects: `GPUPORT_STORE_TIMEOUT` (seconds), else 300 s.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

fn store_error(addr: impl std::fmt::Display, kind: StoreErrorKind, reason: String) -> Error {
    Error::Store { addr: addr.to_string(), kind, reason }
}

// ---- the server (rank 0) -----------------------------------------------------------------

#[derive(Default)]
struct Table {
    values: Mutex<HashMap<String, Vec<u8>>>,
    changed: Condvar,
    stopping: AtomicBool,
}

impl Table {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<u8>>> {
        // A panic under the lock leaves a whole map: every insert is one call.
        self.values.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The listening side, owned by rank 0's [`TcpStore`]; stops on drop.
struct Server {
    addr: SocketAddr,
    table: Arc<Table>,
    accept: Option<JoinHandle<()>>,
    peers: Arc<Mutex<Vec<TcpStream>>>,
}

impl Server {
    fn start(addr: SocketAddr) -> Result<Server> {
        let listener = TcpListener::bind(addr).map_err(|e| {
            store_error(
                addr,
                StoreErrorKind::Bind,
                format!("rank 0 cannot listen there ({e}); choose another GPUPORT_MASTER_PORT, or stop what holds it"),
            )
        })?;
        let addr = listener.local_addr().map_err(|e| store_error(addr, StoreErrorKind::Bind, e.to_string()))?;
        let table = Arc::new(Table::default());
        let peers = Arc::new(Mutex::new(Vec::new()));
        let (t, p) = (table.clone(), peers.clone());
        let accept = std::thread::Builder::new()
            .name("gpuport-store".into())
            .spawn(move || accept_loop(&listener, &t, &p))
            .map_err(|e| store_error(addr, StoreErrorKind::Bind, format!("cannot start the server thread: {e}")))?;
        Ok(Server { addr, table, accept: Some(accept), peers })
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.table.stopping.store(true, Ordering::Release);
        self.table.changed.notify_all();
        for peer in self.peers.lock().unwrap_or_else(|p| p.into_inner()).drain(..) {
            let _ = peer.shutdown(Shutdown::Both);
        }
        // Wakes the accept loop, which then sees `stopping`.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
    }
}

fn accept_loop(listener: &TcpListener, table: &Arc<Table>, peers: &Mutex<Vec<TcpStream>>) {
    for conn in listener.incoming() {
        if table.stopping.load(Ordering::Acquire) {
            return;
        }
        let Ok(conn) = conn else { continue };
        let _ = conn.set_nodelay(true);
        if let Ok(clone) = conn.try_clone() {
            peers.lock().unwrap_or_else(|p| p.into_inner()).push(clone);
        }
        let table = table.clone();
        let _ = std::thread::Builder::new().name("gpuport-store-peer".into()).spawn(move || serve(conn, &table));
    }
}

/// Answers one rank's requests until it disconnects, breaks the protocol,
/// or the server stops.
fn serve(mut conn: TcpStream, table: &Table) {
    while let Ok(Some((op, key, value))) = read_request(&mut conn) {
        let reply = match op {
            SET => {
                table.lock().insert(key, value);
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
                values.insert(key, now.to_le_bytes().to_vec());
                table.changed.notify_all();
                now.to_le_bytes().to_vec()
            }
            DELETE => {
                table.lock().remove(&key);
                Vec::new()
            }
            _ => return,
        };
        if write_value(&mut conn, &reply).is_err() {
            return;
        }
    }
}

// ---- wire format -------------------------------------------------------------------------

/// One request, `None` at a clean end of stream.
fn read_request(conn: &mut TcpStream) -> std::io::Result<Option<(u8, String, Vec<u8>)>> {
    let mut op = [0u8; 1];
    match conn.read_exact(&mut op) {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let mut len = [0u8; 4];
    conn.read_exact(&mut len)?;
    let key_len = usize::try_from(u32::from_le_bytes(len)).unwrap_or(usize::MAX);
    if key_len > MAX_KEY {
        return Err(ErrorKind::InvalidData.into());
    }
    let mut key = vec![0u8; key_len];
    conn.read_exact(&mut key)?;
    let key = String::from_utf8(key).map_err(|_| std::io::Error::from(ErrorKind::InvalidData))?;
    let value = if op[0] == GET { Vec::new() } else { read_value(conn)? };
    Ok(Some((op[0], key, value)))
}

fn read_value(conn: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    let mut len = [0u8; 8];
    conn.read_exact(&mut len)?;
    let len = u64::from_le_bytes(len);
    if len > MAX_VALUE {
        return Err(ErrorKind::InvalidData.into());
    }
    let mut value = vec![0u8; usize::try_from(len).map_err(|_| std::io::Error::from(ErrorKind::InvalidData))?];
    conn.read_exact(&mut value)?;
    Ok(value)
}

fn write_value(conn: &mut TcpStream, value: &[u8]) -> std::io::Result<()> {
    let len = u64::try_from(value.len()).map_err(|_| std::io::Error::from(ErrorKind::InvalidData))?;
    let mut msg = Vec::with_capacity(8 + value.len());
    msg.extend_from_slice(&len.to_le_bytes());
    msg.extend_from_slice(value);
    conn.write_all(&msg)
}

// ---- the client (every rank) ---------------------------------------------------------------

/// A connection to a job's store; rank 0's also runs the server (see the
/// [module docs](self)). Calls from several threads take turns.
pub struct TcpStore {
    addr: SocketAddr,
    /// The read and connect timeout, in nanoseconds (see `set_timeout`).
    timeout_ns: AtomicU64,
    conn: Mutex<TcpStream>,
    /// Communicators made on this store so far (their keys).
    communicators: AtomicU64,
    /// Declared after `conn`: rank 0's connection closes before its server
    /// stops. Shared with the connections [`reconnect`](TcpStore::reconnect) makes.
    _server: Option<Arc<Server>>,
}

impl std::fmt::Debug for TcpStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "TcpStore({}, {}, timeout {:?})",
            self.addr,
            if self._server.is_some() { "host" } else { "client" },
            self.timeout()
        )
    }
}

impl TcpStore {
    /// Rank 0: listens on `addr` (port 0 picks a free one: see
    /// [`addr`](Self::addr)) and connects to itself.
    pub fn host(addr: SocketAddr, timeout: Duration) -> Result<TcpStore> {
        let server = Server::start(addr)?;
        let conn = connect(server.addr, timeout)?;
        Ok(TcpStore {
            addr: server.addr,
            timeout_ns: AtomicU64::new(nanos(timeout)),
            conn: Mutex::new(conn),
            communicators: AtomicU64::new(0),
            _server: Some(Arc::new(server)),
        })
    }

    /// Any other rank: connects to rank 0's store at `addr`, retrying until
    /// `timeout` (rank 0 may start later). Nobody listening by then is
    /// [`StoreErrorKind::Timeout`].
    pub fn connect(addr: SocketAddr, timeout: Duration) -> Result<TcpStore> {
        let conn = connect(addr, timeout)?;
        Ok(TcpStore {
            addr,
            timeout_ns: AtomicU64::new(nanos(timeout)),
            conn: Mutex::new(conn),
            communicators: AtomicU64::new(0),
            _server: None,
        })
    }

    /// A second connection to the same store, for a user that calls it
    /// from its own thread; rank 0's server runs while any of them lives.
    pub fn reconnect(&self) -> Result<TcpStore> {
        let conn = connect(self.addr, self.timeout())?;
        Ok(TcpStore {
            addr: self.addr,
            timeout_ns: AtomicU64::new(nanos(self.timeout())),
            conn: Mutex::new(conn),
            communicators: AtomicU64::new(0),
            _server: self._server.clone(),
        })
    }

    /// The number of the next communicator made on this store (0, 1, …):
    /// every rank makes its communicators in the same order, so the number
    /// names the same communicator on every rank.
    pub(crate) fn next_communicator(&self) -> u64 {
        self.communicators.fetch_add(1, Ordering::Relaxed)
    }

    /// The store of a job started with `GPUPORT_MASTER_ADDR` (default
    /// `127.0.0.1`) and `GPUPORT_MASTER_PORT` (required) set, as
    /// `torch.distributed` reads `MASTER_ADDR`/`MASTER_PORT`: rank 0 hosts
    /// it, the others connect. `GPUPORT_STORE_TIMEOUT` (seconds) replaces
    /// [`DEFAULT_TIMEOUT`].
    pub fn from_env(rank: usize) -> Result<TcpStore> {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let host = var("GPUPORT_MASTER_ADDR").unwrap_or_else(|| "127.0.0.1".into());
        let Some(port) = var("GPUPORT_MASTER_PORT") else {
            return Err(store_error(
                &host,
                StoreErrorKind::Config,
                "GPUPORT_MASTER_PORT is not set: set it (and GPUPORT_MASTER_ADDR, rank 0's address) to the same \
                 values on every rank"
                    .into(),
            ));
        };
        let timeout = match var("GPUPORT_STORE_TIMEOUT") {
            None => DEFAULT_TIMEOUT,
            Some(s) => {
                s.parse::<f64>().ok().filter(|t| t.is_finite() && *t > 0.0).map(Duration::from_secs_f64).ok_or_else(
                    || {
                        store_error(
                            &host,
                            StoreErrorKind::Config,
                            format!("GPUPORT_STORE_TIMEOUT={s:?} is not a positive number of seconds"),
                        )
                    },
                )?
            }
        };
        let spec = format!("{host}:{port}");
        let addr = spec.to_socket_addrs().ok().and_then(|mut a| a.next()).ok_or_else(|| {
            store_error(
                &spec,
                StoreErrorKind::Config,
                "GPUPORT_MASTER_ADDR:GPUPORT_MASTER_PORT does not resolve to an address".into(),
            )
        })?;
        if rank == 0 {
            TcpStore::host(addr, timeout)
        } else {
            TcpStore::connect(addr, timeout)
        }
    }

    /// The address rank 0 listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// How long a read or connect waits.
    pub fn timeout(&self) -> Duration {
        Duration::from_nanos(self.timeout_ns.load(Ordering::Relaxed))
    }

    /// Sets how long this connection's reads wait.
    pub fn set_timeout(&self, timeout: Duration) -> Result<()> {
        let conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let t = Some(timeout.max(Duration::from_millis(1)));
        conn.set_read_timeout(t)
            .and_then(|()| conn.set_write_timeout(t))
            .map_err(|e| store_error(self.addr, StoreErrorKind::Closed, format!("cannot set the timeout: {e}")))?;
        self.timeout_ns.store(nanos(timeout), Ordering::Relaxed);
        Ok(())
    }

    /// Sets `key` to `value` (replacing an earlier value) and wakes its readers.
    pub fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        self.call(SET, key, Some(value)).map(|_| ())
    }

    /// The value of `key`, waiting until some rank sets it; not set within
    /// the timeout is [`StoreErrorKind::Timeout`] (a rank may have died).
    pub fn get(&self, key: &str) -> Result<Vec<u8>> {
        self.call(GET, key, None)
    }

    /// Adds `delta` to the counter `key` (0 when unset) and returns its new value.
    pub fn add(&self, key: &str, delta: i64) -> Result<i64> {
        let v = self.call(ADD, key, Some(&delta.to_le_bytes()))?;
        <[u8; 8]>::try_from(v.as_slice()).map(i64::from_le_bytes).map_err(|_| {
            store_error(self.addr, StoreErrorKind::Protocol, format!("ADD {key:?} answered {} bytes", v.len()))
        })
    }

    /// Removes `key` (nothing happens when it is unset).
    pub fn delete(&self, key: &str) -> Result<()> {
        self.call(DELETE, key, Some(&[])).map(|_| ())
    }

    /// Waits until `world_size` ranks have called `barrier(name, world_size)`.
    pub fn barrier(&self, name: &str, world_size: usize) -> Result<()> {
        let n = i64::try_from(world_size).unwrap_or(i64::MAX);
        let arrived = self.add(&format!("barrier/{name}"), 1)?;
        if arrived == n {
            self.set(&format!("barrier/{name}/done"), b"")?;
        } else if arrived > n {
            return Err(store_error(
                self.addr,
                StoreErrorKind::Protocol,
                format!("barrier {name:?}: {arrived} ranks arrived for a world of {world_size}; use each name once"),
            ));
        }
        self.get(&format!("barrier/{name}/done")).map(|_| ())
    }

    fn call(&self, op: u8, key: &str, value: Option<&[u8]>) -> Result<Vec<u8>> {
        if key.len() > MAX_KEY {
            return Err(Error::InvalidArgument {
                name: "key",
                reason: format!("{} bytes; at most {MAX_KEY}", key.len()),
            });
        }
        if value.is_some_and(|v| v.len() as u64 > MAX_VALUE) {
            return Err(Error::InvalidArgument { name: "value", reason: format!("at most {MAX_VALUE} bytes") });
        }
        let mut msg = Vec::with_capacity(5 + key.len() + value.map_or(0, |v| 8 + v.len()));
        msg.push(op);
        msg.extend_from_slice(&u32::try_from(key.len()).unwrap_or(u32::MAX).to_le_bytes());
        msg.extend_from_slice(key.as_bytes());
        if let Some(v) = value {
            msg.extend_from_slice(&(v.len() as u64).to_le_bytes());
            msg.extend_from_slice(v);
        }
        let mut conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let io = |e: std::io::Error, what: &str| match e.kind() {
            ErrorKind::WouldBlock | ErrorKind::TimedOut => store_error(
                self.addr,
                StoreErrorKind::Timeout,
                format!(
                    "{what} {key:?}: no answer within {:?} (a rank may have died or wait for another key)",
                    self.timeout()
                ),
            ),
            _ => store_error(
                self.addr,
                StoreErrorKind::Closed,
                format!("{what} {key:?}: the connection to rank 0's store broke ({e})"),
            ),
        };
        let what = match op {
            SET => "set",
            GET => "get",
            DELETE => "delete",
            _ => "add",
        };
        conn.write_all(&msg).map_err(|e| io(e, what))?;
        match read_value(&mut conn) {
            Ok(v) => Ok(v),
            Err(e) => {
                // A late answer would be read as the next call's: this connection is done.
                let _ = conn.shutdown(Shutdown::Both);
                Err(io(e, what))
            }
        }
    }
}

/// `d` in nanoseconds, saturating (a timeout of centuries is "forever").
fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn connect(addr: SocketAddr, timeout: Duration) -> Result<TcpStream> {
    let deadline = Instant::now() + timeout;
    let mut last = None;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            let why = last.map_or_else(String::new, |e: std::io::Error| format!(" (last try: {e})"));
            return Err(store_error(
                addr,
                StoreErrorKind::Timeout,
                format!(
                    "nobody answered within {timeout:?}{why}: rank 0 must be running and listening there \
                     (GPUPORT_MASTER_ADDR, GPUPORT_MASTER_PORT on every rank)"
                ),
            ));
        }
        match TcpStream::connect_timeout(&addr, left.min(Duration::from_secs(1))) {
            Ok(conn) => {
                let _ = conn.set_nodelay(true);
                conn.set_read_timeout(Some(timeout))
                    .map_err(|e| store_error(addr, StoreErrorKind::Closed, e.to_string()))?;
                conn.set_write_timeout(Some(timeout))
                    .map_err(|e| store_error(addr, StoreErrorKind::Closed, e.to_string()))?;
                return Ok(conn);
            }
            Err(e) => {
                last = Some(e);
                std::thread::sleep(left.min(Duration::from_millis(50)));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(timeout: Duration) -> TcpStore {
        TcpStore::host("127.0.0.1:0".parse().unwrap(), timeout).unwrap()
    }

    fn kind(e: &Error) -> Option<StoreErrorKind> {
        match e {
            Error::Store { kind, .. } => Some(*kind),
            _ => None,
        }
    }

    #[test]
    fn a_read_waits_for_the_key_and_counters_add_up_across_ranks() {
        let h = host(Duration::from_secs(20));
        let addr = h.addr();
        let ranks: Vec<_> = (1..4)
            .map(|r| {
                std::thread::spawn(move || {
                    let s = TcpStore::connect(addr, Duration::from_secs(20)).unwrap();
                    let id = s.get("id").unwrap();
                    s.add("joined", 1).unwrap();
                    s.barrier("start", 4).unwrap();
                    s.set(&format!("from/{r}"), &id).unwrap();
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(100)); // the readers wait first
        h.set("id", &[7; 128]).unwrap();
        h.barrier("start", 4).unwrap();
        assert_eq!(h.add("joined", 0).unwrap(), 3);
        for r in 1..4 {
            assert_eq!(h.get(&format!("from/{r}")).unwrap(), [7; 128]);
        }
        for t in ranks {
            t.join().unwrap();
        }
    }

    #[test]
    fn a_key_nobody_sets_times_out_with_a_typed_error() {
        let h = host(Duration::from_millis(300));
        let start = Instant::now();
        let e = h.get("never").unwrap_err();
        assert_eq!(kind(&e), Some(StoreErrorKind::Timeout), "{e}");
        assert!(start.elapsed() < Duration::from_secs(5));
        assert!(e.to_string().contains("\"never\""), "{e}");
    }

    #[test]
    fn an_address_nobody_listens_on_times_out_naming_it() {
        // A port that was free a moment ago: bind, read it, close.
        let addr = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let start = Instant::now();
        let e = TcpStore::connect(addr, Duration::from_millis(400)).unwrap_err();
        assert_eq!(kind(&e), Some(StoreErrorKind::Timeout), "{e}");
        assert!(start.elapsed() >= Duration::from_millis(400) && start.elapsed() < Duration::from_secs(5));
        assert!(e.to_string().contains(&addr.to_string()) && e.to_string().contains("GPUPORT_MASTER_PORT"), "{e}");
    }

    #[test]
    fn a_taken_port_is_a_bind_error() {
        let h = host(Duration::from_secs(5));
        let e = TcpStore::host(h.addr(), Duration::from_secs(5)).unwrap_err();
        assert_eq!(kind(&e), Some(StoreErrorKind::Bind), "{e}");
    }

    #[test]
    fn a_stopped_host_fails_the_others_instead_of_hanging() {
        let h = host(Duration::from_secs(20));
        let s = TcpStore::connect(h.addr(), Duration::from_secs(20)).unwrap();
        let reader = std::thread::spawn(move || s.get("never"));
        std::thread::sleep(Duration::from_millis(100));
        let start = Instant::now();
        drop(h);
        let e = reader.join().unwrap().unwrap_err();
        assert_eq!(kind(&e), Some(StoreErrorKind::Closed), "{e}");
        assert!(start.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn a_rank_that_connects_before_the_host_listens_waits_for_it() {
        let addr = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let early =
            std::thread::spawn(move || TcpStore::connect(addr, Duration::from_secs(20)).and_then(|s| s.get("k")));
        std::thread::sleep(Duration::from_millis(200));
        let h = TcpStore::host(addr, Duration::from_secs(20)).unwrap();
        h.set("k", b"v").unwrap();
        assert_eq!(early.join().unwrap().unwrap(), b"v");
    }

    #[test]
    fn a_barrier_name_used_by_too_many_ranks_is_an_error() {
        let h = host(Duration::from_secs(5));
        h.barrier("once", 1).unwrap();
        let e = h.barrier("once", 1).unwrap_err();
        assert_eq!(kind(&e), Some(StoreErrorKind::Protocol), "{e}");
    }

    #[test]
    fn from_env_needs_a_port_and_a_sane_timeout() {
        // Read-only on the environment of this process: only names no other test sets.
        let e = TcpStore::from_env(0);
        if std::env::var_os("GPUPORT_MASTER_PORT").is_none() {
            assert_eq!(kind(&e.unwrap_err()), Some(StoreErrorKind::Config));
        }
    }
}

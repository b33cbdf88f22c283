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
//! The server trusts no client: it reads a value as it arrives, bounds
//! each request's time and the number of connections (see `server.rs`).
//!
//! ## Timeouts
//! Every `Duration` is accepted: one past what the clock can count
//! (`Duration::MAX`) waits without a deadline. `GPUPORT_STORE_TIMEOUT`
//! must be a positive number of seconds that a `Duration` holds; anything
//! else is a [`StoreErrorKind::Config`].

use std::io::{ErrorKind, Write};
use std::net::{Shutdown, SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::error::{Error, Result, StoreErrorKind};

mod server;

use server::{read_value, Limits, Server, ADD, DELETE, GET, MAX_KEY, MAX_VALUE, SET};

/// The default for reads and connects: `GPUPORT_STORE_TIMEOUT` (seconds), else 300 s.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

fn store_error(addr: impl std::fmt::Display, kind: StoreErrorKind, reason: String) -> Error {
    Error::Store { addr: addr.to_string(), kind, reason }
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
        Self::host_with(addr, timeout, Limits::DEFAULT)
    }

    /// [`host`](Self::host) with a server that allows its clients `limits`.
    fn host_with(addr: SocketAddr, timeout: Duration, limits: Limits) -> Result<TcpStore> {
        let server = Server::start(addr, limits)?;
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
            Some(s) => seconds("GPUPORT_STORE_TIMEOUT", &s)
                .map_err(|reason| store_error(&host, StoreErrorKind::Config, reason))?,
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

    /// Whether this connection's process runs the store's server (rank 0's
    /// [`host`](Self::host)): the store goes when it exits.
    pub fn runs_server(&self) -> bool {
        self._server.is_some()
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
    /// The first rank to come sets the world size: a rank that comes with
    /// another fails, and so do the ones waiting
    /// ([`StoreErrorKind::Protocol`]).
    pub fn barrier(&self, name: &str, world_size: usize) -> Result<()> {
        self.barrier_of(name, None, world_size)
    }

    /// [`barrier`](Self::barrier) for `rank` of `world_size`: a rank that
    /// comes twice (two processes given one rank) fails, and so do the
    /// ones waiting ([`StoreErrorKind::Protocol`]); a rank outside the
    /// world is [`Error::InvalidArgument`].
    ///
    /// ```
    /// use std::time::Duration;
    /// let store = gpuport::collective::TcpStore::host("127.0.0.1:0".parse().unwrap(), Duration::from_secs(5))?;
    /// store.barrier_as("ready", 0, 1)?;
    /// # Ok::<(), gpuport::Error>(())
    /// ```
    pub fn barrier_as(&self, name: &str, rank: usize, world_size: usize) -> Result<()> {
        if rank >= world_size {
            return Err(crate::Error::InvalidArgument {
                name: "rank",
                reason: format!(
                    "rank {rank} is outside a world of {world_size} (ranks 0 to {})",
                    world_size.max(1) - 1
                ),
            });
        }
        self.barrier_of(name, Some(rank), world_size)
    }

    fn barrier_of(&self, name: &str, rank: Option<usize>, world_size: usize) -> Result<()> {
        let n = i64::try_from(world_size).unwrap_or(i64::MAX);
        let base = format!("barrier/{name}");
        let done = format!("{base}/done");
        let protocol = |reason: String| store_error(self.addr, StoreErrorKind::Protocol, reason);
        // The outcome is set once: the first to decide it wins, and every
        // waiter reads the same one (empty: passed; else why not).
        let decide = |outcome: &[u8]| -> Result<()> {
            if self.add(&format!("{base}/decided"), 1)? == 1 {
                self.set(&done, outcome)?;
            }
            Ok(())
        };
        let size = world_size.to_string();
        if self.add(&format!("{base}/comers"), 1)? == 1 {
            self.set(&format!("{base}/size"), size.as_bytes())?;
        }
        let first = self.get(&format!("{base}/size"))?;
        if first != size.as_bytes() {
            let reason = format!(
                "barrier {name:?}: a rank came for a world of {world_size}, the first for a world of {}; every \
                 rank must give the same world size",
                String::from_utf8_lossy(&first)
            );
            decide(reason.as_bytes())?;
            return Err(protocol(reason));
        }
        if let Some(rank) = rank {
            if self.add(&format!("{base}/rank/{rank}"), 1)? > 1 {
                let reason = format!(
                    "barrier {name:?}: rank {rank} came twice; every process of the world must have its own rank"
                );
                decide(reason.as_bytes())?;
                return Err(protocol(reason));
            }
        }
        let arrived = self.add(&base, 1)?;
        if arrived == n {
            decide(b"")?;
        } else if arrived > n {
            return Err(protocol(format!(
                "barrier {name:?}: {arrived} ranks arrived for a world of {world_size}; use each name once"
            )));
        }
        let outcome = self.get(&done)?;
        if outcome.is_empty() {
            Ok(())
        } else {
            Err(protocol(String::from_utf8_lossy(&outcome).into_owned()))
        }
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
        match read_value(&mut conn, None) {
            Ok(v) => Ok(v),
            Err(e) => {
                // A late answer would be read as the next call's: this connection is done.
                let _ = conn.shutdown(Shutdown::Both);
                Err(io(e, what))
            }
        }
    }
}

/// `text`, the value of the variable `name`, as a positive number of
/// seconds that a `Duration` holds; else why not.
pub(crate) fn seconds(name: &str, text: &str) -> std::result::Result<Duration, String> {
    text.trim().parse::<f64>().ok().filter(|t| *t > 0.0).and_then(|t| Duration::try_from_secs_f64(t).ok()).ok_or_else(
        || format!("{name}={text:?} is not a positive number of seconds (at most {} s)", Duration::MAX.as_secs()),
    )
}

/// `d` in nanoseconds, saturating (a timeout of centuries is "forever").
fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn connect(addr: SocketAddr, timeout: Duration) -> Result<TcpStream> {
    // A timeout past what the clock counts has no deadline.
    let deadline = Instant::now().checked_add(timeout);
    let mut last = None;
    loop {
        let left = deadline.map_or(Duration::MAX, |d| d.saturating_duration_since(Instant::now()));
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
    use std::io::Read;
    use std::net::TcpListener;

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

    /// Whether the server closed `conn` within 5 s (a read sees its end).
    fn closed_by_server(conn: &mut TcpStream) -> bool {
        conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        match conn.read(&mut [0u8; 16]) {
            Ok(0) => true,
            Ok(_) => false,
            Err(e) => !matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
        }
    }

    #[test]
    fn a_request_that_stalls_is_closed_after_the_limit() {
        let limits =
            Limits { connections: 16, request_time: Duration::from_millis(200), min_rate: 1 << 30, ..Limits::DEFAULT };
        let h = TcpStore::host_with("127.0.0.1:0".parse().unwrap(), Duration::from_secs(20), limits).unwrap();
        // Half a header, then nothing.
        let mut header = TcpStream::connect(h.addr()).unwrap();
        header.write_all(&[SET, 1, 0]).unwrap();
        // A whole header announcing 1 MiB, then a byte of it every 20 ms
        // (each read gets something in time; the whole value does not).
        let mut value = TcpStream::connect(h.addr()).unwrap();
        let mut msg = vec![SET, 1, 0, 0, 0, b'k'];
        msg.extend_from_slice(&(1u64 << 20).to_le_bytes());
        value.write_all(&msg).unwrap();
        let mut trickle = value.try_clone().unwrap();
        std::thread::spawn(move || {
            for _ in 0..250 {
                std::thread::sleep(Duration::from_millis(20));
                if trickle.write_all(&[0]).is_err() {
                    return;
                }
            }
        });
        let start = Instant::now();
        assert!(closed_by_server(&mut header), "a stalled header kept its connection");
        assert!(closed_by_server(&mut value), "a stalled value kept its connection");
        assert!(start.elapsed() < Duration::from_secs(4), "stalled requests kept for {:?}", start.elapsed());
        // The store itself goes on.
        h.set("k", b"v").unwrap();
        assert_eq!(h.get("k").unwrap(), b"v");
    }

    #[test]
    fn connections_past_the_limit_are_closed_and_a_freed_slot_serves_again() {
        // The host's own connection takes one of the two.
        let limits = Limits { connections: 2, ..Limits::DEFAULT };
        let h = TcpStore::host_with("127.0.0.1:0".parse().unwrap(), Duration::from_secs(20), limits).unwrap();
        let idle = TcpStore::connect(h.addr(), Duration::from_secs(20)).unwrap();
        idle.set("idle", b"").unwrap();
        let over = TcpStore::connect(h.addr(), Duration::from_secs(20)).unwrap();
        let e = over.set("over", b"").unwrap_err();
        assert_eq!(kind(&e), Some(StoreErrorKind::Closed), "{e}");
        drop(idle);
        let start = Instant::now();
        loop {
            let again = TcpStore::connect(h.addr(), Duration::from_secs(20)).unwrap();
            if again.set("again", b"").is_ok() {
                break;
            }
            assert!(start.elapsed() < Duration::from_secs(5), "the freed slot never served again");
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(h.get("again").unwrap(), b"");
    }

    #[test]
    fn values_past_the_total_cap_are_refused_and_freed_bytes_serve_again() {
        let limits = Limits { stored_bytes: 1000, ..Limits::DEFAULT };
        let h = TcpStore::host_with("127.0.0.1:0".parse().unwrap(), Duration::from_secs(20), limits).unwrap();
        h.set("a", &[1; 600]).unwrap();
        // Counted while it arrives: refused before any of its bytes.
        let other = TcpStore::connect(h.addr(), Duration::from_secs(20)).unwrap();
        let e = other.set("b", &[2; 600]).unwrap_err();
        assert_eq!(kind(&e), Some(StoreErrorKind::Closed), "{e}");
        // A replaced value gives its bytes back (once the new one came); so does a deleted one.
        h.set("a", &[3; 300]).unwrap();
        h.delete("a").unwrap();
        let again = TcpStore::connect(h.addr(), Duration::from_secs(20)).unwrap();
        again.set("b", &[4; 980]).unwrap();
        assert_eq!(h.get("b").unwrap(), vec![4; 980]);
        // Counters and requests whose values are not kept come back too.
        for _ in 0..100 {
            assert!(h.add("n", 1).is_ok());
        }
    }

    #[test]
    fn a_barrier_with_another_world_size_fails_every_rank() {
        let h = host(Duration::from_secs(20));
        let addr = h.addr();
        // The rank that comes first sets the world size (3); the host comes for 2.
        let first = std::thread::spawn(move || {
            TcpStore::connect(addr, Duration::from_secs(20)).and_then(|s| s.barrier("init", 3))
        });
        while h.add("barrier/init/comers", 0).unwrap() == 0 {
            std::thread::sleep(Duration::from_millis(5));
        }
        let mine = h.barrier("init", 2).unwrap_err();
        let theirs = first.join().unwrap().unwrap_err();
        for e in [&mine, &theirs] {
            assert_eq!(kind(e), Some(StoreErrorKind::Protocol), "{e}");
            assert!(e.to_string().contains("world of 2") && e.to_string().contains("world of 3"), "{e}");
        }
    }

    #[test]
    fn a_rank_that_comes_twice_fails_every_rank() {
        let h = host(Duration::from_secs(20));
        let addr = h.addr();
        // A world of 3 given ranks 0, 1 and 1 again.
        let first = std::thread::spawn(move || {
            TcpStore::connect(addr, Duration::from_secs(20)).and_then(|s| s.barrier_as("init", 1, 3))
        });
        while h.add("barrier/init/rank/1", 0).unwrap() == 0 {
            std::thread::sleep(Duration::from_millis(5));
        }
        let again = TcpStore::connect(addr, Duration::from_secs(20)).unwrap().barrier_as("init", 1, 3).unwrap_err();
        let mine = h.barrier_as("init", 0, 3).unwrap_err();
        let theirs = first.join().unwrap().unwrap_err();
        for e in [&again, &mine, &theirs] {
            assert_eq!(kind(e), Some(StoreErrorKind::Protocol), "{e}");
            assert!(e.to_string().contains("rank 1 came twice"), "{e}");
        }
        let e = h.barrier_as("outside", 3, 3).unwrap_err();
        assert!(matches!(e, crate::Error::InvalidArgument { name: "rank", .. }), "{e}");
    }

    #[test]
    fn timeouts_past_the_clock_wait_without_a_deadline() {
        let h = host(Duration::MAX);
        let s = TcpStore::connect(h.addr(), Duration::MAX).unwrap();
        s.set_timeout(Duration::MAX).unwrap();
        s.set("k", b"v").unwrap();
        assert_eq!(h.get("k").unwrap(), b"v");
        assert_eq!(s.reconnect().unwrap().get("k").unwrap(), b"v");
    }

    #[test]
    fn seconds_past_what_a_duration_holds_are_a_config_error() {
        assert_eq!(seconds("T", " 2.5 "), Ok(Duration::from_millis(2500)));
        for bad in ["1e30", "inf", "NaN", "0", "-1", "soon", ""] {
            let e = seconds("T", bad).unwrap_err();
            assert!(e.contains("T=") && e.contains("positive number of seconds"), "{bad}: {e}");
        }
    }
}

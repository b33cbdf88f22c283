//! Ranks meeting through a [`TcpStore`] to make a communicator, with
//! failures reported: each rank first does every local step that can fail
//! (its library and symbols, its device, rank 0's id), then writes its
//! status, and waits for every rank's; a rank whose step failed writes
//! why, and the ranks waiting for it poll for that and fail within about
//! [`POLL`], naming it, instead of waiting out the store's timeout. Only
//! when every rank is ready does one call its library's initialisation,
//! so this covers blocking NCCL and RCCL initialisations too.
//!
//! Keys, under the formation's key `KEY` ([`formation_key`]):
//! - `KEY/status/RANK`: `"ready\nSIZE\nENGINE VERSION"` or
//!   `"failed: REASON"`; `KEY/statuses`: how many ranks wrote theirs;
//! - `KEY/failures`: a counter of failed ranks; `KEY/failure/N`: the Nth
//!   failure, `"RANK\nREASON"` (also read while a library initialises);
//! - `KEY/NAME` and `KEY/NAME/ready`: a value one rank
//!   [`publish`](Meeting::publish)es and the others [`wait`](Meeting::wait) for.

use std::cell::RefCell;
use std::time::{Duration, Instant};

use crate::error::{CollectiveErrorKind, Error, Result, StoreErrorKind};

use super::TcpStore;

/// How often a waiting rank looks for the others, and for their failures.
pub const POLL: Duration = Duration::from_millis(20);

/// How long the rank that runs the store waits, after a failure it knows
/// of, for the others to read it ([`Meeting::wait_or_tell`]).
const LINGER: Duration = Duration::from_secs(2);

/// A ready rank's status begins with this line.
const READY: &str = "ready";

/// A failed rank's status begins with this, its reason after it.
const FAILED: &str = "failed: ";

/// The key of the communicator `store` forms next, unique to this
/// formation: the store's communicator number (every rank makes its
/// communicators in the same order) and how many times this `rank` came to
/// that number on the store's server. Ranks that re-form a communicator
/// through new connections to the same store (their numbers start at 0
/// again) thus meet under fresh keys, and a former formation's statuses
/// and failures cannot leak into theirs.
pub(super) fn formation_key(store: &TcpStore, rank: usize) -> Result<Formation> {
    let number = store.next_communicator();
    let round = store.add(&format!("gpuport/communicator/{number}/rounds/{rank}"), 1)?;
    Ok(Formation { key: format!("gpuport/communicator/{number}/{round}"), round })
}

/// A communicator's formation as [`formation_key`] gives it.
pub(super) struct Formation {
    /// The formation's key.
    pub key: String,
    /// How many times this rank came to this communicator on the store (1 the first time).
    pub round: i64,
}

/// This rank's failure before its communicator's formation could start,
/// `reason`, written as `init_rank` writes its own (best effort).
pub(super) fn report_failed_formation(store: &TcpStore, rank: usize, size: usize, reason: &str) {
    if rank >= size {
        return; // init_rank refuses it before its formation too
    }
    let Ok(formation) = formation_key(store, rank) else { return };
    let meeting = Meeting { store, key: &formation.key, round: formation.round, rank, size, engine: "" };
    let error = Error::Collective {
        engine: String::new(),
        rank: Some(rank),
        kind: CollectiveErrorKind::Engine,
        reason: reason.into(),
    };
    let _ = meeting.handshake(Err(error));
}

thread_local! {
    /// The engine version the next communicator initialisation of this thread claims (a test hook).
    static FAKE_NEXT_VERSION: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Makes the next [`Communicator::init_rank`](super::Communicator::init_rank)
/// of this thread claim its engine runs `version`, as a rank that loaded
/// another library would: a hook for tests of the version check.
#[doc(hidden)]
pub fn fake_next_engine_version_on_this_thread(version: &str) {
    FAKE_NEXT_VERSION.with(|f| *f.borrow_mut() = Some(version.to_string()));
}

/// `version`, or the one [`fake_next_engine_version_on_this_thread`] set, taken.
pub(super) fn claimed_version(version: String) -> String {
    FAKE_NEXT_VERSION.with(|f| f.borrow_mut().take()).unwrap_or(version)
}

thread_local! {
    /// The failure the next communicator initialisation of this thread makes (a test hook).
    static FAIL_NEXT_INIT: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Makes the next [`Communicator::init_rank`](super::Communicator::init_rank)
/// of this thread fail with an engine error whose reason is `reason`, as a
/// missing library would: a hook for tests of how the other ranks learn of it.
#[doc(hidden)]
pub fn fail_next_init_on_this_thread(reason: &str) {
    FAIL_NEXT_INIT.with(|f| *f.borrow_mut() = Some(reason.to_string()));
}

thread_local! {
    /// The failure, and the pause before it, of the next engine initialisation of this thread (a test hook).
    static FAIL_NEXT_ENGINE_INIT: RefCell<Option<(Duration, String)>> = const { RefCell::new(None) };
}

/// Makes the next [`Communicator::init_rank`](super::Communicator::init_rank)
/// of this thread fail where its engine's initialisation would start, once
/// the ranks have met, `after` a pause: the other ranks are then waiting
/// inside their library's initialisation. A hook for tests of how they
/// learn of it.
#[doc(hidden)]
pub fn fail_next_engine_init_on_this_thread(reason: &str, after: Duration) {
    FAIL_NEXT_ENGINE_INIT.with(|f| *f.borrow_mut() = Some((after, reason.to_string())));
}

/// The failure [`fail_next_engine_init_on_this_thread`] set, taken, after its pause.
pub(super) fn injected_engine_failure(engine: &str, rank: usize) -> Result<()> {
    let Some((after, reason)) = FAIL_NEXT_ENGINE_INIT.with(|f| f.borrow_mut().take()) else { return Ok(()) };
    std::thread::sleep(after);
    Err(Error::Collective { engine: engine.into(), rank: Some(rank), kind: CollectiveErrorKind::Engine, reason })
}

/// The failure [`fail_next_init_on_this_thread`] set, taken.
pub(super) fn injected_failure(engine: &str, rank: usize) -> Result<()> {
    match FAIL_NEXT_INIT.with(|f| f.borrow_mut().take()) {
        None => Ok(()),
        Some(reason) => Err(Error::Collective {
            engine: engine.into(),
            rank: Some(rank),
            kind: CollectiveErrorKind::Engine,
            reason,
        }),
    }
}

/// One rank's view of the ranks meeting under one key.
pub(super) struct Meeting<'a> {
    pub store: &'a TcpStore,
    pub key: &'a str,
    /// How many times this rank came to this communicator on the store
    /// ([`Formation::round`]); 1 where the key has no rounds (a regroup's
    /// child: its key is new to every regroup).
    pub round: i64,
    pub rank: usize,
    pub size: usize,
    /// The engine's name, for errors.
    pub engine: &'a str,
}

impl Meeting<'_> {
    /// Writes `error`, this rank's failure, for the others to read, then
    /// [`wait_or_tell`](Self::wait_or_tell). Best effort: a store that
    /// fails too leaves the others to their timeout.
    pub fn report(&self, error: &Error) {
        if matches!(error, Error::Collective { kind: CollectiveErrorKind::PeerInitFailed { .. }, .. }) {
            return;
        }
        let Ok(n) = self.store.add(&format!("{}/failures", self.key), 1) else { return };
        let _ = self.store.set(&format!("{}/failure/{n}", self.key), format!("{}\n{error}", self.rank).as_bytes());
        self.wait_or_tell();
    }

    /// Called once by each rank as it leaves with a failure it knows of
    /// (its own, a peer's, a version that differs). The rank whose process
    /// runs the store waits, at most [`LINGER`], until every other rank has
    /// said so: its error ends the process, and the store with it, and a
    /// rank that had not yet looked would then see a broken connection
    /// instead of the reason. Every other rank says so.
    fn wait_or_tell(&self) {
        let seen = format!("{}/failures/seen", self.key);
        if !self.store.runs_server() {
            let _ = self.store.add(&seen, 1);
            return;
        }
        let others = i64::try_from(self.size.saturating_sub(1)).unwrap_or(i64::MAX);
        let start = Instant::now();
        while start.elapsed() < LINGER {
            match self.store.add(&seen, 0) {
                Ok(n) if n < others => std::thread::sleep(POLL / 4),
                _ => return,
            }
        }
    }

    /// The first failure another rank reported, as this rank's error.
    pub fn failed(&self) -> Result<()> {
        if self.store.add(&format!("{}/failures", self.key), 0)? == 0 {
            return Ok(());
        }
        let text = self.store.get(&format!("{}/failure/1", self.key))?;
        let text = String::from_utf8_lossy(&text);
        let (rank, reason) = text.split_once('\n').unwrap_or(("?", &text));
        let Ok(rank) = rank.parse::<usize>() else {
            return Err(Error::Store {
                addr: self.store.addr().to_string(),
                kind: StoreErrorKind::Protocol,
                reason: format!("{}/failure/1 holds {text:?}, not a rank's failure", self.key),
            });
        };
        self.wait_or_tell();
        Err(self.peer_failed(rank, reason))
    }

    /// Polls `done` until it holds, a rank reports a failure, or the store's timeout passes.
    fn poll(&self, what: &str, mut done: impl FnMut() -> Result<bool>) -> Result<()> {
        let start = Instant::now();
        let timeout = self.store.timeout();
        loop {
            self.failed()?;
            if done()? {
                return Ok(());
            }
            if start.elapsed() > timeout {
                return Err(Error::Store {
                    addr: self.store.addr().to_string(),
                    kind: StoreErrorKind::Timeout,
                    reason: format!(
                        "{what} under {:?}: the other ranks did not come within {timeout:?} (a rank may have \
                         died){}",
                        self.key,
                        self.second_comer_hint()
                    ),
                });
            }
            std::thread::sleep(POLL);
        }
    }

    /// Why a rank may wait alone under a later round of its communicator:
    /// a second process given its rank comes under the next round
    /// ([`formation_key`]), while the others form under the first.
    fn second_comer_hint(&self) -> String {
        if self.round <= 1 {
            return String::new();
        }
        format!(
            "; this rank came to this communicator {} times on this store: unless every rank re-forms it, another \
             process was given rank {} too, and every process must have its own rank",
            self.round, self.rank
        )
    }

    /// Sets `KEY/name` to `value` for the ranks that [`wait`](Self::wait) for it.
    pub fn publish(&self, name: &str, value: &[u8]) -> Result<()> {
        self.store.set(&format!("{}/{name}", self.key), value)?;
        self.store.add(&format!("{}/{name}/ready", self.key), 1).map(|_| ())
    }

    /// `KEY/name`, once a rank published it.
    pub fn wait(&self, name: &str) -> Result<Vec<u8>> {
        let ready = format!("{}/{name}/ready", self.key);
        self.poll(&format!("waiting for {name}"), || Ok(self.store.add(&ready, 0)? > 0))?;
        self.store.get(&format!("{}/{name}", self.key))
    }

    /// The pre-init handshake: writes this rank's status (`local`: its
    /// engine's name and version once every local step passed, or the
    /// error of the step that failed) under `KEY/status/RANK`, then waits
    /// for every rank's, failing within about [`POLL`] of the first
    /// failure. Every rank must run the same engine version (else a
    /// [`CollectiveErrorKind::VersionMismatch`] naming both) in a world of
    /// the same size (else a [`StoreErrorKind::Protocol`]). Rank 0 has
    /// published its id before; only once all are ready does a rank call
    /// its library's initialisation.
    pub fn handshake(&self, local: Result<String>) -> Result<()> {
        let status = match &local {
            Ok(version) => format!("{READY}\n{}\n{version}", self.size),
            Err(e) => format!("{FAILED}{e}"),
        };
        self.store.set(&format!("{}/status/{}", self.key, self.rank), status.as_bytes())?;
        let version = local.inspect_err(|e| self.report(e))?;
        let statuses = format!("{}/statuses", self.key);
        let want = i64::try_from(self.size).unwrap_or(i64::MAX);
        self.store.add(&statuses, 1)?;
        self.poll("waiting for every rank's status", || Ok(self.store.add(&statuses, 0)? >= want))?;
        self.same_world_and_version(&version)
    }

    /// A [`StoreErrorKind::Protocol`] about this formation.
    fn protocol(&self, reason: String) -> Error {
        Error::Store {
            addr: self.store.addr().to_string(),
            kind: StoreErrorKind::Protocol,
            reason: format!("{}: {reason}", self.key),
        }
    }

    /// Every rank's status against this rank's world size and `mine`, its
    /// engine's version. A world size that differs is reported to the
    /// others (who may be waiting for a rank that will never come); a
    /// version that differs is found by every rank itself.
    fn same_world_and_version(&self, mine: &str) -> Result<()> {
        for r in (0..self.size).filter(|&r| r != self.rank) {
            let text = self.store.get(&format!("{}/status/{r}", self.key))?;
            let text = String::from_utf8_lossy(&text);
            if let Some(reason) = text.strip_prefix(FAILED) {
                self.wait_or_tell();
                return Err(self.peer_failed(r, reason));
            }
            let mut parts = text.splitn(3, '\n');
            let (Some(READY), Some(size), Some(theirs)) = (parts.next(), parts.next(), parts.next()) else {
                return Err(self.protocol(format!("rank {r}'s status is {text:?}, not a rank's status")));
            };
            if size != self.size.to_string() {
                let e = self.protocol(format!(
                    "rank {r} came for a world of {size}, rank {} for a world of {}; every rank must give the same \
                     world size",
                    self.rank, self.size
                ));
                self.report(&e);
                return Err(e);
            }
            if theirs != mine {
                // Every rank finds this itself.
                self.wait_or_tell();
                return Err(Error::Collective {
                    engine: mine.into(),
                    rank: Some(self.rank),
                    kind: CollectiveErrorKind::VersionMismatch { rank: r },
                    reason: format!(
                        "this rank runs {mine}, rank {r} runs {theirs}; every rank must load the same library version"
                    ),
                });
            }
        }
        Ok(())
    }

    /// `rank`'s failure at init, `reason`, as this rank's error.
    fn peer_failed(&self, rank: usize, reason: &str) -> Error {
        Error::Collective {
            engine: self.engine.into(),
            rank: Some(self.rank),
            kind: CollectiveErrorKind::PeerInitFailed { rank },
            reason: format!("rank {rank} could not initialise its part of the communicator: {reason}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The timeout of a rank waiting alone names a second process with its
    /// rank only when it came to the communicator again (its round), not
    /// from how its key ends (a regroup's child key ends in its color).
    #[test]
    fn only_a_later_round_hints_at_a_second_process_with_the_rank() {
        let store = TcpStore::host("127.0.0.1:0".parse().unwrap(), Duration::from_millis(100)).unwrap();
        let timeout = |key: &str, round: i64| {
            let meeting = Meeting { store: &store, key, round, rank: 1, size: 2, engine: "host" };
            meeting.wait("id").unwrap_err().to_string()
        };
        let hint = "another process was given rank 1 too";
        assert!(!timeout("gpuport/communicator/0/1/regroup/0/color/3", 1).contains(hint));
        assert!(!timeout("gpuport/communicator/0/1", 1).contains(hint));
        assert!(timeout("gpuport/communicator/0/2", 2).contains(hint));
    }
}

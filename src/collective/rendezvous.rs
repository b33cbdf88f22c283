//! Ranks meeting through a [`TcpStore`] to make a communicator, with
//! failures reported: a rank whose part of the initialisation fails (its
//! library, its device, its engine's version) writes why under the
//! communicator's key, and the ranks waiting for it poll for that and fail
//! within about [`POLL`], naming it, instead of waiting out the store's
//! timeout.
//!
//! Keys, under the communicator's key `KEY`:
//! - `KEY/failures`: a counter of failed ranks; `KEY/failure/N`: the Nth
//!   failure, `"RANK\nREASON"`;
//! - `KEY/NAME` and `KEY/NAME/ready`: a value one rank
//!   [`publish`](Meeting::publish)es and the others [`wait`](Meeting::wait) for;
//! - `KEY/NAME/arrived`: the ranks that came to an [`arrive`](Meeting::arrive).

use std::cell::RefCell;
use std::time::{Duration, Instant};

use crate::error::{CollectiveErrorKind, Error, Result, StoreErrorKind};

use super::TcpStore;

/// How often a waiting rank looks for the others, and for their failures.
pub const POLL: Duration = Duration::from_millis(20);

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
    pub rank: usize,
    pub size: usize,
    /// The engine's name, for errors.
    pub engine: &'a str,
}

impl Meeting<'_> {
    /// Writes `error`, this rank's failure, for the others to read. Best
    /// effort: a store that fails too leaves the others to their timeout.
    pub fn report(&self, error: &Error) {
        if matches!(error, Error::Collective { kind: CollectiveErrorKind::PeerInitFailed { .. }, .. }) {
            return;
        }
        let Ok(n) = self.store.add(&format!("{}/failures", self.key), 1) else { return };
        let _ = self.store.set(&format!("{}/failure/{n}", self.key), format!("{}\n{error}", self.rank).as_bytes());
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
        Err(Error::Collective {
            engine: self.engine.into(),
            rank: Some(self.rank),
            kind: CollectiveErrorKind::PeerInitFailed { rank },
            reason: format!("rank {rank} could not initialise its part of the communicator: {reason}"),
        })
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
                        "{what} under {:?}: the other ranks did not come within {timeout:?} (a rank may have died)",
                        self.key
                    ),
                });
            }
            std::thread::sleep(POLL);
        }
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

    /// Waits until every rank came to `name`. As [`TcpStore::barrier_as`],
    /// a rank that comes with another world size than the first, or a rank
    /// that comes twice, is a [`StoreErrorKind::Protocol`].
    pub fn arrive(&self, name: &str) -> Result<()> {
        let base = format!("{}/{name}", self.key);
        let protocol = |reason: String| Error::Store {
            addr: self.store.addr().to_string(),
            kind: StoreErrorKind::Protocol,
            reason: format!("{base}: {reason}"),
        };
        let size = self.size.to_string();
        if self.store.add(&format!("{base}/comers"), 1)? == 1 {
            self.publish(&format!("{name}/size"), size.as_bytes())?;
        }
        let first = self.wait(&format!("{name}/size"))?;
        if first != size.as_bytes() {
            return Err(protocol(format!(
                "rank {} came for a world of {size}, the first rank for a world of {}; every rank must give the \
                 same world size",
                self.rank,
                String::from_utf8_lossy(&first)
            )));
        }
        if self.store.add(&format!("{base}/rank/{}", self.rank), 1)? > 1 {
            return Err(protocol(format!(
                "rank {} came twice; every process of the world must have its own rank",
                self.rank
            )));
        }
        let arrived = format!("{base}/arrived");
        let want = i64::try_from(self.size).unwrap_or(i64::MAX);
        self.store.add(&arrived, 1)?;
        self.poll(&format!("waiting at {name}"), || Ok(self.store.add(&arrived, 0)? >= want))
    }

    /// Every rank's engine, published under `engines/RANK`: the same
    /// everywhere, or a [`CollectiveErrorKind::Mismatch`] naming the ranks
    /// that differ from rank 0. Call after an [`arrive`](Self::arrive) that
    /// followed each rank's publishing.
    pub fn same_engines(&self, mine: &str) -> Result<()> {
        let first = String::from_utf8_lossy(&self.store.get(&format!("{}/engines/0", self.key))?).into_owned();
        let mut differ = Vec::new();
        for r in 1..self.size {
            let theirs = self.store.get(&format!("{}/engines/{r}", self.key))?;
            if theirs != first.as_bytes() {
                differ.push(format!("rank {r} runs {}", String::from_utf8_lossy(&theirs)));
            }
        }
        if differ.is_empty() {
            return Ok(());
        }
        Err(Error::Collective {
            engine: mine.into(),
            rank: Some(self.rank),
            kind: CollectiveErrorKind::Mismatch,
            reason: format!(
                "rank 0 runs {first}, but {}; every rank must load the same library version",
                differ.join(", ")
            ),
        })
    }
}

//! New communicators from an existing one: [`Communicator::split`] and,
//! after a rank died, [`Communicator::shrink`]. Where the engine has its
//! own (NCCL's `ncclCommSplit` and `ncclCommShrink`) it makes them; else
//! the ranks meet through the communicator's store (the host engine's own
//! store where the communicator was made without one) and initialise a new
//! communicator from a fresh id, as `init_rank` does.
//!
//! Regroup `N` (the `N`th split or shrink of a communicator under key
//! `KEY`, counted on each rank) uses `KEY/regroup/N/RANK` (each rank's color
//! and key; the last reader deletes them), and the new communicator lives
//! under `KEY/regroup/N/color/C`: its id, its failures at init
//! (`rendezvous.rs`) and its cross-rank checks. No key of the former
//! communicator reaches it.

use std::sync::atomic::Ordering;

use crate::error::{CollectiveErrorKind, Error, Result};

use super::engine::{CollectiveBackend, Engine, Regrouped};
use super::rendezvous::Meeting;
use super::{Communicator, TcpStore};

/// One rank's entry of a regroup: its color (`None`: in no group) and key.
fn entry(color: Option<u32>, key: i32) -> String {
    match color {
        Some(c) => format!("{c} {key}"),
        None => format!("none {key}"),
    }
}

/// An [`entry`] read back.
fn parse_entry(text: &[u8]) -> Option<(Option<u32>, i32)> {
    let text = std::str::from_utf8(text).ok()?;
    let (color, key) = text.split_once(' ')?;
    let color = if color == "none" { None } else { Some(color.parse().ok()?) };
    Some((color, key.parse().ok()?))
}

impl<B: CollectiveBackend> Communicator<B> {
    /// Splits the group, as NCCL's `ncclCommSplit` and MPI's
    /// `MPI_Comm_split` do: every rank calls it, and the ranks that give
    /// the same `color` form a new communicator, ordered by `key` and then
    /// by their rank here. A negative `color` (NCCL's `NCCL_SPLIT_NOCOLOR`)
    /// puts this rank in none: `None`. A color no other rank gives makes a
    /// communicator of one rank. Runs over `ncclCommSplit` where the library
    /// has it, else through the store (see `src/collective/regroup.rs`); each rank
    /// of a group [`init_all`](Self::init_all) made calls it from its own
    /// thread. Waits up to [`timeout`](Self::timeout) for the other ranks.
    ///
    /// ```
    /// use std::time::Duration;
    /// use gpuport::{Device, Host, HostDevice};
    /// use gpuport::collective::{Communicator, TcpStore};
    /// let store = TcpStore::host("127.0.0.1:0".parse().unwrap(), Duration::from_secs(30))?;
    /// let comm = Communicator::<Host>::init_rank(&HostDevice::open(0)?, 0, 1, &store)?;
    /// let alone = comm.split(7, 0)?.expect("a color");
    /// assert_eq!((alone.rank(), alone.size()), (0, 1));
    /// assert!(comm.split(-1, 0)?.is_none());
    /// # Ok::<(), gpuport::Error>(())
    /// ```
    pub fn split(&self, color: i32, key: i32) -> Result<Option<Self>> {
        if self.is_aborted() {
            return Err(self.error(
                CollectiveErrorKind::Aborted,
                "split of a communicator that was aborted; shrink it instead".into(),
            ));
        }
        let color = u32::try_from(color).ok();
        let n = self.regroups.fetch_add(1, Ordering::Relaxed);
        if let Some(native) = self.engine.split(color, key) {
            return match (native?, color) {
                (Some(r), Some(c)) => Ok(Some(self.child(r, n, c)?)),
                _ => Ok(None),
            };
        }
        let members: Vec<usize> = (0..self.size).collect();
        self.regroup_through_store(n, &members, color, key)
    }

    /// A communicator of every rank but `exclude` (ranks that died or
    /// hang), in their order here: what the survivors of a failure call,
    /// all with the same `exclude`, after [`abort`](Self::abort) or a
    /// collective's `Timeout` or `RemoteFailure`. Runs over
    /// `ncclCommShrink` (NCCL 2.27 on) where the library has it and the
    /// communicator was not aborted, else through the store among the
    /// survivors (see `src/collective/regroup.rs`): then the store's host, rank 0
    /// of the job, must be alive. This communicator is left as it is.
    ///
    /// ```
    /// use std::time::Duration;
    /// use gpuport::{Device, Host, HostDevice};
    /// use gpuport::collective::{Communicator, TcpStore};
    /// let store = TcpStore::host("127.0.0.1:0".parse().unwrap(), Duration::from_secs(30))?;
    /// let comm = Communicator::<Host>::init_rank(&HostDevice::open(0)?, 0, 1, &store)?;
    /// comm.abort()?;
    /// assert_eq!(comm.shrink(&[])?.size(), 1);
    /// assert!(comm.shrink(&[0]).is_err(), "a rank cannot exclude itself");
    /// # Ok::<(), gpuport::Error>(())
    /// ```
    pub fn shrink(&self, exclude: &[usize]) -> Result<Self> {
        let mut excluded = exclude.to_vec();
        excluded.sort_unstable();
        excluded.dedup();
        if let Some(&bad) = excluded.iter().find(|&&r| r >= self.size || r == self.rank) {
            return Err(Error::InvalidArgument {
                name: "exclude",
                reason: if bad == self.rank {
                    format!("rank {bad} is this rank: a rank cannot exclude itself; the others exclude it")
                } else {
                    format!("rank {bad} is not a rank of this group of {}", self.size)
                },
            });
        }
        let n = self.regroups.fetch_add(1, Ordering::Relaxed);
        if let Some(native) = self.engine.shrink(self.size, &excluded, self.is_aborted()) {
            return self.child(native?, n, 0);
        }
        let members: Vec<usize> = (0..self.size).filter(|r| excluded.binary_search(r).is_err()).collect();
        let rank = i32::try_from(self.rank).unwrap_or(i32::MAX);
        self.regroup_through_store(n, &members, Some(0), rank)?.ok_or_else(|| {
            self.error(CollectiveErrorKind::Engine, "shrink: this rank found itself outside the new group".into())
        })
    }

    /// The key under which regroup `n`'s communicator of `color` lives.
    fn child_key(&self, parent: &str, n: u64, color: u32) -> String {
        format!("{parent}/regroup/{n}/color/{color}")
    }

    /// A communicator over `r`, an engine's own regroup `n` of `color`.
    fn child(&self, r: Regrouped<B::Engine>, n: u64, color: u32) -> Result<Self> {
        let store = match &self.store {
            Some((s, key)) => Some((s.reconnect()?, self.child_key(key, n, color))),
            None => None,
        };
        Ok(Self::new(r.engine, self.device.clone(), r.rank, r.size, store, self.timeout))
    }

    /// Regroup `n` through the store, among `members` (ranks here, this one
    /// among them); this rank gives `color` and `key`.
    fn regroup_through_store(&self, n: u64, members: &[usize], color: Option<u32>, key: i32) -> Result<Option<Self>> {
        let (store, parent) = match (&self.store, self.engine.store()) {
            (Some((s, k)), _) => (s, k.as_str()),
            (None, Some((s, k))) => (s, k),
            (None, None) => {
                return Err(self.error(
                    CollectiveErrorKind::Engine,
                    "this library has no ncclCommSplit/ncclCommShrink and the communicator was made without a \
                     store (init_all or init_with_id); make it with init_rank to split or shrink it"
                        .into(),
                ))
            }
        };
        // A connection of its own: the communicator's may have been shut
        // by the failure being recovered from.
        let store = store.reconnect()?;
        store.set_timeout(self.timeout)?;
        let prefix = format!("{parent}/regroup/{n}");
        store.set(&format!("{prefix}/{}", self.rank), entry(color, key).as_bytes())?;
        let mut entries = Vec::with_capacity(members.len());
        for &r in members {
            let k = format!("{prefix}/{r}");
            let text = store.get(&k)?;
            let (c, key) = parse_entry(&text).ok_or_else(|| {
                self.error(
                    CollectiveErrorKind::Engine,
                    format!("the store's entry {k:?} is not a rank's color and key"),
                )
            })?;
            entries.push((r, c, key));
        }
        if store.add(&format!("{prefix}/read"), 1)? == i64::try_from(members.len()).unwrap_or(i64::MAX) {
            for &r in members {
                store.delete(&format!("{prefix}/{r}"))?;
            }
            store.delete(&format!("{prefix}/read"))?;
        }
        let Some(color) = color else { return Ok(None) };
        let mut group: Vec<(i32, usize)> =
            entries.iter().filter(|(_, c, _)| *c == Some(color)).map(|&(r, _, k)| (k, r)).collect();
        group.sort_unstable();
        let rank = group.iter().position(|&(_, r)| r == self.rank).ok_or_else(|| {
            self.error(CollectiveErrorKind::Engine, format!("regroup {n}: this rank is missing from its own color"))
        })?;
        let size = group.len();
        let key = self.child_key(parent, n, color);
        let engine = self.init_child(&store, &key, rank, size)?;
        Ok(Some(Self::new(engine, self.device.clone(), rank, size, Some((store, key)), self.timeout)))
    }

    /// The engine of rank `rank` of `size` of the communicator under `key`:
    /// its rank 0 makes the id; a failure at init is reported to the others.
    fn init_child(&self, store: &TcpStore, key: &str, rank: usize, size: usize) -> Result<B::Engine> {
        let name = self.engine.name();
        let meeting = Meeting { store, key, round: 1, rank, size, engine: &name };
        let id = (|| {
            if rank != 0 {
                return meeting.wait("id");
            }
            let id = B::Engine::new_id(&self.device)?;
            if size > 1 {
                meeting.publish("id", &id)?;
            }
            Ok(id)
        })()
        .inspect_err(|e| meeting.report(e))?;
        B::Engine::init_watched(&self.device, rank, size, &id, self.timeout, self.engine.mode(), &|| meeting.failed())
            .inspect_err(|e| meeting.report(e))
    }
}

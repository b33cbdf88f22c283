//! Waiting on a non-blocking communicator: a call that returned
//! `ncclInProgress` goes on in the library's own thread, and the caller
//! polls `ncclCommGetAsyncError` until the state is something else. Here
//! that poll has a deadline, which is what turns a rank that never comes
//! (at init) or a peer that is gone (at a first connection) into an error
//! instead of a hang. Pure logic: the poll is a closure, so the tests need
//! no GPU.

use std::ffi::c_int;
use std::time::{Duration, Instant};

use crate::collective::poll::Poll;
use crate::error::Result;

use super::sys;

/// How a wait ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Waited {
    /// The state stopped being `ncclInProgress`: `ncclSuccess` or an error.
    Done(c_int),
    /// Still `ncclInProgress` once `timeout` had passed.
    TimedOut,
}

/// How long a wait yields between polls before it sleeps: from NCCL 2.23
/// on, every call of a non-blocking communicator launches through a helper
/// thread and is `ncclInProgress` for some tens of microseconds, which a
/// sleep (50 µs or more on Linux, whatever is asked) would double.
const SPIN: Duration = Duration::from_micros(200);

/// Polls `state` until it is not `ncclInProgress`, or until `timeout` has
/// passed since `start` (the state is read once more at the deadline, so a
/// call that finished just in time is not counted as late). Yields between
/// polls for the first [`SPIN`], then sleeps, from 1 µs up to 1 ms a pause.
pub(super) fn until_done(
    start: Instant,
    timeout: Duration,
    mut state: impl FnMut() -> Result<c_int>,
) -> Result<Waited> {
    let mut poll = Poll::new(start, SPIN);
    loop {
        let s = state()?;
        if s != sys::ncclInProgress {
            return Ok(Waited::Done(s));
        }
        let elapsed = poll.elapsed();
        if elapsed >= timeout {
            return Ok(Waited::TimedOut);
        }
        poll.pause(timeout - elapsed);
    }
}

/// What to check when a rank's initialisation timed out.
pub(super) fn init_check(size: usize) -> String {
    format!(
        "another of the {size} ranks did not arrive (every rank must join with the same id; one may have died or \
         not started)"
    )
}

/// What to check when a call that connects peers timed out.
pub(super) const PEER_CHECK: &str =
    "a peer this call connects to has died, aborted, or never made the matching call (collective, send or receive)";

/// The reason of a `Timeout`: `call` on `who` (`"rank 0"`) did not finish
/// in `timeout`, with what to `check`.
pub(super) fn timeout_reason(call: &str, who: &str, timeout: Duration, check: &str) -> String {
    format!(
        "{call} on {who} did not finish in {timeout:?}: {check}; the communicator was aborted (set \
         GPUPORT_COLLECTIVE_TIMEOUT or Communicator::set_timeout to wait longer)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    #[test]
    fn a_state_that_settles_ends_the_wait_with_it() {
        let mut polls = 0;
        let got = until_done(Instant::now(), Duration::from_secs(60), || {
            polls += 1;
            Ok(if polls < 5 { sys::ncclInProgress } else { sys::ncclSuccess })
        })
        .unwrap();
        assert_eq!((got, polls), (Waited::Done(sys::ncclSuccess), 5));
        // An error state ends it at once, as itself.
        let got = until_done(Instant::now(), Duration::ZERO, || Ok(6)).unwrap();
        assert_eq!(got, Waited::Done(6));
    }

    #[test]
    fn a_state_that_stays_in_progress_times_out_at_the_deadline() {
        let timeout = Duration::from_millis(50);
        let start = Instant::now();
        let mut polls = 0;
        let got = until_done(start, timeout, || {
            polls += 1;
            Ok(sys::ncclInProgress)
        })
        .unwrap();
        let took = start.elapsed();
        assert_eq!(got, Waited::TimedOut);
        assert!(took >= timeout && took < timeout + Duration::from_secs(2), "took {took:?}");
        assert!(polls > 2, "polled {polls} times");
        // A deadline already past still reads the state once.
        let mut polls = 0;
        let late = until_done(start, Duration::ZERO, || {
            polls += 1;
            Ok(sys::ncclSuccess)
        });
        assert_eq!((late.unwrap(), polls), (Waited::Done(sys::ncclSuccess), 1));
    }

    #[test]
    fn a_failing_poll_is_the_error() {
        let e = until_done(Instant::now(), Duration::from_secs(60), || {
            Err(Error::InvalidArgument { name: "comm", reason: "gone".into() })
        })
        .unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { name: "comm", .. }), "{e}");
    }

    #[test]
    fn the_reason_names_the_call_the_ranks_the_timeout_and_what_to_check() {
        let r = timeout_reason("ncclCommInitRankConfig", "rank 0", Duration::from_secs(3), &init_check(2));
        for want in ["ncclCommInitRankConfig on rank 0", "3s", "of the 2 ranks did not arrive", "COLLECTIVE_TIMEOUT"] {
            assert!(r.contains(want), "{want:?} not in {r}");
        }
        let r = timeout_reason("ncclGroupEnd", "ranks 0, 1", Duration::from_millis(500), PEER_CHECK);
        assert!(r.contains("500ms") && r.contains("peer") && r.contains("aborted"), "{r}");
    }
}

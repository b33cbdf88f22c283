//! The pace of a wait that polls: work that finishes on the device or on a
//! library's own thread is asked about again and again until it is done or
//! a deadline passes. Polling (not a blocking driver call) is what lets a
//! wait give up, and notice a failed peer, instead of hanging.
//!
//! A sleep on Linux lasts 50 µs or more whatever is asked (the timer's
//! slack), while a small collective takes tens of microseconds. So a wait
//! first yields between polls for a while, as the driver's own
//! synchronisation spins, and only then sleeps, each pause a 32nd of the
//! time waited so far (at least 1 µs, at most 1 ms): a wait thus ends at
//! most about 3% (plus the timer's slack) after the work it waits for. A
//! pause that doubled each time instead overshot a 16 MiB all-reduce over
//! sockets (a few milliseconds) by about 10% (BENCHMARKS.md, two nodes).

use std::time::{Duration, Instant};

/// The longest pause between two polls.
const LONGEST: Duration = Duration::from_millis(1);

/// The shortest pause between two polls once the spin is over.
const SHORTEST: Duration = Duration::from_micros(1);

/// A pause is the time waited so far divided by this.
const SHARE: u32 = 32;

/// Pauses between the polls of one wait.
///
/// ```ignore
/// let mut poll = Poll::new(Instant::now(), Duration::from_micros(200));
/// while !done() {
///     poll.pause(Duration::from_secs(1));
/// }
/// ```
#[derive(Debug)]
pub(crate) struct Poll {
    start: Instant,
    spin: Duration,
    pause: Duration,
}

impl Poll {
    /// A wait that began at `start` and yields, without sleeping, until
    /// `spin` has passed.
    pub(crate) fn new(start: Instant, spin: Duration) -> Poll {
        Poll { start, spin, pause: SHORTEST }
    }

    /// Time since the wait began.
    pub(crate) fn elapsed(&self) -> Duration {
        self.start.elapsed()
    }

    /// Waits before the next poll: yields while within the spin, else
    /// sleeps a [`SHARE`]th of the time waited so far (between [`SHORTEST`]
    /// and [`LONGEST`]), never longer than `left`.
    pub(crate) fn pause(&mut self, left: Duration) {
        let elapsed = self.start.elapsed();
        if elapsed < self.spin {
            std::thread::yield_now();
            return;
        }
        self.pause = (elapsed / SHARE).clamp(SHORTEST, LONGEST);
        std::thread::sleep(self.pause.min(left));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn within_the_spin_a_pause_does_not_sleep() {
        // A sleep would have doubled the next pause.
        let mut poll = Poll::new(Instant::now(), Duration::from_secs(60));
        for _ in 0..100 {
            poll.pause(Duration::from_secs(1));
        }
        assert_eq!(poll.pause, SHORTEST);
    }

    #[test]
    fn after_the_spin_a_pause_is_a_share_of_the_time_waited() {
        // 3.2 ms waited: the next pause is 100 µs, not the longest.
        let start = Instant::now() - Duration::from_micros(3200);
        let mut poll = Poll::new(start, Duration::ZERO);
        poll.pause(Duration::ZERO);
        assert!(poll.pause >= Duration::from_micros(100), "{:?}", poll.pause);
        assert!(poll.pause < Duration::from_micros(400), "{:?}: the pause outgrew its share of the wait", poll.pause);
    }

    #[test]
    fn after_the_spin_pauses_stay_within_bounds_and_respect_the_time_left() {
        let mut poll = Poll::new(Instant::now(), Duration::ZERO);
        poll.pause(Duration::ZERO);
        assert_eq!(poll.pause, SHORTEST, "a wait just begun pauses the shortest");
        let mut poll = Poll::new(Instant::now() - Duration::from_secs(10), Duration::ZERO);
        poll.pause(Duration::ZERO);
        assert_eq!(poll.pause, LONGEST, "a long wait pauses at most the longest");
        let t = Instant::now();
        poll.pause(Duration::from_micros(1));
        assert!(t.elapsed() < Duration::from_millis(1), "{:?}: the pause was not cut to the time left", t.elapsed());
    }
}

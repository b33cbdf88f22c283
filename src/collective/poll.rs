//! The pace of a wait that polls: work that finishes on the device or on a
//! library's own thread is asked about again and again until it is done or
//! a deadline passes. Polling (not a blocking driver call) is what lets a
//! wait give up, and notice a failed peer, instead of hanging.
//!
//! A sleep on Linux lasts 50 µs or more whatever is asked (the timer's
//! slack), while a small collective takes tens of microseconds. So a wait
//! first yields between polls for a while, as the driver's own
//! synchronisation spins, and only then sleeps, from 1 µs a pause doubling
//! up to 1 ms.

use std::time::{Duration, Instant};

/// The longest pause between two polls.
const LONGEST: Duration = Duration::from_millis(1);

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
        Poll { start, spin, pause: Duration::from_micros(1) }
    }

    /// Time since the wait began.
    pub(crate) fn elapsed(&self) -> Duration {
        self.start.elapsed()
    }

    /// Waits before the next poll: yields while within the spin, else
    /// sleeps for the next pause, never longer than `left`.
    pub(crate) fn pause(&mut self, left: Duration) {
        if self.start.elapsed() < self.spin {
            std::thread::yield_now();
            return;
        }
        std::thread::sleep(self.pause.min(left));
        self.pause = (self.pause * 2).min(LONGEST);
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
        assert_eq!(poll.pause, Duration::from_micros(1));
    }

    #[test]
    fn after_the_spin_pauses_grow_to_a_millisecond_and_respect_the_time_left() {
        let mut poll = Poll::new(Instant::now(), Duration::ZERO);
        for _ in 0..20 {
            poll.pause(Duration::ZERO);
        }
        assert_eq!(poll.pause, LONGEST);
        let t = Instant::now();
        poll.pause(Duration::from_micros(1));
        assert!(t.elapsed() < Duration::from_millis(1), "{:?}: the pause was not cut to the time left", t.elapsed());
    }
}

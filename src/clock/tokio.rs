//! [`TokioClock`]: tokio's clock, which paused time drives.

use ::tokio::time::Instant;

use super::std_clock::Origin;
use super::Clock;

/// `tokio::time::Instant` in nanoseconds since the clock was made.
///
/// Made while tokio's time is paused, it reads tokio's clock, so `advance()` drives a bucket on
/// it and tests of waits take no real time. Made in running time, it reads the monotonic clock
/// directly, as [`StdClock`](crate::StdClock) does (one `clock_gettime(CLOCK_MONOTONIC)` on Linux
/// and Android): the instants tokio's clock gives there, at the cost of that reading alone
/// (tokio's own reading looks for a paused clock first wherever its `test-util` feature is on,
/// and an `Instant` costs its conversion to nanoseconds besides).
/// A clock made before `pause()` is [`following_pause`](Self::following_pause).
///
/// **Its origin is its own.** Each clock counts from the instant it was made by
/// [`new`](Self::new) or [`default`](Self::default); copies share that origin. Unlike
/// [`StdClock`](crate::StdClock) there is no process-wide origin, because under paused time each
/// runtime keeps a clock of its own, and one can run hours ahead of another: an origin fixed in
/// one runtime could lie in another's future, and a clock read there would stand still until it
/// caught up. So make the clock inside the runtime whose time it follows (after `pause()` is
/// fine). Instants before the origin read as 0; 64 bits of nanoseconds last 584 years.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Clock, TokioClock};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// tokio::time::pause();
/// let clock = TokioClock::new();
/// tokio::time::advance(Duration::from_millis(1500)).await;
/// assert_eq!(clock.now(), 1_500_000_000);
/// # }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TokioClock {
    /// The origin; outside paused time also a raw reading of the monotonic clock at it, which
    /// [`StdClock`](crate::StdClock) reads the same way.
    origin: Origin,
    /// Reads tokio's clock (time was paused when it was made); otherwise std's, which tokio's
    /// clock is then anyway.
    follows_pause: bool,
}

impl TokioClock {
    /// A clock whose origin is now, on the current runtime's clock.
    ///
    /// If tokio's time is paused now (a `start_paused` test, after `pause()`), the clock reads
    /// tokio's clock at every call, so that `advance()` drives it. Otherwise it reads the
    /// monotonic clock directly, which is what tokio's clock is outside paused time: the same
    /// instants, without the look for a paused clock that tokio's `test-util` feature adds to
    /// each of its readings (a runtime lookup and a lock, several times the reading itself).
    /// For a clock made before time is paused, use [`following_pause`](Self::following_pause).
    pub fn new() -> Self {
        let first = Instant::now();
        let std_first = std::time::Instant::now();
        // Paused time stands still until advanced; running time moves with std's clock. Wait
        // for std's clock to move (nanoseconds), then see whether tokio's moved with it.
        while std::time::Instant::now() == std_first {
            core::hint::spin_loop();
        }
        if Instant::now() == first {
            return Self {
                origin: Origin::of(first.into_std()),
                follows_pause: true,
            };
        }
        Self {
            origin: Origin::now(),
            follows_pause: false,
        }
    }

    /// A clock whose origin is now that reads tokio's clock at every call, paused or not: for
    /// a clock made before `tokio::time::pause()`. Outside paused time it reads the same
    /// instants as [`new`](Self::new), at the price of tokio's look for a paused clock when its
    /// `test-util` feature is on.
    pub fn following_pause() -> Self {
        Self {
            origin: Origin::of(Instant::now().into_std()),
            follows_pause: true,
        }
    }

    /// Converts an `Instant` to this clock's ticks (zero for instants before the origin,
    /// `u64::MAX` after 584 years).
    pub fn ticks_at(&self, instant: Instant) -> u64 {
        self.ticks_at_std(instant.into_std())
    }

    #[inline]
    fn ticks_at_std(&self, instant: std::time::Instant) -> u64 {
        super::std_clock::nanos_since(self.origin.instant, instant)
    }
}

impl Default for TokioClock {
    /// Same as [`TokioClock::new`]: the origin is now.
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for TokioClock {
    const TICKS_PER_SECOND: u64 = 1_000_000_000;
    #[inline]
    fn now(&self) -> u64 {
        if self.follows_pause {
            self.ticks_at(Instant::now())
        } else {
            self.origin.nanos_now()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_running_time_a_reading_never_runs_ahead_of_the_instant_it_converts() {
        let runtime = ::tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        runtime.block_on(async {
            let clock = TokioClock::new();
            assert!(!clock.follows_pause);
            let mut most_behind = 0;
            for _ in 0..10_000 {
                let before = clock.ticks_at(Instant::now());
                let now = clock.now();
                let after = clock.ticks_at(Instant::now());
                assert!(now <= after, "{now} ahead of {after}");
                most_behind = most_behind.max(before.saturating_sub(now));
            }
            // One read of the clock, on a machine shared with other work.
            assert!(most_behind < 1_000_000, "{most_behind} ns behind");
        });
    }

    #[test]
    fn in_paused_time_it_follows_tokio() {
        let runtime = ::tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        runtime.block_on(async {
            let clock = TokioClock::new();
            assert!(clock.follows_pause);
            ::tokio::time::advance(core::time::Duration::from_secs(3)).await;
            assert_eq!(clock.now(), 3_000_000_000);
        });
    }
}

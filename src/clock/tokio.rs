//! [`TokioClock`]: tokio's clock, which paused time drives.

use ::tokio::time::Instant;

use super::Clock;

/// `tokio::time::Instant` in nanoseconds since the clock was made.
///
/// It reads tokio's clock, so `tokio::time::pause()` and `advance()` drive a bucket on it and
/// tests of waits take no real time. Outside a paused runtime it is the monotonic clock of
/// `std`.
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
    origin: Instant,
}

impl TokioClock {
    /// A clock whose origin is now, on the current runtime's clock.
    pub fn new() -> Self {
        Self {
            origin: Instant::now(),
        }
    }

    /// Converts an `Instant` to this clock's ticks (zero for instants before the origin,
    /// `u64::MAX` after 584 years).
    pub fn ticks_at(&self, instant: Instant) -> u64 {
        let nanos = instant.saturating_duration_since(self.origin).as_nanos();
        u64::try_from(nanos).unwrap_or(u64::MAX)
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
        self.ticks_at(Instant::now())
    }
}

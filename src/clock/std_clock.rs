//! [`StdClock`]: the monotonic clock `std::time::Instant` reads, with one process-wide origin.

use super::Clock;
use std::sync::OnceLock;
use std::time::Instant;

/// `std::time::Instant`'s monotonic clock in nanoseconds since the first time any `StdClock` was
/// read.
///
/// It is a zero-sized type, so a bucket on it can live in a `static`. On Linux and Android a
/// read is one `clock_gettime(CLOCK_MONOTONIC)` (a vDSO call), the clock `Instant` reads, less
/// the origin in nanoseconds: it skips making an `Instant` and the `Duration` between it and the
/// origin. Elsewhere it is `Instant::now()` since the origin. The
/// origin is shared by every `StdClock` in the process; 64 bits of nanoseconds last 584 years.
///
/// [`ticks_at`](Self::ticks_at) converts an `Instant` to the same ticks, exactly up to where the
/// origin's reading falls within one read of the clock: a reading of `now()` lies at most that
/// (tens of nanoseconds) behind `ticks_at(Instant::now())` taken at the same moment, never
/// ahead, so a deadline converted from an `Instant` is never reached early.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct StdClock;

static ORIGIN: OnceLock<Origin> = OnceLock::new();

impl StdClock {
    /// Converts an `Instant` to this clock's ticks (zero for instants before the origin).
    #[inline]
    pub fn ticks_at(instant: Instant) -> u64 {
        nanos_since(ORIGIN.get_or_init(Origin::now).instant, instant)
    }
}

impl Clock for StdClock {
    const TICKS_PER_SECOND: u64 = 1_000_000_000;
    #[inline]
    fn now(&self) -> u64 {
        ORIGIN.get_or_init(Origin::now).nanos_now()
    }
}

/// An origin on the monotonic clock: an `Instant`, and on Linux and Android the raw reading of
/// that clock in nanoseconds at (at most one read after) that instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Origin {
    pub(crate) instant: Instant,
    #[cfg(any(target_os = "linux", target_os = "android"))]
    raw: u64,
}

impl Origin {
    /// The origin now. The raw reading is the later one of a pair around `Instant::now()`, from
    /// the closest of a few pairs: so `nanos_now` never reads ahead of `nanos_since(instant, ..)`,
    /// and lags it by at most the width of that pair.
    pub(crate) fn now() -> Self {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        {
            // (The pair's width, the origin.)
            let pair = || {
                let before = monotonic_nanos();
                let instant = Instant::now();
                let raw = monotonic_nanos();
                (raw.wrapping_sub(before), Self { instant, raw })
            };
            let closest = (1..8).fold(pair(), |best, _| {
                let next = pair();
                if next.0 < best.0 {
                    next
                } else {
                    best
                }
            });
            closest.1
        }
        #[cfg(not(any(target_os = "linux", target_os = "android")))]
        Self {
            instant: Instant::now(),
        }
    }

    /// An origin at `instant`, for a clock that converts instants only (one following tokio's
    /// paused time): [`nanos_now`](Self::nanos_now) is not read from it.
    #[cfg(feature = "tokio")]
    pub(crate) fn of(instant: Instant) -> Self {
        Self {
            instant,
            #[cfg(any(target_os = "linux", target_os = "android"))]
            raw: 0,
        }
    }

    /// Nanoseconds from the origin to now (zero before it).
    #[inline]
    pub(crate) fn nanos_now(&self) -> u64 {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        {
            monotonic_nanos().saturating_sub(self.raw)
        }
        #[cfg(not(any(target_os = "linux", target_os = "android")))]
        nanos_since(self.instant, Instant::now())
    }
}

/// `CLOCK_MONOTONIC` in nanoseconds: what `Instant::now()` reads on Linux and Android, without
/// making an `Instant` of it.
#[cfg(any(target_os = "linux", target_os = "android"))]
#[inline]
fn monotonic_nanos() -> u64 {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    // Non-negative on a monotonic clock; 584 years of nanoseconds fit.
    (now.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(now.tv_nsec as u64)
}

/// Nanoseconds from `origin` to `instant`: zero for an instant before the origin, `u64::MAX`
/// past 584 years, which fill the u64 (64-bit arithmetic, where `as_nanos` would multiply in
/// 128 bits). `StdClock` and `TokioClock` both read through it.
#[inline]
pub(crate) fn nanos_since(origin: Instant, instant: Instant) -> u64 {
    let since = instant.saturating_duration_since(origin);
    since
        .as_secs()
        .checked_mul(1_000_000_000)
        .and_then(|nanos| nanos.checked_add(u64::from(since.subsec_nanos())))
        .unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reading_never_runs_ahead_of_the_instant_it_converts_and_lags_it_little() {
        let mut most_behind = 0;
        for _ in 0..10_000 {
            let before = StdClock::ticks_at(Instant::now());
            let now = StdClock.now();
            let after = StdClock::ticks_at(Instant::now());
            assert!(now <= after, "{now} ahead of {after}");
            most_behind = most_behind.max(before.saturating_sub(now));
        }
        // One read of the clock, on a machine shared with other work: well under a millisecond.
        assert!(most_behind < 1_000_000, "{most_behind} ns behind");
    }
}

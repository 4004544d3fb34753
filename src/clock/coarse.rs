//! [`CoarseClock`]: one shared atomic, refreshed about every millisecond (feature `coarse-clock`).

use std::io;
use std::sync::Mutex;
use std::time::Duration;

use crate::engine::sync::unmodeled::{AtomicU64, Ordering};
use crate::{Clock, StdClock};

/// The last refresh of [`StdClock`], in its nanoseconds; 0 before the first.
/// The reading, alone in its cache line: every check reads it and the upkeep thread writes it,
/// so nothing written more often may share the line.
#[repr(align(128))]
struct Reading(AtomicU64);

static NOW_NS: Reading = Reading(AtomicU64::new(0));
/// Whether the upkeep thread is running.
static UPKEEP: Mutex<bool> = Mutex::new(false);

/// A clock that reads one shared atomic, refreshed from [`StdClock`] about every millisecond by
/// a background thread ([`new`](Self::new)) or by the caller ([`refresh`](Self::refresh)): the
/// cheapest read there is, for the hottest paths.
///
/// **What it costs.** A read is one load of a word that changes once a millisecond, so it stays
/// in every core's cache: a check on this clock costs a few nanoseconds, the compare-exchange
/// and the arithmetic, with no clock left to pay for (`benches/hot_path.rs`). The
/// upkeep thread wakes a thousand times a second for the life of the process, whether or not any
/// bucket is in use; the clock is process-wide, so one thread serves every `CoarseClock`.
///
/// **What it trades.** Resolution. The bucket sees time in steps of the refresh interval (plus
/// however late the upkeep thread is scheduled): tokens accrue in batches of `rate × 1 ms`, and a
/// `retry_after` is exact in this clock's time but may end up to one step early in real time, so
/// a caller who sleeps it may be denied once more. Rates stay exact over any span, since each
/// refresh reads the real clock: a stalled upkeep thread delays tokens, and can never add any.
/// Readings never exceed [`StdClock`]'s and never go backwards (refreshes take the maximum). Its
/// ticks are [`StdClock`]'s nanoseconds, so the two can be compared.
///
/// ```
/// use tollgate::{CoarseClock, Quota, Rate, TokenBucket};
///
/// let bucket = TokenBucket::try_new(Quota::new(Rate::per_second(1_000)), CoarseClock::new())?;
/// assert!(bucket.try_acquire(1).is_ok());
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
///
/// Without the thread, the caller refreshes it, say once per turn of an event loop:
///
/// ```
/// use tollgate::{CoarseClock, Quota, Rate, TokenBucket};
///
/// static GATE: TokenBucket<CoarseClock> =
///     TokenBucket::new(Quota::new(Rate::per_second(100)), CoarseClock::refreshed_by_caller());
///
/// CoarseClock::refresh();
/// assert!(GATE.try_acquire(1).is_ok());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CoarseClock(());

impl CoarseClock {
    /// How often the upkeep thread refreshes the clock.
    pub const UPKEEP_INTERVAL: Duration = Duration::from_millis(1);

    /// The clock, with the process's upkeep thread started if it was not already; the clock is
    /// fresh when this returns.
    ///
    /// # Panics
    ///
    /// When the thread cannot be spawned, as `std::thread::spawn` does; see
    /// [`try_new`](Self::try_new).
    pub fn new() -> Self {
        Self::try_new().expect("tollgate: cannot spawn the CoarseClock upkeep thread")
    }

    /// Like [`new`](Self::new), or the error that kept the upkeep thread from starting.
    pub fn try_new() -> io::Result<Self> {
        // A panic elsewhere cannot leave the flag half-written: take it even if poisoned.
        let mut running = UPKEEP
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if !*running {
            std::thread::Builder::new()
                .name("tollgate-coarse-clock".into())
                .spawn(|| loop {
                    Self::refresh();
                    std::thread::sleep(Self::UPKEEP_INTERVAL);
                })?;
            *running = true;
        }
        Self::refresh();
        Ok(Self(()))
    }

    /// The clock without an upkeep thread: it reads 0 until the first [`refresh`](Self::refresh),
    /// and stands still between refreshes.
    pub const fn refreshed_by_caller() -> Self {
        Self(())
    }

    /// Moves the clock to [`StdClock`]'s reading now (never backwards).
    pub fn refresh() {
        // Relaxed: the clock is a single value; nothing else is published through it.
        NOW_NS.0.fetch_max(StdClock.now(), Ordering::Relaxed);
    }
}

impl Default for CoarseClock {
    /// [`CoarseClock::new`].
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for CoarseClock {
    const TICKS_PER_SECOND: u64 = 1_000_000_000;
    #[inline]
    fn now(&self) -> u64 {
        NOW_NS.0.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follows_the_std_clock_from_behind() {
        let clock = CoarseClock::new();
        for _ in 0..20 {
            let (coarse, std) = (clock.now(), StdClock.now());
            assert!(coarse <= std, "coarse {coarse} ahead of std {std}");
            std::thread::sleep(Duration::from_millis(5));
        }
        // After 100 ms the upkeep thread has refreshed it many times; the lag is a few steps at
        // most even on a busy machine.
        let lag = StdClock.now() - clock.now();
        assert!(lag < 50_000_000, "lag {lag} ns");
    }

    #[test]
    fn a_caller_refresh_moves_it_to_now_and_never_back() {
        let clock = CoarseClock::refreshed_by_caller();
        CoarseClock::refresh();
        let first = clock.now();
        assert!(first <= StdClock.now());
        std::thread::sleep(Duration::from_millis(2));
        CoarseClock::refresh();
        assert!(clock.now() >= first + 2_000_000);
    }
}

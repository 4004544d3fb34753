//! [`ManualClock`]: a clock that moves only when told to.

use super::Clock;
use crate::engine::sync::{AtomicU64, Ordering};
use core::time::Duration;

/// A clock that moves only when told to: for tests and simulations.
///
/// Ticks are nanoseconds. It is atomic, so threads can share it by reference, and it wraps at
/// `u64::MAX` like a hardware counter.
///
/// ```
/// use core::time::Duration;
/// use tollgate::{Clock, ManualClock};
///
/// let clock = ManualClock::new();
/// clock.advance(Duration::from_millis(1500));
/// assert_eq!(clock.now(), 1_500_000_000);
/// clock.set(u64::MAX);
/// clock.advance(Duration::from_nanos(2));
/// assert_eq!(clock.now(), 1);
/// ```
#[derive(Debug, Default)]
pub struct ManualClock {
    ticks: AtomicU64,
}

impl ManualClock {
    /// A clock at tick 0.
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        Self::starting_at(0)
    }

    /// A clock at `ticks`.
    #[cfg(not(loom))]
    pub const fn starting_at(ticks: u64) -> Self {
        Self {
            ticks: AtomicU64::new(ticks),
        }
    }

    /// A clock at tick 0.
    #[cfg(loom)]
    pub fn new() -> Self {
        Self::starting_at(0)
    }

    /// A clock at `ticks`.
    #[cfg(loom)]
    pub fn starting_at(ticks: u64) -> Self {
        Self {
            ticks: AtomicU64::new(ticks),
        }
    }

    /// Moves the clock forward by `by`, wrapping at `u64::MAX`.
    pub fn advance(&self, by: Duration) {
        let nanos = by.as_nanos() as u64;
        // Relaxed: the clock is a single value; nothing else is published through it.
        self.ticks.fetch_add(nanos, Ordering::Relaxed);
    }

    /// Sets the clock to `ticks`, forwards or backwards.
    pub fn set(&self, ticks: u64) {
        self.ticks.store(ticks, Ordering::Relaxed);
    }
}

impl Clock for ManualClock {
    const TICKS_PER_SECOND: u64 = 1_000_000_000;
    #[inline]
    fn now(&self) -> u64 {
        self.ticks.load(Ordering::Relaxed)
    }
}

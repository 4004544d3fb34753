//! [`Jitter`]: a seedable spread for waiters, so that callers due at the same instant (after a
//! pause, say) do not all wake in the same tick.

use core::time::Duration;

use crate::engine::sync::{AtomicU32, Ordering};

/// Adds a random delay of up to `max` to a wait. Off by default ([`Jitter::none`]).
///
/// Every wait takes one: a [`TokenBucket`](crate::TokenBucket)'s or an `AdjustableBucket`'s
/// through [`bucket.jittered(&jitter)`](crate::Jittered), [`Limits`](crate::Limits) through
/// [`with_jitter`](crate::Limits::with_jitter), tollgate-tower's backpressure layer through its
/// `jitter`, and tollgate-redis's `RedisBucket` through its builder. Jitter spreads callers
/// that wake at the same instant; it does not move a bucket's schedule, so for buckets that
/// run in lockstep (workers splitting one quota, replicas started together) give each a phase:
/// [`Quota::phase`](crate::Quota::phase), [`Quota::random_phase`](crate::Quota::random_phase).
///
/// Only ever lengthens a wait, so it never grants early and never changes what a bucket
/// decides: it moves a caller's wake-up after its instant. The source is SplitMix64 over a seed
/// and a draw counter, so a given seed gives the same sequence of delays on every run and tests
/// stay deterministic; give each process its own seed (from a process id or the time) in
/// production. Shared by reference: draws are counted atomically.
///
/// ```
/// use core::time::Duration;
/// use tollgate::Jitter;
///
/// let jitter = Jitter::up_to(Duration::from_millis(50), 7);
/// let delayed = jitter.delay(Duration::from_secs(1));
/// assert!(delayed >= Duration::from_secs(1));
/// assert!(delayed <= Duration::from_millis(1_050));
/// assert_eq!(Jitter::none().delay(Duration::from_secs(1)), Duration::from_secs(1));
/// assert_eq!(jitter.delay(Duration::ZERO), Duration::ZERO); // granted now: no wait to spread
/// ```
#[derive(Debug)]
pub struct Jitter {
    max_ns: u64,
    seed: u64,
    draws: AtomicU32,
}

impl Default for Jitter {
    /// [`Jitter::none`].
    fn default() -> Self {
        Self::none()
    }
}

impl Jitter {
    crate::const_fn_unless_loom! {
        /// No jitter: waits are exactly the reservations' waits.
        pub const fn none() -> Self {
            Self::up_to(Duration::ZERO, 0)
        }
    }

    crate::const_fn_unless_loom! {
        /// Uniform jitter in `[0, max]` (to the nanosecond, `max` saturating at 584 years), from
        /// the sequence that `seed` gives. `const`, so that firmware can keep one in a `static`
        /// beside its bucket.
        pub const fn up_to(max: Duration, seed: u64) -> Self {
            let ns = max.as_nanos();
            Self {
                max_ns: if ns > u64::MAX as u128 { u64::MAX } else { ns as u64 },
                seed,
                draws: AtomicU32::new(0),
            }
        }
    }

    /// The largest delay it adds.
    pub fn max(&self) -> Duration {
        Duration::from_nanos(self.max_ns)
    }

    /// The next random delay in `[0, max]`.
    pub fn next(&self) -> Duration {
        if self.max_ns == 0 {
            return Duration::ZERO;
        }
        // Relaxed: a counter; each caller needs a distinct draw, not an order.
        let draw = self.draws.fetch_add(1, Ordering::Relaxed);
        let x = splitmix64(
            self.seed
                .wrapping_add(u64::from(draw).wrapping_mul(0x9E37_79B9_7F4A_7C15)),
        );
        // Multiply-shift: uniform over [0, max] without division or modulo bias beyond 2^-64.
        let ns = (u128::from(x) * (u128::from(self.max_ns) + 1)) >> 64;
        Duration::from_nanos(ns as u64)
    }

    /// `wait` plus the next random delay, or zero when `wait` is zero: a caller granted now has
    /// no crowd to spread from.
    pub fn delay(&self, wait: Duration) -> Duration {
        wait.saturating_add(self.after(wait))
    }

    /// The jitter a wait that slept `waited` sleeps next, holding its take: the next random
    /// delay, or zero for a caller served at once, which has no crowd to spread from.
    pub fn after(&self, waited: Duration) -> Duration {
        if waited.is_zero() {
            Duration::ZERO
        } else {
            self.next()
        }
    }
}

/// SplitMix64's output function (Steele, Lea and Flood, 2014).
pub(crate) const fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec::Vec;

    #[test]
    fn a_seed_gives_the_same_spread_every_time_and_stays_in_range() {
        let max = Duration::from_millis(100);
        let draws = |seed| {
            let jitter = Jitter::up_to(max, seed);
            (0..1_000).map(|_| jitter.next()).collect::<Vec<_>>()
        };
        let a = draws(42);
        assert_eq!(a, draws(42));
        assert_ne!(a, draws(43));
        assert!(a.iter().all(|&d| d <= max));
        // Spread over the range: each tenth of it gets between 5 % and 15 % of the draws.
        for tenth in 0..10u32 {
            let (lo, hi) = (max * tenth / 10, max * (tenth + 1) / 10);
            let n = a.iter().filter(|&&d| d >= lo && d < hi).count();
            assert!((50..150).contains(&n), "tenth {tenth}: {n}");
        }
    }

    #[test]
    fn no_jitter_changes_nothing() {
        let jitter = Jitter::none();
        for wait in [Duration::ZERO, Duration::from_nanos(1), Duration::MAX] {
            assert_eq!(jitter.delay(wait), wait);
        }
        assert_eq!(
            Jitter::up_to(Duration::MAX, 1).delay(Duration::MAX),
            Duration::MAX
        );
    }
}

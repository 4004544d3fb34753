//! The [`Clock`] trait, the conversions between ticks and `Duration`, and the clocks shipped
//! with the crate: manual, std, coarse, tsc and tokio, one file each.

use core::time::Duration;

use crate::engine::div::{div, div_ceil};

/// A monotonic clock that the caller injects into a bucket.
///
/// The frequency is a constant, so a bucket converts its rate into clock ticks once, at
/// construction, and its hot path divides nothing.
///
/// A clock should not step backwards. If it does, the bucket mints nothing: it reads the step as
/// time not yet earned and denies until the clock catches up, so no span of time is credited
/// twice. A 64-bit counter may wrap at `u64::MAX` like a hardware counter does.
///
/// ```
/// use tollgate::Clock;
///
/// /// A free-running 1 MHz timer, extended to 64 bits elsewhere.
/// struct Timer1Mhz;
/// impl Clock for Timer1Mhz {
///     const TICKS_PER_SECOND: u64 = 1_000_000;
///     fn now(&self) -> u64 {
///         42 // read the hardware counter here
///     }
/// }
/// ```
pub trait Clock {
    /// Ticks in one second.
    const TICKS_PER_SECOND: u64;
    /// Monotonic ticks since an arbitrary origin.
    fn now(&self) -> u64;
}

impl<C: Clock + ?Sized> Clock for &C {
    const TICKS_PER_SECOND: u64 = C::TICKS_PER_SECOND;
    #[inline]
    fn now(&self) -> u64 {
        (**self).now()
    }
}

/// The whole nanoseconds of `ticks`, rounded up: a wait is never reported shorter than it is.
pub(crate) fn ticks_to_duration_ceil<C: Clock + ?Sized>(ticks: u64) -> Duration {
    const NANOS_PER_SECOND: u64 = 1_000_000_000;
    let per_second = C::TICKS_PER_SECOND;
    // Decided at compile time: a nanosecond clock (the TSC, `StdClock`) needs no scaling, and
    // below 18 GHz the remainder's nanoseconds fit a `u64`, so the divisions are by constants
    // (multiplications) rather than a 128-bit division routine.
    if per_second == NANOS_PER_SECOND {
        return Duration::from_nanos(ticks);
    }
    let secs = div(ticks, per_second);
    let rem = ticks - secs * per_second;
    let nanos = if per_second <= u64::MAX / NANOS_PER_SECOND {
        div_ceil(rem * NANOS_PER_SECOND, per_second) as u32
    } else {
        (rem as u128 * NANOS_PER_SECOND as u128).div_ceil(per_second as u128) as u32
    };
    // nanos is at most 10^9; comparing with `>=` shows the compiler that `Duration::new` has
    // nothing to carry, so no panic path is linked and an unread `retry_after` costs nothing.
    // (secs < u64::MAX: the addition cannot saturate.)
    if nanos >= 1_000_000_000 {
        Duration::new(secs.saturating_add(1), 0)
    } else {
        Duration::new(secs, nanos)
    }
}

/// The ticks of `duration`, rounded up: a pause or a sleep is never shorter than asked.
pub(crate) fn duration_to_ticks_ceil<C: Clock + ?Sized>(duration: Duration) -> u64 {
    let ticks = duration_to_ticks_floor::<C>(duration);
    if ticks_to_duration_ceil::<C>(ticks) < duration {
        ticks.saturating_add(1)
    } else {
        ticks
    }
}

/// The whole ticks within `duration`, rounded down and saturating at `u64::MAX`.
pub(crate) fn duration_to_ticks_floor<C: Clock + ?Sized>(duration: Duration) -> u64 {
    let per_second = C::TICKS_PER_SECOND;
    let whole = (duration.as_secs() as u128).saturating_mul(per_second as u128);
    let part = duration.subsec_nanos() as u128 * per_second as u128 / 1_000_000_000;
    let ticks = whole + part;
    if ticks > u64::MAX as u128 {
        u64::MAX
    } else {
        ticks as u64
    }
}

#[cfg(all(feature = "coarse-clock", not(loom)))]
mod coarse;
crate::with_atomic64! {
    mod manual;
}
#[cfg(feature = "std")]
mod std_clock;
#[cfg(feature = "tokio")]
mod tokio;
#[cfg(feature = "quanta")]
mod tsc;

#[cfg(all(feature = "coarse-clock", not(loom)))]
pub use self::coarse::CoarseClock;
crate::with_atomic64! {
    pub use self::manual::ManualClock;
}
#[cfg(feature = "std")]
pub use self::std_clock::StdClock;
#[cfg(feature = "tokio")]
pub use self::tokio::TokioClock;
#[cfg(feature = "quanta")]
pub use self::tsc::TscClock;

#[cfg(test)]
mod tests {
    use super::*;

    struct Hz<const F: u64>;
    impl<const F: u64> Clock for Hz<F> {
        const TICKS_PER_SECOND: u64 = F;
        fn now(&self) -> u64 {
            0
        }
    }

    #[test]
    fn conversions_round_the_safe_way() {
        // (ticks, ceil duration) at 32 768 Hz
        let rows = [
            (0, Duration::ZERO),
            (1, Duration::from_nanos(30_518)), // 30 517.578… ns
            (32_768, Duration::from_secs(1)),
            (32_769, Duration::new(1, 30_518)),
            (u64::MAX, Duration::new(u64::MAX / 32_768, 999_969_483)),
        ];
        for (ticks, duration) in rows {
            assert_eq!(ticks_to_duration_ceil::<Hz<32_768>>(ticks), duration);
        }
        assert_eq!(
            duration_to_ticks_floor::<Hz<32_768>>(Duration::from_nanos(30_517)),
            0
        );
        assert_eq!(
            duration_to_ticks_floor::<Hz<32_768>>(Duration::from_nanos(30_518)),
            1
        );
        assert_eq!(duration_to_ticks_floor::<Hz<10>>(Duration::MAX), u64::MAX);
        assert_eq!(
            ticks_to_duration_ceil::<Hz<10_000_000_000>>(3),
            Duration::from_nanos(1)
        );
    }
}

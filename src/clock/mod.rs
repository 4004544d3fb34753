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

/// Loom's `Arc` shares a clock among a model's threads as `std`'s does (`Clock` is implemented
/// for `&C`; `std::sync::Arc<C>` derefs to `C`, pass `&*arc` or `arc.as_ref()`).
#[cfg(loom)]
impl<C: Clock + ?Sized> Clock for loom::sync::Arc<C> {
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
    // Decided at compile time: a nanosecond clock (the TSC, `StdClock`) needs no scaling. Else
    // a tick is `num / den` nanoseconds in lowest terms, and the remainder's nanoseconds are
    // `rem · num / den`: for most clocks `den` is 1 (12.5 or 25 MHz: 80 or 40 ns a tick) or a
    // power of two (16 or 64 MHz, 32 768 Hz), a shift rather than a division, which on a 32-bit
    // core would be a long division. Below 18 GHz `rem · num` fits a `u64`.
    if per_second == NANOS_PER_SECOND {
        return Duration::from_nanos(ticks);
    }
    let (num, den) = const { nanos_per_tick(C::TICKS_PER_SECOND) };
    let secs = div(ticks, per_second);
    let rem = ticks - secs * per_second;
    let nanos = if per_second <= u64::MAX / num {
        // rem < per_second: the product fits, and is below den · 10^9.
        let scaled = rem * num;
        if den.is_power_of_two() {
            let shift = den.trailing_zeros();
            ((scaled >> shift) + (scaled & (den - 1) != 0) as u64) as u32
        } else {
            div_ceil(scaled, den) as u32
        }
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

/// A tick of a clock of `ticks_per_second` in nanoseconds, `(num, den)` in lowest terms (`(1, 1)`
/// for a clock of no ticks, which no bucket accepts).
const fn nanos_per_tick(ticks_per_second: u64) -> (u64, u64) {
    if ticks_per_second == 0 {
        return (1, 1);
    }
    let g = crate::rate::gcd(1_000_000_000, ticks_per_second as u128) as u64;
    (1_000_000_000 / g, ticks_per_second / g)
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

#[cfg(feature = "coarse-clock")]
mod coarse;
#[cfg(feature = "embassy-time")]
mod embassy;
crate::with_atomic64! {
    mod manual;
}
#[cfg(feature = "std")]
mod std_clock;
#[cfg(feature = "tokio")]
mod tokio;
#[cfg(feature = "quanta")]
mod tsc;

#[cfg(feature = "coarse-clock")]
pub use self::coarse::CoarseClock;
#[cfg(feature = "embassy-time")]
pub use self::embassy::EmbassyClock;
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
        // Against u128 arithmetic, on clocks whose tick is a whole number of nanoseconds, a
        // power of two's share of some, or neither.
        fn exact<const F: u64>(ticks: u64) {
            let nanos = (ticks as u128 * 1_000_000_000).div_ceil(F as u128);
            let expected = Duration::new(
                (nanos / 1_000_000_000) as u64,
                (nanos % 1_000_000_000) as u32,
            );
            assert_eq!(
                ticks_to_duration_ceil::<Hz<F>>(ticks),
                expected,
                "{ticks} at {F} Hz"
            );
        }
        for ticks in [
            0,
            1,
            7,
            999,
            12_499_999,
            12_500_001,
            1 << 32,
            (1 << 32) + 1,
            u64::MAX / 1_000_000_000,
        ] {
            exact::<12_500_000>(ticks);
            exact::<25_000_000>(ticks);
            exact::<16_000_000>(ticks);
            exact::<64_000_000>(ticks);
            exact::<32_768>(ticks);
            exact::<48_000_000>(ticks);
            exact::<1_000_003>(ticks);
            exact::<3_000_000_000>(ticks);
        }
    }
}

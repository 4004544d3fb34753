//! How a quota maps onto the script's integers: microseconds of Redis `TIME`, and units in which
//! both a microsecond and a token are whole numbers. The script holds instants and amounts as
//! pairs (whole microseconds, units beyond them), every number far below 2^53.

use core::time::Duration;

use super::SetupError;
use tollgate::{ConfigError, Quota, StdClock, TokenBucket};

/// The largest burst, in units.
const MAX_BURST_UNITS: u64 = 1 << 50;
/// The finest rate: the units beyond a whole microsecond stay below 2^40.
const MAX_UNITS_PER_US: u64 = 1 << 40;
/// The longest debt, in microseconds (107 years): an instant, a debt and a burst (at most 2^50
/// µs) add up to less than 2^53 µs until the year 2100.
const MAX_DEBT_US: u128 = 3 << 50;

/// A quota in the script's units.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    /// Units in one microsecond.
    pub units_per_us: u64,
    /// Units in one token.
    pub units_per_token: u64,
    /// The capacity in tokens.
    pub burst: u64,
    /// The capacity in units, at most 2^50.
    pub burst_units: u64,
    /// The most units the bucket holds: the local bucket's ceiling on a nanosecond clock (the
    /// burst and less than one step of its reading), so that both answer alike.
    pub ceiling_units: u64,
    /// The start fill in units.
    pub start_units: u64,
    /// The deepest debt reservations may run, in units: the local bucket's on a nanosecond
    /// clock, so that both grant the same reservations, and at most 3 × 2^50 µs (107 years).
    pub max_debt_units: u128,
}

impl Layout {
    /// The exact layout of `quota`, or why there is none.
    pub(crate) fn solve(quota: &Quota) -> Result<Self, SetupError> {
        let rate = quota.rate();
        // Redis `TIME` is read to the microsecond: a window quota must accrue under a token in
        // two of them.
        // Tokens per microsecond: tokens × 1 000 / period_ns.
        let tokens = rate.tokens() as u128 * 1_000;
        let period_ns = rate.period().as_nanos();
        quota.validate().map_err(SetupError::Quota)?;
        if quota.phase_fraction().0 != 0 {
            return Err(SetupError::Phased);
        }
        if quota.window().is_some() && tokens.saturating_mul(2) >= period_ns {
            return Err(SetupError::Quota(ConfigError::WindowTooCoarse));
        }
        // per_us / per_token in lowest terms.
        let g = gcd(tokens, period_ns);
        let (per_us, per_token) = (tokens / g, period_ns / g);
        let burst = quota.burst_size();
        let burst_units = burst as u128 * per_token;
        if per_us > MAX_UNITS_PER_US as u128 || burst_units > MAX_BURST_UNITS as u128 {
            return Err(SetupError::Unrepresentable);
        }
        // The local bucket's debt bound, converted through the token (the same amount in both
        // unit systems); where the local bucket cannot hold the quota, the cap alone.
        let local = TokenBucket::try_new(*quota, StdClock).ok();
        let bounds = local.as_ref().map(TokenBucket::unit_bounds);
        let local_debt =
            bounds.map(|b| b.max_debt_units as u128 * per_token / b.units_per_token as u128);
        // The part of a token above the burst that the local bucket keeps, in these units.
        let above = bounds.map_or(0, |b| {
            b.above_burst_units as u128 * per_token / b.units_per_token as u128
        });
        let cap = MAX_DEBT_US * per_us;
        let max_debt_units = local_debt.map_or(cap, |units| units.min(cap));
        let (per_us, per_token) = (per_us as u64, per_token as u64);
        Ok(Self {
            units_per_us: per_us,
            units_per_token: per_token,
            burst,
            burst_units: burst_units as u64,
            ceiling_units: (burst_units + above) as u64,
            start_units: quota.start_fill() * per_token, // start <= burst
            max_debt_units,
        })
    }

    /// The cost of `n` tokens in units (`n` at most the burst).
    pub(crate) fn cost(&self, n: u32) -> u64 {
        n as u64 * self.units_per_token
    }

    /// `units` (at least 0) as the script's pair: whole microseconds, and the units beyond.
    pub(crate) fn pair(&self, units: u128) -> (u128, u64) {
        let per_us = self.units_per_us as u128;
        (units / per_us, (units % per_us) as u64)
    }

    /// A pair the script answered, back in units.
    pub(crate) fn units(&self, us: i64, frac: i64) -> i128 {
        us as i128 * self.units_per_us as i128 + frac as i128
    }

    /// How long `units` take to accrue, rounded up to the nanosecond: the local bucket's answer
    /// on a nanosecond clock.
    pub(crate) fn duration(&self, units: u128) -> Duration {
        let nanos = units
            .saturating_mul(1_000)
            .div_ceil(self.units_per_us as u128);
        nanos_to_duration(nanos)
    }

    /// The units that accrue within `wait`, rounded down and at most the debt bound: a
    /// reservation is granted when its debt is at most this, exactly when the local bucket
    /// would grant it.
    pub(crate) fn debt_within(&self, wait: Duration) -> u128 {
        let units = wait.as_nanos().saturating_mul(self.units_per_us as u128) / 1_000;
        units.min(self.max_debt_units)
    }

    /// Whole tokens in `level` units; 0 in debt.
    pub(crate) fn tokens(&self, level: i128) -> u64 {
        (level.max(0) as u128 / self.units_per_token as u128) as u64
    }

    /// How long until a bucket at `level` is full.
    pub(crate) fn until_full(&self, level: i128) -> Duration {
        let missing = (self.burst_units as i128 - level).max(0);
        self.duration(missing as u128)
    }
}

/// Nanoseconds as a `Duration`, saturating.
/// The greatest common divisor of `a` and `b` (`a` when `b` is zero).
const fn gcd(mut a: u128, mut b: u128) -> u128 {
    while b != 0 {
        let r = a % b;
        a = b;
        b = r;
    }
    a
}

pub(crate) fn nanos_to_duration(nanos: u128) -> Duration {
    let secs = nanos / 1_000_000_000;
    if secs > u64::MAX as u128 {
        return Duration::MAX;
    }
    Duration::new(secs as u64, (nanos % 1_000_000_000) as u32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate::Rate;

    #[test]
    fn common_rates_are_whole_units() {
        // (rate, burst, units per µs, units per token)
        let rows = [
            (Rate::per_second(100), 10, 1, 10_000),
            (Rate::per_second(2), 5, 1, 500_000),
            (Rate::per_minute(171), 2, 57, 20_000_000),
            (Rate::per_second(1_000_000_000), 1_000, 1_000, 1),
            (Rate::new(3, Duration::from_millis(700)), 3, 3, 700_000),
            (Rate::per_day(1), 1, 1, 86_400_000_000),
        ];
        for (rate, burst, per_us, per_token) in rows {
            let layout = Layout::solve(&Quota::new(rate).burst(burst)).unwrap();
            assert_eq!(
                (layout.units_per_us, layout.units_per_token),
                (per_us, per_token),
                "{rate}"
            );
            assert!(
                layout.max_debt_units <= MAX_DEBT_US * per_us as u128,
                "{rate}"
            );
        }
    }

    #[test]
    fn what_cannot_be_held_below_2_pow_53_is_an_error() {
        let rows = [
            (
                Quota::new(Rate::per_second(0)),
                SetupError::Quota(ConfigError::ZeroRate),
            ),
            (
                Quota::new(Rate::per_second(1)).burst(0),
                SetupError::Quota(ConfigError::ZeroBurst),
            ),
            (
                Quota::new(Rate::per_second(1)).burst(1).start_with(2),
                SetupError::Quota(ConfigError::StartAboveBurst { start: 2, burst: 1 }),
            ),
            // 2^40 units per µs is the finest rate
            (
                Quota::new(Rate::per_second(1 << 50)).burst(1),
                SetupError::Unrepresentable,
            ),
            // a day per token, and a million of them in the bucket: 8.6 × 10^16 units
            (
                Quota::new(Rate::per_day(1)).burst(1_000_000),
                SetupError::Unrepresentable,
            ),
            // a window cap, read to the microsecond: 2 µs × 10^6 a second is two tokens
            (
                Quota::within(1_000_000, Duration::from_secs(1)),
                SetupError::Quota(ConfigError::WindowTooCoarse),
            ),
            (
                Quota::within(1, Duration::from_secs(1)),
                SetupError::Quota(ConfigError::BurstNotBelowCap),
            ),
            // one schedule shared by every process: nothing to phase
            (
                Quota::new(Rate::per_second(1)).start_empty().phase(1, 3),
                SetupError::Phased,
            ),
        ];
        assert!(Layout::solve(&Quota::within(100_000, Duration::from_secs(1))).is_ok());
        for (quota, error) in rows {
            use std::string::ToString;
            let refused = Layout::solve(&quota).err().map(|e| e.to_string());
            assert_eq!(refused, Some(error.to_string()), "{quota:?}");
        }
    }

    #[test]
    fn durations_round_like_the_local_bucket() {
        let layout = Layout::solve(&Quota::new(Rate::per_minute(171))).unwrap();
        // one token: 60/171 s = 350 877 192.98 ns, rounded up
        assert_eq!(
            layout.duration(layout.units_per_token as u128),
            Duration::from_nanos(350_877_193)
        );
        // 1 ns holds 0.057 units: 999 ns hold 56
        assert_eq!(layout.debt_within(Duration::from_nanos(999)), 56);
        assert_eq!(layout.debt_within(Duration::MAX), layout.max_debt_units);
        assert_eq!(layout.tokens(-5), 0);
        assert_eq!(
            layout.until_full(layout.burst_units as i128),
            Duration::ZERO
        );
    }
}

//! Why a request was denied, and why a configuration was refused.

use core::fmt;
use core::time::Duration;

/// Why a bucket did not grant a request. A denial changes nothing in the bucket.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum Denied {
    /// Not enough tokens now. Asking again after `retry_after` succeeds, unless other callers
    /// take the tokens first.
    Insufficient {
        /// How long until the request would be granted: exact, rounded up to the nanosecond.
        retry_after: Duration,
    },
    /// The request is larger than the bucket can ever hold, so no wait would help.
    ExceedsCapacity {
        /// The bucket's capacity.
        burst: u64,
    },
}

impl Denied {
    /// How long until the request would be granted; `None` when it never would.
    pub const fn retry_after(&self) -> Option<Duration> {
        match *self {
            Denied::Insufficient { retry_after } => Some(retry_after),
            Denied::ExceedsCapacity { .. } => None,
        }
    }
}

impl fmt::Display for Denied {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Denied::Insufficient { retry_after } => {
                write!(f, "rate limited: retry after {}", Readable(*retry_after))
            }
            Denied::ExceedsCapacity { burst } => write!(
                f,
                "request exceeds the bucket's capacity of {burst} tokens and can never be granted"
            ),
        }
    }
}

impl core::error::Error for Denied {}

/// Why a bucket could not be built from a quota and a clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum ConfigError {
    /// The rate grants no tokens.
    ZeroRate,
    /// The rate's period is zero.
    ZeroPeriod,
    /// A sizing helper overflowed, divided by zero or removed more than 100 per cent, or the
    /// period exceeds 584 years.
    RateOutOfRange,
    /// The burst is zero: such a bucket could grant nothing.
    ZeroBurst,
    /// The bucket would start with more tokens than it holds.
    StartAboveBurst {
        /// The start fill asked for.
        start: u64,
        /// The capacity.
        burst: u64,
    },
    /// The clock's `TICKS_PER_SECOND` is zero.
    ZeroClockFrequency,
    /// The word cannot hold this rate and burst on this clock: a year of idle time at this rate
    /// (the 64-bit word), a burst over 2^24 units (the 32-bit word), or a rate the word can only
    /// hold rounded down by more than its bound needs more distinct instants than the word has.
    /// Count tokens in coarser units, or lower the burst.
    Unrepresentable,
    /// One step of the clock's reading accrues more tokens than a drained bucket can take in,
    /// so the burst cap would eat part of the rate: a caller polling as fast as it likes would
    /// get less than the rate. Raise the burst or use a finer clock.
    ClockTooCoarse,
    /// A window quota ([`Quota::within`](crate::Quota::within)) with a zero window.
    ZeroWindow,
    /// A window quota whose window exceeds 584 years.
    WindowOutOfRange,
    /// A window quota whose burst is not below its cap (after margins and division), or whose
    /// cap is zero: no rate would be left.
    BurstNotBelowCap,
    /// A window quota on a clock read so coarsely that two steps of the reading accrue a whole
    /// token (`2 × resolution × rate ≥ 1`), so a window could see one grant above the cap. Use
    /// a finer clock, or a longer window.
    WindowTooCoarse,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message())?;
        if let ConfigError::StartAboveBurst { start, burst } = self {
            write!(f, " ({start} > {burst})")?;
        }
        Ok(())
    }
}

impl ConfigError {
    /// A one-line description, usable in `const` panics.
    pub(crate) const fn message(&self) -> &'static str {
        match self {
            ConfigError::ZeroRate => "rate is zero",
            ConfigError::ZeroPeriod => "rate period is zero",
            ConfigError::RateOutOfRange => {
                "rate out of range: a sizing helper overflowed, divided by zero or removed more than 100 %"
            }
            ConfigError::ZeroBurst => "burst is zero",
            ConfigError::StartAboveBurst { .. } => "start fill is above the burst",
            ConfigError::ZeroClockFrequency => "clock has zero ticks per second",
            ConfigError::Unrepresentable => {
                "rate and burst cannot be held exactly in the bucket's word on this clock; count tokens in coarser units or lower the burst"
            }
            ConfigError::ClockTooCoarse => {
                "one tick of the clock accrues more tokens than the burst can take in; raise the burst or use a finer clock"
            }
            ConfigError::ZeroWindow => "window of the cap is zero",
            ConfigError::WindowOutOfRange => "window of the cap exceeds 584 years",
            ConfigError::BurstNotBelowCap => {
                "burst is not below the window's cap (after margins and division), so no rate is left; lower the burst or raise the cap"
            }
            ConfigError::WindowTooCoarse => {
                "two steps of the clock's reading accrue a whole token, so the window's cap could be exceeded by one; use a finer clock or a longer window"
            }
        }
    }
}

impl core::error::Error for ConfigError {}

/// A duration as a person reads it in a message: `1.3 s`, `250 ms`, `2 min 5 s`. Rounded up at
/// the digit shown, so a `retry after` is never read as sooner than it is. Every `Display` that
/// shows a duration goes through it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Readable(pub(crate) Duration);

impl fmt::Display for Readable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [(u128, &str); 4] = [
            (1, "ns"),
            (1_000, "µs"),
            (1_000_000, "ms"),
            (1_000_000_000, "s"),
        ];
        let nanos = self.0.as_nanos();
        if nanos >= 60_000_000_000 {
            return whole_minutes(f, nanos);
        }
        // The largest unit that reads at least 1 (and under 1000 once rounded up), to one
        // decimal below 10 of it.
        let mut at = 0;
        while at + 1 < UNITS.len()
            && (nanos >= UNITS[at + 1].0 || nanos.div_ceil(UNITS[at].0) >= 1_000)
        {
            at += 1;
        }
        let (per, name) = UNITS[at];
        if per == 1 {
            return write!(f, "{nanos} {name}");
        }
        let tenths = nanos.div_ceil(per / 10);
        if tenths % 10 == 0 || tenths >= 100 {
            write!(f, "{} {name}", tenths.div_ceil(10))
        } else {
            write!(f, "{}.{} {name}", tenths / 10, tenths % 10)
        }
    }
}

/// A minute or more: the two largest of days, hours, minutes and seconds, rounded up.
fn whole_minutes(f: &mut fmt::Formatter<'_>, nanos: u128) -> fmt::Result {
    const PARTS: [(u128, &str); 4] = [(86_400, "d"), (3_600, "h"), (60, "min"), (1, "s")];
    let secs = nanos.div_ceil(1_000_000_000);
    let first = PARTS.iter().position(|&(per, _)| secs >= per).unwrap_or(3);
    let (big, big_name) = PARTS[first];
    let Some(&(small, small_name)) = PARTS.get(first + 1) else {
        return write!(f, "{secs} {big_name}");
    };
    let total = secs.div_ceil(small);
    let (high, low) = (total / (big / small), total % (big / small));
    if low == 0 {
        write!(f, "{high} {big_name}")
    } else {
        write!(f, "{high} {big_name} {low} {small_name}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::string::ToString;

    #[test]
    fn durations_read_as_people_write_them_never_sooner() {
        let rows = [
            (Duration::ZERO, "0 ns"),
            (Duration::from_nanos(999), "999 ns"),
            (Duration::from_nanos(1_000), "1 µs"),
            (Duration::from_nanos(1_001), "1.1 µs"),
            (Duration::from_micros(250), "250 µs"),
            (Duration::from_millis(200), "200 ms"),
            (Duration::from_nanos(999_999_999), "1 s"),
            (Duration::from_millis(1_200), "1.2 s"),
            (Duration::from_millis(1_201), "1.3 s"),
            (Duration::from_millis(9_950), "10 s"),
            (Duration::from_secs(59), "59 s"),
            (Duration::from_secs(60), "1 min"),
            (Duration::from_millis(125_001), "2 min 6 s"),
            (Duration::from_secs(3 * 3_600 + 1), "3 h 1 min"),
            (Duration::from_secs(2 * 86_400), "2 d"),
            (Duration::MAX, "213503982334601 d 8 h"),
        ];
        for (duration, text) in rows {
            assert_eq!(Readable(duration).to_string(), text, "{duration:?}");
        }
    }

    #[test]
    fn a_denial_says_when_to_retry_in_seconds() {
        let denied = Denied::Insufficient {
            retry_after: Duration::from_millis(1_200),
        };
        assert_eq!(denied.to_string(), "rate limited: retry after 1.2 s");
    }
}

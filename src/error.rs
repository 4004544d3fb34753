//! Why a request was denied, and why a configuration was refused.

use core::fmt;
use core::time::Duration;

/// Why a bucket did not grant a request. A denial changes nothing in the bucket.
///
/// A denial for want of tokens carries what it takes to say how long to wait, and works that
/// out only when asked ([`retry_after`](Self::retry_after)): a caller that reads only whether
/// it was granted pays for no conversion of ticks to a [`Duration`] (on a microcontroller, a
/// long division).
///
/// ```
/// use tollgate::{Denied, ManualClock, Quota, Rate, TokenBucket};
/// use core::time::Duration;
///
/// let clock = ManualClock::new();
/// let bucket = TokenBucket::try_new(Quota::new(Rate::per_second(2)).burst(1), &clock)?;
/// assert!(bucket.try_acquire(1).is_ok());
/// let denied = bucket.try_acquire(1).unwrap_err();
/// assert_eq!(denied.retry_after(), Some(Duration::from_millis(500)));
/// assert!(matches!(denied, Denied::Insufficient { .. }));
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum Denied {
    /// Not enough tokens now. Asking again after `retry_after` succeeds, unless other callers
    /// take the tokens first.
    Insufficient {
        /// How long until the request would be granted: exact, rounded up to the nanosecond,
        /// worked out when read ([`RetryAfter::get`]).
        retry_after: RetryAfter,
    },
    /// The request is larger than the bucket can ever hold, so no wait would help.
    ExceedsCapacity {
        /// The bucket's capacity.
        burst: u64,
    },
}

impl Denied {
    /// A denial for want of tokens that says to retry after `wait`: what a bucket that learns
    /// the wait as a duration (a remote one) answers.
    #[inline]
    pub const fn insufficient(wait: Duration) -> Denied {
        Denied::Insufficient {
            retry_after: RetryAfter::new(wait),
        }
    }

    /// How long until the request would be granted; `None` when it never would. Worked out
    /// now, from what the denial carries.
    #[inline]
    pub fn retry_after(&self) -> Option<Duration> {
        match *self {
            Denied::Insufficient { retry_after } => Some(retry_after.get()),
            Denied::ExceedsCapacity { .. } => None,
        }
    }
}

impl fmt::Display for Denied {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Denied::Insufficient { retry_after } => {
                write!(
                    f,
                    "rate limited: retry after {}",
                    HumanDuration(retry_after.get())
                )
            }
            Denied::ExceedsCapacity { burst } => write!(
                f,
                "request exceeds the bucket's capacity of {burst} tokens and can never be granted"
            ),
        }
    }
}

impl core::error::Error for Denied {}

/// How long a denied request has to wait: a [`Duration`] worked out when read.
///
/// A bucket's denial carries the units it lacks, the instant it read and the few numbers of
/// its layout that turn those into clock ticks, and the clock's conversion of ticks to a
/// `Duration`; [`get`](Self::get) does the division. Two values are equal when they name the
/// same duration, however each was made.
///
/// ```
/// use tollgate::RetryAfter;
/// use core::time::Duration;
///
/// let wait = RetryAfter::new(Duration::from_millis(350));
/// assert_eq!(wait.get(), Duration::from_millis(350));
/// assert_eq!(wait, RetryAfter::from(Duration::from_millis(350)));
/// ```
#[derive(Clone, Copy)]
pub struct RetryAfter(Wait);

#[derive(Clone, Copy)]
enum Wait {
    /// Known as a duration already.
    Known(Duration),
    /// `short_units` from `now_ticks`, on a layout of `units_per_quantum` units a quantum of
    /// 2^`shift` ticks (or, `fixed`, in 32-bit fixed point): see `Layout::ticks_until`.
    Units {
        short_units: u64,
        now_ticks: u64,
        units_per_quantum: u64,
        shift: u8,
        fixed: bool,
        narrow: bool,
        to_duration: fn(u64) -> Duration,
    },
}

impl RetryAfter {
    /// A wait known as a duration.
    #[inline]
    pub const fn new(wait: Duration) -> RetryAfter {
        RetryAfter(Wait::Known(wait))
    }

    /// The wait of `short_units` units from `now_ticks` on `layout`, read on the clock `C`:
    /// nothing worked out yet.
    #[inline(always)]
    pub(crate) fn of_units<C: crate::Clock + ?Sized>(
        layout: &crate::engine::layout::Layout,
        now_ticks: u64,
        short_units: u64,
    ) -> RetryAfter {
        RetryAfter(Wait::Units {
            short_units,
            now_ticks,
            units_per_quantum: layout.units_per_quantum.get(),
            shift: layout.shift,
            fixed: layout.fraction_bits != 0,
            narrow: layout.word_bits == 32,
            to_duration: crate::clock::ticks_to_duration_ceil::<C>,
        })
    }

    /// The wait: exact, rounded up to the nanosecond.
    #[inline]
    pub fn get(&self) -> Duration {
        match self.0 {
            Wait::Known(wait) => wait,
            Wait::Units {
                short_units,
                now_ticks,
                units_per_quantum,
                shift,
                fixed,
                narrow,
                to_duration,
            } => to_duration(crate::engine::layout::ticks_until(
                units_per_quantum,
                shift,
                fixed,
                narrow,
                now_ticks,
                short_units,
            )),
        }
    }
}

impl From<Duration> for RetryAfter {
    fn from(wait: Duration) -> RetryAfter {
        RetryAfter::new(wait)
    }
}

impl From<RetryAfter> for Duration {
    fn from(wait: RetryAfter) -> Duration {
        wait.get()
    }
}

impl PartialEq for RetryAfter {
    fn eq(&self, other: &RetryAfter) -> bool {
        self.get() == other.get()
    }
}

impl Eq for RetryAfter {}

impl PartialEq<Duration> for RetryAfter {
    fn eq(&self, other: &Duration) -> bool {
        self.get() == *other
    }
}

impl core::hash::Hash for RetryAfter {
    fn hash<H: core::hash::Hasher>(&self, state: &mut H) {
        self.get().hash(state);
    }
}

impl fmt::Debug for RetryAfter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.get(), f)
    }
}

#[cfg(feature = "defmt")]
impl defmt::Format for RetryAfter {
    fn format(&self, f: defmt::Formatter<'_>) {
        let wait = self.get();
        defmt::write!(f, "{=u64}.{=u32:09} s", wait.as_secs(), wait.subsec_nanos());
    }
}

/// Why a bucket could not be built from a quota and a clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum ConfigError {
    /// The rate grants no tokens.
    ZeroRate,
    /// The rate's period is zero.
    ZeroPeriod,
    /// A sizing helper's exact result does not fit 64-bit numbers of tokens per nanoseconds
    /// (a rate divided again and again, say).
    RateOutOfRange,
    /// The rate's period exceeds 584 years (`u64::MAX` nanoseconds), as in
    /// `Rate::new(1, Duration::MAX)`.
    PeriodOutOfRange,
    /// `minus_percent` removed more than 100 per cent of the rate or cap.
    PercentAbove100 {
        /// The per cent asked for.
        percent: u32,
    },
    /// `divided_by(0)`: a rate or cap divided among zero parts.
    DividedByZero,
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
    /// [`Quota::phase`](crate::Quota::phase) with an index not below its parts (or zero
    /// parts): a worker's place among those splitting a quota must be one of them.
    PhaseOutOfRange {
        /// The index given.
        index: u16,
        /// The parts given.
        parts: u16,
    },
    /// A window quota on a clock read so coarsely that two steps of the reading accrue a whole
    /// token (`2 × resolution × rate ≥ 1`), so a window could see one grant above the cap. Use
    /// a finer clock, or a longer window.
    WindowTooCoarse,
    /// An unlimited quota ([`Rate::UNLIMITED`](crate::Rate::UNLIMITED)) given to a limiter that
    /// takes only a finite rate: one whose state lives elsewhere (Redis), whose quota changes
    /// (`AdjustableBucket`), the no_std keyed table, or a tier of a keyed limiter.
    UnlimitedNotTaken,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message())?;
        match self {
            ConfigError::StartAboveBurst { start, burst } => write!(f, " ({start} > {burst})"),
            ConfigError::PercentAbove100 { percent } => write!(f, " (minus_percent({percent}))"),
            ConfigError::PhaseOutOfRange { index, parts } => {
                write!(f, " (phase({index}, {parts}))")
            }
            _ => Ok(()),
        }
    }
}

impl ConfigError {
    /// A one-line description, usable in `const` panics.
    pub(crate) const fn message(&self) -> &'static str {
        match self {
            ConfigError::ZeroRate => "rate is zero",
            ConfigError::ZeroPeriod => "rate period is zero",
            ConfigError::RateOutOfRange => {
                "rate out of range: a sizing helper's exact result does not fit 64-bit tokens per nanoseconds; divide less finely or count tokens in coarser units"
            }
            ConfigError::PeriodOutOfRange => {
                "rate period exceeds 584 years (u64::MAX nanoseconds); give the rate over a shorter period"
            }
            ConfigError::PercentAbove100 { .. } => {
                "minus_percent removes more than 100 % of the rate, leaving less than nothing"
            }
            ConfigError::DividedByZero => {
                "divided_by(0): a rate cannot be shared among zero parts"
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
            ConfigError::PhaseOutOfRange { .. } => {
                "phase index is not below its parts: worker i of k needs i < k"
            }
            ConfigError::ZeroWindow => "window of the cap is zero",
            ConfigError::WindowOutOfRange => "window of the cap exceeds 584 years",
            ConfigError::BurstNotBelowCap => {
                "burst is not below the window's cap (after margins and division), so no rate is left; lower the burst or raise the cap"
            }
            ConfigError::UnlimitedNotTaken => {
                "an unlimited quota is taken by TokenBucket and KeyedLimiter only; this limiter needs a finite rate"
            }
            ConfigError::WindowTooCoarse => {
                "two steps of the clock's reading accrue a whole token, so the window's cap could be exceeded by one; use a finer clock or a longer window"
            }
        }
    }
}

impl core::error::Error for ConfigError {}

/// A duration as a person reads it, rounded up so that waiting that long is never early (the
/// one formatter of every message that shows a duration):
/// milliseconds below a second (`350 ms`), seconds to a tenth from there (`1.2 s`, `3 s`),
/// `0 s` for none. For the body of an answer, where `{:?}` (`1.2000001s`) would do.
///
/// ```
/// use core::time::Duration;
/// use tollgate::headers::HumanDuration;
///
/// assert_eq!(HumanDuration(Duration::from_millis(1_200)).to_string(), "1.2 s");
/// assert_eq!(HumanDuration(Duration::from_nanos(1_200_000_001)).to_string(), "1.3 s");
/// assert_eq!(HumanDuration(Duration::from_millis(350)).to_string(), "350 ms");
/// assert_eq!(HumanDuration(Duration::from_micros(10)).to_string(), "1 ms");
/// assert_eq!(HumanDuration(Duration::from_secs(3)).to_string(), "3 s");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HumanDuration(pub Duration);

impl fmt::Display for HumanDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let nanos = self.0.as_nanos();
        if nanos == 0 {
            return f.write_str("0 s");
        }
        let millis = nanos.div_ceil(1_000_000);
        if millis < 1_000 {
            return write!(f, "{millis} ms");
        }
        let tenths = nanos.div_ceil(100_000_000);
        match tenths % 10 {
            0 => write!(f, "{} s", tenths / 10),
            tenth => write!(f, "{}.{tenth} s", tenths / 10),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::string::ToString;

    #[test]
    fn a_denial_says_when_to_retry_in_seconds() {
        let denied = Denied::insufficient(Duration::from_millis(1_200));
        assert_eq!(denied.to_string(), "rate limited: retry after 1.2 s");
    }
}

//! [`Rate`] and [`Quota`]: exact rational rates and the shape of a bucket.

use core::fmt;
use core::time::Duration;

use crate::ConfigError;

mod window;

use window::WindowState;

const NANOS_PER_SECOND: u64 = 1_000_000_000;

/// A rate of tokens per period, kept as an exact fraction.
///
/// Rates are rational, never floating point: `Rate::per_minute(600)` less 5 % less 10 % divided
/// across 3 jobs is exactly 171 per minute, and 100 per second less 10 % divided by 4 is exactly
/// 45 per 2 seconds (22.5 per second).
///
/// ```
/// use core::time::Duration;
/// use tollgate::Rate;
///
/// let per_job = Rate::per_minute(600).minus_percent(5).minus_percent(10).divided_by(3);
/// assert_eq!(per_job, Rate::per_minute(171));
///
/// let per_replica = Rate::per_second(100).minus_percent(10).divided_by(4);
/// assert_eq!(per_replica, Rate::new(45, Duration::from_secs(2)));
/// ```
///
/// Constructors are `const` and never panic. A rate that makes no sense (zero tokens, a zero
/// period, a helper that overflowed or removed more than everything) is carried as it is and
/// reported as a [`ConfigError`](crate::ConfigError) when a bucket is built from it.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rate {
    /// Tokens per `per_ns`, in lowest terms with `per_ns`.
    tokens: u64,
    per_ns: u64,
    /// Why the rate is out of range, the first cause a constructor or helper met.
    range: Range,
}

/// Whether a [`Rate`] is in range, and if not, the first cause: each is its own
/// [`ConfigError`] when a bucket is built.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Range {
    In,
    /// A period over `u64::MAX` nanoseconds.
    PeriodTooLong,
    /// `minus_percent(percent)` with `percent` over 100.
    PercentAbove100(u32),
    /// `divided_by(0)`.
    DividedByZero,
    /// An exact result that does not fit 64-bit tokens per nanoseconds.
    Overflow,
    /// [`Rate::UNLIMITED`]: no limit at all, which only some limiters take.
    Unlimited,
}

impl Range {
    /// The error a bucket built on a rate with this range reports, if any.
    pub(crate) const fn error(self) -> Option<ConfigError> {
        match self {
            Range::In => None,
            Range::PeriodTooLong => Some(ConfigError::PeriodOutOfRange),
            Range::PercentAbove100(percent) => Some(ConfigError::PercentAbove100 { percent }),
            Range::DividedByZero => Some(ConfigError::DividedByZero),
            Range::Overflow => Some(ConfigError::RateOutOfRange),
            Range::Unlimited => Some(ConfigError::UnlimitedNotTaken),
        }
    }
}

impl Rate {
    /// No limit: a [`TokenBucket`](crate::TokenBucket) or a
    /// `KeyedLimiter` on a quota of this rate grants every request at
    /// once (Go's `rate.Inf`). It turns a limit off from configuration, leaving the code's shape
    /// as it is. Less a percentage or divided, it stays unlimited. The limiters that keep their
    /// state elsewhere or change their quota (Redis, `AdjustableBucket`, the no_std keyed table)
    /// refuse it with [`ConfigError::UnlimitedNotTaken`].
    ///
    /// ```
    /// use tollgate::{ManualClock, Quota, Rate, TokenBucket};
    ///
    /// let clock = ManualClock::new();
    /// let bucket = TokenBucket::try_new(Quota::new(Rate::UNLIMITED), &clock)?;
    /// for _ in 0..1_000 {
    ///     assert!(bucket.try_acquire(u32::MAX).is_ok());
    /// }
    /// assert!(bucket.is_unlimited());
    /// assert_eq!(Rate::UNLIMITED.divided_by(3), Rate::UNLIMITED);
    /// assert_eq!(Rate::UNLIMITED.to_string(), "unlimited");
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub const UNLIMITED: Self = Self {
        tokens: u64::MAX,
        per_ns: 1,
        range: Range::Unlimited,
    };

    /// Whether this is [`Rate::UNLIMITED`].
    pub const fn is_unlimited(&self) -> bool {
        matches!(self.range, Range::Unlimited)
    }

    /// `tokens` per `period`. A period longer than `u64::MAX` nanoseconds (584 years) is out of
    /// range.
    pub const fn new(tokens: u64, period: Duration) -> Self {
        let per_ns = period.as_nanos();
        if per_ns > u64::MAX as u128 {
            return Self::out_of_range(Range::PeriodTooLong);
        }
        Self::reduced(tokens as u128, per_ns)
    }

    /// `tokens` per second.
    pub const fn per_second(tokens: u64) -> Self {
        Self::reduced(tokens as u128, NANOS_PER_SECOND as u128)
    }

    /// `tokens` per minute.
    pub const fn per_minute(tokens: u64) -> Self {
        Self::reduced(tokens as u128, 60 * NANOS_PER_SECOND as u128)
    }

    /// `tokens` per hour.
    pub const fn per_hour(tokens: u64) -> Self {
        Self::reduced(tokens as u128, 3_600 * NANOS_PER_SECOND as u128)
    }

    /// `tokens` per day (86 400 seconds).
    pub const fn per_day(tokens: u64) -> Self {
        Self::reduced(tokens as u128, 86_400 * NANOS_PER_SECOND as u128)
    }

    /// This rate less `percent` per cent, exactly: a safety margin for clock skew or retries.
    ///
    /// More than 100 per cent is out of range; exactly 100 leaves a zero rate. Both are reported
    /// when a bucket is built.
    pub const fn minus_percent(self, percent: u32) -> Self {
        if self.is_out_of_range() {
            return self;
        }
        if percent > 100 {
            return Self::out_of_range(Range::PercentAbove100(percent));
        }
        Self::reduced(
            self.tokens as u128 * (100 - percent) as u128,
            self.per_ns as u128 * 100,
        )
    }

    /// This rate divided evenly among `parts` replicas, jobs or workers, exactly.
    ///
    /// Dividing by zero is out of range, reported when a bucket is built.
    pub const fn divided_by(self, parts: u64) -> Self {
        if self.is_out_of_range() {
            return self;
        }
        if parts == 0 {
            return Self::out_of_range(Range::DividedByZero);
        }
        Self::reduced(self.tokens as u128, self.per_ns as u128 * parts as u128)
    }

    /// The tokens in one [`period`](Self::period), in lowest terms.
    pub const fn tokens(&self) -> u64 {
        self.tokens
    }

    /// The period over which [`tokens`](Self::tokens) accrue, in lowest terms.
    pub const fn period(&self) -> Duration {
        Duration::from_nanos(self.per_ns)
    }

    /// The period in nanoseconds.
    pub(crate) const fn period_ns(&self) -> u64 {
        self.per_ns
    }

    pub(crate) const fn is_out_of_range(&self) -> bool {
        !matches!(self.range, Range::In)
    }

    /// Why the rate is out of range: `None` when it is in range.
    pub(crate) const fn range_error(&self) -> Option<ConfigError> {
        self.range.error()
    }

    /// Whole tokens accrued in one second, at least 1: the default burst.
    pub(crate) const fn one_second_at_least_one(&self) -> u64 {
        if self.per_ns == 0 {
            return 1;
        }
        let per_second = self.tokens as u128 * NANOS_PER_SECOND as u128 / self.per_ns as u128;
        if per_second == 0 {
            1
        } else if per_second > u64::MAX as u128 {
            u64::MAX
        } else {
            per_second as u64
        }
    }

    /// A rate out of range because a result did not fit.
    pub(crate) const OUT_OF_RANGE: Self = Self::out_of_range(Range::Overflow);

    /// A rate out of range for `cause`.
    pub(crate) const fn out_of_range(cause: Range) -> Self {
        Self {
            tokens: 0,
            per_ns: 0,
            range: cause,
        }
    }

    const fn reduced(tokens: u128, per_ns: u128) -> Self {
        let g = gcd(tokens, per_ns);
        let (tokens, per_ns) = match (tokens.checked_div(g), per_ns.checked_div(g)) {
            (Some(tokens), Some(per_ns)) => (tokens, per_ns),
            _ => (0, 0), // both zero
        };
        if tokens > u64::MAX as u128 || per_ns > u64::MAX as u128 {
            return Self::OUT_OF_RANGE;
        }
        Self {
            tokens: tokens as u64,
            per_ns: per_ns as u64,
            range: Range::In,
        }
    }
}

/// Greatest common divisor; `gcd(0, x) = x`.
pub(crate) const fn gcd(mut a: u128, mut b: u128) -> u128 {
    while b != 0 {
        let r = a % b;
        a = b;
        b = r;
    }
    a
}

impl fmt::Debug for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for Rate {
    /// `171 per minute`, `1350 per minute` for 22.5 per second, `3 per 700 ms`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_unlimited() {
            return f.write_str("unlimited");
        }
        if let Some(error) = self.range_error() {
            return fmt::Display::fmt(&error, f);
        }
        // The smallest common unit that is a whole number of periods: 57 per 20 s reads as
        // 171 per minute.
        const WHOLE: [(u64, &str); 4] = [
            (NANOS_PER_SECOND, "second"),
            (60 * NANOS_PER_SECOND, "minute"),
            (3_600 * NANOS_PER_SECOND, "hour"),
            (86_400 * NANOS_PER_SECOND, "day"),
        ];
        for (unit_ns, name) in WHOLE {
            if self.per_ns != 0 && unit_ns % self.per_ns == 0 {
                let tokens = self.tokens as u128 * (unit_ns / self.per_ns) as u128;
                return write!(f, "{tokens} per {name}");
            }
        }
        write!(f, "{} per ", self.tokens)?;
        const UNITS: [(u64, &str); 7] = [
            (86_400 * NANOS_PER_SECOND, "days"),
            (3_600 * NANOS_PER_SECOND, "h"),
            (60 * NANOS_PER_SECOND, "min"),
            (NANOS_PER_SECOND, "s"),
            (1_000_000, "ms"),
            (1_000, "µs"),
            (1, "ns"),
        ];
        for (unit_ns, name) in UNITS {
            if self.per_ns != 0 && self.per_ns % unit_ns == 0 {
                return write!(f, "{} {name}", self.per_ns / unit_ns);
            }
        }
        f.write_str("0 ns")
    }
}

#[cfg(feature = "defmt")]
impl defmt::Format for Rate {
    fn format(&self, f: defmt::Formatter<'_>) {
        defmt::write!(f, "{=u64} per {=u64} ns", self.tokens, self.per_ns)
    }
}

/// How full a bucket is when it starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
enum Start {
    Full,
    Empty,
    /// With the quota's `start_tokens`.
    With,
}

/// The shape of a bucket: its [`Rate`], its burst (capacity) and how full it starts.
///
/// ```
/// use tollgate::{Quota, Rate};
///
/// let quota = Quota::new(Rate::per_second(2)).burst(5); // starts full
/// assert_eq!(quota.burst_size(), 5);
/// assert_eq!(quota.start_empty().start_fill(), 0);
/// assert_eq!(quota.start_with(3).start_fill(), 3);
///
/// // The default burst is one second of rate, at least one token.
/// assert_eq!(Quota::new(Rate::per_minute(171)).burst_size(), 2);
/// assert_eq!(Quota::new(Rate::per_hour(10)).burst_size(), 1);
/// ```
///
/// Like [`Rate`], every method is `const` and never panics; a zero burst or a start above the
/// burst is reported when a bucket is built.
///
/// A window quota ([`Quota::within`]) also keeps its window, and with it its cap (`burst +
/// rate × window`), so that a later burst or margin splits the cap again. The fields are
/// packed so that a bucket, which holds its quota, stays within three cache lines.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Quota {
    /// The rate; on a window quota whose burst is not below its cap, the cap per window.
    rate: Rate,
    /// The burst set, if `burst_set`.
    burst: u64,
    /// The start fill, if `start` is [`Start::With`]; otherwise 0.
    start_tokens: u64,
    /// The window of a window quota, in nanoseconds; otherwise 0.
    window_ns: u64,
    /// The phase: the start is `phase_index / phase_parts` of a token's time later (0 of 1:
    /// none).
    phase_index: u16,
    phase_parts: u16,
    burst_set: bool,
    start: Start,
    window: WindowState,
}

impl Quota {
    /// A bucket filling at `rate`, holding one second of it (at least one token), starting full.
    pub const fn new(rate: Rate) -> Self {
        Self {
            rate,
            burst: 0,
            start_tokens: 0,
            window_ns: 0,
            phase_index: 0,
            phase_parts: 1,
            burst_set: false,
            start: Start::Full,
            window: WindowState::None,
        }
    }

    /// The most tokens the bucket holds: the largest spike it lets through after an idle spell.
    ///
    /// On a window quota ([`Quota::within`]) the burst is taken out of the cap: the rate drops
    /// so that `burst + rate × window` stays the cap.
    pub const fn burst(self, burst: u64) -> Self {
        let cap = self.cap_rate();
        Self {
            burst,
            burst_set: true,
            ..self
        }
        .split(cap)
    }

    /// Start full (the default): the first burst after start-up passes at once.
    pub const fn start_full(self) -> Self {
        Self {
            start: Start::Full,
            start_tokens: 0,
            ..self
        }
    }

    /// Start empty, so that a fleet deployed at once ramps in instead of bursting together.
    /// Its replicas' first tokens then still fall at the same instant, one period in: give
    /// each a [`random_phase`](Self::random_phase) (or, for workers with an index, a
    /// [`phase`](Self::phase)) to spread them.
    pub const fn start_empty(self) -> Self {
        Self {
            start: Start::Empty,
            start_tokens: 0,
            ..self
        }
    }

    /// Start with `tokens` in the bucket.
    pub const fn start_with(self, tokens: u64) -> Self {
        Self {
            start: Start::With,
            start_tokens: tokens,
            ..self
        }
    }

    /// Worker `index` of `parts` that split one quota: the bucket's schedule runs
    /// `index / parts` of a token's time (`index / (parts × rate)`) behind the schedule the
    /// start fill alone gives, so that `parts` buckets built at once, each with its own index,
    /// take their tokens at instants spread evenly over one period rather than all at once.
    ///
    /// The geocoding job: a provider allows 1 request a second; less 5 % and split over three
    /// workers, each worker's bucket grants one request every 3.158 s. Built `start_empty`
    /// without a phase, the three grant their first requests at the same instant, and every
    /// one after; with phases 0, 1 and 2 of 3, worker `i` runs `i × 1.053 s` behind worker 0,
    /// so no two requests of the three ever start within one second of each other.
    ///
    /// ```
    /// use core::time::Duration;
    /// use tollgate::{ManualClock, Quota, Rate, TokenBucket};
    ///
    /// let clock = ManualClock::new();
    /// let per_worker = Quota::new(Rate::per_second(1).minus_percent(5).divided_by(3)).start_empty();
    /// let workers: Vec<_> = (0..3)
    ///     .map(|i| TokenBucket::try_new(per_worker.phase(i, 3), &clock))
    ///     .collect::<Result<_, _>>()?;
    /// let first: Vec<Duration> = workers
    ///     .iter()
    ///     .map(|w| w.reserve(1, Duration::MAX).unwrap().wait())
    ///     .collect();
    /// // 60/19 s (3.158 s), then 1/3 and 2/3 of that later: 1.053 s apart, to the bucket's
    /// // resolution (a few nanoseconds: this rate is read in quanta of ticks for a century).
    /// let close = |d: Duration, ns: u64| d.as_nanos().abs_diff(ns.into()) <= 2 * workers[0].resolution().as_nanos();
    /// assert!(close(first[0], 3_157_894_737));
    /// assert!(close(first[1], 4_210_526_316));
    /// assert!(close(first[2], 5_263_157_895));
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    ///
    /// The offset is held to the word's unit (at most one clock tick), rounded down. It applies from the start fill on: with a full start,
    /// worker `i` starts with `index / parts` of a token less. `index` must be below `parts`
    /// ([`ConfigError::PhaseOutOfRange`] when a bucket is built). For replicas that have no
    /// index, see [`random_phase`](Self::random_phase).
    ///
    /// The phase shapes where a bucket starts, nothing else: a bucket's later waits keep its
    /// schedule only as well as its callers keep up (a caller late for a token that a burst of
    /// one cannot hold loses that lateness, and its bucket's schedule moves by it), and a quota
    /// change on an `AdjustableBucket` keeps the schedule the bucket has. A bucket kept in
    /// Redis is one schedule for every process and takes no phase.
    pub const fn phase(self, index: u16, parts: u16) -> Self {
        Self {
            phase_index: index,
            phase_parts: parts,
            ..self
        }
    }

    /// A phase drawn from `seed`, uniform over one token's time: for replicas started together
    /// that have no index to [`phase`](Self::phase) by. Built `start_empty`, each replica's
    /// first token falls somewhere in the second period after its start rather than at the
    /// same instant as every other's, and its schedule stays that far apart from theirs.
    ///
    /// The phase is one of 65 535 steps of a token's time. The same seed gives the same phase; give each replica its own (a hash of its host name
    /// or pod name, its process id, the time it started).
    ///
    /// ```
    /// use tollgate::{Quota, Rate};
    ///
    /// let quota = Quota::new(Rate::per_second(10)).start_empty();
    /// let (index, parts) = quota.random_phase(7).phase_fraction();
    /// assert!(index < parts);
    /// assert_eq!(quota.random_phase(7), quota.random_phase(7));
    /// assert_ne!(quota.random_phase(7), quota.random_phase(8));
    /// ```
    pub const fn random_phase(self, seed: u64) -> Self {
        // The top bits of one SplitMix64 output, below 2^16 - 1.
        let x = crate::wait::splitmix64(seed) >> 48;
        self.phase((x % u16::MAX as u64) as u16, u16::MAX)
    }

    /// The phase as `(index, parts)`: the start runs `index / parts` of a token's time late;
    /// `(0, 1)` for none.
    pub const fn phase_fraction(&self) -> (u16, u16) {
        (self.phase_index, self.phase_parts)
    }

    /// The rate at which tokens accrue.
    pub const fn rate(&self) -> Rate {
        self.rate
    }

    /// An unlimited quota: [`Rate::UNLIMITED`], which grants every request at once (a burst
    /// and a start fill set on it mean nothing).
    pub const fn unlimited() -> Self {
        Self::new(Rate::UNLIMITED)
    }

    /// Whether the quota's rate is [`Rate::UNLIMITED`].
    pub const fn is_unlimited(&self) -> bool {
        self.rate.is_unlimited()
    }

    /// The capacity: the burst set, or one second of rate (at least 1); `u64::MAX` on an
    /// unlimited quota.
    pub const fn burst_size(&self) -> u64 {
        if self.rate.is_unlimited() {
            return u64::MAX;
        }
        if self.burst_set {
            self.burst
        } else {
            self.rate.one_second_at_least_one()
        }
    }

    /// The tokens in the bucket when it starts.
    pub const fn start_fill(&self) -> u64 {
        match self.start {
            Start::Full => self.burst_size(),
            Start::Empty => 0,
            Start::With => self.start_tokens,
        }
    }

    /// Whether this quota can describe a bucket at all, whatever the clock and word that hold
    /// it: a window that splits, a rate in range with a non-zero period and tokens, a burst,
    /// and a start fill within it. Every bucket kind checks this first, then what its clock and
    /// word add (see [`ConfigError`]).
    ///
    /// ```
    /// use tollgate::{ConfigError, Quota, Rate};
    ///
    /// assert_eq!(Quota::new(Rate::per_second(5)).validate(), Ok(()));
    /// assert_eq!(
    ///     Quota::new(Rate::per_second(5)).burst(2).start_with(3).validate(),
    ///     Err(ConfigError::StartAboveBurst { start: 3, burst: 2 })
    /// );
    /// ```
    pub const fn validate(&self) -> Result<(), ConfigError> {
        if let Some(error) = self.window_error() {
            return Err(error);
        }
        let rate = self.rate;
        if let Some(error) = rate.range_error() {
            return Err(error);
        }
        if rate.period_ns() == 0 {
            return Err(ConfigError::ZeroPeriod);
        }
        if rate.tokens() == 0 {
            return Err(ConfigError::ZeroRate);
        }
        let burst = self.burst_size();
        if burst == 0 {
            return Err(ConfigError::ZeroBurst);
        }
        let start = self.start_fill();
        if start > burst {
            return Err(ConfigError::StartAboveBurst { start, burst });
        }
        if self.phase_index >= self.phase_parts {
            return Err(ConfigError::PhaseOutOfRange {
                index: self.phase_index,
                parts: self.phase_parts,
            });
        }
        Ok(())
    }
}

impl fmt::Display for Quota {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}, burst {}", self.rate, self.burst_size())?;
        if self.phase_index != 0 {
            write!(f, ", phase {} of {}", self.phase_index, self.phase_parts)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::format;

    #[test]
    fn sizing_helpers_are_exact() {
        let rows = [
            (
                Rate::per_minute(600)
                    .minus_percent(5)
                    .minus_percent(10)
                    .divided_by(3),
                Rate::per_minute(171),
            ),
            (
                Rate::per_second(100).minus_percent(10).divided_by(4),
                Rate::new(45, Duration::from_secs(2)),
            ),
            (Rate::per_second(10).minus_percent(0), Rate::per_second(10)),
            (Rate::per_hour(60), Rate::per_minute(1)),
            (Rate::per_day(24), Rate::per_hour(1)),
            (
                Rate::new(3, Duration::from_millis(500)),
                Rate::per_second(6),
            ),
        ];
        for (got, want) in rows {
            assert_eq!(got, want);
        }
    }

    #[test]
    fn out_of_range_is_carried_not_panicked_with_its_first_cause() {
        let rows = [
            (
                Rate::per_second(1).minus_percent(101),
                Range::PercentAbove100(101),
            ),
            (Rate::per_second(1).divided_by(0), Range::DividedByZero),
            (Rate::new(1, Duration::MAX), Range::PeriodTooLong),
            (
                Rate::per_second(1)
                    .divided_by(u64::MAX)
                    .divided_by(u64::MAX),
                Range::Overflow,
            ),
            // The first cause stays.
            (
                Rate::per_second(1).divided_by(0).minus_percent(200),
                Range::DividedByZero,
            ),
            (
                Rate::new(1, Duration::MAX).divided_by(0),
                Range::PeriodTooLong,
            ),
        ];
        for (rate, range) in rows {
            assert!(rate.is_out_of_range());
            assert_eq!(rate.range, range);
        }
        assert_eq!(Rate::per_second(7).minus_percent(100).tokens(), 0);
    }

    #[test]
    fn display_reads_naturally() {
        let rows = [
            (Rate::per_minute(171), "171 per minute"),
            (
                Rate::per_second(100).minus_percent(10).divided_by(4),
                "1350 per minute",
            ),
            (Rate::new(4, Duration::from_secs(7)), "1 per 1750 ms"),
            (Rate::new(3, Duration::from_secs(7)), "3 per 7 s"),
            (Rate::new(3, Duration::from_millis(500)), "6 per second"),
            (Rate::new(3, Duration::from_millis(700)), "3 per 700 ms"),
            (Rate::per_day(5), "5 per day"),
        ];
        for (rate, text) in rows {
            assert_eq!(format!("{rate}"), text);
        }
    }

    #[test]
    fn default_burst_is_one_second_at_least_one() {
        let rows = [
            (Rate::per_second(2), 2),
            (Rate::per_minute(171), 2),
            (Rate::per_second(100).minus_percent(10).divided_by(4), 22),
            (Rate::per_day(1), 1),
            (Rate::new(u64::MAX, Duration::from_nanos(1)), u64::MAX),
        ];
        for (rate, burst) in rows {
            assert_eq!(Quota::new(rate).burst_size(), burst, "{rate}");
        }
    }
}

//! Window quotas: [`Quota::within`], the fastest bucket that never lets more than a published
//! cap through in any window of a given length.

use core::time::Duration;

use super::{Quota, Rate};
use crate::ConfigError;

/// Whether a quota is a window quota, and if so whether its cap splits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub(super) enum WindowState {
    /// Not a window quota.
    None,
    /// Split: the rate is `(cap − burst) / window` (or out of range, if the cap is).
    Split,
    /// The burst is not below the cap: the rate field holds the cap per window, unsplit.
    BurstNotBelowCap,
    /// The window is zero.
    Zero,
    /// The window exceeds `u64::MAX` nanoseconds.
    OutOfRange,
}

impl Quota {
    /// The fastest quota that never lets more than `cap` through in any window of length
    /// `window`, sliding or fixed (calendar), with a burst of 1.
    ///
    /// A bucket with burst `b` and rate `r` grants at most `b + r × w` in any window of length
    /// `w` (the first `b` from its fill, the rest as they accrue). So this quota is burst 1 and
    /// rate `(cap − 1) / window`, exactly: `1 + rate × window = cap`. A sliding window contains
    /// every aligned one, so a calendar-minute cap holds too.
    ///
    /// **Why a burst of 1 by default.** Every token of burst is a token less of rate, for good:
    /// with 100 per minute, burst 1 sustains 99 per minute, burst 50 only 50. A caller that
    /// wants spikes says how big with [`burst`](Self::burst) or
    /// [`within_with_burst`](Self::within_with_burst); the rate gives way so that
    /// `burst + rate × window` stays `cap`. A burst of 1 also means that a caller who comes late
    /// for a token loses the lateness, since the full bucket could hold no more: polling every
    /// millisecond at 299 a minute, the 299 tokens after the first took 60.1 s. A burst of 2
    /// absorbs lateness up to a token interval, for one token less of rate per window.
    ///
    /// **The token of headroom.** Grants are whole, so a window sees at most `cap` grants even
    /// if it is up to one token interval (`1 / rate`) longer than `window`. That interval pays
    /// for the bucket reading its clock to its [`resolution`](crate::TokenBucket::resolution)
    /// at both ends of a window (`2 × resolution × rate < 1` token, which building a bucket
    /// checks, with [`ConfigError::WindowTooCoarse`] otherwise) and, against an enforcer
    /// elsewhere, for the spread in latency between the bucket's grant and the enforcer's
    /// timestamp: the rest of `1 / rate` (for 100 per minute, about 600 ms). A clock that itself
    /// steps coarsely (`CoarseClock` steps every millisecond) spends its step from it too. To
    /// cover more, pass a longer `window`.
    ///
    /// **Margins and replicas.** [`minus_percent`](Self::minus_percent) and
    /// [`divided_by`](Self::divided_by) take from the cap, exactly, and split again:
    ///
    /// ```
    /// use core::time::Duration;
    /// use tollgate::{Quota, Rate};
    ///
    /// // 600 per minute published, 5 % and 10 % margins, three jobs: each job may send 171 in
    /// // any minute, 1 at once and 170 a minute after that.
    /// let job = Quota::within(600, Duration::from_secs(60))
    ///     .minus_percent(5)
    ///     .minus_percent(10)
    ///     .divided_by(3);
    /// assert_eq!(job.window_cap(), Some(171));
    /// assert_eq!(job.burst_size(), 1);
    /// assert_eq!(job.rate(), Rate::per_minute(170));
    ///
    /// // 7 per 13 s, with a burst of 3: 3 at once, then 4 per 13 s.
    /// let odd = Quota::within_with_burst(7, Duration::from_secs(13), 3);
    /// assert_eq!(odd.rate(), Rate::new(4, Duration::from_secs(13)));
    /// ```
    ///
    /// **Several windows of one upstream** (per second, per minute, per day), each a window
    /// quota, taken all-or-none with [`Limits`](crate::Limits): every window keeps its cap.
    ///
    /// ```
    /// use core::time::Duration;
    /// use tollgate::{Limits, ManualClock, Quota, TokenBucket};
    ///
    /// let clock = ManualClock::new();
    /// let second = TokenBucket::try_new(Quota::within(10, Duration::from_secs(1)).burst(5), &clock)?;
    /// let minute = TokenBucket::try_new(Quota::within(300, Duration::from_secs(60)), &clock)?;
    /// let day = TokenBucket::try_new(Quota::within(1_000_000, Duration::from_secs(86_400)), &clock)?;
    /// let limits = Limits::new([&second, &minute, &day]);
    ///
    /// // At once: the bursts of 1 of the minute and the day bind; a denial takes from none.
    /// assert!(limits.try_acquire([1, 1, 1]).is_ok());
    /// assert!(limits.try_acquire([1, 1, 1]).is_err());
    /// assert_eq!(second.available(), 4);
    ///
    /// // Flat out for a minute, asking again exactly when told: 1 + 299 = 300, the minute's cap.
    /// let (mut granted, mut elapsed) = (1, Duration::ZERO);
    /// loop {
    ///     match limits.try_acquire([1, 1, 1]) {
    ///         Ok(()) => granted += 1,
    ///         Err(denied) => {
    ///             let wait = denied.retry_after().unwrap();
    ///             if elapsed + wait > Duration::from_secs(60) {
    ///                 break;
    ///             }
    ///             clock.advance(wait);
    ///             elapsed += wait;
    ///         }
    ///     }
    /// }
    /// assert_eq!(granted, 300);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    ///
    /// Like every `Quota` constructor this is `const` and never panics: a zero `cap` (or one no
    /// larger than the burst) is [`ConfigError::BurstNotBelowCap`], a zero `window`
    /// [`ConfigError::ZeroWindow`] and a window over 584 years
    /// [`ConfigError::WindowOutOfRange`], when a bucket is built. Where the exact rate does not
    /// fit 64-bit numbers of tokens per nanoseconds (windows of odd nanosecond lengths), it is
    /// rounded down, never up.
    pub const fn within(cap: u64, window: Duration) -> Self {
        Self::within_with_burst(cap, window, 1)
    }

    /// The fastest quota that never lets more than `cap` through in any window of length
    /// `window`, holding `burst` of it: rate `(cap − burst) / window`. See
    /// [`within`](Self::within); `burst` must be below `cap`.
    pub const fn within_with_burst(cap: u64, window: Duration, burst: u64) -> Self {
        let window_ns = window.as_nanos();
        let unsplit = Self {
            window: WindowState::Split,
            ..Self::new(Rate::OUT_OF_RANGE).burst(burst)
        };
        if window_ns > u64::MAX as u128 {
            return Self {
                window: WindowState::OutOfRange,
                ..unsplit
            };
        }
        if window_ns == 0 {
            return Self {
                window: WindowState::Zero,
                ..unsplit
            };
        }
        Self {
            window_ns: window_ns as u64,
            ..unsplit
        }
        .split(Rate::reduced(cap as u128, window_ns))
    }

    /// This quota less `percent` per cent: of the cap on a window quota (the burst stays, the
    /// rate gives way), of the rate otherwise. More than 100 is reported when a bucket is built.
    pub const fn minus_percent(self, percent: u32) -> Self {
        match self.window {
            WindowState::None => Self {
                rate: self.rate.minus_percent(percent),
                ..self
            },
            _ => self.split(self.cap_rate().minus_percent(percent)),
        }
    }

    /// This quota shared evenly among `parts` replicas, jobs or workers: the cap on a window
    /// quota (each part keeps the burst, so the parts together never exceed the whole cap in
    /// any window), the rate otherwise (the burst stays). Zero parts is reported when a bucket
    /// is built.
    pub const fn divided_by(self, parts: u64) -> Self {
        match self.window {
            WindowState::None => Self {
                rate: self.rate.divided_by(parts),
                ..self
            },
            _ => self.split(self.cap_rate().divided_by(parts)),
        }
    }

    /// The window of a quota made by [`within`](Self::within), `None` for any other.
    pub const fn window(&self) -> Option<Duration> {
        match self.window {
            WindowState::None => None,
            WindowState::OutOfRange => Some(Duration::MAX),
            _ => Some(Duration::from_nanos(self.window_ns)),
        }
    }

    /// The most whole tokens a window quota lets through in any [`window`](Self::window) (its
    /// cap after margins and division, rounded down), `None` for any other quota.
    pub const fn window_cap(&self) -> Option<u64> {
        let cap = self.cap_rate();
        match self.window {
            WindowState::Split | WindowState::BurstNotBelowCap
                if !cap.is_out_of_range() && cap.per_ns != 0 =>
            {
                let whole = cap.tokens as u128 * self.window_ns as u128 / cap.per_ns as u128;
                Some(whole as u64)
            }
            _ => None,
        }
    }

    /// Why this window quota cannot be built, checked before the rate and burst.
    pub(crate) const fn window_error(&self) -> Option<ConfigError> {
        match self.window {
            WindowState::None | WindowState::Split => None,
            WindowState::BurstNotBelowCap => Some(ConfigError::BurstNotBelowCap),
            WindowState::Zero => Some(ConfigError::ZeroWindow),
            WindowState::OutOfRange => Some(ConfigError::WindowOutOfRange),
        }
    }

    /// Whether `2 × resolution × rate` stays below one token, so that whole grants never
    /// exceed the cap: `rate` is `tokens_per_tick.0 / tokens_per_tick.1`.
    pub(crate) const fn window_fits_resolution(
        &self,
        resolution_ticks: u64,
        tokens_per_tick: (u128, u128),
    ) -> bool {
        if let WindowState::None = self.window {
            return true;
        }
        match tokens_per_tick.0.checked_mul(2 * resolution_ticks as u128) {
            Some(two_steps) => two_steps < tokens_per_tick.1,
            None => false,
        }
    }

    /// The cap per window of a window quota, as a rate: `burst / window + rate`, exactly as it
    /// was given (the split is exact, so this undoes it), or the rate field itself when the
    /// burst took all of it. Out of range for any other quota.
    pub(super) const fn cap_rate(&self) -> Rate {
        match self.window {
            WindowState::BurstNotBelowCap => self.rate,
            WindowState::Split if !self.rate.is_out_of_range() => {
                let r = self.rate;
                let w = self.window_ns as u128;
                let from_rate = r.tokens as u128 * w;
                let from_burst = self.burst_size() as u128 * r.per_ns as u128;
                let per = r.per_ns as u128 * w;
                match from_rate.checked_add(from_burst) {
                    Some(tokens) => rounded_down(tokens, per),
                    // Each term fits: halve both, rounding the cap down.
                    None => rounded_down(from_rate / 2 + from_burst / 2, per.div_ceil(2)),
                }
            }
            // A window quota whose rate is out of range keeps that rate's cause.
            WindowState::Split => self.rate,
            _ => Rate::OUT_OF_RANGE,
        }
    }

    /// Splits `cap` (per window) into this quota's burst and a rate: `cap − burst / window`.
    pub(super) const fn split(self, cap: Rate) -> Self {
        match self.window {
            WindowState::Split | WindowState::BurstNotBelowCap => {}
            // Not a window quota, or one whose window is refused: nothing to split.
            _ => return self,
        }
        if cap.is_out_of_range() {
            return Self {
                rate: cap,
                window: WindowState::Split,
                ..self
            };
        }
        // Tokens per nanosecond: (cap_tokens × window − burst × cap_per) / (cap_per × window).
        let whole = cap.tokens as u128 * self.window_ns as u128;
        let spent = self.burst_size() as u128 * cap.per_ns as u128;
        if spent >= whole {
            return Self {
                rate: cap,
                window: WindowState::BurstNotBelowCap,
                ..self
            };
        }
        Self {
            rate: rounded_down(whole - spent, cap.per_ns as u128 * self.window_ns as u128),
            window: WindowState::Split,
            ..self
        }
    }
}

/// `tokens` per `per_ns`, in lowest terms, rounded down (tokens down, period up) where it does
/// not fit 64 bits.
const fn rounded_down(tokens: u128, per_ns: u128) -> Rate {
    let g = super::gcd(tokens, per_ns);
    let (mut tokens, mut per_ns) = match (tokens.checked_div(g), per_ns.checked_div(g)) {
        (Some(tokens), Some(per_ns)) => (tokens, per_ns),
        _ => return Rate::OUT_OF_RANGE,
    };
    while per_ns > u64::MAX as u128 || tokens > u64::MAX as u128 {
        tokens >>= 1;
        per_ns = per_ns.div_ceil(2);
    }
    Rate::reduced(tokens, per_ns)
}

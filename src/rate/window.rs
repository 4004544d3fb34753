//! Window quotas: [`Quota::within`], the fastest bucket that never lets more than a published
//! cap through in any window of a given length.

use core::time::Duration;

use super::{Quota, Rate};
use crate::ConfigError;

/// The cap a window quota is split from, kept as a rate (cap tokens per window) so that margins
/// and division stay exact, with the window it applies to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub(super) struct Window {
    cap: Rate,
    window_ns: u64,
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
    /// millisecond at 299 a minute, 299 tokens took 60.1 s instead of 60. A burst of 2 absorbs
    /// lateness up to a token interval, for one token less of rate per window.
    ///
    /// **The token of headroom.** Grants are whole, so a window sees at most `cap` grants even
    /// if it is up to one token interval (`1 / rate`) longer than `window`. That interval pays
    /// for the bucket reading its clock to its [`resolution`](crate::TokenBucket::resolution)
    /// at both ends of a window (`2 × resolution × rate < 1` token, which building a bucket
    /// checks, with [`ConfigError::WindowTooCoarse`] otherwise) and, against an enforcer
    /// elsewhere, for the spread in latency between the bucket's grant and the enforcer's
    /// timestamp: the rest of `1 / rate` (for 100 per minute, about 600 ms). A clock that itself
    /// steps coarsely (`CoarseClock` steps every millisecond) spends its step from it too. To cover more, pass a longer `window`.
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
        let window = if window_ns > u64::MAX as u128 {
            // Out of range: a zero cap per zero nanoseconds is flagged when a bucket is built.
            Window {
                cap: Rate::OUT_OF_RANGE,
                window_ns: u64::MAX,
            }
        } else {
            Window {
                cap: Rate::reduced(cap as u128, window_ns),
                window_ns: window_ns as u64,
            }
        };
        Self {
            rate: Rate::OUT_OF_RANGE,
            burst: Some(burst),
            start: super::Start::Full,
            window: Some(window),
        }
        .resplit()
    }

    /// This quota less `percent` per cent: of the cap on a window quota (the burst stays, the
    /// rate gives way), of the rate otherwise. More than 100 is reported when a bucket is built.
    pub const fn minus_percent(self, percent: u32) -> Self {
        match self.window {
            Some(w) => Self {
                window: Some(Window {
                    cap: w.cap.minus_percent(percent),
                    ..w
                }),
                ..self
            }
            .resplit(),
            None => Self {
                rate: self.rate.minus_percent(percent),
                ..self
            },
        }
    }

    /// This quota shared evenly among `parts` replicas, jobs or workers: the cap on a window
    /// quota (each part keeps the burst, so the parts together never exceed the whole cap in
    /// any window), the rate otherwise (the burst stays). Zero parts is reported when a bucket
    /// is built.
    pub const fn divided_by(self, parts: u64) -> Self {
        match self.window {
            Some(w) => Self {
                window: Some(Window {
                    cap: w.cap.divided_by(parts),
                    ..w
                }),
                ..self
            }
            .resplit(),
            None => Self {
                rate: self.rate.divided_by(parts),
                ..self
            },
        }
    }

    /// The window of a quota made by [`within`](Self::within), `None` for any other.
    pub const fn window(&self) -> Option<Duration> {
        match self.window {
            Some(w) => Some(Duration::from_nanos(w.window_ns)),
            None => None,
        }
    }

    /// The most whole tokens a window quota lets through in any [`window`](Self::window) (its
    /// cap after margins and division, rounded down), `None` for any other quota.
    pub const fn window_cap(&self) -> Option<u64> {
        match self.window {
            Some(w) if !w.cap.out_of_range && w.cap.per_ns != 0 => {
                let cap = w.cap.tokens as u128 * w.window_ns as u128 / w.cap.per_ns as u128;
                Some(cap as u64)
            }
            _ => None,
        }
    }

    /// Why this window quota cannot be built, checked before the rate and burst.
    pub(crate) const fn window_error(&self) -> Option<ConfigError> {
        let Some(w) = self.window else {
            return None;
        };
        if w.window_ns == u64::MAX && w.cap.out_of_range {
            return Some(ConfigError::WindowOutOfRange);
        }
        if w.window_ns == 0 {
            return Some(ConfigError::ZeroWindow);
        }
        if w.cap.out_of_range {
            return Some(ConfigError::RateOutOfRange);
        }
        let burst = self.burst_size() as u128;
        if burst * w.cap.per_ns as u128 >= w.cap.tokens as u128 * w.window_ns as u128 {
            return Some(ConfigError::BurstNotBelowCap);
        }
        None
    }

    /// Whether `2 × resolution × rate` stays below one token, so that whole grants never
    /// exceed the cap: `rate` is `tokens_per_tick.0 / tokens_per_tick.1`.
    pub(crate) const fn window_fits_resolution(
        &self,
        resolution_ticks: u64,
        tokens_per_tick: (u128, u128),
    ) -> bool {
        if self.window.is_none() {
            return true;
        }
        match tokens_per_tick.0.checked_mul(2 * resolution_ticks as u128) {
            Some(two_steps) => two_steps < tokens_per_tick.1,
            None => false,
        }
    }

    /// Splits a window quota's cap into its burst and rate: `rate = cap − burst / window`.
    pub(super) const fn resplit(self) -> Self {
        let Some(w) = self.window else {
            return self;
        };
        if w.cap.out_of_range || w.window_ns == 0 {
            return Self {
                rate: Rate::OUT_OF_RANGE,
                ..self
            };
        }
        // Tokens per nanosecond: (cap_tokens × window − burst × cap_per) / (cap_per × window).
        let whole = w.cap.tokens as u128 * w.window_ns as u128;
        let spent = self.burst_size() as u128 * w.cap.per_ns as u128;
        if spent >= whole {
            // No rate left: reported as `BurstNotBelowCap` when a bucket is built.
            return Self {
                rate: Rate::OUT_OF_RANGE,
                ..self
            };
        }
        let mut tokens = whole - spent;
        let mut per_ns = w.cap.per_ns as u128 * w.window_ns as u128;
        let g = super::gcd(tokens, per_ns);
        tokens /= g;
        per_ns /= g;
        // Too fine for 64 bits: round down (tokens down, period up), never up.
        while per_ns > u64::MAX as u128 || tokens > u64::MAX as u128 {
            tokens >>= 1;
            per_ns = per_ns.div_ceil(2);
        }
        Self {
            rate: Rate::reduced(tokens, per_ns),
            ..self
        }
    }
}

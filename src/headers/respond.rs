//! Writing an answer's headers: `Retry-After` and the IETF `RateLimit` / `RateLimit-Policy`
//! fields (draft-ietf-httpapi-ratelimit-headers), on a refusal or a request let through.

use core::time::Duration;
use std::format;
use std::string::String;

use crate::Quota;

/// The `Retry-After` header's name.
pub const RETRY_AFTER: &str = "retry-after";
/// The `RateLimit` header's name.
pub const RATE_LIMIT: &str = "ratelimit";
/// The `RateLimit-Policy` header's name.
pub const RATE_LIMIT_POLICY: &str = "ratelimit-policy";

/// Header values for a refused request, or one let through ([`granted`](Self::granted)). Names
/// are [`RETRY_AFTER`], [`RATE_LIMIT`] and [`RATE_LIMIT_POLICY`]; [`pairs`](Self::pairs) gives
/// them together.
///
/// The policy is the bucket's: `q` is the burst and `w` the seconds an empty bucket takes to
/// fill (a token bucket's window). `r` is the tokens left (0 when refused) and `t` the seconds
/// until the bucket is full again, both for the client answered; for a new client refused
/// because a keyed limiter is at its capacity (503), `t` and `Retry-After` are the seconds until
/// it would find room, at least one. All seconds are rounded up: a client that waits this long
/// is not early.
///
/// An unlimited quota ([`Quota::unlimited`]) has no policy the draft can state: its
/// `rate_limit` and `rate_limit_policy` are empty and [`pairs`](Self::pairs) leaves them out,
/// as a server leaves them out for a client it does not limit.
///
/// ```
/// use core::time::Duration;
/// use tollgate::headers::RateLimitHeaders;
/// use tollgate::{Quota, Rate};
///
/// let quota = Quota::new(Rate::per_second(2)).burst(5);
/// let refused = RateLimitHeaders::refusal(&quota, Duration::from_millis(2_400), Some(Duration::from_millis(400)));
/// assert_eq!(refused.retry_after.as_deref(), Some("1"));
/// assert_eq!(refused.rate_limit, "\"default\";r=0;t=3"); // full again in 2.4 s
/// assert_eq!(refused.rate_limit_policy, "\"default\";q=5;w=3"); // 5 tokens refill in 2.5 s
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RateLimitHeaders {
    /// `Retry-After` in whole seconds, rounded up; `None` when no wait would help.
    pub retry_after: Option<String>,
    /// `RateLimit`: `"default";r=<remaining>;t=<seconds until full>`.
    pub rate_limit: String,
    /// `RateLimit-Policy`: `"default";q=<burst>;w=<seconds to fill>`.
    pub rate_limit_policy: String,
}

impl RateLimitHeaders {
    /// The headers refusing a client of a bucket on `quota` that is full again in
    /// `until_full`, whose request would be granted in `retry_after` (`None`: never, as for a
    /// request above the burst).
    pub fn refusal(quota: &Quota, until_full: Duration, retry_after: Option<Duration>) -> Self {
        Self::with(quota, retry_after.map(ceil_secs), 0, ceil_secs(until_full))
    }

    /// The headers of a request let through by a bucket on `quota` that holds `remaining`
    /// whole tokens after it and is full again in `until_full`: no `Retry-After`, and the
    /// fields of a refusal with `r` the tokens left, so a client can slow down before it is
    /// refused.
    ///
    /// ```
    /// use core::time::Duration;
    /// use tollgate::headers::RateLimitHeaders;
    /// use tollgate::{Quota, Rate};
    ///
    /// let quota = Quota::new(Rate::per_second(2)).burst(5);
    /// let granted = RateLimitHeaders::granted(&quota, 4, Duration::from_millis(500));
    /// assert_eq!(granted.retry_after, None);
    /// assert_eq!(granted.rate_limit, "\"default\";r=4;t=1");
    /// assert_eq!(granted.rate_limit_policy, "\"default\";q=5;w=3");
    /// ```
    pub fn granted(quota: &Quota, remaining: u64, until_full: Duration) -> Self {
        Self::with(quota, None, remaining, ceil_secs(until_full))
    }

    /// The headers refusing a new client of a keyed limiter at its capacity, which will have
    /// room in `room`: `Retry-After` and `t` say at least a second, for room that a flood may
    /// take again at once.
    pub fn no_room(quota: &Quota, room: Duration) -> Self {
        let wait = ceil_secs(room).max(1);
        Self::with(quota, Some(wait), 0, wait)
    }

    fn with(quota: &Quota, retry_after_secs: Option<u64>, remaining: u64, reset_secs: u64) -> Self {
        if quota.is_unlimited() {
            return Self {
                retry_after: retry_after_secs.map(|secs| format!("{secs}")),
                rate_limit: String::new(),
                rate_limit_policy: String::new(),
            };
        }
        Self {
            retry_after: retry_after_secs.map(|secs| format!("{secs}")),
            rate_limit: format!("\"default\";r={remaining};t={reset_secs}"),
            rate_limit_policy: format!(
                "\"default\";q={};w={}",
                quota.burst_size(),
                window_secs(quota)
            ),
        }
    }

    /// `(name, value)` for each header present (not empty), names in lower case.
    pub fn pairs(&self) -> impl Iterator<Item = (&'static str, &str)> {
        let retry = self
            .retry_after
            .as_deref()
            .map(|value| (RETRY_AFTER, value));
        retry
            .into_iter()
            .chain([
                (RATE_LIMIT, self.rate_limit.as_str()),
                (RATE_LIMIT_POLICY, self.rate_limit_policy.as_str()),
            ])
            .filter(|(_, value)| !value.is_empty())
    }
}

/// Seconds an empty bucket on `quota` takes to fill, rounded up.
fn window_secs(quota: &Quota) -> u128 {
    let rate = quota.rate();
    let nanos = u128::from(quota.burst_size()) * rate.period().as_nanos();
    nanos.div_ceil(u128::from(rate.tokens()).max(1) * 1_000_000_000)
}

/// Whole seconds, rounded up.
fn ceil_secs(duration: Duration) -> u64 {
    duration.as_secs() + u64::from(duration.subsec_nanos() > 0)
}

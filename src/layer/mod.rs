//! tower middleware: a limit shared by every clone of a service, in two modes.
//!
//! - **Rejection** ([`RejectLayer`]): a request over the limit is not passed on; the service
//!   answers at once with a [`RateLimited`] error, which an HTTP server maps to
//!   `429 Too Many Requests` with the headers from [`RateLimited::headers`]. One shared bucket,
//!   or one bucket per key with a key extractor ([`RejectLayer::per_key`]).
//! - **Backpressure** ([`BackpressureLayer`]): `poll_ready` waits until the shared bucket grants
//!   the next request — a place in the bucket's line, whose head takes its token when it is due
//!   — so a client paces itself to the limit instead of failing. A service dropped while
//!   waiting has taken nothing; one dropped between `poll_ready` and `call` gives its token
//!   back.
//!
//! Every layer and service holds its limit behind an `Arc`: clones share it.
//!
//! Backpressure cannot be keyed: `poll_ready` runs before the request, and so before its key, is
//! known.

use core::fmt;
use core::future::Future;
use core::pin::Pin;
use core::task::{Context, Poll};
use core::time::Duration;
use std::boxed::Box;
use std::format;
use std::string::String;

use pin_project_lite::pin_project;

use crate::clock::{ticks_to_duration_ceil, Clock};
use crate::engine::layout::Params;
use crate::KeyedDenied;

mod backpressure;
mod reject;

pub use backpressure::{Backpressure, BackpressureLayer, NotReady};
pub use reject::{Limit, PerKey, Reject, RejectLayer};

/// The error type of the services here, as tower middleware commonly has it.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A request the limit did not let through: what an HTTP server needs for its answer.
///
/// Find it in a service's [`BoxError`] with `error.downcast_ref::<RateLimited>()`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateLimited {
    denial: KeyedDenied,
    burst: u64,
    window: Duration,
    reset: Duration,
    /// For [`KeyedDenied::Full`]: how long until a new key would find room.
    room: Option<Duration>,
}

impl RateLimited {
    /// The rejection for `denial` by a bucket on `params`, whose word is `to_full_ticks` ticks
    /// from full.
    pub(crate) fn new<C: Clock + ?Sized>(
        denial: KeyedDenied,
        params: &Params,
        to_full_ticks: u64,
    ) -> Self {
        Self {
            denial,
            burst: params.burst,
            window: ticks_to_duration_ceil::<C>(params.ticks_until(0, params.burst_units)),
            reset: ticks_to_duration_ceil::<C>(to_full_ticks),
            room: None,
        }
    }

    /// The rejection of a new key by a keyed limiter at its capacity, which will have room for
    /// it in `room`.
    pub(crate) fn full<C: Clock + ?Sized>(
        denial: KeyedDenied,
        params: &Params,
        room: Duration,
    ) -> Self {
        Self {
            room: Some(room),
            ..Self::new::<C>(denial, params, 0)
        }
    }

    /// Why the request was refused.
    pub fn denial(&self) -> KeyedDenied {
        self.denial
    }

    /// How long until the same request would be let through, when that is known: for a key
    /// over its limit, until its bucket grants it; for a new key refused because the limiter is
    /// at its capacity (a 503), until a slot or the shared overflow bucket will admit one.
    pub fn retry_after(&self) -> Option<Duration> {
        match self.denial {
            KeyedDenied::Full { .. } => self.room,
            denial => denial.retry_after(),
        }
    }

    /// The HTTP status to answer with: `429 Too Many Requests` when the client is over its
    /// limit, `503 Service Unavailable` when a keyed limiter refused a new client because it
    /// holds its capacity of clients (the server's limit, not the client's).
    pub fn status(&self) -> u16 {
        match self.denial {
            KeyedDenied::Full { .. } => 503,
            _ => 429,
        }
    }

    /// The response headers: `Retry-After`, and the `RateLimit` / `RateLimit-Policy` fields of
    /// the IETF draft (draft-ietf-httpapi-ratelimit-headers).
    ///
    /// ```
    /// use core::time::Duration;
    /// use tollgate::layer::{Limit, RateLimited};
    /// use tollgate::{ManualClock, Quota, Rate, TokenBucket};
    ///
    /// let clock = ManualClock::new();
    /// let bucket = TokenBucket::try_new(Quota::new(Rate::per_second(2)).burst(5), &clock)?;
    /// for _ in 0..5 {
    ///     Limit::<()>::check(&bucket, &()).unwrap();
    /// }
    /// clock.advance(Duration::from_millis(100));
    /// let refused: RateLimited = Limit::<()>::check(&bucket, &()).unwrap_err();
    /// assert_eq!(refused.retry_after(), Some(Duration::from_millis(400)));
    /// let headers = refused.headers();
    /// assert_eq!(headers.retry_after.as_deref(), Some("1"));
    /// assert_eq!(headers.rate_limit, "\"default\";r=0;t=3"); // full again in 2.4 s
    /// assert_eq!(headers.rate_limit_policy, "\"default\";q=5;w=3"); // 5 tokens refill in 2.5 s
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn headers(&self) -> RateLimitHeaders {
        // A refused newcomer holds nothing until it is admitted: its `t` is the wait for room,
        // at least a second, for room that a flood may take again at once.
        let (retry_after, remaining, reset) = match (self.denial, self.room) {
            (KeyedDenied::Full { .. }, Some(room)) => {
                let wait = ceil_secs(room).max(1);
                (Some(wait), 0, wait)
            }
            (denial, _) => (
                denial.retry_after().map(ceil_secs),
                0,
                ceil_secs(self.reset),
            ),
        };
        let retry_after = retry_after.map(|wait| format!("{wait}"));
        RateLimitHeaders {
            retry_after,
            rate_limit: format!("\"default\";r={remaining};t={reset}"),
            rate_limit_policy: format!("\"default\";q={};w={}", self.burst, ceil_secs(self.window)),
        }
    }
}

/// Whole seconds, rounded up: a client that waits this long is not early.
fn ceil_secs(duration: Duration) -> u64 {
    duration.as_secs() + u64::from(duration.subsec_nanos() > 0)
}

impl fmt::Display for RateLimited {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.denial, f)
    }
}

impl std::error::Error for RateLimited {}

/// Header values for a refused request. Names are [`RETRY_AFTER`], [`RATE_LIMIT`] and
/// [`RATE_LIMIT_POLICY`]; [`pairs`](Self::pairs) gives them together.
///
/// The policy is the bucket's: `q` is the burst and `w` the seconds an empty bucket takes to
/// fill (a token bucket's window). `r` is the tokens left (0 when refused) and `t` the seconds
/// until the bucket is full again, both for the client refused; for a new client refused
/// because a keyed limiter is at its capacity (503), `t` and `Retry-After` are the seconds until
/// it would find room, at least one. All seconds are rounded up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RateLimitHeaders {
    /// `Retry-After` in whole seconds, rounded up; `None` when no wait would help.
    pub retry_after: Option<String>,
    /// `RateLimit`: `"default";r=<remaining>;t=<seconds until full>`.
    pub rate_limit: String,
    /// `RateLimit-Policy`: `"default";q=<burst>;w=<seconds to fill>`.
    pub rate_limit_policy: String,
}

/// The `Retry-After` header's name.
pub const RETRY_AFTER: &str = "retry-after";
/// The `RateLimit` header's name.
pub const RATE_LIMIT: &str = "ratelimit";
/// The `RateLimit-Policy` header's name.
pub const RATE_LIMIT_POLICY: &str = "ratelimit-policy";

impl RateLimitHeaders {
    /// `(name, value)` for each header present, names in lower case.
    pub fn pairs(&self) -> impl Iterator<Item = (&'static str, &str)> {
        let retry = self
            .retry_after
            .as_deref()
            .map(|value| (RETRY_AFTER, value));
        retry.into_iter().chain([
            (RATE_LIMIT, self.rate_limit.as_str()),
            (RATE_LIMIT_POLICY, self.rate_limit_policy.as_str()),
        ])
    }
}

pin_project! {
    /// The response future of [`Reject`] and [`Backpressure`]: the inner service's, or an
    /// error ready at once.
    pub struct ResponseFuture<F> {
        #[pin]
        kind: Kind<F>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<F> {
        Inner { #[pin] future: F },
        Failed { error: Option<BoxError> },
    }
}

impl<F> ResponseFuture<F> {
    fn inner(future: F) -> Self {
        Self {
            kind: Kind::Inner { future },
        }
    }

    fn failed(error: impl Into<BoxError>) -> Self {
        Self {
            kind: Kind::Failed {
                error: Some(error.into()),
            },
        }
    }
}

impl<F, T, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<T, E>>,
    E: Into<BoxError>,
{
    type Output = Result<T, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            KindProj::Inner { future } => future.poll(cx).map_err(Into::into),
            KindProj::Failed { error } => Poll::Ready(Err(error
                .take()
                .unwrap_or_else(|| "response future polled after it completed".into()))),
        }
    }
}

impl<F> fmt::Debug for ResponseFuture<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

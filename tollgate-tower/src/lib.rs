//! # tollgate-tower
//!
//! tower middleware over [`tollgate`]'s token buckets: a limit shared by every clone of a
//! service, in these modes.
//!
//! - **Answer** ([`AnswerLayer`]), for services on `http::Request` / `http::Response` (axum,
//!   hyper, tonic): a request over the limit is not passed on; the layer answers it itself,
//!   `429 Too Many Requests` with `Retry-After`, `RateLimit` and `RateLimit-Policy`, or `503`
//!   when a keyed limiter has no room for a new client. No error handling to write. One shared
//!   bucket, or one bucket per key with a key extractor ([`AnswerLayer::per_key`], and the
//!   ready-made ones in [`extract`]).
//! - **Rejection** ([`RejectLayer`]), for any other service: a request over the limit is not
//!   passed on; the service fails at once with a [`RateLimited`] error, which carries the
//!   status, headers and body of the answer ([`RateLimited::response`]).
//! - **Dry run** ([`DryRun`]): either of them decides and counts as it would, and lets
//!   everything through (nginx's `limit_req_dry_run`, Envoy's shadow mode).
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

#![cfg_attr(docsrs, feature(doc_cfg))]

use core::fmt;
use core::future::Future;
use core::pin::Pin;
use core::task::{Context, Poll};
use core::time::Duration;
use std::boxed::Box;

use pin_project_lite::pin_project;

use tollgate::headers::HumanDuration;
use tollgate::{Clock, Denied, KeyedDenied, Quota, TokenBucket, Word};

mod backpressure;
mod dry_run;
pub mod extract;
mod http;
mod reject;

pub use self::http::{Answer, AnswerLayer};
pub use backpressure::{Backpressure, BackpressureLayer, NotReady};
pub use dry_run::DryRun;
pub use reject::{KeyOf, Limit, PerKey, Reject, RejectLayer};
// Where they were before the headers module wrote them.
pub use tollgate::headers::{RateLimitHeaders, RATE_LIMIT, RATE_LIMIT_POLICY, RETRY_AFTER};

/// The error type of the services here, as tower middleware commonly has it.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A request the limit did not let through: what an HTTP server needs for its answer.
///
/// [`AnswerLayer`] turns it into the answer itself; behind [`RejectLayer`], find it in the
/// service's [`BoxError`] with `error.downcast_ref::<RateLimited>()`, and
/// [`response`](Self::response) makes the same answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateLimited {
    denial: KeyedDenied,
    /// The quota of the bucket that refused (for a new key without room, the first tier's).
    quota: Quota,
    /// How long until that bucket is full again.
    until_full: Duration,
    /// For [`KeyedDenied::Full`]: how long until a new key would find room.
    room: Option<Duration>,
}

impl RateLimited {
    /// The refusal by a bucket on `quota`, full again in `until_full`.
    pub(crate) fn refused(denial: KeyedDenied, quota: Quota, until_full: Duration) -> Self {
        Self {
            denial,
            quota,
            until_full,
            room: None,
        }
    }

    /// The refusal by a single bucket: the one place that reads what a refusal says from it.
    pub(crate) fn by_bucket<C: Clock, W: Word>(bucket: &TokenBucket<C, W>, denied: Denied) -> Self {
        Self::refused(
            KeyedDenied::Denied(denied),
            bucket.quota(),
            bucket.until_full(),
        )
    }

    /// The refusal of a new key by a keyed limiter at its capacity, which will have room for
    /// it in `room`.
    pub(crate) fn full(denial: KeyedDenied, quota: Quota, room: Duration) -> Self {
        Self {
            room: Some(room),
            ..Self::refused(denial, quota, Duration::ZERO)
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
    /// holds its capacity of clients (the server's limit, not the client's), and `500` when the
    /// limiter's tier function picked a tier it does not have (the server's bug).
    pub fn status(&self) -> u16 {
        match self.denial {
            KeyedDenied::Full { .. } => 503,
            KeyedDenied::UnknownTier(_) => 500,
            _ => 429,
        }
    }

    /// The response headers: `Retry-After`, and the `RateLimit` / `RateLimit-Policy` fields of
    /// the IETF draft (draft-ietf-httpapi-ratelimit-headers).
    ///
    /// ```
    /// use core::time::Duration;
    /// use tollgate_tower::{Limit, RateLimited};
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
    /// assert_eq!(refused.to_string(), "rate limited: retry after 400 ms");
    /// let headers = refused.headers();
    /// assert_eq!(headers.retry_after.as_deref(), Some("1"));
    /// assert_eq!(headers.rate_limit, "\"default\";r=0;t=3"); // full again in 2.4 s
    /// assert_eq!(headers.rate_limit_policy, "\"default\";q=5;w=3"); // 5 tokens refill in 2.5 s
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn headers(&self) -> RateLimitHeaders {
        match (self.denial, self.room) {
            (KeyedDenied::Full { .. }, Some(room)) => RateLimitHeaders::no_room(&self.quota, room),
            (denial, _) => {
                RateLimitHeaders::refusal(&self.quota, self.until_full, denial.retry_after())
            }
        }
    }

    /// The whole answer: [`status`](Self::status), [`headers`](Self::headers), and this
    /// refusal's message as a plain-text body (`rate limited: retry after 1.2 s`).
    pub fn response<B: From<std::string::String>>(&self) -> ::http::Response<B> {
        let mut response = ::http::Response::new(B::from(std::format!("{self}\n")));
        *response.status_mut() = ::http::StatusCode::from_u16(self.status())
            .unwrap_or(::http::StatusCode::TOO_MANY_REQUESTS);
        let headers = response.headers_mut();
        headers.insert(
            ::http::header::CONTENT_TYPE,
            ::http::HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        for (name, value) in self.headers().pairs() {
            // The values are digits and ASCII punctuation: always valid.
            if let Ok(value) = ::http::HeaderValue::from_str(value) {
                headers.insert(name, value);
            }
        }
        response
    }
}

impl fmt::Display for RateLimited {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.denial, self.retry_after()) {
            (KeyedDenied::Full { .. }, Some(room)) => write!(
                f,
                "too many clients: retry after {}",
                HumanDuration(room.max(Duration::from_secs(1)))
            ),
            (KeyedDenied::Denied(_), Some(wait)) => {
                write!(f, "rate limited: retry after {}", HumanDuration(wait))
            }
            (denial, _) => fmt::Display::fmt(&denial, f),
        }
    }
}

impl std::error::Error for RateLimited {}

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

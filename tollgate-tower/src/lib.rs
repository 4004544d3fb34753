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
//!   ready-made ones in [`extract`]); a request whose key an extractor cannot read (no peer
//!   address) is answered `500` with the reason ([`NoKey`]), never put in a shared bucket. The
//!   policy's name, the headers (the IETF draft's, `X-RateLimit-*`, `RateLimit-Limit`, or
//!   `Retry-After` alone), the status and the body are [settings](AnswerLayer#settings). A
//!   request let through gets the same headers on its answer, with the tokens left
//!   ([`AnswerLayer::headers_on_allowed`]).
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
//! **axum**, per client IP behind one proxy of your own (the `axum_per_ip` example; with the
//! `axum` feature the extractors read axum's `ConnectInfo`):
//!
//! ```
//! # #[cfg(feature = "axum")] {
//! use std::sync::Arc;
//! use axum::{routing::get, Router};
//! use tollgate::{KeyedLimiter, Quota, Rate, StdClock, WhenFull};
//! use tollgate_tower::{extract::ForwardedIp, AnswerLayer};
//!
//! let quota = Quota::new(Rate::per_second(5)).burst(10);
//! let per_ip = Arc::new(KeyedLimiter::new(quota, StdClock, 100_000, WhenFull::Refuse));
//! let app: Router = Router::new()
//!     .route("/", get(|| async { "hello\n" }))
//!     .layer(AnswerLayer::per_key(per_ip, ForwardedIp::x_forwarded_for(1)));
//! // axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>())
//! # let _ = app;
//! # }
//! ```
//!
//! Backpressure cannot be keyed: `poll_ready` runs before the request, and so before its key, is
//! known.

#![cfg_attr(docsrs, feature(doc_cfg))]
// Where other crates' docs link this one's items when its docs are not built beside them (a
// sibling's docs built alone, as docs.rs builds them); `scripts/check-doc-links.sh` keeps the
// version in step with Cargo.toml's.
#![doc(html_root_url = "https://docs.rs/tollgate-tower/0.1.0")]

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

pub use self::http::{Answer, AnswerLayer, HeaderStyle};
pub use backpressure::{Backpressure, BackpressureLayer, NotReady};
pub use dry_run::DryRun;
pub use extract::NoKey;
pub use reject::{KeyOf, Level, Limit, PerKey, Reject, RejectLayer};
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
    why: Why,
    /// The quota of the bucket that refused (for a new key without room, the first tier's).
    quota: Quota,
    /// How long until that bucket is full again.
    until_full: Duration,
    /// For [`KeyedDenied::Full`]: how long until a new key would find room.
    room: Option<Duration>,
}

/// Why a request was refused: a limiter's denial, or no key to ask a limiter with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Why {
    Denied(KeyedDenied),
    NoKey(NoKey),
}

impl RateLimited {
    /// The refusal by a bucket on `quota`, full again in `until_full`.
    pub(crate) fn refused(denial: KeyedDenied, quota: Quota, until_full: Duration) -> Self {
        Self {
            why: Why::Denied(denial),
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

    /// The refusal of a request whose key could not be read, by a limiter on `quota`.
    pub(crate) fn without_key(no_key: NoKey, quota: Quota) -> Self {
        Self {
            why: Why::NoKey(no_key),
            quota,
            until_full: Duration::ZERO,
            room: None,
        }
    }

    /// Why the limiter refused the request; `None` when the request had no key to ask it with
    /// (see [`no_key`](Self::no_key)).
    pub fn denial(&self) -> Option<KeyedDenied> {
        match self.why {
            Why::Denied(denial) => Some(denial),
            Why::NoKey(_) => None,
        }
    }

    /// Why the key extractor found no key in the request, when that is why it was refused: the
    /// server's configuration, answered with a `500`.
    pub fn no_key(&self) -> Option<NoKey> {
        match self.why {
            Why::NoKey(no_key) => Some(no_key),
            Why::Denied(_) => None,
        }
    }

    /// The quota of the bucket that refused (for a new key without room, the first tier's).
    pub fn quota(&self) -> Quota {
        self.quota
    }

    /// How long until the same request would be let through, when that is known: for a key
    /// over its limit, until its bucket grants it; for a new key refused because the limiter is
    /// at its capacity (a 503), until a slot or the shared overflow bucket will admit one.
    pub fn retry_after(&self) -> Option<Duration> {
        match self.why {
            Why::Denied(KeyedDenied::Full { .. }) => self.room,
            Why::Denied(denial) => denial.retry_after(),
            Why::NoKey(_) => None,
        }
    }

    /// Whole seconds until the refusing bucket is full again (for a new key without room, until
    /// it would find room, at least one), rounded up: the `t` of the `RateLimit` header.
    pub fn reset_secs(&self) -> u64 {
        match (self.why, self.room) {
            (Why::Denied(KeyedDenied::Full { .. }), Some(room)) => ceil_secs(room).max(1),
            _ => ceil_secs(self.until_full),
        }
    }

    /// The HTTP status to answer with: `429 Too Many Requests` when the client is over its
    /// limit, `503 Service Unavailable` when a keyed limiter refused a new client because it
    /// holds its capacity of clients (the server's limit, not the client's), and `500` when the
    /// limiter's tier function picked a tier it does not have or the key extractor found no key
    /// (the server's bug or configuration).
    pub fn status(&self) -> u16 {
        match self.why {
            Why::Denied(KeyedDenied::Full { .. }) => 503,
            Why::Denied(KeyedDenied::UnknownTier(_)) | Why::NoKey(_) => 500,
            Why::Denied(_) => 429,
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
        match (self.why, self.room) {
            (Why::Denied(KeyedDenied::Full { .. }), Some(room)) => {
                RateLimitHeaders::no_room(&self.quota, room)
            }
            (_, _) => RateLimitHeaders::refusal(&self.quota, self.until_full, self.retry_after()),
        }
    }

    /// The whole answer: [`status`](Self::status), [`headers`](Self::headers), and this
    /// refusal's message as a plain-text body (`rate limited: retry after 1.2 s`). A request
    /// refused for want of a key gets the `500` and its message, without rate-limit headers.
    /// [`AnswerLayer`]'s settings choose another name, headers, status or body.
    pub fn response<B: From<std::string::String>>(&self) -> ::http::Response<B> {
        http::Answering::default().response(self)
    }
}

/// Whole seconds, rounded up.
pub(crate) fn ceil_secs(duration: Duration) -> u64 {
    duration.as_secs() + u64::from(duration.subsec_nanos() > 0)
}

impl fmt::Display for RateLimited {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.why, self.retry_after()) {
            (Why::NoKey(no_key), _) => fmt::Display::fmt(&no_key, f),
            (Why::Denied(KeyedDenied::Full { .. }), Some(room)) => write!(
                f,
                "too many clients: retry after {}",
                HumanDuration(room.max(Duration::from_secs(1)))
            ),
            (Why::Denied(KeyedDenied::Denied(_)), Some(wait)) => {
                write!(f, "rate limited: retry after {}", HumanDuration(wait))
            }
            (Why::Denied(denial), _) => fmt::Display::fmt(&denial, f),
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

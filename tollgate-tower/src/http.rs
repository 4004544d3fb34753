//! Answering: for services on `http::Request` / `http::Response`, the layer answers a refusal
//! itself.

use core::fmt;
use core::future::Future;
use core::pin::Pin;
use core::task::{Context, Poll};
use std::string::String;
use std::sync::Arc;

use http::{Request, Response};
use pin_project_lite::pin_project;
use tower_layer::Layer;
use tower_service::Service;

use super::reject::{Limit, PerKey};
use tollgate::{KeyedLimiter, Word};

/// Wraps HTTP services in [`Answer`]: a request over the limit gets its answer from the layer,
/// `429 Too Many Requests` with `Retry-After`, `RateLimit` and `RateLimit-Policy` (or `503`
/// with the `Retry-After` of the next free slot when a keyed limiter has no room for a new
/// client), and a plain-text body such as `rate limited: retry after 1.2 s`. The service's
/// error type stays its own, so an axum `Router` takes the layer as it is.
///
/// ```
/// use std::net::SocketAddr;
/// use std::sync::Arc;
/// use axum::extract::ConnectInfo;
/// use axum::{routing::get, Router};
/// use tollgate_tower::{extract::PeerIp, AnswerLayer};
/// use tollgate::{IpPrefix, KeyedLimiter, Quota, Rate, StdClock, WhenFull};
///
/// let quota = Quota::new(Rate::per_second(5)).burst(10);
/// let limiter = Arc::new(KeyedLimiter::new(quota, StdClock, 100_000, WhenFull::Refuse));
/// let peer = PeerIp::from_extension(IpPrefix::default(), |info: &ConnectInfo<SocketAddr>| info.0);
/// let app: Router = Router::new()
///     .route("/", get(|| async { "hello" }))
///     .layer(AnswerLayer::per_key(limiter, peer));
/// # let _ = app;
/// ```
pub struct AnswerLayer<L> {
    limit: Arc<L>,
}

impl<L> AnswerLayer<L> {
    /// One limit for every request: a shared [`TokenBucket`](tollgate::TokenBucket), a
    /// [`DryRun`](super::DryRun), or any [`Limit`].
    pub fn new(limit: Arc<L>) -> Self {
        Self { limit }
    }

    /// The limit the layer checks.
    pub fn limit(&self) -> &Arc<L> {
        &self.limit
    }
}

impl<K, C, W: Word, F, S> AnswerLayer<PerKey<K, C, W, F, S>> {
    /// One bucket per key, `key` reading a request's key: a closure, or an extractor from
    /// [`extract`](super::extract).
    ///
    /// Keep a clone of `limiter` to [`sweep`](KeyedLimiter::sweep) it from a timer.
    pub fn per_key(limiter: Arc<KeyedLimiter<K, C, W, S>>, key: F) -> Self {
        Self::new(Arc::new(PerKey::new(limiter, key)))
    }
}

impl<L> Clone for AnswerLayer<L> {
    fn clone(&self) -> Self {
        Self {
            limit: Arc::clone(&self.limit),
        }
    }
}

impl<S, L> Layer<S> for AnswerLayer<L> {
    type Service = Answer<S, L>;

    fn layer(&self, inner: S) -> Answer<S, L> {
        Answer {
            inner,
            limit: Arc::clone(&self.limit),
        }
    }
}

/// An HTTP service that passes on requests within its limit and answers the others itself
/// (see [`AnswerLayer`]), without calling the inner service.
pub struct Answer<S, L> {
    inner: S,
    limit: Arc<L>,
}

impl<S: Clone, L> Clone for Answer<S, L> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            limit: Arc::clone(&self.limit),
        }
    }
}

impl<S, L, ReqBody, ResBody> Service<Request<ReqBody>> for Answer<S, L>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    L: Limit<Request<ReqBody>>,
    ResBody: From<String>,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = AnswerFuture<S::Future, ResBody>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let kind = match self.limit.check(&request) {
            Ok(()) => Kind::Inner {
                future: self.inner.call(request),
            },
            Err(limited) => Kind::Refused {
                response: Some(limited.response()),
            },
        };
        AnswerFuture { kind }
    }
}

pin_project! {
    /// The response future of [`Answer`]: the inner service's, or the refusal ready at once.
    pub struct AnswerFuture<F, B> {
        #[pin]
        kind: Kind<F, B>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<F, B> {
        Inner { #[pin] future: F },
        Refused { response: Option<Response<B>> },
    }
}

impl<F, B, E> Future for AnswerFuture<F, B>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<B>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            KindProj::Inner { future } => future.poll(cx),
            KindProj::Refused { response } => match response.take() {
                Some(response) => Poll::Ready(Ok(response)),
                // Polled after it completed: a contract breach; it stays pending rather than
                // panic.
                None => Poll::Pending,
            },
        }
    }
}

impl<F, B> fmt::Debug for AnswerFuture<F, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AnswerFuture").finish_non_exhaustive()
    }
}

impl<L> fmt::Debug for AnswerLayer<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AnswerLayer").finish_non_exhaustive()
    }
}

impl<S: fmt::Debug, L> fmt::Debug for Answer<S, L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Answer")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

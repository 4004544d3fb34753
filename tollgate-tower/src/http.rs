//! Answering: for services on `http::Request` / `http::Response`, the layer answers a refusal
//! itself.

use core::fmt;
use core::future::Future;
use core::pin::Pin;
use core::task::{Context, Poll};
use std::boxed::Box;
use std::format;
use std::string::String;
use std::sync::Arc;

use http::header::{HeaderName, HeaderValue, CONTENT_TYPE};
use http::{Request, Response, StatusCode};
use pin_project_lite::pin_project;
use tower_layer::Layer;
use tower_service::Service;

use super::reject::{Level, Limit, PerKey};
use super::{ceil_secs, RateLimited};
use tollgate::headers::RateLimitHeaders;
use tollgate::{KeyedLimiter, Word};

/// Wraps HTTP services in [`Answer`]: a request over the limit gets its answer from the layer,
/// `429 Too Many Requests` with `Retry-After`, `RateLimit` and `RateLimit-Policy` (or `503`
/// with the `Retry-After` of the next free slot when a keyed limiter has no room for a new
/// client), and a plain-text body such as `rate limited: retry after 1.2 s`. The service's
/// error type stays its own, so an axum `Router` takes the layer as it is.
///
/// A request let through gets the same `RateLimit` and `RateLimit-Policy` headers on the inner
/// service's answer, `r` counting the tokens its bucket has left, so a client can slow down
/// before it is refused (see [`headers_on_allowed`](Self::headers_on_allowed)).
///
/// ```
/// use std::sync::Arc;
/// use axum::{routing::get, Router};
/// use tollgate_tower::{extract::PeerIp, AnswerLayer};
/// use tollgate::{KeyedLimiter, Quota, Rate, StdClock, WhenFull};
///
/// let quota = Quota::new(Rate::per_second(5)).burst(10);
/// let limiter = Arc::new(KeyedLimiter::new(quota, StdClock, 100_000, WhenFull::Refuse));
/// // The connection's `SocketAddr` or, with the `axum` feature, axum's `ConnectInfo`.
/// let peer = PeerIp::default();
/// let app: Router = Router::new()
///     .route("/", get(|| async { "hello" }))
///     .layer(AnswerLayer::per_key(limiter, peer));
/// # let _ = app;
/// ```
///
/// # Settings
///
/// The answer's policy name ([`policy_name`](Self::policy_name)), headers
/// ([`headers`](Self::headers)), whether an allowed answer carries them
/// ([`headers_on_allowed`](Self::headers_on_allowed)), status for a client over its limit
/// ([`status`](Self::status)) and body ([`body`](Self::body)) can be chosen:
///
/// ```
/// use std::sync::Arc;
/// use http::StatusCode;
/// use tollgate_tower::{AnswerLayer, HeaderStyle};
/// use tollgate::{Quota, Rate, StdClock, TokenBucket};
///
/// let bucket = Arc::new(TokenBucket::try_new(Quota::new(Rate::per_second(5)), StdClock)?);
/// let layer = AnswerLayer::new(bucket)
///     .policy_name("api")                      // RateLimit: "api";r=0;t=1
///     .headers(HeaderStyle::Draft)             // or XRateLimit, Legacy, RetryAfter
///     .status(StatusCode::SERVICE_UNAVAILABLE) // instead of 429
///     .body(|refused| format!("{{\"error\":\"{refused}\"}}"));
/// # let _ = layer;
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
pub struct AnswerLayer<L> {
    limit: Arc<L>,
    answering: Arc<Answering>,
}

impl<L> AnswerLayer<L> {
    /// One limit for every request: a shared [`TokenBucket`](tollgate::TokenBucket), a
    /// [`DryRun`](super::DryRun), or any [`Limit`].
    pub fn new(limit: Arc<L>) -> Self {
        Self {
            limit,
            answering: Arc::default(),
        }
    }

    /// Names the policy in the `RateLimit` and `RateLimit-Policy` headers (`"default"` unless
    /// told): a quoted string, in which characters outside printable ASCII are left out and
    /// `"` and `\` are escaped, so the header stays valid whatever the name.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use tollgate_tower::AnswerLayer;
    /// # use tollgate::{ManualClock, Quota, Rate, TokenBucket};
    /// use tower::{service_fn, Layer, Service, ServiceExt};
    ///
    /// let bucket = Arc::new(TokenBucket::try_new(Quota::new(Rate::per_second(1)), ManualClock::new())?);
    /// let mut service = AnswerLayer::new(bucket).policy_name("per-ip").layer(service_fn(|_: http::Request<()>| async {
    ///     Ok::<_, std::convert::Infallible>(http::Response::new(String::new()))
    /// }));
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// service.ready().await.unwrap().call(http::Request::new(())).await.unwrap(); // the one token
    /// let refused = service.ready().await.unwrap().call(http::Request::new(())).await.unwrap();
    /// assert_eq!(refused.headers()["ratelimit-policy"], "\"per-ip\";q=1;w=1");
    /// assert_eq!(refused.headers()["ratelimit"], "\"per-ip\";r=0;t=1");
    /// # });
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn policy_name(mut self, name: &str) -> Self {
        self.settings().policy = Some(quoted(name));
        self
    }

    /// Which rate-limit headers the answer carries: the IETF draft's (the default), the older
    /// `X-RateLimit-*` or `RateLimit-Limit` style, or `Retry-After` only. See [`HeaderStyle`].
    pub fn headers(mut self, style: HeaderStyle) -> Self {
        self.settings().style = style;
        self
    }

    /// Whether a request let through gets the rate-limit headers too (it does unless told):
    /// the [`style`](Self::headers)'s fields, as a refusal has them, with the tokens the
    /// request's bucket has left after it (`RateLimit: "default";r=7;t=1`,
    /// `X-RateLimit-Remaining: 7`) and no `Retry-After`. The draft's fields are appended to any
    /// the inner service wrote (they are lists: a stricter limit of a route's own stays
    /// beside this one); a count style's are left out where the inner service set them.
    ///
    /// They are read after the request was granted: one more reading of its bucket (for a
    /// keyed limit, of the key's), and the key read again. A limit that cannot say its level
    /// ([`Limit::level`]), an unlimited quota and a [`DryRun`](super::DryRun) (a limit on trial
    /// changes nothing a client sees) add none. Turn them off when even the tokens left are
    /// more than clients should know: on one bucket shared by every client, they tell each
    /// client how busy the server is.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use tollgate_tower::AnswerLayer;
    /// # use tollgate::{ManualClock, Quota, Rate, TokenBucket};
    /// use tower::{service_fn, Layer, Service, ServiceExt};
    ///
    /// let bucket = Arc::new(TokenBucket::try_new(Quota::new(Rate::per_second(2)).burst(3), ManualClock::new())?);
    /// let layer = AnswerLayer::new(bucket);
    /// let mut service = layer.clone().layer(service_fn(|_: http::Request<()>| async {
    ///     Ok::<_, std::convert::Infallible>(http::Response::new(String::new()))
    /// }));
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// let allowed = service.ready().await.unwrap().call(http::Request::new(())).await.unwrap();
    /// assert_eq!(allowed.headers()["ratelimit"], "\"default\";r=2;t=1");
    /// assert_eq!(allowed.headers()["ratelimit-policy"], "\"default\";q=3;w=2");
    ///
    /// let mut quiet = layer.headers_on_allowed(false).layer(service_fn(|_: http::Request<()>| async {
    ///     Ok::<_, std::convert::Infallible>(http::Response::new(String::new()))
    /// }));
    /// let allowed = quiet.ready().await.unwrap().call(http::Request::new(())).await.unwrap();
    /// assert!(allowed.headers().get("ratelimit").is_none());
    /// # });
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn headers_on_allowed(mut self, on: bool) -> Self {
        self.settings().quiet_when_allowed = !on;
        self
    }

    /// The status of the answer to a client over its limit (`429 Too Many Requests` unless
    /// told). The other refusals keep theirs, for they mean something else: `503` for a new
    /// client a keyed limiter at capacity has no room for, `500` for the server's own error
    /// (no key, an unknown tier).
    pub fn status(mut self, status: StatusCode) -> Self {
        self.settings().status = Some(status);
        self
    }

    /// The answer's body, made from the refusal (a plain-text `rate limited: retry after 1.2 s`
    /// unless told). The `Content-Type` stays `text/plain; charset=utf-8` unless the body
    /// starts with `{` or `[`, when it is `application/json`.
    pub fn body(mut self, body: impl Fn(&RateLimited) -> String + Send + Sync + 'static) -> Self {
        self.settings().body = Some(Arc::new(body));
        self
    }

    fn settings(&mut self) -> &mut Answering {
        Arc::make_mut(&mut self.answering)
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
            answering: Arc::clone(&self.answering),
        }
    }
}

/// Which rate-limit headers an [`AnswerLayer`] writes on a refusal, and on an answer that let
/// the request through ([`AnswerLayer::headers_on_allowed`]). Each style carries `Retry-After`
/// on a refusal when a wait would help; a request refused for want of a key (a `500`) gets
/// none of them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum HeaderStyle {
    /// `RateLimit: "default";r=0;t=3` and `RateLimit-Policy: "default";q=5;w=3`, the IETF
    /// draft's (draft-ietf-httpapi-ratelimit-headers), which
    /// [`headers::policies`](tollgate::headers::policies) reads back.
    #[default]
    Draft,
    /// `X-RateLimit-Limit: 5`, `X-RateLimit-Remaining: 0`, `X-RateLimit-Reset: 3` (the burst,
    /// the tokens left, the seconds until full), the style many public APIs use.
    XRateLimit,
    /// `RateLimit-Limit`, `RateLimit-Remaining`, `RateLimit-Reset`, with the values of
    /// [`XRateLimit`](Self::XRateLimit): the draft's first versions, which
    /// [`headers::legacy_policy`](tollgate::headers::legacy_policy) reads back.
    Legacy,
    /// `Retry-After` alone.
    RetryAfter,
}

/// How an [`AnswerLayer`] answers a refusal: its settings.
#[derive(Clone, Default)]
pub(crate) struct Answering {
    /// The policy's name, quoted; `"default"` when `None`.
    policy: Option<String>,
    style: HeaderStyle,
    /// The status for a client over its limit; `429` when `None`.
    status: Option<StatusCode>,
    body: Option<Body>,
    /// Whether allowed answers go without the headers (they carry them by default).
    quiet_when_allowed: bool,
}

/// Makes an answer's body from a refusal.
type Body = Arc<dyn Fn(&RateLimited) -> String + Send + Sync>;

impl Answering {
    /// The answer to `refused`.
    pub(crate) fn response<B: From<String>>(&self, refused: &RateLimited) -> Response<B> {
        let body = match &self.body {
            Some(body) => body(refused),
            None => format!("{refused}\n"),
        };
        let json = body.starts_with('{') || body.starts_with('[');
        let status = match (refused.status(), self.status) {
            (429, Some(status)) => status,
            (status, _) => {
                StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
            }
        };
        let mut response = Response::new(B::from(body));
        *response.status_mut() = status;
        let headers = response.headers_mut();
        headers.insert(
            CONTENT_TYPE,
            HeaderValue::from_static(if json {
                "application/json"
            } else {
                "text/plain; charset=utf-8"
            }),
        );
        if refused.no_key().is_none() {
            let counts = Counts {
                limit: refused.quota().burst_size(),
                remaining: 0,
                reset_secs: refused.reset_secs(),
            };
            for (name, value) in self.pairs(refused.headers(), counts) {
                // The values are digits, ASCII punctuation and a name kept to printable ASCII.
                if let Ok(value) = HeaderValue::from_str(&value) {
                    headers.insert(name, value);
                }
            }
        }
        response
    }

    /// Whether an allowed answer carries headers at all: the limit's level is read only then.
    fn tells_allowed(&self) -> bool {
        !self.quiet_when_allowed && self.style != HeaderStyle::RetryAfter
    }

    /// Adds to `response`, the inner service's answer to a request let through, the headers
    /// of the chosen style for its bucket at `level`.
    fn add_allowed<B>(&self, response: &mut Response<B>, level: &Level) {
        let written = RateLimitHeaders::granted(&level.quota, level.remaining, level.until_full);
        let counts = Counts {
            limit: level.quota.burst_size(),
            remaining: level.remaining,
            reset_secs: ceil_secs(level.until_full),
        };
        let headers = response.headers_mut();
        for (name, value) in self.pairs(written, counts) {
            let Ok(value) = HeaderValue::from_str(&value) else {
                continue;
            };
            if self.style == HeaderStyle::Draft {
                headers.append(name, value);
            } else if !headers.contains_key(&name) {
                headers.insert(name, value);
            }
        }
    }

    /// The headers of the chosen style: the draft's fields as the core wrote them, or the
    /// counts.
    fn pairs(
        &self,
        written: RateLimitHeaders,
        counts: Counts,
    ) -> impl Iterator<Item = (HeaderName, String)> {
        let retry = written
            .retry_after
            .map(|value| (HeaderName::from_static(super::RETRY_AFTER), value));
        // The core writes the draft's fields under the name `"default"`: a name set replaces it.
        let named = |value: String| match (&self.policy, value.strip_prefix("\"default\"")) {
            (Some(name), Some(rest)) => format!("{name}{rest}"),
            _ => value,
        };
        let Counts {
            limit,
            remaining,
            reset_secs,
        } = counts;
        let fields = |prefix: &str| {
            [
                (format!("{prefix}limit"), format!("{limit}")),
                (format!("{prefix}remaining"), format!("{remaining}")),
                (format!("{prefix}reset"), format!("{reset_secs}")),
            ]
            .map(|(name, value)| (HeaderName::try_from(name).ok(), value))
        };
        let rest: Box<dyn Iterator<Item = (Option<HeaderName>, String)>> = match self.style {
            HeaderStyle::Draft => Box::new(
                [
                    (super::RATE_LIMIT, named(written.rate_limit)),
                    (super::RATE_LIMIT_POLICY, named(written.rate_limit_policy)),
                ]
                .into_iter()
                .map(|(name, value)| (Some(HeaderName::from_static(name)), value)),
            ),
            HeaderStyle::XRateLimit => Box::new(fields("x-ratelimit-").into_iter()),
            HeaderStyle::Legacy => Box::new(fields("ratelimit-").into_iter()),
            HeaderStyle::RetryAfter => Box::new(core::iter::empty()),
        };
        retry
            .into_iter()
            .chain(rest.filter_map(|(name, value)| Some((name?, value))))
            // An unlimited quota's draft fields are empty: there is no policy to state.
            .filter(|(_, value)| !value.is_empty())
    }
}

/// What the count styles (`X-RateLimit-*`, `RateLimit-Limit`…) say: the burst, the tokens left,
/// the seconds until full.
struct Counts {
    limit: u64,
    remaining: u64,
    reset_secs: u64,
}

/// `name` as a structured-field string: printable ASCII, `"` and `\` escaped, in quotes.
fn quoted(name: &str) -> String {
    let mut quoted = String::from("\"");
    for c in name.chars().filter(|c| (' '..='~').contains(c)) {
        if c == '"' || c == '\\' {
            quoted.push('\\');
        }
        quoted.push(c);
    }
    quoted.push('"');
    quoted
}

impl<S, L> Layer<S> for AnswerLayer<L> {
    type Service = Answer<S, L>;

    fn layer(&self, inner: S) -> Answer<S, L> {
        Answer {
            inner,
            limit: Arc::clone(&self.limit),
            answering: Arc::clone(&self.answering),
        }
    }
}

/// An HTTP service that passes on requests within its limit and answers the others itself
/// (see [`AnswerLayer`]), without calling the inner service.
pub struct Answer<S, L> {
    inner: S,
    limit: Arc<L>,
    answering: Arc<Answering>,
}

impl<S: Clone, L> Clone for Answer<S, L> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            limit: Arc::clone(&self.limit),
            answering: Arc::clone(&self.answering),
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
            Ok(()) => {
                let tell = match self.answering.tells_allowed() {
                    true => self.limit.level(&request),
                    false => None,
                };
                Kind::Inner {
                    future: self.inner.call(request),
                    tell: tell.map(|level| (level, Arc::clone(&self.answering))),
                }
            }
            Err(limited) => Kind::Refused {
                response: Some(self.answering.response(&limited)),
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
        // `tell`: the granting bucket's level, for the headers of the inner service's answer.
        Inner { #[pin] future: F, tell: Option<(Level, Arc<Answering>)> },
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
            KindProj::Inner { future, tell } => {
                let mut answer = core::task::ready!(future.poll(cx));
                if let (Ok(response), Some((level, answering))) = (&mut answer, tell.take()) {
                    answering.add_allowed(response, &level);
                }
                Poll::Ready(answer)
            }
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
        f.debug_struct("AnswerLayer")
            .field("answering", &self.answering)
            .finish_non_exhaustive()
    }
}

impl<S: fmt::Debug, L> fmt::Debug for Answer<S, L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Answer")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for Answering {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Answering")
            .field("policy", &self.policy)
            .field("style", &self.style)
            .field("status", &self.status)
            .field("body", &self.body.as_ref().map(|_| "a function"))
            .field("quiet_when_allowed", &self.quiet_when_allowed)
            .finish()
    }
}

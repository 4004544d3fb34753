//! Backpressure: `poll_ready` waits until the shared bucket grants the next request.

use core::fmt;
use core::future::Future;
use core::mem;
use core::pin::Pin;
use core::task::{Context, Poll};
use core::time::Duration;
use std::boxed::Box;
use std::sync::Arc;

use tower_layer::Layer;
use tower_service::Service;

use super::{BoxError, RateLimited, ResponseFuture};
use tollgate::wait::GiveBack;
use tollgate::{Clock, DefaultWord, Denied, Jitter, Reservation, TokenBucket, Word};

/// Wraps services in [`Backpressure`]: each waits in `poll_ready` for its turn on one shared
/// bucket, for at most `max_wait`.
///
/// ```
/// use std::sync::Arc;
/// use tollgate_tower::BackpressureLayer;
/// use tollgate::{Quota, Rate, TokenBucket, TokioClock};
///
/// // A client that must not send an upstream API more than 10 requests a second.
/// let bucket = Arc::new(TokenBucket::try_new(Quota::new(Rate::per_second(10)), TokioClock::new())?);
/// let layer = BackpressureLayer::new(bucket);
/// # let _ = layer;
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
pub struct BackpressureLayer<C, W: Word = DefaultWord> {
    bucket: Arc<TokenBucket<C, W>>,
    max_wait: Duration,
    jitter: Option<Arc<Jitter>>,
}

impl<C, W: Word> BackpressureLayer<C, W> {
    /// Waits as long as it takes (within the bucket's debt bound: decades on the 64-bit word).
    pub fn new(bucket: Arc<TokenBucket<C, W>>) -> Self {
        Self {
            bucket,
            max_wait: Duration::MAX,
            jitter: None,
        }
    }

    /// Waits at most `max_wait`: a request whose turn is further away fails in `poll_ready`
    /// with [`RateLimited`], taking nothing.
    pub fn max_wait(mut self, max_wait: Duration) -> Self {
        self.max_wait = max_wait;
        self
    }

    /// After a wait that slept, `poll_ready` waits a random delay from `jitter` more, holding
    /// the token ([`tollgate::Jittered`]): services due at the same instant (after a pause, or
    /// on buckets in lockstep) then call at spread instants. A service dropped during the
    /// jitter gives its token back. Shared by every service of the layer.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use tollgate_tower::BackpressureLayer;
    /// use tollgate::{Jitter, Quota, Rate, TokenBucket, TokioClock};
    ///
    /// let bucket = Arc::new(TokenBucket::try_new(Quota::new(Rate::per_second(10)), TokioClock::new())?);
    /// let layer = BackpressureLayer::new(bucket).jitter(Jitter::up_to(Duration::from_millis(20), 7));
    /// # let _ = layer;
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn jitter(mut self, jitter: Jitter) -> Self {
        self.jitter = Some(Arc::new(jitter));
        self
    }
}

impl<C, W: Word> Clone for BackpressureLayer<C, W> {
    fn clone(&self) -> Self {
        Self {
            bucket: Arc::clone(&self.bucket),
            max_wait: self.max_wait,
            jitter: self.jitter.clone(),
        }
    }
}

impl<S, C, W: Word> Layer<S> for BackpressureLayer<C, W> {
    type Service = Backpressure<S, C, W>;

    fn layer(&self, inner: S) -> Self::Service {
        Backpressure {
            inner,
            bucket: Arc::clone(&self.bucket),
            max_wait: self.max_wait,
            jitter: self.jitter.clone(),
            state: State::Idle,
        }
    }
}

/// A service whose `poll_ready` asks the inner service first and, once it is ready, takes one
/// token from a shared bucket, waiting for it in the bucket's line as
/// [`TokenBucket::acquire_timeout`] does.
///
/// Waiters are served in the order they joined the line and each wakes once. The token is
/// taken only when it is due (for a burst too small for tokio's timer, up to two milliseconds
/// before, and held until its instant), and only while the inner service is ready: a service whose inner
/// service is not ready, or fails, leaves the line and holds no token. A token taken and not
/// spent by `call` goes back to the bucket when the service is dropped (as tower's balancers and
/// a shutting-down buffer do), less only what the burst cap would have cut since. A clone
/// starts with no token and no place in line. Use [`TokioClock`](tollgate::TokioClock) for the
/// bucket, so that it and the timer read the same clock. With a
/// [`jitter`](BackpressureLayer::jitter), a wait that slept is ready a random delay after its
/// token's instant, holding the token meanwhile.
pub struct Backpressure<S, C, W: Word = DefaultWord> {
    inner: S,
    bucket: Arc<TokenBucket<C, W>>,
    max_wait: Duration,
    jitter: Option<Arc<Jitter>>,
    state: State,
}

/// A place in the bucket's line for one token; dropping it leaves the line, having taken
/// nothing (or, holding a token taken ahead of its instant, gives it back).
type Wait = Pin<Box<dyn Future<Output = Result<Held, Denied>> + Send>>;

enum State {
    Idle,
    Waiting(Wait),
    /// A token is taken for the next call.
    Ready(Held),
}

/// A bucket a token can go back to, whatever its clock type.
trait TokenBack: Send + Sync {
    fn token_back(&self, token: Reservation);
}

impl<C: Clock + Send + Sync, W: Word> TokenBack for TokenBucket<C, W> {
    fn token_back(&self, token: Reservation) {
        self.give_back(token);
    }
}

/// The token taken for the next call: given back when dropped unless spent.
struct Held {
    bucket: Arc<dyn TokenBack>,
    token: Option<Reservation>,
}

impl Held {
    /// The call goes ahead: the token is used.
    fn spend(mut self) {
        let _used = self.token.take();
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some(token) = self.token.take() {
            self.bucket.token_back(token);
        }
    }
}

/// `call` before `poll_ready` said ready: the request was not passed on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NotReady;

impl fmt::Display for NotReady {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("service called before poll_ready reported ready")
    }
}

impl std::error::Error for NotReady {}

impl<S, C, W, Req> Service<Req> for Backpressure<S, C, W>
where
    S: Service<Req>,
    S::Error: Into<BoxError>,
    C: Clock + Send + Sync + 'static,
    W: Word,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        if let State::Ready(_) = self.state {
            return Poll::Ready(Ok(()));
        }
        // The inner service first: no token is held, and no place in line blocks the waiters
        // behind, while it is not ready or has failed.
        match self.inner.poll_ready(cx) {
            Poll::Ready(Ok(())) => {}
            Poll::Pending => {
                self.state = State::Idle;
                return Poll::Pending;
            }
            Poll::Ready(Err(error)) => {
                self.state = State::Idle;
                return Poll::Ready(Err(error.into()));
            }
        }
        if !matches!(self.state, State::Waiting(_)) {
            let bucket = Arc::clone(&self.bucket);
            let max_wait = self.max_wait;
            let jitter = self.jitter.clone();
            self.state = State::Waiting(Box::pin(async move {
                let token = match &jitter {
                    Some(jitter) => {
                        bucket
                            .jittered(jitter)
                            .acquire_reservation(1, max_wait)
                            .await?
                    }
                    None => bucket.acquire_reservation(1, max_wait).await?,
                };
                Ok(Held {
                    bucket,
                    token: Some(token),
                })
            }));
        }
        let State::Waiting(wait) = &mut self.state else {
            return Poll::Pending; // set just above
        };
        match wait.as_mut().poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Ok(held)) => {
                self.state = State::Ready(held);
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(denied)) => {
                self.state = State::Idle;
                Poll::Ready(Err(RateLimited::by_bucket(&self.bucket, denied).into()))
            }
        }
    }

    fn call(&mut self, request: Req) -> Self::Future {
        match mem::replace(&mut self.state, State::Idle) {
            State::Ready(token) => {
                token.spend();
                ResponseFuture::inner(self.inner.call(request))
            }
            other => {
                self.state = other;
                ResponseFuture::failed(NotReady)
            }
        }
    }
}

impl<S: Clone, C, W: Word> Clone for Backpressure<S, C, W> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            bucket: Arc::clone(&self.bucket),
            max_wait: self.max_wait,
            jitter: self.jitter.clone(),
            state: State::Idle,
        }
    }
}

impl<C, W: Word> fmt::Debug for BackpressureLayer<C, W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BackpressureLayer")
            .field("max_wait", &self.max_wait)
            .field("jitter", &self.jitter)
            .finish_non_exhaustive()
    }
}

impl<S: fmt::Debug, C, W: Word> fmt::Debug for Backpressure<S, C, W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Backpressure")
            .field("inner", &self.inner)
            .field("waiting", &!matches!(self.state, State::Idle))
            .finish_non_exhaustive()
    }
}

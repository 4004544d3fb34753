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
use crate::{Clock, DefaultWord, Denied, KeyedDenied, TokenBucket, Word};

/// Wraps services in [`Backpressure`]: each waits in `poll_ready` for its turn on one shared
/// bucket, for at most `max_wait`.
///
/// ```
/// use std::sync::Arc;
/// use tollgate::layer::BackpressureLayer;
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
}

impl<C, W: Word> BackpressureLayer<C, W> {
    /// Waits as long as it takes (within the bucket's debt bound: decades on the 64-bit word).
    pub fn new(bucket: Arc<TokenBucket<C, W>>) -> Self {
        Self {
            bucket,
            max_wait: Duration::MAX,
        }
    }

    /// Waits at most `max_wait`: a request whose turn is further away fails in `poll_ready`
    /// with [`RateLimited`], taking nothing.
    pub fn max_wait(mut self, max_wait: Duration) -> Self {
        self.max_wait = max_wait;
        self
    }
}

impl<C, W: Word> Clone for BackpressureLayer<C, W> {
    fn clone(&self) -> Self {
        Self {
            bucket: Arc::clone(&self.bucket),
            max_wait: self.max_wait,
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
            state: State::Idle,
        }
    }
}

/// A service whose `poll_ready` takes one token from a shared bucket, waiting for it with
/// [`TokenBucket::acquire_timeout`] (a reservation, then one tokio sleep), then asks the inner
/// service.
///
/// Waiters are served in the order they reserved and each wakes once. A service dropped while
/// it waits gives its token back (the rule of [`TokenBucket::cancel`]); a clone starts without
/// a reservation. Use [`TokioClock`](crate::TokioClock) for the bucket, so that it and the
/// sleep read the same clock.
pub struct Backpressure<S, C, W: Word = DefaultWord> {
    inner: S,
    bucket: Arc<TokenBucket<C, W>>,
    max_wait: Duration,
    state: State,
}

/// A wait for one token that owns its share of the bucket; dropping it gives the token back.
type Wait = Pin<Box<dyn Future<Output = Result<Duration, Denied>> + Send>>;

enum State {
    Idle,
    Waiting(Wait),
    /// A token is taken for the next call.
    Ready,
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
        loop {
            match &mut self.state {
                State::Idle => {
                    // A token at hand means nobody waits (waiters hold the bucket in debt), so
                    // taking it jumps no queue and saves boxing a wait.
                    if self.bucket.try_acquire(1).is_ok() {
                        self.state = State::Ready;
                        continue;
                    }
                    let bucket = Arc::clone(&self.bucket);
                    let max_wait = self.max_wait;
                    self.state = State::Waiting(Box::pin(async move {
                        bucket.acquire_timeout(1, max_wait).await
                    }));
                }
                State::Waiting(wait) => match wait.as_mut().poll(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Ok(_waited)) => self.state = State::Ready,
                    Poll::Ready(Err(denied)) => {
                        self.state = State::Idle;
                        return Poll::Ready(Err(self.refusal(denied).into()));
                    }
                },
                State::Ready => return self.inner.poll_ready(cx).map_err(Into::into),
            }
        }
    }

    fn call(&mut self, request: Req) -> Self::Future {
        match mem::replace(&mut self.state, State::Idle) {
            // The token is spent on this request.
            State::Ready => ResponseFuture::inner(self.inner.call(request)),
            other => {
                self.state = other;
                ResponseFuture::failed(NotReady)
            }
        }
    }
}

impl<S, C: Clock, W: Word> Backpressure<S, C, W> {
    fn refusal(&self, denied: Denied) -> RateLimited {
        let cell = self.bucket.cell();
        let to_full = cell
            .params
            .ticks_to_full(W::load(cell.word), self.bucket.clock().now());
        RateLimited::new::<C>(KeyedDenied::Denied(denied), cell.params, to_full)
    }
}

impl<S: Clone, C, W: Word> Clone for Backpressure<S, C, W> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            bucket: Arc::clone(&self.bucket),
            max_wait: self.max_wait,
            state: State::Idle,
        }
    }
}

impl<C, W: Word> fmt::Debug for BackpressureLayer<C, W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BackpressureLayer")
            .field("max_wait", &self.max_wait)
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

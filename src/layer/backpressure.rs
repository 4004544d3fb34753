//! Backpressure: `poll_ready` waits until the shared bucket grants the next request.

use core::fmt;
use core::future::Future;
use core::mem;
use core::pin::Pin;
use core::task::{Context, Poll};
use core::time::Duration;
use std::boxed::Box;
use std::sync::Arc;

use tokio::time::Sleep;
use tower_layer::Layer;
use tower_service::Service;

use super::{BoxError, RateLimited, ResponseFuture};
use crate::keyed::ticks_to_full;
use crate::{Clock, DefaultWord, KeyedDenied, Reservation, TokenBucket, Word};

/// Wraps services in [`Backpressure`]: each waits in `poll_ready` for its turn on one shared
/// bucket, for at most `max_wait`.
///
/// ```
/// use std::sync::Arc;
/// use tollgate::layer::BackpressureLayer;
/// use tollgate::{Quota, Rate, StdClock, TokenBucket};
///
/// // A client that must not send an upstream API more than 10 requests a second.
/// let bucket = Arc::new(TokenBucket::try_new(Quota::new(Rate::per_second(10)), StdClock)?);
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

impl<S, C: Clock, W: Word> Layer<S> for BackpressureLayer<C, W> {
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

/// A service whose `poll_ready` reserves one token on a shared bucket and sleeps (tokio) until
/// it is due, then asks the inner service.
///
/// Waiters are served in the order they reserved and each wakes once. A service dropped while
/// it waits gives its token back (the rule of [`TokenBucket::cancel`]); a clone starts without
/// a reservation.
pub struct Backpressure<S, C: Clock, W: Word = DefaultWord> {
    inner: S,
    bucket: Arc<TokenBucket<C, W>>,
    max_wait: Duration,
    state: State,
}

enum State {
    Idle,
    Waiting {
        sleep: Pin<Box<Sleep>>,
        reservation: Reservation,
    },
    Ready(Reservation),
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
    C: Clock,
    W: Word,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        loop {
            match &mut self.state {
                State::Idle => {
                    let reservation = match self.bucket.reserve(1, self.max_wait) {
                        Ok(reservation) => reservation,
                        Err(denied) => return Poll::Ready(Err(self.refusal(denied).into())),
                    };
                    self.state = if reservation.wait().is_zero() {
                        State::Ready(reservation)
                    } else {
                        State::Waiting {
                            sleep: Box::pin(tokio::time::sleep(reservation.wait())),
                            reservation,
                        }
                    };
                }
                State::Waiting { sleep, .. } => {
                    if sleep.as_mut().poll(cx).is_pending() {
                        return Poll::Pending;
                    }
                    if let State::Waiting { reservation, .. } =
                        mem::replace(&mut self.state, State::Idle)
                    {
                        self.state = State::Ready(reservation);
                    }
                }
                State::Ready(_) => return self.inner.poll_ready(cx).map_err(Into::into),
            }
        }
    }

    fn call(&mut self, request: Req) -> Self::Future {
        match mem::replace(&mut self.state, State::Idle) {
            // The token is spent on this request.
            State::Ready(_spent) => ResponseFuture::inner(self.inner.call(request)),
            other => {
                self.state = other;
                ResponseFuture::failed(NotReady)
            }
        }
    }
}

impl<S, C: Clock, W: Word> Backpressure<S, C, W> {
    fn refusal(&self, denied: crate::Denied) -> RateLimited {
        let cell = self.bucket.cell();
        let to_full = ticks_to_full(cell.params, W::load(cell.word), self.bucket.clock().now());
        RateLimited::new::<C>(KeyedDenied::Denied(denied), cell.params, to_full)
    }
}

impl<S, C: Clock, W: Word> Drop for Backpressure<S, C, W> {
    fn drop(&mut self) {
        match mem::replace(&mut self.state, State::Idle) {
            State::Waiting { reservation, .. } | State::Ready(reservation) => {
                self.bucket.cancel(reservation);
            }
            State::Idle => {}
        }
    }
}

impl<S: Clone, C: Clock, W: Word> Clone for Backpressure<S, C, W> {
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

impl<S: fmt::Debug, C: Clock, W: Word> fmt::Debug for Backpressure<S, C, W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Backpressure")
            .field("inner", &self.inner)
            .field("waiting", &!matches!(self.state, State::Idle))
            .finish_non_exhaustive()
    }
}

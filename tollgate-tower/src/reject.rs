//! Rejection: a request over the limit gets a [`RateLimited`] error at once.

use core::hash::{BuildHasher, Hash};
use core::task::{Context, Poll};
use core::time::Duration;
use std::sync::Arc;

use tower_layer::Layer;
use tower_service::Service;

use super::extract::NoKey;
use super::{BoxError, RateLimited, ResponseFuture};
use tollgate::observe::{Counted, Observe};
use tollgate::{Clock, KeyHasher, KeyedDenied, KeyedLimiter, Quota, TokenBucket, Word};

/// A limit that a request either passes, taking one token, or not.
pub trait Limit<Req> {
    /// Takes one token for `request`, or says why not.
    // A refusal carries the denial (whose `retry_after` is worked out when read, from what it
    // carries), the quota and two durations: built only on a refusal and returned in place,
    // it is not worth a heap allocation per refusal to make the error smaller.
    #[allow(clippy::result_large_err)]
    fn check(&self, request: &Req) -> Result<(), RateLimited>;

    /// The level of the bucket that has just let `request` through, read after
    /// [`check`](Self::check) granted it: what [`AnswerLayer`](super::AnswerLayer) writes in an
    /// allowed answer's headers. `None` (what a limit of one's own answers unless it says
    /// more) leaves those headers out: a limit that has nothing true to say says nothing.
    fn level(&self, request: &Req) -> Option<Level> {
        let _ = request;
        None
    }
}

/// A bucket's level after a call, with its quota: what the `RateLimit` headers of an answer
/// that let a request through say (`r` = `remaining`, `t` = `until_full` in whole seconds
/// rounded up, the policy from `quota`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Level {
    /// The quota of the bucket that granted the request.
    pub quota: Quota,
    /// Whole tokens left in it; 0 while reservations hold it in debt.
    pub remaining: u64,
    /// How long until it is full again if nobody takes from it.
    pub until_full: Duration,
}

impl<Req, C: Clock, W: Word> Limit<Req> for TokenBucket<C, W> {
    fn check(&self, _request: &Req) -> Result<(), RateLimited> {
        self.try_acquire(1)
            .map_err(|denied| RateLimited::by_bucket(self, denied))
    }

    fn level(&self, _request: &Req) -> Option<Level> {
        // An unlimited bucket has no policy to state (the headers leave it out on a refusal
        // too).
        (!self.is_unlimited()).then(|| Level {
            quota: self.quota(),
            remaining: self.available(),
            until_full: self.until_full(),
        })
    }
}

/// Reads a request's key: any `Fn(&Req) -> K`, or one of the extractors in
/// [`extract`](super::extract).
///
/// An extractor that cannot find the client in a request says so with a [`NoKey`] error; the
/// layers refuse that request with a `500` carrying the message, rather than keep one bucket
/// for every request without a key.
pub trait KeyOf<Req> {
    /// The key: a client address, an API key.
    type Key;

    /// `request`'s key, or why it has none.
    fn key_of(&self, request: &Req) -> Result<Self::Key, NoKey>;
}

impl<Req, K, F: Fn(&Req) -> K> KeyOf<Req> for F {
    type Key = K;

    fn key_of(&self, request: &Req) -> Result<K, NoKey> {
        Ok(self(request))
    }
}

/// One bucket per key: a [`KeyedLimiter`] and what reads a request's key.
pub struct PerKey<K, C, W: Word, F, S = KeyHasher> {
    limiter: Arc<KeyedLimiter<K, C, W, S>>,
    key: F,
}

impl<K, C, W: Word, F, S> PerKey<K, C, W, F, S> {
    /// `limiter`'s bucket for the key `key` reads from each request: the limit of
    /// [`RejectLayer::per_key`], to wrap (in a [`Counted`](tollgate::observe::Counted), say) before
    /// [`RejectLayer::new`].
    pub fn new(limiter: Arc<KeyedLimiter<K, C, W, S>>, key: F) -> Self {
        Self { limiter, key }
    }
}

impl<Req, K, C, W, F, S> Limit<Req> for PerKey<K, C, W, F, S>
where
    K: Hash + Eq + Clone,
    C: Clock,
    W: Word,
    F: KeyOf<Req, Key = K>,
    S: BuildHasher,
{
    fn check(&self, request: &Req) -> Result<(), RateLimited> {
        let limiter = &self.limiter;
        let key = self
            .key
            .key_of(request)
            .map_err(|no_key| RateLimited::without_key(no_key, *limiter.quota()))?;
        limiter.try_acquire(&key, 1).map_err(|denial| match denial {
            KeyedDenied::Full { .. } => {
                RateLimited::full(denial, *limiter.quota(), limiter.until_room())
            }
            _ => {
                let (quota, until_full) = limiter.quota_and_until_full(&key);
                RateLimited::refused(denial, quota, until_full)
            }
        })
    }

    fn level(&self, request: &Req) -> Option<Level> {
        let limiter = &self.limiter;
        if limiter.is_unlimited() {
            return None;
        }
        let key = self.key.key_of(request).ok()?;
        let (quota, until_full) = limiter.quota_and_until_full(&key);
        // A key the limiter does not hold reads as full; a key that was just granted is held
        // (a full bucket is the only one evicted, and it took a token), unless a limiter at its
        // capacity let it through on the newcomers' shared bucket under `WhenFull::Admit`:
        // its own bucket would say "full", which is not what granted it.
        if until_full.is_zero() && limiter.tier(&key).is_none() {
            return None;
        }
        Some(Level {
            quota,
            remaining: limiter.available(&key),
            until_full,
        })
    }
}

/// Wraps services in [`Reject`]: requests over the limit are refused with [`RateLimited`].
///
/// ```
/// use std::sync::Arc;
/// use tollgate_tower::RejectLayer;
/// use tollgate::{Quota, Rate, StdClock, TokenBucket};
///
/// let bucket = Arc::new(TokenBucket::try_new(Quota::new(Rate::per_second(100)), StdClock)?);
/// let layer = RejectLayer::new(bucket); // every service it wraps, and every clone, shares it
/// # let _ = layer;
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
pub struct RejectLayer<L> {
    limit: Arc<L>,
}

impl<L> RejectLayer<L> {
    /// One limit for every request: a shared [`TokenBucket`], or any [`Limit`].
    pub fn new(limit: Arc<L>) -> Self {
        Self { limit }
    }
}

impl<K, C, W: Word, F, S> RejectLayer<PerKey<K, C, W, F, S>> {
    /// One bucket per key, `key` reading a request's key (a client address, an API key).
    ///
    /// Keep a clone of `limiter` to [`sweep`](KeyedLimiter::sweep) it from a timer.
    pub fn per_key(limiter: Arc<KeyedLimiter<K, C, W, S>>, key: F) -> Self {
        Self::new(Arc::new(PerKey::new(limiter, key)))
    }
}

impl<L> Clone for RejectLayer<L> {
    fn clone(&self) -> Self {
        Self {
            limit: Arc::clone(&self.limit),
        }
    }
}

impl<S, L> Layer<S> for RejectLayer<L> {
    type Service = Reject<S, L>;

    fn layer(&self, inner: S) -> Reject<S, L> {
        Reject {
            inner,
            limit: Arc::clone(&self.limit),
        }
    }
}

/// A service that passes on requests within its limit and refuses the others with
/// [`RateLimited`], without calling the inner service.
pub struct Reject<S, L> {
    inner: S,
    limit: Arc<L>,
}

impl<S: Clone, L> Clone for Reject<S, L> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            limit: Arc::clone(&self.limit),
        }
    }
}

impl<S, L, Req> Service<Req> for Reject<S, L>
where
    S: Service<Req>,
    S::Error: Into<BoxError>,
    L: Limit<Req>,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Req) -> Self::Future {
        match self.limit.check(&request) {
            Ok(()) => ResponseFuture::inner(self.inner.call(request)),
            Err(limited) => ResponseFuture::failed(limited),
        }
    }
}

impl<L> core::fmt::Debug for RejectLayer<L> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RejectLayer").finish_non_exhaustive()
    }
}

impl<S: core::fmt::Debug, L> core::fmt::Debug for Reject<S, L> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Reject")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

/// Counts each request a layer lets through as one token granted, each it refuses as one
/// denied: wrap the layer's limit, `RejectLayer::new(Arc::new(Counted::new(limit, counters)))`.
impl<Req, L: Limit<Req>, O: Observe> Limit<Req> for Counted<L, O> {
    fn check(&self, request: &Req) -> Result<(), RateLimited> {
        let checked = self.inner().check(request);
        match checked {
            Ok(()) => self.observer().granted(1, Duration::ZERO),
            Err(_) => self.observer().denied(1),
        }
        checked
    }

    fn level(&self, request: &Req) -> Option<Level> {
        self.inner().level(request)
    }
}

//! Dry run: decide and count as the limit would, and let everything through.

use core::fmt;
use std::boxed::Box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::{Level, Limit, RateLimited};

/// A limit in shadow mode, as nginx's `limit_req_dry_run` and Envoy's shadow mode: every
/// request is checked against the limit it wraps, exactly as an enforcing layer would check
/// it, and let through; the refusals it would have made are counted and handed to a callback
/// (to log them), so a limit can be tried on live traffic before it is enforced.
///
/// A refused check takes nothing from the limit, so the requests a dry run counts are exactly
/// those the same limit, enforcing, would refuse on the same sequence.
///
/// Nor does it show: its answers carry no rate-limit headers (its [`Limit::level`] is `None`),
/// for a client that reads them would slow down for a limit that is not enforced.
///
/// ```
/// use std::sync::Arc;
/// use tollgate_tower::{AnswerLayer, DryRun};
/// use tollgate::{Quota, Rate, StdClock, TokenBucket};
///
/// let bucket = TokenBucket::try_new(Quota::new(Rate::per_second(100)), StdClock)?;
/// let shadow = Arc::new(DryRun::new(bucket).on_refusal(|refused| eprintln!("would refuse: {refused}")));
/// let layer = AnswerLayer::new(Arc::clone(&shadow));
/// // ... serve; later:
/// println!("{} of {} requests would have been refused", shadow.would_refuse(), shadow.checked());
/// # let _ = layer;
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
pub struct DryRun<L> {
    limit: L,
    checked: AtomicU64,
    would_refuse: AtomicU64,
    on_refusal: Option<Log>,
}

/// What a dry run calls with each refusal it did not make.
type Log = Box<dyn Fn(&RateLimited) + Send + Sync>;

impl<L> DryRun<L> {
    /// `limit` in shadow mode, counting what it would refuse.
    pub fn new(limit: L) -> Self {
        Self {
            limit,
            checked: AtomicU64::new(0),
            would_refuse: AtomicU64::new(0),
            on_refusal: None,
        }
    }

    /// Also calls `log` with each refusal that was not made, on the request's path: keep it
    /// short (a counter, a log line).
    pub fn on_refusal(mut self, log: impl Fn(&RateLimited) + Send + Sync + 'static) -> Self {
        self.on_refusal = Some(Box::new(log));
        self
    }

    /// Requests checked so far.
    pub fn checked(&self) -> u64 {
        self.checked.load(Ordering::Relaxed)
    }

    /// Requests the limit would have refused so far, all of them let through.
    pub fn would_refuse(&self) -> u64 {
        self.would_refuse.load(Ordering::Relaxed)
    }

    /// The limit in shadow mode.
    pub fn limit(&self) -> &L {
        &self.limit
    }
}

impl<Req, L: Limit<Req>> Limit<Req> for DryRun<L> {
    fn check(&self, request: &Req) -> Result<(), RateLimited> {
        // Relaxed: counters read for reports, ordered with nothing else.
        self.checked.fetch_add(1, Ordering::Relaxed);
        if let Err(refused) = self.limit.check(request) {
            self.would_refuse.fetch_add(1, Ordering::Relaxed);
            if let Some(log) = &self.on_refusal {
                log(&refused);
            }
        }
        Ok(())
    }
}

impl<Req, L: Limit<Req>> Limit<Req> for Arc<L> {
    fn check(&self, request: &Req) -> Result<(), RateLimited> {
        L::check(self, request)
    }

    fn level(&self, request: &Req) -> Option<Level> {
        L::level(self, request)
    }
}

impl<L> fmt::Debug for DryRun<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DryRun")
            .field("checked", &self.checked())
            .field("would_refuse", &self.would_refuse())
            .finish_non_exhaustive()
    }
}

//! [`Metrics`]: a limit's counts sent to the `metrics` facade.

use core::time::Duration;

use metrics::{counter, gauge, histogram, Counter, Gauge, Histogram, SharedString};

use super::Observe;
use crate::Quota;

/// An observer that sends each event to the [`metrics`](https://docs.rs/metrics/0.24) facade, labelled `limiter = <name>`:
///
/// | metric | kind | what |
/// |---|---|---|
/// | `tollgate_granted_total` | counter | calls granted |
/// | `tollgate_granted_tokens_total` | counter | tokens granted |
/// | `tollgate_denied_total` | counter | calls refused |
/// | `tollgate_denied_tokens_total` | counter | tokens refused |
/// | `tollgate_waited_total` | counter | granted calls that waited first |
/// | `tollgate_waited_tokens_total` | counter | tokens those calls got |
/// | `tollgate_wait_seconds` | histogram | how long each of those waited |
/// | `tollgate_waiting` | gauge | calls in a wait now |
/// | `tollgate_quota_tokens_per_second` | gauge | the quota's rate, infinite when unlimited ([`with_quota`](Self::with_quota)) |
/// | `tollgate_quota_burst` | gauge | the quota's burst, infinite when unlimited ([`with_quota`](Self::with_quota)) |
///
/// The handles are registered when the observer is made, so make it after installing the
/// application's recorder (an exporter): made before, it reports to nowhere.
///
/// ```
/// use std::sync::Arc;
/// use tollgate::observe::{Counted, Metrics};
/// use tollgate::{Quota, Rate, StdClock, TokenBucket};
///
/// // metrics_exporter_prometheus::PrometheusBuilder::new().install_recorder()?; first
/// let bucket = TokenBucket::try_new(Quota::new(Rate::per_second(100)), StdClock)?;
/// let gate = Counted::new(bucket, Metrics::new("uploads"));
/// assert!(gate.try_acquire(1).is_ok()); // tollgate_granted_total{limiter="uploads"} 1
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
#[derive(Clone)]
pub struct Metrics {
    granted_calls: Counter,
    granted_tokens: Counter,
    denied_calls: Counter,
    denied_tokens: Counter,
    waited_calls: Counter,
    waited_tokens: Counter,
    wait_seconds: Histogram,
    waiting: Gauge,
    labels: [(&'static str, SharedString); 1],
}

impl Metrics {
    /// Registers the metrics of the limit called `name` with the installed recorder.
    pub fn new(name: impl Into<SharedString>) -> Self {
        let name: SharedString = name.into();
        let labels = [("limiter", name)];
        Self {
            granted_calls: counter!("tollgate_granted_total", &labels),
            granted_tokens: counter!("tollgate_granted_tokens_total", &labels),
            denied_calls: counter!("tollgate_denied_total", &labels),
            denied_tokens: counter!("tollgate_denied_tokens_total", &labels),
            waited_calls: counter!("tollgate_waited_total", &labels),
            waited_tokens: counter!("tollgate_waited_tokens_total", &labels),
            wait_seconds: histogram!("tollgate_wait_seconds", &labels),
            waiting: gauge!("tollgate_waiting", &labels),
            labels,
        }
    }

    /// The same observer, having set the gauges of the limit's `quota`: its rate in tokens a
    /// second and its burst, both infinite for an unlimited quota ([`Quota::unlimited`]), so
    /// that a dashboard tells a limit turned off from one that is never reached.
    ///
    /// ```
    /// use tollgate::observe::Metrics;
    /// use tollgate::Quota;
    ///
    /// // tollgate_quota_tokens_per_second{limiter="exports"} inf
    /// let metrics = Metrics::new("exports").with_quota(&Quota::unlimited());
    /// ```
    pub fn with_quota(self, quota: &Quota) -> Self {
        let (rate, burst) = if quota.is_unlimited() {
            (f64::INFINITY, f64::INFINITY)
        } else {
            let rate = quota.rate();
            (
                rate.tokens() as f64 / rate.period().as_secs_f64(),
                quota.burst_size() as f64,
            )
        };
        gauge!("tollgate_quota_tokens_per_second", &self.labels).set(rate);
        gauge!("tollgate_quota_burst", &self.labels).set(burst);
        self
    }
}

impl Observe for Metrics {
    fn granted(&self, tokens: u32, waited: Duration) {
        self.granted_calls.increment(1);
        self.granted_tokens.increment(tokens.into());
        if !waited.is_zero() {
            self.waited_calls.increment(1);
            self.waited_tokens.increment(tokens.into());
            self.wait_seconds.record(waited);
        }
    }

    fn denied(&self, tokens: u32) {
        self.denied_calls.increment(1);
        self.denied_tokens.increment(tokens.into());
    }

    fn wait_began(&self) {
        self.waiting.increment(1);
    }

    fn wait_ended(&self) {
        self.waiting.decrement(1);
    }
}

impl core::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

//! [`Builder`]: the quota, the key, the fault policy and the timeout of a Redis bucket.

use core::time::Duration;
use std::string::String;
use std::sync::atomic::AtomicBool;
#[cfg(test)]
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use super::connection::{setup_error, Shared};
use super::layout::Layout;
use super::{Fallback, Fault, FaultPolicy, Inner, Op, Policy, RedisBucket, SetupError};
use tollgate::wait::RemoteLine;
use tollgate::{Jitter, Quota};

/// Builds a [`RedisBucket`]: see [`RedisBucket::builder`].
pub struct Builder {
    pub(super) connection: Arc<Shared>,
    pub(super) key: String,
    pub(super) quota: Quota,
    pub(super) policy: FaultPolicy,
    pub(super) timeout: Duration,
    pub(super) jitter: Jitter,
}

impl core::fmt::Debug for Builder {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Builder")
            .field("key", &self.key)
            .field("quota", &self.quota)
            .field("policy", &self.policy)
            .field("timeout", &self.timeout)
            .field("jitter", &self.jitter)
            .finish_non_exhaustive()
    }
}

impl Builder {
    /// What the bucket does while Redis cannot answer; [`FaultPolicy::FailClosed`] by default.
    pub fn policy(mut self, policy: FaultPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// How long a call waits for Redis, connecting included, before the fault policy decides;
    /// 200 ms by default. Redis does nothing for a call it runs more than half of it after the
    /// call was sent (by Redis's clock).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// What a wait ([`acquire`](RedisBucket::acquire)) that slept sleeps after it, holding its
    /// tokens, so that the waiters of many processes woken by one refill do not all call
    /// Redis in the same tick; [`Jitter::none`] by default. As
    /// [`Limits::with_jitter`](tollgate::Limits::with_jitter).
    pub fn jitter(mut self, jitter: Jitter) -> Self {
        self.jitter = jitter;
        self
    }

    /// Builds the bucket and reaches Redis once, within the timeout: the script is loaded and
    /// the start fill applied now if the key is absent, as the local bucket's `try_new` does.
    /// [`SetupError::Unreachable`] if Redis could not answer, [`SetupError::Refused`] if it
    /// answered with an error (a wrong password, a key of another type).
    pub async fn connect(self) -> Result<RedisBucket, SetupError> {
        let bucket = self.connect_lazy()?;
        let address = &bucket.inner.connection.address;
        match bucket.inner.call(Op::Peek).await {
            Ok(_) => Ok(bucket),
            Err(Fault::Redis(error) | Fault::Rejected(error)) => Err(setup_error(address, error)),
            Err(Fault::Timeout { after }) => Err(SetupError::Timeout {
                address: address.clone(),
                after,
            }),
        }
    }

    /// Builds the bucket without reaching Redis: the first call that reaches it applies the
    /// start fill if the key is absent, and until Redis answers the fault policy decides.
    pub fn connect_lazy(self) -> Result<RedisBucket, SetupError> {
        let layout = Layout::solve(&self.quota)?;
        let policy = match self.policy {
            FaultPolicy::FailClosed => Policy::FailClosed,
            FaultPolicy::FailOpen => Policy::FailOpen,
            FaultPolicy::Fallback(quota) => {
                Policy::Fallback(Fallback::new(quota).map_err(SetupError::Fallback)?)
            }
        };
        Ok(RedisBucket {
            inner: Arc::new(Inner {
                connection: self.connection,
                key: self.key,
                layout,
                quota: self.quota,
                policy,
                timeout: self.timeout,
                start_pending: AtomicBool::new(true),
                line: RemoteLine::default(),
                jitter: self.jitter,
                #[cfg(test)]
                fixed_now_us: AtomicU64::new(u64::MAX),
                #[cfg(test)]
                deadline_when_pinned: AtomicBool::new(false),
            }),
        })
    }
}

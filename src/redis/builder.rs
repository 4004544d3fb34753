//! [`Builder`]: the quota, the key, the fault policy and the timeout of a Redis bucket.

use core::time::Duration;
use std::string::{String, ToString};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;

use ::redis::aio::{ConnectionManager, ConnectionManagerConfig};
use ::redis::Script;

use super::layout::Layout;
use super::{Client, FaultPolicy, Inner, Op, Policy, RedisBucket, SetupError, TIME};
use crate::{Quota, StdClock, TokenBucket};

/// Builds a [`RedisBucket`]: see [`RedisBucket::builder`].
#[derive(Debug)]
pub struct Builder {
    pub(super) client: Client,
    pub(super) key: String,
    pub(super) quota: Quota,
    pub(super) policy: FaultPolicy,
    pub(super) timeout: Duration,
}

impl Builder {
    /// What the bucket does while Redis cannot answer; [`FaultPolicy::FailClosed`] by default.
    pub fn policy(mut self, policy: FaultPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// How long a call waits for Redis, connecting included, before the fault policy decides;
    /// 200 ms by default.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Builds the bucket and reaches Redis once, within the timeout: the script is loaded and
    /// the start fill applied now if the key is absent, as the local bucket's `try_new` does.
    pub async fn connect(self) -> Result<RedisBucket, SetupError> {
        let bucket = self.connect_lazy()?;
        match bucket.inner.call(Op::Peek).await {
            Ok(_) => Ok(bucket),
            Err(fault) => Err(SetupError::Redis(fault.to_string())),
        }
    }

    /// Builds the bucket without reaching Redis: the first call that reaches it applies the
    /// start fill if the key is absent, and until Redis answers the fault policy decides. Call
    /// it within a tokio runtime.
    pub fn connect_lazy(self) -> Result<RedisBucket, SetupError> {
        let layout = Layout::solve(&self.quota)?;
        let policy = match self.policy {
            FaultPolicy::FailClosed => Policy::FailClosed,
            FaultPolicy::FailOpen => Policy::FailOpen,
            FaultPolicy::Fallback(quota) => Policy::Fallback(
                TokenBucket::try_new(quota, StdClock).map_err(SetupError::Fallback)?,
            ),
        };
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(SetupError::Redis(String::from(
                "not within a tokio runtime",
            )));
        }
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(Some(self.timeout))
            // Reconnect quickly, then leave the next call to try again: a call never waits on
            // a long backoff, and the timeout bounds it anyway.
            .set_number_of_retries(1)
            .set_min_delay(Duration::from_millis(10))
            .set_max_delay(Duration::from_millis(100));
        let connection = ConnectionManager::new_lazy_with_config(self.client, config)
            .map_err(|error| SetupError::Redis(error.to_string()))?;
        Ok(RedisBucket {
            inner: Arc::new(Inner {
                connection,
                script: Script::new(include_str!("script.lua")),
                key: self.key,
                layout,
                quota: self.quota,
                policy,
                timeout: self.timeout,
                start_pending: AtomicBool::new(true),
                fixed_now_us: AtomicU64::new(TIME),
            }),
        })
    }
}

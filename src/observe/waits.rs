//! Counted waits: blocking and tokio. Each is a wait in line while it lasts
//! ([`Observe::wait_began`] to [`Observe::wait_ended`]), even when its future is dropped.

use core::time::Duration;

use super::{Counted, Observe, Waiting};
use crate::{Clock, Denied, TokenBucket, Word};

impl<C: Clock, W: Word, O: Observe> Counted<TokenBucket<C, W>, O> {
    /// [`TokenBucket::acquire_blocking`], counted.
    pub fn acquire_blocking(&self, n: u32) -> Result<Duration, Denied> {
        self.acquire_blocking_timeout(n, Duration::MAX)
    }

    /// [`TokenBucket::acquire_blocking_timeout`], counted.
    pub fn acquire_blocking_timeout(&self, n: u32, timeout: Duration) -> Result<Duration, Denied> {
        let _waiting = Waiting::new(&self.observer);
        self.report(n, self.inner.acquire_blocking_timeout(n, timeout), |&w| w)
    }

    /// [`TokenBucket::acquire`], counted.
    #[cfg(feature = "tokio")]
    pub async fn acquire(&self, n: u32) -> Result<Duration, Denied> {
        self.acquire_timeout(n, Duration::MAX).await
    }

    /// [`TokenBucket::acquire_timeout`], counted. A future dropped mid-wait counts neither a
    /// grant nor a denial (it took nothing), and leaves the waiting count as it found it.
    #[cfg(feature = "tokio")]
    pub async fn acquire_timeout(&self, n: u32, timeout: Duration) -> Result<Duration, Denied> {
        let _waiting = Waiting::new(&self.observer);
        let result = self.inner.acquire_timeout(n, timeout).await;
        self.report(n, result, |&w| w)
    }
}

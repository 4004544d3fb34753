//! Blocking waits for threads: reserve, then sleep outside any lock.

use core::time::Duration;

use crate::{Clock, Denied, TokenBucket, Word};

impl<C: Clock, W: Word> TokenBucket<C, W> {
    /// Takes `n` tokens, blocking the thread until they have accrued; returns the time waited.
    ///
    /// The tokens are reserved first and the thread then sleeps once, with no lock held, until
    /// its own instant: threads are served in arrival order and each wakes once. `n` above the
    /// burst fails at once with [`Denied::ExceedsCapacity`]; `n = 0` returns at once.
    ///
    /// The time waited is the reservation's [`wait`](crate::Reservation::wait): the sleep is at
    /// least that long, and later only by the operating system's scheduling.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Quota, Rate, StdClock, TokenBucket};
    ///
    /// let bucket = TokenBucket::try_new(Quota::new(Rate::per_second(100)).burst(1), StdClock)?;
    /// assert_eq!(bucket.acquire_blocking(1)?, Duration::ZERO); // the burst
    /// let waited = bucket.acquire_blocking(1)?; // the next token accrues within 10 ms
    /// assert!(waited <= Duration::from_millis(10));
    /// assert!(bucket.acquire_blocking(2).is_err()); // more than the burst: never, so at once
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn acquire_blocking(&self, n: u32) -> Result<Duration, Denied> {
        self.acquire_blocking_timeout(n, Duration::MAX)
    }

    /// Takes `n` tokens if they accrue within `timeout`, blocking the thread until then; returns
    /// the time waited.
    ///
    /// A wait that would exceed `timeout` fails at once with [`Denied::Insufficient`] and takes
    /// nothing; its `retry_after` says when the same call would succeed. Otherwise it behaves as
    /// [`acquire_blocking`](Self::acquire_blocking).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Denied, Quota, Rate, StdClock, TokenBucket};
    ///
    /// let bucket = TokenBucket::try_new(Quota::new(Rate::per_second(1)).start_empty(), StdClock)?;
    /// let denied = bucket.acquire_blocking_timeout(1, Duration::from_millis(10));
    /// assert!(matches!(denied, Err(Denied::Insufficient { .. }))); // at once, not after 10 ms
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn acquire_blocking_timeout(&self, n: u32, timeout: Duration) -> Result<Duration, Denied> {
        let reservation = self.reserve(n, timeout)?;
        let wait = reservation.wait();
        if !wait.is_zero() {
            std::thread::sleep(wait);
        }
        Ok(wait)
    }
}

//! Async waits for tokio, cancel-safe, and [`TokioClock`], which paused time drives.

use core::time::Duration;

use ::tokio::time::Instant;

use crate::{Clock, Denied, Reservation, TokenBucket, Word};

/// `tokio::time::Instant` in nanoseconds since the clock was made.
///
/// It reads tokio's clock, so `tokio::time::pause()` and `advance()` drive a bucket on it and
/// tests of waits take no real time. Outside a paused runtime it is the monotonic clock of
/// `std`.
///
/// **Its origin is its own.** Each clock counts from the instant it was made by
/// [`new`](Self::new) or [`default`](Self::default); copies share that origin. Unlike
/// [`StdClock`](crate::StdClock) there is no process-wide origin, because under paused time each
/// runtime keeps a clock of its own, and one can run hours ahead of another: an origin fixed in
/// one runtime could lie in another's future, and a clock read there would stand still until it
/// caught up. So make the clock inside the runtime whose time it follows (after `pause()` is
/// fine). Instants before the origin read as 0; 64 bits of nanoseconds last 584 years.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Clock, TokioClock};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// tokio::time::pause();
/// let clock = TokioClock::new();
/// tokio::time::advance(Duration::from_millis(1500)).await;
/// assert_eq!(clock.now(), 1_500_000_000);
/// # }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TokioClock {
    origin: Instant,
}

impl TokioClock {
    /// A clock whose origin is now, on the current runtime's clock.
    pub fn new() -> Self {
        Self {
            origin: Instant::now(),
        }
    }

    /// Converts an `Instant` to this clock's ticks (zero for instants before the origin,
    /// `u64::MAX` after 584 years).
    pub fn ticks_at(&self, instant: Instant) -> u64 {
        let nanos = instant.saturating_duration_since(self.origin).as_nanos();
        u64::try_from(nanos).unwrap_or(u64::MAX)
    }
}

impl Default for TokioClock {
    /// Same as [`TokioClock::new`]: the origin is now.
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for TokioClock {
    const TICKS_PER_SECOND: u64 = 1_000_000_000;
    #[inline]
    fn now(&self) -> u64 {
        self.ticks_at(Instant::now())
    }
}

impl<C: Clock, W: Word> TokenBucket<C, W> {
    /// Takes `n` tokens, waiting until they have accrued; returns the time waited.
    ///
    /// At its first poll the future reserves the tokens, then sleeps once with
    /// `tokio::time::sleep` until they are due: tasks are served in the order they first polled,
    /// each is woken once, and none re-checks. `n` above the burst fails at once with
    /// [`Denied::ExceedsCapacity`]; `n = 0` and tokens at hand complete without sleeping.
    ///
    /// **Cancel-safe.** Dropping the future before its wait is over gives its reservation back
    /// through [`cancel`](Self::cancel), so `tokio::time::timeout`, `select!` and aborted tasks
    /// leave no tokens stranded. Use [`TokioClock`] so that the bucket and the sleep read the
    /// same clock (any [`Clock`] works outside paused time).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tokio::time::{timeout, Instant};
    /// use tollgate::{Quota, Rate, TokenBucket, TokioClock};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let start = Instant::now();
    /// let bucket = TokenBucket::try_new(Quota::new(Rate::per_second(5)).burst(5), TokioClock::new())?;
    /// bucket.acquire(5).await?; // the burst, at once
    /// assert_eq!(bucket.acquire(1).await?, Duration::from_millis(200));
    ///
    /// // Given up after 100 ms: the 5 tokens it had reserved go to the next caller.
    /// assert!(timeout(Duration::from_millis(100), bucket.acquire(5)).await.is_err());
    /// assert_eq!(bucket.acquire(1).await?, Duration::from_millis(100));
    /// assert_eq!(start.elapsed(), Duration::from_millis(400));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn acquire(&self, n: u32) -> Result<Duration, Denied> {
        self.acquire_timeout(n, Duration::MAX).await
    }

    /// Takes `n` tokens if they accrue within `timeout`, waiting until then; returns the time
    /// waited.
    ///
    /// A wait that would exceed `timeout` fails at once with [`Denied::Insufficient`], without
    /// sleeping and without taking anything; its `retry_after` says when the same call would
    /// succeed. Otherwise, and for cancellation, it behaves as [`acquire`](Self::acquire).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Denied, Quota, Rate, TokenBucket, TokioClock};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), tollgate::ConfigError> {
    /// let bucket = TokenBucket::try_new(Quota::new(Rate::per_second(5)).start_empty(), TokioClock::new())?;
    /// assert_eq!(
    ///     bucket.acquire_timeout(5, Duration::from_millis(400)).await,
    ///     Err(Denied::Insufficient { retry_after: Duration::from_millis(600) })
    /// );
    /// assert_eq!(
    ///     bucket.acquire_timeout(2, Duration::from_millis(400)).await,
    ///     Ok(Duration::from_millis(400))
    /// );
    /// # Ok(())
    /// # }
    /// ```
    pub async fn acquire_timeout(&self, n: u32, timeout: Duration) -> Result<Duration, Denied> {
        let reservation = self.reserve(n, timeout)?;
        let wait = reservation.wait();
        if wait.is_zero() {
            return Ok(wait);
        }
        let mut guard = GiveBackOnDrop {
            bucket: self,
            reservation: Some(reservation),
        };
        ::tokio::time::sleep(wait).await;
        guard.keep();
        Ok(wait)
    }
}

/// Holds a reservation while its future sleeps, and gives it back if the future is dropped
/// first.
struct GiveBackOnDrop<'a, C: Clock, W: Word> {
    bucket: &'a TokenBucket<C, W>,
    reservation: Option<Reservation>,
}

impl<C: Clock, W: Word> GiveBackOnDrop<'_, C, W> {
    /// The wait is over: the tokens are the caller's.
    fn keep(&mut self) {
        let _spent = self.reservation.take();
    }
}

impl<C: Clock, W: Word> Drop for GiveBackOnDrop<'_, C, W> {
    fn drop(&mut self) {
        if let Some(reservation) = self.reservation.take() {
            self.bucket.cancel(reservation);
        }
    }
}

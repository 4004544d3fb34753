//! [`Jittered`]: a bucket's waits, each followed by a [`Jitter`] when it slept.
//!
//! Composed at the waits' entry points, around the waits themselves: a blocking wait sleeps its
//! jitter after the wait returns; an async wait takes in the same line as the bucket's own
//! waits and holds its take through the jitter in a [`CancelOnDrop`](super::CancelOnDrop), so
//! that a future dropped there gives it back.

#[cfg(any(
    feature = "std",
    feature = "embedded-hal",
    feature = "embedded-hal-async",
    feature = "embassy-time"
))]
use {crate::Denied, core::time::Duration};

use crate::{Clock, Jitter, TokenBucket, Word};

/// A bucket's waits with a [`Jitter`]: each wait that slept sleeps a random delay from
/// `jitter` after its tokens' instant, so that callers due at the same instant (after a pause,
/// or buckets in lockstep) do not all act in the same tick. Made with
/// [`TokenBucket::jittered`] (or `AdjustableBucket::jittered`); it has the bucket's waits, by
/// the same names.
///
/// - **A wait served at once is not delayed**: it had no crowd to spread from.
/// - **Jitter only ever lengthens a wait**: it never grants early and changes nothing the
///   bucket decides. The time returned includes it.
/// - **Giving up stays free**: an async wait holds its take through the jitter and gives it
///   back if its future is dropped there (what was taken, less what the burst cap would have
///   cut since); before it, it had taken nothing.
///
/// Why a wrapper rather than a field of the bucket: a bucket is its one word and layout, one
/// cache line (half of one on the 32-bit word), `const`-buildable in a `static`. A jitter beside
/// them would cost every bucket that room, waits or not; kept outside, `try_acquire` reads
/// nothing new and a `static` bucket stays as it is. `Jittered` is two references, built at the
/// call or kept; share one `Jitter` between the waiters that should spread among themselves.
///
/// Jitter spreads callers that wake together; it does not move a bucket's schedule, so
/// buckets in lockstep (workers splitting one quota, replicas started together) stay in
/// lockstep underneath it. Give those a phase instead: [`Quota::phase`](crate::Quota::phase),
/// [`Quota::random_phase`](crate::Quota::random_phase).
///
#[cfg_attr(
    feature = "tokio",
    doc = r##"
```
use std::time::Duration;
use tollgate::{Jitter, Quota, Rate, TokenBucket, TokioClock};

# #[tokio::main(flavor = "current_thread", start_paused = true)]
# async fn main() -> Result<(), Box<dyn std::error::Error>> {
let bucket = TokenBucket::try_new(Quota::new(Rate::per_second(10)).burst(1), TokioClock::new())?;
let jitter = Jitter::up_to(Duration::from_millis(20), 7);
assert_eq!(bucket.jittered(&jitter).acquire(1).await?, Duration::ZERO); // at once
let waited = bucket.jittered(&jitter).acquire(1).await?; // 100 ms, then up to 20 ms more
assert!(waited >= Duration::from_millis(100) && waited <= Duration::from_millis(121));
# Ok(())
# }
```
"##
)]
///
/// In firmware, both can live in `static`s:
///
/// ```
/// use core::time::Duration;
/// use tollgate::{Jitter, ManualClock, Quota, Rate, TokenBucket};
///
/// static CLOCK: ManualClock = ManualClock::new();
/// static UPLINK: TokenBucket<&ManualClock> = TokenBucket::new(Quota::new(Rate::per_second(10)), &CLOCK);
/// static SPREAD: Jitter = Jitter::up_to(Duration::from_millis(5), 0x5eed);
///
/// let uplink = UPLINK.jittered(&SPREAD);
/// assert_eq!(uplink.jitter().max(), Duration::from_millis(5));
/// ```
#[derive(Debug)]
pub struct Jittered<'a, B: ?Sized> {
    bucket: &'a B,
    jitter: &'a Jitter,
}

impl<B: ?Sized> Clone for Jittered<'_, B> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<B: ?Sized> Copy for Jittered<'_, B> {}

impl<'a, B: ?Sized> Jittered<'a, B> {
    /// `bucket`'s waits, each followed by a draw of `jitter` when it slept.
    pub const fn new(bucket: &'a B, jitter: &'a Jitter) -> Self {
        Self { bucket, jitter }
    }

    /// The bucket it waits on.
    pub const fn bucket(&self) -> &'a B {
        self.bucket
    }

    /// The jitter its waits add.
    pub const fn jitter(&self) -> &'a Jitter {
        self.jitter
    }
}

impl<C: Clock, W: Word> TokenBucket<C, W> {
    /// This bucket's waits, each followed by a random delay from `jitter` when it slept: see
    /// [`Jittered`]. Changes nothing of the bucket.
    pub const fn jittered<'a>(&'a self, jitter: &'a Jitter) -> Jittered<'a, Self> {
        Jittered::new(self, jitter)
    }
}

crate::with_atomic64! {
    impl<C: Clock, W: crate::AdjustableWord> crate::AdjustableBucket<C, W> {
        /// This bucket's waits, each followed by a random delay from `jitter` when it slept:
        /// see [`Jittered`]. Changes nothing of the bucket.
        pub const fn jittered<'a>(&'a self, jitter: &'a Jitter) -> Jittered<'a, Self> {
            Jittered::new(self, jitter)
        }
    }
}

/// Sleeps the jitter after a blocking wait that slept `waited`; returns the time waited in all.
/// A thread cannot be given up while it sleeps, so the take needs no holding.
#[cfg(feature = "std")]
fn after_blocking(jitter: &Jitter, waited: Duration) -> Duration {
    let extra = jitter.after(waited);
    if !extra.is_zero() {
        std::thread::sleep(extra);
    }
    waited.saturating_add(extra)
}

/// Sleeps the jitter on `delay` after a `DelayNs` wait that slept `waited`; returns the time
/// waited in all. The wait cannot be given up while it sleeps, so the take needs no holding.
#[cfg(feature = "embedded-hal")]
fn after_delay(
    jitter: &Jitter,
    waited: Duration,
    delay: &mut impl embedded_hal::delay::DelayNs,
) -> Duration {
    let extra = jitter.after(waited);
    super::delay::delay_for(delay, extra);
    waited.saturating_add(extra)
}

#[cfg(feature = "std")]
impl<C: Clock, W: Word> Jittered<'_, TokenBucket<C, W>> {
    /// [`TokenBucket::acquire_blocking`], then the jitter if it slept.
    pub fn acquire_blocking(&self, n: u32) -> Result<Duration, Denied> {
        self.acquire_blocking_timeout(n, Duration::MAX)
    }

    /// [`TokenBucket::acquire_blocking_timeout`], then the jitter if it slept (the jitter may
    /// add to `timeout`).
    pub fn acquire_blocking_timeout(&self, n: u32, timeout: Duration) -> Result<Duration, Denied> {
        let waited = self.bucket.acquire_blocking_timeout(n, timeout)?;
        Ok(after_blocking(self.jitter, waited))
    }
}

/// A wait in `bucket`'s own line, as its `acquire_timeout`, holding its take through the
/// jitter: the tokio wait of every jittered one-bucket wait.
#[cfg(feature = "tokio")]
async fn in_line_async<B>(
    bucket: &B,
    n: u32,
    timeout: Duration,
    jitter: &Jitter,
) -> Result<Duration, Denied>
where
    B: super::queue::Lined + super::ReserveNow<Cost = u32>,
{
    if let Some(settled) = super::queue::settled_at_once(bucket, n) {
        return settled.map(|()| Duration::ZERO);
    }
    let waiter = super::queue::Waiter::new([bucket], [n], Some(timeout))?;
    super::acquire_async(bucket, waiter, n, jitter).await
}

#[cfg(feature = "tokio")]
use core::future::Future as _;

#[cfg(feature = "tokio")]
impl<C: Clock, W: Word> Jittered<'_, TokenBucket<C, W>> {
    /// [`TokenBucket::acquire`], then the jitter if it waited, holding the tokens: a future
    /// dropped during the jitter gives them back.
    pub async fn acquire(&self, n: u32) -> Result<Duration, Denied> {
        in_line_async(self.bucket, n, Duration::MAX, self.jitter).await
    }

    /// [`TokenBucket::acquire_timeout`], then the jitter if it waited (the jitter may add to
    /// `timeout`), holding the tokens: a future dropped during the jitter gives them back.
    pub async fn acquire_timeout(&self, n: u32, timeout: Duration) -> Result<Duration, Denied> {
        in_line_async(self.bucket, n, timeout, self.jitter).await
    }

    /// [`TokenBucket::acquire_reservation`], then the jitter if it waited, holding the tokens
    /// (a future dropped during the jitter gives them back); then hands them over, as that
    /// does. The wait of a tower service's `poll_ready` with jitter.
    pub async fn acquire_reservation(
        &self,
        n: u32,
        timeout: Duration,
    ) -> Result<crate::Reservation, Denied> {
        let mut waited = false;
        let mut turn = core::pin::pin!(self.bucket.acquire_reservation(n, timeout));
        // Served at once when its first poll is: then it had no crowd to spread from.
        let taken = core::future::poll_fn(|cx| {
            let poll = turn.as_mut().poll(cx);
            waited |= poll.is_pending();
            poll
        })
        .await?;
        let guard = super::CancelOnDrop::new(self.bucket, taken);
        let extra = if waited {
            self.jitter.next()
        } else {
            Duration::ZERO
        };
        if !extra.is_zero() {
            ::tokio::time::sleep(extra).await;
        }
        Ok(guard.into_taken())
    }
}

#[cfg(feature = "embedded-hal")]
impl<C: Clock, W: Word> Jittered<'_, TokenBucket<C, W>> {
    /// [`TokenBucket::acquire_with_delay`], then the jitter on `delay` if it slept.
    pub fn acquire_with_delay(
        &self,
        n: u32,
        delay: &mut impl embedded_hal::delay::DelayNs,
    ) -> Result<Duration, Denied> {
        let waited = self.bucket.acquire_with_delay(n, delay)?;
        Ok(after_delay(self.jitter, waited, delay))
    }
}

crate::with_atomic64! {
    #[cfg(feature = "std")]
    impl<C: Clock, W: crate::AdjustableWord> Jittered<'_, crate::AdjustableBucket<C, W>> {
        /// `AdjustableBucket::acquire_blocking`, then the jitter if it slept.
        pub fn acquire_blocking(&self, n: u32) -> Result<Duration, Denied> {
            self.acquire_blocking_timeout(n, Duration::MAX)
        }

        /// `AdjustableBucket::acquire_blocking_timeout`, then the jitter if it slept.
        pub fn acquire_blocking_timeout(
            &self,
            n: u32,
            timeout: Duration,
        ) -> Result<Duration, Denied> {
            let waited = self.bucket.acquire_blocking_timeout(n, timeout)?;
            Ok(after_blocking(self.jitter, waited))
        }
    }

    #[cfg(feature = "tokio")]
    impl<C: Clock, W: crate::AdjustableWord> Jittered<'_, crate::AdjustableBucket<C, W>> {
        /// `AdjustableBucket::acquire`, then the jitter if it waited, holding the tokens: a
        /// future dropped during the jitter gives them back.
        pub async fn acquire(&self, n: u32) -> Result<Duration, Denied> {
            in_line_async(self.bucket, n, Duration::MAX, self.jitter).await
        }

        /// `AdjustableBucket::acquire_timeout`, then the jitter if it waited, holding the
        /// tokens.
        pub async fn acquire_timeout(&self, n: u32, timeout: Duration) -> Result<Duration, Denied> {
            in_line_async(self.bucket, n, timeout, self.jitter).await
        }
    }

    #[cfg(feature = "embedded-hal")]
    impl<C: Clock, W: crate::AdjustableWord> Jittered<'_, crate::AdjustableBucket<C, W>> {
        /// `AdjustableBucket::acquire_with_delay`, then the jitter on `delay` if it slept.
        pub fn acquire_with_delay(
            &self,
            n: u32,
            delay: &mut impl embedded_hal::delay::DelayNs,
        ) -> Result<Duration, Denied> {
            let waited = self.bucket.acquire_with_delay(n, delay)?;
            Ok(after_delay(self.jitter, waited, delay))
        }
    }
}

#[cfg(any(feature = "embassy-time", feature = "embedded-hal-async"))]
pub(super) mod in_line {
    //! The no-heap async waits with jitter: the limit's own line (jittered waiters and plain
    //! ones queue together), and the jitter slept holding the take.

    use core::time::Duration;

    use super::super::async_line::{wait_in_line_jittered, Sleeper, TakeNow};
    use crate::{Denied, Jitter};

    /// Waits in `limit`'s line as its own no-heap waits do, then sleeps the jitter holding
    /// the take, if the wait slept.
    pub(in crate::wait) async fn jittered_in_line<L: TakeNow<Error = Denied>, S: Sleeper>(
        limit: &L,
        cost: L::Cost,
        timeout: Option<Duration>,
        jitter: &Jitter,
        sleeper: &mut S,
    ) -> Result<Duration, Denied> {
        wait_in_line_jittered(limit, cost, timeout, jitter, sleeper).await
    }
}

#[cfg(feature = "embedded-hal-async")]
impl<C: Clock, W: Word> Jittered<'_, TokenBucket<C, W>> {
    /// [`TokenBucket::acquire_with_async_delay`], then the jitter on `delay` if it slept,
    /// holding the tokens: a future dropped during the jitter gives them back.
    pub async fn acquire_with_async_delay<D: embedded_hal_async::delay::DelayNs>(
        &self,
        n: u32,
        delay: &mut D,
    ) -> Result<Duration, Denied> {
        let mut sleeper = super::delay_async::Delay(delay);
        in_line::jittered_in_line(self.bucket, n, None, self.jitter, &mut sleeper).await
    }

    /// [`TokenBucket::acquire_timeout_with_async_delay`], then the jitter on `delay` if it
    /// slept, holding the tokens.
    pub async fn acquire_timeout_with_async_delay<D: embedded_hal_async::delay::DelayNs>(
        &self,
        n: u32,
        timeout: Duration,
        delay: &mut D,
    ) -> Result<Duration, Denied> {
        let mut sleeper = super::delay_async::Delay(delay);
        in_line::jittered_in_line(self.bucket, n, Some(timeout), self.jitter, &mut sleeper).await
    }
}

/// The embassy waits with jitter: `EmbassyWait::acquire(&bucket.jittered(&jitter), n)`.
#[cfg(feature = "embassy-time")]
impl<C: Clock, W: Word> super::EmbassyWait for Jittered<'_, TokenBucket<C, W>> {
    type Cost = u32;
    async fn acquire(&self, n: u32) -> Result<Duration, Denied> {
        let mut sleeper = super::embassy::EmbassyTimer;
        in_line::jittered_in_line(self.bucket, n, None, self.jitter, &mut sleeper).await
    }
    async fn acquire_timeout(&self, n: u32, timeout: Duration) -> Result<Duration, Denied> {
        let mut sleeper = super::embassy::EmbassyTimer;
        in_line::jittered_in_line(self.bucket, n, Some(timeout), self.jitter, &mut sleeper).await
    }
}

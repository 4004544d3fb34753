//! Async waits for tokio, cancel-safe: a place in the bucket's line, and one tokio timer.

use core::future::{poll_fn, Future};
use core::pin::Pin;
use core::task::Poll;
use core::time::Duration;
use std::boxed::Box;

use ::tokio::time::{sleep_until, Instant, Sleep};

use super::queue::{line_up_one, plan, Lined, Plan, Step, Waiter};
use super::{jitter_after, CancelOnDrop, ReserveNow};
use crate::clock::ticks_to_duration_ceil;
use crate::{Clock, Denied, Jitter, TokenBucket, Word};

/// How late tokio's timer may wake, in `C`'s ticks: its wheel counts whole milliseconds and
/// rounds a deadline up to the next.
fn timer_granularity<C: Clock>() -> u64 {
    C::TICKS_PER_SECOND.div_ceil(1_000)
}

/// Runs `waiter` as a task until it is served or gives up: one tokio timer for its turn, and
/// the head before it wakes it early if its turn comes sooner. Dropping the future drops the
/// waiter, which leaves the line as if it had never joined.
///
/// Every instant is absolute on the bucket's clock and checked against a fresh reading before
/// sleeping: a task polled late sleeps only what is left, and not at all when its look is due.
/// Where the burst cannot hold a late wake-up's time (a burst of one at 1 000/s), the timer is
/// set a millisecond (its granularity) ahead of a due take, and the head yields away the last
/// stretch instead of oversleeping it, so that the wait still gets the rate.
pub(crate) async fn wait_async<B: Lined, const N: usize, T>(
    waiter: Waiter<'_, B, N>,
    mut take: impl FnMut() -> Result<T, Denied>,
) -> Result<(T, Duration), Denied> {
    let mut waiter = waiter.early(timer_granularity::<B::Clock>());
    let mut early = waiter.early_ticks();
    let mut timer: Option<Pin<Box<Sleep>>> = None;
    // A head yielding to its due take: the instant it is due, and the reading it yielded at.
    let mut yield_until: Option<(u64, u64)> = None;
    poll_fn(move |cx| loop {
        if let Some((at, yielded_at)) = yield_until.take() {
            let now = waiter.now();
            if now == yielded_at {
                // The clock stood still across a yield: paused time (which moves only once
                // every task sleeps) or a coarse clock. Yielding would spin: sleep instead.
                early = 0;
            } else if (at.wrapping_sub(now) as i64) > 0 {
                yield_until = Some((at, now));
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
        }
        let look = match waiter.step(cx.waker(), &mut take) {
            Step::Done(done) => return Poll::Ready(done),
            Step::Sleep(None) => return Poll::Pending,
            Step::Sleep(Some(look)) => look,
        };
        let ticks = match plan(look, waiter.now(), early) {
            Plan::Again => continue,
            Plan::Yield => {
                yield_until = Some((look.at(), waiter.now()));
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            Plan::Sleep(ticks) => ticks,
        };
        // A wait beyond what `Instant` holds (decades of debt on a far-off clock) sleeps a
        // year at a time, rather than overflowing.
        let now = Instant::now();
        let at = now
            .checked_add(ticks_to_duration_ceil::<B::Clock>(ticks))
            .unwrap_or_else(|| now + Duration::from_secs(365 * 86_400));
        let timer = match &mut timer {
            Some(timer) => {
                if timer.deadline() != at {
                    timer.as_mut().reset(at);
                }
                timer
            }
            none => none.insert(Box::pin(sleep_until(at))),
        };
        if timer.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
    })
    .await
}

/// Waits in line for `cost` from `gate`, then sleeps `jitter` holding the take: every async
/// wait. Cancel-safe: dropped in line it has taken nothing; dropped during its jitter it gives
/// the take back. Returns the time waited, the jitter included.
pub(crate) async fn acquire_async<G: ReserveNow, B: Lined, const N: usize>(
    gate: &G,
    waiter: Waiter<'_, B, N>,
    cost: G::Cost,
    jitter: &Jitter,
) -> Result<Duration, Denied> {
    let (taken, waited) = wait_async(waiter, || gate.reserve_now(cost)).await?;
    let guard = CancelOnDrop::new(gate, taken);
    let jitter = jitter_after(jitter, waited);
    if !jitter.is_zero() {
        ::tokio::time::sleep(jitter).await;
    }
    guard.keep();
    Ok(waited + jitter)
}

/// `n` tokens from one bucket with a line, as a task, no jitter: the whole of a bucket's
/// `acquire_timeout`.
pub(crate) async fn acquire_one_async<B: Lined + ReserveNow<Cost = u32>>(
    bucket: &B,
    n: u32,
    timeout: Duration,
) -> Result<Duration, Denied> {
    match line_up_one(bucket, n, timeout)? {
        None => Ok(Duration::ZERO),
        // Boxed: the wait's state (its place in line, its timer) is built only for a wait
        // that waits, so the future of one that takes at once stays a few words.
        Some(waiter) => Box::pin(acquire_async(bucket, waiter, n, &Jitter::none())).await,
    }
}

impl<C: Clock, W: Word> TokenBucket<C, W> {
    /// Takes `n` tokens, waiting until they have accrued; returns the time waited.
    ///
    /// Tasks wait in line, in the order they first polled, and only the one at the head takes
    /// its tokens, when they fall due: each sleeps on one tokio timer until its estimated turn
    /// and, unless someone ahead gave up, is woken once, with no re-check. (Where the burst
    /// cannot hold the time tokio's millisecond timer may wake late, the head wakes a
    /// millisecond early and yields the rest instead: it gets the rate, for some CPU.) A task
    /// arriving with nobody waiting takes at once when it can, without a lock or a timer. `n` above the burst fails at once with
    /// [`Denied::ExceedsCapacity`]; `n = 0` completes at once.
    ///
    /// **Cancel-safe, and giving up costs nothing.** Nothing is taken before the tokens are
    /// due, so a future dropped mid-wait (`tokio::time::timeout`, `select!`, an aborted task)
    /// leaves the bucket as if it had never queued, whatever waits behind it: the next in line
    /// moves up. Use [`TokioClock`](crate::TokioClock) so that the bucket and the timer read the same clock (any
    /// [`Clock`] works outside paused time).
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
    /// // Given up after 100 ms: it had taken nothing, so the next caller finds what accrued.
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
    /// A wait that would exceed `timeout` (the tokens of everyone in line, then its own) fails
    /// at once with [`Denied::Insufficient`], without sleeping and without taking anything; its
    /// `retry_after` says how much longer the wait would have been. A wait that runs out of
    /// time in line leaves it with the same error, having taken nothing. Otherwise, and for
    /// cancellation, it behaves as [`acquire`](Self::acquire).
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
        acquire_one_async(self, n, timeout).await
    }
}

//! Async waits on embassy-time's timer (feature `embassy-time`): any executor, no heap.

use core::future::Future;
use core::pin::Pin;
use core::task::{Context, Poll};
use core::time::Duration;

use super::async_line::{wait_in_line, Sleeper, TakeNow};
use crate::{Clock, Denied, EmbassyClock, Limits, TokenBucket, Word};

/// `acquire(n).await` and `acquire_timeout(n, timeout).await` for firmware on embassy (or any
/// executor, with embassy-time's driver installed): the waits sleep on embassy-time's timer
/// queue, with no heap. Import the trait to call them:
///
/// ```
/// # async fn run() -> Result<(), tollgate::Denied> {
/// use core::time::Duration;
/// use tollgate::wait::EmbassyWait;
/// use tollgate::{EmbassyClock, Quota, Rate, TokenBucket};
///
/// static UPLINK: TokenBucket<EmbassyClock> =
///     TokenBucket::new(Quota::new(Rate::per_second(10)).burst(5), EmbassyClock);
///
/// UPLINK.acquire(1).await?; // waits its turn, then for its token
/// match UPLINK.acquire_timeout(3, Duration::from_millis(50)).await {
///     Ok(_waited) => { /* send */ }
///     Err(_) => { /* gave up: nothing was taken */ }
/// }
/// # Ok(()) }
/// ```
///
/// The rules are the tokio waits':
///
/// - **Arrival order.** Waiters of one limit line up; only the head takes, when its tokens are
///   due, through the limit's own `try_acquire`. The others are parked and woken once, by the
///   head that leaves before them; the head then sleeps once, until its tokens are due (the
///   tokio waits sleep until an estimate instead and so may wake only once in all; here a
///   waiter behind others wakes twice: for its turn and for its tokens).
/// - **A request above the burst fails at once** with [`Denied::ExceedsCapacity`].
/// - **Giving up is free.** Nothing is taken before the caller acts, so a dropped future or a
///   timeout leaves the limit as if it had never queued, whatever waits behind it: under
///   overload with callers that give up, goodput stays at the rate.
/// - **Nothing is held across an `.await`** that an interrupt handler needs: the line is
///   guarded by a critical section (the `critical-section` crate, which the firmware provides)
///   held for one scan of its places; the limit itself is the lock-free word, so an interrupt
///   handler's `try_acquire` on the same bucket never waits for a task.
///
/// **The line's bound.** The line has [`LINE_CAPACITY`](crate::wait::LINE_CAPACITY) places,
/// shared by every limit's waiters, in one `static` (a few hundred bytes of RAM). A waiter that
/// finds them all taken waits outside the line: it sleeps until its tokens are due and tries,
/// taking nothing before it acts (so giving up stays free), but it is not ordered: it may take
/// the tokens that the head of a line is waiting for, delaying that head by one turn.
///
/// `TokenBucket` and [`Limits`] have these waits. On a build that also enables `tokio`, the
/// buckets' own `acquire` methods are tokio's: call these as `EmbassyWait::acquire(&bucket, n)`.
pub trait EmbassyWait {
    /// What one call asks for: `u32` tokens, or one count per bucket of a [`Limits`].
    type Cost;

    /// Takes `cost`, waiting in line and then until the tokens have accrued; returns the time
    /// waited (on the limit's clock). Fails at once, taking nothing, if the cost exceeds a
    /// burst. Dropping the future gives up its place and takes nothing.
    fn acquire(&self, cost: Self::Cost) -> impl Future<Output = Result<Duration, Denied>> + '_;

    /// As [`acquire`](Self::acquire), giving up after `timeout`: a wait that would outlast it
    /// fails as soon as it heads the line, with [`Denied::Insufficient`] whose `retry_after` is
    /// the time beyond the timeout its tokens need; one that runs out of time behind others
    /// fails then, with a `retry_after` of zero. Either way nothing was taken.
    fn acquire_timeout(
        &self,
        cost: Self::Cost,
        timeout: Duration,
    ) -> impl Future<Output = Result<Duration, Denied>> + '_;
}

impl<C: Clock, W: Word> EmbassyWait for TokenBucket<C, W> {
    type Cost = u32;
    fn acquire(&self, n: u32) -> impl Future<Output = Result<Duration, Denied>> + '_ {
        wait(self, n, None)
    }
    fn acquire_timeout(
        &self,
        n: u32,
        timeout: Duration,
    ) -> impl Future<Output = Result<Duration, Denied>> + '_ {
        wait(self, n, Some(timeout))
    }
}

impl<C: Clock, const N: usize, W: Word> EmbassyWait for Limits<'_, C, N, W> {
    type Cost = [u32; N];
    fn acquire(&self, costs: [u32; N]) -> impl Future<Output = Result<Duration, Denied>> + '_ {
        wait(self, costs, None)
    }
    fn acquire_timeout(
        &self,
        costs: [u32; N],
        timeout: Duration,
    ) -> impl Future<Output = Result<Duration, Denied>> + '_ {
        wait(self, costs, Some(timeout))
    }
}

async fn wait<L: TakeNow>(
    limit: &L,
    cost: L::Cost,
    timeout: Option<Duration>,
) -> Result<Duration, Denied> {
    wait_in_line(limit, cost, timeout, &mut EmbassyTimer).await
}

/// Sleeps on embassy-time's timer queue, through its driver.
struct EmbassyTimer;

impl Sleeper for EmbassyTimer {
    fn sleep(&mut self, duration: Duration) -> impl Future<Output = ()> + '_ {
        let ticks = crate::clock::duration_to_ticks_ceil::<EmbassyClock>(duration);
        Until {
            at: EmbassyClock.now().saturating_add(ticks),
        }
    }
}

/// Resolves once embassy-time's clock reaches `at`: embassy-time's `Timer::at`, without the
/// dependency on embassy-time's types.
struct Until {
    at: u64,
}

impl Future for Until {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if embassy_time_driver::now() >= self.at {
            Poll::Ready(())
        } else {
            embassy_time_driver::schedule_wake(self.at, cx.waker());
            Poll::Pending
        }
    }
}

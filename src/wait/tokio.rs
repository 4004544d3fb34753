//! Async waits for tokio, cancel-safe: a place in the bucket's line, one tokio timer, and for a
//! burst too small for that timer's lateness, a take ahead and the precise timer's last stretch.

use core::future::{poll_fn, Future};
use core::pin::Pin;
use core::task::Poll;
use core::time::Duration;
use std::boxed::Box;

use ::tokio::time::{sleep_until, Instant, Sleep};

use super::precise::{self, PreciseSleep};
use super::queue::{plan, settled_at_once, Held, Lined, Plan, Step, Waiter};
use super::{CancelOnDrop, ReserveNow};
use crate::clock::ticks_to_duration_ceil;
use crate::{Clock, Denied, Jitter, Reservation, TokenBucket, Word};

/// How late tokio's timer may wake, in `C`'s ticks: two milliseconds. Its wheel counts whole
/// milliseconds and rounds a deadline up to the next, and its driver parks in whole
/// milliseconds too (the I/O driver's `epoll_wait` rounds its timeout up), so a sleep ends up to
/// two milliseconds late. A burst with room for that keeps what accrues meanwhile; with less, the head of
/// a line takes its tokens this far ahead of their instant ([`Waiter::early`]), and a wait
/// sleeps this last stretch on the precise timer.
fn timer_lateness<C: Clock>() -> u64 {
    2 * C::TICKS_PER_SECOND.div_ceil(1_000)
}

/// Whether tokio's clock is paused: it stands still while `std`'s moves. Read across a move of
/// `std`'s clock (nanoseconds), as [`TokioClock::new`](crate::TokioClock::new) does. Only a
/// current-thread runtime can pause its time, so on any other the answer needs no reading.
fn time_is_paused() -> bool {
    let current_thread = ::tokio::runtime::Handle::try_current().is_ok_and(|handle| {
        handle.runtime_flavor() == ::tokio::runtime::RuntimeFlavor::CurrentThread
    });
    if !current_thread {
        return false;
    }
    let first = Instant::now();
    let std_first = std::time::Instant::now();
    while std::time::Instant::now() == std_first {
        core::hint::spin_loop();
    }
    Instant::now() == first
}

/// Whether a wait whose head takes `early_ticks` ahead sleeps its last stretch on the precise
/// timer: only where it takes ahead (the burst cannot hold tokio's lateness), only in real time
/// (paused time moves with tokio's timers alone), and only if the timer's thread runs.
fn use_precise(early_ticks: u64) -> bool {
    early_ticks > 0 && !time_is_paused() && precise::available()
}

/// The longest take held ahead that a wait on the precise timer spins through, yielding to
/// the runtime until its instant, rather than sleeping: well under the timer thread's own
/// lateness (the kernel's timer slack), so that such a caller is back at its instant, and its
/// take keeps no place in line (see [`Waiter::spun`]). A rate that binds many tasks takes a few
/// microseconds ahead at a time: through the line, every such take would wait for the one
/// before it to return.
const SPUN: Duration = Duration::from_micros(20);

/// Sleeps `duration` of real time, on the precise timer if `precise` and tokio's otherwise.
async fn sleep_for(duration: Duration, precise: bool) {
    if duration.is_zero() {
        return;
    }
    if precise {
        let at = std::time::Instant::now() + duration;
        if duration <= SPUN {
            poll_fn(|cx| {
                if std::time::Instant::now() >= at {
                    return Poll::Ready(());
                }
                cx.waker().wake_by_ref();
                Poll::Pending
            })
            .await;
        } else {
            PreciseSleep::new(at).await;
        }
    } else {
        ::tokio::time::sleep(duration).await;
    }
}

/// Where a wait sleeps: tokio's timer for all but its last stretch, the precise one for that.
enum Timer {
    Tokio(Pin<Box<Sleep>>),
    Precise(PreciseSleep),
}

/// Runs `waiter` as a task until it is served or gives up: one tokio timer for its turn, and
/// the head before it wakes it early if its turn comes sooner. Dropping the future drops the
/// waiter, which leaves the line as if it had never joined.
///
/// Every instant is absolute on the bucket's clock and checked against a fresh reading before
/// sleeping: a task polled late sleeps only what is left, and not at all when its look is due.
/// Where the burst cannot hold a late wake-up's time (a burst of one at 1 000/s), the head
/// takes through `take(ahead)` up to two milliseconds (the timer's lateness) before its tokens'
/// instant, so that its take is never late, and the caller then sleeps the rest holding them
/// (see [`acquire_async`]); the last two milliseconds of each sleep are slept on the precise
/// timer, so that a caller coming back for its next token is not late for it either. Elsewhere
/// `ahead` is zero and every sleep is tokio's.
///
/// Returns what `take` took, the time waited until then, whether the wait's sleeps are
/// precise (for the caller's sleep to the instant), and the waiter: served, it may still hold
/// its place in line, until the caller may return ([`returned`]).
async fn wait_async<'a, B: Lined, const N: usize, T: Held>(
    waiter: Waiter<'a, B, N>,
    mut take: impl FnMut(Duration) -> Result<T, Denied>,
) -> Result<(T, Duration, bool, Waiter<'a, B, N>), Denied> {
    let waiter = waiter.early(timer_lateness::<B::Clock>());
    let early = waiter.early_ticks();
    // Decided before the first look: it sets which takes ahead keep a place in line. Only a
    // wait that takes ahead has a take to spin through, and only on the precise timer. Reading
    // it costs nothing on a multi-thread runtime, and on a current-thread one no other caller
    // can join meanwhile.
    let precise = use_precise(early);
    let spun = if precise { SPUN } else { Duration::ZERO };
    let mut waiter = waiter.spun(spun);
    let mut timer: Option<Timer> = None;
    let (taken, waited) = poll_fn(|cx| loop {
        let look = match waiter.step(cx.waker(), &mut take) {
            Step::Done(done) => return Poll::Ready(done),
            Step::Sleep(None) => return Poll::Pending,
            Step::Sleep(Some(look)) => look,
        };
        // The stretch slept on the precise timer: as long as tokio's timer may be late.
        let span = if precise { early } else { 0 };
        let ticks = match plan(look, waiter.now(), early) {
            Plan::Again => continue,
            Plan::Sleep(ticks) => ticks,
        };
        if ticks <= span {
            let at = std::time::Instant::now() + ticks_to_duration_ceil::<B::Clock>(ticks);
            if !matches!(timer, Some(Timer::Precise(_))) {
                timer = Some(Timer::Precise(PreciseSleep::new(at)));
            }
            if let Some(Timer::Precise(sleep)) = &mut timer {
                sleep.reset(at);
                if Pin::new(sleep).poll(cx).is_pending() {
                    return Poll::Pending;
                }
            }
            continue;
        }
        // tokio's timer for all but the last stretch. A wait beyond what `Instant` holds
        // (decades of debt on a far-off clock) sleeps a year at a time, rather than
        // overflowing.
        let now = Instant::now();
        let at = now
            .checked_add(ticks_to_duration_ceil::<B::Clock>(ticks - span))
            .unwrap_or_else(|| now + Duration::from_secs(365 * 86_400));
        if !matches!(timer, Some(Timer::Tokio(_))) {
            timer = Some(Timer::Tokio(Box::pin(sleep_until(at))));
        }
        if let Some(Timer::Tokio(sleep)) = &mut timer {
            if sleep.deadline() != at {
                sleep.as_mut().reset(at);
            }
            if sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
        }
    })
    .await?;
    Ok((taken, waited, precise, waiter))
}

/// Resolves once the caller of a served wait may return: at once unless `waiter` holds its
/// place behind a holder that has not yet returned (see [`Waiter::try_release`]).
async fn returned<B: Lined, const N: usize>(mut waiter: Waiter<'_, B, N>) {
    poll_fn(move |cx| {
        if waiter.try_release(cx.waker()) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
    .await;
}

/// Waits in line for `cost` from `gate`, then sleeps holding the take until its tokens'
/// instant (a take ahead of it, see [`wait_async`]) and then `jitter`: every async wait.
/// Cancel-safe: dropped in line it has taken nothing; dropped while it holds the take it gives
/// it back by the refund rule. Returns the time waited: to the tokens' instant, the jitter
/// included, not what tokio's timer adds.
pub(crate) async fn acquire_async<G: ReserveNow, B: Lined, const N: usize>(
    gate: &G,
    waiter: Waiter<'_, B, N>,
    cost: G::Cost,
    jitter: &Jitter,
) -> Result<Duration, Denied> {
    let ((taken, due_in), waited, precise, waiter) =
        wait_async(waiter, |ahead| gate.reserve_ahead(cost, ahead)).await?;
    let guard = CancelOnDrop::new(gate, taken);
    let waited = waited + due_in;
    sleep_for(due_in, precise).await;
    returned(waiter).await;
    let jitter = jitter.after(waited);
    if !jitter.is_zero() {
        ::tokio::time::sleep(jitter).await;
    }
    guard.keep();
    Ok(waited + jitter)
}

/// `n` tokens from one bucket with a line, as a task, no jitter: every one-bucket `acquire` and
/// `acquire_timeout`.
///
/// A future written out rather than an `async fn`, for the wait that takes at once: its first
/// poll is the check alone, always inlined into the caller's, and the line's code (its state,
/// its timer) is built out of the way, in a box, only for a wait that waits. The compiler
/// inlines an `async fn`'s body or not by its size and its callers, and a body holding both
/// paths was left a call in a build with two callers of it, so every take paid for the call.
pub(crate) fn acquire_one_async<B: Lined + ReserveNow<Cost = u32>>(
    bucket: &B,
    n: u32,
    timeout: Duration,
) -> impl Future<Output = Result<Duration, Denied>> + '_ {
    AcquireOne {
        bucket,
        n,
        line: move |bucket, n| in_line(bucket, n, timeout),
        waiting: None,
    }
}

/// [`acquire_one_async`]'s future: the take at once on the first poll, else the wait in line
/// that `line` builds. Like any future, it is not to be polled again once ready (one that took
/// at once would take again).
struct AcquireOne<'b, B, L, F> {
    bucket: &'b B,
    n: u32,
    line: L,
    waiting: Option<Pin<Box<F>>>,
}

impl<'b, B, L, F> Future for AcquireOne<'b, B, L, F>
where
    B: Lined + ReserveNow<Cost = u32>,
    L: Fn(&'b B, u32) -> Result<Pin<Box<F>>, Denied> + Unpin,
    F: Future<Output = Result<Duration, Denied>>,
{
    type Output = Result<Duration, Denied>;

    #[inline(always)]
    fn poll(self: Pin<&mut Self>, cx: &mut core::task::Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let waiting = match &mut this.waiting {
            Some(waiting) => waiting,
            None => {
                if let Some(settled) = settled_at_once(this.bucket, this.n) {
                    return Poll::Ready(settled.map(|()| Duration::ZERO));
                }
                match (this.line)(this.bucket, this.n) {
                    Ok(waiting) => this.waiting.insert(waiting),
                    Err(refused) => return Poll::Ready(Err(refused)),
                }
            }
        };
        waiting.as_mut().poll(cx)
    }
}

/// A wait in `bucket`'s line, built out of the caller's way: the future of a wait that takes at
/// once holds only a pointer to it, and its poll none of the line's code. Boxed: the wait's
/// state (its place in line, its timer) is built only for a wait that waits.
#[cold]
#[inline(never)]
fn in_line<B: Lined + ReserveNow<Cost = u32>>(
    bucket: &B,
    n: u32,
    timeout: Duration,
) -> Result<Pin<Box<impl Future<Output = Result<Duration, Denied>> + '_>>, Denied> {
    let waiter = Waiter::new([bucket], [n], Some(timeout))?;
    Ok(Box::pin(async move {
        acquire_async(bucket, waiter, n, &Jitter::none()).await
    }))
}

impl<C: Clock, W: Word> TokenBucket<C, W> {
    /// Takes `n` tokens, waiting until they have accrued; returns the time waited.
    ///
    /// Tasks wait in line, in the order they first polled, and only the one at the head takes
    /// its tokens, when they fall due: each sleeps on one tokio timer until its estimated turn
    /// and, unless someone ahead gave up, is woken once, with no re-check. (Where the burst
    /// cannot hold the two milliseconds tokio's timer may wake late, the head takes its tokens
    /// up to that much ahead of their instant and sleeps the rest holding them, its last stretch
    /// on a precise timer thread: a late timer never moves the bucket's schedule, so the wait
    /// gets the rate.) A task
    /// arriving with nobody waiting takes at once when it can, without a lock or a timer. `n`
    /// above the burst fails at once with [`Denied::ExceedsCapacity`]; `n = 0` completes at
    /// once.
    ///
    /// **Cancel-safe, and giving up costs nothing.** Nothing is taken before the tokens are
    /// due (or, for a burst too small for the timer, in their last two milliseconds), so a future
    /// dropped mid-wait (`tokio::time::timeout`, `select!`, an aborted task) leaves the bucket
    /// as if it had never queued, whatever waits behind it: the next in line moves up. One
    /// dropped in that stretch, holding its tokens, gives them back, unless a waiter
    /// behind has already counted on them. Use [`TokioClock`](crate::TokioClock) so that the bucket and the timer read the same clock (any
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
    pub fn acquire(&self, n: u32) -> impl Future<Output = Result<Duration, Denied>> + '_ {
        // No timeout to carry: the future is the bucket, `n` and the empty place for a wait.
        AcquireOne {
            bucket: self,
            n,
            line: |bucket, n| in_line(bucket, n, Duration::MAX),
            waiting: None,
        }
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
    ///     Err(Denied::insufficient(Duration::from_millis(600)))
    /// );
    /// assert_eq!(
    ///     bucket.acquire_timeout(2, Duration::from_millis(400)).await,
    ///     Ok(Duration::from_millis(400))
    /// );
    /// # Ok(())
    /// # }
    /// ```
    pub fn acquire_timeout(
        &self,
        n: u32,
        timeout: Duration,
    ) -> impl Future<Output = Result<Duration, Denied>> + '_ {
        acquire_one_async(self, n, timeout)
    }

    /// Waits as [`acquire_timeout`](Self::acquire_timeout) does, but hands the tokens over as a
    /// [`Reservation`] due now instead of spending them: the caller acts on it, or gives it back
    /// with [`GiveBack::give_back`](crate::wait::GiveBack::give_back) (what was taken, less what
    /// the burst cap would have cut since). For a caller that takes its turn before it knows it
    /// will act, as a tower service does between `poll_ready` and `call`.
    ///
    /// Cancel-safe as `acquire` is: a future dropped in line has taken nothing, and one dropped
    /// while it holds tokens taken ahead of their instant gives them back.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::wait::GiveBack;
    /// use tollgate::{Quota, Rate, TokenBucket, TokioClock};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let bucket = TokenBucket::try_new(Quota::new(Rate::per_second(1)).burst(1), TokioClock::new())?;
    /// let turn = bucket.acquire_reservation(1, Duration::from_secs(1)).await?;
    /// assert_eq!(bucket.available(), 0);
    /// bucket.give_back(turn); // not acted on after all
    /// assert_eq!(bucket.available(), 1);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn acquire_reservation(
        &self,
        n: u32,
        timeout: Duration,
    ) -> Result<Reservation, Denied> {
        if n == 0 {
            return self.reserve(0, Duration::ZERO);
        }
        let waiter = Waiter::new([self], [n], Some(timeout))?;
        let (taken, _waited, precise, waiter) =
            wait_async(waiter, |ahead| self.reserve(n, ahead)).await?;
        let due_in = taken.wait();
        let guard = CancelOnDrop::new(self, taken);
        sleep_for(due_in, precise).await;
        returned(waiter).await;
        Ok(guard.into_taken())
    }
}

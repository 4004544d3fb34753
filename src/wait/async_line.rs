//! The async wait without a heap, over any sleep: embassy-time's timer (`wait::embassy`) or an
//! `embedded-hal-async` `DelayNs` (`wait::delay_async`).

use core::future::Future;
use core::pin::pin;
use core::task::{Context, Poll};
use core::time::Duration;

use super::line::{self, Joined};
use crate::clock::ticks_to_duration_ceil;
use crate::{Clock, Denied, Limits, TokenBucket, Word};

/// A limit the no-heap async waits serve: a take that takes nothing when it denies, and the
/// time since the wait began on the limit's clock.
pub(crate) trait TakeNow {
    /// What one call asks for (`u32` tokens, or one per bucket of a `Limits`).
    type Cost: Copy;
    /// What a denial is: [`Denied`], or `KeyedDenied` for a key of a keyed table.
    type Error: From<Denied>;
    /// The line this limit's waiters share: its address.
    fn line_key(&self) -> usize;
    /// An error when the cost can never be granted (above a burst): checked before joining.
    fn fits(&self, cost: Self::Cost) -> Result<(), Self::Error>;
    /// Takes `cost` now, or says why not; a denial takes nothing.
    fn take_now(&self, cost: Self::Cost) -> Result<(), Self::Error>;
    /// How long until the denied take could succeed, when it was denied for want of tokens
    /// (the waits sleep that long); `None` for a denial that waiting does not cure.
    fn due_in(denied: &Self::Error) -> Option<Duration>;
    /// The limit's clock now, in ticks.
    fn now_ticks(&self) -> u64;
    /// `ticks` of the limit's clock as a duration, rounded up.
    fn ticks_to_duration(&self, ticks: u64) -> Duration;
}

/// A timer the waits sleep on.
pub(crate) trait Sleeper {
    /// Resolves once `duration` has passed (or later, never earlier).
    fn sleep(&mut self, duration: Duration) -> impl Future<Output = ()> + '_;
}

/// Waits in `limit`'s line until its head takes `cost`, sleeping through `sleep`; gives up
/// after `timeout`. Returns the time waited.
///
/// A request above the burst fails at once with [`Denied::ExceedsCapacity`]. A wait that would
/// outlast `timeout` once it heads the line fails then, its `retry_after` the time beyond the
/// timeout its tokens need; one that runs out of time behind others fails with a `retry_after`
/// of zero.
///
/// Only the head takes, and only when its tokens are due (its `retry_after`, slept once):
/// nothing is taken before the caller acts, so a dropped future or a timeout leaves the limit
/// as if the caller had never queued. The others are parked and woken once, by the head that
/// leaves before them. No lock is held across an `.await`: the line's critical section lasts
/// one scan of its places.
pub(crate) async fn wait_in_line<L: TakeNow, S: Sleeper>(
    limit: &L,
    cost: L::Cost,
    timeout: Option<Duration>,
    sleeper: &mut S,
) -> Result<Duration, L::Error> {
    limit.fits(cost)?;
    let start = limit.now_ticks();
    let waited = || limit.ticks_to_duration(limit.now_ticks().wrapping_sub(start));
    let place = match line::join(limit.line_key()) {
        Joined::InLine(place) => Some(place),
        Joined::Outside => None,
    };
    loop {
        if let Some(place) = place.as_ref().filter(|p| !p.heads()) {
            let turn = place.turn();
            match timeout {
                None => turn.await,
                Some(timeout) => {
                    let left = timeout.saturating_sub(waited());
                    // Out of time behind others: its turn never came, so nothing says how much
                    // longer it would have waited.
                    if left.is_zero() || !first_of(turn, sleeper.sleep(left)).await {
                        return Err(Denied::insufficient(Duration::ZERO).into());
                    }
                }
            }
            continue;
        }
        // The head (or outside the line): take, or sleep until the tokens are due.
        let denied = match limit.take_now(cost) {
            Ok(()) => return Ok(waited()),
            Err(denied) => denied,
        };
        let Some(retry_after) = L::due_in(&denied) else {
            return Err(denied);
        };
        if let Some(timeout) = timeout {
            let left = timeout.saturating_sub(waited());
            if retry_after > left {
                return Err(Denied::insufficient(retry_after - left).into());
            }
        }
        sleeper.sleep(retry_after).await;
    }
}

/// Whether `turn` came before `sleep` ended (both polled, the turn first).
async fn first_of<F: Future<Output = ()>>(turn: line::Turn<'_>, sleep: F) -> bool {
    let mut turn = pin!(turn);
    let mut sleep = pin!(sleep);
    core::future::poll_fn(move |cx: &mut Context<'_>| {
        if turn.as_mut().poll(cx).is_ready() {
            return Poll::Ready(true);
        }
        if sleep.as_mut().poll(cx).is_ready() {
            return Poll::Ready(false);
        }
        Poll::Pending
    })
    .await
}

/// For the limits whose denial is a [`Denied`].
fn insufficient(denied: &Denied) -> Option<Duration> {
    match denied {
        Denied::Insufficient { retry_after } => Some(retry_after.get()),
        _ => None,
    }
}

impl<C: Clock, W: Word> TakeNow for TokenBucket<C, W> {
    type Cost = u32;
    type Error = Denied;
    fn due_in(denied: &Denied) -> Option<Duration> {
        insufficient(denied)
    }
    fn line_key(&self) -> usize {
        self as *const Self as usize
    }
    fn fits(&self, n: u32) -> Result<(), Denied> {
        self.within_burst(n)
    }
    fn take_now(&self, n: u32) -> Result<(), Denied> {
        self.try_acquire(n)
    }
    fn now_ticks(&self) -> u64 {
        self.clock().now()
    }
    fn ticks_to_duration(&self, ticks: u64) -> Duration {
        ticks_to_duration_ceil::<C>(ticks)
    }
}

/// A `Limits` has one line for all its buckets: its waiters are served in the order they came
/// (waiters of another `Limits` or of one of its buckets alone are in other lines).
impl<C: Clock, const N: usize, W: Word> TakeNow for Limits<'_, C, N, W> {
    type Cost = [u32; N];
    type Error = Denied;
    fn due_in(denied: &Denied) -> Option<Duration> {
        insufficient(denied)
    }
    fn line_key(&self) -> usize {
        self as *const Self as usize
    }
    fn fits(&self, costs: [u32; N]) -> Result<(), Denied> {
        for (bucket, &cost) in self.buckets().iter().zip(&costs) {
            bucket.within_burst(cost)?;
        }
        Ok(())
    }
    fn take_now(&self, costs: [u32; N]) -> Result<(), Denied> {
        self.try_acquire(costs)
    }
    fn now_ticks(&self) -> u64 {
        self.buckets().first().map_or(0, |b| b.clock().now())
    }
    fn ticks_to_duration(&self, ticks: u64) -> Duration {
        ticks_to_duration_ceil::<C>(ticks)
    }
}

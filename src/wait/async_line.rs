//! The async wait without a heap, over any sleep: embassy-time's timer (`wait::embassy`) or an
//! `embedded-hal-async` `DelayNs` (`wait::delay_async`).

use core::future::Future;
use core::pin::pin;
use core::task::{Context, Poll, Waker};
use core::time::Duration;

use super::line::{self, InLine, Line};
use super::{CancelOnDrop, GiveBack};
use crate::clock::{duration_to_ticks_ceil, duration_to_ticks_floor, ticks_to_duration_ceil};
use crate::{Clock, Denied, Jitter, Limits, TokenBucket, Word};

/// A limit the no-heap async waits serve: a take that takes nothing when it denies, a take
/// ahead of the tokens' instant that the wait holds until then (given back if it is dropped),
/// and the estimates of when a waiter's tokens fall due.
pub(crate) trait TakeNow: GiveBack {
    /// The limit's clock.
    type Clock: Clock;
    /// What a denial is: [`Denied`], or `KeyedDenied` for a key of a keyed table.
    type Error: From<Denied>;
    /// Whether [`due_after`](Self::due_after) is exact. A waiter behind others whose estimate
    /// is not exact is woken by the head before it rather than by its own timer.
    const EXACT_ESTIMATE: bool;
    /// The line this limit's waiters share: its address (never 0).
    fn line_key(&self) -> usize;
    /// An error when the cost can never be granted (above a burst): checked before joining.
    fn fits(&self, cost: Self::Cost) -> Result<(), Self::Error>;
    /// Takes `cost` now if it falls due within `ahead` (zero: if it is there now), with how
    /// long until it is due; else says how long until the same call would succeed. A denial
    /// takes nothing. `ahead` is zero unless [`slack_ticks`](Self::slack_ticks) is below the
    /// timers' lateness.
    fn take_ahead(
        &self,
        cost: Self::Cost,
        ahead: Duration,
    ) -> Result<(Self::Taken, Duration), Self::Error>;
    /// How long until the denied take could succeed, when it was denied for want of tokens
    /// (the waits sleep that long); `None` for a denial that waiting does not cure.
    fn due_in(denied: &Self::Error) -> Option<Duration>;
    /// The instant (in ticks) the limit will hold `cost` more than it holds at `after`, the
    /// estimate of the waiter ahead: its tokens accrue from then, uncapped, since the line
    /// takes them as they come. `None` when the limit cannot say.
    fn due_after(&self, after: u64, cost: Self::Cost) -> Option<u64>;
    /// Ticks the burst beyond `cost` takes to accrue at `now`: how late a take of `cost` may
    /// come without losing time to the burst's cap.
    fn slack_ticks(&self, now: u64, cost: Self::Cost) -> u64;
    /// The limit's clock now, in ticks.
    fn now_ticks(&self) -> u64;
}

/// A timer the waits sleep on.
pub(crate) trait Sleeper {
    /// Resolves once `duration` has passed (or later, never earlier).
    fn sleep(&mut self, duration: Duration) -> impl Future<Output = ()> + '_;
}

/// What a look at the line decided.
enum Next<T, E> {
    /// Served at `now`: with the take held until its tokens' instant, `due_in` away, when it
    /// took ahead of them.
    Served(u64, Option<(T, Duration)>),
    /// Refused, having taken nothing.
    Refused(E),
    /// Sleep until this instant on the limit's clock (`None`: until woken), and whether the
    /// head before it may wake it first.
    Sleep(Option<u64>, bool),
}

/// Waits in `limit`'s line until its head takes `cost`, sleeping through `sleeper`; gives up
/// after `timeout`. Returns the time waited.
///
/// A request above the burst fails at once with [`Denied::ExceedsCapacity`]. A caller that
/// finds nobody in the line takes at once if it can; one that finds anyone waiting joins the
/// back of the line, and never takes before them (past the line's capacity it waits outside,
/// trying to join or, once nobody waits in its limit's line, to take). A wait that would
/// outlast `timeout` once it heads the line fails then, its `retry_after` the time beyond the
/// timeout its tokens need; one that runs out of time behind others fails with a
/// `retry_after` of zero.
///
/// Only the head takes, and only when its tokens are due: nothing is taken before the caller
/// acts, so a dropped future or a timeout leaves the limit as if the caller had never queued.
/// (Where the limit's burst has no room for the timers' lateness, the head takes up to that
/// lateness ahead and sleeps to the tokens' instant holding the take, given back if dropped.)
/// A waiter behind others sleeps until its estimate and is then the head with its tokens due:
/// one wake, unless someone ahead gave up, when the head before it wakes it. No lock is held
/// across an `.await`: the line's critical section lasts one look.
pub(crate) async fn wait_in_line<L: TakeNow, S: Sleeper>(
    limit: &L,
    cost: L::Cost,
    timeout: Option<Duration>,
    sleeper: &mut S,
) -> Result<Duration, L::Error> {
    wait_in_line_jittered(limit, cost, timeout, &Jitter::none(), sleeper).await
}

/// [`wait_in_line`], then `jitter` after a wait that slept, holding the take: a future dropped
/// during the jitter gives it back. A wait served at its first look gets no jitter.
pub(crate) async fn wait_in_line_jittered<L: TakeNow, S: Sleeper>(
    limit: &L,
    cost: L::Cost,
    timeout: Option<Duration>,
    jitter: &Jitter,
    sleeper: &mut S,
) -> Result<Duration, L::Error> {
    limit.fits(cost)?;
    let mut slept = false;
    let start = limit.now_ticks();
    // A timeout beyond half the clock's range is longer than any wait the word can hold (and
    // would read as past in the signed comparisons): no deadline.
    let deadline = timeout
        .map(duration_to_ticks_floor::<L::Clock>)
        .filter(|&ticks| ticks < 1 << 62)
        .map(|ticks| start.wrapping_add(ticks));
    let waited = |now: u64| ticks_to_duration_ceil::<L::Clock>(since(start, now));
    let key = limit.line_key();
    let mut place: Option<InLine> = None;
    loop {
        let mut wake: Option<Waker> = None;
        let next = line::with(|line| look(limit, cost, key, deadline, &mut place, line, &mut wake));
        // Woken outside the critical section: a waker may run executor code.
        if let Some(waker) = wake {
            waker.wake();
        }
        let (until, turn) = match next {
            Next::Served(now, None) => return Ok(waited(now)),
            Next::Served(now, Some((taken, due_in))) => {
                let guard = CancelOnDrop::new(limit, taken);
                if !due_in.is_zero() {
                    let at = now.wrapping_add(duration_to_ticks_ceil::<L::Clock>(due_in));
                    sleeper.sleep(due_in).await;
                    learn_lateness(limit, at);
                    slept = true;
                }
                // A place held past the take: not before the holders ahead have returned.
                if let Some(at) = place.take() {
                    while !line::with(|line| line.release(&at)) {
                        at.turn().await;
                    }
                    let next = line::with(|line| line.leave(at, true));
                    if let Some(waker) = next {
                        waker.wake();
                    }
                }
                let extra = if slept { jitter.next() } else { Duration::ZERO };
                if !extra.is_zero() {
                    sleeper.sleep(extra).await;
                }
                guard.keep();
                return Ok(waited(now).saturating_add(due_in).saturating_add(extra));
            }
            Next::Refused(refused) => return Err(refused),
            Next::Sleep(until, turn) => (until, turn),
        };
        let place = place.as_ref().filter(|_| turn);
        match (until, place) {
            (Some(at), place) => {
                let ticks = at.wrapping_sub(limit.now_ticks()) as i64;
                if ticks <= 0 {
                    continue;
                }
                slept = true;
                let sleep = sleeper.sleep(ticks_to_duration_ceil::<L::Clock>(ticks as u64));
                let fired = match place {
                    Some(place) => !first_of(place.turn(), sleep).await,
                    None => {
                        sleep.await;
                        true
                    }
                };
                if fired {
                    learn_lateness(limit, at);
                }
            }
            (None, Some(place)) => {
                slept = true;
                place.turn().await;
            }
            // Every look that leaves a waiter out of line names an instant.
            (None, None) => {}
        }
    }
}

/// One look at the line, in its critical section: take if this caller heads its limit's line
/// (or nobody waits in it) and its tokens are due; else join, or say how long to sleep.
/// `wake`: the waiter to wake once the critical section ends. Out of line: the wait's future
/// holds a call to it rather than its body.
#[inline(never)]
fn look<L: TakeNow>(
    limit: &L,
    cost: L::Cost,
    key: usize,
    deadline: Option<u64>,
    place: &mut Option<InLine>,
    line: &mut Line,
    wake: &mut Option<Waker>,
) -> Next<L::Taken, L::Error> {
    let now = limit.now_ticks();
    let left = deadline.map(|deadline| since(now, deadline));
    // Where the burst has room for the timers' lateness beyond this cost, a late take loses
    // nothing and the head takes when woken; with less, it takes that far ahead.
    let late = duration_to_ticks_ceil::<L::Clock>(Duration::from_nanos(line.late_nanos().into()));
    let early = if late == 0 || limit.slack_ticks(now, cost) >= late {
        0
    } else {
        late
    };
    let heads = match place {
        Some(at) => line.heads(at.index()),
        None => !line.has_waiting(key),
    };
    if heads {
        // A take ahead never reaches past the deadline: the tokens it takes fall due by then
        // (to the clock's tick: `take_ahead` reads `ahead` back in whole ticks).
        let ahead = early.min(left.unwrap_or(u64::MAX));
        // One take for both (a take ahead by nothing takes what is there now): the wait's code
        // holds one copy of the limit's take.
        let taken = limit
            .take_ahead(cost, ticks_to_duration_ceil::<L::Clock>(ahead))
            .map(Some);
        let denied = match taken {
            Ok(taken) => {
                let due_in = taken.as_ref().map_or(Duration::ZERO, |(_, due_in)| *due_in);
                // Taken ahead of its instant, or behind holders not yet returned: it holds a
                // place until it may return (past the line's capacity, it returns unordered).
                let behind = match place {
                    Some(at) => !line.free_to_return(at.index()),
                    None => line.has(key),
                };
                if due_in.is_zero() && !behind {
                    *wake = place.take().and_then(|at| line.leave(at, true));
                } else {
                    if place.is_none() {
                        let due = now.wrapping_add(duration_to_ticks_ceil::<L::Clock>(due_in));
                        *place = line.join(key, due, false);
                    }
                    if let Some(at) = place {
                        *wake = line.hold(at);
                    }
                }
                return Next::Served(now, taken);
            }
            Err(denied) => denied,
        };
        let Some(retry) = L::due_in(&denied) else {
            *wake = place.take().and_then(|at| line.leave(at, false));
            return Next::Refused(denied);
        };
        let retry = duration_to_ticks_ceil::<L::Clock>(retry);
        // Its tokens' instant: the denial says when the take ahead would succeed.
        let due_in = retry.saturating_add(ahead);
        if let Some(left) = left {
            if due_in > left {
                *wake = place.take().and_then(|at| line.leave(at, false));
                return Next::Refused(
                    Denied::insufficient(ticks_to_duration_ceil::<L::Clock>(due_in - left)).into(),
                );
            }
        }
        let due = now.wrapping_add(due_in);
        if place.is_none() {
            *place = line.join(key, due, false);
        }
        if let Some(at) = place {
            let head = line.place(at);
            head.due = due;
            head.stale = false;
            head.timer = true;
        }
        // Outside the line too (every place taken, nobody in its limit's): the same sleep.
        return Next::Sleep(Some(now.wrapping_add(retry.max(1))), false);
    }
    if left == Some(0) {
        // Out of time behind others: its turn never came, so nothing says how much longer it
        // would have waited.
        *wake = place.take().and_then(|at| line.leave(at, false));
        return Next::Refused(Denied::insufficient(Duration::ZERO).into());
    }
    if place.is_none() {
        // Behind others: at the back, estimated due after the last waiter's estimate.
        let (last_due, last_stale) = line.last_of(key).map_or((now, false), |p| (p.due, p.stale));
        let due = limit.due_after(last_due, cost);
        let stale = last_stale || !L::EXACT_ESTIMATE || due.is_none();
        let due = due.unwrap_or(last_due);
        if let Some(left) = left.filter(|_| !stale) {
            // Its turn comes too late unless someone ahead gives up: it fails now, as a head
            // whose tokens come too late does.
            let due_in = since(now, due);
            if due_in > left {
                return Next::Refused(
                    Denied::insufficient(ticks_to_duration_ceil::<L::Clock>(due_in - left)).into(),
                );
            }
        }
        *place = line.join(key, due, stale);
        if place.is_none() {
            // Outside the line: try again (to join, or to take once nobody waits) at the
            // estimate, a tick from now at the soonest.
            let at = if since(now, due) > 0 {
                due
            } else {
                now.wrapping_add(1)
            };
            return Next::Sleep(Some(earliest(at, deadline, now)), false);
        }
    }
    let Some(at) = place.as_ref() else {
        return Next::Sleep(Some(now.wrapping_add(1)), false);
    };
    let waiter = line.place(at);
    let wake_at = waiter.due.wrapping_sub(early);
    // Its own timer, unless its estimate is stale, or passed (the head before it is late):
    // then the head before it wakes it as it leaves.
    waiter.timer = !waiter.stale && since(now, wake_at) > 0;
    let until = if waiter.timer { Some(wake_at) } else { None };
    let until = match (until, deadline) {
        (Some(at), _) => Some(earliest(at, deadline, now)),
        (None, deadline) => deadline,
    };
    Next::Sleep(until, true)
}

/// Ticks from `from` to `to` on a wrapping clock, zero if `to` is not later.
fn since(from: u64, to: u64) -> u64 {
    (to.wrapping_sub(from) as i64).max(0) as u64
}

/// `at` or the deadline, whichever comes first from `now`.
fn earliest(at: u64, deadline: Option<u64>, now: u64) -> u64 {
    match deadline {
        Some(deadline) if since(now, deadline) < since(now, at) => deadline,
        _ => at,
    }
}

/// A sleep meant to end at `at` ended now: tells the line how late the timer was.
fn learn_lateness<L: TakeNow>(limit: &L, at: u64) {
    let late = since(at, limit.now_ticks());
    if late > 0 {
        let nanos = ticks_to_duration_ceil::<L::Clock>(late).as_nanos();
        line::with(|line| line.learn_lateness(u32::try_from(nanos).unwrap_or(u32::MAX)));
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

impl<C: Clock, W: Word> TokenBucket<C, W> {
    /// The instant the bucket will hold `n` tokens more than at `after`, accruing uncapped.
    fn due_after_ticks(&self, after: u64, n: u32) -> Option<u64> {
        let p = self.layout();
        let units = p.cost(n).ok()?;
        Some(after.wrapping_add(p.ticks_until(after, units)))
    }

    /// Ticks the burst beyond `n` tokens takes to accrue at `now`.
    fn slack_for(&self, now: u64, n: u32) -> u64 {
        let p = self.layout();
        let units = p.cost(n).unwrap_or(u64::MAX);
        p.ticks_until(now, p.burst_units().saturating_sub(units))
    }
}

impl<C: Clock, W: Word> TakeNow for TokenBucket<C, W> {
    type Clock = C;
    type Error = Denied;
    const EXACT_ESTIMATE: bool = true;
    fn due_in(denied: &Denied) -> Option<Duration> {
        insufficient(denied)
    }
    fn line_key(&self) -> usize {
        self as *const Self as usize
    }
    fn fits(&self, n: u32) -> Result<(), Denied> {
        self.within_burst(n)
    }
    fn take_ahead(&self, n: u32, ahead: Duration) -> Result<(Self::Taken, Duration), Denied> {
        self.reserve(n, ahead).map(|taken| {
            let due_in = taken.wait();
            (taken, due_in)
        })
    }
    fn due_after(&self, after: u64, n: u32) -> Option<u64> {
        self.due_after_ticks(after, n)
    }
    fn slack_ticks(&self, now: u64, n: u32) -> u64 {
        self.slack_for(now, n)
    }
    fn now_ticks(&self) -> u64 {
        self.clock().now()
    }
}

/// A `Limits` has one line for all its buckets: its waiters are served in the order they came
/// (waiters of another `Limits` or of one of its buckets alone are in other lines). Its
/// estimate behind others is not exact (each bucket's tokens ahead are not kept), so such a
/// waiter is woken by the head before it, then sleeps until its tokens: two wakes.
impl<C: Clock, const N: usize, W: Word> TakeNow for Limits<'_, C, N, W> {
    type Clock = C;
    type Error = Denied;
    const EXACT_ESTIMATE: bool = false;
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
    fn take_ahead(
        &self,
        costs: [u32; N],
        ahead: Duration,
    ) -> Result<(Self::Taken, Duration), Denied> {
        self.reserve(costs, ahead).map(|taken| {
            let due_in = taken.wait();
            (taken, due_in)
        })
    }
    /// The soonest any bucket could hold its part: never later than the truth, so a waiter
    /// outside the line that sleeps until it never sleeps past its chance.
    fn due_after(&self, after: u64, costs: [u32; N]) -> Option<u64> {
        self.buckets()
            .iter()
            .zip(&costs)
            .filter(|(_, &cost)| cost > 0)
            .filter_map(|(bucket, &cost)| bucket.due_after_ticks(after, cost))
            .min_by_key(|&due| since(after, due))
    }
    fn slack_ticks(&self, now: u64, costs: [u32; N]) -> u64 {
        self.buckets()
            .iter()
            .zip(&costs)
            .map(|(bucket, &cost)| bucket.slack_for(now, cost))
            .min()
            .unwrap_or(u64::MAX)
    }
    fn now_ticks(&self) -> u64 {
        self.buckets().first().map_or(0, |b| b.clock().now())
    }
}

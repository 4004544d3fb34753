//! Blocking waits for threads: a place in the bucket's line, and sleeps outside any lock.

use core::time::Duration;
use std::sync::Arc;
use std::task::{Wake, Waker};
use std::thread::{self, Thread};

use super::queue::{plan, settled_at_once, Held, Lined, Plan, Step, Waiter};
use super::{CancelOnDrop, ReserveNow};
use crate::clock::ticks_to_duration_ceil;
use crate::{Clock, Denied, Jitter, TokenBucket, Word};

/// Wakes a parked thread.
struct Unpark(Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// How late a parked thread may wake, in `C`'s ticks: two milliseconds. A thread wakes after
/// the kernel's timer slack and its own scheduling, well within that on an idle machine and
/// beyond it only under load. A burst with room for that keeps what accrues meanwhile; with
/// less, the head of a line takes its tokens this far ahead of their instant
/// ([`Waiter::early`]), as the tokio wait does, so that a late wake-up delays the thread,
/// never the bucket's schedule.
fn park_lateness<C: Clock>() -> u64 {
    2 * C::TICKS_PER_SECOND.div_ceil(1_000)
}

/// Runs `waiter` on this thread until it is served or gives up: parks between looks, for at
/// most its timer. `take(ahead)` may take up to `ahead` before the tokens' instant (see
/// [`park_lateness`]).
fn wait_blocking<'a, B: Lined, const N: usize, T: Held>(
    waiter: Waiter<'a, B, N>,
    mut take: impl FnMut(Duration) -> Result<T, Denied>,
) -> Result<(T, Duration, Waiter<'a, B, N>, Waker), Denied> {
    let mut waiter = waiter.early(park_lateness::<B::Clock>());
    let early = waiter.early_ticks();
    let waker = Waker::from(Arc::new(Unpark(thread::current())));
    loop {
        let look = match waiter.step(&waker, &mut take) {
            Step::Done(done) => return done.map(|(taken, waited)| (taken, waited, waiter, waker)),
            Step::Sleep(None) => {
                thread::park();
                continue;
            }
            Step::Sleep(Some(look)) => look,
        };
        // On a fresh reading: a thread scheduled late sleeps only what is left, and a turn
        // is slept to `early` ahead, so that it wakes in time to take ahead.
        match plan(look, waiter.now(), early) {
            Plan::Again => {}
            Plan::Sleep(ticks) => thread::park_timeout(ticks_to_duration_ceil::<B::Clock>(ticks)),
        }
    }
}

/// Waits in line for `cost` from `gate`, then sleeps holding the take until its tokens'
/// instant (a take ahead of it, see [`park_lateness`]) and then `jitter`: every blocking
/// wait. Returns the time waited, to the tokens' instant, the jitter included.
pub(crate) fn acquire_blocking<G: ReserveNow, B: Lined, const N: usize>(
    gate: &G,
    waiter: Waiter<'_, B, N>,
    cost: G::Cost,
    jitter: &Jitter,
) -> Result<Duration, Denied> {
    let ((taken, due_in), waited, mut waiter, waker) =
        wait_blocking(waiter, |ahead| gate.reserve_ahead(cost, ahead))?;
    let guard = CancelOnDrop::new(gate, taken);
    let waited = waited + due_in;
    // Parked rather than asleep, so that a caller held up behind it can wake it once its
    // instant has passed.
    let until = std::time::Instant::now() + due_in;
    loop {
        let now = std::time::Instant::now();
        if now >= until {
            break;
        }
        thread::park_timeout(until - now);
    }
    // Not before the holders ahead of it in line have returned.
    while !waiter.try_release(&waker) {
        thread::park();
    }
    let jitter = jitter.after(waited);
    if !jitter.is_zero() {
        thread::sleep(jitter);
    }
    guard.keep();
    Ok(waited + jitter)
}

/// `n` tokens from one bucket with a line, blocking, no jitter: the whole of a bucket's
/// `acquire_blocking_timeout`.
pub(crate) fn acquire_one_blocking<B: Lined + ReserveNow<Cost = u32>>(
    bucket: &B,
    n: u32,
    timeout: Duration,
) -> Result<Duration, Denied> {
    if let Some(settled) = settled_at_once(bucket, n) {
        return settled.map(|()| Duration::ZERO);
    }
    let waiter = Waiter::new([bucket], [n], Some(timeout))?;
    acquire_blocking(bucket, waiter, n, &Jitter::none())
}

impl<C: Clock, W: Word> TokenBucket<C, W> {
    /// Takes `n` tokens, blocking the thread until they have accrued; returns the time waited.
    ///
    /// Threads wait in line, in arrival order, and only the one at the head takes its tokens,
    /// when they fall due: each sleeps until its estimated turn and, unless someone ahead gave
    /// up, wakes once. Nothing is taken before then, so a wait that ends early leaves the bucket
    /// as if it had never queued. (Where the burst cannot hold the two milliseconds a parked
    /// thread may wake late, the head takes its tokens up to that much ahead of their instant
    /// and sleeps the rest holding them: a late wake-up never moves the bucket's schedule, so
    /// the threads get the rate.) A thread arriving with nobody waiting takes at once when it
    /// can; one arriving while anyone waits in line waits behind them.
    /// [`try_acquire`](Self::try_acquire) is not a wait: it takes what is at hand, line or
    /// not. `n` above the burst fails at once with [`Denied::ExceedsCapacity`]; `n = 0` returns
    /// at once.
    ///
    /// The time waited is measured on the bucket's clock: at least the time the tokens took to
    /// accrue, later only by the operating system's scheduling.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Quota, Rate, StdClock, TokenBucket};
    ///
    /// let bucket = TokenBucket::try_new(Quota::new(Rate::per_second(100)).burst(1), StdClock)?;
    /// assert_eq!(bucket.acquire_blocking(1)?, Duration::ZERO); // the burst
    /// let waited = bucket.acquire_blocking(1)?; // the next token accrues within 10 ms
    /// assert!(waited <= Duration::from_millis(200)); // 10 ms, and a loaded machine's delay
    /// assert!(bucket.acquire_blocking(2).is_err()); // more than the burst: never, so at once
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn acquire_blocking(&self, n: u32) -> Result<Duration, Denied> {
        self.acquire_blocking_timeout(n, Duration::MAX)
    }

    /// Takes `n` tokens if they accrue within `timeout`, blocking the thread until then; returns
    /// the time waited.
    ///
    /// A wait that would exceed `timeout` (the tokens of everyone in line, then its own) fails
    /// at once with [`Denied::Insufficient`] and takes nothing; its `retry_after` says how much
    /// longer the wait would have been. A wait that runs out of time in line (others took the
    /// tokens first) leaves the line with the same error, having taken nothing. Otherwise it
    /// behaves as [`acquire_blocking`](Self::acquire_blocking).
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
        acquire_one_blocking(self, n, timeout)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Instant;
    use std::vec::Vec;

    use super::super::queue::in_line;
    use crate::{Quota, Rate, StdClock, TokenBucket};

    use super::*;

    fn ms(millis: u64) -> Duration {
        Duration::from_millis(millis)
    }

    /// Spins (yielding) until `arrived` holds; `false` if it has not within five seconds.
    fn until(arrived: impl Fn() -> bool) -> bool {
        let start = Instant::now();
        while !arrived() {
            if start.elapsed() > Duration::from_secs(5) {
                return false;
            }
            thread::yield_now();
        }
        true
    }

    /// 100/s, burst 10, empty: a thread asks for 10 (due at 100 ms), and once it is in line a
    /// second asks for 1, which the bucket would hold from 10 ms on. The second is served after
    /// the first, at 110 ms, and the first is not held back by it. Both figures are the waits'
    /// own (to their tokens' instants, from the caller's arrival), so a thread descheduled
    /// after it returns cannot move them. A run whose second thread arrived too late to be
    /// behind the first is run again.
    ///
    /// Not under miri: its clock runs with the instructions it interprets, where spawning a
    /// thread alone outlasts the window the second must arrive in.
    #[test]
    #[cfg(not(miri))]
    fn a_thread_asking_for_one_token_never_overtakes_one_asking_for_ten_ahead_of_it() {
        for _ in 0..3 {
            let bucket = TokenBucket::try_new(
                Quota::new(Rate::per_second(100)).burst(10).start_empty(),
                StdClock,
            )
            .unwrap();
            let start = Instant::now();
            let (big, small) = thread::scope(|scope| {
                let big = scope.spawn(|| start.elapsed() + bucket.acquire_blocking(10).unwrap());
                assert!(
                    until(|| in_line(&bucket) == 1),
                    "the first never joined the line"
                );
                let small = scope.spawn(|| {
                    let arrival = start.elapsed();
                    (arrival, bucket.acquire_blocking(1).unwrap())
                });
                (big.join().unwrap(), small.join().unwrap())
            });
            let (arrival, small) = small;
            if arrival > ms(60) {
                continue;
            }
            // The first's tokens: 100 ms of accrual from the bucket's start, shown early only
            // by a scheduling delay between the two readings (see the test below). The
            // second's: 10 ms after the first's, where overtaking would serve it at about
            // 10 ms and the first 10 ms later.
            assert!(big >= ms(90), "first served at {big:?}");
            let small_at = arrival + small;
            assert!(
                small_at > big,
                "second served at {small_at:?}, first at {big:?}"
            );
            return;
        }
        panic!("the second thread never arrived within 60 ms of the first");
    }

    /// 100/s, burst 1, empty: ten threads, each asking once the one before is in line (or has
    /// returned). A burst of one cannot hold a late wake-up, so each head takes ahead of its
    /// instant and holds its place while it sleeps to it: the threads are served in the order
    /// they arrived.
    #[test]
    fn threads_arriving_one_after_another_are_served_in_that_order_a_token_apart() {
        let bucket = TokenBucket::try_new(
            Quota::new(Rate::per_second(100)).burst(1).start_empty(),
            StdClock,
        )
        .unwrap();
        let returned = AtomicUsize::new(0);
        let start = Instant::now();
        let served: Vec<Duration> = thread::scope(|scope| {
            let mut threads = Vec::new();
            for i in 0..10 {
                threads.push(scope.spawn(|| {
                    let arrival = start.elapsed();
                    let waited = bucket.acquire_blocking(1).unwrap();
                    returned.fetch_add(1, Ordering::SeqCst);
                    arrival + waited
                }));
                // Returns first: a thread leaves the line before it counts itself returned, so
                // read the other way round, one thread could be counted twice.
                let arrived = || {
                    let returned = returned.load(Ordering::SeqCst);
                    in_line(&bucket) + returned > i
                };
                assert!(until(arrived), "thread {i} never arrived");
            }
            threads.into_iter().map(|t| t.join().unwrap()).collect()
        });
        // Served in arrival order, the tokens 10 ms apart. Each instant is the thread's arrival
        // plus the wait it was given, which counts from the wait's own first reading of the
        // clock: a thread descheduled between the two readings shows an instant that much
        // early. Overtaking shows 10 ms early; only a thread descheduled that long between two
        // adjacent lines could mask or fake it.
        for (i, pair) in served.windows(2).enumerate() {
            assert!(
                pair[1] > pair[0],
                "thread {} served before thread {i}: {served:?}",
                i + 1
            );
        }
        assert!(served[0] >= ms(9), "{served:?}");
    }
}

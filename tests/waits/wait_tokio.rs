//! Async waits under tokio's paused clock: exact instants, arrival order, one wake per waiter,
//! and cancellation that gives tokens back.

#[path = "../support/mod.rs"]
mod support;
use support::floor::sleeper_floor;
use support::{ms, on_two_workers};

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use tokio::task::JoinSet;
use tokio::time::{sleep, timeout, Instant};
use tollgate::{Clock, Denied, Quota, Rate, TokenBucket, TokioClock};

fn bucket(quota: Quota) -> Arc<TokenBucket<TokioClock>> {
    Arc::new(TokenBucket::try_new(quota, TokioClock::new()).expect("valid quota"))
}

/// Rate 5/s, burst 5: the documents' twenty callers.
fn five_per_second() -> Quota {
    Quota::new(Rate::per_second(5)).burst(5)
}

#[tokio::test]
async fn tokio_clock_made_in_running_time_reads_tokios_instants() {
    // Outside paused time it reads std's clock, which must give tokio's instants: each reading
    // falls between the tokio instants taken around it.
    let clock = TokioClock::new();
    for _ in 0..1_000 {
        let before = clock.ticks_at(Instant::now());
        let reading = clock.now();
        let after = clock.ticks_at(Instant::now());
        assert!(
            before <= reading && reading <= after,
            "{before} {reading} {after}"
        );
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_tokio_clock_following_pause_stands_still_and_advances_with_paused_time() {
    let made_before = TokioClock::following_pause();
    let running = TokioClock::new();
    tokio::time::pause();
    let (a, b) = (made_before.now(), made_before.now());
    assert_eq!(a, b); // paused: it stands still
    tokio::time::advance(ms(1500)).await;
    assert_eq!(made_before.now(), a + 1_500_000_000);
    // One made in running time reads std's clock, which pausing does not stop.
    let r = running.now();
    std::thread::sleep(ms(2));
    assert!(running.now() >= r + 2_000_000);
}

#[tokio::test(start_paused = true)]
async fn tokio_clock_counts_nanoseconds_of_paused_time_from_its_own_origin() {
    tokio::time::advance(Duration::from_secs(3600)).await;
    let clock = TokioClock::default();
    assert_eq!(clock.now(), 0);
    tokio::time::advance(ms(1500)).await;
    assert_eq!(clock.now(), 1_500_000_000);
    assert_eq!(clock.ticks_at(Instant::now() - Duration::from_secs(10)), 0);
    let copy = clock;
    assert_eq!(copy.now(), clock.now());
}

#[tokio::test(start_paused = true)]
async fn twenty_callers_get_five_at_once_then_one_every_200_ms_in_arrival_order() {
    let start = Instant::now();
    let bucket = bucket(five_per_second());
    let served = Arc::new(Mutex::new(Vec::new()));
    let mut callers = JoinSet::new();
    for caller in 0..20u64 {
        let (bucket, served) = (bucket.clone(), served.clone());
        callers.spawn(async move {
            let waited = bucket.acquire(1).await.expect("one token fits the burst");
            served
                .lock()
                .unwrap()
                .push((caller, start.elapsed(), waited));
        });
    }
    callers.join_all().await;

    // (caller, served at, waited): all arrived at 0 s, so each waited until it was served.
    let expected: Vec<_> = (0..20u64)
        .map(|caller| {
            let at = ms(200 * caller.saturating_sub(4));
            (caller, at, at)
        })
        .collect();
    let served = served.lock().unwrap();
    assert_eq!(served[..6], expected[..6]); // five at 0 s, the sixth at 200 ms
    assert_eq!(*served, expected);
    assert_eq!(served[19].1, Duration::from_secs(3));
}

#[tokio::test(start_paused = true)]
async fn ten_thousand_waiters_on_one_bucket_are_all_served_and_none_early() {
    const WAITERS: u64 = 10_000;
    let (rate, burst) = (3_000, 100);
    let start = Instant::now();
    let bucket = bucket(Quota::new(Rate::per_second(rate)).burst(burst));
    let mut waiters = JoinSet::new();
    for waiter in 0..WAITERS {
        let bucket = bucket.clone();
        waiters.spawn(async move {
            bucket.acquire(1).await.expect("one token fits the burst");
            (waiter, start.elapsed())
        });
    }
    let served = waiters.join_all().await;
    assert_eq!(served.len() as u64, WAITERS);

    // Waiter k (from 0) is due when its token has accrued: (k + 1 − burst) / rate, rounded up to
    // the nanosecond. Tokio's timer fires on millisecond ticks, so it may be served up to 1 ms
    // after that, never before.
    let mut latest = Duration::ZERO;
    for (waiter, at) in served {
        let owed_tokens = (waiter + 1).saturating_sub(burst);
        let due = Duration::from_nanos((owed_tokens * 1_000_000_000).div_ceil(rate));
        assert!(
            at >= due,
            "waiter {waiter} served at {at:?}, due at {due:?}"
        );
        assert!(
            at < due + ms(1),
            "waiter {waiter} served at {at:?}, due at {due:?}"
        );
        latest = latest.max(at);
    }
    assert_eq!(latest, ms(3_300)); // (10 000 − 100) / 3 000 s
}

/// Counts the wake-ups of the future it wraps, through a waker wrapping the task's own.
struct CountWakes<F> {
    inner: Pin<Box<F>>,
    wakes: Arc<WakeCounter>,
    polls: usize,
}

struct WakeCounter(AtomicUsize);

struct CountingWaker {
    counter: Arc<WakeCounter>,
    task: Waker,
}

impl Wake for CountingWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.counter.0.fetch_add(1, Ordering::Relaxed);
        self.task.wake_by_ref();
    }
}

impl<F: Future> CountWakes<F> {
    fn new(inner: F) -> Self {
        Self {
            inner: Box::pin(inner),
            wakes: Arc::new(WakeCounter(AtomicUsize::new(0))),
            polls: 0,
        }
    }
}

/// The inner output, the polls and the wake-ups it took.
impl<F: Future> Future for CountWakes<F> {
    type Output = (F::Output, usize, usize);
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.polls += 1;
        let waker = Waker::from(Arc::new(CountingWaker {
            counter: self.wakes.clone(),
            task: cx.waker().clone(),
        }));
        match self.inner.as_mut().poll(&mut Context::from_waker(&waker)) {
            Poll::Ready(out) => {
                Poll::Ready((out, self.polls, self.wakes.0.load(Ordering::Relaxed)))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

#[tokio::test(start_paused = true)]
async fn each_waiter_is_woken_once_and_polled_twice() {
    let bucket = bucket(five_per_second());
    let mut callers = JoinSet::new();
    for caller in 0..20u64 {
        let bucket = bucket.clone();
        callers.spawn(async move {
            let (waited, polls, wakes) = CountWakes::new(bucket.acquire(1)).await;
            (caller, waited.unwrap(), polls, wakes)
        });
    }
    let mut seen = callers.join_all().await;
    seen.sort();
    // (caller, waited, polls, wake-ups): the burst completes at its first poll; every other
    // caller sleeps once and is woken once, with no re-check.
    let expected: Vec<_> = (0..20u64)
        .map(|caller| match caller {
            0..=4 => (caller, Duration::ZERO, 1, 0),
            _ => (caller, ms(200 * (caller - 4)), 2, 1),
        })
        .collect();
    assert_eq!(seen, expected);
}

#[tokio::test(start_paused = true)]
async fn a_waiter_given_up_by_timeout_gives_its_tokens_to_the_next_caller() {
    let start = Instant::now();
    let bucket = bucket(five_per_second().start_empty());
    // Five tokens are due at 1 s; the caller gives up at 300 ms.
    assert!(timeout(ms(300), bucket.acquire(5)).await.is_err());
    assert_eq!(start.elapsed(), ms(300));
    // The 1.5 tokens accrued meanwhile are there for the next callers: one at once, the next
    // when its half token has accrued. Had the reservation been kept, they would wait until
    // 1.2 s and 1.4 s.
    assert_eq!(bucket.acquire(1).await, Ok(Duration::ZERO));
    assert_eq!(bucket.acquire(1).await, Ok(ms(100)));
    assert_eq!(start.elapsed(), ms(400));
}

#[tokio::test(start_paused = true)]
async fn a_waiter_losing_a_select_gives_its_tokens_back() {
    let start = Instant::now();
    let bucket = bucket(five_per_second().start_empty());
    tokio::select! {
        _ = bucket.acquire(5) => panic!("five tokens cannot accrue in 300 ms"),
        () = sleep(ms(300)) => {}
    }
    assert_eq!(bucket.acquire(1).await, Ok(Duration::ZERO));
    assert_eq!(start.elapsed(), ms(300));
}

#[tokio::test(start_paused = true)]
async fn an_aborted_task_gives_its_tokens_back() {
    let start = Instant::now();
    let bucket = bucket(five_per_second().start_empty());
    let waiter = tokio::spawn({
        let bucket = bucket.clone();
        async move { bucket.acquire(5).await }
    });
    sleep(ms(300)).await;
    waiter.abort();
    assert!(waiter.await.unwrap_err().is_cancelled());
    assert_eq!(bucket.acquire(1).await, Ok(Duration::ZERO));
    assert_eq!(start.elapsed(), ms(300));
}

#[tokio::test(start_paused = true)]
async fn a_dropped_waiter_ahead_leaves_the_bucket_as_if_it_had_never_queued() {
    let start = Instant::now();
    let bucket = bucket(five_per_second().start_empty());
    let first = tokio::spawn({
        let bucket = bucket.clone();
        async move { bucket.acquire(5).await } // its five are due at 1 s
    });
    sleep(ms(1)).await;
    let second = tokio::spawn({
        let bucket = bucket.clone();
        async move { (bucket.acquire(1).await, start.elapsed()) } // in line behind it
    });
    sleep(ms(299)).await;
    first.abort();
    assert!(first.await.unwrap_err().is_cancelled());
    // The first had taken nothing: at 300 ms the bucket holds the 1.5 tokens accrued, so the
    // second, now at the head, is served at once, and a newcomer waits for half a token.
    assert_eq!(second.await.unwrap(), (Ok(ms(299)), ms(300)));
    assert_eq!(bucket.acquire(1).await, Ok(ms(100)));
    assert_eq!(start.elapsed(), ms(400));
}

#[tokio::test(start_paused = true)]
async fn acquire_timeout_that_cannot_succeed_returns_at_once_and_takes_nothing() {
    let start = Instant::now();
    let bucket = bucket(five_per_second().start_empty());
    // (n, timeout, result): tokens accrue every 200 ms from empty.
    let rows = [
        (1, ms(0), Err(Denied::insufficient(ms(200)))),
        (1, ms(199), Err(Denied::insufficient(ms(1)))),
        (5, ms(900), Err(Denied::insufficient(ms(100)))),
        (6, Duration::MAX, Err(Denied::ExceedsCapacity { burst: 5 })),
        (0, ms(0), Ok(Duration::ZERO)),
    ];
    for (n, limit, result) in rows {
        assert_eq!(bucket.acquire_timeout(n, limit).await, result, "n = {n}");
        assert_eq!(start.elapsed(), Duration::ZERO, "n = {n}: no time passes");
    }
    // Nothing was taken: the whole burst is due at 1 s, as it was.
    assert_eq!(bucket.acquire_timeout(5, ms(1_000)).await, Ok(ms(1_000)));
}

#[tokio::test(start_paused = true)]
async fn more_than_the_burst_fails_at_once_even_from_a_full_bucket() {
    let start = Instant::now();
    let bucket = bucket(five_per_second());
    assert_eq!(
        bucket.acquire(6).await,
        Err(Denied::ExceedsCapacity { burst: 5 })
    );
    assert_eq!(
        bucket.acquire(u32::MAX).await,
        Err(Denied::ExceedsCapacity { burst: 5 })
    );
    assert_eq!(start.elapsed(), Duration::ZERO);
    assert_eq!(bucket.available(), 5);
}

/// Real time, two worker threads: tasks on both share the bucket, none is served early and the
/// last is served when the arithmetic says.
#[test]
fn tasks_on_a_multi_threaded_runtime_share_the_bucket_none_early() {
    on_two_workers(async {
        let start = Instant::now();
        // 50 tasks at 100/s with a burst of 10: the last is due at 400 ms.
        let bucket = bucket(Quota::new(Rate::per_second(100)).burst(10));
        let mut tasks = JoinSet::new();
        for _ in 0..50 {
            let bucket = bucket.clone();
            tasks.spawn(async move {
                let waited = bucket.acquire(1).await.unwrap();
                (start.elapsed(), waited)
            });
        }
        let mut served = tasks.join_all().await;
        served.sort();
        for (k, (at, waited)) in served.iter().enumerate() {
            // The k-th served (from 0) cannot precede the k-th due instant, (k + 1 − 10) / 100 s.
            let due = ms(10 * (k as u64 + 1).saturating_sub(10));
            assert!(*at >= due, "served {k} at {at:?}, due at {due:?}");
            assert!(at >= waited);
        }
        let last = served[49].0;
        // Generous above: a loaded two-core machine can be late, never early.
        assert!(last < ms(400) + ms(500), "last served at {last:?}");
    });
}

#[tokio::test(start_paused = true)]
async fn a_timeout_of_centuries_waits_like_no_timeout() {
    let bucket = bucket(five_per_second().start_empty());
    // Beyond what the clock's signed comparisons hold: read as no deadline, never as one past.
    let centuries = Duration::from_secs(1 << 40);
    assert_eq!(bucket.acquire_timeout(1, centuries).await, Ok(ms(200)));
    assert_eq!(
        bucket.acquire_blocking_timeout(0, centuries),
        Ok(Duration::ZERO)
    );
}

/// tokio's timer counts whole milliseconds, and paused time wakes on the millisecond after a
/// deadline as real time does. At 800/s with a burst of one, a take at each wake-up would come
/// up to a millisecond late and lose that time to the burst's cap (one token every 2 ms here).
/// The head takes its token up to two milliseconds before its instant and sleeps the rest
/// holding it, so the timer delays the caller, never the bucket's schedule: every token at its instant.
#[tokio::test(start_paused = true)]
async fn a_burst_of_one_keeps_the_rate_on_a_timer_that_wakes_late() {
    let start = Instant::now();
    let bucket = bucket(Quota::new(Rate::per_second(800)).burst(1).start_empty());
    let mut grants = 0u64;
    while start.elapsed() < Duration::from_secs(1) {
        bucket.acquire(1).await.unwrap();
        grants += 1;
        // Never before the token's instant: the k-th is due at k × 1.25 ms.
        let due = Duration::from_micros(1_250 * grants);
        assert!(
            start.elapsed() >= due,
            "grant {grants} at {:?}",
            start.elapsed()
        );
    }
    assert!((800..=801).contains(&grants), "{grants} grants in a second");
}

/// A wait that holds its take ahead of the instant (a burst too small for the timer) gives it
/// back when dropped: the next caller finds the token due when it was.
#[tokio::test(start_paused = true)]
async fn a_wait_dropped_while_holding_its_take_ahead_gives_it_back() {
    let start = Instant::now();
    let bucket = bucket(Quota::new(Rate::per_second(1_000)).burst(1).start_empty());
    let mut wait = Box::pin(bucket.acquire(1));
    // One poll: the token is due in 1 ms, within the timer's lateness, so it is taken now.
    tokio::select! {
        biased;
        _ = &mut wait => panic!("the token is not due yet"),
        () = std::future::ready(()) => {}
    }
    // Taken: one more token would be due 2 ms from now (a reservation, given back at once).
    let probe = bucket.reserve(1, ms(10)).unwrap();
    assert_eq!(probe.wait(), ms(2));
    bucket.cancel(probe);
    drop(wait);
    assert_eq!(bucket.acquire(1).await, Ok(ms(1)));
    assert_eq!(start.elapsed(), ms(1));
}

/// A waiter dropped while it holds tokens taken ahead of their instant (a burst of one, too
/// small for tokio's timer: the head takes up to 2 ms early and sleeps to the instant holding
/// them) gives them back, and the waiter behind, handed the head when the dropped one took and
/// asleep until its own estimate a second later, is woken for them: served at the turn the
/// dropped one would have had, not at 2.998 s with the bucket capping the token it holds.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn the_waiter_behind_a_dropped_take_ahead_is_served_at_its_turn() {
    let bucket = bucket(Quota::new(Rate::per_second(1)).burst(1));
    let start = Instant::now();
    bucket.acquire(1).await.unwrap(); // empty from now on
    let first = {
        let bucket = bucket.clone();
        tokio::spawn(async move { bucket.acquire(1).await })
    };
    tokio::task::yield_now().await;
    // Due at 2 s, taken ahead at 1.998 s: dropped at 1.999 s, holding it.
    let dropped = {
        let bucket = bucket.clone();
        tokio::spawn(async move { timeout(ms(1_999), bucket.acquire(1)).await })
    };
    tokio::task::yield_now().await;
    let last = {
        let bucket = bucket.clone();
        tokio::spawn(async move {
            let waited = bucket.acquire(1).await;
            (waited, start.elapsed())
        })
    };
    assert_eq!(first.await.unwrap(), Ok(ms(1_000)));
    assert!(dropped.await.unwrap().is_err(), "given up at 1.999 s");
    assert_eq!(start.elapsed(), ms(1_999));
    assert_eq!(last.await.unwrap(), (Ok(ms(2_000)), ms(2_000)));
    assert_eq!(bucket.available(), 0);
}

/// The same on an `AdjustableBucket`, whose give-back runs under the quota it was taken under.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn the_waiter_behind_a_dropped_take_ahead_on_an_adjustable_bucket_is_served_at_its_turn() {
    let quota = Quota::new(Rate::per_second(1)).burst(1);
    let bucket = Arc::new(tollgate::AdjustableBucket::try_new(quota, TokioClock::new()).unwrap());
    let start = Instant::now();
    bucket.acquire(1).await.unwrap();
    let spawn_wait = |patience: Duration| {
        let bucket = bucket.clone();
        tokio::spawn(async move {
            let waited = timeout(patience, bucket.acquire(1)).await.map_err(drop);
            (waited, start.elapsed())
        })
    };
    let first = spawn_wait(ms(10_000));
    tokio::task::yield_now().await;
    let dropped = spawn_wait(ms(1_999));
    tokio::task::yield_now().await;
    let last = spawn_wait(ms(10_000));
    assert_eq!(first.await.unwrap(), (Ok(Ok(ms(1_000))), ms(1_000)));
    assert_eq!(dropped.await.unwrap(), (Err(()), ms(1_999)));
    assert_eq!(last.await.unwrap(), (Ok(Ok(ms(2_000))), ms(2_000)));
}

/// The same on several buckets at once: a `Limits` wait dropped holding its take ahead gives
/// every part back and wakes the waiter behind it in each line.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn the_waiter_behind_a_dropped_take_ahead_on_limits_is_served_at_its_turn() {
    let a = bucket(Quota::new(Rate::per_second(1)).burst(1));
    let b = bucket(Quota::new(Rate::per_second(1)).burst(1));
    let start = Instant::now();
    tollgate::Limits::new([&*a, &*b])
        .acquire([1, 1])
        .await
        .unwrap();
    let spawn_wait = |patience: Option<Duration>| {
        let (a, b) = (a.clone(), b.clone());
        tokio::spawn(async move {
            let limits = tollgate::Limits::new([&*a, &*b]);
            let waited = match patience {
                Some(patience) => timeout(patience, limits.acquire([1, 1]))
                    .await
                    .map_err(drop),
                None => Ok(limits.acquire([1, 1]).await),
            };
            (waited, start.elapsed())
        })
    };
    let first = spawn_wait(None);
    tokio::task::yield_now().await;
    let dropped = spawn_wait(Some(ms(1_999)));
    tokio::task::yield_now().await;
    let last = spawn_wait(None);
    assert_eq!(first.await.unwrap(), (Ok(Ok(ms(1_000))), ms(1_000)));
    assert_eq!(dropped.await.unwrap(), (Err(()), ms(1_999)));
    assert_eq!(last.await.unwrap(), (Ok(Ok(ms(2_000))), ms(2_000)));
    assert_eq!((a.available(), b.available()), (0, 0));
}

/// A wait on two buckets (`Limits`) served behind holders keeps its place in both lines until it
/// may return from both: at the front of one line while still behind a holder in the other, it
/// is not overtaken in the first by a one-bucket waiter that arrived after it. The holders are
/// polled by hand, as by an executor too busy to poll them, so that their returns come when the
/// test says.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_wait_on_two_buckets_held_up_in_one_line_is_not_overtaken_in_the_other() {
    let a = bucket(Quota::new(Rate::per_second(1_000)).burst(1));
    let b = bucket(Quota::new(Rate::per_second(1_000)).burst(1));
    a.try_acquire(1).unwrap();
    b.try_acquire(1).unwrap();
    let mut cx = Context::from_waker(Waker::noop());
    // Each takes its token ahead of its instant (the burst cannot hold the timer's lateness)
    // and holds its place while it sleeps.
    let mut holder_a = Box::pin(a.acquire(1));
    let mut holder_b = Box::pin(b.acquire(1));
    assert!(holder_a.as_mut().poll(&mut cx).is_pending());
    assert!(holder_b.as_mut().poll(&mut cx).is_pending());
    let returned = Arc::new(Mutex::new(Vec::new()));
    let both = {
        let (a, b, returned) = (a.clone(), b.clone(), returned.clone());
        tokio::spawn(async move {
            tollgate::Limits::new([&*a, &*b])
                .acquire([1, 1])
                .await
                .unwrap();
            returned.lock().unwrap().push("both");
        })
    };
    tokio::task::yield_now().await;
    let a_alone = {
        let (a, returned) = (a.clone(), returned.clone());
        tokio::spawn(async move {
            a.acquire(1).await.unwrap();
            returned.lock().unwrap().push("a alone");
        })
    };
    // Both served and back from their sleeps, held up behind the holders.
    sleep(ms(10)).await;
    assert!(returned.lock().unwrap().is_empty());
    // The holder in `a` returns: the wait on both is at the front of `a`'s line, still behind
    // the holder in `b`.
    assert!(holder_a.as_mut().poll(&mut cx).is_ready());
    sleep(ms(10)).await;
    assert_eq!(*returned.lock().unwrap(), Vec::<&str>::new());
    assert!(holder_b.as_mut().poll(&mut cx).is_ready());
    both.await.unwrap();
    a_alone.await.unwrap();
    assert_eq!(*returned.lock().unwrap(), ["both", "a alone"]);
}

/// Real time: one task at 1 000/s with a burst of one gets the rate, and waits on the timer
/// rather than spinning: each grant takes a poll or two and at most one wake-up, however
/// late the timer wakes.
#[test]
fn one_waiter_at_a_thousand_per_second_with_a_burst_of_one_gets_the_rate_without_spinning() {
    on_two_workers(async {
        // Measured against this host's floor in the same run, window by window: a thread that
        // sleeps to each token's instant (the kernel's fine timer) loses what any waiter at a
        // burst of one loses here to a late wake-up, and a loaded machine costs both alike. A
        // wait that oversleeps into tokio's millisecond loses about 5 % on a quiet machine,
        // where the floor is the rate; the best of three windows is taken of both.
        let (mut best, mut floor) = (0.0f64, 0.0f64);
        for _ in 0..3 {
            floor = floor.max(
                tokio::task::spawn_blocking(|| sleeper_floor(1_000, ms(500)))
                    .await
                    .unwrap(),
            );
            let bucket = bucket(Quota::new(Rate::per_second(1_000)).burst(1));
            let start = Instant::now();
            let (mut grants, mut polls) = (0u64, 0usize);
            while start.elapsed() < ms(500) {
                let (granted, polled, _wakes) = CountWakes::new(bucket.acquire(1)).await;
                granted.unwrap();
                grants += 1;
                polls += polled;
            }
            let elapsed = start.elapsed().as_secs_f64();
            // The burst and 1 000/s: never above, in any window.
            assert!(
                grants as f64 <= 1.0 + 1_000.0 * elapsed,
                "{grants} in {elapsed} s"
            );
            assert!(
                polls as u64 <= 3 * grants,
                "{polls} polls for {grants} grants"
            );
            best = best.max(grants as f64 / elapsed);
            if best >= 0.98 * floor.min(1_000.0) {
                break;
            }
        }
        println!("waits: {best:.1}/s; the host's floor: {floor:.1}/s");
        assert!(
            best >= 0.98 * floor.min(1_000.0),
            "{best:.1}/s against the host's floor of {floor:.1}/s"
        );
    });
}

/// Arrivals and services, numbered in the order they happen on one thread.
#[derive(Default)]
struct Ledger {
    next: usize,
    /// Per waiter: when its first poll completed, and when its wait completed with a grant.
    arrived: Vec<Option<usize>>,
    served: Vec<Option<usize>>,
}

impl Ledger {
    fn stamp(&mut self) -> usize {
        self.next += 1;
        self.next
    }
}

/// Records a wait's arrival (its first poll, after which it has taken or is in line) and its
/// grant in `ledger`.
struct Arrival<F> {
    inner: Pin<Box<F>>,
    who: usize,
    polled: bool,
    ledger: Arc<Mutex<Ledger>>,
}

impl<F: Future<Output = Result<Duration, Denied>>> Future for Arrival<F> {
    type Output = Result<Duration, Denied>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        let polled = this.inner.as_mut().poll(cx);
        let mut ledger = this.ledger.lock().unwrap();
        if !this.polled {
            this.polled = true;
            let at = ledger.stamp();
            ledger.arrived[this.who] = Some(at);
        }
        if let Poll::Ready(Ok(_)) = polled {
            let at = ledger.stamp();
            ledger.served[this.who] = Some(at);
        }
        polled
    }
}

/// One step of a xorshift generator: the schedules below, reproducible from their seed.
fn next(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// A bucket with a line: the two that `acquire` and `acquire_timeout` serve.
enum Lined {
    Plain(TokenBucket<TokioClock>),
    Adjustable(tollgate::AdjustableBucket<TokioClock>),
}

impl Lined {
    async fn acquire(&self, n: u32, patience: Option<Duration>) -> Result<Duration, Denied> {
        match (self, patience) {
            (Lined::Plain(b), None) => b.acquire(n).await,
            (Lined::Plain(b), Some(t)) => b.acquire_timeout(n, t).await,
            (Lined::Adjustable(b), None) => b.acquire(n).await,
            (Lined::Adjustable(b), Some(t)) => b.acquire_timeout(n, t).await,
        }
    }
}

/// Strict arrival order, as an adversary schedules it: 150 waiters arriving while others wait,
/// at the very instants tokens fall due (and a nanosecond either side), with costs up to the
/// burst, timeouts that give up in line, waits dropped in line or while holding a take ahead,
/// and (on an `AdjustableBucket`) quota changes under the line. Whoever arrived first (its
/// first poll completed) is served first, among those served: no newcomer overtakes anyone
/// still waiting, at once or from the line.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn no_waiter_is_overtaken_by_one_that_arrived_after_it() {
    const WAITERS: usize = 150;
    let mut served_in_all = 0;
    for seed in 1..=48u64 {
        let mut rng = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let rate = [3u64, 500, 1_000, 7_919, 100_000][(next(&mut rng) % 5) as usize];
        let burst = 1 + next(&mut rng) % 4;
        let quota = Quota::new(Rate::per_second(rate)).burst(burst);
        let adjustable = seed % 2 == 0;
        let bucket = Arc::new(if adjustable {
            Lined::Adjustable(
                tollgate::AdjustableBucket::try_new(quota, TokioClock::new()).unwrap(),
            )
        } else {
            Lined::Plain(TokenBucket::try_new(quota, TokioClock::new()).unwrap())
        });
        let period = Duration::from_nanos(1_000_000_000 / rate);
        let ledger = Arc::new(Mutex::new(Ledger {
            arrived: vec![None; WAITERS],
            served: vec![None; WAITERS],
            ..Ledger::default()
        }));
        let mut waiters = JoinSet::new();
        for who in 0..WAITERS {
            // Arrivals over about the time the line takes to serve them, on token instants.
            let tokens = next(&mut rng) % (WAITERS as u64 * 2);
            let nudge = match next(&mut rng) % 3 {
                0 => Duration::ZERO,
                1 => Duration::from_nanos(1),
                _ => period.saturating_sub(Duration::from_nanos(1)),
            };
            let arrive = period * tokens as u32 / 2 + nudge;
            let n = 1 + (next(&mut rng) % burst) as u32;
            let roll = next(&mut rng) % 10;
            let patience = (roll == 0).then(|| period * (1 + next(&mut rng) % 20) as u32);
            let dropped_after = (roll == 1).then(|| period * (next(&mut rng) % 20) as u32);
            let (bucket, ledger) = (bucket.clone(), ledger.clone());
            waiters.spawn(async move {
                sleep(arrive).await;
                let wait = Arrival {
                    inner: Box::pin(async move { bucket.acquire(n, patience).await }),
                    who,
                    polled: false,
                    ledger,
                };
                match dropped_after {
                    Some(after) => drop(timeout(after, wait).await),
                    None => drop(wait.await),
                }
            });
        }
        if let Lined::Adjustable(b) = &*bucket {
            // Quota changes while the line is long: halved, then back.
            let half = Quota::new(Rate::per_second(rate.div_ceil(2))).burst(burst);
            sleep(period * 40).await;
            b.set_quota(half).unwrap();
            sleep(period * 80).await;
            b.set_quota(quota).unwrap();
        }
        waiters.join_all().await;
        let ledger = ledger.lock().unwrap();
        let served: Vec<(usize, usize, usize)> = (0..WAITERS)
            .filter_map(|w| Some((w, ledger.arrived[w]?, ledger.served[w]?)))
            .collect();
        served_in_all += served.len();
        for &(a, arrived_a, served_a) in &served {
            for &(b, arrived_b, served_b) in &served {
                assert!(
                    !(arrived_a < arrived_b && served_b < served_a),
                    "seed {seed} ({rate}/s, burst {burst}, adjustable {adjustable}): waiter {b} \
                     arrived after waiter {a} and was served first"
                );
            }
        }
    }
    // The schedules are not vacuous: most waiters are served.
    assert!(
        served_in_all > 48 * WAITERS * 3 / 4,
        "{served_in_all} served"
    );
}

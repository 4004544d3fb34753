//! `Jittered`: every wait of a `TokenBucket` and an `AdjustableBucket` with a jitter after its
//! instant. Buckets in lockstep act spread out; a wait served at once is not delayed; a future
//! dropped during its jitter gives its tokens back. Paused tokio time, a `ManualClock` behind
//! `DelayNs`, and one short real-time check of the blocking wait.

use std::time::Duration;

use embedded_hal::delay::DelayNs;
use tokio::time::{timeout, Instant};
use tollgate::{
    AdjustableBucket, Jitter, ManualClock, Quota, Rate, StdClock, TokenBucket, TokioClock,
};

fn ms(millis: u64) -> Duration {
    Duration::from_millis(millis)
}

/// The draws a jitter made from `seed` gives, in order.
fn draws(max: Duration, seed: u64, n: usize) -> Vec<Duration> {
    let twin = Jitter::up_to(max, seed);
    (0..n).map(|_| twin.next()).collect()
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn buckets_in_lockstep_act_spread_over_the_jitter() {
    // Eight buckets built together, empty, at 1/s: all due at 1 s. Each waiter on its own.
    let buckets: Vec<_> = (0..8)
        .map(|_| {
            TokenBucket::try_new(
                Quota::new(Rate::per_second(1)).start_empty(),
                TokioClock::new(),
            )
            .unwrap()
        })
        .collect();
    let act_times = |jitter: Option<&'static Jitter>| {
        let start = Instant::now();
        let buckets = &buckets;
        async move {
            let waits = buckets.iter().map(|bucket| async move {
                let waited = match jitter {
                    Some(jitter) => bucket.jittered(jitter).acquire(1).await.unwrap(),
                    None => bucket.acquire(1).await.unwrap(),
                };
                (start.elapsed(), waited)
            });
            futures_join_all(waits).await
        }
    };
    // Without jitter: all eight at 1 s exactly.
    let lockstep = act_times(None).await;
    assert!(
        lockstep.iter().all(|&(at, _)| at == ms(1_000)),
        "{lockstep:?}"
    );

    // With one jitter of up to 400 ms shared by the eight: each acts at 2 s (its next token)
    // plus its own draw, to tokio's millisecond, and says so.
    static SPREAD: Jitter = Jitter::up_to(Duration::from_millis(400), 11);
    let mut expected = draws(ms(400), 11, 8);
    let mut spread: Vec<_> = act_times(Some(&SPREAD)).await;
    for (at, waited) in &spread {
        assert!(*at >= ms(1_000) && *at <= ms(1_401), "{spread:?}");
        assert!(waited.abs_diff(*at) <= ms(1), "{spread:?}");
    }
    spread.sort();
    expected.sort();
    for ((at, _), draw) in spread.iter().zip(&expected) {
        assert!(
            at.abs_diff(ms(1_000) + *draw) <= ms(1),
            "{spread:?} vs {expected:?}"
        );
    }
    // Spread: no two within 10 ms (fixed seed), where without it all eight shared one instant.
    for pair in spread.windows(2) {
        assert!(pair[1].0 - pair[0].0 >= ms(10), "{spread:?}");
    }
}

/// Runs the futures concurrently on the current task, in order of completion irrelevant.
async fn futures_join_all<F: std::future::Future>(
    futures: impl Iterator<Item = F>,
) -> Vec<F::Output> {
    let handles: Vec<_> = futures.map(Box::pin).collect();
    let mut outputs: Vec<Option<F::Output>> = handles.iter().map(|_| None).collect();
    let mut handles: Vec<_> = handles.into_iter().map(Some).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (slot, out) in handles.iter_mut().zip(outputs.iter_mut()) {
            if let Some(future) = slot {
                match future.as_mut().poll(cx) {
                    std::task::Poll::Ready(value) => {
                        *out = Some(value);
                        *slot = None;
                    }
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    outputs.into_iter().map(Option::unwrap).collect()
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_wait_served_at_once_is_not_delayed() {
    let bucket =
        TokenBucket::try_new(Quota::new(Rate::per_second(10)).burst(3), TokioClock::new()).unwrap();
    let jitter = Jitter::up_to(Duration::from_secs(5), 1);
    let start = Instant::now();
    for _ in 0..3 {
        assert_eq!(
            bucket.jittered(&jitter).acquire(1).await,
            Ok(Duration::ZERO)
        );
    }
    assert_eq!(start.elapsed(), Duration::ZERO);
    // The fourth waits 100 ms, then its draw.
    let draw = draws(Duration::from_secs(5), 1, 1)[0];
    let waited = bucket.jittered(&jitter).acquire(1).await.unwrap();
    assert!(
        waited.abs_diff(ms(100) + draw) <= ms(1),
        "{waited:?} vs {draw:?}"
    );
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_wait_dropped_during_its_jitter_gives_its_tokens_back() {
    // 1/s, burst 1, empty: the token is due at 1 s; then a jitter of up to 10 s, whose first
    // draw (seed 3) is the one the test knows.
    let draw = draws(Duration::from_secs(10), 3, 1)[0];
    assert!(
        draw > ms(1_000),
        "the test needs a draw over a second: {draw:?}"
    );
    for adjustable in [false, true] {
        let quota = Quota::new(Rate::per_second(1)).burst(1).start_empty();
        let jitter = Jitter::up_to(Duration::from_secs(10), 3);
        let start = Instant::now();
        let available = if adjustable {
            let bucket = AdjustableBucket::try_new(quota, TokioClock::new()).unwrap();
            // Given up half a second into the jitter: at 1.5 s.
            let gave_up = timeout(ms(1_500), bucket.jittered(&jitter).acquire(1)).await;
            assert!(gave_up.is_err());
            bucket.available()
        } else {
            let bucket = TokenBucket::try_new(quota, TokioClock::new()).unwrap();
            let gave_up = timeout(ms(1_500), bucket.jittered(&jitter).acquire(1)).await;
            assert!(gave_up.is_err());
            bucket.available()
        };
        assert_eq!(start.elapsed(), ms(1_500));
        // The token taken at 1 s came back: the bucket is full, as if the waiter never came.
        // (Spent instead, the bucket would hold half a token: 0 whole.)
        assert_eq!(available, 1, "adjustable: {adjustable}");
    }
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_jittered_wait_queues_in_the_buckets_own_line() {
    // A plain waiter first, a jittered one behind it: the plain one is served first, then the
    // jittered one a period later and its draw.
    let bucket = TokenBucket::try_new(
        Quota::new(Rate::per_second(10)).burst(1).start_empty(),
        TokioClock::new(),
    )
    .unwrap();
    let jitter = Jitter::up_to(ms(30), 5);
    let draw = draws(ms(30), 5, 1)[0];
    let start = Instant::now();
    let (plain, jittered) = tokio::join!(
        async {
            bucket.acquire(1).await.unwrap();
            start.elapsed()
        },
        async {
            bucket
                .jittered(&jitter)
                .acquire_timeout(1, ms(500))
                .await
                .unwrap();
            start.elapsed()
        }
    );
    assert_eq!(plain, ms(100));
    assert!(jittered.abs_diff(ms(200) + draw) <= ms(1), "{jittered:?}");
}

/// A delay that moves a manual clock, as a test double for a hardware timer.
struct Skip<'a>(&'a ManualClock);

impl DelayNs for Skip<'_> {
    fn delay_ns(&mut self, ns: u32) {
        self.0.advance(Duration::from_nanos(ns.into()));
    }
}

#[test]
fn the_delay_waits_add_the_jitter_after_a_wait_that_slept() {
    let clock = ManualClock::new();
    let quota = Quota::new(Rate::per_second(4)).burst(1).start_empty();
    let bucket = TokenBucket::try_new(quota, &clock).unwrap();
    let jitter = Jitter::up_to(ms(100), 9);
    let expected = draws(ms(100), 9, 2);
    let waited = bucket
        .jittered(&jitter)
        .acquire_with_delay(1, &mut Skip(&clock))
        .unwrap();
    assert_eq!(waited, ms(250) + expected[0]);
    let adjustable = AdjustableBucket::try_new(quota, &clock).unwrap();
    let waited = adjustable
        .jittered(&jitter)
        .acquire_with_delay(1, &mut Skip(&clock))
        .unwrap();
    assert_eq!(waited, ms(250) + expected[1]);
    assert_eq!(
        Duration::from_nanos(tollgate::Clock::now(&&clock)),
        ms(500) + expected[0] + expected[1]
    );
    // Served at once: no jitter.
    clock.advance(ms(250));
    assert_eq!(
        bucket
            .jittered(&jitter)
            .acquire_with_delay(1, &mut Skip(&clock)),
        Ok(Duration::ZERO)
    );
}

#[test]
fn the_blocking_waits_add_the_jitter_after_a_wait_that_slept() {
    // Real time, short: 20/s, burst 1, empty. Each wait is 50 ms, then its draw of up to
    // 40 ms; the time reported and the time passed both hold it.
    let quota = Quota::new(Rate::per_second(20)).burst(1).start_empty();
    let jitter = Jitter::up_to(ms(40), 21);
    let expected = draws(ms(40), 21, 2);
    let start = std::time::Instant::now();
    let bucket = TokenBucket::try_new(quota, StdClock).unwrap();
    let first = bucket.jittered(&jitter).acquire_blocking(1).unwrap();
    let adjustable = AdjustableBucket::try_new(quota, StdClock).unwrap();
    let second = adjustable
        .jittered(&jitter)
        .acquire_blocking_timeout(1, ms(500))
        .unwrap();
    let passed = start.elapsed();
    // The time reported runs from the wait's start to the tokens' instant (a head may take
    // ahead of it and sleep the rest), then the jitter: the bucket was built a moment before
    // the wait began, so the tokens' instant is up to that moment under 50 ms from the start.
    assert!(
        first + ms(1) >= ms(50) + expected[0],
        "{first:?} vs {expected:?}"
    );
    assert!(
        second + ms(1) >= ms(50) + expected[1],
        "{second:?} vs {expected:?}"
    );
    assert!(passed >= ms(100) + expected[0] + expected[1], "{passed:?}");
    // Served at once (refilled meanwhile): no jitter, no sleep.
    std::thread::sleep(ms(60));
    assert_eq!(
        bucket.jittered(&jitter).acquire_blocking(1),
        Ok(Duration::ZERO)
    );
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn keys_in_lockstep_act_spread_over_the_jitter_and_a_dropped_wait_gives_back() {
    use tollgate::{KeyedLimiter, WhenFull};
    let limiter = KeyedLimiter::try_new(
        Quota::new(Rate::per_second(1)).burst(1),
        TokioClock::new(),
        64,
        WhenFull::Refuse,
    )
    .unwrap();
    // Eight keys, each spent at 0: all due again at 1 s.
    for key in 0..8u32 {
        limiter.acquire(&key, 1).await.unwrap();
    }
    static SPREAD: Jitter = Jitter::up_to(Duration::from_millis(400), 23);
    let start = Instant::now();
    let limiter = &limiter;
    let waits = (0..8u32).map(|key| async move {
        let waited = limiter.jittered(&SPREAD).acquire(&key, 1).await.unwrap();
        (start.elapsed(), waited)
    });
    let mut acted = futures_join_all(waits).await;
    let mut expected = draws(ms(400), 23, 8);
    acted.sort();
    expected.sort();
    for ((at, waited), draw) in acted.iter().zip(&expected) {
        assert!(at.abs_diff(ms(1_000) + *draw) <= ms(1), "{acted:?}");
        assert!(waited.abs_diff(*at) <= ms(1), "{acted:?}");
    }
    assert!(acted.windows(2).any(|w| w[0].0 != w[1].0), "{acted:?}");

    // A wait given up during its jitter gives the key's token back: the key reads it again.
    static LONG: Jitter = Jitter::up_to(Duration::from_secs(10), 5);
    tokio::time::sleep(ms(1_000)).await; // key 0 holds its token again; spend it
    limiter.acquire(&0, 1).await.unwrap();
    let gave_up = timeout(ms(1_000) + ms(200), limiter.jittered(&LONG).acquire(&0, 1)).await;
    let first_draw = draws(Duration::from_secs(10), 5, 1)[0];
    assert!(first_draw > ms(200), "{first_draw:?}");
    assert!(gave_up.is_err(), "the jitter outlasted the timeout");
    assert_eq!(limiter.available(&0), 1);
    // Blocking waits on the same key take the jitter too, on a clock that runs.
    let threads = KeyedLimiter::try_new(
        Quota::new(Rate::per_second(50)).burst(1),
        StdClock,
        8,
        WhenFull::Refuse,
    )
    .unwrap();
    static SHORT: Jitter = Jitter::up_to(Duration::from_millis(30), 3);
    assert_eq!(
        threads.jittered(&SHORT).acquire_blocking(&"k", 1),
        Ok(Duration::ZERO)
    );
    let waited = threads.jittered(&SHORT).acquire_blocking(&"k", 1).unwrap();
    let draw = draws(ms(30), 3, 1)[0];
    assert!(waited + ms(1) >= ms(20) + draw, "{waited:?} {draw:?}");
}

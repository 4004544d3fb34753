//! Blocking waits: exact results on a `ManualClock`, and measured bounds on real threads with
//! `StdClock`.

use std::sync::Barrier;
use std::thread;
use std::time::{Duration, Instant};

use tollgate::{Denied, ManualClock, Quota, Rate, StdClock, TokenBucket};

fn ms(millis: u64) -> Duration {
    Duration::from_millis(millis)
}

#[test]
fn each_call_waits_for_its_own_tokens_and_sleeps_at_least_that_long() {
    // 100 tokens a second from empty, one thread: each call waits for its own tokens to accrue
    // after the previous call took its own.
    let bucket = TokenBucket::try_new(
        Quota::new(Rate::per_second(100)).burst(4).start_empty(),
        StdClock,
    )
    .unwrap();
    // (n, the least it can wait): the microseconds between calls count towards the next.
    let rows = [(1, ms(10)), (2, ms(20)), (0, ms(0)), (4, ms(40))];
    let start = Instant::now();
    let mut total = Duration::ZERO;
    for (n, least) in rows {
        let waited = bucket.acquire_blocking(n).unwrap();
        // Late only by scheduling: 150 ms is generous for a loaded two-core machine.
        assert!(
            waited + ms(1) >= least && waited < least + ms(150),
            "n = {n}: waited {waited:?}"
        );
        total += waited;
    }
    assert!(start.elapsed() >= total, "a sleep is never cut short");
    assert!(start.elapsed() >= ms(69));
}

#[test]
fn a_wait_beyond_the_timeout_fails_at_once_and_takes_nothing() {
    let clock = ManualClock::new();
    let bucket = TokenBucket::try_new(
        Quota::new(Rate::per_second(5)).burst(5).start_empty(),
        &clock,
    )
    .unwrap();
    // (n, timeout, result), all from an empty bucket at 0 s.
    let rows = [
        (
            1,
            ms(0),
            Err(Denied::Insufficient {
                retry_after: ms(200),
            }),
        ),
        (1, ms(199), Err(Denied::Insufficient { retry_after: ms(1) })),
        (
            5,
            ms(900),
            Err(Denied::Insufficient {
                retry_after: ms(100),
            }),
        ),
        (6, Duration::MAX, Err(Denied::ExceedsCapacity { burst: 5 })),
        (0, ms(0), Ok(Duration::ZERO)),
    ];
    let start = Instant::now();
    for (n, timeout, result) in rows {
        assert_eq!(
            bucket.acquire_blocking_timeout(n, timeout),
            result,
            "n = {n}"
        );
    }
    assert_eq!(
        bucket.acquire_blocking(6),
        Err(Denied::ExceedsCapacity { burst: 5 })
    );
    // Nothing slept (a generous bound: any one of the waits would be 200 ms) ...
    assert!(start.elapsed() < ms(100), "{:?}", start.elapsed());
    // ... and nothing was taken: one second from empty fills the bucket again.
    clock.advance(ms(1_000));
    assert_eq!(bucket.available(), 5);
}

/// Twenty threads at rate 5, burst 5: five at once, then one every 200 ms, the last at 3 s. Each
/// thread sleeps once, for its own reservation, so the threads' sleeps overlap.
#[test]
fn twenty_threads_at_rate_5_burst_5_finish_at_about_3_s_never_early_never_above_the_rate() {
    let start = Instant::now();
    let bucket = TokenBucket::try_new(Quota::new(Rate::per_second(5)).burst(5), StdClock).unwrap();
    let ready = Barrier::new(20);
    let mut finished: Vec<(Duration, Duration)> = thread::scope(|scope| {
        let threads: Vec<_> = (0..20)
            .map(|_| {
                scope.spawn(|| {
                    ready.wait();
                    let waited = bucket.acquire_blocking(1).unwrap();
                    (start.elapsed(), waited)
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    finished.sort();

    // Never early: the k-th thread to finish (from 0) cannot precede the k-th due instant, and
    // no thread returns before its own wait is over.
    for (k, &(at, waited)) in finished.iter().enumerate() {
        let due = ms(200 * (k as u64).saturating_sub(4));
        assert!(at >= due, "thread {k} finished at {at:?}, due at {due:?}");
        assert!(
            at >= waited,
            "thread {k} returned before its wait of {waited:?}"
        );
    }
    // About 3 s: never before (above), and late only by scheduling; 500 ms is a generous margin
    // for a loaded two-core machine.
    let last = finished[19].0;
    assert!(last < ms(3_500), "last finished at {last:?}");

    // Never more than the rate in any whole second after the first. Grants are 200 ms apart, so
    // only a thread woken over 200 ms late could push a sixth into a second.
    let mut per_second = [0; 4];
    for &(at, _) in &finished {
        per_second[(at.as_secs() as usize).min(3)] += 1;
    }
    assert!(
        per_second[1..].iter().all(|&count| count <= 5),
        "grants per second: {per_second:?}"
    );
    assert_eq!(per_second.iter().sum::<u32>(), 20);
}

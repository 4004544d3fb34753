//! Waits on several buckets at once under tokio's paused clock, real threads and `DelayNs`: the
//! whole waits for its latest part, a dropped wait gives every part back, and jitter only ever
//! lengthens a wait, the same way for a given seed.

#[path = "../support/mod.rs"]
mod support;
use support::ms;

use std::time::Duration;

use tokio::time::{timeout, Instant};
use tollgate::{Denied, Jitter, Limits, Pause, Quota, Rate, TokenBucket, TokioClock};

#[tokio::test(start_paused = true)]
async fn an_async_wait_on_limits_sleeps_until_the_latest_part() {
    let start = Instant::now();
    let clock = TokioClock::new();
    let requests = TokenBucket::try_new(Quota::new(Rate::per_second(2)).burst(2), clock).unwrap();
    let tokens = TokenBucket::try_new(Quota::new(Rate::per_second(100)).burst(100), clock).unwrap();
    let limits = Limits::new([&requests, &tokens]);
    // (costs, waited, served at ms)
    let rows = [
        ([1, 100], 0, 0),
        ([1, 50], 500, 500),    // tokens: 50 at 100/s
        ([1, 10], 100, 600),    // requests: one accrued by 500 ms; tokens 10 more
        ([2, 0], 900, 1_500),   // requests: 0.2 left at 600 ms, 1.8 more at 2 a second
        ([0, 100], 100, 1_600), // tokens: 90 refilled meanwhile, 10 more
    ];
    for (costs, waited, at) in rows {
        assert_eq!(limits.acquire(costs).await, Ok(ms(waited)), "{costs:?}");
        assert_eq!(start.elapsed(), ms(at), "{costs:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_dropped_wait_on_limits_gives_every_part_back() {
    let clock = TokioClock::new();
    let requests = TokenBucket::try_new(Quota::new(Rate::per_second(1)).burst(5), clock).unwrap();
    let tokens =
        TokenBucket::try_new(Quota::new(Rate::per_second(100)).start_empty(), clock).unwrap();
    let limits = Limits::new([&requests, &tokens]);
    // The request is at hand, the tokens a second away: given up after 300 ms.
    assert!(timeout(ms(300), limits.acquire([1, 100])).await.is_err());
    assert_eq!(requests.available(), 5);
    assert_eq!(tokens.available(), 30);
    // Beyond the timeout: fails at once, takes nothing.
    assert_eq!(
        limits.acquire_timeout([1, 100], ms(200)).await,
        Err(Denied::insufficient(ms(500)))
    );
    assert_eq!(requests.available(), 5);
}

#[tokio::test(start_paused = true)]
async fn a_pause_holds_every_waiter_and_jitter_spreads_them_after_it() {
    let start = Instant::now();
    let clock = TokioClock::new();
    let bucket = TokenBucket::try_new(Quota::new(Rate::per_second(100)).burst(100), clock).unwrap();
    assert_eq!(
        bucket.pause_for(ms(1_000)),
        Pause::Paused {
            resumes_after: ms(1_000)
        }
    );
    let jitter_max = ms(50);
    let limits = Limits::new([&bucket]).with_jitter(Jitter::up_to(jitter_max, 9));
    // Three waiters at once: each reserves at its first poll, in order.
    let waiter = || async {
        let waited = limits.acquire([1]).await.unwrap();
        (waited, start.elapsed())
    };
    let woke = tokio::join!(waiter(), waiter(), waiter());
    // Due 10 ms apart from 1 010 ms (empty at the instant, not full); each wakes its own
    // jitter after its instant, never before, and the same seed gives the same jitter.
    let replay = Jitter::up_to(jitter_max, 9);
    for (i, (waited, at)) in [woke.0, woke.1, woke.2].into_iter().enumerate() {
        let due = ms(1_010 + 10 * i as u64);
        let jitter = replay.next();
        assert!(jitter <= jitter_max);
        assert_eq!(waited, due + jitter, "waiter {i}");
        // tokio's timer counts whole milliseconds: the wake may round up by one.
        assert!(
            at >= due + jitter && at <= due + jitter + ms(1),
            "waiter {i}: {at:?}"
        );
    }
}

#[test]
fn a_blocking_wait_on_limits_sleeps_once_for_the_latest_part() {
    let clock = tollgate::StdClock;
    let requests =
        TokenBucket::try_new(Quota::new(Rate::per_second(1_000)).burst(1), clock).unwrap();
    let tokens = TokenBucket::try_new(Quota::new(Rate::per_second(20)).burst(1), clock).unwrap();
    let limits = Limits::new([&requests, &tokens]);
    assert_eq!(limits.acquire_blocking([1, 1]), Ok(Duration::ZERO));
    let started = std::time::Instant::now();
    let waited = limits.acquire_blocking([1, 1]).unwrap();
    let took = started.elapsed();
    // The token bucket's 50 ms, less the microseconds between the calls, measured on the
    // bucket's clock; a loaded 2-core machine may add scheduling delay.
    assert!(waited > ms(40) && waited < ms(250), "{waited:?}");
    assert!(took >= waited && took < ms(250), "{took:?}");
    assert_eq!(
        limits.acquire_blocking([2, 1]),
        Err(Denied::ExceedsCapacity { burst: 1 })
    );
}

#[tokio::test(start_paused = true)]
async fn a_bucket_named_twice_in_limits_waits_once_for_both_costs() {
    let start = Instant::now();
    let clock = TokioClock::new();
    let bucket = TokenBucket::try_new(Quota::new(Rate::per_second(10)).burst(5), clock).unwrap();
    let limits = Limits::new([&bucket, &bucket]);
    assert_eq!(limits.acquire([2, 2]).await, Ok(Duration::ZERO));
    // One token left: three more for a call of 2 + 2 take 300 ms, with nobody else in line
    // and behind another waiter alike.
    let (first, second) = tokio::join!(limits.acquire([2, 2]), limits.acquire([1, 0]));
    assert_eq!(first, Ok(ms(300)));
    assert_eq!(second, Ok(ms(400)));
    assert_eq!(start.elapsed(), ms(400));
}

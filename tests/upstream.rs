//! Quotas as upstreams publish them, pinned with a `ManualClock`: pauses after a 429, several
//! buckets taken from all or none, costs per bucket, the longest wait, and a race on threads.

mod support;
use support::ms;

use std::sync::Barrier;
use std::thread;
use std::time::Duration;

use tollgate::{Denied, Limits, ManualClock, Pause, Quota, Rate, TokenBucket, Word};

const MS: u64 = 1_000_000;

/// Tokens granted one at a time until the first denial.
fn drain<C: tollgate::Clock, W: Word>(bucket: &TokenBucket<C, W>) -> u32 {
    let mut granted = 0;
    while bucket.try_acquire(1).is_ok() {
        granted += 1;
    }
    granted
}

/// Builds a bucket on one word or the other.
type Make<'a> = &'a dyn Fn(&ManualClock, Quota) -> Box<dyn Bucket + '_>;

fn on_the_wide_word(test: fn(Make)) {
    test(&|clock, quota| Box::new(TokenBucket::<_, u64>::try_new_with_word(quota, clock).unwrap()));
}

/// The calls these tests make, on either word.
trait Bucket {
    fn try_acquire(&self, n: u32) -> Result<(), Denied>;
    fn pause_for(&self, duration: Duration) -> Pause;
    fn pause_until(&self, ticks: u64) -> Pause;
    fn drain(&self) -> u32;
}

impl<W: Word> Bucket for TokenBucket<&ManualClock, W> {
    fn try_acquire(&self, n: u32) -> Result<(), Denied> {
        TokenBucket::try_acquire(self, n)
    }
    fn pause_for(&self, duration: Duration) -> Pause {
        TokenBucket::pause_for(self, duration)
    }
    fn pause_until(&self, ticks: u64) -> Pause {
        TokenBucket::pause_until(self, ticks)
    }
    fn drain(&self) -> u32 {
        drain(self)
    }
}

#[test]
fn a_pause_grants_nothing_before_its_instant_and_resumes_empty() {
    // The 32-bit word holds pauses of one burst's refill: see the clamping test.
    on_the_wide_word(|make| {
        let clock = ManualClock::new();
        let bucket = make(&clock, Quota::new(Rate::per_second(10)).burst(10));
        assert_eq!(
            bucket.pause_for(Duration::from_secs(2)),
            Pause::Paused {
                resumes_after: Duration::from_secs(2)
            }
        );
        // (ms since the pause, n, expected): nothing before the instant, then 10 a second from
        // empty, never the burst.
        let rows: [(u64, u32, Result<(), Denied>); 8] = [
            (0, 1, Err(Denied::insufficient(ms(2_100)))),
            (1_999, 1, Err(Denied::insufficient(ms(101)))),
            (2_000, 1, Err(Denied::insufficient(ms(100)))),
            (2_099, 1, Err(Denied::insufficient(ms(1)))),
            (2_100, 1, Ok(())),
            (2_100, 1, Err(Denied::insufficient(ms(100)))),
            (2_500, 4, Ok(())),
            (2_500, 1, Err(Denied::insufficient(ms(100)))),
        ];
        for (at, n, expected) in rows {
            clock.set(at * MS);
            assert_eq!(bucket.try_acquire(n), expected, "t = {at} ms");
        }
        // After the pause the bucket refills as usual: full a second later.
        clock.set(3_500 * MS);
        assert_eq!(bucket.drain(), 10);
    });
}

#[test]
fn a_pause_never_shortens_a_longer_one_and_never_adds_tokens() {
    on_the_wide_word(|make| {
        let clock = ManualClock::new();
        let bucket = make(&clock, Quota::new(Rate::per_second(10)).burst(10));
        assert!(matches!(bucket.pause_for(ms(5_000)), Pause::Paused { .. }));
        clock.set(1_000 * MS);
        // A shorter pause leaves the longer one as it is.
        assert_eq!(
            bucket.pause_for(ms(2_000)),
            Pause::AlreadyLonger {
                resumes_after: ms(4_000)
            }
        );
        // A longer one extends it.
        assert_eq!(
            bucket.pause_until(7_000 * MS),
            Pause::Paused {
                resumes_after: ms(6_000)
            }
        );
        clock.set(7_099 * MS);
        assert!(bucket.try_acquire(1).is_err());
        clock.set(7_100 * MS);
        assert_eq!(bucket.drain(), 1);
        // A zero pause empties the bucket now; on an empty bucket it changes nothing.
        clock.set(7_600 * MS);
        assert_eq!(
            bucket.pause_for(Duration::ZERO),
            Pause::Paused {
                resumes_after: Duration::ZERO
            }
        );
        assert_eq!(
            bucket.pause_for(Duration::ZERO),
            Pause::AlreadyLonger {
                resumes_after: Duration::ZERO
            }
        );
        assert!(bucket.try_acquire(1).is_err());
        // An instant already past empties the bucket now too.
        clock.set(8_600 * MS);
        assert!(matches!(bucket.pause_until(0), Pause::Paused { .. }));
        assert_eq!(bucket.drain(), 0);
    });
}

#[test]
fn a_pause_longer_than_the_word_holds_is_clamped_and_says_so() {
    let clock = ManualClock::new();
    let bucket =
        TokenBucket::<_, u32>::try_new_with_word(Quota::new(Rate::per_second(10)), &clock).unwrap();
    let max = bucket.max_pause();
    // On the 32-bit word: one burst's refill (its debt window is one burst, so that an idle
    // past the horizon never reads deeper than that), 1 s here.
    assert!(
        max.abs_diff(Duration::from_secs(1)) <= Duration::from_micros(1),
        "{max:?}"
    );
    let pause = bucket.pause_for(Duration::from_secs(86_400));
    assert!(matches!(pause, Pause::Clamped { .. }), "{pause:?}");
    // Read to the clock's resolution: the pause lasts max_pause, give or take one quantum.
    let resumes = pause.resumes_after();
    assert!(
        resumes <= max && max - resumes <= bucket.resolution(),
        "{resumes:?} {max:?}"
    );
    clock.advance(resumes);
    assert!(bucket.try_acquire(1).is_err());
    clock.advance(ms(100) + bucket.resolution());
    assert!(bucket.try_acquire(1).is_ok());

    // The 64-bit word holds decades.
    let wide = TokenBucket::try_new(Quota::new(Rate::per_second(10)), &clock).unwrap();
    assert!(wide.max_pause() > Duration::from_secs(10 * 365 * 86_400));
    assert!(matches!(
        wide.pause_for(Duration::from_secs(86_400)),
        Pause::Paused { .. }
    ));
}

#[test]
fn reservations_made_during_a_pause_queue_after_it() {
    let clock = ManualClock::new();
    let bucket = TokenBucket::try_new(Quota::new(Rate::per_second(10)).burst(10), &clock).unwrap();
    let _ = bucket.pause_for(Duration::from_secs(1));
    let first = bucket.reserve(2, Duration::MAX).unwrap();
    let second = bucket.reserve(1, Duration::MAX).unwrap();
    assert_eq!(first.wait(), ms(1_200));
    assert_eq!(second.wait(), ms(1_300));
}

#[test]
fn limits_take_from_all_or_from_none() {
    let clock = ManualClock::new();
    // 60 requests a minute with a burst of 3, and 90 000 tokens a minute with a burst of 3 000.
    let requests = TokenBucket::try_new(Quota::new(Rate::per_minute(60)).burst(3), &clock).unwrap();
    let tokens =
        TokenBucket::try_new(Quota::new(Rate::per_minute(90_000)).burst(3_000), &clock).unwrap();
    let limits = Limits::new([&requests, &tokens]);
    // (ms, [requests, tokens] cost, expected, requests left, tokens left)
    type Row = (u64, [u32; 2], Result<(), Denied>, u64, u64);
    let rows: [Row; 9] = [
        (0, [1, 1_000], Ok(()), 2, 2_000),
        (0, [1, 1_500], Ok(()), 1, 500),
        // tokens short by 500 at 1 500/s: the request taken first goes back
        (0, [1, 1_000], Err(Denied::insufficient(ms(334))), 1, 500),
        (0, [1, 500], Ok(()), 0, 0),
        // requests short (1 s) and tokens short (10/1500 s): the longer wait
        (0, [1, 10], Err(Denied::insufficient(ms(1_000))), 0, 0),
        (1_000, [1, 1_500], Ok(()), 0, 0),
        // a cost above a burst never fits, and takes nothing even for a moment
        (
            2_000,
            [1, 3_001],
            Err(Denied::ExceedsCapacity { burst: 3_000 }),
            1,
            1_500,
        ),
        (
            2_000,
            [4, 1],
            Err(Denied::ExceedsCapacity { burst: 3 }),
            1,
            1_500,
        ),
        (2_000, [0, 1_500], Ok(()), 1, 0),
    ];
    for (at, costs, expected, requests_left, tokens_left) in rows {
        clock.set(at * MS);
        let got = limits.try_acquire(costs).map_err(|denied| match denied {
            // Retry times rounded up to the millisecond, to keep the table readable.
            Denied::Insufficient { retry_after } => {
                Denied::insufficient(ms(retry_after.get().as_nanos().div_ceil(1_000_000) as u64))
            }
            other => other,
        });
        assert_eq!(got, expected, "t = {at} ms, costs {costs:?}");
        assert_eq!(
            (requests.available(), tokens.available()),
            (requests_left, tokens_left),
            "t = {at} ms, costs {costs:?}"
        );
    }
}

#[test]
fn the_retry_after_is_the_longest_wait_and_is_then_enough() {
    let clock = ManualClock::new();
    let a = TokenBucket::try_new(Quota::new(Rate::per_second(10)).start_empty(), &clock).unwrap();
    let b = TokenBucket::try_new(Quota::new(Rate::per_second(1)).start_empty(), &clock).unwrap();
    let c = TokenBucket::try_new(Quota::new(Rate::per_second(4)).start_empty(), &clock).unwrap();
    let limits = Limits::new([&a, &b, &c]);
    // The first bucket denies with 100 ms; the second's 1 s is the answer.
    let Err(Denied::Insufficient { retry_after }) = limits.try_acquire([1, 1, 1]) else {
        panic!("granted from empty buckets");
    };
    assert_eq!(retry_after, Duration::from_secs(1));
    clock.advance(retry_after.get() - Duration::from_nanos(1));
    assert!(limits.try_acquire([1, 1, 1]).is_err());
    clock.advance(Duration::from_nanos(1));
    assert_eq!(limits.try_acquire([1, 1, 1]), Ok(()));
    // A paused bucket sets the wait for all.
    let _ = c.pause_for(Duration::from_secs(30));
    clock.advance(Duration::from_secs(5));
    assert_eq!(
        limits.try_acquire([1, 1, 1]),
        Err(Denied::insufficient(Duration::from_millis(25_250)))
    );
    assert_eq!((a.available(), b.available()), (10, 1)); // given back whole
}

#[test]
fn a_reservation_on_limits_acts_at_the_latest_part_and_cancels_whole() {
    let clock = ManualClock::new();
    let requests = TokenBucket::try_new(Quota::new(Rate::per_second(1)).burst(2), &clock).unwrap();
    let tokens =
        TokenBucket::try_new(Quota::new(Rate::per_second(1_000)).start_empty(), &clock).unwrap();
    let limits = Limits::new([&requests, &tokens]);
    // Requests are at hand; tokens take 500 ms: the whole waits 500 ms. The request is held
    // until then, counted against the burst at 500 ms: of the 2 the bucket will hold then, one
    // is the held request's, so it holds half a token now.
    let reservation = limits.reserve([1, 500], Duration::from_secs(1)).unwrap();
    assert_eq!(reservation.wait(), ms(500));
    assert_eq!(requests.available(), 0);
    // Beyond max_wait: nothing taken, and the retry is the excess of the longest wait.
    assert_eq!(
        limits
            .reserve([1, 1_000], Duration::from_millis(200))
            .map(|r| r.wait()),
        Err(Denied::insufficient(ms(1_300)))
    );
    assert_eq!(requests.available(), 0);
    // Cancelled before its instant: both parts go back, the one granted at once too.
    clock.advance(ms(200));
    limits.cancel(reservation);
    assert_eq!(requests.available(), 2);
    assert_eq!(tokens.available(), 200);
    // Cancelled at its instant: the caller has acted, nothing goes back.
    let reservation = limits.reserve([1, 100], Duration::from_secs(1)).unwrap();
    assert_eq!(reservation.wait(), Duration::ZERO);
    limits.cancel(reservation);
    assert_eq!((requests.available(), tokens.available()), (1, 100));
}

#[test]
fn a_part_held_while_its_bucket_would_have_filled_gives_back_only_what_the_burst_allows() {
    let clock = ManualClock::new();
    let fast = TokenBucket::try_new(Quota::new(Rate::per_second(10)).burst(10), &clock).unwrap();
    let slow = TokenBucket::try_new(Quota::new(Rate::per_second(1)).start_empty(), &clock).unwrap();
    let limits = Limits::new([&fast, &slow]);
    // fast: 4 taken at once from a full bucket, held until slow is due in a second: by then fast
    // refills 10, so it may hold only 6 beside the 4 then, and is 4 in debt now.
    let reservation = limits.reserve([4, 1], Duration::from_secs(2)).unwrap();
    assert_eq!(fast.available(), 0);
    assert_eq!(
        fast.try_acquire(1).map_err(|d| d.retry_after()),
        Err(Some(ms(500)))
    );
    // 300 ms later fast is 1 in debt; without the reservation it would have been full since.
    clock.advance(ms(300));
    limits.cancel(reservation);
    assert_eq!(fast.available(), 10);
    assert_eq!(drain(&fast), 10);
}

#[test]
fn limits_under_contention_grant_all_or_none_and_lose_no_token() {
    // A frozen clock: no refill, so every token is accounted for exactly.
    let clock = ManualClock::new();
    let a = TokenBucket::try_new(Quota::new(Rate::per_second(1)).burst(1_000), &clock).unwrap();
    let b = TokenBucket::try_new(Quota::new(Rate::per_second(1)).burst(3_000), &clock).unwrap();
    let limits = Limits::new([&a, &b]);
    let threads = 4;
    let barrier = Barrier::new(threads);
    // Each thread asks for [1, 1], [1, 7] or [2, 1] in turn; the second bucket runs out first
    // for some callers while the first still has tokens, so denials give back under contention.
    let granted: Vec<[u64; 2]> = thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (limits, barrier) = (&limits, &barrier);
                s.spawn(move || {
                    barrier.wait();
                    let mut granted = [0u64; 2];
                    for i in 0..3_000 {
                        let costs = [[1, 1], [1, 7], [2, 1]][(i + t) % 3];
                        if limits.try_acquire(costs).is_ok() {
                            granted[0] += u64::from(costs[0]);
                            granted[1] += u64::from(costs[1]);
                        }
                    }
                    granted
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let total = granted
        .iter()
        .fold([0, 0], |t, g| [t[0] + g[0], t[1] + g[1]]);
    // Every token a bucket lost was granted through the limits: none lost to a denial.
    assert_eq!(a.available(), 1_000 - total[0]);
    assert_eq!(b.available(), 3_000 - total[1]);
    // And one of them ran dry: as many as the burst allowed were granted.
    assert!(a.available() < 2 || b.available() < 7, "{total:?}");
}

#[test]
fn a_pause_races_acquires_on_threads_without_a_grant_after_it() {
    // Threads acquire while another pauses; every grant that follows the pause in time comes
    // after its instant. The clock is frozen during the race, so after the pause lands nothing
    // can be granted at all.
    let clock = ManualClock::new();
    let bucket =
        TokenBucket::try_new(Quota::new(Rate::per_second(1)).burst(10_000), &clock).unwrap();
    let barrier = Barrier::new(3);
    let paused = std::sync::atomic::AtomicBool::new(false);
    let granted_after_pause = thread::scope(|s| {
        let workers: Vec<_> = (0..2)
            .map(|_| {
                let (bucket, barrier, paused) = (&bucket, &barrier, &paused);
                s.spawn(move || {
                    barrier.wait();
                    let mut after = 0;
                    for _ in 0..20_000 {
                        // Acquire: the pause's store happens before a load that sees it.
                        let was_paused = paused.load(std::sync::atomic::Ordering::Acquire);
                        if bucket.try_acquire(1).is_ok() && was_paused {
                            after += 1;
                        }
                    }
                    after
                })
            })
            .collect();
        barrier.wait();
        thread::yield_now();
        let _ = bucket.pause_for(Duration::from_secs(60));
        // Release: pairs with the workers' Acquire loads.
        paused.store(true, std::sync::atomic::Ordering::Release);
        workers.into_iter().map(|w| w.join().unwrap()).sum::<u32>()
    });
    assert_eq!(granted_after_pause, 0);
    assert_eq!(bucket.available(), 0);
}

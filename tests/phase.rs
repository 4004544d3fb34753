//! Out of lockstep: workers that split one quota, phased by their index, never start two
//! requests within one provider period; replicas with a random phase spread their first
//! requests over one period. In tokio's paused time and on a `ManualClock`, never by sleeping.

use std::time::Duration;

use tollgate::{
    AdjustableBucket, Clock, ConfigError, Denied, ManualClock, Quota, Rate, TokenBucket, TokioClock,
};

/// One try of a bucket.
type Take<'a> = dyn Fn() -> Result<(), Denied> + 'a;

/// The design documents' geocoding job: a provider allowing 1 request a second, less 5 %,
/// split over three workers (one request every 60/19 s each).
fn geocoding() -> Quota {
    Quota::new(Rate::per_second(1).minus_percent(5).divided_by(3)).start_empty()
}

/// The most instants of `starts` (sorted) in any window `[t, t + window)`.
fn max_in_any_window(starts: &[Duration], window: Duration) -> usize {
    (0..starts.len())
        .map(|i| {
            starts[i..]
                .iter()
                .take_while(|&&s| s < starts[i] + window)
                .count()
        })
        .max()
        .unwrap_or(0)
}

/// Runs `k` workers as tokio tasks in paused time for `span`, each on its own bucket built
/// from `quota_of(i)`, each acquiring one token per request; returns every start, sorted.
fn run_workers(k: u16, span: Duration, quota_of: impl Fn(u16) -> Quota) -> Vec<Duration> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    runtime.block_on(async {
        let start = tokio::time::Instant::now();
        let tasks: Vec<_> = (0..k)
            .map(|i| {
                let bucket = TokenBucket::try_new(quota_of(i), TokioClock::new()).unwrap();
                tokio::spawn(async move {
                    let mut starts = Vec::new();
                    loop {
                        bucket.acquire(1).await.unwrap();
                        let at = start.elapsed();
                        if at > span {
                            return starts;
                        }
                        starts.push(at);
                    }
                })
            })
            .collect();
        let mut starts = Vec::new();
        for task in tasks {
            starts.extend(task.await.unwrap());
        }
        starts.sort();
        starts
    })
}

#[test]
fn three_phased_workers_never_start_two_requests_within_one_second() {
    let starts = run_workers(3, Duration::from_secs(60), |i| geocoding().phase(i, 3));
    // 0.95/s in all: the n-th start at n × 60/57 s, from the third (a period in) to the
    // 57th (60 s).
    assert_eq!(starts.len(), 55, "{starts:?}");
    assert_eq!(
        max_in_any_window(&starts, Duration::from_secs(1)),
        1,
        "{starts:?}"
    );
    // Evenly spaced: 60/57 s apart, to tokio's millisecond.
    for pair in starts.windows(2) {
        let gap = pair[1] - pair[0];
        assert!(
            gap >= Duration::from_millis(1_051) && gap <= Duration::from_millis(1_054),
            "{pair:?}"
        );
    }
}

#[test]
fn without_a_phase_the_three_workers_start_together() {
    // The lockstep, which the phase removes: the test above fails on it.
    let starts = run_workers(3, Duration::from_secs(60), |_| geocoding());
    assert_eq!(max_in_any_window(&starts, Duration::from_secs(1)), 3);
    let starts = run_workers(3, Duration::from_secs(60), |_| geocoding().phase(0, 3));
    assert_eq!(max_in_any_window(&starts, Duration::from_secs(1)), 3);
}

#[test]
fn phased_workers_stay_apart_for_a_day_on_a_manual_clock() {
    // Each worker reserves its next request and acts at its instant: a day of requests.
    let clock = ManualClock::new();
    let workers: Vec<_> = (0..3)
        .map(|i| TokenBucket::try_new(geocoding().phase(i, 3), &clock).unwrap())
        .collect();
    let mut starts: Vec<u64> = Vec::new();
    let day = 86_400_000_000_000u64;
    loop {
        // The worker whose next token is due first acts then.
        let (at, who) = workers
            .iter()
            .enumerate()
            .map(|(i, w)| {
                let wait = match w.try_acquire(1) {
                    Ok(()) => unreachable!("nothing is due before the clock is moved to it"),
                    Err(Denied::Insufficient { retry_after }) => retry_after,
                    Err(other) => panic!("{other}"),
                };
                (clock.now() + wait.get().as_nanos() as u64, i)
            })
            .min()
            .unwrap();
        if at > day {
            break;
        }
        clock.set(at);
        assert_eq!(workers[who].try_acquire(1), Ok(()));
        starts.push(at);
    }
    // The n-th start at n × 60/57 s, from the third to the last within the day.
    assert_eq!(starts.len() as u64, day / 1_000_000_000 * 57 / 60 - 2);
    // Every gap is 60/57 s to the bucket's resolution: never within the provider's second.
    let resolution = workers[0].resolution().as_nanos() as u64;
    for pair in starts.windows(2) {
        let gap = pair[1] - pair[0];
        assert!(gap.abs_diff(1_052_631_579) <= 2 * resolution, "{pair:?}");
    }
}

#[test]
fn a_phase_applies_from_any_start_fill_and_on_both_words() {
    let rate = Rate::per_second(3); // a token every 333 ms
                                    // (quota, the first request granted at once?, the wait for the next token)
    let rows = [
        // Full with a burst of one: worker 1 of 3 starts a third of a token short.
        (Quota::new(rate).burst(1).phase(1, 3), false, 111_111_111),
        (Quota::new(rate).burst(1).phase(2, 3), false, 222_222_222),
        // Full with a burst of two: one token now, the next a third of a token later.
        (Quota::new(rate).burst(2).phase(1, 3), true, 111_111_111),
        // Empty: a period and the phase.
        (
            Quota::new(rate).burst(1).start_empty().phase(1, 3),
            false,
            444_444_444,
        ),
        (Quota::new(rate).burst(1).start_empty(), false, 333_333_333),
    ];
    for (quota, at_once, wait_ns) in rows {
        let clock = ManualClock::new();
        let wide = TokenBucket::<_, u64>::try_new_with_word(quota, &clock).unwrap();
        let narrow = TokenBucket::<_, u32>::try_new_with_word(quota, &clock).unwrap();
        let wait = |denied: Result<(), Denied>| match denied {
            Err(Denied::Insufficient { retry_after }) => retry_after.get().as_nanos() as i128,
            other => panic!("{quota}: {other:?}"),
        };
        let takes: [(&str, &Take); 2] = [
            ("u64", &|| wide.try_acquire(1)),
            ("u32", &|| narrow.try_acquire(1)),
        ];
        for (word, take) in takes {
            let first = take();
            assert_eq!(first.is_ok(), at_once, "{quota} on {word}");
            let next = if at_once { take() } else { first };
            // The 32-bit word's unit may be as coarse as its resolution.
            assert!(
                (wait(next) - wait_ns).abs() <= 1_000,
                "{quota} on {word}: {next:?}"
            );
        }
        // A const-built bucket applies the phase at its first use.
        let constant = TokenBucket::new(quota, &clock);
        clock.advance(Duration::from_secs(5));
        let first = constant.try_acquire(1);
        assert_eq!(first.is_ok(), at_once, "{quota}, const");
        let next = if at_once {
            constant.try_acquire(1)
        } else {
            first
        };
        assert!((wait(next) - wait_ns).abs() <= 1_000, "{quota}, const");
    }
}

#[test]
fn a_phase_reads_back_from_the_bucket_and_out_of_range_is_refused() {
    let clock = ManualClock::new();
    for quota in [
        Quota::new(Rate::per_second(4)).start_empty().phase(1, 3),
        Quota::new(Rate::per_second(4)).burst(3).phase(2, 5),
        Quota::new(Rate::per_second(4))
            .burst(3)
            .start_with(1)
            .phase(3, 4),
        Quota::new(Rate::per_minute(171)).start_empty().phase(2, 3),
    ] {
        let bucket = TokenBucket::try_new(quota, &clock).unwrap();
        let back = bucket.quota();
        assert_eq!(
            (
                back.rate(),
                back.burst_size(),
                back.start_fill(),
                back.phase_fraction()
            ),
            (
                quota.rate(),
                quota.burst_size(),
                quota.start_fill(),
                quota.phase_fraction()
            )
        );
        let (index, parts) = quota.phase_fraction();
        assert!(
            bucket
                .quota()
                .to_string()
                .ends_with(&format!(", phase {index} of {parts}")),
            "{}",
            bucket.quota()
        );
    }
    for (index, parts) in [(3, 3), (0, 0), (7, 2)] {
        let quota = Quota::new(Rate::per_second(4)).phase(index, parts);
        assert_eq!(
            TokenBucket::try_new(quota, &clock).err(),
            Some(ConfigError::PhaseOutOfRange { index, parts })
        );
    }
    // Zero of any parts is no phase at all.
    let quota = Quota::new(Rate::per_second(4)).start_empty();
    let bucket = TokenBucket::try_new(quota.phase(0, 9), &clock).unwrap();
    assert_eq!(bucket.quota().phase_fraction(), (0, 1));
    assert_eq!(bucket.quota().start_fill(), 0);
}

#[test]
fn an_adjustable_bucket_keeps_its_phase() {
    let clock = ManualClock::new();
    let quota = Quota::new(Rate::per_second(3))
        .burst(1)
        .start_empty()
        .phase(2, 3);
    let bucket = AdjustableBucket::try_new(quota, &clock).unwrap();
    let Err(Denied::Insufficient { retry_after }) = bucket.try_acquire(1) else {
        panic!("an empty bucket granted");
    };
    assert!(
        retry_after.get().as_nanos().abs_diff(555_555_555) <= 1_000,
        "{retry_after:?}"
    );
}

#[test]
fn fifty_replicas_with_a_random_phase_spread_their_first_requests_over_one_period() {
    // The first design document's step 5: replicas deployed at once, each with its share of
    // 100/s less 10 % (here split fifty ways: 1.8/s, a token every 556 ms), started empty.
    let rate = Rate::per_second(100).minus_percent(10).divided_by(50);
    let period = Duration::from_nanos(555_555_556);
    let first_requests = |quota_of: &dyn Fn(u64) -> Quota| {
        let clock = ManualClock::new();
        let mut firsts: Vec<Duration> = (0..50u64)
            .map(|replica| {
                let bucket = TokenBucket::try_new(quota_of(replica), &clock).unwrap();
                bucket.reserve(1, Duration::MAX).unwrap().wait()
            })
            .collect();
        firsts.sort();
        firsts
    };
    let lockstep = first_requests(&|_| Quota::new(rate).start_empty());
    assert_eq!(max_in_any_window(&lockstep, Duration::from_millis(1)), 50);

    // Seeds a fleet could use: each replica's own number, hashed by the phase.
    let spread = first_requests(&|replica| Quota::new(rate).start_empty().random_phase(replica));
    // Every first request within the second period, none before the first token accrued.
    assert!(spread[0] >= period, "{spread:?}");
    assert!(*spread.last().unwrap() < 2 * period, "{spread:?}");
    // Spread over it: the first and last a near-whole period apart, and no tenth of the
    // period holds a quarter of the fleet (five on average: uniform draws, fixed seeds).
    assert!(
        *spread.last().unwrap() - spread[0] >= period * 9 / 10,
        "{spread:?}"
    );
    let most = max_in_any_window(&spread, period / 10);
    assert!(most <= 12, "{most} in a tenth of a period: {spread:?}");
    // And distinct: no two within a millisecond (1/556 of the period; fixed seeds).
    assert!(
        max_in_any_window(&spread, Duration::from_micros(100)) <= 2,
        "{spread:?}"
    );
}

#[test]
fn a_phased_bucket_in_a_static_is_built_at_compile_time() {
    static CLOCK: ManualClock = ManualClock::new();
    const PER_WORKER: Quota =
        Quota::new(Rate::per_second(1).minus_percent(5).divided_by(3)).start_empty();
    static WORKERS: [TokenBucket<&ManualClock>; 3] = [
        TokenBucket::new(PER_WORKER.phase(0, 3), &CLOCK),
        TokenBucket::new(PER_WORKER.phase(1, 3), &CLOCK),
        TokenBucket::new(PER_WORKER.phase(2, 3), &CLOCK),
    ];
    // Each starts at its first use: all three now.
    let firsts: Vec<u128> = WORKERS
        .iter()
        .map(|w| match w.try_acquire(1) {
            Err(Denied::Insufficient { retry_after }) => retry_after.get().as_nanos(),
            other => panic!("{other:?}"),
        })
        .collect();
    let resolution = WORKERS[0].resolution().as_nanos();
    for (first, want) in firsts
        .iter()
        .zip([3_157_894_737u128, 4_210_526_316, 5_263_157_895])
    {
        assert!(first.abs_diff(want) <= 2 * resolution, "{firsts:?}");
    }
}

//! Quota changes on a bucket in use: the fill kept as-is and capped, the new rate from the
//! change on, and the bound across changes under threads.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::Duration;

use tollgate::{AdjustableBucket, ConfigError, Denied, ManualClock, Quota, Rate, SetQuotaError};

const MS: u64 = 1_000_000;

fn drain(bucket: &AdjustableBucket<&ManualClock>) -> u64 {
    let mut granted = 0;
    while bucket.try_acquire(1).is_ok() {
        granted += 1;
    }
    granted
}

#[test]
fn a_change_keeps_the_tokens_caps_them_by_the_new_burst_and_accrues_at_the_new_rate() {
    let clock = ManualClock::new();
    let bucket =
        AdjustableBucket::try_new(Quota::new(Rate::per_second(10)).burst(10), &clock).unwrap();
    // (ms, action, tokens available after it)
    enum Step {
        Take(u32),
        Set(Quota),
    }
    use Step::{Set, Take};
    let rows = [
        (0, Take(7), 3),
        // A larger burst and rate: the 3 tokens are kept, not scaled up to 30.
        (0, Set(Quota::new(Rate::per_second(100)).burst(100)), 3),
        // (The 32-bit word holds 100/s rounded down by under a millionth: the tenth token is
        // there a few nanoseconds after 100 ms.)
        (101, Take(0), 13),
        // A smaller burst: 13 capped at 5.
        (100, Set(Quota::new(Rate::per_second(1)).burst(5)), 5),
        (100, Take(5), 0),
        (1_099, Take(0), 0),
        (1_101, Take(0), 1),
        // Half a token (500 ms at 1/s) becomes half a token at 4/s: 125 ms more for a whole.
        (1_600, Set(Quota::new(Rate::per_second(4)).burst(8)), 1),
        (1_724, Take(0), 1),
        (1_726, Take(0), 2),
        (5_000, Take(0), 8),
    ];
    for (at, step, available) in rows {
        clock.set(at * MS);
        match step {
            Take(n) => assert_eq!(bucket.try_acquire(n), Ok(()), "t = {at} ms"),
            Set(quota) => bucket.set_quota(quota).unwrap(),
        }
        assert_eq!(bucket.available(), available, "t = {at} ms");
    }
    assert_eq!(
        bucket.try_acquire(9),
        Err(Denied::ExceedsCapacity { burst: 8 })
    );
}

#[test]
fn debt_and_pauses_are_kept_across_a_change() {
    let clock = ManualClock::new();
    let bucket =
        AdjustableBucket::try_new(Quota::new(Rate::per_second(10)).burst(10), &clock).unwrap();
    assert_eq!(
        bucket.pause_for(Duration::from_secs(1)).resumes_after(),
        Duration::from_secs(1)
    );
    // The pause of 1 s at 10/s stays a pause of 1 s at 100/s: debt is kept in time.
    bucket
        .set_quota(Quota::new(Rate::per_second(100)).burst(10))
        .unwrap();
    // 1 s and one token's 10 ms, rounded up to the word's resolution.
    let Err(Denied::Insufficient { retry_after }) = bucket.try_acquire(1) else {
        panic!("granted in debt");
    };
    assert!(
        retry_after >= Duration::from_millis(1_010)
            && retry_after - Duration::from_millis(1_010) <= Duration::from_micros(10),
        "{retry_after:?}"
    );
}

#[test]
fn a_quota_the_clock_cannot_hold_changes_nothing() {
    let clock = ManualClock::new();
    let bucket =
        AdjustableBucket::try_new(Quota::new(Rate::per_second(10)).burst(10), &clock).unwrap();
    assert_eq!(
        bucket.set_quota(Quota::new(Rate::per_second(0))),
        Err(SetQuotaError::Config(ConfigError::ZeroRate))
    );
    assert_eq!(bucket.burst(), 10);
    assert_eq!(drain(&bucket), 10);
}

#[test]
fn grants_stay_within_each_segments_burst_and_rate_while_threads_acquire() {
    // A control thread moves the clock in 1 ms steps and changes the quota every 20 ms among
    // three; workers acquire all along. Over the run, grants may not exceed the sum over each
    // segment of its burst plus its rate times its length.
    let quotas = [
        (Quota::new(Rate::per_second(1_000)).burst(50), 1_000, 50),
        (Quota::new(Rate::per_second(200)).burst(5), 200, 5),
        (Quota::new(Rate::per_second(5_000)).burst(200), 5_000, 200),
    ];
    let clock = ManualClock::new();
    let bucket = AdjustableBucket::try_new(quotas[0].0, &clock).unwrap();
    let granted = AtomicU64::new(0);
    let attempts = AtomicU64::new(0);
    let done = AtomicBool::new(false);
    let bound = thread::scope(|s| {
        for n in [1, 2, 3] {
            let (bucket, granted, attempts, done) = (&bucket, &granted, &attempts, &done);
            s.spawn(move || {
                // Relaxed: a stop flag and counters; the counts are read after join.
                while !done.load(Ordering::Relaxed) {
                    if bucket.try_acquire(n).is_ok() {
                        granted.fetch_add(u64::from(n), Ordering::Relaxed);
                    }
                    attempts.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        let (mut bound, mut accrued, mut segment, mut start_ms) = (0u64, 0u64, 0usize, 0u64);
        for ms in 1..=600u64 {
            clock.advance(Duration::from_millis(1));
            // Let the workers try a few times at each instant, however busy the machine is
            // (for at most 50 ms of real time an instant).
            let seen = attempts.load(Ordering::Relaxed);
            let waited = std::time::Instant::now();
            while attempts.load(Ordering::Relaxed) < seen + 12
                && waited.elapsed() < Duration::from_millis(50)
            {
                thread::yield_now();
            }
            if ms % 20 == 0 {
                let (_, rate, burst) = quotas[segment];
                bound += burst + rate * (ms - start_ms) / 1_000;
                accrued += rate * (ms - start_ms) / 1_000;
                segment = (segment + 1) % quotas.len();
                while bucket.set_quota(quotas[segment].0).is_err() {}
                start_ms = ms;
            }
        }
        let (_, rate, burst) = quotas[segment];
        bound += burst + rate * (600 - start_ms) / 1_000;
        accrued += rate * (600 - start_ms) / 1_000;
        done.store(true, Ordering::Relaxed);
        (bound, accrued)
    });
    let (bound, accrued) = bound;
    let granted = granted.load(Ordering::Relaxed);
    assert!(granted <= bound, "granted {granted} > bound {bound}");
    // The workers kept up: over half of what accrued at the segments' rates was granted.
    assert!(
        granted * 2 > accrued,
        "granted {granted}, accrued {accrued}"
    );
}

//! Quota changes on a bucket in use: the fill kept as-is and capped, the new rate from the
//! change on, and the bound across changes under threads; on both words, each laid out as a
//! `TokenBucket` on the same word.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::Duration;

use tollgate::{
    AdjustableBucket, AdjustableWord, ConfigError, Denied, ManualClock, Quota, Rate, SetQuotaError,
    TokenBucket,
};

const MS: u64 = 1_000_000;

mod support;
use support::counter::Counter;

/// Each test below runs on both words.
macro_rules! on_both_words {
    ($($test:ident),* $(,)?) => {$(
        mod $test {
            #[test]
            fn u32() {
                super::$test::<u32>();
            }
            #[test]
            fn u64() {
                super::$test::<u64>();
            }
        }
    )*};
}

on_both_words!(
    a_change_keeps_the_tokens_caps_them_by_the_new_burst_and_accrues_at_the_new_rate,
    debt_and_pauses_are_kept_across_a_change,
    a_quota_the_clock_cannot_hold_changes_nothing,
    grants_stay_within_each_segments_burst_and_rate_while_threads_acquire,
    the_accessors_are_those_of_a_token_bucket_on_the_same_word,
    a_pause_outlasts_a_change_to_a_finer_reading,
);

fn drain<W: AdjustableWord>(bucket: &AdjustableBucket<&ManualClock, W>) -> u64 {
    let mut granted = 0;
    while bucket.try_acquire(1).is_ok() {
        granted += 1;
    }
    granted
}

fn a_change_keeps_the_tokens_caps_them_by_the_new_burst_and_accrues_at_the_new_rate<
    W: AdjustableWord,
>() {
    let clock = ManualClock::new();
    let bucket = AdjustableBucket::<_, W>::try_new_with_word(
        Quota::new(Rate::per_second(10)).burst(10),
        &clock,
    )
    .unwrap();
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
        // there a few nanoseconds after 100 ms; the 64-bit word holds it exactly.)
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

fn debt_and_pauses_are_kept_across_a_change<W: AdjustableWord>() {
    let clock = ManualClock::new();
    let bucket = AdjustableBucket::<_, W>::try_new_with_word(
        Quota::new(Rate::per_second(10)).burst(10),
        &clock,
    )
    .unwrap();
    assert_eq!(
        bucket.pause_for(Duration::from_secs(1)).resumes_after(),
        Duration::from_secs(1)
    );
    // The pause of 1 s at 10/s stays a pause of 1 s at 100/s: debt is kept in time, up to
    // the new quota's deepest debt (decades on the 64-bit word; one burst's refill, 100 ms, on
    // the 32-bit word).
    bucket
        .set_quota(Quota::new(Rate::per_second(100)).burst(10))
        .unwrap();
    let kept = Duration::from_secs(1).min(bucket.max_pause());
    let expected_kept = if W::BITS == 64 { 1_000 } else { 100 };
    assert_eq!(kept.as_millis(), expected_kept);
    // The pause kept and one token's 10 ms, rounded up to the word's resolution.
    let Err(Denied::Insufficient { retry_after }) = bucket.try_acquire(1) else {
        panic!("granted in debt");
    };
    let want = kept + Duration::from_millis(10);
    assert!(
        retry_after.get() >= want && retry_after.get() - want <= Duration::from_micros(10),
        "{retry_after:?}"
    );
}

/// A pause under a quota read to a coarse resolution, then a change to one read finer: nothing
/// is granted, and nothing reserved falls due, before the pause ends (or the new quota's
/// deepest debt, where that is shorter). The coarse reading reaches the pause's end up to a
/// step early and grants nothing until it moves past it; the change must not count from there.
/// On clocks whose layouts read to several ticks: a microsecond counter, and 32 768 Hz.
fn a_pause_outlasts_a_change_to_a_finer_reading<W: AdjustableWord>() {
    pause_then_change::<W, 1_000_000>();
    pause_then_change::<W, 32_768>();
    pause_then_change::<W, 1_000_000_000>();
}

fn pause_then_change<W: AdjustableWord, const HZ: u64>() {
    // (rate, burst) pairs whose readings differ, both ways round.
    let quotas = [
        (92_297, 6),
        (76_815, 3),
        (7, 1),
        (1_000, 10),
        (3_333, 50),
        (65_537, 9),
    ];
    let tick = Duration::from_nanos(1_000_000_000 / HZ).max(Duration::from_nanos(1));
    for &(from_rate, from_burst) in &quotas {
        for &(to_rate, to_burst) in &quotas {
            for pause_us in [1, 999, 1_003, 401_000, 401_017, 1_234_567] {
                let clock = Counter::<HZ>::default();
                clock.0.set(u64::MAX - 1_000);
                let from = Quota::new(Rate::per_second(from_rate)).burst(from_burst);
                let Ok(bucket) = AdjustableBucket::<_, W>::try_new_with_word(from, &clock) else {
                    continue; // a tick accruing more than the burst: refused, not this test's
                };
                let held = bucket
                    .pause_for(Duration::from_micros(pause_us))
                    .resumes_after();
                let to = Quota::new(Rate::per_second(to_rate)).burst(to_burst);
                if bucket.set_quota(to).is_err() {
                    continue;
                }
                // The pause, cut to the new quota's deepest debt (read down to the tick).
                let kept = held.min(bucket.max_pause().saturating_sub(tick));
                let case = format!(
                    "{HZ} Hz, {from_rate}/{from_burst} -> {to_rate}/{to_burst}, {pause_us} us"
                );
                // (Refused where the pause holds the new quota's deepest debt already.)
                if let Ok(r) = bucket.reserve(1, Duration::from_secs(3_600)) {
                    assert!(
                        r.wait() >= kept,
                        "{case}: due after {:?} < {kept:?}",
                        r.wait()
                    );
                    bucket.cancel(r);
                }
                // The last tick of the pause, then polled tick by tick over it.
                let ticks = (kept.as_nanos() * u128::from(HZ) / 1_000_000_000) as u64;
                let start = clock.0.get();
                for back in (1..=ticks.min(200)).rev() {
                    clock.0.set(start.wrapping_add(ticks - back));
                    assert!(
                        bucket.try_acquire(1).is_err(),
                        "{case}: granted {back} ticks before the pause ends"
                    );
                }
            }
        }
    }
}

fn a_quota_the_clock_cannot_hold_changes_nothing<W: AdjustableWord>() {
    let clock = ManualClock::new();
    let bucket = AdjustableBucket::<_, W>::try_new_with_word(
        Quota::new(Rate::per_second(10)).burst(10),
        &clock,
    )
    .unwrap();
    assert_eq!(
        bucket.set_quota(Quota::new(Rate::per_second(0))),
        Err(SetQuotaError::Config(ConfigError::ZeroRate))
    );
    assert_eq!(bucket.burst(), 10);
    assert_eq!(drain(&bucket), 10);
}

fn grants_stay_within_each_segments_burst_and_rate_while_threads_acquire<W: AdjustableWord>() {
    // A control thread moves the clock in 1 ms steps and changes the quota every 20 ms among
    // three; workers acquire all along. Over the run, grants may not exceed the sum over each
    // segment of its burst plus its rate times its length.
    let quotas = [
        (Quota::new(Rate::per_second(1_000)).burst(50), 1_000, 50),
        (Quota::new(Rate::per_second(200)).burst(5), 200, 5),
        (Quota::new(Rate::per_second(5_000)).burst(200), 5_000, 200),
    ];
    let clock = ManualClock::new();
    let bucket = AdjustableBucket::<_, W>::try_new_with_word(quotas[0].0, &clock).unwrap();
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

fn the_accessors_are_those_of_a_token_bucket_on_the_same_word<W: AdjustableWord>() {
    // Each quota as the first and after a change: the README's LLM quota, a nanosecond clock's
    // billion a second, a rate no word holds exactly, a slow one and a tiny burst.
    let quotas = [
        Quota::new(Rate::per_minute(90_000)).burst(7_500),
        Quota::new(Rate::per_second(1_000_000_000)).burst(1_000_000),
        Quota::new(Rate::per_second(549_637)).burst(100),
        Quota::new(Rate::per_day(3)).burst(2),
        Quota::new(Rate::per_second(50_001)).burst(10),
    ];
    let clock = ManualClock::new();
    let adjustable = AdjustableBucket::<_, W>::try_new_with_word(quotas[4], &clock).unwrap();
    for quota in quotas {
        // A quota the word cannot hold is refused alike, and changes nothing.
        let plain = match TokenBucket::<_, W>::try_new_with_word(quota, &clock) {
            Ok(plain) => plain,
            Err(error) => {
                let refused = AdjustableBucket::<_, W>::try_new_with_word(quota, &clock);
                assert_eq!(refused.err(), Some(error), "{quota}");
                let before = adjustable.tick_rate();
                assert_eq!(
                    adjustable.set_quota(quota),
                    Err(SetQuotaError::Config(error))
                );
                assert_eq!(adjustable.tick_rate(), before);
                continue;
            }
        };
        let fresh = AdjustableBucket::<_, W>::try_new_with_word(quota, &clock).unwrap();
        adjustable.set_quota(quota).unwrap();
        for bucket in [&fresh, &adjustable] {
            assert_eq!(bucket.idle_horizon(), plain.idle_horizon(), "{quota}");
            assert_eq!(bucket.resolution(), plain.resolution(), "{quota}");
            assert_eq!(
                bucket.resolution_ticks(),
                plain.resolution_ticks(),
                "{quota}"
            );
            assert_eq!(bucket.tick_rate(), plain.tick_rate(), "{quota}");
            assert_eq!(bucket.is_exact(), plain.is_exact(), "{quota}");
            assert_eq!(bucket.max_pause(), plain.max_pause(), "{quota}");
            assert_eq!(bucket.burst(), quota.burst_size(), "{quota}");
        }
    }
}

/// The README's LLM quota (90 000 tokens a minute, burst 7 500) on the 64-bit word: left alone
/// a week after being drained, it reads full, before and after a quota change; its horizon is
/// that of a `TokenBucket`, over a century. The 32-bit word's is an hour or more.
#[test]
fn the_llm_quota_reads_full_after_a_week_on_the_64_bit_word() {
    const WEEK: Duration = Duration::from_secs(7 * 86_400);
    const CENTURY: Duration = Duration::from_secs(100 * 31_557_600);
    let llm = Quota::new(Rate::per_minute(90_000)).burst(7_500);
    let clock = ManualClock::new();
    let bucket = AdjustableBucket::<_, u64>::try_new_with_word(llm, &clock).unwrap();
    assert!(
        bucket.idle_horizon() >= CENTURY,
        "{:?}",
        bucket.idle_horizon()
    );
    for quota in [llm, Quota::new(Rate::per_minute(60_000)).burst(5_000), llm] {
        bucket.set_quota(quota).unwrap();
        // (The fill is kept across the change, capped: drained, whatever it held.)
        drain(&bucket);
        assert_eq!(bucket.available(), 0);
        clock.advance(WEEK);
        assert_eq!(bucket.available(), quota.burst_size(), "{quota}");
    }
    // And the default word is the 64-bit one here.
    let default = AdjustableBucket::try_new(llm, &clock).unwrap();
    assert_eq!(default.idle_horizon(), bucket.idle_horizon());
    let narrow = AdjustableBucket::<_, u32>::try_new_with_word(llm, &clock).unwrap();
    assert!(narrow.idle_horizon() >= Duration::from_secs(3_600));
    assert!(narrow.idle_horizon() < WEEK);
}

/// The horizons the README quotes for this type (`--nocapture` prints them).
#[test]
fn horizons_on_both_words() {
    let clock = ManualClock::new();
    for (name, quota) in [
        (
            "90 000/min, burst 7 500",
            Quota::new(Rate::per_minute(90_000)).burst(7_500),
        ),
        (
            "10^9/s, burst 10^6",
            Quota::new(Rate::per_second(1_000_000_000)).burst(1_000_000),
        ),
    ] {
        let wide = AdjustableBucket::<_, u64>::try_new_with_word(quota, &clock).unwrap();
        let narrow = AdjustableBucket::<_, u32>::try_new_with_word(quota, &clock).unwrap();
        let years = |d: Duration| d.as_secs() as f64 / 31_557_600.0;
        println!(
            "{name}: 64-bit word {:.0} years ({:?} resolution), 32-bit word {:?} ({:?} resolution)",
            years(wide.idle_horizon()),
            wide.resolution(),
            narrow.idle_horizon(),
            narrow.resolution(),
        );
        assert!(wide.idle_horizon() >= Duration::from_secs(100 * 31_557_600));
    }
}

/// `reserve` and `cancel` on an adjustable bucket, by `TokenBucket`'s rule: tokens go back only
/// while the reservation is not due and nothing came after it (a reservation, a take, a pause
/// or a quota change); a request above the burst fails at once; a wait past `max_wait` takes
/// nothing. Rows of (ms on the clock, what, the answer).
fn reservations_follow_the_token_buckets_cancel_rule<W: AdjustableWord>() {
    let clock = ManualClock::new();
    let bucket = AdjustableBucket::<_, W>::try_new_with_word(
        Quota::new(Rate::per_second(5)).burst(2),
        &clock,
    )
    .unwrap();
    // A token bucket on the same word, on its own clock, for the answers where the words differ.
    let twin_clock = ManualClock::new();
    let twin = TokenBucket::<_, W>::try_new_with_word(
        Quota::new(Rate::per_second(5)).burst(2),
        &twin_clock,
    )
    .unwrap();
    let ms = Duration::from_millis;
    // Both tokens now, then a reservation due at 400 ms.
    assert_eq!(bucket.reserve(2, ms(0)).unwrap().wait(), ms(0));
    let later = bucket.reserve(2, ms(401)).unwrap();
    near(later.wait(), ms(400));
    let _twins = (
        twin.reserve(2, ms(0)).unwrap(),
        twin.reserve(2, ms(401)).unwrap(),
    );
    // Over the burst: at once; past `max_wait` (or, on the 32-bit word, past its debt bound of
    // one burst): refused as the token bucket refuses, nothing taken.
    assert_eq!(
        bucket.reserve(3, Duration::MAX),
        Err(Denied::ExceedsCapacity { burst: 2 })
    );
    match (bucket.reserve(1, ms(500)), twin.reserve(1, ms(500))) {
        (
            Err(Denied::Insufficient { retry_after }),
            Err(Denied::Insufficient { retry_after: twins }),
        ) => near(retry_after.get(), twins.get()),
        other => panic!("{other:?}"),
    }
    // Not due, nothing after it: given back whole.
    clock.advance(ms(100));
    bucket.cancel(later);
    assert_eq!(bucket.available(), 0);
    // 200 ms and a step of the 32-bit word's reading: one token accrued since the first two.
    clock.advance(ms(100) + Duration::from_micros(2));
    assert_eq!(bucket.available(), 1);

    // Due already: the caller has acted, nothing goes back.
    let due = bucket.reserve(1, ms(0)).unwrap();
    let pending = bucket.reserve(1, ms(201)).unwrap();
    near(pending.wait(), ms(200));
    clock.advance(ms(200)); // 400 ms: `pending` is due
    bucket.cancel(due);
    bucket.cancel(pending);
    near(bucket.reserve(1, ms(201)).unwrap().wait(), ms(200));

    // Something after it: nothing goes back, as the token bucket gives nothing back.
    clock.advance(ms(1_000));
    twin_clock.advance(ms(1_000) + ms(400) + Duration::from_micros(2));
    let (first, second) = (
        bucket.reserve(2, ms(0)).unwrap(),
        bucket.reserve(1, ms(201)).unwrap(),
    );
    let third = bucket.reserve(1, ms(401)).unwrap();
    let (twin_first, twin_second) = (
        twin.reserve(2, ms(0)).unwrap(),
        twin.reserve(1, ms(201)).unwrap(),
    );
    let twin_third = twin.reserve(1, ms(401)).unwrap();
    near(second.wait(), twin_second.wait());
    near(third.wait(), twin_third.wait());
    bucket.cancel(second);
    twin.cancel(twin_second);
    let after = |r: Result<Duration, Denied>| match r {
        Ok(wait) => wait,
        Err(Denied::Insufficient { retry_after }) => retry_after.get(),
        Err(other) => panic!("{other:?}"),
    };
    near(
        after(bucket.reserve(1, Duration::MAX).map(|r| r.wait())),
        after(twin.reserve(1, Duration::MAX).map(|r| r.wait())),
    );
    drop((first, third, twin_first, twin_third));
}

/// Go's `TestReserveSetLimit` and `TestReserveSetLimitCancel`, with this crate's documented
/// differences: debt is kept in time across `set_quota` (Go keeps it in tokens, so a faster
/// rate shortens a wait already owed), and a cancel after a quota change gives nothing back
/// (the word was converted; Go gives the tokens back at the new rate).
fn gos_set_limit_vectors_with_debt_kept_in_time<W: AdjustableWord>() {
    let ms = Duration::from_millis;
    for cancel in [false, true] {
        let clock = ManualClock::new();
        let bucket = AdjustableBucket::<_, W>::try_new_with_word(
            Quota::new(Rate::per_second(5)).burst(2),
            &clock,
        )
        .unwrap();
        assert_eq!(bucket.reserve(2, ms(0)).unwrap().wait(), ms(0));
        let r = bucket.reserve(2, ms(401)).unwrap();
        near(r.wait(), ms(400)); // Go: t4
        clock.advance(ms(200));
        bucket
            .set_quota(Quota::new(Rate::per_second(10)).burst(2))
            .unwrap();
        if cancel {
            bucket.cancel(r); // a quota change came after it: nothing back (Go: two tokens)
                              // Go: due at t3; here the debt still ends at 400 ms, then two tokens at 10/s.
            near(bucket.reserve(2, ms(1_000)).unwrap().wait(), ms(400));
        } else {
            // Go: due at t4 (the debt shortened by the faster rate); here at 500 ms.
            near(bucket.reserve(1, ms(1_000)).unwrap().wait(), ms(300));
        }
    }
}

/// `a` is `b` to within two microseconds: the 32-bit word reads a nanosecond clock to about a
/// microsecond, and a quota change rounds a word's debt up by a unit rather than down.
fn near(a: Duration, b: Duration) {
    let gap = a.abs_diff(b);
    assert!(gap <= Duration::from_micros(2), "{a:?} against {b:?}");
}

on_both_words!(reservations_follow_the_token_buckets_cancel_rule);

/// Go's vectors run into debt of two bursts, which only the 64-bit word holds (the 32-bit
/// word's debt bound is one burst).
#[test]
fn gos_set_limit_vectors_on_the_64_bit_word() {
    gos_set_limit_vectors_with_debt_kept_in_time::<u64>();
}

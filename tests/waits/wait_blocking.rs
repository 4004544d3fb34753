//! Blocking waits: exact results on a `ManualClock`, and measured bounds on real threads with
//! `StdClock`.

#[path = "../support/mod.rs"]
mod support;
use support::ms;

use std::sync::Barrier;
use std::thread;
use std::time::{Duration, Instant};

use tollgate::{Clock, Denied, ManualClock, Quota, Rate, StdClock, TokenBucket};

#[test]
fn each_call_waits_for_its_own_tokens_and_sleeps_at_least_that_long() {
    // 100 tokens a second from empty, one thread: each call waits for its own tokens to accrue
    // after the previous call took its own.
    let built = Instant::now();
    let bucket = TokenBucket::try_new(
        Quota::new(Rate::per_second(100)).burst(4).start_empty(),
        StdClock,
    )
    .unwrap();
    // (n, the least it can wait). A wake-up that comes late leaves the tokens accrued
    // meanwhile for the next call, so each call's own floor holds only over the run: by the
    // end of each call, the time since the bucket was built covers every token taken so far.
    let rows = [(1, ms(10)), (2, ms(20)), (0, ms(0)), (4, ms(40))];
    let start = Instant::now();
    let mut total = Duration::ZERO;
    let mut earned = Duration::ZERO;
    for (n, least) in rows {
        let waited = bucket.acquire_blocking(n).unwrap();
        earned += least;
        // Late only by scheduling: 150 ms is generous for a loaded two-core machine.
        assert!(waited < least + ms(150), "n = {n}: waited {waited:?}");
        assert!(
            built.elapsed() + ms(1) >= earned,
            "n = {n}: {earned:?} of tokens taken {:?} after the start",
            built.elapsed()
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
        (1, ms(0), Err(Denied::insufficient(ms(200)))),
        (1, ms(199), Err(Denied::insufficient(ms(1)))),
        (5, ms(900), Err(Denied::insufficient(ms(100)))),
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

/// A thread whose timeout passes while it heads the line (a pause pushed its token beyond it)
/// leaves having taken nothing: the thread behind it and a newcomer are served when their own
/// tokens accrue. Real time; the margins are for a loaded two-core machine.
#[test]
fn a_thread_timing_out_in_line_leaves_nothing_behind() {
    let start = Instant::now();
    // One token every 200 ms, none at hand.
    let bucket = TokenBucket::try_new(
        Quota::new(Rate::per_second(5)).burst(1).start_empty(),
        StdClock,
    )
    .unwrap();
    thread::scope(|scope| {
        // Its token is due at 200 ms, within its 300 ms: it joins the line at its head.
        let giving_up = scope.spawn(|| {
            let result = bucket.acquire_blocking_timeout(1, ms(300));
            (result, start.elapsed())
        });
        thread::sleep(ms(20));
        let live = scope.spawn(|| (bucket.acquire_blocking(1), start.elapsed()));
        thread::sleep(ms(20));
        // The upstream says 429: nothing for 600 ms, then one token every 200 ms.
        bucket.pause_for(ms(600));
        let paused_at = start.elapsed();
        let (result, at) = giving_up.join().unwrap();
        assert!(
            matches!(result, Err(Denied::Insufficient { .. })),
            "{result:?}"
        );
        assert!(at < paused_at + ms(400), "gave up at {at:?}");
        let newcomer = bucket.acquire_blocking(1);
        let newcomer_at = start.elapsed();
        let (live_result, live_at) = live.join().unwrap();
        live_result.unwrap();
        newcomer.unwrap();
        // Due 800 ms and 1 000 ms after the pause; a token stranded by the thread that gave up
        // would have put them at 1 000 ms and 1 200 ms.
        let (live_at, newcomer_at) = (live_at - paused_at, newcomer_at - paused_at);
        assert!(
            live_at >= ms(795) && live_at < ms(950),
            "live at {live_at:?}"
        );
        assert!(
            newcomer_at >= ms(995) && newcomer_at < ms(1_150),
            "newcomer at {newcomer_at:?}"
        );
    });
}

/// Real time, read late: the nanoseconds since it was made, rounded up to the next half
/// millisecond. A thread woken at a token's instant reads up to half a millisecond past it,
/// as a thread woken late by the kernel's timer slack and its scheduling does, only more.
struct ReadLate(Instant);

impl Clock for ReadLate {
    const TICKS_PER_SECOND: u64 = 1_000_000_000;
    fn now(&self) -> u64 {
        let ns = self.0.elapsed().as_nanos() as u64;
        ns.div_ceil(500_000) * 500_000
    }
}

/// Sixteen threads at 1 000/s with a burst of one, each taking a token at a time: a head that
/// took at its wake-up would lose the time it woke late to the burst's cap, every token (the
/// issue's 927–930/s on an honest clock; here, read up to half a millisecond late, about
/// 800/s). The head takes up to two milliseconds ahead, so the threads get the rate, and
/// never more than the burst and the rate allow. Real time: the best of three half-second
/// runs, with a margin for a loaded two-core machine.
#[test]
fn sixteen_threads_at_a_thousand_per_second_with_a_burst_of_one_keep_the_schedule() {
    let mut best = 0.0f64;
    for _ in 0..3 {
        let bucket = TokenBucket::try_new(
            Quota::new(Rate::per_second(1_000)).burst(1),
            ReadLate(Instant::now()),
        )
        .unwrap();
        let start = Instant::now();
        let grants: u64 = thread::scope(|scope| {
            let threads: Vec<_> = (0..16)
                .map(|_| {
                    scope.spawn(|| {
                        let mut grants = 0u64;
                        while start.elapsed() < ms(500) {
                            bucket.acquire_blocking(1).unwrap();
                            grants += 1;
                        }
                        grants
                    })
                })
                .collect();
            threads.into_iter().map(|t| t.join().unwrap()).sum()
        });
        // Each thread's last grant may come after the half second; count to the last.
        let elapsed = start.elapsed().as_secs_f64();
        // The burst and 1 000/s, on a clock read up to half a millisecond ahead of `start`.
        assert!(
            grants as f64 <= 1.0 + 1_000.0 * (elapsed + 0.000_5),
            "{grants} in {elapsed} s"
        );
        best = best.max(grants as f64 / elapsed);
        if best >= 985.0 {
            break;
        }
    }
    assert!(best >= 985.0, "{best:.1}/s");
}

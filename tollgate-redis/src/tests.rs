//! The script and the local bucket agree: the same (time, request) sequence gives the same
//! decisions, the same `retry_after`, the same waits and the same tokens left. The script takes
//! its `now` from the test here, and only here, through a path that exists in the crate's own
//! tests alone; the local bucket reads a `ManualClock`. The script's clock handling (a server
//! clock stepped back or forward) is pinned here the same way.
//!
//! `cargo test --release --features redis --lib redis::` runs them, on a `redis-server` each
//! test starts on a free loopback port.

use std::format;
use std::time::Duration;
use std::vec::Vec;

use super::{Client, Error, RedisBucket, RedisConnection, RedisReservation, Source};
use tollgate::wait::GiveBack;
use tollgate::{Denied, ManualClock, Quota, Rate, Reservation, TokenBucket};

/// The servers of `tests/redis/`, started the same way.
#[allow(dead_code)]
mod support {
    use std::format;
    use std::string::{String, ToString};
    use std::vec::Vec;
    include!("../tests/redis/support.rs");
}
use support::{runtime, serial, RedisServer};

/// A realistic Redis `TIME` in microseconds (November 2023), so the script's sums run near
/// their real magnitudes.
const T0_US: u64 = 1_700_000_000_000_000;

#[derive(Clone, Copy, Debug)]
enum Step {
    Take(u32),
    Reserve(u32, Duration),
    /// Cancels the oldest reservation still held, if any.
    CancelOldest,
    /// Cancels the newest reservation still held, if any.
    CancelNewest,
    /// Gives the oldest reservation still held back as a wait dropped during its jitter does
    /// (the refund rule: due or not, less what the cap would have cut since), if any.
    RefundOldest,
    /// The same for the newest.
    RefundNewest,
    Level,
}

#[derive(Debug, PartialEq)]
enum Seen {
    Granted { remaining: u64 },
    Reserved { wait: Duration },
    Denied(Denied),
    Level(u64),
}

/// Runs `steps` at `(microseconds after T0, step)` on both buckets; returns what both saw.
async fn run_both(
    server: &RedisServer,
    key: &str,
    quota: Quota,
    steps: &[(u64, Step)],
) -> Vec<Seen> {
    server.command(&["DEL", key]);
    let clock = ManualClock::starting_at(T0_US * 1_000);
    let local = TokenBucket::try_new(quota, &clock).expect("local quota");
    assert_eq!(
        local.resolution(),
        Duration::from_nanos(1),
        "{quota}: the local bucket must read its clock to the nanosecond to compare"
    );
    let client =
        RedisConnection::connect_lazy(Client::open(server.url()).expect("client")).expect("conn");
    // Lazy, so that the first call, which applies the start fill, runs at T0 as the local
    // bucket's construction does.
    let shared = RedisBucket::builder(&client, key, quota)
        .timeout(Duration::from_secs(2))
        .connect_lazy()
        .expect("connect");
    shared.pin_script_now(Some(T0_US));
    assert_eq!(
        shared.level().await.expect("level").remaining,
        local.available()
    );
    let mut held: Vec<(Reservation, RedisReservation)> = Vec::new();
    let mut seen = Vec::new();
    for &(at_us, step) in steps {
        clock.set((T0_US + at_us) * 1_000);
        shared.pin_script_now(Some(T0_US + at_us));
        let (mine, theirs) = match step {
            Step::Take(n) => {
                let mine = match local.try_acquire(n) {
                    Ok(()) => Seen::Granted {
                        remaining: local.available(),
                    },
                    Err(denied) => Seen::Denied(denied),
                };
                let theirs = match shared.try_acquire(n).await {
                    Ok(grant) => {
                        assert_eq!(grant.source, Source::Redis);
                        Seen::Granted {
                            remaining: grant.level.expect("Redis reports its level").remaining,
                        }
                    }
                    Err(error) => Seen::Denied(denied(error)),
                };
                (mine, theirs)
            }
            Step::Reserve(n, max_wait) => {
                let mine = local.reserve(n, max_wait);
                let theirs = shared.reserve(n, max_wait).await;
                match (mine, theirs) {
                    (Ok(mine), Ok(theirs)) => {
                        let seen = (
                            Seen::Reserved { wait: mine.wait() },
                            Seen::Reserved {
                                wait: theirs.wait(),
                            },
                        );
                        held.push((mine, theirs));
                        seen
                    }
                    (Ok(mine), Err(error)) => (
                        Seen::Reserved { wait: mine.wait() },
                        Seen::Denied(denied(error)),
                    ),
                    (Err(mine), Ok(theirs)) => (
                        Seen::Denied(mine),
                        Seen::Reserved {
                            wait: theirs.wait(),
                        },
                    ),
                    (Err(mine), Err(error)) => (Seen::Denied(mine), Seen::Denied(denied(error))),
                }
            }
            Step::CancelOldest | Step::CancelNewest | Step::RefundOldest | Step::RefundNewest => {
                if !held.is_empty() {
                    let index = match step {
                        Step::CancelOldest | Step::RefundOldest => 0,
                        _ => held.len() - 1,
                    };
                    let (mine, theirs) = held.remove(index);
                    if matches!(step, Step::RefundOldest | Step::RefundNewest) {
                        local.give_back(mine);
                        let refund = shared.inner.give_back(theirs, true);
                        refund.await.expect("refund");
                    } else {
                        local.cancel(mine);
                        shared.cancel(theirs).await.expect("cancel");
                    }
                }
                levels(&local, &shared).await
            }
            Step::Level => levels(&local, &shared).await,
        };
        assert_eq!(
            mine, theirs,
            "{quota}: local and Redis disagree at +{at_us} µs on {step:?}"
        );
        seen.push(mine);
    }
    seen
}

async fn levels(local: &TokenBucket<&ManualClock>, shared: &RedisBucket) -> (Seen, Seen) {
    let theirs = shared.level().await.expect("level").remaining;
    (Seen::Level(local.available()), Seen::Level(theirs))
}

fn denied(error: Error) -> Denied {
    match error {
        Error::Denied {
            denied,
            source: Source::Redis,
        } => denied,
        other => panic!("Redis failed: {other}"),
    }
}

#[test]
fn the_twelve_requests_of_the_tour() {
    let _serial = serial();
    let server = RedisServer::start();
    // 2 per second, burst 5, a request every 200 ms: the burst, then two a second.
    let quota = Quota::new(Rate::per_second(2)).burst(5);
    let steps: Vec<_> = (0..12).map(|i| (i * 200_000, Step::Take(1))).collect();
    let seen = runtime().block_on(run_both(&server, "tour", quota, &steps));
    let granted: Vec<bool> = seen
        .iter()
        .map(|seen| matches!(seen, Seen::Granted { .. }))
        .collect();
    let (y, n) = (true, false);
    assert_eq!(granted, [y, y, y, y, y, y, y, n, y, n, y, n]);
    assert_eq!(
        seen[7],
        Seen::Denied(Denied::insufficient(Duration::from_millis(100)))
    );
}

#[test]
fn reservations_queue_and_cancel_by_the_same_rule() {
    let _serial = serial();
    let server = RedisServer::start();
    let quota = Quota::new(Rate::per_second(5)).burst(2).start_empty();
    let second = Duration::from_secs(1);
    let rows = [
        // (µs, step, what both must see)
        (
            0,
            Step::Reserve(1, second),
            Seen::Reserved { wait: ms(200) },
        ),
        (
            0,
            Step::Reserve(1, second),
            Seen::Reserved { wait: ms(400) },
        ),
        (
            0,
            Step::Reserve(2, ms(500)),
            Seen::Denied(insufficient(ms(300))),
        ),
        (
            0,
            Step::Reserve(2, second),
            Seen::Reserved { wait: ms(800) },
        ),
        // The first is overtaken by both later ones: nothing comes back.
        (100_000, Step::CancelOldest, Seen::Level(0)),
        // The last one is overtaken by nobody: its two tokens come back.
        (100_000, Step::CancelNewest, Seen::Level(0)),
        (100_000, Step::Take(1), Seen::Denied(insufficient(ms(500)))),
        (700_000, Step::Level, Seen::Level(1)),
        // Due already: nothing comes back.
        (700_000, Step::CancelOldest, Seen::Level(1)),
        (700_000, Step::Take(1), Seen::Granted { remaining: 0 }),
        (
            700_000,
            Step::Take(3),
            Seen::Denied(Denied::ExceedsCapacity { burst: 2 }),
        ),
        (5_000_000, Step::Take(0), Seen::Granted { remaining: 2 }),
    ];
    let steps: Vec<_> = rows.iter().map(|(at, step, _)| (*at, *step)).collect();
    let seen = runtime().block_on(run_both(&server, "queue", quota, &steps));
    for ((at, step, want), got) in rows.iter().zip(&seen) {
        assert_eq!(got, want, "+{at} µs {step:?}");
    }
}

/// A wait's take that its caller did not act on (dropped during its jitter) goes back by the
/// local bucket's refund rule: due or not, all of it less what the burst cap would have cut
/// since; nothing while a later reservation holds the bucket in debt; partly when the bucket
/// would have filled meanwhile.
#[test]
fn a_take_not_acted_on_goes_back_by_the_local_refund_rule() {
    let _serial = serial();
    let server = RedisServer::start();
    let quota = Quota::new(Rate::per_second(5)).burst(4);
    let now = Duration::ZERO;
    let rows = [
        // (µs, step, what both must see)
        (0, Step::Reserve(3, now), Seen::Reserved { wait: now }),
        // Due at once, so `cancel` gives nothing back...
        (0, Step::CancelOldest, Seen::Level(1)),
        (600_000, Step::Level, Seen::Level(4)),
        (600_000, Step::Reserve(3, now), Seen::Reserved { wait: now }),
        (600_000, Step::Take(1), Seen::Granted { remaining: 0 }),
        // ...but a refund does, even after another take: the bucket is not in debt.
        (600_000, Step::RefundOldest, Seen::Level(3)),
        (600_000, Step::Reserve(3, now), Seen::Reserved { wait: now }),
        (
            600_000,
            Step::Reserve(2, Duration::from_secs(1)),
            Seen::Reserved { wait: ms(400) },
        ),
        // Overtaken by a reservation into debt: nothing comes back.
        (600_000, Step::RefundOldest, Seen::Level(0)),
        // The reservation into debt is overtaken by nobody: its 2 come back, to level 0.
        (600_000, Step::RefundOldest, Seen::Level(0)),
        (1_000_000, Step::Level, Seen::Level(2)),
        (
            1_000_000,
            Step::Reserve(2, now),
            Seen::Reserved { wait: now },
        ),
        (1_600_000, Step::Take(3), Seen::Granted { remaining: 0 }),
        // 3 tokens accrued since the take was due: a bucket that had not taken it would have
        // been capped at 4 meanwhile, so only 1 of the 2 comes back.
        (1_600_000, Step::RefundOldest, Seen::Level(1)),
        (
            1_600_000,
            Step::Take(2),
            Seen::Denied(insufficient(ms(200))),
        ),
    ];
    let steps: Vec<_> = rows.iter().map(|(at, step, _)| (*at, *step)).collect();
    let seen = runtime().block_on(run_both(&server, "refund", quota, &steps));
    for ((at, step, want), got) in rows.iter().zip(&seen) {
        assert_eq!(got, want, "+{at} µs {step:?}");
    }
}

#[test]
fn long_random_sequences_agree() {
    random_sequences_agree(false);
}

/// The same kind of sequences with refunds (as a wait dropped during its jitter gives back)
/// mixed with cancels.
#[test]
fn long_random_sequences_with_refunds_agree() {
    random_sequences_agree(true);
}

/// Long random sequences of takes, reservations, give-backs (cancels, or `refunds`) and reads.
fn random_sequences_agree(refunds: bool) {
    let _serial = serial();
    let server = RedisServer::start();
    let quotas = [
        Quota::new(Rate::per_second(100)).burst(10),
        Quota::new(Rate::per_second(2)).burst(5).start_empty(),
        Quota::new(Rate::per_day(1)).burst(3).start_with(1),
        Quota::new(Rate::per_second(1_000_000)).burst(100),
        // 2 per 1.000003 ms: 2000 units a microsecond, 1 000 003 a token.
        Quota::new(Rate::new(2, Duration::from_nanos(1_000_003))).burst(7),
    ];
    // Mostly short gaps, so that reservations pile up and overtake each other; now and then a
    // long one, so that the bucket refills and idles.
    let short_gaps_us = [0, 1, 7, 333, 10_000];
    let long_gaps_us = [99_999, 1_000_000, 5_000_000, 86_400_000_000];
    let waits = [
        Duration::ZERO,
        ms(1),
        ms(50),
        Duration::from_secs(1),
        Duration::MAX,
    ];
    let mut seed = 0x9E37_79B9_7F4A_7C15_u64;
    let mut next = move |below: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % below as u64) as usize
    };
    let rt = runtime();
    for (i, quota) in quotas.into_iter().enumerate() {
        let burst = quota.burst_size() as usize;
        let mut at = 0;
        let steps: Vec<_> = (0..400)
            .map(|_| {
                at += match next(8) {
                    0 => long_gaps_us[next(long_gaps_us.len())],
                    _ => short_gaps_us[next(short_gaps_us.len())],
                };
                let n = next(burst + 2) as u32;
                let step = match next(12) {
                    0..=3 => Step::Take(n),
                    4..=6 => Step::Reserve(n, waits[next(waits.len())]),
                    7 if refunds => Step::RefundOldest,
                    8 if refunds => Step::RefundNewest,
                    7 | 9 => Step::CancelOldest,
                    8 | 10 => Step::CancelNewest,
                    _ => Step::Level,
                };
                (at, step)
            })
            .collect();
        let key = format!("random{i}-{refunds}");
        let seen = rt.block_on(run_both(&server, &key, quota, &steps));
        // The sequence exercised every kind of answer.
        assert!(
            seen.iter().any(|s| matches!(s, Seen::Granted { .. })),
            "{quota}"
        );
        assert!(
            seen.iter().any(|s| matches!(s, Seen::Reserved { .. })),
            "{quota}"
        );
        assert!(
            seen.iter()
                .any(|s| matches!(s, Seen::Denied(Denied::Insufficient { .. }))),
            "{quota}"
        );
    }
}

fn ms(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

fn insufficient(retry_after: Duration) -> Denied {
    Denied::insufficient(retry_after)
}

#[test]
fn reservations_decades_long_agree_up_to_the_local_debt_bound() {
    let _serial = serial();
    let server = RedisServer::start();
    // 2 tokens per 1.000003 ms, a burst of 10^9 (5.8 days of them): the local bucket reads its
    // clock to the nanosecond and bounds debt at 2^61 ns (73 years); reservations of a whole
    // burst each until both deny.
    let quota = Quota::new(Rate::new(2, Duration::from_nanos(1_000_003)))
        .burst(1_000_000_000)
        .start_empty();
    let steps: Vec<_> = (0..4_700)
        .map(|_| (0, Step::Reserve(1_000_000_000, Duration::MAX)))
        .chain([
            (1_000, Step::CancelNewest),
            (
                1_000,
                Step::Reserve(1_000_000_000, Duration::from_secs(3_600)),
            ),
        ])
        .collect();
    let seen = runtime().block_on(run_both(&server, "decades", quota, &steps));
    let reserved = seen
        .iter()
        .filter(|seen| matches!(seen, Seen::Reserved { .. }))
        .count();
    let longest = seen.iter().filter_map(|seen| match seen {
        Seen::Reserved { wait } => Some(*wait),
        _ => None,
    });
    let longest = longest.max().unwrap();
    std::println!("{reserved} reservations, the last due in {longest:?}");
    assert!(reserved > 4_000, "{reserved}");
    assert!(
        longest > Duration::from_secs(72 * 365 * 86_400),
        "{longest:?}"
    );
    assert!(
        matches!(seen[4_699], Seen::Denied(Denied::Insufficient { .. })),
        "{:?}",
        seen[4_699]
    );
}

/// The server's clock stepping: back credits nothing and adds no wait; forward credits at most
/// the burst; either way the bucket serves normally at once.
#[test]
fn a_server_clock_step_credits_at_most_a_burst_and_locks_nothing() {
    let _serial = serial();
    let server = RedisServer::start();
    runtime().block_on(async {
        let client = RedisConnection::connect_lazy(Client::open(server.url()).unwrap()).unwrap();
        let quota = Quota::new(Rate::per_second(10)).burst(10);
        let bucket = RedisBucket::builder(&client, "clock", quota)
            .connect_lazy()
            .unwrap();
        let remaining = |grant: super::Grant| grant.level.unwrap().remaining;
        let at = |us: i64| bucket.pin_script_now(Some((T0_US as i64 + us) as u64));
        // (µs after T0, tokens asked, what is left after, or None if denied)
        let rows: [(i64, u32, Option<u64>); 11] = [
            (0, 1, Some(9)),
            // 2 h back: the 9 tokens are still there, and the tenth is owed 100 ms later
            (-7_200_000_000, 9, Some(0)),
            (-7_200_000_000, 1, None),
            (-7_199_900_000, 1, Some(0)),
            // 60 s forward: full, no more
            (60_000_000, 10, Some(0)),
            (60_000_000, 1, None),
            // and back again: the bucket keeps the level it had (empty), refilling from now
            (0, 1, None),
            (100_000, 1, Some(0)),
            (1_000_000, 9, Some(0)),
            (2_000_000, 10, Some(0)),
            (2_000_000, 1, None),
        ];
        for (us, n, want) in rows {
            at(us);
            let got = bucket.try_acquire(n).await.ok().map(remaining);
            assert_eq!(got, want, "at {us} µs, {n} tokens");
        }
    });
}

/// A server clock stepped 60 s forward and back, near the real time, with the deadline on:
/// the first call after the step runs past its deadline by the old clock, does nothing, and is
/// retried at once with Redis's new time, so no call fails for it; a step back leaves the
/// deadline far ahead, and the call is served too.
#[test]
fn a_server_clock_step_fails_no_call() {
    let _serial = serial();
    let server = RedisServer::start();
    runtime().block_on(async {
        let client = RedisConnection::connect_lazy(Client::open(server.url()).unwrap()).unwrap();
        let quota = Quota::new(Rate::per_second(10)).burst(10);
        // A long timeout, so that a late answer comes back well within its quarter even on a
        // loaded box: the retry is for answers that plainly were not late.
        let bucket = RedisBucket::builder(&client, "stepped", quota)
            .timeout(Duration::from_secs(2))
            .connect_lazy()
            .unwrap();
        let real_us = || support::unix_us();
        let left = |grant: super::Grant| grant.level.unwrap().remaining;
        bucket.pin_script_now_with_deadline(real_us());
        assert_eq!(left(bucket.try_acquire(1).await.expect("before")), 9);
        bucket.pin_script_now_with_deadline(real_us() + 60_000_000);
        let forward = bucket.try_acquire(1).await.expect("after 60 s forward");
        assert_eq!(left(forward), 9, "full at most, one taken");
        bucket.pin_script_now_with_deadline(real_us());
        let back = bucket.try_acquire(9).await.expect("after 60 s back");
        assert_eq!(left(back), 0, "the level kept, nothing locked");
    });
}

/// The long reservation the local bucket grants at 999 983/s, where it reads its clock to
/// 2.048 µs and rounds the rate down by less than one part in 2^20 (it cannot hold this rate
/// exactly for a century): Redis, exact, grants it too, with the same wait to within that.
#[test]
fn a_reservation_of_2000_s_is_granted_by_both() {
    let _serial = serial();
    let server = RedisServer::start();
    runtime().block_on(async {
        let client = RedisConnection::connect_lazy(Client::open(server.url()).unwrap()).unwrap();
        let quota = Quota::new(Rate::per_second(999_983))
            .burst(1_000_000_000)
            .start_empty();
        let clock = ManualClock::starting_at(T0_US * 1_000);
        let local = TokenBucket::try_new(quota, &clock).unwrap();
        let shared = RedisBucket::builder(&client, "long", quota)
            .connect_lazy()
            .unwrap();
        shared.pin_script_now(Some(T0_US));
        let hour = Duration::from_secs(3_600);
        for _ in 0..3 {
            let mine = local.reserve(1_000_000_000, hour).map(|r| r.wait());
            let theirs = shared.reserve(1_000_000_000, hour).await.map(|r| r.wait());
            match (mine, theirs) {
                (Ok(mine), Ok(theirs)) => {
                    let apart = mine.abs_diff(theirs);
                    let rounding = mine / (1 << 20) + local.resolution();
                    assert!(
                        !local.is_exact() && apart <= rounding,
                        "{mine:?} {theirs:?}"
                    );
                }
                (mine, theirs) => panic!("local {mine:?}, Redis {theirs:?}"),
            }
        }
        // A fourth would wait 4 000 s: both deny.
        assert!(local.reserve(1_000_000_000, hour).is_err());
        assert!(shared.reserve(1_000_000_000, hour).await.is_err());
    });
}

//! A real server's clock stepped under a fleet: `redis-server` runs under libfaketime
//! ([`RedisServer::start_with_movable_clock`]), and the test moves its wall clock, the one Redis
//! `TIME` reads for the script and key expiry runs on, while the fleet draws from the bucket.
//! (The crate's own tests, in `src/redis/tests.rs`, pin the script's clock instead.)
//!
//! The fleet: two processes (two `RedisConnection`s) of three tasks, each calling
//! `try_acquire(1)` every 10 ms, more than the quota of 10/s, burst 10, so the bucket is
//! drained all along: the hardest case both for credit (every token credited is taken at once)
//! and for lockout (the bucket is in its deepest state when the clock moves). Each test prints
//! the grants against the bound.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tollgate::{Quota, Rate};
use tollgate_redis::{Client, RedisBucket, RedisConnection, Source};

use crate::support::{runtime, serial, unix_us, RedisServer};

const RATE: u64 = 10;
const BURST: u64 = 10;

fn quota() -> Quota {
    Quota::new(Rate::per_second(RATE)).burst(BURST)
}

/// Sets the server's clock to `offset_s` from the real time and checks, by `TIME`, that it
/// moved there; returns the offset `TIME` showed, in seconds.
fn step(server: &RedisServer, offset_s: i64) -> f64 {
    server.set_clock(offset_s);
    let real = unix_us() as f64;
    let seen = (server.time_us() as f64 - real) / 1e6;
    assert!(
        (seen - offset_s as f64).abs() < 1.0,
        "the server's clock is {seen:+.3} s from the real time, not {offset_s:+} s"
    );
    seen
}

/// The first call (9 left after it), then the fleet on `key` for `run`, with the server's
/// clock set to each `(when, offset_s)` of `steps` at `when` after the start. Every grant's
/// real time, in microseconds after the start.
fn drive(
    server: &Arc<RedisServer>,
    key: &str,
    run: Duration,
    steps: &[(Duration, i64)],
) -> Vec<u64> {
    runtime().block_on(async {
        let buckets: Vec<RedisBucket> = (0..2)
            .map(|_| {
                let connection =
                    RedisConnection::connect_lazy(Client::open(server.url()).unwrap()).unwrap();
                RedisBucket::builder(&connection, key, quota())
                    .connect_lazy()
                    .unwrap()
            })
            .collect();
        let start = Instant::now();
        let first = buckets[0].try_acquire(1).await.expect("the first call");
        let at_us = start.elapsed().as_micros() as u64;
        assert_eq!(first.level.expect("level").remaining, BURST - 1);
        let grants = Arc::new(Mutex::new(vec![at_us]));

        let (stepped, steps) = (Arc::clone(server), steps.to_vec());
        let stepper = std::thread::spawn(move || {
            for (when, offset_s) in steps {
                std::thread::sleep(when.saturating_sub(start.elapsed()));
                let at = start.elapsed();
                let seen = step(&stepped, offset_s);
                println!(
                    "    clock: at {:.2} s the server's clock set {offset_s:+} s from the real \
                     time (TIME shows {seen:+.3} s)",
                    at.as_secs_f64()
                );
            }
        });
        let mut tasks = Vec::new();
        for bucket in &buckets {
            for _ in 0..3 {
                let (bucket, grants) = (bucket.clone(), Arc::clone(&grants));
                tasks.push(tokio::spawn(async move {
                    while start.elapsed() < run {
                        if let Ok(grant) = bucket.try_acquire(1).await {
                            assert_eq!(grant.source, Source::Redis);
                            let at_us = start.elapsed().as_micros() as u64;
                            grants.lock().unwrap().push(at_us);
                        }
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                }));
            }
        }
        for task in tasks {
            task.await.unwrap();
        }
        stepper.join().expect("the clock steps");
        let mut grants = grants.lock().unwrap().clone();
        grants.sort_unstable();
        grants
    })
}

/// Checks the grants against `burst + rate × t` (plus `extra`, and one token for the edge of
/// the bound's rounding) at every `t`, and that the bucket serves after `settled` (the last
/// step): its first grant within one refill (1 s), then half the rate at least.
fn check(what: &str, grants: &[u64], run: Duration, settled: Duration, extra: u64) {
    let mut worst_excess = f64::MIN;
    for (i, &at_us) in grants.iter().enumerate() {
        let bound = BURST as f64 + RATE as f64 * at_us as f64 / 1e6;
        worst_excess = worst_excess.max((i + 1) as f64 - bound);
    }
    let bound = BURST as f64 + RATE as f64 * run.as_secs_f64();
    let settled_us = settled.as_micros() as u64;
    let first = grants
        .iter()
        .find(|&&at_us| at_us >= settled_us)
        .map(|&at_us| at_us - settled_us);
    let (from_us, to_us) = (settled_us + 1_000_000, run.as_micros() as u64);
    let after = grants
        .iter()
        .filter(|&&at_us| (from_us..to_us).contains(&at_us))
        .count() as u64;
    let least = RATE * (to_us - from_us) / 2_000_000;
    println!(
        "{what:>9}: {} grants against {bound:.1} = {BURST} + {RATE}/s × {:.2} s, {extra} more \
         allowed for the step; worst running excess {worst_excess:+.1} (allowed {:+}); first \
         grant {} ms after the clock settled, then {after} in {:.1} s (at least {least})",
        grants.len(),
        run.as_secs_f64(),
        extra + 1,
        first.map_or(-1, |us| (us / 1_000) as i64),
        (to_us - from_us) as f64 / 1e6,
    );
    assert!(
        worst_excess <= (extra + 1) as f64,
        "{what}: ran {worst_excess:+.1} over the bound, allowed {extra} + 1"
    );
    let first = first.unwrap_or_else(|| panic!("{what}: no grant after the clock settled"));
    assert!(
        first <= 1_000_000,
        "{what}: the first grant {first} µs after the clock settled: locked out"
    );
    assert!(
        after >= least,
        "{what}: {after} grants in the {:.1} s after the first second, fewer than {least}",
        (to_us - from_us) as f64 / 1e6
    );
}

/// The server's clock stepped 60 s forward and, 1.5 s later, corrected back: the step credits
/// at most one burst (the bucket is full at most, and its key, expiring by the server's
/// clock, may be gone), and after the correction the bucket keeps the level it had, refilling
/// from the real time: served within a refill, never locked for the 60 s the clock was ahead.
#[test]
fn a_server_clock_stepped_forward_and_back_credits_at_most_a_burst() {
    let _serial = serial();
    let server = Arc::new(RedisServer::start_with_movable_clock());
    let (forward, back, run) = (
        Duration::from_millis(1_000),
        Duration::from_millis(2_500),
        Duration::from_millis(5_000),
    );
    let grants = drive(&server, "clock-forward", run, &[(forward, 60), (back, 0)]);
    check("forward", &grants, run, back, BURST);
}

/// The server's clock stepped 2 h back: it credits nothing (the bound holds with no extra),
/// and the bucket keeps the level it had when last written, so it locks nothing beyond what
/// was owed: served within a refill, not 2 h later.
#[test]
fn a_server_clock_stepped_back_credits_nothing_and_locks_nothing() {
    let _serial = serial();
    let server = Arc::new(RedisServer::start_with_movable_clock());
    let (back, run) = (Duration::from_millis(1_000), Duration::from_millis(4_000));
    let grants = drive(&server, "clock-back", run, &[(back, -7_200)]);
    check("back 2 h", &grants, run, back, 0);
}

//! Waits that give up cost nothing on a Redis bucket: under overload with callers that time
//! out, goodput stays at the rate, and the moment the load stops the bucket serves at once.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::{timeout, timeout_at, Instant};
use tollgate::{Quota, Rate};
use tollgate_redis::{Client, Error, FaultPolicy, RedisBucket, RedisConnection};

use crate::support::{runtime, serial, RedisServer};

const RATE: u64 = 50;
const BURST: u64 = 5;

/// Twice the rate, 100 callers a second, each giving up on `acquire(1)` after 200 ms, for 4 s
/// of real time: at least 90 % of the rate is granted in every second after the first, and a
/// fresh caller afterwards is served within one token's time (20 ms) and a 100 ms margin.
#[test]
fn twice_the_rate_with_timeouts_keeps_the_rate() {
    overload("twice", 1, &[Duration::from_millis(200)]);
}

/// Ten times the rate, 500 callers a second whose patience runs from 1 ms to 1 s: the same.
#[test]
fn ten_times_the_rate_with_patience_from_1_ms_to_1_s_keeps_the_rate() {
    let patience = [1, 10, 50, 200, 1_000].map(Duration::from_millis);
    overload("ten times", 5, &patience);
}

/// `per_tick` callers every 10 ms for 4 s, each wrapping `acquire(1)` in a `timeout` of the
/// next of `patience`, against 50/s, burst 5; then a fresh caller.
fn overload(name: &str, per_tick: usize, patience: &[Duration]) {
    let _serial = serial();
    let server = RedisServer::start();
    runtime().block_on(async {
        let redis = RedisConnection::connect(Client::open(server.url()).expect("url"))
            .await
            .expect("connect");
        let quota = Quota::new(Rate::per_second(RATE)).burst(BURST);
        let bucket = RedisBucket::builder(&redis, "giving-up", quota)
            .connect()
            .await
            .expect("bucket");
        let start = Instant::now();
        let granted_at: Arc<Mutex<Vec<Duration>>> = Arc::default();
        let mut callers = Vec::new();
        let mut patience = patience.iter().copied().cycle();
        let mut tick = tokio::time::interval(Duration::from_millis(10));
        while start.elapsed() < Duration::from_secs(4) {
            tick.tick().await;
            for _ in 0..per_tick {
                let bucket = bucket.clone();
                let granted_at = Arc::clone(&granted_at);
                let patience = patience.next().expect("cycles");
                callers.push(tokio::spawn(async move {
                    if let Ok(Ok(_)) = timeout(patience, bucket.acquire(1)).await {
                        granted_at.lock().unwrap().push(start.elapsed());
                    }
                }));
            }
        }
        for caller in callers {
            caller.await.expect("caller");
        }
        let mut per_second = [0u64; 4];
        for at in granted_at.lock().unwrap().iter() {
            if let Some(count) = per_second.get_mut(at.as_secs() as usize) {
                *count += 1;
            }
        }
        let fresh = Instant::now();
        bucket.acquire(1).await.expect("a fresh caller");
        let fresh_wait = fresh.elapsed();
        println!("{name}: grants per second {per_second:?}, then a fresh caller in {fresh_wait:?}");
        for (second, &count) in per_second.iter().enumerate().skip(1) {
            assert!(
                count * 100 >= RATE * 90,
                "{name}, second {second}: {count} grants, below 90 % of {RATE}/s: {per_second:?}"
            );
        }
        let token = Duration::from_secs(1) / RATE as u32;
        assert!(
            fresh_wait <= token + Duration::from_millis(100),
            "{name}: a fresh caller waited {fresh_wait:?} after the load"
        );
    });
}

/// Waiters ahead that give up hold up nobody: 10/s, burst 1, the burst taken, then 99 callers
/// that give up after 50 ms and one that waits. It is served when the first token accrues,
/// about 100 ms after the burst, not behind 99 given-up turns.
#[test]
fn waiters_that_gave_up_ahead_hold_up_nobody() {
    let _serial = serial();
    let server = RedisServer::start();
    runtime().block_on(async {
        let redis = RedisConnection::connect(Client::open(server.url()).expect("url"))
            .await
            .expect("connect");
        let quota = Quota::new(Rate::per_second(10)).burst(1);
        let bucket = RedisBucket::builder(&redis, "gave-up-ahead", quota)
            .connect()
            .await
            .expect("bucket");
        let start = Instant::now();
        bucket.acquire(1).await.expect("the burst");
        let quitters: Vec<_> = (0..99)
            .map(|_| {
                let bucket = bucket.clone();
                tokio::spawn(async move {
                    timeout(Duration::from_millis(50), bucket.acquire(1))
                        .await
                        .is_ok()
                })
            })
            .collect();
        tokio::task::yield_now().await; // they queue first
        bucket.acquire(1).await.expect("the one that waits");
        let served_after = start.elapsed();
        let mut served_quitters = 0;
        for quitter in quitters {
            served_quitters += u32::from(quitter.await.expect("quitter"));
        }
        println!("the waiter behind 99 that gave up was served after {served_after:?}");
        assert_eq!(served_quitters, 0);
        assert!(
            served_after >= Duration::from_millis(95) && served_after <= Duration::from_millis(200),
            "served after {served_after:?}"
        );
    });
}

/// The head's calls follow the fault policy: with the server killed, `FailClosed` ends each
/// wait with `Unavailable`, and `Fallback` serves the line from the local bucket at its rate
/// (10/s from empty: about 10 grants in a second to three callers in line).
#[test]
fn the_head_follows_the_fault_policy() {
    let _serial = serial();
    let mut server = RedisServer::start();
    runtime().block_on(async {
        let redis = RedisConnection::connect(Client::open(server.url()).expect("url"))
            .await
            .expect("connect");
        let quota = Quota::new(Rate::per_second(50)).burst(5);
        let closed = RedisBucket::builder(&redis, "policy-closed", quota)
            .connect()
            .await
            .expect("bucket");
        let fallback = RedisBucket::builder(&redis, "policy-fallback", quota)
            .policy(FaultPolicy::Fallback(
                Quota::new(Rate::per_second(10)).burst(1),
            ))
            .connect()
            .await
            .expect("bucket");
        server.kill();
        assert!(matches!(
            closed.acquire(1).await,
            Err(Error::Unavailable(_))
        ));
        let start = Instant::now();
        let callers: Vec<_> = (0..3)
            .map(|_| {
                let fallback = fallback.clone();
                tokio::spawn(async move {
                    let mut grants = 0;
                    while let Ok(Ok(_)) =
                        timeout_at(start + Duration::from_secs(1), fallback.acquire(1)).await
                    {
                        grants += 1;
                    }
                    grants
                })
            })
            .collect();
        let mut grants = 0;
        for caller in callers {
            grants += caller.await.expect("caller");
        }
        println!("with the server killed, the fallback line granted {grants} in 1 s at 10/s");
        assert!((8..=11).contains(&grants), "{grants}");
    });
}

/// While Redis does not answer, waiters do not take turns to wait out each call's timeout: with
/// the server frozen and `FailOpen`, ten callers in line each get a grant per 200 ms timeout
/// after the first (about 30 in a second), not the line one per timeout (5).
#[test]
fn a_stalled_server_does_not_serialize_the_line() {
    let _serial = serial();
    let server = RedisServer::start();
    runtime().block_on(async {
        let redis = RedisConnection::connect(Client::open(server.url()).expect("url"))
            .await
            .expect("connect");
        let quota = Quota::new(Rate::per_second(50)).burst(5);
        let open = RedisBucket::builder(&redis, "stalled-open", quota)
            .policy(FaultPolicy::FailOpen)
            .connect()
            .await
            .expect("bucket");
        server.signal("STOP");
        let start = Instant::now();
        let callers: Vec<_> = (0..10)
            .map(|_| {
                let open = open.clone();
                tokio::spawn(async move {
                    let mut grants = 0;
                    while let Ok(Ok(_)) =
                        timeout_at(start + Duration::from_secs(1), open.acquire(1)).await
                    {
                        grants += 1;
                    }
                    grants
                })
            })
            .collect();
        let mut grants = 0;
        for caller in callers {
            grants += caller.await.expect("caller");
        }
        server.signal("CONT");
        println!("with the server frozen, ten callers in line were granted {grants} open in 1 s");
        assert!(grants >= 20, "{grants}");
        open.try_acquire(1).await.expect("Redis answers again");
    });
}

//! The fleet bound through faults, under each policy: a server frozen (`SIGSTOP`), a link that
//! holds every byte (a partition, through a proxy), a server killed and restarted with waiters
//! queued, a key deleted under a reservation, a password rotated, a value that is not a bucket.
//! Each test prints the grants against the bound, per policy.
//!
//! A fleet here is two "processes" per policy (two `RedisConnection`s, one bucket each on the
//! policy's key): three tasks each calling `try_acquire(1)` every 20 ms and two reserving one
//! token at a time (at most 500 ms ahead), sleeping, and acting. The quota is 10/s, burst 10; the fallback is
//! `fallback_share(quota, 2)`: 5/s, burst 5 each.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tollgate::{Quota, Rate};
use tollgate_redis::{
    Client, Error, FaultPolicy, RedisBucket, RedisConnection, SetupError, Source,
};

use crate::support::{runtime, serial, Proxy, RedisServer};

const RATE: u64 = 10;
const BURST: u64 = 10;
const TIMEOUT: Duration = Duration::from_millis(200);
const POLICIES: [&str; 3] = ["closed", "open", "fallback"];

fn quota() -> Quota {
    Quota::new(Rate::per_second(RATE)).burst(BURST)
}

fn policy(name: &str) -> FaultPolicy {
    match name {
        "closed" => FaultPolicy::FailClosed,
        "open" => FaultPolicy::FailOpen,
        _ => FaultPolicy::fallback_share(quota(), 2),
    }
}

/// One grant: when (µs after the run began), by whom, to which policy's fleet.
#[derive(Clone, Copy, Debug)]
struct Granted {
    at_us: u64,
    source: Source,
    policy: &'static str,
}

/// Two processes per policy on `url`, keys `{name}-{policy}`.
fn fleet(url: &str, name: &str) -> Vec<(&'static str, RedisBucket)> {
    let mut buckets = Vec::new();
    for policy_name in POLICIES {
        for _process in 0..2 {
            let connection = RedisConnection::connect_lazy(Client::open(url).unwrap()).unwrap();
            let bucket =
                RedisBucket::builder(&connection, format!("{name}-{policy_name}"), quota())
                    .policy(policy(policy_name))
                    .timeout(TIMEOUT)
                    .connect_lazy()
                    .unwrap();
            buckets.push((policy_name, bucket));
        }
    }
    buckets
}

/// Runs the fleet for `run`, with `fault` called from a thread (given the run's start); returns
/// every grant.
async fn drive(
    buckets: impl FnOnce() -> Vec<(&'static str, RedisBucket)>,
    run: Duration,
    fault: impl FnOnce(Instant) + Send + 'static,
) -> Vec<Granted> {
    let grants = Arc::new(Mutex::new(Vec::new()));
    let start = Instant::now();
    let injector = std::thread::spawn(move || fault(start));
    let mut tasks = Vec::new();
    for (policy, bucket) in buckets() {
        for task in 0..5 {
            let (bucket, grants) = (bucket.clone(), Arc::clone(&grants));
            tasks.push(tokio::spawn(async move {
                while start.elapsed() < run {
                    let source = if task < 3 {
                        let result = bucket.try_acquire(1).await;
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        result.ok().map(|grant| grant.source)
                    } else {
                        // A waiter: reserve, sleep, act (`acquire` without its check that
                        // the key is still the one it queued in, so that the grant's source
                        // is known).
                        let left = run.saturating_sub(start.elapsed());
                        let wait = Duration::from_millis(500).min(left);
                        match bucket.reserve(1, wait).await {
                            Ok(reservation) => {
                                tokio::time::sleep(reservation.wait()).await;
                                Some(reservation.source())
                            }
                            Err(_) => {
                                tokio::time::sleep(Duration::from_millis(20)).await;
                                None
                            }
                        }
                    };
                    if let Some(source) = source {
                        let at_us = start.elapsed().as_micros() as u64;
                        if at_us <= run.as_micros() as u64 {
                            grants.lock().unwrap().push(Granted {
                                at_us,
                                source,
                                policy,
                            });
                        }
                    }
                }
            }));
        }
    }
    for task in tasks {
        task.await.unwrap();
    }
    injector.join().unwrap();
    let mut grants = grants.lock().unwrap().clone();
    grants.sort_by_key(|g| g.at_us);
    grants
}

/// What a fault did to one policy's fleet.
struct Tally {
    total: u64,
    redis: u64,
    fallback: u64,
    open: u64,
    /// The most the counted grants (all but `open`) ran over `burst + rate × t`, at any `t`.
    worst_excess: f64,
    /// The bound at the end of the run.
    bound: f64,
}

fn tally(grants: &[Granted], policy: &str, run: Duration) -> Tally {
    let mine: Vec<_> = grants.iter().filter(|g| g.policy == policy).collect();
    let count = |source| mine.iter().filter(|g| g.source == source).count() as u64;
    let mut counted = 0u64;
    let mut worst_excess = f64::MIN;
    for g in &mine {
        if g.source != Source::Open {
            counted += 1;
        }
        let bound = BURST as f64 + RATE as f64 * g.at_us as f64 / 1e6;
        worst_excess = worst_excess.max(counted as f64 - bound);
    }
    Tally {
        total: mine.len() as u64,
        redis: count(Source::Redis),
        fallback: count(Source::Fallback),
        open: count(Source::Open),
        worst_excess,
        bound: BURST as f64 + RATE as f64 * run.as_secs_f64(),
    }
}

fn report(fault: &str, grants: &[Granted], run: Duration) -> Vec<(&'static str, Tally)> {
    POLICIES
        .into_iter()
        .map(|policy| {
            let t = tally(grants, policy, run);
            println!(
                "{fault:>9} {policy:>8}: {} grants (redis {}, fallback {}, open {}) against \
                 {:.1} = {BURST} + {RATE}/s × {:.2} s; worst running excess {:+.1}",
                t.total,
                t.redis,
                t.fallback,
                t.open,
                t.bound,
                run.as_secs_f64(),
                t.worst_excess
            );
            (policy, t)
        })
        .collect()
}

/// The first grant by Redis at or after `from_us` in a policy's fleet.
fn first_redis_grant(grants: &[Granted], policy: &str, from_us: u64) -> Option<u64> {
    grants
        .iter()
        .find(|g| g.policy == policy && g.source == Source::Redis && g.at_us >= from_us)
        .map(|g| g.at_us - from_us)
}

/// Redis grants in `[from_us, to_us)` in a policy's fleet.
fn redis_grants(grants: &[Granted], policy: &str, from_us: u64, to_us: u64) -> u64 {
    grants
        .iter()
        .filter(|g| g.policy == policy && g.source == Source::Redis)
        .filter(|g| (from_us..to_us).contains(&g.at_us))
        .count() as u64
}

/// The checks every outage-like fault shares. During an outage of `outage`, the fallback
/// fleet may be ahead of the bound, until each process has charged its local grants to Redis,
/// by at most what the other process granted locally: its share's rate for the outage.
fn check_outage(
    fault: &str,
    grants: &[Granted],
    run: Duration,
    outage_from: Duration,
    outage: Duration,
) {
    check_faults(fault, grants, run, outage_from, outage, 0.0);
}

/// `check_outage`, with `extra` tokens the fault itself costs (a restart's fresh burst).
fn check_faults(
    fault: &str,
    grants: &[Granted],
    run: Duration,
    outage_from: Duration,
    outage: Duration,
    extra: f64,
) {
    let tallies = report(fault, grants, run);
    let back_us = (outage_from + outage).as_micros() as u64;
    for (policy, t) in &tallies {
        // The margin: a grant seen late by a busy box counts against a later, larger bound,
        // so none is needed for Redis; one token for the edge of the bound's own rounding.
        let allowed = extra
            + match *policy {
                "fallback" => RATE as f64 / 2.0 * outage.as_secs_f64() + 1.0,
                _ => 1.0,
            };
        assert!(
            t.worst_excess <= allowed,
            "{fault} {policy}: ran {:.1} over the bound, allowed {allowed:.1}",
            t.worst_excess
        );
        // Over the whole run, which contains the whole outage, the bound holds for every
        // policy's counted grants.
        assert!(
            (t.total - t.open) as f64 <= t.bound + extra + 1.0,
            "{fault} {policy}: {} counted grants against {:.1}",
            t.total - t.open,
            t.bound
        );
        // No lockout: Redis grants again within one refill time of the end of the fault
        // (plus the reconnection and a busy box's scheduling), and at half the rate at least
        // over the next second. The fallback fleet first pays back what it granted locally
        // (charged to Redis, at most the outage's worth of refill), then the same holds.
        let payback_us = match *policy {
            "fallback" => t.fallback * 1_000_000 / RATE,
            _ => 0,
        };
        let first = first_redis_grant(grants, policy, back_us)
            .unwrap_or_else(|| panic!("{fault} {policy}: Redis never granted again"));
        assert!(
            first <= 1_500_000 + payback_us,
            "{fault} {policy}: first Redis grant {first} µs after the fault"
        );
        let from_us = back_us + payback_us + 1_000_000;
        if from_us + 1_000_000 <= run.as_micros() as u64 {
            let after = redis_grants(grants, policy, from_us, from_us + 1_000_000);
            assert!(
                after >= RATE / 2,
                "{fault} {policy}: {after} Redis grants in the second second after the fault"
            );
        }
        match *policy {
            "closed" => assert_eq!(t.fallback + t.open, 0),
            "open" => assert!(t.open > 0, "{fault}: open fleet granted nothing open"),
            _ => {
                assert!(
                    t.fallback > 0,
                    "{fault}: fallback fleet granted nothing locally"
                );
                // The local buckets start empty: their rate for the outage, no burst.
                let most = RATE as f64 * (outage.as_secs_f64() + 0.4) + 1.0;
                assert!(
                    t.fallback as f64 <= most,
                    "{fault}: {} fallback grants, more than {most:.1}",
                    t.fallback
                );
            }
        }
    }
}

/// The server frozen for 2 s: every call in flight times out, and when the server thaws the
/// calls queued in its socket run and take nothing (they are past their deadline).
#[test]
fn a_stalled_server_keeps_every_policy_within_its_bound() {
    let _serial = serial();
    let server = RedisServer::start();
    let pid = server.pid();
    let (from, outage, run) = (
        Duration::from_millis(1_000),
        Duration::from_millis(2_000),
        Duration::from_millis(5_500),
    );
    let grants = runtime().block_on(drive(
        || fleet(&server.url(), "stall"),
        run,
        move |start| {
            sleep_until(start, from);
            signal(pid, "STOP");
            sleep_until(start, from + outage);
            signal(pid, "CONT");
        },
    ));
    check_outage("stall", &grants, run, from, outage);
}

/// The stall: 10 tasks call `try_acquire(1)` while the server is frozen for 2 s; every
/// call gives up after its timeout, and when the server thaws, the 100-odd calls queued in its
/// socket take nothing: the bucket is full, and serves at once. (`acquire` sends one call at a
/// time per bucket, its line's head's, so it queues fewer: 10 tasks send about 20.)
#[test]
fn calls_given_up_during_a_stall_take_nothing_when_it_thaws() {
    let _serial = serial();
    let server = RedisServer::start();
    runtime().block_on(async {
        let connection = RedisConnection::connect_lazy(Client::open(server.url()).unwrap()).unwrap();
        let bucket = RedisBucket::builder(&connection, "thawed", quota())
            .timeout(TIMEOUT)
            .connect()
            .await
            .unwrap();
        server.signal("STOP");
        let began = Instant::now();
        let mut tasks = Vec::new();
        for _ in 0..10 {
            let bucket = bucket.clone();
            tasks.push(tokio::spawn(async move {
                let (mut calls, mut granted) = (0, 0);
                while began.elapsed() < Duration::from_secs(2) {
                    calls += 1;
                    if bucket.try_acquire(1).await.is_ok() {
                        granted += 1;
                    }
                }
                (calls, granted)
            }));
        }
        let (mut calls, mut granted) = (0, 0);
        for task in tasks {
            let (c, g) = task.await.unwrap();
            calls += c;
            granted += g;
        }
        server.signal("CONT");
        // The queued calls run as soon as the server thaws, before this one.
        let level = bucket.level().await.expect("level");
        println!(
            "    thaw   closed: {calls} calls during the stall, {granted} granted; after it the bucket holds {} of {BURST}, full in {:?}",
            level.remaining, level.until_full
        );
        assert_eq!(granted, 0);
        assert!(calls >= 50, "{calls}");
        assert_eq!(level.remaining, BURST, "the stale calls took tokens");
        bucket.try_acquire(BURST as u32).await.expect("served at once");
    });
}

/// A partition: the proxy holds every byte both ways for 2 s, then lets them through.
#[test]
fn a_partition_keeps_every_policy_within_its_bound() {
    proxy_outage("partition", 2_000, 5_500, Proxy::hold);
}

/// Fleets through a proxy to a fresh server, the link broken by `fault(true)` from 1 s for
/// `outage_ms` and mended by `fault(false)`, for `run_ms` in all: each policy within its bound.
fn proxy_outage(label: &str, outage_ms: u64, run_ms: u64, fault: fn(&Proxy, bool)) {
    let _serial = serial();
    let server = RedisServer::start();
    let proxy = Arc::new(Proxy::start(server.port));
    let (from, outage, run) = (
        Duration::from_millis(1_000),
        Duration::from_millis(outage_ms),
        Duration::from_millis(run_ms),
    );
    let link = Arc::clone(&proxy);
    let grants = runtime().block_on(drive(
        || fleet(&proxy.url(), label),
        run,
        move |start| {
            sleep_until(start, from);
            fault(&link, true);
            sleep_until(start, from + outage);
            fault(&link, false);
        },
    ));
    check_outage(label, &grants, run, from, outage);
}

/// A link that goes silent without a reset: after a second of timeouts the connection is
/// replaced (the server sees a new one arrive through the proxy while the old one is held),
/// and the bucket is served as soon as the link heals.
#[test]
fn a_silent_link_is_replaced() {
    let _serial = serial();
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port);
    let received = || -> u64 {
        let info = server.cli(None, &["INFO", "stats"]);
        info.lines()
            .find_map(|line| line.strip_prefix("total_connections_received:"))
            .and_then(|n| n.trim().parse().ok())
            .expect("INFO stats")
    };
    runtime().block_on(async {
        let connection = RedisConnection::connect_lazy(Client::open(proxy.url()).unwrap()).unwrap();
        let bucket = RedisBucket::builder(&connection, "silent", quota())
            .timeout(TIMEOUT)
            .connect()
            .await
            .unwrap();
        let before = received();
        proxy.hold(true);
        let held = Instant::now();
        while held.elapsed() < Duration::from_millis(2_500) {
            let _ = bucket.try_acquire(1).await;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // Less the connection of this `INFO` itself.
        let during = received() - before - 1;
        proxy.hold(false);
        let healed = Instant::now();
        while bucket.try_acquire(1).await.map(|g| g.source).ok() != Some(Source::Redis) {
            assert!(
                healed.elapsed() < Duration::from_secs(2),
                "not served after healing"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        println!(
            "   silent   closed: {during} new connection attempt(s) during 2.5 s of silence; served \
             {} ms after the link healed",
            healed.elapsed().as_millis()
        );
        // At most one replacement a second, each trying to connect at most twice.
        assert!((1..=6).contains(&during), "{during} new connections");
    });
}

/// The link cut for 1.5 s: connections reset and refused, then accepted again.
#[test]
fn a_cut_link_keeps_every_policy_within_its_bound() {
    proxy_outage("cut", 1_500, 5_000, Proxy::cut);
}

/// The server killed and started again empty on the same port, after 0.5 s, while the fleets
/// keep calling: the new server's buckets start full, one more burst than the bound, which is
/// what a restart costs. Waiters queued before it do not come on top: they queue again.
#[test]
fn a_restart_costs_at_most_one_burst() {
    let _serial = serial();
    let server = Arc::new(Mutex::new(RedisServer::start()));
    let url = server.lock().unwrap().url();
    let (from, outage, run) = (
        Duration::from_millis(1_500),
        Duration::from_millis(500),
        Duration::from_millis(4_500),
    );
    let restarted = Arc::clone(&server);
    let grants = runtime().block_on(drive(
        || fleet(&url, "restart"),
        run,
        move |start| {
            sleep_until(start, from);
            restarted.lock().unwrap().kill();
            sleep_until(start, from + outage);
            restarted.lock().unwrap().restart();
        },
    ));
    // One burst, and the reservations outstanding at the kill (one per waiter task, four),
    // which these waiters act on without checking the key (`acquire` holds nothing in Redis while it waits: see below).
    check_faults("restart", &grants, run, from, outage, BURST as f64 + 4.0);
}

/// Queued waiters and a restart: 20 waiters queue (two seconds' worth), the server restarts,
/// 20 more callers come. The waiters hold nothing in Redis while they wait, so they take from
/// the new bucket: the grants stay within the bound plus the one burst a restart costs.
#[test]
fn waiters_queued_before_a_restart_queue_again() {
    let _serial = serial();
    let mut server = RedisServer::start();
    let url = server.url();
    let rt = runtime();
    let connection =
        rt.block_on(async { RedisConnection::connect_lazy(Client::open(url).unwrap()).unwrap() });
    let bucket = RedisBucket::builder(&connection, "queued", quota())
        .timeout(TIMEOUT)
        .connect_lazy()
        .unwrap();
    let start = Instant::now();
    let (granted, elapsed) = rt.block_on(async {
        let done = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        let spawn = |tasks: &mut Vec<_>| {
            for _ in 0..20 {
                let (bucket, done) = (bucket.clone(), Arc::clone(&done));
                tasks.push(tokio::spawn(async move {
                    if bucket
                        .acquire_timeout(1, Duration::from_secs(5))
                        .await
                        .is_ok()
                    {
                        done.lock().unwrap().push(start.elapsed());
                    }
                }));
            }
        };
        bucket.try_acquire(BURST as u32).await.expect("the burst");
        spawn(&mut tasks);
        tokio::time::sleep(Duration::from_millis(200)).await;
        server.kill();
        server.restart();
        spawn(&mut tasks);
        tokio::time::sleep(Duration::from_millis(2_000)).await;
        let elapsed = start.elapsed();
        let granted = done
            .lock()
            .unwrap()
            .iter()
            .filter(|at| **at <= elapsed)
            .count() as u64;
        for task in tasks {
            task.abort();
        }
        (granted + BURST, elapsed)
    });
    let bound = BURST as f64 + RATE as f64 * elapsed.as_secs_f64();
    println!(
        "  restart   waiters: {granted} grants by {:.2} s against {bound:.1} + one burst",
        elapsed.as_secs_f64()
    );
    assert!(
        granted as f64 <= bound + BURST as f64,
        "{granted} grants by {elapsed:?}"
    );
}

/// A key deleted under a reservation: the fresh bucket is full (one more burst, as after a
/// restart), and the old reservation's cancel gives nothing back into it.
#[test]
fn a_cancel_after_the_key_is_gone_gives_nothing_back() {
    let _serial = serial();
    let server = RedisServer::start();
    runtime().block_on(async {
        let connection = RedisConnection::connect_lazy(Client::open(server.url()).unwrap()).unwrap();
        for policy_name in POLICIES {
            let key = format!("deleted-{policy_name}");
            let bucket = RedisBucket::builder(&connection, key.as_str(), quota())
                .policy(policy(policy_name))
                .connect()
                .await
                .unwrap();
            let mut granted = 0;
            bucket.try_acquire(10).await.expect("the burst");
            granted += 10;
            let reservation = bucket.reserve(5, Duration::from_secs(1)).await.unwrap();
            granted += 5;
            server.command(&["DEL", &key]);
            bucket.try_acquire(10).await.expect("a fresh bucket");
            granted += 10;
            bucket.cancel(reservation).await.unwrap();
            while bucket.try_acquire(1).await.is_ok() {
                granted += 1;
            }
            // 15 from the first key (its burst and a reservation), 10 from the fresh one.
            println!(
                "      DEL {policy_name:>8}: {granted} grants within milliseconds against {BURST} + one burst for the deleted key (the 5 reserved in it not cancelled)"
            );
            assert_eq!(granted, 25, "{policy_name}");
        }
    });
}

/// The password rotated under the fleet and put back: while it is wrong, every policy returns
/// the error (it is not an outage to paper over), and once it is right again the same bucket
/// is served within a second. `connect` tells an unreachable server from a refusal.
#[test]
fn a_rotated_password_is_an_error_and_the_connection_recovers() {
    let _serial = serial();
    let server = RedisServer::start_with_password("first");
    runtime().block_on(async {
        let connection =
            RedisConnection::connect(Client::open(server.url_with_password("first")).unwrap())
                .await
                .expect("connect");
        let buckets: Vec<_> = POLICIES
            .into_iter()
            .map(|name| {
                let bucket = RedisBucket::builder(&connection, format!("auth-{name}"), quota())
                    .policy(policy(name))
                    .timeout(TIMEOUT)
                    .connect_lazy()
                    .unwrap();
                (name, bucket)
            })
            .collect();
        for (_, bucket) in &buckets {
            assert_eq!(bucket.try_acquire(1).await.unwrap().source, Source::Redis);
        }
        server.cli(Some("first"), &["CONFIG", "SET", "requirepass", "second"]);
        server.cli(Some("second"), &["CLIENT", "KILL", "TYPE", "normal"]);
        tokio::time::sleep(Duration::from_millis(100)).await;
        for (name, bucket) in &buckets {
            // The first call may see the link drop; the next ones the refusal.
            let mut rejected = false;
            for _ in 0..5 {
                match bucket.try_acquire(1).await {
                    Err(Error::Rejected(_)) => {
                        rejected = true;
                        break;
                    }
                    Ok(grant) => assert_ne!(grant.source, Source::Redis, "{name}"),
                    Err(_) => {}
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            assert!(rejected, "{name}: a wrong password was never reported");
        }
        let refused = RedisConnection::connect(
            Client::open(server.url_with_password("first")).unwrap(),
        )
        .await;
        // Each message names the server and the cause, not only the `source()`.
        let address = format!("127.0.0.1:{}", server.port);
        match &refused {
            Err(error @ SetupError::Refused { .. }) => {
                let text = error.to_string();
                assert!(text.contains(&address), "{text}");
                assert!(text.contains("authentication failed"), "{text}");
            }
            other => panic!("{other:?}"),
        }
        let port = crate::support::free_port();
        let unreachable =
            RedisConnection::connect(Client::open(format!("redis://127.0.0.1:{port}/")).unwrap())
                .await;
        match &unreachable {
            Err(error @ SetupError::Unreachable { .. }) => {
                let text = error.to_string();
                assert!(text.contains(&format!("127.0.0.1:{port}")), "{text}");
                assert!(text.to_lowercase().contains("refused"), "{text}");
            }
            other => panic!("{other:?}"),
        }

        server.cli(Some("second"), &["CONFIG", "SET", "requirepass", "first"]);
        let back = Instant::now();
        for (name, bucket) in &buckets {
            loop {
                if let Ok(grant) = bucket.try_acquire(1).await {
                    if grant.source == Source::Redis {
                        break;
                    }
                }
                assert!(
                    back.elapsed() < Duration::from_secs(1),
                    "{name}: not served a second after the password was put back"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        println!(
            "     AUTH      all: Error::Rejected while the password was wrong, served again {} ms after it was put back",
            back.elapsed().as_millis()
        );
    });
}

/// A server turned into a read-only replica, and one out of memory: errors every policy
/// returns (no grant open or from the fallback), and the same buckets are served within a
/// second once the server is fixed.
#[test]
fn misconfiguration_is_an_error_under_every_policy() {
    let _serial = serial();
    let server = RedisServer::start();
    let nobody = crate::support::free_port().to_string();
    runtime().block_on(async {
        let connection =
            RedisConnection::connect_lazy(Client::open(server.url()).unwrap()).unwrap();
        let buckets: Vec<_> = POLICIES
            .into_iter()
            .map(|name| {
                let bucket = RedisBucket::builder(&connection, format!("misc-{name}"), quota())
                    .policy(policy(name))
                    .timeout(TIMEOUT)
                    .connect_lazy()
                    .unwrap();
                (name, bucket)
            })
            .collect();
        let breakages: [(&str, &[&str], &[&str]); 2] = [
            (
                "READONLY",
                &["REPLICAOF", "127.0.0.1", &nobody],
                &["REPLICAOF", "NO", "ONE"],
            ),
            (
                "OOM",
                &["CONFIG", "SET", "maxmemory", "1"],
                &["CONFIG", "SET", "maxmemory", "0"],
            ),
        ];
        for (what, break_it, fix_it) in breakages {
            for (_, bucket) in &buckets {
                bucket.try_acquire(1).await.expect("served before");
            }
            server.command(break_it);
            for (name, bucket) in &buckets {
                let result = bucket.try_acquire(1).await;
                match &result {
                    Err(Error::Rejected(error)) => {
                        let said = error.to_string().to_lowercase();
                        assert!(said.contains(&what.to_lowercase()), "{name}: {error}")
                    }
                    other => panic!("{what} {name}: {other:?}"),
                }
            }
            server.command(fix_it);
            let fixed = Instant::now();
            for (name, bucket) in &buckets {
                while bucket.try_acquire(1).await.map(|g| g.source).ok() != Some(Source::Redis) {
                    assert!(
                        fixed.elapsed() < Duration::from_secs(1),
                        "{what} {name}: not served a second after the fix"
                    );
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
            println!(
                "  {what:>8}      all: Error::Rejected under every policy, served again {} ms \
                 after the fix",
                fixed.elapsed().as_millis()
            );
        }
    });
}

/// A server restarted with 600 000 keys to load answers `LOADING` for a while: a fault the
/// policy decides (not an error), and the same connection is served once it has loaded.
#[test]
fn a_loading_server_is_a_fault_and_the_connection_recovers() {
    let _serial = serial();
    let server = Arc::new(Mutex::new(RedisServer::start()));
    server
        .lock()
        .unwrap()
        .command(&["DEBUG", "POPULATE", "600000"]);
    server.lock().unwrap().command(&["SAVE"]);
    let url = server.lock().unwrap().url();
    runtime().block_on(async {
        let connection = RedisConnection::connect_lazy(Client::open(url).unwrap()).unwrap();
        let build = |name: &str| {
            RedisBucket::builder(&connection, format!("loading-{name}"), quota())
                .policy(policy(name))
                .timeout(TIMEOUT)
                .connect_lazy()
                .unwrap()
        };
        let (closed, open) = (build("closed"), build("open"));
        closed.try_acquire(1).await.expect("served before");
        let restarted = Arc::clone(&server);
        let restart = std::thread::spawn(move || {
            let mut server = restarted.lock().unwrap();
            server.kill();
            server.restart(); // returns once the server answers PING: loaded
            Instant::now()
        });
        let (mut loading, mut open_grants, mut rejected) = (0, 0, 0);
        while !restart.is_finished() {
            match closed.try_acquire(1).await {
                Err(Error::Unavailable(fault))
                    if fault.to_string().to_lowercase().contains("loading") =>
                {
                    loading += 1
                }
                Err(Error::Rejected(_)) => rejected += 1,
                _ => {}
            }
            match open.try_acquire(1).await {
                Ok(grant) if grant.source == Source::Open => open_grants += 1,
                Err(Error::Rejected(_)) => rejected += 1,
                _ => {}
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let loaded = restart.join().unwrap();
        let mut served_after = None;
        while served_after.is_none() {
            if let Ok(grant) = closed.try_acquire(1).await {
                assert_eq!(grant.source, Source::Redis);
                served_after = Some(loaded.elapsed());
            }
            assert!(
                loaded.elapsed() < Duration::from_secs(1),
                "not served after loading"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        println!(
            "  LOADING   closed: {loading} calls answered LOADING (Unavailable), open: \
             {open_grants} granted open, 0 rejected; served {:?} after loading",
            served_after.unwrap()
        );
        assert_eq!(rejected, 0);
        assert!(loading >= 1, "no call saw the server loading");
    });
}

/// Values that are not buckets heal into a full bucket with an expiry; a key of another type
/// is an error every policy returns.
#[test]
fn a_value_that_is_not_a_bucket_heals() {
    let _serial = serial();
    let server = RedisServer::start();
    runtime().block_on(async {
        let connection =
            RedisConnection::connect_lazy(Client::open(server.url()).unwrap()).unwrap();
        let garbage = [
            "nan 5",
            "1 2 3",
            "abc",
            "",
            "inf 0 0 0",
            "1.5 0 0 0",
            // 300 years of debt: beyond any reservation
            "9000000000000000 0 0 0",
        ];
        for (i, value) in garbage.into_iter().enumerate() {
            let key = format!("garbage{i}");
            server.command(&["SET", &key, value]);
            let bucket = RedisBucket::builder(&connection, key.as_str(), quota())
                .policy(FaultPolicy::FailOpen)
                .connect_lazy()
                .unwrap();
            let grant = bucket.try_acquire(1).await.expect(value);
            assert_eq!(grant.source, Source::Redis, "{value:?}");
            assert_eq!(grant.level.unwrap().remaining, BURST - 1, "{value:?}");
            let ttl: i64 = server
                .command(&["PTTL", &key])
                .trim_start_matches(':')
                .parse()
                .unwrap();
            assert!((1..=1_100).contains(&ttl), "{value:?}: PTTL {ttl}");
            println!("  garbage {value:>24?}: read as a full bucket (9 left), PTTL {ttl} ms");
        }
        server.command(&["LPUSH", "listed", "x"]);
        for name in POLICIES {
            let bucket = RedisBucket::builder(&connection, "listed", quota())
                .policy(policy(name))
                .connect_lazy()
                .unwrap();
            let result = bucket.try_acquire(1).await;
            assert!(
                matches!(result, Err(Error::Rejected(_))),
                "{name}: {result:?}"
            );
        }
        // `connect` says Redis answered, and with what, rather than "cannot reach".
        let refused = RedisBucket::builder(&connection, "listed", quota())
            .connect()
            .await;
        match refused {
            Err(SetupError::Refused { error: said, .. }) => {
                assert_eq!(said.code(), Some("WRONGTYPE"), "{said}")
            }
            other => panic!("{other:?}"),
        }
    });
}

/// A hundred thousand buckets in one process, over one connection: every call served, and the
/// server sees one client (besides the one asking it).
#[test]
fn a_hundred_thousand_buckets_share_one_connection() {
    let _serial = serial();
    let server = RedisServer::start();
    runtime().block_on(async {
        let connection = RedisConnection::connect_lazy(Client::open(server.url()).unwrap()).unwrap();
        let buckets: Vec<_> = (0..100_000)
            .map(|i| {
                RedisBucket::builder(&connection, format!("user:{i}"), quota())
                    .timeout(Duration::from_secs(5))
                    .connect_lazy()
                    .unwrap()
            })
            .collect();
        let began = Instant::now();
        let mut granted = 0;
        for chunk in buckets.chunks(2_000) {
            let mut calls = tokio::task::JoinSet::new();
            for bucket in chunk {
                let bucket = bucket.clone();
                calls.spawn(async move { bucket.try_acquire(1).await });
            }
            while let Some(result) = calls.join_next().await {
                if result.unwrap().expect("served").source == Source::Redis {
                    granted += 1;
                }
            }
        }
        let took = began.elapsed();
        let clients = server.command(&["CLIENT", "LIST"]);
        let connections = clients.lines().filter(|line| line.contains("id=")).count();
        let keys = server.command(&["DBSIZE"]);
        println!(
            "  100 000 buckets: {granted} grants in {:.2} s over {} connection(s) besides this check's; DBSIZE {keys}",
            took.as_secs_f64(),
            connections - 1
        );
        assert_eq!(granted, 100_000);
        assert_eq!(connections - 1, RedisConnection::CONNECTIONS);
    });
}

fn sleep_until(start: Instant, at: Duration) {
    if let Some(left) = at.checked_sub(start.elapsed()) {
        std::thread::sleep(left);
    }
}

fn signal(pid: u32, signal: &str) {
    let status = std::process::Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
}

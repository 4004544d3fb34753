//! Faults: a server killed mid-run and restarted, a server that stops answering, a server that
//! is not there yet. Each policy does what it says, nothing panics or hangs, and the clients
//! resume by themselves.

use std::time::{Duration, Instant};

use tollgate::{Quota, Rate};
use tollgate_redis::{Client, Error, Fault, FaultPolicy, RedisBucket, RedisConnection, Source};

use crate::support::{
    free_port, report, runtime, serial, setting, sleep_until_unix, spawn_worker, unix_us,
    worker_role, RedisServer,
};

const TIMEOUT: Duration = Duration::from_millis(200);

fn quota() -> Quota {
    Quota::new(Rate::per_second(20)).burst(4)
}

fn policy(name: &str) -> FaultPolicy {
    match name {
        "closed" => FaultPolicy::FailClosed,
        "open" => FaultPolicy::FailOpen,
        // 10/s, burst 2
        "fallback" => FaultPolicy::fallback_share(quota(), 2),
        other => panic!("no policy {other}"),
    }
}

/// What one call answered, as a worker reports it.
fn outcome(result: &Result<tollgate_redis::Grant, Error>) -> &'static str {
    match result {
        Ok(grant) => match grant.source {
            Source::Redis => "redis+",
            Source::Fallback => "fallback+",
            Source::Open => "open+",
        },
        Err(Error::Denied { source, .. }) => match source {
            Source::Redis => "redis-",
            Source::Fallback => "fallback-",
            Source::Open => "open-",
        },
        Err(Error::Unavailable(_)) => "unavailable",
        Err(_) => "other",
    }
}

struct Sample {
    at_ms: u64,
    latency_us: u64,
    outcome: String,
}

fn samples(lines: &[String]) -> Vec<Sample> {
    lines
        .iter()
        .map(|line| {
            let mut parts = line.split_whitespace();
            let mut next = || parts.next().expect("a full sample line");
            Sample {
                at_ms: next().parse().unwrap(),
                latency_us: next().parse().unwrap(),
                outcome: next().to_string(),
            }
        })
        .collect()
}

/// The distinct outcomes of a phase, sorted.
fn outcomes<'a>(phase: &[&'a Sample]) -> Vec<&'a str> {
    let mut seen: Vec<&str> = phase.iter().map(|s| s.outcome.as_str()).collect();
    seen.sort();
    seen.dedup();
    seen
}

/// Three processes, one per policy, call `try_acquire` every 10 ms for 4.5 s while the server
/// is killed at 1 s and started again on the same port at 2.5 s.
#[test]
fn a_killed_server_follows_each_policy_and_clients_resume() {
    if let Some(role) = worker_role() {
        return runtime().block_on(call_through_the_outage(role));
    }
    let _serial = serial();
    let mut server = RedisServer::start();
    let start_us = unix_us() + 1_500_000;
    let (kill_ms, restart_ms, end_ms) = (1_000, 2_500, 4_500);
    let settings = [
        ("REDIS_URL", server.url()),
        ("START_US", start_us.to_string()),
        ("END_US", (start_us + end_ms * 1_000).to_string()),
    ];
    let test = "faults::a_killed_server_follows_each_policy_and_clients_resume";
    let workers: Vec<_> = ["closed", "open", "fallback"]
        .into_iter()
        .map(|role| (role, spawn_worker(test, role, &settings)))
        .collect();
    let at = |ms: u64| start_us + ms * 1_000;
    std::thread::sleep(Duration::from_micros(at(kill_ms).saturating_sub(unix_us())));
    server.kill();
    std::thread::sleep(Duration::from_micros(
        at(restart_ms).saturating_sub(unix_us()),
    ));
    server.restart();

    for (role, worker) in workers {
        let samples = samples(&report(worker, Duration::from_secs(30)));
        let phase = |from: u64, to: u64| -> Vec<&Sample> {
            samples
                .iter()
                .filter(|s| (from..to).contains(&s.at_ms))
                .collect()
        };
        let count = |phase: &[&Sample], outcome: &str| {
            phase.iter().filter(|s| s.outcome == outcome).count() as u64
        };
        // Nothing hangs: every call returned within the timeout and a margin for a busy box
        // (whose scheduler may leave a process waiting for a few hundred milliseconds).
        let slowest = samples.iter().map(|s| s.latency_us).max().unwrap();
        assert!(
            slowest <= (TIMEOUT + Duration::from_millis(800)).as_micros() as u64,
            "{role}: a call took {slowest} µs"
        );

        // Before the kill: Redis decides, within the model's bound.
        let before = phase(0, kill_ms - 50);
        assert_eq!(outcomes(&before), ["redis+", "redis-"], "{role} before");
        assert!(
            count(&before, "redis+") <= 4 + 20 * kill_ms / 1_000,
            "{role}"
        );

        // While the server is down (after the clients have seen it go).
        let down = phase(kill_ms + 300, restart_ms - 50);
        assert!(down.len() >= 40, "{role}: {} calls while down", down.len());
        match role {
            "closed" => assert_eq!(outcomes(&down), ["unavailable"], "{role}"),
            "open" => assert_eq!(outcomes(&down), ["open+"], "{role}"),
            _ => {
                assert_eq!(outcomes(&down), ["fallback+", "fallback-"], "{role}");
                // The local share: 10/s and burst 2, counted from the kill.
                let granted = count(&down, "fallback+");
                let bound = 2 + 10 * (restart_ms - 50 - kill_ms) / 1_000;
                assert!(
                    (5..=bound).contains(&granted),
                    "{role}: {granted} > {bound}"
                );
            }
        }

        // After the restart the same process is back on Redis, by itself.
        let after = phase(restart_ms + 1_500, end_ms);
        assert!(after.len() >= 20, "{role}: {} calls after", after.len());
        assert_eq!(outcomes(&after), ["redis+", "redis-"], "{role} after");
    }
}

async fn call_through_the_outage(role: String) {
    let start_us: u64 = setting("START_US").parse().unwrap();
    let end_us: u64 = setting("END_US").parse().unwrap();
    let client =
        RedisConnection::connect_lazy(Client::open(setting("REDIS_URL")).unwrap()).unwrap();
    let bucket = RedisBucket::builder(&client, format!("fault-{role}"), quota())
        .policy(policy(&role))
        .timeout(TIMEOUT)
        .connect()
        .await
        .expect("connect");
    sleep_until_unix(start_us).await;
    let mut lines = Vec::new();
    while unix_us() < end_us {
        let began = Instant::now();
        let result = bucket.try_acquire(1).await;
        let latency_us = began.elapsed().as_micros();
        let at_ms = (unix_us() - start_us) / 1_000;
        lines.push(format!("@@ {at_ms} {latency_us} {}", outcome(&result)));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    println!("{}", lines.join("\n"));
}

/// A frozen server answers nothing: each call gives up after the timeout and the policy
/// decides; once the server thaws, Redis decides again.
#[test]
fn a_frozen_server_times_out_and_recovers() {
    let _serial = serial();
    let server = RedisServer::start();
    runtime().block_on(async {
        let timeout = Duration::from_millis(100);
        let build = |name: &str, policy: FaultPolicy| {
            let client =
                RedisConnection::connect_lazy(Client::open(server.url()).unwrap()).unwrap();
            RedisBucket::builder(&client, format!("frozen-{name}"), quota())
                .policy(policy)
                .timeout(timeout)
                .connect()
        };
        let closed = build("closed", policy("closed")).await.unwrap();
        let open = build("open", policy("open")).await.unwrap();
        let fallback = build("fallback", policy("fallback")).await.unwrap();
        assert_eq!(closed.try_acquire(1).await.unwrap().source, Source::Redis);

        server.signal("STOP");
        let began = Instant::now();
        let result = closed.try_acquire(1).await;
        let took = began.elapsed();
        assert!(
            matches!(result, Err(Error::Unavailable(Fault::Timeout { after })) if after == timeout),
            "{result:?}"
        );
        assert!(
            took >= timeout && took < timeout + Duration::from_millis(400),
            "{took:?}"
        );
        assert_eq!(open.try_acquire(1).await.unwrap().source, Source::Open);
        // The local bucket starts empty when the outage begins: 10/s, no burst on top of what
        // Redis had left.
        let denied = fallback.try_acquire(1).await;
        assert!(
            matches!(
                denied,
                Err(Error::Denied {
                    source: Source::Fallback,
                    ..
                })
            ),
            "{denied:?}"
        );
        // A reservation falls back too, waits for the local rate, and cancels locally.
        let reservation = fallback.reserve(2, Duration::from_secs(1)).await.unwrap();
        assert_eq!(reservation.source(), Source::Fallback);
        assert!(
            reservation.wait() > Duration::from_millis(50),
            "{reservation:?}"
        );
        fallback.cancel(reservation).await.unwrap();

        server.signal("CONT");
        let back = Instant::now();
        loop {
            match closed.try_acquire(1).await {
                Ok(grant) if grant.source == Source::Redis => break,
                Err(Error::Denied { .. }) => break,
                _ => {}
            }
            assert!(back.elapsed() < Duration::from_secs(5), "never recovered");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(open.try_acquire(1).await.unwrap().source, Source::Redis);
    });
}

/// A bucket built while Redis is not there yet decides by its policy, and reaches Redis as
/// soon as it starts.
#[test]
fn a_bucket_built_before_its_server_connects_later() {
    let _serial = serial();
    let port = free_port();
    runtime().block_on(async {
        let client = RedisConnection::connect_lazy(
            Client::open(format!("redis://127.0.0.1:{port}/")).unwrap(),
        )
        .unwrap();
        let bucket = RedisBucket::builder(&client, "late", quota())
            .timeout(Duration::from_millis(100))
            .connect_lazy()
            .expect("lazy");
        let result = bucket.try_acquire(1).await;
        assert!(matches!(result, Err(Error::Unavailable(_))), "{result:?}");
        let _server = RedisServer::start_on(port);
        let began = Instant::now();
        loop {
            if let Ok(grant) = bucket.try_acquire(1).await {
                assert_eq!(grant.source, Source::Redis);
                break;
            }
            assert!(began.elapsed() < Duration::from_secs(5), "never connected");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // `connect` instead refuses a server that is not there.
        let nobody = RedisConnection::connect_lazy(
            Client::open(format!("redis://127.0.0.1:{}/", free_port())).unwrap(),
        )
        .unwrap();
        let refused = RedisBucket::builder(&nobody, "late", quota())
            .timeout(Duration::from_millis(100))
            .connect()
            .await;
        assert!(refused.is_err());
    });
}

//! Behind Sentinel: a primary and its replica on loopback, watched by three `redis-sentinel`s
//! (`redis-server --sentinel`); the primary is killed mid-run. Grants stay within the bound
//! (a burst, the rate over the run, and one burst the failover may lose), and the clients are
//! served by the promoted replica within a bound of the kill.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tollgate::{Quota, Rate};
use tollgate_redis::sentinel::Sentinel;
use tollgate_redis::{Error, FaultPolicy, Grant, RedisBucket, Source};

use crate::support::{free_port, runtime, serial, system, RedisServer};

const SERVICE: &str = "tollgate";

/// One `redis-sentinel` on a loopback port, stopped when dropped.
struct SentinelProcess {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl SentinelProcess {
    fn start(primary: u16) -> Self {
        let port = free_port();
        let dir =
            std::env::temp_dir().join(format!("tollgate-sentinel-{}-{port}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scratch directory");
        let config = dir.join("sentinel.conf");
        std::fs::write(
            &config,
            format!(
                "port {port}\nbind 127.0.0.1\ndir {}\n\
                 sentinel monitor {SERVICE} 127.0.0.1 {primary} 2\n\
                 sentinel down-after-milliseconds {SERVICE} 500\n\
                 sentinel failover-timeout {SERVICE} 5000\n\
                 sentinel parallel-syncs {SERVICE} 1\n",
                dir.display()
            ),
        )
        .expect("sentinel config");
        // `redis-sentinel` is `redis-server` started in Sentinel mode.
        let child = Command::new(system::program("redis-server", "redis-server"))
            .arg(&config)
            .args(["--sentinel", "--loglevel", "warning"])
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-sentinel starts");
        let sentinel = Self { child, port, dir };
        let start = Instant::now();
        while sentinel.cli(&["PING"]) != "PONG" {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "sentinel on {port}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        sentinel
    }

    fn cli(&self, args: &[&str]) -> String {
        let out = Command::new(system::program("redis-cli", "redis-server"))
            .args(["-p", &self.port.to_string()])
            .args(args)
            .output()
            .expect("redis-cli");
        String::from_utf8_lossy(&out.stdout).trim_end().to_string()
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// How many other Sentinels and replicas this one knows of.
    fn knows(&self) -> (usize, usize) {
        let count = |what: &str| {
            self.cli(&["SENTINEL", what, SERVICE])
                .lines()
                .filter(|line| line.trim() == "name")
                .count()
        };
        (count("sentinels"), count("replicas"))
    }
}

impl Drop for SentinelProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Failing closed: the shared bound, and one burst the failover may lose.
#[test]
fn a_failover_is_followed_within_the_bound_and_served_again_failing_closed() {
    failover("closed");
}

/// Falling back: as failing closed, and the local bucket's rate, from empty, for the outage.
#[test]
fn a_failover_is_followed_within_the_bound_and_served_again_falling_back() {
    failover("fallback");
}

/// Failing open: every call Redis cannot answer is granted, and only then; Redis's own grants
/// keep the bound.
#[test]
fn a_failover_is_followed_within_the_bound_and_served_again_failing_open() {
    failover("open");
}

fn failover(policy: &str) {
    let _serial = serial();
    let mut primary = RedisServer::start();
    let replica = RedisServer::start();
    let port = primary.port.to_string();
    assert_eq!(replica.cli(None, &["REPLICAOF", "127.0.0.1", &port]), "OK");
    let start = Instant::now();
    while !replica
        .cli(None, &["INFO", "replication"])
        .contains("master_link_status:up")
    {
        assert!(start.elapsed() < Duration::from_secs(10), "replica in sync");
        std::thread::sleep(Duration::from_millis(20));
    }
    let sentinels: Vec<SentinelProcess> = (0..3)
        .map(|_| SentinelProcess::start(primary.port))
        .collect();
    let start = Instant::now();
    while !sentinels.iter().all(|sentinel| sentinel.knows() == (2, 1)) {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the Sentinels find each other and the replica"
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    let rate = 100u64;
    let burst = 20u64;
    let quota = Quota::new(Rate::per_second(rate)).burst(burst);
    // One process: the fallback is the whole quota, locally.
    let fault_policy = match policy {
        "closed" => FaultPolicy::FailClosed,
        "open" => FaultPolicy::FailOpen,
        _ => FaultPolicy::fallback_share(quota, 1),
    };
    let urls: Vec<String> = sentinels.iter().map(SentinelProcess::url).collect();
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    let run = Duration::from_secs(8);
    let kill_at = Duration::from_millis(1500);
    let grants = Arc::new(AtomicU64::new(0));
    let fallback_grants = Arc::new(AtomicU64::new(0));
    // When each grant made open came, since the start.
    let open_at = Arc::new(Mutex::new(Vec::new()));
    // When each grant by Redis came, since the start.
    let granted_at = Arc::new(Mutex::new(Vec::new()));
    // When Redis answered, a grant or a denial: served, since the start.
    let answered_at = Arc::new(Mutex::new(Vec::new()));
    let rt = runtime();
    let (elapsed, killed_at) = rt.block_on(async {
        let redis = Sentinel::new(&urls, SERVICE)
            .poll(Duration::from_millis(50))
            .connect()
            .await
            .expect("the primary the Sentinels name");
        let bucket = RedisBucket::builder(&redis, "sentinel:bound", quota)
            .policy(fault_policy)
            .timeout(Duration::from_millis(100))
            .connect()
            .await
            .expect("bucket");
        let start = Instant::now();
        let mut tasks = Vec::new();
        for _ in 0..4 {
            let (bucket, grants, granted_at) = (bucket.clone(), grants.clone(), granted_at.clone());
            let (fallback_grants, answered_at) = (fallback_grants.clone(), answered_at.clone());
            let open_at = open_at.clone();
            tasks.push(tokio::spawn(async move {
                while start.elapsed() < run {
                    let answer = bucket.try_acquire(1).await;
                    if matches!(
                        answer,
                        Ok(Grant {
                            source: Source::Redis,
                            ..
                        }) | Err(Error::Denied {
                            source: Source::Redis,
                            ..
                        })
                    ) {
                        answered_at.lock().unwrap().push((start.elapsed(), true));
                    } else {
                        answered_at.lock().unwrap().push((start.elapsed(), false));
                    }
                    if let Ok(grant) = answer {
                        grants.fetch_add(1, Ordering::Relaxed);
                        match grant.source {
                            Source::Redis => granted_at.lock().unwrap().push(start.elapsed()),
                            Source::Fallback => {
                                fallback_grants.fetch_add(1, Ordering::Relaxed);
                            }
                            Source::Open => open_at.lock().unwrap().push(start.elapsed()),
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            }));
        }
        tokio::time::sleep(kill_at).await;
        let killed_at = start.elapsed();
        primary.kill();
        for task in tasks {
            task.await.expect("a client task");
        }
        (start.elapsed(), killed_at)
    });
    let grants = grants.load(Ordering::Relaxed);
    let fallback_grants = fallback_grants.load(Ordering::Relaxed);
    // A reply read just after the kill may have been sent before it: served again is the
    // first answer by Redis after the first call it did not answer.
    let answers = answered_at.lock().unwrap().clone();
    let first_unserved = answers
        .iter()
        .filter(|(at, by_redis)| *at > killed_at && !by_redis)
        .map(|(at, _)| *at)
        .min()
        .expect("calls unserved after the kill");
    let served_again = answers
        .iter()
        .filter(|(at, by_redis)| *at > first_unserved && *by_redis)
        .map(|(at, _)| *at)
        .min()
        .expect("served again after the kill");
    let to_served = served_again - killed_at;
    let mut bound = burst + (rate as f64 * elapsed.as_secs_f64()).ceil() as u64 + burst;
    let open_at = open_at.lock().unwrap().clone();
    let opened = open_at.len() as u64;
    if policy == "open" {
        // Granted open only while Redis did not answer: from the first call it left unanswered
        // (sent at most a timeout before) until it served again; Redis's own grants keep the
        // bound.
        let timeout = Duration::from_millis(100);
        assert!(opened > 0, "calls granted open during the failover");
        for at in &open_at {
            assert!(
                *at + timeout >= first_unserved && *at <= served_again + timeout,
                "granted open at {at:?}, outside the outage ({first_unserved:?} to {served_again:?})"
            );
        }
    } else if policy != "closed" {
        // The local bucket, from empty, for the outage: until Redis served again.
        bound += (rate as f64 * to_served.as_secs_f64()).ceil() as u64;
    } else {
        assert_eq!(fallback_grants, 0);
    }
    eprintln!(
        "sentinel failover, {policy}: {grants} grants ({fallback_grants} by the fallback, {opened} open, bound on the others) in \
         {elapsed:?} against a bound of {bound} (burst {burst} + {rate}/s x elapsed + one burst \
         lost{}); served again {to_served:?} after the primary was killed",
        if policy == "fallback" {
            " + the fallback's rate x outage"
        } else {
            ""
        }
    );
    assert!(
        grants - opened <= bound,
        "{} grants by Redis > {bound}",
        grants - opened
    );
    if policy != "open" {
        assert_eq!(opened, 0);
    }
    assert!(
        replica.cli(None, &["ROLE"]).starts_with("master"),
        "the replica was promoted"
    );
    assert!(
        to_served < Duration::from_secs(5),
        "served again {to_served:?} after the kill"
    );
    // Served for most of the rest of the run: the rate, from then on, with room for the calls'
    // spacing.
    let after = granted_at
        .lock()
        .unwrap()
        .iter()
        .filter(|at| **at > served_again)
        .count() as f64;
    // The fallback's grants are charged to Redis once it serves again, and come off these.
    let expected = rate as f64 * (elapsed - served_again).as_secs_f64() - fallback_grants as f64;
    assert!(
        after >= expected * 0.8,
        "{after} grants after, {expected} due"
    );
}

//! A Redis restart shorter than the call timeout fails no call: the connection found dead is
//! replaced and the call sent again, under every policy.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tollgate::{Quota, Rate};
use tollgate_redis::{Error, FaultPolicy, RedisBucket, RedisKeyed, Source};

use crate::connect;
use crate::support::{serial, RedisServer};

const WAITERS: usize = 8;

fn quota() -> Quota {
    Quota::new(Rate::per_second(20)).burst(2)
}

/// What a call answered, for the report.
fn kind<T: std::fmt::Debug>(result: &Result<T, Error>, source: Option<Source>) -> String {
    match (result, source) {
        (Ok(_), Some(Source::Redis) | None) => "granted".to_string(),
        (Ok(_), Some(source)) => format!("granted by the policy ({source:?})"),
        (Err(Error::Denied { source, .. }), _) => format!("denied by {source:?}"),
        (Err(error), _) => format!("failed: {error}"),
    }
}

/// Per policy, eight waiters queue in `acquire` on a bucket that serves them over 0.4 s, a
/// poller calls `try_acquire` every 5 ms, and a per-key limiter (failing closed, and open) is
/// polled as often; the server is killed 100 ms in and started again on the same port 300 ms
/// later (a restart within the 1 s timeout). Every waiter is served and
/// every call is answered by Redis: none fails, none is decided by the policy.
#[test]
fn a_restart_within_the_timeout_fails_no_call() {
    let _serial = serial();
    let mut server = RedisServer::start();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let answers = Arc::new(Mutex::new(Vec::<(String, String)>::new()));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let redis = rt.block_on(connect(&server));
    let clients = rt.spawn({
        let (answers, stop) = (Arc::clone(&answers), Arc::clone(&stop));
        async move {
            let mut tasks = tokio::task::JoinSet::new();
            let policies = [
                ("closed", FaultPolicy::FailClosed),
                ("open", FaultPolicy::FailOpen),
                ("fallback", FaultPolicy::fallback_share(quota(), 2)),
            ];
            for (name, policy) in policies {
                let bucket = RedisBucket::builder(&redis, format!("restart-{name}"), quota())
                    .policy(policy)
                    .timeout(Duration::from_secs(1))
                    .connect()
                    .await
                    .unwrap();
                for _ in 0..WAITERS {
                    let (bucket, answers) = (bucket.clone(), Arc::clone(&answers));
                    tasks.spawn(async move {
                        let result = bucket.acquire(1).await;
                        let who = format!("{name} waiter");
                        answers.lock().unwrap().push((who, kind(&result, None)));
                    });
                }
                let (answers, stop) = (Arc::clone(&answers), Arc::clone(&stop));
                let poller = RedisBucket::builder(&redis, format!("poll-{name}"), quota())
                    .policy(policy)
                    .timeout(Duration::from_secs(1))
                    .connect_lazy()
                    .unwrap();
                tasks.spawn(async move {
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        let result = poller.try_acquire(1).await;
                        let source = result.as_ref().ok().map(|grant| grant.source);
                        let who = format!("{name} try_acquire");
                        answers.lock().unwrap().push((who, kind(&result, source)));
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                });
            }
            for (name, open) in [("keyed closed", false), ("keyed open", true)] {
                let mut keyed = RedisKeyed::new(&redis, format!("{name}:"), quota())
                    .unwrap()
                    .timeout(Duration::from_secs(1));
                if open {
                    keyed = keyed.fail_open();
                }
                let (answers, stop) = (Arc::clone(&answers), Arc::clone(&stop));
                tasks.spawn(async move {
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        let results = keyed.try_acquire_many(&[("a", 1), ("b", 1)]).await;
                        let seen: Vec<(String, String)> = results
                            .iter()
                            .map(|result| {
                                let source = result.as_ref().ok().map(|grant| grant.source);
                                (name.to_string(), kind(result, source))
                            })
                            .collect();
                        answers.lock().unwrap().extend(seen);
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                });
            }
            tasks
        }
    });
    std::thread::sleep(Duration::from_millis(100));
    let down = Instant::now();
    server.kill();
    // Down long enough that every caller finds it gone, and sees connections refused.
    std::thread::sleep(Duration::from_millis(300));
    server.restart();
    let restart = down.elapsed();
    std::thread::sleep(Duration::from_millis(600));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    rt.block_on(async {
        let mut tasks = clients.await.expect("clients");
        while let Some(task) = tasks.join_next().await {
            task.expect("client task");
        }
    });
    let answers = answers.lock().unwrap().clone();
    let mut kinds: std::collections::BTreeMap<&(String, String), u64> = Default::default();
    for answer in &answers {
        *kinds.entry(answer).or_default() += 1;
    }
    println!("restart took {restart:?}; answers:");
    for ((who, kind), count) in &kinds {
        println!("  {who:22} {kind:50} {count}");
    }
    let waiters = answers.iter().filter(|(who, _)| who.ends_with("waiter"));
    assert_eq!(waiters.clone().count(), 3 * WAITERS);
    let wrong: Vec<_> = answers
        .iter()
        .filter(|(_, kind)| kind != "granted" && kind != "denied by Redis")
        .collect();
    assert!(
        wrong.is_empty(),
        "{} calls failed or were decided by the policy over a {restart:?} restart: {:?}",
        wrong.len(),
        &wrong[..wrong.len().min(5)]
    );
}

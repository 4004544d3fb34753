//! Corners: one key used by a `RedisBucket` and a `RedisKeyed` at once, and `SCRIPT FLUSH`
//! while calls run.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tollgate::{Quota, Rate};
use tollgate_redis::{Error, RedisBucket, RedisKeyed, Source};

use crate::connect;
use crate::support::{serial, RedisServer};

const RATE: u64 = 100;
const BURST: u64 = 10;

/// Tokens used: when, how many, by which caller.
type Uses = Arc<Mutex<Vec<(Instant, u64, &'static str)>>>;

fn quota() -> Quota {
    Quota::new(Rate::per_second(RATE)).burst(BURST)
}

fn multi_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// One key, `shared:x`, drawn from by a `RedisBucket` (waits, takes of two, reservations of
/// three acted on when due) and by a `RedisKeyed` under the prefix `shared:` (takes of one),
/// all at once for 2 s, with the same quota (100/s, burst 10). Each token counts when it may be
/// used (a reservation's when it is due): together they stay within `burst + rate × elapsed`,
/// and each side is served (one does not starve the other, and neither reads the other's
/// state as garbage).
#[test]
fn one_key_from_a_bucket_and_a_keyed_limiter_keeps_one_bound() {
    let _serial = serial();
    let server = RedisServer::start();
    let rt = multi_thread();
    let uses: Uses = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let failures = Arc::new(AtomicU64::new(0));
    let began = Instant::now();
    rt.block_on(async {
        let redis = connect(&server).await;
        let bucket = RedisBucket::builder(&redis, "shared:x", quota())
            .connect_lazy()
            .unwrap();
        let keyed = RedisKeyed::new(&redis, "shared:", quota()).unwrap();
        assert_eq!(keyed.redis_key("x"), bucket.key());
        let mut tasks = tokio::task::JoinSet::new();
        let note = |uses: &Uses, at, n, who| {
            uses.lock().unwrap().push((at, n, who));
        };
        {
            let (bucket, uses, stop) = (bucket.clone(), Arc::clone(&uses), Arc::clone(&stop));
            tasks.spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    if bucket.acquire(1).await.is_ok() {
                        note(&uses, Instant::now(), 1, "bucket acquire");
                    }
                }
            });
        }
        {
            let (bucket, uses, stop) = (bucket.clone(), Arc::clone(&uses), Arc::clone(&stop));
            tasks.spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    if bucket.try_acquire(2).await.is_ok() {
                        note(&uses, Instant::now(), 2, "bucket try_acquire");
                    }
                    tokio::time::sleep(Duration::from_millis(3)).await;
                }
            });
        }
        {
            let (bucket, uses, stop) = (bucket.clone(), Arc::clone(&uses), Arc::clone(&stop));
            tasks.spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    if let Ok(reservation) = bucket.reserve(3, Duration::from_millis(50)).await {
                        // Usable from when it is due, counted from its answer: never earlier.
                        let due = Instant::now() + reservation.wait();
                        note(&uses, due, 3, "bucket reserve");
                        tokio::time::sleep_until(due.into()).await;
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            });
        }
        {
            let (keyed, uses, stop) = (keyed.clone(), Arc::clone(&uses), Arc::clone(&stop));
            let failures = Arc::clone(&failures);
            tasks.spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    match keyed.try_acquire("x", 1).await {
                        Ok(grant) => {
                            assert_eq!(grant.source, Source::Redis);
                            note(&uses, Instant::now(), 1, "keyed");
                        }
                        Err(Error::Denied { .. }) => {}
                        Err(_) => {
                            failures.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            });
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
        stop.store(true, Ordering::Relaxed);
        while let Some(task) = tasks.join_next().await {
            task.expect("task");
        }
    });
    let uses = uses.lock().unwrap().clone();
    let last = uses.iter().map(|(at, ..)| *at).max().unwrap_or(began);
    let elapsed = last - began;
    let total: u64 = uses.iter().map(|(_, n, _)| n).sum();
    let bound = BURST + RATE * elapsed.as_micros() as u64 / 1_000_000;
    let by = |who: &str| -> u64 {
        uses.iter()
            .filter(|(_, _, w)| *w == who)
            .map(|(_, n, _)| n)
            .sum()
    };
    println!(
        "one key, two limiters: {total} tokens used in {elapsed:?} (bound {bound}): acquire {}, \
         try_acquire {}, reserve {}, keyed {}",
        by("bucket acquire"),
        by("bucket try_acquire"),
        by("bucket reserve"),
        by("keyed")
    );
    assert_eq!(failures.load(Ordering::Relaxed), 0);
    assert!(total <= bound, "{total} > {bound}");
    assert!(total * 10 >= bound * 9, "{total} of {bound}");
    assert!(
        by("keyed") > 0 && by("bucket acquire") > 0,
        "one side starved"
    );
}

/// `SCRIPT FLUSH` every 2 ms for 2 s while a bucket takes every millisecond and a per-key
/// limiter decides 50 keys per pipeline: every call is answered by Redis (none `Rejected`,
/// none failed to the policy), and each key stays within its bound.
#[test]
fn script_flush_during_calls_fails_no_call() {
    let _serial = serial();
    let server = RedisServer::start();
    let rt = multi_thread();
    let stop = Arc::new(AtomicBool::new(false));
    let failed = Arc::new(Mutex::new(Vec::<String>::new()));
    let granted = Arc::new(Mutex::new(std::collections::BTreeMap::<String, u64>::new()));
    let flushes = Arc::new(AtomicU64::new(0));
    let began = Instant::now();
    rt.block_on(async {
        let redis = connect(&server).await;
        let mut tasks = tokio::task::JoinSet::new();
        let bucket = RedisBucket::builder(&redis, "flushed", quota())
            .connect_lazy()
            .unwrap();
        {
            let (stop, failed, granted) =
                (Arc::clone(&stop), Arc::clone(&failed), Arc::clone(&granted));
            tasks.spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    match bucket.try_acquire(1).await {
                        Ok(_) => *granted.lock().unwrap().entry("bucket".into()).or_default() += 1,
                        Err(Error::Denied { .. }) => {}
                        Err(error) => failed.lock().unwrap().push(format!("bucket: {error}")),
                    }
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            });
        }
        {
            let keyed = RedisKeyed::new(&redis, "flushed:", quota()).unwrap();
            let (stop, failed, granted) =
                (Arc::clone(&stop), Arc::clone(&failed), Arc::clone(&granted));
            tasks.spawn(async move {
                let names: Vec<String> = (0..50).map(|n| format!("k{n}")).collect();
                let requests: Vec<(&str, u32)> =
                    names.iter().map(|name| (name.as_str(), 1)).collect();
                while !stop.load(Ordering::Relaxed) {
                    let answers = keyed.try_acquire_many(&requests).await;
                    for (name, answer) in names.iter().zip(answers) {
                        match answer {
                            Ok(_) => *granted.lock().unwrap().entry(name.clone()).or_default() += 1,
                            Err(Error::Denied { .. }) => {}
                            Err(error) => failed.lock().unwrap().push(format!("{name}: {error}")),
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            });
        }
        {
            let (stop, flushes) = (Arc::clone(&stop), Arc::clone(&flushes));
            let client = tollgate_redis::Client::open(server.url()).unwrap();
            tasks.spawn(async move {
                let mut flusher = client.get_multiplexed_async_connection().await.unwrap();
                while !stop.load(Ordering::Relaxed) {
                    let _: () = redis::cmd("SCRIPT")
                        .arg("FLUSH")
                        .query_async(&mut flusher)
                        .await
                        .unwrap();
                    flushes.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            });
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
        stop.store(true, Ordering::Relaxed);
        while let Some(task) = tasks.join_next().await {
            task.expect("task");
        }
    });
    let elapsed = began.elapsed();
    let bound = BURST + RATE * elapsed.as_micros() as u64 / 1_000_000;
    let failed = failed.lock().unwrap().clone();
    let granted = granted.lock().unwrap().clone();
    let most = granted.values().copied().max().unwrap_or(0);
    println!(
        "{} flushes in {elapsed:?}: {} calls failed; most grants to one key {most} (bound {bound})",
        flushes.load(Ordering::Relaxed),
        failed.len()
    );
    assert!(
        failed.is_empty(),
        "{} failed, first {:?}",
        failed.len(),
        failed.first()
    );
    assert!(most <= bound, "{most} > {bound}");
    assert_eq!(granted.len(), 51, "some key was never served: {granted:?}");
}

//! Repeated failovers on a real Redis Cluster: the master holding a set of slots is killed, its
//! replica takes over, the killed node comes back as the new master's replica, and the new
//! master is killed in turn, again and again. Every call is decided by Redis or by the fault
//! policy (never [`Error::Rejected`], which says "misconfigured"), no key grants beyond its
//! bound, and the other masters' keys are served throughout.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tollgate::{Quota, Rate};
use tollgate_redis::{Error, FaultPolicy, Grant, RedisBucket, RedisConnection, RedisKeyed, Source};

use crate::cluster::{cli, wait_for, Cluster};
use crate::support::serial;

const RATE: u64 = 10;
const BURST: u64 = 10;
/// Killed masters in one run: the floor.
const FAILOVERS: usize = 10;
/// Keys of each per-key limiter, spread over every master.
const KEYS: usize = 24;
/// Longer than replication lags on loopback: a failover loses at most the writes of this long
/// before the kill.
const LAG_MS: u64 = 100;

fn quota() -> Quota {
    Quota::new(Rate::per_second(RATE)).burst(BURST)
}

/// How a call was answered.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Answer {
    /// Granted by Redis.
    Redis,
    /// Granted by the policy: open, or the local fallback bucket.
    Policy(Source),
    /// Denied by the bucket (Redis's or the fallback's).
    Denied,
    /// Refused by the policy (failing closed).
    Unavailable,
    /// Answered "misconfigured": the failure this test hunts.
    Rejected(String),
}

fn answer(result: &Result<Grant, Error>) -> Answer {
    match result {
        Ok(grant) if grant.source == Source::Redis => Answer::Redis,
        Ok(grant) => Answer::Policy(grant.source),
        Err(Error::Denied { .. }) => Answer::Denied,
        Err(Error::Unavailable(_)) => Answer::Unavailable,
        Err(Error::Rejected(error)) => Answer::Rejected(error.to_string()),
        Err(other) => Answer::Rejected(format!("unknown error {other}")),
    }
}

/// One answer: when (ms after the run began), to which limiter's key.
#[derive(Clone, Debug)]
struct Seen {
    at_ms: u64,
    /// `"<limiter>/<key>"`.
    who: String,
    answer: Answer,
}

/// The master of `slot` now, by the live nodes' view: `None` while it has none.
fn master_of(cluster: &Cluster, slot: u16) -> Option<u16> {
    cluster
        .masters()
        .into_iter()
        .find(|(_, ranges)| {
            ranges
                .iter()
                .any(|&(low, high)| (low..=high).contains(&slot))
        })
        .map(|(port, _)| port)
}

/// Whether the node at `port` is a replica in sync with its master.
fn is_synced_replica(port: u16) -> bool {
    let replication = cli(port, &["INFO", "replication"]);
    replication.contains("role:slave") && replication.contains("master_link_status:up")
}

/// The master holding one slot range (and so the shared buckets' keys and a third of each
/// limiter's keys) is killed ten times in one run: each time its replica takes over
/// (node timeout 500 ms), the killed node is started again and rejoins as the new master's
/// replica, and once it is in sync the new master is killed. Two clients (each its own
/// cluster connection) call, every 25 ms, a shared bucket under each of the three policies
/// and a per-key limiter of 24 keys under each of its two, all at 10/s burst 10.
///
/// No answer is [`Error::Rejected`]; each key's grants counted in Redis (and by the local
/// fallback) stay within `burst + rate × elapsed`, plus the writes a failover may lose (at most
/// those granted in the 100 ms before a kill); the keys of the masters never killed are
/// served throughout (no gap of 1.5 s between grants); the killed slots are served by
/// Redis again after each promotion.
#[test]
fn repeated_failovers_are_faults_or_answers_never_rejections() {
    let _serial = serial();
    let mut cluster = Cluster::start_with_node_timeout(500);
    let masters = cluster.masters();
    assert_eq!(masters.len(), 3, "{masters:?}");
    let (first_victim, victim_ranges) = masters[0].clone();
    let slot_of = |key: &str| -> u16 {
        cli(first_victim, &["CLUSTER", "KEYSLOT", key])
            .parse()
            .expect("a slot")
    };
    let on_victim = |slot: u16| {
        victim_ranges
            .iter()
            .any(|&(low, high)| (low..=high).contains(&slot))
    };
    // The shared buckets' key: on the victim's slots.
    let shared_key = (0..10_000)
        .map(|n| format!("shared-{n}"))
        .find(|key| on_victim(slot_of(key)))
        .expect("a key on the victim");
    let victim_slot = slot_of(&shared_key);
    let key_names: Vec<String> = (0..KEYS).map(|n| format!("user{n}")).collect();
    let keyed_policies = [("keyed-closed", false), ("keyed-open", true)];
    // Which keys (as `"<limiter>/<key>"`) live on the victim's slots.
    let mut victims: Vec<String> = vec![
        "shared-closed".to_string(),
        "shared-open".to_string(),
        "shared-fallback".to_string(),
    ];
    let mut survivors: Vec<String> = Vec::new();
    for (prefix, _) in keyed_policies {
        for name in &key_names {
            let who = format!("{prefix}/{name}");
            if on_victim(slot_of(&format!("{prefix}:{name}"))) {
                victims.push(who);
            } else {
                survivors.push(who);
            }
        }
    }
    assert!(victims.len() > 3 && !survivors.is_empty(), "{victims:?}");
    let urls = cluster.urls();
    let seen = Arc::new(Mutex::new(Vec::<Seen>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let began = Instant::now();
    let clients = rt.spawn({
        let (seen, stop, shared_key) = (Arc::clone(&seen), Arc::clone(&stop), shared_key.clone());
        let key_names = key_names.clone();
        async move {
            let nodes: Vec<&str> = urls.iter().map(String::as_str).collect();
            let mut tasks = tokio::task::JoinSet::new();
            for _client in 0..2 {
                let connection = RedisConnection::connect_cluster(&nodes).await.unwrap();
                let policies = [
                    ("shared-closed", FaultPolicy::FailClosed),
                    ("shared-open", FaultPolicy::FailOpen),
                    ("shared-fallback", FaultPolicy::fallback_share(quota(), 2)),
                ];
                for (name, policy) in policies {
                    let bucket = RedisBucket::builder(&connection, shared_key.clone(), quota())
                        .policy(policy)
                        .timeout(Duration::from_millis(200))
                        .connect_lazy()
                        .unwrap();
                    let (seen, stop) = (Arc::clone(&seen), Arc::clone(&stop));
                    tasks.spawn(async move {
                        let mut tick = tokio::time::interval(Duration::from_millis(25));
                        while !stop.load(Ordering::Relaxed) {
                            tick.tick().await;
                            let answer = answer(&bucket.try_acquire(1).await);
                            let at_ms = began.elapsed().as_millis() as u64;
                            let who = name.to_string();
                            seen.lock().unwrap().push(Seen { at_ms, who, answer });
                        }
                    });
                }
                for (prefix, open) in keyed_policies {
                    let mut limiter = RedisKeyed::new(&connection, format!("{prefix}:"), quota())
                        .unwrap()
                        .timeout(Duration::from_millis(200));
                    if open {
                        limiter = limiter.fail_open();
                    }
                    let (seen, stop) = (Arc::clone(&seen), Arc::clone(&stop));
                    let key_names = key_names.clone();
                    tasks.spawn(async move {
                        let requests: Vec<(&str, u32)> =
                            key_names.iter().map(|name| (name.as_str(), 1)).collect();
                        let mut tick = tokio::time::interval(Duration::from_millis(25));
                        while !stop.load(Ordering::Relaxed) {
                            tick.tick().await;
                            let answers = limiter.try_acquire_many(&requests).await;
                            let at_ms = began.elapsed().as_millis() as u64;
                            let mut seen = seen.lock().unwrap();
                            for (name, result) in key_names.iter().zip(&answers) {
                                let who = format!("{prefix}/{name}");
                                seen.push(Seen {
                                    at_ms,
                                    who,
                                    answer: answer(result),
                                });
                            }
                        }
                    });
                }
            }
            while let Some(task) = tasks.join_next().await {
                task.expect("client task");
            }
        }
    });
    // Traffic before the first kill.
    std::thread::sleep(Duration::from_millis(1_000));
    // (kill, promotion) instants in ms after `began`.
    let mut failovers: Vec<(u64, u64)> = Vec::new();
    let ms = || began.elapsed().as_millis() as u64;
    for _ in 0..FAILOVERS {
        let victim = master_of(&cluster, victim_slot).expect("the slot has a master");
        cluster.kill(victim);
        let killed_ms = ms();
        wait_for(Duration::from_secs(15), || {
            master_of(&cluster, victim_slot).is_some_and(|master| master != victim)
        });
        let promoted_ms = ms();
        failovers.push((killed_ms, promoted_ms));
        cluster.restart(victim);
        wait_for(Duration::from_secs(20), || is_synced_replica(victim));
        // Traffic on the new master before it is killed in turn.
        std::thread::sleep(Duration::from_millis(300));
    }
    std::thread::sleep(Duration::from_millis(1_000));
    stop.store(true, Ordering::Relaxed);
    rt.block_on(clients).expect("clients");
    let elapsed_ms = ms();
    let seen = seen.lock().unwrap().clone();

    // Answers per kind, per limiter.
    let mut kinds: BTreeMap<(String, String), u64> = BTreeMap::new();
    for s in &seen {
        let limiter = s.who.split('/').next().unwrap_or("").to_string();
        let kind = match &s.answer {
            Answer::Rejected(_) => "Rejected".to_string(),
            other => format!("{other:?}"),
        };
        *kinds.entry((limiter, kind)).or_default() += 1;
    }
    println!(
        "{} failovers in {:.1} s; answers per kind:",
        failovers.len(),
        elapsed_ms as f64 / 1e3
    );
    for ((limiter, kind), count) in &kinds {
        println!("  {limiter:16} {kind:18} {count}");
    }
    let rejected: Vec<&Seen> = seen
        .iter()
        .filter(|s| matches!(s.answer, Answer::Rejected(_)))
        .collect();
    for s in rejected.iter().take(5) {
        println!("  rejected: {s:?}");
    }

    // Each key's counted grants against its bound over the whole run: `burst + rate ×
    // elapsed`, plus what a failover may lose (replication is asynchronous): the grants of the
    // last 100 ms before each kill, far more than replication lags on loopback.
    let strict = BURST + RATE * elapsed_ms / 1_000;
    let mut counted: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    for s in &seen {
        if matches!(s.answer, Answer::Redis | Answer::Policy(Source::Fallback)) {
            let lost = failovers
                .iter()
                .any(|&(killed, _)| s.at_ms <= killed && s.at_ms + LAG_MS > killed);
            let entry = counted.entry(s.who.as_str()).or_default();
            entry.0 += 1;
            entry.1 += u64::from(lost);
        }
    }
    let over: Vec<(&str, u64, u64)> = counted
        .iter()
        .filter(|(_, (n, lost))| *n > strict + lost)
        .map(|(who, (n, lost))| (*who, *n, strict + lost))
        .collect();
    let (busiest, (most, lost)) = counted
        .iter()
        .max_by_key(|(_, (n, _))| *n)
        .map(|(who, n)| (*who, *n))
        .unwrap_or(("none", (0, 0)));
    let above_strict = counted.values().filter(|(n, _)| *n > strict).count();
    println!(
        "most grants to one key: {most} ({busiest}) against its bound {strict} + {lost} granted \
         just before kills; {above_strict} keys above {strict}"
    );
    // The survivors: the longest gap between Redis grants, per key.
    let gap_of = |who: &str| {
        let times: Vec<u64> = seen
            .iter()
            .filter(|s| s.who == who && s.answer == Answer::Redis)
            .map(|s| s.at_ms)
            .collect();
        let first = times.first().copied().unwrap_or(elapsed_ms);
        times
            .windows(2)
            .map(|pair| pair[1] - pair[0])
            .chain([first, elapsed_ms - times.last().copied().unwrap_or(0)])
            .max()
            .unwrap_or(elapsed_ms)
    };
    let survivor_gap = survivors.iter().map(|who| gap_of(who)).max().unwrap_or(0);
    println!(
        "surviving masters' keys ({}): longest gap between grants {survivor_gap} ms",
        survivors.len()
    );

    // After each promotion: how long until the killed slots were answered by Redis again,
    // shared bucket and per-key limiter apart.
    let served_after = |from_ms: u64, prefix: &str| {
        seen.iter()
            .filter(|s| {
                s.at_ms >= from_ms
                    && s.who.starts_with(prefix)
                    && victims.contains(&s.who)
                    && matches!(s.answer, Answer::Redis | Answer::Denied)
            })
            .map(|s| s.at_ms)
            .min()
    };
    let mut resumed = Vec::new();
    for (n, &(killed, promoted)) in failovers.iter().enumerate() {
        let shared = served_after(promoted, "shared-closed").map(|at| at - promoted);
        let keyed = served_after(promoted, "keyed-closed").map(|at| at - promoted);
        println!(
            "  failover {n}: promoted {} ms after the kill; Redis answered again {shared:?} ms \
             (shared) and {keyed:?} ms (keyed) after the promotion",
            promoted - killed
        );
        resumed.push((shared, keyed));
    }

    assert!(failovers.len() >= FAILOVERS);
    assert!(
        rejected.is_empty(),
        "{} calls answered Rejected, first {:?}",
        rejected.len(),
        rejected.first()
    );
    assert!(over.is_empty(), "keys over their bound: {over:?}");
    // A refill of one token is 100 ms; the cluster client re-reads its map of slots after each
    // kill, which holds calls to every master for a moment: a gap of 1.5 s is an interruption.
    assert!(
        survivor_gap < 1_500,
        "a surviving key waited {survivor_gap} ms"
    );
    for (n, (shared, keyed)) in resumed.iter().enumerate() {
        for (what, after) in [("shared", shared), ("keyed", keyed)] {
            assert!(
                after.is_some_and(|after| after < 5_000),
                "failover {n}: the {what} keys answered by Redis {after:?} ms after promotion"
            );
        }
    }
}

//! Buckets on a real local Redis Cluster (three masters, three replicas, started and stopped
//! here): keys on every master, a master killed mid-run, each policy within its bound, and the
//! clients served again once its replica has taken over.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tollgate::{Quota, Rate};
use tollgate_redis::{FaultPolicy, RedisBucket, RedisConnection, RedisKeyed, Source};

use crate::support::{runtime, serial, system};

const RATE: u64 = 10;
const BURST: u64 = 10;

/// Six `redis-server`s in cluster mode on loopback ports, each in its own directory; every one
/// is killed when this is dropped, whatever happened.
pub(crate) struct Cluster {
    nodes: Vec<(u16, Option<Child>)>,
    dir: PathBuf,
    node_timeout_ms: u64,
}

impl Cluster {
    /// Three masters and three replicas, a node declared failed after 1 s without an answer.
    fn start() -> Self {
        Self::start_with_node_timeout(1_000)
    }

    /// Three masters and three replicas, a node declared failed after `node_timeout_ms`
    /// without an answer.
    pub(crate) fn start_with_node_timeout(node_timeout_ms: u64) -> Self {
        let dir = std::env::temp_dir().join(format!("tollgate-cluster-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut cluster = Cluster {
            nodes: Vec::new(),
            dir,
            node_timeout_ms,
        };
        for port in cluster_ports(6) {
            let child = cluster.spawn(port);
            cluster.nodes.push((port, Some(child)));
        }
        for &(port, _) in &cluster.nodes {
            wait_for(Duration::from_secs(10), || cli(port, &["PING"]) == "PONG");
        }
        let addresses: Vec<String> = cluster
            .nodes
            .iter()
            .map(|(port, _)| format!("127.0.0.1:{port}"))
            .collect();
        let created = Command::new(system::program("redis-cli", "redis-server"))
            .arg("--cluster")
            .arg("create")
            .args(&addresses)
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .output()
            .expect("redis-cli --cluster create");
        assert!(
            created.status.success(),
            "{}",
            String::from_utf8_lossy(&created.stdout)
        );
        for &(port, _) in &cluster.nodes {
            wait_for(Duration::from_secs(20), || {
                cli(port, &["CLUSTER", "INFO"]).contains("cluster_state:ok")
            });
        }
        // Every replica has its master's data: a failover has something to take over.
        for &(port, _) in &cluster.nodes {
            wait_for(Duration::from_secs(20), || {
                let replication = cli(port, &["INFO", "replication"]);
                replication.contains("role:master") || replication.contains("master_link_status:up")
            });
        }
        cluster
    }

    /// Starts the node at `port` in its directory: with its `nodes.conf` if it ran before, so
    /// that a killed node comes back as itself (a replica of whoever took its slots over).
    fn spawn(&self, port: u16) -> Child {
        let dir = self.dir.join(port.to_string());
        std::fs::create_dir_all(&dir).expect("node directory");
        Command::new(system::program("redis-server", "redis-server"))
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--cluster-enabled", "yes"])
            .args(["--cluster-node-timeout", &self.node_timeout_ms.to_string()])
            .args(["--cluster-config-file", "nodes.conf"])
            // A replica takes over however long it was cut off; the masters whose slots
            // are served keep serving while one is down.
            .args(["--cluster-replica-validity-factor", "0"])
            .args(["--cluster-require-full-coverage", "no"])
            .args(["--save", "", "--appendonly", "no", "--loglevel", "warning"])
            .arg("--dir")
            .arg(&dir)
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server starts")
    }

    /// Starts the node at `port` again, after [`kill`](Self::kill).
    pub(crate) fn restart(&mut self, port: u16) {
        let stopped = self
            .nodes
            .iter()
            .position(|(node, child)| *node == port && child.is_none())
            .unwrap_or_else(|| panic!("no stopped node {port}"));
        self.nodes[stopped].1 = Some(self.spawn(port));
    }

    pub(crate) fn urls(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|(port, _)| format!("redis://127.0.0.1:{port}/"))
            .collect()
    }

    /// The masters' ports and their slot ranges, by the first node that answers.
    pub(crate) fn masters(&self) -> Vec<(u16, Vec<(u16, u16)>)> {
        let nodes = self
            .nodes
            .iter()
            .filter(|(_, child)| child.is_some())
            .map(|(port, _)| cli(*port, &["CLUSTER", "NODES"]))
            .find(|nodes| !nodes.is_empty())
            .expect("a live node");
        let mut masters: Vec<(u16, Vec<(u16, u16)>)> = nodes
            .lines()
            .filter(|line| line.contains("master") && !line.contains("fail"))
            .map(|line| {
                let fields: Vec<&str> = line.split_whitespace().collect();
                let port = fields[1]
                    .split(['@', ':'])
                    .nth(1)
                    .and_then(|port| port.parse().ok())
                    .expect("node address");
                let slots = fields[8..]
                    .iter()
                    .filter_map(|range| {
                        let (low, high) = range.split_once('-').unwrap_or((range, range));
                        Some((low.parse().ok()?, high.parse().ok()?))
                    })
                    .collect();
                (port, slots)
            })
            .filter(|(_, slots): &(u16, Vec<(u16, u16)>)| !slots.is_empty())
            .collect();
        masters.sort();
        masters
    }

    /// A key named `{prefix}{n}` for some `n`, on the master at `port`.
    fn key_on(&self, port: u16, prefix: &str) -> String {
        let masters = self.masters();
        let (_, slots) = masters
            .iter()
            .find(|(master, _)| *master == port)
            .expect("a master");
        (0..10_000)
            .map(|n| format!("{prefix}{n}"))
            .find(|key| {
                let slot: u16 = cli(port, &["CLUSTER", "KEYSLOT", key]).parse().unwrap();
                slots
                    .iter()
                    .any(|&(low, high)| (low..=high).contains(&slot))
            })
            .expect("a key on every master")
    }

    /// Moves `key`'s slot, with its keys, from the master at `from` to the one at `to`, as
    /// `redis-cli --cluster reshard` does, pausing at each step so that clients meet each
    /// state: the slot migrating (`ASK` for keys already moved), then owned by `to` (`MOVED`).
    fn move_slot(&self, key: &str, from: u16, to: u16, pause: Duration) {
        let slot = cli(from, &["CLUSTER", "KEYSLOT", key]);
        let (from_id, to_id) = (
            cli(from, &["CLUSTER", "MYID"]),
            cli(to, &["CLUSTER", "MYID"]),
        );
        assert_eq!(
            cli(to, &["CLUSTER", "SETSLOT", &slot, "IMPORTING", &from_id]),
            "OK"
        );
        assert_eq!(
            cli(from, &["CLUSTER", "SETSLOT", &slot, "MIGRATING", &to_id]),
            "OK"
        );
        std::thread::sleep(pause);
        let keys = cli(from, &["CLUSTER", "GETKEYSINSLOT", &slot, "100"]);
        assert!(keys.contains(key), "{key} is not in its slot: {keys:?}");
        for moved in keys.lines().filter(|line| !line.is_empty()) {
            let port = to.to_string();
            let args = ["MIGRATE", "127.0.0.1", &port, moved, "0", "5000"];
            assert_eq!(cli(from, &args), "OK", "MIGRATE {moved}");
        }
        std::thread::sleep(pause);
        for (port, child) in &self.nodes {
            if child.is_some() {
                cli(*port, &["CLUSTER", "SETSLOT", &slot, "NODE", &to_id]);
            }
        }
    }

    /// Kills the node at `port` at once, as a crash would.
    pub(crate) fn kill(&mut self, port: u16) {
        for (node, child) in &mut self.nodes {
            if *node == port {
                if let Some(mut child) = child.take() {
                    let _ = child.kill();
                    let _ = child.wait();
                }
            }
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let ports: Vec<u16> = self.nodes.iter().map(|(port, _)| *port).collect();
        for port in ports {
            self.kill(port);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `count` loopback ports that are free, each with its cluster bus port (10 000 above) free too.
fn cluster_ports(count: usize) -> Vec<u16> {
    let mut ports = Vec::new();
    while ports.len() < count {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a free port");
        let port = listener.local_addr().expect("address").port();
        let bus_free = port < 55_000 && TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok();
        if bus_free && !ports.contains(&port) {
            ports.push(port);
        }
    }
    ports
}

pub(crate) fn cli(port: u16, args: &[&str]) -> String {
    let out = Command::new(system::program("redis-cli", "redis-server"))
        .args(["-p", &port.to_string()])
        .args(args)
        .output()
        .expect("redis-cli");
    String::from_utf8_lossy(&out.stdout).trim_end().to_string()
}

pub(crate) fn wait_for(limit: Duration, mut ready: impl FnMut() -> bool) {
    let began = Instant::now();
    while !ready() {
        assert!(began.elapsed() < limit, "not ready within {limit:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn quota() -> Quota {
    Quota::new(Rate::per_second(RATE)).burst(BURST)
}

/// One grant: when (ms after the run began), by whom, on which bucket.
#[derive(Clone, Copy, Debug)]
struct Granted {
    at_ms: u64,
    source: Source,
    bucket: usize,
}

/// Per policy, two clients (each its own cluster connection) share a bucket on each of the
/// three masters, each client calling `try_acquire(1)` every 20 ms for 9 s (10/s, burst 10; the
/// fallback 5/s, burst 5 each). At 2 s the first master is killed; its replica takes over
/// after the 1 s node timeout and an election. Every bucket's counted grants (Redis, and local
/// under `Fallback`) stay within `10 + 10/s × 9 s`, plus one burst for the writes a failover
/// may lose; the killed master's buckets are served by Redis again within 6 s of the kill and
/// until the end, and the other masters' buckets are never interrupted.
#[test]
fn a_killed_master_keeps_every_policy_within_its_bound() {
    let _serial = serial();
    let mut cluster = Cluster::start();
    let masters: Vec<u16> = cluster.masters().iter().map(|(port, _)| *port).collect();
    assert_eq!(masters.len(), 3, "{masters:?}");
    let policies = [
        ("closed", FaultPolicy::FailClosed),
        ("open", FaultPolicy::FailOpen),
        ("fallback", FaultPolicy::fallback_share(quota(), 2)),
    ];
    // Bucket b: policy b / 3 on master b % 3.
    let keys: Vec<String> = policies
        .iter()
        .flat_map(|(name, _)| {
            let cluster = &cluster;
            masters
                .iter()
                .map(move |&port| cluster.key_on(port, &format!("{name}-")))
        })
        .collect();
    let urls = cluster.urls();
    let run = Duration::from_secs(9);
    let kill_at = Duration::from_secs(2);
    let rt = runtime();
    let grants = Arc::new(Mutex::new(Vec::<Granted>::new()));
    let began = Instant::now();
    rt.block_on(async {
        let nodes: Vec<&str> = urls.iter().map(String::as_str).collect();
        let mut tasks = tokio::task::JoinSet::new();
        for _client in 0..2 {
            let connection = RedisConnection::connect_cluster(&nodes).await.unwrap();
            for (b, key) in keys.iter().enumerate() {
                let bucket = RedisBucket::builder(&connection, key.clone(), quota())
                    .policy(policies[b / 3].1)
                    .timeout(Duration::from_millis(200))
                    .connect_lazy()
                    .unwrap();
                let grants = Arc::clone(&grants);
                tasks.spawn(async move {
                    let mut tick = tokio::time::interval(Duration::from_millis(20));
                    while began.elapsed() < run {
                        tick.tick().await;
                        if let Ok(grant) = bucket.try_acquire(1).await {
                            let at_ms = began.elapsed().as_millis() as u64;
                            let source = grant.source;
                            grants.lock().unwrap().push(Granted {
                                at_ms,
                                source,
                                bucket: b,
                            });
                        }
                    }
                });
            }
        }
        tokio::time::sleep(kill_at).await;
        cluster.kill(masters[0]);
        while let Some(task) = tasks.join_next().await {
            task.expect("client task");
        }
    });
    let elapsed_ms = began.elapsed().as_millis() as u64;
    let grants = grants.lock().unwrap().clone();
    let kill_ms = kill_at.as_millis() as u64;
    let bound = BURST + RATE * elapsed_ms / 1_000 + BURST;
    for (b, key) in keys.iter().enumerate() {
        let (policy, _) = policies[b / 3];
        let mine = |source: Source| {
            grants
                .iter()
                .filter(move |g| g.bucket == b && g.source == source)
                .map(|g| g.at_ms)
        };
        let redis = mine(Source::Redis).count() as u64;
        let local = mine(Source::Fallback).count() as u64;
        let open = mine(Source::Open).count() as u64;
        println!("{policy} {key} (master {}): {redis} Redis + {local} local + {open} open, bound {bound}", masters[b % 3]);
        assert!(
            redis + local <= bound,
            "{policy} {key}: {redis} + {local} grants exceed {bound}"
        );
        // Served by Redis again after the failover, and to the end.
        let last = mine(Source::Redis).max().unwrap_or(0);
        assert!(
            last + 1_000 >= elapsed_ms,
            "{policy} {key}: last Redis grant at {last} ms"
        );
        let gaps = mine(Source::Redis)
            .collect::<Vec<_>>()
            .windows(2)
            .map(|pair| pair[1] - pair[0])
            .max()
            .unwrap_or(0);
        if b % 3 == 0 {
            let resumed = mine(Source::Redis).find(|&at| at > kill_ms + 500);
            assert!(
                resumed.is_some_and(|at| at < kill_ms + 6_000),
                "{policy} {key}: Redis again at {resumed:?} ms, killed at {kill_ms}"
            );
        } else {
            // A refill of one token is 100 ms: a gap of a second is an interruption.
            assert!(gaps < 1_000, "{policy} {key}: a gap of {gaps} ms");
        }
    }
}

/// A per-key limiter spreads its keys over every master, decides them one pipeline per slot,
/// and answers as on one server: a hash tag keeps a tenant's keys on one slot.
#[test]
fn keys_spread_over_every_master() {
    let _serial = serial();
    let cluster = Cluster::start();
    let urls = cluster.urls();
    runtime().block_on(async {
        let nodes: Vec<&str> = urls.iter().map(String::as_str).collect();
        let connection = RedisConnection::connect_cluster(&nodes).await.unwrap();
        let limiter = RedisKeyed::new(&connection, "user:", quota()).unwrap();
        let names: Vec<String> = (0..30).map(|i| format!("u{i}")).collect();
        let twice: Vec<(&str, u32)> = names
            .iter()
            .flat_map(|name| [(name.as_str(), 6), (name.as_str(), 6)])
            .collect();
        let answers = limiter.try_acquire_many(&twice).await;
        for (pair, name) in answers.chunks(2).zip(&names) {
            assert_eq!(
                pair[0].as_ref().unwrap().level.unwrap().remaining,
                4,
                "{name}"
            );
            assert!(
                pair[1].as_ref().unwrap_err().retry_after().is_some(),
                "{name}"
            );
        }
        // Every master holds some of the keys.
        for (port, _) in cluster.masters() {
            let keys: u64 = cli(port, &["DBSIZE"]).parse().unwrap();
            assert!(keys > 0, "no key on the master at {port}");
        }
        // One tag, one slot: a tenant's keys in one pipeline.
        let tenant = ["{t1}:a", "{t1}:b", "{t1}:c"];
        let slots: Vec<String> = tenant
            .iter()
            .map(|key| {
                cli(
                    cluster.nodes[0].0,
                    &["CLUSTER", "KEYSLOT", &format!("user:{key}")],
                )
            })
            .collect();
        assert!(slots.iter().all(|slot| *slot == slots[0]), "{slots:?}");
        let requests: Vec<(&str, u32)> = tenant.iter().map(|key| (*key, 10)).collect();
        let answers = limiter.try_acquire_many(&requests).await;
        assert!(answers.iter().all(|answer| answer.is_ok()), "{answers:?}");
    });
}

/// A bucket's slot moves to another master mid-run, through `ASK` while it migrates and `MOVED`
/// after: two clients calling every 20 ms for 4 s (10/s, burst 10, failing closed) are served
/// throughout (no gap of a second), and since the bucket moves with its key (`MIGRATE` keeps
/// the value and its expiry) their grants stay within `10 + 10/s × 4 s`, with nothing allowed
/// for the move.
#[test]
fn a_moved_slot_is_followed_within_the_bound() {
    let _serial = serial();
    let cluster = Cluster::start();
    let masters: Vec<u16> = cluster.masters().iter().map(|(port, _)| *port).collect();
    let key = cluster.key_on(masters[0], "moving-");
    let urls = cluster.urls();
    let run = Duration::from_secs(4);
    let grants = Arc::new(Mutex::new(Vec::<u64>::new()));
    let faults = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let began = Instant::now();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let clients = rt.spawn({
        let grants = Arc::clone(&grants);
        let faults = Arc::clone(&faults);
        let key = key.clone();
        async move {
            let nodes: Vec<&str> = urls.iter().map(String::as_str).collect();
            let mut tasks = tokio::task::JoinSet::new();
            for _client in 0..2 {
                let connection = RedisConnection::connect_cluster(&nodes).await.unwrap();
                let bucket = RedisBucket::builder(&connection, key.clone(), quota())
                    .timeout(Duration::from_millis(200))
                    .connect_lazy()
                    .unwrap();
                let grants = Arc::clone(&grants);
                let faults = Arc::clone(&faults);
                tasks.spawn(async move {
                    let mut tick = tokio::time::interval(Duration::from_millis(20));
                    while began.elapsed() < run {
                        tick.tick().await;
                        match bucket.try_acquire(1).await {
                            Ok(grant) => {
                                assert_eq!(grant.source, Source::Redis);
                                grants
                                    .lock()
                                    .unwrap()
                                    .push(began.elapsed().as_millis() as u64);
                            }
                            Err(error) if error.retry_after().is_some() => {}
                            // A redirection the client could not follow within the call's
                            // timeout (a loaded machine) is an outage, refused by the policy:
                            // the gap below bounds how long one may last.
                            Err(_) => {
                                faults.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            }
                        }
                    }
                });
            }
            while let Some(task) = tasks.join_next().await {
                task.expect("client task");
            }
        }
    });
    std::thread::sleep(Duration::from_millis(1_000));
    cluster.move_slot(&key, masters[0], masters[1], Duration::from_millis(500));
    rt.block_on(clients).expect("clients");
    let elapsed_ms = began.elapsed().as_millis() as u64;
    let mut grants = grants.lock().unwrap().clone();
    grants.sort();
    let bound = BURST + RATE * elapsed_ms / 1_000;
    let gap = grants
        .windows(2)
        .map(|pair| pair[1] - pair[0])
        .max()
        .unwrap_or(0);
    println!(
        "moved slot: {} grants, bound {bound}, longest gap {gap} ms, {} calls refused as outages",
        grants.len(),
        faults.load(std::sync::atomic::Ordering::Relaxed)
    );
    assert!(
        grants.len() as u64 <= bound,
        "{} grants exceed {bound}",
        grants.len()
    );
    assert!(
        grants.len() as u64 >= bound * 9 / 10,
        "{} grants of {bound}",
        grants.len()
    );
    assert!(gap < 1_000, "a gap of {gap} ms");
    // The key lives on the new master now.
    assert_eq!(cli(masters[1], &["EXISTS", &key]), "1");
}

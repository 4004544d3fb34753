//! The Redis bucket on one connection to a local `redis-server` (started here, on a free
//! loopback port): Redis round trips per acquire, and acquisitions per second, one at a time
//! and many in flight; then the fleet's three modes side by side (one call per decision, many
//! keys' decisions in one pipeline, leased tokens), in decisions a second and round trips per
//! decision.
//!
//! `cargo bench --features redis --bench redis`, which installs `redis-server` if it must (see
//! `tests/support/system.rs`).

use std::hint::black_box;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use tollgate::{Quota, Rate};
use tollgate_redis::{Client, LeasedBucket, RedisBucket, RedisConnection, RedisKeyed};

/// `redis-server`: found on this machine, or installed (as the tests do).
mod system {
    include!("../../tollgate-redis/tests/redis/system.rs");
}

struct Server {
    child: Child,
    port: u16,
    /// The port serving TLS beside `port`, and the CA that signed its certificate.
    tls: Option<(u16, Vec<u8>)>,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("free port")
        .port()
}

/// A CA and a certificate it signed for 127.0.0.1, made by `openssl` in `dir`.
fn certificates(dir: &std::path::Path) {
    let openssl = system::program("openssl", "openssl");
    let run = |args: &[&str]| {
        let status = Command::new(&openssl)
            .current_dir(dir)
            .args(args)
            .stderr(Stdio::null())
            .status()
            .expect("openssl runs");
        assert!(status.success(), "openssl {args:?}");
    };
    let key = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let mut ca = vec![
        "req",
        "-x509",
        "-days",
        "2",
        "-subj",
        "/CN=tollgate bench ca",
    ];
    ca.extend(key);
    ca.extend(["-keyout", "ca.key", "-out", "ca.crt"]);
    run(&ca);
    std::fs::write(dir.join("server.ext"), "subjectAltName=IP:127.0.0.1\n").expect("ext");
    let mut csr = vec!["req", "-subj", "/CN=127.0.0.1"];
    csr.extend(key);
    csr.extend(["-keyout", "server.key", "-out", "server.csr"]);
    run(&csr);
    run(&[
        "x509",
        "-req",
        "-days",
        "2",
        "-in",
        "server.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-extfile",
        "server.ext",
        "-out",
        "server.crt",
    ]);
}

impl Server {
    /// A server on a plain TCP port and, with `tls`, a TLS port beside it.
    fn start(tls: bool) -> Self {
        let port = free_port();
        let mut command = Command::new(system::program("redis-server", "redis-server"));
        command
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--loglevel", "warning"]);
        let tls = tls.then(|| {
            let dir = std::env::temp_dir().join(format!("tollgate-bench-tls-{port}"));
            std::fs::create_dir_all(&dir).expect("temporary directory");
            certificates(&dir);
            let tls_port = free_port();
            let path = |name: &str| dir.join(name).to_string_lossy().into_owned();
            command
                .args([
                    "--tls-port",
                    &tls_port.to_string(),
                    "--tls-auth-clients",
                    "no",
                ])
                .args(["--tls-cert-file", &path("server.crt")])
                .args(["--tls-key-file", &path("server.key")])
                .args(["--tls-ca-cert-file", &path("ca.crt")]);
            (tls_port, std::fs::read(dir.join("ca.crt")).expect("the CA"))
        });
        let child = command
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server starts");
        let server = Self { child, port, tls };
        let began = Instant::now();
        while server.info("PING").is_none() {
            assert!(began.elapsed() < Duration::from_secs(10), "redis-server");
            std::thread::sleep(Duration::from_millis(20));
        }
        server
    }

    /// Runs an inline command; its reply as text.
    fn info(&self, command: &str) -> Option<String> {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        stream.write_all(format!("{command}\r\n").as_bytes()).ok()?;
        let mut reply = vec![0; 16 * 1024];
        let read = stream.read(&mut reply).ok()?;
        Some(String::from_utf8_lossy(&reply[..read]).into_owned())
    }

    /// Commands clients have sent so far that run or load a script: one round trip each. (The
    /// total command count would include the `TIME`, `GET` and `SET` the script runs inside.)
    fn script_round_trips(&self) -> u64 {
        let stats = self.info("INFO commandstats").expect("INFO");
        stats
            .lines()
            .filter(|line| {
                ["cmdstat_evalsha:", "cmdstat_eval:", "cmdstat_script|load:"]
                    .iter()
                    .any(|name| line.starts_with(name))
            })
            .filter_map(|line| {
                let calls = line.split(":calls=").nth(1)?.split(',').next()?;
                calls.parse::<u64>().ok()
            })
            .sum()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn redis(c: &mut Criterion) {
    let server = Server::start(true);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    // A rate no benchmark exhausts: every call is granted and costs one script run.
    let quota = Quota::new(Rate::per_second(1_000_000_000)).burst(1_000_000);
    let _runtime = rt.enter();
    let client = RedisConnection::connect_lazy(
        Client::open(format!("redis://127.0.0.1:{}/", server.port)).unwrap(),
    )
    .unwrap();
    let bucket = rt
        .block_on(
            RedisBucket::builder(&client, "bench", quota)
                .timeout(Duration::from_secs(1))
                .connect(),
        )
        .expect("connect");

    // Round trips: the script runs and loads the server counted around 1000 calls.
    let calls = 1_000;
    for name in ["try_acquire", "acquire"] {
        let before = server.script_round_trips();
        rt.block_on(async {
            for _ in 0..calls {
                match name {
                    "try_acquire" => drop(bucket.try_acquire(1).await.expect("granted")),
                    _ => drop(bucket.acquire(1).await.expect("granted")),
                }
            }
        });
        let trips = server.script_round_trips() - before;
        println!(
            "redis/{name}: {:.3} Redis round trips per call ({trips} for {calls} calls)",
            trips as f64 / calls as f64
        );
    }

    // The same server over TLS (rustls), on the port beside: what TLS costs a call.
    let (tls_port, ca) = server.tls.clone().expect("a TLS port");
    let tls_client = tollgate_redis::tls::client(
        &format!("rediss://127.0.0.1:{tls_port}/"),
        tollgate_redis::tls::Tls::new().ca(ca),
    )
    .expect("a TLS client");
    let tls_connection = RedisConnection::connect_lazy(tls_client).unwrap();
    let tls_bucket = rt
        .block_on(
            RedisBucket::builder(&tls_connection, "bench-tls", quota)
                .timeout(Duration::from_secs(1))
                .connect(),
        )
        .expect("connect over TLS");

    let mut group = c.benchmark_group("redis");
    for (over, bucket) in [("", &bucket), (" over TLS", &tls_bucket)] {
        group.throughput(Throughput::Elements(1));
        group.bench_function(format!("try_acquire, one at a time{over}"), |b| {
            b.iter_custom(|iters| {
                rt.block_on(async {
                    let began = Instant::now();
                    for _ in 0..iters {
                        black_box(bucket.try_acquire(1).await.is_ok());
                    }
                    began.elapsed()
                })
            })
        });
        in_flight(&mut group, &rt, bucket, over);
    }
    group.throughput(Throughput::Elements(1));
    group.bench_function("acquire, one at a time", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let began = Instant::now();
                for _ in 0..iters {
                    black_box(bucket.acquire(1).await.is_ok());
                }
                began.elapsed()
            })
        })
    });
    group.finish();

    modes(&rt, &client, &server, quota);
}

/// `try_acquire` with 64 calls in flight on one connection.
fn in_flight(
    group: &mut criterion::BenchmarkGroup<criterion::measurement::WallTime>,
    rt: &tokio::runtime::Runtime,
    bucket: &RedisBucket,
    over: &str,
) {
    const IN_FLIGHT: u64 = 64;
    group.throughput(Throughput::Elements(IN_FLIGHT));
    group.bench_function(
        format!("try_acquire, 64 in flight on one connection{over}"),
        |b| {
            b.iter_custom(|iters| {
                rt.block_on(async {
                    let began = Instant::now();
                    for _ in 0..iters {
                        let mut calls = tokio::task::JoinSet::new();
                        for _ in 0..IN_FLIGHT {
                            let bucket = bucket.clone();
                            calls.spawn(async move { bucket.try_acquire(1).await.is_ok() });
                        }
                        while let Some(granted) = calls.join_next().await {
                            black_box(granted.expect("task"));
                        }
                    }
                    began.elapsed()
                })
            })
        },
    );
}

/// Decisions for about a second in each mode, one task: decisions a second, and round trips
/// per decision (counted by the caller, and by the server's script calls).
fn modes(rt: &tokio::runtime::Runtime, client: &RedisConnection, server: &Server, quota: Quota) {
    const RUN: Duration = Duration::from_secs(1);
    const KEYS: usize = 64;
    let report =
        |mode: &str, decisions: u64, granted: u64, trips: u64, scripts: u64, took: Duration| {
            println!(
                "modes/{mode}: {:.0} decisions/s, {:.2e} round trips per decision ({decisions} \
             decisions, {granted} granted, {trips} round trips, {scripts} script runs, in \
             {took:.2?})",
                decisions as f64 / took.as_secs_f64(),
                trips as f64 / decisions as f64,
            );
        };
    let bucket = rt
        .block_on(RedisBucket::builder(client, "modes", quota).connect())
        .expect("connect");
    let before = server.script_round_trips();
    let (decisions, granted, took) = rt.block_on(async {
        let (began, mut decisions, mut granted) = (Instant::now(), 0u64, 0u64);
        while began.elapsed() < RUN {
            granted += u64::from(black_box(bucket.try_acquire(1).await.is_ok()));
            decisions += 1;
        }
        (decisions, granted, began.elapsed())
    });
    let scripts = server.script_round_trips() - before;
    report(
        "plain try_acquire",
        decisions,
        granted,
        decisions,
        scripts,
        took,
    );

    let keyed = RedisKeyed::new(client, "modes:", quota).expect("keyed");
    let names: Vec<String> = (0..KEYS).map(|i| format!("user{i}")).collect();
    let requests: Vec<(&str, u32)> = names.iter().map(|name| (name.as_str(), 1)).collect();
    let before = server.script_round_trips();
    let (decisions, granted, trips, took) = rt.block_on(async {
        let (began, mut decisions, mut granted, mut trips) = (Instant::now(), 0u64, 0u64, 0u64);
        while began.elapsed() < RUN {
            let answers = keyed.try_acquire_many(&requests).await;
            decisions += answers.len() as u64;
            granted += black_box(answers.iter().filter(|answer| answer.is_ok()).count()) as u64;
            trips += 1;
        }
        (decisions, granted, trips, began.elapsed())
    });
    let scripts = server.script_round_trips() - before;
    report(
        "keyed, 64 keys a pipeline",
        decisions,
        granted,
        trips,
        scripts,
        took,
    );

    for (mode, quota) in [
        ("leased, all granted", quota),
        // 1000/s: nearly every decision a local denial.
        (
            "leased, 1000/s (mostly denied)",
            Quota::new(Rate::per_second(1_000)).burst(100),
        ),
    ] {
        let bucket = rt
            .block_on(RedisBucket::builder(client, mode, quota).connect())
            .expect("connect");
        let leased = LeasedBucket::new(bucket, Duration::from_millis(100));
        let before = server.script_round_trips();
        let (decisions, granted, took) = rt.block_on(async {
            let (began, mut decisions, mut granted) = (Instant::now(), 0u64, 0u64);
            while began.elapsed() < RUN {
                for _ in 0..1_000 {
                    granted += u64::from(black_box(leased.try_acquire(1).await.is_ok()));
                }
                decisions += 1_000;
            }
            (decisions, granted, began.elapsed())
        });
        let scripts = server.script_round_trips() - before;
        report(
            mode,
            decisions,
            granted,
            leased.round_trips(),
            scripts,
            took,
        );
    }
}

criterion_group!(benches, redis);
criterion_main!(benches);

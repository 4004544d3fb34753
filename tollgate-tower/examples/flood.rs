//! A flood of new keys against the per-key limiter, bounded in time: directly, then over HTTP
//! with the example server on loopback, under each `WhenFull`. Prints the polite client's grant
//! ratio, a newcomer's, the attacker's request rate and the resident memory, and exits with an
//! error if the polite client kept fewer than 99 % of its grants.
//!
//! ```text
//! cargo run --release -p tollgate-tower --example flood        # 3 s per phase
//! cargo run --release -p tollgate-tower --example flood -- 1   # 1 s per phase, for CI
//! ```
//!
//! The polite client asks at half its rate and is there before the flood (two requests). The
//! attacker drains the whole burst of each new key, which keeps its slot busy the longest, as
//! fast as it can: directly, one thread taking the burst in one call per key; over HTTP, 64
//! connections at a time, a burst of requests from each loopback address (127.1.0.0 and up, a
//! key each). A newcomer probes with a fresh key every 20 ms (direct) or 100 ms (HTTP).

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket};
use tollgate::{KeyedLimiter, Quota, Rate, StdClock, WhenFull};

#[allow(dead_code)]
#[path = "axum_server.rs"]
mod axum_server;

/// Resident memory of this process (Linux), in MiB.
fn resident_mib() -> f64 {
    let pages = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|statm| statm.split_whitespace().nth(1)?.parse::<u64>().ok())
        .unwrap_or(0);
    (pages * 4096) as f64 / (1024.0 * 1024.0)
}

/// Grants out of requests.
#[derive(Default)]
struct Tally {
    asked: AtomicU64,
    granted: AtomicU64,
}

impl Tally {
    fn count(&self, granted: bool) {
        self.asked.fetch_add(1, Ordering::Relaxed);
        self.granted
            .fetch_add(u64::from(granted), Ordering::Relaxed);
    }
    fn ratio(&self) -> f64 {
        let asked = self.asked.load(Ordering::Relaxed).max(1);
        self.granted.load(Ordering::Relaxed) as f64 / asked as f64
    }
    fn line(&self) -> String {
        format!(
            "{} of {} ({:.2} %)",
            self.granted.load(Ordering::Relaxed),
            self.asked.load(Ordering::Relaxed),
            100.0 * self.ratio()
        )
    }
}

/// Calls `ask` every `every` until `until`, on a fixed schedule.
fn paced(every: Duration, until: Instant, mut ask: impl FnMut()) {
    let mut next = Instant::now();
    while next < until {
        ask();
        next += every;
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
    }
}

/// The direct flood; returns the polite client's grant ratio.
fn direct(when_full: WhenFull, seconds: u64) -> f64 {
    const CAPACITY: usize = 100_000;
    // 100 a second, bursts of 10: the polite client asks every 20 ms, half its rate.
    let quota = Quota::new(Rate::per_second(100)).burst(10);
    let limiter = KeyedLimiter::<u64, _>::try_new(quota, StdClock, CAPACITY, when_full).unwrap();
    let resident_before = resident_mib();
    const POLITE: u64 = u64::MAX;
    for _ in 0..2 {
        limiter.try_acquire(&POLITE, 1).unwrap();
        std::thread::sleep(Duration::from_millis(20));
    }
    let (polite, newcomer, attacker) = (Tally::default(), Tally::default(), Tally::default());
    let start = Instant::now();
    let until = start + Duration::from_secs(seconds);
    std::thread::scope(|s| {
        s.spawn(|| {
            paced(Duration::from_millis(20), until, || {
                polite.count(limiter.try_acquire(&POLITE, 1).is_ok());
            });
        });
        s.spawn(|| {
            let mut key = 1u64 << 62;
            paced(Duration::from_millis(20), until, || {
                newcomer.count(limiter.try_acquire(&key, 1).is_ok());
                key += 1;
            });
        });
        let mut key = 0u64;
        while Instant::now() < until {
            for _ in 0..1_024 {
                attacker.count(limiter.try_acquire(&key, 10).is_ok());
                key += 1;
            }
        }
    });
    let elapsed = start.elapsed().as_secs_f64();
    let attack_rate = attacker.asked.load(Ordering::Relaxed) as f64 / elapsed;
    println!("direct, {when_full:?}, capacity {CAPACITY}, {quota}:");
    println!("  polite client (50/s):  {}", polite.line());
    println!("  newcomer probes:       {}", newcomer.line());
    println!(
        "  attacker:              {:.2} M new keys/s, {}",
        attack_rate / 1e6,
        attacker.line()
    );
    println!(
        "  keys held {} ({} protected), heap {:.1} MiB, resident {:.1} -> {:.1} MiB",
        limiter.len(),
        limiter.protected_len(),
        limiter.heap_bytes() as f64 / (1024.0 * 1024.0),
        resident_before,
        resident_mib()
    );
    println!(
        "  to keep every slot busy: capacity x rate / burst = {:.1} M bursts/s",
        CAPACITY as f64 * 100.0 / 10.0 / 1e6
    );
    polite.ratio()
}

/// One `GET /` from `client` on a new connection; the status, or 0 if the exchange failed.
async fn get(server: SocketAddr, client: Ipv4Addr) -> u16 {
    let exchange = async {
        let socket = TcpSocket::new_v4()?;
        socket.bind(SocketAddr::from((client, 0)))?;
        let mut stream = socket.connect(server).await?;
        stream
            .write_all(b"GET / HTTP/1.1\r\nHost: tollgate\r\nConnection: close\r\n\r\n")
            .await?;
        let mut head = [0u8; 12];
        stream.read_exact(&mut head).await?;
        let mut rest = Vec::new();
        stream.read_to_end(&mut rest).await?;
        Ok::<_, std::io::Error>(head)
    };
    match exchange.await {
        Ok(head) => std::str::from_utf8(&head[9..12])
            .ok()
            .and_then(|code| code.parse().ok())
            .unwrap_or(0),
        Err(_) => 0,
    }
}

/// The HTTP flood; returns the polite client's grant ratio.
async fn http(when_full: WhenFull, seconds: u64) -> f64 {
    const CAPACITY: usize = 100;
    // 20 a second, bursts of 10: the polite client asks every 100 ms, half its rate.
    let quota = Quota::new(Rate::per_second(20)).burst(10);
    let limiter = axum_server::limiter_with(quota, CAPACITY, when_full);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = listener.local_addr().unwrap();
    let serving = tokio::spawn(axum_server::serve(listener, Arc::clone(&limiter)));
    let resident_before = resident_mib();
    const POLITE: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);
    for _ in 0..2 {
        assert_eq!(get(server, POLITE).await, 200);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let tallies = Arc::new((Tally::default(), Tally::default(), Tally::default()));
    let unavailable = Arc::new(AtomicU64::new(0));
    let with_retry_after = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let next_address = Arc::new(AtomicU64::new(0));
    let attackers: Vec<_> = (0..64)
        .map(|_| {
            let (tallies, stop, next_address) =
                (tallies.clone(), stop.clone(), next_address.clone());
            let unavailable = unavailable.clone();
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let n = next_address.fetch_add(1, Ordering::Relaxed);
                    // 127.1.0.0 and up: a new address, and so a new key, every burst.
                    let client = Ipv4Addr::from(0x7f01_0000 + (n % 0x00fe_0000) as u32);
                    for _ in 0..10 {
                        let status = get(server, client).await;
                        tallies.2.count(status == 200);
                        unavailable.fetch_add(u64::from(status == 503), Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    let polite = {
        let tallies = tallies.clone();
        tokio::spawn(async move {
            let mut every = tokio::time::interval(Duration::from_millis(100));
            let until = tokio::time::Instant::now() + Duration::from_secs(seconds);
            let mut newcomer = 0u32;
            while tokio::time::Instant::now() < until {
                every.tick().await;
                tallies.0.count(get(server, POLITE).await == 200);
                // A newcomer from 127.0.1.0 up, one address each.
                let client = Ipv4Addr::from(0x7f00_0100 + newcomer);
                newcomer += 1;
                tallies.1.count(get(server, client).await == 200);
            }
        })
    };
    polite.await.unwrap();
    stop.store(true, Ordering::Relaxed);
    for attacker in attackers {
        let _ = attacker.await;
    }
    let elapsed = start.elapsed().as_secs_f64();
    // A refused newcomer is told when to come back.
    let probe = get_headers(server, Ipv4Addr::new(127, 0, 3, 1)).await;
    if probe.0 == 503 && probe.1.is_some() {
        with_retry_after.fetch_add(1, Ordering::Relaxed);
    }
    let (polite, newcomer, attacker) = &*tallies;
    println!("HTTP on loopback, {when_full:?}, capacity {CAPACITY}, {quota}:");
    println!("  polite client (10/s):  {}", polite.line());
    println!("  newcomer probes:       {}", newcomer.line());
    println!(
        "  attacker:              {:.0} requests/s from new addresses, {}, {} answered 503",
        attacker.asked.load(Ordering::Relaxed) as f64 / elapsed,
        attacker.line(),
        unavailable.load(Ordering::Relaxed)
    );
    println!(
        "  to keep every slot busy: capacity x rate = {} requests/s",
        CAPACITY as u64 * 20
    );
    println!(
        "  a newcomer after the flood: {} {}",
        probe.0,
        probe
            .1
            .map_or(String::new(), |retry| format!("Retry-After: {retry}"))
    );
    println!(
        "  keys held {} ({} protected), resident {:.1} -> {:.1} MiB",
        limiter.len(),
        limiter.protected_len(),
        resident_before,
        resident_mib()
    );
    serving.abort();
    polite.ratio()
}

/// One `GET /` from `client`: the status and the `Retry-After` header, if any.
async fn get_headers(server: SocketAddr, client: Ipv4Addr) -> (u16, Option<String>) {
    let exchange = async {
        let socket = TcpSocket::new_v4()?;
        socket.bind(SocketAddr::from((client, 0)))?;
        let mut stream = socket.connect(server).await?;
        stream
            .write_all(b"GET / HTTP/1.1\r\nHost: tollgate\r\nConnection: close\r\n\r\n")
            .await?;
        let mut raw = String::new();
        stream.read_to_string(&mut raw).await?;
        Ok::<_, std::io::Error>(raw)
    };
    let Ok(raw) = exchange.await else {
        return (0, None);
    };
    let status = raw
        .get(9..12)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    let retry = raw.lines().find_map(|line| {
        line.to_ascii_lowercase()
            .strip_prefix("retry-after: ")
            .map(str::to_owned)
    });
    (status, retry)
}

fn main() {
    let seconds: u64 = std::env::args()
        .nth(1)
        .and_then(|arg| arg.parse().ok())
        .unwrap_or(3);
    let mut worst: f64 = 1.0;
    for when_full in [WhenFull::Refuse, WhenFull::Admit] {
        worst = worst.min(direct(when_full, seconds));
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    for when_full in [WhenFull::Refuse, WhenFull::Admit] {
        worst = worst.min(runtime.block_on(http(when_full, seconds)));
    }
    println!("worst polite grant ratio: {:.2} %", 100.0 * worst);
    if worst < 0.99 {
        eprintln!("the polite client kept fewer than 99 % of its grants");
        std::process::exit(1);
    }
}

//! A polite crawler: 60 URLs over 4 hosts, fetched by 16 concurrent tasks, each request first
//! waiting its turn in its host's line of one [`KeyedLimiter`] (2 requests a second per host,
//! burst 1). The hosts are one local HTTP server on a free loopback port, which tells them apart
//! by the `Host` header and records when each request arrives.
//!
//! Run it with `cargo run --example crawler --features tokio` (about 7 s). It prints each host's
//! count, the most arrivals it saw in any window of one period (half a second), and exits with
//! status 1 if any host ever got more than its quota allows: in any span of `w` between two of
//! its arrivals, more than `burst + rate × (w + 25 ms)` (the 25 ms allow for loopback and
//! scheduling delays between a grant and its arrival, a twentieth of a period), or if any fetch
//! failed.

use std::collections::HashMap;
use std::error::Error;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tollgate::{KeyedLimiter, Quota, Rate, TokioClock, WhenFull};

type BoxError = Box<dyn Error + Send + Sync>;

/// Requests a second per host, and the burst a host tolerates.
const PER_SECOND: u64 = 2;
const BURST: u64 = 1;
const HOSTS: usize = 4;
const URLS: usize = 60;
const TASKS: usize = 16;
/// What the check allows between a grant and its arrival at the server.
const JITTER: Duration = Duration::from_millis(25);

/// Arrival instants (since the start) per host, as the server saw them.
type Arrivals = Arc<Mutex<HashMap<String, Vec<Duration>>>>;

/// The server: one request per connection, its host read from the `Host` header.
async fn serve(listener: TcpListener, start: Instant, arrivals: Arrivals) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let arrivals = arrivals.clone();
        tokio::spawn(async move {
            let (read, mut write) = stream.into_split();
            let mut lines = BufReader::new(read).lines();
            let mut host = None;
            while let Ok(Some(line)) = lines.next_line().await {
                if line.is_empty() {
                    break;
                }
                if let Some((name, value)) = line.split_once(':') {
                    if name.eq_ignore_ascii_case("host") {
                        host = Some(value.trim().to_owned());
                    }
                }
            }
            let status = match host {
                Some(host) => {
                    let at = start.elapsed();
                    arrivals.lock().unwrap().entry(host).or_default().push(at);
                    "200 OK"
                }
                None => "400 Bad Request",
            };
            let response =
                format!("HTTP/1.1 {status}\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok");
            let _ = write.write_all(response.as_bytes()).await;
        });
    }
}

/// `GET url` from the server at `server`, with the URL's host in the `Host` header.
async fn fetch(server: SocketAddr, url: &str) -> Result<(), BoxError> {
    let rest = url.strip_prefix("http://").ok_or("not an http URL")?;
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    let mut stream = TcpStream::connect(server).await?;
    let request = format!("GET /{path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    if !response.starts_with("HTTP/1.1 200") {
        return Err(format!("{url}: {}", response.lines().next().unwrap_or("")).into());
    }
    Ok(())
}

/// The host of an `http://host/...` URL.
fn host_of(url: &str) -> &str {
    let rest = url.strip_prefix("http://").unwrap_or(url);
    rest.split_once('/').map_or(rest, |(host, _)| host)
}

/// Whether `arrivals` (sorted) keep to `burst + rate × (span + JITTER)` in every span between
/// two of them.
fn within_rate(arrivals: &[Duration]) -> bool {
    let allowed = |span: Duration| {
        let nanos = (span + JITTER).as_nanos() * u128::from(PER_SECOND);
        u128::from(BURST) + nanos / 1_000_000_000
    };
    (0..arrivals.len()).all(|i| {
        (i..arrivals.len()).all(|j| (j - i + 1) as u128 <= allowed(arrivals[j] - arrivals[i]))
    })
}

/// The most arrivals in any window `[t, t + window)`.
fn most_in_window(arrivals: &[Duration], window: Duration) -> usize {
    (0..arrivals.len())
        .map(|i| {
            arrivals[i..]
                .iter()
                .take_while(|&&t| t < arrivals[i] + window)
                .count()
        })
        .max()
        .unwrap_or(0)
}

/// The URLs to crawl: `URLS` pages over `HOSTS` hosts, in a scrambled order.
fn urls() -> Vec<String> {
    let mut urls: Vec<String> = (0..URLS)
        .map(|i| format!("http://host{}.example/page/{}", i % HOSTS, i / HOSTS))
        .collect();
    // A fixed shuffle (xorshift), so that runs are alike and hosts come in no neat rotation.
    let mut state = 0x2545_f491_4f6c_dd1du64;
    for i in (1..urls.len()).rev() {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        urls.swap(i, (state % (i as u64 + 1)) as usize);
    }
    urls
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    // The check catches a crawler at twice the rate: it is not a check that cannot fail.
    let twice = [0, 250, 500, 750].map(Duration::from_millis);
    assert!(!within_rate(&twice), "the check must refuse twice the rate");

    let start = Instant::now();
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
    let server = listener.local_addr()?;
    let arrivals = Arrivals::default();
    tokio::spawn(serve(listener, start, arrivals.clone()));

    let per_host: Arc<KeyedLimiter<String, TokioClock>> = Arc::new(KeyedLimiter::try_new(
        Quota::new(Rate::per_second(PER_SECOND)).burst(BURST),
        TokioClock::new(),
        1_000,
        WhenFull::Refuse,
    )?);
    let queue = Arc::new(Mutex::new(urls()));
    let mut tasks = JoinSet::new();
    for _ in 0..TASKS {
        let (per_host, queue) = (per_host.clone(), queue.clone());
        tasks.spawn(async move {
            let mut fetched = 0;
            loop {
                let Some(url) = queue.lock().unwrap().pop() else {
                    return Ok::<usize, BoxError>(fetched);
                };
                // The task waits in its host's line: other hosts' tasks go on meanwhile.
                per_host.acquire(&host_of(&url).to_owned(), 1).await?;
                fetch(server, &url).await?;
                fetched += 1;
            }
        });
    }
    let mut fetched = 0;
    let mut failed = false;
    while let Some(done) = tasks.join_next().await {
        match done? {
            Ok(n) => fetched += n,
            Err(error) => {
                eprintln!("fetch failed: {error}");
                failed = true;
            }
        }
    }
    let elapsed = start.elapsed();
    let period = Duration::from_nanos(1_000_000_000 / PER_SECOND);
    let arrivals = arrivals.lock().unwrap();
    let mut hosts: Vec<_> = arrivals.iter().collect();
    hosts.sort();
    println!(
        "{fetched} of {URLS} URLs over {HOSTS} hosts, {TASKS} tasks, {PER_SECOND}/s per host, burst {BURST}, in {:.2} s",
        elapsed.as_secs_f64()
    );
    for (host, at) in &hosts {
        let mut at = at.to_vec();
        at.sort();
        let ok = within_rate(&at);
        failed |= !ok;
        let gap = at.windows(2).map(|w| w[1] - w[0]).min().unwrap_or_default();
        println!(
            "{host}: {} requests over {:.2} s, at most {} in any {} ms (allowed: {}), closest two {:.1} ms apart: {}",
            at.len(),
            (at[at.len() - 1] - at[0]).as_secs_f64(),
            most_in_window(&at, period),
            period.as_millis(),
            BURST + PER_SECOND * period.as_millis() as u64 / 1_000,
            gap.as_secs_f64() * 1e3,
            if ok { "within its rate" } else { "ABOVE ITS RATE" }
        );
    }
    let total: usize = hosts.iter().map(|(_, at)| at.len()).sum();
    if failed || total != URLS || fetched != URLS {
        eprintln!("FAILED: {total} arrivals, {fetched} fetched");
        std::process::exit(1);
    }
    Ok(())
}

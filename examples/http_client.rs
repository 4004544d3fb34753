//! A rate-limited HTTP client: every request first waits for its cost in tokens from one
//! shared bucket, and the time it waited is kept as a metric. It drives a stub upstream that
//! the example starts on a free loopback port; the stub counts what reaches it each second.
//!
//! Run it with `cargo run --release --example http_client --features tokio` (about 5 s). It
//! fails (exit status 1) if any second after the first saw more than the quota's rate, or if
//! any request failed.

use std::error::Error;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;
use tollgate::{Quota, Rate, TokenBucket, TokioClock};

type BoxError = Box<dyn Error + Send + Sync>;

/// The upstream's quota, in units per second, and the burst it tolerates.
const RATE: u32 = 20;
const BURST: u32 = 20;

/// What the upstream charges per endpoint: a bulk export costs as much as five reads.
fn price(path: &str) -> u32 {
    if path.starts_with("/export") {
        5
    } else {
        1
    }
}

/// An HTTP client that keeps to an upstream quota. It is the one place every call goes through,
/// so no code path can bypass the limit.
struct RateLimitedClient {
    upstream: SocketAddr,
    bucket: TokenBucket<TokioClock>,
    waited_ns: AtomicU64,
}

impl RateLimitedClient {
    fn new(upstream: SocketAddr, bucket: TokenBucket<TokioClock>) -> Self {
        Self {
            upstream,
            bucket,
            waited_ns: AtomicU64::new(0),
        }
    }

    /// `GET path`, once `cost` units of the quota are ours.
    async fn get(&self, path: &str, cost: u32) -> Result<Response, BoxError> {
        let waited = self.bucket.acquire(cost).await?;
        let waited_ns = u64::try_from(waited.as_nanos()).unwrap_or(u64::MAX);
        // Relaxed: a metric, read after the requests are done.
        self.waited_ns.fetch_add(waited_ns, Ordering::Relaxed);
        http_get(self.upstream, path).await
    }

    /// The total time requests have waited for the quota: the metric to export.
    fn waited(&self) -> Duration {
        Duration::from_nanos(self.waited_ns.load(Ordering::Relaxed))
    }
}

struct Response {
    status: u16,
    body: String,
}

/// A minimal HTTP/1.1 GET: one request per connection, read to its end.
async fn http_get(upstream: SocketAddr, path: &str) -> Result<Response, BoxError> {
    let mut stream = TcpStream::connect(upstream).await?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {upstream}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut raw = String::new();
    stream.read_to_string(&mut raw).await?;
    let (head, body) = raw.split_once("\r\n\r\n").ok_or("no end of headers")?;
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or("no status code")?;
    Ok(Response {
        status,
        body: body.to_owned(),
    })
}

/// When a request reached the stub, and the units it cost.
type Arrivals = Arc<Mutex<Vec<(Duration, u32)>>>;

/// The stub upstream: answers every GET with 200 and records each arrival.
struct Stub {
    addr: SocketAddr,
    arrivals: Arrivals,
    server: JoinHandle<()>,
}

impl Stub {
    /// Listens on a free loopback port; arrival times are counted from `epoch`.
    async fn start(epoch: Instant) -> std::io::Result<Self> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
        let addr = listener.local_addr()?;
        let arrivals = Arrivals::default();
        let server = tokio::spawn({
            let arrivals = arrivals.clone();
            async move {
                while let Ok((stream, _)) = listener.accept().await {
                    tokio::spawn(serve(stream, epoch, arrivals.clone()));
                }
            }
        });
        Ok(Self {
            addr,
            arrivals,
            server,
        })
    }

    /// Stops listening and returns the arrivals.
    fn stop(self) -> Vec<(Duration, u32)> {
        self.server.abort();
        std::mem::take(&mut *self.arrivals.lock().expect("arrivals"))
    }
}

async fn serve(stream: TcpStream, epoch: Instant, arrivals: Arrivals) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream);
    let mut request_line = String::new();
    reader.read_line(&mut request_line).await?;
    let at = epoch.elapsed();
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header).await? == 0 || header == "\r\n" {
            break;
        }
    }
    let path = request_line.split(' ').nth(1).unwrap_or("/");
    arrivals.lock().expect("arrivals").push((at, price(path)));
    let body = format!("ok {path}\n");
    let response = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let mut stream = reader.into_inner();
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    // The bucket's clock and the stub's seconds start together.
    let epoch = Instant::now();
    let quota = Quota::new(Rate::per_second(RATE.into())).burst(BURST.into());
    let bucket = TokenBucket::try_new(quota, TokioClock::new())?;
    let stub = Stub::start(epoch).await?;
    let client = Arc::new(RateLimitedClient::new(stub.addr, bucket));
    println!(
        "== RateLimitedClient -> stub upstream on {}, quota {RATE} units/s, burst {BURST}",
        stub.addr
    );

    // Two waves, each sent all at once: 60 reads at 1 unit, then 10 exports at 5 units. The
    // exports come after the reads so that the stub's per-second count is exact: mixed in, an
    // export granted just after a second begins would bring units that accrued before it.
    let reads: Vec<String> = (0..60).map(|i| format!("/items/{i}")).collect();
    let exports: Vec<String> = (0..10).map(|i| format!("/export/{i}")).collect();
    let (mut answered, mut units) = (0u32, 0u32);
    for wave in [reads, exports] {
        let mut requests = JoinSet::new();
        for path in wave {
            let client = client.clone();
            requests.spawn(async move {
                let cost = price(&path);
                let response = client.get(&path, cost).await?;
                if response.status != 200 || !response.body.starts_with("ok") {
                    return Err(format!("{path}: {} {}", response.status, response.body).into());
                }
                Ok::<u32, BoxError>(cost)
            });
        }
        while let Some(done) = requests.join_next().await {
            units += done??;
            answered += 1;
        }
    }
    let elapsed = epoch.elapsed();
    let arrivals = stub.stop();

    let seconds = arrivals
        .iter()
        .map(|(at, _)| at.as_secs())
        .max()
        .unwrap_or(0)
        + 1;
    let mut per_second = vec![(0u32, 0u32); seconds as usize];
    for &(at, cost) in &arrivals {
        let (requests, units) = &mut per_second[at.as_secs() as usize];
        *requests += 1;
        *units += cost;
    }
    println!("at the stub, per second:");
    for (second, &(requests, units)) in per_second.iter().enumerate() {
        let note = if second == 0 { "  (burst + rate)" } else { "" };
        println!(
            "second {}: {units:>3} units in {requests:>2} requests {}{note}",
            second + 1,
            "#".repeat(units as usize)
        );
    }
    let expected = Duration::from_secs_f64(f64::from(units - BURST) / f64::from(RATE));
    println!(
        "{answered} requests answered 200 in {:.2} s; (units - burst) / rate = ({units} - {BURST}) / {RATE} = {:.2} s",
        elapsed.as_secs_f64(),
        expected.as_secs_f64()
    );
    println!(
        "waited for the quota (client metric): {:.2} s in total, {:.0} ms per request on average",
        client.waited().as_secs_f64(),
        client.waited().as_secs_f64() * 1e3 / f64::from(answered)
    );
    let above = per_second[1..].iter().any(|&(_, units)| units > RATE);
    println!(
        "no second after the first above {RATE} units: {}",
        if above { "NO" } else { "yes" }
    );
    if above || arrivals.len() != answered as usize || elapsed < expected {
        return Err("the upstream saw more than its quota".into());
    }
    Ok(())
}

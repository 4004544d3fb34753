//! A client for a model provider that allows 60 requests a minute *and* 90 000 tokens a minute,
//! where each call costs its prompt plus its completion in tokens. It reads the provider's
//! `RateLimit-Policy` to size two buckets, takes from both or neither for each call
//! ([`Limits`]), and after a 429 pauses both until `Retry-After` (`pause_for`), so the retry is
//! not a burst.
//!
//! The provider is a stub this example starts on a free loopback port: it enforces both limits
//! with its own buckets (a little more burst than it publishes, for network jitter) and answers
//! 429 with `Retry-After` when either is exceeded; once, it answers 429 anyway, as if a co-tenant
//! had used the shared quota. **Time runs 60 times faster**: one provider minute is one second,
//! so the run takes about 5 s; the quotas are the provider's, per-second equivalents.
//!
//! Run it with `cargo run --release --example llm_client --features tokio`. It fails (exit
//! status 1) if the client meets a 429 other than the injected one, if it sends anything before
//! the pause's instant, or if it resumes with a burst.

use std::error::Error;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tollgate::{headers, Clock, Denied, Jitter, Limits, Quota, TokenBucket, TokioClock};

type BoxError = Box<dyn Error + Send + Sync>;

/// Provider seconds per real second.
const SPEEDUP: u32 = 60;
/// What the provider publishes (windows in provider seconds).
const POLICY: &str = r#""requests";q=60;w=60, "tokens";q=90000;w=60"#;
/// The injected 429's `Retry-After`, in provider seconds: half a real second.
const INJECTED_RETRY_AFTER: u64 = 30;
/// Calls the client makes, from this many concurrent tasks.
const CALLS: u32 = 240;
const WORKERS: u32 = 8;

/// One call's tokens: prompt plus the completion's `max_tokens`, 500 to 2 499.
fn tokens_for(call: u32) -> u32 {
    500 + (call * 737) % 2_000
}

/// A provider time span in real time.
fn real(provider: Duration) -> Duration {
    provider / SPEEDUP
}

/// The client: two buckets sized from the provider's policy, taken from together.
struct LlmClient {
    provider: SocketAddr,
    requests: TokenBucket<TokioClock>,
    tokens: TokenBucket<TokioClock>,
    jitter: Jitter,
    /// (clock tick, tokens) of every call the client let through.
    granted: Mutex<Vec<(u64, u32)>>,
    /// (clock tick the pause was taken, its length) for each 429 met.
    pauses: Mutex<Vec<(u64, Duration)>>,
}

impl LlmClient {
    /// Reads the provider's policy and sizes the buckets from it, with a burst of a twelfth of
    /// a window: 5 requests and 7 500 tokens.
    async fn connect(provider: SocketAddr, clock: TokioClock) -> Result<Self, BoxError> {
        let response = http(provider, "GET /v1/limits", 0).await?;
        let policy = response.header("ratelimit-policy").ok_or("no policy")?;
        let bucket = |name: &str| -> Result<TokenBucket<TokioClock>, BoxError> {
            let policy = headers::policies(policy)
                .find(|p| p.as_ref().map_or(true, |p| p.name() == name))
                .ok_or("policy not published")??;
            let rate = tollgate::Rate::new(
                policy.limit(),
                real(Duration::from_secs(policy.window_secs())),
            );
            let quota = Quota::new(rate).burst(policy.limit() / 12);
            println!(
                "policy {name:?}: {} per {} s -> bucket {quota} (real time)",
                policy.limit(),
                policy.window_secs()
            );
            Ok(TokenBucket::try_new(quota, clock)?)
        };
        Ok(Self {
            provider,
            requests: bucket("requests")?,
            tokens: bucket("tokens")?,
            jitter: Jitter::up_to(Duration::from_millis(2), u64::from(std::process::id())),
            granted: Mutex::default(),
            pauses: Mutex::default(),
        })
    }

    /// One completion call of `tokens` tokens: waits for both quotas, retries after a 429.
    async fn complete(&self, tokens: u32) -> Result<u32, BoxError> {
        let limits = Limits::new([&self.requests, &self.tokens]);
        let mut met_429 = 0;
        loop {
            // try_acquire in a loop rather than a reservation: after a pause nothing already
            // queued fires before its instant. Jitter keeps the waiters from waking together.
            match limits.try_acquire([1, tokens]) {
                Ok(()) => {}
                Err(Denied::Insufficient { retry_after }) => {
                    tokio::time::sleep(self.jitter.delay(retry_after.get())).await;
                    continue;
                }
                Err(never) => return Err(never.into()),
            }
            let now = self.requests.clock().now();
            self.granted.lock().unwrap().push((now, tokens));
            let response = http(self.provider, "POST /v1/complete", tokens).await?;
            match response.status {
                200 => return Ok(met_429),
                429 => {
                    met_429 += 1;
                    let retry_after = response.header("retry-after").ok_or("429 without it")?;
                    let unix_now = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)?
                        .as_secs();
                    let pause = real(headers::retry_after(retry_after, unix_now)?);
                    let now = self.requests.clock().now();
                    self.requests.pause_for(pause);
                    self.tokens.pause_for(pause);
                    self.pauses.lock().unwrap().push((now, pause));
                }
                status => return Err(format!("status {status}").into()),
            }
        }
    }
}

struct Response {
    status: u16,
    head: String,
}

impl Response {
    fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.eq_ignore_ascii_case(name).then(|| value.trim())
        })
    }
}

/// A minimal HTTP/1.1 request: one per connection, read to its end.
async fn http(provider: SocketAddr, line: &str, tokens: u32) -> Result<Response, BoxError> {
    let mut stream = TcpStream::connect(provider).await?;
    let request = format!(
        "{line} HTTP/1.1\r\nHost: {provider}\r\nX-Tokens: {tokens}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await?;
    let mut raw = String::new();
    stream.read_to_string(&mut raw).await?;
    let (head, _body) = raw.split_once("\r\n\r\n").ok_or("no end of headers")?;
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or("no status code")?;
    Ok(Response {
        status,
        head: head.to_owned(),
    })
}

/// The provider stub: its own buckets (the published rates, twice the client's burst), one
/// injected 429, and a count of what it refused.
struct Provider {
    requests: TokenBucket<TokioClock>,
    tokens: TokenBucket<TokioClock>,
    calls: AtomicU32,
    refused: AtomicU32,
}

async fn serve(stream: TcpStream, provider: Arc<Provider>) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream);
    let mut request_line = String::new();
    reader.read_line(&mut request_line).await?;
    let mut tokens = 0;
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header).await? == 0 || header == "\r\n" {
            break;
        }
        if let Some(value) = header.strip_prefix("X-Tokens:") {
            tokens = value.trim().parse().unwrap_or(u32::MAX);
        }
    }
    let (status, extra) = if request_line.starts_with("GET /v1/limits") {
        ("200 OK", format!("RateLimit-Policy: {POLICY}\r\n"))
    } else {
        // Relaxed: a counter.
        let call = provider.calls.fetch_add(1, Ordering::Relaxed);
        let limits = Limits::new([&provider.requests, &provider.tokens]);
        match limits.try_acquire([1, tokens]) {
            // A co-tenant used the shared quota: refused whatever this client did.
            _ if call == CALLS / 4 => (
                "429 Too Many Requests",
                format!("Retry-After: {INJECTED_RETRY_AFTER}\r\n"),
            ),
            Ok(()) => ("200 OK", String::new()),
            Err(denied) => {
                provider.refused.fetch_add(1, Ordering::Relaxed);
                let secs = denied.retry_after().unwrap_or(Duration::MAX) * SPEEDUP;
                let secs = secs.as_secs() + u64::from(secs.subsec_nanos() > 0);
                ("429 Too Many Requests", format!("Retry-After: {secs}\r\n"))
            }
        }
    };
    // The provider takes a few milliseconds to answer, so calls overlap.
    tokio::time::sleep(Duration::from_millis(5)).await;
    let response =
        format!("HTTP/1.1 {status}\r\n{extra}Content-Length: 0\r\nConnection: close\r\n\r\n");
    let mut stream = reader.into_inner();
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let clock = TokioClock::new();
    let published = |q: u64, burst: u64| {
        Quota::new(tollgate::Rate::new(q, real(Duration::from_secs(60)))).burst(burst)
    };
    let provider = Arc::new(Provider {
        requests: TokenBucket::try_new(published(60, 10), clock)?,
        tokens: TokenBucket::try_new(published(90_000, 15_000), clock)?,
        calls: AtomicU32::new(0),
        refused: AtomicU32::new(0),
    });
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
    let addr = listener.local_addr()?;
    let server = tokio::spawn({
        let provider = provider.clone();
        async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, provider.clone()));
            }
        }
    });
    println!(
        "== LLM client -> stub provider on {addr}; time runs {SPEEDUP}x: 1 provider minute = 1 s"
    );
    let client = Arc::new(LlmClient::connect(addr, clock).await?);

    let started = tokio::time::Instant::now();
    let next = Arc::new(AtomicU32::new(0));
    let mut workers = JoinSet::new();
    for _ in 0..WORKERS {
        let (client, next) = (client.clone(), next.clone());
        workers.spawn(async move {
            let mut met_429 = 0;
            // Relaxed: hands out call numbers; nothing else is published through it.
            while let call @ 0..CALLS = next.fetch_add(1, Ordering::Relaxed) {
                met_429 += client.complete(tokens_for(call)).await?;
            }
            Ok::<u32, BoxError>(met_429)
        });
    }
    let mut met_429 = 0;
    while let Some(done) = workers.join_next().await {
        met_429 += done??;
    }
    let elapsed = started.elapsed();
    server.abort();

    let granted = client.granted.lock().unwrap().clone();
    let pauses = client.pauses.lock().unwrap().clone();
    let total_tokens: u64 = (0..CALLS).map(|c| u64::from(tokens_for(c))).sum();
    let minutes = elapsed.as_secs_f64(); // one provider minute per second
    println!(
        "{CALLS} calls, {total_tokens} tokens in {:.2} s: {:.1} requests/min and {:.0} tokens/min (provider time; quota 60 and 90 000)",
        elapsed.as_secs_f64(),
        f64::from(CALLS) / minutes,
        total_tokens as f64 / minutes
    );
    println!(
        "429s met: {met_429} (injected: 1); refused by the provider's own limits: {}",
        provider.refused.load(Ordering::Relaxed)
    );
    let mut failed = met_429 != 1 || provider.refused.load(Ordering::Relaxed) != 0;
    for &(at, pause) in &pauses {
        let resume = at + pause.as_nanos() as u64;
        let during = granted
            .iter()
            .filter(|&&(t, _)| t > at && t < resume)
            .count();
        // From empty, a window of 250 ms holds at most rate x 250 ms: 15 calls, 22 500 tokens.
        let window = 250_000_000;
        let after: Vec<_> = granted
            .iter()
            .filter(|&&(t, _)| t >= resume && t < resume + window)
            .collect();
        let after_tokens: u32 = after.iter().map(|&&(_, n)| n).sum();
        println!(
            "pause of {:?} (Retry-After {INJECTED_RETRY_AFTER} provider s): {during} calls let through during it; \
             first 250 ms after: {} calls, {after_tokens} tokens (from empty at most 15 and 22 500; \
             resumed full would allow 20 and 30 000)",
            pause,
            after.len()
        );
        failed |= during != 0 || after.len() > 15 || after_tokens > 22_500;
    }
    failed |= pauses.len() != 1;
    println!("{}", if failed { "FAILED" } else { "ok" });
    if failed {
        return Err("the client broke the provider's limits or its pause".into());
    }
    Ok(())
}

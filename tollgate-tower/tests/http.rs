//! A real HTTP check on loopback: the example server's app, and clients on their own
//! addresses. A client over its limit gets 429s whose `Retry-After` is right (the next token's
//! wait rounded up, and waiting that long is enough); a client within its limit gets none, and
//! its 200s carry `RateLimit` and `RateLimit-Policy`, `r` counting down the tokens its bucket
//! has left (one bucket shared by every client, and one per client) until a 429 says `r=0`.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket};
use tollgate::{Quota, Rate};

#[allow(dead_code)]
#[path = "../examples/axum_server.rs"]
mod axum_server;

struct Reply {
    status: u16,
    headers: HashMap<String, String>,
    body: String,
}

/// One `GET /` from `client` (a loopback address of its own) on a new connection.
async fn get(server: SocketAddr, client: [u8; 4]) -> Reply {
    get_with(server, client, "/", "").await
}

/// One `GET` of `path` with `extra` header lines (each ending in CRLF) from `client`.
async fn get_with(server: SocketAddr, client: [u8; 4], path: &str, extra: &str) -> Reply {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::from((client, 0))).unwrap();
    let mut stream = socket.connect(server).await.unwrap();
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: tollgate\r\n{extra}Connection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut raw = String::new();
    stream.read_to_string(&mut raw).await.unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    let mut lines = head.lines();
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers = lines
        .filter_map(|line| line.split_once(": "))
        .map(|(name, value)| (name.to_ascii_lowercase(), value.to_owned()))
        .collect();
    Reply {
        status,
        headers,
        body: body.to_owned(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_the_limit_gets_429_with_a_correct_retry_after_and_under_it_none() {
    // Three at once, then one every two seconds, per client address.
    let quota = Quota::new(Rate::new(1, Duration::from_secs(2))).burst(3);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = listener.local_addr().unwrap();
    let serving = tokio::spawn(axum_server::serve(listener, axum_server::limiter(quota)));

    const GREEDY: [u8; 4] = [127, 0, 0, 2];
    const POLITE: [u8; 4] = [127, 0, 0, 3];

    // The polite client sends its burst of three while the greedy one floods.
    let polite = tokio::spawn(async move {
        let mut statuses = Vec::new();
        for _ in 0..3 {
            statuses.push(get(server, POLITE).await.status);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        statuses
    });

    // The greedy client: 200 requests over 8 connections at a time.
    let started = Instant::now();
    let mut replies = Vec::new();
    for _ in 0..25 {
        let batch: Vec<_> = (0..8).map(|_| tokio::spawn(get(server, GREEDY))).collect();
        for reply in batch {
            replies.push(reply.await.unwrap());
        }
    }
    let flood = started.elapsed();
    let ok = replies.iter().filter(|r| r.status == 200).count();
    let refused: Vec<_> = replies.iter().filter(|r| r.status == 429).collect();
    assert_eq!(ok + refused.len(), 200, "only 200s and 429s");
    // Three at once, plus one per two seconds the flood lasted.
    let earned = 3 + (flood.as_secs_f64() / 2.0).floor() as usize;
    assert!(ok >= 3 && ok <= earned, "{ok} granted in {flood:?}");
    for reply in &refused {
        let retry: u64 = reply.headers["retry-after"].parse().unwrap();
        assert!((1..=2).contains(&retry), "Retry-After {retry}");
        assert_eq!(reply.headers["ratelimit-policy"], "\"default\";q=3;w=6");
        assert!(reply.headers["ratelimit"].starts_with("\"default\";r=0;t="));
    }
    if flood < Duration::from_millis(900) {
        // The bucket was emptied well within the first second: the next token is due in
        // (1, 2] s, which rounds up to 2.
        assert_eq!(refused[0].headers["retry-after"], "2");
    }

    // Waiting as long as told is enough.
    let now = get(server, GREEDY).await;
    assert_eq!(now.status, 429);
    let retry: u64 = now.headers["retry-after"].parse().unwrap();
    tokio::time::sleep(Duration::from_secs(retry)).await;
    assert_eq!(get(server, GREEDY).await.status, 200);
    assert_eq!(get(server, GREEDY).await.status, 429);

    let polite = polite.await.unwrap();
    assert_eq!(
        polite,
        [200, 200, 200],
        "the polite client is never refused"
    );
    serving.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_polite_client_keeps_its_grants_through_a_flood_of_new_addresses() {
    // A hundred clients at most, twenty requests a second each, bursts of ten.
    let quota = Quota::new(Rate::per_second(20)).burst(10);
    let limiter = axum_server::limiter_with(quota, 100, tollgate::WhenFull::Refuse);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = listener.local_addr().unwrap();
    let serving = tokio::spawn(axum_server::serve(listener, limiter));

    const POLITE: [u8; 4] = [127, 0, 0, 4];
    // There before the flood: two grants, and its bucket is its own from then on.
    for _ in 0..2 {
        assert_eq!(get(server, POLITE).await.status, 200);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The flood: 32 connections at a time, each new address draining its burst, for 2 s.
    let until = Instant::now() + Duration::from_secs(2);
    let attackers: Vec<_> = (0..32u32)
        .map(|task| {
            tokio::spawn(async move {
                let mut replies = Vec::new();
                let mut n = task;
                while Instant::now() < until {
                    let address = (0x7f02_0000u32 + n).to_be_bytes();
                    n += 32;
                    for _ in 0..10 {
                        replies.push(get(server, address).await);
                    }
                }
                replies
            })
        })
        .collect();
    // The polite client: every 100 ms, half its rate.
    let mut polite = Vec::new();
    let mut every = tokio::time::interval(Duration::from_millis(100));
    while Instant::now() < until {
        every.tick().await;
        polite.push(get(server, POLITE).await.status);
    }
    let mut unavailable = 0;
    for attacker in attackers {
        for reply in attacker.await.unwrap() {
            assert!([200, 429, 503].contains(&reply.status), "{}", reply.status);
            if reply.status == 503 {
                unavailable += 1;
                // Told when a slot will be free: within the 0.5 s a drained bucket takes to
                // refill and the second of probation after it, rounded up.
                let retry_after = reply.headers["retry-after"].as_str();
                assert!(
                    ["1", "2"].contains(&retry_after),
                    "retry-after: {retry_after}"
                );
            }
        }
    }
    assert!(unavailable > 0, "the flood filled the limiter");
    let granted = polite.iter().filter(|&&status| status == 200).count();
    assert!(polite.len() >= 15, "{} polite requests", polite.len());
    assert_eq!(granted, polite.len(), "polite statuses: {polite:?}");
    serving.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_api_keys_get_their_own_tiers_and_refusals_read_as_people_write() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = listener.local_addr().unwrap();
    let quota = Quota::new(Rate::per_second(5)).burst(10);
    let serving = tokio::spawn(axum_server::serve(listener, axum_server::limiter(quota)));
    // Both keys from one address: the API's limit is per key, not per address.
    const CLIENT: [u8; 4] = [127, 0, 0, 5];
    let started = Instant::now();
    let (mut free, mut paid, mut refusals) = (0, 0, Vec::new());
    for round in 0..130 {
        let reply = get_with(server, CLIENT, "/api", "x-api-key: paid-demo\r\n").await;
        paid += usize::from(reply.status == 200);
        if round < 20 {
            let reply = get_with(server, CLIENT, "/api", "x-api-key: someone\r\n").await;
            free += usize::from(reply.status == 200);
            if reply.status == 429 {
                refusals.push(reply);
            }
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    // Each key its own burst at once, and at most its rate since (the bound is the real time
    // the run took, however slow the machine).
    assert!(
        paid >= 100 && paid <= 100 + (50.0 * elapsed) as usize,
        "paid: {paid} in {elapsed:.2} s"
    );
    assert!(
        free >= 10 && free <= 10 + (5.0 * elapsed) as usize,
        "free: {free} in {elapsed:.2} s"
    );
    assert!(!refusals.is_empty());
    for reply in &refusals {
        assert_eq!(reply.headers["ratelimit-policy"], "\"default\";q=10;w=2");
        // "rate limited: retry after 180 ms" or "… 1.2 s": a person's duration, not `{:?}`.
        let wait = reply
            .body
            .strip_prefix("rate limited: retry after ")
            .unwrap()
            .trim_end();
        let (number, unit) = wait.split_once(' ').unwrap();
        assert!(["ms", "s"].contains(&unit), "{:?}", reply.body);
        assert!(number.parse::<f64>().is_ok(), "{:?}", reply.body);
    }
    serving.abort();
}

/// Three at once, then one a minute: no token comes back while a test runs, so `r` and `t` are
/// exact whatever the machine's load (`t` is rounded up, and a test takes under a second).
const SLOW: Quota = Quota::new(Rate::new(1, Duration::from_secs(60))).burst(3);

/// `(status, RateLimit, RateLimit-Policy, Retry-After)` of a reply, as rows to compare.
fn row(reply: &Reply) -> (u16, Option<&str>, Option<&str>, Option<&str>) {
    let header = |name: &str| reply.headers.get(name).map(String::as_str);
    (
        reply.status,
        header("ratelimit"),
        header("ratelimit-policy"),
        header("retry-after"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_bucket_counts_down_on_every_200_then_refuses() {
    let bucket = Arc::new(tollgate::TokenBucket::try_new(SLOW, tollgate::StdClock).unwrap());
    let app = axum::Router::new()
        .route("/", axum::routing::get(|| async { "hello\n" }))
        .layer(tollgate_tower::AnswerLayer::new(bucket).policy_name("site"));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = listener.local_addr().unwrap();
    let serving = tokio::spawn(async move { axum::serve(listener, app).await });

    let policy = Some("\"site\";q=3;w=180");
    // Two clients, one bucket: each 200 says what is left for everyone.
    let rows = [
        (
            [127, 0, 0, 2],
            (200, Some("\"site\";r=2;t=60"), policy, None),
        ),
        (
            [127, 0, 0, 3],
            (200, Some("\"site\";r=1;t=120"), policy, None),
        ),
        (
            [127, 0, 0, 2],
            (200, Some("\"site\";r=0;t=180"), policy, None),
        ),
        (
            [127, 0, 0, 3],
            (429, Some("\"site\";r=0;t=180"), policy, Some("60")),
        ),
    ];
    for (i, (client, want)) in rows.into_iter().enumerate() {
        assert_eq!(row(&get(server, client).await), want, "request {i}");
    }
    serving.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_client_counts_down_its_own_bucket_on_its_200s() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = listener.local_addr().unwrap();
    let serving = tokio::spawn(axum_server::serve(listener, axum_server::limiter(SLOW)));

    const A: [u8; 4] = [127, 0, 0, 6];
    const B: [u8; 4] = [127, 0, 0, 7];
    let policy = Some("\"default\";q=3;w=180");
    let rows = [
        (A, (200, Some("\"default\";r=2;t=60"), policy, None)),
        (A, (200, Some("\"default\";r=1;t=120"), policy, None)),
        (B, (200, Some("\"default\";r=2;t=60"), policy, None)), // its own bucket
        (A, (200, Some("\"default\";r=0;t=180"), policy, None)),
        (A, (429, Some("\"default\";r=0;t=180"), policy, Some("60"))),
        (B, (200, Some("\"default\";r=1;t=120"), policy, None)),
    ];
    for (i, (client, want)) in rows.into_iter().enumerate() {
        assert_eq!(row(&get(server, client).await), want, "request {i}");
    }
    serving.abort();
}

//! An independent check: nginx's `limit_req` at 100 r/s, burst 10, counts what four processes
//! sharing one Redis bucket actually send it.

use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tollgate::{Quota, Rate};
use tollgate_redis::{Client, RedisBucket, RedisConnection};

use crate::support::{
    field, fleet_of_four, fleet_window, runtime, serial, setting, sleep_until_unix, unix_us,
    worker_role, Nginx, RedisServer,
};

const SECONDS: u64 = 5;
/// The shared bucket's burst. nginx admits 10 requests beyond its rate; what is left of them
/// after our burst absorbs the jitter between a grant in Redis and the request's arrival in
/// nginx (five requests: 55 ms at 90/s).
const BURST: u64 = 5;

/// Four processes send for 5 s through one Redis bucket: at 90/s nginx never says 429; at
/// 150/s it says it often.
#[test]
fn nginx_sees_the_shared_rate() {
    if worker_role().is_some() {
        return runtime().block_on(send_through_nginx());
    }
    let _serial = serial();
    let server = RedisServer::start();
    let nginx = Nginx::start(&["under", "over"]);

    let (ok, limited) = run(&server, &nginx, "under", 90);
    assert_eq!(limited, 0, "nginx limited a 90/s bucket ({ok} passed)");
    // And the processes did send, near the rate. Each holds one reservation at a time, so
    // that nothing granted early can bunch up in front of nginx after a stall; the price is
    // that tokens lapse whenever a busy box runs none of the four for a while.
    let expected = BURST + 90 * SECONDS;
    assert!(
        ok * 100 >= expected * 60,
        "{ok} requests, below 60 % of {expected}"
    );

    let (ok, limited) = run(&server, &nginx, "over", 150);
    // 250 at full speed; fewer when a busy box slows the senders down.
    assert!(
        limited >= 50,
        "nginx limited only {limited} of a 150/s bucket"
    );
    // What nginx let through is its own limit: 100/s plus its burst (and one for the first).
    assert!(ok <= 11 + 100 * SECONDS + 10, "{ok} passed nginx");
    println!("nginx: at 150/s {ok} passed, {limited} limited");
}

/// Runs four workers through `location` on a bucket of `rate`/s; (passed, limited).
fn run(server: &RedisServer, nginx: &Nginx, location: &str, rate: u64) -> (u64, u64) {
    let (_, mut settings) = fleet_window(server, SECONDS);
    settings.extend([
        ("NGINX_PORT", nginx.port.to_string()),
        ("LOCATION", location.to_string()),
        ("RATE", rate.to_string()),
    ]);
    let reports = fleet_of_four("nginx::nginx_sees_the_shared_rate", "http", &settings);
    for line in &reports {
        assert_eq!(field(line, "other"), 0, "unexpected answers: {line}");
    }
    let ok = reports.iter().map(|r| field(r, "ok")).sum();
    let limited = reports.iter().map(|r| field(r, "limited")).sum();
    (ok, limited)
}

async fn send_through_nginx() {
    let start_us: u64 = setting("START_US").parse().unwrap();
    let end_us: u64 = setting("END_US").parse().unwrap();
    let rate: u64 = setting("RATE").parse().unwrap();
    let location = setting("LOCATION");
    let client =
        RedisConnection::connect_lazy(Client::open(setting("REDIS_URL")).unwrap()).unwrap();
    let quota = Quota::new(Rate::per_second(rate)).burst(BURST);
    let bucket = RedisBucket::builder(&client, format!("nginx-{location}"), quota)
        .timeout(Duration::from_secs(1))
        .connect()
        .await
        .expect("connect");
    let port: u16 = setting("NGINX_PORT").parse().unwrap();
    let stream = TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("nginx");
    stream.set_nodelay(true).unwrap();
    let mut http = BufReader::new(stream);
    let request = format!("GET /{location} HTTP/1.1\r\nHost: localhost\r\n\r\n");
    let (mut ok, mut limited, mut other) = (0u64, 0u64, 0u64);
    sleep_until_unix(start_us).await;
    loop {
        let now = unix_us();
        if now >= end_us {
            break;
        }
        match bucket
            .acquire_timeout(1, Duration::from_micros(end_us - now))
            .await
        {
            Ok(_waited) => {}
            Err(error) if error.retry_after().is_some() => break,
            Err(error) => panic!("worker: {error}"),
        }
        http.get_mut()
            .write_all(request.as_bytes())
            .await
            .expect("send");
        match status(&mut http).await {
            200 => ok += 1,
            429 => limited += 1,
            _ => other += 1,
        }
    }
    println!("@@ ok={ok} limited={limited} other={other}");
}

/// Reads one HTTP/1.1 response on a kept-alive connection; its status code.
async fn status(http: &mut BufReader<TcpStream>) -> u16 {
    let mut line = String::new();
    http.read_line(&mut line).await.expect("status line");
    let code = line
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {line:?}"));
    let mut length = 0;
    loop {
        line.clear();
        http.read_line(&mut line).await.expect("header");
        let header = line.trim_end();
        if header.is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().expect("content length");
            }
        }
    }
    let mut body = vec![0; length];
    http.read_exact(&mut body).await.expect("body");
    code
}

//! The example server's `/metrics`, scraped after a load run: the limit's counts equal the 200s
//! and 429s its clients saw, and the scrape itself is neither limited nor counted.

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket};
use tollgate::{Quota, Rate};

#[allow(dead_code)]
#[path = "../examples/axum_server.rs"]
mod axum_server;

/// `GET path` from `client`'s loopback address: the status and the body.
async fn fetch(server: SocketAddr, client: [u8; 4], path: &str) -> (u16, String) {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind((client, 0).into()).unwrap();
    let mut stream = socket.connect(server).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: tollgate\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, body.to_owned())
}

/// The value of the sample `name{limiter="per_address"}` in a Prometheus text page.
fn sample(page: &str, name: &str) -> u64 {
    let prefix = format!("{name}{{limiter=\"per_address\"}} ");
    let line = page.lines().find(|line| line.starts_with(&prefix));
    let line = line.unwrap_or_else(|| panic!("no {prefix} in:\n{page}"));
    line[prefix.len()..].parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_counts_equal_the_answers_the_clients_saw() {
    // Ten at once, then five a second, per client address.
    let quota = Quota::new(Rate::per_second(5)).burst(10);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = listener.local_addr().unwrap();
    let serving = tokio::spawn(axum_server::serve(listener, axum_server::limiter(quota)));

    // Three clients, 80 requests each, 8 connections at a time across them.
    let clients = [[127, 0, 0, 2], [127, 0, 0, 3], [127, 0, 0, 4]];
    let mut statuses = Vec::new();
    for round in 0..30 {
        let batch: Vec<_> = (0..8)
            .map(|i| tokio::spawn(fetch(server, clients[(round * 8 + i) % 3], "/")))
            .collect();
        for answer in batch {
            statuses.push(answer.await.unwrap().0);
        }
    }
    let ok = statuses.iter().filter(|&&s| s == 200).count() as u64;
    let refused = statuses.iter().filter(|&&s| s == 429).count() as u64;
    assert_eq!(ok + refused, 240, "only 200s and 429s");
    assert!(ok >= 30 && refused > 0, "{ok} granted, {refused} refused");

    // Scraped twice: the same counts, so the scrape is not counted, nor refused.
    for _ in 0..2 {
        let (status, page) = fetch(server, [127, 0, 0, 2], "/metrics").await;
        assert_eq!(status, 200);
        assert_eq!(sample(&page, "tollgate_granted_total"), ok);
        assert_eq!(sample(&page, "tollgate_granted_tokens_total"), ok);
        assert_eq!(sample(&page, "tollgate_denied_total"), refused);
        assert_eq!(sample(&page, "tollgate_denied_tokens_total"), refused);
    }
    serving.abort();
}

//! The `axum_per_ip` example's router, run in process and on a real listener: the eleventh
//! request of a client in a burst gets 429 with `Retry-After`, each client IP behind the proxy
//! has its own bucket (whatever it writes in `X-Forwarded-For`), and a router served without
//! `ConnectInfo` answers 500 with the reason rather than share one bucket. Tokio's time is
//! paused, so the limiter's clock stands still between requests.

use std::net::SocketAddr;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{Request, StatusCode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tower::ServiceExt;

#[allow(dead_code)]
#[path = "../examples/axum_per_ip.rs"]
mod axum_per_ip;

/// An answer's status and `Retry-After`.
type Answer = (StatusCode, Option<String>);

/// The proxy in front of the server.
const PROXY: ([u8; 4], u16) = ([10, 0, 0, 5], 41_000);

/// `GET /` through `router` as the proxy forwards it: `forwarded` is the whole
/// `X-Forwarded-For` line, the client's text followed by the hop the proxy appended.
async fn through_proxy(router: &axum::Router, forwarded: &[u8]) -> Answer {
    let mut request = Request::get("/")
        .header("x-forwarded-for", forwarded)
        .body(Body::empty())
        .unwrap();
    request
        .extensions_mut()
        .insert(ConnectInfo(SocketAddr::from(PROXY)));
    let response = router.clone().oneshot(request).await.unwrap();
    let retry_after = response
        .headers()
        .get("retry-after")
        .map(|value| value.to_str().unwrap().to_owned());
    (response.status(), retry_after)
}

#[tokio::test(start_paused = true)]
async fn each_client_ip_gets_its_own_ten_then_429_with_retry_after() {
    let router = axum_per_ip::app();
    // (client's X-Forwarded-For line as the proxy passes it on, status, Retry-After)
    let ok = (StatusCode::OK, None);
    let limited = (StatusCode::TOO_MANY_REQUESTS, Some(String::from("1")));
    for i in 0..10 {
        // The client forges a different hop each time: its bucket is the same.
        let line = format!("6.6.6.{i}\u{ff}, 203.0.113.7");
        assert_eq!(
            through_proxy(&router, line.as_bytes()).await,
            ok,
            "request {i}"
        );
    }
    let rows: &[(&[u8], Answer)] = &[
        (b"203.0.113.7", limited.clone()),
        (b"198.51.100.9, 203.0.113.7", limited.clone()), // forging another IP does not help
        (b"\xff\xfe, 203.0.113.7", limited.clone()),
        (b"203.0.113.8", ok.clone()), // another client: its own bucket
        (b"203.0.113.7, 203.0.113.9", ok.clone()), // the proxy's hop decides, not the client's
        (b"[2001:db8:1:2::7]:443", ok.clone()),
    ];
    for (i, (line, expected)) in rows.iter().enumerate() {
        assert_eq!(through_proxy(&router, line).await, *expected, "row {i}");
    }
    // Retry-After said a second: a token was due in 200 ms, one, not two.
    tokio::time::advance(std::time::Duration::from_millis(200)).await;
    assert_eq!(through_proxy(&router, b"203.0.113.7").await, ok);
    assert_eq!(through_proxy(&router, b"203.0.113.7").await, limited);
}

#[tokio::test(start_paused = true)]
async fn without_connect_info_every_request_is_refused_with_the_reason() {
    let request = Request::get("/")
        .header("x-forwarded-for", "203.0.113.7")
        .body(Body::empty())
        .unwrap();
    let response = axum_per_ip::app().oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
    let body = axum::body::to_bytes(response.into_body(), 1 << 16)
        .await
        .unwrap();
    let body = String::from_utf8(body.to_vec()).unwrap();
    assert!(
        body.starts_with("no client address") && body.contains("ConnectInfo<SocketAddr>"),
        "{body}"
    );
}

/// One `GET /` on a new connection with `forwarded` as `X-Forwarded-For`: status line and
/// `Retry-After`.
async fn get(server: SocketAddr, forwarded: &str) -> (u16, Option<String>) {
    let mut stream = TcpStream::connect(server).await.unwrap();
    let request = format!(
        "GET / HTTP/1.1\r\nHost: tollgate\r\nX-Forwarded-For: {forwarded}\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut raw = String::new();
    stream.read_to_string(&mut raw).await.unwrap();
    let status = raw.split(' ').nth(1).unwrap().parse().unwrap();
    let retry_after = raw.lines().find_map(|line| {
        line.to_ascii_lowercase()
            .strip_prefix("retry-after: ")
            .map(str::to_owned)
    });
    (status, retry_after)
}

#[tokio::test(start_paused = true)]
async fn served_on_a_listener_the_connection_is_the_trusted_hop() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = listener.local_addr().unwrap();
    tokio::spawn(axum_per_ip::serve(listener));
    for i in 0..10 {
        assert_eq!(get(server, "203.0.113.7").await, (200, None), "request {i}");
    }
    assert_eq!(get(server, "203.0.113.7").await, (429, Some("1".into())));
    assert_eq!(get(server, "203.0.113.8").await, (200, None));
}

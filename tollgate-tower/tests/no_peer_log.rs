//! A server run without the peer's address (axum served without `ConnectInfo`) answers every
//! request `500` with the reason, and says so in its log once per key extractor, not once per
//! request: a flood of such requests on a real socket, and threads racing on one extractor, each
//! log one event, counted by a `tracing` subscriber of the test's own.
//!
//! One test in this binary: the subscriber is the process's global one.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tollgate::{Quota, Rate};
use tollgate_tower::extract::{ForwardedIp, NoKey, PeerIp};
use tollgate_tower::KeyOf;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

#[allow(dead_code)]
#[path = "../examples/axum_server.rs"]
mod axum_server;

/// Counts the events tollgate-tower logs, and keeps their level and message.
#[derive(Default)]
struct Counting {
    events: Mutex<Vec<(Level, String)>>,
    next_span: AtomicU64,
}

struct Message<'a>(&'a mut String);

impl Visit for Message<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn core::fmt::Debug) {
        if field.name() == "message" {
            *self.0 = format!("{value:?}");
        }
    }
}

impl Subscriber for Counting {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(self.next_span.fetch_add(1, Ordering::Relaxed) + 1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        if event.metadata().target().starts_with("tollgate_tower") {
            let mut message = String::new();
            event.record(&mut Message(&mut message));
            let level = *event.metadata().level();
            self.events.lock().unwrap().push((level, message));
        }
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

/// One `GET /` on a new connection: the status and the body.
async fn get(server: SocketAddr) -> (u16, String) {
    let mut stream = TcpStream::connect(server).await.unwrap();
    let request = "GET / HTTP/1.1\r\nHost: tollgate\r\nConnection: close\r\n\r\n";
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut raw = String::new();
    stream.read_to_string(&mut raw).await.unwrap();
    let status = raw.split(' ').nth(1).unwrap().parse().unwrap();
    let body = raw.split_once("\r\n\r\n").unwrap().1.to_owned();
    (status, body)
}

#[test]
fn a_server_without_the_peers_address_logs_it_once_however_many_requests_come() {
    let log = Arc::new(Counting::default());
    tracing::subscriber::set_global_default(Arc::clone(&log)).unwrap();
    let events = || log.events.lock().unwrap().clone();

    // The README's server, served without `into_make_service_with_connect_info`: 400 requests,
    // 16 connections at a time.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let server = listener.local_addr().unwrap();
        let limiter = axum_server::limiter(Quota::new(Rate::per_second(5)).burst(10));
        let app = axum_server::app(limiter, axum_server::api_limiter());
        let serving = tokio::spawn(async move { axum::serve(listener, app).await });
        for _ in 0..25 {
            let batch: Vec<_> = (0..16).map(|_| tokio::spawn(get(server))).collect();
            for reply in batch {
                let (status, body) = reply.await.unwrap();
                assert_eq!(status, 500);
                assert!(body.starts_with("no client address"), "{body}");
            }
        }
        serving.abort();
    });
    let logged = events();
    assert_eq!(logged.len(), 1, "{logged:?}");
    let (level, message) = &logged[0];
    assert_eq!(*level, Level::ERROR);
    // The message names the fix, as the 500's body does, and says it is not repeated.
    assert!(
        message.starts_with("no client address")
            && message.contains("into_make_service_with_connect_info"),
        "{message}"
    );
    assert!(message.contains("logged once"), "{message}");

    // Threads racing on one extractor (and its clones, which serve the same server) from the
    // first request: one more event. A forwarded-header extractor reads the peer the same way.
    let peer = PeerIp::default();
    let forwarded = ForwardedIp::x_forwarded_for(1).with_peer(peer.clone());
    std::thread::scope(|scope| {
        for thread in 0..4 {
            let (peer, forwarded) = (peer.clone(), forwarded.clone());
            scope.spawn(move || {
                let request = http::Request::new(());
                for _ in 0..1_000 {
                    let refused = if thread % 2 == 0 {
                        peer.key_of(&request)
                    } else {
                        forwarded.key_of(&request)
                    };
                    assert!(matches!(refused, Err(NoKey::NoPeer { .. })));
                }
            });
        }
    });
    assert_eq!(events().len(), 2, "{:?}", events());

    // A request whose forwarded hop is garbage is the client's doing, not the server's
    // configuration: a 500, and nothing in the log for a client to fill it with.
    let mut request = http::Request::builder()
        .header("x-forwarded-for", "unknown")
        .body(())
        .unwrap();
    request
        .extensions_mut()
        .insert(SocketAddr::from(([10, 0, 0, 5], 41_000)));
    for _ in 0..10 {
        let refused = ForwardedIp::x_forwarded_for(1).key_of(&request);
        assert!(matches!(refused, Err(NoKey::NotAnAddress { .. })));
    }
    assert_eq!(events().len(), 2, "{:?}", events());
}

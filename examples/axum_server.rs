//! An HTTP server that limits each client network (an IPv4 address, an IPv6 /64), answering
//! `429 Too Many Requests` with `Retry-After` and the IETF draft's `RateLimit` /
//! `RateLimit-Policy` headers, and `503 Service Unavailable` with the `Retry-After` of the next
//! free slot when the limiter is at its capacity and a new client finds no room.
//!
//! ```text
//! cargo run --example axum_server --features tower,metrics -- 3000
//! curl -i http://127.0.0.1:3000/      # ten at once, then five a second, per address
//! curl http://127.0.0.1:3000/metrics  # what the limit granted and refused (Prometheus text)
//! ```

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::body::Body;
use axum::error_handling::HandleErrorLayer;
use axum::extract::ConnectInfo;
use axum::http::{HeaderValue, Request, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tollgate::layer::{BoxError, PerKey, RateLimited, RejectLayer};
use tollgate::observe::{Counted, Metrics};
use tollgate::{IpPrefix, KeyedLimiter, Quota, Rate, StdClock, WhenFull};
use tower::ServiceBuilder;

/// One bucket per client network; requests without an address share a bucket.
pub type PerAddress = KeyedLimiter<Option<IpAddr>, StdClock>;

/// The application: one route, limited per client network, and `/metrics`, not limited. An
/// IPv6 client is keyed by its /64 (a host usually owns the whole of it), an IPv4 client by its
/// address.
pub fn app(limiter: Arc<PerAddress>) -> Router {
    let by_network = IpPrefix::default();
    let client_network = move |request: &Request<Body>| {
        request
            .extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .map(|ConnectInfo(address)| by_network.key(address.ip()))
    };
    // Counted for `/metrics`; the handles register with the recorder, so install it first.
    let scrape = prometheus().clone();
    let limit = Counted::new(
        PerKey::new(limiter, client_network),
        Metrics::new("per_address"),
    );
    Router::new()
        .route("/", get(|| async { "hello\n" }))
        .layer(
            ServiceBuilder::new()
                .layer(HandleErrorLayer::new(refusal_response))
                .layer(RejectLayer::new(Arc::new(limit))),
        )
        // Added after the limit, so a scraper is never refused nor counted.
        .route("/metrics", get(move || async move { scrape.render() }))
}

/// The process's Prometheus exporter, installed as the `metrics` recorder at its first use:
/// `/metrics` renders `tollgate_granted_total`, `tollgate_denied_total` and the rest.
pub fn prometheus() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        let recorder = PrometheusBuilder::new().install_recorder();
        recorder.expect("no other metrics recorder in this process")
    })
}

/// Maps the limiter's refusal to its HTTP answer.
async fn refusal_response(error: BoxError) -> Response {
    let Some(limited) = error.downcast_ref::<RateLimited>() else {
        return (StatusCode::INTERNAL_SERVER_ERROR, error.to_string()).into_response();
    };
    let status = StatusCode::from_u16(limited.status()).unwrap_or(StatusCode::TOO_MANY_REQUESTS);
    let mut response = (status, format!("{limited}\n")).into_response();
    for (name, value) in limited.headers().pairs() {
        if let Ok(value) = HeaderValue::from_str(value) {
            response.headers_mut().insert(name, value);
        }
    }
    response
}

/// The limiter: `quota` per client network, for up to 100 000 networks. A network that came
/// back within its quota keeps its bucket through any flood of new ones; a new network beyond
/// the capacity is refused (503, with the `Retry-After` of the next free slot).
pub fn limiter(quota: Quota) -> Arc<PerAddress> {
    limiter_with(quota, 100_000, WhenFull::Refuse)
}

/// A limiter of `capacity` networks that treats newcomers without room as `when_full` says.
pub fn limiter_with(quota: Quota, capacity: usize, when_full: WhenFull) -> Arc<PerAddress> {
    let limiter =
        KeyedLimiter::new(quota, StdClock, capacity, when_full).expect("the quota fits the word");
    Arc::new(limiter)
}

/// Serves `app` on `listener` until the process ends, sweeping full buckets every ten seconds.
pub async fn serve(listener: tokio::net::TcpListener, limiter: Arc<PerAddress>) {
    let sweeper = Arc::clone(&limiter);
    tokio::spawn(async move {
        let mut every = tokio::time::interval(Duration::from_secs(10));
        loop {
            every.tick().await;
            sweeper.sweep();
        }
    });
    let service = app(limiter).into_make_service_with_connect_info::<SocketAddr>();
    if let Err(error) = axum::serve(listener, service).await {
        eprintln!("server stopped: {error}");
    }
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let port: u16 = std::env::args()
        .nth(1)
        .and_then(|arg| arg.parse().ok())
        .unwrap_or(3000);
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    println!("listening on http://{}", listener.local_addr()?);
    serve(listener, limiter(Quota::new(Rate::per_second(5)).burst(10))).await;
    Ok(())
}

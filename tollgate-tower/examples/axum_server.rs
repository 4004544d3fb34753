//! An HTTP server limited two ways, with no error handling to write: the layer answers
//! `429 Too Many Requests` itself, with `Retry-After` and the IETF draft's `RateLimit` /
//! `RateLimit-Policy` headers (and `503 Service Unavailable` with the `Retry-After` of the next
//! free slot when a limiter is at its capacity and a new client finds no room). A `200` carries
//! `RateLimit` and `RateLimit-Policy` too, with the tokens its client has left.
//!
//! - `/` is limited per client network (an IPv4 address, an IPv6 /64): ten at once, then five
//!   a second.
//! - `/api` is limited per API key (the `x-api-key` header) on two tiers: the free tier ten at
//!   once then five a second, the paid tier (keys in [`PAID_KEYS`]) a hundred at once then
//!   fifty a second.
//!
//! - `/metrics` is not limited: the Prometheus exporter's page of what the per-network limit
//!   granted and refused (`tollgate_granted_total`, `tollgate_denied_total`, …).
//!
//! ```text
//! cargo run -p tollgate-tower --example axum_server --features axum -- 3000
//! curl -i http://127.0.0.1:3000/
//! curl http://127.0.0.1:3000/metrics  # what the per-network limit granted and refused
//! curl -i -H 'x-api-key: paid-demo' http://127.0.0.1:3000/api
//! scripts/wrk-tiers.sh      # both tiers under wrk for 10 s: 200s per key against the bound
//! ```

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::http::{HeaderName, HeaderValue};
use axum::routing::get;
use axum::Router;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tollgate::observe::{Counted, Metrics};
use tollgate::{IpPrefix, KeyedLimiter, Quota, Rate, StdClock, Tier, WhenFull};
use tollgate_tower::extract::{HeaderKey, PeerIp};
use tollgate_tower::{AnswerLayer, PerKey};

/// One bucket per client network; a request without an address is refused with a `500` that
/// says why.
pub type PerAddress = KeyedLimiter<IpAddr, StdClock>;

/// One bucket per API key; requests without a key share a bucket (on the free tier).
pub type PerApiKey = KeyedLimiter<Option<HeaderValue>, StdClock>;

/// The API keys on the paid tier. A real server looks keys up in its accounts: a key a client
/// makes up must never pick a better tier than a stranger's.
pub const PAID_KEYS: &[&str] = &["paid-demo"];

/// The API's free tier: ten at once, then five a second.
pub const FREE: Quota = Quota::new(Rate::per_second(5)).burst(10);
/// The API's paid tier: a hundred at once, then fifty a second.
pub const PAID: Quota = Quota::new(Rate::per_second(50)).burst(100);

/// The tier of an API key: paid for the keys in [`PAID_KEYS`], free for any other.
pub fn tier_of(key: &Option<HeaderValue>) -> Tier {
    match key {
        Some(key) if PAID_KEYS.iter().any(|paid| key == paid) => Tier(1),
        _ => Tier(0),
    }
}

/// The application: `/` limited per client network, `/api` per API key on two tiers, and
/// `/metrics`.
pub fn app(per_address: Arc<PerAddress>, per_api_key: Arc<PerApiKey>) -> Router {
    // Axum's `ConnectInfo`, read by name so that the tests and the flood example that include
    // this file build without the `axum` feature (with it, `PeerIp::default()` reads it too).
    let client_network =
        PeerIp::from_extension(IpPrefix::default(), |info: &ConnectInfo<SocketAddr>| info.0);
    let api_key = HeaderKey::new(HeaderName::from_static("x-api-key"));
    // Counted for `/metrics`; the handles register with the recorder, so install it first.
    let scrape = prometheus().clone();
    let per_network = Counted::new(
        PerKey::new(per_address, client_network),
        Metrics::new("per_address"),
    );
    let site = Router::new()
        .route("/", get(|| async { "hello\n" }))
        .layer(AnswerLayer::new(Arc::new(per_network)));
    let api = Router::new()
        .route("/api", get(|| async { "{\"hello\":\"api\"}\n" }))
        .layer(AnswerLayer::per_key(per_api_key, api_key));
    // Added outside the limits, so a scraper is never refused nor counted.
    let metrics = Router::new().route("/metrics", get(move || async move { scrape.render() }));
    site.merge(api).merge(metrics)
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

/// The per-network limiter: `quota` per client network, for up to 100 000 networks. A network
/// that came back within its quota keeps its bucket through any flood of new ones; a new
/// network beyond the capacity is refused (503, with the `Retry-After` of the next free slot).
pub fn limiter(quota: Quota) -> Arc<PerAddress> {
    limiter_with(quota, 100_000, WhenFull::Refuse)
}

/// A per-network limiter of `capacity` networks that treats newcomers without room as
/// `when_full` says.
pub fn limiter_with(quota: Quota, capacity: usize, when_full: WhenFull) -> Arc<PerAddress> {
    Arc::new(KeyedLimiter::new(quota, StdClock, capacity, when_full))
}

/// The per-API-key limiter: [`FREE`] and [`PAID`], for up to 100 000 keys.
pub fn api_limiter() -> Arc<PerApiKey> {
    let limiter = KeyedLimiter::builder(FREE, StdClock)
        .capacity(100_000)
        .tiers([PAID], tier_of)
        .build()
        .expect("both tiers fit the word");
    Arc::new(limiter)
}

/// Serves [`app`] on `listener` until the process ends, with `per_address` for `/` and the
/// two API tiers for `/api`, sweeping full buckets every ten seconds.
pub async fn serve(listener: tokio::net::TcpListener, per_address: Arc<PerAddress>) {
    serve_app(listener, per_address, api_limiter()).await;
}

/// As [`serve`], with the API's limiter given.
pub async fn serve_app(
    listener: tokio::net::TcpListener,
    per_address: Arc<PerAddress>,
    per_api_key: Arc<PerApiKey>,
) {
    let (sweep_addresses, sweep_keys) = (Arc::clone(&per_address), Arc::clone(&per_api_key));
    tokio::spawn(async move {
        let mut every = tokio::time::interval(Duration::from_secs(10));
        loop {
            every.tick().await;
            sweep_addresses.sweep();
            sweep_keys.sweep();
        }
    });
    let service = app(per_address, per_api_key).into_make_service_with_connect_info::<SocketAddr>();
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

//! An axum server behind one reverse proxy of your own (nginx, a load balancer), limited per
//! client IP: ten requests at once, then five a second; the eleventh in a burst gets
//! `429 Too Many Requests` with `Retry-After`, `RateLimit` and `RateLimit-Policy`, from the
//! layer itself.
//!
//! The client is the hop your proxy appended to `X-Forwarded-For` (one trusted hop): nothing a
//! client writes in the header moves it. The proxy's own address comes from axum's
//! `ConnectInfo` (the `axum` feature), so serve with `into_make_service_with_connect_info`; a
//! request without it is answered `500` with the reason, never put in a shared bucket.
//!
//! ```text
//! cargo run -p tollgate-tower --example axum_per_ip --features axum
//! curl -i -H 'x-forwarded-for: 203.0.113.7' http://127.0.0.1:3000/
//! ```

use std::net::SocketAddr;
use std::sync::Arc;

use axum::{routing::get, Router};
use tokio::net::TcpListener;
use tollgate::{KeyedLimiter, Quota, Rate, TokioClock, WhenFull};
use tollgate_tower::{extract::ForwardedIp, AnswerLayer};

/// `/`, limited per client IP (an IPv6 client per /64) for up to 100 000 clients, on tokio's
/// clock (which a test may pause).
pub fn app() -> Router {
    let quota = Quota::new(Rate::per_second(5)).burst(10);
    let clock = TokioClock::new();
    let per_ip = Arc::new(KeyedLimiter::new(quota, clock, 100_000, WhenFull::Refuse));
    let client_ip = ForwardedIp::x_forwarded_for(1); // behind one proxy of our own
    Router::new()
        .route("/", get(|| async { "hello\n" }))
        .layer(AnswerLayer::per_key(per_ip, client_ip))
}

/// Serves [`app`] on `listener`, with each connection's address for the key extractor.
pub async fn serve(listener: TcpListener) -> std::io::Result<()> {
    let app = app().into_make_service_with_connect_info::<SocketAddr>();
    axum::serve(listener, app).await
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    serve(TcpListener::bind("127.0.0.1:3000").await?).await
}

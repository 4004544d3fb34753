//! The layer's own HTTP answers under tokio's paused time: 429 and 503 with their headers and
//! a body for people, tiers per API key each getting exactly their own, a dry run that lets
//! everything through and counts what the enforcing layer refuses. The key extractors are in
//! `forwarded.rs`.

use core::time::Duration;
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use http::{HeaderName, HeaderValue, Request, Response, StatusCode};
use tollgate::{KeyedLimiter, Quota, Rate, Tier, TokenBucket, TokioClock, WhenFull};
use tollgate_tower::extract::HeaderKey;
use tollgate_tower::{AnswerLayer, DryRun, PerKey};
use tower::{service_fn, Layer, Service, ServiceExt};

/// An inner service that counts its calls and answers 200; its error type is its own.
fn counted(
    calls: &Arc<AtomicU64>,
) -> impl Service<Request<String>, Response = Response<String>, Error = Infallible, Future: Send> + Clone
{
    let calls = Arc::clone(calls);
    service_fn(move |_request: Request<String>| {
        calls.fetch_add(1, Ordering::Relaxed);
        async { Ok::<_, Infallible>(Response::new(String::from("ok"))) }
    })
}

fn request_with(name: &str, value: &str) -> Request<String> {
    Request::builder()
        .header(name, value)
        .body(String::new())
        .unwrap()
}

/// `request` through `service` once it is ready. The error type is the inner service's
/// (`Infallible`): an axum `Router` takes the layer as it is.
async fn send<S>(service: &mut S, request: Request<String>) -> Response<String>
where
    S: Service<Request<String>, Response = Response<String>, Error = Infallible>,
{
    let answer: Result<Response<String>, Infallible> =
        service.ready().await.unwrap().call(request).await;
    answer.unwrap()
}

fn header<'a>(response: &'a Response<String>, name: &str) -> &'a str {
    response.headers()[name].to_str().unwrap()
}

#[tokio::test(start_paused = true)]
async fn over_the_limit_the_layer_answers_429_itself_with_headers_and_a_body_for_people() {
    let quota = Quota::new(Rate::per_second(2)).burst(5);
    let bucket = Arc::new(TokenBucket::try_new(quota, TokioClock::new()).unwrap());
    let calls = Arc::new(AtomicU64::new(0));
    let mut service = AnswerLayer::new(bucket).layer(counted(&calls));
    for _ in 0..5 {
        let response = send(&mut service, Request::new(String::new())).await;
        assert_eq!(response.status(), StatusCode::OK);
    }
    tokio::time::advance(Duration::from_millis(100)).await;
    // The error type is the inner service's (`send` takes only `Infallible`).
    let refused = send(&mut service, Request::new(String::new())).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&refused, "retry-after"), "1"); // 400 ms, rounded up
    assert_eq!(header(&refused, "ratelimit"), "\"default\";r=0;t=3"); // full in 2.4 s
    assert_eq!(header(&refused, "ratelimit-policy"), "\"default\";q=5;w=3");
    assert_eq!(
        header(&refused, "content-type"),
        "text/plain; charset=utf-8"
    );
    assert_eq!(refused.body(), "rate limited: retry after 400 ms\n");
    assert_eq!(
        calls.load(Ordering::Relaxed),
        5,
        "a refused request never reaches the service"
    );

    tokio::time::advance(Duration::from_millis(400)).await;
    let response = send(&mut service, Request::new(String::new())).await;
    assert_eq!(
        response.status(),
        StatusCode::OK,
        "waiting as told is enough"
    );
}

#[tokio::test(start_paused = true)]
async fn a_full_keyed_limiter_answers_503_with_when_there_will_be_room() {
    let quota = Quota::new(Rate::new(5, Duration::from_secs(6))).burst(5);
    let limiter = Arc::new(KeyedLimiter::new(
        quota,
        TokioClock::new(),
        1,
        WhenFull::Refuse,
    ));
    let api_key = HeaderKey::new(HeaderName::from_static("x-api-key"));
    let calls = Arc::new(AtomicU64::new(0));
    let mut service = AnswerLayer::per_key(limiter, api_key).layer(counted(&calls));
    let first = send(&mut service, request_with("x-api-key", "a")).await;
    assert_eq!(first.status(), StatusCode::OK);
    tokio::time::advance(Duration::from_millis(200)).await;
    let newcomer = send(&mut service, request_with("x-api-key", "b")).await;
    assert_eq!(newcomer.status(), StatusCode::SERVICE_UNAVAILABLE);
    // Key a's bucket is full again 1.2 s after its grant, and may go a second (the probation
    // window) after that: a slot in two seconds, rounded up.
    assert_eq!(header(&newcomer, "retry-after"), "2");
    assert_eq!(newcomer.body(), "too many clients: retry after 2 s\n");
    assert_eq!(calls.load(Ordering::Relaxed), 1);
}

/// Ten seconds of two API keys asking every millisecond through the layer; the 200s each got.
async fn ten_seconds_of_two_keys(
    service: &mut impl Service<Request<String>, Response = Response<String>, Error = Infallible>,
    keys: [&str; 2],
    at_five_seconds: impl FnOnce(),
) -> [u64; 2] {
    let mut ok = [0; 2];
    let mut at_five_seconds = Some(at_five_seconds);
    for ms in 0..=10_000 {
        if ms == 5_000 {
            at_five_seconds.take().unwrap()();
        }
        for (count, key) in ok.iter_mut().zip(keys) {
            let response = send(service, request_with("x-api-key", key)).await;
            *count += u64::from(response.status() == StatusCode::OK);
        }
        tokio::time::advance(Duration::from_millis(1)).await;
    }
    ok
}

const FREE: Quota = Quota::new(Rate::per_second(5)).burst(10);
const PAID: Quota = Quota::new(Rate::per_second(50)).burst(100);
const STRICT: Quota = Quota::new(Rate::per_second(1)).burst(1);

fn plan(key: &Option<HeaderValue>) -> Tier {
    match key {
        Some(key) if key == "paid-1" => Tier(1),
        _ => Tier(0),
    }
}

#[tokio::test(start_paused = true)]
async fn two_api_keys_on_two_tiers_each_get_exactly_their_own() {
    let limiter = Arc::new(
        KeyedLimiter::builder(FREE, TokioClock::new())
            .capacity(1_000)
            .tiers([PAID, STRICT], plan)
            .build()
            .unwrap(),
    );
    let api_key = HeaderKey::new(HeaderName::from_static("x-api-key"));
    let calls = Arc::new(AtomicU64::new(0));
    let mut service = AnswerLayer::per_key(Arc::clone(&limiter), api_key).layer(counted(&calls));
    let ok = ten_seconds_of_two_keys(&mut service, ["free-1", "paid-1"], || {}).await;
    assert_eq!(ok, [10 + 5 * 10, 100 + 50 * 10], "burst + rate × 10 s each");
    assert_eq!(calls.load(Ordering::Relaxed), ok[0] + ok[1]);

    // Again on fresh keys, and at 5 s the free key turns abusive: moved to the strict tier
    // (1 a second, burst 1), holding what it held (none) capped by the strict burst. The paid
    // key is not touched.
    let for_limiter = Arc::clone(&limiter);
    let ok = ten_seconds_of_two_keys(&mut service, ["free-2", "paid-1x"], move || {
        let abusive = Some(HeaderValue::from_static("free-2"));
        assert_eq!(for_limiter.set_tier(&abusive, Tier(2)), Ok(true));
    })
    .await;
    assert_eq!(
        ok[0],
        10 + 5 * 5 + 5,
        "free for 5 s, then strict: 1 a second from empty"
    );
    assert_eq!(ok[1], 10 + 5 * 10, "an unknown key is on the free tier");
}

#[tokio::test(start_paused = true)]
async fn a_dry_run_lets_everything_through_and_counts_what_the_enforcing_layer_refuses() {
    let quota = Quota::new(Rate::per_second(20)).burst(5);
    let clock = TokioClock::new();
    let key = |request: &Request<String>| request.headers().get("x-client").cloned();
    let enforcing = Arc::new(KeyedLimiter::new(quota, clock, 100, WhenFull::Refuse));
    let shadowed = Arc::new(KeyedLimiter::new(quota, clock, 100, WhenFull::Refuse));
    let logged = Arc::new(AtomicU64::new(0));
    let shadow = {
        let logged = Arc::clone(&logged);
        Arc::new(
            DryRun::new(PerKey::new(shadowed, key)).on_refusal(move |refused| {
                assert_eq!(refused.status(), 429);
                logged.fetch_add(1, Ordering::Relaxed);
            }),
        )
    };
    let (enforced_calls, shadow_calls) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut enforcing = AnswerLayer::per_key(enforcing, key).layer(counted(&enforced_calls));
    let mut dry = AnswerLayer::new(Arc::clone(&shadow)).layer(counted(&shadow_calls));
    let (mut refused, mut sent) = (0, 0);
    let mut dice = 0x2545_f491_4f6c_dd1du64;
    for _ in 0..5_000 {
        dice ^= dice << 13;
        dice ^= dice >> 7;
        dice ^= dice << 17;
        tokio::time::advance(Duration::from_micros(dice % 10_000)).await;
        let client = ["a", "b", "c"][(dice >> 20) as usize % 3];
        let response = send(&mut enforcing, request_with("x-client", client)).await;
        refused += u64::from(response.status() == StatusCode::TOO_MANY_REQUESTS);
        let response = send(&mut dry, request_with("x-client", client)).await;
        assert_eq!(
            response.status(),
            StatusCode::OK,
            "a dry run refuses nothing"
        );
        sent += 1;
    }
    assert!(
        refused > 1_000,
        "the sequence is over the limit: {refused} refused"
    );
    assert_eq!(shadow.would_refuse(), refused);
    assert_eq!(logged.load(Ordering::Relaxed), refused);
    assert_eq!(shadow.checked(), sent);
    assert_eq!(shadow_calls.load(Ordering::Relaxed), sent);
    assert_eq!(enforced_calls.load(Ordering::Relaxed), sent - refused);
}

/// `Retry-After` and `RateLimit` are exact on every tier, and after a key moves between tiers:
/// a client that waits `Retry-After` seconds is served, one that comes back a millisecond
/// before the token's true instant is refused, `t` is the seconds until its bucket is full
/// again (rounded up), and `RateLimit-Policy` names the key's own tier. Rates chosen so that
/// the rounding matters: a token every 3 s, every 400 ms, every 20 ms.
#[tokio::test(start_paused = true)]
async fn retry_after_and_ratelimit_are_exact_on_every_tier_and_after_a_move() {
    const SLOW: Quota = Quota::new(Rate::new(1, Duration::from_secs(3))).burst(2);
    const MID: Quota = Quota::new(Rate::new(5, Duration::from_secs(2))).burst(4);
    const FAST: Quota = Quota::new(Rate::per_second(50)).burst(7);
    fn tier_of(key: &Option<HeaderValue>) -> Tier {
        match key.as_ref().and_then(|k| k.to_str().ok()) {
            Some("mid") => Tier(1),
            Some("fast") => Tier(2),
            _ => Tier(0),
        }
    }
    let limiter = Arc::new(
        KeyedLimiter::builder(SLOW, TokioClock::new())
            .capacity(100)
            .tiers([MID, FAST], tier_of)
            .build()
            .unwrap(),
    );
    let api_key = HeaderKey::new(HeaderName::from_static("x-api-key"));
    let calls = Arc::new(AtomicU64::new(0));
    let mut service = AnswerLayer::per_key(Arc::clone(&limiter), api_key).layer(counted(&calls));
    let ms = Duration::from_millis;

    // (key, its quota, a token's time, the policy header).
    let rows = [
        ("slow", SLOW, ms(3_000), "\"default\";q=2;w=6"),
        ("mid", MID, ms(400), "\"default\";q=4;w=2"),
        ("fast", FAST, ms(20), "\"default\";q=7;w=1"),
    ];
    for (key, quota, token, policy) in rows {
        let burst = quota.burst_size();
        for _ in 0..burst {
            let ok = send(&mut service, request_with("x-api-key", key)).await;
            assert_eq!(ok.status(), StatusCode::OK, "{key}");
        }
        let refused = send(&mut service, request_with("x-api-key", key)).await;
        assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS, "{key}");
        let retry_secs: u64 = header(&refused, "retry-after").parse().unwrap();
        assert_eq!(
            retry_secs,
            token.as_millis().div_ceil(1_000) as u64,
            "{key}"
        );
        let full_secs = (token * burst as u32).as_millis().div_ceil(1_000);
        assert_eq!(
            header(&refused, "ratelimit"),
            format!("\"default\";r=0;t={full_secs}"),
            "{key}"
        );
        assert_eq!(header(&refused, "ratelimit-policy"), policy, "{key}");
        // A millisecond before the token's instant: still refused; at it: served.
        tokio::time::advance(token - ms(1)).await;
        let early = send(&mut service, request_with("x-api-key", key)).await;
        assert_eq!(early.status(), StatusCode::TOO_MANY_REQUESTS, "{key}");
        tokio::time::advance(ms(1)).await;
        let on_time = send(&mut service, request_with("x-api-key", key)).await;
        assert_eq!(on_time.status(), StatusCode::OK, "{key}");
        // Waiting what Retry-After said from a refusal is never early.
        let refused = send(&mut service, request_with("x-api-key", key)).await;
        let retry = Duration::from_secs(header(&refused, "retry-after").parse().unwrap());
        tokio::time::advance(retry).await;
        let after = send(&mut service, request_with("x-api-key", key)).await;
        assert_eq!(after.status(), StatusCode::OK, "{key} after Retry-After");
    }

    // The fast key drained, then moved to the slow tier: its refusal speaks of the slow tier,
    // from the tokens it held (none), at the slow rate.
    let fast = Some(HeaderValue::from_static("fast"));
    while send(&mut service, request_with("x-api-key", "fast"))
        .await
        .status()
        == StatusCode::OK
    {}
    assert_eq!(limiter.set_tier(&fast, Tier(0)), Ok(true));
    let refused = send(&mut service, request_with("x-api-key", "fast")).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&refused, "ratelimit-policy"), "\"default\";q=2;w=6");
    let retry_secs: u64 = header(&refused, "retry-after").parse().unwrap();
    assert!((1..=3).contains(&retry_secs), "{retry_secs}");
    tokio::time::advance(Duration::from_secs(retry_secs)).await;
    let after = send(&mut service, request_with("x-api-key", "fast")).await;
    assert_eq!(
        after.status(),
        StatusCode::OK,
        "after the slow tier's Retry-After"
    );
}

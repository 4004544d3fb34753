//! tower middleware under tokio's paused time: clones share one limit, refusals carry the
//! right `Retry-After`, and backpressure paces callers in order.

use core::time::Duration;
use std::convert::Infallible;
use std::sync::Arc;

use tokio::time::Instant;
use tollgate::{Denied, KeyedDenied, KeyedLimiter, Quota, Rate, TokenBucket, TokioClock, WhenFull};
use tollgate_tower::{BackpressureLayer, BoxError, RateLimited, RejectLayer};
use tower::{service_fn, Layer, Service, ServiceExt};

fn echo() -> impl Service<u32, Response = u32, Error = Infallible, Future: Send> + Clone {
    service_fn(|request: u32| async move { Ok::<_, Infallible>(request) })
}

fn refusal(error: BoxError) -> RateLimited {
    *error
        .downcast::<RateLimited>()
        .expect("the error is a refusal")
}

#[tokio::test(start_paused = true)]
async fn clones_of_the_rejecting_service_share_one_bucket() {
    let clock = TokioClock::new();
    let quota = Quota::new(Rate::per_second(2)).burst(3);
    let layer = RejectLayer::new(Arc::new(TokenBucket::try_new(quota, clock).unwrap()));
    let first = layer.layer(echo());
    let second = layer.clone().layer(echo());
    let third = first.clone();

    // (ms since start, which service, granted)
    let rows = [
        (0, &first, true),
        (0, &second, true),
        (0, &third, true),
        (0, &second, false), // the burst of three is spent, whichever clone asks
        (400, &first, false),
        (500, &third, true),
        (500, &second, false),
        (1_000, &second, true),
    ];
    let start = Instant::now();
    for (i, (ms, service, granted)) in rows.into_iter().enumerate() {
        tokio::time::sleep_until(start + Duration::from_millis(ms)).await;
        let result = service.clone().oneshot(7).await;
        assert_eq!(result.is_ok(), granted, "row {i}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_refusal_says_when_to_retry_in_its_headers() {
    let clock = TokioClock::new();
    let quota = Quota::new(Rate::per_second(2)).burst(5);
    let bucket = Arc::new(TokenBucket::try_new(quota, clock).unwrap());
    let service = RejectLayer::new(Arc::clone(&bucket)).layer(echo());
    for _ in 0..5 {
        service.clone().oneshot(1).await.unwrap();
    }
    tokio::time::advance(Duration::from_millis(100)).await;
    let refused = refusal(service.clone().oneshot(1).await.unwrap_err());
    assert_eq!(refused.status(), 429);
    assert_eq!(refused.retry_after(), Some(Duration::from_millis(400)));
    let headers = refused.headers();
    let pairs: Vec<_> = headers.pairs().collect();
    assert_eq!(
        pairs,
        [
            ("retry-after", "1"),
            ("ratelimit", "\"default\";r=0;t=3"),
            ("ratelimit-policy", "\"default\";q=5;w=3"),
        ]
    );
    // Retrying when told to succeeds.
    tokio::time::advance(Duration::from_millis(400)).await;
    assert_eq!(service.clone().oneshot(1).await.unwrap(), 1);

    // Longer waits round up to whole seconds: 1 per 10 s, just spent.
    let slow =
        Arc::new(TokenBucket::try_new(Quota::new(Rate::per_minute(6)).burst(1), clock).unwrap());
    let service = RejectLayer::new(slow).layer(echo());
    service.clone().oneshot(1).await.unwrap();
    tokio::time::advance(Duration::from_millis(2_500)).await;
    let refused = refusal(service.oneshot(1).await.unwrap_err());
    assert_eq!(refused.retry_after(), Some(Duration::from_millis(7_500)));
    assert_eq!(refused.headers().retry_after.as_deref(), Some("8"));
    assert_eq!(refused.headers().rate_limit_policy, "\"default\";q=1;w=10");
}

#[tokio::test(start_paused = true)]
async fn per_key_rejection_limits_each_key_alone() {
    let clock = TokioClock::new();
    let quota = Quota::new(Rate::per_second(1)).burst(2);
    let limiter = Arc::new(KeyedLimiter::try_new(quota, clock, 1_000, WhenFull::Refuse).unwrap());
    // Requests are (client, payload); the key is the client.
    let inner =
        service_fn(|(_, payload): (&'static str, u32)| async move { Ok::<_, Infallible>(payload) });
    let service = RejectLayer::per_key(Arc::clone(&limiter), |request: &(&'static str, u32)| {
        request.0
    })
    .layer(inner);

    for _ in 0..2 {
        service.clone().oneshot(("alice", 1)).await.unwrap();
    }
    let refused = refusal(service.clone().oneshot(("alice", 1)).await.unwrap_err());
    assert_eq!(refused.retry_after(), Some(Duration::from_secs(1)));
    assert_eq!(refused.headers().rate_limit, "\"default\";r=0;t=2");
    // Bob is not held back by Alice.
    for _ in 0..2 {
        service.clone().oneshot(("bob", 1)).await.unwrap();
    }
    assert_eq!(limiter.len(), 2);
    tokio::time::advance(Duration::from_secs(1)).await;
    service.clone().oneshot(("alice", 1)).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_full_keyed_limiter_refuses_with_503_and_says_when_there_will_be_room() {
    let clock = TokioClock::new();
    // One token every 4 s: key 1's bucket is full 4 s after its request, and may be evicted a
    // second (the probation window) after that.
    let quota = Quota::new(Rate::new(1, Duration::from_secs(4))).burst(1);
    let limiter = Arc::new(
        KeyedLimiter::builder(quota, clock)
            .capacity(1)
            .when_full(WhenFull::Refuse)
            .shards(1)
            .build()
            .unwrap(),
    );
    let service = RejectLayer::per_key(limiter, |request: &u32| *request).layer(echo());
    service.clone().oneshot(1).await.unwrap();
    tokio::time::advance(Duration::from_millis(1_500)).await;
    let refused = refusal(service.clone().oneshot(2).await.unwrap_err());
    assert_eq!(refused.denial(), Some(KeyedDenied::Full { capacity: 1 }));
    assert_eq!(refused.status(), 503);
    assert_eq!(refused.retry_after(), Some(Duration::from_millis(3_500)));
    let headers = refused.headers();
    assert_eq!(headers.retry_after.as_deref(), Some("4"));
    assert_eq!(headers.rate_limit, "\"default\";r=0;t=4");
    // Waiting as long as told is enough.
    tokio::time::advance(Duration::from_secs(4)).await;
    service.oneshot(2).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn backpressure_paces_every_clone_on_one_bucket() {
    let clock = TokioClock::new();
    let quota = Quota::new(Rate::per_second(2)).burst(1);
    let layer = BackpressureLayer::new(Arc::new(TokenBucket::try_new(quota, clock).unwrap()));
    let start = Instant::now();
    // Two clients of four calls each, through clones of one service, at the same time.
    let service = layer.layer(echo());
    let clients: Vec<_> = (0..2)
        .map(|_| {
            let mut service = service.clone();
            tokio::spawn(async move {
                let mut served_at = Vec::new();
                for i in 0..4 {
                    service.ready().await.unwrap();
                    service.call(i).await.unwrap();
                    served_at.push(start.elapsed());
                }
                served_at
            })
        })
        .collect();
    let mut served: Vec<Duration> = Vec::new();
    for client in clients {
        served.extend(client.await.unwrap());
    }
    served.sort();
    // One at once, then one every 500 ms, whichever client.
    let expected: Vec<_> = (0..8).map(|i| Duration::from_millis(500 * i)).collect();
    assert_eq!(served, expected);
}

#[tokio::test(start_paused = true)]
async fn a_service_dropped_while_waiting_gives_its_turn_back() {
    let clock = TokioClock::new();
    let quota = Quota::new(Rate::per_second(1)).burst(1).start_empty();
    let layer = BackpressureLayer::new(Arc::new(TokenBucket::try_new(quota, clock).unwrap()));
    let start = Instant::now();
    let mut first = layer.layer(echo());
    let mut second = first.clone();
    // The first reserves the token due at 1 s, then gives up after 100 ms.
    let gave_up = tokio::time::timeout(Duration::from_millis(100), first.ready()).await;
    assert!(gave_up.is_err());
    drop(first);
    // The second gets that token at 1 s, not the next one at 2 s.
    second.ready().await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_secs(1));
    assert_eq!(second.call(5).await.unwrap(), 5);
}

#[tokio::test(start_paused = true)]
async fn backpressure_with_a_bound_refuses_waits_beyond_it() {
    let clock = TokioClock::new();
    let quota = Quota::new(Rate::per_second(1)).burst(1).start_empty();
    let bucket = Arc::new(TokenBucket::try_new(quota, clock).unwrap());
    let layer = BackpressureLayer::new(bucket).max_wait(Duration::from_millis(500));
    let mut service = layer.layer(echo());
    let refused = refusal(
        service
            .ready()
            .await
            .err()
            .expect("a wait of 1 s is refused"),
    );
    assert_eq!(
        refused.denial(),
        Some(KeyedDenied::Denied(Denied::insufficient(
            Duration::from_millis(500)
        )))
    );
    // Calling without readiness passes nothing on.
    let error = service.call(1).await.unwrap_err();
    assert!(error.is::<tollgate_tower::NotReady>());
}

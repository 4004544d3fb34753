//! Backpressure with a jitter: services due at the same instant are ready at spread instants,
//! one served at once is not delayed, and one dropped during its jitter gives its token back
//! (tokio's paused time).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::{timeout, Instant};
use tollgate::{Jitter, Quota, Rate, TokenBucket, TokioClock};
use tollgate_tower::BackpressureLayer;
use tower::{service_fn, Layer, Service, ServiceExt};

fn ms(millis: u64) -> Duration {
    Duration::from_millis(millis)
}

fn empty_bucket() -> Arc<TokenBucket<TokioClock>> {
    let quota = Quota::new(Rate::per_second(1)).burst(1).start_empty();
    Arc::new(TokenBucket::try_new(quota, TokioClock::new()).unwrap())
}

#[tokio::test(start_paused = true)]
async fn services_on_buckets_in_lockstep_are_ready_at_spread_instants() {
    // Six layers, each on its own bucket, all due at 1 s; one jitter of up to 300 ms for all
    // (one `Jitter` per layer here, with seeds 0..6, as six processes would have).
    let start = Instant::now();
    let echo = service_fn(|request: u32| async move { Ok::<_, Infallible>(request) });
    let ready_at = |seed: Option<u64>| {
        let layer = BackpressureLayer::new(empty_bucket());
        let layer = match seed {
            Some(seed) => layer.jitter(Jitter::up_to(ms(300), seed)),
            None => layer,
        };
        async move {
            let mut service = layer.layer(echo);
            service.ready().await.unwrap();
            start.elapsed()
        }
    };
    let mut plain = Vec::new();
    for _ in 0..6 {
        plain.push(tokio::spawn(ready_at(None)));
    }
    let mut spread = Vec::new();
    for seed in 0..6 {
        spread.push(tokio::spawn(ready_at(Some(seed))));
    }
    let mut lockstep = Vec::new();
    for task in plain {
        lockstep.push(task.await.unwrap());
    }
    assert!(lockstep.iter().all(|&at| at == ms(1_000)), "{lockstep:?}");
    let mut at = Vec::new();
    for (seed, task) in spread.into_iter().enumerate() {
        let ready = task.await.unwrap();
        let draw = Jitter::up_to(ms(300), seed as u64).next();
        assert!(
            ready.abs_diff(ms(1_000) + draw) <= ms(1),
            "{ready:?} vs {draw:?}"
        );
        at.push(ready);
    }
    at.sort();
    at.dedup();
    assert_eq!(at.len(), 6, "{at:?}");
}

#[tokio::test(start_paused = true)]
async fn a_service_dropped_during_its_jitter_gives_its_token_back() {
    let draw = Jitter::up_to(Duration::from_secs(10), 3).next();
    assert!(
        draw > ms(1_000),
        "the test needs a draw over a second: {draw:?}"
    );
    let bucket = empty_bucket();
    let layer =
        BackpressureLayer::new(bucket.clone()).jitter(Jitter::up_to(Duration::from_secs(10), 3));
    let echo = service_fn(|request: u32| async move { Ok::<_, Infallible>(request) });
    let mut service = layer.layer(echo);
    // Due at 1 s, then the draw: given up at 1.5 s, holding the token.
    assert!(timeout(ms(1_500), service.ready()).await.is_err());
    assert_eq!(bucket.available(), 0);
    drop(service);
    // Back: the bucket is full, as if the service had never waited.
    assert_eq!(bucket.available(), 1);

    // Served at once: not delayed.
    let start = Instant::now();
    let mut service = layer.layer(echo);
    assert_eq!(service.ready().await.unwrap().call(7).await.unwrap(), 7);
    assert_eq!(start.elapsed(), Duration::ZERO);
}

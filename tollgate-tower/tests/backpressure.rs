//! Giving up costs nothing behind tower's backpressure: a service dropped between `poll_ready`
//! and `call` gives its token back, a service that is not ready holds none, and callers that
//! time out of `ready()` leave the rate whole (tokio's paused time, and real time measured with
//! margins for a loaded two-core machine).

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::task::JoinSet;
use tokio::time::{sleep, sleep_until, timeout, Instant};
use tollgate::{Quota, Rate, TokenBucket, TokioClock};
use tollgate_tower::BackpressureLayer;
use tower::{service_fn, Layer, Service, ServiceExt};

type Bucket = Arc<TokenBucket<TokioClock>>;

fn bucket(quota: Quota) -> Bucket {
    Arc::new(TokenBucket::try_new(quota, TokioClock::new()).expect("valid quota"))
}

fn ms(millis: u64) -> Duration {
    Duration::from_millis(millis)
}

/// Runs `test` in real time on a multi-threaded tokio runtime with two workers.
fn on_two_workers(test: impl Future<Output = ()>) {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap()
        .block_on(test);
}

fn per_second(served: &[Duration], seconds: usize) -> Vec<u64> {
    let mut counts = vec![0; seconds];
    for at in served {
        if let Some(count) = counts.get_mut(at.as_secs() as usize) {
            *count += 1;
        }
    }
    counts
}

/// A service whose readiness the test controls.
#[derive(Clone)]
struct Gate(Arc<Mutex<Poll<Result<(), &'static str>>>>);

impl Service<u32> for Gate {
    type Response = u32;
    type Error = &'static str;
    type Future = std::future::Ready<Result<u32, &'static str>>;
    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        *self.0.lock().unwrap()
    }
    fn call(&mut self, request: u32) -> Self::Future {
        std::future::ready(Ok(request))
    }
}

struct Noop;

impl std::task::Wake for Noop {
    fn wake(self: Arc<Self>) {}
}

fn poll_once<F: Future + Unpin>(future: &mut F) -> Poll<F::Output> {
    let waker = std::task::Waker::from(Arc::new(Noop));
    Pin::new(future).poll(&mut Context::from_waker(&waker))
}

/// The report's case: 1/s, burst 1, a service ready and then dropped before `call` (as tower's
/// balancers do): the next service is ready at once, not after 1 s.
#[tokio::test(start_paused = true)]
async fn a_service_dropped_between_ready_and_call_gives_its_token_back() {
    let start = Instant::now();
    let bucket = bucket(Quota::new(Rate::per_second(1)).burst(1));
    let layer = BackpressureLayer::new(bucket.clone());
    let echo = service_fn(|request: u32| async move { Ok::<_, Infallible>(request) });
    let mut first = layer.layer(echo);
    first.ready().await.unwrap();
    assert_eq!(bucket.available(), 0);
    drop(first);
    assert_eq!(bucket.available(), 1);
    let mut second = layer.layer(echo);
    assert_eq!(second.ready().await.unwrap().call(7).await.unwrap(), 7);
    assert_eq!(start.elapsed(), Duration::ZERO);
    assert_eq!(bucket.available(), 0); // spent by the call
}

/// The same, in real time: the next service is ready at once, not after a second.
#[test]
fn a_service_dropped_between_ready_and_call_gives_its_token_back_in_on_two_workers() {
    on_two_workers(async {
        let bucket = bucket(Quota::new(Rate::per_second(1)).burst(1));
        let layer = BackpressureLayer::new(bucket.clone());
        let echo = service_fn(|request: u32| async move { Ok::<_, Infallible>(request) });
        let mut first = layer.layer(echo);
        first.ready().await.unwrap();
        drop(first);
        let start = Instant::now();
        let mut second = layer.layer(echo);
        assert_eq!(second.ready().await.unwrap().call(7).await.unwrap(), 7);
        // A token lost with the first service would cost a second here.
        assert!(start.elapsed() < ms(300), "{:?}", start.elapsed());
    });
}

#[tokio::test(start_paused = true)]
async fn backpressure_holds_no_token_while_the_inner_service_is_not_ready_or_fails() {
    let bucket = bucket(Quota::new(Rate::per_second(1)).burst(1));
    let gate = Arc::new(Mutex::new(Poll::Pending));
    let mut service = BackpressureLayer::new(bucket.clone()).layer(Gate(gate.clone()));
    let mut ready = service.ready();
    assert!(poll_once(&mut ready).is_pending());
    assert_eq!(bucket.available(), 1, "not ready: no token taken");
    *gate.lock().unwrap() = Poll::Ready(Err("down"));
    let failed = poll_once(&mut ready);
    assert!(matches!(failed, Poll::Ready(Err(_))));
    assert_eq!(bucket.available(), 1, "failed: no token taken");
    *gate.lock().unwrap() = Poll::Ready(Ok(()));
    service.ready().await.unwrap();
    assert_eq!(
        bucket.available(),
        0,
        "ready: the token is taken for the call"
    );
    assert_eq!(service.call(3).await.unwrap(), 3);
}

/// The report's callers time out of `ready()` at 100/s overload; afterwards an idle service's
/// `poll_ready` waited 4.9 s. Here the rate holds and an idle service is ready at once.
#[tokio::test(start_paused = true)]
async fn backpressure_with_callers_that_time_out_keeps_the_rate() {
    let start = Instant::now();
    let bucket = bucket(Quota::new(Rate::per_second(50)).burst(1));
    let layer = BackpressureLayer::new(bucket.clone());
    let echo = service_fn(|request: u32| async move { Ok::<_, Infallible>(request) });
    let served = Arc::new(Mutex::new(Vec::new()));
    let mut callers = JoinSet::new();
    for k in 0..500u32 {
        sleep_until(start + ms(10) * k).await;
        let (mut service, served) = (layer.layer(echo), served.clone());
        callers.spawn(async move {
            if let Ok(ready) = timeout(ms(30), service.ready()).await {
                ready.unwrap().call(k).await.unwrap();
                served.lock().unwrap().push(start.elapsed());
            }
        });
    }
    callers.join_all().await;
    let served = served.lock().unwrap().clone();
    // 100 callers a second against 50: every token is used.
    let counts = per_second(&served, 5);
    assert!(
        counts.iter().all(|&n| (48..=51).contains(&n)),
        "calls per second: {counts:?}"
    );
    sleep(ms(20)).await;
    let idle = Instant::now();
    let mut service = layer.layer(echo);
    service.ready().await.unwrap();
    assert_eq!(idle.elapsed(), Duration::ZERO);
}

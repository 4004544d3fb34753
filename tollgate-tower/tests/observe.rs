//! Counted limits: every call counted once, as granted (and whether it waited) or denied, under
//! threads, waits given up, and the tower layer; the metrics facade sees the same counts.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::timeout;
use tollgate::observe::{Counted, Counters, Counts, Metrics};
use tollgate::{KeyedLimiter, ManualClock, Quota, Rate, TokenBucket, TokioClock, WhenFull};
use tollgate_tower::{Limit, RejectLayer};
use tower::{service_fn, ServiceExt};

#[test]
fn threads_racing_for_a_burst_are_counted_exactly() {
    // The clock stands still: 1 000 tokens, 8 threads asking for 2 000 between them.
    let clock = ManualClock::new();
    let bucket = TokenBucket::try_new(Quota::new(Rate::per_second(1)).burst(1_000), &clock);
    let counters = Counters::new();
    let gate = Counted::new(bucket.unwrap(), &counters);
    let granted: usize = std::thread::scope(|s| {
        let threads: Vec<_> = (0..8)
            .map(|_| s.spawn(|| (0..250).filter(|_| gate.try_acquire(1).is_ok()).count()))
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).sum()
    });
    assert_eq!(granted, 1_000);
    let counts = counters.counts();
    assert_eq!(
        (counts.granted_calls, counts.granted_tokens),
        (1_000, 1_000)
    );
    assert_eq!((counts.denied_calls, counts.denied_tokens), (1_000, 1_000));
    assert_eq!(counts.waited_calls, 0);
}

#[tokio::test(start_paused = true)]
async fn waits_count_when_served_or_refused_and_a_wait_given_up_counts_nothing() {
    let quota = Quota::new(Rate::per_second(10)).burst(10).start_empty();
    let counters = Arc::new(Counters::new());
    let bucket = TokenBucket::try_new(quota, TokioClock::new()).unwrap();
    let gate = Arc::new(Counted::new(bucket, Arc::clone(&counters)));

    // Given up after 100 ms of a 500 ms wait: nothing counted, nobody left waiting.
    assert!(timeout(Duration::from_millis(100), gate.acquire(5))
        .await
        .is_err());
    assert_eq!(counters.counts(), Counts::default());

    // While one waits, the count says so.
    let waiting = tokio::spawn({
        let gate = Arc::clone(&gate);
        async move { gate.acquire(5).await }
    });
    tokio::task::yield_now().await;
    assert_eq!(counters.counts().waiting, 1);
    assert_eq!(waiting.await.unwrap(), Ok(Duration::from_millis(400)));

    // Refused: beyond the burst, and out of time.
    assert!(gate.acquire(11).await.is_err());
    assert!(gate
        .acquire_timeout(3, Duration::from_millis(100))
        .await
        .is_err());
    // Served at once after a second's idle.
    tokio::time::advance(Duration::from_secs(1)).await;
    assert_eq!(gate.acquire(4).await, Ok(Duration::ZERO));
    assert_eq!(
        counters.counts(),
        Counts {
            granted_calls: 2,
            granted_tokens: 9,
            denied_calls: 2,
            denied_tokens: 14,
            waited_calls: 1,
            waited_tokens: 5,
            waiting: 0,
        }
    );
}

#[test]
fn blocking_waits_are_counted() {
    // A token every 100 ms: the first acquire waits, and the second finds none, even on a
    // machine busy enough to delay this thread by a millisecond or more between the calls.
    let quota = Quota::new(Rate::per_second(10)).burst(1).start_empty();
    let counters = Counters::new();
    let gate = Counted::new(
        TokenBucket::try_new(quota, tollgate::StdClock).unwrap(),
        &counters,
    );
    let waited = gate.acquire_blocking(1).unwrap();
    assert!(waited > Duration::ZERO);
    assert!(gate.acquire_blocking_timeout(1, Duration::ZERO).is_err());
    let counts = counters.counts();
    assert_eq!((counts.granted_calls, counts.waited_calls), (1, 1));
    assert_eq!((counts.denied_calls, counts.waiting), (1, 0));
}

#[test]
fn a_keyed_limiter_is_counted_whole_and_a_newcomer_without_room_is_a_denial() {
    let clock = ManualClock::new();
    let quota = Quota::new(Rate::per_second(1)).burst(2);
    let limiter = KeyedLimiter::try_new(quota, &clock, 2, WhenFull::Refuse).unwrap();
    let counters = Counters::new();
    let gate = Counted::new(limiter, &counters);
    // (key, granted?)
    let rows = [(1, true), (1, true), (1, false), (2, true), (3, false)];
    for (key, granted) in rows {
        assert_eq!(gate.try_acquire(&key, 1).is_ok(), granted, "key {key}");
    }
    let counts = counters.counts();
    assert_eq!((counts.granted_calls, counts.denied_calls), (3, 2));
}

#[tokio::test]
async fn the_tower_layer_counts_what_it_lets_through_and_what_it_refuses() {
    let clock = ManualClock::new();
    let bucket = TokenBucket::try_new(Quota::new(Rate::per_second(1)).burst(3), clock).unwrap();
    let counters = Arc::new(Counters::new());
    let limit = Arc::new(Counted::new(bucket, Arc::clone(&counters)));
    let layer = RejectLayer::new(Arc::clone(&limit));
    let service = tower::ServiceBuilder::new()
        .layer(layer)
        .service(service_fn(|_: ()| async {
            Ok::<_, std::convert::Infallible>(())
        }));
    let mut answers = Vec::new();
    for _ in 0..5 {
        answers.push(service.clone().oneshot(()).await.is_ok());
    }
    assert_eq!(answers, [true, true, true, false, false]);
    let counts = counters.counts();
    assert_eq!((counts.granted_calls, counts.denied_calls), (3, 2));
    // The same limit, checked directly, counts the same way.
    assert!(Limit::<()>::check(&*limit, &()).is_err());
    assert_eq!(counters.counts().denied_calls, 3);
}

#[test]
fn the_metrics_facade_sees_the_same_counts() {
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let page = recorder.handle();
    let observer = metrics::with_local_recorder(&recorder, || Metrics::new("uploads"));
    let clock = ManualClock::new();
    let bucket = TokenBucket::try_new(Quota::new(Rate::per_second(1)).burst(5), &clock).unwrap();
    let gate = Counted::new(bucket, observer);
    for n in [2, 2, 2, 9] {
        let _ = gate.try_acquire(n);
    }
    // One token left: a reservation of two waits a second for the other.
    assert!(gate.reserve(2, Duration::from_secs(1)).is_ok());
    let page = page.render();
    // (metric, value)
    let rows = [
        ("tollgate_granted_total", 3),
        ("tollgate_granted_tokens_total", 6),
        ("tollgate_denied_total", 2),
        ("tollgate_denied_tokens_total", 11),
        ("tollgate_waited_total", 1),
        ("tollgate_waited_tokens_total", 2),
        ("tollgate_wait_seconds_count", 1),
    ];
    for (metric, value) in rows {
        let line = format!("{metric}{{limiter=\"uploads\"}} {value}\n");
        assert!(page.contains(&line), "no {line:?} in:\n{page}");
    }
}

#[test]
fn the_metrics_facade_tells_an_unlimited_quota_from_a_limited_one() {
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let page = recorder.handle();
    metrics::with_local_recorder(&recorder, || {
        let _off = Metrics::new("exports").with_quota(&Quota::unlimited());
        let _on = Metrics::new("uploads").with_quota(&Quota::new(Rate::per_minute(90)).burst(5));
    });
    let page = page.render();
    for line in [
        "tollgate_quota_tokens_per_second{limiter=\"exports\"} inf\n",
        "tollgate_quota_burst{limiter=\"exports\"} inf\n",
        "tollgate_quota_tokens_per_second{limiter=\"uploads\"} 1.5\n",
        "tollgate_quota_burst{limiter=\"uploads\"} 5\n",
    ] {
        assert!(page.contains(line), "no {line:?} in:\n{page}");
    }
}

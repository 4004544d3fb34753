//! Every duration a user may pass means what it says: `Duration::MAX` is no timeout (a healthy
//! server answers), zero and sub-microsecond timeouts wait for nothing (the policy decides, and
//! the call takes nothing), and a lease's lifetime or a reservation's wait of `Duration::MAX`
//! are the longest, not negative.

use std::time::Duration;

use tollgate::{Quota, Rate};
use tollgate_redis::{Error, FaultPolicy, LeasedBucket, RedisBucket, RedisKeyed, Source};

use crate::connect;
use crate::support::{runtime, serial, RedisServer};

fn quota() -> Quota {
    Quota::new(Rate::per_second(10)).burst(5)
}

/// `(timeout, expected)`: whether a call against a healthy server is answered by Redis.
const TIMEOUTS: [(Duration, bool); 6] = [
    (Duration::MAX, true),
    (Duration::from_secs(u64::MAX / 2), true),
    (Duration::from_secs(3600), true),
    (Duration::ZERO, false),
    (Duration::from_nanos(1), false),
    (Duration::from_nanos(999), false),
];

/// A bucket and a per-key limiter with each timeout: the long ones grant from Redis, the ones
/// shorter than a round trip are faults under `FailClosed` that took nothing from the key (its
/// level read afterwards with a sane timeout is still full).
#[test]
fn every_timeout_means_what_it_says() {
    let _serial = serial();
    let server = RedisServer::start();
    runtime().block_on(async {
        let redis = connect(&server).await;
        for (n, (timeout, answered)) in TIMEOUTS.into_iter().enumerate() {
            let key = format!("timeout-{n}");
            let bucket = RedisBucket::builder(&redis, key.clone(), quota())
                .timeout(timeout)
                .connect_lazy()
                .unwrap();
            let probe = RedisBucket::builder(&redis, key.clone(), quota())
                .connect_lazy()
                .unwrap();
            let result = bucket.try_acquire(1).await;
            let left = probe.level().await.unwrap().remaining;
            if answered {
                let grant = result.unwrap_or_else(|e| panic!("{timeout:?}: {e}"));
                assert_eq!(grant.source, Source::Redis, "{timeout:?}");
                assert_eq!(left, 4, "{timeout:?}");
            } else {
                assert!(
                    matches!(result, Err(Error::Unavailable(_))),
                    "{timeout:?}: {result:?}"
                );
                // Whatever reached Redis ran past its deadline and took nothing.
                tokio::time::sleep(Duration::from_millis(50)).await;
                let left = probe.level().await.unwrap().remaining;
                assert_eq!(left, 5, "{timeout:?} took a token");
            }
            // The same under the other policies: open grants, the fallback decides locally.
            let open = RedisBucket::builder(&redis, format!("{key}-open"), quota())
                .timeout(timeout)
                .policy(FaultPolicy::FailOpen)
                .connect_lazy()
                .unwrap();
            let source = open.try_acquire(1).await.unwrap().source;
            let expected = if answered {
                Source::Redis
            } else {
                Source::Open
            };
            assert_eq!(source, expected, "{timeout:?}");

            let keyed = RedisKeyed::new(&redis, format!("{key}:"), quota())
                .unwrap()
                .timeout(timeout);
            let result = keyed.try_acquire("k", 1).await;
            assert_eq!(result.is_ok(), answered, "keyed {timeout:?}: {result:?}");
            if !answered {
                assert!(matches!(result, Err(Error::Unavailable(_))), "{result:?}");
            }
        }
        // A reservation's longest wait and a lease's longest lifetime are the longest.
        let bucket = RedisBucket::builder(&redis, "max-wait", quota())
            .timeout(Duration::MAX)
            .connect_lazy()
            .unwrap();
        let reservation = bucket.reserve(5, Duration::MAX).await.unwrap();
        assert_eq!(reservation.wait(), Duration::ZERO);
        let queued = bucket.reserve(5, Duration::MAX).await.unwrap();
        assert!(queued.wait() > Duration::from_millis(400), "{queued:?}");
        let leased = LeasedBucket::new(
            RedisBucket::builder(&redis, "max-lease", quota())
                .timeout(Duration::MAX)
                .connect_lazy()
                .unwrap(),
            Duration::MAX,
        );
        assert_eq!(leased.try_acquire(1).await.unwrap(), Source::Redis);
        assert!(bucket.acquire_timeout(1, Duration::MAX).await.is_ok());
    });
}

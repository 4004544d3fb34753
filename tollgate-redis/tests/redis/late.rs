//! Answers slower than the timeout: a call reported failed (or granted by the policy) keeps
//! nothing in Redis once its late answer has come back, under every policy.

use std::time::Duration;

use tollgate::{Quota, Rate};
use tollgate_redis::{
    Client, Error, FaultPolicy, RedisBucket, RedisConnection, RedisKeyed, Source,
};

use crate::connect;
use crate::support::{runtime, serial, DelayProxy, RedisServer};

const KEYS: usize = 100;
const TIMEOUT: Duration = Duration::from_millis(200);
const SLOW: Duration = Duration::from_millis(300);

/// One token a minute: nothing refills within the test, so a token taken shows.
fn one_token() -> Quota {
    Quota::new(Rate::per_minute(1)).burst(1)
}

fn ten_tokens() -> Quota {
    Quota::new(Rate::per_minute(1)).burst(10)
}

/// The return path turns slow (300 ms, past the 200 ms timeout) under a pipeline of 100
/// one-token keys, failing closed and failing open, and under ten calls in turn on a shared
/// bucket of ten tokens for each of the three policies. Once the late answers are in: no key reported
/// failed (or granted open) has lost its token; under the fallback, the shared bucket is
/// charged once for what the fallback granted, not twice.
#[test]
fn calls_reported_failed_keep_nothing() {
    let _serial = serial();
    let server = RedisServer::start();
    runtime().block_on(async {
        let proxy = DelayProxy::start(server.port, Duration::ZERO).await;
        let slow = RedisConnection::connect(Client::open(proxy.url()).unwrap())
            .await
            .unwrap();
        let direct = connect(&server).await;
        let names: Vec<String> = (0..KEYS).map(|n| format!("k{n}")).collect();
        let requests: Vec<(&str, u32)> = names.iter().map(|name| (name.as_str(), 1)).collect();
        let peeks: Vec<(&str, u32)> = names.iter().map(|name| (name.as_str(), 0)).collect();
        let mut failures = Vec::new();
        for (prefix, open) in [("late-closed:", false), ("late-open:", true)] {
            let mut keyed = RedisKeyed::new(&slow, prefix, one_token())
                .unwrap()
                .timeout(TIMEOUT);
            if open {
                keyed = keyed.fail_open();
            }
            // A prompt call first: Redis's clock as this client sees it.
            keyed.try_acquire("warm", 0).await.unwrap();
            proxy.set_delay(SLOW);
            let answers = keyed.try_acquire_many(&requests).await;
            proxy.set_delay(Duration::ZERO);
            let reported_failed = answers
                .iter()
                .filter(|answer| match answer {
                    Err(Error::Unavailable(_)) => true,
                    Ok(grant) => grant.source == Source::Open,
                    _ => false,
                })
                .count();
            // The late answers arrive, and whatever follows them.
            tokio::time::sleep(SLOW * 3).await;
            let levels = RedisKeyed::new(&direct, prefix, one_token())
                .unwrap()
                .try_acquire_many(&peeks)
                .await;
            let charged = levels
                .iter()
                .filter(|level| level.as_ref().unwrap().level.unwrap().remaining == 0)
                .count();
            println!(
                "RedisKeyed {}: {reported_failed} of {KEYS} calls reported failed or granted \
                 open, {charged} keys charged",
                if open { "fail_open" } else { "failing closed" }
            );
            assert_eq!(reported_failed, KEYS, "{answers:?}");
            if charged > 0 {
                failures.push(format!("{prefix} {charged} keys charged"));
            }
        }
        let policies = [
            ("closed", FaultPolicy::FailClosed),
            ("open", FaultPolicy::FailOpen),
            (
                "fallback",
                FaultPolicy::Fallback(Quota::new(Rate::per_second(1_000)).burst(10)),
            ),
        ];
        for (name, policy) in policies {
            let key = format!("late-bucket-{name}");
            let bucket = RedisBucket::builder(&slow, key.clone(), ten_tokens())
                .policy(policy)
                .timeout(TIMEOUT)
                .connect()
                .await
                .unwrap();
            proxy.set_delay(SLOW);
            // One after another: the fallback's bucket (empty at the outage's start) refills
            // between them.
            let mut answers = Vec::new();
            for _ in 0..10 {
                answers.push(bucket.try_acquire(1).await);
            }
            proxy.set_delay(Duration::ZERO);
            let by_fallback = answers
                .iter()
                .filter(|a| matches!(a, Ok(grant) if grant.source == Source::Fallback))
                .count() as u64;
            assert!(
                answers
                    .iter()
                    .all(|a| !matches!(a, Ok(grant) if grant.source == Source::Redis)),
                "{answers:?}"
            );
            tokio::time::sleep(SLOW * 3).await;
            // A prompt call carries what the fallback granted to Redis.
            bucket.try_acquire(0).await.unwrap();
            let probe = RedisBucket::builder(&direct, key, ten_tokens())
                .connect_lazy()
                .unwrap();
            let left = probe.level().await.unwrap().remaining;
            let charged = 10 - left;
            println!(
                "RedisBucket {name}: 10 calls timed out, {by_fallback} granted by the fallback; \
                 {charged} tokens charged in Redis"
            );
            if charged != by_fallback {
                failures.push(format!(
                    "{name}: {charged} tokens charged for {by_fallback} fallback grants"
                ));
            }
        }
        assert!(failures.is_empty(), "{failures:?}");
    });
}

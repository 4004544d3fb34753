//! A quota per key in Redis: each key's bound across clients, keys gone when full, and a
//! pipeline deciding as one call at a time would.

use std::time::{Duration, Instant};

use tollgate::{Denied, Quota, Rate};
use tollgate_redis::{Error, RedisKeyed, Source};

use crate::connect;
use crate::support::{runtime, serial, RedisServer};

const RATE: u64 = 50;
const BURST: u64 = 5;

/// Three clients, each on its own connection, hammer the same four keys for 1.5 s, asking for
/// all four in one pipeline each time: every key's grants stay within `5 + 50/s × elapsed`,
/// counted from before the first call to after the last answer, and reach 90 % of it.
#[test]
fn each_key_keeps_its_bound_across_clients() {
    let _serial = serial();
    let server = RedisServer::start();
    runtime().block_on(async {
        let quota = Quota::new(Rate::per_second(RATE)).burst(BURST);
        let keys = ["alice", "bob", "carol", "dave"];
        let run = Duration::from_millis(1_500);
        let began = Instant::now();
        let mut clients = tokio::task::JoinSet::new();
        for _ in 0..3 {
            let connection = connect(&server).await;
            let limiter = RedisKeyed::new(&connection, "bound:", quota).unwrap();
            clients.spawn(async move {
                let mut grants = [0u64; 4];
                let requests: Vec<(&str, u32)> = keys.iter().map(|key| (*key, 1)).collect();
                while began.elapsed() < run {
                    let answers = limiter.try_acquire_many(&requests).await;
                    for (count, answer) in grants.iter_mut().zip(answers) {
                        match answer {
                            Ok(grant) => {
                                assert_eq!(grant.source, Source::Redis);
                                *count += 1;
                            }
                            Err(Error::Denied {
                                denied: Denied::Insufficient { .. },
                                ..
                            }) => {}
                            Err(error) => panic!("{error}"),
                        }
                    }
                }
                grants
            });
        }
        let mut totals = [0u64; 4];
        while let Some(grants) = clients.join_next().await {
            for (total, grants) in totals.iter_mut().zip(grants.unwrap()) {
                *total += grants;
            }
        }
        let elapsed_us = began.elapsed().as_micros() as u64;
        let bound_micro = BURST * 1_000_000 + RATE * elapsed_us;
        let floor = (BURST * 1_000_000 + RATE * run.as_micros() as u64) / 1_000_000 * 9 / 10;
        for (key, total) in keys.iter().zip(totals) {
            assert!(
                total * 1_000_000 <= bound_micro,
                "{key}: {total} grants in {elapsed_us} µs exceed {BURST} + {RATE}/s"
            );
            assert!(total >= floor, "{key}: {total} grants, below {floor}");
        }
        println!("per key over {elapsed_us} µs: {totals:?}");
    });
}

/// A key lives while its bucket is not full: `PTTL` is the time until full, the key is gone
/// once it is, a peek at an absent key writes nothing, and a thousand keys touched once leave
/// `DBSIZE` at zero after their refill.
#[test]
fn full_buckets_are_no_keys() {
    let _serial = serial();
    let server = RedisServer::start();
    runtime().block_on(async {
        let connection = connect(&server).await;
        // 100/s, burst 10: a token is 10 ms.
        let quota = Quota::new(Rate::per_second(100)).burst(10);
        let limiter = RedisKeyed::new(&connection, "ttl:", quota).unwrap();
        let peek = limiter.try_acquire("idle", 0).await.unwrap();
        assert_eq!(peek.level.unwrap().remaining, 10);
        assert_eq!(server.command(&["DBSIZE"]), ":0");

        let grant = limiter.try_acquire("busy", 4).await.unwrap();
        let level = grant.level.unwrap();
        assert_eq!(level.remaining, 6);
        assert!(level.until_full <= Duration::from_millis(40), "{level:?}");
        let pttl: u64 = server.command(&["PTTL", "ttl:busy"])[1..].parse().unwrap();
        assert!(
            (1..=41).contains(&pttl),
            "PTTL {pttl} ms, full in {level:?}"
        );
        tokio::time::sleep(Duration::from_millis(pttl + 20)).await;
        assert_eq!(server.command(&["EXISTS", "ttl:busy"]), ":0");

        // A thousand users, one token each, in one pipeline: a thousand keys for 500 ms.
        let limiter = RedisKeyed::new(
            &connection,
            "users:",
            Quota::new(Rate::per_second(2)).burst(2),
        )
        .unwrap();
        let names: Vec<String> = (0..1_000).map(|i| format!("user{i}")).collect();
        let requests: Vec<(&str, u32)> = names.iter().map(|name| (name.as_str(), 1)).collect();
        let answers = limiter.try_acquire_many(&requests).await;
        assert!(answers.iter().all(|answer| answer.is_ok()));
        assert_eq!(server.command(&["DBSIZE"]), ":1000");
        tokio::time::sleep(Duration::from_millis(520)).await;
        let expired = (0..1_000)
            .step_by(97)
            .all(|i| server.command(&["EXISTS", &format!("users:user{i}")]) == ":0");
        assert!(expired, "a full bucket's key outlived its refill");
        // Redis reclaims expired keys by sampling them: within a second or two.
        let reclaimed = Instant::now();
        while server.command(&["DBSIZE"]) != ":0" {
            assert!(
                reclaimed.elapsed() < Duration::from_secs(5),
                "DBSIZE {}",
                server.command(&["DBSIZE"])
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
}

/// The same requests, pipelined on one prefix and one at a time on another, get the same
/// answers: grants, levels, and denials with their `retry_after` (within the time the calls
/// took, at one token an hour). A request above the burst is refused without a round trip.
#[test]
fn a_pipeline_answers_as_one_call_at_a_time() {
    let _serial = serial();
    let server = RedisServer::start();
    runtime().block_on(async {
        let connection = connect(&server).await;
        let quota = Quota::new(Rate::per_hour(1)).burst(5);
        let pipelined = RedisKeyed::new(&connection, "many:", quota).unwrap();
        let alone = RedisKeyed::new(&connection, "one:", quota).unwrap();
        let requests = [
            ("a", 2),
            ("b", 1),
            ("a", 2),
            ("a", 2), // 1 left: denied
            ("c", 6), // above the burst
            ("b", 0), // a peek
            ("a", 1),
            ("b", 4),
            ("b", 1), // empty
            ("a", 0),
        ];
        let many = pipelined.try_acquire_many(&requests).await;
        let mut one_by_one = Vec::new();
        for (key, n) in requests {
            one_by_one.push(alone.try_acquire(key, n).await);
        }
        let summary = |answer: &Result<tollgate_redis::Grant, Error>| match answer {
            Ok(grant) => Ok(grant.level.unwrap().remaining),
            Err(Error::Denied { denied, .. }) => Err(denied.retry_after().map(|d| d.as_secs())),
            Err(error) => panic!("{error}"),
        };
        let many: Vec<_> = many.iter().map(summary).collect();
        let one_by_one: Vec<_> = one_by_one.iter().map(summary).collect();
        let expected = [
            Ok(3),
            Ok(4),
            Ok(1),
            Err(Some(3_599)), // an hour a token, one short, a few µs after the call began
            Err(None),
            Ok(4),
            Ok(0),
            Ok(0),
            Err(Some(3_599)),
            Ok(0),
        ];
        // `retry_after` rounds to whole seconds of 3600 s less the microseconds elapsed.
        let close = |row: &[Result<u64, Option<u64>>]| {
            row.iter()
                .zip(&expected)
                .all(|(seen, want)| match (seen, want) {
                    (Err(Some(s)), Err(Some(w))) => *s == *w || *s == *w + 1,
                    _ => seen == want,
                })
        };
        assert!(close(&many), "pipelined {many:?}");
        assert!(close(&one_by_one), "one at a time {one_by_one:?}");

        // A server that forgot the script answers NOSCRIPT to the whole pipeline, which ran
        // nothing: the script is loaded and the calls sent again, each taking once.
        assert_eq!(server.command(&["SCRIPT", "FLUSH"]), "+OK");
        let again = pipelined
            .try_acquire_many(&[("d", 1), ("d", 1), ("e", 5)])
            .await;
        let again: Vec<_> = again.iter().map(summary).collect();
        assert_eq!(again, [Ok(4), Ok(3), Ok(0)]);
    });
}

/// The server's clock steps a minute forward (`redis-server` under libfaketime): the first
/// pipeline after it runs past the deadline estimated from the old clock and does nothing, and
/// is sent again at once with a fresh one. No call fails, none takes twice.
#[test]
fn a_clock_step_forward_fails_no_call() {
    let _serial = serial();
    let server = RedisServer::start_with_movable_clock();
    runtime().block_on(async {
        let connection = connect(&server).await;
        let quota = Quota::new(Rate::per_hour(1)).burst(5);
        let limiter = RedisKeyed::new(&connection, "step:", quota).unwrap();
        limiter.try_acquire("a", 1).await.unwrap(); // the client learns Redis's clock
        server.set_clock(60);
        let answers = limiter.try_acquire_many(&[("a", 1), ("b", 2)]).await;
        let remaining: Vec<u64> = answers
            .iter()
            .map(|answer| match answer {
                Ok(grant) => grant.level.unwrap().remaining,
                Err(error) => panic!("{error}"),
            })
            .collect();
        assert_eq!(remaining, [3, 3]);
    });
}

//! A Redis bucket's waits sleep their jitter as every wait does: after a wait that slept,
//! holding the tokens, and giving them back if the caller goes away during it.

use std::time::Duration;

use tokio::time::{sleep, timeout, Instant};
use tollgate::{Jitter, Quota, Rate};
use tollgate_redis::{Client, RedisBucket, RedisConnection};

use crate::support::{runtime, serial, RedisServer};

fn ms(millis: u64) -> Duration {
    Duration::from_millis(millis)
}

/// 10/s, burst 1, jitter up to 300 ms: a caller served at once sleeps none; the next waits
/// for its token (100 ms) and then the jitter's first draw.
#[test]
fn a_wait_that_slept_sleeps_the_next_draw_and_one_served_at_once_none() {
    let _serial = serial();
    let server = RedisServer::start();
    let (max, seed) = (ms(300), 2);
    let first_draw = Jitter::up_to(max, seed).next();
    assert!(
        first_draw >= ms(150),
        "the seed's first draw: {first_draw:?}"
    );
    runtime().block_on(async {
        let redis = RedisConnection::connect(Client::open(server.url()).expect("url"))
            .await
            .expect("connect");
        let quota = Quota::new(Rate::per_second(10)).burst(1);
        let bucket = RedisBucket::builder(&redis, "jitter-slept", quota)
            .jitter(Jitter::up_to(max, seed))
            .connect()
            .await
            .expect("bucket");
        let at_once = bucket.acquire(1).await.expect("the burst");
        assert!(at_once < ms(50), "served at once, yet waited {at_once:?}");
        let waited = bucket.acquire(1).await.expect("the next token");
        println!("waited {waited:?}: 100 ms for the token, then a draw of {first_draw:?}");
        assert!(
            waited >= first_draw + ms(90) && waited <= first_draw + ms(200),
            "waited {waited:?}, the draw {first_draw:?}"
        );
    });
}

/// 10/s, burst 100, drained; a wait for 10 tokens sleeps Redis's 1 s `retry_after`, takes
/// them, and sleeps its jitter (tens of seconds). Read at 2 s, the bucket has them taken;
/// dropped at 2.5 s, the wait gives them back: `until_full` is a second shorter than if they
/// stayed taken.
#[test]
fn a_wait_dropped_during_its_jitter_gives_its_tokens_back() {
    let _serial = serial();
    let server = RedisServer::start();
    let (max, seed) = (Duration::from_secs(60), 1);
    let first_draw = Jitter::up_to(max, seed).next();
    assert!(
        first_draw >= Duration::from_secs(5),
        "the seed's first draw: {first_draw:?}"
    );
    runtime().block_on(async {
        let redis = RedisConnection::connect(Client::open(server.url()).expect("url"))
            .await
            .expect("connect");
        let quota = Quota::new(Rate::per_second(10)).burst(100);
        let bucket = RedisBucket::builder(&redis, "jitter-dropped", quota)
            .jitter(Jitter::up_to(max, seed))
            .connect()
            .await
            .expect("bucket");
        bucket.try_acquire(100).await.expect("the burst");
        let drained = Instant::now();
        let during = async {
            sleep(Duration::from_secs(2)).await;
            (bucket.level().await.expect("level"), drained.elapsed())
        };
        let (dropped, (during, read_at)) =
            tokio::join!(timeout(ms(2_500), bucket.acquire(10)), during);
        assert!(
            dropped.is_err(),
            "the wait ended in its jitter: {dropped:?}"
        );
        // The give-back is a call to Redis started as the wait dropped.
        sleep(ms(200)).await;
        let after = bucket.level().await.expect("level");
        let after_at = drained.elapsed();
        // Full after 10 s from empty, one more second with the 10 tokens taken.
        let full_in = |until_full: Duration, at: Duration| until_full + at;
        let (taken, given_back) = (
            full_in(during.until_full, read_at),
            full_in(after.until_full, after_at),
        );
        println!("full at {taken:?} while taken, {given_back:?} once given back");
        let near = |got: Duration, want: Duration| got.abs_diff(want) <= ms(100);
        assert!(near(taken, Duration::from_secs(11)), "taken: {taken:?}");
        assert!(
            near(given_back, Duration::from_secs(10)),
            "given back: {given_back:?}"
        );
    });
}

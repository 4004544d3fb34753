//! Window quotas ([`Quota::within`]) against a real sliding-window enforcer: a Redis sorted set
//! of request timestamps (Redis `TIME`, microseconds), trimmed to the window and counted on
//! every request, that refuses a request once the window holds the cap. Buckets built with
//! `Quota::within` and driven at full speed must never be refused; the naive quota (rate =
//! cap / window, burst = cap) is, which shows the enforcer bites.

use std::time::{Duration, Instant};

use tollgate::{Quota, Rate, TokenBucket, TokioClock};

use crate::support::{runtime, serial, RedisServer};

/// A sliding-window log: drop what fell out of `(now − window, now]`, count, admit below the
/// cap. Returns `{admitted, count in the window}`.
const SLIDING_WINDOW: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local window = tonumber(ARGV[1])
local cap = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
local count = redis.call('ZCARD', KEYS[1])
if count < cap then
  redis.call('ZADD', KEYS[1], now, ARGV[3])
  redis.call('PEXPIRE', KEYS[1], math.floor(window / 1000) + 1000)
  return {1, count + 1}
end
return {0, count}
";

/// What the enforcer said over one run.
#[derive(Debug, Default)]
struct Tally {
    admitted: u64,
    refused: u64,
    fullest: u64,
}

/// `jobs` callers, each with its own bucket of `quota`, taking one token at a time the moment
/// their buckets allow for `run`, each grant sent at once to the enforcer of `cap` per
/// `window`.
fn drive(
    server: &RedisServer,
    key: &str,
    quota: Quota,
    jobs: usize,
    cap: u64,
    window: Duration,
    run: Duration,
) -> Tally {
    runtime().block_on(async {
        let client = redis::Client::open(server.url()).expect("redis url");
        let script = redis::Script::new(SLIDING_WINDOW);
        let callers = (0..jobs).map(|job| {
            let client = client.clone();
            let script = script.clone();
            async move {
                let mut conn = client
                    .get_multiplexed_async_connection()
                    .await
                    .expect("connect");
                let bucket = TokenBucket::try_new(quota, TokioClock::new()).expect("quota builds");
                let start = Instant::now();
                let mut tally = Tally::default();
                let mut sent = 0u64;
                while start.elapsed() < run {
                    // At the instant the token is due, to the microsecond: sleep until 2 ms
                    // before it (the timer is coarse and late), then ask on every turn.
                    while let Err(denied) = bucket.try_acquire(1) {
                        let retry_after = denied.retry_after().expect("one token fits");
                        if retry_after > Duration::from_millis(2) {
                            tokio::time::sleep(retry_after - Duration::from_millis(2)).await;
                        } else {
                            tokio::task::yield_now().await;
                        }
                    }
                    sent += 1;
                    let (admitted, count): (u64, u64) = script
                        .key(key)
                        .arg(window.as_micros() as u64)
                        .arg(cap)
                        .arg(format!("{job}:{sent}"))
                        .invoke_async(&mut conn)
                        .await
                        .expect("script runs");
                    if admitted == 1 {
                        tally.admitted += 1;
                    } else {
                        tally.refused += 1;
                    }
                    tally.fullest = tally.fullest.max(count);
                }
                tally
            }
        });
        let tallies = futures_join_all(callers).await;
        tallies.into_iter().fold(Tally::default(), |a, b| Tally {
            admitted: a.admitted + b.admitted,
            refused: a.refused + b.refused,
            fullest: a.fullest.max(b.fullest),
        })
    })
}

/// Runs the futures concurrently on the current task, without another dependency.
async fn futures_join_all<F: std::future::Future>(
    futures: impl Iterator<Item = F>,
) -> Vec<F::Output> {
    let set: Vec<_> = futures.map(Box::pin).collect();
    let mut outputs: Vec<Option<F::Output>> = set.iter().map(|_| None).collect();
    let mut set: Vec<Option<_>> = set.into_iter().map(Some).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (slot, output) in set.iter_mut().zip(outputs.iter_mut()) {
            if let Some(future) = slot {
                match future.as_mut().poll(cx) {
                    std::task::Poll::Ready(value) => {
                        *output = Some(value);
                        *slot = None;
                    }
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    outputs.into_iter().map(|o| o.expect("finished")).collect()
}

/// Three window caps, one caller each, then the design documents' example (the cap less 5 %
/// and 10 %, shared by three jobs) with three callers on one enforcer: the enforcer refuses
/// nothing, and the callers get close to the rate they were given.
#[test]
fn window_quotas_are_never_refused_by_a_sliding_window_log() {
    let _serial = serial();
    let server = RedisServer::start();
    let ms = Duration::from_millis;
    let rows = [
        // (key, quota, jobs, enforced cap, enforced window, run)
        (
            "twenty",
            Quota::within(20, ms(1_000)),
            1,
            20,
            ms(1_000),
            ms(3_500),
        ),
        ("three", Quota::within(3, ms(500)), 1, 3, ms(500), ms(2_500)),
        (
            "burst",
            Quota::within(30, ms(1_000)).burst(10),
            1,
            30,
            ms(1_000),
            ms(3_000),
        ),
        (
            "jobs",
            Quota::within(100, ms(1_000))
                .minus_percent(5)
                .minus_percent(10)
                .divided_by(3),
            3,
            100,
            ms(1_000),
            ms(3_500),
        ),
    ];
    for (key, quota, jobs, cap, window, run) in rows {
        let tally = drive(&server, key, quota, jobs, cap, window, run);
        // The most a set of `jobs` such buckets may send in `run`: each its burst and its rate.
        let rate = quota.rate();
        let most = jobs as f64
            * (quota.burst_size() as f64
                + rate.tokens() as f64 * run.as_secs_f64() / rate.period().as_secs_f64());
        eprintln!(
            "{key}: {quota} x {jobs} against {cap} per {window:?}: {} admitted, {} refused, fullest window {}, {:.0} % of the quota's most",
            tally.admitted,
            tally.refused,
            tally.fullest,
            100.0 * (tally.admitted + tally.refused) as f64 / most
        );
        assert_eq!(
            tally.refused, 0,
            "{key}: {quota} refused by the enforcer: {tally:?}"
        );
        // Full speed: the callers sent at least 90 % of what their buckets allow, and a
        // lone caller filled some window of the enforcer to within a token of the cap (to the
        // cap when the later request's trip to Redis was the quicker one).
        assert!(
            (tally.admitted as f64) >= 0.9 * most - jobs as f64,
            "{key}: only {} sent of {most:.1}: {tally:?}",
            tally.admitted
        );
        if jobs == 1 {
            assert!(
                tally.fullest + 1 >= cap,
                "{key}: never near the cap: {tally:?}"
            );
        }
    }
}

/// The enforcer bites: the naive quota, rate = cap / window with burst = cap, sends a whole cap
/// at once and another over the next window, and is refused.
#[test]
fn the_sliding_window_log_refuses_the_naive_quota() {
    let _serial = serial();
    let server = RedisServer::start();
    let window = Duration::from_millis(1_000);
    let naive = Quota::new(Rate::new(20, window)).burst(20);
    let tally = drive(
        &server,
        "naive",
        naive,
        1,
        20,
        window,
        Duration::from_millis(2_500),
    );
    eprintln!("naive: {naive}: {tally:?}");
    assert!(
        tally.refused >= 10,
        "the naive quota was hardly refused: {tally:?}"
    );
}

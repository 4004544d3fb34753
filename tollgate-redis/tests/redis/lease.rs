//! Leased tokens: four processes leasing from one bucket stay within its bound, and a lease's
//! size follows the demand of the process that holds it.

use std::time::{Duration, Instant};

use tollgate::{Denied, Quota, Rate};
use tollgate_redis::{Client, Error, LeasedBucket, RedisBucket, RedisConnection, Source};

use crate::connect;
use crate::support::{
    field, fleet_of_four, fleet_window, runtime, serial, setting, sleep_until_unix, unix_us,
    worker_role, RedisServer,
};

const RATE: u64 = 100;
const BURST: u64 = 10;
/// How long the fleet runs.
const SECONDS: u64 = 3;
const LIFETIME: Duration = Duration::from_millis(100);

/// The sharing test's fleet (four OS processes, 100/s, burst 10, 3 s), each taking its tokens
/// in leases of up to 5 (half a 100 ms lifetime of the rate) and granting from them locally:
/// the grants stay within `10 + 100 × elapsed`, and still reach 80 % of it.
#[test]
fn four_leasing_processes_stay_within_the_bound() {
    if worker_role().is_some() {
        return runtime().block_on(lease_until_the_end());
    }
    let _serial = serial();
    let server = RedisServer::start();
    let (start_us, settings) = fleet_window(&server, SECONDS);
    let reports = fleet_of_four(
        "lease::four_leasing_processes_stay_within_the_bound",
        "lease",
        &settings,
    );
    let total: u64 = reports.iter().map(|r| field(r, "grants")).sum();
    let trips: u64 = reports.iter().map(|r| field(r, "trips")).sum();
    let last_us = reports.iter().map(|r| field(r, "last_us")).max().unwrap();
    // A grant comes from a lease taken before it, and no lease before the start.
    let elapsed_us = last_us - start_us;
    assert!(
        total * 1_000_000 <= BURST * 1_000_000 + RATE * elapsed_us,
        "{total} grants in {elapsed_us} µs exceed {BURST} + {RATE}/s: {reports:?}"
    );
    let window = BURST + RATE * SECONDS;
    assert!(
        total * 100 >= window * 80,
        "{total} grants, below 80 % of {window}: {reports:?}"
    );
    println!(
        "four leasing processes: {total} grants, bound {window}, {trips} round trips: {reports:?}"
    );
}

async fn lease_until_the_end() {
    let start_us: u64 = setting("START_US").parse().unwrap();
    let end_us: u64 = setting("END_US").parse().unwrap();
    let connection =
        RedisConnection::connect_lazy(Client::open(setting("REDIS_URL")).unwrap()).unwrap();
    let quota = Quota::new(Rate::per_second(RATE)).burst(BURST);
    let bucket = RedisBucket::builder(&connection, "leased", quota)
        .timeout(Duration::from_secs(1))
        .connect()
        .await
        .expect("connect");
    let leased = LeasedBucket::new(bucket, LIFETIME);
    sleep_until_unix(start_us).await;
    let (mut grants, mut last_us) = (0u64, start_us);
    while unix_us() < end_us {
        match leased.try_acquire(1).await {
            Ok(source) => {
                assert_eq!(source, Source::Redis);
                grants += 1;
                last_us = unix_us();
            }
            Err(Error::Denied {
                denied: Denied::Insufficient { retry_after },
                ..
            }) => {
                let left = Duration::from_micros(end_us.saturating_sub(unix_us()));
                tokio::time::sleep(retry_after.get().min(left).max(Duration::from_micros(1))).await;
            }
            Err(error) => panic!("worker: {error}"),
        }
    }
    println!(
        "@@ grants={grants} last_us={last_us} trips={}",
        leased.round_trips()
    );
}

/// One process: flat out, its leases double to the largest (100 tokens at 1000/s, burst 100,
/// a 200 ms lifetime) and each round trip serves at least ten grants, within the bound; a
/// trickle of one call per lifetime brings them back to one or two tokens.
#[test]
fn the_lease_follows_the_demand() {
    let _serial = serial();
    let server = RedisServer::start();
    runtime().block_on(async {
        let connection = connect(&server).await;
        let quota = Quota::new(Rate::per_second(1_000)).burst(100);
        let bucket = RedisBucket::builder(&connection, "demand", quota)
            .timeout(Duration::from_secs(1))
            .connect()
            .await
            .unwrap();
        let lifetime = Duration::from_millis(200);
        let leased = LeasedBucket::new(bucket, lifetime);
        assert_eq!(leased.next_lease_size(), 1);

        let began = Instant::now();
        let mut grants = 0u64;
        while began.elapsed() < Duration::from_millis(400) {
            match leased.try_acquire(1).await {
                Ok(_) => grants += 1,
                Err(error) => {
                    let retry_after = error.retry_after().expect("a denial");
                    tokio::time::sleep(retry_after.max(Duration::from_micros(1))).await;
                }
            }
        }
        let elapsed_us = began.elapsed().as_micros() as u64;
        assert!(
            grants * 1_000 <= 100 * 1_000 + elapsed_us,
            "{grants} grants in {elapsed_us} µs exceed 100 + 1000/s"
        );
        assert!(grants >= 300, "{grants} grants in {elapsed_us} µs");
        let trips = leased.round_trips();
        assert!(
            trips * 10 <= grants,
            "{trips} round trips for {grants} grants"
        );
        assert_eq!(leased.next_lease_size(), 100);

        // One call a lifetime: each lease expires with one token used.
        for _ in 0..3 {
            tokio::time::sleep(lifetime + Duration::from_millis(20)).await;
            leased.try_acquire(1).await.unwrap();
        }
        tokio::time::sleep(lifetime + Duration::from_millis(20)).await;
        assert!(leased.try_acquire(0).await.is_ok());
        assert!(
            leased.next_lease_size() <= 2,
            "{}",
            leased.next_lease_size()
        );
    });
}

/// A lease released before its tokens are due gives them back, and only them: a lease of two
/// tokens taken from an empty bucket (10/s, burst 10) is refused locally until its first token
/// is due; released, the shared bucket is as if it had never been taken (full in a second, not
/// 1.2 s), and nobody can take a token that is not there.
#[test]
fn a_released_lease_gives_back_only_what_is_not_due() {
    let _serial = serial();
    let server = RedisServer::start();
    runtime().block_on(async {
        let connection = connect(&server).await;
        let quota = Quota::new(Rate::per_second(10)).burst(10);
        let build = || {
            RedisBucket::builder(&connection, "give-back", quota)
                .timeout(Duration::from_secs(1))
                .connect()
        };
        let plain = build().await.unwrap();
        let leased = LeasedBucket::new(build().await.unwrap(), Duration::from_secs(2));
        // A lease of one token, due at once, used at once.
        assert_eq!(leased.try_acquire(1).await.unwrap(), Source::Redis);
        plain.try_acquire(9).await.unwrap();
        // The next lease is two tokens, 100 and 200 ms into debt: not granted yet.
        let refused = leased.try_acquire(1).await.unwrap_err();
        let retry_after = refused.retry_after().unwrap();
        assert!(
            retry_after > Duration::from_millis(50) && retry_after <= Duration::from_millis(100),
            "{refused}"
        );
        assert_eq!(leased.round_trips(), 2);
        let before = plain.level().await.unwrap();
        assert!(
            before.until_full > Duration::from_millis(1_100),
            "{before:?}"
        );
        leased.release().await.unwrap();
        assert_eq!(leased.round_trips(), 3);
        let after = plain.level().await.unwrap();
        assert!(
            after.until_full <= Duration::from_millis(1_000)
                && after.until_full > Duration::from_millis(800),
            "{after:?} after the release, {before:?} before"
        );
        assert!(plain.try_acquire(1).await.is_err(), "a token appeared");
        // Nothing more to give back.
        leased.release().await.unwrap();
        assert_eq!(leased.round_trips(), 3);
    });
}

/// Grants in the busiest `window` of `times` (sorted instants, one per token granted).
fn busiest(times: &[Instant], window: Duration) -> u64 {
    let mut most = 0;
    let mut first = 0;
    for last in 0..times.len() {
        while times[last] - times[first] > window {
            first += 1;
        }
        most = most.max(last - first + 1);
    }
    most as u64
}

/// Ten leasing holders (1 000/s, burst 200, lifetime 100 ms, call timeout 1 s) whose answers
/// from Redis come back late through a proxy: 0, 60 and 150 ms. Five lease at once at `S` and
/// spend their lease just before it expires as the answer's arrival would have it (arrival +
/// lifetime − 3 ms); five more lease at `S + 100 ms` and spend theirs as soon as it arrives, so
/// that both spendings meet. The grants of the busiest 20 ms stay within
/// `burst + rate × window + rate × lifetime` (320) whatever the delay, and no token is granted
/// more than a lifetime after its lease was asked for (before Redis took it), however late the
/// answer came.
#[test]
fn late_answers_do_not_stretch_a_lease() {
    let _serial = serial();
    let server = RedisServer::start();
    let quota = Quota::new(Rate::per_second(1_000)).burst(200);
    let lifetime = Duration::from_millis(100);
    let window = Duration::from_millis(20);
    let bound = 200 + 1_000 * window.as_millis() as u64 / 1_000 + 100;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let mut report = Vec::new();
    for delay_ms in [0u64, 60, 150] {
        let (grants, latest) = rt.block_on(async {
            let proxy =
                crate::support::DelayProxy::start(server.port, Duration::from_millis(delay_ms))
                    .await;
            let redis = RedisConnection::connect(Client::open(proxy.url()).unwrap())
                .await
                .unwrap();
            let key = format!("late-lease-{delay_ms}");
            let holder = || {
                let bucket = RedisBucket::builder(&redis, key.clone(), quota)
                    .timeout(Duration::from_secs(1))
                    .connect_lazy()
                    .unwrap();
                std::sync::Arc::new(LeasedBucket::new(bucket, lifetime))
            };
            let holders: Vec<_> = (0..10).map(|_| holder()).collect();
            // Each grows its lease to the largest (50: half a lifetime of the rate): a lease
            // of 50 used up at once.
            // (Where the answers take longer than a lifetime, every lease is dead on arrival
            // and the size never grows: a few tries, then on.)
            for holder in &holders {
                for _ in 0..10 {
                    if holder.next_lease_size() >= 50 {
                        break;
                    }
                    let _ = holder.try_acquire(50).await;
                }
            }
            // A full bucket.
            tokio::time::sleep(Duration::from_millis(400)).await;
            let granted = std::sync::Arc::new(std::sync::Mutex::new(Vec::<Instant>::new()));
            let note = |granted: &std::sync::Arc<std::sync::Mutex<Vec<Instant>>>, n: u32| {
                let now = Instant::now();
                granted.lock().unwrap().extend((0..n).map(|_| now));
            };
            let latest = std::sync::Arc::new(std::sync::Mutex::new(Duration::ZERO));
            let mut tasks = tokio::task::JoinSet::new();
            for (i, holder) in holders.iter().enumerate() {
                let (holder, granted) = (
                    std::sync::Arc::clone(holder),
                    std::sync::Arc::clone(&granted),
                );
                let latest = std::sync::Arc::clone(&latest);
                tasks.spawn(async move {
                    if i < 5 {
                        // Lease now, spend the rest just before the lease "expires".
                        let asked = Instant::now();
                        if holder.try_acquire(1).await.is_ok() {
                            note(&granted, 1);
                        }
                        let arrived = asked.elapsed();
                        let spend_at = arrived + lifetime - Duration::from_millis(3);
                        tokio::time::sleep(spend_at.saturating_sub(asked.elapsed())).await;
                        if holder.try_acquire(49).await.is_ok() {
                            note(&granted, 49);
                            // How long after the lease was asked for its last token went.
                            let mut latest = latest.lock().unwrap();
                            *latest = latest.max(asked.elapsed());
                        }
                    } else {
                        // Lease 100 ms later and spend it all on arrival.
                        tokio::time::sleep(lifetime).await;
                        if holder.try_acquire(50).await.is_ok() {
                            note(&granted, 50);
                        }
                    }
                });
            }
            while let Some(task) = tasks.join_next().await {
                task.expect("holder");
            }
            let mut granted = granted.lock().unwrap().clone();
            granted.sort();
            let latest = *latest.lock().unwrap();
            (granted, latest)
        });
        let most = busiest(&grants, window);
        println!(
            "reply delay {delay_ms} ms: {} grants, {most} in the busiest {window:?}, bound \
             {bound}; a lease's token granted at most {latest:?} after it was asked for",
            grants.len()
        );
        report.push((delay_ms, most, latest));
    }
    for (delay_ms, most, latest) in report {
        assert!(
            most <= bound,
            "delay {delay_ms} ms: {most} grants in {window:?} > {bound}"
        );
        // A margin for the time between asking and sending, on a busy machine.
        assert!(
            latest <= lifetime + Duration::from_millis(10),
            "delay {delay_ms} ms: a token granted {latest:?} after its lease was asked for"
        );
    }
}

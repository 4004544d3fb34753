//! Per-key waits on `KeyedLimiter`: the single bucket's rules, per key (arrival order, one
//! line per key, a request above the key's burst refused at once, giving up free), and a key
//! with waiters kept through sweeps, a full table and tier changes. Exact under tokio's paused
//! time; with threads, against a `ManualClock` the test moves, or measured in real time with
//! margins for a loaded two-core machine.

#[path = "../support/mod.rs"]
mod support;
use support::ms;

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::thread;
use std::time::Duration;

use tokio::task::JoinSet;
use tokio::time::{sleep, timeout, Instant};
use tollgate::{
    Denied, KeyedDenied, KeyedLimiter, ManualClock, Quota, Rate, Tier, TokioClock, WhenFull,
};

type Tokio<K> = KeyedLimiter<K, TokioClock>;

/// A key's grants in the order they came: the waiter's arrival number, and when.
type Grants = Mutex<Vec<(u64, Duration)>>;

fn per_second(rate: u64, burst: u64) -> Quota {
    Quota::new(Rate::per_second(rate)).burst(burst)
}

fn tokio_limiter<K: std::hash::Hash + Eq + Clone>(quota: Quota, capacity: usize) -> Arc<Tokio<K>> {
    Arc::new(
        KeyedLimiter::builder(quota, TokioClock::new())
            .capacity(capacity)
            .when_full(WhenFull::Refuse)
            .build()
            .expect("valid quota"),
    )
}

/// The figure: 10 000 tasks over 1 000 keys at 1/s, burst 1, each task asking again as
/// soon as it is served, for 10.5 s of paused time. Every key gets exactly
/// `floor(burst + rate × 10.5 s)` = 11 grants, one a second from 0 s to 10 s, and every key's
/// waiters are served in the order they lined up (no inversion among 11 000 grants).
///
/// Under eviction pressure all along: the table holds exactly the 1 000 keys, with no
/// protection or probation window (any full bucket is evictable at once), a flood of new keys
/// asks for a slot every 10 ms and a sweep runs every 100 ms. No key with waiters is evicted,
/// so the flood finds no room and the sweeps evict nothing. (Here a waited-on bucket never
/// reads full: its waiters take each token as it accrues. The tests that fail without the pins,
/// where a bucket reads full while its waiter sleeps, are `a_sweep_never_evicts_*` and
/// `a_full_table_evicts_no_key_with_waiters`.)
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn ten_thousand_tasks_over_a_thousand_keys_get_exactly_their_bound_in_arrival_order() {
    const KEYS: u64 = 1_000;
    const TASKS_PER_KEY: u64 = 10;
    let limiter: Arc<Tokio<u64>> = Arc::new(
        KeyedLimiter::builder(per_second(1, 1), TokioClock::new())
            .capacity(KEYS as usize)
            .probation(Duration::ZERO)
            .protection(Duration::ZERO)
            .when_full(WhenFull::Refuse)
            .build()
            .unwrap(),
    );
    let start = Instant::now();
    let end = start + ms(10_500);
    let pressure = {
        let limiter = limiter.clone();
        tokio::spawn(async move {
            let (mut newcomers_granted, mut evicted) = (0, 0);
            sleep(ms(100)).await; // every key is in by then
            for tick in 0..1_030u64 {
                if limiter.try_acquire(&(1_000_000 + tick), 1).is_ok() {
                    newcomers_granted += 1;
                }
                if tick % 10 == 0 {
                    evicted += limiter.sweep();
                }
                sleep(ms(10)).await;
            }
            (newcomers_granted, evicted)
        })
    };
    // Per key: the next arrival's number, and the (arrival, grant instant) of each grant in
    // the order the grants came.
    let arrivals: Arc<Vec<AtomicU64>> = Arc::new((0..KEYS).map(|_| AtomicU64::new(0)).collect());
    let grants: Arc<Vec<Grants>> = Arc::new((0..KEYS).map(|_| Mutex::new(Vec::new())).collect());
    let mut tasks = JoinSet::new();
    for task in 0..KEYS * TASKS_PER_KEY {
        let key = task % KEYS;
        let (limiter, arrivals, grants) = (limiter.clone(), arrivals.clone(), grants.clone());
        tasks.spawn(async move {
            loop {
                let left = end.saturating_duration_since(Instant::now());
                // Numbered as it lines up: the wait joins the key's line in its first poll,
                // which is this `.await`'s, with no yield in between.
                let arrival = arrivals[key as usize].fetch_add(1, Ordering::Relaxed);
                match limiter.acquire_timeout(&key, 1, left).await {
                    Ok(_) => grants[key as usize]
                        .lock()
                        .unwrap()
                        .push((arrival, start.elapsed())),
                    Err(KeyedDenied::Denied(Denied::Insufficient { .. })) => return,
                    Err(other) => panic!("key {key}: {other}"),
                }
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
    let (newcomers_granted, evicted) = pressure.await.unwrap();
    let (mut total, mut inversions, mut most_in_a_second) = (0, 0, 0);
    for (key, grants) in grants.iter().enumerate() {
        let grants = grants.lock().unwrap();
        let at: Vec<Duration> = grants.iter().map(|&(_, at)| at).collect();
        // burst + rate × elapsed, at 10.5 s: 1 + 10.
        assert_eq!(grants.len(), 11, "key {key}: {at:?}");
        for (i, &t) in at.iter().enumerate() {
            // The i-th grant comes at i seconds, late by tokio's millisecond at most.
            assert!(
                t >= ms(1_000 * i as u64) && t <= ms(1_000 * i as u64 + 1),
                "key {key}: grant {i} at {t:?}"
            );
        }
        // Grants within any window of one period: the burst, one.
        for (i, &t) in at.iter().enumerate() {
            let within = at[i..].iter().take_while(|&&u| u < t + ms(999)).count();
            most_in_a_second = most_in_a_second.max(within);
        }
        inversions += grants.windows(2).filter(|w| w[0].0 > w[1].0).count();
        total += grants.len();
    }
    println!(
        "{KEYS} keys, {} tasks, 10.5 s: {total} grants, 11 a key, at most {most_in_a_second} in any second of a key, {inversions} inversions; 1 030 newcomers: {newcomers_granted} granted, {evicted} evicted by sweeps",
        KEYS * TASKS_PER_KEY
    );
    assert_eq!((newcomers_granted, evicted), (0, 0));
    assert_eq!(total, 11 * KEYS as usize);
    assert_eq!(most_in_a_second, 1);
    assert_eq!(inversions, 0);
    // Every line closed: no key is held for waiters any more.
    assert_eq!(limiter.len(), KEYS as usize);
}

/// A waiter that times out in the middle of a key's line, and one dropped there, leave the key
/// as if they had never queued: the waiter behind each moves up to the turn it would have had.
/// Other keys' lines are untouched.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn giving_up_in_the_middle_of_a_keys_line_costs_nothing() {
    let limiter = tokio_limiter::<&str>(per_second(1, 1), 16);
    let start = Instant::now();
    assert_eq!(limiter.try_acquire(&"k", 1), Ok(())); // empty from now on
                                                      // A wait given up by `tokio::time::timeout` after `patience` (an `acquire_timeout` that
                                                      // would outlast its timeout is refused at once instead, below).
    let waits = |n: u32, patience: Duration| {
        let limiter = limiter.clone();
        tokio::spawn(async move {
            let waited = timeout(patience, limiter.acquire(&"k", n)).await;
            (waited.ok(), start.elapsed())
        })
    };
    let first = waits(1, ms(60_000)); // due at 1 s
    tokio::task::yield_now().await;
    let times_out = waits(1, ms(1_500)); // would be due at 2 s: gives up at 1.5 s
    tokio::task::yield_now().await;
    let dropped = waits(1, ms(60_000)); // would be due at 3 s: dropped at 1.2 s
    tokio::task::yield_now().await;
    let last = waits(1, ms(60_000)); // would be due at 4 s; moves up to 2 s
    tokio::task::yield_now().await;
    // Another key's line alongside: untouched by this one.
    let other = {
        let limiter = limiter.clone();
        tokio::spawn(async move {
            limiter.acquire(&"other", 1).await.unwrap();
            limiter.acquire(&"other", 1).await.unwrap();
            start.elapsed()
        })
    };
    sleep(ms(1_200)).await;
    dropped.abort();
    assert!(dropped.await.unwrap_err().is_cancelled());
    assert_eq!(first.await.unwrap(), (Some(Ok(ms(1_000))), ms(1_000)));
    assert_eq!(times_out.await.unwrap(), (None, ms(1_500)));
    assert_eq!(last.await.unwrap(), (Some(Ok(ms(2_000))), ms(2_000)));
    assert_eq!(other.await.unwrap(), ms(1_000));
    // Nothing was left taken, nothing was given: the key's next token is at 3 s.
    assert_eq!(limiter.available(&"k"), 0);
    sleep(ms(1_000)).await;
    assert_eq!(limiter.available(&"k"), 1);
}

/// A wait that would outlast its timeout is refused at once, taking nothing and joining no
/// line, with how much longer it would have been; `n = 0` is granted at once and adds no key.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_wait_beyond_its_timeout_is_refused_at_once() {
    let limiter = tokio_limiter::<u8>(per_second(2, 2), 16);
    let start = Instant::now();
    limiter.acquire(&1, 2).await.unwrap();
    assert_eq!(
        limiter.acquire_timeout(&1, 2, ms(400)).await,
        Err(KeyedDenied::Denied(Denied::insufficient(ms(600))))
    );
    assert_eq!(start.elapsed(), Duration::ZERO);
    assert_eq!(limiter.acquire(&9, 0).await, Ok(Duration::ZERO));
    assert_eq!(limiter.len(), 1);
    assert_eq!(
        limiter.acquire_timeout(&1, 2, ms(1_000)).await,
        Ok(ms(1_000))
    );
}

/// `n` above the burst fails at once: above every tier's, with no key added; above the key's
/// own tier's (below another's), at once too, in line or not, with the key's own burst.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_request_above_the_keys_tier_burst_fails_at_once() {
    let free = per_second(1, 1);
    let paid = per_second(10, 5);
    let limiter: Arc<Tokio<&str>> = Arc::new(
        KeyedLimiter::builder(free, TokioClock::new())
            .capacity(16)
            .when_full(WhenFull::Refuse)
            .tiers([paid], |key: &&str| {
                if key.starts_with("paid") {
                    Tier(1)
                } else {
                    Tier(0)
                }
            })
            .build()
            .unwrap(),
    );
    let start = Instant::now();
    let above_all = Err(KeyedDenied::Denied(Denied::ExceedsCapacity { burst: 5 }));
    assert_eq!(limiter.acquire(&"paid-a", 6).await, above_all);
    assert_eq!(limiter.acquire_blocking(&"paid-a", 6), above_all);
    assert!(limiter.is_empty());
    let above_free = Err(KeyedDenied::Denied(Denied::ExceedsCapacity { burst: 1 }));
    assert_eq!(limiter.acquire(&"free-a", 2).await, above_free);
    assert!(limiter.is_empty(), "refused before the key is added");
    // The same with waiters on the shard (the wait takes the line's path, not the fast one).
    limiter.acquire(&"free-b", 1).await.unwrap();
    let behind = {
        let limiter = limiter.clone();
        tokio::spawn(async move { limiter.acquire(&"free-b", 1).await })
    };
    tokio::task::yield_now().await;
    assert_eq!(limiter.acquire(&"free-b", 2).await, above_free);
    assert_eq!(limiter.acquire(&"free-c", 2).await, above_free);
    assert_eq!(
        limiter.tier(&"free-c"),
        None,
        "refused before the key is added"
    );
    assert_eq!(start.elapsed(), Duration::ZERO);
    // The paid key waits for its five at its own rate, alongside.
    limiter.acquire(&"paid-a", 5).await.unwrap();
    assert_eq!(limiter.acquire(&"paid-a", 5).await, Ok(ms(500)));
    assert_eq!(behind.await.unwrap(), Ok(ms(1_000)));
}

/// A key moved to another tier while tasks wait on it: the head takes from the new tier's
/// bucket, and nothing is minted (a change keeps the tokens as they are).
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_tier_change_during_a_wait_mints_nothing() {
    let slow = per_second(1, 1);
    let fast = per_second(10, 1);
    let limiter: Arc<Tokio<u8>> = Arc::new(
        KeyedLimiter::builder(slow, TokioClock::new())
            .capacity(4)
            .when_full(WhenFull::Refuse)
            .tiers([fast], |_| Tier(0))
            .build()
            .unwrap(),
    );
    let start = Instant::now();
    limiter.acquire(&1, 1).await.unwrap();
    let served = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = JoinSet::new();
    for _ in 0..5 {
        let (limiter, served) = (limiter.clone(), served.clone());
        tasks.spawn(async move {
            limiter.acquire(&1, 1).await.unwrap();
            served.lock().unwrap().push(start.elapsed());
        });
        tokio::task::yield_now().await;
    }
    sleep(ms(500)).await;
    assert_eq!(limiter.set_tier(&1, Tier(1)), Ok(true));
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
    let served = served.lock().unwrap().clone();
    // Half a token at the change, kept as it was: the first is due at 0.55 s, then one per
    // 100 ms; never two within 100 ms.
    assert_eq!(served.len(), 5);
    assert!(served[0] >= ms(550) && served[0] <= ms(1_000), "{served:?}");
    assert!(
        served.windows(2).all(|w| w[1] >= w[0] + ms(99)),
        "{served:?}"
    );
    assert!(*served.last().unwrap() <= ms(1_500), "{served:?}");
}

/// A key with waiters is never evicted: a sweep while its bucket reads full for far longer
/// than any window (the waiter's thread has not woken yet) keeps it, it counts as protected,
/// and the waiter takes from the same bucket when it wakes. Fails without the pins: the sweep
/// evicts the key from under its waiter.
#[test]
fn a_sweep_never_evicts_a_key_with_waiters() {
    let clock: &'static ManualClock = Box::leak(Box::new(ManualClock::new()));
    let limiter: Arc<KeyedLimiter<u32, &'static ManualClock>> = Arc::new(
        KeyedLimiter::builder(per_second(20, 1), clock)
            .capacity(8)
            .probation(Duration::ZERO)
            .protection(Duration::ZERO)
            .when_full(WhenFull::Refuse)
            .build()
            .unwrap(),
    );
    for key in 0..3 {
        limiter.try_acquire(&key, 1).unwrap(); // empty: its waiter waits 50 ms of the clock
    }
    let waiters: Vec<_> = (0..2)
        .map(|key| {
            let limiter = limiter.clone();
            thread::spawn(move || limiter.acquire_blocking(&key, 1))
        })
        .collect();
    // Both in line: pinned keys are protected.
    while limiter.protected_len() < 2 {
        thread::yield_now();
    }
    clock.advance(Duration::from_secs(3_600));
    // Key 2 has no waiter: evicted. Keys 0 and 1 stay, whatever their buckets read.
    assert_eq!(limiter.sweep(), 1);
    assert_eq!(limiter.len(), 2);
    assert_eq!(limiter.protected_len(), 2);
    for waiter in waiters {
        let waited = waiter.join().unwrap();
        assert!(waited.is_ok(), "{waited:?}");
    }
    // Each took the one token of its own bucket, kept through the sweep.
    assert_eq!(limiter.available(&0), 0);
    assert_eq!(limiter.available(&1), 0);
    assert_eq!(limiter.len(), 2);
}

/// Eviction pressure on a full table while every key has a waiter: a newcomer finds no
/// evictable bucket (however long the waited-on buckets read full), and is refused at once,
/// by `try_acquire` and by a wait alike, under `WhenFull::Refuse`. Once the waiters are
/// served, the keys are evictable again and the next newcomer gets a slot.
#[test]
fn a_full_table_evicts_no_key_with_waiters() {
    let clock: &'static ManualClock = Box::leak(Box::new(ManualClock::new()));
    let limiter: Arc<KeyedLimiter<u32, &'static ManualClock>> = Arc::new(
        KeyedLimiter::builder(per_second(20, 1), clock)
            .capacity(4)
            .shards(2)
            .probation(Duration::ZERO)
            .protection(Duration::ZERO)
            .when_full(WhenFull::Refuse)
            .build()
            .unwrap(),
    );
    for key in 0..4 {
        limiter.try_acquire(&key, 1).unwrap();
    }
    let waiters: Vec<_> = (0..4)
        .map(|key| {
            let limiter = limiter.clone();
            thread::spawn(move || limiter.acquire_blocking(&key, 1))
        })
        .collect();
    while limiter.protected_len() < 4 {
        thread::yield_now();
    }
    clock.advance(Duration::from_secs(3_600));
    let full = Err(KeyedDenied::Full { capacity: 4 });
    for newcomer in 100..110 {
        assert_eq!(limiter.try_acquire(&newcomer, 1), full);
        assert_eq!(
            limiter.acquire_blocking_timeout(&newcomer, 1, ms(10_000)),
            Err(KeyedDenied::Full { capacity: 4 })
        );
    }
    assert_eq!(limiter.len(), 4);
    assert!(limiter.until_room() > Duration::ZERO);
    for waiter in waiters {
        let waited = waiter.join().unwrap();
        assert!(waited.is_ok(), "{waited:?}");
    }
    // Served: each key holds nothing now, and is evictable once full again.
    assert_eq!(limiter.try_acquire(&100, 1), full, "no bucket is full yet");
    clock.advance(ms(50));
    assert_eq!(limiter.try_acquire(&100, 1), Ok(()));
}

/// What a newcomer's wait gets when the table is full: under `Refuse`, `Full` at once, with no
/// line joined and nothing taken; under `Admit`, a place in the overflow bucket's line, shared
/// by every such newcomer, in arrival order, at one key's rate.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn when_full_decides_a_newcomers_wait() {
    let start = Instant::now();
    let refuse = tokio_limiter::<u32>(per_second(1, 1), 1);
    refuse.acquire(&0, 1).await.unwrap();
    assert_eq!(
        refuse.acquire(&1, 1).await,
        Err(KeyedDenied::Full { capacity: 1 })
    );
    assert_eq!(start.elapsed(), Duration::ZERO);

    let admit: Arc<Tokio<u32>> = Arc::new(
        KeyedLimiter::try_new(per_second(1, 1), TokioClock::new(), 1, WhenFull::Admit).unwrap(),
    );
    admit.acquire(&0, 1).await.unwrap();
    // The overflow bucket's burst, at once; then its line, one a second, in arrival order.
    assert_eq!(admit.acquire(&1, 1).await, Ok(Duration::ZERO));
    let served = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = JoinSet::new();
    for newcomer in 2..6u32 {
        let (admit, served) = (admit.clone(), served.clone());
        tasks.spawn(async move {
            let waited = admit.acquire(&newcomer, 1).await.unwrap();
            served.lock().unwrap().push((newcomer, waited));
        });
        tokio::task::yield_now().await;
    }
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
    assert_eq!(
        *served.lock().unwrap(),
        [
            (2, ms(1_000)),
            (3, ms(2_000)),
            (4, ms(3_000)),
            (5, ms(4_000))
        ]
    );
    assert_eq!(admit.len(), 1, "no newcomer took a slot");
    // Above every burst: refused at once, with no key waited on in the shard and with one
    // (the wait then takes the line's path).
    let above = Err(KeyedDenied::Denied(Denied::ExceedsCapacity { burst: 1 }));
    assert_eq!(admit.acquire(&9, 2).await, above);
    let behind = {
        let admit = admit.clone();
        tokio::spawn(async move { admit.acquire(&0, 1).await })
    };
    tokio::task::yield_now().await;
    for newcomer in 10..20 {
        assert_eq!(admit.acquire(&newcomer, 2).await, above);
    }
    assert!(behind.await.unwrap().is_ok());
}

/// Sweeps running throughout the waits (as a server's timer runs them) evict only keys nobody
/// waits on: every waiter is served at its key's rate, and nothing is minted.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn sweeps_during_waits_evict_only_keys_nobody_waits_on() {
    let limiter: Arc<Tokio<u32>> = Arc::new(
        KeyedLimiter::builder(per_second(10, 1), TokioClock::new())
            .capacity(64)
            .probation(Duration::ZERO)
            .protection(Duration::ZERO)
            .when_full(WhenFull::Refuse)
            .build()
            .unwrap(),
    );
    let start = Instant::now();
    let stop = Arc::new(AtomicUsize::new(0));
    let evicted = Arc::new(AtomicUsize::new(0));
    let sweeper = {
        let (limiter, stop, evicted) = (limiter.clone(), stop.clone(), evicted.clone());
        tokio::spawn(async move {
            while stop.load(Ordering::Relaxed) == 0 {
                evicted.fetch_add(limiter.sweep(), Ordering::Relaxed);
                sleep(ms(7)).await;
            }
        })
    };
    let served: Arc<Mutex<HashMap<u32, Vec<Duration>>>> = Arc::default();
    let mut tasks = JoinSet::new();
    for task in 0..64u32 {
        let key = task % 16;
        let (limiter, served) = (limiter.clone(), served.clone());
        tasks.spawn(async move {
            // Keys come and go: each task waits for five tokens, with pauses that let its
            // key's bucket fill and be swept between them.
            for round in 0..5u64 {
                limiter.acquire(&key, 1).await.unwrap();
                served
                    .lock()
                    .unwrap()
                    .entry(key)
                    .or_default()
                    .push(start.elapsed());
                sleep(ms(((task as u64 * 37 + round * 101) % 500) + 1)).await;
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
    stop.store(1, Ordering::Relaxed);
    sweeper.await.unwrap();
    assert!(
        evicted.load(Ordering::Relaxed) > 0,
        "the sweeps evicted idle keys"
    );
    for (key, mut at) in served.lock().unwrap().clone() {
        at.sort();
        assert_eq!(at.len(), 20);
        // Never two grants of a key within its refill time (100 ms, less tokio's rounding).
        assert!(
            at.windows(2).all(|w| w[1] >= w[0] + ms(99)),
            "key {key}: {at:?}"
        );
    }
}

/// Blocking waits from threads, in real time: four threads on each of three keys at 50/s,
/// burst 1, twenty grants per key: no key is served faster than its rate (its twenty grants
/// span at least 19 refill times) nor stalls, and the keys run side by side.
#[test]
fn blocking_waits_from_threads_keep_each_keys_rate() {
    let limiter: Arc<KeyedLimiter<u32, tollgate::StdClock>> = Arc::new(
        KeyedLimiter::try_new(per_second(50, 1), tollgate::StdClock, 64, WhenFull::Refuse).unwrap(),
    );
    let start = std::time::Instant::now();
    let served: Arc<Mutex<HashMap<u32, Vec<Duration>>>> = Arc::default();
    let threads: Vec<_> = (0..12u32)
        .map(|t| {
            let (limiter, served) = (limiter.clone(), served.clone());
            thread::spawn(move || {
                let key = t % 3;
                for _ in 0..5 {
                    limiter.acquire_blocking(&key, 1).unwrap();
                    served
                        .lock()
                        .unwrap()
                        .entry(key)
                        .or_default()
                        .push(start.elapsed());
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    let elapsed = start.elapsed();
    for (key, mut at) in served.lock().unwrap().clone() {
        at.sort();
        assert_eq!(at.len(), 20);
        let span = at[19] - at[0];
        // 19 refill times of 20 ms; a grant may be seen late, so the span is read from the
        // first grant (at once) to the last, which cannot come before 380 ms.
        assert!(at[19] >= ms(380), "key {key}: {at:?}");
        assert!(span <= ms(3_000), "key {key} stalled: {at:?}");
    }
    // Side by side: three keys' 380 ms, not 3 × 380 ms end to end.
    assert!(elapsed <= ms(1_000) || cfg!(miri), "{elapsed:?}");
}

/// The waits' futures are `Send`: a server spawns them on a multi-threaded runtime, where
/// many workers wait on the same keys.
#[test]
fn keyed_waits_run_on_a_multi_threaded_runtime() {
    support::on_two_workers(async {
        let limiter = tokio_limiter::<u32>(per_second(100, 1), 64);
        let start = Instant::now();
        let mut tasks = JoinSet::new();
        for task in 0..40u32 {
            let limiter = limiter.clone();
            tasks.spawn(async move { limiter.acquire(&(task % 4), 1).await });
        }
        while let Some(done) = tasks.join_next().await {
            assert!(done.unwrap().is_ok());
        }
        // Ten a key at 100/s, burst 1: 90 ms at least, in parallel across the keys.
        let elapsed = start.elapsed();
        assert!(elapsed >= ms(89) && elapsed <= ms(2_000), "{elapsed:?}");
        let _ = timeout(ms(1), async {}).await;
    });
}

/// Counts the polls and wake-ups of the future it wraps, through a waker wrapping the task's.
struct CountWakes<F> {
    inner: Pin<Box<F>>,
    wakes: Arc<AtomicUsize>,
    polls: usize,
}

struct CountingWaker {
    wakes: Arc<AtomicUsize>,
    task: Waker,
}

impl Wake for CountingWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.wakes.fetch_add(1, Ordering::Relaxed);
        self.task.wake_by_ref();
    }
}

impl<F: Future> Future for CountWakes<F> {
    /// The inner output, the polls and the wake-ups it took.
    type Output = (F::Output, usize, usize);
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.polls += 1;
        let waker = Waker::from(Arc::new(CountingWaker {
            wakes: self.wakes.clone(),
            task: cx.waker().clone(),
        }));
        match self.inner.as_mut().poll(&mut Context::from_waker(&waker)) {
            Poll::Ready(out) => Poll::Ready((out, self.polls, self.wakes.load(Ordering::Relaxed))),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// One wake per waiter, per key: twenty callers on each of two keys at 5/s, burst 5 (room for
/// tokio's lateness, so no take ahead): the burst completes at its first poll, every other
/// caller sleeps once, is woken once and is served at its exact turn, with no re-check, and
/// the keys' lines run side by side.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn each_waiter_of_a_key_is_woken_once_and_polled_twice() {
    let limiter = tokio_limiter::<u8>(per_second(5, 5), 16);
    let mut callers = JoinSet::new();
    for caller in 0..40u64 {
        let limiter = limiter.clone();
        let key = (caller % 2) as u8;
        callers.spawn(async move {
            let (waited, polls, wakes) = CountWakes {
                inner: Box::pin(limiter.acquire(&key, 1)),
                wakes: Arc::default(),
                polls: 0,
            }
            .await;
            (caller, waited.unwrap(), polls, wakes)
        });
    }
    let mut seen = callers.join_all().await;
    seen.sort();
    let expected: Vec<_> = (0..40u64)
        .map(|caller| match caller / 2 {
            0..=4 => (caller, Duration::ZERO, 1, 0),
            turn => (caller, ms(200 * (turn - 4)), 2, 1),
        })
        .collect();
    assert_eq!(seen, expected);
}

/// A waiter dropped while it holds tokens taken ahead of their instant (a burst of one, too
/// small for tokio's timer: the head takes up to 2 ms early and sleeps to the instant holding
/// them) gives them back, and the waiter behind, handed the head when the dropped one took and
/// asleep until its own estimate a second later, is woken for them: served at the turn the
/// dropped one would have had. Without the refund the bucket is empty at 2 s; without the wake
/// the waiter behind sleeps to 2.998 s while the bucket caps the token it holds.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_keyed_wait_dropped_while_holding_its_take_ahead_gives_it_back() {
    let limiter = tokio_limiter::<u8>(per_second(1, 1), 16);
    let start = Instant::now();
    limiter.acquire(&1, 1).await.unwrap(); // empty from now on
    let first = {
        let limiter = limiter.clone();
        tokio::spawn(async move { limiter.acquire(&1, 1).await })
    };
    tokio::task::yield_now().await;
    // Due at 2 s, taken ahead at 1.998 s: dropped at 1.999 s, holding it.
    let dropped = {
        let limiter = limiter.clone();
        tokio::spawn(async move { timeout(ms(1_999), limiter.acquire(&1, 1)).await })
    };
    tokio::task::yield_now().await;
    let last = {
        let limiter = limiter.clone();
        tokio::spawn(async move {
            let waited = limiter.acquire(&1, 1).await;
            (waited, start.elapsed())
        })
    };
    assert_eq!(first.await.unwrap(), Ok(ms(1_000)));
    assert!(dropped.await.unwrap().is_err(), "given up at 1.999 s");
    assert_eq!(start.elapsed(), ms(1_999));
    assert_eq!(last.await.unwrap(), (Ok(ms(2_000)), ms(2_000)));
    assert_eq!(limiter.available(&1), 0);
}

/// A wait's future is small: the line's state is boxed, built only for a wait that waits, so
/// a server spawning a wait per request that takes at once allocates little.
#[test]
fn a_keyed_waits_future_is_small() {
    let limiter = KeyedLimiter::<u64, TokioClock>::try_new(
        per_second(1, 1),
        TokioClock::new(),
        16,
        WhenFull::Refuse,
    );
    let limiter = limiter.unwrap();
    let size = std::mem::size_of_val(&limiter.acquire(&1, 1));
    println!("future: {size} bytes");
    assert!(size <= 128, "{size} bytes");
}

/// Threads racing every path at once, in real time: blocking waits on more keys than the table
/// holds (so waits pin, add and are refused `Full`), `try_acquire` from others, and a thread
/// sweeping in a loop, with no windows (every full bucket evictable). Nothing deadlocks or
/// panics, no key is ever granted more than `burst + rate × elapsed`, and every line is closed
/// at the end.
#[test]
fn racing_waits_sweeps_and_a_full_table_keep_every_keys_bound() {
    const RATE: u64 = 200;
    let limiter: Arc<KeyedLimiter<u32, tollgate::StdClock>> = Arc::new(
        KeyedLimiter::builder(per_second(RATE, 1), tollgate::StdClock)
            .capacity(16)
            .shards(4)
            .probation(Duration::ZERO)
            .protection(Duration::ZERO)
            .when_full(WhenFull::Refuse)
            .build()
            .unwrap(),
    );
    let start = std::time::Instant::now();
    let run_for = ms(400);
    let granted: Arc<Vec<AtomicU64>> = Arc::new((0..32).map(|_| AtomicU64::new(0)).collect());
    let full = Arc::new(AtomicU64::new(0));
    let mut threads = Vec::new();
    for t in 0..6u32 {
        let (limiter, granted, full) = (limiter.clone(), granted.clone(), full.clone());
        threads.push(thread::spawn(move || {
            let mut i = t;
            while start.elapsed() < run_for {
                let key = (i * 7) % 32;
                i += 1;
                let result = if t % 3 == 0 {
                    limiter.try_acquire(&key, 1).map(|()| Duration::ZERO)
                } else {
                    limiter.acquire_blocking_timeout(&key, 1, ms(50))
                };
                match result {
                    Ok(_) => {
                        granted[key as usize].fetch_add(1, Ordering::Relaxed);
                    }
                    Err(KeyedDenied::Full { .. }) => {
                        full.fetch_add(1, Ordering::Relaxed);
                        thread::sleep(ms(1));
                    }
                    Err(KeyedDenied::Denied(Denied::Insufficient { .. })) => {}
                    Err(other) => panic!("{other}"),
                }
            }
        }));
    }
    {
        let limiter = limiter.clone();
        threads.push(thread::spawn(move || {
            while start.elapsed() < run_for {
                limiter.sweep();
                thread::yield_now();
            }
        }));
    }
    for thread in threads {
        thread.join().unwrap();
    }
    let elapsed = start.elapsed().as_secs_f64();
    let most = granted
        .iter()
        .map(|g| g.load(Ordering::Relaxed))
        .max()
        .unwrap();
    let total: u64 = granted.iter().map(|g| g.load(Ordering::Relaxed)).sum();
    println!(
        "{total} grants over 32 keys in {elapsed:.2} s, at most {most} a key (bound {:.0}), {} refused Full",
        1.0 + RATE as f64 * elapsed,
        full.load(Ordering::Relaxed)
    );
    // A key evicted while full and made anew is the same bucket as one kept: the bound holds
    // across evictions.
    assert!(
        most as f64 <= 1.0 + RATE as f64 * elapsed,
        "{most} in {elapsed} s"
    );
    assert!(total > 0);
    // Every waiter left: nothing is pinned, so a sweep once the buckets are full frees all.
    thread::sleep(ms(20));
    let held = limiter.len();
    assert_eq!(limiter.sweep(), held);
    assert!(limiter.is_empty(), "{} keys left", limiter.len());
}

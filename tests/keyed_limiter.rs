//! The sharded per-key limiter for servers, pinned with a manual clock.

use core::time::Duration;

use tollgate::{
    ConfigError, Denied, KeyedConfigError, KeyedDenied, KeyedLimiter, ManualClock, Quota, Rate,
    TokenBucket, WhenFull,
};

#[test]
fn a_flood_of_a_million_new_keys_stays_within_the_cap_and_a_steady_key_keeps_its_rate() {
    let clock = ManualClock::new();
    let quota = Quota::new(Rate::per_second(10)).burst(10);
    let cap = 10_000;
    let limiter = KeyedLimiter::try_new(quota, &clock, cap, WhenFull::Refuse).unwrap();
    // The steady client asks 100 times a second, ten times its rate; a bucket of its own is
    // the reference for every decision.
    let reference = TokenBucket::try_new(quota, &clock).unwrap();
    let steady = 0u64;
    let (mut steady_granted, mut refused_new, mut max_len) = (0u64, 0u64, 0usize);
    // The steady client is there before the flood; a client that first shows up while
    // the cap is saturated is refused like any other new key (the policy chosen above).
    assert_eq!(
        limiter.try_acquire(&steady, 1),
        reference.try_acquire(1).map_err(KeyedDenied::Denied)
    );
    steady_granted += 1;
    for i in 1..=1_000_000u64 {
        clock.advance(Duration::from_micros(1));
        match limiter.try_acquire(&i, 1) {
            Ok(()) => {}
            Err(KeyedDenied::Full { capacity }) => {
                assert_eq!(capacity, cap);
                refused_new += 1;
            }
            Err(other) => panic!("a new key was denied by its own bucket: {other:?}"),
        }
        if i % 10_000 == 0 {
            let expected = reference.try_acquire(1).map_err(KeyedDenied::Denied);
            let got = limiter.try_acquire(&steady, 1);
            assert_eq!(got, expected, "steady key at {i} µs");
            steady_granted += u64::from(got.is_ok());
        }
        if i % 1_000 == 0 {
            let len = limiter.len();
            assert!(len <= cap, "{len} keys at {i} µs");
            max_len = max_len.max(len);
        }
    }
    // 101 requests over one second at 10 a second from a full burst of 10:
    // floor(10 + 10 × 1) = 20 grants.
    assert_eq!(steady_granted, 20);
    assert_eq!(max_len, cap, "the flood reached the cap");
    assert!(refused_new > 800_000, "{refused_new} refused");
    assert!(limiter.available(&steady) <= 1);

    // Ten seconds later every bucket is full: a sweep gives back all but the steady key's,
    // protected since its second grant; a minute after that, it goes too.
    clock.advance(Duration::from_secs(10));
    assert_eq!(limiter.protected_len(), 1);
    assert_eq!(limiter.sweep(), limiter.capacity().min(max_len) - 1);
    assert_eq!(limiter.len(), 1);
    clock.advance(Duration::from_secs(60));
    assert_eq!(limiter.sweep(), 1);
    assert!(limiter.is_empty());
}

#[test]
fn only_full_buckets_are_evicted() {
    let clock = ManualClock::new();
    let quota = Quota::new(Rate::per_second(1)).burst(2);
    // One shard of two keys, so that the cap is exact for this small case.
    let limiter = KeyedLimiter::builder(quota, &clock)
        .capacity(2)
        .when_full(WhenFull::Refuse)
        .shards(1)
        .build()
        .unwrap();
    let full = Err(KeyedDenied::Full { capacity: 2 });
    // (ms since start, key, n, expected)
    let rows = [
        (0, "a", 2, Ok(())),
        (0, "b", 1, Ok(())),
        (0, "c", 1, full),
        (500, "c", 1, full),     // nothing full yet: the sweep was not even due
        (1_000, "c", 1, Ok(())), // b is full: evicted for c; a holds 1
        (
            1_000,
            "a",
            2,
            Err(KeyedDenied::Denied(Denied::Insufficient {
                retry_after: Duration::from_secs(1),
            })),
        ),
        (1_000, "a", 1, Ok(())),
        (1_000, "d", 1, full),
    ];
    let mut at = 0;
    for (ms, key, n, expected) in rows {
        clock.advance(Duration::from_millis(ms - at));
        at = ms;
        assert_eq!(limiter.try_acquire(&key, n), expected, "{key} at {ms} ms");
        assert!(limiter.len() <= 2);
    }
    assert_eq!(limiter.sweep(), 0);
    clock.advance(Duration::from_secs(1)); // c is full, a is not
    assert_eq!(limiter.sweep(), 1);
    assert_eq!(limiter.available(&"a"), 1);
    assert_eq!(limiter.len(), 1);
}

#[test]
fn fail_open_admits_untracked_keys_through_one_shared_overflow_bucket() {
    let clock = ManualClock::new();
    let quota = Quota::new(Rate::per_second(1)).burst(2);
    let limiter = KeyedLimiter::builder(quota, &clock)
        .capacity(1)
        .when_full(WhenFull::Admit)
        .shards(1)
        .build()
        .unwrap();
    let full = Err(KeyedDenied::Full { capacity: 1 });
    assert_eq!(limiter.try_acquire(&1, 2), Ok(()));
    assert_eq!(limiter.until_room(), Duration::ZERO); // the overflow bucket holds two
                                                      // Untracked keys share the overflow bucket: its burst, then its rate, for all of them.
                                                      // (ms since start, key, expected)
    let rows = [
        (0, 2, Ok(())),
        (0, 3, Ok(())),
        (0, 2, full),
        (0, 4, full),
        (1_000, 4, Ok(())), // the overflow bucket refilled one; key 1 is not full yet
        (1_000, 5, full),
    ];
    let mut at = 0;
    for (ms, key, expected) in rows {
        clock.advance(Duration::from_millis(ms - at));
        at = ms;
        assert_eq!(limiter.try_acquire(&key, 1), expected, "{key} at {ms} ms");
    }
    // The next overflow token is a second away, key 1's bucket full in one too.
    assert_eq!(limiter.until_room(), Duration::from_secs(1));
    assert_eq!(limiter.len(), 1);
    assert!(limiter.try_acquire(&1, 2).is_err()); // the tracked key is still limited
}

#[test]
fn bad_input_is_an_error() {
    let clock = ManualClock::new();
    let quota = Quota::new(Rate::per_second(1));
    let zero = KeyedLimiter::<u8, _>::try_new(quota, &clock, 0, WhenFull::Refuse);
    assert_eq!(zero.unwrap_err(), KeyedConfigError::ZeroCapacity);
    let bad = KeyedLimiter::<u8, _>::try_new(
        Quota::new(Rate::per_second(0)),
        &clock,
        9,
        WhenFull::Refuse,
    );
    assert_eq!(
        bad.unwrap_err(),
        KeyedConfigError::Quota(ConfigError::ZeroRate)
    );
    let limiter = KeyedLimiter::try_new(quota, &clock, 9, WhenFull::Refuse).unwrap();
    assert_eq!(
        limiter.try_acquire(&1u8, 2),
        Err(KeyedDenied::Denied(Denied::ExceedsCapacity { burst: 1 }))
    );
    assert_eq!(limiter.try_acquire(&1u8, 0), Ok(()));
    assert!(limiter.is_empty());
}

#[test]
fn threads_on_shared_keys_get_each_burst_exactly_once() {
    let clock = ManualClock::new();
    let quota = Quota::new(Rate::per_second(1)).burst(1_000);
    let limiter = KeyedLimiter::try_new(quota, &clock, 64, WhenFull::Refuse).unwrap();
    let granted: u64 = std::thread::scope(|s| {
        let workers: Vec<_> = (0..4u64)
            .map(|t| {
                let limiter = &limiter;
                s.spawn(move || {
                    (0..20_000u64)
                        .filter(|i| limiter.try_acquire(&((i + t) % 16), 1).is_ok())
                        .count() as u64
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).sum()
    });
    assert_eq!(granted, 16 * 1_000);
    assert_eq!(limiter.len(), 16);
}

//! The sharded per-key limiter for servers, pinned with a manual clock.

use core::time::Duration;
use std::hash::{BuildHasherDefault, DefaultHasher};

use tollgate::{
    ConfigError, DefaultWord, Denied, KeyedConfigError, KeyedDenied, KeyedLimiter, ManualClock,
    Quota, Rate, TokenBucket, WhenFull,
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
    // One shard of two keys, so that the cap is exact for this small case; no probation, so
    // that a full bucket may go at once.
    let limiter = KeyedLimiter::builder(quota, &clock)
        .capacity(2)
        .when_full(WhenFull::Refuse)
        .shards(1)
        .probation(Duration::ZERO)
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
            Err(KeyedDenied::Denied(Denied::insufficient(
                Duration::from_secs(1),
            ))),
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

/// Hashes every key to the same value: the worst a hasher can do.
#[derive(Default)]
struct OneHash;

impl core::hash::Hasher for OneHash {
    fn finish(&self) -> u64 {
        0x5555_5555_5555_5555
    }
    fn write(&mut self, _bytes: &[u8]) {}
}

/// The hasher changes where keys sit, never a decision: the default, std's SipHash and a
/// hasher under which every key collides (one probe chain) answer the same sequence the same
/// way, on one tier and on several, through refusals, evictions and tier changes. One shard,
/// so that which keys a round of sweeps reaches first does not depend on the hash either.
#[test]
fn any_hasher_gives_the_same_decisions_even_one_where_every_key_collides() {
    use core::hash::BuildHasherDefault;
    use std::collections::hash_map::RandomState;
    use tollgate::Tier;

    let clock = ManualClock::new();
    let quota = Quota::new(Rate::per_second(10)).burst(3);
    let paid = Quota::new(Rate::per_second(100)).burst(20);
    let tier_of = |key: &u64| Tier(u8::from(key % 5 == 0));
    let build = |tiered: bool| {
        let builder = KeyedLimiter::<u64, _>::builder(quota, &clock)
            .capacity(64)
            .shards(1);
        if tiered {
            builder.tiers([paid], tier_of)
        } else {
            builder
        }
    };
    for tiered in [false, true] {
        let default = build(tiered).build().unwrap();
        let sip = build(tiered).hasher(RandomState::new()).build().unwrap();
        let colliding = build(tiered)
            .hasher(BuildHasherDefault::<OneHash>::default())
            .build()
            .unwrap();
        for step in 0..3_000u64 {
            clock.advance(Duration::from_millis(7));
            // 100 keys against a capacity of 64: refusals, sweeps and evictions on the way.
            let key = (step * 37) % 100;
            let n = 1 + (step % 3) as u32;
            let expected = default.try_acquire(&key, n);
            assert_eq!(sip.try_acquire(&key, n), expected, "step {step}");
            assert_eq!(colliding.try_acquire(&key, n), expected, "step {step}");
            if tiered && step % 500 == 250 {
                let expected = default.set_tier(&key, Tier(0));
                assert_eq!(sip.set_tier(&key, Tier(0)), expected);
                assert_eq!(colliding.set_tier(&key, Tier(0)), expected);
            }
            if step % 1_000 == 999 {
                let swept = default.sweep();
                assert_eq!(sip.sweep(), swept);
                assert_eq!(colliding.sweep(), swept);
            }
        }
        for key in 0..100 {
            assert_eq!(sip.available(&key), default.available(&key), "key {key}");
            assert_eq!(colliding.available(&key), default.available(&key));
            assert_eq!(colliding.tier(&key), default.tier(&key));
        }
        assert_eq!(colliding.len(), default.len());
        assert_eq!(colliding.protected_len(), default.protected_len());
    }
}

/// A limiter whose memory is weighed: eight shards, `u64` keys whose buckets stay busy for a
/// minute, and a fixed hasher, so that the shards' shares are the same in every run.
fn weighed(
    capacity: usize,
    clock: &ManualClock,
) -> KeyedLimiter<u64, &ManualClock, DefaultWord, BuildHasherDefault<DefaultHasher>> {
    KeyedLimiter::builder(Quota::new(Rate::per_minute(1)).burst(10), clock)
        .capacity(capacity)
        .shards(8)
        .hasher(Fixed::default())
        .when_full(WhenFull::Refuse)
        .build()
        .unwrap()
}

#[test]
fn held_keys_cost_at_most_the_stated_slots_each_at_every_key_count() {
    // `u64` keys on the 64-bit word: 16-byte entries, seven to a 128-byte group, 18.3 bytes a
    // slot. Eight shards spread over a doubling and tables that double at fifteen sixteenths
    // full hold 1.43 to 1.62 slots per key at any count: at most 29.6 bytes, shards included.
    // Doubling at seven eighths they held up to 1.8 (32.9 bytes at 14 000 keys, 31.5 at
    // 100 000).
    let clock = ManualClock::new();
    let counts = [
        10_000u64, 14_000, 20_000, 28_000, 56_000, 100_000, 113_000, 200_000,
    ];
    for keys in counts {
        let limiter = weighed(2 * keys as usize, &clock);
        for key in 0..keys {
            limiter.try_acquire(&key, 1).unwrap();
        }
        let per_key = limiter.heap_bytes() as f64 / keys as f64;
        assert!(per_key <= 29.5, "{keys} keys: {per_key:.2} bytes per key");
    }
}

#[test]
fn a_limiter_at_its_capacity_holds_its_keys_in_nearly_full_tables() {
    // Each shard's tables grow to what its share of the capacity needs rather than doubling past
    // it: at capacity, after a flood of refused new keys, `u64` keys cost at most 22 bytes each
    // (18.3-byte slots 0.85 to 0.91 full, shards included: 21.6 bytes at 10 000, 20.2 at
    // 100 000), where tables doubling past it held 26.4 to 28.9. The capacities fall at several
    // points between two doublings.
    let clock = ManualClock::new();
    for capacity in [10_000u64, 37_000, 100_000, 150_000] {
        let limiter = weighed(capacity as usize, &clock);
        for key in 0..capacity {
            limiter.try_acquire(&key, 1).unwrap();
        }
        for key in capacity..capacity * 2 {
            assert!(matches!(
                limiter.try_acquire(&key, 1),
                Err(KeyedDenied::Full { .. })
            ));
        }
        assert_eq!(limiter.len(), capacity as usize);
        let per_key = limiter.heap_bytes() as f64 / capacity as f64;
        assert!(
            per_key <= 22.0,
            "{capacity} keys: {per_key:.2} bytes per key"
        );
    }
}

#[test]
fn a_capacity_of_every_key_there_can_be_plans_no_table_past_its_doublings() {
    // Each shard's tables are planned for its share of the capacity: at `usize::MAX` keys the
    // plan is far beyond any table, which then only doubles (no arithmetic on the plan
    // overflows), and every key stays found. On one shard the plan is all of them.
    let clock = ManualClock::new();
    for shards in [1, 4] {
        let limiter = KeyedLimiter::builder(Quota::new(Rate::per_minute(1)).burst(10), &clock)
            .capacity(usize::MAX)
            .shards(shards)
            .build()
            .unwrap();
        for key in 0..5_000u64 {
            limiter.try_acquire(&key, 1).unwrap();
        }
        for key in 0..5_000u64 {
            assert_eq!(limiter.available(&key), 9);
        }
        assert_eq!(limiter.len(), 5_000);
        // Tables that only double: no more than 2.2 slots of 18.3 bytes per key.
        assert!(limiter.heap_bytes() <= 5_000 * 41);
    }
}

#[test]
fn threads_racing_for_the_last_slot_with_one_new_key_all_find_its_bucket() {
    // One slot left, four threads asking for the same new key at once: one adds it, and the
    // others, finding the limiter full, must find the key's bucket and take from it (a refusal
    // as `Full` would be wrong: the key is held). Repeated, so that the threads meet at every
    // point of the insertion.
    use std::sync::Barrier;
    let clock = ManualClock::new();
    let quota = Quota::new(Rate::per_minute(1)).burst(10);
    for round in 0..if cfg!(miri) { 5 } else { 2_000 } {
        let limiter = KeyedLimiter::try_new(quota, &clock, 8, WhenFull::Refuse).unwrap();
        for key in 0..7u64 {
            limiter.try_acquire(&key, 1).unwrap();
        }
        let barrier = Barrier::new(4);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    barrier.wait();
                    assert_eq!(limiter.try_acquire(&1_000, 1), Ok(()), "round {round}");
                });
            }
        });
        assert_eq!(limiter.len(), 8);
        assert_eq!(limiter.available(&1_000), 6);
    }
}

#[path = "keyed/gate.rs"]
mod gate;

/// A thread reads the clock, then waits (on the shard's lock, or descheduled) while the key is
/// drained, refills, is evicted and comes back: the bucket it then makes for the key starts at
/// a reading taken under the lock that makes it, not at its own stale one, which would undo
/// the grants made in between. 1/s, burst 2: at most 2 + 3 = 5 tokens over [0 s, 3 s].
#[test]
fn a_reader_delayed_past_an_eviction_never_mints() {
    let quota = Quota::new(Rate::per_second(1)).burst(2);
    type Gated<'c> = KeyedLimiter<u64, &'c gate::GateClock>;
    let by_sweep = |limiter: &Gated| {
        assert_eq!(limiter.sweep(), 2);
    };
    // At the capacity, the newcomer's round evicts both full buckets and takes one slot.
    let by_newcomer = |limiter: &Gated| {
        assert_eq!(limiter.len(), 2);
        assert_eq!(limiter.try_acquire(&99, 1), Ok(()));
    };
    let evictions: [&dyn Fn(&Gated); 2] = [&by_sweep, &by_newcomer];
    for evict in evictions {
        let clock = gate::GateClock::new();
        // No protection: the key's second grant protects it, and it must go once full.
        let limiter = KeyedLimiter::<u64, _>::builder(quota, &clock)
            .capacity(2)
            .shards(1)
            .protection(Duration::ZERO)
            .build()
            .unwrap();
        let key = 7u64;
        let mut granted = 0;
        std::thread::scope(|scope| {
            assert_eq!(limiter.try_acquire(&key, 2), Ok(()));
            granted += 2;
            assert_eq!(
                limiter.try_acquire(&98, 1),
                Ok(()),
                "another key, full at 1 s"
            );
            clock.advance(Duration::from_secs(1));
            // Reads 1 s, then waits.
            let late = gate::hold(scope, || limiter.try_acquire(&key, 2));
            assert_eq!(
                limiter.try_acquire(&key, 1),
                Ok(()),
                "one token back at 1 s"
            );
            granted += 1;
            clock.advance(Duration::from_secs(2)); // full again at 3 s
            evict(&limiter);
            assert_eq!(
                limiter.tier(&key),
                None,
                "the full bucket is evicted at 3 s"
            );
            if late.release().0.is_ok() {
                granted += 2;
            }
            while limiter.try_acquire(&key, 1).is_ok() {
                granted += 1;
            }
        });
        assert_eq!(granted, 5, "burst 2 + 1/s × 3 s over [0 s, 3 s]");
    }
}

/// A key moved to a faster tier is evictable as soon as it is full on that tier: the round of
/// sweeps that frees its slot is brought forward to then, not left at its old tier's time.
#[test]
fn a_key_moved_to_a_faster_tier_is_evictable_when_full_on_it() {
    let clock = ManualClock::new();
    let slow = Quota::new(Rate::per_second(1)).burst(1);
    let fast = Quota::new(Rate::per_second(4)).burst(1);
    let limiter = KeyedLimiter::<u64, _>::builder(slow, &clock)
        .capacity(1)
        .shards(1)
        .probation(Duration::ZERO)
        .tiers([fast], |_| tollgate::Tier(0))
        .build()
        .unwrap();
    let full = Err(KeyedDenied::Full { capacity: 1 });
    assert_eq!(limiter.try_acquire(&1, 1), Ok(())); // full again at 1 000 ms on its tier
    assert_eq!(limiter.try_acquire(&2, 1), full);
    // Empty, at 4/s: full at 250 ms.
    assert_eq!(limiter.set_tier(&1, tollgate::Tier(1)), Ok(true));
    clock.advance(Duration::from_millis(249));
    assert_eq!(limiter.try_acquire(&2, 1), full, "at 249 ms");
    clock.advance(Duration::from_millis(1));
    assert_eq!(limiter.try_acquire(&2, 1), Ok(()), "at 250 ms");
    assert_eq!(limiter.tier(&1), None);
    assert_eq!(limiter.len(), 1);
}

/// A hasher that lays keys out the same way in every run.
type Fixed = BuildHasherDefault<DefaultHasher>;

/// Which of a key's traits panics.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Trait {
    Hash,
    Eq,
    Clone,
}

std::thread_local! {
    /// While a step runs: the trait that panics, at which of its calls, and its calls so far.
    static CHAOS: std::cell::Cell<Option<(Trait, u32, u32)>> = const { std::cell::Cell::new(None) };
}

/// Counts a call of `which` and panics if it is the one chosen.
fn call(which: Trait) {
    if let Some((chosen, at, calls)) = CHAOS.get() {
        if chosen == which {
            CHAOS.set(Some((chosen, at, calls + 1)));
            if calls + 1 == at {
                panic!("{which:?} panics at its call {at}");
            }
        }
    }
}

/// A key whose `Hash`, `Eq` or `Clone` panics when the test says so.
#[derive(Debug)]
struct Touchy(u64);

impl std::hash::Hash for Touchy {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        call(Trait::Hash);
        self.0.hash(state);
    }
}

impl PartialEq for Touchy {
    fn eq(&self, other: &Self) -> bool {
        call(Trait::Eq);
        self.0 == other.0
    }
}

impl Eq for Touchy {}

impl Clone for Touchy {
    fn clone(&self) -> Self {
        call(Trait::Clone);
        Touchy(self.0)
    }
}

/// A panicking `Hash`, `Eq` or `Clone`, at every call it makes in turn over a script that grows
/// both tables of a shard, protects keys, sweeps and refills, leaves the limiter with every
/// other key and its whole capacity: the count reads the keys held, every key held and not full
/// before a step that panicked (but the step's own) is held after it, and once all are evicted the
/// limiter holds its capacity of new keys and protects its share of them.
#[test]
fn a_key_whose_hash_eq_or_clone_panics_takes_no_other_key_and_no_capacity() {
    // The panics are the test's own: not printed.
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let ours = info.payload().downcast_ref::<String>();
        if !ours.is_some_and(|message| message.contains(" panics at its call ")) {
            report(info);
        }
    }));
    const CAPACITY: usize = 16;
    const PROTECTED: usize = CAPACITY - CAPACITY / 4;
    enum Step {
        Take(u64),
        Advance(u64),
        Sweep,
    }
    // Eight keys fill a group of seven and grow the table; their second grants protect them and
    // grow the protected table; the sweep rehashes what it evicts.
    let mut script: Vec<Step> = Vec::new();
    script.extend((0..8).map(Step::Take));
    script.extend((0..8).map(Step::Take));
    script.extend([Step::Advance(2_000), Step::Sweep]);
    script.extend((8..16).map(Step::Take));
    script.extend([Step::Advance(2_000)]);
    script.extend((16..24).map(Step::Take));
    script.extend([Step::Take(3), Step::Sweep]);
    let quota = Quota::new(Rate::per_second(1)).burst(2);
    let keys = 0..24u64;
    let run = |chaos: Option<(Trait, u32)>| -> (u32, bool) {
        let clock = ManualClock::new();
        // A fixed hasher: every run lays the keys out alike, so calls are counted alike.
        let limiter = KeyedLimiter::<Touchy, _>::builder(quota, &clock)
            .capacity(CAPACITY)
            .shards(1)
            .protection(Duration::from_secs(1))
            .hasher(Fixed::default())
            .build()
            .unwrap();
        let held = |limiter: &KeyedLimiter<Touchy, &ManualClock, DefaultWord, Fixed>| -> Vec<u64> {
            keys.clone()
                .filter(|&k| limiter.tier(&Touchy(k)).is_some())
                .collect()
        };
        let (mut calls, mut panicked) = (0, false);
        for step in &script {
            // Eviction takes only full buckets: these must stay.
            let before: Vec<u64> = held(&limiter)
                .into_iter()
                .filter(|&k| limiter.available(&Touchy(k)) < 2)
                .collect();
            CHAOS.set(chaos.map(|(which, at)| (which, at, calls)));
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match step {
                Step::Take(key) => drop(limiter.try_acquire(&Touchy(*key), 1)),
                Step::Advance(ms) => clock.advance(Duration::from_millis(*ms)),
                Step::Sweep => drop(limiter.sweep()),
            }));
            calls = CHAOS.take().map_or(0, |(_, _, calls)| calls);
            let after = held(&limiter);
            assert_eq!(
                limiter.len(),
                after.len(),
                "{chaos:?}: the count is the keys held"
            );
            if result.is_err() {
                panicked = true;
                if let Step::Take(key) = step {
                    let lost: Vec<_> = before
                        .iter()
                        .filter(|&k| k != key && !after.contains(k))
                        .collect();
                    assert!(lost.is_empty(), "{chaos:?}: keys {lost:?} lost");
                }
            }
        }
        // Everything full and past its window: all of it goes, and every count with it.
        clock.advance(Duration::from_secs(10));
        limiter.sweep();
        assert_eq!(
            (limiter.len(), limiter.protected_len()),
            (0, 0),
            "{chaos:?}"
        );
        for key in 100..100 + CAPACITY as u64 {
            assert_eq!(
                limiter.try_acquire(&Touchy(key), 1),
                Ok(()),
                "{chaos:?}: {key}"
            );
        }
        let full = Err(KeyedDenied::Full { capacity: CAPACITY });
        assert_eq!(limiter.try_acquire(&Touchy(999), 1), full, "{chaos:?}");
        for key in 100..100 + CAPACITY as u64 {
            assert_eq!(
                limiter.try_acquire(&Touchy(key), 1),
                Ok(()),
                "{chaos:?}: {key}"
            );
        }
        assert_eq!(limiter.protected_len(), PROTECTED, "{chaos:?}");
        (calls, panicked)
    };
    for which in [Trait::Hash, Trait::Eq, Trait::Clone] {
        let (calls, _) = run(Some((which, 0)));
        assert!(calls > 20, "{which:?} is called {calls} times");
        for at in 1..=calls {
            assert!(run(Some((which, at))).1, "{which:?} at its call {at}");
        }
    }
}

/// A bucket that is not protected stays for the probation window once full, and the time a
/// refused newcomer is told to wait counts it: capacity 1, 1/s, burst 1, a second of probation.
#[test]
fn an_unprotected_bucket_goes_once_full_for_the_probation_window_and_until_room_says_when() {
    let clock = ManualClock::new();
    let quota = Quota::new(Rate::per_second(1)).burst(1);
    let limiter = KeyedLimiter::<u64, _>::builder(quota, &clock)
        .capacity(1)
        .shards(1)
        .probation(Duration::from_secs(1))
        .build()
        .unwrap();
    let full = Err(KeyedDenied::Full { capacity: 1 });
    assert_eq!(limiter.try_acquire(&1, 1), Ok(())); // full again at 1 s
                                                    // (ms since start, newcomer, its answer, until_room after it)
    let rows = [
        (0, 2, full, 2_000),
        (1_000, 2, full, 1_000), // 1 is full, on probation
        (1_999, 2, full, 1),
        (2_000, 2, Ok(()), 2_000), // 1 evicted; 2 full at 3 s, evictable at 4 s
        (3_000, 3, full, 1_000),
        (4_000, 3, Ok(()), 2_000),
    ];
    let mut at = 0;
    for (ms, key, expected, room_ms) in rows {
        clock.advance(Duration::from_millis(ms - at));
        at = ms;
        assert_eq!(limiter.try_acquire(&key, 1), expected, "{key} at {ms} ms");
        assert_eq!(
            limiter.until_room(),
            Duration::from_millis(room_ms),
            "at {ms} ms"
        );
    }
    assert_eq!(limiter.tier(&1), None);
}

//! Per-key limits under a flood of new keys, pinned with a manual clock: the cap is the cap on
//! every shard count, and a key that keeps within its quota keeps every grant whatever the
//! flood and whichever `WhenFull` is chosen.

use core::time::Duration;

use std::net::{IpAddr, Ipv6Addr};

use tollgate::{
    IpPrefix, KeyedDenied, KeyedLimiter, KeyedTable, ManualClock, Quota, Rate, TokenBucket,
    WhenFull,
};

const MS: Duration = Duration::from_millis(1);

#[test]
fn the_cap_is_the_cap_on_every_shard_count() {
    let quota = Quota::new(Rate::per_second(10)).burst(10);
    for shards in [1, 4, 64, 1_024] {
        for capacity in [1, 17, 64, 1_000, 4_096] {
            let clock = ManualClock::new();
            let limiter = KeyedLimiter::builder(quota, &clock)
                .capacity(capacity)
                .when_full(WhenFull::Refuse)
                .shards(shards)
                .build()
                .unwrap();
            let at = format!("{capacity} keys over {shards} shards");
            for key in 0..capacity as u64 {
                assert_eq!(limiter.try_acquire(&key, 1), Ok(()), "key {key}, {at}");
            }
            assert_eq!(limiter.len(), capacity, "{at}");
            // Nothing is full (the clock stands still): the next key is refused, and only now.
            let full = Err(KeyedDenied::Full { capacity });
            assert_eq!(limiter.try_acquire(&u64::MAX, 1), full, "{at}");
            assert_eq!(limiter.len(), capacity, "{at}");
            // A tenth of a second later every bucket is full again, and a second (the probation
            // window) after that may go: as many new keys take their slots, the count stays at
            // the cap, and the one after is refused again.
            clock.advance(1_100 * MS);
            for key in capacity as u64..2 * capacity as u64 {
                assert_eq!(limiter.try_acquire(&key, 1), Ok(()), "key {key}, {at}");
                assert!(limiter.len() <= capacity, "{at}");
            }
            assert_eq!(limiter.len(), capacity, "{at}");
            assert_eq!(limiter.try_acquire(&u64::MAX, 1), full, "{at}");
        }
    }
}

/// One flood, direct: `attackers_per_second` new keys, each draining its whole burst, for
/// `seconds`, while a polite key asks at half its rate. Returns (polite grants, polite asks).
trait Keyed {
    fn try_acquire(&self, key: u64, n: u32) -> Result<(), KeyedDenied>;
    fn len(&self) -> usize;
    fn capacity(&self) -> usize;
}

impl Keyed for KeyedLimiter<u64, &ManualClock> {
    fn try_acquire(&self, key: u64, n: u32) -> Result<(), KeyedDenied> {
        KeyedLimiter::try_acquire(self, &key, n)
    }
    fn len(&self) -> usize {
        KeyedLimiter::len(self)
    }
    fn capacity(&self) -> usize {
        KeyedLimiter::capacity(self)
    }
}

impl<const N: usize> Keyed for KeyedTable<u64, &ManualClock, N> {
    fn try_acquire(&self, key: u64, n: u32) -> Result<(), KeyedDenied> {
        KeyedTable::try_acquire(self, key, n)
    }
    fn len(&self) -> usize {
        KeyedTable::len(self)
    }
    fn capacity(&self) -> usize {
        KeyedTable::capacity(self)
    }
}

struct Flood {
    polite_granted: u64,
    polite_asked: u64,
    attacker_granted: u64,
    attacker_asked: u64,
}

const QUOTA: Quota = Quota::new(Rate::per_second(10)).burst(10);
const POLITE: u64 = u64::MAX;

fn flood(table: &dyn Keyed, clock: &ManualClock, attackers_per_second: u64) -> Flood {
    flood_with(table, clock, attackers_per_second, &[10])
}

/// The flood, each attacker key asking for `per_key` tokens in turn: `[10]` drains its burst at
/// once; `[5, 5]` drains it in two grants, and so comes back and is protected.
fn flood_with(
    table: &dyn Keyed,
    clock: &ManualClock,
    attackers_per_second: u64,
    per_key: &[u32],
) -> Flood {
    // The polite key: one request every 200 ms, half its rate, checked against a bucket of its
    // own. It is there before the flood: two requests, 200 ms apart.
    let reference = TokenBucket::try_new(QUOTA, clock).unwrap();
    let mut result = Flood {
        polite_granted: 0,
        polite_asked: 0,
        attacker_granted: 0,
        attacker_asked: 0,
    };
    let polite = |result: &mut Flood| {
        let got = table.try_acquire(POLITE, 1);
        assert_eq!(got.is_ok(), reference.try_acquire(1).is_ok());
        result.polite_asked += 1;
        result.polite_granted += u64::from(got.is_ok());
    };
    polite(&mut result);
    clock.advance(200 * MS);
    polite(&mut result);
    // Five seconds of flood, in steps of 1 ms.
    let per_ms = attackers_per_second / 1_000;
    let mut next_key = 0u64;
    for ms in 1..=5_000u64 {
        clock.advance(MS);
        for _ in 0..per_ms {
            // Each attacker key drains its burst: its bucket stays short of full the longest.
            for &n in per_key {
                let got = table.try_acquire(next_key, n);
                result.attacker_asked += 1;
                result.attacker_granted += u64::from(got.is_ok());
            }
            next_key += 1;
        }
        if ms % 200 == 0 {
            polite(&mut result);
        }
        assert!(table.len() <= table.capacity());
    }
    assert_eq!(table.len(), table.capacity(), "the flood filled the table");
    result
}

fn assert_polite_kept_its_grants(flood: &Flood, at: &str) {
    // 27 requests at half the rate: every one is within the quota, so all are granted.
    assert_eq!(flood.polite_asked, 27, "{at}");
    assert!(
        flood.polite_granted * 100 >= flood.polite_asked * 99,
        "{at}: polite {} of {}",
        flood.polite_granted,
        flood.polite_asked
    );
    assert_eq!(flood.polite_granted, flood.polite_asked, "{at}");
}

#[test]
fn a_polite_key_keeps_its_grants_in_a_keyed_limiter_under_any_flood_and_either_policy() {
    for when_full in [WhenFull::Refuse, WhenFull::Admit] {
        for (attackers_per_second, shards) in [(10_000, 4), (100_000, 64), (100_000, 1)] {
            let clock = ManualClock::new();
            let limiter = KeyedLimiter::builder(QUOTA, &clock)
                .capacity(1_000)
                .when_full(when_full)
                .shards(shards)
                .build()
                .unwrap();
            let result = flood(&limiter, &clock, attackers_per_second);
            let at = format!("{when_full:?}, {attackers_per_second} new keys/s, {shards} shards");
            assert_polite_kept_its_grants(&result, &at);
            assert_eq!(limiter.protected_len(), 1, "{at}");
            // The attacker's new keys got what the table had room for, and under Admit one
            // key's rate more from the shared overflow bucket: never unlimited.
            let seconds = 5;
            let room = 1_000 + seconds * 1_000; // the cap, then a slot per key refilled (1 s)
            let overflow = match when_full {
                WhenFull::Admit => (10 + 10 * seconds) / 10, // one key's rate, 10 tokens a key
                WhenFull::Refuse => 0,
            };
            assert!(
                result.attacker_granted <= room + overflow,
                "{at}: {} of {} attacker keys granted",
                result.attacker_granted,
                result.attacker_asked
            );
        }
    }
}

#[test]
fn a_polite_key_keeps_its_grants_in_a_keyed_table_under_any_flood_and_either_policy() {
    for when_full in [WhenFull::Refuse, WhenFull::Admit] {
        for attackers_per_second in [1_000, 100_000] {
            let clock = ManualClock::new();
            let table = KeyedTable::<u64, _, 64>::try_new(QUOTA, &clock, when_full).unwrap();
            let result = flood(&table, &clock, attackers_per_second);
            let at = format!("{when_full:?}, {attackers_per_second} new keys/s");
            assert_polite_kept_its_grants(&result, &at);
            assert_eq!(table.protected_len(), 1, "{at}");
        }
    }
}

#[test]
fn returning_attackers_take_the_protected_share_but_not_the_polite_keys_slot() {
    // Each attacker key comes back once, so that it is protected too: the attacker fills the
    // protected share (three quarters) and keeps it, but cannot take a protected slot.
    for when_full in [WhenFull::Refuse, WhenFull::Admit] {
        let clock = ManualClock::new();
        let limiter = KeyedLimiter::builder(QUOTA, &clock)
            .capacity(1_000)
            .when_full(when_full)
            .shards(8)
            .build()
            .unwrap();
        let result = flood_with(&limiter, &clock, 20_000, &[5, 5]);
        let at = format!("limiter, {when_full:?}");
        assert_polite_kept_its_grants(&result, &at);
        assert_eq!(limiter.protected_len(), 750, "{at}");

        let clock = ManualClock::new();
        let table = KeyedTable::<u64, _, 64>::try_new(QUOTA, &clock, when_full).unwrap();
        let result = flood_with(&table, &clock, 20_000, &[5, 5]);
        let at = format!("table, {when_full:?}");
        assert_polite_kept_its_grants(&result, &at);
        assert_eq!(table.protected_len(), 48, "{at}");
    }
}

#[test]
fn a_protected_key_keeps_its_slot_for_the_window_and_then_gives_it_up() {
    let clock = ManualClock::new();
    let quota = Quota::new(Rate::per_second(1)).burst(1);
    let table =
        KeyedTable::<u8, _, 2>::with_protection(quota, &clock, WhenFull::Refuse, 10 * 1_000 * MS);
    let full = Err(KeyedDenied::Full { capacity: 2 });
    // (ms since start, key, expected, protected keys after)
    let rows = [
        (0, 1, Ok(()), 0),
        (1_000, 1, Ok(()), 1), // a second grant while held: protected
        (1_000, 2, Ok(()), 1),
        (2_000, 2, Ok(()), 2), // protected too (two of two slots: N - N / 4 = 2)
        (2_000, 3, full, 2),   // nothing is full
        (5_000, 3, full, 2),   // both full, but protected for ten seconds once full
        (11_999, 3, full, 2),
        (12_000, 3, Ok(()), 1), // key 1 has been full for ten seconds (since 2 s): it goes
        (12_500, 4, full, 1),   // key 2 full for 9.5 s, key 3 not full
        (13_000, 4, Ok(()), 1), // keys 2 and 3 may go; 3, not protected, goes first
        (13_000, 5, Ok(()), 0), // then key 2, full for ten seconds
        (13_000, 6, full, 0),
    ];
    let mut at = 0;
    for (ms, key, expected, protected) in rows {
        clock.advance((ms - at) * MS);
        at = ms;
        assert_eq!(table.try_acquire(key, 1), expected, "{key} at {ms} ms");
        assert_eq!(table.protected_len(), protected, "{key} at {ms} ms");
        if ms == 12_500 {
            // Key 3 is full and key 2's window ends at 13 s: that is when there is room.
            assert_eq!(table.until_room(), 500 * MS);
        }
    }
}

#[test]
fn a_polite_key_in_a_limiter_keeps_its_slot_and_an_idle_one_gives_it_up() {
    let clock = ManualClock::new();
    let quota = Quota::new(Rate::per_second(1)).burst(1);
    let limiter = KeyedLimiter::builder(quota, &clock)
        .capacity(2)
        .when_full(WhenFull::Refuse)
        .shards(2)
        .build()
        .unwrap()
        .with_protection(Duration::from_secs(10));
    for key in [1u8, 2] {
        assert_eq!(limiter.try_acquire(&key, 1), Ok(()));
    }
    clock.advance(Duration::from_secs(1));
    for key in [1u8, 2] {
        assert_eq!(limiter.try_acquire(&key, 1), Ok(()));
    }
    assert_eq!(limiter.protected_len(), 2);
    let full = Err(KeyedDenied::Full { capacity: 2 });
    clock.advance(Duration::from_secs(5));
    assert_eq!(limiter.try_acquire(&3, 1), full);
    // Full since 2 s, protected until 12 s: the 503 says so.
    assert_eq!(limiter.until_room(), Duration::from_secs(6));
    clock.advance(Duration::from_secs(6));
    assert_eq!(limiter.try_acquire(&3, 1), Ok(()));
    // The round that made room evicted both keys past their window.
    assert_eq!(limiter.len(), 1);
    assert_eq!(limiter.protected_len(), 0);
    assert_eq!(limiter.sweep(), 0);
}

#[test]
fn touch_all_keeps_every_key_of_a_32_bit_table_readable_and_evictable() {
    // A fast rate: its 32-bit word's horizon is about an hour on a nanosecond clock.
    let clock = ManualClock::new();
    let quota = Quota::new(Rate::per_second(50_001)).burst(10);
    let table = KeyedTable::<u16, _, 2, u32>::try_new(quota, &clock, WhenFull::Refuse).unwrap();
    let horizon = table.idle_horizon();
    assert!(horizon >= Duration::from_secs(3_600), "{horizon:?}");
    let step = horizon / 2;
    for key in [1u16, 2] {
        assert_eq!(table.try_acquire(key, 10), Ok(()));
    }
    // Quiet for ten horizons, touched every half horizon: the buckets read full...
    for _ in 0..20 {
        clock.advance(step);
        table.touch_all();
    }
    assert_eq!(table.available(&1), 10);
    assert_eq!(table.try_acquire(1, 10), Ok(()));
    // ... and key 2's slot, full all along, is free for a newcomer.
    assert_eq!(table.try_acquire(3, 1), Ok(()));
    assert_eq!(table.len(), 2);
    assert_eq!(table.available(&2), 10); // evicted: reads as the start fill

    let limiter = KeyedLimiter::<u16, _>::builder(quota, &clock)
        .capacity(2)
        .when_full(WhenFull::Refuse)
        .word::<u32>()
        .build()
        .unwrap();
    for key in [1u16, 2] {
        assert_eq!(limiter.try_acquire(&key, 10), Ok(()));
    }
    for round in 0..20 {
        clock.advance(step);
        if round % 2 == 0 {
            limiter.touch_all();
        } else {
            limiter.sweep(); // evicts the full ones; re-anchors whatever it keeps
        }
    }
    assert_eq!(limiter.available(&1), 10);
    assert_eq!(limiter.try_acquire(&1, 10), Ok(()));
    assert_eq!(limiter.try_acquire(&3, 1), Ok(()));
    assert_eq!(limiter.len(), 2);
}

#[test]
fn prefix_keys_give_a_whole_network_one_key() {
    let ip = |text: &str| text.parse::<IpAddr>().unwrap();
    // (v4 bits, v6 bits, address, key)
    let rows = [
        (32, 64, "2001:db8:1:2:3:4:5:6", "2001:db8:1:2::"),
        (32, 64, "2001:db8:1:2:ffff:ffff:ffff:ffff", "2001:db8:1:2::"),
        (32, 48, "2001:db8:1:2:3:4:5:6", "2001:db8:1::"),
        (32, 128, "2001:db8::7", "2001:db8::7"),
        (32, 0, "2001:db8::7", "::"),
        (32, 64, "192.0.2.77", "192.0.2.77"),
        (24, 64, "192.0.2.77", "192.0.2.0"),
        (0, 64, "192.0.2.77", "0.0.0.0"),
        (32, 64, "::ffff:192.0.2.77", "192.0.2.77"), // a dual-stack socket's IPv4 client
        (40, 200, "2001:db8::7", "2001:db8::7"),     // lengths past the address: all of it
    ];
    for (v4, v6, address, key) in rows {
        assert_eq!(
            IpPrefix::new(v4, v6).key(ip(address)),
            ip(key),
            "{address} /{v4} /{v6}"
        );
    }
    assert_eq!(IpPrefix::default().bits(), (32, 64));
    assert_eq!(IpPrefix::new(40, 200).bits(), (32, 128));

    // An attacker with a /64 gets one bucket, however many addresses it uses.
    let clock = ManualClock::new();
    let limiter = KeyedLimiter::try_new(QUOTA, &clock, 1_000, WhenFull::Refuse).unwrap();
    let by_network = IpPrefix::default();
    let granted = (0..100u128)
        .map(|host| IpAddr::V6(Ipv6Addr::from((0x2001_0db8_0000_0001u128 << 64) | host)))
        .filter(|&address| limiter.try_acquire(&by_network.key(address), 1).is_ok())
        .count();
    assert_eq!(granted, 10); // one burst
    assert_eq!(limiter.len(), 1);
}

/// A polite client that first appears when a flood of new keys starts (a million a second, each
/// taking a token, against a capacity of 10 000): its first grant is evicted with the flood's
/// first keys once its bucket is full, and each of its later requests comes back to a limiter
/// at its capacity whose freed slots the flood takes within microseconds. The limiter remembers
/// the keys it evicted lately, so the client takes an evictable bucket's slot at once: served
/// from its second request on (at least 99 %: here every one), under either policy.
#[test]
fn a_client_that_first_appears_when_a_flood_starts_is_served_from_its_second_request() {
    const NEW_KEYS_PER_SECOND: u64 = 1_000_000;
    const SECONDS: u64 = 2;
    for when_full in [WhenFull::Refuse, WhenFull::Admit] {
        let clock = ManualClock::new();
        let limiter = KeyedLimiter::builder(QUOTA, &clock)
            .capacity(10_000)
            .when_full(when_full)
            .build()
            .unwrap();
        let reference = TokenBucket::try_new(QUOTA, &clock).unwrap();
        let (mut asked, mut served) = (0u64, 0u64);
        let every = NEW_KEYS_PER_SECOND / 5; // a request every 200 ms
        for key in 0..SECONDS * NEW_KEYS_PER_SECOND {
            if key % every == 0 {
                let got = limiter.try_acquire(&POLITE, 1);
                assert!(
                    reference.try_acquire(1).is_ok(),
                    "the client keeps to its quota"
                );
                if key > 0 {
                    asked += 1;
                    served += u64::from(got.is_ok());
                }
            }
            let _ = limiter.try_acquire(&key, 1);
            clock.advance(Duration::from_micros(1));
        }
        assert_eq!(
            limiter.len(),
            limiter.capacity(),
            "{when_full:?}: the flood filled it"
        );
        assert_eq!(asked, 5 * SECONDS - 1);
        assert!(
            served * 100 >= asked * 99,
            "{when_full:?}: served {served} of {asked} requests after the first"
        );
    }
}

//! The fixed-capacity keyed table, pinned with a manual clock.

use core::time::Duration;
use std::collections::HashMap;

use tollgate::{Denied, KeyedDenied, KeyedTable, ManualClock, Quota, Rate, TokenBucket, WhenFull};

const MS: Duration = Duration::from_millis(1);

fn insufficient(retry_after: Duration) -> Result<(), KeyedDenied> {
    Err(KeyedDenied::Denied(Denied::insufficient(retry_after)))
}

#[test]
fn a_full_table_evicts_only_a_full_bucket() {
    let clock = ManualClock::new();
    let quota = Quota::new(Rate::per_second(1)).burst(2);
    let table = KeyedTable::<char, _, 2>::try_new(quota, &clock, WhenFull::Refuse).unwrap();

    // (ms since start, key, n, expected)
    let rows = [
        (0, 'a', 2, Ok(())),                                 // a empty
        (0, 'b', 1, Ok(())),                                 // b holds 1 of 2
        (0, 'c', 1, Err(KeyedDenied::Full { capacity: 2 })), // nothing full: refused
        (1_000, 'c', 1, Ok(())), // b is full again: c takes its slot; a holds 1
        (1_000, 'a', 1, Ok(())), // a kept its state: its last token
        (1_000, 'a', 1, insufficient(Duration::from_secs(1))),
        (1_000, 'd', 1, Err(KeyedDenied::Full { capacity: 2 })), // a and c are not full
        (2_000, 'b', 2, Ok(())), // b comes back as new: a full bucket, as if never dropped
    ];
    let mut at = 0;
    for (ms, key, n, expected) in rows {
        clock.advance((ms - at) * MS);
        at = ms;
        assert_eq!(table.try_acquire(key, n), expected, "{key} at {ms} ms");
        assert!(table.len() <= 2);
    }
    assert_eq!(table.len(), 2);
    assert_eq!(table.available(&'a'), 1); // a refilled one token in the last second
    assert_eq!(table.available(&'b'), 0);
    assert_eq!(table.available(&'c'), 2); // evicted at 2 s: reads as the start fill
}

#[test]
fn when_full_the_policy_decides_and_nothing_is_taken() {
    let clock = ManualClock::new();
    let quota = Quota::new(Rate::per_second(1)).burst(1);
    let refuse = KeyedTable::<u8, _, 1>::try_new(quota, &clock, WhenFull::Refuse).unwrap();
    let admit = KeyedTable::<u8, _, 1>::try_new(quota, &clock, WhenFull::Admit).unwrap();
    for table in [&refuse, &admit] {
        assert!(table.try_acquire(1, 1).is_ok());
    }
    assert_eq!(
        refuse.try_acquire(2, 1),
        Err(KeyedDenied::Full { capacity: 1 })
    );
    // Bounded fail-open: granted from the overflow bucket that untracked keys share, not
    // tracked; its one token gone, refused too.
    assert_eq!(admit.try_acquire(2, 1), Ok(()));
    assert_eq!(
        admit.try_acquire(3, 1),
        Err(KeyedDenied::Full { capacity: 1 })
    );
    assert_eq!(admit.until_room(), Duration::from_secs(1));
    for table in [&refuse, &admit] {
        assert_eq!(table.len(), 1);
        assert_eq!(table.available(&1), 0); // key 1 untouched by the refusals
        assert_eq!(
            table.try_acquire(1, 2),
            Err(KeyedDenied::Denied(Denied::ExceedsCapacity { burst: 1 }))
        );
        assert_eq!(table.try_acquire(7, 0), Ok(())); // n = 0 adds no key
        assert_eq!(table.len(), 1);
    }
    assert_eq!(KeyedDenied::Full { capacity: 1 }.retry_after(), None);
}

/// A small deterministic generator, so that the sequence is the same on every run.
struct Lcg(u64);
impl Lcg {
    fn next(&mut self, below: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % below
    }
}

#[test]
fn many_keys_decide_exactly_as_one_bucket_per_key_would() {
    // 300 keys through 64 slots: buckets come and go, and every decision matches a reference
    // with an unbounded map of ordinary buckets, because only full buckets are dropped. With
    // protection off any full bucket may go, so a new key always finds one here.
    let clock = ManualClock::new();
    let quota = Quota::new(Rate::per_second(100)).burst(3);
    let table =
        KeyedTable::<u32, _, 64>::with_protection(quota, &clock, WhenFull::Refuse, Duration::ZERO);
    let mut reference: HashMap<u32, TokenBucket<&ManualClock>> = HashMap::new();
    let mut rng = Lcg(7);
    let (mut granted, mut denied) = (0, 0);
    for _ in 0..100_000 {
        clock.advance(Duration::from_micros(rng.next(1_500)));
        let key = rng.next(300) as u32;
        let n = 1 + rng.next(3) as u32;
        let expected = reference
            .entry(key)
            .or_insert_with(|| TokenBucket::try_new(quota, &clock).unwrap())
            .try_acquire(n)
            .map_err(KeyedDenied::Denied);
        let got = table.try_acquire(key, n);
        assert_eq!(got, expected, "key {key}, n {n}");
        if got.is_ok() {
            granted += 1;
        } else {
            denied += 1;
        }
        assert!(table.len() <= 64);
    }
    assert_eq!(table.len(), 64, "the table filled and evicted");
    assert!(granted > 50_000 && denied > 2_000, "{granted} / {denied}");
}

#[test]
fn the_32_bit_word_and_a_static_table() {
    static CLOCK: ManualClock = ManualClock::new();
    static PER_ID: KeyedTable<u16, &ManualClock, 4, u32> = KeyedTable::new(
        Quota::new(Rate::per_second(10)).burst(1),
        &CLOCK,
        WhenFull::Refuse,
    );
    for id in 0..4 {
        assert!(PER_ID.try_acquire(id, 1).is_ok());
    }
    assert_eq!(
        PER_ID.try_acquire(9, 1),
        Err(KeyedDenied::Full { capacity: 4 })
    );
    // The 32-bit word reads a nanosecond clock to a power of two of ticks: a token is due a
    // fraction of a microsecond after 100 ms.
    CLOCK.advance(101 * MS);
    assert!(PER_ID.try_acquire(9, 1).is_ok());
    let retry = PER_ID.try_acquire(9, 1).unwrap_err().retry_after().unwrap();
    assert!(retry > 99 * MS && retry <= 100 * MS, "{retry:?}");
    assert_eq!(PER_ID.capacity(), 4);
}

#[test]
fn racing_threads_get_each_burst_once_and_only_the_slots_there_are() {
    // A frozen clock: a bucket once used is never full again, so 4 of the 8 keys get a slot,
    // each grants exactly its burst, and the others are refused however the threads interleave.
    let clock = ManualClock::new();
    let quota = Quota::new(Rate::per_second(1)).burst(100);
    let table = KeyedTable::<u8, _, 4>::try_new(quota, &clock, WhenFull::Refuse).unwrap();
    let per_key: Vec<usize> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..4)
            .map(|t| {
                let table = &table;
                s.spawn(move || {
                    let mut granted = [0usize; 8];
                    for i in 0..4_000usize {
                        let key = ((i + t) % 8) as u8;
                        if table.try_acquire(key, 1).is_ok() {
                            granted[key as usize] += 1;
                        }
                    }
                    granted
                })
            })
            .collect();
        let mut total = vec![0; 8];
        for worker in workers {
            for (sum, n) in total.iter_mut().zip(worker.join().unwrap()) {
                *sum += n;
            }
        }
        total
    });
    assert_eq!(
        per_key.iter().filter(|&&n| n == 100).count(),
        4,
        "{per_key:?}"
    );
    assert_eq!(
        per_key.iter().filter(|&&n| n == 0).count(),
        4,
        "{per_key:?}"
    );
    assert_eq!(table.len(), 4);
}

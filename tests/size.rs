//! A bucket on a zero-sized clock is 32 bytes on the 32-bit word and one 64-byte cache line on
//! the 64-bit word (aligned to it on a 64-bit host), checked at compile time, and still answers
//! what quota it enforces, worked out from its layout.

use core::mem::size_of;
use core::time::Duration;

use tollgate::{Clock, ManualClock, Quota, Rate, TokenBucket};

/// A zero-sized clock, as a firmware's SysTick or a `static` clock reference would be.
struct Zst;

impl Clock for Zst {
    const TICKS_PER_SECOND: u64 = 64_000_000;
    fn now(&self) -> u64 {
        0
    }
}

/// A zero-sized nanosecond clock, for the 64-bit word's rounded layouts.
struct Nanos;

impl Clock for Nanos {
    const TICKS_PER_SECOND: u64 = 1_000_000_000;
    fn now(&self) -> u64 {
        0
    }
}

// The 64-bit word: the word, the layout's six `u64`s and its five bytes of shifts and flags.
const _: () = assert!(size_of::<TokenBucket<Zst, u64>>() <= 64);
// The 32-bit word: the word and the layout in 28 bytes of `u32`s and flags, align 4 on every
// target, so 32 bytes on a 64-bit host as on a microcontroller.
const _: () = assert!(size_of::<TokenBucket<Zst, u32>>() <= 32);

#[test]
fn a_bucket_on_a_zero_sized_clock_is_one_cache_line() {
    assert_eq!(size_of::<TokenBucket<Zst, u64>>(), 64);
    if cfg!(target_pointer_width = "64") {
        // It starts a line: a clock with state takes the next one.
        assert_eq!(core::mem::align_of::<TokenBucket<Zst, u64>>(), 64);
        assert_eq!(size_of::<TokenBucket<&ManualClock, u64>>(), 128);
    } else {
        assert_eq!(size_of::<TokenBucket<&ManualClock, u64>>(), 72);
    }
}

/// Buckets side by side (a `Vec` of per-tenant or per-core buckets) never share a cache line:
/// two cores each taking from their own bucket do not move each other's line.
#[test]
#[cfg(target_pointer_width = "64")]
fn neighbouring_buckets_share_no_cache_line() {
    let clock = ManualClock::new();
    let quota = Quota::new(Rate::per_second(10));
    let wide: Vec<TokenBucket<Zst, u64>> = (0..8)
        .map(|_| TokenBucket::try_new_with_word(quota, Zst).unwrap())
        .collect();
    let with_clock: Vec<TokenBucket<&ManualClock, u64>> = (0..8)
        .map(|_| TokenBucket::try_new_with_word(quota, &clock).unwrap())
        .collect();
    let line = |address: usize| address / 64;
    for (i, bucket) in wide.iter().enumerate() {
        let start = bucket as *const _ as usize;
        // The whole bucket, word first, on one line.
        assert_eq!(start % 64, 0, "bucket {i}");
        assert_eq!(
            line(start),
            line(start + size_of::<TokenBucket<Zst, u64>>() - 1)
        );
    }
    for (i, bucket) in with_clock.iter().enumerate() {
        let start = bucket as *const _ as usize;
        assert_eq!(start % 64, 0, "bucket {i}");
    }
}

#[test]
fn an_adjustable_bucket_keeps_each_words_form_in_its_slots() {
    // The word beside its generation, two slots of a version and the stored layout (four
    // `u64`s on the 32-bit word, seven on the 64-bit word), and the change flag.
    assert_eq!(
        size_of::<tollgate::AdjustableBucket<Zst, u32>>(),
        8 + 2 * (8 + 32) + 8
    );
    assert!(size_of::<tollgate::AdjustableBucket<Zst, u64>>() <= 16 + 2 * (8 + 56) + 16);
}

#[test]
fn a_bucket_on_the_32_bit_word_is_half_a_cache_line() {
    assert_eq!(size_of::<TokenBucket<Zst, u32>>(), 32);
    assert_eq!(core::mem::align_of::<TokenBucket<Zst, u32>>(), 4);
    // A reference to a clock adds a pointer (and its alignment).
    assert_eq!(size_of::<TokenBucket<&ManualClock, u32>>(), 40);
}

/// The quota a bucket answers is the quota it was built with, on either word, wherever the
/// solver holds the rate exactly.
#[test]
fn an_exact_bucket_answers_its_own_quota() {
    let rows = [
        Quota::new(Rate::per_second(10)).burst(10),
        Quota::new(Rate::per_minute(171)).burst(20).start_with(5),
        Quota::new(Rate::per_second(100).minus_percent(10).divided_by(4)).start_empty(),
        Quota::new(Rate::new(3, Duration::from_millis(700))).burst(1),
        Quota::new(Rate::per_minute(6)).burst(3).start_with(2),
        Quota::new(Rate::per_second(1)).burst(100),
    ];
    for quota in rows {
        let wide = TokenBucket::<_, u64>::try_new_with_word(quota, Zst).unwrap();
        let narrow = TokenBucket::<_, u32>::try_new_with_word(quota, Zst).unwrap();
        for (got, exact) in [
            (wide.quota(), wide.is_exact()),
            (narrow.quota(), narrow.is_exact()),
        ] {
            assert!(exact, "{quota}");
            assert_eq!(got.rate(), quota.rate(), "{quota}");
            assert_eq!(got.burst_size(), quota.burst_size(), "{quota}");
            assert_eq!(got.start_fill(), quota.start_fill(), "{quota}");
        }
    }
}

/// Where the rate was rounded, the answer is the enforced rate: never above the quota's, and
/// within the solver's bound below it (2^-20 on the 64-bit word, 10^-3 on the 32-bit word).
#[test]
fn a_rounded_bucket_answers_the_rate_it_enforces() {
    // (rate, burst, word bits)
    let rows = [
        (Rate::per_second(549_637), 1_000, 64),
        (Rate::per_second(1_000_003), 1_000, 64),
        (
            Rate::new(999_983, Duration::from_nanos(1_000_000_007)),
            1_000,
            64,
        ),
        (Rate::per_second(100_000), 1, 32),
        (Rate::per_second(50_001), 10, 32),
    ];
    for (rate, burst, bits) in rows {
        let quota = Quota::new(rate).burst(burst);
        let (got, exact) = if bits == 64 {
            let b = TokenBucket::<_, u64>::try_new_with_word(quota, Nanos).unwrap();
            (b.quota(), b.is_exact())
        } else {
            let b = TokenBucket::<_, u32>::try_new_with_word(quota, Nanos).unwrap();
            (b.quota(), b.is_exact())
        };
        assert!(!exact, "{rate}");
        assert_eq!(got.burst_size(), burst, "{rate}");
        assert_eq!(got.start_fill(), burst, "{rate}");
        // got / asked in [1 - bound, 1], cross-multiplied in integers.
        let got_rate = got.rate();
        let lhs = u128::from(got_rate.tokens()) * rate.period().as_nanos();
        let rhs = u128::from(rate.tokens()) * got_rate.period().as_nanos();
        let bound = if bits == 64 { 1 << 20 } else { 1_000 };
        assert!(lhs <= rhs, "{rate}: {got_rate} is above it");
        assert!(
            lhs >= rhs - rhs / bound,
            "{rate}: {got_rate} is too far below"
        );
    }
}

/// A window quota comes back as the rate and burst it was split into, which is what the bucket
/// enforces: the same cap over the window.
#[test]
fn a_window_quota_answers_its_rate_and_burst() {
    let quota = Quota::within(100, Duration::from_secs(60)).burst(40);
    let bucket = TokenBucket::try_new(quota, Zst).unwrap();
    let got = bucket.quota();
    assert_eq!(got.rate(), quota.rate());
    assert_eq!(got.burst_size(), 40);
    assert_eq!(got.start_fill(), quota.start_fill());
}

/// A `const`-built bucket on either word (each word's `const` constructor packs its own form)
/// answers the quota it was built with.
#[test]
fn a_const_bucket_answers_its_quota_on_either_word() {
    const QUOTA: Quota = Quota::new(Rate::per_minute(171)).burst(20).start_with(5);
    static NARROW: TokenBucket<Zst, u32> = TokenBucket::<_, u32>::new_with_word(QUOTA, Zst);
    static WIDE: TokenBucket<Zst, u64> = TokenBucket::<_, u64>::new_with_word(QUOTA, Zst);
    for (got, exact) in [
        (NARROW.quota(), NARROW.is_exact()),
        (WIDE.quota(), WIDE.is_exact()),
    ] {
        assert!(exact);
        assert_eq!(got.rate(), QUOTA.rate());
        assert_eq!(got.burst_size(), QUOTA.burst_size());
        assert_eq!(got.start_fill(), QUOTA.start_fill());
    }
    // It grants its start fill at its first use.
    let mut granted = 0;
    while NARROW.try_acquire(1).is_ok() {
        granted += 1;
    }
    assert_eq!(granted, 5);
}

/// `KeyedTable` against the smallest `heapless` map that would hold the same state per key (the
/// word, a count of calls, a tier and a protection byte): the README's reason for not building
/// the table on `heapless`, beside the structural one (its `swap_remove` moves entries, so a word
/// there could be updated only inside the critical section).
#[cfg(feature = "keyed-table")]
#[test]
fn a_keyed_table_is_smaller_than_a_heapless_map_of_the_same_state() {
    use core::sync::atomic::AtomicU64;
    use heapless::index_map::FnvIndexMap;
    use tollgate::KeyedTable;

    type Slot = (AtomicU64, u32, u8, bool);
    let pairs = [
        (
            "64 u16 keys",
            size_of::<KeyedTable<u16, Zst, 64, u64>>(),
            size_of::<FnvIndexMap<u16, Slot, 64>>(),
        ),
        (
            "256 u32 keys",
            size_of::<KeyedTable<u32, Zst, 256, u64>>(),
            size_of::<FnvIndexMap<u32, Slot, 256>>(),
        ),
    ];
    for (what, ours, heapless) in pairs {
        eprintln!("{what}: KeyedTable {ours} B, heapless FnvIndexMap {heapless} B");
        assert!(ours < heapless, "{what}: {ours} B against {heapless} B");
    }
}

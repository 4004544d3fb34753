//! The keyed check for a key already held, tollgate's `KeyedLimiter` against governor's keyed
//! limiter (a `DashMap`), and the memory each key costs in both, printed before the timings: the
//! heap each holds, exact (this bench's allocator counts every byte), at 10^4 and 10^6 keys,
//! and the process's resident growth beside it.
//!
//! `cargo bench -p tollgate-bench --bench keyed -- --warm-up-time 1 --measurement-time 2`
//!
//! The check is measured at 10^4 and at 10^6 keys held, the keys visited in a shuffled order,
//! governor's default limiter (quanta's TSC clock) beside tollgate on `TscClock` (the same
//! clock class) and on `StdClock` (`Instant::now()`).

use std::hint::black_box;
use std::net::{IpAddr, Ipv6Addr};
use std::num::NonZeroU32;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use stats_alloc::{Region, StatsAlloc, INSTRUMENTED_SYSTEM};
use tollgate::{KeyedLimiter, Quota, Rate, StdClock, TscClock, WhenFull};

/// The system allocator, counting: the heap a limiter holds is what its filling allocated and
/// did not free, to the byte, for governor as for tollgate.
#[global_allocator]
static HEAP: &StatsAlloc<std::alloc::System> = &INSTRUMENTED_SYSTEM;

/// Heap bytes allocated and not freed while `fill` ran, and what it built (kept alive).
fn heap_held<T>(fill: impl FnOnce() -> T) -> (usize, T) {
    let region = Region::new(HEAP);
    let held = fill();
    let change = region.change();
    let bytes = (change.bytes_allocated as isize - change.bytes_deallocated as isize
        + change.bytes_reallocated)
        .max(0) as usize;
    (bytes, held)
}

/// Resident memory of this process in bytes (Linux), to weigh a key without unsafe code.
fn resident_bytes() -> Option<usize> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: usize = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

const KEYS: u64 = 1_000_000;

/// A quota that grants every call of the bench, so that both limiters take the grant path.
fn generous() -> Quota {
    Quota::new(Rate::per_second(1_000_000_000)).burst(1_000_000_000)
}

/// A quota whose buckets stay short of full while the memory is measured, so that none is
/// evicted: every key stays held.
fn held() -> Quota {
    Quota::new(Rate::per_minute(1)).burst(10)
}

fn governor_keyed() -> governor::DefaultKeyedRateLimiter<u64> {
    governor::RateLimiter::keyed(governor::Quota::per_second(
        NonZeroU32::new(1_000_000_000).unwrap(),
    ))
}

/// tollgate holding the `u64` keys `0..keys` (capacity twice that, as in the timed check).
fn tollgate_holding(keys: u64) -> KeyedLimiter<u64, StdClock> {
    let limiter =
        KeyedLimiter::try_new(held(), StdClock, 2 * keys as usize, WhenFull::Refuse).unwrap();
    for key in 0..keys {
        limiter.try_acquire(&key, 1).unwrap();
    }
    assert_eq!(limiter.len(), keys as usize);
    limiter
}

/// governor holding the `u64` keys `0..keys`.
fn governor_holding(keys: u64) -> governor::DefaultKeyedRateLimiter<u64> {
    let limiter = governor_keyed();
    for key in 0..keys {
        limiter.check_key(&key).unwrap();
    }
    limiter
}

/// Bytes per key with a million keys held, so that the tables dominate the page-sized noise of
/// resident growth; the heap exact beside it (tollgate's from the allocator and from its own
/// `heap_bytes()`, which must agree).
fn memory_per_key() {
    let (tollgate_u64_heap, (tollgate_u64, u64_held)) =
        heap_held(|| bytes_per(KEYS, || tollgate_holding(KEYS)));
    let (tollgate_u32, u32_held) = bytes_per(KEYS, || {
        let quota = held();
        let limiter = KeyedLimiter::<u64, _>::builder(quota, StdClock)
            .capacity(2 * KEYS as usize)
            .when_full(WhenFull::Refuse)
            .word::<u32>()
            .build()
            .unwrap();
        for key in 0..KEYS {
            limiter.try_acquire(&key, 1).unwrap();
        }
        limiter
    });
    let (governor_heap, (governor, _governor_held)) =
        heap_held(|| bytes_per(KEYS, || governor_holding(KEYS)));
    assert_eq!(u32_held.len(), KEYS as usize);
    let per_key = |bytes: usize| bytes as f64 / KEYS as f64;
    println!("memory per key, {KEYS} u64 keys held (bytes / key):");
    println!(
        "  tollgate KeyedLimiter, u64 word: {:.1} heap (tables; {:.1} counted by the allocator), {tollgate_u64:.1} resident",
        per_key(u64_held.heap_bytes()),
        per_key(tollgate_u64_heap)
    );
    println!(
        "  tollgate KeyedLimiter, u32 word: {:.1} heap (tables), {tollgate_u32:.1} resident",
        per_key(u32_held.heap_bytes())
    );
    println!(
        "  governor keyed (DashMap):        {:.1} heap, {governor:.1} resident",
        per_key(governor_heap)
    );
    println!(
        "  (resident: growth of the process's resident memory while filling, which also counts"
    );
    println!(
        "   tables freed on resizing but not yet returned; heap: what the tables hold at the end)"
    );
}

/// Heap bytes per key with `keys` `u64` keys held in both limiters, from the allocator's count
/// (resident growth is too coarse to weigh a few thousand keys); tollgate's own `heap_bytes()`
/// beside it, which must agree.
fn heap_per_key_held(keys: u64) {
    let (tollgate, limiter) = heap_held(|| tollgate_holding(keys));
    let (governor, _governor) = heap_held(|| governor_holding(keys));
    let per_key = |bytes: usize| bytes as f64 / keys as f64;
    println!(
        "heap per key, {keys} u64 keys held: tollgate {:.1} (its heap_bytes: {:.1}), governor {:.1}",
        per_key(tollgate),
        per_key(limiter.heap_bytes()),
        per_key(governor)
    );
}

/// A client address as the example server keys it.
fn address(i: u64) -> Option<IpAddr> {
    Some(IpAddr::V6(Ipv6Addr::from(u128::from(i) << 64)))
}

/// Bytes per key at the example server's capacity (100 000) once a flood of a million new keys
/// has gone through it (evictions, deleted marks, rebuilds), against governor holding the same
/// number of keys (it has no cap: it holds every key until `retain_recent`). Governor is
/// measured first; tollgate's exact figure is its heap (the flood frees and reuses tables, so
/// its resident growth may count pages twice or not at all).
fn memory_at_capacity() {
    const CAP: u64 = 100_000;
    // Buckets that stay short of full for the whole flood: every slot stays busy, and the
    // flood runs against a full limiter.
    let flooded = |limiter: &dyn Fn(u64) -> bool| {
        for i in 0..10 * CAP {
            black_box(limiter(i));
        }
    };
    let (governor_u64_heap, (governor_u64, _g1)) =
        heap_held(|| bytes_per(CAP, || governor_holding(CAP)));
    let (governor_ip_heap, (governor_ip, _g2)) = heap_held(|| {
        bytes_per(CAP, || {
            let limiter: governor::DefaultKeyedRateLimiter<Option<IpAddr>> =
                governor::RateLimiter::keyed(governor::Quota::per_second(
                    NonZeroU32::new(1_000_000_000).unwrap(),
                ));
            for key in 0..CAP {
                limiter.check_key(&address(key)).unwrap();
            }
            limiter
        })
    });
    let (tollgate_u64, u64_held) = bytes_per(CAP, || {
        let limiter =
            KeyedLimiter::try_new(held(), StdClock, CAP as usize, WhenFull::Refuse).unwrap();
        flooded(&|i| limiter.try_acquire(&i, 1).is_ok());
        limiter
    });
    let (tollgate_ip, ip_held) = bytes_per(CAP, || {
        let limiter =
            KeyedLimiter::try_new(held(), StdClock, CAP as usize, WhenFull::Refuse).unwrap();
        flooded(&|i| limiter.try_acquire(&address(i), 1).is_ok());
        limiter
    });
    assert_eq!(u64_held.len(), CAP as usize);
    assert_eq!(ip_held.len(), CAP as usize);
    let per_key = |bytes: usize| bytes as f64 / CAP as f64;
    println!(
        "memory per key at capacity {CAP}, after a flood of {} new keys (bytes / key):",
        10 * CAP
    );
    println!(
        "  tollgate, u64 keys:             {:.1} heap (tables), {tollgate_u64:.1} resident",
        per_key(u64_held.heap_bytes())
    );
    println!(
        "  tollgate, Option<IpAddr> keys:  {:.1} heap (tables), {tollgate_ip:.1} resident",
        per_key(ip_held.heap_bytes())
    );
    println!(
        "  governor, {CAP} u64 keys:          {:.1} heap, {governor_u64:.1} resident",
        per_key(governor_u64_heap)
    );
    println!(
        "  governor, {CAP} Option<IpAddr> keys: {:.1} heap, {governor_ip:.1} resident",
        per_key(governor_ip_heap)
    );
}

/// Resident bytes per key for `keys` keys held by what `fill` builds. What it built is returned
/// to be kept alive, so that the next measurement cannot reuse its freed pages.
fn bytes_per<T>(keys: u64, fill: impl FnOnce() -> T) -> (f64, T) {
    let before = resident_bytes().unwrap_or(0);
    let held = fill();
    let bytes = resident_bytes().unwrap_or(0).saturating_sub(before);
    (bytes as f64 / keys as f64, held)
}

/// The order in which a run visits `count` held keys: each once per pass, shuffled (splitmix64
/// drives a Fisher-Yates shuffle, seeded the same in every run) so that no key is hot and no
/// two neighbours in the order share a cache line of either table.
fn visit_order(count: u64) -> Vec<u64> {
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let mut order: Vec<u64> = (0..count).collect();
    for i in (1..order.len()).rev() {
        let j = (next() % (i as u64 + 1)) as usize;
        order.swap(i, j);
    }
    order
}

/// The keyed check of a held key, at `count` keys held (capacity twice that, so that every key
/// is protected after its second check, as a returning client's is), the keys visited in
/// `visit_order`. Both limiters hold the same keys and follow the same order. tollgate is
/// measured on `StdClock` (`Instant::now()`) and on `TscClock` (quanta's TSC clock, the clock
/// governor's default limiter reads).
fn held_keys(c: &mut Criterion, count: u64, label: &str) {
    let order = visit_order(count);
    let on_std = KeyedLimiter::builder(generous(), StdClock)
        .capacity(2 * count as usize)
        .build()
        .unwrap();
    let on_tsc = KeyedLimiter::builder(generous(), TscClock::new())
        .capacity(2 * count as usize)
        .build()
        .unwrap();
    let governor = governor_keyed();
    // Twice each: the second check protects the key, as it would a returning client.
    for _ in 0..2 {
        for key in 0..count {
            on_std.try_acquire(&key, 1).unwrap();
            on_tsc.try_acquire(&key, 1).unwrap();
            governor.check_key(&key).unwrap();
        }
    }
    assert_eq!(on_std.protected_len(), count as usize);
    assert_eq!(on_tsc.protected_len(), count as usize);

    let mut group = c.benchmark_group(format!("keyed check, held key, {label} keys"));
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(2));
    let mut at = 0;
    let mut next_key = || {
        at += 1;
        if at == order.len() {
            at = 0;
        }
        order[at]
    };
    group.bench_function("tollgate KeyedLimiter, StdClock", |b| {
        b.iter(|| black_box(on_std.try_acquire(black_box(&next_key()), 1)).is_ok())
    });
    group.bench_function("tollgate KeyedLimiter, TscClock", |b| {
        b.iter(|| black_box(on_tsc.try_acquire(black_box(&next_key()), 1)).is_ok())
    });
    group.bench_function("governor keyed (quanta TSC clock)", |b| {
        b.iter(|| black_box(governor.check_key(black_box(&next_key()))).is_ok())
    });
    group.finish();
}

fn existing_key(c: &mut Criterion) {
    // First, on a process that has freed nothing yet: resident growth then counts new pages
    // only, and governor is measured before anything else.
    memory_at_capacity();
    memory_per_key();
    heap_per_key_held(10_000);

    held_keys(c, 10_000, "10^4");
    held_keys(c, 1_000_000, "10^6");
}

criterion_group!(benches, existing_key);
criterion_main!(benches);

//! The keyed check for a key already held, tollgate's `KeyedLimiter` against governor's keyed
//! limiter (a `DashMap`), and the memory each key costs in both (resident memory grown by a
//! million keys), printed before the timings.
//!
//! `cargo bench --bench keyed -- --warm-up-time 1 --measurement-time 2`
//!
//! The clocks differ as the crates ship them: tollgate's `StdClock` reads `Instant::now()`,
//! governor's default clock is quanta's TSC clock.

use std::hint::black_box;
use std::net::{IpAddr, Ipv6Addr};
use std::num::NonZeroU32;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use tollgate::{KeyedLimiter, Quota, Rate, StdClock, WhenFull};

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

/// Resident bytes per key once `KEYS` keys are held, built by `fill`: a million keys, so that
/// the tables dominate the page-sized noise.
/// The structure is returned to be kept alive, so that the next measurement cannot reuse its
/// freed pages.
fn bytes_per_key<T>(fill: impl FnOnce() -> T) -> (f64, T) {
    let before = resident_bytes().unwrap_or(0);
    let held = fill();
    let bytes = resident_bytes().unwrap_or(0).saturating_sub(before);
    (bytes as f64 / KEYS as f64, held)
}

fn memory_per_key() {
    let (tollgate_u64, u64_held) = bytes_per_key(|| {
        let limiter =
            KeyedLimiter::try_new(held(), StdClock, 2 * KEYS as usize, WhenFull::Refuse).unwrap();
        for key in 0..KEYS {
            limiter.try_acquire(&key, 1).unwrap();
        }
        limiter
    });
    let (tollgate_u32, u32_held) = bytes_per_key(|| {
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
    let (governor, _governor_held) = bytes_per_key(|| {
        let limiter = governor_keyed();
        for key in 0..KEYS {
            limiter.check_key(&key).unwrap();
        }
        limiter
    });
    assert_eq!(u64_held.len(), KEYS as usize);
    assert_eq!(u32_held.len(), KEYS as usize);
    let per_key = |bytes: usize| bytes as f64 / KEYS as f64;
    println!("memory per key, {KEYS} u64 keys held (bytes / key):");
    println!(
        "  tollgate KeyedLimiter, u64 word: {:.1} heap (tables), {tollgate_u64:.1} resident",
        per_key(u64_held.heap_bytes())
    );
    println!(
        "  tollgate KeyedLimiter, u32 word: {:.1} heap (tables), {tollgate_u32:.1} resident",
        per_key(u32_held.heap_bytes())
    );
    println!("  governor keyed (DashMap):        {governor:.1} resident");
    println!(
        "  (resident: growth of the process's resident memory while filling, which also counts"
    );
    println!(
        "   tables freed on resizing but not yet returned; heap: what the tables hold at the end)"
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
    let (governor_u64, _g1) = bytes_per(CAP, || {
        let limiter = governor_keyed();
        for key in 0..CAP {
            limiter.check_key(&key).unwrap();
        }
        limiter
    });
    let (governor_ip, _g2) = bytes_per(CAP, || {
        let limiter: governor::DefaultKeyedRateLimiter<Option<IpAddr>> =
            governor::RateLimiter::keyed(governor::Quota::per_second(
                NonZeroU32::new(1_000_000_000).unwrap(),
            ));
        for key in 0..CAP {
            limiter.check_key(&address(key)).unwrap();
        }
        limiter
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
    println!("  governor, {CAP} u64 keys:          {governor_u64:.1} resident");
    println!("  governor, {CAP} Option<IpAddr> keys: {governor_ip:.1} resident");
}

/// Resident bytes per key for `keys` keys held by what `fill` builds.
fn bytes_per<T>(keys: u64, fill: impl FnOnce() -> T) -> (f64, T) {
    let before = resident_bytes().unwrap_or(0);
    let held = fill();
    let bytes = resident_bytes().unwrap_or(0).saturating_sub(before);
    (bytes as f64 / keys as f64, held)
}

fn existing_key(c: &mut Criterion) {
    // First, on a process that has freed nothing yet: resident growth then counts new pages
    // only, and governor is measured before anything else.
    memory_at_capacity();
    memory_per_key();

    let mut group = c.benchmark_group("keyed check, existing key (1000 keys held)");
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(2));

    let limiter = KeyedLimiter::try_new(generous(), StdClock, 10_000, WhenFull::Refuse).unwrap();
    let governor = governor_keyed();
    for key in 0..1_000u64 {
        limiter.try_acquire(&key, 1).unwrap();
        governor.check_key(&key).unwrap();
    }
    let mut key = 0u64;
    group.bench_function("tollgate KeyedLimiter", |b| {
        b.iter(|| {
            key = (key + 1) % 1_000;
            black_box(limiter.try_acquire(black_box(&key), 1)).is_ok()
        })
    });
    group.bench_function("governor keyed", |b| {
        b.iter(|| {
            key = (key + 1) % 1_000;
            black_box(governor.check_key(black_box(&key))).is_ok()
        })
    });
    group.finish();
}

criterion_group!(benches, existing_key);
criterion_main!(benches);

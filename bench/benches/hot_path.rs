//! The cost of one check on one thread, tollgate side by side with its floor and its peers.
//!
//! `cargo bench --bench hot_path`; criterion's report is then in
//! `target/criterion/report/index.html`.

mod common;

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use tollgate::{Clock, ManualClock, Quota, Rate, StdClock, TokenBucket};

use common::{coarse, line_up, mutex_bucket, ratelimit, tsc, Check, Path};

/// Times `limiter.run(iters)`: the loop is inside, monomorphized, so no virtual call is timed.
fn time(limiter: &dyn Check, iters: u64) -> Duration {
    let start = Instant::now();
    black_box(limiter.run(iters));
    start.elapsed()
}

fn try_acquire(c: &mut Criterion) {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!("try_acquire(1), one thread; this machine has {cores} cores");
    for path in [Path::Allow, Path::Deny] {
        let mut group = c.benchmark_group(format!("try_acquire/{}", path.name()));
        for (name, limiter) in line_up(path, true) {
            group.bench_function(name, |b| b.iter_custom(|iters| time(&*limiter, iters)));
        }
        group.finish();
    }
}

fn bucket<C: Clock>(quota: Quota, clock: C) -> TokenBucket<C> {
    TokenBucket::try_new(quota, clock).unwrap()
}

/// Reservations on a frozen clock (the algorithm alone) and on the TSC: granted at once, queued
/// behind earlier ones, denied for exceeding `max_wait`, and made then cancelled.
fn reserve(c: &mut Criterion) {
    let fast = Quota::new(Rate::per_second(1_000_000_000)).burst(1 << 40);
    let queue = Quota::new(Rate::per_second(1_000_000)).start_empty();
    let drained = Quota::new(Rate::per_hour(1)).burst(1).start_empty();
    let mut group = c.benchmark_group("reserve");
    macro_rules! on_clock {
        ($label:literal, $clock:expr) => {{
            let now = bucket(fast, $clock);
            group.bench_function(concat!($label, "/tollgate-now"), |b| {
                b.iter(|| now.reserve(black_box(1), Duration::ZERO).is_ok())
            });
            let queued = bucket(queue, $clock);
            group.bench_function(concat!($label, "/tollgate-queued"), |b| {
                b.iter(|| queued.reserve(black_box(1), Duration::MAX).is_ok())
            });
            let denied = bucket(drained, $clock);
            group.bench_function(concat!($label, "/tollgate-denied"), |b| {
                b.iter(|| denied.reserve(black_box(1), Duration::ZERO).is_ok())
            });
            let cancelled = bucket(queue, $clock);
            group.bench_function(concat!($label, "/tollgate-reserve-cancel"), |b| {
                b.iter(|| {
                    if let Ok(reservation) = cancelled.reserve(black_box(1), Duration::MAX) {
                        cancelled.cancel(reservation);
                    }
                })
            });
        }};
    }
    let manual = ManualClock::starting_at(1 << 40);
    on_clock!("manual", &manual);
    let tsc = tsc();
    on_clock!("tsc", &tsc);
    group.finish();
}

/// `available()`: tollgate on each clock, and the peers that can say it.
fn available(c: &mut Criterion) {
    let quota = Quota::new(Rate::per_second(1_000)).burst(1_000);
    let mut group = c.benchmark_group("available");
    let manual = ManualClock::starting_at(1 << 40);
    let on_manual = bucket(quota, &manual);
    group.bench_function("manual/tollgate", |b| {
        b.iter(|| black_box(&on_manual).available())
    });
    let on_std = bucket(quota, StdClock);
    group.bench_function("std/tollgate", |b| {
        b.iter(|| black_box(&on_std).available())
    });
    let limiter = ratelimit(Path::Allow);
    group.bench_function("std/ratelimit", |b| {
        b.iter(|| black_box(&limiter).available())
    });
    let mutex = mutex_bucket(StdClock, Path::Allow);
    group.bench_function("std/mutex-f64", |b| {
        b.iter(|| black_box(&mutex).available())
    });
    let on_tsc = bucket(quota, tsc());
    group.bench_function("tsc/tollgate", |b| {
        b.iter(|| black_box(&on_tsc).available())
    });
    let on_coarse = bucket(quota, coarse());
    group.bench_function("coarse/tollgate", |b| {
        b.iter(|| black_box(&on_coarse).available())
    });
    group.finish();
}

/// An unlimited quota's check beside a limited bucket's grant and the floor, on each clock: what
/// turning a limit off from configuration costs.
fn unlimited(c: &mut Criterion) {
    let mut group = c.benchmark_group("unlimited");
    let manual: &'static ManualClock = Box::leak(Box::new(ManualClock::starting_at(1 << 40)));
    let line: [(&str, Box<dyn Check>); 6] = [
        ("manual/floor", Box::new(common::floor(manual))),
        (
            "manual/tollgate",
            Box::new(common::tollgate(manual, Path::Allow)),
        ),
        (
            "manual/unlimited",
            Box::new(bucket(Quota::unlimited(), manual)),
        ),
        ("tsc/floor", Box::new(common::floor(tsc()))),
        (
            "tsc/tollgate",
            Box::new(common::tollgate(tsc(), Path::Allow)),
        ),
        ("tsc/unlimited", Box::new(bucket(Quota::unlimited(), tsc()))),
    ];
    for (name, limiter) in line {
        group.bench_function(name, |b| b.iter_custom(|iters| time(&*limiter, iters)));
    }
    group.finish();
}

criterion_group!(benches, try_acquire, reserve, available, unlimited);
criterion_main!(benches);

//! What counting costs on the hot path: `try_acquire(1)` on a bare bucket, on one wrapped in a
//! `Counted` with the zero-sized observer `()`, and with `Counters` (relaxed atomic adds), on a
//! frozen clock (the algorithm alone) and on `StdClock`, one thread.
//!
//! `cargo bench --bench observe`

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use tollgate::observe::{Counted, Counters};
use tollgate::{Clock, ManualClock, Quota, Rate, StdClock, TokenBucket};

/// A quota that grants every call for longer than any run (the allow path), or none (deny).
fn quotas() -> [(&'static str, Quota); 2] {
    [
        (
            "allow",
            Quota::new(Rate::per_second(1_000_000_000)).burst(1 << 40),
        ),
        ("deny", Quota::new(Rate::per_day(1)).burst(1).start_empty()),
    ]
}

fn on_clock<C: Clock + Copy>(c: &mut Criterion, clock_name: &str, clock: C) {
    for (path, quota) in quotas() {
        let mut group = c.benchmark_group(format!("observe/{clock_name}/{path}"));
        let bare = TokenBucket::try_new(quota, clock).unwrap();
        group.bench_function("bare", |b| {
            b.iter(|| bare.try_acquire(black_box(1)).is_ok())
        });
        let unused = Counted::new(TokenBucket::try_new(quota, clock).unwrap(), ());
        group.bench_function("counted-unit", |b| {
            b.iter(|| unused.try_acquire(black_box(1)).is_ok())
        });
        let counters = Counters::new();
        let counted = Counted::new(TokenBucket::try_new(quota, clock).unwrap(), &counters);
        group.bench_function("counted-counters", |b| {
            b.iter(|| counted.try_acquire(black_box(1)).is_ok())
        });
        group.finish();
        black_box(counters.counts());
    }
}

fn observe(c: &mut Criterion) {
    let frozen = ManualClock::starting_at(1 << 40);
    on_clock(c, "frozen", &frozen);
    on_clock(c, "std", StdClock);
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = observe
}
criterion_main!(benches);

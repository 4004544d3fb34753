//! Throughput of one shared limiter checked by 1, 2 and 4 threads at once, tollgate side by side
//! with its floor and its peers. Each sample spreads its iterations over the threads and times
//! the whole, so the time per iteration is the inverse of the total throughput.
//!
//! `cargo bench --bench contention`

mod common;

use std::time::Duration;

use criterion::{
    criterion_group, criterion_main, BenchmarkId, Criterion, SamplingMode, Throughput,
};

use common::{line_up, time_on_threads, Path};

const THREADS: [usize; 3] = [1, 2, 4];

fn contention(c: &mut Criterion) {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "try_acquire(1) on one shared limiter from {THREADS:?} threads; \
         this machine has {cores} cores, so 4 threads take turns on them"
    );
    for path in [Path::Allow, Path::Deny] {
        let mut group = c.benchmark_group(format!("contention/{}", path.name()));
        group.sampling_mode(SamplingMode::Flat);
        group.throughput(Throughput::Elements(1));
        for (name, limiter) in line_up(path, false) {
            for threads in THREADS {
                group.bench_with_input(BenchmarkId::new(name, threads), &threads, |b, &threads| {
                    b.iter_custom(|iters| time_on_threads(&*limiter, threads, iters))
                });
            }
        }
        group.finish();
    }
}

criterion_group! {
    name = benches;
    // Shorter than criterion's defaults: 66 runs, each long enough to dwarf thread start-up.
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(30);
    targets = contention
}
criterion_main!(benches);

//! The wait path beside governor 0.10 (`until_ready`) and leaky-bucket 1.1 (`acquire_one`), on a
//! multi-threaded tokio runtime with 2 workers. Each limiter is compared on a clock of the same
//! class: tollgate on `TokioClock` (which reads `std`'s `Instant` outside paused time) beside
//! governor on its `MonotonicClock` (`std`'s `Instant`), tollgate on `TscClock` beside governor
//! on its default `QuantaClock` (both read the TSC through quanta).
//!
//! - **no wait due**: one `acquire(1)` on a bucket that never runs dry, one task (criterion),
//!   with `try_acquire(1)` (governor: `check`) on the same clocks as the floor;
//! - **64 tasks**: grants per second with 64 tasks at a rate far above demand, and at a binding
//!   rate (share of the cap `burst + rate × t`, checked never to be exceeded). Beside the
//!   grants, the cores the run used: a take that needs no wait never yields, so each of the two
//!   workers runs one task throughout, and only with two cores free do they contend for the
//!   limiter's word. On one core they take turns, and the figure is one thread's uncontended
//!   rate, two to three times the contended one: runs on a shared machine are compared only
//!   at the same count of cores;
//! - **one waiter**: the rate one task gets at 1 000/s with a burst of 1, and the CPU it spends;
//!   beside it, each run paired with one just before it, this host's floor: the rate a thread
//!   gets that sleeps to each instant and loses only the time it wakes more than a token's
//!   time late (the most any waiter at that burst keeps when its wake-ups are that late);
//! - **1 000 waiters** at 500/s with a burst of 1: order inversions, the pairs served in the
//!   reverse of the order they asked in, with the waiters arriving in sequence (each once the
//!   one before is in line: an order the limiter must keep) and racing (spawned at once over
//!   two workers: pairs that arrive together have no order to keep);
//! - **64 tasks at 10^7/s**, burst 1 000: a cap that binds, its share and the cores spent;
//! - **16 threads blocking** at 1 000/s with a burst of 1 (no runtime): the rate and the cores,
//!   beside governor's check-and-sleep loop.
//!
//! Real time, so the figures move with the machine's load: each is the median of 3 runs.
//!
//! `cargo bench -p tollgate-bench --bench waits` (`-- --quick` for criterion's short runs;
//! `WAITS_SECONDS=n` for longer real-time runs).

mod common;
#[path = "../../tests/support/floor.rs"]
mod floor;

use std::future::Future;
use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{by_round, median};
use criterion::Criterion;
use governor::clock::MonotonicClock;
use governor::middleware::NoOpMiddleware;
use governor::state::{InMemoryState, NotKeyed};
use governor::DefaultDirectRateLimiter;
use tokio::runtime::Runtime;
use tollgate::{Quota, Rate, TokenBucket, TokioClock, TscClock};

/// governor on `std`'s `Instant`: the clock class of `TokioClock`.
type GovernorStd =
    governor::RateLimiter<NotKeyed, InMemoryState, MonotonicClock, NoOpMiddleware<Instant>>;

/// One limiter with a wait, behind one enum so that every scenario runs the same loop.
enum Waits {
    Tokio(TokenBucket<TokioClock>),
    GovernorStd(GovernorStd),
    Tsc(TokenBucket<TscClock>),
    /// governor's default clock with its `quanta` feature: the TSC, as `TscClock`.
    Governor(DefaultDirectRateLimiter),
    Leaky(leaky_bucket::RateLimiter),
}

/// A rate and a burst, in tokens.
#[derive(Clone, Copy)]
struct Limit {
    per_second: u64,
    burst: u32,
}

/// The limiters compared, by name, each beside its peer on the same class of clock.
const NAMES: [&str; 5] = [
    "tollgate (TokioClock)",
    "governor until_ready (MonotonicClock)",
    "tollgate (TscClock)",
    "governor until_ready (QuantaClock)",
    "leaky-bucket acquire_one",
];

impl Waits {
    /// Limiter `which` of [`NAMES`], full at first. Call inside the runtime: `TokioClock` is
    /// made on its clock.
    fn new(which: usize, limit: Limit) -> Self {
        let quota = Quota::new(Rate::per_second(limit.per_second)).burst(u64::from(limit.burst));
        let governor_quota = || {
            let per_second = NonZeroU32::new(limit.per_second as u32).unwrap();
            governor::Quota::per_second(per_second)
                .allow_burst(NonZeroU32::new(limit.burst).unwrap())
        };
        match which {
            0 => Waits::Tokio(TokenBucket::try_new(quota, TokioClock::new()).unwrap()),
            1 => Waits::GovernorStd(governor::RateLimiter::direct_with_clock(
                governor_quota(),
                MonotonicClock,
            )),
            2 => Waits::Tsc(TokenBucket::try_new(quota, TscClock::new()).unwrap()),
            3 => Waits::Governor(governor::RateLimiter::direct(governor_quota())),
            _ => {
                // Its refill runs on a timer: one millisecond's tokens each millisecond (or one
                // token each period, for rates below 1 000/s).
                let (refill, interval) = if limit.per_second >= 1_000 {
                    (limit.per_second / 1_000, Duration::from_millis(1))
                } else {
                    (1, Duration::from_nanos(1_000_000_000 / limit.per_second))
                };
                let burst = limit.burst as usize;
                Waits::Leaky(
                    leaky_bucket::RateLimiter::builder()
                        .initial(burst)
                        .max(burst)
                        .refill(refill as usize)
                        .interval(interval)
                        .build(),
                )
            }
        }
    }

    #[inline]
    async fn acquire(&self) {
        match self {
            Waits::Tokio(bucket) => drop(bucket.acquire(1).await.unwrap()),
            Waits::GovernorStd(limiter) => limiter.until_ready().await,
            Waits::Tsc(bucket) => drop(bucket.acquire(1).await.unwrap()),
            Waits::Governor(limiter) => limiter.until_ready().await,
            Waits::Leaky(limiter) => limiter.acquire_one().await,
        }
    }
}

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap()
}

/// A rate no run can reach, a burst no run can use up (governor's burst is a `u32`).
const UNBOUND: Limit = Limit {
    per_second: 1_000_000_000,
    burst: u32::MAX,
};

/// Times `iters` calls of `call` in one task.
fn time_in_task<F: Future<Output = ()>>(
    rt: &Runtime,
    iters: u64,
    mut call: impl FnMut() -> F,
) -> Duration {
    rt.block_on(async {
        let start = Instant::now();
        for _ in 0..iters {
            call().await;
        }
        start.elapsed()
    })
}

/// One limiter's call, timed over `iters` calls in one task.
type Timer<'a> = Box<dyn Fn(u64) -> Duration + 'a>;

/// Times `call` in [`time_in_task`]'s loop: every figure of the no-wait table, the wait and its
/// floor alike, comes from the same loop, with the limiter chosen outside it.
fn timer<'a, F: Future<Output = ()>>(rt: &'a Runtime, call: impl Fn() -> F + 'a) -> Timer<'a> {
    Box::new(move |iters| time_in_task(rt, iters, &call))
}

/// Each limiter's wait with none due, then its floor: the same limiter's try path on the same
/// clock (`try_acquire(1)`; governor's `check`, leaky-bucket's `try_acquire(1)`). Pairs in
/// [`NAMES`]' order: the wait at `2 × which`, its floor at `2 × which + 1`.
fn no_wait_timers<'a>(rt: &'a Runtime, waits: &'a [Waits]) -> Vec<(String, Timer<'a>)> {
    let mut timers = Vec::new();
    for (waits, name) in waits.iter().zip(NAMES) {
        let (wait, floor) = match waits {
            Waits::Tokio(bucket) => (
                timer(rt, move || async move {
                    assert!(black_box(bucket).acquire(1).await.is_ok())
                }),
                timer(rt, move || async move {
                    assert!(black_box(bucket).try_acquire(1).is_ok())
                }),
            ),
            Waits::Tsc(bucket) => (
                timer(rt, move || async move {
                    assert!(black_box(bucket).acquire(1).await.is_ok())
                }),
                timer(rt, move || async move {
                    assert!(black_box(bucket).try_acquire(1).is_ok())
                }),
            ),
            Waits::GovernorStd(limiter) => (
                timer(rt, move || black_box(limiter).until_ready()),
                timer(rt, move || async move {
                    assert!(black_box(limiter).check().is_ok())
                }),
            ),
            Waits::Governor(limiter) => (
                timer(rt, move || black_box(limiter).until_ready()),
                timer(rt, move || async move {
                    assert!(black_box(limiter).check().is_ok())
                }),
            ),
            Waits::Leaky(limiter) => (
                timer(rt, move || black_box(limiter).acquire_one()),
                timer(rt, move || async move {
                    assert!(black_box(limiter).try_acquire(1))
                }),
            ),
        };
        timers.push((name.to_string(), wait));
        timers.push((format!("{name}: try"), floor));
    }
    timers
}

/// Checks per timing of the interleaved no-wait table.
const NO_WAIT_CALLS: u64 = 200_000;

fn no_wait(c: &mut Criterion) {
    let rt = runtime();
    let waits: Vec<Waits> = (0..NAMES.len())
        .map(|which| rt.block_on(async { Waits::new(which, UNBOUND) }))
        .collect();
    let timers = no_wait_timers(&rt, &waits);
    let mut group = c.benchmark_group("waits/no_wait_due");
    for (name, time) in &timers {
        group.bench_function(name.as_str(), |b| b.iter_custom(time));
    }
    group.finish();
    // Criterion times one function after another, and a shared machine's slow spells (the TSC's
    // read alone moves by a third between them) fall on some and not others: the table's figures
    // come from interleaved rounds, every timer once a round, as medians, and each ratio is taken
    // round by round between the two figures of one round.
    let rounds = 31;
    let mut samples = vec![Vec::with_capacity(rounds); timers.len()];
    for _ in 0..rounds {
        for (i, (_, time)) in timers.iter().enumerate() {
            samples[i].push(time(NO_WAIT_CALLS).as_nanos() as f64 / NO_WAIT_CALLS as f64);
        }
    }
    let ratio = |ours: usize, theirs: usize| median(by_round(&samples[ours], &samples[theirs]));
    println!(
        "\nNo wait due, one task, {rounds} interleaved rounds of {NO_WAIT_CALLS} calls: medians"
    );
    println!("\n| limiter | the wait | its try | wait ÷ try | wait ÷ governor's `until_ready`, same clock |");
    println!("|---|---|---|---|---|");
    for (which, name) in NAMES.iter().enumerate() {
        // tollgate's rows beside governor's on the same class of clock, the next in `NAMES`.
        let peer = match which {
            0 | 2 => format!("{:.2}", ratio(2 * which, 2 * which + 2)),
            _ => "—".to_string(),
        };
        println!(
            "| {name} | {:.1} ns | {:.1} ns | {:.2} | {peer} |",
            median(samples[2 * which].clone()),
            median(samples[2 * which + 1].clone()),
            ratio(2 * which, 2 * which + 1),
        );
    }
}

/// The length of each real-time run.
fn run_length() -> Duration {
    let seconds = std::env::var("WAITS_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1.0);
    Duration::from_secs_f64(seconds)
}

/// Processor time this process has used (user and system), from `/proc/self/stat`.
fn cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the command's closing parenthesis; utime and stime are the 12th and
    // 13th of them, in clock ticks of 100 Hz.
    let after = stat.rsplit(')').next().unwrap_or("");
    let fields: Vec<u64> = after
        .split_whitespace()
        .map(|f| f.parse().unwrap_or(0))
        .collect();
    let ticks = fields.get(11).unwrap_or(&0) + fields.get(12).unwrap_or(&0);
    Duration::from_millis(ticks * 10)
}

/// What one real-time run saw.
struct Run {
    grants: u64,
    elapsed: Duration,
    cpu: Duration,
}

/// `tasks` tasks acquiring one token each in a loop, for `length`: the grants completed
/// before the end.
fn many_tasks(which: usize, limit: Limit, tasks: usize, length: Duration) -> Run {
    let rt = runtime();
    rt.block_on(async {
        let waits = Arc::new(Waits::new(which, limit));
        let stop = Arc::new(AtomicBool::new(false));
        let cpu = cpu_time();
        let start = Instant::now();
        let handles: Vec<_> = (0..tasks)
            .map(|_| {
                let (waits, stop) = (waits.clone(), stop.clone());
                tokio::spawn(async move {
                    let mut grants = 0u64;
                    loop {
                        waits.acquire().await;
                        if stop.load(Ordering::Relaxed) {
                            return grants;
                        }
                        grants += 1;
                    }
                })
            })
            .collect();
        // The stop comes from a thread of its own: a take with nothing to wait for completes
        // at once, so 64 tasks busy taking may never let the runtime's own timers run.
        let stopper = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                std::thread::sleep(length);
                stop.store(true, Ordering::Relaxed);
                start.elapsed()
            })
        };
        let mut grants = 0;
        for handle in handles {
            grants += handle.await.unwrap();
        }
        let elapsed = stopper.join().unwrap();
        Run {
            grants,
            elapsed,
            cpu: cpu_time().saturating_sub(cpu),
        }
    })
}

/// How the waiters of [`inversions`] arrive.
#[derive(Clone, Copy, PartialEq)]
enum Arrivals {
    /// One after another: each task is spawned once the one before has made its first poll
    /// (its arrival: it took, or it is waiting), so the order they asked in is the order they
    /// were spawned in, while the limiter serves those ahead.
    InSequence,
    /// All spawned at once over the 2 workers, each numbered by a counter just before its
    /// first poll: two that arrive together have no order, and a worker descheduled between
    /// the number and the poll lets later numbers arrive first. Every limiter, a strictly
    /// first-come one too, shows inversions here.
    Racing,
}

/// Order inversions among `waiters` tasks that each ask for one token, at `limit`: pairs
/// (a, b) where a asked first and b was served first. A task counts itself served in the poll
/// that completes its wait.
fn inversions(which: usize, limit: Limit, waiters: usize, arrivals: Arrivals) -> (u64, Duration) {
    let rt = runtime();
    rt.block_on(async {
        let waits = Arc::new(Waits::new(which, limit));
        let asked = Arc::new(AtomicUsize::new(0));
        let served = Arc::new(AtomicUsize::new(0));
        let cpu = cpu_time();
        let mut handles = Vec::with_capacity(waiters);
        for _ in 0..waiters {
            let (waits, asked, served) = (waits.clone(), asked.clone(), served.clone());
            let (arrived, has_arrived) = tokio::sync::oneshot::channel::<()>();
            handles.push(tokio::spawn(async move {
                let ticket = asked.fetch_add(1, Ordering::Relaxed);
                let mut acquire = std::pin::pin!(waits.acquire());
                let mut arrived = Some(arrived);
                let place = std::future::poll_fn(|cx| {
                    let polled = acquire.as_mut().poll(cx);
                    if let Some(arrived) = arrived.take() {
                        let _ = arrived.send(());
                    }
                    polled.map(|()| served.fetch_add(1, Ordering::Relaxed))
                })
                .await;
                (ticket, place)
            }));
            if arrivals == Arrivals::InSequence {
                let _ = has_arrived.await;
            }
        }
        let mut order = vec![0; waiters];
        for handle in handles {
            let (ticket, place) = handle.await.unwrap();
            order[ticket] = place;
        }
        let mut inverted = 0;
        for a in 0..waiters {
            for b in a + 1..waiters {
                inverted += u64::from(order[b] < order[a]);
            }
        }
        (inverted, cpu_time().saturating_sub(cpu))
    })
}

fn real_time() {
    let length = run_length();
    println!(
        "\nReal time, 2 tokio workers, {} cores here, median of {RUNS} runs of {length:?} ({FREE_ROUNDS} for 64 tasks at 10^9/s)",
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    let binding = BINDING;
    let tight = TIGHT;
    println!(
        "\n| limiter | 64 tasks, 10^9/s: grants/s (cores used) | 64 tasks, 10^6/s burst 1 000: share of the cap | \
         64 tasks, 10^7/s burst 1 000: share of the cap (cores used) | \
         1 waiter, 1 000/s burst 1: grants/s (host's floor; CPU) | \
         1 000 waiters, 500/s, in sequence: inversions of 499 500 (CPU) | the same, racing: inversions |"
    );
    println!("|---|---|---|---|---|---|---|");
    // Far above demand the figure is two threads on one word, and it moves by half from one
    // run to the next for every limiter alike: these runs are interleaved, every limiter once a
    // round, and each is compared with its peer round by round.
    let mut free = vec![Vec::with_capacity(FREE_ROUNDS); NAMES.len()];
    for _ in 0..FREE_ROUNDS {
        for (which, runs) in free.iter_mut().enumerate() {
            let run = many_tasks(which, UNBOUND, 64, length);
            let seconds = run.elapsed.as_secs_f64();
            runs.push((run.grants as f64 / seconds, run.cpu.as_secs_f64() / seconds));
        }
    }
    let rates = |which: usize| -> Vec<f64> { free[which].iter().map(|run| run.0).collect() };
    let free_ratios: Vec<(&str, Vec<f64>)> = [0, 2]
        .into_iter()
        .map(|ours| (NAMES[ours], by_round(&rates(ours), &rates(ours + 1))))
        .collect();
    for (which, name) in NAMES.iter().enumerate() {
        let free = median(free[which].clone());
        let bound = median(std::array::from_fn::<_, RUNS, _>(|_| {
            let run = many_tasks(which, binding, 64, length);
            let cap = binding.burst as f64 + binding.per_second as f64 * run.elapsed.as_secs_f64();
            assert!(
                run.grants as f64 <= cap,
                "{name} granted {} over a cap of {cap}",
                run.grants
            );
            run.grants as f64 / cap
        }));
        let capped = median(std::array::from_fn::<_, RUNS, _>(|_| {
            let run = many_tasks(which, tight, 64, length);
            let seconds = run.elapsed.as_secs_f64();
            let cap = tight.burst as f64 + tight.per_second as f64 * seconds;
            assert!(
                run.grants as f64 <= cap,
                "{name} granted {} over a cap of {cap}",
                run.grants
            );
            (run.grants as f64 / cap, run.cpu.as_secs_f64() / seconds)
        }));
        let one = Limit {
            per_second: 1_000,
            burst: 1,
        };
        // Each run beside a run of the host's floor just before it, so that a slow spell of the
        // host shows in both.
        let mut floors = [0.0; RUNS];
        let single = median(std::array::from_fn::<_, RUNS, _>(|i| {
            floors[i] = floor::sleeper_floor(one.per_second, length * 2);
            let run = many_tasks(which, one, 1, length * 2);
            let rate = run.grants as f64 / run.elapsed.as_secs_f64();
            (rate, run.cpu.as_secs_f64() / run.elapsed.as_secs_f64())
        }));
        let floor = median(floors);
        let order = |arrivals| {
            median(std::array::from_fn::<_, RUNS, _>(|_| {
                inversions(which, ORDER, 1_000, arrivals)
            }))
        };
        let (in_sequence, racing) = (order(Arrivals::InSequence), order(Arrivals::Racing));
        println!(
            "| {name} | {:.1} M ({:.1}) | {:.1} % | {:.1} % ({:.2}) | {:.1}/s ({:.1}/s; {:.0} % of a core) | {} ({:.2} s) | {} |",
            free.0 / 1e6,
            free.1,
            bound * 100.0,
            capped.0 * 100.0,
            capped.1,
            single.0,
            floor,
            single.1 * 100.0,
            in_sequence.0,
            in_sequence.1.as_secs_f64(),
            racing.0,
        );
    }
    println!(
        "\n64 tasks at 10^9/s, {FREE_ROUNDS} interleaved rounds: tollgate ÷ governor on the same clock, round by round"
    );
    for (name, ratios) in free_ratios {
        println!(
            "- {name}: median {:.2} (rounds: {})",
            median(ratios.clone()),
            ratios
                .iter()
                .map(|r| format!("{r:.2}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
}

/// One real-time figure alone, every limiter once: `blocking`, `binding` and `tight` (64
/// tasks at [`BINDING`], [`TIGHT`]), `order` (1 000 waiters at 500/s) or `cpu` (one waiter's
/// CPU at short waits).
fn probe(only: &str) {
    let length = run_length();
    if only == "blocking" {
        return blocking();
    }
    if only == "cpu" {
        return wait_cpu();
    }
    // `WAITS_LIMITER=i`: limiter `i` of `NAMES` alone (for a profile).
    let alone: Option<usize> = std::env::var("WAITS_LIMITER")
        .ok()
        .and_then(|i| i.parse().ok());
    for (which, name) in NAMES.iter().enumerate() {
        if alone.is_some_and(|alone| alone != which) {
            continue;
        }
        if only == "tight" || only == "binding" {
            let limit = if only == "tight" { TIGHT } else { BINDING };
            let run = many_tasks(which, limit, 64, length);
            let seconds = run.elapsed.as_secs_f64();
            let cap = limit.burst as f64 + limit.per_second as f64 * seconds;
            println!(
                "{name}: {:.1} % of the cap, {:.2} cores",
                run.grants as f64 / cap * 100.0,
                run.cpu.as_secs_f64() / seconds
            );
        } else {
            for (arrivals, named) in [
                (Arrivals::InSequence, "in sequence"),
                (Arrivals::Racing, "racing"),
            ] {
                let (inverted, cpu) = inversions(which, ORDER, 1_000, arrivals);
                println!(
                    "{name}, {named}: {inverted} inversions ({:.2} s)",
                    cpu.as_secs_f64()
                );
            }
        }
    }
}

/// The 1 000 waiters' limit: 500/s, a burst of 1.
const ORDER: Limit = Limit {
    per_second: 500,
    burst: 1,
};

/// What one waiter's waits cost in CPU at waits of 1 ms, 100 µs and 10 µs (one token at a
/// time, a burst of one, so every take but the first waits a token's time): the rate it gets
/// and the share of a core the whole process used, tokio's workers and timers included.
fn wait_cpu() {
    let length = run_length() * 2;
    println!("\nOne waiter, burst 1, {length:?} a run: grants/s (share of a core)\n");
    println!("| limiter | 1 000/s (1 ms waits) | 10 000/s (100 µs) | 100 000/s (10 µs) |");
    println!("|---|---|---|---|");
    for (which, name) in NAMES.iter().enumerate().take(4) {
        let cells: Vec<String> = [1_000u64, 10_000, 100_000]
            .into_iter()
            .map(|per_second| {
                let limit = Limit {
                    per_second,
                    burst: 1,
                };
                let run = many_tasks(which, limit, 1, length);
                let seconds = run.elapsed.as_secs_f64();
                format!(
                    "{:.0}/s ({:.0} %)",
                    run.grants as f64 / seconds,
                    run.cpu.as_secs_f64() / seconds * 100.0
                )
            })
            .collect();
        println!("| {name} | {} |", cells.join(" | "));
    }
}

/// Runs of each real-time figure.
const RUNS: usize = 3;

/// A cap that binds 64 tasks, each grant's wait on a timer.
const BINDING: Limit = Limit {
    per_second: 1_000_000,
    burst: 1_000,
};

/// A cap that binds 64 tasks taking one token at a time.
const TIGHT: Limit = Limit {
    per_second: 10_000_000,
    burst: 1_000,
};

/// The blocking limiters compared: threads, no runtime.
const BLOCKING: [&str; 4] = [
    "tollgate acquire_blocking (StdClock)",
    "governor check + sleep (MonotonicClock)",
    "tollgate acquire_blocking (TscClock)",
    "governor check + sleep (QuantaClock)",
];

/// `threads` threads taking one token at a time at `limit` for `length`, through limiter
/// `which` of [`BLOCKING`]: governor's check-and-sleep loop sleeps the time its refusal names
/// and checks again.
fn blocking_threads(which: usize, limit: Limit, threads: usize, length: Duration) -> Run {
    let quota = Quota::new(Rate::per_second(limit.per_second)).burst(u64::from(limit.burst));
    let governor_quota =
        governor::Quota::per_second(NonZeroU32::new(limit.per_second as u32).unwrap())
            .allow_burst(NonZeroU32::new(limit.burst).unwrap());
    let std_bucket = TokenBucket::try_new(quota, tollgate::StdClock).unwrap();
    let tsc_bucket = TokenBucket::try_new(quota, TscClock::new()).unwrap();
    let governor_std: GovernorStd =
        governor::RateLimiter::direct_with_clock(governor_quota, MonotonicClock);
    let governor_quanta = governor::RateLimiter::direct(governor_quota);
    let quanta_clock = governor::clock::QuantaClock::default();
    let acquire = || match which {
        0 => drop(std_bucket.acquire_blocking(1).unwrap()),
        1 => {
            while let Err(not_until) = governor_std.check() {
                std::thread::sleep(not_until.wait_time_from(Instant::now()));
            }
        }
        2 => drop(tsc_bucket.acquire_blocking(1).unwrap()),
        _ => {
            use governor::clock::Clock as _;
            while let Err(not_until) = governor_quanta.check() {
                std::thread::sleep(not_until.wait_time_from(quanta_clock.now()));
            }
        }
    };
    let cpu = cpu_time();
    let start = Instant::now();
    let grants: u64 = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut grants = 0u64;
                    while start.elapsed() < length {
                        acquire();
                        grants += 1;
                    }
                    grants
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    });
    let elapsed = start.elapsed();
    Run {
        grants,
        elapsed,
        cpu: cpu_time().saturating_sub(cpu),
    }
}

/// 16 threads blocking at 1 000/s with a burst of 1: the rate they get and the cores spent.
/// Interleaved rounds, every limiter once a round.
fn blocking() {
    let length = run_length() * 2;
    let limit = Limit {
        per_second: 1_000,
        burst: 1,
    };
    let mut runs = vec![Vec::with_capacity(RUNS); BLOCKING.len()];
    for _ in 0..RUNS {
        for (which, runs) in runs.iter_mut().enumerate() {
            let run = blocking_threads(which, limit, 16, length);
            let seconds = run.elapsed.as_secs_f64();
            assert!(
                run.grants as f64 <= 1.0 + limit.per_second as f64 * seconds,
                "{} granted {} in {seconds} s",
                BLOCKING[which],
                run.grants
            );
            runs.push((run.grants as f64 / seconds, run.cpu.as_secs_f64() / seconds));
        }
    }
    println!(
        "\n16 threads blocking at 1 000/s, burst 1, {RUNS} interleaved rounds of {length:?}: median (range)"
    );
    println!("\n| limiter | grants/s | cores used |");
    println!("|---|---|---|");
    for (name, runs) in BLOCKING.iter().zip(runs) {
        let rates: Vec<f64> = runs.iter().map(|r| r.0).collect();
        let cores: Vec<f64> = runs.iter().map(|r| r.1).collect();
        let range = |v: &[f64]| {
            (
                v.iter().copied().fold(f64::INFINITY, f64::min),
                v.iter().copied().fold(0.0, f64::max),
            )
        };
        let ((rate_lo, rate_hi), (cpu_lo, cpu_hi)) = (range(&rates), range(&cores));
        println!(
            "| {name} | {:.1} ({rate_lo:.1}–{rate_hi:.1}) | {:.3} ({cpu_lo:.3}–{cpu_hi:.3}) |",
            median(rates.clone()),
            median(cores.clone()),
        );
    }
}

/// Rounds of the 64 tasks far above demand.
const FREE_ROUNDS: usize = 5;

fn main() {
    // `WAITS_ONLY=blocking` (or `tight`, `order`, `cpu`): that real-time figure alone.
    if let Ok(only) = std::env::var("WAITS_ONLY") {
        probe(&only);
        return;
    }
    let mut criterion = Criterion::default().configure_from_args();
    no_wait(&mut criterion);
    criterion.final_summary();
    if std::env::var_os("WAITS_NO_REAL_TIME").is_none() {
        blocking();
        real_time();
    }
}

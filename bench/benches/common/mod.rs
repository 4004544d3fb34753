//! What the benches compare: tollgate, its floor, its peers and a mutex bucket, behind one small
//! trait, each built for the allow path (a quota it cannot exhaust during a run) or the deny path
//! (a drained bucket that refills once an hour).

#![allow(dead_code)] // each bench uses its own part

use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use governor::clock::{FakeRelativeClock, MonotonicClock, QuantaClock, QuantaUpkeepClock};
use tollgate::{Clock, CoarseClock, ManualClock, Quota, Rate, StdClock, TokenBucket, TscClock};

/// The middle figure of an odd count of runs (or the upper middle of an even one).
pub fn median<T: Copy + PartialOrd>(mut runs: impl AsMut<[T]>) -> T {
    let runs = runs.as_mut();
    runs.sort_by(|a, b| a.partial_cmp(b).unwrap());
    runs[runs.len() / 2]
}

/// `ours ÷ theirs` round by round, the two figures of each round measured one after the other,
/// in ascending order. A slow spell of a shared machine moves both figures of a round alike, so
/// these move less from run to run than the ratio of two medians, which may come from different
/// rounds.
pub fn by_round(ours: &[f64], theirs: &[f64]) -> Vec<f64> {
    let mut ratios: Vec<f64> = ours.iter().zip(theirs).map(|(a, b)| a / b).collect();
    ratios.sort_by(f64::total_cmp);
    ratios
}

/// One check of one token.
pub trait Limiter: Sync {
    /// Takes one token now, or says no.
    fn check(&self) -> bool;
}

/// Which path a limiter is built for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Path {
    /// Every check is granted: one token a nanosecond, a burst no run can use up.
    Allow,
    /// Every check is denied: one token an hour, burst one, already taken.
    Deny,
}

impl Path {
    pub fn name(self) -> &'static str {
        match self {
            Path::Allow => "allow",
            Path::Deny => "deny",
        }
    }
}

/// Tokens in the allow path's burst: more than criterion calls a limiter in one run, even with
/// a clock that stands still. governor's burst is a `u32`, hence its own maximum.
const ALLOW_BURST: u64 = 1 << 40;

/// Drains a limiter built for the deny path.
fn drain(limiter: &impl Limiter) {
    while limiter.check() {}
    assert!(!limiter.check(), "the deny path must deny");
}

/// Makes sure a limiter is on the path it was built for.
fn on_path<L: Limiter>(limiter: L, path: Path) -> L {
    match path {
        Path::Allow => assert!(limiter.check(), "the allow path must allow"),
        Path::Deny => drain(&limiter),
    }
    limiter
}

// ---- tollgate ----

impl<C: Clock + Sync> Limiter for TokenBucket<C> {
    #[inline]
    fn check(&self) -> bool {
        self.try_acquire(1).is_ok()
    }
}

pub fn tollgate<C: Clock + Sync>(clock: C, path: Path) -> TokenBucket<C> {
    let quota = match path {
        Path::Allow => Quota::new(Rate::per_second(1_000_000_000)).burst(ALLOW_BURST),
        Path::Deny => Quota::new(Rate::per_hour(1)).burst(1),
    };
    on_path(TokenBucket::try_new(quota, clock).unwrap(), path)
}

// ---- the floor: the same clock read and one compare-exchange ----

/// What no limiter on this clock can beat: read the clock, then update one word with a
/// compare-exchange loop (a monotonic stamp: the larger of the word and now, plus one).
pub struct Floor<C> {
    word: AtomicU64,
    clock: C,
}

impl<C: Clock + Sync> Limiter for Floor<C> {
    #[inline]
    fn check(&self) -> bool {
        let now = self.clock.now();
        let mut word = self.word.load(Ordering::Relaxed);
        loop {
            let new = word.max(now).wrapping_add(1);
            match self
                .word
                .compare_exchange_weak(word, new, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return true,
                Err(actual) => word = actual,
            }
        }
    }
}

pub fn floor<C: Clock + Sync>(clock: C) -> Floor<C> {
    Floor {
        word: AtomicU64::new(0),
        clock,
    }
}

/// What no denial on this clock can beat: read the clock, load one word, compare.
pub struct DenyFloor<C> {
    word: AtomicU64,
    clock: C,
}

impl<C: Clock + Sync> Limiter for DenyFloor<C> {
    #[inline]
    fn check(&self) -> bool {
        self.clock.now() > self.word.load(Ordering::Relaxed)
    }
}

/// The denial floor on each clock, named `{clock}/deny-floor`.
pub fn line_up_deny_floors() -> Vec<(&'static str, Box<dyn Check>)> {
    fn deny_floor<C: Clock + Sync + 'static>(clock: C) -> Box<dyn Check> {
        // Always later than any reading: every check denies.
        Box::new(DenyFloor {
            word: AtomicU64::new(u64::MAX),
            clock,
        })
    }
    let clock: &'static ManualClock = Box::leak(Box::new(ManualClock::starting_at(1 << 40)));
    vec![
        ("manual/deny-floor", deny_floor(clock)),
        ("std/deny-floor", deny_floor(StdClock)),
        ("tsc/deny-floor", deny_floor(tsc())),
        ("coarse/deny-floor", deny_floor(coarse())),
    ]
}

// ---- a mutex around f64 tokens, as the design documents build it ----

/// The thirty-line bucket: tokens as `f64`, refilled lazily under a lock.
pub struct MutexBucket<C> {
    state: Mutex<MutexState>,
    tokens_per_tick: f64,
    capacity: f64,
    clock: C,
}

struct MutexState {
    tokens: f64,
    updated_ticks: u64,
}

impl<C: Clock> MutexBucket<C> {
    pub fn new(tokens_per_second: f64, capacity: f64, clock: C) -> Self {
        let now = clock.now();
        Self {
            state: Mutex::new(MutexState {
                tokens: capacity,
                updated_ticks: now,
            }),
            tokens_per_tick: tokens_per_second / C::TICKS_PER_SECOND as f64,
            capacity,
            clock,
        }
    }

    fn refill(&self, state: &mut MutexState) {
        let now = self.clock.now();
        if now > state.updated_ticks {
            let elapsed = (now - state.updated_ticks) as f64;
            state.tokens = (state.tokens + elapsed * self.tokens_per_tick).min(self.capacity);
            state.updated_ticks = now;
        }
    }

    /// Takes `n` tokens, or returns the seconds until they will be there.
    pub fn try_acquire(&self, n: f64) -> Result<(), f64> {
        let mut state = self.state.lock().unwrap();
        self.refill(&mut state);
        if state.tokens >= n {
            state.tokens -= n;
            Ok(())
        } else {
            let deficit = n - state.tokens;
            Err(deficit / (self.tokens_per_tick * C::TICKS_PER_SECOND as f64))
        }
    }

    pub fn available(&self) -> u64 {
        let mut state = self.state.lock().unwrap();
        self.refill(&mut state);
        state.tokens as u64
    }
}

impl<C: Clock + Send + Sync> Limiter for MutexBucket<C> {
    #[inline]
    fn check(&self) -> bool {
        black_box(self.try_acquire(1.0)).is_ok()
    }
}

pub fn mutex_bucket<C: Clock + Send + Sync>(clock: C, path: Path) -> MutexBucket<C> {
    let bucket = match path {
        Path::Allow => MutexBucket::new(1e9, ALLOW_BURST as f64, clock),
        Path::Deny => MutexBucket::new(1.0 / 3600.0, 1.0, clock),
    };
    on_path(bucket, path)
}

// ---- governor ----

pub type Governor<C> = governor::RateLimiter<
    governor::state::NotKeyed,
    governor::state::InMemoryState,
    C,
    governor::middleware::NoOpMiddleware<<C as governor::clock::Clock>::Instant>,
>;

impl<C> Limiter for Governor<C>
where
    C: governor::clock::Clock + Sync + Send,
    C::Instant: Sync + Send,
{
    #[inline]
    fn check(&self) -> bool {
        governor::RateLimiter::check(self).is_ok()
    }
}

fn governor_quota(path: Path) -> governor::Quota {
    match path {
        Path::Allow => governor::Quota::with_period(Duration::from_nanos(1))
            .unwrap()
            .allow_burst(NonZeroU32::MAX),
        Path::Deny => governor::Quota::per_hour(NonZeroU32::MIN),
    }
}

pub fn governor_with<C>(clock: C, path: Path) -> Governor<C>
where
    C: governor::clock::Clock + Sync + Send,
    C::Instant: Sync + Send,
{
    on_path(
        governor::RateLimiter::direct_with_clock(governor_quota(path), clock),
        path,
    )
}

// ---- ratelimit ----

impl<C: ratelimit::Clock + Sync> Limiter for ratelimit::Ratelimiter<C> {
    #[inline]
    fn check(&self) -> bool {
        self.try_wait().is_ok()
    }
}

pub fn ratelimit(path: Path) -> ratelimit::Ratelimiter {
    let limiter = match path {
        Path::Allow => ratelimit::Ratelimiter::builder(1_000_000_000)
            .max_tokens(ALLOW_BURST)
            .initial_available(ALLOW_BURST)
            .build(),
        Path::Deny => ratelimit::Ratelimiter::builder(1)
            .period(Duration::from_secs(3600))
            .max_tokens(1)
            .initial_available(1)
            .build(),
    };
    on_path(limiter.unwrap(), path)
}

// ---- the line-up ----

/// A limiter behind a box, checked through a generic closure so that each runs monomorphized.
pub trait Check: Sync {
    /// Runs `iters` checks and counts the grants (so that none can be optimised away).
    fn run(&self, iters: u64) -> u64;
}

impl<L: Limiter> Check for L {
    #[inline(never)]
    fn run(&self, iters: u64) -> u64 {
        let mut granted = 0;
        for _ in 0..iters {
            granted += u64::from(black_box(self).check());
        }
        granted
    }
}

/// The fast clocks, made once per process (the TSC clock calibrates on first use).
pub fn tsc() -> TscClock {
    TscClock::new()
}

/// The TSC as quanta reads it in nanoseconds: its counter (a call into quanta), then its
/// scaling. `TscClock` reads the same counter in place and scales it with one multiply.
pub struct QuantaReading(quanta::Clock);

impl QuantaReading {
    pub fn new() -> Self {
        Self(quanta::Clock::new())
    }
}

impl Clock for QuantaReading {
    const TICKS_PER_SECOND: u64 = 1_000_000_000;
    #[inline]
    fn now(&self) -> u64 {
        self.0.delta_as_nanos(0, self.0.raw())
    }
}

pub fn coarse() -> CoarseClock {
    CoarseClock::new()
}

/// Governor's coarse clock, one for the process: quanta runs one upkeep thread at a time, and
/// the limiters of a table (grants and denials in the same rounds) are all alive at once.
pub fn upkeep() -> QuantaUpkeepClock {
    static UPKEEP: OnceLock<QuantaUpkeepClock> = OnceLock::new();
    UPKEEP
        .get_or_init(|| QuantaUpkeepClock::from_interval(CoarseClock::UPKEEP_INTERVAL).unwrap())
        .clone()
}

/// Every limiter on `path`, in the order the tables read: per clock, the floor, tollgate and
/// the peers on that clock or its nearest equivalent.
pub fn line_up(path: Path, with_manual: bool) -> Vec<(&'static str, Box<dyn Check>)> {
    let mut all: Vec<(&'static str, Box<dyn Check>)> = Vec::new();
    if with_manual {
        // The algorithm alone: a clock that stands still (one relaxed load).
        let clock: &'static ManualClock = Box::leak(Box::new(ManualClock::starting_at(1 << 40)));
        all.push(("manual/floor", Box::new(floor(clock))));
        all.push(("manual/tollgate", Box::new(tollgate(clock, path))));
        all.push((
            "manual/governor-fake",
            Box::new(governor_with(FakeRelativeClock::default(), path)),
        ));
    }
    all.push(("std/floor", Box::new(floor(StdClock))));
    all.push(("std/tollgate", Box::new(tollgate(StdClock, path))));
    all.push((
        "std/governor-monotonic",
        Box::new(governor_with(MonotonicClock, path)),
    ));
    all.push(("std/ratelimit", Box::new(ratelimit(path))));
    all.push(("std/mutex-f64", Box::new(mutex_bucket(StdClock, path))));
    all.push(("tsc/floor", Box::new(floor(tsc()))));
    all.push(("tsc/tollgate", Box::new(tollgate(tsc(), path))));
    all.push((
        "tsc/governor-default",
        Box::new(governor_with(QuantaClock::default(), path)),
    ));
    all.push(("tsc/mutex-f64", Box::new(mutex_bucket(tsc(), path))));
    all.push(("coarse/floor", Box::new(floor(coarse()))));
    all.push(("coarse/tollgate", Box::new(tollgate(coarse(), path))));
    all.push((
        "coarse/governor-upkeep",
        Box::new(governor_with(upkeep(), path)),
    ));
    all
}

// ---- the wait read: what a 429 needs ----

/// A limiter whose denial is read for its wait, as a server answering 429 with `Retry-After`
/// reads it: tollgate's `retry_after`, governor's `wait_time_from` a fresh reading of its clock
/// (its denial holds the instant the cell is ready, not the wait).
pub trait Waits: Sync {
    /// Takes one token now, or says how long until it could.
    fn wait(&self) -> Option<Duration>;
}

impl<C: Clock + Sync> Waits for TokenBucket<C> {
    #[inline]
    fn wait(&self) -> Option<Duration> {
        self.try_acquire(1)
            .err()
            .and_then(|denied| denied.retry_after())
    }
}

impl<C> Waits for Governor<C>
where
    C: governor::clock::Clock + Sync + Send,
    C::Instant: Sync + Send,
{
    #[inline]
    fn wait(&self) -> Option<Duration> {
        governor::RateLimiter::check(self)
            .err()
            .map(|not_until| not_until.wait_time_from(self.clock().now()))
    }
}

/// A [`Waits`] limiter run as a [`Check`]: each check reads the wait of its denial.
pub struct ReadWait<L>(pub L);

impl<L: Waits> Check for ReadWait<L> {
    #[inline(never)]
    fn run(&self, iters: u64) -> u64 {
        let mut waited = 0;
        for _ in 0..iters {
            waited += black_box(&self.0)
                .wait()
                .map_or(0, |wait| wait.as_nanos() as u64 & 1);
        }
        waited
    }
}

/// tollgate and governor on each clock, drained, each check reading the denial's wait: named
/// as [`line_up`] names them.
pub fn line_up_waits() -> Vec<(&'static str, Box<dyn Check>)> {
    let path = Path::Deny;
    let clock: &'static ManualClock = Box::leak(Box::new(ManualClock::starting_at(1 << 40)));
    vec![
        ("manual/tollgate", Box::new(ReadWait(tollgate(clock, path)))),
        (
            "manual/governor-fake",
            Box::new(ReadWait(governor_with(FakeRelativeClock::default(), path))),
        ),
        ("std/tollgate", Box::new(ReadWait(tollgate(StdClock, path)))),
        (
            "std/governor-monotonic",
            Box::new(ReadWait(governor_with(MonotonicClock, path))),
        ),
        ("tsc/tollgate", Box::new(ReadWait(tollgate(tsc(), path)))),
        (
            "tsc/governor-default",
            Box::new(ReadWait(governor_with(QuantaClock::default(), path))),
        ),
        (
            "coarse/tollgate",
            Box::new(ReadWait(tollgate(coarse(), path))),
        ),
        (
            "coarse/governor-upkeep",
            Box::new(ReadWait(governor_with(upkeep(), path))),
        ),
    ]
}

// ---- neighbours: a limiter per thread, side by side ----

/// A limiter on cache lines of its own, as the floor of neighbours: no limiter can do better
/// than threads that share nothing.
#[repr(align(128))]
pub struct Padded<L>(pub L);

impl<L: Limiter> Limiter for Padded<L> {
    #[inline]
    fn check(&self) -> bool {
        self.0.check()
    }
}

/// Limiters side by side in one allocation, as a `Vec` of per-tenant or per-core limiters holds
/// them; each thread that runs it takes the next one, so that threads share no limiter, only
/// whatever cache lines the limiters' layout makes them share.
pub struct Neighbours<L> {
    limiters: Vec<L>,
    next: AtomicUsize,
}

impl<L: Limiter> Check for Neighbours<L> {
    fn run(&self, iters: u64) -> u64 {
        let mine = &self.limiters[self.next.fetch_add(1, Ordering::Relaxed) % self.limiters.len()];
        // The same loop as every limiter's, on this thread's own.
        Check::run(mine, iters)
    }
}

fn neighbours<L: Limiter + 'static>(count: usize, make: impl Fn() -> L) -> Box<dyn Check> {
    Box::new(Neighbours {
        limiters: (0..count).map(|_| make()).collect(),
        next: AtomicUsize::new(0),
    })
}

/// For each clock, `count` floors (padded), tollgate buckets and governor limiters, each set
/// side by side, on the allow path, named as [`line_up`] names them.
pub fn line_up_neighbours(count: usize) -> Vec<(&'static str, Box<dyn Check>)> {
    let path = Path::Allow;
    let upkeep = upkeep();
    vec![
        ("std/floor", neighbours(count, || Padded(floor(StdClock)))),
        (
            "std/tollgate",
            neighbours(count, || tollgate(StdClock, path)),
        ),
        (
            "std/governor-monotonic",
            neighbours(count, || governor_with(MonotonicClock, path)),
        ),
        ("tsc/floor", neighbours(count, || Padded(floor(tsc())))),
        ("tsc/tollgate", neighbours(count, || tollgate(tsc(), path))),
        (
            "tsc/governor-default",
            neighbours(count, || governor_with(QuantaClock::default(), path)),
        ),
        (
            "coarse/floor",
            neighbours(count, || Padded(floor(coarse()))),
        ),
        (
            "coarse/tollgate",
            neighbours(count, || tollgate(coarse(), path)),
        ),
        (
            "coarse/governor-upkeep",
            neighbours(count, || governor_with(upkeep.clone(), path)),
        ),
    ]
}

/// Runs `iters` checks spread over `threads` threads released together, timed from the first
/// thread's start to the last one's end (each thread reads the clock itself, so a main thread
/// scheduled late cannot shorten the span). The threads meet at a spinning barrier, not a
/// sleeping one: a thread woken from a futex can start tens of microseconds after the others,
/// longer than a whole run of cheap checks (two threads denying on the TSC finish 200 000
/// checks each in 2 ms), so that the span would time the wake-up, not the checks.
pub fn time_on_threads(limiter: &dyn Check, threads: usize, iters: u64) -> Duration {
    let per_thread = iters.div_ceil(threads as u64);
    let arrived = AtomicUsize::new(0);
    let spans: Vec<(Instant, Instant)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    arrived.fetch_add(1, Ordering::AcqRel);
                    let mut spins = 0u32;
                    while arrived.load(Ordering::Acquire) < threads {
                        // More threads than cores: let the others on this core arrive.
                        spins += 1;
                        if spins % 1024 == 0 {
                            std::thread::yield_now();
                        } else {
                            std::hint::spin_loop();
                        }
                    }
                    let start = Instant::now();
                    black_box(limiter.run(per_thread));
                    (start, Instant::now())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let first = spans.iter().map(|span| span.0).min().unwrap();
    let last = spans.iter().map(|span| span.1).max().unwrap();
    last - first
}

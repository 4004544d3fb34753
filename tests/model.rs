//! No drift: the bucket against a small reference model in `u128` rationals.
//!
//! The model keeps the bucket's level in tokens × `b` and time in ticks, for a rate of `a / b`
//! tokens per tick, and refills, takes, reserves and cancels by the textbook rules. It reads the
//! clock to the bucket's documented resolution (`resolution_ticks`, a power of two of ticks; one
//! tick for most configurations), or in fixed point on the 32-bit word. Over random rates (1 per year to 10^12 per second), bursts
//! (1 to 2^32), clock frequencies (32 768 Hz to 10 GHz), clock origins near `u64::MAX`, both word
//! widths and random sequences of acquire / reserve / cancel / advance, the bucket and the model
//! must agree on every decision, every `retry_after`, every wait and every `available()`. An
//! `AdjustableBucket` on the same word runs beside it, taking the same acquires (it has no
//! reservations): it must agree with a model of its own, and report the same layout.

use std::time::Duration;

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestCaseError;
use tollgate::{
    AdjustableBucket, AdjustableWord, ConfigError, Denied, Quota, Rate, Reservation, TokenBucket,
};

const NANOS: u128 = 1_000_000_000;
const YEAR_SECS: u128 = 31_557_600;

mod support;
use support::counter::Counter;

fn gcd(mut a: u128, mut b: u128) -> u128 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// The whole nanoseconds in `ticks`, rounded up.
fn ceil_duration(ticks: u128, hz: u128) -> Duration {
    let ns = (ticks * NANOS).div_ceil(hz);
    Duration::new((ns / NANOS) as u64, (ns % NANOS) as u32)
}

/// How the bucket reads its clock, from its public report: quanta of `q` ticks worth `a` units
/// each (the 64-bit word, and the 32-bit word's slow rates), or fixed point, `m / 2^32` units a
/// tick (the 32-bit word).
#[derive(Clone, Copy, Debug)]
enum Reading {
    Quanta { q: u128, a: u128 },
    Fixed { m: u128 },
}

impl Reading {
    /// The units read at tick `t` (unbounded: the model's time never wraps).
    fn units(&self, t: u128) -> u128 {
        match *self {
            Reading::Quanta { q, a } => t / q * a,
            Reading::Fixed { m } => (t * m) >> 32,
        }
    }

    /// Ticks from `now` until `units` more have been read.
    fn ticks_until(&self, now: u128, units: u128) -> u128 {
        if units == 0 {
            return 0;
        }
        match *self {
            Reading::Quanta { q, a } => (now / q + units.div_ceil(a)) * q - now,
            Reading::Fixed { m } => ((units << 32) - (now * m) % (1 << 32)).div_ceil(m),
        }
    }
}

/// The textbook token bucket, in exact integers: level in units, read as the bucket reads.
#[derive(Clone)]
struct Model {
    reading: Reading,
    /// Units in a token.
    token: u128,
    /// The most units the bucket holds: the burst and less than one step of the reading.
    ceiling: u128,
    hz: u128,
    burst: u128,
    /// Units; negative in debt.
    level: i128,
    /// The reading `level` was computed at.
    at: u128,
    /// Reservations still held: (tokens, the instant in units the bucket was empty after it,
    /// the tick it was made, the tick it is due).
    held: Vec<(u32, i128, u128, u128)>,
}

#[derive(Debug, PartialEq)]
enum Answer {
    Granted,
    Reserved(Duration),
    Insufficient(Duration),
    ExceedsCapacity,
}

impl Model {
    fn refill(&mut self, now: u128) {
        let at = self.reading.units(now);
        if at > self.at {
            let ceiling = self.ceiling as i128;
            self.level = self
                .level
                .saturating_add((at - self.at) as i128)
                .min(ceiling);
            self.at = at;
        }
    }

    /// The instant, in units, at which the bucket is empty: what the bucket's word holds.
    fn empty_at(&self) -> i128 {
        self.at as i128 - self.level
    }

    fn acquire(&mut self, now: u128, n: u32) -> Answer {
        self.refill(now);
        if n == 0 {
            return Answer::Granted;
        }
        if n as u128 > self.burst {
            return Answer::ExceedsCapacity;
        }
        let need = (n as u128 * self.token) as i128;
        if self.level >= need {
            self.level -= need;
            return Answer::Granted;
        }
        let short = (need - self.level) as u128;
        Answer::Insufficient(ceil_duration(self.reading.ticks_until(now, short), self.hz))
    }

    fn reserve(&mut self, now: u128, n: u32, max_wait: Duration, max_debt: u128) -> Answer {
        self.refill(now);
        if n == 0 {
            return Answer::Reserved(Duration::ZERO);
        }
        if n as u128 > self.burst {
            return Answer::ExceedsCapacity;
        }
        let after = self.level - (n as u128 * self.token) as i128;
        let max_wait_ticks = max_wait.as_nanos() * self.hz / NANOS;
        if after < -(max_debt as i128) {
            // Past the debt bound: the later of "when the bound allows it" and "when the wait
            // fits".
            let beyond = (-(max_debt as i128) - after) as u128;
            let wait = self.reading.ticks_until(now, after.unsigned_abs());
            let retry = self
                .reading
                .ticks_until(now, beyond)
                .max(wait.saturating_sub(max_wait_ticks));
            return Answer::Insufficient(ceil_duration(retry, self.hz));
        }
        let wait = if after >= 0 {
            0
        } else {
            self.reading.ticks_until(now, after.unsigned_abs())
        };
        if wait > max_wait_ticks {
            return Answer::Insufficient(ceil_duration(wait - max_wait_ticks, self.hz));
        }
        self.level = after;
        self.held.push((n, self.empty_at(), now, now + wait));
        Answer::Reserved(ceil_duration(wait, self.hz))
    }

    /// Gives back all of a reservation while nothing came after it and it is not yet due;
    /// nothing otherwise.
    fn cancel(&mut self, now: u128, index: usize) {
        self.refill(now);
        let (n, empty_at, made, due) = self.held.remove(index);
        if now < made || now >= due || self.empty_at() != empty_at {
            return;
        }
        let full = (self.burst * self.token) as i128;
        self.level = (self.level + (n as u128 * self.token) as i128).min(full);
    }

    fn available(&mut self, now: u128) -> u64 {
        self.refill(now);
        (self.level.max(0) as u128 / self.token) as u64
    }
}

/// One step of a run, from raw random numbers scaled to the bucket at hand.
#[derive(Clone, Debug)]
enum Step {
    Acquire(u64),
    Reserve(u64, u64),
    Cancel(u64),
    Advance(u64, u64),
}

#[derive(Clone, Debug)]
struct Case {
    tokens: u64,
    period_ns: u64,
    burst: u64,
    start: (u8, u64),
    origin: u64,
    steps: Vec<Step>,
}

fn log_uniform(max_bits: u32) -> impl Strategy<Value = u64> {
    (0..=max_bits, any::<u64>()).prop_map(move |(bits, raw)| {
        let lo = if bits == 0 { 0 } else { 1u64 << (bits - 1) };
        let span = if bits == 0 { 1 } else { 1u64 << (bits - 1) };
        lo + raw % span
    })
}

fn case() -> impl Strategy<Value = Case> {
    let step = prop_oneof![
        3 => any::<u64>().prop_map(Step::Acquire),
        2 => (any::<u64>(), any::<u64>()).prop_map(|(n, w)| Step::Reserve(n, w)),
        1 => any::<u64>().prop_map(Step::Cancel),
        4 => (any::<u64>(), any::<u64>()).prop_map(|(kind, raw)| Step::Advance(kind, raw)),
    ];
    let origin = prop_oneof![
        Just(0u64),
        (0..10_000_000_000_000u64).prop_map(|back| u64::MAX - back),
        any::<u64>(),
    ];
    (
        log_uniform(20).prop_map(|t| t.max(1)),
        // 1 µs to about a year
        (10u32..=55, any::<u64>())
            .prop_map(|(bits, raw)| (1u64 << (bits - 1)) + raw % (1u64 << (bits - 1))),
        log_uniform(33).prop_map(|b| b.clamp(1, 1 << 32)),
        (0u8..3, any::<u64>()),
        origin,
        prop::collection::vec(step, 1..80),
    )
        .prop_map(|(tokens, period_ns, burst, start, origin, steps)| Case {
            tokens,
            period_ns,
            burst,
            start,
            origin,
            steps,
        })
}

/// A `try_acquire`'s answer, as the model gives it.
fn taken(result: Result<(), Denied>) -> Result<Answer, TestCaseError> {
    match result {
        Ok(()) => Ok(Answer::Granted),
        Err(Denied::Insufficient { retry_after }) => Ok(Answer::Insufficient(retry_after.get())),
        Err(Denied::ExceedsCapacity { .. }) => Ok(Answer::ExceedsCapacity),
        Err(other) => Err(TestCaseError::fail(format!("{other:?}"))),
    }
}

/// How a case ended: run, refused by the word, or outside the rates under test.
#[derive(Debug, PartialEq)]
enum Outcome {
    Ran,
    Refused,
    TooCoarse,
    OutOfRange,
}

fn run<const HZ: u64, W: AdjustableWord>(case: &Case) -> Result<Outcome, TestCaseError> {
    let per_second = case.tokens as u128 * NANOS / case.period_ns as u128;
    let rate_ok = case.tokens as u128 * YEAR_SECS * NANOS >= case.period_ns as u128
        && per_second <= 1_000_000_000_000;
    if !rate_ok {
        return Ok(Outcome::OutOfRange);
    }
    let rate = Rate::new(case.tokens, Duration::from_nanos(case.period_ns));
    let quota = Quota::new(rate).burst(case.burst);
    let quota = match case.start.0 {
        0 => quota,
        1 => quota.start_empty(),
        _ => quota.start_with(case.start.1 % (case.burst + 1)),
    };
    let clock = Counter::<HZ>::default();
    clock.0.set(case.origin);
    let bucket = match TokenBucket::<_, W>::try_new_with_word(quota, &clock) {
        Ok(bucket) => bucket,
        Err(ConfigError::Unrepresentable) => return Ok(Outcome::Refused),
        Err(ConfigError::ClockTooCoarse) => {
            // Only where one tick accrues nearly a burst or more.
            let per_tick = case.tokens as f64 * 1e9 / case.period_ns as f64 / HZ as f64;
            prop_assert!(per_tick > case.burst as f64 - 1.0, "{} per tick", per_tick);
            return Ok(Outcome::TooCoarse);
        }
        Err(other) => return Err(TestCaseError::fail(format!("{other:?}"))),
    };

    // The adjustable bucket on the same word: the same layout, so the same answers.
    let adjustable = AdjustableBucket::<_, W>::try_new_with_word(quota, &clock).unwrap();
    prop_assert_eq!(adjustable.tick_rate(), bucket.tick_rate());
    prop_assert_eq!(adjustable.is_exact(), bucket.is_exact());
    prop_assert_eq!(adjustable.resolution_ticks(), bucket.resolution_ticks());
    prop_assert_eq!(adjustable.resolution(), bucket.resolution());
    prop_assert_eq!(adjustable.idle_horizon(), bucket.idle_horizon());
    prop_assert_eq!(adjustable.max_pause(), bucket.max_pause());

    let hz = HZ as u128;
    // The rate the bucket enforces: the quota's, or rounded down by under 2^-20 (the 64-bit
    // word) or 10^-3 (the 32-bit word).
    let (a0, b0) = (rate.tokens() as u128 * NANOS, rate.period().as_nanos() * hz);
    let enforced = bucket.tick_rate();
    let (a1, b1) = (enforced.tokens as u128, enforced.ticks);
    let (g0, g1) = (gcd(a0, b0), gcd(a1, b1));
    if bucket.is_exact() {
        prop_assert_eq!((a1 / g1, b1 / g1), (a0 / g0, b0 / g0), "exact rate");
    } else {
        let lost = 1.0 - (a1 as f64 / b1 as f64) / (a0 as f64 / b0 as f64);
        let bound = if W::BITS == 32 {
            1e-3
        } else {
            1.0 / (1 << 20) as f64
        };
        prop_assert!(lost > -1e-15, "rounded up by {}", -lost);
        prop_assert!(lost <= bound + 1e-15, "rounded down by {}", lost);
    }
    // How the bucket reads its clock, from what it reports: fixed point on the 32-bit word
    // (`ticks` is U · 2^32), else quanta of `resolution_ticks` (`ticks` is U · quantum).
    let quantum = bucket.resolution_ticks() as u128;
    // (Where both could describe it, a unit every 2^32 ticks, they read alike.)
    let fixed =
        W::BITS == 32 && b1 % (1 << 32) == 0 && quantum == (1u128 << 32).div_ceil(a1).max(1);
    let (reading, token) = if fixed {
        (Reading::Fixed { m: a1 }, b1 >> 32)
    } else {
        (Reading::Quanta { q: quantum, a: a1 }, b1 / quantum)
    };
    let mut now = case.origin as u128;
    let burst_units = case.burst as u128 * token;
    let max_debt = if W::BITS == 32 {
        burst_units
    } else {
        u128::MAX >> 2
    };
    let step = match reading {
        Reading::Quanta { a, .. } => a,
        Reading::Fixed { m } => m.div_ceil(1 << 32),
    };
    let mut model = Model {
        reading,
        token,
        ceiling: burst_units + step.min(token) - 1,
        hz,
        burst: case.burst as u128,
        level: (quota.start_fill() as u128 * token) as i128,
        at: reading.units(now),
        held: Vec::new(),
    };

    // The adjustable bucket's model: acquires only.
    let mut adjustable_model = model.clone();

    // Keep the whole run inside the word's idle horizon, and waits inside its debt bound.
    let horizon = bucket.idle_horizon().as_nanos() * hz / NANOS;
    let mut budget = horizon / 2;
    let max_wait_cap = horizon / 4;
    let token_ticks = (b1 / a1).max(1);
    let burst_ticks = (case.burst as u128 * b1 / a1).max(1);
    let pick_n = |raw: u64| -> u32 {
        let burst = case.burst.min(u32::MAX as u64) as u32;
        match raw % 8 {
            0 => 0,
            1 => burst,
            2 => burst.saturating_add(1),
            3 => (raw >> 8) as u32 % burst.max(1) + 1,
            _ => ((raw >> 8) % 4) as u32 + 1,
        }
    };
    let mut reservations: Vec<Reservation> = Vec::new();

    for step in &case.steps {
        let t = now;
        match *step {
            Step::Acquire(raw) => {
                let n = pick_n(raw);
                let got = taken(bucket.try_acquire(n))?;
                prop_assert_eq!(got, model.acquire(t, n), "acquire {} at {}", n, t);
                let got = taken(adjustable.try_acquire(n))?;
                let want = adjustable_model.acquire(t, n);
                prop_assert_eq!(got, want, "adjustable: acquire {} at {}", n, t);
            }
            Step::Reserve(raw, wait_raw) => {
                let n = pick_n(raw);
                let wait_ticks = match wait_raw % 4 {
                    0 => 0,
                    1 => (wait_raw >> 2) as u128 % (token_ticks * 4 + 1),
                    2 => (wait_raw >> 2) as u128 % (burst_ticks * 2 + 1),
                    _ => max_wait_cap,
                }
                .min(max_wait_cap);
                let max_wait = ceil_duration(wait_ticks, hz);
                let (got, reservation) = match bucket.reserve(n, max_wait) {
                    Ok(r) => (Answer::Reserved(r.wait()), Some(r)),
                    Err(Denied::Insufficient { retry_after }) => {
                        (Answer::Insufficient(retry_after.get()), None)
                    }
                    Err(Denied::ExceedsCapacity { .. }) => (Answer::ExceedsCapacity, None),
                    Err(other) => return Err(TestCaseError::fail(format!("{other:?}"))),
                };
                let want = model.reserve(t, n, max_wait, max_debt);
                prop_assert_eq!(&got, &want, "reserve {} within {:?} at {}", n, max_wait, t);
                if let Some(r) = reservation {
                    if r.tokens() > 0 {
                        reservations.push(r);
                    }
                }
            }
            Step::Cancel(raw) => {
                if !reservations.is_empty() {
                    let index = raw as usize % reservations.len();
                    bucket.cancel(reservations.remove(index));
                    model.cancel(t, index);
                }
            }
            Step::Advance(kind, raw) => {
                let dt = match kind % 6 {
                    0 => 1,
                    1 => quantum,
                    2 => raw as u128 % (token_ticks + 1),
                    3 => raw as u128 % (burst_ticks + 1),
                    4 => token_ticks * (raw as u128 % 5),
                    _ => raw as u128 % (budget / 8 + 1),
                }
                .min(budget);
                budget -= dt;
                now += dt;
                clock.0.set(now as u64); // wraps at u64::MAX
            }
        }
        prop_assert_eq!(
            bucket.available(),
            model.available(now),
            "available at {}",
            now
        );
        prop_assert_eq!(
            adjustable.available(),
            adjustable_model.available(now),
            "adjustable: available at {}",
            now
        );
    }
    Ok(Outcome::Ran)
}

fn run_all(case: &Case) -> Result<Vec<Outcome>, TestCaseError> {
    Ok(vec![
        run::<32_768, u64>(case)?,
        run::<1_000_000, u64>(case)?,
        run::<1_000_000_000, u64>(case)?,
        run::<2_999_999_929, u64>(case)?, // a prime frequency: no common factors at all
        run::<10_000_000_000, u64>(case)?,
        run::<32_768, u32>(case)?,
        run::<1_000_000, u32>(case)?,
        run::<64_000_000, u32>(case)?,
        run::<1_000_000_000, u32>(case)?,
    ])
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 600, ..ProptestConfig::default() })]

    #[test]
    fn the_bucket_agrees_with_the_exact_model(case in case()) {
        run_all(&case)?;
    }

    /// Periods of a whole number of nanoseconds per token, as most quotas have: on the 1 GHz and
    /// 10 GHz clocks a unit is then a tick, a layout that random periods seldom give.
    #[test]
    fn the_bucket_agrees_with_the_exact_model_when_a_unit_is_a_tick(
        case in case(),
        ns_per_token in log_uniform(30).prop_map(|k| k.max(1)),
    ) {
        let case = Case { period_ns: case.tokens * ns_per_token, ..case };
        run_all(&case)?;
    }
}

/// The word refuses only what it must. On the 64-bit word every rate up to 10^6 per second
/// with a burst of up to a year of it runs, on every clock; on the 32-bit word every rate up to
/// 10^5 per second with a burst of up to 10^4 tokens and an hour of rate (a tick that accrues
/// more than the burst can take in is refused as too coarse, and checked to be so). What is refused needs
/// more distinct instants than the word has (a century of 10^11 tokens a second, a burst of
/// millennia).
#[test]
fn every_configuration_within_the_envelope_is_accepted() {
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let (mut ran, mut refused, mut refused_inside) = (0, 0, Vec::new());
    for _ in 0..3_000 {
        let mut case = case().new_tree(&mut runner).unwrap().current();
        case.steps.truncate(2);
        let per_second = case.tokens as f64 * 1e9 / case.period_ns as f64;
        let span_secs = case.burst as f64 / per_second;
        let inside64 = per_second <= 1e6 && span_secs <= YEAR_SECS as f64;
        let inside32 = per_second <= 1e5 && case.burst <= 10_000 && span_secs <= 3_600.0;
        for (bits, outcome) in run_all(&case).unwrap().into_iter().enumerate() {
            let inside = if bits < 5 { inside64 } else { inside32 };
            match outcome {
                Outcome::Ran => ran += 1,
                Outcome::Refused => {
                    refused += 1;
                    if inside {
                        refused_inside.push((case.tokens, case.period_ns, case.burst, bits));
                    }
                }
                Outcome::OutOfRange | Outcome::TooCoarse => {}
            }
        }
    }
    println!("{ran} ran, {refused} refused");
    assert!(ran > 3 * refused);
    assert_eq!(refused_inside, []);
}

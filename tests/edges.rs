//! The word at its edges: every way the bucket was once seen to mint or lock out, as a test on
//! both words where it applies, and the grids behind the README's table of horizons.

use std::time::Duration;

use tollgate::{
    AdjustableBucket, AdjustableWord, Clock, ConfigError, Denied, KeyedTable, Limits, ManualClock,
    Pause, Quota, Rate, TokenBucket, WhenFull, Word,
};

const SEC: u64 = 1_000_000_000;
const MS: u64 = 1_000_000;
const HOUR: Duration = Duration::from_secs(3_600);
const DAY: u64 = 86_400;
const YEAR: Duration = Duration::from_secs(31_557_600);

mod support;
use support::counter::Counter;

fn drain<C: Clock, W: Word>(bucket: &TokenBucket<C, W>) -> u64 {
    let mut got = 0;
    while bucket.try_acquire(1).is_ok() {
        got += 1;
    }
    got
}

/// A small deterministic generator (SplitMix64), so that the grids are the same every run.
#[derive(Clone)]
struct Mix(u64);

impl Mix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

// 1. A full bucket idle for exactly its horizon reads full, and a touch there renews it.
#[test]
fn at_exactly_its_horizon_a_full_bucket_reads_full_and_a_touch_there_renews_it() {
    let quotas = [
        Quota::new(Rate::per_second(10)).burst(10),
        Quota::new(Rate::per_minute(90_000)).burst(7_500),
        Quota::new(Rate::per_second(1_024)),
        Quota::new(Rate::per_second(50_001)).burst(10),
        Quota::new(Rate::per_second(100_000)).burst(1),
    ];
    for quota in quotas {
        let clock = ManualClock::new();
        let bucket = TokenBucket::<_, u32>::try_new_with_word(quota, &clock).unwrap();
        let horizon = bucket.idle_horizon();
        let burst = quota.burst_size();
        for _ in 0..4 {
            clock.advance(horizon);
            assert_eq!(bucket.available(), burst, "{quota} at its horizon");
            bucket.touch();
        }
        assert_eq!(drain(&bucket), burst, "{quota}");
    }
    // The 64-bit word's horizon is finite above 3 × 10^9 per second: the same holds there.
    let clock = ManualClock::new();
    let quota = Quota::new(Rate::per_second(100_000_000_000));
    let bucket = TokenBucket::try_new(quota, &clock).unwrap();
    assert!(bucket.idle_horizon() >= YEAR * 5 / 2);
    assert!(bucket.try_acquire(1_000).is_ok());
    for _ in 0..3 {
        clock.advance(bucket.idle_horizon());
        assert_eq!(bucket.available(), quota.burst_size());
        bucket.touch();
    }
}

// 2. Ordinary quotas on the 32-bit word hold an hour, and a caller far below the rate is never
// denied.
#[test]
fn ordinary_quotas_on_the_32_bit_word_hold_an_hour() {
    // (quota, the horizon before: 64 s, 1.07 s and 16.6 ms)
    for quota in [
        Quota::new(Rate::per_minute(90_000)).burst(7_500),
        Quota::new(Rate::per_second(1_024)),
        Quota::new(Rate::per_second(50_001)).burst(10),
    ] {
        let clock = ManualClock::new();
        let bucket = TokenBucket::<_, u32>::try_new_with_word(quota, &clock).unwrap();
        assert!(bucket.idle_horizon() >= HOUR, "{quota}");
    }
    // A caller every 20 ms at 50 001/s, burst 10, for two hours: never denied.
    let clock = ManualClock::new();
    let quota = Quota::new(Rate::per_second(50_001)).burst(10);
    let bucket = TokenBucket::<_, u32>::try_new_with_word(quota, &clock).unwrap();
    for i in 0..360_000 {
        clock.advance(Duration::from_millis(20));
        assert_eq!(bucket.try_acquire(1), Ok(()), "call {i}");
    }
}

// 2, continued. After a day idle, 10/s burst 10 reads full; wherever a long idle ends, a denial
// never asks for more than three bursts' refill (it once asked for 461 s).
#[test]
fn long_idles_on_the_32_bit_word_never_leave_deep_debt() {
    let clock = ManualClock::new();
    let quota = Quota::new(Rate::per_second(10)).burst(10);
    let bucket = TokenBucket::<_, u32>::try_new_with_word(quota, &clock).unwrap();
    assert_eq!(bucket.try_acquire(10), Ok(()));
    clock.advance(Duration::from_secs(DAY));
    assert_eq!(bucket.try_acquire(10), Ok(()));
    let mut mix = Mix(12);
    for _ in 0..2_000 {
        clock.advance(Duration::from_nanos(mix.next() % (7 * DAY * SEC)));
        if let Err(Denied::Insufficient { retry_after }) = bucket.try_acquire(10) {
            assert!(
                retry_after.get() <= Duration::from_secs(3),
                "{retry_after:?}"
            );
        }
        while bucket.try_acquire(1).is_ok() {}
    }
}

/// The share of idle lengths, drawn from `idles`, after which a drained bucket reads what an
/// exact bucket would (within one token), and the longest false wait seen.
/// The share of idles after which a drained bucket reads right, the worst false wait where it
/// does not, and the bucket's resolution.
fn idle_grid<const HZ: u64>(
    quota: Quota,
    idles: impl Iterator<Item = u64>,
) -> (f64, Duration, Duration) {
    let clock = Counter::<HZ>::default();
    clock.0.set(0xDEAD_BEEF_0000);
    let bucket = TokenBucket::<_, u32>::try_new_with_word(quota, &clock).unwrap();
    let rate = quota.rate();
    let burst = quota.burst_size();
    let (mut right, mut total, mut worst) = (0u64, 0u64, Duration::ZERO);
    for idle_ns in idles {
        // Drain, then idle.
        while bucket.try_acquire(1).is_ok() {}
        let ticks = (idle_ns as u128 * HZ as u128 / SEC as u128) as u64;
        clock.advance(ticks);
        let accrued = (idle_ns as u128 * rate.tokens() as u128 / rate.period().as_nanos()) as u64;
        let want = accrued.min(burst);
        let got = bucket.available();
        total += 1;
        // The drain leaves a fraction of a token, and the rate may be rounded down by a hair.
        if got + 1 >= want && got <= (want + 1).min(burst) {
            right += 1;
        } else if let Err(Denied::Insufficient { retry_after }) = bucket.try_acquire(1) {
            worst = worst.max(retry_after.get());
        }
    }
    (right as f64 / total as f64, worst, bucket.resolution())
}

// 2 and 3, as a grid: over idle lengths from a second to a week, with nothing calling touch, a
// drained bucket on the 32-bit word reads right in at least 99 % of them; where it does not, it
// reads at most two bursts (and two steps) in debt, so that a token comes within two refills,
// the token's own time and two resolution steps. (One refill is out of reach while the word
// keeps both a burst of legitimate debt and a refill's worth of clock stepped back: see the
// module docs of `params.rs`.)
#[test]
fn over_idles_from_a_second_to_a_week_the_32_bit_word_reads_right() {
    let week_ns = 7 * DAY * SEC;
    let rates = [1u64, 10, 1_000, 100_000];
    let bursts = [1u64, 10, 1_000, 10_000];
    let mut rows = Vec::new();
    let mut worst_ratio = 0.0f64;
    for &per_second in &rates {
        for &burst in &bursts {
            if burst > per_second * 3_600 {
                continue;
            }
            let quota = Quota::new(Rate::per_second(per_second)).burst(burst);
            let refill = Duration::from_nanos(burst * SEC / per_second);
            let token = Duration::from_nanos(SEC.div_ceil(per_second));
            let mut mix = Mix(per_second ^ burst);
            let uniform = (0..1_500).map(move |_| SEC + mix.next() % (week_ns - SEC));
            let mut mix = Mix(per_second.wrapping_mul(31) ^ burst);
            let log = (0..1_500).map(move |_| {
                let exp =
                    (mix.next() % 1_000) as f64 / 1_000.0 * (week_ns as f64 / SEC as f64).ln();
                (exp.exp() * SEC as f64) as u64
            });
            let mut grids = vec![
                (
                    "1 GHz, uniform",
                    idle_grid::<1_000_000_000>(quota, uniform.clone()),
                ),
                (
                    "1 MHz, log-uniform",
                    idle_grid::<1_000_000>(quota, log.clone()),
                ),
            ];
            if per_second <= 10_000 || burst >= 4 {
                grids.push((
                    "32 768 Hz, uniform",
                    idle_grid::<32_768>(quota, uniform.clone()),
                ));
            }
            for (name, (share, worst, resolution)) in grids {
                assert!(share >= 0.99, "{quota} on {name}: {share}");
                // (And a nanosecond: waits are rounded up to one.)
                let bound = refill * 2 + token + resolution * 2 + Duration::from_nanos(1);
                assert!(worst <= bound, "{quota} {name}: {worst:?} > {bound:?}");
                let ratio = worst.as_secs_f64() / refill.as_secs_f64();
                worst_ratio = worst_ratio.max(ratio);
                rows.push((per_second, burst, name, share, worst, ratio));
            }
        }
    }
    for (rate, burst, name, share, worst, ratio) in rows {
        println!(
            "{rate:>7}/s burst {burst:>6} {name:<20} read right {:>6.2} % worst false wait {worst:?} ({ratio:.2} x refill)",
            share * 100.0
        );
    }
    println!("worst false wait across the grid: {worst_ratio:.2} x the burst's refill");
}

// 3. A keyed table on the 32-bit word: a key quiet past the horizon is served, and reads full,
// so its slot can go to a new key.
#[test]
fn a_quiet_key_on_the_32_bit_word_is_served_and_its_slot_can_be_reused() {
    static CLOCK: ManualClock = ManualClock::new();
    let quota = Quota::new(Rate::per_second(10)).burst(10);
    let table: KeyedTable<u32, &ManualClock, 2, u32> =
        KeyedTable::try_new(quota, &CLOCK, WhenFull::Refuse).unwrap();
    let mut mix = Mix(3);
    let (mut served, mut reused, rounds) = (0, 0, 400);
    for round in 0..rounds {
        let key = round * 2;
        assert!(table.try_acquire(key, 10).is_ok() || round > 0);
        assert!(table.try_acquire(key + 1, 10).is_ok() || round > 0);
        CLOCK.advance(Duration::from_nanos(
            HOUR.as_nanos() as u64 + mix.next() % (DAY * SEC),
        ));
        if table.try_acquire(key, 10).is_ok() {
            served += 1;
        }
        // A new key finds a slot: a quiet key's bucket reads full and is evicted.
        if table.try_acquire(key + 2, 1).is_ok() {
            reused += 1;
        }
    }
    assert!(served * 100 >= rounds * 98, "{served} of {rounds}");
    assert!(reused * 100 >= rounds * 98, "{reused} of {rounds}");
}

// 4. On the 32-bit word, a reservation due long ago, kept readable by touch, gives nothing back.
#[test]
fn a_reservation_due_long_ago_gives_nothing_back_on_either_word() {
    fn run<W: Word>() {
        let clock = ManualClock::new();
        let quota = Quota::new(Rate::per_second(10)).burst(10);
        let bucket = TokenBucket::<_, W>::try_new_with_word(quota, &clock).unwrap();
        assert_eq!(bucket.try_acquire(10), Ok(()));
        let reservation = bucket.reserve(10, Duration::from_secs(2)).unwrap();
        let horizon = bucket.idle_horizon().min(Duration::from_secs(DAY));
        // Past half the word's turn and more, touched within every horizon.
        for _ in 0..9 {
            clock.advance(horizon / 2);
            bucket.touch();
        }
        bucket.cancel(reservation);
        assert_eq!(bucket.available(), 10);
        assert_eq!(drain(&bucket), 10, "{} bits", W::BITS);
    }
    run::<u32>();
    run::<u64>();
}

// 5. A cancel after a pause grants nothing during the pause: neither `Limits::cancel` nor the
// bucket's.
#[test]
fn a_cancel_after_a_pause_grants_nothing_during_it() {
    let clock = ManualClock::new();
    let a = TokenBucket::try_new(Quota::new(Rate::per_second(10)).burst(10), &clock).unwrap();
    let b = TokenBucket::try_new(Quota::new(Rate::per_second(100)).burst(100), &clock).unwrap();
    let limits = Limits::new([&a, &b]);
    assert!(limits.try_acquire([10, 10]).is_ok());
    let reservation = limits.reserve([5, 5], Duration::from_secs(1)).unwrap();
    assert!(matches!(
        a.pause_for(Duration::from_secs(10)),
        Pause::Paused { .. }
    ));
    clock.advance(Duration::from_millis(100));
    limits.cancel(reservation);
    for _ in 0..99 {
        clock.advance(Duration::from_millis(100));
        assert!(a.try_acquire(1).is_err(), "granted during the pause");
    }
    clock.advance(Duration::from_millis(200));
    assert!(a.try_acquire(1).is_ok());

    // The same with one bucket's reserve and cancel.
    let clock = ManualClock::new();
    let bucket = TokenBucket::try_new(Quota::new(Rate::per_second(10)).burst(10), &clock).unwrap();
    assert_eq!(bucket.try_acquire(10), Ok(()));
    let reservation = bucket.reserve(5, Duration::from_secs(1)).unwrap();
    let _ = bucket.pause_for(Duration::from_secs(10));
    bucket.cancel(reservation);
    clock.advance(Duration::from_secs(6));
    assert!(bucket.try_acquire(1).is_err(), "granted during the pause");
}

// 6. Quota changes between layouts of different resolutions never mint, however often; at a
// pace an upstream could set, they cost the rate nothing measurable. On each word: 50 000/s and
// 50 001/s (fixed point on the 32-bit word), 549 637/s (read in 128 ns quanta, rounded down) and
// 550 000/s (every nanosecond, exact) on the 64-bit word.
#[test]
fn alternating_quotas_never_mint() {
    fn run<W: AdjustableWord>(rates: [u64; 2]) {
        // (ns between changes, least share of the bound granted)
        for (every_ns, least) in [(512, 0.0), (10 * MS, 0.999)] {
            let clock = ManualClock::new();
            let (q1, q2) = (
                Quota::new(Rate::per_second(rates[0])).burst(10),
                Quota::new(Rate::per_second(rates[1])).burst(10),
            );
            let bucket = AdjustableBucket::<_, W>::try_new_with_word(q1, &clock).unwrap();
            let other = AdjustableBucket::<_, W>::try_new_with_word(q2, &clock).unwrap();
            if W::BITS == 64 {
                assert_ne!(bucket.resolution_ticks(), other.resolution_ticks());
            }
            let mut granted = 0u64;
            // (A second of the fastest changes on each word keeps the suite quick.)
            let span = if every_ns == 512 { SEC } else { 2 * SEC };
            let mut now = 0u64;
            let mut change = 0u64;
            while now < span {
                // Poll every 512 ns; change the quota every `every_ns`.
                now += 512;
                clock.set(now);
                if now / every_ns > change {
                    change = now / every_ns;
                    let _ = bucket.set_quota(if change % 2 == 1 { q2 } else { q1 });
                }
                while bucket.try_acquire(1).is_ok() {
                    granted += 1;
                }
            }
            // burst + rate × elapsed, at the higher rate.
            let bound = 10 + rates[1] * span / SEC;
            assert!(granted <= bound, "{} bits: {granted} > {bound}", W::BITS);
            assert!(
                granted as f64 >= bound as f64 * least,
                "{} bits: {granted} of {bound} with a change every {every_ns} ns",
                W::BITS
            );
        }
    }
    run::<u32>([50_000, 50_001]);
    run::<u64>([549_637, 550_000]);
}

// 7. Resolution never eats the rate: a caller polling at every tick gets the rate within a token
// and a step; what cannot be held so is refused, naming why.
#[test]
fn resolution_never_eats_the_rate() {
    fn poll<const HZ: u64, W: Word>(quota: Quota, ticks: u64) -> u64 {
        let clock = Counter::<HZ>::default();
        let bucket = TokenBucket::<_, W>::try_new_with_word(quota.start_empty(), &clock).unwrap();
        let mut granted = 0;
        for _ in 0..ticks {
            clock.advance(1);
            while bucket.try_acquire(1).is_ok() {
                granted += 1;
            }
        }
        granted
    }
    // 10^6/s, burst 100, on a 32 768 Hz clock, for a second: 10^6, not 6 500.
    let quota = Quota::new(Rate::per_second(1_000_000)).burst(100);
    for granted in [
        poll::<32_768, u64>(quota, 32_768),
        poll::<32_768, u32>(quota, 32_768),
    ] {
        assert!(granted.abs_diff(1_000_000) <= 31, "{granted}");
    }
    // 549 637/s, burst 1, on a nanosecond clock, for a millisecond: 549, not 245.
    let quota = Quota::new(Rate::per_second(549_637)).burst(1);
    for granted in [
        poll::<1_000_000_000, u64>(quota, 1_000_000),
        poll::<1_000_000_000, u32>(quota, 1_000_000),
    ] {
        assert!((548..=550).contains(&granted), "{granted}");
    }
    // One tick of 32 768 Hz at 10^6/s is 30.5 tokens: a burst of 10 cannot take it in.
    let quota = Quota::new(Rate::per_second(1_000_000)).burst(10);
    let clock = Counter::<32_768>::default();
    assert_eq!(
        TokenBucket::try_new(quota, &clock).err(),
        Some(ConfigError::ClockTooCoarse)
    );
    assert_eq!(
        TokenBucket::<_, u32>::try_new_with_word(quota, &clock).err(),
        Some(ConfigError::ClockTooCoarse)
    );
}

// 8. AdjustableBucket pauses as TokenBucket does on the same word: rounded up, and it says
// what it did; its accessors are those of a TokenBucket on the same word.
#[test]
fn an_adjustable_bucket_pauses_rounded_up() {
    fn run<W: AdjustableWord>() {
        let clock = ManualClock::new();
        let quota = Quota::new(Rate::per_second(10)).burst(20);
        let bucket = AdjustableBucket::<_, W>::try_new_with_word(quota, &clock).unwrap();
        let plain = TokenBucket::<_, W>::try_new_with_word(quota, &clock).unwrap();
        let pause = bucket.pause_for(Duration::from_millis(1_500));
        assert_eq!(pause, plain.pause_for(Duration::from_millis(1_500)));
        assert!(matches!(pause, Pause::Paused { .. }), "{pause:?}");
        assert!(
            pause.resumes_after() >= Duration::from_millis(1_500),
            "{pause:?}"
        );
        clock.set(1_500 * MS);
        assert!(bucket.try_acquire(1).is_err());
        clock.set(1_601 * MS);
        assert!(bucket.try_acquire(1).is_ok());
        assert_eq!(bucket.idle_horizon(), plain.idle_horizon());
        assert!(bucket.idle_horizon() >= HOUR);
        assert!(bucket.resolution() <= Duration::from_micros(10));
        assert_eq!(bucket.max_pause(), plain.max_pause());
        // Decades on the 64-bit word; one burst's refill on the 32-bit word.
        let least = if W::BITS == 64 {
            YEAR * 10
        } else {
            Duration::from_secs(2)
        };
        assert!(bucket.max_pause() >= least, "{:?}", bucket.max_pause());
        // A pause past it is clamped, and says so.
        let long = bucket.max_pause() + Duration::from_secs(1);
        assert!(matches!(bucket.pause_for(long), Pause::Clamped { .. }));
    }
    run::<u32>();
    run::<u64>();
}

// 9. A clock stepped back never turns a due reservation into a refund.
#[test]
fn a_clock_stepped_back_never_turns_a_due_reservation_into_a_refund() {
    fn run<W: Word>() {
        let clock = ManualClock::new();
        clock.set(10 * SEC);
        let quota = Quota::new(Rate::per_second(5)).burst(5);
        let bucket = TokenBucket::<_, W>::try_new_with_word(quota, &clock).unwrap();
        let due_now = bucket.reserve(5, Duration::ZERO).unwrap();
        assert_eq!(due_now.wait(), Duration::ZERO);
        clock.set(10 * SEC - 1);
        bucket.cancel(due_now);
        clock.set(10 * SEC);
        assert_eq!(drain(&bucket), 0, "{} bits", W::BITS);
        // A pending one made after a step forward, cancelled after a step back: nothing either.
        clock.set(12 * SEC);
        assert_eq!(bucket.try_acquire(5), Ok(()));
        let pending = bucket.reserve(1, Duration::from_secs(1)).unwrap();
        clock.set(11 * SEC);
        bucket.cancel(pending);
        clock.set(12 * SEC + 200 * MS);
        assert_eq!(drain(&bucket), 0, "{} bits", W::BITS);
    }
    run::<u32>();
    run::<u64>();
}

// The 64-bit word at the highest rates: exact, with the horizon traded for the rate above about
// 3 × 10^9 per second, at least 2.5 years at 10^11 per second.
#[test]
fn the_64_bit_word_holds_rates_up_to_10_to_the_11_exactly() {
    let clock = ManualClock::new();
    // (tokens per second, the horizon it must reach)
    let rows = [
        (1_000_000_000u64, YEAR * 100),
        (2_900_000_000, YEAR * 10),
        (10_000_000_000, YEAR * 25),
        (12_500_000_000, YEAR * 10),     // a 100 GbE link in bytes
        (100_000_000_000, YEAR * 5 / 2), // the same in bits
    ];
    for (per_second, horizon) in rows {
        let bucket = TokenBucket::try_new(Quota::new(Rate::per_second(per_second)), &clock)
            .unwrap_or_else(|e| panic!("{per_second}/s: {e}"));
        assert!(bucket.is_exact(), "{per_second}/s");
        assert!(
            bucket.idle_horizon() >= horizon,
            "{per_second}/s: {:?}",
            bucket.idle_horizon()
        );
        println!(
            "{per_second:>15}/s: horizon {:.1} years, resolution {:?}",
            bucket.idle_horizon().as_secs_f64() / YEAR.as_secs_f64(),
            bucket.resolution()
        );
    }
    // Past 10^12 per second a year of instants does not fit in 64 bits.
    assert_eq!(
        TokenBucket::try_new(Quota::new(Rate::per_second(1_000_000_000_000)), &clock).err(),
        Some(ConfigError::Unrepresentable)
    );
}

// The README's table: the 32-bit word's horizon and resolution over rates, bursts and clocks.
#[test]
fn the_32_bit_word_holds_an_hour_across_the_grid() {
    fn row<const HZ: u64>(per_second: u64, burst: u64) -> Option<(Duration, Duration, bool)> {
        let clock = Counter::<HZ>::default();
        let quota = Quota::new(Rate::per_second(per_second)).burst(burst);
        match TokenBucket::<_, u32>::try_new_with_word(quota, &clock) {
            Ok(bucket) => {
                let enforced = bucket.tick_rate();
                let asked = per_second as f64 / HZ as f64;
                let got = enforced.tokens as f64 / enforced.ticks as f64;
                assert!(
                    got <= asked * (1.0 + 1e-12),
                    "{quota} on {HZ} Hz rounded up"
                );
                assert!(
                    got >= asked * (1.0 - 1e-3),
                    "{quota} on {HZ} Hz: {got} of {asked}"
                );
                assert_eq!(bucket.is_exact(), got == asked || bucket.is_exact());
                Some((
                    bucket.idle_horizon(),
                    bucket.resolution(),
                    bucket.is_exact(),
                ))
            }
            Err(ConfigError::ClockTooCoarse) => {
                assert!(per_second as f64 / HZ as f64 > burst as f64 - 1.0);
                None
            }
            Err(e) => panic!("{quota} on {HZ} Hz: {e}"),
        }
    }
    let mut coarse = 0;
    for per_second in [1u64, 10, 100, 1_000, 10_000, 100_000] {
        for burst in [1u64, 10, 100, 1_000, 10_000] {
            for (hz, got) in [
                ("32 768 Hz", row::<32_768>(per_second, burst)),
                ("1 MHz", row::<1_000_000>(per_second, burst)),
                ("1 GHz", row::<1_000_000_000>(per_second, burst)),
            ] {
                let Some((horizon, resolution, exact)) = got else {
                    coarse += 1;
                    continue;
                };
                assert!(
                    horizon >= HOUR,
                    "{per_second}/s burst {burst} on {hz}: {horizon:?}"
                );
                println!(
                    "{per_second:>7}/s burst {burst:>6} on {hz:<9}: horizon {:>7.2} h, resolution {resolution:?}{}",
                    horizon.as_secs_f64() / 3_600.0,
                    if exact { ", exact" } else { "" }
                );
            }
        }
    }
    // Only 10^5/s with bursts of 1 on 32 768 Hz (3 tokens a tick) is refused as too coarse.
    assert_eq!(coarse, 1);
}

/// A part of a `Limits` reservation due before the others is held until the caller acts, and its
/// bucket counts it so: refilling meanwhile, the bucket cannot hold a full burst beside it. (A
/// per-second limit beside a per-minute one: the second's whole burst reserved, due now, used in
/// a minute; without the hold, the second's bucket was full again by then and granted its burst
/// twice at that instant.) The held part is debt: on the 32-bit word, whose debt is a burst's
/// refill, a hold of a minute is refused, taking nothing, until it fits.
#[test]
fn a_limits_part_held_for_the_others_is_counted_against_its_burst() {
    fn on<W: tollgate::Word>() {
        let clock = ManualClock::new();
        let second: TokenBucket<_, W> =
            TokenBucket::try_new_with_word(Quota::new(Rate::per_second(10)).burst(10), &clock)
                .unwrap();
        let minute: TokenBucket<_, W> =
            TokenBucket::try_new_with_word(Quota::new(Rate::per_minute(1)).burst(1), &clock)
                .unwrap();
        let limits = Limits::new([&second, &minute]);
        assert!(limits.try_acquire([1, 1]).is_ok());
        clock.advance(Duration::from_millis(100));
        // The second's burst now, the minute's token in a minute (less the 100 ms gone).
        let before = second.available();
        let reservation = match limits.reserve([10, 1], Duration::from_secs(60)) {
            Ok(reservation) => reservation,
            Err(Denied::Insufficient { retry_after }) => {
                // The 32-bit word holds a second of debt: refused until the minute's token is
                // within a second, and nothing taken.
                assert_eq!(W::BITS, 32);
                let short = Duration::from_millis(58_900);
                assert!(
                    retry_after.get() >= short
                        && retry_after.get() < short + Duration::from_millis(2)
                );
                assert_eq!(second.available(), before);
                clock.advance(retry_after.get());
                let reservation = limits.reserve([10, 1], Duration::from_secs(60)).unwrap();
                assert!(reservation.wait() <= second.max_pause());
                for _ in 0..9 {
                    clock.advance(Duration::from_millis(100));
                    assert_eq!(second.available(), 0, "at {:?}", clock.now());
                }
                return;
            }
            Err(other) => panic!("{other:?}"),
        };
        assert_eq!(W::BITS, 64);
        let wait = reservation.wait();
        assert!(wait >= Duration::from_millis(59_900) && wait < Duration::from_millis(59_901));
        // Up to the instant the caller acts, the second's bucket holds nothing beside the part.
        for _ in 0..599 {
            clock.advance(Duration::from_millis(100));
            assert_eq!(second.available(), 0, "at {:?}", clock.now());
        }
        clock.advance(wait - Duration::from_millis(59_900));
        assert!(second.try_acquire(1).is_err());
        // From then on, its rate.
        clock.advance(Duration::from_millis(100));
        assert_eq!(second.available(), 1);
    }
    on::<u64>();
    on::<u32>();
}

//! Window quotas ([`Quota::within`]) driven as greedily as a caller can, on several clocks,
//! with every sliding window of their grants counted by an independent check: a sorted list of
//! grant instants, and for each grant the grants in the closed window that starts at it.
//!
//! The drivers: `try_acquire` of as many tokens as the bucket will give at every tick (literally
//! every tick where the run is small enough, otherwise at every instant a denial's
//! `retry_after` names, after checking that one tick earlier is still denied), on both words;
//! reservations made back to back; `Limits` of three windows of one upstream; tokio waits under
//! paused time. Idles of random length in between let the bucket refill, so that bursts land
//! next to steady streams: the worst case for a window.
//!
//! The check bites: the naive quota (rate = cap / window, burst = cap) and a quota one token
//! too fast (`within(cap + 1, window)`) are both caught.

use std::time::Duration;

use tollgate::{Clock, ConfigError, Denied, Limits, ManualClock, Quota, Rate, TokenBucket};

mod support;
use support::counter::Counter;

/// A clock the drivers can step.
trait Steppable: Clock + Default {
    fn set_ticks(&self, ticks: u64);
}

impl<const HZ: u64> Steppable for Counter<HZ> {
    fn set_ticks(&self, ticks: u64) {
        self.0.set(ticks);
    }
}

impl Steppable for ManualClock {
    fn set_ticks(&self, ticks: u64) {
        self.set(ticks);
    }
}

/// A small deterministic generator for idles.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

fn ticks_ceil<C: Clock>(d: Duration) -> u64 {
    (d.as_nanos() * C::TICKS_PER_SECOND as u128).div_ceil(1_000_000_000) as u64
}

/// The most grants in any closed window `[t, t + window_ticks]`: the independent counter.
fn most_in_any_window(grants: &mut [u64], window_ticks: u64) -> usize {
    grants.sort_unstable();
    let mut most = 0;
    let mut end = 0;
    for start in 0..grants.len() {
        while end < grants.len() && grants[end] <= grants[start] + window_ticks {
            end += 1;
        }
        most = most.max(end - start);
    }
    most
}

/// The published caps the tests try: (cap, window, burst asked for).
fn cases() -> Vec<(&'static str, Quota, u64, Duration)> {
    let s = Duration::from_secs;
    vec![
        ("7 per 13 s", Quota::within(7, s(13)), 7, s(13)),
        (
            "7 per 13 s, burst 3",
            Quota::within_with_burst(7, s(13), 3),
            7,
            s(13),
        ),
        ("1000 per hour", Quota::within(1000, s(3600)), 1000, s(3600)),
        (
            "3 per 500 ms",
            Quota::within(3, Duration::from_millis(500)),
            3,
            Duration::from_millis(500),
        ),
        (
            "100 per minute, burst 40",
            Quota::within(100, s(60)).burst(40),
            100,
            s(60),
        ),
        (
            "600 per minute, -5 %, -10 %, one of 3 jobs",
            Quota::within(600, s(60))
                .minus_percent(5)
                .minus_percent(10)
                .divided_by(3),
            171,
            s(60),
        ),
        ("1000 per second", Quota::within(1000, s(1)), 1000, s(1)),
        (
            "1000 per second, burst 3",
            Quota::within(1000, s(1)).burst(3),
            1000,
            s(1),
        ),
    ]
}

/// What a driver saw: every grant's tick.
struct Run {
    grants: Vec<u64>,
    end_ticks: u64,
    /// Whether the caller acted at the bucket's exact instants, at the exact rate (not rounded
    /// down): then some window reaches the cap.
    exact: bool,
}

/// `try_acquire` of the most the bucket gives, at every tick (or every instant a denial names),
/// with random idles, for `windows` windows.
fn greedy<C: Steppable, const WIDE: bool>(quota: Quota, window: Duration, windows: u64) -> Run {
    let clock = C::default();
    let window_ticks = ticks_ceil::<C>(window);
    let end_ticks = window_ticks * windows;
    let literal = end_ticks <= 4_000_000;
    let take = |b: &dyn Fn(u32) -> Result<(), Denied>, now: u64, grants: &mut Vec<u64>| {
        // As many as it gives: the whole burst first, then fewer.
        let mut n = quota.burst_size().min(u64::from(u32::MAX)) as u32;
        loop {
            match b(n) {
                Ok(()) => {
                    grants.extend(std::iter::repeat(now).take(n as usize));
                    continue;
                }
                Err(Denied::Insufficient { retry_after }) if n == 1 => return retry_after,
                Err(Denied::ExceedsCapacity { .. }) => panic!("burst refused"),
                Err(_) => n = (n / 2).max(1),
            }
        }
    };
    let mut grants = Vec::new();
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15 ^ window_ticks);
    let narrow;
    let wide;
    let exact;
    let acquire: &dyn Fn(u32) -> Result<(), Denied> = if WIDE {
        wide = TokenBucket::try_new(quota, &clock).expect("a window quota builds");
        exact = wide.is_exact();
        &|n| wide.try_acquire(n)
    } else {
        narrow =
            TokenBucket::<_, u32>::try_new_with_word(quota, &clock).expect("a window quota builds");
        exact = narrow.is_exact();
        &|n| narrow.try_acquire(n)
    };
    // Streams of one to three windows, then idles of up to two: bursts next to streams.
    let mut idle_at = 2 * window_ticks + rng.below(window_ticks);
    let nanosecond = C::TICKS_PER_SECOND == 1_000_000_000;
    let mut now = 0;
    while now < end_ticks {
        clock.set_ticks(now);
        let retry_after = take(acquire, now, &mut grants);
        if now >= idle_at {
            now += 1 + rng.below(2 * window_ticks);
            idle_at = now + window_ticks + rng.below(2 * window_ticks);
        } else if literal {
            now += 1;
        } else {
            // The first tick at or after `retry_after`, read back from nanoseconds rounded up:
            // exactly `next` on a nanosecond clock, `next` or the tick before on others.
            let next = now + ticks_ceil::<C>(retry_after.get()).max(1);
            let earliest = if nanosecond { next } else { next - 1 };
            if earliest - 1 > now {
                clock.set_ticks(earliest - 1);
                assert!(acquire(1).is_err(), "granted before retry_after");
            }
            now = earliest.max(now + 1);
        }
    }
    Run {
        grants,
        end_ticks,
        exact,
    }
}

/// Reservations of one token made back to back, the clock moved on to each one's instant (or
/// a random idle), every reservation counted at the tick the caller may act.
fn reserving<C: Steppable>(quota: Quota, window: Duration, windows: u64) -> Run {
    let clock = C::default();
    let bucket = TokenBucket::try_new(quota, &clock).expect("a window quota builds");
    let window_ticks = ticks_ceil::<C>(window);
    let end_ticks = window_ticks * windows;
    let mut rng = XorShift(0x2545_f491_4f6c_dd1d ^ window_ticks);
    let mut grants = Vec::new();
    let mut idle_at = 2 * window_ticks + rng.below(window_ticks);
    let mut now = 0;
    while now < end_ticks {
        clock.set_ticks(now);
        // Up to a few reservations ahead, acting at their instants.
        let mut last = now;
        for _ in 0..1 + rng.below(4) {
            match bucket.reserve(1, window) {
                Ok(r) => {
                    last = now + ticks_ceil::<C>(r.wait());
                    grants.push(last);
                }
                Err(_) => break,
            }
        }
        now = if now >= idle_at {
            let idle = last + rng.below(2 * window_ticks);
            idle_at = idle + window_ticks + rng.below(2 * window_ticks);
            idle
        } else {
            last.max(now + 1)
        };
    }
    // A wait is rounded up to the nanosecond, so on a clock of other ticks the caller may act
    // a tick after the reservation's instant: a window may then fall a token short of the cap.
    Run {
        grants,
        end_ticks,
        exact: bucket.is_exact() && C::TICKS_PER_SECOND == 1_000_000_000,
    }
}

fn check(
    name: &str,
    run: &mut Run,
    quota: Quota,
    cap: u64,
    window: Duration,
    ticks_per_second: u64,
) {
    let window_ticks =
        (window.as_nanos() * ticks_per_second as u128).div_ceil(1_000_000_000) as u64;
    let most = most_in_any_window(&mut run.grants, window_ticks);
    assert!(
        most as u64 <= cap,
        "{name} ({quota}) at {ticks_per_second} Hz: {most} grants in one window of {window:?}, cap {cap}"
    );
    // Greedy enough to matter: some window reached the cap (within a token where the word
    // rounds the rate down), and on the whole the grants reached the rate, idles aside.
    let reachable = if run.exact { cap } else { cap - 1 };
    assert!(
        most as u64 >= reachable,
        "{name} ({quota}) at {ticks_per_second} Hz: no window reached the cap ({most}, exact {})",
        run.exact
    );
    assert!(
        run.grants.len() as u64 * window_ticks >= (run.end_ticks / 2) * (cap - quota.burst_size()),
        "{name}: {} grants over {} ticks",
        run.grants.len(),
        run.end_ticks
    );
}

fn all_drivers<C: Steppable>(windows: u64) {
    for (name, quota, cap, window) in cases() {
        let hz = C::TICKS_PER_SECOND;
        let runs = [
            ("try every tick", greedy::<C, true>(quota, window, windows)),
            (
                "try every tick, 32-bit word",
                greedy::<C, false>(quota, window, windows),
            ),
            ("reservations", reserving::<C>(quota, window, windows)),
        ];
        for (driver, mut run) in runs {
            check(
                &format!("{name}, {driver}"),
                &mut run,
                quota,
                cap,
                window,
                hz,
            );
        }
        assert_eq!(quota.window_cap(), Some(cap), "{name}");
        assert_eq!(quota.window(), Some(window), "{name}");
    }
}

#[test]
fn greedy_callers_never_exceed_the_cap_on_a_nanosecond_clock() {
    all_drivers::<ManualClock>(40);
}

#[test]
fn greedy_callers_never_exceed_the_cap_on_a_megahertz_clock() {
    all_drivers::<Counter<1_000_000>>(40);
}

#[test]
fn greedy_callers_never_exceed_the_cap_on_a_32_khz_clock() {
    all_drivers::<Counter<32_768>>(40);
}

/// The check bites: the naive quota and one a token too fast both exceed the cap.
#[test]
fn the_check_catches_quotas_that_overshoot() {
    for (name, quota, cap, window) in cases() {
        let naive = Quota::new(Rate::new(cap, window)).burst(cap);
        let too_fast = Quota::within_with_burst(cap + 1, window, quota.burst_size());
        for (what, wrong) in [("naive", naive), ("a token too fast", too_fast)] {
            let mut run = greedy::<ManualClock, true>(wrong, window, 10);
            let most = most_in_any_window(&mut run.grants, ticks_ceil::<ManualClock>(window));
            assert!(
                most as u64 > cap,
                "{name}, {what} ({wrong}): only {most} in a window, the check would not catch it"
            );
        }
    }
}

/// Three windows of one upstream (5 a second, 100 a minute, 1 000 an hour), each a window
/// quota, taken all-or-none: every window of every length holds its cap.
#[test]
fn limits_of_several_windows_hold_every_cap() {
    let clock = ManualClock::new();
    let windows = [
        (5, Duration::from_secs(1)),
        (100, Duration::from_secs(60)),
        (1_000, Duration::from_secs(3_600)),
    ];
    // Bursts of 3, 20 and 100, so that after an idle each window can fill to its cap.
    let second = TokenBucket::try_new(Quota::within(5, windows[0].1).burst(3), &clock).unwrap();
    let minute = TokenBucket::try_new(Quota::within(100, windows[1].1).burst(20), &clock).unwrap();
    let hour = TokenBucket::try_new(Quota::within(1_000, windows[2].1).burst(100), &clock).unwrap();
    let limits = Limits::new([&second, &minute, &hour]);
    let mut rng = XorShift(7);
    let mut grants = Vec::new();
    let end = Duration::from_secs(8 * 3_600);
    let mut now = Duration::ZERO;
    while now < end {
        clock.set(now.as_nanos() as u64);
        loop {
            match limits.try_acquire([1, 1, 1]) {
                Ok(()) => grants.push(now.as_nanos() as u64),
                Err(Denied::Insufficient { retry_after }) => {
                    now += retry_after.get();
                    break;
                }
                Err(other) => panic!("{other:?}"),
            }
        }
        if rng.below(2_000) == 0 {
            now += Duration::from_secs(rng.below(1_200));
        }
    }
    for (cap, window) in windows {
        let most = most_in_any_window(&mut grants, window.as_nanos() as u64);
        assert_eq!(most, cap, "{window:?}: {most} grants, cap {cap}");
    }
    // The hour binds: at most 100 + 900 an hour went through, and idles aside about that.
    assert!(
        grants.len() >= 6_500 && grants.len() <= 7_300,
        "{}",
        grants.len()
    );
}

/// Invalid window quotas are clear errors when a bucket is built, never panics.
#[test]
fn bad_window_quotas_are_refused_clearly() {
    let clock = ManualClock::new();
    let minute = Duration::from_secs(60);
    let rows = [
        (Quota::within(0, minute), ConfigError::BurstNotBelowCap),
        (Quota::within(1, minute), ConfigError::BurstNotBelowCap),
        (
            Quota::within(10, minute).burst(10),
            ConfigError::BurstNotBelowCap,
        ),
        (Quota::within(10, minute).burst(0), ConfigError::ZeroBurst),
        (Quota::within(10, Duration::ZERO), ConfigError::ZeroWindow),
        (
            Quota::within(10, Duration::MAX),
            ConfigError::WindowOutOfRange,
        ),
        (
            Quota::within(10, minute).minus_percent(101),
            ConfigError::PercentAbove100 { percent: 101 },
        ),
        (
            Quota::within(10, minute).divided_by(0),
            ConfigError::DividedByZero,
        ),
        // 100 per minute among 100 jobs: a cap of 1 each, no room for a burst of 1 and a rate.
        (
            Quota::within(100, minute).divided_by(100),
            ConfigError::BurstNotBelowCap,
        ),
    ];
    for (quota, error) in rows {
        assert_eq!(
            TokenBucket::try_new(quota, &clock).err(),
            Some(error),
            "{quota}"
        );
    }
    // Among 60 jobs, 1.67 each: a burst of 1 and 0.67 a minute, whole grants never above 1.
    assert!(TokenBucket::try_new(Quota::within(100, minute).divided_by(60), &clock).is_ok());
    // A millisecond clock: two steps accrue 2 × 0.999 tokens at 1 000 a second, so a window
    // could see 1 001; refused. A nanosecond clock holds it.
    let millis = Counter::<1_000>::default();
    assert_eq!(
        TokenBucket::try_new(Quota::within(1_000, Duration::from_secs(1)), &millis).err(),
        Some(ConfigError::WindowTooCoarse)
    );
    assert!(TokenBucket::try_new(Quota::within(1_000, Duration::from_secs(1)), &clock).is_ok());
}

/// Tokio waits under paused time: callers queued on `acquire` are woken at their instants, and
/// every window of their grants holds the cap.
#[cfg(feature = "tokio")]
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn tokio_waits_never_exceed_the_cap() {
    use std::rc::Rc;
    use tokio::time::Instant;
    use tollgate::TokioClock;

    for (name, quota, cap, window) in cases() {
        let bucket = Rc::new(TokenBucket::try_new(quota, TokioClock::new()).unwrap());
        let start = Instant::now();
        let end = start + window * 20;
        let grants = Rc::new(std::cell::RefCell::new(Vec::new()));
        let local = tokio::task::LocalSet::new();
        // Three callers waiting for one or two tokens at a time, with idles between streams.
        for caller in 0..3u64 {
            let (bucket, grants) = (bucket.clone(), grants.clone());
            local.spawn_local(async move {
                let mut rng = XorShift(0x5851_f42d_4c95_7f2d ^ caller);
                let mut idle_at = start + window * 2;
                while Instant::now() < end {
                    let n = 1 + rng.below(quota.burst_size().min(2)) as u32;
                    bucket.acquire(n).await.unwrap();
                    let at = (Instant::now() - start).as_nanos() as u64;
                    grants
                        .borrow_mut()
                        .extend(std::iter::repeat(at).take(n as usize));
                    if Instant::now() >= idle_at {
                        tokio::time::sleep(window.mul_f64(rng.below(200) as f64 / 100.0)).await;
                        idle_at =
                            Instant::now() + window + window.mul_f64(rng.below(200) as f64 / 100.0);
                    }
                }
            });
        }
        local.await;
        let mut grants = grants.take();
        let most = most_in_any_window(&mut grants, window.as_nanos() as u64);
        assert!(most as u64 <= cap, "{name}: {most} in a window, cap {cap}");
        eprintln!("tokio waits, {name}: most in a window {most} of {cap}");
        // Tokio's timer wakes to the millisecond, late: with a burst of 1 the lateness is lost,
        // so only quotas whose token interval dwarfs a millisecond come near the cap (1 000 a
        // second with burst 1 gets about 500; a burst of 3 absorbs the timer's lateness).
        let interval = window / (cap - quota.burst_size()) as u32;
        if interval >= Duration::from_millis(20) || quota.burst_size() >= 3 {
            assert!(
                most as u64 + 1 >= cap,
                "{name}: only {most} in a window, cap {cap}"
            );
        }
    }
}

/// A later burst or margin splits the cap again, exactly: the cap is kept, not the rate.
#[test]
fn bursts_and_margins_split_the_cap_again() {
    let minute = Duration::from_secs(60);
    let rows = [
        (
            Quota::within(100, minute).burst(40),
            40,
            Rate::per_minute(60),
            100,
        ),
        (
            Quota::within(100, minute).burst(40).burst(1),
            1,
            Rate::per_minute(99),
            100,
        ),
        // A burst that took the whole cap, then a smaller one: the cap was kept.
        (
            Quota::within(10, minute).burst(10).burst(4),
            4,
            Rate::per_minute(6),
            10,
        ),
        (
            Quota::within(600, minute)
                .burst(3)
                .minus_percent(5)
                .minus_percent(10),
            3,
            Rate::per_minute(510),
            513,
        ),
        // A fractional cap: 100 among 60 jobs is 5/3 each, burst 1, 2/3 a minute.
        (
            Quota::within(100, minute).divided_by(60),
            1,
            Rate::new(2, Duration::from_secs(180)),
            1,
        ),
        (
            Quota::within(7, Duration::from_secs(13))
                .divided_by(2)
                .burst(2),
            2,
            Rate::new(3, Duration::from_secs(26)),
            3,
        ),
    ];
    for (quota, burst, rate, cap) in rows {
        assert_eq!(
            (quota.burst_size(), quota.rate(), quota.window_cap()),
            (burst, rate, Some(cap)),
            "{quota}"
        );
    }
    assert_eq!(
        Quota::within(100, minute).burst(40).burst(1),
        Quota::within(100, minute)
    );
    // A plain quota's margins apply to its rate and keep its burst.
    let plain = Quota::new(Rate::per_minute(600))
        .burst(7)
        .minus_percent(5)
        .divided_by(3);
    assert_eq!(
        (plain.rate(), plain.burst_size()),
        (Rate::per_minute(190), 7)
    );
    assert_eq!((plain.window(), plain.window_cap()), (None, None));
}

/// A greedy caller on a clock that steps back now and then, behind the furthest it has read (by
/// up to a window on the 64-bit word, and within one refill of the burst on the 32-bit word:
/// the steps back it promises to credit nothing for), then catches up. Grants are counted at the
/// furthest reading so far, the only time a bucket can know: no window of it holds more than
/// the cap. A step back that credited time twice would put more than a window's worth into one.
/// (Measured on the furthest reading, a clock that runs slow and then jumps forward credits the
/// jump: the clock said that time passed.)
fn greedy_on_a_stepping_clock<C: Steppable, const WIDE: bool>(
    quota: Quota,
    window: Duration,
    windows: u64,
) -> (Vec<u64>, u64) {
    let clock = C::default();
    let window_ticks = ticks_ceil::<C>(window);
    let refill_ticks = ticks_ceil::<C>(Duration::from_nanos(
        (quota.burst_size() as u128 * quota.rate().period().as_nanos()
            / quota.rate().tokens() as u128) as u64,
    ));
    let narrow;
    let wide;
    let acquire: &dyn Fn(u32) -> Result<(), Denied> = if WIDE {
        wide = TokenBucket::try_new(quota, &clock).expect("a window quota builds");
        &|n| wide.try_acquire(n)
    } else {
        narrow =
            TokenBucket::<_, u32>::try_new_with_word(quota, &clock).expect("a window quota builds");
        &|n| narrow.try_acquire(n)
    };
    let most_back = if WIDE { window_ticks } else { refill_ticks };
    let mut rng = XorShift(0x2545_f491_4f6c_dd1d ^ window_ticks);
    let (mut real, mut behind, mut high, mut steps) = (0u64, 0u64, 0u64, 0u64);
    let mut grants = Vec::new();
    while real < window_ticks * windows {
        let on_clock = real - behind;
        clock.set_ticks(on_clock);
        high = high.max(on_clock);
        while acquire(1).is_ok() {
            grants.push(high);
        }
        real += 1 + rng.below(window_ticks / 8 + 1);
        match rng.below(6) {
            // The next reading steps back behind the furthest one, within what the word
            // promises for.
            0 | 1 => {
                let back = 1 + rng.below(most_back);
                let target = high
                    .saturating_sub(back)
                    .max(high.saturating_sub(most_back));
                behind = real - target.min(real);
                steps += 1;
            }
            // The clock catches up (as a corrected clock does).
            2 => behind = 0,
            // Otherwise it runs on as it was.
            _ => {}
        }
    }
    (grants, steps)
}

#[test]
fn a_clock_stepping_back_never_lets_a_window_exceed_its_cap() {
    fn on<C: Steppable>() {
        for (name, quota, cap, window) in cases() {
            let window_ticks = ticks_ceil::<C>(window);
            for (word, (mut grants, steps)) in [
                (
                    "64-bit",
                    greedy_on_a_stepping_clock::<C, true>(quota, window, 30),
                ),
                (
                    "32-bit",
                    greedy_on_a_stepping_clock::<C, false>(quota, window, 30),
                ),
            ] {
                let most = most_in_any_window(&mut grants, window_ticks);
                assert!(
                    most as u64 <= cap,
                    "{name} on the {word} word at {} Hz: {most} in one window, cap {cap}",
                    C::TICKS_PER_SECOND
                );
                // It was granted, and the clock did step back.
                assert!(most > 0, "{name} on the {word} word: nothing granted");
                assert!(steps > 10, "{name}: {steps} steps back");
            }
        }
    }
    on::<Counter<32_768>>();
    on::<Counter<1_000_000>>();
    on::<ManualClock>();
}

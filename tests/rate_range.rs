//! The slowest and the fastest rate each word accepts, per clock rate: the table in
//! `TokenBucket`'s documentation. `cargo test --test rate_range -- --nocapture` prints it.
//!
//! The slowest is one token per the longest period accepted at a burst of one; the fastest is
//! the most tokens a second accepted at the default burst (one second of the rate). Each is
//! found by bisection and then checked at its edge: accepted there, refused a step beyond.

use core::time::Duration;

use tollgate::{Clock, ConfigError, Quota, Rate, TokenBucket, Word};

macro_rules! clock {
    ($name:ident, $hz:expr) => {
        struct $name;
        impl Clock for $name {
            const TICKS_PER_SECOND: u64 = $hz;
            fn now(&self) -> u64 {
                0
            }
        }
    };
}
clock!(Hz32k, 32_768);
clock!(Mhz1, 1_000_000);
clock!(Ghz1, 1_000_000_000);
clock!(Ghz10, 10_000_000_000);

fn accepts<C: Clock + Default, W: Word>(quota: Quota) -> Result<(), ConfigError> {
    TokenBucket::<C, W>::try_new_with_word(quota, C::default()).map(drop)
}

/// The largest `x` in `[lo, hi]` with `ok(x)`, given `ok(lo)` and that `ok` holds up to some
/// point and fails past it.
fn last_accepted(mut lo: u64, mut hi: u64, ok: impl Fn(u64) -> bool) -> u64 {
    assert!(ok(lo));
    if ok(hi) {
        return hi;
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if ok(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    lo
}

/// (slowest period in seconds at burst 1, fastest tokens a second at the default burst).
fn range<C: Clock + Default, W: Word>() -> (u64, u64) {
    let slow = |secs: u64| {
        accepts::<C, W>(Quota::new(Rate::new(1, Duration::from_secs(secs))).burst(1)).is_ok()
    };
    let fast = |per_second: u64| accepts::<C, W>(Quota::new(Rate::per_second(per_second))).is_ok();
    let slowest = last_accepted(1, 1 << 40, slow);
    let fastest = last_accepted(1, 1 << 50, fast);
    // The edges: refused one step beyond, with the error that says why.
    if slowest < 1 << 40 {
        assert!(!slow(slowest + 1));
    }
    assert!(matches!(
        accepts::<C, W>(Quota::new(Rate::per_second(fastest + 1))),
        Err(ConfigError::Unrepresentable | ConfigError::ClockTooCoarse)
    ));
    (slowest, fastest)
}

impl Default for Hz32k {
    fn default() -> Self {
        Hz32k
    }
}
impl Default for Mhz1 {
    fn default() -> Self {
        Mhz1
    }
}
impl Default for Ghz1 {
    fn default() -> Self {
        Ghz1
    }
}
impl Default for Ghz10 {
    fn default() -> Self {
        Ghz10
    }
}

const YEAR: u64 = 31_557_600;

#[test]
fn the_slowest_and_fastest_rates_each_word_accepts() {
    let rows = [
        ("32 768 Hz", range::<Hz32k, u64>(), range::<Hz32k, u32>()),
        ("1 MHz", range::<Mhz1, u64>(), range::<Mhz1, u32>()),
        ("1 GHz", range::<Ghz1, u64>(), range::<Ghz1, u32>()),
        ("10 GHz", range::<Ghz10, u64>(), range::<Ghz10, u32>()),
    ];
    for (clock, wide, narrow) in &rows {
        eprintln!(
            "{clock}: 64-bit word 1 per {:.1} years (1 per {} s) to {}/s; 32-bit word 1 per {:.1} h (1 per {} s) to {}/s",
            wide.0 as f64 / YEAR as f64,
            wide.0,
            wide.1,
            narrow.0 as f64 / 3_600.0,
            narrow.0,
            narrow.1,
        );
    }
    // The table in `TokenBucket`'s documentation, to the figures it gives.
    let documented: [(u64, u64, u64, u64); 4] = [
        // (64-bit slowest in years, fastest in 10^9/s, 32-bit slowest in hours, fastest /s)
        (584, 292, 5_124_095, 8_388_608),
        (584, 131, 5_107_804, 8_388_608),
        (146, 128, 9_357, 8_388_608),
        (14, 80, 1, 8_388_608),
    ];
    for ((clock, wide, narrow), doc) in rows.iter().zip(documented) {
        let got = (
            wide.0 / YEAR,
            wide.1 / 1_000_000_000,
            narrow.0 / 3_600,
            narrow.1,
        );
        assert_eq!(got, doc, "{clock}");
    }
}

//! How a quota and a clock map onto the bucket's word: exact integer units, computed once.
//!
//! With `r = a / b` tokens per tick in lowest terms, time in the word is counted in *units*
//! chosen so that both a token and a clock *quantum* (2^`shift` ticks) are whole numbers of
//! units: a quantum is `A` units and a token `U` units, with `A / U = r · 2^shift` exactly. The
//! word holds one instant in units, modulo `W`, compared as signed: the instant at which the
//! bucket would be empty given every grant so far.
//!
//! The word must tell "elapsed" from "ahead" for as long as a bucket may sit idle, and it must
//! stay consistent when a 64-bit clock wraps. Two layouts satisfy both:
//!
//! - `shift = 0`, `W = 2^bits`: units are `ticks · A`, wrapping. Exact to the tick, and the
//!   idle horizon is `2^(bits-1) / A` ticks.
//! - `shift > 0`, `W = A · 2^k` with `k <= 64 - shift`: units are `((ticks >> shift) mod 2^k) · A`.
//!   The clock's wrap at 2^64 ticks is a whole number of `W`, and the horizon is `2^(k-1)`
//!   quanta, up to 2^63 ticks whatever `A` is. Decisions are exact for the clock read to the
//!   quantum: the documented, bounded rounding (a decision may come up to one quantum later than
//!   on the raw clock, never earlier).
//!
//! The solver takes the finest quantum whose horizon reaches the target: 100 years for the
//! 64-bit word (or 2^62 ticks, a quarter of the clock's own range, for clocks above 1.46 GHz
//! whose 64-bit counters cannot span a century), one hour for the 32-bit word. Where no exact
//! layout reaches it, the 64-bit word rounds the rate down by at most one part in 2^20 (see
//! `approximate`); the 32-bit word prefers exactness and takes the exact layout with the longest
//! horizon, rounding only when no exact layout fits at all. Debt from reservations is bounded to
//! a quarter of `W` and the burst must fit in
//! another quarter, so no sequence of calls can wrap the word into a gift of tokens.

use core::num::NonZeroU64;

use crate::rate::gcd;
use crate::{ConfigError, Quota};

/// 100 Julian years in seconds.
const CENTURY_SECS: u128 = 100 * 31_557_600;

/// A bucket's configuration in the word's units.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Params {
    /// The clock is read to 2^`shift` ticks.
    pub shift: u32,
    /// Quanta are taken modulo `quanta_mask + 1`.
    pub quanta_mask: u64,
    /// `A`: units in one quantum.
    pub units_per_quantum: NonZeroU64,
    /// Units are taken modulo `units_mask + 1` after multiplying.
    pub units_mask: u64,
    /// `W`, the word's modulus; 0 stands for 2^64.
    pub modulus: u64,
    /// `W / 2`: differences at or above it read as negative.
    pub half: u64,
    /// `U`: units in one token.
    pub units_per_token: NonZeroU64,
    /// The capacity in tokens.
    pub burst: u64,
    /// The capacity in units, below `W / 4`.
    pub burst_units: u64,
    /// The deepest debt reservations may run, in units: `W / 4`.
    pub max_debt_units: u64,
    /// The start fill in units.
    pub start_units: u64,
    /// How long the word stays readable without a write, in ticks (saturating).
    pub horizon_ticks: u64,
    /// The never-used mark.
    pub unused: u64,
    /// Whether `A / U` is the quota's rate exactly, rather than rounded down.
    pub exact: bool,
}

impl Params {
    /// Solves for the finest exact layout of `quota` on a clock of `ticks_per_second` in a word
    /// of `bits` bits.
    pub(crate) const fn solve(
        quota: &Quota,
        ticks_per_second: u64,
        bits: u32,
    ) -> Result<Self, ConfigError> {
        let rate = quota.rate();
        if rate.is_out_of_range() {
            return Err(ConfigError::RateOutOfRange);
        }
        if rate.period_ns() == 0 {
            return Err(ConfigError::ZeroPeriod);
        }
        if rate.tokens() == 0 {
            return Err(ConfigError::ZeroRate);
        }
        if ticks_per_second == 0 {
            return Err(ConfigError::ZeroClockFrequency);
        }
        let burst = quota.burst_size();
        if burst == 0 {
            return Err(ConfigError::ZeroBurst);
        }
        let start = quota.start_fill();
        if start > burst {
            return Err(ConfigError::StartAboveBurst { start, burst });
        }

        // Tokens per tick, a / b in lowest terms.
        let a0 = rate.tokens() as u128 * 1_000_000_000;
        let b0 = rate.period_ns() as u128 * ticks_per_second as u128;
        let g = gcd(a0, b0);
        let (a, b) = (a0 / g, b0 / g);

        let target_ticks = if bits == 64 {
            let century = CENTURY_SECS * ticks_per_second as u128;
            let clock_limit = 1u128 << 62;
            if century < clock_limit {
                century
            } else {
                clock_limit
            }
        } else {
            3_600 * ticks_per_second as u128
        };

        if let Some(p) = first_layout(a, b, burst, start, bits, target_ticks, true) {
            return Ok(p);
        }
        if bits == 64 {
            return match first_layout(a, b, burst, start, bits, target_ticks, false) {
                Some(p) => Ok(p),
                None => Err(ConfigError::Unrepresentable),
            };
        }
        // The 32-bit word prefers exactness to a long horizon: the exact layout with the longest
        // horizon it can get, else the rate rounded down, and it reports the horizon.
        let mut exact = true;
        loop {
            let mut target = target_ticks / 2;
            while target > 0 {
                if let Some(p) = first_layout(a, b, burst, start, bits, target, exact) {
                    return Ok(p);
                }
                target /= 2;
            }
            if !exact {
                return Err(ConfigError::Unrepresentable);
            }
            if let Some(p) = first_layout(a, b, burst, start, bits, target_ticks, false) {
                return Ok(p);
            }
            exact = false;
        }
    }

    /// Whether the bucket enforces the quota's rate exactly, rather than rounded down.
    pub(crate) const fn is_exact(&self) -> bool {
        self.exact
    }

    /// Ticks in one quantum.
    #[cfg(test)]
    pub(crate) fn quantum_ticks(&self) -> u64 {
        1 << self.shift
    }
}

/// The finest layout of `a / b` tokens per tick whose horizon reaches `target_ticks`: exact, or
/// with the rate rounded down by at most one part in 2^[`ROUNDING_BITS`].
const fn first_layout(
    a: u128,
    b: u128,
    burst: u64,
    start: u64,
    bits: u32,
    target_ticks: u128,
    exact: bool,
) -> Option<Params> {
    let mut shift = 0;
    while shift < 64 && a <= (u128::MAX >> shift) {
        let per_quantum = a << shift;
        let found = if exact {
            let g = gcd(per_quantum, b);
            layout(shift, per_quantum / g, b / g, burst, start, bits)
        } else {
            approximate(shift, per_quantum, b, burst, start, bits, target_ticks)
        };
        if let Some(p) = found {
            if p.horizon_ticks as u128 >= target_ticks {
                return Some(p);
            }
        }
        shift += 1;
    }
    None
}

/// The relative error allowed when the rate is rounded down: 2^-20, under one part per million.
pub(crate) const ROUNDING_BITS: u32 = 20;

/// The best rounded-down layout for a quantum of 2^`shift` ticks, whose rate per quantum is
/// `n / d` tokens, if it is within 2^-[`ROUNDING_BITS`] of exact.
const fn approximate(
    shift: u32,
    n: u128,
    d: u128,
    burst: u64,
    start: u64,
    bits: u32,
    target_ticks: u128,
) -> Option<Params> {
    // The largest units per quantum whose horizon, burst aside, reaches twice the target.
    let want_log = 128 - (2 * target_ticks - 1).leading_zeros(); // least with 2^want_log >= 2 target
    let max_log = if shift == 0 {
        // 2^(bits-1) / A >= 2 target
        if want_log + 1 > bits {
            return None;
        }
        bits - 1 - want_log
    } else {
        // 2^(k-1+shift) >= 2 target with k = bits - ceil_log2(A) <= 64 - shift
        let k = want_log + 1
            - if shift < want_log + 1 {
                shift
            } else {
                want_log
            };
        if k > 64 - shift || k + 2 > bits {
            return None;
        }
        bits - k
    };
    let mut p_max = if max_log >= 64 {
        u64::MAX as u128
    } else {
        1u128 << max_log
    };
    // A burst that does not fit at this size may fit with fewer units per quantum.
    let mut tries = 0;
    while tries < 8 && p_max > 0 {
        let (p, q) = crate::approx::best_lower(n, d, p_max, u64::MAX as u128);
        if p == 0 {
            return None;
        }
        if !crate::approx::within(p, q, n, d, ROUNDING_BITS) {
            return None;
        }
        if let Some(mut layout) = layout(shift, p, q, burst, start, bits) {
            layout.exact = false;
            return Some(layout);
        }
        p_max /= 2;
        tries += 1;
    }
    None
}

/// The layout for one quantum, if the burst and the debt bound fit in it.
const fn layout(
    shift: u32,
    units_per_quantum: u128,
    units_per_token: u128,
    burst: u64,
    start: u64,
    bits: u32,
) -> Option<Params> {
    if units_per_token > u64::MAX as u128 || units_per_quantum > u64::MAX as u128 {
        return None;
    }
    let units_per_quantum = units_per_quantum as u64;
    let (modulus, quanta_mask, units_mask): (u128, u64, u64) = if shift == 0 {
        (1 << bits, u64::MAX, mask(bits))
    } else {
        let log = ceil_log2(units_per_quantum);
        if log + 2 > bits {
            return None;
        }
        let k = if bits - log < 64 - shift {
            bits - log
        } else {
            64 - shift
        };
        ((units_per_quantum as u128) << k, mask(k), u64::MAX)
    };
    let burst_units = burst as u128 * units_per_token;
    let quarter = modulus / 4;
    if burst_units >= quarter {
        return None;
    }
    let half = modulus / 2;
    let horizon_quanta = (half - burst_units) / units_per_quantum as u128;
    let horizon_ticks = horizon_quanta << shift;
    let Some(units_per_quantum) = NonZeroU64::new(units_per_quantum) else {
        return None;
    };
    let Some(units_per_token) = NonZeroU64::new(units_per_token as u64) else {
        return None;
    };
    Some(Params {
        shift,
        quanta_mask,
        units_per_quantum,
        units_mask,
        modulus: modulus as u64, // 2^64 truncates to 0, which stands for it
        half: half as u64,
        units_per_token,
        burst,
        burst_units: burst_units as u64,
        max_debt_units: quarter as u64,
        start_units: start * units_per_token.get(), // start <= burst
        horizon_ticks: if horizon_ticks > u64::MAX as u128 {
            u64::MAX
        } else {
            horizon_ticks as u64
        },
        unused: crate::word::unused_mark(bits),
        exact: true,
    })
}

const fn mask(bits: u32) -> u64 {
    if bits >= 64 {
        u64::MAX
    } else {
        (1 << bits) - 1
    }
}

const fn ceil_log2(x: u64) -> u32 {
    if x <= 1 {
        0
    } else {
        64 - (x - 1).leading_zeros()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Rate;
    use core::time::Duration;

    const NS: u64 = 1_000_000_000;

    fn solve(quota: Quota, hz: u64, bits: u32) -> Result<Params, ConfigError> {
        Params::solve(&quota, hz, bits)
    }

    #[test]
    fn common_rates_on_a_nanosecond_clock_are_exact_for_a_century() {
        let century_ns = (CENTURY_SECS * NS as u128) as u64;
        // (rate, quantum ticks)
        let rows = [
            (Rate::per_second(2), 1),
            (Rate::per_second(100), 1),
            (Rate::per_second(1_000_000_000), 1),
            (Rate::per_minute(171), 32),
            (Rate::per_second(100).minus_percent(10).divided_by(4), 8),
            (Rate::new(3, Duration::from_millis(500)), 2),
            (Rate::new(3, Duration::from_millis(700)), 2),
            (Rate::per_day(1), 1),
            (Rate::new(1, Duration::from_secs(31_557_600)), 1),
        ];
        for (rate, quantum) in rows {
            let p = solve(Quota::new(rate), NS, 64).unwrap();
            assert!(p.horizon_ticks >= century_ns, "{rate}");
            assert_eq!(p.quantum_ticks(), quantum, "{rate}");
        }
    }

    #[test]
    fn rates_that_cannot_be_exact_are_rounded_down_by_under_a_millionth() {
        // (rate, quantum ticks)
        let rows = [
            (Rate::per_second(549_637), 4096),
            (Rate::per_second(3_001), 8),
            (Rate::per_second(1_000_003), 4096),
            (
                Rate::new(999_983, Duration::from_nanos(1_000_000_007)),
                2048,
            ),
        ];
        for (rate, quantum) in rows {
            let p = solve(Quota::new(rate).burst(1_000), NS, 64).unwrap();
            assert!(!p.is_exact(), "{rate}");
            assert_eq!(p.quantum_ticks(), quantum, "{rate}");
            let (n, d) = (
                rate.tokens() as u128 * NS as u128,
                rate.period_ns() as u128 * NS as u128,
            );
            let (a, u) = (
                p.units_per_quantum.get() as u128,
                (p.units_per_token.get() as u128) << p.shift,
            );
            assert!(crate::approx::within(a, u, n, d, ROUNDING_BITS), "{rate}");
        }
    }

    #[test]
    fn what_cannot_be_held_is_an_error() {
        let rows = [
            (Quota::new(Rate::per_second(0)), ConfigError::ZeroRate),
            (
                Quota::new(Rate::new(1, Duration::ZERO)),
                ConfigError::ZeroPeriod,
            ),
            (
                Quota::new(Rate::per_second(1)).burst(0),
                ConfigError::ZeroBurst,
            ),
            (
                Quota::new(Rate::per_second(1)).burst(2).start_with(3),
                ConfigError::StartAboveBurst { start: 3, burst: 2 },
            ),
            (
                Quota::new(Rate::per_second(1).divided_by(0)),
                ConfigError::RateOutOfRange,
            ),
            // a trillion tokens a second: a century of them does not fit in 64 bits
            (
                Quota::new(Rate::per_second(1_000_000_000_000)),
                ConfigError::Unrepresentable,
            ),
            // four billion tokens at one a year: a burst longer than the clock's range
            (
                Quota::new(Rate::per_day(1)).burst(1 << 32),
                ConfigError::Unrepresentable,
            ),
        ];
        for (quota, error) in rows {
            assert_eq!(solve(quota, NS, 64), Err(error), "{quota:?}");
        }
        assert_eq!(
            solve(Quota::new(Rate::per_second(1)), 0, 64),
            Err(ConfigError::ZeroClockFrequency)
        );
    }

    #[test]
    fn the_32_bit_word_quantizes_to_reach_an_hour_when_it_can() {
        // 10 per second on a 64 MHz SysTick: 2^31 ticks is 33 s, so the solver reads the clock
        // to 2^7 ticks (2 µs) and gets 71 minutes.
        let p = solve(Quota::new(Rate::per_second(10)), 64_000_000, 32).unwrap();
        assert_eq!(p.quantum_ticks(), 128);
        assert!(p.horizon_ticks >= 3_600 * 64_000_000);
        // 1 per second on a 32 768 Hz crystal reaches the hour at once (18 hours).
        let p = solve(Quota::new(Rate::per_second(1)), 32_768, 32).unwrap();
        assert_eq!(p.quantum_ticks(), 1);
        assert_eq!(p.horizon_ticks, (1 << 31) - 32_768);
    }
}

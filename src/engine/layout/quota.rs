//! The quota a layout enforces, worked out from the layout: a bucket keeps no copy of the quota
//! it was built from, so that it fits in one cache line (half of one on the 32-bit word).

use core::time::Duration;

use super::{approx, Layout};
use crate::rate::gcd;
use crate::{Quota, Rate};

impl Layout {
    /// The quota this layout enforces on a clock of `ticks_per_second`: its rate, burst and
    /// start fill. Where the solver held the rate exactly (`is_exact`) the rate is the quota's
    /// own, in lowest terms; where it rounded the rate down, it is the rounded rate, expressed
    /// in nanoseconds (rounded down again, by under one part in 2^64, if that needs more than
    /// 64 bits a side). A window quota comes back as the rate and burst it was split into.
    pub(crate) fn quota(&self, ticks_per_second: u64) -> Quota {
        let (tokens, ticks) = self.tick_rate();
        // tokens / ticks a tick is tokens · tps / (ticks · 10^9) a nanosecond.
        let mut n = u128::from(tokens) * u128::from(ticks_per_second);
        let mut d = ticks;
        let g = gcd(n, d);
        (n, d) = (n / g, d / g);
        // n and d are coprime: only n can share a factor with the 10^9 below d.
        let g = gcd(n, 1_000_000_000);
        n /= g;
        let scale = 1_000_000_000 / g;
        // Past 2^128 only for rates below one token in centuries: halve both until it fits.
        while d.checked_mul(scale).is_none() {
            (n, d) = ((n >> 1).max(1), d >> 1);
        }
        let d = d * scale;
        let (n, d) = match (u64::try_from(n), u64::try_from(d)) {
            (Ok(_), Ok(_)) => (n, d),
            _ => approx::best_lower(n, d, u128::from(u64::MAX), u128::from(u64::MAX)),
        };
        let rate = Rate::new(n as u64, Duration::from_nanos(d as u64));
        let quota = Quota::new(rate).burst(self.burst());
        // The start fill is the level rounded up to whole tokens (a level below zero is a
        // phase's debt, under a token); what that leaves below the fill is the phase.
        let upt = self.units_per_token.get();
        let level = self.start_level();
        let fill =
            (level.div_euclid(upt as i64) + i64::from(level.rem_euclid(upt as i64) != 0)) as u64;
        let quota = if fill == self.burst() {
            quota.start_full()
        } else {
            quota.start_with(fill)
        };
        let deficit = (fill * upt) as i64 - level;
        if deficit == 0 {
            return quota;
        }
        let (n, d) = phase_of(deficit as u128, upt as u128);
        quota.phase(n as u16, d as u16)
    }
}

/// The phase whose units are `deficit` of a token's `upt`: the fraction of the smallest parts
/// (up to 256) that rounds down to them, as `Quota::phase` gave it (worker `i` of `k`);
/// otherwise `deficit / upt` itself, to 16 bits.
fn phase_of(deficit: u128, upt: u128) -> (u128, u128) {
    for parts in 1..=256u128 {
        let index = (deficit * parts).div_ceil(upt);
        if index < parts && index * upt / parts == deficit {
            return (index, parts);
        }
    }
    let g = gcd(deficit, upt);
    let (n, d) = (deficit / g, upt / g);
    if d <= u128::from(u16::MAX) {
        (n, d)
    } else {
        approx::best_lower(n, d, u128::from(u16::MAX), u128::from(u16::MAX))
    }
}

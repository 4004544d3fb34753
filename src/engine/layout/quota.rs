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
        if self.start_units == self.burst_units() {
            quota.start_full()
        } else {
            quota.start_with(self.start_units / self.units_per_token.get())
        }
    }
}

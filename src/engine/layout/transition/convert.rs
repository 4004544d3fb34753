//! The transition for a change of quota: `AdjustableBucket`'s (which needs 64-bit atomics) and
//! a keyed limiter's change of one key's tier. Pure, as the rest of
//! `transition` is.

use crate::engine::layout::Layout;

impl Layout {
    /// The word under `to` holding, at `now_ticks`, what `word` holds under `self`. Tokens are
    /// kept as-is (fractions rounded toward fewer), less the part of a step that `to`'s reading
    /// has not yet counted at `now_ticks` (it will count it at its next step, and `self` may
    /// have counted it already), capped by the new burst. Debt is kept in time: the instant the
    /// bucket is empty again stays where it was (the last tick at which the old reading still
    /// holds nothing, read to the new resolution, never earlier), so a pause still ends when it said and reservations still fall due when they said, clamped to
    /// the new debt bound. So a change of quota never mints and never shortens a pause, however
    /// often it comes.
    pub(crate) fn converted(&self, to: &Layout, word: u64, now_ticks: u64) -> u64 {
        let now_units = self.units_at(now_ticks);
        let level = self.level(word, now_units);
        let to_now = to.units_at(now_ticks);
        if level < 0 {
            // The last tick at which `self`'s reading still holds nothing: not the first at which
            // it reaches the empty instant. A reading to a coarse resolution reaches that instant
            // up to a step before the pause it holds ends (`pause_step` rounds the end down to
            // the reading, since no grant comes before the reading moves past it), so a finer
            // `to` that counted from the first would grant inside the pause.
            let debt = level.unsigned_abs();
            let ticks = self
                .ticks_until(now_ticks, debt)
                .max(self.ticks_until(now_ticks, debt + 1).saturating_sub(1));
            // A debt longer than the new word's deepest is its deepest; shorter ones are read
            // under half the new word, so they read forward.
            if ticks >= to.max_pause_ticks() {
                return to.at_level(to_now, -(to.max_debt_units() as i64));
            }
            // One unit past the reading at the instant: the new reading reaches it no earlier.
            let debt = to.elapsed(to.units_at(now_ticks.wrapping_add(ticks)), to_now) + 1;
            let debt = debt.clamp(0, to.max_debt_units() as i64);
            return to.at_level(to_now, -debt);
        }
        let scaled = (i128::from(level) * i128::from(to.units_per_token.get()))
            .div_euclid(i128::from(self.units_per_token.get()));
        let level = (scaled - i128::from(to.uncounted(now_ticks)))
            .clamp(-i128::from(to.max_debt_units()), i128::from(to.burst_units()));
        // Within the new word's debt bound and burst: fits an i64.
        to.at_level(to_now, level as i64)
    }

    /// Units accrued at `now_ticks` that the reading has not counted yet, rounded up: the part
    /// of the current quantum (or fixed-point unit) already past.
    fn uncounted(&self, now_ticks: u64) -> u64 {
        let a = self.units_per_quantum.get();
        if self.fraction_bits != 0 {
            let behind = now_ticks.wrapping_mul(a) & ((1 << self.fraction_bits) - 1);
            return u64::from(behind != 0);
        }
        let into = now_ticks & ((1 << self.shift) - 1);
        // into < 2^shift and A · 2^shift fits in u128.
        ((u128::from(into) * u128::from(a)).div_ceil(1 << self.shift)) as u64
    }
}


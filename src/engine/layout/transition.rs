//! The pure transition: `(old word, now) -> new word, or a denial`. No atomics and no clock, so
//! the CAS driver, the models and the tests all run the same few lines.
//!
//! The word `z` is the instant, in units, at which the bucket would be empty. The *level* at
//! `now` is `now - z`: the units of tokens in the bucket, negative when reservations have run it
//! into debt. It reads as `min(level, burst)`. Taking `cost` units leaves `level - cost`; the new
//! word is `now - (level - cost)`. Arithmetic on instants is modulo the word (`sub`, `add`) and
//! differences are read as signed (`elapsed`): wrapping by design. Everything else is checked by
//! construction: the burst and the debt bound each fit in a quarter of the word.

use crate::clock::Clock;
use crate::engine::div::{div, div32, div_wide};
use crate::engine::layout::Layout;
use crate::engine::word::Word;
use crate::Denied;

// The quota change. Compiled everywhere; unused only where neither of its callers is
// (`AdjustableBucket`, on 64-bit atomics; the keyed tiers, with `std` or `keyed-table`).
crate::cfg_atomic64! { not, cfg_attr(not(any(feature = "std", feature = "keyed-table")), allow(dead_code));
    mod convert;
}

/// Whether `Layout::ticks_until` divides the 32-bit word's quanta in 32 bits: on a 32-bit core,
/// where that is smaller than a 64-bit shift by a variable amount, and in this crate's unit
/// tests, so that the host runs that path too (`the_32_bit_words_wait_in_quanta_is_the_least`).
const NARROW_DIVISION: bool = cfg!(any(test, not(target_pointer_width = "64")));

impl Layout {
    /// The clock reading in units, read to the quantum (or in fixed point).
    #[inline]
    pub(crate) fn units_at(&self, now_ticks: u64) -> u64 {
        // Most layouts read every tick (`shift = 0`, no quanta mask): spare them two steps.
        let quanta = if self.shift == 0 {
            now_ticks
        } else {
            (now_ticks >> self.shift) & self.quanta_mask()
        };
        let product = quanta.wrapping_mul(self.units_per_quantum.get());
        // `fraction_bits` is 0 or 32: the high half is taken without a variable shift.
        let units = if self.fraction_bits == 0 {
            product
        } else {
            product >> 32
        };
        units & self.units_mask()
    }

    /// The word a bucket starts from at its first use.
    #[inline]
    pub(crate) fn fresh(&self, now_units: u64) -> u64 {
        self.keep(self.sub(now_units, self.start_units))
    }

    /// Takes `cost` units at `now_units` without debt: `Ok(new word)`, or `Err(units short)`.
    /// [`take`](Self::take) with no debt allowed, always inlined (`try_acquire`'s take).
    #[inline(always)]
    pub(crate) fn take_without_debt(
        &self,
        word: u64,
        now_units: u64,
        cost: u64,
    ) -> Result<u64, u64> {
        let level = self.level(word, now_units);
        if level >= cost as i64 {
            return Ok(self.at_level(now_units, level - cost as i64));
        }
        // cost - level < 2^62 + 2^63: it fits in a u64 even when the word is far ahead.
        Err((cost as i64).wrapping_sub(level) as u64)
    }

    /// [`take_without_debt`](Self::take_without_debt) on the 32-bit word read every tick
    /// (`shift = 0`, so the modulus is 2^32): the same answer in 32-bit arithmetic, which on a
    /// 32-bit core is half the instructions of the general take's 64-bit numbers. Exact because
    /// `negative_from` is above 2^31 there (the negative window is under half the ring), so a
    /// difference on the negative side is the same number read as an `i32`; the ceiling, the
    /// cost (at most the ceiling) and the negative window are below 2^25.
    #[inline(always)]
    pub(crate) fn take_narrow(&self, word: u64, now_units: u64, cost: u64) -> Result<u64, u64> {
        debug_assert!(self.word_bits == 32 && self.shift == 0 && self.modulus == 1 << 32);
        debug_assert!(self.negative_from > 1 << 31 && self.ceiling_units < 1 << 25);
        let now = now_units as u32;
        let d = now.wrapping_sub(word as u32);
        let level = if u64::from(d) >= self.negative_from {
            d as i32
        } else {
            d.min(self.ceiling_units as u32) as i32
        };
        let cost = cost as i32;
        if level >= cost {
            let new = u64::from(now.wrapping_sub((level - cost) as u32));
            // `keep`: never the never-used mark, one unit later instead.
            return Ok(new + u64::from(new == crate::engine::word::unused_mark(32)));
        }
        Err(u64::from((cost - level) as u32))
    }

    /// Takes `cost` units at `now_units`, running at most `max_debt` units into debt.
    /// `Ok((new word, debt after))`, or `Err(units short beyond max_debt)`.
    #[inline(always)]
    pub(crate) fn take(
        &self,
        word: u64,
        now_units: u64,
        cost: u64,
        max_debt: u64,
    ) -> Result<(u64, u64), u64> {
        let level = self.level(word, now_units);
        if level >= cost as i64 {
            return Ok((self.at_level(now_units, level - cost as i64), 0));
        }
        // cost - level < 2^62 + 2^63: it fits in a u64 even when the word is far ahead.
        let short = (cost as i64).wrapping_sub(level) as u64;
        if short > max_debt {
            return Err(short - max_debt);
        }
        Ok((self.keep(self.add(now_units, short)), short))
    }

    crate::cfg_atomic64! { not, allow(dead_code);
        /// Takes `cost` units at `now_ticks` (`now_units` in units) without debt, or the denial
        /// that carries what its wait needs: a transition for a CAS driver (`AdjustableBucket`'s,
        /// which targets without 64-bit atomics do not build).
        #[inline]
        pub(crate) fn take_now<C: Clock + ?Sized, W: Word>(
            &self,
            word: u64,
            now_ticks: u64,
            now_units: u64,
            cost: u64,
        ) -> Result<(u64, ()), Denied> {
            let taken = if W::BITS == 64 {
                self.wide_take().take(word, now_units, cost)
            } else {
                self.take_without_debt(word, now_units, cost)
            };
            match taken {
                Ok(word) => Ok((word, ())),
                Err(short) => Err(self.denied::<C>(now_ticks, short)),
            }
        }
    }

    /// The denial of a take `short` units short at `now_ticks`: what its `retry_after` needs,
    /// carried, not worked out (no division on a path that is not asked for a duration).
    #[inline(always)]
    pub(crate) fn denied<C: Clock + ?Sized>(&self, now_ticks: u64, short: u64) -> Denied {
        Denied::Insufficient {
            retry_after: crate::RetryAfter::of_units::<C>(self, now_ticks, short),
        }
    }

    /// The fields a take without debt on the 64-bit word reads, by value: see [`WideTake`].
    #[inline(always)]
    pub(crate) fn wide_take(&self) -> WideTake {
        WideTake {
            modulus: self.modulus,
            negative_from: self.negative_from,
            ceiling_units: self.ceiling_units,
        }
    }

    /// Reserves `cost` units at `now_ticks` (`now_units` in units) if they fall due within
    /// `max_wait_ticks`:
    /// `Ok((new word, ticks until due))`, or `Err(ticks until the same call would succeed)`.
    /// Debt never goes past the bound, whatever `max_wait_ticks` allows.
    #[inline]
    pub(crate) fn reserve(
        &self,
        word: u64,
        now_ticks: u64,
        now_units: u64,
        cost: u64,
        max_wait_ticks: u64,
    ) -> Result<(u64, u64), u64> {
        match self.take(word, now_units, cost, self.max_debt_units()) {
            Ok((word, debt)) => {
                let wait = self.ticks_until(now_ticks, debt);
                if wait > max_wait_ticks {
                    return Err(wait - max_wait_ticks);
                }
                Ok((word, wait))
            }
            Err(beyond) => {
                let wait = self.ticks_until(now_ticks, beyond + self.max_debt_units());
                Err(self
                    .ticks_until(now_ticks, beyond)
                    .max(wait.saturating_sub(max_wait_ticks)))
            }
        }
    }

    /// Gives back a reservation of `cost` units that left the word at `due` and is not yet due:
    /// all of it while nothing has moved the word since, and nothing once anything has — a later
    /// reservation counts on these tokens, and a pause must not be shortened. (Go's `CancelAt`
    /// gives back the part no later reservation counted on; it cannot tell a pause from one.)
    /// The caller checks, on the clock's ticks, that the reservation is not yet due.
    #[inline]
    pub(crate) fn give_back(&self, word: u64, now_units: u64, due: u64, cost: u64) -> Option<u64> {
        if word != due {
            return None;
        }
        self.restored(word, now_units, cost)
    }

    /// The word with `restore` units more, the level capped by the ceiling (the most the bucket
    /// holds, as the Redis script caps it); `None` when that adds nothing. `restore` is at most
    /// the ceiling and the debt bound (a held part's, `TokenBucket::hold_until`): below 2^63.
    #[inline]
    fn restored(&self, word: u64, now_units: u64, restore: u64) -> Option<u64> {
        if restore == 0 {
            return None;
        }
        let level = self.level(word, now_units);
        let most = self.ceiling_units + self.max_debt_units();
        let raised = level
            .saturating_add(restore.min(most) as i64)
            .min(self.ceiling_units as i64);
        (raised > level).then(|| self.at_level(now_units, raised))
    }

    /// Re-anchors a full bucket at `now_units` so that its idle horizon starts again.
    #[inline]
    pub(crate) fn refreshed(&self, word: u64, now_units: u64) -> Option<u64> {
        let full = self.ceiling_units as i64;
        (self.elapsed(now_units, word) > full).then(|| self.at_level(now_units, full))
    }

    /// Whole tokens in the bucket; 0 in debt.
    #[inline]
    pub(crate) fn tokens(&self, word: u64, now_units: u64) -> u64 {
        div(
            self.level(word, now_units).max(0) as u64,
            self.units_per_token.get(),
        )
    }

    /// Ticks from `now_ticks` until `units` more have accrued, read to the quantum (or in fixed
    /// point); saturating.
    #[inline]
    pub(crate) fn ticks_until(&self, now_ticks: u64, units: u64) -> u64 {
        ticks_until(
            self.units_per_quantum.get(),
            self.shift,
            self.fraction_bits != 0,
            self.word_bits == 32,
            now_ticks,
            units,
        )
    }

    /// The cost of `n` tokens in units, or `ExceedsCapacity`.
    #[inline]
    pub(crate) fn cost(&self, n: u32) -> Result<u64, Denied> {
        // `n · U` is a multiple of `U`, and the ceiling is below the burst plus one token: so
        // `n · U` fits under the ceiling exactly when `n` is at most the burst. No division.
        match u64::from(n).checked_mul(self.units_per_token.get()) {
            Some(cost) if cost <= self.ceiling_units => Ok(cost),
            _ => Err(self.exceeds_capacity()),
        }
    }

    /// The cost of `n` tokens in units, or `None` above the burst: [`cost`](Self::cost) for a
    /// caller that words the denial itself, off its hot path.
    #[inline]
    pub(crate) fn cost_within(&self, n: u32) -> Option<u64> {
        // One token always fits: a layout holds a burst of at least one token, and its ceiling
        // is at least its burst. A constant `n` of 1, the common call, reads no ceiling and
        // compares nothing. Not on a 32-bit core: there the firmware's `static` bucket has its
        // ceiling folded in already, and the shortcut cost 16 bytes of `.text` (408 against
        // 392, `scripts/size-report.sh`).
        #[cfg(target_pointer_width = "64")]
        if n == 1 {
            debug_assert!(self.units_per_token.get() <= self.ceiling_units);
            return Some(self.units_per_token.get());
        }
        match u64::from(n).checked_mul(self.units_per_token.get()) {
            Some(cost) if cost <= self.ceiling_units => Some(cost),
            _ => None,
        }
    }

    /// The denial of a request above the burst, which is worked out from the layout.
    #[cold]
    fn exceeds_capacity(&self) -> Denied {
        Denied::ExceedsCapacity {
            burst: self.burst(),
        }
    }

    /// The burst in tokens, on the word `W`: on the 32-bit word, whose burst in units and units
    /// per token are below 2^32, with a 32-bit division, so that `try_acquire` links no 64-bit
    /// one.
    #[inline]
    pub(crate) fn burst_on<W: Word>(&self) -> u64 {
        if W::BITS == 32 {
            let (units, per_token) = (self.burst_units() as u32, self.units_per_token.get() as u32);
            u64::from(units.checked_div(per_token).unwrap_or(0))
        } else {
            self.burst()
        }
    }

    /// Units the bucket lacks at `now_units` to be full; 0 when it is full. A never-used word
    /// holds its start fill.
    #[inline]
    pub(crate) fn units_to_full(&self, word: u64, now_units: u64) -> u64 {
        if word == self.unused() {
            return (self.burst_units() as i64 - self.start_level()) as u64;
        }
        let level = self.level(word, now_units);
        if level >= self.burst_units() as i64 {
            return 0;
        }
        // burst - level < 2^62 + 2^63 even for a clock stepped far back: it fits in a u64.
        (self.burst_units() as i64).wrapping_sub(level) as u64
    }

    /// Ticks from `now_ticks` until the bucket in `word` is full.
    #[inline]
    pub(crate) fn ticks_to_full(&self, word: u64, now_ticks: u64) -> u64 {
        self.ticks_until(
            now_ticks,
            self.units_to_full(word, self.units_at(now_ticks)),
        )
    }

    /// Units in the bucket at `now_units`, at most the ceiling (the burst and less than a
    /// step; see `Layout::ceiling_units`).
    #[inline(always)]
    fn level(&self, word: u64, now_units: u64) -> i64 {
        self.elapsed(now_units, word).min(self.ceiling_units as i64)
    }

    /// The word whose level at `now_units` is `level`.
    #[inline(always)]
    fn at_level(&self, now_units: u64, level: i64) -> u64 {
        let word = if level >= 0 {
            self.sub(now_units, level as u64)
        } else {
            self.add(now_units, level.unsigned_abs())
        };
        self.keep(word)
    }

    /// Units from `from` to `to`, negative when `from` is ahead: differences at or above
    /// `negative_from` read as negative.
    #[inline(always)]
    pub(crate) fn elapsed(&self, to: u64, from: u64) -> i64 {
        self.wide_take().elapsed(to, from)
    }

    /// Never stores the never-used mark: one unit later instead, which grants nothing extra.
    /// That is the mark plus one, without a wrap to check: a word equal to the mark is below
    /// the modulus, and every modulus is even (2^32, 2^64, or `A · 2^k` with `k >= 1`), while
    /// the mark is even too, so one more is still below it.
    #[inline(always)]
    fn keep(&self, word: u64) -> u64 {
        if word == self.unused() {
            word + 1
        } else {
            word
        }
    }

    /// `a - b` modulo the word, for `a, b` below it.
    #[inline(always)]
    fn sub(&self, a: u64, b: u64) -> u64 {
        self.wide_take().sub(a, b)
    }

    /// `a + b` modulo the word, for `a, b` below it.
    #[inline(always)]
    fn add(&self, a: u64, b: u64) -> u64 {
        let (s, carry) = a.overflowing_add(b);
        if carry || (self.modulus != 0 && s >= self.modulus) {
            s.wrapping_sub(self.modulus)
        } else {
            s
        }
    }
}

/// Transitions for feedback from an upstream: pauses, and refunds of tokens never used.
impl Layout {
    /// Empties the bucket at `pause_units` after `now_units` (at most the debt bound), so that
    /// nothing is granted before then and it resumes empty. `None` when the word already grants
    /// nothing before then: a pause never shortens a longer one, nor a debt, and never adds
    /// tokens.
    pub(crate) fn paused(&self, word: u64, now_units: u64, pause_units: u64) -> Option<u64> {
        // pause_units <= W / 4: the negated level fits an i64 on every word.
        let target = -(pause_units.min(self.max_debt_units()) as i64);
        (self.level(word, now_units) > target).then(|| self.at_level(now_units, target))
    }

    /// The word `debt` units in debt at `now_units`, for `debt` at most one unit past the
    /// bound: the negative window has room for it on every word.
    pub(crate) fn fenced(&self, now_units: u64, debt: u64) -> u64 {
        self.behind(now_units, debt.min(self.max_debt_units() + 1))
    }

    /// The word with a take of `cost` units held until `at_units`: at least `at_units` less the
    /// ceiling less `cost`, so that the bucket holds no more than the ceiling then, the held
    /// tokens counted. That is the word a take at `at_units` would have left: a take made early
    /// and used later then grants nothing the burst cap would have cut in between. `None` when
    /// the word is already as late. Never past the debt bound from `now_units`: the caller
    /// refuses a hold longer than that (`Limits::reserve`), and what remains is rounding, which
    /// the bound cuts by a step at most.
    pub(crate) fn held_until(
        &self,
        word: u64,
        now_units: u64,
        at_units: u64,
        cost: u64,
    ) -> Option<u64> {
        let least = self.sub(at_units, self.ceiling_units - cost);
        let bound = self.add(now_units, self.max_debt_units());
        let least = if self.elapsed(least, bound) > 0 {
            bound
        } else {
            least
        };
        (self.elapsed(least, word) > 0).then(|| self.keep(least))
    }

    /// The word `debt` units in debt at `now_units`, for `debt` within the negative side (and
    /// one unit short of it, for the never-used mark's unit).
    pub(crate) fn behind(&self, now_units: u64, debt: u64) -> u64 {
        self.at_level(now_units, -(debt as i64))
    }

    /// Units from `now_units` until the bucket is empty again: 0 when it holds tokens.
    pub(crate) fn debt(&self, word: u64, now_units: u64) -> u64 {
        self.level(word, now_units).min(0).unsigned_abs()
    }

    /// Undoes a take of `cost` units that left the word at `due`, for a grant the caller has not
    /// acted on. Gives back what the bucket would hold had the take never happened, or less:
    /// without the take the level was higher by `cost`, less what the burst cap has since cut
    /// from that history, and that is at most what accrued beyond the burst since the take
    /// (`now - due + cost - ceiling`, the ceiling being the most the bucket holds). So it gives
    /// back `min(cost, ceiling - (now - due))`, capped by the ceiling, whatever immediate grants
    /// others took in between: a denied caller loses nobody a token. But a bucket in debt that has moved since the take gives back nothing: a later
    /// reservation counts on those tokens, or a pause holds it, and neither may be cut short.
    pub(crate) fn refund(&self, word: u64, now_units: u64, due: u64, cost: u64) -> Option<u64> {
        if word != due && self.level(word, now_units) < 0 {
            return None;
        }
        let headroom = (self.ceiling_units as i64).saturating_sub(self.elapsed(now_units, due));
        let restore = (cost as i64).min(headroom);
        if restore <= 0 {
            return None;
        }
        self.restored(word, now_units, restore as u64)
    }
}

/// The three fields of a layout that a take without debt on the 64-bit word reads (and the
/// ring arithmetic that needs only them), held by value. A compare-exchange loop that holds
/// them in registers reads nothing of the bucket's line but the word between two tries. One
/// that reads them from the layout reads them again after every failed compare-exchange: the
/// layout lies beside an atomic, in memory the compiler does not treat as unchanging, and it
/// does not carry such fields in registers across an atomic operation.
#[derive(Clone, Copy)]
pub(crate) struct WideTake {
    modulus: u64,
    negative_from: u64,
    ceiling_units: u64,
}

impl WideTake {
    /// A take without debt on the 64-bit word, in the fewest steps: `Ok(new word)`, or
    /// `Err(units short)`. With `d = now - word` modulo the word, the bucket holds enough
    /// exactly when `cost <= d < negative_from` (a `d` at or past `negative_from` is a debt or
    /// a clock stepped back), which is one unsigned comparison of `d - cost` against
    /// `negative_from - cost` (the ceiling, at least `cost`, is below `negative_from`). A
    /// denial then costs a subtraction and a comparison past the word's load, and a grant one
    /// minimum and a subtraction more.
    #[inline(always)]
    pub(crate) fn take(self, word: u64, now_units: u64, cost: u64) -> Result<u64, u64> {
        debug_assert!(cost <= self.ceiling_units && self.ceiling_units < self.negative_from);
        let d = self.sub(now_units, word);
        if d.wrapping_sub(cost) >= self.negative_from - cost {
            // cost - level < 2^62 + 2^63: it fits in a u64 even when the word is far ahead.
            return Err((cost as i64).wrapping_sub(self.signed(d)) as u64);
        }
        // The level is `d`, or the ceiling for a bucket full since before now.
        let level = d.min(self.ceiling_units);
        let new = self.sub(now_units, level - cost);
        // `keep` with the 64-bit word's mark a constant, not chosen at run time.
        Ok(new + u64::from(new == crate::engine::word::unused_mark(64)))
    }

    /// Units from `from` to `to`, negative when `from` is ahead ([`Layout::elapsed`]).
    #[inline(always)]
    fn elapsed(self, to: u64, from: u64) -> i64 {
        self.signed(self.sub(to, from))
    }

    /// A difference modulo the word read as signed: at or above `negative_from`, negative.
    #[inline(always)]
    fn signed(self, d: u64) -> i64 {
        if d >= self.negative_from {
            d.wrapping_sub(self.modulus) as i64
        } else {
            d as i64
        }
    }

    /// `a - b` modulo the word, for `a, b` below it.
    #[inline(always)]
    fn sub(self, a: u64, b: u64) -> u64 {
        let (d, borrow) = a.overflowing_sub(b);
        // The modulus or nothing, added without a branch (0 where the modulus is 2^64).
        d.wrapping_add(if borrow { self.modulus } else { 0 })
    }
}

/// Ticks from `now_ticks` until `units` more have accrued on a layout of `a` units a quantum of
/// 2^`shift` ticks, or (`fixed`) in 32-bit fixed point, on the 32-bit word if `narrow`;
/// saturating. [`Layout::ticks_until`], from the few fields a denial carries
/// ([`RetryAfter`](crate::RetryAfter)), so that it is worked out only when read.
#[inline]
pub(crate) fn ticks_until(
    a: u64,
    shift: u8,
    fixed: bool,
    narrow: bool,
    now_ticks: u64,
    units: u64,
) -> u64 {
    if units == 0 {
        return 0;
    }
    if fixed {
        // The least d with floor((now + d) M / 2^f) >= floor(now M / 2^f) + units:
        // d M >= units · 2^f - (now M mod 2^f), with f = 32 (constant shifts: on a 32-bit
        // core, moves of halves).
        if units > u64::from(u32::MAX) {
            return u64::MAX;
        }
        let behind = u64::from(now_ticks.wrapping_mul(a) as u32);
        // Rounded up as floor((x - 1) / M) + 1, x > 0 (units >= 1, behind < 2^32): one
        // division and no product to check it by.
        return div_wide((units << 32) - behind - 1, a) + 1;
    }
    // Most layouts take a power of two of units a quantum (one, for rates that divide the
    // clock's frequency): on a 64-bit host a shift, not a division, on the denial path.
    let quanta = if !NARROW_DIVISION && a.is_power_of_two() {
        ((units - 1) >> a.trailing_zeros()) + 1
    } else if NARROW_DIVISION && narrow {
        // On a 32-bit core, the 32-bit word: `A` is below 2^32, and so is any wait's units
        // (the ring holds 2^32; beyond it, saturating as in fixed point), so one 32-bit
        // division, smaller there than the shift by a variable amount of a 64-bit number.
        if units > u64::from(u32::MAX) {
            return u64::MAX;
        }
        u64::from(div32((units - 1) as u32, a as u32)) + 1
    } else {
        div(units - 1, a) + 1
    };
    let due = (now_ticks >> shift)
        .wrapping_add(quanta)
        .wrapping_shl(u32::from(shift));
    due.wrapping_sub(now_ticks)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Quota, Rate};
    use core::time::Duration;

    /// `take_narrow` is `take_without_debt` in 32-bit arithmetic: the same answer for every
    /// word and reading, on every 32-bit layout read every tick. The words tried sit where the
    /// two could part: around the split between elapsed time and debt, at the never-used mark
    /// and the values either side, at the ceiling, and at the ends of the ring.
    #[test]
    fn the_narrow_take_answers_as_the_general_one() {
        let rates = [
            Rate::per_second(2),
            Rate::per_second(10),
            Rate::per_minute(171),
            Rate::per_second(100_000),
            Rate::per_second(8_000_000),
            Rate::new(3, Duration::from_millis(700)),
        ];
        let mut layouts = 0;
        let mut checked = 0u64;
        for rate in rates {
            for burst in [1, 2, 5, 1_000, 10_000] {
                for hz in [32_768, 1_000_000, 12_500_000, 16_000_000, 1_000_000_000] {
                    let Ok(p) = Layout::solve(&Quota::new(rate).burst(burst), hz, 32) else {
                        continue;
                    };
                    if p.shift != 0 {
                        continue;
                    }
                    layouts += 1;
                    let mark = crate::engine::word::unused_mark(32);
                    let (nf, ceiling) = (p.negative_from, p.ceiling_units);
                    let nows = [0, 1, 12_345, mark - 1, mark, mark + 1, u64::from(u32::MAX)];
                    let mut offsets = std::vec![0, 1, 2, ceiling - 1, ceiling, ceiling + 1];
                    offsets.extend([nf - 1, nf, nf + 1, (1 << 32) - 1, 1 << 31, (1 << 31) - 1]);
                    offsets.extend([mark.wrapping_sub(ceiling), (1 << 32) - ceiling]);
                    for now in nows {
                        for offset in &offsets {
                            // The word `offset` units before `now`, and the mark itself.
                            let word = now.wrapping_sub(*offset) & 0xFFFF_FFFF;
                            for word in [word, mark] {
                                let upt = p.units_per_token.get();
                                for cost in [upt, 2 * upt, ceiling] {
                                    if cost > ceiling {
                                        continue;
                                    }
                                    assert_eq!(
                                        p.take_narrow(word, now, cost),
                                        p.take_without_debt(word, now, cost),
                                        "{rate} burst {burst} on {hz} Hz: word {word}, now {now}, cost {cost}"
                                    );
                                    checked += 1;
                                }
                            }
                        }
                    }
                }
            }
        }
        assert!(
            layouts >= 20 && checked >= 10_000,
            "{layouts} layouts, {checked} takes"
        );
    }
}

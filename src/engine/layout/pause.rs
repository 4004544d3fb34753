//! The pause after an upstream's 429, for every bucket kind: the longest pause the word holds,
//! the transition that pauses a word, and what a pause answers.

use core::time::Duration;

use crate::clock::{ticks_to_duration_ceil, Clock};
use crate::Pause;

use super::Layout;

/// The pause, for every bucket kind: one bound, one transition and one answer.
impl Layout {
    /// The longest pause the word can hold, in ticks: the debt bound.
    pub(crate) fn max_pause_ticks(&self) -> u64 {
        let a = self.units_per_quantum.get();
        if self.fraction_bits != 0 {
            let ticks = (u128::from(self.max_debt_units()) << self.fraction_bits) / u128::from(a);
            return u64::try_from(ticks).unwrap_or(u64::MAX);
        }
        (self.max_debt_units() / a)
            .checked_shl(u32::from(self.shift))
            .unwrap_or(u64::MAX)
    }

    /// The longest pause the word can hold, read to the clock's resolution.
    pub(crate) fn max_pause<C: Clock>(&self) -> Duration {
        ticks_to_duration_ceil::<C>(self.max_pause_ticks())
    }

    /// The pause as every bucket's CAS driver runs it: the word paused from `now_ticks` for `ticks` (at most [`max_pause_ticks`]), and, when
    /// debt already held it at least as long, the units of that debt; `Err(debt units)` when
    /// the word stands past its debt bound and is left as it is.
    ///
    /// A word already held longer is still moved, by one unit (past the debt bound if need be):
    /// reservations made before the pause then no longer stand last, so none of them can be
    /// given back into the pause (see `Layout::give_back`), which would end it early.
    pub(crate) fn pause_step(
        &self,
        word: u64,
        now_ticks: u64,
        now_units: u64,
        ticks: u64,
    ) -> Result<(u64, Option<u64>), u64> {
        let ticks = ticks.min(self.max_pause_ticks());
        // Read to the resolution: a grant needs the reading past the instant's, so none comes
        // before it.
        let resumes_at = now_ticks.wrapping_add(ticks);
        let pause_units = self.elapsed(self.units_at(resumes_at), now_units).max(0) as u64;
        if let Some(word) = self.paused(word, now_units, pause_units) {
            return Ok((word, None));
        }
        // One unit past the debt bound at most: no reservation ever stands there, and a word
        // already there is fenced.
        let debt = self.debt(word, now_units);
        let max_debt = self.max_debt_units();
        if debt > max_debt {
            // Deeper than any reservation runs from its own reading: a fence, or a clock stepped
            // back behind the reservation made last, whose due the word may still be. On the
            // 64-bit word it is moved one unit later too (so that cancelling that reservation
            // gives nothing back into the pause) while it stands within half the debt bound
            // past it: repeated pauses then carry it no further than that, and a clock stepped
            // back by up to an eighth of the word from its furthest reading still reads it as
            // debt. The 32-bit word's negative side has no such room (a burst's refill past the
            // bound, for the clock stepped back), so there it is left as it is.
            if self.word_bits == 64 && debt < max_debt + max_debt / 2 {
                return Ok((self.behind(now_units, debt + 1), Some(debt + 1)));
            }
            return Err(debt);
        }
        Ok((self.fenced(now_units, debt + 1), Some(debt)))
    }

    /// What a pause of `ticks` asked at `now_ticks` did, given the debt that already held the
    /// bucket longer, if any (`Err` when the word was at its debt bound and left as it was).
    pub(crate) fn pause_answer<C: Clock>(
        &self,
        now_ticks: u64,
        ticks: u64,
        longer: Result<Option<u64>, u64>,
    ) -> Pause {
        let max = self.max_pause_ticks();
        match longer {
            Ok(None) if ticks > max => Pause::Clamped {
                resumes_after: ticks_to_duration_ceil::<C>(max),
            },
            Ok(None) => Pause::Paused {
                resumes_after: ticks_to_duration_ceil::<C>(ticks),
            },
            Ok(Some(debt_units)) | Err(debt_units) => Pause::AlreadyLonger {
                resumes_after: ticks_to_duration_ceil::<C>(self.ticks_until(now_ticks, debt_units)),
            },
        }
    }
}

//! Feedback from an upstream: pauses after a 429, and the crate-private pieces that let several
//! buckets act as one (a take undone, a wait computed without taking).

use core::time::Duration;

use super::{Reservation, TokenBucket};
use crate::clock::{
    duration_to_ticks_ceil, duration_to_ticks_floor, ticks_to_duration_ceil, Clock,
};
use crate::engine::layout::Layout;
use crate::{Denied, Word};

/// What [`TokenBucket::pause_for`] and [`TokenBucket::pause_until`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum Pause {
    /// The bucket grants nothing for `resumes_after`, and is empty then.
    Paused {
        /// How long from now until the bucket is empty again and starts to refill.
        resumes_after: Duration,
    },
    /// The bucket already granted nothing for at least as long (an earlier pause, or debt from
    /// reservations), so it is unchanged.
    AlreadyLonger {
        /// How long from now until the bucket is empty again and starts to refill.
        resumes_after: Duration,
    },
    /// The pause asked for was longer than the word can hold as debt
    /// ([`TokenBucket::max_pause`]), so the bucket is paused for that instead. Pause again when
    /// it runs out if the upstream still refuses.
    Clamped {
        /// How long from now until the bucket is empty again and starts to refill.
        resumes_after: Duration,
    },
    /// The bucket's quota is unlimited ([`Quota::unlimited`](crate::Quota::unlimited)): it
    /// grants through any pause, and nothing changed. Turn a limit on (a finite quota) to
    /// follow an upstream's pushback.
    Unlimited,
}

impl Pause {
    /// How long from now until the bucket is empty again and starts to refill, whatever the
    /// variant.
    pub const fn resumes_after(&self) -> Duration {
        match *self {
            Pause::Paused { resumes_after }
            | Pause::AlreadyLonger { resumes_after }
            | Pause::Clamped { resumes_after } => resumes_after,
            Pause::Unlimited => Duration::ZERO,
        }
    }
}

impl<C: Clock, W: Word> TokenBucket<C, W> {
    /// Grants nothing for `duration` from now, then resumes empty: what to do after an upstream
    /// answers 429 with `Retry-After`.
    ///
    /// One compare-exchange on the word: the bucket is set empty at the instant, so the first
    /// grant after it waits for its tokens to accrue and the retry is not a burst. A pause never
    /// shortens a longer pause or a debt from reservations, and never adds tokens. A pause longer
    /// than [`max_pause`](Self::max_pause) (decades on the 64-bit word, about half the idle
    /// horizon on the 32-bit word) is clamped to it and reported as [`Pause::Clamped`].
    /// `Duration::ZERO` empties the bucket now.
    ///
    /// Reservations made before the pause keep their instants, and the pause moves the word past
    /// them (a debt already longer is fenced one unit further), so that cancelling one gives
    /// nothing back into the pause. One exception, on the 32-bit word and a clock that steps
    /// back: asked while the clock reads so far behind the reservation made last that the word
    /// reads deeper than any reservation runs, the pause cannot tell that reservation's due from
    /// a fence and leaves the word as it is; cancelling that reservation then ends the pause
    /// early, by at most its own tokens. (The 64-bit word has room to move the word there too.)
    ///
    /// ```
    /// use core::time::Duration;
    /// use tollgate::{ManualClock, Pause, Quota, Rate, TokenBucket};
    ///
    /// let clock = ManualClock::new();
    /// let bucket = TokenBucket::try_new(Quota::new(Rate::per_second(10)).burst(10), &clock)?;
    /// // The upstream said 429, Retry-After: 2.
    /// let pause = bucket.pause_for(Duration::from_secs(2));
    /// assert_eq!(pause, Pause::Paused { resumes_after: Duration::from_secs(2) });
    /// clock.advance(Duration::from_secs(2));
    /// assert!(bucket.try_acquire(1).is_err()); // empty at the instant, not full
    /// clock.advance(Duration::from_millis(100));
    /// assert!(bucket.try_acquire(1).is_ok());
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn pause_for(&self, duration: Duration) -> Pause {
        let now = self.clock.now();
        self.pause_ticks(now, duration_to_ticks_ceil::<C>(duration))
    }

    /// Grants nothing before the clock reads `until_ticks`, then resumes empty: as
    /// [`pause_for`](Self::pause_for), given an instant on the bucket's clock. An instant at or
    /// before now empties the bucket now.
    pub fn pause_until(&self, until_ticks: u64) -> Pause {
        let now = self.clock.now();
        // Signed, so that a clock that wrapped or an instant already past read right.
        let ahead = until_ticks.wrapping_sub(now) as i64;
        self.pause_ticks(now, ahead.max(0) as u64)
    }

    /// The longest pause the word can hold: the debt bound, read to the clock's resolution.
    /// Zero on an unlimited quota, which does not pause.
    pub fn max_pause(&self) -> Duration {
        let p = self.layout();
        if p.is_unlimited() {
            return Duration::ZERO;
        }
        p.max_pause::<C>()
    }

    fn pause_ticks(&self, now: u64, ticks: u64) -> Pause {
        let p = self.layout();
        if p.is_unlimited() {
            return Pause::Unlimited;
        }
        let outcome = self.cell(&p).update(now, |word, now_units| {
            p.pause_step(word, now, now_units, ticks)
        });
        p.pause_answer::<C>(now, ticks, outcome)
    }

    /// Undoes a reservation the caller has not acted on, whether or not it is due: gives back
    /// its tokens, less what the burst cap would have cut from them since (see
    /// `Layout::refund`). For several buckets acting as one, where a part due early is not used
    /// until the whole is due.
    pub(crate) fn refund(&self, reservation: Reservation) {
        self.give_back_by(reservation, false, Layout::refund);
    }

    /// How long until `reserve(n, max_wait)` would succeed, without taking anything: zero when
    /// it would now.
    pub(crate) fn shortfall(&self, n: u32, max_wait: Duration) -> Result<Duration, Denied> {
        let p = self.layout();
        if n == 0 || p.is_unlimited() {
            return Ok(Duration::ZERO);
        }
        let cost = p.cost(n)?;
        let now = self.clock.now();
        let now_units = p.units_at(now);
        let word = self.cell(&p).read(now_units);
        let retry = p
            .reserve(
                word,
                now,
                now_units,
                cost,
                duration_to_ticks_floor::<C>(max_wait),
            )
            .map_or_else(|retry| retry, |_| 0);
        Ok(ticks_to_duration_ceil::<C>(retry))
    }
}

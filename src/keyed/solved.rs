//! A keyed limiter's tiers, solved once, and the conversion of a key's bucket between them.

use super::protection_units;
use crate::engine::layout::Layout;
use crate::{ConfigError, Quota};

/// One tier's quota, solved once for the limiter's clock and word.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Solved {
    pub layout: Layout,
    pub quota: Quota,
    /// How long a protected bucket stays once full, in this tier's units.
    pub protection_units: u64,
    /// How long any other bucket stays once full, in this tier's units: 0 unless a keyed
    /// limiter sets a probation window.
    pub probation_units: u64,
}

/// How long a held bucket may go untouched and still read correctly: the shortest horizon of
/// `tiers`, read on the clock `C`.
pub(crate) fn idle_horizon<C: crate::Clock>(tiers: &[Solved]) -> core::time::Duration {
    let ticks = tiers.iter().map(|tier| tier.layout.horizon_ticks()).min();
    crate::clock::ticks_to_duration_ceil::<C>(ticks.unwrap_or(0))
}

impl Solved {
    /// `quota` on a clock of `hz` ticks a second and a word of `bits`, protecting returning
    /// keys for `protection_ticks`.
    pub const fn new(
        quota: Quota,
        hz: u64,
        bits: u32,
        protection_ticks: u64,
    ) -> Result<Self, ConfigError> {
        let layout = match Layout::solve(&quota, hz, bits) {
            Ok(layout) => layout,
            Err(error) => return Err(error),
        };
        Ok(Self {
            layout,
            quota,
            protection_units: Self::units_of(&layout, protection_ticks),
            probation_units: 0,
        })
    }

    /// This tier's layout under `quota`'s name: the stand-in tier of an unlimited limiter,
    /// which reports its quota and never reads its layout.
    #[cfg(feature = "std")]
    pub const fn standing_in_for(mut self, quota: Quota) -> Self {
        self.quota = quota;
        self
    }

    /// The same tier protecting returning keys for `protection_ticks` instead.
    pub const fn protecting(mut self, protection_ticks: u64) -> Self {
        self.protection_units = Self::units_of(&self.layout, protection_ticks);
        self
    }

    /// The same tier keeping a bucket that is not protected for `probation_ticks` once full
    /// (a `KeyedLimiter`'s window; the fixed table has none).
    #[cfg(feature = "std")]
    pub const fn on_probation(mut self, probation_ticks: u64) -> Self {
        self.probation_units = Self::units_of(&self.layout, probation_ticks);
        self
    }

    /// How long a bucket may be kept full and still read as full that long: the longer window.
    #[cfg(feature = "std")]
    pub fn kept_age_units(&self) -> u64 {
        if self.protection_units > self.probation_units {
            self.protection_units
        } else {
            self.probation_units
        }
    }

    const fn units_of(layout: &Layout, protection_ticks: u64) -> u64 {
        if protection_ticks == 0 {
            0
        } else {
            protection_units(layout, protection_ticks)
        }
    }

    /// How long a bucket of this tier must stay full before it may be evicted, in its units.
    pub fn guard(&self, protected: bool) -> u64 {
        if protected {
            self.protection_units
        } else {
            self.probation_units
        }
    }
}

/// The word that holds, under tier `to`, what `word` holds under tier `from` at `now_ticks`,
/// by [`AdjustableBucket::set_quota`](crate::AdjustableBucket::set_quota)'s rule: tokens kept
/// as they are, capped by the new burst; debt kept in time. Never mints: a never-used word
/// becomes the bucket it stands for (the old tier's start fill), converted like any other.
pub(crate) fn converted(from: &Layout, to: &Layout, word: u64, now_ticks: u64) -> u64 {
    let word = if word == from.unused() {
        from.fresh(from.units_at(now_ticks))
    } else {
        word
    };
    from.converted(to, word, now_ticks)
}

//! [`Tier`]: which of a keyed limiter's quotas a key follows.

use core::fmt;

/// Which of a keyed limiter's quotas a key follows: an index into the quotas given when it was
/// built (`Tier(0)` is the first, and the only one of a limiter built with one quota).
///
/// A key's tier is chosen when its bucket is made, by the limiter's tier function, and stored
/// in the key's slot (one byte; a `KeyedLimiter` of one tier stores nothing, every key being
/// `Tier(0)`); `KeyedLimiter::set_tier` and
/// `KeyedTable::set_tier` change it for a key that is held,
/// without touching any other key.
///
/// ```
/// use tollgate::Tier;
///
/// #[derive(Clone, Copy)]
/// enum Plan { Free, Paid, Blocked }
///
/// let tier = |plan: Plan| Tier(plan as u8);
/// assert_eq!(tier(Plan::Paid), Tier(1));
/// # let _ = (Plan::Free, Plan::Blocked);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Tier(pub u8);

/// The most tiers a keyed limiter holds: a slot keeps its tier in one byte.
pub const MAX_TIERS: usize = 256;

/// Why a key's tier could not be changed. Nothing was changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum SetTierError {
    /// The limiter has no such tier.
    UnknownTier {
        /// The tier asked for.
        tier: Tier,
        /// How many tiers the limiter has.
        tiers: usize,
    },
    /// A call is updating the key's bucket right now (a `KeyedTable` only, where calls update
    /// the word outside the critical section, so an interrupt handler may find one mid-way).
    /// Try again from a context the call cannot have interrupted.
    Busy,
}

impl fmt::Display for SetTierError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SetTierError::UnknownTier { tier, tiers } => {
                write!(f, "no tier {} in a limiter of {tiers} tiers", tier.0)
            }
            SetTierError::Busy => f.write_str("the key's bucket is being updated; try again"),
        }
    }
}

impl core::error::Error for SetTierError {}

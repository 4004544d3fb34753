//! Per-key limits: many buckets that share one quota and one clock, each kept in one atomic word.
//!
//! A bucket that is full is the same as a bucket that was never made: both grant the burst and
//! then the rate. So a table may drop full buckets at any time without changing a decision, and
//! that is the only eviction here. When a table holds its capacity and none of its buckets is
//! full, a new key gets [`KeyedDenied::Full`] or is admitted untracked, as the caller chose with
//! [`WhenFull`] when building the table.
//!
//! Eviction changes no decision when the quota starts full (the default). With
//! [`Quota::start_empty`](crate::Quota::start_empty) or a lower start fill, a key that comes back
//! after its bucket was dropped starts at that fill again: stricter, never looser.

// Under loom the fixed table is left out, and without `std` nothing else uses the helpers.
#![cfg_attr(all(loom, not(feature = "std")), allow(dead_code))]

use core::fmt;
use core::time::Duration;

use crate::params::Params;
use crate::Denied;

#[cfg(feature = "std")]
mod map;
#[cfg(all(feature = "heapless", not(loom)))]
mod table;

#[cfg(feature = "std")]
pub use map::KeyedLimiter;
#[cfg(all(feature = "heapless", not(loom)))]
pub use table::KeyedTable;

/// What a keyed table does with a new key when it holds its capacity and none of its buckets is
/// full. There is no default: the choice is the caller's, and it is written where the table is
/// built.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum WhenFull {
    /// Fail open: grant the request without tracking the key. Availability over strictness.
    Admit,
    /// Fail closed: refuse with [`KeyedDenied::Full`]. Strictness over availability.
    Refuse,
}

impl WhenFull {
    /// The outcome for a key that found no room.
    fn outcome(self, capacity: usize) -> Result<(), KeyedDenied> {
        match self {
            WhenFull::Admit => Ok(()),
            WhenFull::Refuse => Err(KeyedDenied::Full { capacity }),
        }
    }
}

/// Why a keyed table did not grant a request. A denial takes nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum KeyedDenied {
    /// The key's bucket denied the request.
    Denied(Denied),
    /// The table holds its capacity of keys, none of their buckets is full, and the table was
    /// built with [`WhenFull::Refuse`]. Nothing was taken and the key was not added.
    Full {
        /// The most keys the table holds.
        capacity: usize,
    },
}

impl KeyedDenied {
    /// How long until the key's request would be granted; `None` when it never would, or when
    /// the table was full (that depends on other keys).
    pub const fn retry_after(&self) -> Option<Duration> {
        match self {
            KeyedDenied::Denied(denied) => denied.retry_after(),
            KeyedDenied::Full { .. } => None,
        }
    }
}

impl From<Denied> for KeyedDenied {
    fn from(denied: Denied) -> Self {
        KeyedDenied::Denied(denied)
    }
}

impl fmt::Display for KeyedDenied {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyedDenied::Denied(denied) => fmt::Display::fmt(denied, f),
            KeyedDenied::Full { capacity } => write!(
                f,
                "keyed table full: {capacity} keys tracked and none of their buckets is full"
            ),
        }
    }
}

impl core::error::Error for KeyedDenied {}

/// Whether the bucket in `word` is full at `now_units`: the same as no bucket at all.
#[inline]
pub(crate) fn is_full(p: &Params, word: u64, now_units: u64) -> bool {
    p.units_to_full(word, now_units) == 0
}

/// Puts a word back to the never-used mark. Only for a word that no other context is updating.
#[cfg(all(feature = "heapless", not(loom)))]
pub(crate) fn reset<W: crate::word::Word>(cell: &W::Atomic, unused: u64) {
    let mut current = W::load(cell);
    while let Err(actual) = W::compare_exchange(cell, current, unused) {
        current = actual;
    }
}

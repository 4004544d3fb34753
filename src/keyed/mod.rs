//! Per-key limits: many buckets that share one quota and one clock, each kept in one atomic word.
//!
//! A bucket that is full is the same as a bucket that was never made: both grant the burst and
//! then the rate. So a table may drop full buckets without changing a decision for them. Which
//! full bucket goes first, and what a newcomer gets when none may go, is the table's policy:
//!
//! - **Returning keys are protected.** A key granted a second time while it is held becomes
//!   *protected*, up to three quarters of the capacity. A protected bucket is evicted only once
//!   it has been full for longer than the protection window (a minute unless set otherwise):
//!   a client that keeps within its quota, and so sits full between its requests, keeps its
//!   bucket through any flood of new keys.
//! - **Newcomers take the other slots.** A new key takes a free slot, else one freed by eviction,
//!   which takes only full buckets: unprotected ones, and protected ones past their window. The
//!   fixed `KeyedTable` evicts one bucket per newcomer, the unprotected one full the longest,
//!   else a protected one. The sharded `KeyedLimiter` keeps an unprotected bucket for a
//!   probation window once full (a second unless set otherwise), so that a client first seen as
//!   a flood starts is still held at its next request, and evicts in rounds: a newcomer that finds
//!   it at its capacity sweeps every shard that is due, evicting *every* evictable bucket
//!   there at once, and no round starts before a sixteenth of some shard's kept buckets will be
//!   evictable. A newcomer that finds no room gets what [`WhenFull`] says: a refusal, or a grant
//!   from one overflow bucket that all such newcomers share.
//! - **The cap is the table's.** [`KeyedDenied::Full`] means the table holds exactly its
//!   capacity of keys, however it is sharded.
//! - **A key with waiters is kept.** While a wait is lined up on a key (`KeyedLimiter`'s
//!   `acquire`, `acquire_timeout` and `acquire_blocking`; `KeyedTable`'s embassy `acquire`), its
//!   bucket is never evicted, whatever it holds, and counts as protected: no eviction hands a
//!   waited-on key's burst out again. A newcomer's wait that finds no room gets what
//!   [`WhenFull`] says, at once.
//!
//! Eviction changes no decision when the quota starts full (the default). With
//! [`Quota::start_empty`](crate::Quota::start_empty) or a lower start fill, a key that comes back
//! after its bucket was dropped starts at that fill again: stricter, never looser.

use core::fmt;
use core::time::Duration;

use crate::engine::layout::Layout;
use crate::{ConfigError, Denied};

#[cfg(feature = "std")]
mod map;
mod prefix;
mod solved;
#[cfg(feature = "keyed-table")]
mod table;
mod tier;

#[cfg(feature = "std")]
pub use map::{KeyHasher, KeyedLimiter, KeyedLimiterBuilder};
pub use prefix::IpPrefix;
#[cfg(feature = "keyed-table")]
pub use table::KeyedTable;
pub use tier::{SetTierError, Tier, MAX_TIERS};

/// How long a protected key keeps its slot once its bucket is full, unless the table is told
/// otherwise: a minute.
pub(crate) const DEFAULT_PROTECTION: Duration = Duration::from_secs(60);

/// How long a `KeyedLimiter` keeps a bucket that is not protected once it is full, unless told
/// otherwise: a second.
#[cfg(feature = "std")]
pub(crate) const DEFAULT_PROBATION: Duration = Duration::from_secs(1);

/// What a keyed table does with a new key that finds no slot: every slot holds a bucket that is
/// not full, or a protected one within its window (or, in a `KeyedLimiter`, a key that tasks
/// wait on). There is no default: the choice is the caller's, and it is written where the table
/// is built.
///
/// **Waits.** A wait for a new key that finds no slot (`KeyedLimiter::acquire`,
/// `acquire_timeout`, `acquire_blocking`) never waits for room in the table, which comes only
/// as other keys' buckets fill and nothing announces: under `Refuse` it fails at once with
/// [`KeyedDenied::Full`], taking nothing and joining no line; under `Admit` it waits in the
/// overflow bucket's line, in arrival order with every other such newcomer (the fixed
/// `KeyedTable`'s embassy wait fails at once with `Full` under either).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum WhenFull {
    /// Bounded fail-open: every newcomer without a slot draws from one overflow bucket on the
    /// table's own quota, shared by all of them, so the untracked keys together get at most one
    /// key's rate; when it is empty the newcomer gets [`KeyedDenied::Full`] (a newcomer's wait
    /// on a `KeyedLimiter` waits in that bucket's line instead, and gets `Full` only for a
    /// request above its burst).
    Admit,
    /// Fail closed: refuse with [`KeyedDenied::Full`]. Strictness over availability. A
    /// newcomer's wait is refused at once, as its `try_acquire` would be.
    Refuse,
}

/// Why a keyed limiter could not be built.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum KeyedConfigError {
    /// The quota cannot be used on this clock and word, as for a single bucket.
    Quota(ConfigError),
    /// The limiter was asked to hold no keys.
    ZeroCapacity,
    /// The limiter was given no tiers, or more than 256 (a slot keeps its tier in a byte).
    TierCount,
}

impl From<ConfigError> for KeyedConfigError {
    fn from(error: ConfigError) -> Self {
        KeyedConfigError::Quota(error)
    }
}

impl KeyedConfigError {
    /// A one-line description, usable in `const` panics.
    pub(crate) const fn message(&self) -> &'static str {
        match self {
            KeyedConfigError::Quota(error) => error.message(),
            KeyedConfigError::ZeroCapacity => "keyed limiter capacity is zero",
            KeyedConfigError::TierCount => "a keyed limiter needs between 1 and 256 tiers",
        }
    }
}

impl fmt::Display for KeyedConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyedConfigError::Quota(error) => write!(f, "invalid quota: {error}"),
            other => f.write_str(other.message()),
        }
    }
}

impl core::error::Error for KeyedConfigError {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            KeyedConfigError::Quota(error) => Some(error),
            KeyedConfigError::ZeroCapacity | KeyedConfigError::TierCount => None,
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
    /// A new key found no slot: the table holds exactly its capacity of keys and none may be
    /// evicted yet; with [`WhenFull::Admit`], the shared overflow bucket was empty too. Nothing
    /// was taken and the key was not added. The table's `until_room` says when to try again.
    Full {
        /// The most keys the table holds.
        capacity: usize,
    },
    /// The limiter's tier function picked, for a new key, a tier the limiter does not have.
    /// Nothing was taken and the key was not added: a bug in the tier function, which a server
    /// answers with a `500`.
    UnknownTier(Tier),
}

impl KeyedDenied {
    /// How long until the key's request would be granted; `None` when it never would, or when
    /// the table was full (that depends on other keys: ask the table's `until_room`).
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            KeyedDenied::Denied(denied) => denied.retry_after(),
            KeyedDenied::Full { .. } | KeyedDenied::UnknownTier(_) => None,
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
                "keyed table full: {capacity} keys tracked and none may be evicted yet"
            ),
            KeyedDenied::UnknownTier(tier) => write!(
                f,
                "the tier function picked tier {}, which the limiter does not have",
                tier.0
            ),
        }
    }
}

impl core::error::Error for KeyedDenied {}

/// Units the bucket in `word` still has to wait at `now_units` before it may be evicted: until
/// it has been full for `guard_units` (0 for a bucket that is not protected). 0: evictable now.
/// A never-used word holds its start fill.
#[inline]
pub(crate) fn units_to_evictable(p: &Layout, word: u64, now_units: u64, guard_units: u64) -> u64 {
    if word == p.unused() {
        return p.units_to_full(word, now_units).saturating_add(guard_units);
    }
    // burst + guard < W / 2 and |elapsed| < W / 2: no overflow in i64.
    let wanted = (p.burst_units() + guard_units) as i64;
    wanted.saturating_sub(p.elapsed(now_units, word)).max(0) as u64
}

/// The protection window in the word's units, at most half the word's positive side less the
/// ceiling, so that an age up to it always reads as one.
pub(crate) const fn protection_units(p: &Layout, window_ticks: u64) -> u64 {
    let quanta = (window_ticks >> p.shift) as u128;
    let units = (quanta * p.units_per_quantum.get() as u128) >> p.fraction_bits;
    let most = (p.negative_from / 2).saturating_sub(p.ceiling_units) as u128;
    if units > most {
        most as u64
    } else {
        units as u64
    }
}

/// The re-anchored word of a bucket that has been full for more than `max_age_units`: the
/// same bucket, full for exactly `max_age_units`, so that its idle horizon starts again and
/// the table still knows it is past any protection window. `None` when there is nothing to do
/// (never used, not full long enough, or reading ahead of now).
#[inline]
pub(crate) fn reanchored(p: &Layout, word: u64, now_units: u64, max_age_units: u64) -> Option<u64> {
    if word == p.unused() {
        return None;
    }
    let keep = p.burst_units() + max_age_units; // < W / 2
    if p.elapsed(now_units, word) <= keep as i64 {
        return None;
    }
    // now - keep, modulo the word (`Layout::sub`'s rule), never the never-used mark.
    let (back, borrow) = now_units.overflowing_sub(keep);
    let word = if borrow {
        back.wrapping_add(p.modulus)
    } else {
        back
    };
    Some(if word == p.unused() {
        word.wrapping_sub(1) // a unit earlier: reads as full for a unit longer, grants the same
    } else {
        word
    })
}

/// Ticks from `now_ticks` until the bucket in `word` holds a token: 0 when it does.
pub(crate) fn ticks_to_one_token(p: &Layout, word: u64, now_ticks: u64) -> u64 {
    let now_units = p.units_at(now_ticks);
    let word = if word == p.unused() {
        p.fresh(now_units)
    } else {
        word
    };
    match p.take(word, now_units, p.units_per_token.get(), 0) {
        Ok(_) => 0,
        Err(short) => p.ticks_until(now_ticks, short),
    }
}

/// Puts `word` in `cell`: the never-used mark, or a bucket converted to another tier. Only for
/// a cell that no other context is updating.
#[cfg(feature = "keyed-table")]
pub(crate) fn overwrite<W: crate::engine::word::Word>(cell: &W::Atomic, word: u64) {
    let mut current = W::load(cell);
    while let Err(actual) = W::compare_exchange(cell, current, word) {
        current = actual;
    }
}

/// Re-anchors the bucket in `cell` if it has been full for longer than `max_age_units` (see
/// [`reanchored`]); a concurrent update wins and is left as it is.
pub(crate) fn touch_word<W: crate::engine::word::Word>(
    cell: &W::Atomic,
    p: &Layout,
    now_units: u64,
    max_age_units: u64,
) {
    let mut current = W::load(cell);
    while let Some(new) = reanchored(p, current, now_units, max_age_units) {
        match W::compare_exchange(cell, current, new) {
            Ok(()) => return,
            Err(actual) => current = actual,
        }
    }
}

//! [`KeyedLimiterBuilder`]: a [`KeyedLimiter`] with more than the usual knobs.

use core::hash::{BuildHasher, Hash};
use core::marker::PhantomData;
use core::time::Duration;
use std::boxed::Box;
use std::vec::Vec;

use super::{KeyHasher, KeyedLimiter};
use crate::clock::{duration_to_ticks_floor, Clock};
use crate::engine::word::{DefaultWord, Word};
use crate::keyed::solved::Solved;
use crate::keyed::{KeyedConfigError, Tier, WhenFull, DEFAULT_PROBATION, DEFAULT_PROTECTION};
use crate::{Quota, Rate};

/// Builds a [`KeyedLimiter`]: from [`KeyedLimiter::builder`], then any of the settings below,
/// then [`build`](Self::build). Unset: no capacity (an error: a limiter must say how many keys
/// it holds), [`WhenFull::Refuse`], about four shards per CPU, the [`DefaultWord`], a minute of
/// protection, a second of probation, one tier, [`KeyHasher`].
#[must_use = "a builder does nothing until `build` is called"]
pub struct KeyedLimiterBuilder<K, C, W: Word = DefaultWord, S = KeyHasher> {
    quotas: Vec<Quota>,
    tier_of: Box<dyn Fn(&K) -> Tier + Send + Sync>,
    clock: C,
    capacity: usize,
    when_full: WhenFull,
    shards: Option<usize>,
    protection: Duration,
    probation: Duration,
    hasher: S,
    word: PhantomData<fn() -> W>,
}

impl<K, C: Clock> KeyedLimiterBuilder<K, C> {
    pub(super) fn new(quota: Quota, clock: C) -> Self {
        Self {
            quotas: Vec::from([quota]),
            tier_of: Box::new(|_| Tier(0)),
            clock,
            capacity: 0,
            when_full: WhenFull::Refuse,
            shards: None,
            protection: DEFAULT_PROTECTION,
            probation: DEFAULT_PROBATION,
            hasher: KeyHasher::new(),
            word: PhantomData,
        }
    }
}

impl<K: Hash + Eq + Clone, C: Clock, W: Word, S: BuildHasher> KeyedLimiterBuilder<K, C, W, S> {
    /// The most keys held at once; required.
    pub fn capacity(mut self, capacity: usize) -> Self {
        self.capacity = capacity;
        self
    }

    /// What a new key gets when the limiter is at its capacity and none may be evicted;
    /// [`WhenFull::Refuse`] unless set.
    pub fn when_full(mut self, when_full: WhenFull) -> Self {
        self.when_full = when_full;
        self
    }

    /// About `shards` shards: rounded down to a power of two, at least one, at most the
    /// capacity and at most 1024. The cap does not depend on them.
    pub fn shards(mut self, shards: usize) -> Self {
        self.shards = Some(shards);
        self
    }

    /// Keeps each key's bucket in the word `V`: `u32` halves its state, for a shorter idle
    /// horizon (see [`Word`] and [`KeyedLimiter::touch_all`]).
    pub fn word<V: Word>(self) -> KeyedLimiterBuilder<K, C, V, S> {
        KeyedLimiterBuilder {
            quotas: self.quotas,
            tier_of: self.tier_of,
            clock: self.clock,
            capacity: self.capacity,
            when_full: self.when_full,
            shards: self.shards,
            protection: self.protection,
            probation: self.probation,
            hasher: self.hasher,
            word: PhantomData,
        }
    }

    /// Hashes keys with `hasher` instead of [`KeyHasher`]: std's
    /// `std::collections::hash_map::RandomState` (SipHash-1-3, keyed by the operating system's
    /// randomness) where clients may study the server's timing to find colliding keys, at the
    /// cost of a slower hash on every check (the keyed bench measures it).
    ///
    /// ```
    /// use std::collections::hash_map::RandomState;
    /// use tollgate::{KeyedLimiter, ManualClock, Quota, Rate};
    ///
    /// let clock = ManualClock::new();
    /// let limiter = KeyedLimiter::builder(Quota::new(Rate::per_second(5)), &clock)
    ///     .capacity(1_000)
    ///     .hasher(RandomState::new())
    ///     .build()?;
    /// assert!(limiter.try_acquire(&"alice", 1).is_ok());
    /// # Ok::<(), tollgate::KeyedConfigError>(())
    /// ```
    pub fn hasher<T: BuildHasher>(self, hasher: T) -> KeyedLimiterBuilder<K, C, W, T> {
        KeyedLimiterBuilder {
            quotas: self.quotas,
            tier_of: self.tier_of,
            clock: self.clock,
            capacity: self.capacity,
            when_full: self.when_full,
            shards: self.shards,
            protection: self.protection,
            probation: self.probation,
            hasher,
            word: PhantomData,
        }
    }

    /// Keeps a protected key's bucket for `protection` once it is full (a minute unless set);
    /// `Duration::ZERO` turns protection off. See [`KeyedLimiter::with_protection`].
    pub fn protection(mut self, protection: Duration) -> Self {
        self.protection = protection;
        self
    }

    /// Keeps a bucket that is not protected for `probation` once it is full (a second unless
    /// set), so that a client whose requests come further apart than its bucket takes to refill
    /// is still held at its next request, and is protected from then on, even while a flood of
    /// new keys takes every slot that eviction frees. `Duration::ZERO` evicts a full bucket
    /// that is not protected at once. Eviction takes only full buckets either way: the window
    /// changes which newcomers find room, never a decision for a held key.
    ///
    /// Under a flood, each new key then holds its slot for its refill time plus the window, so
    /// that fewer of the flood's keys are admitted (they are refused, or share the overflow
    /// bucket under [`WhenFull::Admit`]).
    pub fn probation(mut self, probation: Duration) -> Self {
        self.probation = probation;
        self
    }

    /// More quotas, `Tier(1)` onwards (the quota given to [`KeyedLimiter::builder`] is
    /// `Tier(0)`), and the function that picks a new key's tier. It runs once per new bucket,
    /// outside the shard's lock; a tier the limiter does not have refuses the key with
    /// [`KeyedDenied::UnknownTier`](crate::KeyedDenied::UnknownTier). Up to 256 tiers in all.
    /// Called again, it replaces the quotas and the function given before.
    pub fn tiers(
        mut self,
        more: impl IntoIterator<Item = Quota>,
        tier_of: impl Fn(&K) -> Tier + Send + Sync + 'static,
    ) -> Self {
        self.quotas.truncate(1);
        self.quotas.extend(more);
        self.tier_of = Box::new(tier_of);
        self
    }

    /// The limiter, or why a quota cannot be used on this clock and word, the capacity is
    /// zero, or there are more than 256 tiers.
    pub fn build(self) -> Result<KeyedLimiter<K, C, W, S>, KeyedConfigError> {
        if self.quotas.len() > crate::keyed::MAX_TIERS {
            return Err(KeyedConfigError::TierCount);
        }
        let protection = duration_to_ticks_floor::<C>(self.protection);
        let probation = duration_to_ticks_floor::<C>(self.probation);
        // An unlimited limiter (one quota, unlimited) holds no keys: its tier is a finite
        // stand-in, never read, that keeps the limiter's shape.
        let unlimited = matches!(&self.quotas[..], [quota] if quota.is_unlimited());
        let tiers = self
            .quotas
            .iter()
            .map(|&quota| {
                let solved = if unlimited {
                    Solved::new(
                        Quota::new(Rate::per_second(1)),
                        C::TICKS_PER_SECOND,
                        W::BITS,
                        0,
                    )
                    .map(|tier| tier.standing_in_for(quota))
                } else {
                    Solved::new(quota, C::TICKS_PER_SECOND, W::BITS, protection)
                };
                solved.map(|tier| tier.on_probation(probation))
            })
            .collect::<Result<Box<[Solved]>, _>>()?;
        let shards = self.shards.unwrap_or_else(|| {
            let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
            cpus.saturating_mul(4)
        });
        KeyedLimiter::build(
            tiers,
            self.tier_of,
            self.clock,
            self.hasher,
            self.capacity,
            self.when_full,
            shards,
        )
    }
}

impl<K, C, W: Word, S> core::fmt::Debug for KeyedLimiterBuilder<K, C, W, S> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("KeyedLimiterBuilder")
            .field("quotas", &self.quotas)
            .field("capacity", &self.capacity)
            .field("when_full", &self.when_full)
            .field("shards", &self.shards)
            .field("protection", &self.protection)
            .field("probation", &self.probation)
            .finish_non_exhaustive()
    }
}

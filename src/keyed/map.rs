//! [`KeyedLimiter`]: a sharded, capped per-key limiter for servers.

use core::hash::{BuildHasher, Hash};
use core::time::Duration;
use std::boxed::Box;
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::vec::Vec;

// Not `crate::sync`: these are counters and hints beside the buckets, never a bucket's state,
// and a host without native 64-bit atomics gets portable-atomic's lock for them.
use portable_atomic::AtomicU64;

use super::solved::{converted, Solved};
use super::{
    ticks_to_one_token, touch_word, units_to_evictable, KeyedConfigError, KeyedDenied,
    SetTierError, Tier, WhenFull,
};
use crate::clock::{duration_to_ticks_floor, ticks_to_duration_ceil, Clock};
use crate::engine::sync::Ordering;
use crate::engine::word::{DefaultWord, Word};
use crate::{Denied, Quota};

mod builder;
mod hasher;
mod swiss;
mod tables;
mod wait;

use crate::engine::cell::WordCell;
pub use builder::KeyedLimiterBuilder;
pub use hasher::KeyHasher;
use tables::{
    grow, insert, on_shards, planned_keys, retain, shard_bits, shard_map, shrink, Entries, Shard,
    Slot, Tables,
};

/// A concurrent per-key limiter for servers: one bucket per client, address or API key, all on
/// one quota and one clock, in at most `capacity` entries.
///
/// Keys are spread over shards by hash, each a `RwLock` around two hash tables of entries,
/// `(key, word)` (and the tier's byte in a limiter of several tiers): the *protected* keys and
/// the others. A table keeps each entry in the cache line that holds its key's tag, so that a
/// check of a held key waits on one load from memory once the tables outgrow the caches.
/// Checking a key that is already there takes its shard's lock *for reading* and updates the
/// bucket's word by compare-exchange: no global lock, no write lock, and threads on the same
/// key or shard do not wait for each other.
/// Only adding a key, protecting it, and eviction take a shard's write lock.
///
/// The policy (the fixed-capacity `KeyedTable`'s, but for probation and rounds):
///
/// - A key granted a second time while held becomes *protected*, up to three quarters of the
///   capacity. A protected bucket is evicted only once it has been full for the protection
///   window (a minute, or [`with_protection`](Self::with_protection)): a client within its
///   quota keeps its bucket, and its exact rate, through any flood of new keys.
/// - Any other bucket is evicted only once it has been full for the *probation* window (a
///   second, or [`probation`](KeyedLimiterBuilder::probation)), so that a client that first
///   appears as a flood of new keys starts is still held at its next request, and protected from
///   then on, if its requests come no further apart than its bucket's refill time plus the
///   window. Without it the flood takes every slot eviction frees within microseconds, each
///   flood key's bucket stays short of full as long as the client's, and the client is evicted
///   before its second grant at every request.
/// - The cap is global: one count of keys across shards, so [`KeyedDenied::Full`] means
///   [`len`](Self::len) is at the capacity, whatever the shard count or the host.
/// - A new key that finds the limiter at its capacity starts a round of sweeps over the
///   shards that are due: each evicts every bucket past its window (probation or protection),
///   and records when a sixteenth of what it kept will be evictable; no round
///   starts before the earliest of those. A flood costs two lookups per refused key, both
///   under the shard's shared lock (the newcomers of a flood wait for no write lock), and one
///   scan per sixteenth of a shard freed, never a scan per key. If nothing could be freed
///   the key gets what [`WhenFull`] says, and [`until_room`](Self::until_room) says when the
///   next round is due (the `Retry-After` of a 503).
///
/// **Waits.** `acquire` and `acquire_timeout` (feature `tokio`) and
/// [`acquire_blocking`](Self::acquire_blocking) wait per key, in a line of the key's own, with
/// `TokenBucket`'s rules; a key with waiters is never evicted (see
/// [the waits](#waits-per-key-features-tokio-and-std)). Most clients that must be polite per
/// key (a crawler per host, a job per provider) call `acquire`; servers refusing with a `429`
/// call [`try_acquire`](Self::try_acquire).
///
/// [`sweep`](Self::sweep) evicts everything evictable at once and shrinks the tables, for a
/// timer that keeps memory low between floods; on the 32-bit word it also keeps every key
/// readable, as [`touch_all`](Self::touch_all) does.
///
/// # Tiers
///
/// The [`builder`](Self::builder)'s [`tiers`](KeyedLimiterBuilder::tiers) gives the limiter up
/// to 256 quotas, solved once, and a function that picks a new key's [`Tier`] (free and paid
/// plans, a stricter quota for an abusive client); each entry of a limiter of several tiers
/// keeps its tier in one byte.
/// [`set_tier`](Self::set_tier) moves one held key to another tier at run time, by
/// [`AdjustableBucket::set_quota`](crate::AdjustableBucket::set_quota)'s rule (tokens kept as
/// they are, capped by the new burst: a change never mints), touching no other key.
///
/// # Memory
///
/// A key costs one slot of a table. An entry is `size_of::<K>()` plus the word, rounded up to the
/// alignment: 16 bytes for a `u64` key on the 64-bit word or on the 32-bit one, 32 and 24 for an
/// `Option<IpAddr>`. A limiter of several [tiers](Self::set_tier) adds the tier's byte: 24 bytes
/// for a `u64` key on the 64-bit word; the byte fits in the padding of the other three. A table's
/// slots come in groups of seven after an eight-byte header of one tag byte per slot: in an aligned
/// pair of 64-byte cache lines when they fit (seven 16-byte entries, 18.3 bytes a slot, so that a check
/// reads one pair of cache lines), otherwise packed (24-byte entries, 25.1 bytes a slot; 32-byte ones,
/// 33.1); entries of 8 bytes, seven to a line. A table doubles when fifteen sixteenths of its
/// slots are full, so one table holds between 1.07 and 2.13 slots per key, depending on where
/// the key count falls between two doublings. The shards take unequal shares of the keys, spread
/// over one doubling, so that they do not all double at the same key count: with 8 shards or
/// more, keys held in one table of each shard cost between 1.43 and 1.62 slots each at any key
/// count below the capacity (worked out from the table sizes for 10^4 to 10^7 keys; 1.54 on
/// average, where equal shards doubling at seven eighths, as hashbrown's, average 1.65 between
/// 1.14 and 2.3). No table doubles past the size that holds its shard's share of the capacity
/// (with four standard deviations to spare): it grows to that size instead, so a limiter at its
/// capacity with its keys unprotected (as a flood of new keys leaves it) holds them in tables
/// 0.85 to 0.91 full, 1.10 to 1.18 slots per key (20.2 bytes per `u64` key at a capacity of
/// 100 000, 21.6 at 10 000). Keys split between the two tables of a shard leave each below its
/// plan, and they cost what doubling tables do (26 to 35 bytes per `u64` key at capacity).
/// Removing a key leaves no mark behind, so a table at a steady number of keys under a flood of
/// new ones keeps its size.
/// [`heap_bytes`](Self::heap_bytes) reports the tables as they are.
///
/// Keys are hashed by [`KeyHasher`] (foldhash, seeded once per process from the operating
/// system's randomness) unless the builder is given another
/// [`hasher`](KeyedLimiterBuilder::hasher): see [`KeyHasher`] for what it resists.
///
/// ```
/// use core::time::Duration;
/// use tollgate::{KeyedDenied, KeyedLimiter, ManualClock, Quota, Rate, WhenFull};
///
/// let clock = ManualClock::new();
/// let per_client = KeyedLimiter::try_new(Quota::new(Rate::per_second(2)), &clock, 10_000, WhenFull::Refuse)?;
///
/// assert!(per_client.try_acquire(&"alice", 2).is_ok());
/// assert_eq!(per_client.try_acquire(&"alice", 1).unwrap_err().retry_after(), Some(Duration::from_millis(500)));
/// assert!(per_client.try_acquire(&"bob", 1).is_ok());
/// assert_eq!(per_client.len(), 2);
///
/// clock.advance(Duration::from_secs(1)); // both buckets are full again
/// assert_eq!(per_client.sweep(), 0); // kept for the probation window, a second
/// clock.advance(Duration::from_secs(1));
/// assert_eq!(per_client.sweep(), 2);
/// assert!(per_client.is_empty());
/// # Ok::<(), tollgate::KeyedConfigError>(())
/// ```
pub struct KeyedLimiter<K, C, W: Word = DefaultWord, S = KeyHasher> {
    tables: Tables<K, W>,
    /// Which shard each slice of the hash's shard bits goes to (see [`shard_map`]).
    shard_map: Box<[u16]>,
    hasher: S,
    /// Every tier, solved once; an entry holds its index.
    tiers: Box<[Solved]>,
    /// The first tier again: what an index past the tiers (which never happens) reads, so that
    /// the hot path has no bounds-check panic; and the overflow bucket's.
    first: Solved,
    /// Picks a new key's tier.
    tier_of: Box<dyn Fn(&K) -> Tier + Send + Sync>,
    /// The largest burst of any tier: a request above it is refused before a key is added. 0 on
    /// an unlimited limiter, whose every request then takes that branch.
    max_burst: u64,
    /// Whether the limiter's one quota is unlimited: it grants every request and holds no key.
    unlimited: bool,
    clock: C,
    capacity: usize,
    max_protected: usize,
    when_full: WhenFull,
    /// Keys held across shards: reserved before a key is added, given back when one is evicted.
    held: AtomicUsize,
    /// Protected keys held across shards.
    protected_held: AtomicUsize,
    /// The earliest instant (ticks) at which a shard expects a sixteenth of its keys to be
    /// evictable, as of the last round or insert: no round starts before it.
    next_room_ticks: AtomicU64,
    /// Whether a round is running: one at a time; the others do not wait for it.
    sweeping: AtomicBool,
    /// The bucket that newcomers without a slot share under [`WhenFull::Admit`].
    overflow: W::Atomic,
    /// Each shard's keys with waiters: never evicted while they have them.
    pins: Box<[wait::Pins<K>]>,
}

/// The most shards a limiter has.
const MAX_SHARDS: usize = 1024;

/// How far ahead "not before anything is due" lies: a quarter of the clock's range, so that
/// comparisons on a wrapping clock stay right.
const NEVER_TICKS: u64 = 1 << 62;

impl<K: Hash + Eq + Clone, C: Clock> KeyedLimiter<K, C> {
    /// An empty limiter on the [`DefaultWord`] holding at most `capacity` keys, on one quota,
    /// protecting returning keys for a minute; shards: a power of two, about four per CPU. The
    /// [`builder`](Self::builder) sets the rest.
    ///
    /// # Panics
    ///
    /// When the quota cannot be used on this clock or `capacity` is zero (see
    /// [`KeyedConfigError`]); [`try_new`](Self::try_new) returns the error instead.
    pub fn new(quota: Quota, clock: C, capacity: usize, when_full: WhenFull) -> Self {
        match Self::try_new(quota, clock, capacity, when_full) {
            Ok(limiter) => limiter,
            Err(error) => panic!("{error}"),
        }
    }

    /// Like [`new`](Self::new), or why the quota or capacity cannot be used.
    pub fn try_new(
        quota: Quota,
        clock: C,
        capacity: usize,
        when_full: WhenFull,
    ) -> Result<Self, KeyedConfigError> {
        Self::builder(quota, clock)
            .capacity(capacity)
            .when_full(when_full)
            .build()
    }

    /// A builder for a limiter whose keys follow `quota` (`Tier(0)`) on `clock`: capacity,
    /// shards, word, protection window and tiers.
    ///
    /// ```
    /// use core::time::Duration;
    /// use tollgate::{KeyedLimiter, ManualClock, Quota, Rate, Tier, WhenFull};
    ///
    /// let clock = ManualClock::new();
    /// let free = Quota::new(Rate::per_second(1)).burst(5);
    /// let paid = Quota::new(Rate::per_second(100)).burst(200);
    /// let limiter = KeyedLimiter::builder(free, &clock)
    ///     .capacity(100_000)
    ///     .shards(16)
    ///     .word::<u32>()
    ///     .protection(Duration::from_secs(30))
    ///     .when_full(WhenFull::Refuse)
    ///     .tiers([paid], |key: &&str| if key.starts_with("paid-") { Tier(1) } else { Tier(0) })
    ///     .build()?;
    /// assert_eq!(limiter.tier_quota(Tier(1)), Some(&paid));
    /// # Ok::<(), tollgate::KeyedConfigError>(())
    /// ```
    pub fn builder(quota: Quota, clock: C) -> KeyedLimiterBuilder<K, C> {
        KeyedLimiterBuilder::new(quota, clock)
    }
}

impl<K: Hash + Eq + Clone, C: Clock, W: Word, S: BuildHasher> KeyedLimiter<K, C, W, S> {
    /// Keeps a protected key's bucket for `protection` once it is full (a window longer than
    /// the word can read is shortened to what it can). `Duration::ZERO` turns protection off:
    /// a protected bucket may then be evicted once full, and any other once full for the
    /// [probation](KeyedLimiterBuilder::probation) window.
    pub fn with_protection(mut self, protection: Duration) -> Self {
        let ticks = duration_to_ticks_floor::<C>(protection);
        for tier in self.tiers.iter_mut() {
            *tier = tier.protecting(ticks);
        }
        self.first = self.first.protecting(ticks);
        self
    }

    fn build(
        tiers: Box<[Solved]>,
        tier_of: Box<dyn Fn(&K) -> Tier + Send + Sync>,
        clock: C,
        hasher: S,
        capacity: usize,
        when_full: WhenFull,
        shards: usize,
    ) -> Result<Self, KeyedConfigError> {
        if capacity == 0 {
            return Err(KeyedConfigError::ZeroCapacity);
        }
        let first = *tiers.first().ok_or(KeyedConfigError::TierCount)?;
        if tiers.len() > super::MAX_TIERS {
            return Err(KeyedConfigError::TierCount);
        }
        let unlimited = first.quota.is_unlimited();
        let max_burst = if unlimited {
            0
        } else {
            tiers
                .iter()
                .map(|tier| tier.layout.burst())
                .max()
                .unwrap_or(0)
        };
        // The largest power of two at most `shards`, `capacity` and `MAX_SHARDS`.
        let count = 1usize << shards.clamp(1, capacity.min(MAX_SHARDS)).ilog2();
        let now = clock.now();
        let shard_map = shard_map(count);
        Ok(Self {
            tables: Tables::new(
                &planned_keys(&shard_map, count, capacity),
                tiers.len() > 1,
                now,
            ),
            shard_map,
            hasher,
            tiers,
            first,
            tier_of,
            max_burst,
            unlimited,
            clock,
            capacity,
            max_protected: capacity - capacity / 4,
            when_full,
            held: AtomicUsize::new(0),
            protected_held: AtomicUsize::new(0),
            next_room_ticks: AtomicU64::new(now),
            sweeping: AtomicBool::new(false),
            overflow: W::cell(first.layout.unused()),
            pins: (0..count).map(|_| wait::Pins::new()).collect(),
        })
    }

    /// Takes `n` tokens from `key`'s bucket now, or says why not.
    ///
    /// Never waits. `n = 0` always succeeds and adds no key; `n` above the burst of every tier
    /// is [`Denied::ExceedsCapacity`] at once, and above the key's own tier's burst before
    /// a key is added. A denial takes nothing. On an unlimited quota ([`Quota::unlimited`])
    /// every call succeeds and no key is added.
    #[inline]
    pub fn try_acquire(&self, key: &K, n: u32) -> Result<(), KeyedDenied> {
        if n == 0 {
            return Ok(());
        }
        if u64::from(n) > self.max_burst {
            // Where an unlimited limiter's every request comes, so the limited path pays nothing.
            if self.unlimited {
                return Ok(());
            }
            return Err(KeyedDenied::Denied(Denied::ExceedsCapacity {
                burst: self.max_burst,
            }));
        }
        let hash = self.hasher.hash_one(key);
        let index = self.shard_index(hash);
        let now = self.clock.now();
        on_shards!(&self.tables, shards => self.acquire_in(&shards[index], hash, key, now, n))
    }

    #[inline]
    fn acquire_in<E: Slot<Key = K, Word = W>>(
        &self,
        shard: &Shard<E>,
        hash: u64,
        key: &K,
        now: u64,
        n: u32,
    ) -> Result<(), KeyedDenied> {
        {
            let entries = shard.read();
            if let Some(entry) = entries.protected.find(hash, |e| e.key() == key) {
                return self.take(entry, now, n);
            }
            if let Some(entry) = entries.fresh.find(hash, |e| e.key() == key) {
                let result = self.take(entry, now, n);
                if result.is_ok()
                    && self.protected_held.load(Ordering::Relaxed) < self.max_protected
                {
                    drop(entries);
                    self.promote(shard, hash, key);
                }
                return result;
            }
        }
        self.insert_and_acquire(shard, hash, key, now, n)
    }

    /// Moves `key`, if the limiter holds it, to `tier`, converting its bucket by
    /// [`AdjustableBucket::set_quota`](crate::AdjustableBucket::set_quota)'s rule: the tokens
    /// it holds are kept as they are, capped by the new tier's burst, and a debt ends when it
    /// did. So a change never mints, however often it comes. No other key is touched; calls
    /// on the key's shard wait for the shard's write lock meanwhile.
    ///
    /// `Ok(true)`: the key's bucket now follows `tier`. `Ok(false)`: the key has no bucket, and
    /// the tier function picks the tier of the next one. The tier function picks again whenever
    /// a key's bucket is made anew (after eviction, which only happens to a full bucket), so
    /// change what it answers first (it may read a map the server keeps), then call this for
    /// the bucket held now.
    pub fn set_tier(&self, key: &K, tier: Tier) -> Result<bool, SetTierError> {
        let Some(to) = self.tiers.get(usize::from(tier.0)) else {
            return Err(SetTierError::UnknownTier {
                tier,
                tiers: self.tiers.len(),
            });
        };
        if self.unlimited {
            return Ok(false);
        }
        let hash = self.hasher.hash_one(key);
        let index = self.shard_index(hash);
        on_shards!(&self.tables, shards => {
            let shard = &shards[index];
            let mut entries = shard.write();
            let entries = &mut *entries;
            let (entry, protected) = match entries.protected.find_mut(hash, |e| e.key() == key) {
                Some(entry) => (entry, true),
                None => match entries.fresh.find_mut(hash, |e| e.key() == key) {
                    Some(entry) => (entry, false),
                    None => return Ok(false),
                },
            };
            // Under the write lock no call is between reading the tier and updating the word.
            let now = self.clock.now();
            let from = &self.solved_of(entry).layout;
            let word = converted(from, &to.layout, W::load(entry.word()), now);
            entry.replace(word, tier.0);
            // On its new tier the bucket may be evictable before the round its old tier set.
            let p = &to.layout;
            let units = units_to_evictable(p, word, p.units_at(now), to.guard(protected));
            let evictable = now.wrapping_add(p.ticks_until(now, units));
            lower(&shard.due_ticks, now, evictable);
            lower(&self.next_room_ticks, now, evictable);
            Ok(true)
        })
    }

    /// The tier of `key`'s bucket, if the limiter holds it.
    pub fn tier(&self, key: &K) -> Option<Tier> {
        self.held(key).map(|(tier, _)| Tier(tier))
    }

    /// The quota of `tier`, if the limiter has it.
    pub fn tier_quota(&self, tier: Tier) -> Option<&Quota> {
        self.tiers.get(usize::from(tier.0)).map(|tier| &tier.quota)
    }

    /// Whole tokens in `key`'s bucket now: the start fill of the tier the tier function picks
    /// for a key not in the limiter. `u64::MAX` on an unlimited quota.
    pub fn available(&self, key: &K) -> u64 {
        if self.unlimited {
            return u64::MAX;
        }
        let now = self.clock.now();
        let held = self.held(key).map(|(tier, word)| {
            let tier = self.solved(tier);
            let p = &tier.layout;
            if word == p.unused() {
                tier.quota.start_fill()
            } else {
                p.tokens(word, p.units_at(now))
            }
        });
        held.unwrap_or_else(|| {
            self.tiers
                .get(usize::from((self.tier_of)(key).0))
                .map_or(0, |tier| tier.quota.start_fill())
        })
    }

    /// How long until a new key would find room: zero while the limiter is under its capacity
    /// (or, under [`WhenFull::Admit`], while the overflow bucket holds a token); otherwise the
    /// time until the next round of sweeps is due (at least a tick), or the overflow bucket
    /// refills a token, whichever comes first. It is what a `503` answer's `Retry-After` says. Keys that come
    /// meanwhile may take that room first.
    pub fn until_room(&self) -> Duration {
        let now = self.clock.now();
        if self.held.load(Ordering::Relaxed) < self.capacity {
            return Duration::ZERO;
        }
        // A round already due is running, or has just found nothing to free and not yet said
        // when it will: at least a tick, so that a refused key is never told "now".
        let next = self.next_room_ticks.load(Ordering::Relaxed);
        let mut ticks = if reached(now, next) {
            1
        } else {
            next.wrapping_sub(now)
        };
        if self.when_full == WhenFull::Admit {
            ticks = ticks.min(ticks_to_one_token(
                &self.first.layout,
                W::load(&self.overflow),
                now,
            ));
        }
        ticks_to_duration_ceil::<C>(ticks)
    }

    /// Evicts every bucket full for longer than its window (probation, or protection for a
    /// protected one); returns how many. Changes no decision for them.
    ///
    /// Takes each shard's write lock in turn, for one pass over its keys, shrinks its tables
    /// when eviction left them mostly empty, and re-anchors the buckets it keeps as
    /// [`touch_all`](Self::touch_all) does. Call it from a timer to give memory back between
    /// floods; the limiter stays within its capacity without it.
    pub fn sweep(&self) -> usize {
        let now = self.clock.now();
        let mut next = now.wrapping_add(NEVER_TICKS);
        let mut evicted = 0;
        on_shards!(&self.tables, shards => {
            for (shard, pins) in shards.iter().zip(self.pins.iter()) {
                evicted += self.sweep_shard(shard, pins, now);
                next = earliest(now, next, shard.due_ticks.load(Ordering::Relaxed));
            }
        });
        self.next_room_ticks.store(next, Ordering::Relaxed);
        evicted
    }

    /// Keeps every held bucket readable for another [`idle_horizon`](Self::idle_horizon):
    /// re-anchors each bucket full for longer than the longer window, keeping how long it
    /// has been full up to the window. Changes no decision and evicts nothing; takes each
    /// shard's lock for reading only.
    ///
    /// Only the 32-bit word needs it (or [`sweep`](Self::sweep), which does it too): call one
    /// of them at least once per idle horizon, and no quiet key reads as in debt, and no slot is
    /// stuck unevictable.
    pub fn touch_all(&self) {
        let now = self.clock.now();
        on_shards!(&self.tables, shards => {
            for shard in shards.iter() {
                let entries = shard.read();
                for entry in entries.protected.iter().chain(entries.fresh.iter()) {
                    self.touch(entry.word(), self.solved_of(entry), now);
                }
            }
        });
        self.touch(&self.overflow, &self.first, now);
    }

    /// How long a held bucket may go untouched and still read correctly (the shortest of the
    /// tiers'); see [`TokenBucket::idle_horizon`](crate::TokenBucket::idle_horizon) and
    /// [`touch_all`](Self::touch_all).
    pub fn idle_horizon(&self) -> Duration {
        super::solved::idle_horizon::<C>(&self.tiers)
    }

    /// Keys held now, never more than the [`capacity`](Self::capacity): the count that the cap
    /// itself keeps. While other threads add and evict keys it counts a key from the moment a
    /// thread reserves its slot (just before the key is in its table) until its eviction is
    /// complete, so it is never below the keys in the tables, and a reading at the capacity is
    /// what makes a newcomer [`Full`](KeyedDenied::Full). With no call running, it is exactly
    /// the keys held.
    pub fn len(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

    /// Protected keys held now: those granted a second time while held, never more than their
    /// share of three quarters of the capacity, and every key that tasks or threads wait on
    /// (see [`acquire_blocking`](Self::acquire_blocking)), beyond that share if it must: a key
    /// with waiters is never evicted. Counted as [`len`](Self::len) counts keys.
    pub fn protected_len(&self) -> usize {
        self.protected_held.load(Ordering::Relaxed)
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Heap bytes the limiter's tables hold now: entries, their tags and the free room of
    /// each shard's tables, the shards and the map of shards (not memory that keys own
    /// themselves, such as a `String`'s).
    pub fn heap_bytes(&self) -> usize {
        let map = core::mem::size_of_val(&*self.shard_map);
        on_shards!(&self.tables, shards => {
            let tables: usize = shards
                .iter()
                .map(|shard| {
                    let entries = shard.read();
                    entries.protected.allocation_size() + entries.fresh.allocation_size()
                })
                .sum();
            core::mem::size_of_val(&**shards) + map + tables
        })
    }

    /// The most keys held at once.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The quota of the first tier: every key's, in a limiter of one quota.
    pub fn quota(&self) -> &Quota {
        &self.first.quota
    }

    /// Whether the limiter's quota is unlimited ([`Quota::unlimited`]): it grants every
    /// request and holds no key. Only a limiter of one quota can be (a tier's quota is finite).
    pub fn is_unlimited(&self) -> bool {
        self.unlimited
    }

    /// The clock the limiter reads.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// The quota of `key`'s bucket and how long until it is full, read together: the first
    /// tier's quota and zero for a key not held, which reads as full. What a refusal's
    /// `RateLimit` headers say of the key.
    pub fn quota_and_until_full(&self, key: &K) -> (Quota, Duration) {
        let now = self.clock.now();
        let held = self.held(key).map(|(tier, word)| {
            let tier = self.solved(tier);
            let ticks = tier.layout.ticks_to_full(word, now);
            (tier.quota, ticks_to_duration_ceil::<C>(ticks))
        });
        held.unwrap_or((self.first.quota, Duration::ZERO))
    }

    /// The tier and the word of `key`'s bucket, read under its shard's read lock, if the
    /// limiter holds it.
    fn held(&self, key: &K) -> Option<(u8, u64)> {
        let hash = self.hasher.hash_one(key);
        let index = self.shard_index(hash);
        on_shards!(&self.tables, shards => {
            let entries = shards[index].read();
            let found = entries.find(hash, key);
            found.map(|entry| (entry.tier(), W::load(entry.word())))
        })
    }

    /// A tier by index; the first for an index past them, which an entry never holds.
    #[inline]
    fn solved(&self, index: u8) -> &Solved {
        self.tiers.get(usize::from(index)).unwrap_or(&self.first)
    }

    /// The tier `entry` follows: the first without a look at the tiers in a limiter of one.
    #[inline]
    fn solved_of<E: Slot>(&self, entry: &E) -> &Solved {
        if E::TIERED {
            self.solved(entry.tier())
        } else {
            &self.first
        }
    }

    #[inline]
    fn take<E: Slot<Word = W>>(&self, entry: &E, now: u64, n: u32) -> Result<(), KeyedDenied> {
        let p = &self.solved_of(entry).layout;
        let cost = p.cost(n)?;
        WordCell::<W>::new(entry.word(), p)
            .try_take_settled(&self.clock, now, cost)
            .map_err(KeyedDenied::from)
    }

    /// Re-anchors a bucket of `tier` full for longer than its longer window.
    fn touch(&self, word: &W::Atomic, tier: &Solved, now: u64) {
        let p = &tier.layout;
        touch_word::<W>(word, p, p.units_at(now), tier.kept_age_units());
    }

    /// The shard of a key of this hash.
    #[inline]
    fn shard_index(&self, hash: u64) -> usize {
        let slice = shard_bits(hash) & (self.shard_map.len() - 1);
        usize::from(self.shard_map[slice])
    }

    /// How many shards the limiter has.
    #[cfg(test)]
    fn shard_count(&self) -> usize {
        on_shards!(&self.tables, shards => shards.len())
    }

    /// Moves `key` into the protected table of its shard, within the share of protected keys.
    #[cold]
    fn promote<E: Slot<Key = K>>(&self, shard: &Shard<E>, hash: u64, key: &K) {
        let mut entries = shard.write();
        let entries = &mut *entries;
        if entries.fresh.find(hash, |e| e.key() == key).is_none() {
            return; // evicted meanwhile
        }
        self.move_to_protected(entries, shard.planned, hash, key, self.max_protected);
    }

    /// Moves `key`'s entry from the fresh table to the protected one of a shard held for
    /// writing (`entries`, planned for `planned` keys), if the count of protected keys has
    /// room under `limit`; otherwise leaves it where it is.
    fn move_to_protected<E: Slot<Key = K>>(
        &self,
        entries: &mut Entries<E>,
        planned: usize,
        hash: u64,
        key: &K,
        limit: usize,
    ) {
        let Some(reserved) = Reserved::new(&self.protected_held, limit) else {
            return;
        };
        // Room first, so that a panicking `Hash` or `Eq` unwinds before the entry moves (and
        // the reservation gives its count back).
        grow(&mut entries.protected, planned, &self.hasher);
        if let Some(entry) = entries.fresh.remove(hash, |e| e.key() == key) {
            insert(&mut entries.protected, hash, entry, planned, &self.hasher);
            reserved.keep();
        }
    }

    #[cold]
    fn insert_and_acquire<E: Slot<Key = K, Word = W>>(
        &self,
        shard: &Shard<E>,
        hash: u64,
        key: &K,
        now: u64,
        n: u32,
    ) -> Result<(), KeyedDenied> {
        let tier = (self.tier_of)(key);
        let Some(solved) = self.tiers.get(usize::from(tier.0)) else {
            return Err(KeyedDenied::UnknownTier(tier));
        };
        let p = &solved.layout;
        let cost = p.cost(n)?;
        for round in [false, true] {
            if round && !self.make_room(now) {
                break;
            }
            if self.held.load(Ordering::Relaxed) >= self.capacity {
                // No slot to reserve: the key is looked for once more (another thread may have
                // added it) under the shared lock, which the newcomers of a flood take together,
                // rather than the write lock each would wait for in turn.
                if let Some(entry) = shard.read().find(hash, key) {
                    return self.take(entry, now, n);
                }
                continue;
            }
            let mut entries = shard.write();
            if let Some(entry) = entries.find(hash, key) {
                // Added by another thread since the read lock was dropped.
                return self.take(entry, now, n);
            }
            let Some(slot) = Reserved::new(&self.held, self.capacity) else {
                continue;
            };
            // A panicking `Clone` or `Hash` (growing the table rehashes its keys) unwinds from
            // here with the table whole: the reservation gives its slot back.
            let entry = E::new(key.clone(), p.unused(), tier.0);
            let word = insert(&mut entries.fresh, hash, entry, shard.planned, &self.hasher).word();
            slot.keep();
            // The new bucket starts full at a reading taken under the lock that made it: `now`
            // was read before the lock, and the key may have been evicted since then, after a
            // grant at a later reading that a bucket anchored at `now` would undo.
            let now = self.clock.now();
            let result = WordCell::<W>::new(word, p)
                .try_take::<C>(now, cost)
                .map_err(KeyedDenied::from);
            // The new bucket may be evictable (full, and past its probation window) before the
            // shard's next sweep was due.
            let units = units_to_evictable(p, W::load(word), p.units_at(now), solved.guard(false));
            let evictable = now.wrapping_add(p.ticks_until(now, units));
            lower(&shard.due_ticks, now, evictable);
            lower(&self.next_room_ticks, now, evictable);
            return result;
        }
        let full = KeyedDenied::Full {
            capacity: self.capacity,
        };
        match self.when_full {
            WhenFull::Refuse => Err(full),
            WhenFull::Admit => {
                let p = &self.first.layout;
                p.cost(n)
                    .and_then(|cost| {
                        WordCell::<W>::new(&self.overflow, p).try_take_settled(
                            &self.clock,
                            now,
                            cost,
                        )
                    })
                    .map_err(|_| full)
            }
        }
    }

    /// A round of sweeps over the shards that are due, if one is due and none is running;
    /// whether it evicted anything.
    fn make_room(&self, now: u64) -> bool {
        if !reached(now, self.next_room_ticks.load(Ordering::Relaxed)) {
            return false;
        }
        // Acquire / Release: one round at a time, each seeing the last one's hints.
        if self.sweeping.swap(true, Ordering::Acquire) {
            return false;
        }
        // Ends the round even if a key's `Hash` panics in the middle of it.
        let _round = RoundGuard(&self.sweeping);
        let mut next = now.wrapping_add(NEVER_TICKS);
        let mut evicted = 0;
        on_shards!(&self.tables, shards => {
            for (shard, pins) in shards.iter().zip(self.pins.iter()) {
                if reached(now, shard.due_ticks.load(Ordering::Relaxed)) {
                    evicted += self.sweep_shard(shard, pins, now);
                }
                next = earliest(now, next, shard.due_ticks.load(Ordering::Relaxed));
            }
        });
        self.next_room_ticks.store(next, Ordering::Relaxed);
        evicted > 0
    }

    /// Evicts what may go from one shard, re-anchors what stays, records when a sixteenth of
    /// it will be evictable, and shrinks its tables if eviction left them mostly empty. Returns how
    /// many were evicted. A key with waiters (in `pins`) stays, whatever its bucket holds; it
    /// is not counted in when the shard is due again: its last waiter lowers that hint.
    fn sweep_shard<E: Slot<Key = K, Word = W>>(
        &self,
        shard: &Shard<E>,
        pins: &wait::Pins<K>,
        now: u64,
    ) -> usize {
        let mut entries = shard.write();
        let pinned = pins.if_any();
        let mut to_evictable_ticks = Vec::new();
        let mut keep = |entry: &mut E, protected: bool| {
            let tier = self.solved_of(entry);
            let p = &tier.layout;
            let now_units = p.units_at(now);
            let word = W::load(entry.word());
            let units = units_to_evictable(p, word, now_units, tier.guard(protected));
            if units == 0 {
                if wait::pinned(&pinned, entry.key()) {
                    touch_word::<W>(entry.word(), p, now_units, tier.kept_age_units());
                    return true;
                }
                return false;
            }
            touch_word::<W>(entry.word(), p, now_units, tier.kept_age_units());
            to_evictable_ticks.push(p.ticks_until(now, units));
            true
        };
        // Each table's evictions are counted as soon as they are made: a panicking `Hash` in
        // the second unwinds with the first's given back (and evicts nothing from the second).
        let before = entries.fresh.len();
        retain(&mut entries.fresh, |entry| keep(entry, false), &self.hasher);
        let fresh = before - entries.fresh.len();
        self.held.fetch_sub(fresh, Ordering::Relaxed);
        let before = entries.protected.len();
        retain(
            &mut entries.protected,
            |entry| keep(entry, true),
            &self.hasher,
        );
        let unprotected = before - entries.protected.len();
        self.protected_held
            .fetch_sub(unprotected, Ordering::Relaxed);
        self.held.fetch_sub(unprotected, Ordering::Relaxed);
        let evicted = fresh + unprotected;
        shrink(&mut entries.protected, &self.hasher);
        shrink(&mut entries.fresh, &self.hasher);
        // Not again until a sixteenth of what is left may go: a flood against a full limiter
        // then costs a scan per sixteenth of a shard freed, not a scan per new key.
        let batch = (to_evictable_ticks.len() / 16).max(1);
        let due = if to_evictable_ticks.is_empty() {
            now.wrapping_add(NEVER_TICKS)
        } else {
            let (_, ticks, _) = to_evictable_ticks.select_nth_unstable(batch - 1);
            now.wrapping_add(*ticks)
        };
        shard.due_ticks.store(due, Ordering::Relaxed);
        evicted
    }
}

/// Marks the round over when dropped.
struct RoundGuard<'a>(&'a AtomicBool);

impl Drop for RoundGuard<'_> {
    fn drop(&mut self) {
        // Release: the next round sees this one's hints.
        self.0.store(false, Ordering::Release);
    }
}

/// One counted on a count of keys, given back when dropped unless [`keep`](Self::keep) says
/// the key is in its table: a panic between the two (in a key's `Clone`, `Hash` or `Eq`)
/// leaks no count.
struct Reserved<'a>(&'a AtomicUsize);

impl<'a> Reserved<'a> {
    /// Adds one to `count` if it is below `max`.
    fn new(count: &'a AtomicUsize, max: usize) -> Option<Self> {
        count
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()
            .map(|_| Reserved(count))
    }

    /// The key is in its table: the count stays.
    fn keep(self) {
        core::mem::forget(self);
    }
}

impl Drop for Reserved<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Moves `hint` to `at` if that is earlier, as seen from `now` on a clock that may wrap.
fn lower(hint: &AtomicU64, now: u64, at: u64) {
    let _ = hint.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |current| {
        (earliest(now, current, at) != current).then_some(at)
    });
}

/// The earlier of two instants, as seen from `now` on a clock that may wrap.
fn earliest(now: u64, a: u64, b: u64) -> u64 {
    if (a.wrapping_sub(now) as i64) <= (b.wrapping_sub(now) as i64) {
        a
    } else {
        b
    }
}

/// Whether the clock has reached `at`, on a clock that may wrap.
fn reached(now: u64, at: u64) -> bool {
    now.wrapping_sub(at) as i64 >= 0
}

impl<K, C, W: Word, S> core::fmt::Debug for KeyedLimiter<K, C, W, S> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let (shards, tiered) = match &self.tables {
            Tables::OneTier(shards) => (shards.len(), false),
            Tables::Tiered(shards) => (shards.len(), true),
        };
        f.debug_struct("KeyedLimiter")
            .field("quota", &self.first.quota)
            .field("tiers", &self.tiers.len())
            .field("capacity", &self.capacity)
            .field("shards", &shards)
            .field("tier_in_entries", &tiered)
            .field("len", &self.held.load(Ordering::Relaxed))
            .field("when_full", &self.when_full)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ManualClock, Rate};

    /// The cap is one count across shards: a hot shard takes every slot while the others are
    /// empty, and then a key on an empty shard is refused all the same.
    #[test]
    fn one_hot_shard_takes_the_whole_capacity_and_no_more() {
        let clock = ManualClock::new();
        let quota = Quota::new(Rate::per_second(1)).burst(1);
        let limiter = KeyedLimiter::<u64, _>::builder(quota, &clock)
            .capacity(16)
            .shards(8)
            .build()
            .unwrap();
        assert_eq!(limiter.shard_count(), 8);
        let shard_of = |key: &u64| limiter.shard_index(limiter.hasher.hash_one(key)) == 0;
        let hot: Vec<u64> = (0..).filter(|key| shard_of(key)).take(17).collect();
        let cold = (0..).find(|key| !shard_of(key)).unwrap();
        // An even share would be two keys a shard; the hot shard takes all sixteen.
        for key in &hot[..16] {
            assert_eq!(limiter.try_acquire(key, 1), Ok(()), "hot key {key}");
        }
        assert_eq!(limiter.len(), 16);
        let full = Err(KeyedDenied::Full { capacity: 16 });
        assert_eq!(limiter.try_acquire(&hot[16], 1), full);
        assert_eq!(limiter.try_acquire(&cold, 1), full, "the cap is global");
        // Once the hot shard's buckets have been full for the probation window, the round of
        // sweeps the next newcomer starts frees them for a key on any shard.
        clock.advance(Duration::from_secs(2));
        assert_eq!(limiter.try_acquire(&cold, 1), Ok(()));
        assert_eq!(limiter.len(), 1);
    }

    /// A limiter of one tier keeps no tier in its entries; one of several does.
    #[test]
    fn the_entry_has_a_tier_byte_only_with_several_tiers() {
        let clock = ManualClock::new();
        let quota = Quota::new(Rate::per_second(1));
        let one = KeyedLimiter::<u64, _>::builder(quota, &clock)
            .capacity(4)
            .build()
            .unwrap();
        assert!(matches!(one.tables, Tables::OneTier(_)));
        let two = KeyedLimiter::<u64, _>::builder(quota, &clock)
            .capacity(4)
            .tiers([quota], |_| Tier(1))
            .build()
            .unwrap();
        assert!(matches!(two.tables, Tables::Tiered(_)));
        assert_eq!(two.try_acquire(&1, 1), Ok(()));
        assert_eq!(two.tier(&1), Some(Tier(1)));
    }
}

//! [`KeyedLimiter`]: a sharded, capped per-key limiter for servers.

use core::hash::{BuildHasher, Hash};
use std::boxed::Box;
use std::collections::hash_map::RandomState;
use std::sync::{PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::vec::Vec;

use hashbrown::HashTable;

use super::{is_full, KeyedDenied, WhenFull};
use crate::bucket::WordCell;
use crate::clock::Clock;
use crate::params::Params;
use crate::word::{DefaultWord, Word};
use crate::{ConfigError, Quota};

/// A concurrent per-key limiter for servers: one bucket per client, address or API key, all on
/// one quota and one clock, in at most `capacity` entries.
///
/// Keys are spread over shards by hash, each a `RwLock` around a hash table of `(key, word)`.
/// Checking a key that is already there takes its shard's lock *for reading* and updates the
/// bucket's word by compare-exchange: no global lock, no write lock, and threads on the same key
/// or shard do not wait for each other. Only adding a key, and eviction, take a shard's write
/// lock.
///
/// Memory is bounded under a flood of new keys: each shard holds at most its share of
/// `capacity`. A new key that finds its shard at its share first evicts the shard's full
/// buckets (a full bucket is the same as an absent one, so eviction changes no decision). Each
/// such sweep records when a sixteenth of the buckets it kept will be full, and the shard is not
/// swept for new keys again before then: a flood costs one hash lookup per refused key and one
/// scan per sixteenth of a shard freed, never a scan per key. If the shard is still at its
/// share, the key gets what [`WhenFull`] says — so under a flood a new key may be refused while
/// a few buckets (under a sixteenth of its shard) have filled since the last sweep.
/// [`sweep`](Self::sweep) evicts every full bucket at once, for a timer that keeps memory low
/// between floods.
///
/// ```
/// use core::time::Duration;
/// use tollgate::{KeyedDenied, KeyedLimiter, ManualClock, Quota, Rate, WhenFull};
///
/// let clock = ManualClock::new();
/// let per_client = KeyedLimiter::new(Quota::new(Rate::per_second(2)), &clock, 10_000, WhenFull::Refuse)?;
///
/// assert!(per_client.try_acquire(&"alice", 2).is_ok());
/// assert_eq!(per_client.try_acquire(&"alice", 1).unwrap_err().retry_after(), Some(Duration::from_millis(500)));
/// assert!(per_client.try_acquire(&"bob", 1).is_ok());
/// assert_eq!(per_client.len(), 2);
///
/// clock.advance(Duration::from_secs(1)); // both buckets are full again
/// assert_eq!(per_client.sweep(), 2);
/// assert!(per_client.is_empty());
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
pub struct KeyedLimiter<K, C, W: Word = DefaultWord> {
    shards: Box<[Shard<K, W>]>,
    hasher: RandomState,
    params: Params,
    quota: Quota,
    clock: C,
    capacity: usize,
    when_full: WhenFull,
}

/// One shard, on its own cache lines so that its lock does not share them with a neighbour's.
#[repr(align(128))]
struct Shard<K, W: Word> {
    inner: RwLock<Entries<K, W>>,
    /// The most keys this shard holds: its share of the capacity.
    share: usize,
}

struct Entries<K, W: Word> {
    table: HashTable<(K, W::Atomic)>,
    /// When the last sweep expects a sixteenth of the buckets it left to be full: the next
    /// amortized sweep waits for it. `None`: now.
    next_full_ticks: Option<u64>,
}

impl<K: Hash + Eq + Clone, C: Clock> KeyedLimiter<K, C> {
    /// An empty limiter on the [`DefaultWord`] holding at most `capacity` keys.
    ///
    /// The capacity is split evenly over shards (a power of two, about four per CPU, at most
    /// `capacity`); a key's shard is chosen by its hash, and a shard at its share treats its
    /// next new key as the table would at the capacity.
    pub fn new(
        quota: Quota,
        clock: C,
        capacity: usize,
        when_full: WhenFull,
    ) -> Result<Self, ConfigError> {
        Self::new_with_word(quota, clock, capacity, when_full)
    }

    /// Like [`new`](Self::new), with about `shards` shards (rounded down to a power of two, at
    /// least one, at most `capacity`).
    pub fn with_shards(
        quota: Quota,
        clock: C,
        capacity: usize,
        when_full: WhenFull,
        shards: usize,
    ) -> Result<Self, ConfigError> {
        Self::build(quota, clock, capacity, when_full, shards)
    }
}

impl<K: Hash + Eq + Clone, C: Clock, W: Word> KeyedLimiter<K, C, W> {
    /// Like [`new`](KeyedLimiter::new), on the word `W`: `u32` halves the memory of a key's
    /// state, for an idle horizon of an hour or so (see [`Word`]).
    pub fn new_with_word(
        quota: Quota,
        clock: C,
        capacity: usize,
        when_full: WhenFull,
    ) -> Result<Self, ConfigError> {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        Self::build(quota, clock, capacity, when_full, cpus.saturating_mul(4))
    }

    fn build(
        quota: Quota,
        clock: C,
        capacity: usize,
        when_full: WhenFull,
        shards: usize,
    ) -> Result<Self, ConfigError> {
        if capacity == 0 {
            return Err(ConfigError::ZeroCapacity);
        }
        let params = Params::solve(&quota, C::TICKS_PER_SECOND, W::BITS)?;
        // The largest power of two at most both `shards` and `capacity`.
        let count = 1usize << shards.clamp(1, capacity).ilog2();
        let shards = (0..count)
            .map(|i| Shard {
                inner: RwLock::new(Entries {
                    table: HashTable::new(),
                    next_full_ticks: None,
                }),
                share: capacity / count + usize::from(i < capacity % count),
            })
            .collect::<Vec<_>>()
            .into_boxed_slice();
        Ok(Self {
            shards,
            hasher: RandomState::new(),
            params,
            quota,
            clock,
            capacity,
            when_full,
        })
    }

    /// Takes `n` tokens from `key`'s bucket now, or says why not.
    ///
    /// Never waits. `n = 0` always succeeds and adds no key; `n` above the burst is
    /// [`Denied::ExceedsCapacity`](crate::Denied::ExceedsCapacity) at once. A denial takes
    /// nothing.
    #[inline]
    pub fn try_acquire(&self, key: &K, n: u32) -> Result<(), KeyedDenied> {
        if n == 0 {
            return Ok(());
        }
        let p = &self.params;
        let cost = p.cost(n)?;
        let hash = self.hasher.hash_one(key);
        let shard = self.shard(hash);
        let now = self.clock.now();
        {
            let entries = read(shard);
            if let Some((_, word)) = entries.table.find(hash, |(k, _)| k == key) {
                return WordCell::<W>::new(word, p)
                    .try_take::<C>(now, cost)
                    .map_err(KeyedDenied::from);
            }
        }
        self.insert_and_acquire(shard, hash, key, now, cost)
    }

    /// Whole tokens in `key`'s bucket now: the start fill for a key not in the limiter.
    pub fn available(&self, key: &K) -> u64 {
        let p = &self.params;
        let hash = self.hasher.hash_one(key);
        let entries = read(self.shard(hash));
        match entries.table.find(hash, |(k, _)| k == key) {
            Some((_, word)) => match W::load(word) {
                word if word == p.unused => self.quota.start_fill(),
                word => p.tokens(word, p.units_at(self.clock.now())),
            },
            None => self.quota.start_fill(),
        }
    }

    /// Evicts every full bucket now; returns how many. Changes no decision.
    ///
    /// Takes each shard's write lock in turn, for one pass over its keys. Call it from a timer
    /// to give memory back between floods; the limiter stays within its capacity without it.
    pub fn sweep(&self) -> usize {
        let now = self.clock.now();
        self.shards
            .iter()
            .map(|shard| sweep(&mut write(shard), &self.params, &self.hasher, now))
            .sum()
    }

    /// Keys held now.
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|shard| read(shard).table.len())
            .sum()
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Heap bytes the limiter's tables hold now: entries, their control bytes and the free
    /// room of each shard's table (not memory that keys own themselves, such as a `String`'s).
    pub fn heap_bytes(&self) -> usize {
        let shards = self.shards.len() * core::mem::size_of::<Shard<K, W>>();
        let tables: usize = self
            .shards
            .iter()
            .map(|shard| read(shard).table.allocation_size())
            .sum();
        shards + tables
    }

    /// The most keys held at once.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The quota every key's bucket follows.
    pub fn quota(&self) -> &Quota {
        &self.quota
    }

    /// The clock the limiter reads.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// Ticks until `key`'s bucket is full: 0 for a key not held, which reads as full.
    #[cfg(feature = "tower")]
    pub(crate) fn ticks_to_full(&self, key: &K) -> u64 {
        let p = &self.params;
        let hash = self.hasher.hash_one(key);
        let entries = read(self.shard(hash));
        match entries.table.find(hash, |(k, _)| k == key) {
            Some((_, word)) => p.ticks_to_full(W::load(word), self.clock.now()),
            None => 0,
        }
    }

    /// The parameters every key's bucket shares.
    #[cfg(feature = "tower")]
    pub(crate) fn params(&self) -> &Params {
        &self.params
    }

    #[inline]
    fn shard(&self, hash: u64) -> &Shard<K, W> {
        // Bits the shard's own table does not use: it takes the low bits for the bucket and
        // the top seven for its tags.
        let index = (hash >> 40) as usize & (self.shards.len() - 1);
        &self.shards[index]
    }

    #[cold]
    fn insert_and_acquire(
        &self,
        shard: &Shard<K, W>,
        hash: u64,
        key: &K,
        now: u64,
        cost: u64,
    ) -> Result<(), KeyedDenied> {
        let p = &self.params;
        let mut entries = write(shard);
        if let Some((_, word)) = entries.table.find(hash, |(k, _)| k == key) {
            // Added by another thread since the read lock was dropped.
            return WordCell::<W>::new(word, p)
                .try_take::<C>(now, cost)
                .map_err(KeyedDenied::from);
        }
        if entries.table.len() >= shard.share {
            let sweep_due = entries.next_full_ticks.map_or(true, |at| reached(now, at));
            if sweep_due {
                sweep(&mut entries, p, &self.hasher, now);
            }
            if entries.table.len() >= shard.share {
                return self.when_full.outcome(self.capacity);
            }
        }
        let hasher = &self.hasher;
        let entry =
            entries
                .table
                .insert_unique(hash, (key.clone(), W::cell(p.unused)), |(k, _)| {
                    hasher.hash_one(k)
                });
        let word = &entry.get().1;
        let result = WordCell::<W>::new(word, p).try_take::<C>(now, cost);
        result.map_err(KeyedDenied::from)
    }
}

/// Evicts the full buckets of one shard under its write lock, records when a sixteenth of the
/// others will be full, and gives memory back after a flood. Returns how many were evicted.
fn sweep<K, W: Word>(
    entries: &mut Entries<K, W>,
    p: &Params,
    hasher: &RandomState,
    now: u64,
) -> usize
where
    K: Hash,
{
    let now_units = p.units_at(now);
    let before = entries.table.len();
    let mut to_full_ticks = Vec::new();
    entries.table.retain(|(_, word)| {
        let word = W::load(word);
        if is_full(p, word, now_units) {
            return false;
        }
        to_full_ticks.push(p.ticks_to_full(word, now));
        true
    });
    // Not again until a sixteenth of what is left is full: a flood against a shard at its share
    // then costs a scan per sixteenth of the share freed, not a scan per new key.
    let batch = (to_full_ticks.len() / 16).max(1);
    entries.next_full_ticks = (!to_full_ticks.is_empty()).then(|| {
        let (_, ticks, _) = to_full_ticks.select_nth_unstable(batch - 1);
        now.wrapping_add(*ticks)
    });
    let len = entries.table.len();
    if entries.table.capacity() > 4 * len.max(16) {
        entries.table.shrink_to_fit(|(k, _)| hasher.hash_one(k));
    }
    before - len
}

/// Whether the clock has reached `at`, on a clock that may wrap.
fn reached(now: u64, at: u64) -> bool {
    now.wrapping_sub(at) as i64 >= 0
}

/// A shard's read lock. A panic elsewhere cannot leave a bucket's word half-written (it is one
/// atomic), so a poisoned lock is used as it is.
fn read<K, W: Word>(shard: &Shard<K, W>) -> RwLockReadGuard<'_, Entries<K, W>> {
    shard.inner.read().unwrap_or_else(PoisonError::into_inner)
}

/// A shard's write lock; poisoning is ignored as for [`read`].
fn write<K, W: Word>(shard: &Shard<K, W>) -> RwLockWriteGuard<'_, Entries<K, W>> {
    shard.inner.write().unwrap_or_else(PoisonError::into_inner)
}

impl<K, C, W: Word> core::fmt::Debug for KeyedLimiter<K, C, W> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("KeyedLimiter")
            .field("quota", &self.quota)
            .field("capacity", &self.capacity)
            .field("shards", &self.shards.len())
            .field("when_full", &self.when_full)
            .finish_non_exhaustive()
    }
}

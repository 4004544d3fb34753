//! [`KeyedLimiter`]: a sharded, capped per-key limiter for servers.

use core::hash::{BuildHasher, Hash};
use core::time::Duration;
use std::boxed::Box;
use std::collections::hash_map::RandomState;
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::{PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::vec::Vec;

use hashbrown::HashTable;
// Not `crate::sync`: these are counters and hints beside the buckets, never a bucket's state,
// and a host without native 64-bit atomics gets portable-atomic's lock for them.
use portable_atomic::AtomicU64;

use super::{
    protection_units, ticks_to_one_token, touch_word, units_to_evictable, KeyedConfigError,
    KeyedDenied, WhenFull, DEFAULT_PROTECTION,
};
use crate::clock::{duration_to_ticks_floor, ticks_to_duration_ceil, Clock};
use crate::engine::cell::WordCell;
use crate::engine::layout::Params;
use crate::engine::sync::Ordering;
use crate::engine::word::{DefaultWord, Word};
use crate::Quota;

/// A concurrent per-key limiter for servers: one bucket per client, address or API key, all on
/// one quota and one clock, in at most `capacity` entries.
///
/// Keys are spread over shards by hash, each a `RwLock` around two hash tables of
/// `(key, word)`: the *protected* keys and the others. Checking a key that is already there
/// takes its shard's lock *for reading* and updates the bucket's word by compare-exchange: no
/// global lock, no write lock, and threads on the same key or shard do not wait for each other.
/// Only adding a key, protecting it, and eviction take a shard's write lock.
///
/// The policy (the fixed-capacity `KeyedTable`'s is the same):
///
/// - A key granted a second time while held becomes *protected*, up to three quarters of the
///   capacity. A protected bucket is evicted only once it has been full for the protection
///   window (a minute, or [`with_protection`](Self::with_protection)): a client within its
///   quota keeps its bucket, and its exact rate, through any flood of new keys.
/// - The cap is global: one count of keys across shards, so [`KeyedDenied::Full`] means
///   [`len`](Self::len) is at the capacity, whatever the shard count or the host.
/// - A new key that finds the limiter at its capacity starts a round of sweeps over the
///   shards that are due: each evicts its full unprotected buckets and its protected ones past
///   their window, and records when a sixteenth of what it kept will be evictable; no round
///   starts before the earliest of those. A flood costs one hash lookup per refused key and
///   one scan per sixteenth of a shard freed, never a scan per key. If nothing could be freed
///   the key gets what [`WhenFull`] says, and [`until_room`](Self::until_room) says when the
///   next round is due (the `Retry-After` of a 503).
///
/// [`sweep`](Self::sweep) evicts everything evictable at once and shrinks the tables, for a
/// timer that keeps memory low between floods; on the 32-bit word it also keeps every key
/// readable, as [`touch_all`](Self::touch_all) does.
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
/// # Ok::<(), tollgate::KeyedConfigError>(())
/// ```
pub struct KeyedLimiter<K, C, W: Word = DefaultWord> {
    shards: Box<[Shard<K, W>]>,
    hasher: RandomState,
    params: Params,
    quota: Quota,
    clock: C,
    capacity: usize,
    max_protected: usize,
    when_full: WhenFull,
    /// How long a protected bucket stays once full, in the word's units.
    protection_units: u64,
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
}

/// One shard, on its own cache lines so that its lock does not share them with a neighbour's.
#[repr(align(128))]
struct Shard<K, W: Word> {
    inner: RwLock<Entries<K, W>>,
    /// When a sweep of this shard expects to evict a sixteenth of its keys (ticks); read by
    /// rounds without the lock.
    due_ticks: AtomicU64,
}

struct Entries<K, W: Word> {
    protected: HashTable<(K, W::Atomic)>,
    fresh: HashTable<(K, W::Atomic)>,
}

/// How far ahead "not before anything is due" lies: a quarter of the clock's range, so that
/// comparisons on a wrapping clock stay right.
const NEVER_TICKS: u64 = 1 << 62;

impl<K: Hash + Eq + Clone, C: Clock> KeyedLimiter<K, C> {
    /// An empty limiter on the [`DefaultWord`] holding at most `capacity` keys, protecting
    /// returning keys for a minute.
    ///
    /// Shards: a power of two, about four per CPU, at most `capacity`. The cap does not depend
    /// on them.
    pub fn new(
        quota: Quota,
        clock: C,
        capacity: usize,
        when_full: WhenFull,
    ) -> Result<Self, KeyedConfigError> {
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
    ) -> Result<Self, KeyedConfigError> {
        Self::build(quota, clock, capacity, when_full, shards)
    }
}

impl<K: Hash + Eq + Clone, C: Clock, W: Word> KeyedLimiter<K, C, W> {
    /// Like [`new`](KeyedLimiter::new), on the word `W`: `u32` halves the memory of a key's
    /// state, for a shorter idle horizon (see [`Word`] and [`touch_all`](Self::touch_all)).
    pub fn new_with_word(
        quota: Quota,
        clock: C,
        capacity: usize,
        when_full: WhenFull,
    ) -> Result<Self, KeyedConfigError> {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        Self::build(quota, clock, capacity, when_full, cpus.saturating_mul(4))
    }

    /// Keeps a protected key's bucket for `protection` once it is full (a window longer than
    /// the word can read is shortened to what it can). `Duration::ZERO` turns protection off:
    /// any full bucket may be evicted at once.
    pub fn with_protection(mut self, protection: Duration) -> Self {
        let ticks = duration_to_ticks_floor::<C>(protection);
        self.protection_units = if ticks == 0 {
            0
        } else {
            protection_units(&self.params, ticks)
        };
        self
    }

    fn build(
        quota: Quota,
        clock: C,
        capacity: usize,
        when_full: WhenFull,
        shards: usize,
    ) -> Result<Self, KeyedConfigError> {
        if capacity == 0 {
            return Err(KeyedConfigError::ZeroCapacity);
        }
        let params = Params::solve(&quota, C::TICKS_PER_SECOND, W::BITS)?;
        // The largest power of two at most both `shards` and `capacity`.
        let count = 1usize << shards.clamp(1, capacity).ilog2();
        let now = clock.now();
        let shards = (0..count)
            .map(|_| Shard {
                inner: RwLock::new(Entries {
                    protected: HashTable::new(),
                    fresh: HashTable::new(),
                }),
                due_ticks: AtomicU64::new(now),
            })
            .collect::<Vec<_>>()
            .into_boxed_slice();
        let limiter = Self {
            shards,
            hasher: RandomState::new(),
            params,
            quota,
            clock,
            capacity,
            max_protected: capacity - capacity / 4,
            when_full,
            protection_units: 0,
            held: AtomicUsize::new(0),
            protected_held: AtomicUsize::new(0),
            next_room_ticks: AtomicU64::new(now),
            sweeping: AtomicBool::new(false),
            overflow: W::cell(params.unused),
        };
        Ok(limiter.with_protection(DEFAULT_PROTECTION))
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
            if let Some((_, word)) = entries.protected.find(hash, |(k, _)| k == key) {
                return self.take(word, now, cost);
            }
            if let Some((_, word)) = entries.fresh.find(hash, |(k, _)| k == key) {
                let result = self.take(word, now, cost);
                if result.is_ok()
                    && self.protected_held.load(Ordering::Relaxed) < self.max_protected
                {
                    drop(entries);
                    self.promote(shard, hash, key);
                }
                return result;
            }
        }
        self.insert_and_acquire(shard, hash, key, now, cost)
    }

    /// Whole tokens in `key`'s bucket now: the start fill for a key not in the limiter.
    pub fn available(&self, key: &K) -> u64 {
        let p = &self.params;
        match self.word_of(key) {
            Some(word) if word != p.unused => p.tokens(word, p.units_at(self.clock.now())),
            _ => self.quota.start_fill(),
        }
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
                &self.params,
                W::load(&self.overflow),
                now,
            ));
        }
        ticks_to_duration_ceil::<C>(ticks)
    }

    /// Evicts every full bucket that is not protected, and every protected one full for longer
    /// than the protection window; returns how many. Changes no decision for them.
    ///
    /// Takes each shard's write lock in turn, for one pass over its keys, shrinks its tables
    /// when eviction left them mostly empty, and re-anchors the buckets it keeps as
    /// [`touch_all`](Self::touch_all) does. Call it from a timer to give memory back between
    /// floods; the limiter stays within its capacity without it.
    pub fn sweep(&self) -> usize {
        let now = self.clock.now();
        let mut next = now.wrapping_add(NEVER_TICKS);
        let mut evicted = 0;
        for shard in self.shards.iter() {
            evicted += self.sweep_shard(shard, now);
            next = earliest(now, next, shard.due_ticks.load(Ordering::Relaxed));
        }
        self.next_room_ticks.store(next, Ordering::Relaxed);
        evicted
    }

    /// Keeps every held bucket readable for another [`idle_horizon`](Self::idle_horizon):
    /// re-anchors each bucket full for longer than the protection window, keeping how long it
    /// has been full up to the window. Changes no decision and evicts nothing; takes each
    /// shard's lock for reading only.
    ///
    /// Only the 32-bit word needs it (or [`sweep`](Self::sweep), which does it too): call one
    /// of them at least once per idle horizon, and no quiet key reads as in debt, and no slot is
    /// stuck unevictable.
    pub fn touch_all(&self) {
        let p = &self.params;
        let now_units = p.units_at(self.clock.now());
        for shard in self.shards.iter() {
            let entries = read(shard);
            for (_, word) in entries.protected.iter().chain(entries.fresh.iter()) {
                touch_word::<W>(word, p, now_units, self.protection_units);
            }
        }
        touch_word::<W>(&self.overflow, p, now_units, self.protection_units);
    }

    /// How long a held bucket may go untouched and still read correctly; see
    /// [`TokenBucket::idle_horizon`](crate::TokenBucket::idle_horizon) and
    /// [`touch_all`](Self::touch_all).
    pub fn idle_horizon(&self) -> Duration {
        ticks_to_duration_ceil::<C>(self.params.horizon_ticks)
    }

    /// Keys held now.
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|shard| {
                let entries = read(shard);
                entries.protected.len() + entries.fresh.len()
            })
            .sum()
    }

    /// Protected keys held now: those granted a second time while held.
    pub fn protected_len(&self) -> usize {
        self.shards
            .iter()
            .map(|shard| read(shard).protected.len())
            .sum()
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Heap bytes the limiter's tables hold now: entries, their control bytes and the free
    /// room of each shard's tables (not memory that keys own themselves, such as a `String`'s).
    pub fn heap_bytes(&self) -> usize {
        let shards = self.shards.len() * core::mem::size_of::<Shard<K, W>>();
        let tables: usize = self
            .shards
            .iter()
            .map(|shard| {
                let entries = read(shard);
                entries.protected.allocation_size() + entries.fresh.allocation_size()
            })
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
        match self.word_of(key) {
            Some(word) => self.params.ticks_to_full(word, self.clock.now()),
            None => 0,
        }
    }

    /// The parameters every key's bucket shares.
    #[cfg(feature = "tower")]
    pub(crate) fn params(&self) -> &Params {
        &self.params
    }

    fn word_of(&self, key: &K) -> Option<u64> {
        let hash = self.hasher.hash_one(key);
        let entries = read(self.shard(hash));
        let found = entries
            .protected
            .find(hash, |(k, _)| k == key)
            .or_else(|| entries.fresh.find(hash, |(k, _)| k == key));
        found.map(|(_, word)| W::load(word))
    }

    #[inline]
    fn take(&self, word: &W::Atomic, now: u64, cost: u64) -> Result<(), KeyedDenied> {
        WordCell::<W>::new(word, &self.params)
            .try_take::<C>(now, cost)
            .map_err(KeyedDenied::from)
    }

    #[inline]
    fn shard(&self, hash: u64) -> &Shard<K, W> {
        // Bits the shard's own tables do not use: they take the low bits for the bucket and
        // the top seven for their tags.
        let index = (hash >> 40) as usize & (self.shards.len() - 1);
        &self.shards[index]
    }

    /// Moves `key` into the protected table of its shard, within the share of protected keys.
    #[cold]
    fn promote(&self, shard: &Shard<K, W>, hash: u64, key: &K) {
        let mut entries = write(shard);
        let Ok(entry) = entries.fresh.find_entry(hash, |(k, _)| k == key) else {
            return; // evicted meanwhile
        };
        if !reserve(&self.protected_held, self.max_protected) {
            return;
        }
        let (entry, _) = entry.remove();
        let hasher = &self.hasher;
        before_insert(&mut entries.protected, hasher);
        entries
            .protected
            .insert_unique(hash, entry, |(k, _)| hasher.hash_one(k));
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
        for round in [false, true] {
            if round && !self.make_room(now) {
                break;
            }
            let mut entries = write(shard);
            let found = entries
                .protected
                .find(hash, |(k, _)| k == key)
                .or_else(|| entries.fresh.find(hash, |(k, _)| k == key));
            if let Some((_, word)) = found {
                // Added by another thread since the read lock was dropped.
                return self.take(word, now, cost);
            }
            if !reserve(&self.held, self.capacity) {
                continue;
            }
            let hasher = &self.hasher;
            before_insert(&mut entries.fresh, hasher);
            let entry =
                entries
                    .fresh
                    .insert_unique(hash, (key.clone(), W::cell(p.unused)), |(k, _)| {
                        hasher.hash_one(k)
                    });
            let word = &entry.get().1;
            let result = self.take(word, now, cost);
            // The new bucket may be evictable before the shard's next sweep was due.
            let evictable = now.wrapping_add(p.ticks_to_full(W::load(word), now));
            lower(&shard.due_ticks, now, evictable);
            lower(&self.next_room_ticks, now, evictable);
            return result;
        }
        match self.when_full {
            WhenFull::Refuse => Err(KeyedDenied::Full {
                capacity: self.capacity,
            }),
            WhenFull::Admit => WordCell::<W>::new(&self.overflow, p)
                .try_take::<C>(now, cost)
                .map_err(|_| KeyedDenied::Full {
                    capacity: self.capacity,
                }),
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
        for shard in self.shards.iter() {
            if reached(now, shard.due_ticks.load(Ordering::Relaxed)) {
                evicted += self.sweep_shard(shard, now);
            }
            next = earliest(now, next, shard.due_ticks.load(Ordering::Relaxed));
        }
        self.next_room_ticks.store(next, Ordering::Relaxed);
        evicted > 0
    }

    /// Evicts what may go from one shard, re-anchors what stays, records when a sixteenth of
    /// it will be evictable, and shrinks its tables if eviction left them mostly empty. Returns how
    /// many were evicted.
    fn sweep_shard(&self, shard: &Shard<K, W>, now: u64) -> usize {
        let p = &self.params;
        let now_units = p.units_at(now);
        let mut entries = write(shard);
        let mut to_evictable_ticks = Vec::new();
        let mut keep = |word: &W::Atomic, guard: u64| {
            let units = units_to_evictable(p, W::load(word), now_units, guard);
            if units == 0 {
                return false;
            }
            touch_word::<W>(word, p, now_units, self.protection_units);
            to_evictable_ticks.push(p.ticks_until(now, units));
            true
        };
        let before = (entries.protected.len(), entries.fresh.len());
        entries.fresh.retain(|(_, word)| keep(word, 0));
        entries
            .protected
            .retain(|(_, word)| keep(word, self.protection_units));
        let unprotected = before.0 - entries.protected.len();
        let evicted = unprotected + before.1 - entries.fresh.len();
        self.protected_held
            .fetch_sub(unprotected, Ordering::Relaxed);
        self.held.fetch_sub(evicted, Ordering::Relaxed);
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

/// Adds one to `count` if it is below `max`; whether it did.
fn reserve(count: &AtomicUsize, max: usize) -> bool {
    count
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
            (n < max).then_some(n + 1)
        })
        .is_ok()
}

/// How many entries `table` holds before it must grow or rehash: hashbrown's load limit (7/8 of
/// its buckets), with the bucket count read back from the allocation size (entries, then one
/// control byte each and one group of spare control bytes; the padding between them is less
/// than an entry and a control byte, so rounding down to a power of two recovers it).
fn full_capacity<T>(table: &HashTable<T>) -> usize {
    let bytes = table.allocation_size();
    if bytes == 0 {
        return 0;
    }
    let estimate = bytes.saturating_sub(16) / (core::mem::size_of::<T>() + 1);
    let buckets = 1usize << estimate.max(1).ilog2();
    if buckets < 8 {
        buckets - 1
    } else {
        buckets / 8 * 7
    }
}

/// Makes room for one more entry without doubling a table that is only full of deleted marks:
/// eviction leaves one per removed entry, and hashbrown counts them against its load limit, so a
/// table at a steady number of keys under a flood would otherwise double again and again. When
/// they are a thirty-second of the entries or more, the table is rebuilt at its bucket count
/// without them: at most once per that many insertions, so at most 32 moves per insertion.
fn before_insert<K: Hash, A>(table: &mut HashTable<(K, A)>, hasher: &RandomState) {
    let len = table.len();
    if table.capacity() > len {
        return;
    }
    let full = full_capacity(table);
    if full.saturating_sub(len) >= (len / 32).max(1) {
        rebuild(table, full, hasher);
    }
}

/// Gives memory back once a table is mostly empty: rebuilt at the size its entries need.
fn shrink<K: Hash, A>(table: &mut HashTable<(K, A)>, hasher: &RandomState) {
    let len = table.len();
    if len.saturating_mul(4) < full_capacity(table) {
        rebuild(table, len, hasher);
    }
}

/// Moves every entry into a new table sized for `capacity`, without deleted marks.
fn rebuild<K: Hash, A>(table: &mut HashTable<(K, A)>, capacity: usize, hasher: &RandomState) {
    let mut rebuilt = HashTable::with_capacity(capacity);
    for (key, word) in table.drain() {
        let hash = hasher.hash_one(&key);
        rebuilt.insert_unique(hash, (key, word), |(k, _)| hasher.hash_one(k));
    }
    *table = rebuilt;
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
            .field("len", &self.held.load(Ordering::Relaxed))
            .field("when_full", &self.when_full)
            .finish_non_exhaustive()
    }
}

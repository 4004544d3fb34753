//! A keyed limiter's shards: each a lock around two hash tables of entries ([`SwissTable`]); the
//! entries, with a tier's byte only in a limiter of several tiers; and which shard a hash goes
//! to.

use core::hash::{BuildHasher, Hash};
use std::boxed::Box;
use std::sync::{PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

// Not `crate::sync`: a hint beside the buckets, never a bucket's state.
use portable_atomic::AtomicU64;

use super::swiss::SwissTable;
use crate::engine::word::Word;

/// One key's entry in a shard's table: the key, its bucket's word and the index of the tier it
/// follows. The tier changes only under the shard's write lock, so that no call updates a word
/// laid out by another tier.
pub(super) trait Slot {
    /// The key.
    type Key: Hash + Eq;
    /// The bucket's word.
    type Word: Word;
    /// Whether the entry keeps its tier: `false` in a limiter of one tier, where it is always 0.
    const TIERED: bool;

    fn new(key: Self::Key, word: u64, tier: u8) -> Self;
    fn key(&self) -> &Self::Key;
    fn word(&self) -> &<Self::Word as Word>::Atomic;
    fn tier(&self) -> u8;
    /// Puts `word` and `tier` in the entry (under the write lock).
    fn replace(&mut self, word: u64, tier: u8);
}

/// What an entry keeps of its tier: nothing (`()`) in a limiter of one tier, the tier's index
/// (`u8`) in a limiter of several.
pub(super) trait TierField: Copy {
    /// Whether the entry keeps its tier.
    const TIERED: bool;
    fn of(tier: u8) -> Self;
    fn get(self) -> u8;
}

impl TierField for () {
    const TIERED: bool = false;
    // The only tier there is: `set_tier` checked the index against the tiers.
    fn of(_tier: u8) -> Self {}
    #[inline]
    fn get(self) -> u8 {
        0
    }
}

impl TierField for u8 {
    const TIERED: bool = true;
    fn of(tier: u8) -> Self {
        tier
    }
    #[inline]
    fn get(self) -> u8 {
        self
    }
}

/// One entry: the key, the word and what it keeps of its tier, rounded up to the alignment.
pub(super) struct Entry<K, W: Word, T> {
    key: K,
    word: W::Atomic,
    tier: T,
}

/// The entry of a limiter of one tier: the key and the word, nothing else (16 bytes for a
/// `u64` key on the 64-bit word, 8 on the 32-bit word).
pub(super) type OneTierEntry<K, W> = Entry<K, W, ()>;

/// The entry of a limiter of several tiers: the key, the word and the tier's byte, rounded up
/// to the alignment (24 bytes for a `u64` key on the 64-bit word, 16 on the 32-bit word).
pub(super) type TieredEntry<K, W> = Entry<K, W, u8>;

impl<K: Hash + Eq, W: Word, T: TierField> Slot for Entry<K, W, T> {
    type Key = K;
    type Word = W;
    const TIERED: bool = T::TIERED;

    fn new(key: K, word: u64, tier: u8) -> Self {
        Self {
            key,
            word: W::cell(word),
            tier: T::of(tier),
        }
    }
    #[inline]
    fn key(&self) -> &K {
        &self.key
    }
    #[inline]
    fn word(&self) -> &W::Atomic {
        &self.word
    }
    #[inline]
    fn tier(&self) -> u8 {
        self.tier.get()
    }
    fn replace(&mut self, word: u64, tier: u8) {
        self.word = W::cell(word);
        self.tier = T::of(tier);
    }
}

/// Every shard of a limiter, on the entry its tier count calls for.
pub(super) enum Tables<K, W: Word> {
    OneTier(Box<[Shard<OneTierEntry<K, W>>]>),
    Tiered(Box<[Shard<TieredEntry<K, W>>]>),
}

impl<K, W: Word> Tables<K, W> {
    /// An empty shard for each entry of `planned` (the keys it plans its tables for), of
    /// entries with a tier's byte if `tiered`.
    pub fn new(planned: &[usize], tiered: bool, now: u64) -> Self {
        if tiered {
            Tables::Tiered(planned.iter().map(|&p| Shard::new(p, now)).collect())
        } else {
            Tables::OneTier(planned.iter().map(|&p| Shard::new(p, now)).collect())
        }
    }
}

/// Runs `$body` on the limiter's shards, as whichever entry they hold.
macro_rules! on_shards {
    ($tables:expr, $shards:ident => $body:expr) => {
        match $tables {
            $crate::keyed::map::tables::Tables::OneTier($shards) => $body,
            $crate::keyed::map::tables::Tables::Tiered($shards) => $body,
        }
    };
}
pub(super) use on_shards;

/// One shard, on its own cache lines so that its lock does not share them with a neighbour's.
#[repr(align(128))]
pub(super) struct Shard<E> {
    inner: RwLock<Entries<E>>,
    /// The most keys each of its tables is planned for: no doubling goes past the size that
    /// holds them (see [`planned_keys`]).
    pub planned: usize,
    /// When a sweep of this shard expects to evict a sixteenth of its keys (ticks); read by
    /// rounds without the lock.
    pub due_ticks: AtomicU64,
}

/// A shard's keys: the protected ones and the others.
pub(super) struct Entries<E> {
    pub protected: SwissTable<E>,
    pub fresh: SwissTable<E>,
}

impl<E> Shard<E> {
    fn new(planned: usize, now: u64) -> Self {
        Shard {
            planned,
            inner: RwLock::new(Entries {
                protected: SwissTable::new(),
                fresh: SwissTable::new(),
            }),
            due_ticks: AtomicU64::new(now),
        }
    }

    /// The shard's read lock. A panic elsewhere cannot leave a bucket's word half-written (it
    /// is one atomic), so a poisoned lock is used as it is.
    #[inline]
    pub fn read(&self) -> RwLockReadGuard<'_, Entries<E>> {
        self.inner.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// The shard's write lock; poisoning is ignored as for [`read`](Self::read).
    pub fn write(&self) -> RwLockWriteGuard<'_, Entries<E>> {
        self.inner.write().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<E: Slot> Entries<E> {
    /// `key`'s entry, protected or not.
    #[inline]
    pub fn find(&self, hash: u64, key: &E::Key) -> Option<&E> {
        self.protected
            .find(hash, |e| e.key() == key)
            .or_else(|| self.fresh.find(hash, |e| e.key() == key))
    }
}

/// Which shard each slice of a hash's shard bits goes to: shard `i` of `count` takes a share
/// of the hashes proportional to `2^(i / count)`, so that the shards hold different numbers of
/// keys, spread over one doubling. A table doubles when it is fifteen sixteenths full, so
/// shards of equal size would all be just past doubling (under half full) at the same key
/// counts; spread over a doubling, they double one at a time, and the limiter's tables stay
/// about 0.65 full on average at any key count instead of between 0.47 and 0.94 all together.
///
/// The map has 32 slices per shard (a power of two at least that): shard `i` gets the slices
/// whose middle `x` in `[0, 1)` has `floor(count × log2(1 + x)) = i`, the inverse of the
/// distribution with those weights. Worked out once, at construction.
pub(super) fn shard_map(count: usize) -> Box<[u16]> {
    let slices = (count * 32).next_power_of_two();
    (0..slices)
        .map(|slice| {
            let x = (slice as f64 + 0.5) / slices as f64;
            let shard = (count as f64 * (1.0 + x).log2()) as usize;
            shard.min(count - 1) as u16
        })
        .collect()
}

/// How many keys each shard's tables are planned for, from its share of the hashes in `map`:
/// the share of `capacity` it holds on average when the limiter is full, and four standard
/// deviations more (the keys a shard holds vary as a binomial draw), so that a table grows to
/// that size rather than doubling past it, and a full limiter's tables are nearly full (about
/// fifteen sixteenths of 0.97 at 100 000 keys over eight shards). A shard that draws more
/// keys than that grows on by doubling.
pub(super) fn planned_keys(map: &[u16], count: usize, capacity: usize) -> Box<[usize]> {
    let mut slices = std::vec![0usize; count];
    for &shard in map {
        slices[usize::from(shard)] += 1;
    }
    slices
        .iter()
        .map(|&share| {
            let p = share as f64 / map.len() as f64;
            let mean = capacity as f64 * p;
            let spread = (mean * (1.0 - p)).sqrt();
            (mean + 4.0 * spread).ceil() as usize
        })
        .collect()
}

/// The bits of a hash that pick a slice of the shard map: bits the shard's own tables do not
/// use (they take the low bits for the home group and the top seven for their tags).
#[inline]
pub(super) fn shard_bits(hash: u64) -> usize {
    (hash >> 40) as usize
}

/// Inserts a new entry, which no table of the shard holds, into `table`, planned for `planned`
/// keys; returns it.
pub(super) fn insert<'a, E: Slot>(
    table: &'a mut SwissTable<E>,
    hash: u64,
    entry: E,
    planned: usize,
    hasher: &impl BuildHasher,
) -> &'a E {
    table.insert(hash, entry, planned, |e| hasher.hash_one(e.key()))
}

/// Grows `table`, planned for `planned` keys, if the next insertion would, so that it rehashes
/// nothing.
pub(super) fn grow<E: Slot>(table: &mut SwissTable<E>, planned: usize, hasher: &impl BuildHasher) {
    table.reserve_one(planned, &|e: &E| hasher.hash_one(e.key()));
}

/// Gives memory back once `table` is mostly empty: rebuilt at the size its entries need.
pub(super) fn shrink<E: Slot>(table: &mut SwissTable<E>, hasher: &impl BuildHasher) {
    table.shrink(|e| hasher.hash_one(e.key()));
}

/// Keeps the entries of `table` for which `keep` says `true`.
pub(super) fn retain<E: Slot>(
    table: &mut SwissTable<E>,
    keep: impl FnMut(&mut E) -> bool,
    hasher: &impl BuildHasher,
) {
    table.retain(keep, |e| hasher.hash_one(e.key()));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bytes an entry costs, as the limiter's docs state them.
    #[test]
    fn an_entry_has_the_tier_byte_only_in_a_limiter_of_several_tiers() {
        use core::mem::size_of;
        use core::net::IpAddr;
        assert_eq!(size_of::<OneTierEntry<u64, u64>>(), 16);
        assert_eq!(size_of::<OneTierEntry<u64, u32>>(), 16);
        assert_eq!(size_of::<OneTierEntry<u32, u32>>(), 8);
        assert_eq!(size_of::<OneTierEntry<Option<IpAddr>, u64>>(), 32);
        assert_eq!(size_of::<OneTierEntry<Option<IpAddr>, u32>>(), 24);
        assert_eq!(size_of::<TieredEntry<u64, u64>>(), 24);
        assert_eq!(size_of::<TieredEntry<u64, u32>>(), 16);
        assert_eq!(size_of::<TieredEntry<Option<IpAddr>, u64>>(), 32);
        assert_eq!(size_of::<TieredEntry<Option<IpAddr>, u32>>(), 24);
    }

    /// Every shard gets a share, growing by the same factor from one shard to the next.
    #[test]
    fn the_shard_map_spreads_the_shards_over_one_doubling() {
        for count in [1usize, 2, 3, 8, 64, 1024] {
            let map = shard_map(count);
            let mut shares = std::vec![0usize; count];
            for &shard in map.iter() {
                shares[usize::from(shard)] += 1;
            }
            assert!(shares.iter().all(|&share| share > 0), "{count}: {shares:?}");
            assert!(
                shares.windows(2).all(|w| w[0] <= w[1] + 1),
                "{count}: {shares:?}"
            );
            let (first, last) = (shares[0] as f64, shares[count - 1] as f64);
            assert!(last <= 2.0 * first + 1.0, "{count}: {shares:?}");
        }
    }
}

//! [`KeyedTable`]: `N` buckets in fixed memory, for `no_std` and interrupt handlers.

use core::cell::RefCell;

use critical_section::Mutex;

use super::{is_full, reset, KeyedDenied, WhenFull};
use crate::bucket::WordCell;
use crate::clock::Clock;
use crate::params::Params;
use crate::sync::{AtomicU32, Ordering};
use crate::word::{DefaultWord, Word};
use crate::{ConfigError, Quota};

/// A fixed-capacity table of up to `N` keyed buckets that share one quota and one clock, with
/// no heap: for per-CAN-id or per-sensor limits on a microcontroller.
///
/// Each slot holds a key, one atomic word (the bucket's whole state) and a count of the calls
/// using it. A call takes a short critical section (the `critical-section` crate) only to find
/// its key's slot, or to claim one, and to count itself in; it then updates the word with the
/// same compare-exchange loop as [`TokenBucket`](crate::TokenBucket), outside the critical
/// section, and counts itself out. So calls from threads and interrupt handlers may interleave
/// freely, and the critical section lasts one scan of `N` keys.
///
/// A new key takes a free slot, or else evicts a bucket that is full and that no call is using
/// (a full bucket is the same as an absent one, so eviction changes no decision). When every
/// slot holds a bucket that is not full, the new key gets what [`WhenFull`] says.
///
/// The final firmware provides the critical section (for example `cortex-m`'s
/// `critical-section-single-core` feature); this crate never chooses one.
///
/// ```
/// use core::time::Duration;
/// use tollgate::{KeyedDenied, KeyedTable, ManualClock, Quota, Rate, WhenFull};
///
/// static CLOCK: ManualClock = ManualClock::new();
/// // Two messages a second per CAN id, bursts of two, at most four ids tracked.
/// static PER_ID: KeyedTable<u16, &ManualClock, 4> =
///     KeyedTable::new(Quota::new(Rate::per_second(2)), &CLOCK, WhenFull::Refuse);
///
/// assert!(PER_ID.try_acquire(0x101, 1).is_ok());
/// assert!(PER_ID.try_acquire(0x101, 1).is_ok());
/// assert_eq!(PER_ID.try_acquire(0x101, 1).unwrap_err().retry_after(), Some(Duration::from_millis(500)));
/// assert!(PER_ID.try_acquire(0x202, 1).is_ok()); // another id has its own bucket
/// ```
pub struct KeyedTable<K, C, const N: usize, W: Word = DefaultWord> {
    keys: Mutex<RefCell<[Option<K>; N]>>,
    /// Per slot: calls between finding the slot and finishing their update. A slot in use is
    /// never evicted, so no call updates a word that has changed keys under it.
    users: [AtomicU32; N],
    words: [W::Atomic; N],
    params: Params,
    quota: Quota,
    clock: C,
    when_full: WhenFull,
}

impl<K: Eq, C: Clock, const N: usize, W: Word> KeyedTable<K, C, N, W> {
    /// An empty table, for `const` and `static` use.
    ///
    /// # Panics
    ///
    /// When the quota cannot be used on this clock (see [`ConfigError`]): in a `const` or
    /// `static` that is a compile error. Use [`try_new`](Self::try_new) for quotas known only at
    /// run time.
    pub const fn new(quota: Quota, clock: C, when_full: WhenFull) -> Self {
        let params = match Params::solve(&quota, C::TICKS_PER_SECOND, W::BITS) {
            Ok(params) => params,
            Err(error) => panic!("{}", error.message()),
        };
        Self::with_params(params, quota, clock, when_full)
    }

    /// An empty table, or why the quota cannot be used on this clock.
    pub fn try_new(quota: Quota, clock: C, when_full: WhenFull) -> Result<Self, ConfigError> {
        let params = Params::solve(&quota, C::TICKS_PER_SECOND, W::BITS)?;
        Ok(Self::with_params(params, quota, clock, when_full))
    }

    const fn with_params(params: Params, quota: Quota, clock: C, when_full: WhenFull) -> Self {
        Self {
            keys: Mutex::new(RefCell::new([const { None }; N])),
            users: [const { AtomicU32::new(0) }; N],
            words: [const { W::UNUSED }; N],
            params,
            quota,
            clock,
            when_full,
        }
    }

    /// Takes `n` tokens from `key`'s bucket now, or says why not.
    ///
    /// Never waits. `n = 0` always succeeds and adds no key; `n` above the burst is
    /// [`Denied::ExceedsCapacity`](crate::Denied::ExceedsCapacity) at once. A denial takes
    /// nothing. Safe from interrupt handlers.
    pub fn try_acquire(&self, key: K, n: u32) -> Result<(), KeyedDenied> {
        if n == 0 {
            return Ok(());
        }
        let p = &self.params;
        let cost = p.cost(n)?;
        let now = self.clock.now();
        let Some(slot) = self.enter(key, p.units_at(now)) else {
            return self.when_full.outcome(N);
        };
        let cell = WordCell::<W>::new(&self.words[slot], p);
        let result = cell.try_take::<C>(now, cost);
        // Release: this call's update happens before an evictor's Acquire read of the count.
        self.users[slot].fetch_sub(1, Ordering::Release);
        result.map_err(KeyedDenied::from)
    }

    /// Whole tokens in `key`'s bucket now: the start fill for a key not in the table.
    pub fn available(&self, key: &K) -> u64 {
        let p = &self.params;
        let now_units = p.units_at(self.clock.now());
        critical_section::with(|cs| {
            let keys = self.keys.borrow_ref(cs);
            match keys.iter().position(|k| k.as_ref() == Some(key)) {
                Some(slot) => match W::load(&self.words[slot]) {
                    word if word == p.unused => self.quota.start_fill(),
                    word => p.tokens(word, now_units),
                },
                None => self.quota.start_fill(),
            }
        })
    }

    /// Keys in the table now.
    pub fn len(&self) -> usize {
        critical_section::with(|cs| self.keys.borrow_ref(cs).iter().flatten().count())
    }

    /// Whether the table holds no key.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The most keys the table holds: `N`.
    pub const fn capacity(&self) -> usize {
        N
    }

    /// The quota every key's bucket follows.
    pub fn quota(&self) -> &Quota {
        &self.quota
    }

    /// The clock the table reads.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// Finds `key`'s slot, or claims a free one, or evicts a full one, and counts a user in;
    /// `None` when every slot holds a bucket that is not full or is in use.
    fn enter(&self, key: K, now_units: u64) -> Option<usize> {
        let p = &self.params;
        critical_section::with(|cs| {
            let mut keys = self.keys.borrow_ref_mut(cs);
            let mut free = None;
            for (slot, held) in keys.iter().enumerate() {
                match held {
                    Some(k) if *k == key => {
                        // Relaxed: counts change under the critical section or drop after use;
                        // the critical section orders this against any evictor's read.
                        self.users[slot].fetch_add(1, Ordering::Relaxed);
                        return Some(slot);
                    }
                    None if free.is_none() => free = Some(slot),
                    _ => {}
                }
            }
            let slot = free.or_else(|| {
                (0..N).find(|&slot| {
                    // Acquire: pairs with the Release of the last user, so its word is final.
                    self.users[slot].load(Ordering::Acquire) == 0
                        && is_full(p, W::load(&self.words[slot]), now_units)
                })
            })?;
            // No call uses this slot: its word can be set back to the never-used mark, which
            // the first update turns into a fresh bucket at the quota's start fill.
            reset::<W>(&self.words[slot], p.unused);
            keys[slot] = Some(key);
            self.users[slot].fetch_add(1, Ordering::Relaxed);
            Some(slot)
        })
    }
}

impl<K, C, const N: usize, W: Word> core::fmt::Debug for KeyedTable<K, C, N, W> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("KeyedTable")
            .field("quota", &self.quota)
            .field("capacity", &N)
            .field("when_full", &self.when_full)
            .finish_non_exhaustive()
    }
}

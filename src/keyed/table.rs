//! [`KeyedTable`]: `N` buckets in fixed memory, for `no_std` and interrupt handlers.

use core::cell::RefCell;
use core::time::Duration;

use critical_section::Mutex;

use super::{
    protection_units, reset, touch_word, units_to_evictable, KeyedDenied, WhenFull,
    DEFAULT_PROTECTION,
};
use crate::clock::{ticks_to_duration_ceil, Clock};
use crate::engine::cell::WordCell;
use crate::engine::layout::Params;
use crate::engine::sync::{AtomicU32, Ordering};
use crate::engine::word::{DefaultWord, Word};
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
/// A key granted a second time while held is *protected* (at most `N - N / 4` of them): its
/// slot is kept until its bucket has been full for the protection window (a minute, or what
/// [`with_protection`](Self::with_protection) sets), so a key that keeps within its quota keeps
/// its bucket whatever else comes. A new key takes a free slot, or else evicts, among the slots
/// no call is using, the unprotected bucket full the longest, or else a protected one past its
/// window (a full bucket is the same as an absent one, so eviction changes no decision for it).
/// When there is none, the new key gets what [`WhenFull`] says, and
/// [`until_room`](Self::until_room) says when one will be. A protected key stops being one only
/// when it is evicted: past the share, a returning key stays unprotected.
///
/// On the 32-bit word, call [`touch_all`](Self::touch_all) from a timer at least once per
/// [`idle_horizon`](Self::idle_horizon): every held key then reads right however long it is
/// quiet, and every quiet slot can be evicted.
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
    slots: Mutex<RefCell<Slots<K, N>>>,
    /// Per slot: calls between finding the slot and finishing their update. A slot in use is
    /// never evicted, so no call updates a word that has changed keys under it.
    users: [AtomicU32; N],
    words: [W::Atomic; N],
    /// The bucket that newcomers without a slot share under [`WhenFull::Admit`].
    overflow: W::Atomic,
    params: Params,
    quota: Quota,
    clock: C,
    when_full: WhenFull,
    /// How long a protected bucket stays once full, in the word's units.
    protection_units: u64,
}

/// What the critical section guards: which key each slot holds, and which are protected.
struct Slots<K, const N: usize> {
    keys: [Option<K>; N],
    protected: [bool; N],
    protected_len: usize,
}

impl<K: Eq, C: Clock, const N: usize, W: Word> KeyedTable<K, C, N, W> {
    /// The most protected keys: three quarters of the slots, rounded up.
    const MAX_PROTECTED: usize = N - N / 4;

    /// An empty table, for `const` and `static` use, protecting returning keys for a minute.
    ///
    /// # Panics
    ///
    /// When the quota cannot be used on this clock (see [`ConfigError`]): in a `const` or
    /// `static` that is a compile error. Use [`try_new`](Self::try_new) for quotas known only at
    /// run time.
    pub const fn new(quota: Quota, clock: C, when_full: WhenFull) -> Self {
        Self::with_protection(quota, clock, when_full, DEFAULT_PROTECTION)
    }

    /// Like [`new`](Self::new), keeping a protected key's slot for `protection` once its bucket
    /// is full (a window longer than the word can read is shortened to what it can).
    /// `Duration::ZERO` turns protection off: any full bucket may be evicted at once.
    ///
    /// # Panics
    ///
    /// As [`new`](Self::new).
    pub const fn with_protection(
        quota: Quota,
        clock: C,
        when_full: WhenFull,
        protection: Duration,
    ) -> Self {
        let params = match Params::solve(&quota, C::TICKS_PER_SECOND, W::BITS) {
            Ok(params) => params,
            Err(error) => panic!("{}", error.message()),
        };
        Self::with_params(params, quota, clock, when_full, protection)
    }

    /// An empty table, or why the quota cannot be used on this clock.
    pub fn try_new(quota: Quota, clock: C, when_full: WhenFull) -> Result<Self, ConfigError> {
        let params = Params::solve(&quota, C::TICKS_PER_SECOND, W::BITS)?;
        Ok(Self::with_params(
            params,
            quota,
            clock,
            when_full,
            DEFAULT_PROTECTION,
        ))
    }

    const fn with_params(
        params: Params,
        quota: Quota,
        clock: C,
        when_full: WhenFull,
        protection: Duration,
    ) -> Self {
        let window_ticks = protection.as_secs() as u128 * C::TICKS_PER_SECOND as u128
            + protection.subsec_nanos() as u128 * C::TICKS_PER_SECOND as u128 / 1_000_000_000;
        let window_ticks = if window_ticks > u64::MAX as u128 {
            u64::MAX
        } else {
            window_ticks as u64
        };
        let protection_units = if window_ticks == 0 {
            0
        } else {
            protection_units(&params, window_ticks)
        };
        Self {
            slots: Mutex::new(RefCell::new(Slots {
                keys: [const { None }; N],
                protected: [false; N],
                protected_len: 0,
            })),
            users: [const { AtomicU32::new(0) }; N],
            words: [const { W::UNUSED }; N],
            overflow: W::UNUSED,
            params,
            quota,
            clock,
            when_full,
            protection_units,
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
        let Some((slot, returning)) = self.enter(key, p.units_at(now)) else {
            return match self.when_full {
                WhenFull::Refuse => Err(KeyedDenied::Full { capacity: N }),
                WhenFull::Admit => WordCell::<W>::new(&self.overflow, p)
                    .try_take::<C>(now, cost)
                    .map_err(|_| KeyedDenied::Full { capacity: N }),
            };
        };
        let cell = WordCell::<W>::new(&self.words[slot], p);
        let result = cell.try_take::<C>(now, cost);
        if returning && result.is_ok() {
            // Still counted in: the slot cannot change keys before it is promoted.
            self.promote(slot);
        }
        // Release: this call's update happens before an evictor's Acquire read of the count.
        self.users[slot].fetch_sub(1, Ordering::Release);
        result.map_err(KeyedDenied::from)
    }

    /// Whole tokens in `key`'s bucket now: the start fill for a key not in the table.
    pub fn available(&self, key: &K) -> u64 {
        let p = &self.params;
        let now_units = p.units_at(self.clock.now());
        critical_section::with(|cs| {
            let slots = self.slots.borrow_ref(cs);
            match slots.keys.iter().position(|k| k.as_ref() == Some(key)) {
                Some(slot) => match W::load(&self.words[slot]) {
                    word if word == p.unused => self.quota.start_fill(),
                    word => p.tokens(word, now_units),
                },
                None => self.quota.start_fill(),
            }
        })
    }

    /// How long until a new key would find room: zero while a slot is free or may be evicted
    /// (or, under [`WhenFull::Admit`], while the overflow bucket holds a token); otherwise the
    /// time until the first slot may be evicted or the overflow bucket refills a token, whichever
    /// comes first. Keys that come meanwhile may take that room first.
    pub fn until_room(&self) -> Duration {
        let p = &self.params;
        let now = self.clock.now();
        let now_units = p.units_at(now);
        let slots_units = critical_section::with(|cs| {
            let slots = self.slots.borrow_ref(cs);
            (0..N)
                .map(|slot| match slots.keys[slot] {
                    None => 0,
                    Some(_) => units_to_evictable(
                        p,
                        W::load(&self.words[slot]),
                        now_units,
                        self.guard(slots.protected[slot]),
                    ),
                })
                .min()
                .unwrap_or(0)
        });
        let mut ticks = p.ticks_until(now, slots_units);
        if self.when_full == WhenFull::Admit {
            ticks = ticks.min(super::ticks_to_one_token(p, W::load(&self.overflow), now));
        }
        ticks_to_duration_ceil::<C>(ticks)
    }

    /// Keeps every held bucket readable for another [`idle_horizon`](Self::idle_horizon):
    /// re-anchors each bucket that has been full for longer than the protection window (as
    /// [`TokenBucket::touch`](crate::TokenBucket::touch) does, keeping how long it has been
    /// full up to the window). Changes no decision and evicts nothing. Safe from interrupt
    /// handlers: one short critical section per slot.
    ///
    /// Only the 32-bit word needs it: call it from a timer at least once per idle horizon, and
    /// no key reads as in debt after a long quiet spell, and no slot is stuck unevictable.
    pub fn touch_all(&self) {
        let p = &self.params;
        let now_units = p.units_at(self.clock.now());
        for slot in 0..N {
            // Under the critical section the slot cannot be evicted and reset meanwhile.
            critical_section::with(|cs| {
                if self.slots.borrow_ref(cs).keys[slot].is_some() {
                    touch_word::<W>(&self.words[slot], p, now_units, self.protection_units);
                }
            });
        }
        touch_word::<W>(&self.overflow, p, now_units, self.protection_units);
    }

    /// How long a held bucket may go untouched and still read correctly; see
    /// [`TokenBucket::idle_horizon`](crate::TokenBucket::idle_horizon) and
    /// [`touch_all`](Self::touch_all).
    pub fn idle_horizon(&self) -> Duration {
        ticks_to_duration_ceil::<C>(self.params.horizon_ticks)
    }

    /// Keys in the table now.
    pub fn len(&self) -> usize {
        critical_section::with(|cs| self.slots.borrow_ref(cs).keys.iter().flatten().count())
    }

    /// Protected keys in the table now: those granted a second time while held.
    pub fn protected_len(&self) -> usize {
        critical_section::with(|cs| self.slots.borrow_ref(cs).protected_len)
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

    /// How long a bucket must stay full before it may be evicted, in units.
    fn guard(&self, protected: bool) -> u64 {
        if protected {
            self.protection_units
        } else {
            0
        }
    }

    /// Finds `key`'s slot, or claims a free one, or evicts one, and counts a user in; with
    /// whether the key was already held and not yet protected. `None` when no slot may be
    /// evicted.
    fn enter(&self, key: K, now_units: u64) -> Option<(usize, bool)> {
        let p = &self.params;
        critical_section::with(|cs| {
            let mut slots = self.slots.borrow_ref_mut(cs);
            let mut free = None;
            for (slot, held) in slots.keys.iter().enumerate() {
                match held {
                    Some(k) if *k == key => {
                        // Relaxed: counts change under the critical section or drop after use;
                        // the critical section orders this against any evictor's read.
                        self.users[slot].fetch_add(1, Ordering::Relaxed);
                        return Some((slot, !slots.protected[slot]));
                    }
                    None if free.is_none() => free = Some(slot),
                    _ => {}
                }
            }
            let slot = match free {
                Some(slot) => slot,
                None => {
                    let slot = self.victim(&slots, now_units)?;
                    if slots.protected[slot] {
                        slots.protected[slot] = false;
                        slots.protected_len -= 1;
                    }
                    slot
                }
            };
            // No call uses this slot: its word can be set back to the never-used mark, which
            // the first update turns into a fresh bucket at the quota's start fill.
            reset::<W>(&self.words[slot], p.unused);
            slots.keys[slot] = Some(key);
            self.users[slot].fetch_add(1, Ordering::Relaxed);
            Some((slot, false))
        })
    }

    /// The slot a new key may take: the unprotected bucket full the longest, else the protected
    /// one past its window the longest; only slots no call is using.
    fn victim(&self, slots: &Slots<K, N>, now_units: u64) -> Option<usize> {
        let p = &self.params;
        let mut best: Option<(bool, i64, usize)> = None;
        for slot in 0..N {
            // Acquire: pairs with the Release of the last user, so its word is final.
            if self.users[slot].load(Ordering::Acquire) != 0 {
                continue;
            }
            let protected = slots.protected[slot];
            let word = W::load(&self.words[slot]);
            if units_to_evictable(p, word, now_units, self.guard(protected)) != 0 {
                continue;
            }
            let age = if word == p.unused {
                0
            } else {
                p.elapsed(now_units, word)
            };
            // Unprotected first, then the longest full.
            if best.map_or(true, |(b_unprotected, b_age, _)| {
                (!protected, age) > (b_unprotected, b_age)
            }) {
                best = Some((!protected, age, slot));
            }
        }
        best.map(|(_, _, slot)| slot)
    }

    /// Protects `slot`'s key after its second grant, within the share of protected keys.
    fn promote(&self, slot: usize) {
        critical_section::with(|cs| {
            let mut slots = self.slots.borrow_ref_mut(cs);
            if !slots.protected[slot] && slots.protected_len < Self::MAX_PROTECTED {
                slots.protected[slot] = true;
                slots.protected_len += 1;
            }
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

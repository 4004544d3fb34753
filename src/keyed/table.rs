//! [`KeyedTable`]: `N` buckets in fixed memory, for `no_std` and interrupt handlers.

use core::time::Duration;

use super::solved::{converted, Solved};
use super::{
    overwrite, touch_word, units_to_evictable, KeyedConfigError, KeyedDenied, SetTierError, Tier,
    WhenFull, DEFAULT_PROTECTION,
};
use crate::clock::{ticks_to_duration_ceil, Clock};
use crate::engine::cell::WordCell;
use crate::engine::sync::{AtomicU32, Ordering, SlotLock};
use crate::engine::word::{DefaultWord, Word};
use crate::{Denied, Quota};

/// A fixed-capacity table of up to `N` keyed buckets that share one quota and one clock, with
/// no heap: for per-CAN-id or per-sensor limits on a microcontroller.
///
/// Each slot holds a key, one atomic word (the bucket's whole state), a count of the calls
/// using it, its tier and whether it is protected (a byte each): `size_of::<Option<K>>()`, the
/// word (8 or 4 bytes), the count (4) and 2 bytes a slot, each in its own array; the tiers'
/// layouts are solved once for the whole table. A call takes a short critical section (the `critical-section` crate) only to find
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
///
/// # Tiers
///
/// [`with_tiers`](Self::with_tiers) gives the table up to 256 quotas, solved once, and a
/// function that picks a new key's [`Tier`]; each slot keeps its tier in one byte.
/// [`set_tier`](Self::set_tier) moves one held key to another tier at run time, by
/// [`AdjustableBucket::set_quota`](crate::AdjustableBucket::set_quota)'s rule (tokens kept as
/// they are, capped by the new burst: a change never mints), touching no other key.
///
/// ```
/// use tollgate::{DefaultWord, KeyedTable, ManualClock, Quota, Rate, Tier, WhenFull};
///
/// static CLOCK: ManualClock = ManualClock::new();
/// const SENSOR: Tier = Tier(0);
/// const ALARM: Tier = Tier(1);
/// // Sensors 1 message a second, the alarm line (id 0) 10 a second.
/// static PER_ID: KeyedTable<u16, &ManualClock, 8, DefaultWord, 2> = KeyedTable::with_tiers(
///     [Quota::new(Rate::per_second(1)), Quota::new(Rate::per_second(10))],
///     |id| if *id == 0 { ALARM } else { SENSOR },
///     &CLOCK,
///     WhenFull::Refuse,
/// );
///
/// assert!(PER_ID.try_acquire(7, 1).is_ok());
/// assert!(PER_ID.try_acquire(7, 1).is_err());
/// assert!((0..10).all(|_| PER_ID.try_acquire(0, 1).is_ok()));
/// // Sensor 7 moves to the alarm tier: it keeps what it held (nothing), capped by the new
/// // burst, so the move mints nothing; from now on it refills at ten a second.
/// assert_eq!(PER_ID.set_tier(&7, ALARM), Ok(true));
/// assert_eq!(PER_ID.available(&7), 0);
/// CLOCK.advance(core::time::Duration::from_millis(100));
/// assert_eq!(PER_ID.available(&7), 1);
/// ```
pub struct KeyedTable<K, C, const N: usize, W: Word = DefaultWord, const T: usize = 1> {
    slots: SlotLock<Slots<K, N>>,
    /// Per slot: calls between finding the slot and finishing their update, and [`WAITER`]
    /// for each wait lined up on its key. A slot in use is never evicted, and never changes
    /// tier while a call updates it, so no call updates a word that has changed keys or layout
    /// under it.
    users: [AtomicU32; N],
    words: [W::Atomic; N],
    /// The bucket that newcomers without a slot share under [`WhenFull::Admit`], on the first
    /// tier.
    overflow: W::Atomic,
    tiers: [Solved; T],
    /// The first tier again: what an index past the tiers (which never happens) reads, so that
    /// the hot path has no bounds-check panic.
    first: Solved,
    tier_of: fn(&K) -> Tier,
    /// The largest burst of any tier: a request above it is refused before a key is added.
    max_burst: u64,
    clock: C,
    when_full: WhenFull,
}

/// What the critical section guards: which key each slot holds, on which tier, and which are
/// protected.
struct Slots<K, const N: usize> {
    keys: [Option<K>; N],
    tiers: [u8; N],
    protected: [bool; N],
    protected_len: usize,
}

/// What a wait lined up on a key counts on its slot's users: above every count of calls in
/// flight (fewer than `WAITER` at once: one per context that can run), so that a key with
/// waiters is never evicted, while `set_tier` still tells calls updating the word (the bits
/// below) from waiters, which read the tier afresh at each take.
const WAITER: u32 = 1 << 16;

/// Why `enter` found no slot.
enum NoSlot {
    /// None is free or may be evicted.
    Full,
    /// The tier function picked a tier the table does not have.
    UnknownTier(Tier),
}

/// The tier of every key in a table of one quota.
fn only_tier<K>(_: &K) -> Tier {
    Tier(0)
}

impl<K: Eq, C: Clock, const N: usize, W: Word> KeyedTable<K, C, N, W> {
    crate::const_fn_unless_loom! {
        /// An empty table, for `const` and `static` use, protecting returning keys for a minute.
        ///
        /// # Panics
        ///
        /// When the quota cannot be used on this clock (see [`ConfigError`](crate::ConfigError)): in a `const` or
        /// `static` that is a compile error. Use [`try_new`](Self::try_new) for quotas known only at
        /// run time.
        pub const fn new(quota: Quota, clock: C, when_full: WhenFull) -> Self {
            Self::with_tiers([quota], only_tier::<K>, clock, when_full)
        }
    }

    crate::const_fn_unless_loom! {
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
            Self::new(quota, clock, when_full).protect_for(protection)
        }
    }

    /// An empty table, or why the quota cannot be used on this clock.
    pub fn try_new(quota: Quota, clock: C, when_full: WhenFull) -> Result<Self, KeyedConfigError> {
        Self::try_with_tiers([quota], only_tier::<K>, clock, when_full)
    }
}

impl<K: Eq, C: Clock, const N: usize, W: Word, const T: usize> KeyedTable<K, C, N, W, T> {
    /// The most protected keys: three quarters of the slots, rounded up.
    const MAX_PROTECTED: usize = N - N / 4;

    crate::const_fn_unless_loom! {
        /// An empty table of `T` tiers (1 to 256), for `const` and `static` use: a new key follows
        /// `tiers[tier_of(&key).0]`. Protects returning keys for a minute.
        ///
        /// `tier_of` runs inside the critical section, once per new key: keep it short (a `match`
        /// on the key, or a read of a static).
        ///
        /// # Panics
        ///
        /// When a quota cannot be used on this clock, or `T` is 0 or above 256: in a `const` or
        /// `static` that is a compile error. Use [`try_with_tiers`](Self::try_with_tiers) for
        /// quotas known only at run time.
        pub const fn with_tiers(
            tiers: [Quota; T],
            tier_of: fn(&K) -> Tier,
            clock: C,
            when_full: WhenFull,
        ) -> Self {
            let (solved, first, max_burst) =
                match solve_tiers::<C, W, T>(&tiers, ticks_of::<C>(DEFAULT_PROTECTION)) {
                    Ok(solved) => solved,
                    Err(error) => panic!("{}", error.message()),
                };
            Self::from_solved(solved, first, max_burst, tier_of, clock, when_full)
        }
    }

    /// An empty table of `T` tiers, or why one of the quotas cannot be used on this clock (or
    /// `T` is 0 or above 256).
    pub fn try_with_tiers(
        tiers: [Quota; T],
        tier_of: fn(&K) -> Tier,
        clock: C,
        when_full: WhenFull,
    ) -> Result<Self, KeyedConfigError> {
        let (solved, first, max_burst) =
            solve_tiers::<C, W, T>(&tiers, ticks_of::<C>(DEFAULT_PROTECTION))?;
        Ok(Self::from_solved(
            solved, first, max_burst, tier_of, clock, when_full,
        ))
    }

    crate::const_fn_unless_loom! {
        const fn from_solved(
            tiers: [Solved; T],
            first: Solved,
            max_burst: u64,
            tier_of: fn(&K) -> Tier,
            clock: C,
            when_full: WhenFull,
        ) -> Self {
            Self {
                slots: SlotLock::new(Slots {
                    keys: [const { None }; N],
                    tiers: [0; N],
                    protected: [false; N],
                    protected_len: 0,
                }),
                users: users::<N>(),
                words: unused_words::<W, N>(),
                overflow: unused_word::<W>(),
                tiers,
                first,
                tier_of,
                max_burst,
                clock,
                when_full,
            }
        }
    }

    /// The same table, keeping a protected key's slot for `protection` once its bucket is full
    /// (a window longer than the word can read is shortened to what it can). `Duration::ZERO`
    /// turns protection off: any full bucket may be evicted at once.
    pub const fn protect_for(mut self, protection: Duration) -> Self {
        let ticks = ticks_of::<C>(protection);
        let mut i = 0;
        while i < T {
            self.tiers[i] = self.tiers[i].protecting(ticks);
            i += 1;
        }
        self.first = self.first.protecting(ticks);
        self
    }

    /// Takes `n` tokens from `key`'s bucket now, or says why not.
    ///
    /// Never waits. `n = 0` always succeeds and adds no key; `n` above the burst of every tier
    /// is [`Denied::ExceedsCapacity`] at once, and above the key's own tier's burst after its
    /// slot is found. A denial takes nothing. Safe from interrupt handlers.
    pub fn try_acquire(&self, key: K, n: u32) -> Result<(), KeyedDenied> {
        if n == 0 {
            return Ok(());
        }
        if u64::from(n) > self.max_burst {
            return Err(KeyedDenied::Denied(Denied::ExceedsCapacity {
                burst: self.max_burst,
            }));
        }
        let now = self.clock.now();
        let (slot, returning, tier) = match self.enter(key, now) {
            Ok(entered) => entered,
            Err(NoSlot::UnknownTier(tier)) => return Err(KeyedDenied::UnknownTier(tier)),
            Err(NoSlot::Full) => {
                let p = &self.first.layout;
                return match self.when_full {
                    WhenFull::Refuse => Err(KeyedDenied::Full { capacity: N }),
                    WhenFull::Admit => p
                        .cost(n)
                        .and_then(|cost| {
                            WordCell::<W>::new(&self.overflow, p).try_take_settled(
                                &self.clock,
                                now,
                                cost,
                            )
                        })
                        .map_err(|_| KeyedDenied::Full { capacity: N }),
                };
            }
        };
        let p = &self.solved(tier).layout;
        let result = p.cost(n).and_then(|cost| {
            WordCell::<W>::new(&self.words[slot], p).try_take_settled(&self.clock, now, cost)
        });
        if returning && result.is_ok() {
            // Still counted in: the slot cannot change keys before it is promoted.
            self.promote(slot);
        }
        // Release: this call's update happens before an evictor's Acquire read of the count.
        self.users[slot].fetch_sub(1, Ordering::Release);
        result.map_err(KeyedDenied::from)
    }

    /// Moves `key`, if the table holds it, to `tier`, converting its bucket by
    /// [`AdjustableBucket::set_quota`](crate::AdjustableBucket::set_quota)'s rule: the tokens
    /// it holds are kept as they are, capped by the new tier's burst, and a debt ends when it
    /// did. So a change never mints, however often it comes. No other key is touched.
    ///
    /// `Ok(true)`: the key's bucket now follows `tier`. `Ok(false)`: the key has no bucket,
    /// and the tier function picks the tier of the next one. The tier function picks again
    /// whenever a key's bucket is made anew (after eviction, which only happens to a full
    /// bucket), so change what it answers first, then call this for the bucket held now.
    ///
    /// Safe from interrupt handlers; [`SetTierError::Busy`] when a call it interrupted (or one
    /// on another core) is updating the key's bucket.
    pub fn set_tier(&self, key: &K, tier: Tier) -> Result<bool, SetTierError> {
        let Some(to) = self.tiers.get(usize::from(tier.0)) else {
            return Err(SetTierError::UnknownTier { tier, tiers: T });
        };
        let now = self.clock.now();
        self.slots.with(|slots| {
            let Some(slot) = slots.keys.iter().position(|k| k.as_ref() == Some(key)) else {
                return Ok(false);
            };
            // Acquire: pairs with the Release of the last user, so its word is final. Users
            // count in only under the critical section: none can start before this ends.
            if self.users[slot].load(Ordering::Acquire) % WAITER != 0 {
                return Err(SetTierError::Busy);
            }
            let from = &self.solved(slots.tiers[slot]).layout;
            let word = converted(from, &to.layout, W::load(&self.words[slot]), now);
            overwrite::<W>(&self.words[slot], word);
            slots.tiers[slot] = tier.0;
            Ok(true)
        })
    }

    /// The tier of `key`'s bucket, if the table holds it.
    pub fn tier(&self, key: &K) -> Option<Tier> {
        self.slots.with(|slots| {
            let slot = slots.keys.iter().position(|k| k.as_ref() == Some(key))?;
            Some(Tier(slots.tiers[slot]))
        })
    }

    /// Whole tokens in `key`'s bucket now: the start fill of the tier the tier function picks
    /// for a key not in the table.
    pub fn available(&self, key: &K) -> u64 {
        let now = self.clock.now();
        self.slots.with(
            |slots| match slots.keys.iter().position(|k| k.as_ref() == Some(key)) {
                Some(slot) => {
                    let tier = self.solved(slots.tiers[slot]);
                    let p = &tier.layout;
                    match W::load(&self.words[slot]) {
                        word if word == p.unused() => tier.quota.start_fill(),
                        word => p.tokens(word, p.units_at(now)),
                    }
                }
                None => self
                    .tiers
                    .get(usize::from((self.tier_of)(key).0))
                    .map_or(0, |tier| tier.quota.start_fill()),
            },
        )
    }

    /// How long until a new key would find room: zero while a slot is free or may be evicted
    /// (or, under [`WhenFull::Admit`], while the overflow bucket holds a token); otherwise the
    /// time until the first slot may be evicted or the overflow bucket refills a token, whichever
    /// comes first. Keys that come meanwhile may take that room first.
    pub fn until_room(&self) -> Duration {
        let now = self.clock.now();
        let mut ticks = self.slots.with(|slots| {
            (0..N)
                .map(|slot| match slots.keys[slot] {
                    None => 0,
                    Some(_) => self.ticks_to_evictable(slots, slot, now),
                })
                .min()
                .unwrap_or(0)
        });
        if self.when_full == WhenFull::Admit {
            let p = &self.first.layout;
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
        let now = self.clock.now();
        for slot in 0..N {
            // Under the critical section the slot cannot be evicted, reset or moved to another
            // tier meanwhile.
            self.slots.with(|slots| {
                if slots.keys[slot].is_some() {
                    let tier = self.solved(slots.tiers[slot]);
                    let now_units = tier.layout.units_at(now);
                    touch_word::<W>(
                        &self.words[slot],
                        &tier.layout,
                        now_units,
                        tier.protection_units,
                    );
                }
            });
        }
        let first = &self.first;
        let now_units = first.layout.units_at(now);
        touch_word::<W>(
            &self.overflow,
            &first.layout,
            now_units,
            first.protection_units,
        );
    }

    /// How long a held bucket may go untouched and still read correctly (the shortest of the
    /// tiers'); see [`TokenBucket::idle_horizon`](crate::TokenBucket::idle_horizon) and
    /// [`touch_all`](Self::touch_all).
    pub fn idle_horizon(&self) -> Duration {
        super::solved::idle_horizon::<C>(&self.tiers)
    }

    /// Keys in the table now.
    pub fn len(&self) -> usize {
        self.slots.with(|slots| slots.keys.iter().flatten().count())
    }

    /// Protected keys in the table now: those granted a second time while held, and those
    /// with a wait lined up (feature `embassy-time`), beyond the share if they must.
    pub fn protected_len(&self) -> usize {
        self.slots.with(|slots| slots.protected_len)
    }

    /// Whether the table holds no key.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The most keys the table holds: `N`.
    pub const fn capacity(&self) -> usize {
        N
    }

    /// The quota of the first tier: every key's, in a table of one quota.
    pub fn quota(&self) -> &Quota {
        &self.first.quota
    }

    /// The quota of `tier`, if the table has it.
    pub fn tier_quota(&self, tier: Tier) -> Option<&Quota> {
        self.tiers.get(usize::from(tier.0)).map(|tier| &tier.quota)
    }

    /// The largest burst of any tier: a request above it can never be granted.
    #[cfg(feature = "embassy-time")]
    pub(crate) fn max_burst(&self) -> u64 {
        self.max_burst
    }

    /// The layout of `key`'s bucket: its tier's, or the first tier's for a key not held (the
    /// waits' estimates; a wrong guess costs a waiter a wake, never a token).
    #[cfg(feature = "embassy-time")]
    pub(crate) fn layout_of(&self, key: &K) -> &crate::engine::layout::Layout {
        &self.solved(self.tier(key).map_or(0, |tier| tier.0)).layout
    }

    /// The clock the table reads.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// A slot's tier; the first for an index past them, which a slot never holds.
    #[inline]
    fn solved(&self, index: u8) -> &Solved {
        self.tiers.get(usize::from(index)).unwrap_or(&self.first)
    }

    /// Ticks until the bucket in a held `slot` may be evicted: 0 when it may be now.
    fn ticks_to_evictable(&self, slots: &Slots<K, N>, slot: usize, now: u64) -> u64 {
        let tier = self.solved(slots.tiers[slot]);
        let p = &tier.layout;
        let guard = tier.guard(slots.protected[slot]);
        p.ticks_until(
            now,
            units_to_evictable(p, W::load(&self.words[slot]), p.units_at(now), guard),
        )
    }

    /// Finds `key`'s slot, or claims a free one, or evicts one, and counts a user in; with
    /// whether the key was already held and not yet protected, and its tier.
    fn enter(&self, key: K, now: u64) -> Result<(usize, bool, u8), NoSlot> {
        self.slots.with(|slots| {
            let mut free = None;
            for (slot, held) in slots.keys.iter().enumerate() {
                match held {
                    Some(k) if *k == key => {
                        // Relaxed: counts change under the critical section or drop after use;
                        // the critical section orders this against any evictor's read.
                        self.users[slot].fetch_add(1, Ordering::Relaxed);
                        return Ok((slot, !slots.protected[slot], slots.tiers[slot]));
                    }
                    None if free.is_none() => free = Some(slot),
                    _ => {}
                }
            }
            let tier = (self.tier_of)(&key);
            if usize::from(tier.0) >= T {
                return Err(NoSlot::UnknownTier(tier));
            }
            let slot = match free {
                Some(slot) => slot,
                None => {
                    let slot = self.victim(slots, now).ok_or(NoSlot::Full)?;
                    if slots.protected[slot] {
                        slots.protected[slot] = false;
                        slots.protected_len -= 1;
                    }
                    slot
                }
            };
            // No call uses this slot: its word can be set back to the never-used mark, which
            // the first update turns into a fresh bucket at the tier's start fill.
            overwrite::<W>(&self.words[slot], self.first.layout.unused());
            slots.keys[slot] = Some(key);
            slots.tiers[slot] = tier.0;
            self.users[slot].fetch_add(1, Ordering::Relaxed);
            Ok((slot, false, tier.0))
        })
    }

    /// The slot a new key may take: the unprotected bucket full the longest, else the protected
    /// one past its window the longest; only slots no call is using.
    fn victim(&self, slots: &Slots<K, N>, now: u64) -> Option<usize> {
        let mut best: Option<(bool, u64, usize)> = None;
        for slot in 0..N {
            // Acquire: pairs with the Release of the last user, so its word is final.
            if self.users[slot].load(Ordering::Acquire) != 0 {
                continue;
            }
            let tier = self.solved(slots.tiers[slot]);
            let p = &tier.layout;
            let protected = slots.protected[slot];
            let word = W::load(&self.words[slot]);
            let now_units = p.units_at(now);
            if units_to_evictable(p, word, now_units, tier.guard(protected)) != 0 {
                continue;
            }
            // How long it has been full, in ticks: tiers count units differently.
            let age = if word == p.unused() {
                0
            } else {
                p.ticks_until(now, p.elapsed(now_units, word).max(0) as u64)
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

    /// Counts a wait in on `key`'s slot (claiming one for a new key, as `try_acquire` does)
    /// and protects it, beyond the share if it must: a slot with waiters is never evicted, so
    /// no eviction hands its burst out again. `Ok(None)` when the key finds no slot under
    /// [`WhenFull::Admit`] (the wait draws from the overflow bucket, unpinned); an error when
    /// it finds none under [`WhenFull::Refuse`], or when `n` is above its tier's burst.
    #[cfg(feature = "embassy-time")]
    pub(crate) fn pin(
        &self,
        key: K,
        n: u32,
    ) -> Result<Option<Pinned<'_, K, C, N, W, T>>, KeyedDenied> {
        let (slot, _, tier) = match self.enter(key, self.clock.now()) {
            Ok(entered) => entered,
            Err(NoSlot::UnknownTier(tier)) => return Err(KeyedDenied::UnknownTier(tier)),
            Err(NoSlot::Full) if self.when_full == WhenFull::Admit => return Ok(None),
            Err(NoSlot::Full) => return Err(KeyedDenied::Full { capacity: N }),
        };
        // From a call's count to a wait's: counted in all along, the slot cannot change keys.
        self.users[slot].fetch_add(WAITER - 1, Ordering::Relaxed);
        let pinned = Pinned { table: self, slot };
        self.slots.with(|slots| {
            if !slots.protected[slot] {
                slots.protected[slot] = true;
                slots.protected_len += 1;
            }
        });
        self.solved(tier).layout.cost(n)?;
        Ok(Some(pinned))
    }

    /// Protects `slot`'s key after its second grant, within the share of protected keys.
    fn promote(&self, slot: usize) {
        self.slots.with(|slots| {
            if !slots.protected[slot] && slots.protected_len < Self::MAX_PROTECTED {
                slots.protected[slot] = true;
                slots.protected_len += 1;
            }
        })
    }
}

/// A wait's hold on its key's slot: the slot is not evicted until it is dropped.
#[cfg(feature = "embassy-time")]
pub(crate) struct Pinned<'t, K, C, const N: usize, W: Word, const T: usize> {
    table: &'t KeyedTable<K, C, N, W, T>,
    slot: usize,
}

#[cfg(feature = "embassy-time")]
impl<K, C, const N: usize, W: Word, const T: usize> Drop for Pinned<'_, K, C, N, W, T> {
    fn drop(&mut self) {
        // Release: the wait's updates happen before an evictor's Acquire read of the count.
        self.table.users[self.slot].fetch_sub(WAITER, Ordering::Release);
    }
}

// The table's atomics, built in a `const` (loom's cannot be: under loom, at run time).
#[cfg(not(loom))]
const fn users<const N: usize>() -> [AtomicU32; N] {
    [const { AtomicU32::new(0) }; N]
}
#[cfg(not(loom))]
const fn unused_words<W: Word, const N: usize>() -> [W::Atomic; N] {
    [const { W::UNUSED }; N]
}
#[cfg(not(loom))]
const fn unused_word<W: Word>() -> W::Atomic {
    W::UNUSED
}
#[cfg(loom)]
fn users<const N: usize>() -> [AtomicU32; N] {
    core::array::from_fn(|_| AtomicU32::new(0))
}
#[cfg(loom)]
fn unused_words<W: Word, const N: usize>() -> [W::Atomic; N] {
    core::array::from_fn(|_| unused_word::<W>())
}
/// The never-used mark: the same in every layout of the word `W`.
#[cfg(loom)]
fn unused_word<W: Word>() -> W::Atomic {
    W::cell(crate::engine::word::unused_mark(W::BITS))
}

/// Every tier solved for the clock `C` and the word `W`, the first again, and the largest burst.
#[allow(clippy::type_complexity)]
const fn solve_tiers<C: Clock, W: Word, const T: usize>(
    tiers: &[Quota; T],
    protection_ticks: u64,
) -> Result<([Solved; T], Solved, u64), KeyedConfigError> {
    if T == 0 || T > super::MAX_TIERS {
        return Err(KeyedConfigError::TierCount);
    }
    let first = match Solved::new(tiers[0], C::TICKS_PER_SECOND, W::BITS, protection_ticks) {
        Ok(solved) => solved,
        Err(error) => return Err(KeyedConfigError::Quota(error)),
    };
    let mut solved = [first; T];
    let mut max_burst = 0;
    let mut i = 0;
    while i < T {
        solved[i] = match Solved::new(tiers[i], C::TICKS_PER_SECOND, W::BITS, protection_ticks) {
            Ok(tier) => tier,
            Err(error) => return Err(KeyedConfigError::Quota(error)),
        };
        if solved[i].layout.burst() > max_burst {
            max_burst = solved[i].layout.burst();
        }
        i += 1;
    }
    Ok((solved, first, max_burst))
}

/// `duration` in ticks of `C`, rounded down, saturating: in `const`.
const fn ticks_of<C: Clock>(duration: Duration) -> u64 {
    let ticks = duration.as_secs() as u128 * C::TICKS_PER_SECOND as u128
        + duration.subsec_nanos() as u128 * C::TICKS_PER_SECOND as u128 / 1_000_000_000;
    if ticks > u64::MAX as u128 {
        u64::MAX
    } else {
        ticks as u64
    }
}

impl<K, C, const N: usize, W: Word, const T: usize> core::fmt::Debug for KeyedTable<K, C, N, W, T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("KeyedTable")
            .field("quota", &self.first.quota)
            .field("tiers", &T)
            .field("capacity", &N)
            .field("when_full", &self.when_full)
            .finish_non_exhaustive()
    }
}

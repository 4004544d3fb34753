//! Per-key waits on a [`KeyedLimiter`]: each key's waiters in a line of their own, in the
//! crate's waiters' line (`wait/queue.rs`), and the key's bucket kept while anyone waits on it.
//!
//! The line of a bucket is named by an address that stays put while anyone waits on it; a
//! key's entry moves (its table rehashes as it grows or shrinks, and a key moves to the
//! protected table), so a key's line is named instead by a [`Place`]: a small allocation made
//! for the key's first waiter and freed after its last, kept in the shard's [`Pins`]. While a
//! key is pinned there its bucket is never evicted (the sweeps skip it) and it sits in its
//! shard's protected table, so it counts in `protected_len`. Each look at the line reads the
//! key's word afresh through the shard's read lock, wherever the entry is by then.
//!
//! Locks, in the order they may nest: the line's registry lock (`wait/queue.rs`), then a
//! shard's lock, then the shard's pins. Pinning and unpinning take the pins alone; a sweep
//! takes a shard's write lock, then its pins. No lock is held across a wait.

use core::hash::{BuildHasher, Hash};
use core::time::Duration;
use std::boxed::Box;
use std::collections::HashMap;
use std::sync::atomic::AtomicUsize;
use std::sync::{Mutex, MutexGuard, PoisonError};

use super::tables::{insert, on_shards, Shard, Slot};
use super::{lower, KeyedLimiter, Reserved};
use crate::clock::{duration_to_ticks_floor, ticks_to_duration_ceil, Clock};
use crate::engine::cell::WordCell;
use crate::engine::sync::Ordering;
use crate::engine::word::Word;
use crate::keyed::solved::Solved;
use crate::keyed::units_to_evictable;
use crate::wait::queue::{Lined, Waiter};
use crate::wait::{GiveBack, ReserveNow};
use crate::{Denied, KeyedDenied, WhenFull};

/// The keys of one shard that tasks or threads wait on.
pub(super) struct Pins<K> {
    keys: Mutex<HashMap<K, Pin>>,
    /// How many keys `keys` holds, written under its lock and read without it: zero lets a
    /// wait take at once with no lock (a wait that reads a zero as another pins is overtaken
    /// once, as by a `try_acquire`), and a sweep keep its shard without a look at the pins.
    count: AtomicUsize,
}

/// One pinned key: its waiters and the place that names its line.
pub(super) struct Pin {
    waiters: usize,
    place: Box<Place>,
}

/// An allocation whose address names a key's line while the key is pinned: no other live
/// object has that address meanwhile, and no line outlives its waiters, who hold the pin.
struct Place {
    _address: u8,
}

impl<K> Pins<K> {
    pub(super) fn new() -> Self {
        Pins {
            keys: Mutex::new(HashMap::new()),
            count: AtomicUsize::new(0),
        }
    }

    /// The pinned keys, if any (for a sweep, which keeps them). Poisoning is ignored: every
    /// change under the lock is a count or an insert, whole or not made.
    pub(super) fn if_any(&self) -> Option<MutexGuard<'_, HashMap<K, Pin>>> {
        (self.count.load(Ordering::Relaxed) != 0).then(|| self.lock())
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<K, Pin>> {
        self.keys.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Whether a sweep must keep `key` for its waiters.
pub(super) fn pinned<K: Hash + Eq>(
    pins: &Option<MutexGuard<'_, HashMap<K, Pin>>>,
    key: &K,
) -> bool {
    pins.as_ref().is_some_and(|keys| keys.contains_key(key))
}

/// What a keyed wait waits on: its key's bucket, or the overflow bucket that newcomers finding
/// no room share under [`WhenFull::Admit`].
enum Target {
    Key {
        hash: u64,
        shard: usize,
        line: usize,
    },
    Overflow,
}

/// One waiter's handle on its key: the limit its place in line is for. Dropping it unpins the
/// key (after the waiter has left the line: it is declared first, so dropped last).
pub(super) struct KeyLine<'l, K: Hash + Eq + Clone, C: Clock, W: Word, S: BuildHasher> {
    limiter: &'l KeyedLimiter<K, C, W, S>,
    key: K,
    target: Target,
}

/// What a keyed wait's head took: enough to give it back by the refund rule.
pub(super) struct KeyTake {
    cost: u64,
    tier: u8,
    due_units: u64,
    made_ticks: u64,
}

impl<'l, K, C, W, S> KeyLine<'l, K, C, W, S>
where
    K: Hash + Eq + Clone,
    C: Clock,
    W: Word,
    S: BuildHasher,
{
    /// Pins `key` and holds its bucket in its shard's protected table (adding it if it is not
    /// held, unless `n` is above its tier's burst); with no room for it, the overflow's line
    /// under [`WhenFull::Admit`], or [`KeyedDenied::Full`] under [`WhenFull::Refuse`].
    fn join(
        limiter: &'l KeyedLimiter<K, C, W, S>,
        key: &K,
        n: u32,
        hash: u64,
        shard: usize,
    ) -> Result<Self, KeyedDenied> {
        let line = limiter.pin(key, shard);
        // Pinned first, held second: a sweep that runs in between finds the pin.
        let held =
            on_shards!(&limiter.tables, shards => limiter.hold(&shards[shard], hash, key, n));
        let mut this = KeyLine {
            limiter,
            key: key.clone(),
            target: Target::Key { hash, shard, line },
        };
        match held {
            Ok(()) => Ok(this),
            // Above the overflow bucket's burst: `Full`, as `try_acquire` answers it.
            Err(KeyedDenied::Full { .. })
                if limiter.when_full == WhenFull::Admit
                    && u64::from(n) <= limiter.first.layout.burst() =>
            {
                limiter.unpin(key, hash, shard);
                this.target = Target::Overflow;
                Ok(this)
            }
            Err(refused) => Err(refused),
        }
    }

    /// `f` of the word this waiter waits on and its tier (with the tier's index); `None` if the
    /// key's entry is gone, which a pin prevents.
    fn with_word<R>(&self, f: impl FnOnce(&W::Atomic, &Solved, u8) -> R) -> Option<R> {
        let limiter = self.limiter;
        match self.target {
            Target::Overflow => Some(f(&limiter.overflow, &limiter.first, 0)),
            Target::Key { hash, shard, .. } => on_shards!(&limiter.tables, shards => {
                let entries = shards[shard].read();
                entries
                    .find(hash, &self.key)
                    .map(|entry| f(entry.word(), limiter.solved_of(entry), entry.tier()))
            }),
        }
    }
}

/// The refusal of a look whose key's entry is gone: never, while the key is pinned.
fn entry_gone() -> Denied {
    Denied::ExceedsCapacity { burst: 0 }
}

impl<K, C, W, S> Drop for KeyLine<'_, K, C, W, S>
where
    K: Hash + Eq + Clone,
    C: Clock,
    W: Word,
    S: BuildHasher,
{
    fn drop(&mut self) {
        if let Target::Key { hash, shard, .. } = self.target {
            self.limiter.unpin(&self.key, hash, shard);
        }
    }
}

impl<K, C, W, S> Lined for KeyLine<'_, K, C, W, S>
where
    K: Hash + Eq + Clone,
    C: Clock,
    W: Word,
    S: BuildHasher,
{
    type Clock = C;

    fn units_for(&self, n: u32) -> Result<u64, Denied> {
        self.with_word(|_, tier, _| tier.layout.cost(n))
            .unwrap_or_else(|| Err(entry_gone()))
    }

    fn now_ticks(&self) -> u64 {
        self.limiter.clock.now()
    }

    fn ticks_until_holding(&self, now_ticks: u64, units: u64) -> u64 {
        self.with_word(|word, tier, _| {
            let p = &tier.layout;
            let now_units = p.units_at(now_ticks);
            let word = WordCell::<W>::new(word, p).read(now_units);
            // Within the range `take` reads, as `TokenBucket`'s.
            match p.take(word, now_units, units.min(p.max_debt_units()), 0) {
                Ok(_) => 0,
                Err(short) => p.ticks_until(now_ticks, short),
            }
        })
        .unwrap_or(0)
    }

    fn slack_ticks(&self, now_ticks: u64, units: u64) -> u64 {
        self.with_word(|_, tier, _| {
            let p = &tier.layout;
            p.ticks_until(now_ticks, p.burst_units().saturating_sub(units))
        })
        .unwrap_or(0)
    }

    fn line_key(&self) -> usize {
        match self.target {
            Target::Key { line, .. } => line,
            Target::Overflow => &self.limiter.overflow as *const W::Atomic as usize,
        }
    }
}

impl<K, C, W, S> GiveBack for KeyLine<'_, K, C, W, S>
where
    K: Hash + Eq + Clone,
    C: Clock,
    W: Word,
    S: BuildHasher,
{
    type Cost = u32;
    type Taken = KeyTake;

    /// The refund rule of `TokenBucket`'s waits: what was taken, less what the burst cap would
    /// have cut since; nothing if the clock stepped back past the take, or if the key moved to
    /// another tier meanwhile (its units are no longer the take's). What goes back is the next
    /// waiter's sooner: the head of the key's line is woken if its timer would come later.
    fn give_back(&self, taken: KeyTake) {
        let now = self.limiter.clock.now();
        if (now.wrapping_sub(taken.made_ticks) as i64) < 0 {
            return;
        }
        let given = self.with_word(|word, tier, index| {
            if index != taken.tier {
                return false;
            }
            let p = &tier.layout;
            WordCell::<W>::new(word, p)
                .update(now, |word, now_units| {
                    p.refund(word, now_units, taken.due_units, taken.cost)
                        .map(|word| (word, ()))
                        .ok_or(())
                })
                .is_ok()
        });
        if given == Some(true) {
            crate::wait::queue::given_back(self);
        }
    }
}

impl<K, C, W, S> ReserveNow for KeyLine<'_, K, C, W, S>
where
    K: Hash + Eq + Clone,
    C: Clock,
    W: Word,
    S: BuildHasher,
{
    fn reserve_now(&self, n: u32) -> Result<KeyTake, Denied> {
        self.reserve_ahead(n, Duration::ZERO)
            .map(|(taken, _)| taken)
    }

    fn reserve_ahead(&self, n: u32, ahead: Duration) -> Result<(KeyTake, Duration), Denied> {
        let clock = &self.limiter.clock;
        let ahead_ticks = duration_to_ticks_floor::<C>(ahead);
        self.with_word(|word, tier, index| {
            let p = &tier.layout;
            let cost = p.cost(n)?;
            // A wait is from a reading taken after the word it lands on (see `update_fresh`).
            WordCell::<W>::new(word, p).update_fresh(clock, |word, now, now_units| {
                let (due_units, wait_ticks) = p
                    .reserve(word, now, now_units, cost, ahead_ticks)
                    .map_err(|retry| Denied::insufficient(ticks_to_duration_ceil::<C>(retry)))?;
                let taken = KeyTake {
                    cost,
                    tier: index,
                    due_units,
                    made_ticks: now,
                };
                let due_in = ticks_to_duration_ceil::<C>(wait_ticks);
                Ok((due_units, (taken, due_in), wait_ticks != 0))
            })
        })
        .unwrap_or_else(|| Err(entry_gone()))
    }

    fn take_at_once(&self, n: u32) -> Result<(), Denied> {
        self.reserve_now(n).map(drop)
    }
}

impl<K, C, W, S> KeyedLimiter<K, C, W, S>
where
    K: Hash + Eq + Clone,
    C: Clock,
    W: Word,
    S: BuildHasher,
{
    /// The start of every keyed wait: `Some` when it is over already (`n = 0`, `n` above every
    /// tier's burst, taken at once with nobody waiting on the key's shard, or refused), `None`
    /// when the caller must line up; with the key's hash and shard.
    fn settled_at_once(&self, key: &K, n: u32) -> (Option<Result<(), KeyedDenied>>, u64, usize) {
        let hash = self.hasher.hash_one(key);
        let index = self.shard_index(hash);
        if n == 0 || self.is_unlimited() {
            return (Some(Ok(())), hash, index);
        }
        if u64::from(n) > self.max_burst {
            let burst = self.max_burst;
            let refused = KeyedDenied::Denied(Denied::ExceedsCapacity { burst });
            return (Some(Err(refused)), hash, index);
        }
        if self.pins[index].count.load(Ordering::Relaxed) != 0 {
            return (None, hash, index);
        }
        let now = self.clock.now();
        let taken =
            on_shards!(&self.tables, shards => self.acquire_in(&shards[index], hash, key, now, n));
        let settled = match taken {
            Err(KeyedDenied::Denied(Denied::Insufficient { .. })) => None,
            // Under `Admit` the overflow bucket was empty: the wait joins its line, unless the
            // request is above its burst, which no wait in it would grant.
            Err(KeyedDenied::Full { .. })
                if self.when_full == WhenFull::Admit
                    && u64::from(n) <= self.first.layout.burst() =>
            {
                None
            }
            settled => Some(settled),
        };
        (settled, hash, index)
    }

    /// Counts a waiter in on `key`, pinning it; returns the address that names its line.
    fn pin(&self, key: &K, shard: usize) -> usize {
        let pins = &self.pins[shard];
        let mut keys = pins.lock();
        let pin = keys.entry(key.clone()).or_insert_with(|| Pin {
            waiters: 0,
            place: Box::new(Place { _address: 0 }),
        });
        pin.waiters += 1;
        let line = &*pin.place as *const Place as usize;
        pins.count.store(keys.len(), Ordering::Relaxed);
        line
    }

    /// Counts a waiter out of `key`; after the last, the key may be evicted again, and the
    /// hints say when (a sweep that kept it for its waiters did not count it).
    fn unpin(&self, key: &K, hash: u64, shard: usize) {
        let pins = &self.pins[shard];
        let mut keys = pins.lock();
        let Some(pin) = keys.get_mut(key) else {
            return;
        };
        pin.waiters -= 1;
        if pin.waiters != 0 {
            return;
        }
        keys.remove(key);
        pins.count.store(keys.len(), Ordering::Relaxed);
        drop(keys);
        let now = self.clock.now();
        on_shards!(&self.tables, shards => {
            let shard = &shards[shard];
            let entries = shard.read();
            let found = match entries.protected.find(hash, |e| e.key() == key) {
                Some(entry) => Some((entry, true)),
                None => entries.fresh.find(hash, |e| e.key() == key).map(|e| (e, false)),
            };
            if let Some((entry, protected)) = found {
                let tier = self.solved_of(entry);
                let p = &tier.layout;
                let word = W::load(entry.word());
                let units = units_to_evictable(p, word, p.units_at(now), tier.guard(protected));
                let evictable = now.wrapping_add(p.ticks_until(now, units));
                lower(&shard.due_ticks, now, evictable);
                lower(&self.next_room_ticks, now, evictable);
            }
        });
    }

    /// Holds `key`'s bucket in its shard's protected table: moved there if it is elsewhere,
    /// added there if it is not held (a new bucket at its tier's start fill, with a slot of the
    /// capacity, after a round of sweeps if there is none). A pinned key is protected beyond
    /// the share of three quarters of the capacity: it must not be evicted, whatever the share.
    fn hold<E: Slot<Key = K, Word = W>>(
        &self,
        shard: &Shard<E>,
        hash: u64,
        key: &K,
        n: u32,
    ) -> Result<(), KeyedDenied> {
        if shard
            .read()
            .protected
            .find(hash, |e| e.key() == key)
            .is_some()
        {
            return Ok(());
        }
        for round in [false, true] {
            if round && !self.make_room(self.clock.now()) {
                break;
            }
            let mut entries = shard.write();
            let entries = &mut *entries;
            if entries.protected.find(hash, |e| e.key() == key).is_some() {
                return Ok(());
            }
            if entries.fresh.find(hash, |e| e.key() == key).is_some() {
                // Protected beyond the share (never beyond the keys held, which count it
                // already): without a count the key stays where it is, kept by its pin alone.
                self.move_to_protected(entries, shard.planned, hash, key, self.capacity);
                return Ok(());
            }
            let tier = (self.tier_of)(key);
            let Some(solved) = self.tiers.get(usize::from(tier.0)) else {
                return Err(KeyedDenied::UnknownTier(tier));
            };
            // Refused before the key is added, as `try_acquire` refuses it.
            solved.layout.cost(n)?;
            let Some(slot) = Reserved::new(&self.held, self.capacity) else {
                continue;
            };
            let entry = E::new(key.clone(), solved.layout.unused(), tier.0);
            // A slot held, so a protected count too: protected keys are among the held.
            let protected = Reserved::new(&self.protected_held, self.capacity);
            let table = if protected.is_some() {
                &mut entries.protected
            } else {
                &mut entries.fresh
            };
            insert(table, hash, entry, shard.planned, &self.hasher);
            slot.keep();
            if let Some(protected) = protected {
                protected.keep();
            }
            return Ok(());
        }
        Err(KeyedDenied::Full {
            capacity: self.capacity,
        })
    }
}

/// A waiter on `line` for `n` tokens, giving up after `timeout`.
fn waiter<'a, 'l: 'a, K, C, W, S>(
    line: &'a KeyLine<'l, K, C, W, S>,
    n: u32,
    timeout: Option<Duration>,
) -> Result<Waiter<'a, KeyLine<'l, K, C, W, S>, 1>, KeyedDenied>
where
    K: Hash + Eq + Clone,
    C: Clock,
    W: Word,
    S: BuildHasher,
{
    Waiter::new([line], [n], timeout).map_err(KeyedDenied::from)
}

/// # Waits, per key (features `tokio` and `std`)
///
/// Each key has a line of its own: the waiters of one key are served in arrival order, each
/// wakes once unless someone ahead gives up, and the keys' lines are apart (a slow key never
/// holds up another). These are `TokenBucket`'s waits, per key, with the same rules:
///
/// - **A request above the key's burst fails at once**: above every tier's burst with no key
///   added, above the key's own tier's burst as soon as its tier is known, with
///   [`Denied::ExceedsCapacity`].
/// - **Giving up is free.** Nothing is taken before the tokens are due, so a wait dropped or
///   timed out leaves the key's bucket as if it had never queued, whatever waits behind it.
/// - **No lock is held across a wait**, and `try_acquire` on the same key never waits for a
///   waiter (it may take tokens a waiter is waiting for, as on a single bucket).
/// - **A key with waiters is kept.** From the moment a wait lines up until its last waiter
///   leaves, the key's bucket sits in its shard's protected table, counts in
///   [`protected_len`](Self::protected_len) (beyond the share of three quarters of the
///   capacity, if it must), and is never evicted: [`sweep`](Self::sweep) and the rounds of a
///   full limiter skip it. So no eviction hands a waited-on key's burst out again. When the
///   last waiter leaves, the key is protected as a returning key is.
/// - **A new key that finds the limiter full** (every slot held, none evictable) gets what
///   [`WhenFull`] says, at once: under [`WhenFull::Refuse`] the wait fails with
///   [`KeyedDenied::Full`], taking nothing and joining no line (ask
///   [`until_room`](Self::until_room) when to try again); under [`WhenFull::Admit`] it waits
///   in the line of the overflow bucket that every such newcomer shares (so together they get
///   one key's rate, in arrival order), and fails with `Full` only if `n` is above that
///   bucket's burst. A wait does not wait for room in the table: room comes from other keys'
///   buckets filling, which nothing announces, and a wait that polled for it would wake more
///   than once.
///
/// A wait's tier is the key's when it lines up; [`set_tier`](Self::set_tier) during a wait
/// changes what the head takes, never more than the new tier's bucket holds.
impl<K, C, W, S> KeyedLimiter<K, C, W, S>
where
    K: Hash + Eq + Clone,
    C: Clock,
    W: Word,
    S: BuildHasher,
{
    /// Takes `n` tokens from `key`'s bucket, waiting in `key`'s line and then until they have
    /// accrued; returns the time waited. Cancel-safe as
    /// [`TokenBucket::acquire`](crate::TokenBucket::acquire) is: a future dropped in line has
    /// taken nothing. See [the rules above](#waits-per-key-features-tokio-and-std). Use
    /// [`TokioClock`](crate::TokioClock) so that the limiter and the timer read the same clock.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tokio::time::Instant;
    /// use tollgate::{KeyedLimiter, Quota, Rate, TokioClock, WhenFull};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let start = Instant::now();
    /// let per_host = KeyedLimiter::try_new(Quota::new(Rate::per_second(2)).burst(1), TokioClock::new(), 1_000, WhenFull::Refuse)?;
    /// per_host.acquire(&"a.example", 1).await?; // the burst, at once
    /// assert_eq!(per_host.acquire(&"a.example", 1).await?, Duration::from_millis(500));
    /// per_host.acquire(&"b.example", 1).await?; // another host: its own bucket
    /// assert_eq!(start.elapsed(), Duration::from_millis(500));
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(feature = "tokio")]
    pub async fn acquire(&self, key: &K, n: u32) -> Result<Duration, KeyedDenied> {
        self.acquire_within(key, n, None, &crate::Jitter::none())
            .await
    }

    /// Takes `n` tokens from `key`'s bucket if they accrue within `timeout`, waiting until
    /// then; returns the time waited. A wait that would exceed `timeout` (the tokens of
    /// everyone in the key's line, then its own) fails at once with [`Denied::Insufficient`],
    /// taking nothing; one that runs out of time in line leaves it with the same error, having
    /// taken nothing. Otherwise as [`acquire`](Self::acquire).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Denied, KeyedDenied, KeyedLimiter, Quota, Rate, TokioClock, WhenFull};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let per_host = KeyedLimiter::try_new(Quota::new(Rate::per_second(1)).burst(1), TokioClock::new(), 1_000, WhenFull::Refuse)?;
    /// per_host.acquire(&7u32, 1).await?;
    /// assert_eq!(
    ///     per_host.acquire_timeout(&7, 1, Duration::from_millis(400)).await,
    ///     Err(KeyedDenied::Denied(Denied::insufficient(Duration::from_millis(600))))
    /// );
    /// assert_eq!(per_host.acquire_timeout(&7, 1, Duration::from_secs(1)).await, Ok(Duration::from_secs(1)));
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(feature = "tokio")]
    pub async fn acquire_timeout(
        &self,
        key: &K,
        n: u32,
        timeout: Duration,
    ) -> Result<Duration, KeyedDenied> {
        self.acquire_within(key, n, Some(timeout), &crate::Jitter::none())
            .await
    }

    #[cfg(feature = "tokio")]
    async fn acquire_within(
        &self,
        key: &K,
        n: u32,
        timeout: Option<Duration>,
        jitter: &crate::Jitter,
    ) -> Result<Duration, KeyedDenied> {
        let (settled, hash, shard) = self.settled_at_once(key, n);
        if let Some(settled) = settled {
            return settled.map(|()| Duration::ZERO);
        }
        // Boxed: the line's state (the key's handle, the place in line, the timer) is built
        // only for a wait that waits, and a future that takes at once stays small.
        Box::pin(async move {
            let line = KeyLine::join(self, key, n, hash, shard)?;
            let waiter = waiter(&line, n, timeout)?;
            crate::wait::acquire_async(&line, waiter, n, jitter)
                .await
                .map_err(KeyedDenied::from)
        })
        .await
    }

    /// Takes `n` tokens from `key`'s bucket, blocking the thread in `key`'s line and then until
    /// they have accrued; returns the time waited. See
    /// [the rules above](#waits-per-key-features-tokio-and-std).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{KeyedLimiter, Quota, Rate, StdClock, WhenFull};
    ///
    /// let per_host = KeyedLimiter::try_new(Quota::new(Rate::per_second(100)).burst(1), StdClock, 1_000, WhenFull::Refuse)?;
    /// assert_eq!(per_host.acquire_blocking(&"a.example", 1)?, Duration::ZERO);
    /// let waited = per_host.acquire_blocking(&"a.example", 1)?; // the next token, within 10 ms
    /// assert!(waited <= Duration::from_millis(200)); // 10 ms, and a loaded machine's delay
    /// assert!(per_host.acquire_blocking(&"a.example", 2).is_err()); // above the burst: at once
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn acquire_blocking(&self, key: &K, n: u32) -> Result<Duration, KeyedDenied> {
        self.acquire_blocking_within(key, n, None, &crate::Jitter::none())
    }

    /// Takes `n` tokens from `key`'s bucket if they accrue within `timeout`, blocking the
    /// thread until then; returns the time waited. A wait that would exceed `timeout` fails at
    /// once with [`Denied::Insufficient`], taking nothing; one that runs out of time in line
    /// leaves it with the same error. Otherwise as [`acquire_blocking`](Self::acquire_blocking).
    pub fn acquire_blocking_timeout(
        &self,
        key: &K,
        n: u32,
        timeout: Duration,
    ) -> Result<Duration, KeyedDenied> {
        self.acquire_blocking_within(key, n, Some(timeout), &crate::Jitter::none())
    }

    fn acquire_blocking_within(
        &self,
        key: &K,
        n: u32,
        timeout: Option<Duration>,
        jitter: &crate::Jitter,
    ) -> Result<Duration, KeyedDenied> {
        let (settled, hash, shard) = self.settled_at_once(key, n);
        if let Some(settled) = settled {
            return settled.map(|()| Duration::ZERO);
        }
        let line = KeyLine::join(self, key, n, hash, shard)?;
        let waiter = waiter(&line, n, timeout)?;
        crate::wait::acquire_blocking(&line, waiter, n, jitter).map_err(KeyedDenied::from)
    }
}

impl<K, C, W, S> KeyedLimiter<K, C, W, S>
where
    K: Hash + Eq + Clone,
    C: Clock,
    W: Word,
    S: BuildHasher,
{
    /// This limiter's waits, each followed by a random delay from `jitter` when it slept: see
    /// [`Jittered`](crate::wait::Jittered). Keys due at the same instant (a burst of clients
    /// after a pause) then act spread over the jitter rather than in one tick.
    pub const fn jittered<'a>(
        &'a self,
        jitter: &'a crate::Jitter,
    ) -> crate::wait::Jittered<'a, Self> {
        crate::wait::Jittered::new(self, jitter)
    }
}

/// A keyed limiter's waits with a jitter after a wait that slept: the async ones hold the key's
/// take through it and give it back if dropped there.
impl<K, C, W, S> crate::wait::Jittered<'_, KeyedLimiter<K, C, W, S>>
where
    K: Hash + Eq + Clone,
    C: Clock,
    W: Word,
    S: BuildHasher,
{
    /// [`KeyedLimiter::acquire`], then the jitter if it slept.
    #[cfg(feature = "tokio")]
    pub async fn acquire(&self, key: &K, n: u32) -> Result<Duration, KeyedDenied> {
        (self.bucket())
            .acquire_within(key, n, None, self.jitter())
            .await
    }

    /// [`KeyedLimiter::acquire_timeout`], then the jitter if it slept.
    #[cfg(feature = "tokio")]
    pub async fn acquire_timeout(
        &self,
        key: &K,
        n: u32,
        timeout: Duration,
    ) -> Result<Duration, KeyedDenied> {
        (self.bucket())
            .acquire_within(key, n, Some(timeout), self.jitter())
            .await
    }

    /// [`KeyedLimiter::acquire_blocking`], then the jitter if it slept.
    pub fn acquire_blocking(&self, key: &K, n: u32) -> Result<Duration, KeyedDenied> {
        (self.bucket()).acquire_blocking_within(key, n, None, self.jitter())
    }

    /// [`KeyedLimiter::acquire_blocking_timeout`], then the jitter if it slept.
    pub fn acquire_blocking_timeout(
        &self,
        key: &K,
        n: u32,
        timeout: Duration,
    ) -> Result<Duration, KeyedDenied> {
        (self.bucket()).acquire_blocking_within(key, n, Some(timeout), self.jitter())
    }
}

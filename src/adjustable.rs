//! [`AdjustableBucket`]: a token bucket whose quota can change while it is in use.

use core::time::Duration;

use crate::clock::{duration_to_ticks_ceil, duration_to_ticks_floor, ticks_to_duration_ceil, Clock};
use crate::engine::layout::Layout;
use crate::engine::sync::{fence, spin_loop, AtomicBool, AtomicU64, Ordering};
use crate::engine::word::{AdjustableWord, DefaultAdjustableWord};
use crate::{ConfigError, Denied, Pause, Quota, TickRate};

/// Set in a slot's version when it holds a generation's parameters.
const VALID: u64 = 1 << 32;

/// A token bucket whose rate and burst can change while other threads acquire
/// ([`set_quota`](Self::set_quota)), with no lock on the acquire path.
///
/// The plain [`TokenBucket`](crate::TokenBucket) keeps its layout in plain fields, so its hot
/// path reads no parameters from memory shared with a writer; this type pays for being
/// adjustable instead. Its state is one atomic twice the word's width: a 32-bit *generation*
/// beside the bucket's word, laid out as [`TokenBucket`](crate::TokenBucket) lays out the same
/// word `W`. The layout for each generation sits in one of two slots of atomics, published under
/// a version (a seqlock in safe atomics). An acquire reads the state, the slot for its
/// generation, and runs the same transition as `TokenBucket`; its compare-exchange includes the
/// generation, so it lands only if the quota it used is still the current one. A change writes
/// the other slot, then converts the word and bumps the generation in one compare-exchange.
///
/// **The fill is kept as-is, in tokens, capped by the new burst** (debt from reservations or a
/// pause is kept in time, clamped to the new debt bound). As-is rather than proportionate: tokens
/// already earned are the caller's to spend under either quota, and a change mints none — a
/// proportionate fill would turn 5 of 10 into 50 of 100 on a larger burst, granting at once what
/// was never earned. So over a run of quota changes, grants stay within the sum over each segment
/// of its burst plus its rate times its length.
///
/// **The word.** `W` is [`DefaultAdjustableWord`]: the [`DefaultWord`](crate::DefaultWord)
/// (`u64`) where a lock-free 128-bit atomic holds it beside the generation (x86_64 with `std` or
/// cmpxchg16b, aarch64), else `u32` in a 64-bit atomic. Each word gives exactly what
/// `TokenBucket` gives on it: on `u64` an idle horizon of at least a century where the rate
/// allows and pauses of decades; on `u32` the 32-bit word's horizon (an hour or more for
/// ordinary quotas; call [`touch`](Self::touch) within it) and a
/// [`max_pause`](Self::max_pause) of one burst's refill. Choose it with
/// [`try_new_with_word`](Self::try_new_with_word). The generation wraps after 2^32 changes; an
/// acquire would have to stall between its read and its compare-exchange across all of them to
/// act on a stale quota. Only where the target has 64-bit atomics.
///
/// ```
/// use core::time::Duration;
/// use tollgate::{AdjustableBucket, ManualClock, Quota, Rate};
///
/// let clock = ManualClock::new();
/// let bucket = AdjustableBucket::try_new(Quota::new(Rate::per_second(10)).burst(10), &clock)?;
/// assert!(bucket.try_acquire(4).is_ok());
/// // The upstream halves the quota: the 6 tokens left are kept, capped by the new burst of 5.
/// bucket.set_quota(Quota::new(Rate::per_second(5)).burst(5))?;
/// assert_eq!(bucket.available(), 5);
/// assert!(bucket.try_acquire(5).is_ok());
/// // One every 200 ms now, to the nanosecond on the 64-bit word.
/// clock.advance(Duration::from_millis(200) - Duration::from_nanos(1));
/// assert!(bucket.try_acquire(1).is_err());
/// clock.advance(Duration::from_nanos(1));
/// assert!(bucket.try_acquire(1).is_ok());
/// # Ok::<(), tollgate::SetQuotaError>(())
/// ```
#[derive(Debug)]
pub struct AdjustableBucket<C, W: AdjustableWord = DefaultAdjustableWord> {
    /// The generation and the word.
    state: W::Tagged,
    /// The layout of generation `g` is in `slots[g % 2]`, in the form the word `W` keeps it
    /// (seven `u64`s on the 64-bit word, four on the 32-bit word).
    slots: [Slot<W>; 2],
    /// Held by the one change in progress; acquires never look at it.
    changing: AtomicBool,
    clock: C,
}

/// Why [`AdjustableBucket::set_quota`] changed nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum SetQuotaError {
    /// The new quota cannot be used on this clock.
    Config(ConfigError),
    /// Another change is in progress: try again (changes are rare, so they do not queue, and
    /// an interrupt handler changing the quota never waits on the code it interrupted).
    Busy,
}

impl From<ConfigError> for SetQuotaError {
    fn from(error: ConfigError) -> Self {
        SetQuotaError::Config(error)
    }
}

impl core::fmt::Display for SetQuotaError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            SetQuotaError::Config(error) => write!(f, "quota refused: {error}"),
            SetQuotaError::Busy => f.write_str("another quota change is in progress"),
        }
    }
}

impl core::error::Error for SetQuotaError {}

/// One generation's layout, in atomics, under a version.
#[derive(Debug)]
struct Slot<W: AdjustableWord> {
    /// `VALID | generation` when the fields hold that generation's layout; 0 while written.
    version: AtomicU64,
    fields: W::Fields,
}

impl<W: AdjustableWord> Slot<W> {
    fn empty() -> Self {
        Self {
            version: AtomicU64::new(0),
            fields: W::fields(),
        }
    }

    /// The layout of `generation`, or `None` if the slot holds another or is being written.
    #[inline]
    fn read(&self, generation: u32) -> Option<Layout> {
        let expected = VALID | u64::from(generation);
        // Acquire: the fields written before this version was published are visible.
        if self.version.load(Ordering::Acquire) != expected {
            return None;
        }
        let mut words = W::words();
        for (word, cell) in words.as_mut().iter_mut().zip(self.fields.as_ref()) {
            *word = cell.load(Ordering::Relaxed);
        }
        // Acquire: orders the field loads before the version's re-check, so a field from a
        // writer that began meanwhile is caught by a changed version.
        fence(Ordering::Acquire);
        if self.version.load(Ordering::Relaxed) != expected {
            return None;
        }
        W::from_words(&words).map(|stored| *W::unpack(&stored))
    }

    /// Publishes `stored` as `generation`'s. Only one writer at a time.
    fn write(&self, generation: u32, stored: &W::Stored) {
        self.version.store(0, Ordering::Relaxed);
        // Release: a reader that sees any field below also sees the version cleared above.
        fence(Ordering::Release);
        for (cell, value) in self.fields.as_ref().iter().zip(W::to_words(stored).as_ref()) {
            cell.store(*value, Ordering::Relaxed);
        }
        // Release: publishes the fields with the version.
        self.version
            .store(VALID | u64::from(generation), Ordering::Release);
    }
}

impl<C: Clock> AdjustableBucket<C> {
    /// A bucket for `quota`, as [`try_new`](Self::try_new), for quotas known to be good.
    ///
    /// # Panics
    ///
    /// When the quota cannot be used on this clock (see [`ConfigError`]).
    pub fn new(quota: Quota, clock: C) -> Self {
        match Self::try_new(quota, clock) {
            Ok(bucket) => bucket,
            Err(error) => panic!("{}", error.message()),
        }
    }

    /// A bucket for `quota` on the [`DefaultAdjustableWord`]. Reads the clock and applies the
    /// start fill now.
    pub fn try_new(quota: Quota, clock: C) -> Result<Self, ConfigError> {
        Self::try_new_with_word(quota, clock)
    }
}

impl<C: Clock, W: AdjustableWord> AdjustableBucket<C, W> {
    /// A bucket for `quota` on the word `W`, laid out as
    /// [`TokenBucket::try_new_with_word`](crate::TokenBucket::try_new_with_word) lays it out.
    ///
    /// ```
    /// use tollgate::{AdjustableBucket, ManualClock, Quota, Rate};
    ///
    /// let clock = ManualClock::new();
    /// let small = AdjustableBucket::<_, u32>::try_new_with_word(Quota::new(Rate::per_second(5)), &clock)?;
    /// assert!(small.try_acquire(5).is_ok());
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn try_new_with_word(quota: Quota, clock: C) -> Result<Self, ConfigError> {
        let layout = Layout::solve(&quota, C::TICKS_PER_SECOND, W::BITS)?;
        let stored = W::pack(&layout).ok_or(ConfigError::Unrepresentable)?;
        let slots = [Slot::empty(), Slot::empty()];
        slots[0].write(0, &stored);
        let word = layout.fresh(layout.units_at(clock.now()));
        Ok(Self {
            state: W::tagged(0, word),
            slots,
            changing: AtomicBool::new(false),
            clock,
        })
    }

    /// Takes `n` tokens now, or says how long until it could: as
    /// [`TokenBucket::try_acquire`](crate::TokenBucket::try_acquire), under the quota current
    /// when it lands.
    pub fn try_acquire(&self, n: u32) -> Result<(), Denied> {
        if n == 0 {
            return Ok(());
        }
        let now = self.clock.now();
        self.update(
            |p, word, now_units| p.take_now::<C, W>(word, now, now_units, p.cost(n)?),
            now,
        )
    }

    /// Takes `n` tokens now, due after the tokens reserved before them, if that wait is at most
    /// `max_wait`: as [`TokenBucket::reserve`](crate::TokenBucket::reserve), under the quota
    /// current when it lands. Debt is kept in time across a quota change, so a reservation made
    /// before [`set_quota`](Self::set_quota) stays due when it was.
    ///
    /// ```
    /// use core::time::Duration;
    /// use tollgate::{AdjustableBucket, ManualClock, Quota, Rate};
    ///
    /// let clock = ManualClock::new();
    /// let bucket = AdjustableBucket::try_new(Quota::new(Rate::per_second(10)).start_empty(), &clock)?;
    /// let first = bucket.reserve(1, Duration::from_secs(1)).unwrap();
    /// assert_eq!(first.wait(), Duration::from_millis(100));
    /// bucket.set_quota(Quota::new(Rate::per_second(1))).unwrap();
    /// // The first is still due at 100 ms; the next token is one second after it (to the
    /// // nanosecond: a change rounds the debt it carries over up, never down).
    /// let second = bucket.reserve(1, Duration::from_secs(2)).unwrap();
    /// assert_eq!(second.wait().as_millis(), 1_100);
    /// bucket.cancel(second); // nothing came after it: given back
    /// assert_eq!(bucket.reserve(1, Duration::from_secs(2)).unwrap().wait().as_millis(), 1_100);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn reserve(&self, n: u32, max_wait: Duration) -> Result<AdjustableReservation, Denied> {
        let max_wait_ticks = duration_to_ticks_floor::<C>(max_wait);
        self.update_fresh(|p, word, now, now_units| {
            let cost_units = if n == 0 { 0 } else { p.cost(n)? };
            let (due_units, wait_ticks) = if n == 0 {
                (word, 0)
            } else {
                p.reserve(word, now, now_units, cost_units, max_wait_ticks)
                    .map_err(|retry| Denied::insufficient(ticks_to_duration_ceil::<C>(retry)))?
            };
            let reservation = AdjustableReservation {
                layout: *p,
                tokens: n,
                due_units,
                cost_units,
                made_ticks: now,
                due_ticks: now.wrapping_add(wait_ticks),
                wait: ticks_to_duration_ceil::<C>(wait_ticks),
            };
            Ok((due_units, reservation, wait_ticks != 0))
        })
    }

    /// Gives a reservation's tokens back by [`TokenBucket::cancel`](crate::TokenBucket::cancel)'s
    /// rule: all of them if it is not yet due and nothing has been reserved, paused, taken or
    /// changed after it, otherwise nothing. A quota change counts as something after it: the
    /// word was converted to the new quota, and a give-back in the old one's units could mint.
    ///
    /// Pass only reservations made by this bucket.
    pub fn cancel(&self, reservation: AdjustableReservation) {
        self.give_back_by(reservation, true, Layout::give_back);
    }

    /// Gives a reservation's tokens back by `rule(layout, word, now_units, due, cost)`, if the
    /// quota is still the one it was taken under (after a change the word was converted, and a
    /// give-back in the old units could mint), the clock reads at or after the instant it was
    /// made and, when `pending_only`, before the instant it is due: `TokenBucket`'s rule, on
    /// ticks, so that a clock stepped back cannot make a due reservation look pending.
    pub(crate) fn give_back_by(
        &self,
        reservation: AdjustableReservation,
        pending_only: bool,
        rule: impl Fn(&Layout, u64, u64, u64, u64) -> Option<u64>,
    ) {
        if reservation.tokens == 0 {
            return;
        }
        let now = self.clock.now();
        // Signed differences on ticks: 2^63 ticks is centuries on any clock up to 10 GHz.
        let since_made = now.wrapping_sub(reservation.made_ticks) as i64;
        let until_due = reservation.due_ticks.wrapping_sub(now) as i64;
        if since_made < 0 || (pending_only && until_due <= 0) {
            return;
        }
        let _nothing_to_give_back = self.update(
            |p, word, now_units| {
                if *p != reservation.layout {
                    return Err(());
                }
                rule(p, word, now_units, reservation.due_units, reservation.cost_units)
                    .map(|word| (word, ()))
                    .ok_or(())
            },
            now,
        );
    }

    /// Grants nothing for `duration`, then resumes empty: as
    /// [`TokenBucket::pause_for`](crate::TokenBucket::pause_for), rounded up, clamped to
    /// [`max_pause`](Self::max_pause).
    pub fn pause_for(&self, duration: Duration) -> Pause {
        let now = self.clock.now();
        let ticks = duration_to_ticks_ceil::<C>(duration);
        let mut used = None;
        let outcome = self.update(
            |p, word, now_units| {
                used = Some(*p);
                p.pause_step(word, now, now_units, ticks)
            },
            now,
        );
        let p = used.unwrap_or_else(|| self.current().1);
        p.pause_answer::<C>(now, ticks, outcome)
    }

    /// Changes the rate and the burst, safe while other threads acquire. The tokens in the
    /// bucket are kept as they are, capped by the new burst; debt and a pause are kept in time,
    /// cut to the new quota's [`max_pause`](Self::max_pause) (decades on the 64-bit word, one
    /// burst's refill on the 32-bit word); the start fill of `quota` is not used. A quota this clock cannot hold on the word `W`, or another change in progress,
    /// changes nothing.
    pub fn set_quota(&self, quota: Quota) -> Result<(), SetQuotaError> {
        let to = Layout::solve(&quota, C::TICKS_PER_SECOND, W::BITS)?;
        let stored = W::pack(&to).ok_or(ConfigError::Unrepresentable)?;
        // Acquire: sees the slot and state the previous change published.
        if self
            .changing
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return Err(SetQuotaError::Busy);
        }
        let ((generation, mut word), from) = self.current();
        let next = generation.wrapping_add(1);
        self.slots[next as usize % 2].write(next, &stored);
        let now = self.clock.now();
        loop {
            let converted = from.converted(&to, word, now);
            // Release (`publish`): an acquire that reads the new generation also reads its
            // slot. Only this change moves the generation, so a failure is an acquire landing
            // first.
            match W::compare_exchange_tagged(
                &self.state,
                (generation, word),
                (next, converted),
                true,
            ) {
                Ok(()) => break,
                Err((_, actual)) => word = actual,
            }
        }
        // Release: the next change starts from this one's slot and state.
        self.changing.store(false, Ordering::Release);
        Ok(())
    }

    /// Whole tokens in the bucket now; 0 in debt.
    pub fn available(&self) -> u64 {
        let ((_, word), p) = self.current();
        p.tokens(word, p.units_at(self.clock.now()))
    }

    /// The current burst.
    pub fn burst(&self) -> u64 {
        self.current().1.burst()
    }

    /// The longest pause the current layout holds: as
    /// [`TokenBucket::max_pause`](crate::TokenBucket::max_pause) on the same word.
    pub fn max_pause(&self) -> Duration {
        self.current().1.max_pause::<C>()
    }

    /// How long the bucket may go untouched and still read exactly, under the current quota:
    /// as [`TokenBucket::idle_horizon`](crate::TokenBucket::idle_horizon) on the same word.
    pub fn idle_horizon(&self) -> Duration {
        self.current().1.idle_horizon::<C>()
    }

    /// The resolution to which the bucket reads its clock under the current quota: as
    /// [`TokenBucket::resolution`](crate::TokenBucket::resolution).
    pub fn resolution(&self) -> Duration {
        self.current().1.resolution::<C>()
    }

    /// [`resolution`](Self::resolution) in clock ticks.
    pub fn resolution_ticks(&self) -> u64 {
        self.current().1.resolution_ticks()
    }

    /// The rate the bucket enforces under the current quota: as
    /// [`TokenBucket::tick_rate`](crate::TokenBucket::tick_rate).
    pub fn tick_rate(&self) -> TickRate {
        TickRate::of(&self.current().1)
    }

    /// Whether [`tick_rate`](Self::tick_rate) is the current quota's rate exactly.
    pub fn is_exact(&self) -> bool {
        self.current().1.is_exact()
    }

    /// Keeps an idle bucket readable for another idle horizon, as
    /// [`TokenBucket::touch`](crate::TokenBucket::touch).
    pub fn touch(&self) {
        let now = self.clock.now();
        let _already_fresh = self.update(
            |p, word, now_units| p.refreshed(word, now_units).map(|w| (w, ())).ok_or(()),
            now,
        );
    }

    /// The clock this bucket reads.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// The generation, the word and the generation's layout.
    #[inline]
    pub(crate) fn current(&self) -> ((u32, u64), Layout) {
        loop {
            // Acquire (in `load_tagged`): pairs with the Release of the change that wrote this
            // generation.
            let state = W::load_tagged(&self.state);
            if let Some(layout) = self.slots[state.0 as usize % 2].read(state.0) {
                return (state, layout);
            }
            // Stale: two changes landed since the load. Read again.
            spin_loop();
        }
    }

    /// The CAS driver: the transition under the current generation's layout, landing only
    /// while that generation is current.
    #[inline]
    pub(crate) fn update<T, E>(
        &self,
        mut transition: impl FnMut(&Layout, u64, u64) -> Result<(u64, T), E>,
        now_ticks: u64,
    ) -> Result<T, E> {
        let ((mut generation, mut word), mut layout) = self.current();
        loop {
            let (new, out) = transition(&layout, word, layout.units_at(now_ticks))?;
            match self.land(generation, word, new) {
                Ok(()) => return Ok(out),
                Err(Some(actual)) => word = actual,
                Err(None) => ((generation, word), layout) = self.current(),
            }
        }
    }

    /// [`update`](Self::update) for a transition that may compute a wait, the rule of
    /// [`WordCell::update_fresh`](crate::engine::cell::WordCell::update_fresh): a wait is from a
    /// reading taken after the word it lands on, so that a caller delayed between its reading and
    /// a lost compare-exchange is never told to wait for time already past; an answer that
    /// waits for nothing lands on any reading. The transition returns `(word, out, waits)`; the
    /// clock is read once before the word and again only when the answer waits or is refused.
    pub(crate) fn update_fresh<T, E>(
        &self,
        mut transition: impl FnMut(&Layout, u64, u64, u64) -> Result<(u64, T, bool), E>,
    ) -> Result<T, E> {
        let mut now_ticks = self.clock.now();
        let ((mut generation, mut word), mut layout) = self.current();
        // Whether `now_ticks` was read after `word`.
        let mut fresh = false;
        loop {
            let (new, out) = match transition(&layout, word, now_ticks, layout.units_at(now_ticks))
            {
                Ok((new, out, false)) => (new, out),
                _ if !fresh => {
                    now_ticks = self.clock.now();
                    fresh = true;
                    continue;
                }
                Ok((new, out, true)) => (new, out),
                Err(error) => return Err(error),
            };
            match self.land(generation, word, new) {
                Ok(()) => return Ok(out),
                Err(Some(actual)) => word = actual,
                Err(None) => ((generation, word), layout) = self.current(),
            }
            fresh = false;
        }
    }

    /// Writes `new` over `word` while `generation` is current: the word found instead, or `None`
    /// if the generation changed (the caller reads the new one's layout).
    #[inline]
    fn land(&self, generation: u32, word: u64, new: u64) -> Result<(), Option<u64>> {
        // Relaxed (no `publish`): the word is the bucket's state; the layout comes through
        // `current`.
        match W::compare_exchange_tagged(&self.state, (generation, word), (generation, new), false)
        {
            Ok(()) => Ok(()),
            Err((actual_generation, actual)) if actual_generation == generation => Err(Some(actual)),
            Err(_) => Err(None),
        }
    }
}

/// Tokens taken by [`AdjustableBucket::reserve`]: act after [`wait`](Self::wait), or give them
/// back with [`AdjustableBucket::cancel`] while they are not yet due.
#[derive(Debug, PartialEq, Eq)]
#[must_use = "the tokens are taken: act after `wait()`, or give them back with `cancel`"]
pub struct AdjustableReservation {
    /// The layout it was taken under: a give-back under another gives nothing.
    layout: Layout,
    tokens: u32,
    /// The word the reservation left.
    due_units: u64,
    cost_units: u64,
    made_ticks: u64,
    due_ticks: u64,
    wait: Duration,
}

impl AdjustableReservation {
    /// How long after it was made the reservation is due: act then.
    pub fn wait(&self) -> Duration {
        self.wait
    }

    /// The tokens reserved.
    pub fn tokens(&self) -> u32 {
        self.tokens
    }

    /// The clock's reading at which it is due.
    pub fn due_ticks(&self) -> u64 {
        self.due_ticks
    }
}

//! [`TokenBucket`]: one atomic word, one compare-exchange loop.

use core::fmt;
use core::time::Duration;

use crate::clock::{duration_to_ticks_floor, ticks_to_duration_ceil, Clock};
use crate::engine::cell::WordCell;
#[cfg(not(loom))]
use crate::engine::folded::{ConstQuota, Folded};
use crate::engine::layout::Layout;
#[cfg(not(loom))]
use crate::engine::layout::Narrow;
use crate::engine::word::{DefaultWord, Word};
use crate::{ConfigError, Denied, Quota};

mod pause;
pub use pause::Pause;

/// A bucket's bounds in its own units, from [`TokenBucket::unit_bounds`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct UnitBounds {
    /// The units of one token.
    pub units_per_token: u64,
    /// The deepest debt reservations and pauses may run the bucket into.
    pub max_debt_units: u64,
    /// The part of a token above the burst that the bucket keeps when its clock is read to a
    /// resolution coarser than a token's time (under one resolution step; zero otherwise).
    pub above_burst_units: u64,
}

/// A lock-free token bucket whose whole state is one atomic word.
///
/// Tokens accrue at the quota's rate up to its burst; acquiring `n` spends `n`. The refill is
/// computed from the clock on each call, exactly, in integers: nothing runs in the background and
/// over any span the grants equal `floor(start fill + rate × elapsed)`, capped by the burst. Every
/// call reads the clock once and runs one compare-exchange loop; none blocks, allocates, divides
/// on the grant path or panics.
///
/// ```
/// use core::time::Duration;
/// use tollgate::{Denied, ManualClock, Quota, Rate, TokenBucket};
///
/// let clock = ManualClock::new();
/// let bucket = TokenBucket::try_new(Quota::new(Rate::per_second(2)).burst(5), &clock)?;
///
/// for _ in 0..5 {
///     assert!(bucket.try_acquire(1).is_ok()); // the burst
/// }
/// assert_eq!(
///     bucket.try_acquire(1),
///     Err(Denied::insufficient(Duration::from_millis(500)))
/// );
/// clock.advance(Duration::from_millis(500));
/// assert!(bucket.try_acquire(1).is_ok());
/// assert_eq!(bucket.try_acquire(6), Err(Denied::ExceedsCapacity { burst: 5 }));
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
///
/// A bucket can live in a `static`; a bad constant quota is then a compile error:
///
/// ```
/// use tollgate::{ManualClock, Quota, Rate, TokenBucket};
///
/// static CLOCK: ManualClock = ManualClock::new();
/// static GATE: TokenBucket<&ManualClock> =
///     TokenBucket::new(Quota::new(Rate::per_second(10)).start_empty(), &CLOCK);
///
/// assert!(GATE.try_acquire(1).is_err()); // it started empty at its first use
/// ```
///
/// ```compile_fail
/// use tollgate::{ManualClock, Quota, Rate, TokenBucket};
///
/// static CLOCK: ManualClock = ManualClock::new();
/// // A zero rate can grant nothing: this does not compile.
/// static BROKEN: TokenBucket<&ManualClock> =
///     TokenBucket::new(Quota::new(Rate::per_second(0)), &CLOCK);
/// ```
///
/// `W` is the width of the word: [`DefaultWord`] unless chosen with
/// [`try_new_with_word`](Self::try_new_with_word).
///
/// # The rates each word accepts
///
/// The slowest rate is one token per the longest period accepted at a burst of one; the
/// fastest, the most tokens a second accepted at the default burst (one second of the rate).
/// Outside them, [`try_new`](Self::try_new) answers [`ConfigError::Unrepresentable`](crate::ConfigError::Unrepresentable) (or
/// [`ConfigError::ClockTooCoarse`](crate::ConfigError::ClockTooCoarse)). A [`Rate`](crate::Rate)'s period holds at most 2^64
/// nanoseconds (584 years), which bounds the slowest rate on slow clocks.
///
/// | clock | 64-bit word, slowest | 64-bit word, fastest | 32-bit word, slowest | 32-bit word, fastest |
/// |---|---|---|---|---|
/// | 32 768 Hz | 1 per 584 years | 2.9 × 10^11/s | 1 per 584 years | 8 388 608/s |
/// | 1 MHz | 1 per 584 years | 1.3 × 10^11/s | 1 per 583 years | 8 388 608/s |
/// | 1 GHz | 1 per 146 years | 1.28 × 10^11/s | 1 per 390 days | 8 388 608/s |
/// | 10 GHz | 1 per 14.6 years | 8 × 10^10/s | 1 per 68 minutes | 8 388 608/s |
///
/// (`tests/rate_range.rs` finds each edge and pins this table.)
///
/// On a 64-bit host a bucket on the 64-bit word starts a cache line of its own: the word and
/// its layout fill that line (the whole bucket, on a zero-sized clock), and a clock with state
/// sits in the next one. So no neighbour in an array, and none of the clock's fields, shares
/// the line that the word's compare-exchange moves between cores.
#[repr(C)]
pub struct TokenBucket<C, W: Word = DefaultWord> {
    word: W::Atomic,
    /// The layout, in the form the word keeps it (28 bytes on the 32-bit word).
    layout: W::Stored,
    clock: C,
    /// The word's alignment (a cache line for the 64-bit word on a 64-bit host), taking no room.
    align: [W::Align; 0],
}

/// Tokens taken now for use at a later instant: the result of [`TokenBucket::reserve`].
///
/// Reservations are served in the order they were made. Act after [`wait`](Self::wait), or give
/// the tokens back with [`TokenBucket::cancel`].
#[derive(Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[must_use = "the tokens are taken: act after `wait()`, or give them back with `cancel`"]
pub struct Reservation {
    tokens: u32,
    /// The bucket's word when this reservation was granted: the instant, in units, it is due.
    due_units: u64,
    /// The clock tick at which it is due.
    due_ticks: u64,
    /// The clock tick at which it was made.
    made_ticks: u64,
    /// Units the bucket counts beyond the tokens: a part of a [`Limits`](crate::Limits)
    /// reservation held until the others are due (see `TokenBucket::hold_until`), given back
    /// with the tokens.
    held_units: u64,
    wait: Duration,
}

/// A rate in clock ticks: `tokens` every `ticks` ticks. See [`TokenBucket::tick_rate`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TickRate {
    /// Tokens per period.
    pub tokens: u64,
    /// The period, in clock ticks.
    pub ticks: u128,
}

impl TickRate {
    pub(crate) fn of(layout: &Layout) -> Self {
        let (tokens, ticks) = layout.tick_rate();
        TickRate { tokens, ticks }
    }
}

impl Reservation {
    /// How long after the reservation was made the caller may act. Zero when it may act at once.
    pub fn wait(&self) -> Duration {
        self.wait
    }

    /// The clock tick at which the caller may act.
    pub fn due_ticks(&self) -> u64 {
        self.due_ticks
    }

    /// The tokens reserved.
    pub fn tokens(&self) -> u32 {
        self.tokens
    }

    /// Splits off `tokens` of this reservation's (at most all of them) as a reservation of
    /// their own, due at the same instant, for the holder to give back the part it did not use
    /// (a stream whose inner writer took part of what it paid for). A held part
    /// (`held_units`, of `Limits`) stays with `self`.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn split_off(&mut self, tokens: u32) -> Reservation {
        let tokens = tokens.min(self.tokens);
        self.tokens -= tokens;
        Reservation {
            tokens,
            held_units: 0,
            ..*self
        }
    }
}

impl<C: Clock> TokenBucket<C> {
    /// A bucket on the [`DefaultWord`], for `const` and `static` use. It reads its clock at its
    /// first use, and its start fill takes effect then.
    ///
    /// # Panics
    ///
    /// When the quota cannot be used on this clock (see [`ConfigError`]): in a `const` or
    /// `static` that is a compile error. Use [`try_new`](Self::try_new) for quotas known only at
    /// run time.
    #[cfg(not(loom))]
    pub const fn new(quota: Quota, clock: C) -> Self {
        Self::new_with_word(quota, clock)
    }

    /// A bucket on the [`DefaultWord`] (non-`const` under loom).
    #[cfg(loom)]
    pub fn new(quota: Quota, clock: C) -> Self {
        Self::new_with_word(quota, clock)
    }

    /// A bucket on the [`DefaultWord`]. Reads the clock and applies the start fill now.
    pub fn try_new(quota: Quota, clock: C) -> Result<Self, ConfigError> {
        Self::try_new_with_word(quota, clock)
    }
}

/// The layout of `quota` on a clock of `ticks_per_second` for a word of `bits`, for the `const`
/// constructors: a bad quota panics, which in a `static` is a compile error.
pub(crate) const fn solved(quota: &Quota, ticks_per_second: u64, bits: u32) -> Layout {
    match Layout::solve_or_unlimited(quota, ticks_per_second, bits) {
        Ok(layout) => layout,
        Err(error) => panic!("{}", error.message()),
    }
}

// The `const` constructor is written once for each word: a `const fn` cannot call the trait's
// `pack`, and each word keeps its layout in its own form.
#[cfg(not(loom))]
impl<C: Clock> TokenBucket<C, u32> {
    /// Like [`new`](TokenBucket::new), on the 32-bit word. Name the word where the bucket's type
    /// does not (`TokenBucket::<_, u32>::new_with_word`).
    pub const fn new_with_word(quota: Quota, clock: C) -> Self {
        let layout = solved(&quota, C::TICKS_PER_SECOND, 32);
        let Some(layout) = Narrow::pack(&layout) else {
            panic!("{}", ConfigError::Unrepresentable.message())
        };
        Self {
            word: <u32 as Word>::UNUSED,
            layout,
            clock,
            align: [],
        }
    }
}

/// A `static` bucket whose quota is folded into its code: see [`Folded`] and
/// [`static_bucket!`](crate::static_bucket).
#[cfg(not(loom))]
impl<Q: ConstQuota, W: Word> TokenBucket<Q::Clock, Folded<Q, W>> {
    /// A bucket on the word [`Folded<Q, W>`](Folded): `Q`'s quota, its layout a constant of
    /// the type rather than a field, so that the compiler folds it into every check. Like
    /// [`new`](TokenBucket::new) it starts at its first use, and a bad quota is a compile
    /// error.
    pub const fn folded(clock: Q::Clock) -> Self {
        // Solved here, at compile time, so that a bad quota fails the build.
        let _ = Folded::<Q, W>::LAYOUT;
        Self {
            word: <Folded<Q, W> as Word>::UNUSED,
            layout: (),
            clock,
            align: [],
        }
    }
}

#[cfg(not(loom))]
crate::with_word64! {
    impl<C: Clock> TokenBucket<C, u64> {
        /// Like [`new`](TokenBucket::new), on the 64-bit word. Name the word where the bucket's
        /// type does not (`TokenBucket::<_, u64>::new_with_word`).
        pub const fn new_with_word(quota: Quota, clock: C) -> Self {
            Self {
                word: <u64 as Word>::UNUSED,
                layout: solved(&quota, C::TICKS_PER_SECOND, 64),
                clock,
                align: [],
            }
        }
    }
}

impl<C: Clock, W: Word> TokenBucket<C, W> {
    /// Like [`new`](TokenBucket::new), on the word `W` (non-`const` under loom).
    #[cfg(loom)]
    pub fn new_with_word(quota: Quota, clock: C) -> Self {
        let layout = solved(&quota, C::TICKS_PER_SECOND, W::BITS);
        let Some(stored) = W::pack(&layout) else {
            panic!("{}", ConfigError::Unrepresentable.message())
        };
        Self {
            word: W::cell(layout.unused()),
            layout: stored,
            clock,
            align: [],
        }
    }

    /// Like [`try_new`](TokenBucket::try_new), on the word `W`.
    ///
    /// ```
    /// use tollgate::{ManualClock, Quota, Rate, TokenBucket};
    ///
    /// let clock = ManualClock::new();
    /// let small = TokenBucket::<_, u32>::try_new_with_word(Quota::new(Rate::per_second(5)), &clock)?;
    /// assert!(small.try_acquire(5).is_ok());
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn try_new_with_word(quota: Quota, clock: C) -> Result<Self, ConfigError> {
        let layout = Layout::solve_or_unlimited(&quota, C::TICKS_PER_SECOND, W::BITS)?;
        let stored = W::pack(&layout).ok_or(ConfigError::Unrepresentable)?;
        let word = if layout.is_unlimited() {
            layout.unused()
        } else {
            layout.fresh(layout.units_at(clock.now()))
        };
        Ok(Self {
            word: W::cell(word),
            layout: stored,
            clock,
            align: [],
        })
    }

    /// Takes `n` tokens now, or says how long until it could.
    ///
    /// Never waits. `n = 0` always succeeds; `n` above the burst is
    /// [`Denied::ExceedsCapacity`] at once. A denial takes nothing. On an unlimited quota
    /// ([`Quota::unlimited`]) every call succeeds.
    // Inlined into every caller, with the take and its loop: an `#[inline]` function called
    // from more than one place is left a call, and then a denial builds the whole of its
    // `retry_after` for a caller that reads only whether it was granted. Inlined, the
    // compiler drops what is not read.
    #[inline(always)]
    pub fn try_acquire(&self, n: u32) -> Result<(), Denied> {
        if n == 0 {
            return Ok(());
        }
        // The clock first, then the bucket: the layout shares the word's cache line, and under
        // contention the time from the first touch of that line to the compare-exchange is time
        // for another core to take it back. Read after the layout, the clock's read sat inside
        // that window.
        let now = self.clock.now();
        let p = self.layout();
        if p.is_unlimited() {
            return Ok(());
        }
        let Some(cost) = p.cost_within(n) else {
            return Err(Denied::ExceedsCapacity {
                burst: self.burst_when_exceeded(),
            });
        };
        self.cell(&p).try_take::<C>(now, cost)
    }

    /// `Ok` if `n` is within the burst, or the denial of a request above it: what a wait checks
    /// before it joins a line, from the layout (rebuilding the quota would cost a `gcd`).
    #[cfg(any(feature = "embassy-time", feature = "embedded-hal-async"))]
    pub(crate) fn within_burst(&self, n: u32) -> Result<(), Denied> {
        let p = self.layout();
        if p.is_unlimited() || p.cost_within(n).is_some() {
            Ok(())
        } else {
            Err(Denied::ExceedsCapacity {
                burst: self.burst_when_exceeded(),
            })
        }
    }

    /// The burst, for the denial of a request above it, worked out off the hot path from the
    /// bucket alone: its caller keeps no layout in memory for it (on the 32-bit word, where the
    /// layout is unpacked into registers, that would be a copy on the stack at every call). The
    /// denial itself is built by the caller, so that one reading only whether a call was
    /// granted reads no field of it.
    #[cold]
    fn burst_when_exceeded(&self) -> u64 {
        self.layout().burst_on::<W>()
    }

    /// Takes `n` tokens now for use when they have accrued, if that is within `max_wait`.
    ///
    /// Reservations queue in arrival order: each runs the bucket further into debt and is due
    /// when that debt is paid. (After a [`cancel`](Self::cancel) gives tokens back, a new
    /// reservation may be due before an older one: it fills the gap the cancelled one left.)
    /// If the wait would exceed `max_wait`, nothing is taken and `retry_after` says when the same call would succeed. Debt is bounded by the word (decades
    /// on the 64-bit word), so even `max_wait = Duration::MAX` cannot wrap it.
    ///
    /// ```
    /// use core::time::Duration;
    /// use tollgate::{ManualClock, Quota, Rate, TokenBucket};
    ///
    /// let clock = ManualClock::new();
    /// let bucket = TokenBucket::try_new(Quota::new(Rate::per_second(5)).start_empty(), &clock)?;
    /// let first = bucket.reserve(1, Duration::from_secs(1)).unwrap();
    /// let second = bucket.reserve(1, Duration::from_secs(1)).unwrap();
    /// assert_eq!(first.wait(), Duration::from_millis(200));
    /// assert_eq!(second.wait(), Duration::from_millis(400));
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn reserve(&self, n: u32, max_wait: Duration) -> Result<Reservation, Denied> {
        let p = self.layout();
        if n == 0 || p.is_unlimited() {
            let now = self.clock.now();
            return Ok(Reservation {
                tokens: n,
                due_units: 0,
                due_ticks: now,
                made_ticks: now,
                held_units: 0,
                wait: Duration::ZERO,
            });
        }
        let cost = p.cost(n)?;
        let max_wait_ticks = duration_to_ticks_floor::<C>(max_wait);
        // A wait is from a reading taken after the word it lands on (see `update_fresh`).
        self.cell(&p)
            .update_fresh(&self.clock, |word, now, now_units| {
                let (due_units, wait_ticks) = p
                    .reserve(word, now, now_units, cost, max_wait_ticks)
                    .map_err(|retry| Denied::insufficient(ticks_to_duration_ceil::<C>(retry)))?;
                let reservation = Reservation {
                    tokens: n,
                    due_units,
                    due_ticks: now.wrapping_add(wait_ticks),
                    made_ticks: now,
                    held_units: 0,
                    wait: ticks_to_duration_ceil::<C>(wait_ticks),
                };
                Ok((due_units, reservation, wait_ticks != 0))
            })
    }

    /// Gives a reservation's tokens back, if it is not yet due and nothing has been reserved,
    /// paused or taken after it: then all of them, capped by the burst. Otherwise nothing, as a
    /// reservation that is due (the caller is taken to have acted) gives nothing back.
    ///
    /// This is stricter than Go's `CancelAt`, which also gives back the part that later
    /// reservations did not count on: the word cannot tell those from a pause, and giving back
    /// into a pause would grant during it. Nothing is given back either once the clock reads
    /// before the instant the reservation was made (it stepped back: the caller may have acted
    /// already). The waits (`acquire`, `acquire_blocking` and kin) do not reserve ahead,
    /// so a wait given up never strands tokens; this rule concerns explicit reservations only.
    ///
    /// Pass only reservations made by this bucket.
    pub fn cancel(&self, reservation: Reservation) {
        self.give_back_by(reservation, true, Layout::give_back);
    }

    /// Gives a reservation's tokens back by `rule(layout, word, now_units, due, cost)`, if the
    /// clock reads at or after the instant it was made and, when `pending_only`, before the
    /// instant it is due, on ticks (so that neither a word that wrapped nor a clock stepped back
    /// can make a reservation that was due look pending).
    pub(crate) fn give_back_by(
        &self,
        reservation: Reservation,
        pending_only: bool,
        rule: impl Fn(&Layout, u64, u64, u64, u64) -> Option<u64>,
    ) {
        let p = self.layout();
        if reservation.tokens == 0 || p.is_unlimited() {
            return;
        }
        let Ok(cost) = p.cost(reservation.tokens) else {
            return;
        };
        let cost = cost + reservation.held_units;
        let now = self.clock.now();
        // Signed differences on ticks: 2^63 ticks is centuries on any clock up to 10 GHz.
        let since_made = now.wrapping_sub(reservation.made_ticks) as i64;
        let until_due = reservation.due_ticks.wrapping_sub(now) as i64;
        if since_made < 0 || (pending_only && until_due <= 0) {
            return;
        }
        let due = reservation.due_units;
        let _nothing_to_give_back = self.cell(&p).update(now, |word, now_units| {
            rule(&p, word, now_units, due, cost)
                .map(|word| (word, ()))
                .ok_or(())
        });
    }

    /// Counts `reservation`'s tokens as held until the clock reads `at_ticks`, when its holder
    /// uses them (a part of a [`Limits`](crate::Limits) reservation due before the others): the
    /// word moves to where a take at that instant would have left it, if that is later, so that
    /// the bucket refilling meanwhile cannot hold more than its burst with them. When nothing
    /// moved the word since the reservation, the move becomes part of it: a cancel or a refund
    /// gives it back with the tokens, by the same rules.
    pub(crate) fn hold_until(&self, reservation: &mut Reservation, at_ticks: u64) {
        let p = self.layout();
        if p.is_unlimited() {
            return;
        }
        let Ok(cost) = p.cost(reservation.tokens) else {
            return;
        };
        let at_units = p.units_at(at_ticks);
        let moved = self.cell(&p).update(self.clock.now(), |word, now_units| {
            p.held_until(word, now_units, at_units, cost)
                .map(|held| (held, (word, held)))
                .ok_or(())
        });
        if let Ok((word, held)) = moved {
            if word == reservation.due_units {
                // Later by construction: the difference is positive and within the debt bound.
                reservation.held_units += p.elapsed(held, word).unsigned_abs();
                reservation.due_units = held;
            }
        }
    }

    /// Whole tokens in the bucket now; 0 while reservations hold it in debt. `u64::MAX` on an
    /// unlimited quota.
    pub fn available(&self) -> u64 {
        let p = self.layout();
        if p.is_unlimited() {
            return u64::MAX;
        }
        let now_units = p.units_at(self.clock.now());
        p.tokens(self.cell(&p).read(now_units), now_units)
    }

    /// How long until the bucket is full again if nobody takes from it, read to its
    /// resolution: the `reset` a `RateLimit` header reports. Zero when it is full, and always
    /// on an unlimited quota.
    ///
    /// ```
    /// use core::time::Duration;
    /// use tollgate::{ManualClock, Quota, Rate, TokenBucket};
    ///
    /// let clock = ManualClock::new();
    /// let bucket = TokenBucket::try_new(Quota::new(Rate::per_second(4)).burst(4), &clock)?;
    /// assert_eq!(bucket.until_full(), Duration::ZERO);
    /// bucket.try_acquire(3).unwrap();
    /// assert_eq!(bucket.until_full(), Duration::from_millis(750));
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn until_full(&self) -> Duration {
        let now = self.clock.now();
        let p = self.layout();
        if p.is_unlimited() {
            return Duration::ZERO;
        }
        let word = self.cell(&p).read(p.units_at(now));
        let ticks = p.ticks_to_full(word, now);
        ticks_to_duration_ceil::<C>(ticks)
    }

    /// Keeps an idle bucket readable for another [`idle_horizon`](Self::idle_horizon): a full
    /// bucket is re-anchored at now; any other bucket is left as it is. Changes no decision.
    ///
    /// Only the 32-bit word needs it, from a timer or a main loop at least once per horizon
    /// (71 minutes on a 1 MHz timer, 36 hours on a 32 768 Hz one: the table is in [`Word`]'s
    /// docs; once a minute serves every quota up to 10^6 per second on every clock). A
    /// `const`-built bucket not used yet is left as it is: its start fill still takes effect at
    /// its first use.
    pub fn touch(&self) {
        let p = self.layout();
        // The never-used mark is not an instant, so it cannot age; starting the bucket here
        // would apply its start fill early.
        if p.is_unlimited() || W::load(&self.word) == p.unused() {
            return;
        }
        let _already_fresh = self.cell(&p).update(self.clock.now(), |word, now_units| {
            p.refreshed(word, now_units)
                .map(|word| (word, ()))
                .ok_or(())
        });
    }

    /// How long the bucket may go untouched and still read exactly.
    ///
    /// On the 64-bit word at least a century (a quarter of the clock's own range above
    /// 1.46 GHz, and at least a year for rates above about 3 × 10^9 per second on a nanosecond
    /// clock). On the 32-bit word at least an hour for rates up to about 10^6 per second. Past
    /// it, the 32-bit word reads full again for all but `3 · burst / 2^32` units of each turn
    /// of its ring (under 0.6 % of idle lengths); in those it reads at most two bursts in debt,
    /// never fuller than it is, so the worst false wait is the time three bursts take to
    /// accrue.
    /// Call [`touch`](Self::touch) within the horizon to read exactly always; [`Word`]'s docs
    /// give the horizon at the common firmware timer rates, and when to choose the 64-bit word.
    /// `Duration::MAX` on an unlimited quota, which reads nothing.
    pub fn idle_horizon(&self) -> Duration {
        let p = self.layout();
        if p.is_unlimited() {
            return Duration::MAX;
        }
        p.idle_horizon::<C>()
    }

    /// The resolution to which the bucket reads its clock: the most time between two steps of
    /// its reading. On the 64-bit word one tick, or the power of two of ticks that the word's
    /// layout needed; on the 32-bit word one tick, or the time one unit of the word takes to
    /// accrue where that is longer (see the crate docs). Decisions are exact for the clock read
    /// to this resolution. One tick on an unlimited quota.
    pub fn resolution(&self) -> Duration {
        let p = self.layout();
        if p.is_unlimited() {
            return ticks_to_duration_ceil::<C>(1);
        }
        p.resolution::<C>()
    }

    /// [`resolution`](Self::resolution) in clock ticks.
    pub fn resolution_ticks(&self) -> u64 {
        let p = self.layout();
        if p.is_unlimited() {
            return 1;
        }
        p.resolution_ticks()
    }

    /// The rate this bucket enforces, exactly: [`TickRate::tokens`] every [`TickRate::ticks`]
    /// clock ticks.
    ///
    /// It is the quota's rate, or — where the word cannot hold that rate exactly (549 637 per
    /// second on a nanosecond clock for a century, say) — the closest rate below it that it can
    /// hold: lower by less than one part in 2^20 on the 64-bit word (under one part per million,
    /// far inside any clock crystal's tolerance), and by less than one part in 10^3 on the
    /// 32-bit word (in practice under one part per million there too). See
    /// [`is_exact`](Self::is_exact). On an unlimited quota, `u64::MAX` tokens every 0 ticks.
    pub fn tick_rate(&self) -> TickRate {
        let p = self.layout();
        if p.is_unlimited() {
            return TickRate {
                tokens: u64::MAX,
                ticks: 0,
            };
        }
        TickRate::of(&p)
    }

    /// Whether [`tick_rate`](Self::tick_rate) is the quota's rate exactly (always on an
    /// unlimited quota).
    pub fn is_exact(&self) -> bool {
        let p = self.layout();
        p.is_unlimited() || p.is_exact()
    }

    /// Whether the bucket's quota is unlimited ([`Quota::unlimited`]): it grants every call.
    pub fn is_unlimited(&self) -> bool {
        self.layout().is_unlimited()
    }

    /// The quota this bucket enforces: the rate, burst and start fill it was built with. The
    /// bucket keeps no copy of its quota (it fits in one cache line, or half of one on the
    /// 32-bit word), so this is worked out from its layout: where [`is_exact`](Self::is_exact)
    /// is false, the rate is the rounded-down rate it enforces (the one
    /// [`tick_rate`](Self::tick_rate) gives, in nanoseconds), and a window quota
    /// ([`Quota::within`]) comes back as the rate and burst it was split into.
    ///
    /// ```
    /// use tollgate::{ManualClock, Quota, Rate, TokenBucket};
    ///
    /// let quota = Quota::new(Rate::per_minute(171)).burst(20).start_with(5);
    /// let bucket = TokenBucket::try_new(quota, ManualClock::new())?;
    /// assert_eq!(bucket.quota().rate(), Rate::per_minute(171));
    /// assert_eq!((bucket.quota().burst_size(), bucket.quota().start_fill()), (20, 5));
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn quota(&self) -> Quota {
        let p = self.layout();
        if p.is_unlimited() {
            return Quota::unlimited();
        }
        p.quota(C::TICKS_PER_SECOND)
    }

    /// The clock this bucket reads.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// The bucket's bounds in its own units, exactly: what a backend that keeps the same
    /// bucket elsewhere must agree with (`tollgate-redis` sizes its script's debt bound and
    /// ceiling from them, so that the script grants what this bucket grants). Convert them
    /// through the token: `units / units_per_token` tokens. An unlimited quota has none: one
    /// unit a token, no debt and nothing above the burst.
    pub fn unit_bounds(&self) -> UnitBounds {
        let p = self.layout();
        if p.is_unlimited() {
            return UnitBounds {
                units_per_token: 1,
                max_debt_units: 0,
                above_burst_units: 0,
            };
        }
        UnitBounds {
            units_per_token: p.units_per_token.get(),
            max_debt_units: p.max_debt_units(),
            above_burst_units: p.ceiling_units - p.burst_units(),
        }
    }

    /// The bucket's layout, unpacked from the form its word keeps it in (on the 64-bit word, a
    /// reference to it). Always inlined, at every opt-level: a call would return the unpacked
    /// layout through memory, which the caller then reads back field by field.
    #[inline(always)]
    pub(crate) fn layout(&self) -> W::LayoutRef<'_> {
        W::unpack(&self.layout)
    }

    /// The CAS driver over the bucket's word, read with `layout`: its [`layout`](Self::layout).
    #[inline]
    pub(crate) fn cell<'a>(&'a self, layout: &'a Layout) -> WordCell<'a, W> {
        WordCell::new(&self.word, layout)
    }
}

impl<C: Clock + fmt::Debug, W: Word> fmt::Debug for TokenBucket<C, W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenBucket")
            .field("quota", &self.quota())
            .field("word", &W::load(&self.word))
            .field("clock", &self.clock)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ManualClock, Rate};

    #[test]
    fn the_bucket_is_small() {
        // The tokens, the due instant in units and ticks, the instant made, the units held (a
        // `Limits` part) and the wait.
        assert_eq!(core::mem::size_of::<Reservation>(), 56);
        assert!(core::mem::size_of::<TokenBucket<ManualClock>>() <= 192);
    }

    #[test]
    fn a_denial_on_a_reading_older_than_the_word_is_answered_again_on_a_fresh_one() {
        use core::time::Duration;
        let clock = ManualClock::new();
        let quota = Quota::new(Rate::new(1, Duration::from_secs(2))).burst(1);
        let bucket = TokenBucket::try_new(quota, &clock).unwrap();
        // A caller reads the clock, and before it looks at the word another takes the token
        // on a later reading.
        let stale = clock.now();
        clock.advance(Duration::from_millis(300));
        bucket.try_acquire(1).unwrap();
        let p = bucket.layout();
        let cost = p.cost(1).unwrap();
        // On the older reading the bucket reads 300 ms in debt: a wait 300 ms too long.
        let too_long = Err(Denied::insufficient(Duration::from_millis(2_300)));
        assert_eq!(
            bucket.cell(p).try_take::<&ManualClock>(stale, cost),
            too_long
        );
        // Settled: answered on a fresh reading, the wait due now.
        let due = Err(Denied::insufficient(Duration::from_secs(2)));
        assert_eq!(bucket.cell(p).try_take_settled(&&clock, stale, cost), due);
        // A denial on a current reading is answered as it is.
        assert_eq!(
            bucket.cell(p).try_take_settled(&&clock, clock.now(), cost),
            due
        );
        // And one on an older reading that grants on the fresh one grants.
        clock.advance(Duration::from_secs(2));
        assert_eq!(
            bucket.cell(p).try_take_settled(&&clock, stale, cost),
            Ok(())
        );
    }

    #[test]
    fn touching_a_const_bucket_before_its_first_use_changes_nothing() {
        use core::time::Duration;
        // (quota, tokens granted at the first use, one second after the touch)
        let rows = [
            (Quota::new(Rate::per_second(1)).burst(5).start_empty(), 0),
            (Quota::new(Rate::per_second(1)).burst(5).start_with(2), 2),
            (Quota::new(Rate::per_second(1)).burst(5), 5),
        ];
        for (quota, granted) in rows {
            let clock = ManualClock::new();
            let bucket = TokenBucket::<_, u32>::new_with_word(quota, &clock);
            bucket.touch();
            clock.advance(Duration::from_secs(1));
            let mut got = 0;
            while bucket.try_acquire(1).is_ok() {
                got += 1;
            }
            assert_eq!(got, granted, "{quota}");
        }
    }

    #[test]
    fn units_to_full_holds_a_clock_stepped_back_half_the_word() {
        let p =
            Layout::solve(&Quota::new(Rate::per_second(1)).burst(3), 1_000_000_000, 64).unwrap();
        let word = 1_000u64;
        let now_units = word.wrapping_add(p.negative_from); // reads as 2^63 units ahead
        assert_eq!(p.elapsed(now_units, word), i64::MIN);
        let missing = p.units_to_full(word, now_units);
        assert_eq!(missing as u128, p.burst_units() as u128 + (1u128 << 63));
        assert_eq!(p.units_to_full(p.unused(), now_units), 0); // starts full
    }

    #[test]
    fn never_used_mark_is_never_stored() {
        // A transition landing exactly on the mark stores the next unit instead.
        let p =
            Layout::solve(&Quota::new(Rate::per_second(1)).burst(1), 1_000_000_000, 64).unwrap();
        let mark = p.unused();
        let full = mark.wrapping_sub(p.burst_units());
        let (word, _) = p.take(full, mark, p.units_per_token.get(), 0).unwrap();
        assert_eq!(word, mark.wrapping_add(1));
    }
}

//! The one compare-exchange driver: every bucket kind runs its transitions through
//! [`WordCell::update`], so the loop that reads the word, applies a pure transition and retries
//! on contention exists once.

use crate::clock::Clock;
use crate::engine::layout::Layout;
use crate::engine::word::Word;
use crate::Denied;

/// One word and the parameters it is read with: what the CAS driver needs, whether the word
/// sits in a [`TokenBucket`](crate::TokenBucket) or in a slot of a keyed table that shares one set of parameters.
pub(crate) struct WordCell<'a, W: Word> {
    pub(crate) word: &'a W::Atomic,
    pub(crate) layout: &'a Layout,
}

impl<'a, W: Word> WordCell<'a, W> {
    /// Takes `cost` units at `now_ticks` without debt, or says how long until it could: the
    /// whole of `try_acquire`, on any word. Always inlined, as `try_acquire` is.
    #[inline(always)]
    pub(crate) fn try_take<C: Clock + ?Sized>(
        &self,
        now_ticks: u64,
        cost: u64,
    ) -> Result<(), Denied> {
        if W::IN_CRITICAL_SECTION {
            // The load, a first use, the take and its store in one critical section, and the
            // denial's wait worked out after it, with interrupts enabled again.
            let now_units = self.units_at(now_ticks);
            let wide = self.layout.wide_take();
            return self
                .update_in_place(now_units, |word| {
                    Ok((wide.take(word, now_units, cost)?, ()))
                })
                .map_err(|short| self.layout.denied::<C>(now_ticks, short));
        }
        if W::BITS == 64 {
            // What the take reads of the layout, read once before the loop. Under contention a
            // compare-exchange loses to another core's and the next try follows at once, on the
            // line that the lost compare-exchange brought in for writing: every step it takes
            // before its own compare-exchange is time for the other core to take the line back,
            // and a read of the layout after each lost compare-exchange was such a step (see
            // `WideTake`). The 32-bit word's layout is a copy in registers or on the stack
            // already.
            let now_units = self.units_at(now_ticks);
            let word = W::load(self.word);
            if word == Self::UNUSED {
                // Out of line and last: no value lives across the call, so the loop's values
                // need no registers that every call would save and restore, a denial's too.
                return Self::try_take_first::<C>(self.word, self.layout, now_ticks, cost);
            }
            return self.take_loop::<C>(word, now_ticks, now_units, cost);
        }
        let now_units = self.units_at(now_ticks);
        let mut word = W::load(self.word);
        if word == Self::UNUSED {
            word = Self::first_use(self.word, self.layout.fresh(now_units));
        }
        self.take_loop::<C>(word, now_ticks, now_units, cost)
    }

    /// The compare-exchange loop of a take of `cost` units without debt, from `word`: the take
    /// gives the new word or the units short, and a denial carries those units to its
    /// `retry_after`, which works out the wait only when read. No closure, and the take always
    /// inlined: the grant path is the caller's own code at every call site, whatever the
    /// optimizer makes of the number of sites, and a denial divides nothing.
    #[inline(always)]
    fn take_loop<C: Clock + ?Sized>(
        &self,
        mut word: u64,
        now_ticks: u64,
        now_units: u64,
        cost: u64,
    ) -> Result<(), Denied> {
        // The 64-bit word reads what its take needs once, before the loop (see above); the
        // 32-bit word's general take is the smaller code on a 32-bit core.
        let wide = self.layout.wide_take();
        loop {
            let taken = if W::BITS == 64 {
                wide.take(word, now_units, cost)
            } else if self.layout.shift == 0 {
                self.layout.take_narrow(word, now_units, cost)
            } else {
                self.layout.take_without_debt(word, now_units, cost)
            };
            match taken {
                Ok(new) => match self.land(word, new) {
                    Ok(()) => return Ok(()),
                    Err(actual) => word = actual,
                },
                Err(short) => return Err(self.layout.denied::<C>(now_ticks, short)),
            }
        }
    }

    /// [`try_take`](Self::try_take) at the first use of a `const`-built bucket on the 64-bit
    /// word: the first write, then the take. It takes the cell's parts, not the cell, which
    /// its caller would have to write to memory for it.
    #[cold]
    #[inline(never)]
    fn try_take_first<C: Clock + ?Sized>(
        word: &'a W::Atomic,
        layout: &'a Layout,
        now_ticks: u64,
        cost: u64,
    ) -> Result<(), Denied> {
        let cell = WordCell::<W>::new(word, layout);
        Self::first_use(word, layout.fresh(cell.units_at(now_ticks)));
        cell.try_take::<C>(now_ticks, cost)
    }

    /// [`try_take`](Self::try_take) for a caller whose reading may be older than the word it
    /// meets (a keyed limiter or table reads the clock before its lookup and lock): a denial
    /// that finds the bucket in debt, which takes alone never run it into, came from a reading
    /// taken before another caller's grant, and would name a wait longer than the one due now
    /// (by the reading's age: a whole second more, rounded up in a `Retry-After`). It is
    /// answered again on a fresh reading, once. Grants are as `try_take`'s: a reading's age
    /// only denies.
    #[cfg(any(feature = "std", feature = "keyed-table"))]
    #[inline]
    pub(crate) fn try_take_settled<C: Clock + ?Sized>(
        &self,
        clock: &C,
        now_ticks: u64,
        cost: u64,
    ) -> Result<(), Denied> {
        self.try_take::<C>(now_ticks, cost)
            .or_else(|denied| self.settle(clock, now_ticks, cost, denied))
    }

    /// The take again on a fresh reading, if the bucket read in debt at `now_ticks`; otherwise
    /// `denied`.
    #[cfg(any(feature = "std", feature = "keyed-table"))]
    #[cold]
    fn settle<C: Clock + ?Sized>(
        &self,
        clock: &C,
        now_ticks: u64,
        cost: u64,
        denied: Denied,
    ) -> Result<(), Denied> {
        let word = W::load(self.word);
        if word == Self::UNUSED || self.layout.debt(word, self.units_at(now_ticks)) == 0 {
            return Err(denied);
        }
        self.try_take::<C>(clock.now(), cost)
    }

    /// The CAS driver over `word`, laid out by `layout`.
    #[inline]
    pub(crate) fn new(word: &'a W::Atomic, layout: &'a Layout) -> Self {
        WordCell { word, layout }
    }

    /// The word as it reads at `now_units`, writing nothing: a word not used yet reads as its
    /// start fill applied now, which is what its first use will write.
    #[inline]
    pub(crate) fn read(&self, now_units: u64) -> u64 {
        let word = W::load(self.word);
        if word == self.layout.unused() {
            self.layout.fresh(now_units)
        } else {
            word
        }
    }

    /// The never-used mark of this word, a constant.
    const UNUSED: u64 = crate::engine::word::unused_mark(W::BITS);

    /// [`Layout::units_at`] with what the word's width decides settled at compile time: the
    /// 64-bit word is never read in fixed point and its units are never masked (they wrap at
    /// 2^64, or stay below a smaller modulus by construction), so its hot path has no branch on
    /// either; the 32-bit word's units are the low half of a 64-bit number.
    #[inline(always)]
    fn units_at(&self, now_ticks: u64) -> u64 {
        let p = self.layout;
        let quanta = if p.shift == 0 {
            now_ticks
        } else if W::BITS == 32 {
            // Quanta are taken modulo 2^k with k <= 32 on the 32-bit word (`quanta_spare_bits`
            // >= 32, which `Narrow::pack` checks): a mask in 32 bits.
            let mask = u32::MAX.wrapping_shr(u32::from(p.quanta_spare_bits).wrapping_sub(32));
            u64::from((now_ticks >> p.shift) as u32 & mask)
        } else {
            (now_ticks >> p.shift) & p.quanta_mask()
        };
        let product = quanta.wrapping_mul(p.units_per_quantum.get());
        let units = if W::BITS == 64 {
            product
        } else if p.fraction_bits == 0 {
            u64::from(product as u32)
        } else {
            product >> 32
        };
        debug_assert_eq!(units, p.units_at(now_ticks));
        units
    }

    /// The CAS driver: runs `transition(word, now_units)` against the current word until the
    /// compare-exchange lands, or returns its error without writing. Always inlined, so that
    /// `try_acquire` is.
    #[inline(always)]
    pub(crate) fn update<T, E>(
        &self,
        now_ticks: u64,
        mut transition: impl FnMut(u64, u64) -> Result<(u64, T), E>,
    ) -> Result<T, E> {
        let now_units = self.units_at(now_ticks);
        if W::IN_CRITICAL_SECTION {
            return self.update_in_place(now_units, |word| transition(word, now_units));
        }
        let mut word = W::load(self.word);
        if word == Self::UNUSED {
            word = Self::first_use(self.word, self.layout.fresh(now_units));
        }
        self.run(word, now_units, transition)
    }

    /// A whole update in one step of the word's [`Word::update`], for a word whose cell runs
    /// it in one critical section: the first use of a `const`-built bucket (stored even if the
    /// transition then refuses, as [`first_use`](Self::first_use) does), the transition, and
    /// its store, where the compare-exchange driver would take one critical section to load
    /// the word and one more for each compare-exchange.
    #[inline(always)]
    fn update_in_place<T, E>(
        &self,
        now_units: u64,
        mut transition: impl FnMut(u64) -> Result<(u64, T), E>,
    ) -> Result<T, E> {
        W::update(self.word, |word| {
            let unused = word == Self::UNUSED;
            let word = if unused {
                self.layout.fresh(now_units)
            } else {
                word
            };
            match transition(word) {
                Ok((new, out)) => (Some(new), Ok(out)),
                Err(refused) => (unused.then_some(word), Err(refused)),
            }
        })
    }

    /// The compare-exchange loop of [`update`](Self::update), from `word`.
    #[inline(always)]
    fn run<T, E>(
        &self,
        mut word: u64,
        now_units: u64,
        mut transition: impl FnMut(u64, u64) -> Result<(u64, T), E>,
    ) -> Result<T, E> {
        loop {
            let (new, out) = transition(word, now_units)?;
            match self.land(word, new) {
                Ok(()) => return Ok(out),
                Err(actual) => word = actual,
            }
        }
    }

    /// One compare-exchange of the drivers: `old` to `new`, or the word found instead.
    #[inline(always)]
    fn land(&self, old: u64, new: u64) -> Result<(), u64> {
        #[cfg(loom)]
        if crate::engine::sync::models::blind_stores() {
            // A blind store: whatever the word holds now is overwritten.
            let mut current = W::load(self.word);
            while let Err(actual) = W::compare_exchange(self.word, current, new) {
                current = actual;
            }
            return Ok(());
        }
        W::compare_exchange(self.word, old, new)
    }

    /// The CAS driver for a transition whose answer may be a time to wait (`reserve`):
    /// `transition(word, now_ticks, now_units)` gives the new word, the answer, and whether the
    /// answer waits. An answer that waits, or an error (a denial naming its wait), lands only
    /// when computed from a reading taken after the word it replaces was read: a caller delayed
    /// between its reading and a lost compare-exchange is not told to wait for time already
    /// past. An answer that waits for nothing lands on any reading, as `try_take`'s grants do: a
    /// reading's age only ever makes the bucket look emptier. So the clock is read once, before
    /// the word, and again only for a wait; under contention a retry that grants at once does
    /// not put a clock read between the word it read and its compare-exchange.
    #[inline]
    pub(crate) fn update_fresh<C: Clock + ?Sized, T, E>(
        &self,
        clock: &C,
        mut transition: impl FnMut(u64, u64, u64) -> Result<(u64, T, bool), E>,
    ) -> Result<T, E> {
        let mut now_ticks = clock.now();
        let mut word = W::load(self.word);
        // Whether `now_ticks` was read after `word`.
        let mut fresh = false;
        loop {
            let now_units = self.layout.units_at(now_ticks);
            if word == Self::UNUSED {
                word = Self::first_use(self.word, self.layout.fresh(now_units));
            }
            let answer = transition(word, now_ticks, now_units);
            let (new, out) = match answer {
                Ok((new, out, false)) => (new, out),
                _ if !fresh => {
                    now_ticks = clock.now();
                    fresh = true;
                    continue;
                }
                Ok((new, out, true)) => (new, out),
                Err(error) => return Err(error),
            };
            match self.land(word, new) {
                Ok(()) => return Ok(out),
                Err(actual) => {
                    word = actual;
                    fresh = false;
                }
            }
        }
    }

    /// Writes `fresh`, the start fill applied now, at the first use of a `const`-built bucket.
    /// Written even if the first request is then denied, so that the start instant does not
    /// slide with each call. It takes the word and not the cell, so that a caller whose layout
    /// lives in registers (the 32-bit word's) need not copy it to memory for this call.
    ///
    /// `#[inline]`, not out of line: an inline function is compiled into each crate that calls
    /// it, where the optimizer sees that it cannot panic. Out of line it was, in a build with the
    /// `redis` feature, the copy in this crate's own code, an opaque call that might unwind, and
    /// `tests/no_panic.rs` could not prove the hot path. The 64-bit word's `try_acquire` reaches
    /// it only through `try_take_first`, out of line already, so inlining costs its loop nothing
    /// (the same instructions), and on the 32-bit word on x86-64 the grant is no slower. On a
    /// 32-bit core it is left as it was, with no hint: there `#[inline]` grew the firmware's
    /// `try_acquire`.
    #[cold]
    #[cfg_attr(target_pointer_width = "64", inline)]
    fn first_use(word: &W::Atomic, fresh: u64) -> u64 {
        loop {
            match W::compare_exchange(word, Self::UNUSED, fresh) {
                Ok(()) => return fresh,
                Err(actual) if actual != Self::UNUSED => return actual,
                Err(_spurious) => {}
            }
        }
    }
}

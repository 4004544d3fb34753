//! The width of the atomic word that holds a bucket's whole state.

crate::with_word64! {
    use crate::engine::sync::Atomic64;
}
crate::with_atomic64! {
    use crate::engine::sync::AtomicU64;
}
use crate::engine::layout::{Layout, Narrow, Unpacked};
use crate::engine::sync::{AtomicU32, Ordering};

/// The word a bucket keeps its state in: `u64` where the target has native 64-bit atomics,
/// `u32` where it does not.
///
/// On a 32-bit microcontroller without 64-bit atomics the 32-bit word is lock-free, at the cost
/// of a finite idle horizon (see [`TokenBucket::idle_horizon`](crate::TokenBucket::idle_horizon)).
/// Hosts may choose the `u32` word too, to halve the memory of a bucket. A firmware may choose
/// `u64` there with the `word64` feature and get the 64-bit word's guarantees: its cell is then
/// a `u64` behind critical sections (the `critical-section` crate, whose implementation the
/// firmware provides), one per check, safe in interrupt handlers on every core: a handler runs
/// before or after an update, never inside it, and finds no lock held.
///
/// # The 32-bit word on a firmware timer
///
/// The 32-bit word reads exactly for an [idle horizon](crate::TokenBucket::idle_horizon) after
/// its last write; a bucket that may sit full and untouched longer needs
/// [`touch`](crate::TokenBucket::touch) (or `KeyedTable::touch_all`) from a
/// timer or a main loop at least once per horizon. The solver gives the horizon for the quota
/// and the timer (`tests/horizon.rs` pins these figures):
///
/// | timer | rates (per second) | touch at least every |
/// |---|---|---|
/// | 32 768 Hz (RTC) | up to 10^4 | 36 hours |
/// | 32 768 Hz | 10^5 / 10^6 | 11 hours / 71 minutes |
/// | 1 kHz | up to 10^3 / 10^4 / 10^5 | 49 days / 4 days / 11 hours |
/// | 1 MHz (embassy-time's default tick) | up to 10^6 | 71 minutes (2^32 µs) |
/// | 8, 16, 48, 64, 120 MHz, 1 GHz | up to 10^6 | an hour (up to 95 minutes, by rate) |
/// | any | above 10^6 | `2^32 / rate`: 43 s at 10^8 |
///
/// So a timer that calls `touch` once a minute serves every quota up to 10^6 per second on
/// every clock. Without it, an idle bucket past the horizon still reads full in over 99 % of
/// idle lengths and otherwise waits falsely for at most three bursts' refill
/// (see [`idle_horizon`](crate::TokenBucket::idle_horizon)); it never grants a token too many.
///
/// Choose `u64` (feature `word64`) instead when nothing can call `touch` (deep sleep longer
/// than the horizon with no timer, or buckets in a table nobody sweeps), or the firmware needs
/// pauses longer than one burst's refill ([`Pause::Clamped`](crate::Pause)), or a rate the 32-bit word rounds
/// ([`is_exact`](crate::TokenBucket::is_exact) false, on 48 or 120 MHz timers at some
/// rates). The price is a critical section around every update of the word (interrupts masked
/// for its few instructions), in place of one lock-free compare-exchange.
///
/// The trait is sealed: `u32` and `u64` are its only implementations.
pub trait Word: sealed::Sealed + Copy + 'static {
    /// The atomic cell holding the word.
    #[doc(hidden)]
    type Atomic: Send + Sync + core::fmt::Debug;
    /// Width in bits.
    #[doc(hidden)]
    const BITS: u32;
    /// A cell holding the "not yet used" mark, for `const` construction.
    #[cfg(not(loom))]
    #[doc(hidden)]
    const UNUSED: Self::Atomic;
    /// A cell holding `value`.
    #[doc(hidden)]
    fn cell(value: u64) -> Self::Atomic;
    /// The word, widened to `u64`.
    #[doc(hidden)]
    fn load(cell: &Self::Atomic) -> u64;
    /// Replaces `current` with `new`, or returns what the word holds instead. May fail
    /// spuriously; callers loop.
    #[doc(hidden)]
    fn compare_exchange(cell: &Self::Atomic, current: u64, new: u64) -> Result<(), u64>;
    /// Whether [`update`](Self::update) runs in one critical section rather than a
    /// compare-exchange loop: the 64-bit word where the target has no 64-bit atomics.
    #[doc(hidden)]
    const IN_CRITICAL_SECTION: bool = false;
    /// Applies `transition` to the word and stores the word it gives (`None`: stores nothing),
    /// as one atomic step, and returns its answer. On real atomics it is the compare-exchange
    /// loop: load, apply, compare-exchange, and again from the word found on contention. The
    /// 64-bit word's cell on a target without 64-bit atomics runs it once, inside one critical
    /// section.
    #[doc(hidden)]
    #[inline(always)]
    fn update<R>(cell: &Self::Atomic, mut transition: impl FnMut(u64) -> (Option<u64>, R)) -> R {
        let mut word = Self::load(cell);
        loop {
            let (new, out) = transition(word);
            let Some(new) = new else { return out };
            match Self::compare_exchange(cell, word, new) {
                Ok(()) => return out,
                Err(actual) => word = actual,
            }
        }
    }
    /// A bucket's layout as a bucket on this word keeps it: the layout itself on the 64-bit
    /// word, 28 bytes of `u32`s on the 32-bit word.
    #[doc(hidden)]
    type Stored: Copy + Send + Sync + core::fmt::Debug + 'static;
    /// A stored layout, ready to read: a reference to it on the 64-bit word (its code is what
    /// it was before the 32-bit word had a form of its own), a copy unpacked on the stack on
    /// the 32-bit word, whose fields the optimizer reads from the stored ones.
    #[doc(hidden)]
    type LayoutRef<'a>: core::ops::Deref<Target = Layout> + Copy;
    /// A zero-sized type of the alignment a bucket on this word takes: a cache line for the
    /// 64-bit word on a 64-bit host, the word's own elsewhere.
    #[doc(hidden)]
    type Align: Copy + Send + Sync + core::fmt::Debug + 'static;
    /// The stored form of `layout`, a layout the solver made for this word; `None` if it does
    /// not fit it (which the solver never makes).
    #[doc(hidden)]
    fn pack(layout: &Layout) -> Option<Self::Stored>;
    /// The layout `stored` holds.
    #[doc(hidden)]
    fn unpack(stored: &Self::Stored) -> Self::LayoutRef<'_>;
}

crate::with_atomic64! {
    /// A word an [`AdjustableBucket`](crate::AdjustableBucket) can keep beside its quota's
    /// generation, in one atomic twice its width: `u32` in an `AtomicU64`, and `u64` in a lock-free
    /// `AtomicU128` (cmpxchg16b on x86_64, detected at run time with `std`; ldxp/stxp or LSE `casp`
    /// on aarch64). Where no lock-free 128-bit atomic exists, only `u32` implements it, and
    /// [`DefaultAdjustableWord`] is `u32`: a lock never stands in for it silently.
    pub trait AdjustableWord: Word {
        /// The atomic cell holding `generation` and the word.
        #[doc(hidden)]
        type Tagged: Send + Sync + core::fmt::Debug;
        /// A cell holding `generation` and `word`.
        #[doc(hidden)]
        fn tagged(generation: u32, word: u64) -> Self::Tagged;
        /// The generation and the word. Acquire: a reader of a generation sees its quota's slot.
        #[doc(hidden)]
        fn load_tagged(cell: &Self::Tagged) -> (u32, u64);
        /// Replaces `current` with `new`, or returns what the cell holds instead; `publish` makes a
        /// success a Release (a quota change publishing its slot). May fail spuriously.
        #[doc(hidden)]
        fn compare_exchange_tagged(
            cell: &Self::Tagged,
            current: (u32, u64),
            new: (u32, u64),
            publish: bool,
        ) -> Result<(), (u32, u64)>;
        /// The stored layout in `u64`s: four on the 32-bit word, seven on the 64-bit word.
        #[doc(hidden)]
        type Words: AsRef<[u64]> + AsMut<[u64]> + Copy;
        /// Atomics holding as many `u64`s, for a quota's slot.
        #[doc(hidden)]
        type Fields: AsRef<[AtomicU64]> + Send + Sync + core::fmt::Debug;
        /// Fields holding zeros.
        #[doc(hidden)]
        fn fields() -> Self::Fields;
        /// `stored` in words.
        #[doc(hidden)]
        fn to_words(stored: &Self::Stored) -> Self::Words;
        /// Words of zeros, to load fields into.
        #[doc(hidden)]
        fn words() -> Self::Words;
        /// The stored layout `to_words` gave these words, or `None` for words it gives for none.
        #[doc(hidden)]
        fn from_words(words: &Self::Words) -> Option<Self::Stored>;
    }


    /// Which ordering a tagged compare-exchange succeeds with.
    fn success_ordering(publish: bool) -> Ordering {
        if publish {
            Ordering::Release
        } else {
            Ordering::Relaxed
        }
    }

    impl AdjustableWord for u32 {
        type Tagged = AtomicU64;
        type Words = [u64; 4];
        type Fields = [AtomicU64; 4];
        fn fields() -> [AtomicU64; 4] {
            core::array::from_fn(|_| AtomicU64::new(0))
        }
        fn to_words(stored: &Narrow) -> [u64; 4] {
            stored.in_words()
        }
        fn words() -> [u64; 4] {
            [0; 4]
        }
        fn from_words(words: &[u64; 4]) -> Option<Narrow> {
            Narrow::from_words(words)
        }
        fn tagged(generation: u32, word: u64) -> AtomicU64 {
            AtomicU64::new(u64::from(generation) << 32 | word)
        }
        #[inline]
        fn load_tagged(cell: &AtomicU64) -> (u32, u64) {
            split32(cell.load(Ordering::Acquire))
        }
        #[inline]
        fn compare_exchange_tagged(
            cell: &AtomicU64,
            current: (u32, u64),
            new: (u32, u64),
            publish: bool,
        ) -> Result<(), (u32, u64)> {
            let join = |(generation, word): (u32, u64)| u64::from(generation) << 32 | word;
            cell.compare_exchange_weak(
                join(current),
                join(new),
                success_ordering(publish),
                Ordering::Relaxed,
            )
            .map(drop)
            .map_err(split32)
        }
    }

    fn split32(state: u64) -> (u32, u64) {
        ((state >> 32) as u32, state & 0xFFFF_FFFF)
    }
}

// `u64` beside a generation, only where portable-atomic's `AtomicU128` is lock-free: aarch64
// always (ldxp/stxp, or LSE's `casp`), x86_64 where cmpxchg16b is a compile-time target feature
// or, with `std`, detected at run time (every x86_64 CPU since 2006; on one without it
// portable-atomic would fall back to a global lock, so a `no_std` build there keeps `u32`).
crate::with_atomic64_only! {
    /// The word an [`AdjustableBucket`](crate::AdjustableBucket) uses unless told otherwise:
    /// `u32` here, where no lock-free atomic holds a 64-bit word beside a generation.
    pub type DefaultAdjustableWord = u32;
}

crate::with_atomic128! {
    mod wide {
        use super::{success_ordering, AdjustableWord, DefaultWord};
        use crate::engine::layout::Layout;
        use crate::engine::sync::{AtomicU128, AtomicU64, Ordering};

        /// The word an [`AdjustableBucket`](crate::AdjustableBucket) uses unless told otherwise:
        /// the [`DefaultWord`], beside its generation in a lock-free 128-bit atomic.
        pub type DefaultAdjustableWord = DefaultWord;

        impl AdjustableWord for u64 {
            type Tagged = AtomicU128;
            type Words = [u64; 7];
            type Fields = [AtomicU64; 7];
            fn fields() -> [AtomicU64; 7] {
                core::array::from_fn(|_| AtomicU64::new(0))
            }
            fn to_words(stored: &Layout) -> [u64; 7] {
                stored.in_words()
            }
            fn words() -> [u64; 7] {
                [0; 7]
            }
            fn from_words(words: &[u64; 7]) -> Option<Layout> {
                Layout::from_words(words)
            }
            fn tagged(generation: u32, word: u64) -> AtomicU128 {
                AtomicU128::new(join(generation, word))
            }
            #[inline]
            fn load_tagged(cell: &AtomicU128) -> (u32, u64) {
                split(cell.load(Ordering::Acquire))
            }
            #[inline]
            fn compare_exchange_tagged(
                cell: &AtomicU128,
                current: (u32, u64),
                new: (u32, u64),
                publish: bool,
            ) -> Result<(), (u32, u64)> {
                cell.compare_exchange_weak(
                    join(current.0, current.1),
                    join(new.0, new.1),
                    success_ordering(publish),
                    Ordering::Relaxed,
                )
                .map(drop)
                .map_err(split)
            }
        }

        fn join(generation: u32, word: u64) -> u128 {
            u128::from(generation) << 64 | u128::from(word)
        }

        fn split(state: u128) -> (u32, u64) {
            ((state >> 64) as u32, state as u64)
        }

        #[cfg(test)]
        mod tests {
            use super::*;

            #[test]
            fn the_wide_state_is_lock_free_and_keeps_both_halves() {
                // On this machine: cmpxchg16b or ldxp/stxp, not portable-atomic's fallback lock.
                // (Miri runs no inline assembly, so there portable-atomic takes its lock.)
                assert!(cfg!(miri) || AtomicU128::is_lock_free());
                let cell = <u64 as AdjustableWord>::tagged(7, u64::MAX - 1);
                assert_eq!(u64::load_tagged(&cell), (7, u64::MAX - 1));
                let mut current = (7, u64::MAX - 1);
                while let Err(actual) =
                    u64::compare_exchange_tagged(&cell, current, (u32::MAX, 3), true)
                {
                    current = actual;
                }
                assert_eq!(u64::load_tagged(&cell), (u32::MAX, 3));
                // A stale generation fails, whatever the word.
                assert_eq!(
                    u64::compare_exchange_tagged(&cell, (7, 3), (8, 3), false),
                    Err((u32::MAX, 3))
                );
            }
        }
    }
    pub use wide::DefaultAdjustableWord;
}

crate::with_word64! {
    /// The alignment of a bucket on the 64-bit word: one 64-byte cache line on a 64-bit host,
    /// where the word and its layout fill it; a microcontroller with the `word64` feature has no
    /// cache to share and keeps the word's own alignment.
    #[doc(hidden)]
    #[derive(Clone, Copy, Debug)]
    #[cfg_attr(target_pointer_width = "64", repr(align(64)))]
    pub struct CacheAligned;
}

pub(crate) mod sealed {
    pub trait Sealed {}
    impl Sealed for u32 {}
    impl Sealed for u64 {}
}

crate::with_atomic64! {
    /// The word a bucket uses unless told otherwise.
    pub type DefaultWord = u64;
}
crate::without_atomic64! {
    /// The word a bucket uses unless told otherwise.
    pub type DefaultWord = u32;
}

/// The mark a never-used word holds: the high bit. A transition that would store exactly this
/// value stores the next one instead (one unit later, never a token more).
pub(crate) const fn unused_mark(bits: u32) -> u64 {
    1 << (bits - 1)
}

// Relaxed everywhere: the word is the bucket's entire state and no other memory is published
// through it. Each successful compare-exchange replaces exactly the value the transition read,
// so grants follow the word's single modification order whatever the ordering.

impl Word for u32 {
    type Atomic = AtomicU32;
    const BITS: u32 = 32;
    type Align = ();
    type Stored = Narrow;
    type LayoutRef<'a> = Unpacked;
    fn pack(layout: &Layout) -> Option<Narrow> {
        Narrow::pack(layout)
    }
    #[inline(always)]
    fn unpack(stored: &Narrow) -> Unpacked {
        stored.unpack()
    }
    #[cfg(not(loom))]
    const UNUSED: AtomicU32 = AtomicU32::new(unused_mark(32) as u32);
    fn cell(value: u64) -> AtomicU32 {
        AtomicU32::new(value as u32)
    }
    #[inline]
    fn load(cell: &AtomicU32) -> u64 {
        cell.load(Ordering::Relaxed) as u64
    }
    #[inline]
    fn compare_exchange(cell: &AtomicU32, current: u64, new: u64) -> Result<(), u64> {
        cell.compare_exchange_weak(
            current as u32,
            new as u32,
            Ordering::Relaxed,
            Ordering::Relaxed,
        )
        .map(drop)
        .map_err(u64::from)
    }
}

crate::with_word64! {
    /// Where the target has native 64-bit atomics; on others with the `word64` feature, in a
    /// cell behind critical sections (`sync::CriticalU64`).
    impl Word for u64 {
        type Atomic = Atomic64;
        const BITS: u32 = 64;
        type Align = CacheAligned;
        type Stored = Layout;
        type LayoutRef<'a> = &'a Layout;
        fn pack(layout: &Layout) -> Option<Layout> {
            (layout.word_bits == 64).then_some(*layout)
        }
        #[inline(always)]
        fn unpack(stored: &Layout) -> &Layout {
            stored
        }
        #[cfg(not(loom))]
        const UNUSED: Atomic64 = Atomic64::new(unused_mark(64));
        fn cell(value: u64) -> Atomic64 {
            Atomic64::new(value)
        }
        #[inline]
        fn load(cell: &Atomic64) -> u64 {
            cell.load(Ordering::Relaxed)
        }
        #[inline]
        fn compare_exchange(cell: &Atomic64, current: u64, new: u64) -> Result<(), u64> {
            cell.compare_exchange_weak(current, new, Ordering::Relaxed, Ordering::Relaxed)
                .map(drop)
        }
        crate::without_atomic64! {
            const IN_CRITICAL_SECTION: bool = true;
            #[inline(always)]
            fn update<R>(cell: &Atomic64, transition: impl FnMut(u64) -> (Option<u64>, R)) -> R {
                cell.update(transition)
            }
        }
    }
}

//! The 32-bit word's layout as a [`TokenBucket`](crate::TokenBucket) stores it: 28 bytes of
//! `u32`s and flags, align 4, so that a bucket on a zero-sized clock is 32 bytes (half the
//! 64-bit word's cache line). Unpacked into a [`Layout`] on the stack at each call; the
//! optimizer then reads the stored fields where the transition reads the layout's.
//!
//! Why every field fits. The 32-bit word's burst is at most `2^32 >> 9 = 2^23` units (the
//! solver's `BURST_SHARE_BITS`, in fixed point and in quanta alike), so the units per token, the
//! start fill and the ceiling (the burst and less than a step, the step being at most the burst)
//! are below 2^24, and the split between elapsed time and debt below the modulus, at most 2^32.
//! Only the fixed-point multiplier `M` (units in one tick, times 2^32) may pass 2^32, where the
//! rate is a unit or more a tick: it keeps both halves. The word's width is the type's, and the
//! modulus is implied: 2^32 where the clock is read every tick (fixed point, and quanta of one
//! tick), `A · 2^(64 - quanta_spare_bits)` where it is read in quanta of 2^`shift` ticks.

use core::num::{NonZeroU32, NonZeroU64};
use core::ops::Deref;

use super::Layout;

/// A [`Layout`] of the 32-bit word in 28 bytes. Built only by [`Narrow::pack`], which refuses a
/// layout it could not give back exactly.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Narrow {
    /// `A` or `M`, low half then high half.
    units_per_quantum: [u32; 2],
    units_per_token: NonZeroU32,
    negative_from: u32,
    ceiling_units: u32,
    start_units: u32,
    shift: u8,
    fraction_bits: u8,
    quanta_spare_bits: u8,
    exact: bool,
}

/// A [`Narrow`] layout unpacked for one call: what a bucket on the 32-bit word reads its
/// transitions with.
#[derive(Clone, Copy, Debug)]
pub struct Unpacked(Layout);

impl Unpacked {
    /// `layout` as a bucket reads it: a layout known at compile time (`Folded`'s), whose
    /// fields the optimizer folds into the code.
    #[inline(always)]
    pub(crate) const fn of(layout: Layout) -> Unpacked {
        Unpacked(layout)
    }
}

impl Deref for Unpacked {
    type Target = Layout;
    #[inline]
    fn deref(&self) -> &Layout {
        &self.0
    }
}

impl Narrow {
    /// `layout` in 28 bytes, or `None` if it is not a 32-bit word's layout that unpacks to
    /// itself (the solver builds none such; see the module's docs).
    pub(crate) const fn pack(layout: &Layout) -> Option<Narrow> {
        const fn narrow(x: u64) -> Option<u32> {
            if x <= u32::MAX as u64 {
                Some(x as u32)
            } else {
                None
            }
        }
        if layout.word_bits != 32 {
            return None;
        }
        let upq = layout.units_per_quantum.get();
        let Some(units_per_token) = narrow(layout.units_per_token.get()) else {
            return None;
        };
        let Some(units_per_token) = NonZeroU32::new(units_per_token) else {
            return None;
        };
        let (Some(negative_from), Some(ceiling_units), Some(start_units)) = (
            narrow(layout.negative_from),
            narrow(layout.ceiling_units),
            narrow(layout.start_units),
        ) else {
            return None;
        };
        let packed = Narrow {
            units_per_quantum: [upq as u32, (upq >> 32) as u32],
            units_per_token,
            negative_from,
            ceiling_units,
            start_units,
            shift: layout.shift,
            fraction_bits: layout.fraction_bits,
            quanta_spare_bits: layout.quanta_spare_bits,
            exact: layout.exact,
        };
        // The modulus is the one field not stored: it must be the one `unpack` works out.
        // Quanta are taken modulo 2^k, k <= 32 (read in 32 bits: `WordCell::units_at`).
        if (packed.shift != 0 && packed.quanta_spare_bits < 32)
            || packed.modulus() != layout.modulus
        {
            return None;
        }
        Some(packed)
    }

    /// The layout this stores, field for field. Always inlined (see `TokenBucket::layout`).
    #[inline(always)]
    pub(crate) const fn unpack(&self) -> Unpacked {
        let [low, high] = self.units_per_quantum;
        let upq = (high as u64) << 32 | low as u64;
        Unpacked(Layout {
            // Neither is ever 0 (`pack` took them from `NonZero`s); `MIN` only spares the
            // unpacking a panic path.
            units_per_quantum: match NonZeroU64::new(upq) {
                Some(upq) => upq,
                None => NonZeroU64::MIN,
            },
            units_per_token: match NonZeroU64::new(self.units_per_token.get() as u64) {
                Some(upt) => upt,
                None => NonZeroU64::MIN,
            },
            modulus: self.modulus(),
            negative_from: self.negative_from as u64,
            ceiling_units: self.ceiling_units as u64,
            start_units: self.start_units as u64,
            shift: self.shift,
            fraction_bits: self.fraction_bits,
            quanta_spare_bits: self.quanta_spare_bits,
            word_bits: 32,
            exact: self.exact,
        })
    }

    /// `W`: 2^32 for a clock read every tick, else `A · 2^k` with quanta taken modulo 2^k,
    /// `k = 64 - quanta_spare_bits` (`pack` checked that this is the layout's). That is at most
    /// 2^32, so `A · 2^(k - 1)` is worked out in 32 bits: a 64-bit shift by a variable amount
    /// would be a dozen instructions on a 32-bit core, at every call.
    #[inline(always)]
    const fn modulus(&self) -> u64 {
        if self.shift == 0 {
            1 << 32
        } else {
            let half = self.units_per_quantum[0]
                .wrapping_shl(63u32.wrapping_sub(self.quanta_spare_bits as u32));
            (half as u64) << 1
        }
    }
}

crate::with_atomic64! {
    impl Narrow {
        /// The stored form in four `u64`s, for a slot of atomics (`AdjustableBucket` on the 32-bit
        /// word): two `u32`s a word, the four bytes in the last.
        pub(crate) fn in_words(&self) -> [u64; 4] {
            let pair = |low: u32, high: u32| u64::from(high) << 32 | u64::from(low);
            let bytes = [
                self.shift,
                self.fraction_bits,
                self.quanta_spare_bits,
                u8::from(self.exact),
            ];
            [
                pair(self.units_per_quantum[0], self.units_per_quantum[1]),
                pair(self.units_per_token.get(), self.negative_from),
                pair(self.ceiling_units, self.start_units),
                u64::from(u32::from_le_bytes(bytes)),
            ]
        }

        /// The stored form [`in_words`](Self::in_words) gave these words, or `None` where the
        /// units per token are 0.
        pub(crate) fn from_words(words: &[u64; 4]) -> Option<Narrow> {
            let [shift, fraction_bits, quanta_spare_bits, exact] = (words[3] as u32).to_le_bytes();
            Some(Narrow {
                units_per_quantum: [words[0] as u32, (words[0] >> 32) as u32],
                units_per_token: NonZeroU32::new(words[1] as u32)?,
                negative_from: (words[1] >> 32) as u32,
                ceiling_units: words[2] as u32,
                start_units: (words[2] >> 32) as u32,
                shift,
                fraction_bits,
                quanta_spare_bits,
                exact: exact != 0,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Quota, Rate};
    use core::time::Duration;

    #[test]
    fn every_layout_of_the_32_bit_word_packs_and_unpacks_to_itself() {
        // Fixed point (below, at and above a unit a tick) and quanta (slow rates on fast clocks,
        // with and without shifts), exact and rounded.
        let rates = [
            Rate::per_second(2),
            Rate::per_second(10),
            Rate::per_minute(171),
            Rate::per_second(100_000),
            Rate::per_second(50_001),
            Rate::per_second(1_000_000_000),
            Rate::per_day(1),
            Rate::per_day(3),
            Rate::new(1, Duration::from_secs(31_557_600)),
            Rate::new(3, Duration::from_millis(700)),
        ];
        let bursts = [1, 5, 1_000, 10_000];
        let clocks = [32_768, 1_000_000, 12_500_000, 64_000_000, 1_000_000_000];
        // Layouts packed: fixed point, quanta of one tick, quanta of several ticks.
        let mut kinds = [0; 3];
        for rate in rates {
            for burst in bursts {
                for hz in clocks {
                    let quota = Quota::new(rate).burst(burst).start_with(burst / 2);
                    let Ok(p) = Layout::solve(&quota, hz, 32) else {
                        continue;
                    };
                    let narrow = Narrow::pack(&p).expect("packs");
                    assert_eq!(*narrow.unpack(), p, "{quota} on {hz} Hz");
                    assert_eq!(Narrow::from_words(&narrow.in_words()), Some(narrow));
                    // `Layout::keep` relies on it.
                    assert_eq!(p.modulus % 2, 0, "{quota} on {hz} Hz");
                    let kind = match (p.fraction_bits, p.shift) {
                        (32, _) => 0,
                        (_, 0) => 1,
                        _ => 2,
                    };
                    kinds[kind] += 1;
                }
            }
        }
        // The solver reads a clock every tick in fixed point; quanta of one tick are a layout it
        // could make, so they are packed here too.
        for (a, u) in [(1, 1), (3, 7), (1 << 20, 1 << 18)] {
            let p = super::super::layout(0, a, u, 5, 2, 32).unwrap();
            assert_eq!(*Narrow::pack(&p).unwrap().unpack(), p, "{a} / {u}");
            kinds[1] += 1;
        }
        assert!(kinds.iter().all(|&n| n >= 3), "{kinds:?}");
    }

    #[test]
    fn the_32_bit_words_wait_in_quanta_is_the_least() {
        // Slow rates on fast clocks: the 32-bit word reads them in quanta of 2^shift ticks.
        let rates = [
            Rate::per_day(1),
            Rate::per_day(3),
            Rate::new(1, Duration::from_secs(31_557_600)),
        ];
        let (mut layouts, mut checked) = (0, 0);
        for rate in rates {
            for burst in [1, 5, 1_000] {
                for hz in [12_500_000, 64_000_000, 1_000_000_000] {
                    let Ok(p) = Layout::solve(&Quota::new(rate).burst(burst), hz, 32) else {
                        continue;
                    };
                    if p.shift == 0 {
                        continue;
                    }
                    layouts += 1;
                    let a = p.units_per_quantum.get();
                    for now in [0, 1, 12_345_678_901, (1 << 40) - 1, u64::MAX - (1 << 50)] {
                        for units in [1, 2, a - 1, a, a + 1, 3 * a]
                            .into_iter()
                            .filter(|&u| u > 0)
                        {
                            let d = p.ticks_until(now, units);
                            // The least d after which the reading has moved ceil(units / A)
                            // quanta.
                            let quanta = u128::from(units.div_ceil(a));
                            let moved = |d: u64| {
                                ((u128::from(now) + u128::from(d)) >> p.shift)
                                    - u128::from(now >> p.shift)
                            };
                            let at = std::format!("{rate} on {hz} Hz: {units} units from {now}");
                            assert!(moved(d) >= quanta, "{at}");
                            assert!(moved(d - 1) < quanta, "{at}");
                            checked += 1;
                        }
                    }
                }
            }
        }
        assert!(
            layouts >= 3 && checked >= 100,
            "{layouts} layouts, {checked} waits"
        );
    }

    #[test]
    fn a_64_bit_layout_does_not_pack() {
        let p = Layout::solve(&Quota::new(Rate::per_second(2)), 1_000_000_000, 64).unwrap();
        assert_eq!(Narrow::pack(&p), None);
    }

    #[test]
    fn it_is_28_bytes() {
        assert_eq!(core::mem::size_of::<Narrow>(), 28);
        assert_eq!(core::mem::align_of::<Narrow>(), 4);
    }
}

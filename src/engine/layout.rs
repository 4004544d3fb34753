//! How a quota and a clock map onto the bucket's word: exact integer units, computed once.
//!
//! Time in the word is counted in *units*, chosen so that a token is a whole number `U` of
//! them. The word holds one instant in units, modulo `W`: the instant at which the bucket would
//! be empty given every grant so far. A clock reading becomes units in one of two ways:
//!
//! - **Quanta** (the 64-bit word): the clock is read to a *quantum* of 2^`shift` ticks and a
//!   quantum is `A` units, with `A / U = rate · 2^shift` exactly (or rounded down by at most one
//!   part in 2^20). With `shift = 0` and `W = 2^64` units are `ticks · A`, wrapping; with
//!   `shift > 0`, `W = A · 2^k` and units are `((ticks >> shift) mod 2^k) · A`, so the clock's
//!   wrap at 2^64 ticks is a whole number of `W`.
//! - **Fixed point** (the 32-bit word): units are `floor(ticks · M / 2^32) mod 2^32`, the high
//!   half of the wrapping 64-bit product, so a tick is `M / 2^32` units. `M` may be any integer,
//!   so any rate is held with `U` small enough for an hour of instants in 32 bits, exact where
//!   `U` can carry the rate's denominator and otherwise rounded down by under one part in 10^3
//!   (in practice far less). The clock's wrap at 2^64 ticks is a whole number of `W` here too.
//!
//! Differences of instants are read as signed, but not symmetrically: a difference at or above
//! `negative_from` reads as negative (the bucket in debt, or the clock stepped back), anything
//! below it as elapsed time. On the 64-bit word the split is at `W / 2`, so only an idle of more
//! than a century misreads. On the 32-bit word debt is at most one burst, the negative side two
//! bursts and two steps (so that a clock stepped back by up to a burst's refill credits nothing
//! even at the deepest debt), and the burst itself at most `W / 512`: an idle of any length past
//! the horizon reads full again except in `3 · burst / W` of the ring (under 0.6 %), where it
//! reads at most two bursts and two steps in debt: a false wait of at most two refills, the
//! tokens asked and two steps.
//!
//! What a clock stepped back does, exactly. On the 64-bit word, a step back by less than half the
//! word's span (centuries) reads as debt and credits nothing; past that it reads as a long idle.
//! On the 32-bit word, a step back of `s` from a bucket holding level `L` (negative in debt, at
//! least minus one burst) credits nothing while `L - s` stays within the negative side, so for
//! any `s` up to one burst's refill time; a larger step back reads as a long idle: the bucket
//! reads full, which credits at most one burst and ends any debt or pause it held.
//!
//! Why the 32-bit word's false wait is not held to one refill: a wrap landing on a reading of a
//! burst in debt is indistinguishable from a reservation of the whole burst (legitimate), and a
//! reading deeper than that from a clock stepped back by up to a refill at that debt, whose
//! decisions must credit nothing. Clamping such a reading back to the debt bound would be a
//! write at the stepped-back instant, crediting the step back (up to a burst at once); so the
//! bound is what the negative side holds, and `touch` within the horizon avoids it entirely.
//!
//! The solver picks, for the 64-bit word, the finest exact layout whose horizon reaches 100
//! years (or 2^62 ticks, a quarter of the clock's own range, for clocks above 1.46 GHz), then
//! one rounded down by at most 2^-20, then — for rates above about 3 × 10^9 per second on a
//! nanosecond clock — the exact layout with the longest horizon of at least a year. For the
//! 32-bit word it picks the `U` that reads the clock to the tick (or as fine as an hour of
//! horizon allows), a multiple of the rate's denominator where one fits. In every layout one
//! step of the reading accrues no more than a drained bucket can take in, so the burst cap never
//! eats the rate. Debt from reservations is bounded, so no sequence of calls can wrap the word
//! into a gift of tokens.

mod approx;
mod narrow;
mod pause;
mod quota;
mod transition;

pub(crate) use narrow::{Narrow, Unpacked};
pub(crate) use transition::ticks_until;

use core::num::NonZeroU64;

use crate::rate::gcd;
use crate::{ConfigError, Quota};

/// 100 Julian years in seconds.
const CENTURY_SECS: u128 = 100 * 31_557_600;
/// One Julian year in seconds: the shortest horizon the 64-bit word accepts.
const YEAR_SECS: u128 = 31_557_600;
/// The 32-bit word's fixed-point fraction: units are the high half of `ticks · M`.
const FIXED_FRACTION_BITS: u32 = 32;
/// The 32-bit word's burst is at most `W >> BURST_SHARE_BITS` units.
const BURST_SHARE_BITS: u32 = 9;
/// The 32-bit word rounds a rate down by at most one part in this many.
const FIXED_MAX_ROUNDING: u128 = 1_000;

/// A bucket's configuration in the word's units: six `u64`s and five bytes (56 bytes), so that a
/// bucket on a zero-sized clock and the 64-bit word (this and its word) fits in one 64-byte cache
/// line. A bucket on the 32-bit word stores it in 28 bytes ([`Narrow`]: `u32`s, the modulus
/// and the width implied), so that with its word it is 32 bytes. Everything the solver can
/// derive from these is a method, not a field: the burst, its units, the debt bound, the idle
/// horizon, the masks and the never-used mark.
///
/// `pub` only so that [`Word`](crate::Word)'s hidden items can name it: its module is private.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// `A`: units in one quantum; in fixed point, `M`: units in one tick times 2^32.
    pub units_per_quantum: NonZeroU64,
    /// `U`: units in one token.
    pub units_per_token: NonZeroU64,
    /// `W`, the word's modulus; 0 stands for 2^64.
    pub modulus: u64,
    /// Differences at or above it read as negative: `W / 2` on the 64-bit word, `W` less the
    /// negative window on the 32-bit word.
    pub negative_from: u64,
    /// The most units the bucket holds: the burst plus less than one step of the reading, at
    /// most a token's fraction (`burst + min(step, U) - 1`). A caller polling at every step then
    /// keeps the fraction of a token a step brought beyond the burst, so the cap never eats the
    /// rate, while no instant grants more than the burst in whole tokens.
    pub ceiling_units: u64,
    /// The start fill in units.
    pub start_units: u64,
    /// The clock is read to 2^`shift` ticks.
    pub shift: u8,
    /// 0 for quanta; 32 in fixed point, where units are the high half of `ticks · M`.
    pub fraction_bits: u8,
    /// Quanta are taken modulo 2^(64 - `quanta_spare_bits`).
    pub quanta_spare_bits: u8,
    /// The word's width: 32 or 64.
    pub word_bits: u8,
    /// Whether the enforced rate is the quota's rate exactly, rather than rounded down.
    pub exact: bool,
}

crate::with_atomic128! {
    /// The layout in seven `u64`s, for a slot of atomics (`AdjustableBucket` on the 64-bit word).
    impl Layout {
        /// The fields, the five bytes in the last word.
        pub(crate) fn in_words(&self) -> [u64; 7] {
            let bytes = [
                self.shift,
                self.fraction_bits,
                self.quanta_spare_bits,
                self.word_bits,
                u8::from(self.exact),
                0,
                0,
                0,
            ];
            [
                self.units_per_quantum.get(),
                self.units_per_token.get(),
                self.modulus,
                self.negative_from,
                self.ceiling_units,
                self.start_units,
                u64::from_le_bytes(bytes),
            ]
        }

        /// The layout [`in_words`](Self::in_words) gave these words, or `None` where a field that
        /// cannot be 0 is.
        pub(crate) fn from_words(words: &[u64; 7]) -> Option<Layout> {
            let [shift, fraction_bits, quanta_spare_bits, word_bits, exact, ..] =
                words[6].to_le_bytes();
            Some(Layout {
                units_per_quantum: NonZeroU64::new(words[0])?,
                units_per_token: NonZeroU64::new(words[1])?,
                modulus: words[2],
                negative_from: words[3],
                ceiling_units: words[4],
                start_units: words[5],
                shift,
                fraction_bits,
                quanta_spare_bits,
                word_bits,
                exact: exact != 0,
            })
        }
    }
}

/// What the layout derives from its fields, off the grant path.
impl Layout {
    /// The capacity in units: the ceiling less the part of a step it keeps beyond the burst.
    #[inline]
    pub(crate) const fn burst_units(&self) -> u64 {
        let step = self.step_units();
        let upt = self.units_per_token.get();
        self.ceiling_units + 1 - if step < upt { step } else { upt }
    }

    /// The capacity in tokens.
    #[inline]
    pub(crate) const fn burst(&self) -> u64 {
        crate::engine::div::div(self.burst_units(), self.units_per_token.get())
    }

    /// The deepest debt reservations and pauses may run, in units: `W / 4` on the 64-bit word,
    /// one burst on the 32-bit word.
    #[inline]
    pub(crate) const fn max_debt_units(&self) -> u64 {
        if self.word_bits == 32 {
            self.burst_units()
        } else if self.modulus == 0 {
            1 << 62
        } else {
            self.modulus / 4
        }
    }

    /// The never-used mark: the top bit of the word (a choice of two constants, not a shift,
    /// which on a 32-bit core would be a dozen instructions).
    #[inline]
    pub(crate) const fn unused(&self) -> u64 {
        if self.word_bits == 32 {
            crate::engine::word::unused_mark(32)
        } else {
            crate::engine::word::unused_mark(64)
        }
    }

    /// The mask quanta are taken with.
    #[inline]
    pub(crate) const fn quanta_mask(&self) -> u64 {
        u64::MAX >> self.quanta_spare_bits
    }

    /// The mask units are taken with after multiplying: the 32-bit word's 32 bits, and none on
    /// the 64-bit word. (In the 32-bit word's quanta layouts the product stays below the modulus,
    /// at most 2^32, so the mask changes nothing there.)
    #[inline]
    pub(crate) const fn units_mask(&self) -> u64 {
        if self.word_bits == 32 {
            u32::MAX as u64
        } else {
            u64::MAX
        }
    }

    /// The modulus as a `u128`, 2^64 included.
    const fn ring(&self) -> u128 {
        if self.modulus == 0 {
            1 << 64
        } else {
            self.modulus as u128
        }
    }

    /// How long the word stays readable without a write, in ticks (saturating): a full bucket
    /// idle that long still reads below `negative_from`.
    pub(crate) const fn horizon_ticks(&self) -> u64 {
        let m = self.units_per_quantum.get() as u128;
        let ticks = if self.fraction_bits == 0 {
            // A full bucket idle for h quanta reads its ceiling + h · A (the ceiling is below the
            // burst plus one quantum).
            let ceiling_bound = self.burst_units() as u128 + m;
            let quanta = (self.negative_from as u128 - 1 - ceiling_bound) / m;
            if quanta > (u64::MAX >> self.shift) as u128 {
                return u64::MAX;
            }
            quanta << self.shift
        } else {
            // Idle from a full write: the reading stays below `negative_from` while
            // ceiling + floor(ticks · M / 2^32) + 1 < W - window.
            let window = self.ring() - self.negative_from as u128;
            let room = self.ring() - (window + self.ceiling_units as u128 + 2);
            (room << self.fraction_bits) / m
        };
        if ticks > u64::MAX as u128 {
            u64::MAX
        } else {
            ticks as u64
        }
    }
}

impl Layout {
    /// The `shift` that marks an unlimited layout: no clock is read to 2^255 ticks, so no solved
    /// layout has it.
    const UNLIMITED_SHIFT: u8 = u8::MAX;

    /// The layout of an unlimited quota on a word of `bits`: it packs into either word, and a
    /// bucket checks [`is_unlimited`](Self::is_unlimited) before it reads anything else of it.
    pub(crate) const fn unlimited(bits: u32) -> Self {
        let (modulus, quanta_spare_bits) = if bits == 32 { (1 << 32, 32) } else { (0, 0) };
        Layout {
            units_per_quantum: NonZeroU64::MIN,
            units_per_token: NonZeroU64::MIN,
            modulus,
            // A ceiling no `n` exceeds, so that a request of any size costs its `n` units.
            negative_from: u32::MAX as u64,
            ceiling_units: u32::MAX as u64,
            start_units: 0,
            shift: Self::UNLIMITED_SHIFT,
            fraction_bits: 0,
            quanta_spare_bits,
            word_bits: bits as u8,
            exact: true,
        }
    }

    /// Whether this is the layout of an unlimited quota, which grants everything.
    #[inline(always)]
    pub(crate) const fn is_unlimited(&self) -> bool {
        self.shift == Self::UNLIMITED_SHIFT
    }

    /// [`solve`](Self::solve), and an unlimited quota's layout for an unlimited quota: for the
    /// limiters that take one.
    pub(crate) const fn solve_or_unlimited(
        quota: &Quota,
        ticks_per_second: u64,
        bits: u32,
    ) -> Result<Self, ConfigError> {
        if quota.is_unlimited() {
            Ok(Self::unlimited(bits))
        } else {
            Self::solve(quota, ticks_per_second, bits)
        }
    }

    /// Solves for the layout of `quota` on a clock of `ticks_per_second` in a word of `bits`
    /// bits (32 or 64). An unlimited quota is [`ConfigError::UnlimitedNotTaken`].
    pub(crate) const fn solve(
        quota: &Quota,
        ticks_per_second: u64,
        bits: u32,
    ) -> Result<Self, ConfigError> {
        if let Err(error) = quota.validate() {
            return Err(error);
        }
        match Self::solve_layout(quota, ticks_per_second, bits) {
            Ok(p) => p.phased(quota).holding_the_window(quota, ticks_per_second),
            Err(e) => Err(e),
        }
    }

    /// The layout with the quota's phase taken off its start: `index / parts` of a token, in
    /// units rounded down (a unit is at most a tick), so under one token.
    /// A start below zero is kept as its instant modulo the word, `W - deficit`, which the
    /// word reads as that much debt ([`start_level`](Self::start_level)): the deficit is under
    /// a token, within every word's debt bound and its negative side.
    const fn phased(mut self, quota: &Quota) -> Self {
        let (index, parts) = quota.phase_fraction();
        if index == 0 {
            return self;
        }
        let upt = self.units_per_token.get() as u128;
        // index < parts (validated): under one token.
        let phase = (index as u128 * upt / parts as u128) as u64;
        self.start_units = if self.start_units >= phase {
            self.start_units - phase
        } else {
            (self.ring() - (phase - self.start_units) as u128) as u64
        };
        self
    }

    /// The level a bucket starts at, in units: negative when a phase runs it into debt.
    pub(crate) fn start_level(&self) -> i64 {
        self.elapsed(self.start_units, 0)
    }

    /// A window quota keeps its cap only if two steps of the reading accrue under a token.
    const fn holding_the_window(
        self,
        quota: &Quota,
        ticks_per_second: u64,
    ) -> Result<Self, ConfigError> {
        let rate = quota.rate();
        let tokens_per_tick = (
            rate.tokens() as u128 * 1_000_000_000,
            rate.period_ns() as u128 * ticks_per_second as u128,
        );
        if quota.window_fits_resolution(self.resolution_ticks(), tokens_per_tick) {
            Ok(self)
        } else {
            Err(ConfigError::WindowTooCoarse)
        }
    }

    const fn solve_layout(
        quota: &Quota,
        ticks_per_second: u64,
        bits: u32,
    ) -> Result<Self, ConfigError> {
        // `solve` validated the quota.
        let rate = quota.rate();
        if ticks_per_second == 0 {
            return Err(ConfigError::ZeroClockFrequency);
        }
        let burst = quota.burst_size();
        let start = quota.start_fill();

        // Tokens per tick, a / b in lowest terms.
        let a0 = rate.tokens() as u128 * 1_000_000_000;
        let b0 = rate.period_ns() as u128 * ticks_per_second as u128;
        let g = gcd(a0, b0);
        let (a, b) = (a0 / g, b0 / g);

        // One tick is the finest step any layout reads; if it alone overfills a drained
        // bucket, no layout keeps the rate.
        if !step_fits(a, b, b * burst as u128) {
            return Err(ConfigError::ClockTooCoarse);
        }

        if bits == 32 {
            return match fixed_point(a, b, burst, start, ticks_per_second) {
                Err(ConfigError::Unrepresentable) => {
                    narrow_quanta(a, b, burst, start, ticks_per_second)
                }
                other => other,
            };
        }

        let century = CENTURY_SECS * ticks_per_second as u128;
        let clock_limit = 1u128 << 62;
        let target_ticks = if century < clock_limit {
            century
        } else {
            clock_limit
        };
        if let Some(p) = first_layout(a, b, burst, start, bits, target_ticks, true) {
            return Ok(p);
        }
        let year = YEAR_SECS * ticks_per_second as u128;
        // A token or more a tick: a century would need the clock read coarser than a tick, so
        // the finest exact layout with a shorter horizon (at least a year) comes first.
        if a >= b {
            if let Some(p) = first_layout(a, b, burst, start, bits, year, true) {
                return Ok(p);
            }
        }
        if let Some(p) = first_layout(a, b, burst, start, bits, target_ticks, false) {
            return Ok(p);
        }
        // Rates too high for a century in 64 bits: the layout with the longest horizon, down to
        // a year.
        let mut target = target_ticks / 2;
        while target >= year {
            if let Some(p) = first_layout(a, b, burst, start, bits, target, true) {
                return Ok(p);
            }
            if let Some(p) = first_layout(a, b, burst, start, bits, target, false) {
                return Ok(p);
            }
            target /= 2;
        }
        if let Some(p) = first_layout(a, b, burst, start, bits, year, true) {
            return Ok(p);
        }
        Err(ConfigError::Unrepresentable)
    }

    /// Whether the bucket enforces the quota's rate exactly, rather than rounded down.
    pub(crate) const fn is_exact(&self) -> bool {
        self.exact
    }

    /// The most ticks between two steps of the bucket's reading of its clock.
    pub(crate) const fn resolution_ticks(&self) -> u64 {
        if self.fraction_bits == 0 {
            return 1 << self.shift;
        }
        // A unit is 2^32 / M ticks; rounded up, and at least one tick.
        let m = self.units_per_quantum.get() as u128;
        let ticks = (1u128 << self.fraction_bits).div_ceil(m);
        if ticks > u64::MAX as u128 {
            u64::MAX
        } else if ticks == 0 {
            1
        } else {
            ticks as u64
        }
    }

    /// The enforced rate: `(tokens, ticks)`, that many tokens every that many ticks.
    pub(crate) const fn tick_rate(&self) -> (u64, u128) {
        (
            self.units_per_quantum.get(),
            (self.units_per_token.get() as u128) << (self.shift + self.fraction_bits),
        )
    }

    /// The most units one step of the reading adds.
    pub(crate) const fn step_units(&self) -> u64 {
        let a = self.units_per_quantum.get();
        if self.fraction_bits == 0 {
            a
        } else {
            // floor((t + 1) M / 2^f) - floor(t M / 2^f) <= ceil(M / 2^f)
            let f = self.fraction_bits;
            (a >> f) + (a & ((1 << f) - 1) != 0) as u64
        }
    }
}

/// What the layout reports through the buckets' accessors.
impl Layout {
    /// How long the word stays readable without a write.
    pub(crate) fn idle_horizon<C: crate::Clock + ?Sized>(&self) -> core::time::Duration {
        let ticks = self.horizon_ticks();
        let per_second = C::TICKS_PER_SECOND;
        let nanos = (ticks % per_second) as u128 * 1_000_000_000 / per_second as u128;
        core::time::Duration::new(ticks / per_second, nanos as u32)
    }

    /// The most time between two steps of the reading, rounded up to the nanosecond.
    pub(crate) fn resolution<C: crate::Clock + ?Sized>(&self) -> core::time::Duration {
        crate::clock::ticks_to_duration_ceil::<C>(self.resolution_ticks())
    }
}

/// The 32-bit word's layout: fixed point, with `U` chosen so that an hour of the clock fits
/// beside twice the burst in 2^32 units, as fine as one unit a tick where that fits, and a
/// multiple of the rate's denominator (exact) where one fits.
const fn fixed_point(
    a: u128,
    b: u128,
    burst: u64,
    start: u64,
    ticks_per_second: u64,
) -> Result<Layout, ConfigError> {
    let f = FIXED_FRACTION_BITS;
    let ring: u128 = 1 << 32;
    // The burst gets at most W / 512 units, so that the misread share of the ring (the burst
    // and the negative window of two bursts) stays under 0.6 %.
    let u_band = (ring >> BURST_SHARE_BITS) / burst as u128;
    if u_band == 0 {
        return Err(ConfigError::Unrepresentable);
    }
    // An hour of ticks plus three bursts in the ring: U (hour · a / b + 3 burst) <= W - 2.
    let hour_ticks = 3_600 * ticks_per_second as u128;
    let u_hour = match hour_ticks.checked_mul(a) {
        Some(hour) => match (3 * burst as u128).checked_mul(b) {
            Some(bursts) => match (ring - 2).checked_mul(b) {
                Some(room) => room / (hour + bursts),
                None => 0,
            },
            None => 0,
        },
        None => 0,
    };
    let u_max = if u_hour < u_band { u_hour } else { u_band };
    // At most one unit a tick: reading finer than the clock gains nothing.
    let u_fine = if b / a == 0 { 1 } else { b / a };
    // U needed to round the rate down by under 1 / FIXED_MAX_ROUNDING: b · R / (a · 2^32).
    // (a < 2^95: tokens below 2^64 times 10^9.)
    let u_rounding = match b.checked_mul(FIXED_MAX_ROUNDING) {
        Some(br) => br.div_ceil(a << f),
        None => u128::MAX,
    };
    // Exact when U carries the part of b that 2^32 · a does not cancel.
    let u_exact = b / gcd(b, a << f);

    let target = if u_fine < u_max { u_fine } else { u_max };
    let target = if target == 0 { 1 } else { target };
    let units_per_token = if u_exact <= target {
        target / u_exact * u_exact
    } else if u_exact <= u_max {
        u_exact
    } else if target >= u_rounding {
        target
    } else if u_rounding <= u_band {
        // Short of an hour at this rate: held to the rounding bound, with a shorter horizon.
        u_rounding
    } else {
        return Err(ConfigError::Unrepresentable);
    };
    // U · a < 2^96 keeps U · a · 2^32 in a u128.
    let scaled = match units_per_token.checked_mul(a) {
        Some(ua) if ua <= u128::MAX >> f => ua << f,
        _ => return Err(ConfigError::Unrepresentable),
    };
    let m = scaled / b;
    if m == 0 || m > u64::MAX as u128 {
        return Err(ConfigError::Unrepresentable);
    }
    let exact = m * b == scaled;
    let burst_units = burst as u128 * units_per_token;
    let Some(units_per_quantum) = NonZeroU64::new(m as u64) else {
        return Err(ConfigError::Unrepresentable);
    };
    let Some(upt) = NonZeroU64::new(units_per_token as u64) else {
        return Err(ConfigError::Unrepresentable);
    };
    // The negative window holds the deepest debt and, beyond it, a clock stepped back by up to
    // one burst's refill.
    let step = m.div_ceil(1 << f);
    // (Two steps more, for the rounding of a reading at either end of the step back.)
    // The deepest debt is one burst (`Layout::max_debt_units`).
    let window = 2 * burst_units + 2 * step;
    let ceiling = burst_units + min(step, units_per_token) - 1;
    // Idle from a full write: the reading stays below `negative_from` while
    // ceiling + floor(ticks · M / 2^32) + 1 < W - window.
    if ring < window + ceiling + 2 {
        return Err(ConfigError::Unrepresentable);
    }
    let layout = Layout {
        units_per_quantum,
        units_per_token: upt,
        modulus: ring as u64,
        negative_from: (ring - window) as u64,
        ceiling_units: ceiling as u64,
        start_units: start * upt.get(),
        shift: 0,
        fraction_bits: f as u8,
        quanta_spare_bits: 0,
        word_bits: 32,
        exact,
    };
    if !steps_fit(&layout) {
        return Err(ConfigError::ClockTooCoarse);
    }
    Ok(layout)
}

/// The 32-bit word's layout for rates too slow for fixed point on their clock (a few a day on a
/// gigahertz clock: a tick is too small a share of a token for 2^32 units): the clock read in
/// power-of-two quanta, an hour of horizon where it fits, the rate exact or rounded down by at
/// most one part in 1 024, else the longest horizon an exact layout gives.
const fn narrow_quanta(
    a: u128,
    b: u128,
    burst: u64,
    start: u64,
    ticks_per_second: u64,
) -> Result<Layout, ConfigError> {
    let hour = 3_600 * ticks_per_second as u128;
    if let Some(p) = first_layout(a, b, burst, start, 32, hour, true) {
        return Ok(p);
    }
    if let Some(p) = first_layout(a, b, burst, start, 32, hour, false) {
        return Ok(p);
    }
    let mut target = hour / 2;
    while target > 0 {
        if let Some(p) = first_layout(a, b, burst, start, 32, target, true) {
            return Ok(p);
        }
        target /= 2;
    }
    Err(ConfigError::Unrepresentable)
}

/// Whether one step of the reading fits in the burst. With the ceiling a step's fraction of a
/// token beyond the burst is kept, so then the cap never eats the rate; a step larger than the
/// burst would lose the excess at every step.
const fn steps_fit(p: &Layout) -> bool {
    step_fits(
        p.step_units() as u128,
        p.units_per_token.get() as u128,
        p.burst_units() as u128,
    )
}

const fn step_fits(step: u128, _units_per_token: u128, burst_units: u128) -> bool {
    step <= burst_units
}

/// The finest layout of `a / b` tokens per tick whose horizon reaches `target_ticks`: exact, or
/// with the rate rounded down by at most one part in 2^[`ROUNDING_BITS`].
const fn first_layout(
    a: u128,
    b: u128,
    burst: u64,
    start: u64,
    bits: u32,
    target_ticks: u128,
    exact: bool,
) -> Option<Layout> {
    let mut shift = 0;
    while shift < 64 && a <= (u128::MAX >> shift) {
        let per_quantum = a << shift;
        let found = if exact {
            let g = gcd(per_quantum, b);
            layout(shift, per_quantum / g, b / g, burst, start, bits)
        } else {
            approximate(shift, per_quantum, b, burst, start, bits, target_ticks)
        };
        if let Some(p) = found {
            if p.horizon_ticks() as u128 >= target_ticks {
                return Some(p);
            }
        }
        shift += 1;
    }
    None
}

/// The relative error allowed when the rate is rounded down: 2^-20, under one part per million.
pub(crate) const ROUNDING_BITS: u32 = 20;
/// The same for the 32-bit word's quanta (slow rates on fast clocks): one part in 1 024.
const NARROW_ROUNDING_BITS: u32 = 10;

/// The best rounded-down layout for a quantum of 2^`shift` ticks, whose rate per quantum is
/// `n / d` tokens, if it is within 2^-[`ROUNDING_BITS`] of exact.
const fn approximate(
    shift: u32,
    n: u128,
    d: u128,
    burst: u64,
    start: u64,
    bits: u32,
    target_ticks: u128,
) -> Option<Layout> {
    // The largest units per quantum whose horizon, burst aside, reaches the target.
    let want_log = 128 - (target_ticks - 1).leading_zeros(); // least with 2^want_log >= target
    let max_log = if shift == 0 {
        // 2^(bits-1) / A >= target
        if want_log + 1 > bits {
            return None;
        }
        bits - 1 - want_log
    } else {
        // 2^(k-1+shift) >= target with k = bits - ceil_log2(A) <= 64 - shift
        let k = want_log + 1
            - if shift < want_log + 1 {
                shift
            } else {
                want_log
            };
        if k > 64 - shift || k + 2 > bits {
            return None;
        }
        bits - k
    };
    let mut p_max = if max_log >= 64 {
        u64::MAX as u128
    } else {
        1u128 << max_log
    };
    // A burst that does not fit at this size may fit with fewer units per quantum.
    let mut tries = 0;
    while tries < 8 && p_max > 0 {
        let (p, q) = approx::best_lower(n, d, p_max, u64::MAX as u128);
        if p == 0 {
            return None;
        }
        let rounding_bits = if bits == 32 {
            NARROW_ROUNDING_BITS
        } else {
            ROUNDING_BITS
        };
        if !approx::within(p, q, n, d, rounding_bits) {
            return None;
        }
        if let Some(mut layout) = layout(shift, p, q, burst, start, bits) {
            if layout.horizon_ticks() as u128 >= target_ticks {
                layout.exact = false;
                return Some(layout);
            }
        }
        p_max /= 2;
        tries += 1;
    }
    None
}

/// The layout for one quantum, if the burst and the debt bound fit in it.
const fn layout(
    shift: u32,
    units_per_quantum: u128,
    units_per_token: u128,
    burst: u64,
    start: u64,
    bits: u32,
) -> Option<Layout> {
    if units_per_token > u64::MAX as u128 || units_per_quantum > u64::MAX as u128 {
        return None;
    }
    let units_per_quantum = units_per_quantum as u64;
    // Units wrap at 2^bits (`Layout::units_mask`); with quanta, the product stays below the
    // modulus A · 2^k, at most 2^bits.
    let (modulus, quanta_mask): (u128, u64) = if shift == 0 {
        (1 << bits, u64::MAX)
    } else {
        let log = ceil_log2(units_per_quantum);
        if log + 2 > bits {
            return None;
        }
        let k = if bits - log < 64 - shift {
            bits - log
        } else {
            64 - shift
        };
        ((units_per_quantum as u128) << k, mask(k))
    };
    let burst_units = burst as u128 * units_per_token;
    let quarter = modulus / 4;
    if burst_units >= quarter {
        return None;
    }
    let half = modulus / 2;
    // The 32-bit word's debt is at most one burst, its negative window two, and the burst at
    // most W / 512 (see the module's docs); the 64-bit word splits the ring in half and allows
    // a quarter of debt.
    let narrow = bits == 32;
    if narrow && burst_units > modulus >> BURST_SHARE_BITS {
        return None;
    }
    let negative_from = if narrow {
        let window = 2 * burst_units + 2 * units_per_quantum as u128;
        if window >= modulus / 2 {
            return None;
        }
        modulus - window
    } else {
        half
    };
    // A full bucket idle for h quanta reads its ceiling + h · A (the ceiling is below the
    // burst plus one quantum), which must stay below the negative side.
    let ceiling_bound = burst_units + units_per_quantum as u128;
    if ceiling_bound >= negative_from {
        return None;
    }
    let Some(units_per_quantum) = NonZeroU64::new(units_per_quantum) else {
        return None;
    };
    let Some(units_per_token) = NonZeroU64::new(units_per_token as u64) else {
        return None;
    };
    let step = units_per_quantum.get() as u128;
    let ceiling = burst_units + min(step, units_per_token.get() as u128) - 1;
    let layout = Layout {
        units_per_quantum,
        units_per_token,
        modulus: modulus as u64, // 2^64 truncates to 0, which stands for it
        negative_from: negative_from as u64,
        ceiling_units: ceiling as u64,
        start_units: start * units_per_token.get(), // start <= burst
        shift: shift as u8,
        fraction_bits: 0,
        quanta_spare_bits: quanta_mask.leading_zeros() as u8,
        word_bits: bits as u8,
        exact: true,
    };
    if steps_fit(&layout) {
        Some(layout)
    } else {
        None
    }
}

const fn min(a: u128, b: u128) -> u128 {
    if a < b {
        a
    } else {
        b
    }
}

const fn mask(bits: u32) -> u64 {
    if bits >= 64 {
        u64::MAX
    } else {
        (1 << bits) - 1
    }
}

const fn ceil_log2(x: u64) -> u32 {
    if x <= 1 {
        0
    } else {
        64 - (x - 1).leading_zeros()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Rate;
    use core::time::Duration;

    const NS: u64 = 1_000_000_000;

    fn solve(quota: Quota, hz: u64, bits: u32) -> Result<Layout, ConfigError> {
        Layout::solve(&quota, hz, bits)
    }

    #[test]
    fn common_rates_on_a_nanosecond_clock_are_exact_for_a_century() {
        let century_ns = (CENTURY_SECS * NS as u128) as u64;
        // (rate, quantum ticks)
        let rows = [
            (Rate::per_second(2), 1),
            (Rate::per_second(100), 1),
            (Rate::per_second(1_000_000_000), 1),
            (Rate::per_minute(171), 32),
            (Rate::per_second(100).minus_percent(10).divided_by(4), 8),
            (Rate::new(3, Duration::from_millis(500)), 2),
            (Rate::new(3, Duration::from_millis(700)), 2),
            (Rate::per_day(1), 1),
            (Rate::new(1, Duration::from_secs(31_557_600)), 1),
        ];
        for (rate, quantum) in rows {
            let p = solve(Quota::new(rate), NS, 64).unwrap();
            assert!(p.horizon_ticks() >= century_ns, "{rate}");
            assert_eq!(p.resolution_ticks(), quantum, "{rate}");
        }
    }

    #[test]
    fn every_modulus_is_even_so_the_mark_plus_one_never_wraps() {
        // `Layout::keep` stores the never-used mark plus one without reducing it.
        let rates = [
            Rate::per_second(2),
            Rate::per_minute(171),
            Rate::per_second(549_637),
            Rate::per_day(1),
            Rate::per_second(1_000_000_000),
            Rate::new(3, Duration::from_millis(700)),
        ];
        for rate in rates {
            for hz in [32_768, 1_000_000, NS, 3_000_000_000] {
                for bits in [32, 64] {
                    if let Ok(p) = solve(Quota::new(rate).burst(7), hz, bits) {
                        assert_eq!(p.modulus % 2, 0, "{rate} on {hz} Hz, {bits} bits");
                        let mark = p.unused();
                        assert!(p.modulus == 0 || mark >= p.modulus || mark + 1 < p.modulus);
                    }
                }
            }
        }
    }

    #[test]
    fn rates_that_cannot_be_exact_are_rounded_down_by_under_a_millionth() {
        // (rate, quantum ticks)
        let rows = [
            (Rate::per_second(549_637), 128),
            (Rate::per_second(3_001), 1),
            (Rate::per_second(1_000_003), 2048),
            (Rate::new(999_983, Duration::from_nanos(1_000_000_007)), 256),
        ];
        for (rate, quantum) in rows {
            let p = solve(Quota::new(rate).burst(1_000), NS, 64).unwrap();
            assert!(!p.is_exact(), "{rate}");
            assert_eq!(p.resolution_ticks(), quantum, "{rate}");
            let (n, d) = (
                rate.tokens() as u128 * NS as u128,
                rate.period_ns() as u128 * NS as u128,
            );
            let (a, u) = (
                p.units_per_quantum.get() as u128,
                (p.units_per_token.get() as u128) << p.shift,
            );
            assert!(approx::within(a, u, n, d, ROUNDING_BITS), "{rate}");
        }
    }

    #[test]
    fn what_cannot_be_held_is_an_error() {
        let rows = [
            (Quota::new(Rate::per_second(0)), ConfigError::ZeroRate),
            (
                Quota::new(Rate::new(1, Duration::ZERO)),
                ConfigError::ZeroPeriod,
            ),
            (
                Quota::new(Rate::per_second(1)).burst(0),
                ConfigError::ZeroBurst,
            ),
            (
                Quota::new(Rate::per_second(1)).burst(2).start_with(3),
                ConfigError::StartAboveBurst { start: 3, burst: 2 },
            ),
            (
                Quota::new(Rate::per_second(1).divided_by(0)),
                ConfigError::DividedByZero,
            ),
            // a trillion tokens a second: a century of them does not fit in 64 bits
            (
                Quota::new(Rate::per_second(1_000_000_000_000)),
                ConfigError::Unrepresentable,
            ),
            // four billion tokens at one a year: a burst longer than the clock's range
            (
                Quota::new(Rate::per_day(1)).burst(1 << 32),
                ConfigError::Unrepresentable,
            ),
        ];
        for (quota, error) in rows {
            assert_eq!(solve(quota, NS, 64), Err(error), "{quota:?}");
        }
        assert_eq!(
            solve(Quota::new(Rate::per_second(1)), 0, 64),
            Err(ConfigError::ZeroClockFrequency)
        );
    }

    #[test]
    fn the_32_bit_word_holds_an_hour_in_fixed_point() {
        // (rate, burst, clock Hz, exact)
        let rows = [
            // 10 per second on a 64 MHz SysTick: U carries the 3 125 of 64 MHz's 2^11 · 5^5.
            (Rate::per_second(10), 10, 64_000_000, true),
            (Rate::per_second(1), 1, 32_768, true),
            (Rate::per_second(100_000), 1, 1_000_000_000, false),
            (Rate::per_second(1), 10_000, 1_000_000_000, false),
            (Rate::per_minute(90_000), 7_500, 1_000_000, true),
            (Rate::per_second(1_024), 1_024, 1_000_000_000, false),
            (Rate::per_second(50_001), 10, 1_000_000_000, false),
        ];
        for (rate, burst, hz, exact) in rows {
            let p = solve(Quota::new(rate).burst(burst), hz, 32).unwrap();
            assert!(p.horizon_ticks() >= 3_600 * hz, "{rate} on {hz} Hz");
            assert_eq!(p.is_exact(), exact, "{rate} on {hz} Hz");
            assert_eq!(p.fraction_bits, 32);
            assert_eq!(p.max_debt_units(), p.burst_units());
            // The burst and the negative window together hold under 0.6 % of the ring.
            assert!(3 * p.burst_units() <= 3 << 23, "{rate}");
            assert_eq!(
                p.negative_from,
                (1 << 32) - 2 * p.burst_units() - 2 * p.step_units()
            );
            // Rounded down by under one part in 10^3 wherever it rounds (one in 10^4 at worst
            // here: one a second with a burst of 10 000 on a nanosecond clock).
            let (m, ticks) = p.tick_rate();
            let enforced = m as f64 / ticks as f64;
            let asked = rate.tokens() as f64 / (rate.period_ns() as f64 * hz as f64 / 1e9);
            assert!(
                enforced <= asked * (1.0 + 1e-12) && enforced >= asked * (1.0 - 1e-3),
                "{rate} on {hz} Hz"
            );
        }
    }
}

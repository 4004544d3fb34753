//! The cost harness (`src/bin/cost_one.rs`, `src/bin/cost_many.rs`, run by `cost.sh`): what one
//! check costs in guest instructions, tollgate's and the naive bucket's, on the same clock.
//!
//! Under qemu's `-icount shift=0` every instruction advances virtual time by one nanosecond, and
//! SysTick counts that virtual time at the board's `CORE_HZ`. A case runs its operation
//! [`CALLS`] times in a loop; the same loop with nothing in it is run too, and the difference,
//! converted from ticks to nanoseconds and divided by the calls, is the operation's
//! instructions. It is deterministic: the same build prints the same figures every run.
//!
//! The clock of both buckets is [`Virtual`]: a 64-bit reading in two `static` halves that the
//! loop sets, so that a granted case can move time on by a second before each call (the
//! buckets refill) and a denied one can hold it still (they stay empty). Each case has its own
//! clock type (`Virtual<ID>`), so that each bucket's check is compiled for its own call sites
//! only: the one-call-site program calls each bucket's check from one place, the
//! many-call-site program from [`EXTRA_SITES`] more.

use core::cell::Cell;
use core::hint::black_box;
use core::sync::atomic::{AtomicU32, Ordering};
use core::time::Duration;

use cortex_m::peripheral::syst::SystClkSource;
use cortex_m::peripheral::SYST;
use critical_section::Mutex;
use tollgate::Clock;

use crate::board::CORE_HZ;

/// Calls per case: enough that the tick (up to 80 instructions) is a hundredth of one.
pub const CALLS: u32 = 10_000;

/// Call sites each bucket's check has in the many-call-site program besides the measured one.
pub const EXTRA_SITES: usize = 5;

/// The quota both buckets enforce: 2 tokens a second, at most 5 at once.
pub const RATE_PER_SECOND: u64 = 2;
/// See [`RATE_PER_SECOND`].
pub const BURST: u64 = 5;

// The virtual clock's reading, in two halves: a 32-bit load is one instruction on every core,
// a 64-bit atomic is not. Relaxed: one core, and the loop sets it between calls.
static NOW_LOW: AtomicU32 = AtomicU32::new(0);
static NOW_HIGH: AtomicU32 = AtomicU32::new(0);

/// A clock that reads what the harness set: the same two loads for tollgate and the naive
/// bucket. `ID` only makes each case's bucket a type of its own.
#[derive(Clone, Copy, Debug, Default)]
pub struct Virtual<const ID: u8>;

impl<const ID: u8> Clock for Virtual<ID> {
    const TICKS_PER_SECOND: u64 = CORE_HZ;

    #[inline]
    fn now(&self) -> u64 {
        u64::from(NOW_HIGH.load(Ordering::Relaxed)) << 32
            | u64::from(NOW_LOW.load(Ordering::Relaxed))
    }
}

/// Moves the virtual clock on by one second: two tokens accrue, so a bucket that granted one
/// at the last call grants the next.
#[inline(always)]
pub fn advance_a_second() {
    let now = Virtual::<0>.now() + CORE_HZ;
    NOW_LOW.store(now as u32, Ordering::Relaxed);
    NOW_HIGH.store((now >> 32) as u32, Ordering::Relaxed);
}

/// The bucket firmware authors write by hand: tokens and the last instant as `u64`s in a
/// `critical_section::Mutex`, the refill rule in fixed point (a token is `CORE_HZ` units and a
/// tick adds `RATE_PER_SECOND` of them, so nothing is divided), on the same clock.
pub struct Naive<C> {
    state: Mutex<Cell<(u64, u64)>>,
    clock: C,
}

/// The naive bucket's denial: ticks until the request would be granted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NaiveDenied {
    ticks: u64,
}

const UNITS_PER_TOKEN: u64 = CORE_HZ;
const UNITS_PER_TICK: u64 = RATE_PER_SECOND;
const BURST_UNITS: u64 = BURST * UNITS_PER_TOKEN;

impl<C: Clock> Naive<C> {
    /// A full bucket whose last instant is 0.
    pub const fn new(clock: C) -> Self {
        Naive {
            state: Mutex::new(Cell::new((BURST_UNITS, 0))),
            clock,
        }
    }

    /// Takes `n` tokens now, or says how long until it could.
    #[inline]
    pub fn try_acquire(&self, n: u32) -> Result<(), NaiveDenied> {
        critical_section::with(|cs| {
            let state = self.state.borrow(cs);
            let (tokens, last) = state.get();
            let now = self.clock.now();
            let refill = now.saturating_sub(last).saturating_mul(UNITS_PER_TICK);
            let tokens = tokens.saturating_add(refill).min(BURST_UNITS);
            let cost = u64::from(n) * UNITS_PER_TOKEN;
            if tokens >= cost {
                state.set((tokens - cost, now));
                Ok(())
            } else {
                state.set((tokens, now));
                Err(NaiveDenied {
                    ticks: (cost - tokens).div_ceil(UNITS_PER_TICK),
                })
            }
        })
    }
}

impl NaiveDenied {
    /// How long until the request would be granted, rounded up to the nanosecond.
    #[inline]
    pub fn retry_after(&self) -> Duration {
        let secs = self.ticks / CORE_HZ;
        let rem = self.ticks % CORE_HZ;
        // rem < CORE_HZ: the product fits, and the nanoseconds are below 10^9.
        Duration::new(secs, (rem * 1_000_000_000).div_ceil(CORE_HZ) as u32)
    }
}

/// Starts SysTick as a free-running 24-bit down-counter on the processor clock, with no
/// interrupt: nothing but the case runs while it is timed.
pub fn start_counter(syst: &mut SYST) {
    syst.disable_counter();
    syst.disable_interrupt();
    syst.set_clock_source(SystClkSource::Core);
    syst.set_reload(0x00ff_ffff);
    syst.clear_current();
    syst.enable_counter();
}

/// The SysTick ticks `case(CALLS)` takes.
#[inline(never)]
pub fn ticks_of(case: fn(u32) -> u32) -> u32 {
    let before = SYST::get_current();
    black_box(case(CALLS));
    let after = SYST::get_current();
    // A down-counter of 24 bits; a case takes far less than its wrap (over a second).
    before.wrapping_sub(after) & 0x00ff_ffff
}

/// Instructions per call, in hundredths: the case's ticks less the empty loop's, as
/// nanoseconds of `-icount shift=0` virtual time, over the calls.
pub fn hundredths_per_call(case: fn(u32) -> u32, empty: fn(u32) -> u32) -> u64 {
    let case = u64::from(ticks_of(case));
    let empty = u64::from(ticks_of(empty));
    let ns = case.saturating_sub(empty) * 1_000_000_000 / CORE_HZ;
    ns * 100 / u64::from(CALLS)
}

/// Hundredths as a number with two decimals.
pub struct Hundredths(pub u64);

impl core::fmt::Display for Hundredths {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}.{:02}", self.0 / 100, self.0 % 100)
    }
}

//! The clock of the size report's two binaries.

use cortex_m::peripheral::SYST;
use tollgate::Clock;

use crate::board::CORE_HZ;

/// SysTick's counter, read as is: the cheapest clock there is, so that the size report
/// measures the bucket and not the clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct CounterClock;

impl Clock for CounterClock {
    const TICKS_PER_SECOND: u64 = CORE_HZ;

    #[inline]
    fn now(&self) -> u64 {
        u64::from(SYST::get_current())
    }
}

// A bucket on this zero-sized clock and the 32-bit word is 32 bytes (the word, and the layout in
// 28 bytes of `u32`s and flags): checked at compile time on every target.
const _: () = assert!(core::mem::size_of::<tollgate::TokenBucket<CounterClock, u32>>() <= 32);

//! A counter at any frequency, set by hand, wrapping at `u64::MAX` like a hardware counter: the
//! clock of the tests that try the bucket on clocks from 32 768 Hz to 10 GHz.

use std::cell::Cell;

use tollgate::Clock;

/// `HZ` ticks a second; the tick count is set or advanced by the test.
#[derive(Default)]
pub struct Counter<const HZ: u64>(pub Cell<u64>);

impl<const HZ: u64> Clock for Counter<HZ> {
    const TICKS_PER_SECOND: u64 = HZ;
    fn now(&self) -> u64 {
        self.0.get()
    }
}

impl<const HZ: u64> Counter<HZ> {
    /// Moves the counter on by `ticks`, wrapping.
    #[allow(dead_code)] // not every test steps it this way
    pub fn advance(&self, ticks: u64) {
        self.0.set(self.0.get().wrapping_add(ticks));
    }
}

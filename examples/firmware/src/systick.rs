//! A 64-bit clock and a `DelayNs` on the Cortex-M SysTick timer.
//!
//! SysTick is a 24-bit down-counter. [`start`] runs it on the processor clock with an interrupt
//! every millisecond, whose handler calls [`on_interrupt`] to count the wraps; a reading is
//! `wraps × period + ticks into the period`, in processor-clock ticks, so it lasts for
//! millennia. Readings take a few instructions inside a critical section, which also makes them
//! safe from the SysTick handler itself.

use core::cell::Cell;

use cortex_m::peripheral::syst::SystClkSource;
use cortex_m::peripheral::{SCB, SYST};
use critical_section::Mutex;
use embedded_hal::delay::DelayNs;
use tollgate::Clock;

use crate::board::CORE_HZ;

/// SysTick interrupts per second.
pub const INTERRUPT_HZ: u64 = 1_000;

/// Processor-clock ticks between two SysTick interrupts.
pub const PERIOD_TICKS: u64 = CORE_HZ / INTERRUPT_HZ;

const _: () = assert!(
    CORE_HZ % INTERRUPT_HZ == 0,
    "the period must be whole ticks"
);
const _: () = assert!(
    PERIOD_TICKS <= 1 << 24,
    "SysTick's reload register has 24 bits"
);

/// SysTick interrupts counted so far.
static WRAPS: Mutex<Cell<u64>> = Mutex::new(Cell::new(0));

/// Starts SysTick on the processor clock, interrupting every millisecond.
pub fn start(syst: &mut SYST) {
    syst.disable_counter();
    syst.set_clock_source(SystClkSource::Core);
    syst.set_reload((PERIOD_TICKS - 1) as u32);
    syst.clear_current();
    syst.enable_interrupt();
    syst.enable_counter();
}

/// Counts one wrap. Call it from the SysTick handler before anything reads the clock.
pub fn on_interrupt() {
    critical_section::with(|cs| {
        let wraps = WRAPS.borrow(cs);
        wraps.set(wraps.get() + 1);
    });
}

/// SysTick interrupts handled so far.
pub fn interrupts() -> u64 {
    critical_section::with(|cs| WRAPS.borrow(cs).get())
}

/// Sleeps until the SysTick handler has run `count` times in all.
///
/// The code after each wake-up is the same, so work started right after it starts a whole
/// number of periods after work started the same way earlier: the SysTick wrap is the
/// schedule, with no jitter from polling.
pub fn sleep_until_interrupt(count: u64) {
    while interrupts() < count {
        cortex_m::asm::wfi();
    }
}

/// The processor-clock ticks since [`start`], extended to 64 bits.
#[derive(Clone, Copy, Debug, Default)]
pub struct SysTickClock;

impl Clock for SysTickClock {
    const TICKS_PER_SECOND: u64 = CORE_HZ;

    fn now(&self) -> u64 {
        critical_section::with(|cs| {
            let mut wraps = WRAPS.borrow(cs).get();
            let mut current = SYST::get_current();
            if SCB::is_pendst_pending() {
                // The counter wrapped and its interrupt waits behind this critical section:
                // count that wrap here, and read the counter again, certainly after it.
                wraps += 1;
                current = SYST::get_current();
            }
            // The counter reaches 0 at the wrap itself and reloads one tick later.
            let into_period = if current == 0 {
                0
            } else {
                PERIOD_TICKS - u64::from(current)
            };
            wraps * PERIOD_TICKS + into_period
        })
    }
}

/// Waits until [`SysTickClock`] reads at least `deadline`: asleep between interrupts while more
/// than a period remains, then spinning on the counter for the last part.
pub fn wait_until(deadline: u64) {
    loop {
        let now = SysTickClock.now();
        if now >= deadline {
            return;
        }
        if deadline - now > PERIOD_TICKS {
            cortex_m::asm::wfi();
        }
    }
}

/// `embedded-hal`'s `DelayNs` on [`SysTickClock`]: at least the time asked, to the tick.
#[derive(Debug, Default)]
pub struct SysTickDelay;

impl DelayNs for SysTickDelay {
    fn delay_ns(&mut self, ns: u32) {
        let start = SysTickClock.now();
        // Rounded up, plus one tick because `start` may have been read late in its tick.
        let ticks = (u64::from(ns) * CORE_HZ).div_ceil(1_000_000_000) + 1;
        wait_until(start + ticks);
    }
}

/// SysTick ticks over `iterations` × 2 instructions, with interrupts masked: under qemu's
/// `-icount shift=s`, each instruction is 2^s ns of virtual time, so this measures the rate at
/// which qemu runs SysTick. `iterations` × 2 instructions must take less than one period.
pub fn ticks_over_instructions(iterations: u32) -> u64 {
    critical_section::with(|_| {
        let before = SYST::get_current();
        // SAFETY: a register-only countdown loop: it touches no memory and no stack, and
        // leaves r0 at zero, which the clobber declares.
        unsafe {
            core::arch::asm!(
                "2:",
                "subs r0, #1",
                "bne 2b",
                inout("r0") iterations => _,
                options(nomem, nostack),
            );
        }
        let after = SYST::get_current();
        // A down-counter that may have reloaded once from 0 to period - 1.
        if after <= before {
            u64::from(before - after)
        } else {
            u64::from(before) + PERIOD_TICKS - u64::from(after)
        }
    })
}

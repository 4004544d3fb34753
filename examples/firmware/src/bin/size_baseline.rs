//! The size report's baseline: `size-bucket` without the bucket. It reads the same clock and
//! keeps the same kind of result alive, so that the difference between the two is the bucket.

#![no_std]
#![no_main]

use core::hint::black_box;

use cortex_m_rt::entry;
use tollgate::Clock;
use tollgate_firmware::size::CounterClock;

#[entry]
fn main() -> ! {
    loop {
        black_box(CounterClock.now() & 1 == 0);
    }
}

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    loop {}
}

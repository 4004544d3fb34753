//! The size report's subject: one `static` bucket, calling `try_acquire` in a loop and keeping
//! whether it granted.

#![no_std]
#![no_main]

use core::hint::black_box;

use cortex_m_rt::entry;
use tollgate::{static_bucket, Quota, Rate};
use tollgate_firmware::size::CounterClock;

static_bucket! {
    /// Declared as a firmware declares a `static` bucket: its quota folded into the code.
    static GATE: TokenBucket<CounterClock> =
        TokenBucket::new(Quota::new(Rate::per_second(2)).burst(5), CounterClock);
}

#[entry]
fn main() -> ! {
    loop {
        black_box(GATE.try_acquire(1).is_ok());
    }
}

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    loop {}
}

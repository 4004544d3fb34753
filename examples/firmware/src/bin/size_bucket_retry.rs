//! The size report's second subject: `size-bucket`, also reading `retry_after` from each
//! denial, which converts clock ticks to a `Duration` and so divides 64-bit numbers.

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
        let retry_after = GATE.try_acquire(1).err().and_then(|d| d.retry_after());
        black_box(retry_after.map_or(0, |wait| wait.subsec_nanos()));
    }
}

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    loop {}
}

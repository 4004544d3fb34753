//! The size report's embassy binaries (feature `embassy`): one task on embassy-executor, on
//! the firmware's SysTick time driver. `size-embassy-baseline` sleeps on embassy-time's timer
//! and reads the clock; `size-embassy-retry` adds a bucket and the loop an embassy app writes
//! by hand (`try_acquire`, then `Timer::after(retry_after)`); `size-embassy-wait` takes through
//! `EmbassyWait::acquire` instead: the waiters' line, the timer future and the wait.

#![no_std]
#![no_main]

use core::hint::black_box;

use cortex_m_rt::exception;
use embassy_executor::Spawner;
#[allow(unused_imports)]
use embassy_time::{Duration, Timer};
#[allow(unused_imports)]
use tollgate::{Clock, EmbassyClock, Quota, Rate, TokenBucket};
use tollgate_firmware::{embassy_driver, systick};

#[allow(dead_code)]
static GATE: TokenBucket<EmbassyClock> =
    TokenBucket::new(Quota::new(Rate::per_second(2)).burst(5), EmbassyClock);

#[exception]
fn SysTick() {
    systick::on_interrupt();
    embassy_driver::on_interrupt();
}

#[embassy_executor::main]
async fn main(_spawner: Spawner) {
    if let Some(mut core) = cortex_m::Peripherals::take() {
        systick::start(&mut core.SYST);
    }
    loop {
        body().await;
    }
}

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    loop {}
}

async fn body() {
    Timer::after(Duration::from_millis(black_box(1))).await;
    match GATE.try_acquire(black_box(1)) {
        Ok(()) => black_box(true),
        Err(denied) => {
            let wait = denied.retry_after().unwrap_or_default();
            Timer::after(Duration::from_micros(wait.as_micros() as u64)).await;
            black_box(false)
        }
    };
}

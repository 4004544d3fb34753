//! An embassy-time driver on SysTick, in the firmware (tollgate ships none): `now` is
//! [`SysTickClock`] in microseconds (embassy-time's default `TICK_HZ` of 1 MHz), and the timer
//! queue is woken from the SysTick handler every millisecond ([`on_interrupt`]).

use core::cell::RefCell;
use core::task::Waker;

use critical_section::Mutex;
use embassy_time_driver::Driver;
use embassy_time_queue_utils::queue_generic::ConstGenericQueue;
use tollgate::Clock;

use crate::board::CORE_HZ;
use crate::systick::SysTickClock;

const _: () = assert!(
    embassy_time_driver::TICK_HZ == 1_000_000,
    "the driver counts microseconds"
);

/// Timers pending at once: one per task that sleeps, and one per waiter with a timeout.
const TIMERS: usize = 16;

struct SysTickDriver {
    queue: Mutex<RefCell<ConstGenericQueue<TIMERS>>>,
}

embassy_time_driver::time_driver_impl!(static DRIVER: SysTickDriver = SysTickDriver {
    queue: Mutex::new(RefCell::new(ConstGenericQueue::new())),
});

/// Microseconds since SysTick started. Out of line: the read is a 128-bit scaling that every
/// timer and every clock reading would otherwise repeat inline.
#[inline(never)]
fn now_us() -> u64 {
    (u128::from(SysTickClock.now()) * 1_000_000 / u128::from(CORE_HZ)) as u64
}

impl Driver for SysTickDriver {
    fn now(&self) -> u64 {
        now_us()
    }

    fn schedule_wake(&self, at: u64, waker: &Waker) {
        critical_section::with(|cs| {
            let mut queue = self.queue.borrow_ref_mut(cs);
            // A full queue wakes its soonest timer early, which re-arms itself: never lost.
            queue.schedule_wake(at, waker);
            queue.next_expiration(now_us());
        });
    }
}

/// Wakes the timers that are due. Call it from the SysTick handler, after counting the wrap.
pub fn on_interrupt() {
    critical_section::with(|cs| {
        DRIVER.queue.borrow_ref_mut(cs).next_expiration(now_us());
    });
}

//! [`EmbassyClock`]: embassy-time's clock (feature `embassy-time`).

use crate::Clock;

/// embassy-time's clock: the ticks of `embassy_time::Instant::now()`, at the `TICK_HZ` the
/// firmware chose through embassy-time's `tick-hz-*` features (1 MHz unless told otherwise).
///
/// It reads the time driver the firmware installed (SysTick, an RTC, a timer peripheral), the
/// same one embassy's `Timer` sleeps on, so a bucket on this clock and the waits of
/// [`EmbassyWait`](crate::wait::EmbassyWait) agree on every instant. At 1 MHz a bucket on the
/// 32-bit word needs [`touch`](crate::TokenBucket::touch) at least once every 71 minutes to read
/// exactly after a long idle (see [`Word`](crate::Word)).
///
/// ```
/// use tollgate::{EmbassyClock, Quota, Rate, TokenBucket};
///
/// static GATE: TokenBucket<EmbassyClock> =
///     TokenBucket::new(Quota::new(Rate::per_second(10)), EmbassyClock);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct EmbassyClock;

impl Clock for EmbassyClock {
    const TICKS_PER_SECOND: u64 = embassy_time_driver::TICK_HZ;
    #[inline]
    fn now(&self) -> u64 {
        embassy_time_driver::now()
    }
}

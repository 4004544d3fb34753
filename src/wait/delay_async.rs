//! Async waits through `embedded-hal-async`'s `DelayNs` (feature `embedded-hal-async`), for
//! firmware on an executor other than embassy's.

use core::time::Duration;

use embedded_hal_async::delay::DelayNs;

use super::async_line::{wait_in_line, Sleeper};
use crate::{Clock, Denied, TokenBucket, Word};

impl<C: Clock, W: Word> TokenBucket<C, W> {
    /// Takes `n` tokens, waiting in line and then sleeping on `delay` until they have accrued;
    /// returns the time waited on the bucket's clock.
    ///
    /// The rules of `EmbassyWait`'s waits (feature `embassy-time`), over the async `delay`
    /// the firmware's HAL provides: arrival order among the waiters of the bucket (a caller
    /// finding anyone waiting never takes before them), one sleep for each waiter until its
    /// estimate, nothing taken before the caller acts (so a dropped future leaves the bucket as
    /// if it had never queued), a request above the burst failing at once, and the same
    /// bounded line (past [`LINE_CAPACITY`](crate::wait::LINE_CAPACITY) waiters, one waits
    /// outside it, unordered, never taking before those in it). A `delay` that overshoots (a
    /// timer on a coarse tick) is learnt as the embassy waits learn a late timer: where the
    /// burst has no room for the overshoot, the head takes that far ahead of its tokens'
    /// instant and sleeps to it holding them, so a burst of one keeps the whole rate. The
    /// bucket's clock and `delay` must measure the same time.
    ///
    /// ```
    /// # async fn run(delay: &mut impl embedded_hal_async::delay::DelayNs) -> Result<(), tollgate::Denied> {
    /// use tollgate::{Clock, Quota, Rate, TokenBucket};
    /// # struct Timer; impl Clock for Timer { const TICKS_PER_SECOND: u64 = 1_000_000; fn now(&self) -> u64 { 0 } }
    ///
    /// static UPLINK: TokenBucket<Timer> = TokenBucket::new(Quota::new(Rate::per_second(10)), Timer);
    /// UPLINK.acquire_with_async_delay(1, delay).await?;
    /// # Ok(()) }
    /// ```
    pub async fn acquire_with_async_delay<D: DelayNs>(
        &self,
        n: u32,
        delay: &mut D,
    ) -> Result<Duration, Denied> {
        wait_in_line(self, n, None, &mut Delay(delay)).await
    }

    /// As [`acquire_with_async_delay`](Self::acquire_with_async_delay), giving up after
    /// `timeout` as `EmbassyWait::acquire_timeout`
    /// does: having taken nothing.
    pub async fn acquire_timeout_with_async_delay<D: DelayNs>(
        &self,
        n: u32,
        timeout: Duration,
        delay: &mut D,
    ) -> Result<Duration, Denied> {
        wait_in_line(self, n, Some(timeout), &mut Delay(delay)).await
    }
}

/// A `DelayNs` as the waits' sleeper.
pub(super) struct Delay<'a, D>(pub(super) &'a mut D);

impl<D: DelayNs> Sleeper for Delay<'_, D> {
    async fn sleep(&mut self, duration: Duration) {
        // In the finest unit that holds the wait in a `u32`, rounded up: never shorter.
        let nanos = duration.as_nanos();
        if let Ok(ns) = u32::try_from(nanos) {
            self.0.delay_ns(ns).await;
        } else if let Ok(us) = u32::try_from(nanos.div_ceil(1_000)) {
            self.0.delay_us(us).await;
        } else {
            let mut ms = nanos.div_ceil(1_000_000);
            while ms > 0 {
                let step = ms.min(u128::from(u32::MAX));
                self.0.delay_ms(step as u32).await;
                ms -= step;
            }
        }
    }
}

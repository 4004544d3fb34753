//! Blocking waits on microcontrollers, through `embedded-hal`'s `DelayNs`.

use core::time::Duration;

use embedded_hal::delay::DelayNs;

use super::{CancelOnDrop, ReserveNow};
use crate::{Clock, Denied, Jitter, TokenBucket, Word};

impl<C: Clock, W: Word> TokenBucket<C, W> {
    /// Takes `n` tokens, waiting on `delay` until they have accrued; returns the time waited.
    ///
    /// It reserves the tokens at once and sleeps until they are due (one call to `delay`, two
    /// for waits beyond 49 days), so contexts waiting on one bucket are served in the order
    /// they asked and a late wake-up loses the bucket no time: the schedule stays exact. A
    /// blocking wait through `DelayNs` has no timeout and cannot be given up short of a reset,
    /// so holding the tokens while it sleeps strands nothing. Where the word's debt bound is
    /// reached (one burst on the 32-bit word, when other contexts wait too), it sleeps until
    /// there is room and reserves then. `n` above the burst fails at once with
    /// [`Denied::ExceedsCapacity`]. Safe to call from several execution contexts; from an
    /// interrupt handler, prefer [`try_acquire`](Self::try_acquire), which never waits.
    ///
    /// The time waited is the sum of the delays asked for.
    ///
    /// ```
    /// use core::time::Duration;
    /// use embedded_hal::delay::DelayNs;
    /// use tollgate::{ManualClock, Quota, Rate, TokenBucket};
    ///
    /// /// A delay that moves a manual clock, as a test double for a hardware timer.
    /// struct Skip<'a>(&'a ManualClock);
    /// impl DelayNs for Skip<'_> {
    ///     fn delay_ns(&mut self, ns: u32) {
    ///         self.0.advance(Duration::from_nanos(ns.into()));
    ///     }
    /// }
    ///
    /// let clock = ManualClock::new();
    /// let bucket = TokenBucket::try_new(Quota::new(Rate::per_second(4)).start_empty(), &clock)?;
    /// let waited = bucket.acquire_with_delay(1, &mut Skip(&clock)).unwrap();
    /// assert_eq!(waited, Duration::from_millis(250));
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn acquire_with_delay(&self, n: u32, delay: &mut impl DelayNs) -> Result<Duration, Denied> {
        let mut waited = Duration::ZERO;
        loop {
            match self.reserve(n, Duration::MAX) {
                Ok(reservation) => {
                    let wait = reservation.wait();
                    delay_for(delay, wait);
                    return Ok(waited.saturating_add(wait));
                }
                // Past the debt bound: room comes when the debt ahead is paid.
                Err(Denied::Insufficient { retry_after }) => {
                    let retry_after = retry_after.get();
                    delay_for(delay, retry_after);
                    waited = waited.saturating_add(retry_after);
                }
                Err(never) => return Err(never),
            }
        }
    }
}

/// Tries `gate` until it grants `cost`, sleeping on `delay` while it is short, then sleeps
/// `jitter` holding the take. Returns the time slept, the jitter included.
pub(crate) fn acquire_with_delay<G: ReserveNow>(
    gate: &G,
    cost: G::Cost,
    delay: &mut impl DelayNs,
    jitter: &Jitter,
) -> Result<Duration, Denied> {
    let (taken, waited) = wait_with_delay(delay, || gate.reserve_now(cost))?;
    let guard = CancelOnDrop::new(gate, taken);
    let jitter = jitter.after(waited);
    delay_for(delay, jitter);
    guard.keep();
    Ok(waited + jitter)
}

/// Tries `take`; while it is short, sleeps its `retry_after` on `delay` and tries again.
/// Returns the time slept.
fn wait_with_delay<T>(
    delay: &mut impl DelayNs,
    mut take: impl FnMut() -> Result<T, Denied>,
) -> Result<(T, Duration), Denied> {
    let mut waited = Duration::ZERO;
    loop {
        match take() {
            Ok(taken) => return Ok((taken, waited)),
            Err(Denied::Insufficient { retry_after }) => {
                let retry_after = retry_after.get();
                delay_for(delay, retry_after);
                waited = waited.saturating_add(retry_after);
            }
            Err(never) => return Err(never),
        }
    }
}

/// Sleeps for `wait` in as few `DelayNs` calls as the units allow: one below 4.29 s (ns),
/// one below 71 minutes (µs), then milliseconds.
pub(crate) fn delay_for(delay: &mut impl DelayNs, wait: Duration) {
    if wait.is_zero() {
        return;
    }
    if let Ok(ns) = u32::try_from(wait.as_nanos()) {
        return delay.delay_ns(ns);
    }
    // Round up so that the wait is never cut short.
    let us = wait.as_nanos().div_ceil(1_000);
    if let Ok(us) = u32::try_from(us) {
        return delay.delay_us(us);
    }
    let mut ms = wait.as_nanos().div_ceil(1_000_000);
    while ms > 0 {
        let step = u32::try_from(ms).unwrap_or(u32::MAX);
        delay.delay_ms(step);
        ms -= u128::from(step);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec::Vec;

    /// Records each call, in nanoseconds.
    #[derive(Default)]
    struct Recorder(Vec<u128>);
    impl DelayNs for Recorder {
        fn delay_ns(&mut self, ns: u32) {
            self.0.push(ns.into());
        }
        fn delay_us(&mut self, us: u32) {
            self.0.push(u128::from(us) * 1_000);
        }
        fn delay_ms(&mut self, ms: u32) {
            self.0.push(u128::from(ms) * 1_000_000);
        }
    }

    #[test]
    fn long_waits_take_few_calls_and_are_never_cut_short() {
        let day = 86_400_000_000_000u128;
        let rows: [(Duration, &[u128]); 5] = [
            (Duration::ZERO, &[]),
            (Duration::from_millis(250), &[250_000_000]),
            (Duration::from_nanos(4_294_967_296), &[4_294_968_000]),
            (Duration::from_secs(3 * 86_400), &[3 * day]),
            (
                Duration::from_secs(60 * 86_400),
                &[4_294_967_295_000_000, 60 * day - 4_294_967_295_000_000],
            ),
        ];
        for (wait, calls) in rows {
            let mut recorder = Recorder::default();
            delay_for(&mut recorder, wait);
            assert_eq!(recorder.0, calls, "{wait:?}");
        }
    }
}

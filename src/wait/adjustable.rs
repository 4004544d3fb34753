//! Waits on an [`AdjustableBucket`]: the same line, gate and cancel rule as a
//! [`TokenBucket`](crate::TokenBucket)'s, under the quota current at each look.
//!
//! A take is given back only under the layout it was taken under: after a quota change the
//! word has been converted, and a give-back in the old units could mint, so it gives nothing.

use core::time::Duration;

use super::gate::{GiveBack, ReserveNow};
use crate::engine::layout::Layout;
use crate::{AdjustableBucket, AdjustableReservation, AdjustableWord, Clock, Denied};

impl<C: Clock, W: AdjustableWord> GiveBack for AdjustableBucket<C, W> {
    type Cost = u32;
    type Taken = AdjustableReservation;

    fn give_back(&self, taken: AdjustableReservation) {
        self.give_back_by(taken, false, Layout::refund);
        // As `TokenBucket`'s give-back: the head of the line may be due sooner now.
        #[cfg(feature = "std")]
        super::queue::given_back(self);
    }
}

impl<C: Clock, W: AdjustableWord> ReserveNow for AdjustableBucket<C, W> {
    fn reserve_now(&self, n: u32) -> Result<AdjustableReservation, Denied> {
        self.reserve(n, Duration::ZERO)
    }

    fn reserve_ahead(
        &self,
        n: u32,
        ahead: Duration,
    ) -> Result<(AdjustableReservation, Duration), Denied> {
        self.reserve(n, ahead).map(|taken| {
            let due_in = taken.wait();
            (taken, due_in)
        })
    }

    fn take_at_once(&self, n: u32) -> Result<(), Denied> {
        self.try_acquire(n)
    }
}

#[cfg(feature = "std")]
impl<C: Clock, W: AdjustableWord> super::queue::Lined for AdjustableBucket<C, W> {
    type Clock = C;
    fn units_for(&self, n: u32) -> Result<u64, Denied> {
        self.current().1.cost(n)
    }
    fn now_ticks(&self) -> u64 {
        self.clock().now()
    }
    fn ticks_until_holding(&self, now_ticks: u64, units: u64) -> u64 {
        let ((_generation, word), p) = self.current();
        let now_units = p.units_at(now_ticks);
        let units = units.min(p.max_debt_units());
        match p.take(word, now_units, units, 0) {
            Ok(_) => 0,
            Err(short) => p.ticks_until(now_ticks, short),
        }
    }
    fn slack_ticks(&self, now_ticks: u64, units: u64) -> u64 {
        let p = self.current().1;
        p.ticks_until(now_ticks, p.burst_units().saturating_sub(units))
    }
}

#[cfg(feature = "std")]
impl<C: Clock, W: AdjustableWord> AdjustableBucket<C, W> {
    /// Takes `n` tokens, blocking the thread until they have accrued under the quota current
    /// then; returns the time waited. As
    /// [`TokenBucket::acquire_blocking`](crate::TokenBucket::acquire_blocking): threads wait in
    /// line and nothing is taken before the tokens are due.
    pub fn acquire_blocking(&self, n: u32) -> Result<Duration, Denied> {
        self.acquire_blocking_timeout(n, Duration::MAX)
    }

    /// As [`acquire_blocking`](Self::acquire_blocking), if the tokens accrue within `timeout`;
    /// otherwise fails, at once when the line says so, and takes nothing.
    pub fn acquire_blocking_timeout(&self, n: u32, timeout: Duration) -> Result<Duration, Denied> {
        super::blocking::acquire_one_blocking(self, n, timeout)
    }
}

#[cfg(feature = "tokio")]
impl<C: Clock, W: AdjustableWord> AdjustableBucket<C, W> {
    /// Takes `n` tokens, waiting until they have accrued under the quota current then; returns
    /// the time waited. As [`TokenBucket::acquire`](crate::TokenBucket::acquire): tasks wait in
    /// line, and a future dropped mid-wait has taken nothing.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{AdjustableBucket, Quota, Rate, TokioClock};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let bucket = AdjustableBucket::try_new(Quota::new(Rate::per_second(4)).start_empty(), TokioClock::new())?;
    /// let waited = bucket.acquire(1).await?;
    /// // A quarter of a second (on the 32-bit word, 4/s is held rounded down by under a
    /// // millionth), and tokio's timer wakes on the next millisecond.
    /// assert!(waited >= Duration::from_millis(250) && waited <= Duration::from_millis(252));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn acquire(&self, n: u32) -> Result<Duration, Denied> {
        super::tokio::acquire_one_async(self, n, Duration::MAX).await
    }

    /// As [`acquire`](Self::acquire), if the tokens accrue within `timeout`; otherwise fails,
    /// at once when the line says so, and takes nothing.
    pub async fn acquire_timeout(&self, n: u32, timeout: Duration) -> Result<Duration, Denied> {
        super::tokio::acquire_one_async(self, n, timeout).await
    }
}

#[cfg(feature = "embedded-hal")]
impl<C: Clock, W: AdjustableWord> AdjustableBucket<C, W> {
    /// Takes `n` tokens, waiting on `delay` until they have accrued under the quota current
    /// then; returns the time slept. It sleeps each `retry_after` and tries again, so it takes
    /// nothing before it acts.
    pub fn acquire_with_delay(
        &self,
        n: u32,
        delay: &mut impl embedded_hal::delay::DelayNs,
    ) -> Result<Duration, Denied> {
        super::acquire_with_delay(self, n, delay, &crate::Jitter::none())
    }
}

#[cfg(all(test, feature = "std"))]
mod tests {
    use super::*;
    use crate::{ManualClock, Quota, Rate};
    use std::sync::Barrier;
    use std::thread;

    fn ms(millis: u64) -> Duration {
        Duration::from_millis(millis)
    }

    #[test]
    fn a_take_given_back_restores_what_was_there_and_never_more() {
        let clock = ManualClock::new();
        let bucket = AdjustableBucket::new(Quota::new(Rate::per_second(10)).burst(10), &clock);
        // (tokens taken, time before the give-back, tokens available after it)
        let rows = [(4, ms(0), 10), (10, ms(0), 10), (3, ms(500), 10)];
        for (n, after, available) in rows {
            let taken = bucket.reserve_now(n).unwrap();
            clock.advance(after);
            bucket.give_back(taken);
            assert_eq!(bucket.available(), available, "n = {n}");
        }
        // Drained, then given back after others took: only what the burst allows comes back.
        let taken = bucket.reserve_now(10).unwrap();
        clock.advance(ms(1_000)); // refilled to 10 without the take
        assert!(bucket.try_acquire(10).is_ok());
        bucket.give_back(taken);
        assert_eq!(bucket.available(), 0);
    }

    /// A clock whose read runs a hook once, after the reading is taken: another caller acting
    /// between a take's reading and its compare-exchange.
    struct HookClock<'a> {
        clock: ManualClock,
        hook: core::cell::Cell<Option<&'a dyn Fn()>>,
    }

    impl Clock for &HookClock<'_> {
        const TICKS_PER_SECOND: u64 = 1_000_000_000;
        fn now(&self) -> u64 {
            let reading = self.clock.now();
            if let Some(hook) = self.hook.take() {
                hook();
            }
            reading
        }
    }

    #[test]
    fn a_wait_is_from_a_reading_no_older_than_the_word_it_lands_on() {
        // 10/s, burst 1, full. The take ahead reads 7 000 ms; inside that read another caller
        // moves the clock 50 ms on and takes the token. The next token is due 100 ms after that
        // take: the wait is 100 ms from the reading that lands, not 150 from the first.
        let clock = HookClock {
            clock: ManualClock::starting_at(7_000_000_000),
            hook: core::cell::Cell::new(None),
        };
        let bucket = AdjustableBucket::new(Quota::new(Rate::per_second(10)).burst(1), &clock);
        let another_caller = || {
            clock.clock.advance(ms(50));
            assert_eq!(bucket.try_acquire(1), Ok(()));
        };
        clock.hook.set(Some(&another_caller));
        let (taken, wait) = bucket.reserve_ahead(1, ms(1_000)).unwrap();
        assert!(clock.hook.take().is_none(), "the hook ran");
        assert_eq!(wait, ms(100));
        assert_eq!(taken.due_ticks(), 7_050_000_000 + 100_000_000); // made at the fresh reading
        // Nothing minted: the token after it is due 100 ms later still.
        assert_eq!(
            bucket.try_acquire(1),
            Err(Denied::insufficient(ms(200)))
        );
    }

    #[test]
    fn a_take_under_an_old_quota_gives_nothing_back() {
        let clock = ManualClock::new();
        let bucket = AdjustableBucket::new(Quota::new(Rate::per_second(10)).burst(10), &clock);
        let taken = bucket.reserve_now(6).unwrap();
        bucket.set_quota(Quota::new(Rate::per_second(5)).burst(5)).unwrap();
        assert_eq!(bucket.available(), 4);
        bucket.give_back(taken);
        assert_eq!(bucket.available(), 4);
    }

    #[test]
    fn blocking_waiters_on_a_manual_clock_are_served_in_line_at_the_rate() {
        // Two threads wait for 2 tokens each at 10/s from empty; a third moves the clock. The
        // burst is never reached in the run, so every token accrued is counted below.
        let clock = ManualClock::new();
        let quota = Quota::new(Rate::per_second(10)).burst(1_000).start_empty();
        let bucket = AdjustableBucket::new(quota, &clock);
        let start = Barrier::new(3);
        let waited = thread::scope(|s| {
            let waiters: [_; 2] = core::array::from_fn(|_| {
                s.spawn(|| {
                    start.wait();
                    bucket.acquire_blocking(2)
                })
            });
            start.wait();
            // Four tokens accrue in 400 ms; move on in small steps until both are in (the
            // waiters sleep their estimates in real time: 200 and 400 ms).
            for _ in 0..20_000 {
                if waiters.iter().all(|w| w.is_finished()) {
                    break;
                }
                clock.advance(ms(1));
                thread::sleep(Duration::from_micros(200));
            }
            waiters.map(|w| w.join().unwrap())
        });
        for waited in waited {
            let waited = waited.unwrap();
            // Under miri the sleeps run on its emulated clock, not for the wall time asked, so
            // only the count below is pinned there.
            if !cfg!(miri) {
                assert!(waited >= ms(200), "{waited:?}");
            }
        }
        // Exactly four tokens were taken: none were left behind or taken twice.
        let accrued = clock.now() / 100_000_000;
        assert!(accrued < 1_000);
        assert_eq!(bucket.available(), accrued - 4);
    }

    #[test]
    fn a_wait_beyond_its_timeout_fails_at_once_and_takes_nothing() {
        let clock = ManualClock::new();
        let bucket = AdjustableBucket::new(Quota::new(Rate::per_second(5)).start_empty(), &clock);
        // 600 ms more than the timeout (on the 32-bit word, through its rounding of 5/s).
        let retry_after = bucket.acquire_blocking_timeout(5, ms(400)).unwrap_err();
        let retry_after = retry_after.retry_after().unwrap();
        assert!(retry_after >= ms(600) && retry_after < ms(601), "{retry_after:?}");
        // Nothing was taken: the bucket fills as if nobody had asked.
        clock.advance(ms(1_001));
        assert_eq!(bucket.available(), 5);
        assert_eq!(
            bucket.acquire_blocking(6),
            Err(Denied::ExceedsCapacity { burst: 5 })
        );
    }
}

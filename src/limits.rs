//! [`Limits`]: several buckets that must all agree, taken from all or from none.

use core::time::Duration;

use crate::clock::duration_to_ticks_floor;
use crate::{Clock, DefaultWord, Denied, Jitter, Reservation, TokenBucket, Word};

/// Several buckets that must all agree: a call is granted only if every bucket grants its own
/// cost, and then it takes from all of them; otherwise it takes from none.
///
/// Upstreams publish several limits at once — 100 requests a second *and* 10 000 a day, or
/// requests per minute *and* tokens per minute — and each call may cost a different amount in
/// each: `costs[i]` tokens from bucket `i`. The size is fixed by the array, so nothing is
/// allocated; `Limits` borrows its buckets, which may also be used on their own.
///
/// Each bucket is taken from in turn; a later bucket's denial gives back what the earlier ones
/// granted. The give-back restores the level each bucket would have had without the take,
/// whatever other callers took in between, less only what its burst cap would have cut since:
/// no token is lost to a denial, and none is granted beyond any bucket's quota. A denial's
/// `retry_after` is the longest of the buckets' waits.
///
/// ```
/// use core::time::Duration;
/// use tollgate::{Denied, Limits, ManualClock, Quota, Rate, TokenBucket};
///
/// let clock = ManualClock::new();
/// let requests = TokenBucket::try_new(Quota::new(Rate::per_minute(60)).burst(10), &clock)?;
/// let tokens = TokenBucket::try_new(Quota::new(Rate::per_minute(90_000)).burst(3_000), &clock)?;
/// let limits = Limits::new([&requests, &tokens]);
///
/// // A call of 2 000 tokens, then one of 2 500: 1 500 tokens short, a second at 1 500 a second.
/// assert!(limits.try_acquire([1, 2_000]).is_ok());
/// assert_eq!(
///     limits.try_acquire([1, 2_500]),
///     Err(Denied::insufficient(Duration::from_secs(1)))
/// );
/// assert_eq!(requests.available(), 9); // the denied call took no request
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
#[derive(Debug)]
pub struct Limits<'a, C: Clock, const N: usize, W: Word = DefaultWord> {
    buckets: [&'a TokenBucket<C, W>; N],
    jitter: Jitter,
}

/// Tokens taken from every bucket of a [`Limits`] for use at one instant: the result of
/// [`Limits::reserve`]. Act after [`wait`](Self::wait), or give them back with
/// [`Limits::cancel`].
#[derive(Debug)]
#[must_use = "the tokens are taken: act after `wait()`, or give them back with `Limits::cancel`"]
pub struct LimitsReservation<const N: usize> {
    pub(crate) parts: [Option<Reservation>; N],
    /// Per bucket, the tick on its clock at which the caller may act: the latest part's instant.
    acts_at_ticks: [u64; N],
    wait: Duration,
}

impl<const N: usize> LimitsReservation<N> {
    /// How long after the reservation was made the caller may act: the longest of the parts'
    /// waits.
    pub fn wait(&self) -> Duration {
        self.wait
    }
}

impl<'a, C: Clock, const N: usize, W: Word> Limits<'a, C, N, W> {
    /// Limits made of `buckets`, all of which must grant each call. Give them the same clock (or
    /// clocks with the same origin), so that their waits compare.
    pub fn new(buckets: [&'a TokenBucket<C, W>; N]) -> Self {
        Self {
            buckets,
            jitter: Jitter::none(),
        }
    }

    /// The same limits, with waiters woken up to `jitter` after their instant (see [`Jitter`]).
    pub fn with_jitter(self, jitter: Jitter) -> Self {
        Self { jitter, ..self }
    }

    /// The buckets, in the order costs are given.
    pub fn buckets(&self) -> &[&'a TokenBucket<C, W>; N] {
        &self.buckets
    }

    /// Takes `costs[i]` tokens from bucket `i` now, from all of them or from none.
    ///
    /// Never waits. A cost above a bucket's burst is [`Denied::ExceedsCapacity`] before anything
    /// is taken; otherwise a denial's `retry_after` is the longest of the buckets' waits.
    pub fn try_acquire(&self, costs: [u32; N]) -> Result<(), Denied> {
        self.reserve(costs, Duration::ZERO).map(drop)
    }

    /// Takes `costs[i]` tokens from bucket `i` for use when all of them have accrued, if that is
    /// within `max_wait`; from all of them or from none.
    ///
    /// Each bucket reserves its part (in arrival order, as [`TokenBucket::reserve`]); the caller
    /// acts at the latest part's instant. A part due earlier is held until then: its bucket
    /// counts it as taken at that instant, so that the bucket refilling meanwhile holds no more
    /// than its burst beside it. That is debt, which a bucket's word bounds
    /// ([`max_pause`](TokenBucket::max_pause): decades on the 64-bit word, a burst's refill on
    /// the 32-bit word); a call that would hold a part longer is refused, its `retry_after` the
    /// time until it would not be. If any bucket would wait beyond `max_wait`, the parts
    /// already reserved are given back and `retry_after` is the longest of the buckets' excess
    /// waits.
    pub fn reserve(
        &self,
        costs: [u32; N],
        max_wait: Duration,
    ) -> Result<LimitsReservation<N>, Denied> {
        // Capacity first: such a call can never be granted, so nothing is taken even briefly.
        for (bucket, &cost) in self.buckets.iter().zip(&costs) {
            let burst = bucket.quota().burst_size();
            if u64::from(cost) > burst {
                return Err(Denied::ExceedsCapacity { burst });
            }
        }
        let mut parts: [Option<Reservation>; N] = core::array::from_fn(|_| None);
        for (i, (bucket, &cost)) in self.buckets.iter().zip(&costs).enumerate() {
            match bucket.reserve(cost, max_wait) {
                Ok(part) => parts[i] = Some(part),
                Err(denied) => {
                    self.refund_parts(&mut parts);
                    return Err(self.longest(denied, i, &costs, max_wait));
                }
            }
        }
        let wait = parts
            .iter()
            .flatten()
            .map(Reservation::wait)
            .max()
            .unwrap_or(Duration::ZERO);
        let acts_at_ticks: [u64; N] = core::array::from_fn(|i| match &parts[i] {
            Some(part) => part
                .due_ticks()
                .wrapping_add(duration_to_ticks_floor::<C>(wait - part.wait())),
            None => 0,
        });
        // A part due before the caller acts is held meanwhile: its bucket counts it as taken
        // then, so that refilling in between cannot fill it past its burst beside the part. That
        // is debt, which the bucket's word bounds: a hold longer than it is refused.
        let mut too_long = Duration::ZERO;
        for (i, bucket) in self.buckets.iter().enumerate() {
            if parts[i].as_ref().is_some_and(|part| part.wait() < wait) {
                too_long = too_long.max(wait.saturating_sub(bucket.max_pause()));
            }
        }
        if !too_long.is_zero() {
            self.refund_parts(&mut parts);
            return Err(Denied::insufficient(too_long));
        }
        for (i, bucket) in self.buckets.iter().enumerate() {
            if let Some(part) = parts[i].as_mut().filter(|part| part.wait() < wait) {
                bucket.hold_until(part, acts_at_ticks[i]);
            }
        }
        Ok(LimitsReservation {
            parts,
            acts_at_ticks,
            wait,
        })
    }

    /// Gives a reservation's tokens back to every bucket, unless its instant has come (then the
    /// caller is taken to have acted), and never more than the bucket can spare:
    ///
    /// - a part still in debt (not yet due on its own bucket) goes back by that bucket's
    ///   [`cancel`](TokenBucket::cancel) rule, less what reservations made after it have counted
    ///   on — so no later reservation shares its instant with a newcomer, and no window sees
    ///   more than the burst;
    /// - a part already due, held while another bucket's part accrued, goes back less what its
    ///   burst cap would have cut since it was due (it may have nothing left to give).
    ///
    /// Pass only reservations made by these limits. Waits (`acquire` and the
    /// others) never reserve ahead, so they have nothing to cancel.
    pub fn cancel(&self, mut reservation: LimitsReservation<N>) {
        for (i, bucket) in self.buckets.iter().enumerate() {
            let Some(part) = reservation.parts[i].take() else {
                continue;
            };
            let now = bucket.clock().now();
            // Signed: an instant is past when `now - instant` is non-negative.
            let past = |instant: u64| (now.wrapping_sub(instant) as i64) >= 0;
            if !past(part.due_ticks()) {
                bucket.cancel(part);
            } else if !past(reservation.acts_at_ticks[i]) {
                bucket.refund(part);
            }
        }
    }

    /// The jitter waiters add after their instant.
    pub fn jitter(&self) -> &Jitter {
        &self.jitter
    }

    /// Gives every part back, due or not (see `TokenBucket::refund`): for a take the caller
    /// will not act on after all.
    pub(crate) fn refund_parts(&self, parts: &mut [Option<Reservation>; N]) {
        for (bucket, part) in self.buckets.iter().zip(parts.iter_mut()) {
            if let Some(part) = part.take() {
                bucket.refund(part);
            }
        }
    }

    /// The longest wait, given that bucket `denied_at` denied with `denied`.
    fn longest(
        &self,
        denied: Denied,
        denied_at: usize,
        costs: &[u32; N],
        max_wait: Duration,
    ) -> Denied {
        let Denied::Insufficient { retry_after } = denied else {
            return denied;
        };
        let mut retry_after = retry_after.get();
        for (bucket, &cost) in self.buckets.iter().zip(costs).skip(denied_at + 1) {
            match bucket.shortfall(cost, max_wait) {
                Ok(wait) => retry_after = retry_after.max(wait),
                Err(never) => return never,
            }
        }
        Denied::insufficient(retry_after)
    }
}

#[cfg(feature = "std")]
impl<C: Clock, const N: usize, W: Word> Limits<'_, C, N, W> {
    /// Takes `costs[i]` tokens from every bucket `i`, blocking the thread until all have accrued
    /// (plus any [`Jitter`]); returns the time waited. As [`TokenBucket::acquire_blocking`]: the
    /// caller waits in every bucket's line and, at the head of all of them, takes from all or
    /// none when all are due, so nothing is taken before then.
    pub fn acquire_blocking(&self, costs: [u32; N]) -> Result<Duration, Denied> {
        self.acquire_blocking_timeout(costs, Duration::MAX)
    }

    /// As [`acquire_blocking`](Self::acquire_blocking), if the tokens accrue within `timeout`
    /// (the jitter may add to it); otherwise fails, at once when the line says so, and takes
    /// nothing.
    pub fn acquire_blocking_timeout(
        &self,
        costs: [u32; N],
        timeout: Duration,
    ) -> Result<Duration, Denied> {
        // Nobody in line and every part at hand: taken at once, and nothing waited to jitter.
        if let Some(settled) = crate::wait::queue::at_once(self.buckets, || self.try_acquire(costs))
        {
            return settled.map(|()| Duration::ZERO);
        }
        let waiter = crate::wait::queue::Waiter::new(self.buckets, costs, Some(timeout))?;
        crate::wait::acquire_blocking(self, waiter, costs, &self.jitter)
    }
}

#[cfg(feature = "embedded-hal")]
impl<C: Clock, const N: usize, W: Word> Limits<'_, C, N, W> {
    /// Takes `costs[i]` tokens from every bucket `i`, waiting on `delay` until all have accrued
    /// (plus any [`Jitter`]); returns the time waited. As [`TokenBucket::acquire_with_delay`]:
    /// it sleeps until all are due, then tries, taking nothing before.
    ///
    /// ```
    /// use core::time::Duration;
    /// use embedded_hal::delay::DelayNs;
    /// use tollgate::{Limits, ManualClock, Quota, Rate, TokenBucket};
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
    /// let fast = TokenBucket::try_new(Quota::new(Rate::per_second(100)).start_empty(), &clock)?;
    /// let slow = TokenBucket::try_new(Quota::new(Rate::per_second(4)).start_empty(), &clock)?;
    /// let limits = Limits::new([&fast, &slow]);
    /// // 10 ms on the fast bucket, 250 ms on the slow one: one delay of 250 ms.
    /// assert_eq!(limits.acquire_with_delay([1, 1], &mut Skip(&clock)), Ok(Duration::from_millis(250)));
    /// assert_eq!(fast.available(), 24);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn acquire_with_delay(
        &self,
        costs: [u32; N],
        delay: &mut impl embedded_hal::delay::DelayNs,
    ) -> Result<Duration, Denied> {
        crate::wait::acquire_with_delay(self, costs, delay, &self.jitter)
    }
}

#[cfg(feature = "tokio")]
impl<C: Clock, const N: usize, W: Word> Limits<'_, C, N, W> {
    /// Takes `costs[i]` tokens from every bucket `i`, waiting until all have accrued (plus any
    /// [`Jitter`]); returns the time waited. As [`TokenBucket::acquire`]: the task waits in
    /// every bucket's line and, at the head of all of them, takes from all or none when all are
    /// due. Cancel-safe: a future dropped before then has taken nothing; one dropped during its
    /// jitter gives every part back.
    pub async fn acquire(&self, costs: [u32; N]) -> Result<Duration, Denied> {
        self.acquire_timeout(costs, Duration::MAX).await
    }

    /// As [`acquire`](Self::acquire), if the tokens accrue within `timeout` (the jitter may add
    /// to it); otherwise fails, at once when the line says so, and takes nothing.
    pub async fn acquire_timeout(
        &self,
        costs: [u32; N],
        timeout: Duration,
    ) -> Result<Duration, Denied> {
        // Nobody in line and every part at hand: taken at once, and nothing waited to jitter.
        if let Some(settled) = crate::wait::queue::at_once(self.buckets, || self.try_acquire(costs))
        {
            return settled.map(|()| Duration::ZERO);
        }
        let waiter = crate::wait::queue::Waiter::new(self.buckets, costs, Some(timeout))?;
        crate::wait::acquire_async(self, waiter, costs, &self.jitter).await
    }
}

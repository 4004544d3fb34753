//! Async waits on embassy-time's timer (feature `embassy-time`): any executor, no heap.

use core::future::Future;
use core::pin::Pin;
use core::task::{Context, Poll};
use core::time::Duration;

use super::async_line::{wait_in_line, Sleeper, TakeNow};
use crate::{Clock, Denied, EmbassyClock, Limits, TokenBucket, Word};

/// `acquire(n).await` and `acquire_timeout(n, timeout).await` for firmware on embassy (or any
/// executor, with embassy-time's driver installed): the waits sleep on embassy-time's timer
/// queue, with no heap. Import the trait to call them:
///
/// ```
/// # async fn run() -> Result<(), tollgate::Denied> {
/// use core::time::Duration;
/// use tollgate::wait::EmbassyWait;
/// use tollgate::{EmbassyClock, Quota, Rate, TokenBucket};
///
/// static UPLINK: TokenBucket<EmbassyClock> =
///     TokenBucket::new(Quota::new(Rate::per_second(10)).burst(5), EmbassyClock);
///
/// UPLINK.acquire(1).await?; // waits its turn, then for its token
/// match UPLINK.acquire_timeout(3, Duration::from_millis(50)).await {
///     Ok(_waited) => { /* send */ }
///     Err(_) => { /* gave up: nothing was taken */ }
/// }
/// # Ok(()) }
/// ```
///
/// The rules are the tokio waits':
///
/// - **Arrival order.** A caller that finds nobody waiting on its limit takes at once if its
///   tokens are there; one that finds anyone waiting joins the back of the line and never
///   takes before them. Only the head takes, when its tokens are due, through the limit's own
///   take. (`try_acquire` is not a wait: an interrupt handler's `try_acquire` still takes
///   whatever the bucket holds, ahead of the line.)
/// - **One wake per waiter.** Each waiter sleeps on its own timer until its *estimate*: when
///   the limit will hold the tokens of everyone ahead and its own. Without give-ups it then
///   heads the line with its tokens due, and takes. A waiter that gives up makes the estimates
///   behind it too late: the head that leaves before the next of them wakes it, and it sleeps
///   once more, until its tokens. (A [`Limits`] waiter behind others has no exact estimate,
///   since the line keeps no count per bucket: the head before it wakes it, and it sleeps once
///   more. A `try_acquire` from elsewhere that takes the head's tokens costs it a wake too.)
/// - **A request above the burst fails at once** with [`Denied::ExceedsCapacity`], and a
///   request whose estimate is past its timeout fails as it arrives.
/// - **Giving up is free.** Nothing is taken before the caller acts, so a dropped future or a
///   timeout leaves the limit as if it had never queued, whatever waits behind it: under
///   overload with callers that give up, goodput stays at the rate.
/// - **Nothing is held across an `.await`** that an interrupt handler needs: the line is
///   guarded by a critical section (the `critical-section` crate, which the firmware provides)
///   held for one look at its places (and the head's take: one compare-exchange); the limit
///   itself is the lock-free word, so an interrupt handler's `try_acquire` on the same bucket
///   never waits for a task.
///
/// **A late timer.** embassy-time's queue wakes a task at the driver's alarm, and a driver
/// that checks its queue on a periodic tick wakes up to a tick late; the executor may poll the
/// task later still. A bucket that is full while its waiter oversleeps caps away what accrues
/// meanwhile, so a burst with no room beyond the waiter's tokens would lose that lateness on
/// every token. The line learns how late its timers wake (the largest lateness seen,
/// [`timer_lateness`](crate::wait::timer_lateness)), and where the burst has no room for it
/// beyond the waiter's tokens, the head takes its tokens that far ahead of their instant (a
/// reservation, given back by the refund rule if the future is dropped before it acts) and
/// sleeps to the instant holding them: a late timer delays the caller, never the bucket's
/// schedule, and a burst of one gets the whole rate. Such a head wakes twice: to take ahead,
/// and at the instant. The first late wake teaches the line; what it loses is lost once. A
/// burst with room for the lateness needs none of this: its head takes when woken, and wakes
/// once. A keyed table's waits have no reservation to take ahead with: give its quotas a
/// burst of at least `n + rate × lateness`.
///
/// **The line's bound.** The line has [`LINE_CAPACITY`](crate::wait::LINE_CAPACITY) places,
/// shared by every limit's waiters, in one `static` (32 bytes a place on a 32-bit target). A
/// waiter that finds them all taken waits outside the line: it sleeps until its estimate and
/// tries again to join the line or, once nobody waits in its limit's line, to take. It takes
/// nothing before it acts (so giving up stays free) and never takes before anyone in the line,
/// but it is not ordered among those outside, nor against a caller who arrives as a place frees
/// up, and it may wake more than once.
///
/// `TokenBucket` and [`Limits`] have these waits, and `KeyedTable` has them per key
/// (`KeyedTable::acquire(key, n)`, feature `keyed-table`). On a build that also enables `tokio`, the
/// buckets' own `acquire` methods are tokio's: call these as `EmbassyWait::acquire(&bucket, n)`.
pub trait EmbassyWait {
    /// What one call asks for: `u32` tokens, or one count per bucket of a [`Limits`].
    type Cost;

    /// Takes `cost`, waiting in line and then until the tokens have accrued; returns the time
    /// waited (on the limit's clock). Fails at once, taking nothing, if the cost exceeds a
    /// burst. Dropping the future gives up its place and takes nothing.
    fn acquire(&self, cost: Self::Cost) -> impl Future<Output = Result<Duration, Denied>> + '_;

    /// As [`acquire`](Self::acquire), giving up after `timeout`: a wait that would outlast it
    /// fails as soon as that is known (as it arrives, from its estimate, or as it heads the
    /// line), with [`Denied::Insufficient`] whose `retry_after` is the time beyond the timeout
    /// its tokens need; one that runs out of time behind others (someone ahead was slower than
    /// estimated) fails then, with a `retry_after` of zero. Either way nothing was taken.
    fn acquire_timeout(
        &self,
        cost: Self::Cost,
        timeout: Duration,
    ) -> impl Future<Output = Result<Duration, Denied>> + '_;
}

impl<C: Clock, W: Word> EmbassyWait for TokenBucket<C, W> {
    type Cost = u32;
    fn acquire(&self, n: u32) -> impl Future<Output = Result<Duration, Denied>> + '_ {
        wait(self, n, None)
    }
    fn acquire_timeout(
        &self,
        n: u32,
        timeout: Duration,
    ) -> impl Future<Output = Result<Duration, Denied>> + '_ {
        wait(self, n, Some(timeout))
    }
}

/// With the limits' [`Jitter`](crate::Jitter) ([`Limits::with_jitter`]) after a wait that
/// slept, holding every part: a future dropped during it gives them back.
impl<C: Clock, const N: usize, W: Word> EmbassyWait for Limits<'_, C, N, W> {
    type Cost = [u32; N];
    async fn acquire(&self, costs: [u32; N]) -> Result<Duration, Denied> {
        super::jittered::in_line::jittered_in_line(
            self,
            costs,
            None,
            self.jitter(),
            &mut EmbassyTimer,
        )
        .await
    }
    async fn acquire_timeout(
        &self,
        costs: [u32; N],
        timeout: Duration,
    ) -> Result<Duration, Denied> {
        let timeout = Some(timeout);
        super::jittered::in_line::jittered_in_line(
            self,
            costs,
            timeout,
            self.jitter(),
            &mut EmbassyTimer,
        )
        .await
    }
}

async fn wait<L: TakeNow>(
    limit: &L,
    cost: L::Cost,
    timeout: Option<Duration>,
) -> Result<Duration, L::Error> {
    wait_in_line(limit, cost, timeout, &mut EmbassyTimer).await
}

/// Sleeps on embassy-time's timer queue, through its driver.
pub(super) struct EmbassyTimer;

impl Sleeper for EmbassyTimer {
    fn sleep(&mut self, duration: Duration) -> impl Future<Output = ()> + '_ {
        Until {
            at: EmbassyClock.now().saturating_add(ticks_ceil(duration)),
        }
    }
}

/// The driver's ticks in `duration`, rounded up. One copy, out of line, with no 128-bit
/// arithmetic: the part below a second is converted in a reduced fraction of `TICK_HZ / 10^9`,
/// in 32 bits where that holds (`TICK_HZ` of 1 MHz: a division by 1 000).
#[inline(never)]
fn ticks_ceil(duration: Duration) -> u64 {
    const HZ: u64 = embassy_time_driver::TICK_HZ;
    const GCD: u64 = crate::rate::gcd(HZ as u128, 1_000_000_000) as u64;
    const NUM: u64 = HZ / GCD;
    const DEN: u64 = 1_000_000_000 / GCD;
    let nanos = duration.subsec_nanos();
    let part = if NUM <= 4 {
        // nanos < 10^9: times 4 still fits in 32 bits.
        u64::from((nanos * NUM as u32).div_ceil(DEN as u32))
    } else {
        (u64::from(nanos) * NUM).div_ceil(DEN)
    };
    duration.as_secs().saturating_mul(HZ).saturating_add(part)
}

/// Resolves once embassy-time's clock reaches `at`: embassy-time's `Timer::at`, without the
/// dependency on embassy-time's types.
struct Until {
    at: u64,
}

impl Future for Until {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if embassy_time_driver::now() >= self.at {
            Poll::Ready(())
        } else {
            embassy_time_driver::schedule_wake(self.at, cx.waker());
            Poll::Pending
        }
    }
}

#[cfg(feature = "keyed-table")]
mod keyed {
    use core::hash::{Hash, Hasher};
    use core::time::Duration;

    use super::wait;
    use crate::wait::async_line::TakeNow;
    use crate::wait::GiveBack;
    use crate::{Clock, Denied, KeyedDenied, KeyedTable, Word};

    /// One key of a table: the limit a keyed wait waits on.
    struct Keyed<'a, K, C, const N: usize, W: Word, const T: usize> {
        table: &'a KeyedTable<K, C, N, W, T>,
        key: K,
    }

    /// FNV-1a over the key's `Hash`: which line a key's waiters share. Two keys that collide
    /// share a line (a waiter may wait behind the other key's head), never a bucket.
    struct Fnv(u64);
    impl Hasher for Fnv {
        fn finish(&self) -> u64 {
            self.0
        }
        fn write(&mut self, bytes: &[u8]) {
            for &byte in bytes {
                self.0 = (self.0 ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
            }
        }
    }

    /// A keyed take holds nothing: a key's waits take when their tokens are due, never ahead
    /// (the table has no reservations), so they are not compensated for a late timer.
    impl<K, C, const N: usize, W, const T: usize> GiveBack for Keyed<'_, K, C, N, W, T>
    where
        K: Eq + Hash + Clone,
        C: Clock,
        W: Word,
    {
        type Cost = u32;
        type Taken = ();
        fn give_back(&self, (): ()) {}
    }

    impl<K, C, const N: usize, W, const T: usize> TakeNow for Keyed<'_, K, C, N, W, T>
    where
        K: Eq + Hash + Clone,
        C: Clock,
        W: Word,
    {
        type Clock = C;
        type Error = KeyedDenied;
        const EXACT_ESTIMATE: bool = true;
        fn line_key(&self) -> usize {
            let mut hasher = Fnv(0xcbf2_9ce4_8422_2325);
            self.key.hash(&mut hasher);
            let table = self.table as *const KeyedTable<K, C, N, W, T> as usize;
            // Never 0, the mark of a free place.
            (table ^ hasher.finish() as usize).max(1)
        }
        fn fits(&self, n: u32) -> Result<(), KeyedDenied> {
            // The burst of the largest tier: the key's own tier is known only once it is held,
            // and a request above its burst then fails at its first take.
            let burst = self.table.max_burst();
            if u64::from(n) > burst {
                return Err(KeyedDenied::Denied(Denied::ExceedsCapacity { burst }));
            }
            Ok(())
        }
        fn take_ahead(&self, n: u32, _ahead: Duration) -> Result<((), Duration), KeyedDenied> {
            // `ahead` is always zero: `slack_ticks` says a late take loses nothing.
            self.table
                .try_acquire(self.key.clone(), n)
                .map(|()| ((), Duration::ZERO))
        }
        fn due_in(denied: &KeyedDenied) -> Option<Duration> {
            match denied {
                KeyedDenied::Denied(Denied::Insufficient { retry_after }) => {
                    Some(retry_after.get())
                }
                _ => None,
            }
        }
        fn due_after(&self, after: u64, n: u32) -> Option<u64> {
            let p = self.table.layout_of(&self.key);
            let units = p.cost(n).ok()?;
            Some(after.wrapping_add(p.ticks_until(after, units)))
        }
        fn slack_ticks(&self, _now: u64, _n: u32) -> u64 {
            u64::MAX
        }
        fn now_ticks(&self) -> u64 {
            self.table.clock().now()
        }
    }

    /// # Waits on embassy-time's timer (feature `embassy-time`)
    impl<K, C, const N: usize, W, const T: usize> KeyedTable<K, C, N, W, T>
    where
        K: Eq + Hash + Clone,
        C: Clock,
        W: Word,
    {
        /// Takes `n` tokens from `key`'s bucket, waiting in `key`'s line and then until they
        /// have accrued; returns the time waited. The rules of
        /// [`EmbassyWait`](crate::wait::EmbassyWait), per key: waiters of one key are served in
        /// arrival order, each key's line apart from the others'. A new key finding the table
        /// full fails at once with [`KeyedDenied::Full`] (the table's `until_room` says when to
        /// try again; under [`WhenFull::Admit`](crate::WhenFull::Admit) it draws from the
        /// overflow bucket instead); `n` above its tier's burst fails at once. From the moment
        /// a wait lines up until it is over, its key's slot is never evicted and counts in
        /// `protected_len`, so no eviction hands the key's burst out again.
        ///
        /// ```
        /// # async fn run() -> Result<(), tollgate::KeyedDenied> {
        /// use tollgate::{EmbassyClock, KeyedTable, Quota, Rate, WhenFull};
        ///
        /// static PER_ID: KeyedTable<u16, EmbassyClock, 8> =
        ///     KeyedTable::new(Quota::new(Rate::per_second(10)), EmbassyClock, WhenFull::Refuse);
        /// PER_ID.acquire(0x101, 1).await?;
        /// # Ok(()) }
        /// ```
        pub async fn acquire(&self, key: K, n: u32) -> Result<Duration, KeyedDenied> {
            let _kept = self.pin(key.clone(), n)?;
            wait(&Keyed { table: self, key }, n, None).await
        }

        /// As [`acquire`](Self::acquire), giving up after `timeout` as
        /// [`EmbassyWait::acquire_timeout`](crate::wait::EmbassyWait::acquire_timeout) does,
        /// having taken nothing.
        pub async fn acquire_timeout(
            &self,
            key: K,
            n: u32,
            timeout: Duration,
        ) -> Result<Duration, KeyedDenied> {
            let _kept = self.pin(key.clone(), n)?;
            wait(&Keyed { table: self, key }, n, Some(timeout)).await
        }
    }
}

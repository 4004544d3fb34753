//! [`LeasedBucket`]: a [`RedisBucket`]'s tokens taken in leases of many at a time, and granted
//! from the lease in this process at local speed.
//!
//! See the type for the rule that sizes a lease and what leasing costs.

use core::time::Duration;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use super::answers::Held;
use super::{Error, Fault, RedisBucket, RedisReservation, Source};
use tollgate::Denied;

/// A [`RedisBucket`] whose tokens this process takes `k` at a time.
///
/// A lease is one [`reserve`](RedisBucket::reserve) of `k` tokens in Redis, so leasing moves
/// tokens out of the shared bucket and never makes any: the fleet's grants from the start are
/// within `burst + rate × t`, as without leases. The lease's tokens come due in this process no
/// earlier than in Redis (a reservation that ran the shared bucket into debt is due later, and
/// its tokens come due one by one at the quota's rate, the last at the reservation's `wait`,
/// counted from when its answer arrived), and they are granted only within the lease's
/// lifetime, counted from when the lease was asked for (no later than Redis took the tokens,
/// however long its answer took to come back); those unused then are lost to everyone. A
/// lease whose answer takes longer than its lifetime grants nothing: choose a lifetime well
/// above the round trip. A lease replaced early gives back what it
/// did not use by [`cancel`](RedisBucket::cancel)'s rule: what is not yet due, less what later
/// reservations have counted on.
///
/// **The size `k` adapts to this process's demand**: it doubles each time a lease is used up
/// within its lifetime (up to the quota's burst, and to what the rate yields in half a
/// lifetime) and falls to what the last lease used (at least one token) when a lease expires
/// with tokens left. A busy process thus makes a round trip per `k` grants, an idle one holds
/// one token.
///
/// **The cost**: a token taken by one process's lease may sit unused there for at most one
/// lifetime while another process is refused, and at most one lease's worth (`k`) per process
/// per lifetime is lost. Over any window shorter than the run, grants may exceed
/// `burst + rate × window` by up to `rate × lifetime`, since a lease taken before the window
/// may be spent within it; this holds however late Redis's answers arrive (up to the call's
/// timeout), since a token is spent no later than a lifetime after Redis took it.
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use tollgate_redis::{Client, LeasedBucket, RedisBucket, RedisConnection};
/// use tollgate::{Quota, Rate};
///
/// let redis = RedisConnection::connect(Client::open("redis://127.0.0.1/")?).await?;
/// let quota = Quota::new(Rate::per_second(1_000_000)).burst(100_000);
/// let shared = RedisBucket::builder(&redis, "search", quota).connect().await?;
/// let leased = LeasedBucket::new(shared, Duration::from_millis(100));
/// leased.try_acquire(1).await?; // a round trip only when the lease runs out
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct LeasedBucket {
    bucket: RedisBucket,
    lifetime: Duration,
    /// The largest lease: the burst, and what the rate yields in half a lifetime.
    max_lease: u32,
    /// One token's time, rounded down: due instants computed from it are never early.
    token_ns: u64,
    state: Mutex<State>,
    /// Held by the one caller that takes a new lease; the others wait for it.
    renewal: tokio::sync::Mutex<()>,
    round_trips: AtomicU64,
}

#[derive(Debug)]
struct State {
    lease: Option<Lease>,
    /// The size of the next lease.
    next_size: u32,
    /// Until when Redis refused the last lease asked for.
    refused_until: Option<Instant>,
}

#[derive(Debug)]
struct Lease {
    /// When the lease was asked for: no later than Redis made it. The lease expires a lifetime
    /// after it, however long the answer took to come back.
    sent: Instant,
    /// When Redis's answer arrived: no earlier than Redis made it. Its tokens come due from
    /// here.
    start: Instant,
    tokens: u32,
    used: u32,
    /// Nanoseconds after `start` when the last token is due.
    wait_ns: u64,
    source: Source,
    reservation: RedisReservation,
}

/// What the local lease says about `n` tokens.
enum Local {
    Granted(Source),
    /// Not yet due: this much later.
    NotYet(Duration),
    /// The lease is used up or expired.
    Spent,
}

impl LeasedBucket {
    /// Leases `bucket`'s tokens, each lease granting for at most `lifetime` (reserved within
    /// half of it). The first lease is one token.
    pub fn new(bucket: RedisBucket, lifetime: Duration) -> Self {
        let quota = *bucket.quota();
        let token = quota.rate().period().as_nanos() / quota.rate().tokens().max(1) as u128;
        let per_half_lifetime = (lifetime.as_nanos() / 2)
            .checked_div(token)
            .unwrap_or(u128::MAX);
        let max_lease = per_half_lifetime
            .min(quota.burst_size() as u128)
            .min(u32::MAX as u128)
            .max(1) as u32;
        Self {
            bucket,
            lifetime,
            max_lease,
            token_ns: token.min(u64::MAX as u128) as u64,
            state: Mutex::new(State {
                lease: None,
                next_size: 1,
                refused_until: None,
            }),
            renewal: tokio::sync::Mutex::new(()),
            round_trips: AtomicU64::new(0),
        }
    }

    /// Takes `n` tokens from this process's lease, or from a new lease when it is spent (one
    /// round trip, or two when the spent lease has undue tokens to give back).
    ///
    /// Granted: who granted the lease. Denied: when the lease's next tokens are due, or when
    /// Redis could lease them; the fault policy of the bucket decides when Redis cannot answer,
    /// for the whole lease. `n` above the burst is [`Denied::ExceedsCapacity`] at once; `n = 0`
    /// takes nothing and makes no round trip.
    pub async fn try_acquire(&self, n: u32) -> Result<Source, Error> {
        let burst = self.bucket.quota().burst_size();
        if n as u64 > burst {
            return Err(Error::by_redis(Denied::ExceedsCapacity { burst }));
        }
        if n == 0 {
            // Nothing to take; the lease's size is brought up to date all the same.
            let mut state = self.state();
            let source = match self.take(&mut state, 0, Instant::now()) {
                Local::Granted(source) => source,
                Local::NotYet(_) | Local::Spent => Source::Redis,
            };
            return Ok(source);
        }
        if let Some(answer) = self.decide_locally(n) {
            return answer;
        }
        let _renewal = self.renewal.lock().await;
        // Another caller may have renewed the lease while this one waited.
        if let Some(answer) = self.decide_locally(n) {
            return answer;
        }
        self.give_back_spent().await;
        let size = self.state().next_size.max(n);
        let mut leased = self.lease(size).await;
        if let Err(Error::Denied {
            denied: Denied::Insufficient { retry_after },
            source,
        }) = &leased
        {
            // Not `size` tokens within half a lifetime. `n` come `size - n` tokens' time
            // sooner: ask for them now if that is now, else say when.
            let sooner = Duration::from_nanos(((size - n) as u64).saturating_mul(self.token_ns));
            if size > n && retry_after.get() <= sooner {
                leased = self.lease(n).await;
            } else {
                leased = Err(Error::Denied {
                    denied: Denied::insufficient(retry_after.get().saturating_sub(sooner)),
                    source: *source,
                });
            }
        }
        let mut state = self.state();
        match leased {
            Ok(lease) => {
                state.lease = Some(lease);
                state.refused_until = None;
            }
            Err(error) => {
                if let Some(retry_after) = error.retry_after() {
                    state.refused_until = Instant::now().checked_add(retry_after);
                    state.next_size = n.max(1);
                }
                return Err(error);
            }
        }
        match self.take(&mut state, n, Instant::now()) {
            Local::Granted(source) => Ok(source),
            Local::NotYet(retry_after) => Err(Error::by_redis(Denied::insufficient(retry_after))),
            // A lease of at least `n` tokens, just taken: not spent unless the lifetime is zero.
            Local::Spent => Err(Error::by_redis(Denied::insufficient(Duration::ZERO))),
        }
    }

    /// Gives back the current lease's tokens that are not yet due, by the cancel rule, and
    /// drops the lease: for a process about to go idle or exit.
    pub async fn release(&self) -> Result<(), Fault> {
        let _renewal = self.renewal.lock().await;
        let lease = self.state().lease.take();
        match lease {
            Some(lease) => self.give_back(lease).await,
            None => Ok(()),
        }
    }

    /// Round trips to Redis so far: leases taken and given back.
    pub fn round_trips(&self) -> u64 {
        // Relaxed: a statistic.
        self.round_trips.load(Ordering::Relaxed)
    }

    /// The size of the next lease, by the adaptive rule.
    pub fn next_lease_size(&self) -> u32 {
        self.state().next_size
    }

    /// The shared bucket the leases come from.
    pub fn bucket(&self) -> &RedisBucket {
        &self.bucket
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The answer without a round trip, if there is one.
    fn decide_locally(&self, n: u32) -> Option<Result<Source, Error>> {
        let now = Instant::now();
        let mut state = self.state();
        match self.take(&mut state, n, now) {
            Local::Granted(source) => Some(Ok(source)),
            Local::NotYet(retry_after) => {
                Some(Err(Error::by_redis(Denied::insufficient(retry_after))))
            }
            Local::Spent => {
                let refused = state.refused_until.filter(|until| *until > now)?;
                Some(Err(Error::by_redis(Denied::insufficient(refused - now))))
            }
        }
    }

    /// Grants `n` from the lease if they are due; otherwise says when, or that it is spent
    /// (and sizes the next lease).
    fn take(&self, state: &mut State, n: u32, now: Instant) -> Local {
        let Some(lease) = &mut state.lease else {
            return Local::Spent;
        };
        let age = now.saturating_duration_since(lease.start);
        let expired = now.saturating_duration_since(lease.sent) >= self.lifetime;
        let short = n > lease.tokens - lease.used;
        if expired || short {
            state.next_size = if expired && lease.used < lease.tokens {
                lease.used.max(1)
            } else {
                lease.tokens.saturating_mul(2).min(self.max_lease)
            };
            return Local::Spent;
        }
        // The token `used + n` is due `tokens - used - n` token times before the last.
        let after_ns = (lease.tokens - lease.used - n) as u64;
        let due_ns = lease
            .wait_ns
            .saturating_sub(after_ns.saturating_mul(self.token_ns));
        let age_ns = age.as_nanos().min(u64::MAX as u128) as u64;
        if age_ns < due_ns {
            return Local::NotYet(Duration::from_nanos(due_ns - age_ns));
        }
        lease.used += n;
        Local::Granted(lease.source)
    }

    /// Leases `size` tokens from Redis within half a lifetime.
    async fn lease(&self, size: u32) -> Result<Lease, Error> {
        // Relaxed: a statistic.
        self.round_trips.fetch_add(1, Ordering::Relaxed);
        let sent = Instant::now();
        let reservation = self.bucket.reserve(size, self.lifetime / 2).await?;
        Ok(Lease {
            sent,
            start: Instant::now(),
            tokens: size,
            used: 0,
            wait_ns: reservation.wait().as_nanos().min(u64::MAX as u128) as u64,
            source: reservation.source(),
            reservation,
        })
    }

    /// Gives back the spent lease's undue tokens, if it has any.
    async fn give_back_spent(&self) {
        let lease = self.state().lease.take();
        if let Some(lease) = lease {
            // A fault keeps the tokens taken: fewer grants, never more.
            let _ = self.give_back(lease).await;
        }
    }

    /// Cancels the unused top of `lease`: its last tokens, due last.
    async fn give_back(&self, lease: Lease) -> Result<(), Fault> {
        let unused = lease.tokens - lease.used;
        if unused == 0 || lease.start.elapsed().as_nanos() >= lease.wait_ns as u128 {
            return Ok(()); // all due: the cancel rule gives nothing back
        }
        let unused_part = match lease.reservation.held {
            Held::Redis { due, epoch } => RedisReservation {
                tokens: unused,
                wait: lease.reservation.wait,
                held: Held::Redis { due, epoch },
            },
            // A local fallback reservation is given back whole, or not at all.
            held @ Held::Fallback(..) if lease.used == 0 => RedisReservation {
                held,
                ..lease.reservation
            },
            _ => return Ok(()),
        };
        // Relaxed: a statistic.
        self.round_trips.fetch_add(1, Ordering::Relaxed);
        self.bucket.cancel(unused_part).await
    }
}

// A leased bucket is shared by the tasks of a process, and its calls run on any of them.
const _: fn() = || {
    fn send<T: Send + Sync>() {}
    fn send_future<T: Send>(_: &T) {}
    send::<LeasedBucket>();
    let _ = |leased: &LeasedBucket| send_future(&leased.try_acquire(1));
    let _ = |leased: &LeasedBucket| send_future(&leased.release());
};

//! [`RedisBucket`]: one quota shared by many processes, kept in Redis.
//!
//! The bucket is the local bucket's model run by a Lua script on one key: the same rate, burst
//! and start fill, the same exact integer arithmetic, the same answers (granted, or when to
//! retry; the tokens left; the time until full), and reservations served first come, first
//! served across every process that shares the key. Redis `TIME` is the only clock, so the
//! clients' clocks may disagree freely. An absent key is a full bucket, and the key expires when
//! the bucket would be full again, so idle buckets cost no memory.
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use tollgate::redis::{Client, FaultPolicy, RedisBucket};
//! use tollgate::{Quota, Rate};
//!
//! let quota = Quota::new(Rate::per_second(100)).burst(10);
//! let bucket = RedisBucket::builder(Client::open("redis://127.0.0.1/")?, "geocoder", quota)
//!     // Four workers usually: each falls back to a quarter of the quota if Redis is down.
//!     .policy(FaultPolicy::fallback_share(quota, 4))
//!     .connect()
//!     .await?;
//! bucket.acquire(1).await?; // waits its turn, in Redis's order
//! # Ok(())
//! # }
//! ```
//!
//! Every process must build its bucket for a key from the same quota: the script takes the
//! quota from each call and trusts it. A server restarted without persistence forgets its keys,
//! which reads as full buckets.

mod answers;
mod builder;
mod error;
mod layout;

use core::time::Duration;
use std::string::{String, ToString};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use ::redis::aio::ConnectionManager;
use ::redis::Script;

use self::answers::Held;
pub use self::answers::{FaultPolicy, Grant, Level, RedisReservation, Source};
pub use self::builder::Builder;
pub use self::error::{Error, Fault, SetupError};
/// The `redis` crate's client, from which a bucket connects.
pub use ::redis::Client;

use self::layout::Layout;
use crate::{Denied, Quota, Reservation, StdClock, TokenBucket};

/// A token bucket shared by every process that uses the same key on the same Redis.
///
/// Each call is one round trip: one `EVALSHA` of the bucket's script (the script is loaded
/// again by the client if the server has forgotten it). Clones share the connection, which
/// multiplexes concurrent calls and reconnects by itself. Needs a tokio runtime with its timer
/// enabled.
#[derive(Clone)]
pub struct RedisBucket {
    inner: Arc<Inner>,
}

struct Inner {
    connection: ConnectionManager,
    script: Script,
    key: String,
    layout: Layout,
    quota: Quota,
    policy: Policy,
    timeout: Duration,
    /// The start fill is passed until a call has reached Redis: it applies to an absent key.
    start_pending: AtomicBool,
    /// `TIME`, or a time the agreement test pins.
    fixed_now_us: AtomicU64,
}

enum Policy {
    FailClosed,
    FailOpen,
    Fallback(TokenBucket<StdClock>),
}

/// `fixed_now_us` when the script reads Redis `TIME`.
const TIME: u64 = u64::MAX;

/// One call of the script.
enum Op {
    Take {
        cost: u64,
        max_debt: u64,
    },
    Cancel {
        cost: u64,
        due_us: i64,
        due_level: i64,
    },
    Peek,
}

/// What the script answered: granted or not, the level at its `now` after the call, and now.
#[derive(Clone, Copy)]
struct Reply {
    granted: bool,
    level: i64,
    now_us: i64,
}

impl RedisBucket {
    /// Starts building a bucket for `quota` on `key`, through `client`.
    pub fn builder(client: Client, key: impl Into<String>, quota: Quota) -> Builder {
        Builder {
            client,
            key: key.into(),
            quota,
            policy: FaultPolicy::FailClosed,
            timeout: Duration::from_millis(200),
        }
    }

    /// Takes `n` tokens now, or says how long until it could.
    ///
    /// Never waits beyond one round trip. `n = 0` takes nothing and reports the level; `n`
    /// above the burst is [`Denied::ExceedsCapacity`] at once, without a round trip. A denial
    /// takes nothing.
    pub async fn try_acquire(&self, n: u32) -> Result<Grant, Error> {
        let inner = &*self.inner;
        let l = &inner.layout;
        if n as u64 > l.burst {
            return Err(Error::by_redis(Denied::ExceedsCapacity { burst: l.burst }));
        }
        let cost = l.cost(n);
        let op = if n == 0 {
            Op::Peek
        } else {
            Op::Take { cost, max_debt: 0 }
        };
        match inner.call(op).await {
            Ok(reply) if reply.granted => Ok(Grant {
                source: Source::Redis,
                level: Some(inner.level(reply.level)),
            }),
            Ok(reply) => Err(Error::by_redis(Denied::Insufficient {
                retry_after: l.duration(short(cost, reply.level)),
            })),
            Err(fault) => match &inner.policy {
                Policy::FailClosed => Err(Error::Unavailable(fault)),
                Policy::FailOpen => Ok(Grant {
                    source: Source::Open,
                    level: None,
                }),
                Policy::Fallback(local) => {
                    local.try_acquire(n).map_err(Error::by_fallback)?;
                    Ok(Grant {
                        source: Source::Fallback,
                        level: Some(Level {
                            remaining: local.available(),
                            until_full: local.until_full(),
                        }),
                    })
                }
            },
        }
    }

    /// Takes `n` tokens now for use when they have accrued, if that is within `max_wait`.
    ///
    /// Reservations queue in the order Redis receives them, from every process: each runs the
    /// shared bucket further into debt and is due when that debt is paid. If the wait would
    /// exceed `max_wait`, nothing is taken and `retry_after` says when the same call would
    /// succeed. Debt is bounded at 2^50 units (decades at any rate).
    pub async fn reserve(&self, n: u32, max_wait: Duration) -> Result<RedisReservation, Error> {
        let inner = &*self.inner;
        let l = &inner.layout;
        if n as u64 > l.burst {
            return Err(Error::by_redis(Denied::ExceedsCapacity { burst: l.burst }));
        }
        if n == 0 {
            return Ok(RedisReservation {
                tokens: 0,
                wait: Duration::ZERO,
                held: Held::Nothing,
            });
        }
        let cost = l.cost(n);
        let max_debt = l.debt_within(max_wait);
        match inner.call(Op::Take { cost, max_debt }).await {
            Ok(reply) if reply.granted => Ok(RedisReservation {
                tokens: n,
                wait: l.duration(reply.level.min(0).unsigned_abs()),
                held: Held::Redis {
                    now_us: reply.now_us,
                    level: reply.level,
                },
            }),
            Ok(reply) => {
                // The local bucket's retry_after, from the same exact debt.
                let short = short(cost, reply.level);
                let wait = l.duration(short);
                let retry_after = if short > l.max_debt_units {
                    l.duration(short - l.max_debt_units)
                        .max(wait.saturating_sub(max_wait))
                } else {
                    wait.saturating_sub(max_wait)
                };
                Err(Error::by_redis(Denied::Insufficient { retry_after }))
            }
            Err(fault) => match &inner.policy {
                Policy::FailClosed => Err(Error::Unavailable(fault)),
                Policy::FailOpen => Ok(RedisReservation {
                    tokens: n,
                    wait: Duration::ZERO,
                    held: Held::Open,
                }),
                Policy::Fallback(local) => {
                    let reservation = local.reserve(n, max_wait).map_err(Error::by_fallback)?;
                    Ok(RedisReservation {
                        tokens: n,
                        wait: reservation.wait(),
                        held: Held::Fallback(reservation),
                    })
                }
            },
        }
    }

    /// Gives a reservation's tokens back: all of them, less those that reservations made after
    /// it (by any process) have already counted on, and none once it is due (the rule of Go's
    /// `CancelAt`, as the local bucket's [`cancel`](TokenBucket::cancel)). Never gives back
    /// more than was taken, and never fills the bucket beyond its burst.
    ///
    /// Pass only reservations made by this bucket (or a clone of it). If Redis cannot answer,
    /// the tokens stay taken and the fault is returned.
    pub async fn cancel(&self, reservation: RedisReservation) -> Result<(), Fault> {
        self.inner.cancel(reservation).await
    }

    /// Takes `n` tokens, waiting for them as long as it takes: a reservation in Redis, then a
    /// local sleep. Returns the time waited.
    ///
    /// Cancel-safe: a future dropped while it sleeps gives its reservation back (from a task
    /// spawned on the current runtime). A future dropped during the round trip may have taken
    /// its tokens; they are then lost, never granted twice.
    pub async fn acquire(&self, n: u32) -> Result<Duration, Error> {
        self.acquire_timeout(n, Duration::MAX).await
    }

    /// Like [`acquire`](Self::acquire), but fails at once, taking nothing, if the wait would
    /// exceed `timeout`: [`Denied::Insufficient`] says when the same call would succeed.
    pub async fn acquire_timeout(&self, n: u32, timeout: Duration) -> Result<Duration, Error> {
        let reservation = self.reserve(n, timeout).await?;
        let wait = reservation.wait;
        let mut pending = CancelOnDrop {
            inner: Arc::clone(&self.inner),
            reservation: Some(reservation),
        };
        if !wait.is_zero() {
            // (A zero sleep would still wait for the timer's next millisecond.)
            tokio::time::sleep(wait).await;
        }
        pending.reservation = None; // acted on: the tokens are spent
        Ok(wait)
    }

    /// The shared bucket's level now, without taking anything.
    pub async fn level(&self) -> Result<Level, Fault> {
        let inner = &*self.inner;
        inner
            .call(Op::Peek)
            .await
            .map(|reply| inner.level(reply.level))
    }

    /// The quota this bucket was built from.
    pub fn quota(&self) -> &Quota {
        &self.inner.quota
    }

    /// The key holding the bucket.
    pub fn key(&self) -> &str {
        &self.inner.key
    }

    /// For the agreement test alone: makes the script take `now_us` (microseconds) as its clock
    /// instead of Redis `TIME`, and set no expiry; `None` goes back to `TIME`.
    #[doc(hidden)]
    pub fn pin_script_now(&self, now_us: Option<u64>) {
        // Relaxed: a test setting read by later calls of the same task.
        self.inner
            .fixed_now_us
            .store(now_us.unwrap_or(TIME), Ordering::Relaxed);
    }
}

impl core::fmt::Debug for RedisBucket {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RedisBucket")
            .field("key", &self.inner.key)
            .field("quota", &self.inner.quota)
            .field("timeout", &self.inner.timeout)
            .finish_non_exhaustive()
    }
}

impl Inner {
    /// Runs the script once, within the timeout.
    async fn call(&self, op: Op) -> Result<Reply, Fault> {
        let l = &self.layout;
        // Relaxed: a lone flag; racing first calls all pass the start fill, and the script
        // applies it to an absent key only.
        let first = self.start_pending.load(Ordering::Relaxed);
        let start = if first { l.start_units } else { l.burst_units };
        let now = match self.fixed_now_us.load(Ordering::Relaxed) {
            TIME => String::new(),
            now_us => now_us.to_string(),
        };
        let mut invocation = self.script.key(&self.key);
        let name = match op {
            Op::Take { .. } => "take",
            Op::Cancel { .. } => "cancel",
            Op::Peek => "peek",
        };
        invocation
            .arg(name)
            .arg(l.units_per_us)
            .arg(l.burst_units)
            .arg(start)
            .arg(l.horizon_us)
            .arg(now);
        match op {
            Op::Take { cost, max_debt } => {
                invocation.arg(cost).arg(max_debt);
            }
            Op::Cancel {
                cost,
                due_us,
                due_level,
            } => {
                invocation.arg(cost).arg(due_us).arg(due_level);
            }
            Op::Peek => {}
        }
        let mut connection = self.connection.clone();
        let answer = invocation.invoke_async::<(i64, i64, i64)>(&mut connection);
        let (granted, level, now_us) = match tokio::time::timeout(self.timeout, answer).await {
            Ok(Ok(reply)) => reply,
            // The connection's own response timeout, the same as ours.
            Ok(Err(error)) if error.is_timeout() => {
                return Err(Fault::Timeout {
                    after: self.timeout,
                })
            }
            Ok(Err(error)) => return Err(Fault::Redis(error)),
            Err(_) => {
                return Err(Fault::Timeout {
                    after: self.timeout,
                })
            }
        };
        if first {
            self.start_pending.store(false, Ordering::Relaxed);
        }
        Ok(Reply {
            granted: granted == 1,
            level,
            now_us,
        })
    }

    async fn cancel(&self, reservation: RedisReservation) -> Result<(), Fault> {
        match reservation.held {
            Held::Redis { now_us, level } => {
                let cost = self.layout.cost(reservation.tokens);
                let op = Op::Cancel {
                    cost,
                    due_us: now_us,
                    due_level: level,
                };
                self.call(op).await.map(drop)
            }
            Held::Fallback(local) => {
                self.cancel_fallback(local);
                Ok(())
            }
            Held::Open | Held::Nothing => Ok(()),
        }
    }

    fn cancel_fallback(&self, reservation: Reservation) {
        if let Policy::Fallback(local) = &self.policy {
            local.cancel(reservation);
        }
    }

    fn level(&self, level: i64) -> Level {
        Level {
            remaining: self.layout.tokens(level),
            until_full: self.layout.until_full(level),
        }
    }
}

/// Units short of `cost` at `level`: positive whenever the script denied.
fn short(cost: u64, level: i64) -> u64 {
    (cost as i128 - level as i128).clamp(0, u64::MAX as i128) as u64
}

/// Gives back the reservation of an `acquire` future dropped before it was due.
struct CancelOnDrop {
    inner: Arc<Inner>,
    reservation: Option<RedisReservation>,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let Some(reservation) = self.reservation.take() else {
            return;
        };
        match reservation.held {
            Held::Fallback(local) => self.inner.cancel_fallback(local),
            Held::Redis { .. } => {
                // Dropping cannot wait for Redis: a task gives the tokens back. Without a
                // runtime they stay taken, which grants nothing twice.
                if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                    let inner = Arc::clone(&self.inner);
                    runtime.spawn(async move {
                        let _kept_if_unreachable = inner.cancel(reservation).await;
                    });
                }
            }
            Held::Open | Held::Nothing => {}
        }
    }
}

//! # tollgate-redis
//!
//! [`RedisBucket`]: one quota shared by many processes, kept in Redis, with [`tollgate`]'s
//! rules.
//!
//! The bucket is the local bucket's model run by a Lua script on one key: the same rate, burst
//! and start fill, the same exact integer arithmetic, the same answers (granted, or when to
//! retry; the tokens left; the time until full), and reservations served first come, first
//! served across every process that shares the key. Redis `TIME` is the only clock, so the
//! clients' clocks may disagree freely. An absent key is a full bucket, and the key expires when
//! the bucket would be full again, so idle buckets cost no memory. Every bucket of a process
//! talks to a server over one shared [`RedisConnection`].
//!
//! Waits ([`acquire`](RedisBucket::acquire)) reserve nothing in Redis: a bucket's callers wait
//! in a line in this process ([`tollgate::wait::RemoteLine`]), as the local waits do, and only its head asks Redis to
//! take, when its tokens are due. A wait that gives up has taken nothing. There is no line
//! across processes: each process's head competes in Redis. A wait that slept then sleeps the
//! bucket's [`Jitter`] ([`Builder::jitter`]) holding its tokens, and gives them back if dropped
//! meanwhile: the core's wait seam ([`tollgate::wait`]).
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use tollgate_redis::{Client, FaultPolicy, RedisBucket, RedisConnection};
//! use tollgate::{Quota, Rate};
//!
//! let redis = RedisConnection::connect(Client::open("redis://127.0.0.1/")?).await?;
//! let quota = Quota::new(Rate::per_second(100)).burst(10);
//! let bucket = RedisBucket::builder(&redis, "geocoder", quota)
//!     // Four workers usually: each falls back to a quarter of the quota if Redis is down.
//!     .policy(FaultPolicy::fallback_share(quota, 4))
//!     .connect()
//!     .await?;
//! bucket.acquire(1).await?; // waits its turn in this process's line, then takes from Redis
//! # Ok(())
//! # }
//! ```
//!
//! Every process must build its bucket for a key from the same quota: the script takes the
//! quota from each call and trusts it.
//!
//! # Faults
//!
//! - *A call its caller gave up on keeps nothing.* Each call carries a deadline in Redis time
//!   (half its timeout after it was sent, by Redis's clock as last seen); the script does
//!   nothing past it, so calls queued behind a stalled server or a slow link and run later
//!   take nothing. A call that ran in time but whose answer comes back after its caller gave
//!   up (timed out, or dropped its future) cannot be stopped by any deadline: it is sent from a
//!   task of its own that waits for the answer (up to ten times the timeout; on a cluster, the
//!   timeout alone, so a late answer there keeps what it took) and gives back
//!   what it took, by the refund rule (all of it, less what the burst cap would have cut since,
//!   and nothing while a later reservation holds the bucket in debt). So a call answered
//!   [`Error::Unavailable`] or granted by the policy is not also charged in Redis once its
//!   answer is in, and the fallback's grants are charged once. Between the call and its late
//!   answer the tokens are out of the bucket (fewer grants, never more), and an answer that
//!   never comes leaves them taken.
//! - *A restart shorter than the timeout fails no call.* A call that finds its connection dead
//!   (reset, closed, refused) is sent again on a new one, with a fresh deadline, for as long as
//!   its timeout allows, while Redis last answered within one timeout; once an outage is older
//!   than that, calls fail at once again and the policy decides. A call sent again after a
//!   reset whose first copy had run takes twice: fewer grants, never more.
//! - *A key that is deleted, flushed, evicted or lost in a restart is a full bucket*: the fleet
//!   may take one more burst. Waits in the old key are not granted on top: an
//!   [`acquire`](RedisBucket::acquire) holds nothing in Redis while it waits, and takes from
//!   whatever key there is when its tokens are due; a [`cancel`](RedisBucket::cancel) gives
//!   nothing back into a key created after its reservation (the key records when it was
//!   created).
//! - *Eviction.* Every bucket key has an expiry (it expires when its bucket would be full), so
//!   the memory policy decides what an eviction costs, and an evicted key is a full bucket: each
//!   eviction of a bucket key mints at most one burst. Run Redis with
//!   `maxmemory-policy noeviction` and memory to spare: a full memory then refuses every call
//!   (`OOM`, [`Error::Rejected`] whatever the policy) and loses no bucket. Under `allkeys-lru`
//!   (or `-lfu`) a bucket key is evicted only when it is among the least recently (frequently)
//!   used. Do not use a `volatile-*` policy on a server that also holds data without expiry:
//!   the bucket keys are then its only candidates and are evicted first, however busy, and
//!   once they are gone every call is refused as under `noeviction`.
//! - *The server's clock.* A step back credits nothing and adds no wait: the bucket keeps the
//!   level it had when last written. A step forward credits at most one burst (the bucket is
//!   full at most).
//! - *A value that is not a bucket* (written by someone else, truncated, `"nan 5"`) reads as a
//!   full bucket and is replaced at once by a bucket with an expiry. A key of another type
//!   (`WRONGTYPE`) is an error the caller sees.
//! - *Misconfiguration is not an outage*: `WRONGTYPE`, `NOAUTH`, a wrong password, `READONLY`
//!   (from a lone server), `OOM`, `NOPERM` are [`Error::Rejected`], whatever the policy. The
//!   policy decides everything else: Redis unreachable, timed out, loading, busy or failing
//!   over (a cluster's `READONLY`, `TRYAGAIN`, `CLUSTERDOWN`, redirections not followed in
//!   time), a reply that is not the script's answer, the script still missing after it was
//!   sent with its text. A server that has forgotten the script (restarted, a replica just
//!   promoted, `SCRIPT FLUSH`) gets it with the call that found it missing, as an `EVAL` on the
//!   node holding the key, whatever the state of the other nodes.

#![cfg_attr(docsrs, feature(doc_cfg))]
// Where other crates' docs link this one's items when its docs are not built beside them (a
// sibling's docs built alone, as docs.rs builds them); `scripts/check-doc-links.sh` keeps the
// version in step with Cargo.toml's.
#![doc(html_root_url = "https://docs.rs/tollgate-redis/0.1.0")]

pub mod acl;
#[doc = include_str!("../docs/fleets.md")]
pub mod guide {}
mod answers;
mod builder;
mod cluster;
mod connection;
mod error;
mod keyed;
mod late;
mod layout;
mod lease;
#[cfg(feature = "sentinel")]
#[cfg_attr(docsrs, doc(cfg(feature = "sentinel")))]
pub mod sentinel;
#[cfg(test)]
mod tests;
#[cfg(feature = "tls")]
#[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
pub mod tls;
mod wait;

use core::time::Duration;
use std::string::String;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use self::answers::Held;
pub use self::answers::{FaultPolicy, Grant, Level, RedisReservation, Source};
pub use self::builder::Builder;
pub use self::connection::RedisConnection;
pub use self::error::{Error, Fault, SetupError};
pub use self::keyed::RedisKeyed;
pub use self::lease::LeasedBucket;
/// The `redis` crate's client, from which a [`RedisConnection`] connects.
pub use ::redis::Client;

use self::connection::{micros, send, Shared};
use self::late::{deliver, patience, Charge, Taken};
use self::layout::Layout;
use tollgate::wait::{GiveBack, RemoteLine};
use tollgate::{Denied, Jitter, Quota, StdClock, TokenBucket};

/// A token bucket shared by every process that uses the same key on the same Redis.
///
/// Each call is one round trip: one `EVALSHA` of the bucket's script (the script is loaded
/// again by the client if the server has forgotten it), over the [`RedisConnection`] it was
/// built from. Clones share everything. Needs a tokio runtime with its timer enabled.
#[derive(Clone)]
pub struct RedisBucket {
    inner: Arc<Inner>,
}

struct Inner {
    connection: Arc<Shared>,
    key: String,
    layout: Layout,
    quota: Quota,
    policy: Policy,
    timeout: Duration,
    /// The start fill is passed until a call has reached Redis: it applies to an absent key.
    start_pending: AtomicBool,
    /// This process's waiters in `acquire`, shared by the clones.
    line: RemoteLine,
    /// What a wait sleeps after it slept, holding its tokens.
    jitter: Jitter,
    /// The crate's agreement tests pin the script's clock here; `u64::MAX` reads `TIME`.
    #[cfg(test)]
    fixed_now_us: AtomicU64,
    /// Whether a pinned clock still gets the deadline, as `TIME` would (for the clock-step
    /// tests, which pin it near the real time).
    #[cfg(test)]
    deadline_when_pinned: AtomicBool,
}

enum Policy {
    FailClosed,
    FailOpen,
    Fallback(Fallback),
}

/// The local bucket of [`FaultPolicy::Fallback`] and what it granted while Redis could not
/// answer.
struct Fallback {
    quota: Quota,
    /// Replaced by an empty bucket when an outage begins: a full one would add its burst to
    /// what Redis has left.
    local: Mutex<Arc<TokenBucket<StdClock>>>,
    /// Whether the last call reached Redis.
    healthy: AtomicBool,
    /// Units granted locally and not yet charged to Redis: the next call that reaches it takes
    /// them from the shared bucket first, so that Redis's refill during the outage is not
    /// granted again on top.
    owed_units: Arc<AtomicU64>,
}

/// One call of the script.
enum Op {
    Take {
        cost: u64,
        max_debt: u128,
    },
    /// Gives a reservation back: by `cancel`'s rule (nothing once due), or by the refund rule
    /// of a wait's take that its caller did not act on (what the cap would have cut since).
    GiveBack {
        cost: u64,
        due: (i64, i64),
        epoch: i64,
        refund: bool,
    },
    Peek,
}

/// What the script answered.
#[derive(Clone, Copy)]
struct Reply {
    /// Granted, or given back.
    granted: bool,
    /// The level in units at `now_us` after the call; negative in debt.
    level: i128,
    /// The debt after the call, as the script's pair: the instant the bucket is empty is
    /// `now_us + debt.0` microseconds and `debt.1` units.
    debt: (i64, i64),
    now_us: i64,
    /// When the key was created.
    epoch: i64,
}

impl RedisBucket {
    /// Starts building a bucket for `quota` on `key`, over `connection`.
    pub fn builder(connection: &RedisConnection, key: impl Into<String>, quota: Quota) -> Builder {
        Builder {
            connection: Arc::clone(&connection.shared),
            key: key.into(),
            quota,
            policy: FaultPolicy::FailClosed,
            timeout: Duration::from_millis(200),
            jitter: Jitter::none(),
        }
    }

    /// Takes `n` tokens now, or says how long until it could.
    ///
    /// Never waits beyond one round trip. `n = 0` takes nothing and reports the level; `n`
    /// above the burst is [`Denied::ExceedsCapacity`] at once, without a round trip. A denial
    /// takes nothing.
    pub async fn try_acquire(&self, n: u32) -> Result<Grant, Error> {
        self.inner.take(n).await.map(|(grant, _)| grant)
    }

    /// Takes `n` tokens now for use when they have accrued, if that is within `max_wait`.
    ///
    /// Reservations queue in the order Redis receives them, from every process: each runs the
    /// shared bucket further into debt and is due when that debt is paid. If the wait would
    /// exceed `max_wait`, nothing is taken and `retry_after` says when the same call would
    /// succeed. Debt is bounded as the local bucket's on a nanosecond clock bounds it (73 years
    /// at 2 per 1.000003 ms), and at most 3 × 2^50 µs (107 years, the bound at 999 983/s and
    /// most rates, where the local bucket allows up to 146): up to that both grant the same
    /// reservations. [`max_debt`](Self::max_debt) says how long it is.
    ///
    /// A reservation lives in its key: if the key is lost before it is due (deleted, flushed,
    /// evicted, a restart), a caller that acts on it without asking Redis again takes tokens
    /// the new key does not count. [`acquire`](Self::acquire) asks.
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
                wait: l.duration((-reply.level).max(0) as u128),
                held: Held::Redis {
                    due: (reply.now_us + reply.debt.0, reply.debt.1),
                    epoch: reply.epoch,
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
                Err(Error::by_redis(Denied::insufficient(retry_after)))
            }
            Err(Fault::Rejected(error)) => Err(Error::Rejected(error)),
            Err(fault) => match &inner.policy {
                Policy::FailClosed => Err(Error::Unavailable(fault)),
                Policy::FailOpen => Ok(RedisReservation {
                    tokens: n,
                    wait: Duration::ZERO,
                    held: Held::Open,
                }),
                Policy::Fallback(fallback) => {
                    let local = fallback.local();
                    let reservation = local.reserve(n, max_wait).map_err(Error::by_fallback)?;
                    fallback.owe(cost);
                    Ok(RedisReservation {
                        tokens: n,
                        wait: reservation.wait(),
                        held: Held::Fallback(local, reservation),
                    })
                }
            },
        }
    }

    /// Gives a reservation's tokens back, by the local bucket's rule
    /// ([`cancel`](TokenBucket::cancel)): all of them while it is not due and nothing came
    /// after it (a reservation or take by any process, a pause), none otherwise. Never gives back
    /// more than was taken, never fills the bucket beyond its burst, and gives nothing back
    /// into a key created after the reservation (deleted and used again, or lost in a restart).
    ///
    /// Pass only reservations made by this bucket (or a clone of it). If Redis cannot answer,
    /// the tokens stay taken and the fault is returned.
    pub async fn cancel(&self, reservation: RedisReservation) -> Result<(), Fault> {
        self.inner.give_back(reservation, false).await
    }

    /// The shared bucket's level now, without taking anything.
    pub async fn level(&self) -> Result<Level, Fault> {
        let inner = &*self.inner;
        inner
            .call(Op::Peek)
            .await
            .map(|reply| inner.level(reply.level))
    }

    /// The deepest debt reservations may run: the longest wait a reservation may get, when
    /// nothing else is queued.
    pub fn max_debt(&self) -> Duration {
        let l = &self.inner.layout;
        l.duration(l.max_debt_units)
    }

    /// The quota this bucket was built from.
    pub fn quota(&self) -> &Quota {
        &self.inner.quota
    }

    /// The key holding the bucket.
    pub fn key(&self) -> &str {
        &self.inner.key
    }

    /// Makes the script take `now_us` (microseconds) as its clock instead of Redis `TIME`, and
    /// set no expiry; `None` goes back to `TIME`.
    #[cfg(test)]
    pub(crate) fn pin_script_now_with_deadline(&self, now_us: u64) {
        // Relaxed: test settings read by later calls of the same task.
        self.inner
            .deadline_when_pinned
            .store(true, Ordering::Relaxed);
        self.pin_script_now(Some(now_us));
    }

    /// Makes the script take `now_us` (microseconds) as its clock instead of Redis `TIME`, and
    /// set no expiry; `None` goes back to `TIME`.
    #[cfg(test)]
    pub(crate) fn pin_script_now(&self, now_us: Option<u64>) {
        // Relaxed: a test setting read by later calls of the same task.
        self.inner
            .fixed_now_us
            .store(now_us.unwrap_or(u64::MAX), Ordering::Relaxed);
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

impl Fallback {
    fn new(quota: Quota) -> Result<Self, tollgate::ConfigError> {
        Ok(Self {
            local: Mutex::new(Arc::new(TokenBucket::try_new(
                quota.start_empty(),
                StdClock,
            )?)),
            quota,
            healthy: AtomicBool::new(true),
            owed_units: Arc::new(AtomicU64::new(0)),
        })
    }

    /// The local bucket for this outage: an empty one if the outage has just begun.
    fn local(&self) -> Arc<TokenBucket<StdClock>> {
        let mut local = self.local.lock().unwrap_or_else(PoisonError::into_inner);
        // Relaxed: the mutex orders the replacement; the flag only says whether to make one.
        if self.healthy.swap(false, Ordering::Relaxed) {
            if let Ok(empty) = TokenBucket::try_new(self.quota.start_empty(), StdClock) {
                *local = Arc::new(empty);
            }
        }
        Arc::clone(&local)
    }

    fn owe(&self, units: u64) {
        // Relaxed: a counter, drained by the next call that reaches Redis.
        self.owed_units.fetch_add(units, Ordering::Relaxed);
    }
}

impl Inner {
    /// Runs the script once, within the timeout.
    async fn call(&self, op: Op) -> Result<Reply, Fault> {
        let fallback = match &self.policy {
            Policy::Fallback(fallback) => Some(fallback),
            _ => None,
        };
        // Relaxed: a counter; what a failed call took is put back.
        let charge = fallback.map_or(0, |f| f.owed_units.swap(0, Ordering::Relaxed));
        let mut result = self.call_once(&op, charge).await;
        if let Ok(None) = result {
            // Redis's clock had moved on from the estimate (a step forward): it is fresh now.
            result = self.call_once(&op, charge).await;
        }
        if let (Ok(None), Some(fallback)) = (&result, fallback) {
            // Run past its deadline twice: nothing was charged.
            fallback.owe(charge);
        }
        let result = result.and_then(|reply| {
            reply.ok_or(Fault::Timeout {
                after: self.timeout,
            })
        });
        self.line
            .saw_outage(matches!(&result, Err(fault) if !matches!(fault, Fault::Rejected(_))));
        if let Some(fallback) = fallback {
            // A charge that did not reach Redis is owed again by `call_once`, or by its task
            // once the caller gave up.
            if result.is_ok() {
                fallback.healthy.store(true, Ordering::Relaxed);
            }
        }
        result
    }

    /// One run of the script; `None` if Redis ran it past its deadline but answered well
    /// within the timeout, so that a second try may succeed.
    async fn call_once(&self, op: &Op, charge: u64) -> Result<Option<Reply>, Fault> {
        let shared = &*self.connection;
        let l = &self.layout;
        // Relaxed: a lone flag; racing first calls all pass the start fill, and the script
        // applies it to an absent key only.
        let first = self.start_pending.load(Ordering::Relaxed);
        let start = if first {
            l.start_units
        } else {
            l.ceiling_units
        };
        #[cfg(test)]
        let fixed_now = match self.fixed_now_us.load(Ordering::Relaxed) {
            u64::MAX => None,
            now_us => Some(now_us),
        };
        #[cfg(not(test))]
        let fixed_now: Option<u64> = None;
        #[cfg(test)]
        let pinned_deadline = self.deadline_when_pinned.load(Ordering::Relaxed);
        #[cfg(not(test))]
        let pinned_deadline = false;
        let generation = shared.manager().0;
        let sent_us = shared.local_us();
        let deadline = shared.deadline_us(self.timeout);
        let name = match op {
            Op::Take { .. } => "take",
            Op::GiveBack { refund: false, .. } => "cancel",
            Op::GiveBack { refund: true, .. } => "refund",
            Op::Peek => "peek",
        };
        let pair = |units: u128| {
            let (us, frac) = l.pair(units);
            (us as u64, frac)
        };
        let (burst_us, burst_frac) = pair(l.ceiling_units as u128);
        let (start_us, start_frac) = pair(start as u128);
        let (debt_us, debt_frac) = pair(l.max_debt_units);
        let (charge_us, charge_frac) = pair(charge as u128);
        let mut call = shared.script_call(self.key.as_bytes());
        call.arg(name)
            .arg(l.units_per_us)
            .arg(burst_us)
            .arg(burst_frac)
            .arg(start_us)
            .arg(start_frac)
            .arg(debt_us)
            .arg(debt_frac);
        match (fixed_now, deadline) {
            (Some(now_us), Some(deadline_us)) if pinned_deadline => {
                call.arg(deadline_us).arg(now_us)
            }
            (Some(now_us), _) => call.arg("").arg(now_us),
            (None, Some(deadline_us)) => call.arg(deadline_us).arg(""),
            (None, None) => call.arg("").arg(""),
        };
        call.arg(charge_us).arg(charge_frac);
        match *op {
            Op::Take { cost, max_debt } => {
                let (cost_us, cost_frac) = pair(cost as u128);
                let (max_us, max_frac) = pair(max_debt);
                call.arg(cost_us).arg(cost_frac).arg(max_us).arg(max_frac);
            }
            Op::GiveBack {
                cost, due, epoch, ..
            } => {
                let (cost_us, cost_frac) = pair(cost as u128);
                call.arg(cost_us)
                    .arg(cost_frac)
                    .arg(due.0)
                    .arg(due.1)
                    .arg(epoch);
            }
            Op::Peek => {}
        }
        // Sent from a task of its own, which gives back what the call took if its answer
        // comes after this caller gave up (`late`).
        let taken = Taken {
            key: self.key.as_bytes().to_vec(),
            layout: *l,
            cost: match *op {
                Op::Take { cost, .. } => cost,
                Op::GiveBack { .. } | Op::Peek => 0,
            },
        };
        let owed = match &self.policy {
            Policy::Fallback(fallback) if charge > 0 => {
                Some((Arc::clone(&fallback.owed_units), charge))
            }
            _ => None,
        };
        let (to, mut answer) = tokio::sync::oneshot::channel();
        let connection = Arc::clone(&self.connection);
        let timeout = self.timeout;
        // Detached: it ends with its answer, or its patience.
        drop(tokio::spawn(async move {
            let sent = send(&connection, call, timeout);
            // Past its patience the task gives up: the tokens stay taken, the charge is owed
            // again (charged twice if the script ran after all: fewer grants, never more).
            let Ok((generation, result)) =
                tokio::time::timeout(patience(&connection, timeout), sent).await
            else {
                return Charge(owed).owe_again();
            };
            let answer = result.as_ref().ok().copied();
            let answered = answer.map(|answer| (taken, answer));
            if !deliver(&connection, to, (generation, result), answered).await {
                // The caller gave up: the charge is this task's to settle.
                if answer.is_none_or(|(status, ..)| status < 0) {
                    Charge(owed).owe_again();
                }
            }
        }));
        let result = match tokio::time::timeout(self.timeout, &mut answer).await {
            Ok(received) => received.ok(),
            Err(_) => {
                // Closed first: an answer that arrives from now on is the task's to settle.
                answer.close();
                answer.try_recv().ok()
            }
        };
        // Where an answer came, the charge is this caller's: owed again unless the script ran.
        let owe_again = || {
            if let Policy::Fallback(fallback) = &self.policy {
                fallback.owe(charge);
            }
        };
        let (status, debt_us, debt_frac, now_us, epoch) = match result {
            Some((_, Ok(reply))) => reply,
            Some((generation, Err(error))) => {
                owe_again();
                if error.is_timeout() {
                    shared.timed_out(generation);
                    return Err(Fault::Timeout {
                        after: self.timeout,
                    });
                }
                return Err(shared.classify(generation, error));
            }
            None => {
                shared.timed_out(generation);
                return Err(Fault::Timeout {
                    after: self.timeout,
                });
            }
        };
        let seen_us = shared.local_us();
        shared.saw_redis_time(now_us, seen_us);
        if status < 0 {
            // Redis ran the call after its deadline and did nothing; a second try carries the
            // charge again.
            if seen_us - sent_us < micros(self.timeout / 4) {
                return Ok(None);
            }
            owe_again();
            return Err(Fault::Timeout {
                after: self.timeout,
            });
        }
        if first {
            self.start_pending.store(false, Ordering::Relaxed);
        }
        Ok(Some(Reply {
            granted: status == 1,
            level: -l.units(debt_us, debt_frac),
            debt: (debt_us, debt_frac),
            now_us,
            epoch,
        }))
    }

    /// Gives `reservation` back: by `cancel`'s rule, or by the refund rule (`refund`), which
    /// also gives back a take already due that its caller did not act on.
    async fn give_back(&self, reservation: RedisReservation, refund: bool) -> Result<(), Fault> {
        match reservation.held {
            Held::Redis { due, epoch } => {
                let cost = self.layout.cost(reservation.tokens);
                let op = Op::GiveBack {
                    cost,
                    due,
                    epoch,
                    refund,
                };
                self.call(op).await.map(drop)
            }
            Held::Fallback(local, reservation) => {
                if refund {
                    local.give_back(reservation);
                } else {
                    local.cancel(reservation);
                }
                Ok(())
            }
            Held::Open | Held::Nothing => Ok(()),
        }
    }

    /// Takes `n` tokens now, or says how long until it could: the whole of `try_acquire`, with
    /// what it took, so that a wait can give it back. `n = 0` takes nothing and reports the
    /// level.
    async fn take(&self, n: u32) -> Result<(Grant, RedisReservation), Error> {
        let l = &self.layout;
        if n as u64 > l.burst {
            return Err(Error::by_redis(Denied::ExceedsCapacity { burst: l.burst }));
        }
        let cost = l.cost(n);
        let op = if n == 0 {
            Op::Peek
        } else {
            Op::Take { cost, max_debt: 0 }
        };
        let result = self.call(op).await;
        if let Ok(reply) = &result {
            self.line.saw_level(reply.level);
        }
        let taken = |held| RedisReservation {
            tokens: n,
            wait: Duration::ZERO,
            held,
        };
        match result {
            Ok(reply) if reply.granted => {
                let grant = Grant {
                    source: Source::Redis,
                    level: Some(self.level(reply.level)),
                };
                let held = if n == 0 {
                    Held::Nothing
                } else {
                    Held::Redis {
                        due: (reply.now_us + reply.debt.0, reply.debt.1),
                        epoch: reply.epoch,
                    }
                };
                Ok((grant, taken(held)))
            }
            Ok(reply) => Err(Error::by_redis(Denied::insufficient(
                l.duration(short(cost, reply.level)),
            ))),
            Err(Fault::Rejected(error)) => Err(Error::Rejected(error)),
            Err(fault) => match &self.policy {
                Policy::FailClosed => Err(Error::Unavailable(fault)),
                Policy::FailOpen => {
                    let grant = Grant {
                        source: Source::Open,
                        level: None,
                    };
                    Ok((grant, taken(Held::Open)))
                }
                Policy::Fallback(fallback) => {
                    let local = fallback.local();
                    let reservation = local
                        .reserve(n, Duration::ZERO)
                        .map_err(Error::by_fallback)?;
                    fallback.owe(cost);
                    let grant = Grant {
                        source: Source::Fallback,
                        level: Some(Level {
                            remaining: local.available(),
                            until_full: local.until_full(),
                        }),
                    };
                    Ok((grant, taken(Held::Fallback(local, reservation))))
                }
            },
        }
    }

    /// How long until the bucket holds `units`, by the level Redis last reported to this
    /// bucket and the rate since; zero if it has reported nothing yet.
    fn due_in(&self, units: u64) -> Duration {
        let Some((seen, level)) = self.line.last_level() else {
            return Duration::ZERO;
        };
        let short = (units as i128 - level).max(0) as u128;
        self.layout.duration(short).saturating_sub(seen.elapsed())
    }

    fn level(&self, level: i128) -> Level {
        Level {
            remaining: self.layout.tokens(level),
            until_full: self.layout.until_full(level),
        }
    }
}

/// Units short of `cost` at `level`: positive whenever the script denied.
fn short(cost: u64, level: i128) -> u128 {
    (cost as i128 - level).max(0) as u128
}

// Reservations are `Send` across tasks with the local bucket they came from.
const _: fn() = || {
    fn send<T: Send + Sync>() {}
    send::<RedisBucket>();
    send::<RedisReservation>();
};

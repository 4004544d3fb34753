//! [`RedisKeyed`]: a quota per key (a user, an API key) shared by every process, in Redis.
//!
//! Each key is a [`RedisBucket`](super::RedisBucket)'s bucket: the same script, the same exact
//! arithmetic, Redis `TIME` as the only clock. A key that is absent is a full bucket, and a
//! key expires when its bucket would be full again (the script deletes it at once when a call
//! leaves it full), so memory holds only the keys that have been used within a burst's refill:
//! a million idle users cost nothing. Nothing is kept per key in the process either, so the
//! number of keys is bounded by Redis's memory alone.
//!
//! [`try_acquire_many`](RedisKeyed::try_acquire_many) decides several keys in one round trip:
//! one pipeline of one script call per key, each decided exactly as a lone
//! [`try_acquire`](RedisKeyed::try_acquire) would be.

use core::time::Duration;
use std::string::String;
use std::sync::Arc;
use std::vec::Vec;

use ::redis::cluster_routing::Slot;
use ::redis::{Cmd, RedisResult};

use super::cluster::Link;
use super::connection::{
    is_noscript, micros, with_deadline, with_text, Answer, Shared, RETRY_PAUSE,
};
use super::late::{deliver, patience, Taken};
use super::layout::Layout;
use super::{Error, Fault, Grant, Level, RedisConnection, SetupError, Source};
use tokio::time::Instant;
use tollgate::{Denied, Quota};

/// A quota per key, shared by every process that uses the same prefix on the same Redis.
///
/// Each key starts full: an absent key is a full bucket (the quota's start fill does not
/// apply, since a key whose bucket is full is deleted). Every process must use the same quota
/// for a prefix. While Redis cannot answer, calls fail closed
/// ([`Error::Unavailable`]) unless [`fail_open`](Self::fail_open) was chosen. Clones share
/// everything. Needs a tokio runtime with its timer enabled.
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use tollgate_redis::{Client, RedisConnection, RedisKeyed};
/// use tollgate::{Quota, Rate};
///
/// let redis = RedisConnection::connect(Client::open("redis://127.0.0.1/")?).await?;
/// let per_user = RedisKeyed::new(&redis, "api:user:", Quota::new(Rate::per_second(10)).burst(20))?;
/// per_user.try_acquire("alice", 1).await?; // the key `api:user:alice`
/// // Three users' decisions in one round trip, each as if asked alone.
/// let answers = per_user
///     .try_acquire_many(&[("alice", 1), ("bob", 2), ("carol", 1)])
///     .await;
/// assert_eq!(answers.len(), 3);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct RedisKeyed {
    inner: Arc<Inner>,
}

struct Inner {
    connection: Arc<Shared>,
    prefix: String,
    layout: Layout,
    quota: Quota,
    fail_open: bool,
    timeout: Duration,
}

impl RedisKeyed {
    /// A limiter holding `quota` for each key, in the Redis key `prefix` followed by the key.
    ///
    /// [`SetupError::Quota`] or [`SetupError::Unrepresentable`] if the script cannot hold the
    /// quota exactly, as for [`RedisBucket`](super::RedisBucket). Reaches nothing yet.
    pub fn new(
        connection: &RedisConnection,
        prefix: impl Into<String>,
        quota: Quota,
    ) -> Result<Self, SetupError> {
        Ok(Self {
            inner: Arc::new(Inner {
                connection: Arc::clone(&connection.shared),
                prefix: prefix.into(),
                layout: Layout::solve(&quota)?,
                quota,
                fail_open: false,
                timeout: Duration::from_millis(200),
            }),
        })
    }

    /// Grants every call while Redis cannot answer ([`Source::Open`]), counting nothing.
    pub fn fail_open(self) -> Self {
        self.with(|inner| inner.fail_open = true)
    }

    /// How long a call (or a pipeline of them) waits for Redis; 200 ms by default. Redis does
    /// nothing for a call it runs more than half of it after the call was sent.
    pub fn timeout(self, timeout: Duration) -> Self {
        self.with(|inner| inner.timeout = timeout)
    }

    fn with(self, change: impl FnOnce(&mut Inner)) -> Self {
        let mut inner = Arc::try_unwrap(self.inner).unwrap_or_else(|shared| Inner {
            connection: Arc::clone(&shared.connection),
            prefix: shared.prefix.clone(),
            layout: shared.layout,
            quota: shared.quota,
            fail_open: shared.fail_open,
            timeout: shared.timeout,
        });
        change(&mut inner);
        Self {
            inner: Arc::new(inner),
        }
    }

    /// Takes `n` tokens from `key`'s bucket now, or says how long until it could: one round
    /// trip, answered as [`RedisBucket::try_acquire`](super::RedisBucket::try_acquire) would
    /// for a bucket of its own.
    pub async fn try_acquire(&self, key: &str, n: u32) -> Result<Grant, Error> {
        let mut answers = self.try_acquire_many(&[(key, n)]).await;
        answers
            .pop()
            .unwrap_or(Err(Error::Unavailable(Fault::Timeout {
                after: Duration::ZERO,
            })))
    }

    /// Decides each `(key, n)` in order, in one round trip: one pipeline of script calls, each
    /// taking from its own key exactly as a lone [`try_acquire`](Self::try_acquire) would (a
    /// key named twice is decided twice, in order). On a cluster, one pipeline per slot, sent
    /// at once: keys with one hash tag share a slot. `n` above the burst is
    /// [`Denied::ExceedsCapacity`] without being sent.
    pub async fn try_acquire_many(&self, requests: &[(&str, u32)]) -> Vec<Result<Grant, Error>> {
        let inner = &*self.inner;
        let shared = &*inner.connection;
        let (generation, link) = shared.manager();
        let mut results: Vec<Option<Result<Answer, Fault>>> =
            requests.iter().map(|_| None).collect();
        let mut todo: Vec<usize> = (0..requests.len())
            .filter(|&i| requests[i].1 as u64 <= inner.layout.burst)
            .collect();
        // Twice at most: calls that Redis ran past their deadline did nothing, and if they were
        // answered well within the timeout, Redis's clock had moved on from the estimate (a
        // step forward): they are sent again with a fresh one, as `RedisBucket` does.
        for _ in 0..2 {
            if todo.is_empty() {
                break;
            }
            let sent_us = shared.local_us();
            let deadline_us = shared.deadline_us(inner.timeout);
            // The requests each pipeline carries, by index.
            let mut groups: Vec<(Option<Slot>, Vec<usize>)> = Vec::new();
            for &i in &todo {
                let slot = link
                    .is_cluster()
                    .then(|| Slot::for_key(inner.name(requests[i].0)));
                match groups.iter_mut().find(|(group, _)| *group == slot) {
                    Some((_, members)) => members.push(i),
                    None => groups.push((slot, std::vec![i])),
                }
            }
            // Each pipeline is sent from a task of its own, which gives back what its calls
            // took if their answers come after this caller gave up (`late`).
            let pending = groups.iter().map(|(_, members)| {
                let commands: Vec<Cmd> = members
                    .iter()
                    .map(|&i| inner.command(requests[i].0, requests[i].1, deadline_us))
                    .collect();
                let taken: Vec<Taken> = members
                    .iter()
                    .map(|&i| Taken {
                        key: inner.name(requests[i].0),
                        layout: inner.layout,
                        cost: inner.layout.cost(requests[i].1),
                    })
                    .collect();
                let (to, answer) = tokio::sync::oneshot::channel();
                let task_inner = Arc::clone(&self.inner);
                let link = link.clone();
                // Detached: it ends with its answers, or its patience.
                drop(tokio::spawn(async move {
                    let inner = &*task_inner;
                    let sent = inner.send(generation, link, commands);
                    // Past its patience the task gives up: the tokens stay taken.
                    if let Ok(result) =
                        tokio::time::timeout(patience(&inner.connection, inner.timeout), sent).await
                    {
                        let answered: Vec<(Taken, Answer)> = taken
                            .into_iter()
                            .zip(&result.0)
                            .filter_map(|(taken, reply)| match reply {
                                Some(Ok(answer)) => Some((taken, *answer)),
                                _ => None,
                            })
                            .collect();
                        let _ = deliver(&inner.connection, to, result, answered).await;
                    }
                }));
                let members = members.len();
                async move {
                    let mut answer = answer;
                    let received = match tokio::time::timeout(inner.timeout, &mut answer).await {
                        Ok(received) => received.ok(),
                        Err(_) => {
                            // Closed first: an answer from now on is the task's to settle.
                            answer.close();
                            answer.try_recv().ok()
                        }
                    };
                    received.unwrap_or_else(|| {
                        shared.timed_out(generation);
                        let after = inner.timeout;
                        (
                            (0..members).map(|_| None).collect(),
                            Some(Fault::Timeout { after }),
                        )
                    })
                }
            });
            let answers = futures_util::future::join_all(pending).await;
            let seen_us = shared.local_us();
            for ((_, members), (replies, fault)) in groups.iter().zip(answers) {
                for (&i, reply) in members.iter().zip(replies) {
                    results[i] = Some(match reply {
                        Some(Ok(answer)) => {
                            shared.saw_redis_time(answer.3, seen_us);
                            Ok(answer)
                        }
                        Some(Err(error)) => Err(shared.classify(generation, error)),
                        None => Err(match &fault {
                            Some(Fault::Redis(error)) => Fault::Redis(error.clone()),
                            Some(Fault::Rejected(error)) => Fault::Rejected(error.clone()),
                            _ => Fault::Timeout {
                                after: inner.timeout,
                            },
                        }),
                    });
                }
            }
            let quick = seen_us - sent_us < micros(inner.timeout / 4);
            todo.retain(|&i| quick && matches!(results[i], Some(Ok((status, ..))) if status < 0));
        }
        requests
            .iter()
            .zip(results)
            .map(|(&(_, n), result)| match result {
                Some(result) => inner.decide(n, result),
                None => Err(Error::by_redis(Denied::ExceedsCapacity {
                    burst: inner.layout.burst,
                })),
            })
            .collect()
    }

    /// The Redis key holding `key`'s bucket: the prefix, then the key.
    pub fn redis_key(&self, key: &str) -> String {
        String::from_utf8_lossy(&self.inner.name(key)).into_owned()
    }

    /// The quota each key holds.
    pub fn quota(&self) -> &Quota {
        &self.inner.quota
    }
}

impl core::fmt::Debug for RedisKeyed {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RedisKeyed")
            .field("prefix", &self.inner.prefix)
            .field("quota", &self.inner.quota)
            .field("fail_open", &self.inner.fail_open)
            .field("timeout", &self.inner.timeout)
            .finish_non_exhaustive()
    }
}

impl Inner {
    /// The Redis key of `key`: the prefix, then the key.
    fn name(&self, key: &str) -> Vec<u8> {
        let mut name = Vec::with_capacity(self.prefix.len() + key.len());
        name.extend_from_slice(self.prefix.as_bytes());
        name.extend_from_slice(key.as_bytes());
        name
    }

    /// Sends `commands` in one pipeline over `link`: each one's reply, `None` for those that
    /// got none, and the fault that stopped them. A server that has forgotten the script
    /// (restarted, promoted from a replica, `SCRIPT FLUSH`) answers NOSCRIPT to calls that ran
    /// nothing: they are sent once more, the first with the script's text, which loads it on
    /// the node holding their slot (every command of a pipeline is on one slot), and the last
    /// time all of them with it. A NOSCRIPT left after that is a fault.
    async fn send(
        &self,
        generation: u64,
        mut link: Link,
        mut commands: Vec<Cmd>,
    ) -> (Vec<Option<RedisResult<Answer>>>, Option<Fault>) {
        let shared = &*self.connection;
        let began = Instant::now();
        let mut replies: Vec<Option<RedisResult<Answer>>> = commands.iter().map(|_| None).collect();
        const ROUNDS: usize = 3;
        let mut round = 0;
        while round < ROUNDS {
            let pending: Vec<usize> = (0..commands.len())
                .filter(|&i| !matches!(&replies[i], Some(Ok(_))))
                .collect();
            let mut pipe = ::redis::pipe();
            pipe.ignore_errors();
            for (k, &i) in pending.iter().enumerate() {
                let text = round == ROUNDS - 1 || (round > 0 && k == 0);
                if text {
                    pipe.add_command(with_text(&commands[i]));
                } else {
                    pipe.add_command(commands[i].clone());
                }
            }
            // The caller times the pipeline out; this task waits for its answer regardless.
            match pipe
                .query_async::<Vec<RedisResult<Answer>>>(&mut link)
                .await
            {
                Ok(answers) => {
                    for (&i, answer) in pending.iter().zip(answers) {
                        replies[i] = Some(answer);
                    }
                }
                // A dead connection (a restart, a reset): sent again on a new one, with fresh
                // deadlines, as `RedisBucket`'s calls are (see `connection::send`).
                Err(error) if shared.may_retry(&error, self.timeout) => {
                    tokio::time::sleep(RETRY_PAUSE).await;
                    let deadline = shared.deadline_us(self.timeout.saturating_sub(began.elapsed()));
                    for command in &mut commands {
                        *command = with_deadline(command, deadline);
                    }
                    link = shared.manager().1;
                    continue;
                }
                Err(error) if !error.is_timeout() => {
                    return (replies, Some(shared.classify(generation, error)));
                }
                Err(_) => {
                    shared.timed_out(generation);
                    let after = self.timeout;
                    return (replies, Some(Fault::Timeout { after }));
                }
            }
            let forgotten = replies
                .iter()
                .any(|reply| matches!(reply, Some(Err(e)) if is_noscript(e)));
            if !forgotten {
                break;
            }
            round += 1;
        }
        (replies, None)
    }

    /// One call of the bucket script on `key`: take `n` (peek for 0), from a full bucket if the
    /// key is absent, doing nothing past `deadline_us` in Redis time (`None`: no deadline).
    fn command(&self, key: &str, n: u32, deadline_us: Option<i64>) -> Cmd {
        let l = &self.layout;
        let pair = |units: u128| {
            let (us, frac) = l.pair(units);
            (us as u64, frac)
        };
        let ceiling = pair(l.ceiling_units as u128);
        let debt = pair(l.max_debt_units);
        let mut command = self.connection.script_call(&self.name(key));
        command
            .arg(if n == 0 { "peek" } else { "take" })
            .arg(l.units_per_us)
            .arg(ceiling.0)
            .arg(ceiling.1)
            .arg(ceiling.0) // an absent key is a full bucket
            .arg(ceiling.1)
            .arg(debt.0)
            .arg(debt.1)
            .arg(deadline_us.map_or(String::new(), |at| at.to_string()))
            .arg("") // Redis `TIME`
            .arg(0) // nothing charged
            .arg(0);
        if n > 0 {
            let cost = pair(l.cost(n) as u128);
            command.arg(cost.0).arg(cost.1).arg(0).arg(0); // no debt: granted now or not
        }
        command
    }

    /// A call's answer as the caller sees it, the fault policy applied.
    fn decide(&self, n: u32, result: Result<Answer, Fault>) -> Result<Grant, Error> {
        let l = &self.layout;
        match result {
            Ok((status, debt_us, debt_frac, _, _)) if status >= 0 => {
                let level = -l.units(debt_us, debt_frac);
                if status == 1 {
                    Ok(Grant {
                        source: Source::Redis,
                        level: Some(Level {
                            remaining: l.tokens(level),
                            until_full: l.until_full(level),
                        }),
                    })
                } else {
                    let short = (l.cost(n) as i128 - level).max(0) as u128;
                    Err(Error::by_redis(Denied::insufficient(l.duration(short))))
                }
            }
            // Run past its deadline: it took nothing.
            Ok(_) => self.fault(Fault::Timeout {
                after: self.timeout,
            }),
            Err(Fault::Rejected(error)) => Err(Error::Rejected(error)),
            Err(fault) => self.fault(fault),
        }
    }

    fn fault(&self, fault: Fault) -> Result<Grant, Error> {
        if self.fail_open {
            Ok(Grant {
                source: Source::Open,
                level: None,
            })
        } else {
            Err(Error::Unavailable(fault))
        }
    }
}

// One limiter serves every task of a process, and its calls run on any of them.
const _: fn() = || {
    fn send<T: Send + Sync>() {}
    fn send_future<T: Send>(_: &T) {}
    send::<RedisKeyed>();
    let _ = |keyed: &RedisKeyed| send_future(&keyed.try_acquire_many(&[]));
};

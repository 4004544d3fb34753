//! What a Redis bucket answers, and what it does while Redis cannot.

use core::time::Duration;

use std::sync::Arc;

use tollgate::{Quota, Reservation, StdClock, TokenBucket};

/// What a bucket does while Redis cannot answer (a connection refused or dropped, a server
/// restarting or loading, no answer within the timeout). Errors that Redis answers because
/// something is misconfigured are not outages: every policy returns them as
/// [`Error::Rejected`](super::Error::Rejected).
///
/// What the fleet may grant, on top of the shared bound `burst + rate × elapsed`:
///
/// | policy | during an outage | after it |
/// |---|---|---|
/// | `FailClosed` | nothing | nothing: the bound holds |
/// | `FailOpen` | everything asked | nothing |
/// | `Fallback` | the local buckets' rate, from empty, for the outage's length | nothing once every process has reached Redis again: each charges its local grants to Redis with its first call |
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FaultPolicy {
    /// Deny with [`Error::Unavailable`](super::Error::Unavailable): no request passes unless Redis counted it. The
    /// default.
    FailClosed,
    /// Grant everything, counting nothing ([`Source::Open`]): the limit protects a service that
    /// copes with a short overload better than with an outage.
    FailOpen,
    /// Decide with a local bucket of this quota, kept in this process ([`Source::Fallback`]).
    /// Size it as this process's share of the shared quota, so that all processes together stay
    /// within it: see [`fallback_share`](Self::fallback_share).
    ///
    /// The local bucket starts empty at each outage (its start fill is ignored), so it grants
    /// at most its rate times the outage's length, never a burst on top of what Redis has left.
    /// What it granted is charged to the shared bucket by the first call that reaches Redis
    /// again (running it into debt if need be), so the fleet's grants over any span that
    /// contains whole outages stay within the shared bound. A reservation cancelled during the
    /// outage is charged all the same (fewer grants, never more).
    Fallback(Quota),
}

impl FaultPolicy {
    /// A local fallback with `1/parts` of `quota`'s rate and burst (at least one token):
    /// `parts` processes falling back together grant at most the quota's rate.
    pub const fn fallback_share(quota: Quota, parts: u64) -> Self {
        let burst = match quota.burst_size().checked_div(parts) {
            Some(0) | None => 1,
            Some(burst) => burst,
        };
        FaultPolicy::Fallback(Quota::new(quota.rate().divided_by(parts)).burst(burst))
    }
}

/// Who decided a grant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Source {
    /// The shared bucket in Redis.
    Redis,
    /// The local fallback bucket, while Redis could not answer.
    Fallback,
    /// Nobody: Redis could not answer and the policy is to fail open.
    Open,
}

/// A bucket's level after a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Level {
    /// Whole tokens in the bucket; 0 while reservations hold it in debt.
    pub remaining: u64,
    /// How long until the bucket is full again (and, in Redis, until its key expires).
    pub until_full: Duration,
}

/// A granted [`try_acquire`](super::RedisBucket::try_acquire).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Grant {
    /// Who decided.
    pub source: Source,
    /// The deciding bucket after the grant; `None` when it failed open and nothing counted.
    pub level: Option<Level>,
}

/// Tokens taken now for use later: the result of [`RedisBucket::reserve`](super::RedisBucket::reserve).
///
/// Reservations in Redis are served in the order Redis received them, across all processes.
/// Act after [`wait`](Self::wait), or give the tokens back with [`RedisBucket::cancel`](super::RedisBucket::cancel).
#[derive(Debug)]
#[must_use = "the tokens are taken: act after `wait()`, or give them back with `cancel`"]
pub struct RedisReservation {
    pub(super) tokens: u32,
    pub(super) wait: Duration,
    pub(super) held: Held,
}

#[derive(Debug)]
pub(super) enum Held {
    /// The bucket right after the grant, as the script reported it: the instant it is due.
    Redis {
        /// The instant it is due, as the script's pair of microseconds and units.
        due: (i64, i64),
        /// When the key it was made in was created.
        epoch: i64,
    },
    /// The local bucket of the outage it was made in.
    Fallback(Arc<TokenBucket<StdClock>>, Reservation),
    Open,
    Nothing,
}

impl RedisReservation {
    /// How long after the reservation was made the caller may act. Zero when it may act at once.
    pub fn wait(&self) -> Duration {
        self.wait
    }

    /// The tokens reserved.
    pub fn tokens(&self) -> u32 {
        self.tokens
    }

    /// Who granted it; [`Source::Redis`] for zero tokens.
    pub fn source(&self) -> Source {
        match self.held {
            Held::Redis { .. } | Held::Nothing => Source::Redis,
            Held::Fallback(..) => Source::Fallback,
            Held::Open => Source::Open,
        }
    }
}

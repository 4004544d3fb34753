//! What a Redis bucket answers, and what it does while Redis cannot.

use core::time::Duration;

use crate::{Quota, Reservation};

/// What a bucket does while Redis cannot answer (a connection refused or dropped, a server
/// restarting, no answer within the timeout).
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
    Fallback(Quota),
}

impl FaultPolicy {
    /// A local fallback with `1/parts` of `quota`'s rate and burst (at least one token),
    /// starting full: `parts` processes falling back together grant at most the quota.
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
        now_us: i64,
        level: i64,
    },
    Fallback(Reservation),
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
            Held::Fallback(_) => Source::Fallback,
            Held::Open => Source::Open,
        }
    }
}

//! What a Redis bucket answers when it cannot grant, and why one could not be built.

use core::fmt;
use core::time::Duration;
use std::string::String;

use super::Source;
use crate::{ConfigError, Denied};

/// Why a [`RedisBucket`](super::RedisBucket) call did not grant.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The bucket denied the request: the shared one in Redis, or the local fallback while
    /// Redis is unreachable. Nothing was taken.
    Denied {
        /// Why, and when to retry.
        denied: Denied,
        /// Which bucket denied: [`Source::Redis`] or [`Source::Fallback`].
        source: Source,
    },
    /// Redis could not answer and the policy is [`FaultPolicy::FailClosed`](super::FaultPolicy).
    Unavailable(Fault),
}

impl Error {
    /// How long until the request would be granted; `None` when it never would, or when
    /// Redis is unavailable.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Error::Denied { denied, .. } => denied.retry_after(),
            Error::Unavailable(_) => None,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Denied { denied, .. } => fmt::Display::fmt(denied, f),
            Error::Unavailable(fault) => {
                write!(f, "rate limit unavailable (failing closed): {fault}")
            }
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Denied { denied, .. } => Some(denied),
            Error::Unavailable(fault) => Some(fault),
        }
    }
}

impl Error {
    pub(crate) fn by_redis(denied: Denied) -> Self {
        Error::Denied {
            denied,
            source: Source::Redis,
        }
    }

    pub(crate) fn by_fallback(denied: Denied) -> Self {
        Error::Denied {
            denied,
            source: Source::Fallback,
        }
    }
}

/// Why Redis could not answer. The connection is re-established by the next call; the caller
/// does nothing.
#[derive(Debug)]
#[non_exhaustive]
pub enum Fault {
    /// No answer within the bucket's timeout: a server that hangs, a network that drops
    /// packets, a reconnection still under way. The script may still have run: its tokens are
    /// then lost to the caller, never granted twice.
    Timeout {
        /// The timeout that elapsed.
        after: Duration,
    },
    /// The connection failed or dropped, or Redis answered with an error.
    Redis(::redis::RedisError),
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::Timeout { after } => write!(f, "no answer from Redis within {after:?}"),
            Fault::Redis(error) => write!(f, "Redis: {error}"),
        }
    }
}

impl std::error::Error for Fault {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Fault::Timeout { .. } => None,
            Fault::Redis(error) => Some(error),
        }
    }
}

/// Why a [`RedisBucket`](super::RedisBucket) could not be built.
#[derive(Debug, PartialEq)]
#[non_exhaustive]
pub enum SetupError {
    /// The quota is invalid whatever holds it.
    Quota(ConfigError),
    /// The quota cannot be held exactly in whole microseconds and units below 2^53, as the
    /// script counts: a rate whose exact fraction needs more than 2^40 units per microsecond,
    /// or a burst worth more than 2^50 units (a million tokens of a day each, say). Count
    /// tokens in coarser units, or lower the burst.
    Unrepresentable,
    /// The fallback quota of [`FaultPolicy::Fallback`](super::FaultPolicy) is invalid.
    Fallback(ConfigError),
    /// The connection could not be set up, or Redis was unreachable when
    /// [`connect`](super::Builder::connect) required it.
    Redis(String),
}

impl fmt::Display for SetupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SetupError::Quota(error) => write!(f, "invalid quota: {error}"),
            SetupError::Unrepresentable => f.write_str(
                "the quota cannot be held exactly below 2^53 in microseconds and whole units; \
                 count tokens in coarser units or lower the burst",
            ),
            SetupError::Fallback(error) => write!(f, "invalid fallback quota: {error}"),
            SetupError::Redis(error) => write!(f, "cannot reach Redis: {error}"),
        }
    }
}

impl std::error::Error for SetupError {}

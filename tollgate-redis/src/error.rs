//! What a Redis bucket answers when it cannot grant, and why one could not be built.

use super::Source;
use core::fmt;
use core::time::Duration;
use std::string::String;
use tollgate::headers::HumanDuration;
use tollgate::{ConfigError, Denied};

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
    /// Redis answered with an error that no fault policy papers over: something is
    /// misconfigured (the key holds another type, authentication failed, the server is a
    /// read-only replica or out of memory, the user may not run scripts). Nothing was taken.
    Rejected(::redis::RedisError),
}

impl Error {
    /// How long until the request would be granted; `None` when it never would, or when
    /// Redis is unavailable.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Error::Denied { denied, .. } => denied.retry_after(),
            Error::Unavailable(_) | Error::Rejected(_) => None,
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
            Error::Rejected(error) => write!(f, "Redis rejected the rate limit's call: {error}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Denied { denied, .. } => Some(denied),
            Error::Unavailable(fault) => Some(fault),
            Error::Rejected(error) => Some(error),
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

/// Why a call to Redis failed: it could not answer (the connection is re-established by the
/// next call; the caller does nothing), or it answered with an error.
#[derive(Debug)]
#[non_exhaustive]
pub enum Fault {
    /// No answer within the bucket's timeout: a server that hangs, a network that drops
    /// packets, a reconnection still under way. A script that Redis runs more than half the
    /// timeout after the call was sent takes nothing; one that ran sooner gives back what it
    /// took when its answer arrives, and keeps it, never granted twice, if none arrives.
    Timeout {
        /// The timeout that elapsed.
        after: Duration,
    },
    /// The connection failed or dropped, or Redis is loading, busy or failing over.
    Redis(::redis::RedisError),
    /// Redis answered with an error that says something is misconfigured: see
    /// [`Error::Rejected`].
    Rejected(::redis::RedisError),
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::Timeout { after } => {
                write!(f, "no answer from Redis within {}", HumanDuration(*after))
            }
            Fault::Redis(error) => write!(f, "Redis: {error}"),
            Fault::Rejected(error) => write!(f, "Redis rejected the call: {error}"),
        }
    }
}

impl std::error::Error for Fault {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Fault::Timeout { .. } => None,
            Fault::Redis(error) | Fault::Rejected(error) => Some(error),
        }
    }
}

/// Why a [`RedisBucket`](super::RedisBucket) could not be built.
#[derive(Debug)]
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
    /// The quota has a phase ([`Quota::phase`](tollgate::Quota::phase)): a phase spreads
    /// buckets that each worker keeps for itself, while a bucket in Redis is one schedule that
    /// every process shares, so there is nothing to spread. Build it without one; to spread
    /// the processes drawing from it, give their waits a [`Jitter`](tollgate::Jitter)
    /// ([`Builder::jitter`](super::Builder::jitter)).
    Phased,
    /// Redis could not be reached when [`connect`](super::Builder::connect) required it: the
    /// connection failed or dropped, or Redis was loading or failing over. Displayed with the
    /// address and the cause; the error is also the `source()`.
    Unreachable {
        /// The server's address (`127.0.0.1:6379`), or a cluster's nodes as given.
        address: String,
        /// Why it could not be reached.
        error: ::redis::RedisError,
    },
    /// Redis did not answer within the time `connect` gives it.
    Timeout {
        /// The server's address, or a cluster's nodes as given.
        address: String,
        /// How long it waited.
        after: Duration,
    },
    /// Redis was reached and answered with an error: a wrong password, a key of another type,
    /// a read-only replica. Displayed with the address and Redis's answer; the error is also
    /// the `source()`.
    Refused {
        /// The server's address, or a cluster's nodes as given.
        address: String,
        /// What Redis answered.
        error: ::redis::RedisError,
    },
    /// [`RedisConnection::connect_lazy`](super::RedisConnection::connect_lazy) was called outside a tokio
    /// runtime: call it from within one (the connection's calls run on it).
    NoRuntime,
    /// The TLS handshake failed: the server's certificate did not verify, or the server
    /// refused ours. Never retried in plain text.
    #[cfg(feature = "tls")]
    Tls(super::tls::TlsError),
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
            SetupError::Phased => f.write_str(
                "a bucket in Redis is shared by every process and takes no phase; build its \
                 quota without one (spread its waiters with a jitter instead)",
            ),
            SetupError::Unreachable { address, error } => {
                write!(f, "cannot reach Redis at {address}: {error}")
            }
            SetupError::Timeout { address, after } => write!(
                f,
                "no answer from Redis at {address} within {}",
                HumanDuration(*after)
            ),
            SetupError::Refused { address, error } => {
                write!(
                    f,
                    "Redis at {address} refused the connection's first call: {error}"
                )
            }
            SetupError::NoRuntime => {
                f.write_str("a Redis connection must be set up within a tokio runtime")
            }
            #[cfg(feature = "tls")]
            SetupError::Tls(error) => fmt::Display::fmt(error, f),
        }
    }
}

impl std::error::Error for SetupError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SetupError::Quota(error) | SetupError::Fallback(error) => Some(error),
            SetupError::Unreachable { error, .. } | SetupError::Refused { error, .. } => {
                Some(error)
            }
            SetupError::Unrepresentable
            | SetupError::Phased
            | SetupError::Timeout { .. }
            | SetupError::NoRuntime => None,
            #[cfg(feature = "tls")]
            SetupError::Tls(error) => Some(error),
        }
    }
}

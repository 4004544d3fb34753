//! [`RedisConnection`]: the one connection to a server that every bucket of a process shares.

use core::time::Duration;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use ::redis::aio::{ConnectionManager, ConnectionManagerConfig};
use ::redis::{Client, ErrorKind, RedisError, Script, ServerErrorKind};

use super::cluster::Link;
use super::{Fault, SetupError};

/// One multiplexed connection to one Redis server, shared by every bucket built from it.
///
/// A process needs one per server: its buckets (a hundred thousand of them, say, one per
/// user) send their calls over this single TCP connection, concurrently, and it is
/// re-established after any error: a dropped link, a restarted or loading server, a failed
/// authentication (once the password works again), a link silent for a second while calls
/// time out. Clones are cheap and share it.
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use tollgate_redis::{Client, RedisBucket, RedisConnection};
/// use tollgate::{Quota, Rate};
///
/// let redis = RedisConnection::connect(Client::open("redis://127.0.0.1/")?).await?;
/// let quota = Quota::new(Rate::per_second(10)).burst(10);
/// let alice = RedisBucket::builder(&redis, "user:alice", quota).connect_lazy()?;
/// let bob = RedisBucket::builder(&redis, "user:bob", quota).connect_lazy()?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct RedisConnection {
    pub(super) shared: Arc<Shared>,
}

pub(super) struct Shared {
    /// `None` on a cluster, whose connection follows the cluster's changes by itself.
    client: Option<Client>,
    /// The manager in use and its generation: a new one replaces it after an error that the
    /// manager would not recover from by itself (it reconnects on I/O errors only).
    manager: Mutex<(u64, Link)>,
    generation: AtomicU64,
    pub(super) script: Script,
    /// When the offsets below are measured from.
    base: Instant,
    /// Redis `TIME` minus microseconds since `base`, as last seen: Redis's clock, estimated.
    offset_us: AtomicI64,
    /// Microseconds since `base` when Redis last answered, or when a silent connection was
    /// last replaced.
    last_answer_us: AtomicI64,
}

/// A connection that has answered nothing for this long while calls timed out is replaced: a
/// link that went silent without a reset (a partition, a server gone without a word) would
/// otherwise wait for the kernel to give up on it, many minutes later.
const SILENCE_US: i64 = 1_000_000;

/// How long a connection attempt may take; each call's own timeout bounds it too.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

impl RedisConnection {
    /// Sets up the connection without reaching Redis: the first call connects. Call it within
    /// a tokio runtime.
    ///
    /// Named as [`Builder::connect_lazy`](super::Builder::connect_lazy) is, not `new` and
    /// `try_new` as the crate's in-memory types are: a connection is I/O set up on a runtime,
    /// so it can fail however it is called ([`SetupError::NoRuntime`] outside a runtime, or a
    /// client whose settings make no connection), and there is no panicking form to offer
    /// beside it. [`connect`](Self::connect) also reaches Redis before it returns.
    pub fn connect_lazy(client: Client) -> Result<Self, SetupError> {
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(SetupError::NoRuntime);
        }
        let manager = manager(&client)?;
        Ok(Self::over(Some(client), Link::Single(manager)))
    }

    /// A connection over `link`, recreated from `client` when it must be.
    pub(super) fn over(client: Option<Client>, link: Link) -> Self {
        let base = Instant::now();
        let unix_us = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| since.as_micros() as i64);
        Self {
            shared: Arc::new(Shared {
                client,
                manager: Mutex::new((0, link)),
                generation: AtomicU64::new(0),
                script: Script::new(include_str!("script.lua")),
                base,
                offset_us: AtomicI64::new(unix_us),
                last_answer_us: AtomicI64::new(0),
            }),
        }
    }

    /// Sets up the connection and checks it within a second, as
    /// [`connect_lazy`](Self::connect_lazy) and then a round trip: the server is reached, accepts
    /// the credentials and answers `PING`. [`SetupError::Unreachable`] if it could not be
    /// reached, [`SetupError::Refused`] if it answered with an error.
    pub async fn connect(client: Client) -> Result<Self, SetupError> {
        let connection = Self::connect_lazy(client)?;
        let mut manager = connection.shared.manager().1;
        let command = ::redis::cmd("PING");
        let ping = command.query_async::<()>(&mut manager);
        match tokio::time::timeout(CONNECT_TIMEOUT, ping).await {
            Ok(Ok(())) => Ok(connection),
            Ok(Err(error)) => {
                #[cfg(feature = "tls")]
                let error = match super::tls::classify(connection.shared.client.as_ref(), error) {
                    Ok(tls) => return Err(tls),
                    Err(error) => error,
                };
                Err(setup_error(error))
            }
            Err(_) => Err(SetupError::Timeout {
                after: CONNECT_TIMEOUT,
            }),
        }
    }

    /// TCP connections this handle holds open: one, whatever the number of buckets (two for a
    /// moment while a replaced connection finishes its calls).
    pub const CONNECTIONS: usize = 1;
}

impl core::fmt::Debug for RedisConnection {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RedisConnection")
            .field("client", &self.shared.client)
            .finish_non_exhaustive()
    }
}

pub(super) fn manager(client: &Client) -> Result<ConnectionManager, SetupError> {
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(CONNECT_TIMEOUT))
        // Each call times itself out; a call that took longer is dropped by its caller.
        .set_response_timeout(None)
        // Reconnect quickly, then leave the next call to try again: a call never waits on a
        // long backoff, and its timeout bounds it anyway.
        .set_number_of_retries(1)
        .set_min_delay(Duration::from_millis(10))
        .set_max_delay(Duration::from_millis(100));
    ConnectionManager::new_lazy_with_config(client.clone(), config).map_err(SetupError::Unreachable)
}

/// `connect`'s verdict on an error: could not reach Redis, or Redis said no.
pub(super) fn setup_error(error: RedisError) -> SetupError {
    if is_fault(&error) {
        SetupError::Unreachable(error)
    } else {
        SetupError::Refused(error)
    }
}

/// Whether an error is a fault a policy decides on (Redis unreachable, restarting, loading,
/// busy), rather than an answer that something is misconfigured.
fn is_fault(error: &RedisError) -> bool {
    // A certificate that does not verify is misconfiguration, never papered over.
    #[cfg(feature = "tls")]
    if super::tls::is_tls(error) {
        return false;
    }
    if error.is_io_error()
        || error.is_timeout()
        || error.is_connection_dropped()
        || error.is_connection_refusal()
    {
        return true;
    }
    match error.kind() {
        ErrorKind::Io => true,
        ErrorKind::Server(
            ServerErrorKind::BusyLoading
            | ServerErrorKind::TryAgain
            | ServerErrorKind::MasterDown
            | ServerErrorKind::ClusterDown
            // Redirections the cluster client could not follow within its retries: slots moving.
            | ServerErrorKind::Moved
            | ServerErrorKind::Ask,
        ) => true,
        ErrorKind::Extension => matches!(error.code(), Some("BUSY")),
        _ => false,
    }
}

/// Whether the connection must be set up again: the manager recovers from I/O errors by
/// itself, not from a failed authentication nor from a server that became a replica.
fn needs_new_connection(error: &RedisError) -> bool {
    matches!(
        error.kind(),
        ErrorKind::AuthenticationFailed | ErrorKind::Server(ServerErrorKind::ReadOnly)
    ) || matches!(error.code(), Some("NOAUTH" | "WRONGPASS" | "READONLY"))
}

impl Shared {
    /// The manager in use, and its generation.
    pub(super) fn manager(&self) -> (u64, Link) {
        let guard = self.manager.lock().unwrap_or_else(PoisonError::into_inner);
        (guard.0, guard.1.clone())
    }

    /// Sorts an error of a call made on `generation`: a fault, or a rejection; replaces the
    /// connection if it cannot recover by itself.
    pub(super) fn classify(&self, generation: u64, error: RedisError) -> Fault {
        if needs_new_connection(&error) {
            self.replace(generation);
        }
        if is_fault(&error) {
            Fault::Redis(error)
        } else {
            Fault::Rejected(error)
        }
    }

    /// Notes that a call made on `generation` timed out: replaces the connection if it has been
    /// silent for a second (at most once a second).
    pub(super) fn timed_out(&self, generation: u64) {
        let now = self.local_us();
        // Relaxed: a heuristic; two callers racing replace it once (the generation decides).
        if now - self.last_answer_us.load(Ordering::Relaxed) > SILENCE_US {
            self.last_answer_us.store(now, Ordering::Relaxed);
            self.replace(generation);
        }
    }

    fn replace(&self, generation: u64) {
        let mut guard = self.manager.lock().unwrap_or_else(PoisonError::into_inner);
        if guard.0 != generation {
            return; // replaced already, by a call that failed alongside this one
        }
        let Some(client) = &self.client else {
            return; // a cluster's connection reconnects and follows failovers by itself
        };
        if let Ok(manager) = manager(client) {
            // Relaxed: the mutex orders the generation with the manager.
            let next = self.generation.fetch_add(1, Ordering::Relaxed) + 1;
            *guard = (next, Link::Single(manager));
        }
    }

    /// Puts `link` in place of the connection in use: a Sentinel named a new primary.
    #[cfg(feature = "sentinel")]
    pub(super) fn install(&self, link: Link) {
        let mut guard = self.manager.lock().unwrap_or_else(PoisonError::into_inner);
        // Relaxed: the mutex orders the generation with the manager.
        let next = self.generation.fetch_add(1, Ordering::Relaxed) + 1;
        *guard = (next, link);
    }

    /// Microseconds since `base`.
    pub(super) fn local_us(&self) -> i64 {
        self.base.elapsed().as_micros() as i64
    }

    /// Redis `TIME` now, as last seen: never ahead of it when both clocks run at one rate,
    /// since Redis read it before the reply was seen.
    pub(super) fn redis_now_us(&self) -> i64 {
        // Relaxed: an estimate; any recent value serves.
        self.local_us() + self.offset_us.load(Ordering::Relaxed)
    }

    /// Records Redis `TIME` from a reply seen at `local_us`.
    pub(super) fn saw_redis_time(&self, redis_us: i64, local_us: i64) {
        self.offset_us.store(redis_us - local_us, Ordering::Relaxed);
        self.last_answer_us.store(local_us, Ordering::Relaxed);
    }
}

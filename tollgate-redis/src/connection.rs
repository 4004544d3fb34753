//! [`RedisConnection`]: the one connection to a server that every bucket of a process shares.

use core::time::Duration;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use ::redis::aio::{ConnectionManager, ConnectionManagerConfig};
use ::redis::{Arg, Client, Cmd, ErrorKind, RedisError, RedisResult, Script, ServerErrorKind};
use std::string::{String, ToString};

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
    /// The server's address, or a cluster's nodes: for messages.
    pub(super) address: String,
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
        let address = client.get_connection_info().addr().to_string();
        let manager = manager(&client).map_err(|error| SetupError::Unreachable {
            address: address.clone(),
            error,
        })?;
        Ok(Self::over(Some(client), Link::Single(manager), address))
    }

    /// A connection over `link`, recreated from `client` when it must be.
    pub(super) fn over(client: Option<Client>, link: Link, address: String) -> Self {
        let base = Instant::now();
        let unix_us = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, micros);
        Self {
            shared: Arc::new(Shared {
                client,
                address,
                manager: Mutex::new((0, link)),
                generation: AtomicU64::new(0),
                script: Script::new(SCRIPT),
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
                Err(setup_error(&connection.shared.address, error))
            }
            Err(_) => Err(SetupError::Timeout {
                address: connection.shared.address.clone(),
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

pub(super) fn manager(client: &Client) -> Result<ConnectionManager, RedisError> {
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(CONNECT_TIMEOUT))
        // Each call times itself out; a call that took longer is dropped by its caller.
        .set_response_timeout(None)
        // Reconnect quickly, then leave the next call to try again: a call never waits on a
        // long backoff, and its timeout bounds it anyway.
        .set_number_of_retries(1)
        .set_min_delay(Duration::from_millis(10))
        .set_max_delay(Duration::from_millis(100));
    ConnectionManager::new_lazy_with_config(client.clone(), config)
}

/// `connect`'s verdict on an error from Redis at `address`: could not reach it, or it said no.
pub(super) fn setup_error(address: &str, error: RedisError) -> SetupError {
    let address = address.to_string();
    if is_rejection(&error, false) {
        SetupError::Refused { address, error }
    } else {
        SetupError::Unreachable { address, error }
    }
}

/// Whether an error is Redis's answer that something is misconfigured (the key holds another
/// type, authentication failed, the user may not run scripts, the server is out of memory or,
/// alone, a replica), which no fault policy papers over. Everything else is a fault the policy
/// decides: the link failed or dropped, the server is loading, busy or failing over, the
/// script is missing where the call ran (a node just promoted, a flush), a redirection could
/// not be followed, a reply could not be read as the script's answer. Only errors a server
/// sent in answer to a call are rejections: the client's own errors never say that the
/// server is misconfigured.
///
/// On a cluster (`cluster`), `READONLY` is a fault: a write that lands on a master demoted to
/// a replica mid-failover.
///
/// A certificate that does not verify (feature `tls`) is misconfiguration too, never papered
/// over: a bucket failing open must not grant everything because its server's certificate
/// expired.
pub(super) fn is_rejection(error: &RedisError, cluster: bool) -> bool {
    #[cfg(feature = "tls")]
    if super::tls::is_tls(error) {
        return true;
    }
    match error.kind() {
        ErrorKind::AuthenticationFailed | ErrorKind::InvalidClientConfig => true,
        ErrorKind::Server(
            ServerErrorKind::ResponseError
            | ServerErrorKind::ExecAbort
            | ServerErrorKind::CrossSlot
            | ServerErrorKind::NoPerm,
        ) => true,
        ErrorKind::Server(ServerErrorKind::ReadOnly) => !cluster,
        // Codes the client does not know: WRONGTYPE, OOM, NOAUTH, WRONGPASS... are
        // misconfiguration, BUSY (a script running too long) is a server that cannot answer.
        ErrorKind::Extension => !matches!(error.code(), Some("BUSY" | "LOADING" | "TRYAGAIN")),
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

/// Whether a call found the script missing where it ran (a restarted or newly promoted
/// server, `SCRIPT FLUSH`): it ran nothing, and is sent again with the script's text.
pub(super) fn is_noscript(error: &RedisError) -> bool {
    error.kind() == ErrorKind::Server(ServerErrorKind::NoScript)
}

/// The script's answer: status, debt (a pair), Redis `TIME`, epoch.
pub(super) type Answer = (i64, i64, i64, i64, i64);

/// Microseconds in `duration`, saturating: `Duration::MAX` is the longest time, not a negative
/// one.
pub(super) fn micros(duration: Duration) -> i64 {
    i64::try_from(duration.as_micros()).unwrap_or(i64::MAX)
}

/// The script's argument that holds the call's deadline (`ARGV[9]`), after `EVALSHA`, the
/// hash, the key count and the key.
const DEADLINE_ARG: usize = 4 + 8;

/// How long a call pauses before it tries again on a connection found dead.
pub(super) const RETRY_PAUSE: Duration = Duration::from_millis(10);

/// Whether `error` says the connection is dead (reset, closed, refused while reconnecting):
/// the server restarted or the link dropped, and a new connection may find it back.
pub(super) fn is_dead_connection(error: &RedisError) -> bool {
    error.is_connection_dropped() || error.is_connection_refusal()
}

/// Sends one script call over `shared`'s connection and reads its answer: the answer, with the
/// generation of the connection that gave it.
///
/// A server that has forgotten the script gets the call again with its text. A connection
/// found dead (a server restarted, a link reset) is replaced by the manager and the call sent
/// again on the new one, with a deadline fresh from the time left, pausing a moment between
/// tries, while Redis last answered within one timeout: a restart shorter than the timeout
/// fails no call, and once an outage is older than that, calls fail at once again (the
/// caller's timeout bounds the tries). A call sent again after a reset whose first copy had
/// run takes twice: fewer grants, never more.
pub(super) async fn send(
    shared: &Shared,
    call: Cmd,
    timeout: Duration,
) -> (u64, RedisResult<Answer>) {
    let began = Instant::now();
    let mut call = call;
    loop {
        let (generation, mut manager) = shared.manager();
        let answer = match call.query_async::<Answer>(&mut manager).await {
            // Where it ran, the script was missing (a restart, a node just promoted, a flush):
            // it ran nothing, and runs now with its text, which loads it there.
            Err(error) if is_noscript(&error) => {
                with_text(&call).query_async::<Answer>(&mut manager).await
            }
            answer => answer,
        };
        match answer {
            Err(error) if shared.may_retry(&error, timeout) => {
                tokio::time::sleep(RETRY_PAUSE).await;
                let left = timeout.saturating_sub(began.elapsed());
                call = with_deadline(&call, shared.deadline_us(left));
            }
            answer => return (generation, answer),
        }
    }
}

/// `call` with its deadline replaced by `deadline_us`; a call without one keeps none.
pub(super) fn with_deadline(call: &Cmd, deadline_us: Option<i64>) -> Cmd {
    let mut next = Cmd::new();
    for (i, arg) in call.args_iter().enumerate() {
        if let Arg::Simple(bytes) = arg {
            if i == DEADLINE_ARG && !bytes.is_empty() {
                next.arg(deadline_us.map_or(String::new(), |at| at.to_string()));
            } else {
                next.arg(bytes);
            }
        }
    }
    next
}

/// The bucket script's text.
const SCRIPT: &str = include_str!("script.lua");

/// `call` (an `EVALSHA` of the script) as an `EVAL` with the script's text: the server that
/// runs it, the one holding its key, keeps the script for the calls that follow.
///
/// The script is not loaded with `SCRIPT LOAD`: on a cluster that goes to every master the
/// client knows, and fails while one of them is down, so that the node just promoted in its
/// place would never get it.
pub(super) fn with_text(call: &Cmd) -> Cmd {
    let mut eval = ::redis::cmd("EVAL");
    eval.arg(SCRIPT);
    for arg in call.args_iter().skip(2) {
        if let Arg::Simple(bytes) = arg {
            eval.arg(bytes);
        }
    }
    eval
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
        let cluster = self.client.is_none();
        if is_rejection(&error, cluster) {
            Fault::Rejected(error)
        } else {
            Fault::Redis(error)
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
        micros(self.base.elapsed())
    }

    /// The Redis time past which a call with `timeout`, sent now, acts on nothing: half its
    /// timeout after it was sent, by Redis's clock as last seen. `None` (no deadline) when that
    /// lies beyond the integers the script holds exactly, as for `Duration::MAX`.
    pub(super) fn deadline_us(&self, timeout: Duration) -> Option<i64> {
        let at = self.redis_now_us().saturating_add(micros(timeout / 2));
        (at < 1 << 53).then_some(at)
    }

    /// The script's call on `key`, by its hash, without its arguments.
    pub(super) fn script_call(&self, key: &[u8]) -> Cmd {
        let mut call = ::redis::cmd("EVALSHA");
        call.arg(self.script.get_hash()).arg(1).arg(key);
        call
    }

    /// Redis `TIME` now, as last seen: never ahead of it when both clocks run at one rate,
    /// since Redis read it before the reply was seen.
    pub(super) fn redis_now_us(&self) -> i64 {
        // Relaxed: an estimate; any recent value serves.
        self.local_us()
            .saturating_add(self.offset_us.load(Ordering::Relaxed))
    }

    /// Whether a call that failed with `error` is sent again: a lone server's connection found
    /// dead while Redis answered within `timeout` (a restart under way). A cluster's client
    /// follows failovers and reconnects itself, within its own retries: sending again while
    /// a master is down would only hold up its calls to the others.
    pub(super) fn may_retry(&self, error: &RedisError, timeout: Duration) -> bool {
        self.client.is_some() && is_dead_connection(error) && self.answered_within(timeout)
    }

    /// Whether this is a cluster's connection.
    pub(super) fn is_cluster(&self) -> bool {
        self.client.is_none()
    }

    /// Whether Redis answered a call within `span` of now.
    pub(super) fn answered_within(&self, span: Duration) -> bool {
        // Relaxed: a heuristic.
        let last = self.last_answer_us.load(Ordering::Relaxed);
        self.local_us().saturating_sub(last) < micros(span)
    }

    /// Records Redis `TIME` from a reply seen at `local_us`.
    pub(super) fn saw_redis_time(&self, redis_us: i64, local_us: i64) {
        self.offset_us.store(redis_us - local_us, Ordering::Relaxed);
        self.last_answer_us.store(local_us, Ordering::Relaxed);
    }
}

//! Following the primary that Redis Sentinel names, with the `sentinel` feature.
//!
//! [`Sentinel::connect`] asks the Sentinels which server is the primary of a service, connects
//! to it, and keeps asking (every [`poll`](Sentinel::poll) interval, in a task on the runtime)
//! for as long as the connection is in use: when they name another server (a failover), the
//! connection's calls go there from then on. Until the new primary serves, calls fail as faults
//! and each bucket's [`FaultPolicy`](crate::FaultPolicy) decides, as for a server down.
//!
//! Replication is asynchronous: the writes the old primary had not passed on are lost with
//! it, and the fleet may take those tokens again (at most about one burst per key, as after a
//! restart).
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use tollgate_redis::sentinel::Sentinel;
//!
//! let redis = Sentinel::new(
//!     &["redis://10.0.0.1:26379/", "redis://10.0.0.2:26379/", "redis://10.0.0.3:26379/"],
//!     "rate-limits",
//! )
//! .node(|host, port| tollgate_redis::Client::open(format!("redis://limiter:secret@{host}:{port}/")))
//! .connect()
//! .await?;
//! # Ok(())
//! # }
//! ```

use core::time::Duration;
use std::sync::{Arc, Weak};

use ::redis::aio::MultiplexedConnection;
use ::redis::{ErrorKind, RedisError};

use super::cluster::Link;
use super::connection::{manager, setup_error, Shared};
use super::{Client, RedisConnection, SetupError};

/// Makes the client for a primary at `host:port`: its credentials, database, TLS.
type Node = dyn Fn(&str, u16) -> Result<Client, RedisError> + Send + Sync;

/// How long one Sentinel may take to answer.
const ASK_TIMEOUT: Duration = Duration::from_millis(250);

/// Where to ask for a service's primary, and how to reach it: see the [module](self).
#[derive(Clone)]
pub struct Sentinel {
    sentinels: Vec<String>,
    service: String,
    node: Arc<Node>,
    poll: Duration,
}

impl core::fmt::Debug for Sentinel {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Sentinel")
            .field("sentinels", &self.sentinels)
            .field("service", &self.service)
            .field("poll", &self.poll)
            .finish_non_exhaustive()
    }
}

impl Sentinel {
    /// The Sentinels at `sentinels` (`"redis://host:26379/"`), asked in turn, about the
    /// primary they monitor as `service`. The primary is reached as `redis://host:port/`
    /// unless [`node`](Self::node) says otherwise; the Sentinels are asked every 100 ms.
    pub fn new(sentinels: &[&str], service: &str) -> Self {
        Self {
            sentinels: sentinels.iter().map(|url| url.to_string()).collect(),
            service: service.to_string(),
            node: Arc::new(|host, port| Client::open(format!("redis://{host}:{port}/"))),
            poll: Duration::from_millis(100),
        }
    }

    /// How to reach a primary at `host:port`: a client with its credentials, database or TLS
    /// (`rediss://`).
    pub fn node(
        mut self,
        node: impl Fn(&str, u16) -> Result<Client, RedisError> + Send + Sync + 'static,
    ) -> Self {
        self.node = Arc::new(node);
        self
    }

    /// How often the Sentinels are asked which server is the primary: a failover is followed
    /// within this interval of their naming the new one.
    pub fn poll(mut self, every: Duration) -> Self {
        self.poll = every;
        self
    }

    /// Asks the Sentinels for the primary, connects to it and checks it answers `PING`
    /// within a second, then follows it. Call it within a tokio runtime.
    ///
    /// [`SetupError::Unreachable`] if no Sentinel answered, [`SetupError::Refused`] if they
    /// know no such service or the primary answered with an error.
    pub async fn connect(self) -> Result<RedisConnection, SetupError> {
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(SetupError::NoRuntime);
        }
        let mut asker = Asker::new(&self.sentinels)?;
        let sentinels = self.sentinels.join(", ");
        let primary = match asker.primary(&self.service).await {
            Ok(Some(primary)) => primary,
            Ok(None) => {
                return Err(SetupError::Refused {
                    address: sentinels,
                    error: RedisError::from((
                        ErrorKind::InvalidClientConfig,
                        "the Sentinels monitor no such service",
                        self.service.clone(),
                    )),
                })
            }
            Err(error) => {
                return Err(SetupError::Unreachable {
                    address: sentinels,
                    error,
                })
            }
        };
        let address = format!("{}:{}", primary.0, primary.1);
        let client = (self.node)(&primary.0, primary.1).map_err(|error| SetupError::Refused {
            address: address.clone(),
            error,
        })?;
        let manager = manager(&client).map_err(|error| setup_error(&address, error))?;
        let connection = RedisConnection::over(None, Link::Single(manager), address.clone());
        let mut link = connection.shared.manager().1;
        let command = ::redis::cmd("PING");
        let ping = command.query_async::<()>(&mut link);
        match tokio::time::timeout(Duration::from_secs(1), ping).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => return Err(setup_error(&address, error)),
            Err(_) => {
                return Err(SetupError::Timeout {
                    address,
                    after: Duration::from_secs(1),
                })
            }
        }
        let weak = Arc::downgrade(&connection.shared);
        tokio::spawn(follow(weak, self, asker, primary));
        Ok(connection)
    }
}

/// Asks the Sentinels every `poll`, and moves the connection to the primary they name, for
/// as long as the connection is in use.
async fn follow(
    weak: Weak<Shared>,
    sentinel: Sentinel,
    mut asker: Asker,
    mut current: (String, u16),
) {
    loop {
        tokio::time::sleep(sentinel.poll).await;
        if weak.strong_count() == 0 {
            return;
        }
        let Ok(Some(primary)) = asker.primary(&sentinel.service).await else {
            continue;
        };
        if primary == current {
            continue;
        }
        let Ok(client) = (sentinel.node)(&primary.0, primary.1) else {
            continue;
        };
        let Ok(manager) = manager(&client) else {
            continue;
        };
        let Some(shared) = weak.upgrade() else {
            return;
        };
        shared.install(Link::Single(manager));
        current = primary;
    }
}

/// The Sentinels, each with its connection once made.
struct Asker {
    sentinels: Vec<(Client, Option<MultiplexedConnection>)>,
}

impl Asker {
    fn new(urls: &[String]) -> Result<Self, SetupError> {
        let sentinels = urls
            .iter()
            .map(|url| Client::open(url.as_str()).map(|client| (client, None)))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|error| SetupError::Refused {
                address: urls.join(", "),
                error,
            })?;
        if sentinels.is_empty() {
            return Err(SetupError::Refused {
                address: String::new(),
                error: RedisError::from((ErrorKind::InvalidClientConfig, "no Sentinel given")),
            });
        }
        Ok(Self { sentinels })
    }

    /// The primary of `service` as the first Sentinel that answers names it: `None` if it
    /// knows no such service; the last error if none answered.
    async fn primary(&mut self, service: &str) -> Result<Option<(String, u16)>, RedisError> {
        let mut last = None;
        for (client, connection) in &mut self.sentinels {
            let ask = async {
                if connection.is_none() {
                    *connection = Some(client.get_multiplexed_async_connection().await?);
                }
                let link = connection
                    .as_mut()
                    .ok_or_else(|| RedisError::from((ErrorKind::Io, "no link to a Sentinel")))?;
                ::redis::cmd("SENTINEL")
                    .arg("get-master-addr-by-name")
                    .arg(service)
                    .query_async::<Option<(String, u16)>>(link)
                    .await
            };
            match tokio::time::timeout(ASK_TIMEOUT, ask).await {
                Ok(Ok(primary)) => return Ok(primary),
                Ok(Err(error)) => last = Some(error),
                Err(_) => {
                    last = Some(RedisError::from((
                        ErrorKind::Io,
                        "a Sentinel did not answer in time",
                    )))
                }
            }
            // Connect again next time: the link may be what failed.
            *connection = None;
        }
        Err(last.unwrap_or_else(|| RedisError::from((ErrorKind::Io, "no Sentinel answered"))))
    }
}

//! Redis over TLS (`rediss://`), with the `tls` feature: through rustls, so the host needs no
//! OpenSSL.
//!
//! Three ways to trust a server:
//!
//! - **The system's roots**, for a managed service whose certificate a public CA signed:
//!   [`Client::open`](crate::Client::open) with a `rediss://` URL, as for plain TCP.
//! - **A CA the caller gives**, for a self-signed fleet: [`client`] with [`Tls::ca`]; the
//!   system's roots are then not consulted.
//! - **Mutual TLS**, for a server that asks for a client certificate
//!   (`tls-auth-clients yes`): [`Tls::client_certificate`] as well.
//!
//! The server's name is checked against its certificate: a URL naming `127.0.0.1` needs a
//! certificate for the IP address `127.0.0.1`. A certificate that does not verify fails
//! [`RedisConnection::connect`](crate::RedisConnection::connect) with [`SetupError::Tls`]
//! naming the address and the TLS cause; there is no fallback to plain text. (A connection set
//! up with `connect_lazy` meets the same failure at each call, as
//! [`Error::Rejected`](crate::Error::Rejected) whatever the fault policy: a fleet that
//! fails open does not grant everything because a certificate expired.)
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use tollgate_redis::{tls, RedisConnection};
//!
//! let ca = std::fs::read("/etc/redis/ca.crt")?;
//! let cert = std::fs::read("/etc/redis/client.crt")?;
//! let key = std::fs::read("/etc/redis/client.key")?;
//! let settings = tls::Tls::new().ca(ca).client_certificate(cert, key);
//! let client = tls::client("rediss://redis.internal:6380/", settings)?;
//! let redis = RedisConnection::connect(client).await?;
//! # Ok(())
//! # }
//! ```

use core::fmt;

use ::redis::{ClientTlsConfig, RedisError, TlsCertificates};

use crate::cluster::Link;
use crate::connection::setup_error;
use crate::{Client, RedisConnection, SetupError};

/// What to trust, and what to show, on a `rediss://` connection: see the [module](self).
#[derive(Clone, Default)]
pub struct Tls {
    ca: Option<Vec<u8>>,
    client: Option<(Vec<u8>, Vec<u8>)>,
}

impl Tls {
    /// The system's roots, no client certificate.
    pub fn new() -> Self {
        Self::default()
    }

    /// Trusts the CA certificate (or certificates) in `pem` instead of the system's roots.
    pub fn ca(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.ca = Some(pem.into());
        self
    }

    /// Presents the certificate `cert_pem` with its private key `key_pem` (mutual TLS).
    pub fn client_certificate(
        mut self,
        cert_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        self.client = Some((cert_pem.into(), key_pem.into()));
        self
    }
}

impl fmt::Debug for Tls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print a private key.
        f.debug_struct("Tls")
            .field("ca", &self.ca.as_ref().map(|_| "<pem>"))
            .field("client_certificate", &self.client.as_ref().map(|_| "<pem>"))
            .finish()
    }
}

/// A client for the `rediss://` URL `url` that trusts and shows what `settings` say.
///
/// [`SetupError::Refused`] if the URL is not a `rediss://` one (a `redis://` URL would
/// silently go without TLS), or a certificate or key cannot be read.
pub fn client(url: &str, settings: Tls) -> Result<Client, SetupError> {
    if !url.starts_with("rediss://") {
        return Err(not_tls(url));
    }
    Client::build_with_tls(url, certificates(settings)).map_err(|error| SetupError::Refused {
        address: host_of(url),
        error,
    })
}

/// The host and port of a URL, without its credentials: for messages.
fn host_of(url: &str) -> String {
    let host = url.split('@').next_back().unwrap_or_default();
    host.trim_start_matches("rediss://")
        .trim_start_matches("redis://")
        .trim_end_matches('/')
        .to_string()
}

/// Connects to a Redis Cluster serving TLS (`tls-cluster yes`) through any of `nodes`
/// (`"rediss://127.0.0.1:7000/"`), trusting and showing what `settings` say on every node, as
/// [`RedisConnection::connect_cluster`] does over TCP. A certificate that does not verify is
/// [`SetupError::Tls`], naming the nodes given.
pub async fn connect_cluster(nodes: &[&str], settings: Tls) -> Result<RedisConnection, SetupError> {
    use ::redis::cluster::ClusterClient;
    use core::time::Duration;

    if let Some(plain) = nodes.iter().find(|node| !node.starts_with("rediss://")) {
        return Err(not_tls(plain));
    }
    let address = nodes
        .iter()
        .map(|node| host_of(node))
        .collect::<Vec<_>>()
        .join(", ");
    let tls = |error: RedisError| {
        if is_tls(&error) {
            SetupError::Tls(TlsError {
                address: address.clone(),
                error,
            })
        } else {
            setup_error(&address, error)
        }
    };
    // The settings of `connect_cluster`, with the certificates.
    let client = ClusterClient::builder(nodes.iter().map(|node| node.to_string()))
        .certs(certificates(settings.clone()))
        .connection_timeout(Duration::from_millis(500))
        .retries(3)
        .min_retry_wait(10)
        .max_retry_wait(100)
        .build()
        .map_err(tls)?;
    let timeout = Duration::from_secs(1);
    let mut link = match tokio::time::timeout(timeout, client.get_async_connection()).await {
        Ok(Ok(link)) => link,
        Ok(Err(error)) => return Err(tls_cause(nodes, &settings, &address, error).await),
        Err(_) => {
            return Err(SetupError::Timeout {
                address,
                after: timeout,
            })
        }
    };
    let command = ::redis::cmd("PING");
    let ping = command.query_async::<()>(&mut link);
    match tokio::time::timeout(timeout, ping).await {
        Ok(Ok(())) => Ok(RedisConnection::over(
            None,
            Link::Cluster(link),
            address.clone(),
        )),
        Ok(Err(error)) => Err(tls(error)),
        Err(_) => Err(SetupError::Timeout {
            address: address.clone(),
            after: timeout,
        }),
    }
}

/// The cluster client reports a failed handshake as text: a node reached alone says whether
/// TLS was the cause, and which node.
async fn tls_cause(nodes: &[&str], settings: &Tls, all: &str, error: RedisError) -> SetupError {
    for node in nodes {
        let Ok(client) = Client::build_with_tls(*node, certificates(settings.clone())) else {
            continue;
        };
        let connect = client.get_multiplexed_async_connection();
        if let Ok(Err(alone)) =
            tokio::time::timeout(core::time::Duration::from_millis(500), connect).await
        {
            if is_tls(&alone) {
                let address = client.get_connection_info().addr().to_string();
                return SetupError::Tls(TlsError {
                    address,
                    error: alone,
                });
            }
        }
    }
    setup_error(all, error)
}

fn not_tls(url: &str) -> SetupError {
    SetupError::Refused {
        address: host_of(url),
        error: RedisError::from((
            ::redis::ErrorKind::InvalidClientConfig,
            "TLS settings given for a URL that is not rediss://",
            url.split('@').next_back().unwrap_or_default().to_string(),
        )),
    }
}

fn certificates(settings: Tls) -> TlsCertificates {
    TlsCertificates {
        client_tls: settings
            .client
            .map(|(client_cert, client_key)| ClientTlsConfig {
                client_cert,
                client_key,
            }),
        root_cert: settings.ca,
    }
}

/// A TLS handshake that failed: the server's certificate did not verify, or the server
/// refused ours.
#[derive(Debug)]
pub struct TlsError {
    address: String,
    error: RedisError,
}

impl TlsError {
    /// The server's address, `host:port`.
    pub fn address(&self) -> &str {
        &self.address
    }
}

impl fmt::Display for TlsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "TLS with Redis at {} failed: {}",
            self.address, self.error
        )
    }
}

impl std::error::Error for TlsError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

/// `error`, met setting up a connection through `client`, as [`SetupError::Tls`] if TLS
/// caused it.
pub(crate) fn classify(
    client: Option<&Client>,
    error: RedisError,
) -> Result<SetupError, RedisError> {
    let Some(client) = client else {
        return Err(error);
    };
    if !is_tls(&error) {
        return Err(error);
    }
    let address = client.get_connection_info().addr().to_string();
    Ok(SetupError::Tls(TlsError { address, error }))
}

/// Whether rustls is somewhere in the error's causes. The redis crate keeps its I/O error as an
/// `Arc<dyn Error>`, and an I/O error's `source()` skips the error it wraps: both are unwrapped
/// here by hand.
pub(crate) fn is_tls(error: &RedisError) -> bool {
    type Shared = std::sync::Arc<dyn std::error::Error + Send + Sync>;
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(mut now) = cause {
        if let Some(shared) = now.downcast_ref::<Shared>() {
            now = &**shared;
        }
        let wrapped = now
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            .map(|inner| inner as &(dyn std::error::Error + 'static));
        if [Some(now), wrapped]
            .into_iter()
            .flatten()
            .any(|error| error.downcast_ref::<rustls::Error>().is_some())
        {
            return true;
        }
        cause = now.source();
    }
    false
}

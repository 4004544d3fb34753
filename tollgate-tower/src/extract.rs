//! Ready-made key extractors for HTTP requests: the peer's address, a trusted forwarded
//! header, a header's value. Each is a [`KeyOf`] for [`AnswerLayer::per_key`] and
//! [`RejectLayer::per_key`](super::RejectLayer::per_key).
//!
//! **Spoofing.** A key is only as good as what an attacker cannot choose. The peer's address
//! ([`PeerIp`]) is the connection's, so it cannot be forged, but every client behind one proxy
//! or NAT shares it. A forwarded header ([`ForwardedIp`]) is written by whoever sent the
//! request: only the hops your own proxies appended can be trusted, so the extractor counts
//! your proxies from the right and never reads past them; and it is only safe when those
//! proxies are the only way in (a client that reaches the server directly writes the whole
//! header). A header's value ([`HeaderKey`], an API key) is whatever the client sends: check
//! it first (an unknown key must not get a paid tier), and remember that made-up values are
//! new keys, which the limiter's capacity bounds.
//!
//! [`AnswerLayer::per_key`]: super::AnswerLayer::per_key

use core::fmt;
use core::net::{IpAddr, SocketAddr};
use core::str::FromStr;
#[cfg(feature = "tracing")]
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use http::header::{HeaderName, FORWARDED};
use http::{Extensions, HeaderValue, Request};

use super::KeyOf;
use tollgate::IpPrefix;

/// Why a request has no key: the extractor could not find the client in it. The layers refuse
/// such a request with `500 Internal Server Error` and this message, rather than let every such
/// request share one bucket: it is the server's configuration that is wrong, and the first
/// request says so. A missing peer address ([`NoKey::NoPeer`]) is also logged, once per
/// extractor, through `tracing` (the default feature `tracing`), so the server's log says it
/// too.
///
/// ```
/// use tollgate_tower::extract::{NoKey, PeerIp};
/// use tollgate_tower::KeyOf;
///
/// let request = http::Request::new(()); // served without the peer's address
/// let error = PeerIp::default().key_of(&request).unwrap_err();
/// assert!(matches!(error, NoKey::NoPeer { .. }));
/// assert!(error.to_string().starts_with("no client address: the request carries no peer address"));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum NoKey {
    /// The request's extensions hold no peer address of the type the extractor reads: the
    /// server did not put the connection's address there (axum: serve with
    /// `into_make_service_with_connect_info::<SocketAddr>()`).
    NoPeer {
        /// The extension types the extractor looked for.
        looked_for: &'static str,
    },
    /// The hop of a forwarded header that names the client is not an address.
    NotAnAddress {
        /// The header read: `x-forwarded-for` or `forwarded`.
        header: &'static str,
        /// Which hop, counted from the right of the header (1 is the rightmost).
        from_right: usize,
        /// What the hop is instead.
        hop: Hop,
    },
}

/// What a forwarded header's hop holds, when it is not an address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Hop {
    /// `unknown`: the proxy did not know the address (RFC 7239 §6.2).
    Unknown,
    /// An obfuscated identifier such as `_hidden` (RFC 7239 §6.3): the proxy hides the address.
    Obfuscated,
    /// A `Forwarded` element without a `for=` parameter.
    NoFor,
    /// Bytes that are not an address: not UTF-8, or text that does not parse.
    Invalid,
}

impl fmt::Display for NoKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NoKey::NoPeer { looked_for } => write!(
                f,
                "no client address: the request carries no peer address (looked for {looked_for} \
                 in its extensions); serve axum with \
                 `into_make_service_with_connect_info::<SocketAddr>()` and enable tollgate-tower's \
                 `axum` feature, or insert the connection's `SocketAddr` into each request"
            ),
            NoKey::NotAnAddress {
                header,
                from_right,
                hop,
            } => {
                let what = match hop {
                    Hop::Unknown => "`unknown`",
                    Hop::Obfuscated => "an obfuscated identifier, not an address",
                    Hop::NoFor => "an element without `for=`",
                    Hop::Invalid => "not an address",
                };
                write!(
                    f,
                    "no client address: hop {from_right} from the right of `{header}` is {what}; \
                     check how many proxies are trusted and what they write"
                )
            }
        }
    }
}

impl std::error::Error for NoKey {}

/// How a [`PeerIp`] finds the connection's address in a request's extensions.
type ReadPeer = Arc<dyn Fn(&Extensions) -> Option<SocketAddr> + Send + Sync>;

/// The peer's address, grouped by an [`IpPrefix`] (an IPv6 client by its /64 unless told
/// otherwise): read from the request's extensions, where the server put the connection's
/// address. A request without it is refused with [`NoKey::NoPeer`], never put in a bucket
/// shared by all such requests; with the feature `tracing` (on by default) the first such
/// request is also logged as an error, once for the extractor and its clones, so that a flood
/// of them does not flood the log.
///
/// [`PeerIp::new`] reads a [`SocketAddr`] extension (as a hyper service inserts it) and, with
/// the `axum` feature, axum's `ConnectInfo<SocketAddr>`; [`PeerIp::from_extension`] reads any
/// other type:
///
/// ```
/// use std::net::SocketAddr;
/// use tollgate_tower::{extract::PeerIp, KeyOf};
/// use tollgate::IpPrefix;
///
/// #[derive(Clone)]
/// struct Remote(SocketAddr); // what some server puts in the extensions
/// let peer = PeerIp::from_extension(IpPrefix::default(), |remote: &Remote| remote.0);
/// let mut request = http::Request::new(());
/// request.extensions_mut().insert(Remote(SocketAddr::from(([0x2001, 0xdb8, 1, 2, 3, 4, 5, 6], 443))));
/// assert_eq!(peer.key_of(&request), Ok("2001:db8:1:2::".parse().unwrap()));
/// ```
#[derive(Clone)]
pub struct PeerIp {
    prefix: IpPrefix,
    read: ReadPeer,
    looked_for: &'static str,
    /// Whether a request without a peer address was logged: shared by the clones, which serve
    /// the same server.
    #[cfg(feature = "tracing")]
    logged: Arc<AtomicBool>,
}

impl PeerIp {
    /// The [`SocketAddr`] extension's address (or, with the `axum` feature, axum's
    /// `ConnectInfo<SocketAddr>`), grouped by `prefix`.
    pub fn new(prefix: IpPrefix) -> Self {
        #[cfg(feature = "axum")]
        let (read, looked_for): (ReadPeer, _) = (
            Arc::new(|extensions: &Extensions| {
                extensions.get::<SocketAddr>().copied().or_else(|| {
                    extensions
                        .get::<axum::extract::ConnectInfo<SocketAddr>>()
                        .map(|info| info.0)
                })
            }),
            "`SocketAddr` and `ConnectInfo<SocketAddr>`",
        );
        #[cfg(not(feature = "axum"))]
        let (read, looked_for): (ReadPeer, _) = (
            Arc::new(|extensions: &Extensions| extensions.get::<SocketAddr>().copied()),
            "`SocketAddr`",
        );
        Self {
            prefix,
            read,
            looked_for,
            #[cfg(feature = "tracing")]
            logged: Arc::default(),
        }
    }

    /// Axum's `ConnectInfo<SocketAddr>` extension's address, grouped by `prefix`: the server
    /// must be served with `into_make_service_with_connect_info::<SocketAddr>()`.
    ///
    /// ```
    /// use std::net::SocketAddr;
    /// use axum::extract::ConnectInfo;
    /// use tollgate_tower::{extract::PeerIp, KeyOf};
    /// use tollgate::IpPrefix;
    ///
    /// let peer = PeerIp::connect_info(IpPrefix::default());
    /// let mut request = http::Request::new(());
    /// request.extensions_mut().insert(ConnectInfo(SocketAddr::from(([192, 0, 2, 9], 443))));
    /// assert_eq!(peer.key_of(&request), Ok("192.0.2.9".parse().unwrap()));
    /// ```
    #[cfg(feature = "axum")]
    #[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
    pub fn connect_info(prefix: IpPrefix) -> Self {
        Self::from_extension(prefix, |info: &axum::extract::ConnectInfo<SocketAddr>| {
            info.0
        })
    }

    /// The address `read` finds in the request's `T` extension, grouped by `prefix`.
    pub fn from_extension<T: Send + Sync + 'static>(
        prefix: IpPrefix,
        read: fn(&T) -> SocketAddr,
    ) -> Self {
        Self {
            prefix,
            read: Arc::new(move |extensions: &Extensions| extensions.get::<T>().map(read)),
            looked_for: core::any::type_name::<T>(),
            #[cfg(feature = "tracing")]
            logged: Arc::default(),
        }
    }

    fn peer<B>(&self, request: &Request<B>) -> Result<IpAddr, NoKey> {
        match (self.read)(request.extensions()) {
            Some(address) => Ok(address.ip()),
            None => {
                let no_peer = NoKey::NoPeer {
                    looked_for: self.looked_for,
                };
                self.log_once(&no_peer);
                Err(no_peer)
            }
        }
    }

    /// Logs `no_peer` the first time only: every request of a server run without the peer's
    /// address lacks it, and each is answered `500` with the message anyway.
    #[cfg(feature = "tracing")]
    fn log_once(&self, no_peer: &NoKey) {
        // Relaxed: the flag orders nothing else. The load keeps a flood of such requests off
        // the read-modify-write, and the swap lets one of racing first requests through.
        if !self.logged.load(Ordering::Relaxed) && !self.logged.swap(true, Ordering::Relaxed) {
            tracing::error!(
                "{no_peer} (every request without it is answered 500; logged once for this key \
                 extractor)"
            );
        }
    }

    #[cfg(not(feature = "tracing"))]
    fn log_once(&self, _no_peer: &NoKey) {}
}

impl Default for PeerIp {
    /// The peer's address as [`PeerIp::new`] reads it, an IPv4 client by its address, an IPv6
    /// client by its /64.
    fn default() -> Self {
        Self::new(IpPrefix::default())
    }
}

impl<B> KeyOf<Request<B>> for PeerIp {
    type Key = IpAddr;

    fn key_of(&self, request: &Request<B>) -> Result<IpAddr, NoKey> {
        self.peer(request).map(|ip| self.prefix.key(ip))
    }
}

impl fmt::Debug for PeerIp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PeerIp")
            .field("prefix", &self.prefix)
            .field("looked_for", &self.looked_for)
            .finish_non_exhaustive()
    }
}

/// Which forwarded header a [`ForwardedIp`] reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Field {
    /// `X-Forwarded-For: client, proxy1, proxy2`
    XForwardedFor,
    /// `Forwarded: for=client, for=proxy1;proto=https` (RFC 7239)
    Forwarded,
}

impl Field {
    fn name(self) -> &'static str {
        match self {
            Field::XForwardedFor => "x-forwarded-for",
            Field::Forwarded => FORWARDED.as_str(),
        }
    }
}

/// The client's address behind `trusted_proxies` reverse proxies of your own: the rightmost
/// hop of `X-Forwarded-For` (or RFC 7239 `Forwarded`) that your proxies did not write, grouped
/// by an [`IpPrefix`].
///
/// The hops are the header's members, left to right over all its lines, then the peer's
/// address. Each proxy appends the address it received from, so the last `trusted_proxies`
/// hops are your proxies' own, and the one before them is the client as your outermost proxy
/// saw it: that is the key. Nothing further left is read, for anyone can write it.
///
/// The header is split on `,` as bytes, so whatever a client writes to the left (bytes that
/// are not UTF-8, text that is not an address) stays in its own hops: it neither moves the
/// count from the right nor hides the hop your proxy wrote. Empty members are skipped, as
/// HTTP's list syntax says. A request with fewer hops (one that bypassed a proxy) is keyed by
/// its leftmost hop, which is the peer's address when there is no header at all;
/// `trusted_proxies = 0` keys by the peer alone.
///
/// When the chosen hop is not an address (`unknown`, an obfuscated `Forwarded` node such as
/// `_hidden`, a proxy's garbage) or the peer's address is missing, the key is a [`NoKey`]
/// error, which the layers answer with a `500` naming the hop: never a bucket shared by every
/// such request.
///
/// **Only when your proxies are the only way in.** A client that can reach the server directly
/// writes the whole header, and so picks its own key: firewall the server off, or use
/// [`PeerIp`].
///
/// ```
/// use std::net::SocketAddr;
/// use tollgate_tower::{extract::ForwardedIp, KeyOf};
///
/// // Behind two proxies: a CDN, then a load balancer that connects to us.
/// let client_ip = ForwardedIp::x_forwarded_for(2);
/// let mut request = http::Request::builder()
///     .header("x-forwarded-for", "6.6.6.6, 203.0.113.7") // a forged hop, then the client as the CDN saw it
///     .header("x-forwarded-for", "198.51.100.2") // the CDN, as the load balancer saw it
///     .body(())
///     .unwrap();
/// request.extensions_mut().insert(SocketAddr::from(([10, 0, 0, 5], 41_000))); // the load balancer
/// assert_eq!(client_ip.key_of(&request), Ok("203.0.113.7".parse().unwrap()));
/// ```
#[derive(Clone)]
pub struct ForwardedIp {
    field: Field,
    trusted_proxies: usize,
    peer: PeerIp,
}

impl ForwardedIp {
    /// Reads `X-Forwarded-For`, behind `trusted_proxies` proxies of your own; the peer's
    /// address as [`PeerIp::default`] reads it (with the `axum` feature, axum's `ConnectInfo`
    /// too); keys by [`IpPrefix::default`].
    pub fn x_forwarded_for(trusted_proxies: usize) -> Self {
        Self {
            field: Field::XForwardedFor,
            trusted_proxies,
            peer: PeerIp::default(),
        }
    }

    /// Reads RFC 7239 `Forwarded` (its `for=` parameters), behind `trusted_proxies` proxies
    /// of your own; otherwise as [`x_forwarded_for`](Self::x_forwarded_for).
    pub fn forwarded(trusted_proxies: usize) -> Self {
        Self {
            field: Field::Forwarded,
            ..Self::x_forwarded_for(trusted_proxies)
        }
    }

    /// Reads the peer's address (and groups every key) as `peer` does: another extension
    /// type, or another prefix.
    pub fn with_peer(self, peer: PeerIp) -> Self {
        Self { peer, ..self }
    }

    /// The hops the header lists, left to right over all its lines, empty members skipped.
    fn listed<'a, B>(
        &self,
        request: &'a Request<B>,
    ) -> impl Iterator<Item = Result<IpAddr, Hop>> + 'a {
        let field = self.field;
        request
            .headers()
            .get_all(HeaderName::from_static(field.name()))
            .into_iter()
            .flat_map(|line| line.as_bytes().split(|&byte| byte == b','))
            .map(<[u8]>::trim_ascii)
            .filter(|member| !member.is_empty())
            .map(move |member| match field {
                Field::XForwardedFor => node(member),
                Field::Forwarded => for_parameter(member).map_or(Err(Hop::NoFor), node),
            })
    }
}

impl<B> KeyOf<Request<B>> for ForwardedIp {
    type Key = IpAddr;

    fn key_of(&self, request: &Request<B>) -> Result<IpAddr, NoKey> {
        let peer = self.peer.peer(request)?;
        // Hops: the header's, then the peer. The key is `trusted_proxies` hops left of the
        // peer, or the leftmost when there are fewer.
        let listed = self.listed(request).count();
        let ip = if self.trusted_proxies == 0 || listed == 0 {
            peer
        } else {
            let index = listed.saturating_sub(self.trusted_proxies);
            let hop = self.listed(request).nth(index).unwrap_or(Err(Hop::Invalid));
            hop.map_err(|hop| NoKey::NotAnAddress {
                header: self.field.name(),
                from_right: listed - index,
                hop,
            })?
        };
        Ok(self.peer.prefix.key(ip))
    }
}

impl fmt::Debug for ForwardedIp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ForwardedIp")
            .field("field", &self.field)
            .field("trusted_proxies", &self.trusted_proxies)
            .field("peer", &self.peer)
            .finish()
    }
}

/// The `for=` parameter of one `Forwarded` element, unquoted; `None` when it has none.
fn for_parameter(element: &[u8]) -> Option<&[u8]> {
    element
        .split(|&byte| byte == b';')
        .filter_map(|pair| {
            let equals = pair.iter().position(|&byte| byte == b'=')?;
            Some((&pair[..equals], &pair[equals + 1..]))
        })
        .find(|(name, _)| name.trim_ascii().eq_ignore_ascii_case(b"for"))
        .map(|(_, value)| {
            let value = value.trim_ascii();
            let value = value.strip_prefix(b"\"").unwrap_or(value);
            value.strip_suffix(b"\"").unwrap_or(value)
        })
}

/// One hop's node: `192.0.2.1`, `192.0.2.1:443`, `2001:db8::1`, `[2001:db8::1]:443`, or what
/// it is instead of an address.
fn node(node: &[u8]) -> Result<IpAddr, Hop> {
    let node = core::str::from_utf8(node).map_err(|_| Hop::Invalid)?;
    if node.eq_ignore_ascii_case("unknown") {
        return Err(Hop::Unknown);
    }
    if node.starts_with('_') {
        return Err(Hop::Obfuscated);
    }
    node_address(node).ok_or(Hop::Invalid)
}

/// The address in a node that is one.
fn node_address(node: &str) -> Option<IpAddr> {
    if let Ok(ip) = IpAddr::from_str(node) {
        return Some(ip);
    }
    if let Some(rest) = node.strip_prefix('[') {
        let (ip, port) = rest.split_once(']')?;
        let port_ok = match port.strip_prefix(':') {
            Some(port) => valid_port(port),
            None => port.is_empty(),
        };
        return IpAddr::from_str(ip).ok().filter(|_| port_ok);
    }
    let (host, port) = node.rsplit_once(':')?;
    IpAddr::from_str(host)
        .ok()
        .filter(|ip| ip.is_ipv4() && valid_port(port))
}

/// A port as a node may carry it: digits (RFC 7239 also allows an obfuscated `_port`).
fn valid_port(port: &str) -> bool {
    !port.is_empty() && (port.starts_with('_') || port.bytes().all(|byte| byte.is_ascii_digit()))
}

/// A header's value as the key, such as an API key: `None` when the request has none, and then
/// such requests share one bucket (on purpose: the anonymous tier).
///
/// The value is whatever the client sent: check it before it picks a tier, and let unknown
/// values share the strictest one (or refuse them before the limit), since each made-up value
/// is a new key.
///
/// ```
/// use tollgate_tower::{extract::HeaderKey, KeyOf};
///
/// let api_key = HeaderKey::new(http::HeaderName::from_static("x-api-key"));
/// let request = http::Request::builder().header("x-api-key", "paid-42").body(()).unwrap();
/// assert_eq!(api_key.key_of(&request), Ok(Some(http::HeaderValue::from_static("paid-42"))));
/// ```
#[derive(Clone, Debug)]
pub struct HeaderKey {
    name: HeaderName,
}

impl HeaderKey {
    /// Keys by the value of the header `name` (its first line).
    pub fn new(name: HeaderName) -> Self {
        Self { name }
    }
}

impl<B> KeyOf<Request<B>> for HeaderKey {
    type Key = Option<HeaderValue>;

    fn key_of(&self, request: &Request<B>) -> Result<Option<HeaderValue>, NoKey> {
        Ok(request.headers().get(&self.name).cloned())
    }
}

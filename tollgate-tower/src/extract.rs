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

use core::net::{IpAddr, SocketAddr};
use core::str::FromStr;

use http::header::{HeaderName, FORWARDED};
use http::{HeaderValue, Request};

use super::KeyOf;
use tollgate::IpPrefix;

/// The peer's address, grouped by an [`IpPrefix`] (an IPv6 client by its /64 unless told
/// otherwise): read from the request's extensions, where the server put the connection's
/// address. `None` when it did not, and then such requests share one bucket.
///
/// [`PeerIp::new`] reads a [`SocketAddr`] extension (as a hyper service inserts it);
/// [`PeerIp::from_extension`] reads any other type, such as axum's `ConnectInfo`:
///
/// ```
/// use std::net::SocketAddr;
/// use axum::extract::ConnectInfo;
/// use tollgate_tower::{extract::PeerIp, KeyOf};
/// use tollgate::IpPrefix;
///
/// let peer = PeerIp::from_extension(IpPrefix::default(), |info: &ConnectInfo<SocketAddr>| info.0);
/// let mut request = http::Request::new(());
/// request.extensions_mut().insert(ConnectInfo(SocketAddr::from(([0x2001, 0xdb8, 1, 2, 3, 4, 5, 6], 443))));
/// assert_eq!(peer.key_of(&request), Some("2001:db8:1:2::".parse().unwrap()));
/// ```
pub struct PeerIp<T = SocketAddr> {
    prefix: IpPrefix,
    read: fn(&T) -> SocketAddr,
}

impl PeerIp {
    /// The [`SocketAddr`] extension's address, grouped by `prefix`.
    pub fn new(prefix: IpPrefix) -> Self {
        Self {
            prefix,
            read: |address| *address,
        }
    }
}

impl Default for PeerIp {
    /// The [`SocketAddr`] extension's address, an IPv4 client by its address, an IPv6 client by
    /// its /64.
    fn default() -> Self {
        Self::new(IpPrefix::default())
    }
}

impl<T> PeerIp<T> {
    /// The address `read` finds in the request's `T` extension, grouped by `prefix`.
    pub fn from_extension(prefix: IpPrefix, read: fn(&T) -> SocketAddr) -> Self {
        Self { prefix, read }
    }

    fn peer<B>(&self, request: &Request<B>) -> Option<IpAddr>
    where
        T: Send + Sync + 'static,
    {
        let address = (self.read)(request.extensions().get::<T>()?);
        Some(address.ip())
    }
}

impl<B, T: Send + Sync + 'static> KeyOf<Request<B>> for PeerIp<T> {
    type Key = Option<IpAddr>;

    fn key_of(&self, request: &Request<B>) -> Option<IpAddr> {
        self.peer(request).map(|ip| self.prefix.key(ip))
    }
}

impl<T> Clone for PeerIp<T> {
    fn clone(&self) -> Self {
        Self {
            prefix: self.prefix,
            read: self.read,
        }
    }
}

impl<T> core::fmt::Debug for PeerIp<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("PeerIp")
            .field("prefix", &self.prefix)
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

/// The client's address behind `trusted_proxies` reverse proxies of your own: the rightmost
/// hop of `X-Forwarded-For` (or RFC 7239 `Forwarded`) that your proxies did not write, grouped
/// by an [`IpPrefix`].
///
/// The hops are the header's addresses, left to right over all its lines, then the peer's
/// address. Each proxy appends the address it received from, so the last `trusted_proxies`
/// hops are your proxies' own, and the one before them is the client as your outermost proxy
/// saw it: that is the key. Nothing further left is read, for anyone can write it. A request
/// with fewer hops (one that bypassed a proxy) is keyed by its leftmost hop, which is the
/// peer's address when there is no header at all. `trusted_proxies = 0` keys by the peer
/// alone. `None` when the chosen hop is not an address (`unknown`, an obfuscated
/// `Forwarded` node) or the peer's address is missing.
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
/// assert_eq!(client_ip.key_of(&request), Some("203.0.113.7".parse().unwrap()));
/// ```
pub struct ForwardedIp<T = SocketAddr> {
    field: Field,
    trusted_proxies: usize,
    peer: PeerIp<T>,
}

impl ForwardedIp {
    /// Reads `X-Forwarded-For`, behind `trusted_proxies` proxies of your own; the peer's
    /// address from the [`SocketAddr`] extension; keys by [`IpPrefix::default`].
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
}

impl<T> ForwardedIp<T> {
    /// Reads the peer's address (and groups every key) as `peer` does: for axum's
    /// `ConnectInfo`, or another prefix.
    pub fn with_peer<U>(self, peer: PeerIp<U>) -> ForwardedIp<U> {
        ForwardedIp {
            field: self.field,
            trusted_proxies: self.trusted_proxies,
            peer,
        }
    }

    fn name(&self) -> HeaderName {
        match self.field {
            Field::XForwardedFor => HeaderName::from_static("x-forwarded-for"),
            Field::Forwarded => FORWARDED,
        }
    }

    /// The hops the header lists, left to right over all its lines.
    fn listed<'a, B>(&self, request: &'a Request<B>) -> impl Iterator<Item = &'a str> + 'a {
        let field = self.field;
        request
            .headers()
            .get_all(self.name())
            .into_iter()
            .flat_map(|line| line.to_str().unwrap_or("").split(','))
            .map(move |element| match field {
                Field::XForwardedFor => element.trim(),
                Field::Forwarded => for_parameter(element),
            })
    }
}

impl<B, T: Send + Sync + 'static> KeyOf<Request<B>> for ForwardedIp<T> {
    type Key = Option<IpAddr>;

    fn key_of(&self, request: &Request<B>) -> Option<IpAddr> {
        let peer = self.peer.peer(request)?;
        // Hops: the header's, then the peer. The key is `trusted_proxies` hops left of the
        // peer, or the leftmost when there are fewer.
        let listed = self.listed(request).count();
        let hop = if self.trusted_proxies == 0 || listed == 0 {
            Some(peer)
        } else {
            let index = listed.saturating_sub(self.trusted_proxies);
            self.listed(request).nth(index).and_then(node_address)
        };
        hop.map(|ip| self.peer.prefix.key(ip))
    }
}

impl<T> Clone for ForwardedIp<T> {
    fn clone(&self) -> Self {
        Self {
            field: self.field,
            trusted_proxies: self.trusted_proxies,
            peer: self.peer.clone(),
        }
    }
}

impl<T> core::fmt::Debug for ForwardedIp<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ForwardedIp")
            .field("field", &self.field)
            .field("trusted_proxies", &self.trusted_proxies)
            .field("peer", &self.peer)
            .finish()
    }
}

/// The `for=` parameter of one `Forwarded` element, unquoted; `""` when it has none.
fn for_parameter(element: &str) -> &str {
    element
        .split(';')
        .filter_map(|pair| pair.split_once('='))
        .find(|(name, _)| name.trim().eq_ignore_ascii_case("for"))
        .map_or("", |(_, value)| value.trim().trim_matches('"'))
}

/// The address in a hop: `192.0.2.1`, `192.0.2.1:443`, `2001:db8::1`, `[2001:db8::1]:443`.
fn node_address(node: &str) -> Option<IpAddr> {
    if let Ok(ip) = IpAddr::from_str(node) {
        return Some(ip);
    }
    if let Some(rest) = node.strip_prefix('[') {
        return IpAddr::from_str(rest.split(']').next()?).ok();
    }
    let (host, _port) = node.rsplit_once(':')?;
    IpAddr::from_str(host).ok().filter(IpAddr::is_ipv4)
}

/// A header's value as the key, such as an API key: `None` when the request has none, and then
/// such requests share one bucket.
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
/// assert_eq!(api_key.key_of(&request).unwrap(), "paid-42");
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

    fn key_of(&self, request: &Request<B>) -> Option<HeaderValue> {
        request.headers().get(&self.name).cloned()
    }
}

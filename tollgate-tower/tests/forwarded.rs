//! The key extractors against what a client may write: a forwarded header's hops split as
//! bytes, so nothing a client writes to the left of your proxies' hops (bytes that are not
//! UTF-8, garbage, empty members, quotes, a thousand forged hops) moves the key; and a request
//! without a client address is refused with a reason, never put in a shared bucket.

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use http::{HeaderName, HeaderValue, Request, Response, StatusCode};
use tollgate::{IpPrefix, KeyedLimiter, Quota, Rate, TokioClock, WhenFull};
use tollgate_tower::extract::{ForwardedIp, HeaderKey, Hop, NoKey, PeerIp};
use tollgate_tower::{AnswerLayer, KeyOf};
use tower::{service_fn, Layer, Service, ServiceExt};

/// The proxy that connects to the server.
const PROXY: [u8; 4] = [10, 0, 0, 5];

fn ok(text: &str) -> Result<IpAddr, NoKey> {
    Ok(text.parse().unwrap())
}

fn not_an_address(header: &'static str, from_right: usize, hop: Hop) -> Result<IpAddr, NoKey> {
    Err(NoKey::NotAnAddress {
        header,
        from_right,
        hop,
    })
}

/// A request from `peer` with the header lines given, as raw bytes.
fn from_peer(peer: Option<[u8; 4]>, name: &str, lines: &[&[u8]]) -> Request<()> {
    let mut request = Request::new(());
    for line in lines {
        request.headers_mut().append(
            HeaderName::from_bytes(name.as_bytes()).unwrap(),
            HeaderValue::from_bytes(line).unwrap(),
        );
    }
    if let Some(peer) = peer {
        request
            .extensions_mut()
            .insert(SocketAddr::from((peer, 40_000)));
    }
    request
}

/// (trusted proxies, header lines, key)
type Row<'a> = (usize, &'a [&'a [u8]], Result<IpAddr, NoKey>);

#[test]
fn x_forwarded_for_keys_by_the_first_hop_no_trusted_proxy_wrote() {
    const XFF: &str = "x-forwarded-for";
    let many_forged = [&b"6.6.6.6, "[..]; 1_000].concat();
    let many_forged = [many_forged.as_slice(), b"203.0.113.7"].concat();
    let rows: &[Row] = &[
        (1, &[], ok("10.0.0.5")), // no header: the peer (a request that bypassed the proxy)
        (1, &[b"203.0.113.7"], ok("203.0.113.7")),
        (1, &[b"6.6.6.6, 203.0.113.7"], ok("203.0.113.7")), // a forged hop is never read
        (1, &[b"6.6.6.6\xff, 203.0.113.7"], ok("203.0.113.7")), // the issue's: not UTF-8
        (1, &[b"\xff\xfe\x80", b"203.0.113.7"], ok("203.0.113.7")), // a whole line not UTF-8
        (1, &[b"caf\xc3\xa9, 203.0.113.7"], ok("203.0.113.7")), // UTF-8, not ASCII
        (1, &[b"garbage, 203.0.113.7:8080"], ok("203.0.113.7")),
        (1, &[b"\"[, 203.0.113.7"], ok("203.0.113.7")), // an open quote and bracket
        (1, &[b"6.6.6.6", b"203.0.113.7"], ok("203.0.113.7")), // several lines, in order
        // Empty members are skipped, wherever they are.
        (1, &[b"6.6.6.6, , ,203.0.113.7,"], ok("203.0.113.7")),
        (1, &[b",,,", b"203.0.113.7", b""], ok("203.0.113.7")),
        (
            2,
            &[b"6.6.6.6,", b",203.0.113.7", b" , 198.51.100.2"],
            ok("203.0.113.7"),
        ),
        (1, &[b", ,"], ok("10.0.0.5")), // only empty members: no hop, the peer
        // Many hops.
        (1, &[&many_forged], ok("203.0.113.7")),
        (2, &[&many_forged, b"198.51.100.2"], ok("203.0.113.7")),
        (
            4,
            &[b"1.1.1.1, 2.2.2.2, 3.3.3.3, 4.4.4.4, 5.5.5.5"],
            ok("2.2.2.2"),
        ),
        (3, &[b"203.0.113.7"], ok("203.0.113.7")), // fewer hops: the leftmost
        (0, &[b"203.0.113.7"], ok("10.0.0.5")),    // no proxy trusted: the peer alone
        // IPv6, with ports and brackets, keyed by its /64.
        (1, &[b"[2001:db8:1:2::99]:443"], ok("2001:db8:1:2::")),
        (1, &[b"[2001:db8:1:2::99]"], ok("2001:db8:1:2::")),
        (1, &[b"2001:db8:1:2::99"], ok("2001:db8:1:2::")),
        (
            1,
            &[b"::ffff:6.6.6.6, [2001:db8:1:2::99]:1"],
            ok("2001:db8:1:2::"),
        ),
        (
            1,
            &[b"[2001:db8:1:2::99]:"],
            not_an_address(XFF, 1, Hop::Invalid),
        ),
        (
            1,
            &[b"[2001:db8:1:2::99]x"],
            not_an_address(XFF, 1, Hop::Invalid),
        ),
        (
            1,
            &[b"[2001:db8:1:2::99"],
            not_an_address(XFF, 1, Hop::Invalid),
        ),
        (
            1,
            &[b"203.0.113.7:http"],
            not_an_address(XFF, 1, Hop::Invalid),
        ),
        // The hop a trusted proxy wrote is not an address: said, never a shared bucket.
        (
            1,
            &[b"203.0.113.7, garbage"],
            not_an_address(XFF, 1, Hop::Invalid),
        ),
        (
            1,
            &[b"203.0.113.7, 198.51.100.2\xff"],
            not_an_address(XFF, 1, Hop::Invalid),
        ),
        (
            2,
            &[b"garbage, 198.51.100.2"],
            not_an_address(XFF, 2, Hop::Invalid),
        ),
        (1, &[b"unknown"], not_an_address(XFF, 1, Hop::Unknown)),
        (1, &[b"_hidden"], not_an_address(XFF, 1, Hop::Obfuscated)),
        (
            3,
            &[b"\xff, 198.51.100.2"],
            not_an_address(XFF, 2, Hop::Invalid),
        ), // fewer: leftmost
    ];
    for (i, (trusted, lines, key)) in rows.iter().enumerate() {
        let request = from_peer(Some(PROXY), XFF, lines);
        let got = ForwardedIp::x_forwarded_for(*trusted).key_of(&request);
        assert_eq!(got, *key, "row {i}");
    }
}

#[test]
fn forwarded_keys_by_the_for_of_the_first_element_no_trusted_proxy_wrote() {
    const FWD: &str = "forwarded";
    let rfc = br#"for=192.0.2.60;proto=http;by=203.0.113.43, for="[2001:db8:cafe::17]:4711""#;
    let rows: &[Row] = &[
        (1, &[rfc], ok("2001:db8:cafe::")),
        (2, &[rfc], ok("192.0.2.60")),
        (
            1,
            &[b"for=6.6.6.6", b"For=\"198.51.100.9:80\""],
            ok("198.51.100.9"),
        ),
        // The issue's: UTF-8 that is not ASCII, to the left.
        (
            1,
            &[b"for=\"caf\xc3\xa9\", for=203.0.113.7"],
            ok("203.0.113.7"),
        ),
        (
            1,
            &[b"for=\"6.6.6.6\xff\";proto=http, for=203.0.113.7"],
            ok("203.0.113.7"),
        ),
        // A quoted comma splits the client's own element, nothing to its right.
        (1, &[b"for=\"a,b\", for=203.0.113.7"], ok("203.0.113.7")),
        (1, &[b"for=\"", b"for=203.0.113.7"], ok("203.0.113.7")),
        (1, &[b",, for=203.0.113.7 ,,"], ok("203.0.113.7")),
        (1, &[b"for=_hidden, for=203.0.113.7"], ok("203.0.113.7")),
        (1, &[b"for=\"[2001:db8:1:2::99]\""], ok("2001:db8:1:2::")),
        (
            1,
            &[b"for=\"[2001:db8:1:2::99]:_port\";by=_proxy"],
            ok("2001:db8:1:2::"),
        ),
        (
            1,
            &[b"proto=https;for=203.0.113.7;host=example.com"],
            ok("203.0.113.7"),
        ),
        // Obfuscated or missing, where a trusted proxy wrote it.
        (1, &[b"for=unknown"], not_an_address(FWD, 1, Hop::Unknown)),
        (
            1,
            &[b"for=\"unknown\""],
            not_an_address(FWD, 1, Hop::Unknown),
        ),
        (
            1,
            &[b"for=_hidden"],
            not_an_address(FWD, 1, Hop::Obfuscated),
        ),
        (
            2,
            &[b"for=_hidden, for=198.51.100.2"],
            not_an_address(FWD, 2, Hop::Obfuscated),
        ),
        (1, &[b"proto=https"], not_an_address(FWD, 1, Hop::NoFor)),
        (
            1,
            &[b"for=\"caf\xc3\xa9\""],
            not_an_address(FWD, 1, Hop::Invalid),
        ),
    ];
    for (i, (trusted, lines, key)) in rows.iter().enumerate() {
        let request = from_peer(Some(PROXY), FWD, lines);
        let got = ForwardedIp::forwarded(*trusted).key_of(&request);
        assert_eq!(got, *key, "row {i}");
    }
}

/// Whatever a client puts in front of the hops the trusted proxies wrote, as its own line or
/// in the same line, the key is the one without it.
#[test]
fn nothing_a_client_writes_to_the_left_moves_the_key() {
    let fixed: &[&[u8]] = &[
        b"",
        b"\xff",
        b"6.6.6.6\xff",
        b"for=\"caf\xc3\xa9\"",
        b"\"",
        b"[",
        b"]",
        b";",
        b"=",
        b"unknown",
        b"_hidden",
        b",,,",
        b"\x80,\x81 , \x82",
        b"for=\"a,b\";by=\"",
        b"for=1.2.3.4;for=5.6.7.8",
        b"\t \t",
    ];
    // And random ones, of the bytes a forwarded header's syntax gives meaning to.
    let alphabet = b" \t,;=\"[]:_.-0123456789abcdefFORunknow\x80\xc3\xa9\xff";
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    let mut random = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let random: Vec<Vec<u8>> = (0..2_000)
        .map(|_| {
            let len = (random() % 40) as usize;
            (0..len)
                .map(|_| alphabet[(random() % alphabet.len() as u64) as usize])
                .collect()
        })
        .collect();
    let written: Vec<&[u8]> = fixed
        .iter()
        .copied()
        .chain(random.iter().map(Vec::as_slice))
        .collect();
    // (header, trusted proxies, the hops the proxies wrote, key)
    let honest: &[(&str, usize, &[u8], &str)] = &[
        ("x-forwarded-for", 1, b"203.0.113.7", "203.0.113.7"),
        (
            "x-forwarded-for",
            2,
            b"203.0.113.7, 198.51.100.2",
            "203.0.113.7",
        ),
        ("x-forwarded-for", 1, b"[2001:db8::7]:1", "2001:db8::"),
        ("forwarded", 1, b"for=203.0.113.7", "203.0.113.7"),
        (
            "forwarded",
            2,
            b"for=\"[2001:db8::7]:1\", for=198.51.100.2",
            "2001:db8::",
        ),
    ];
    for (name, trusted, hops, key) in honest {
        let extractor = match *name {
            "forwarded" => ForwardedIp::forwarded(*trusted),
            _ => ForwardedIp::x_forwarded_for(*trusted),
        };
        for &left in &written {
            let same_line = [left, b", ", hops].concat();
            for lines in [&[same_line.as_slice()][..], &[left, hops]] {
                let request = from_peer(Some(PROXY), name, lines);
                assert_eq!(
                    extractor.key_of(&request),
                    ok(key),
                    "{name} behind {trusted} with {:?} to the left",
                    String::from_utf8_lossy(left)
                );
            }
        }
    }
}

#[test]
fn an_extractor_without_the_peer_says_so() {
    let request = from_peer(None, "x-forwarded-for", &[b"203.0.113.7"]);
    for key in [
        PeerIp::default().key_of(&request),
        ForwardedIp::x_forwarded_for(1).key_of(&request),
        ForwardedIp::forwarded(1).key_of(&request),
    ] {
        let error = key.unwrap_err();
        assert!(matches!(error, NoKey::NoPeer { .. }), "{error:?}");
        let message = error.to_string();
        assert!(
            message.starts_with("no client address: the request carries no peer address")
                && message.contains("SocketAddr")
                && message.contains("into_make_service_with_connect_info"),
            "{message}"
        );
    }
}

#[test]
fn the_peer_and_header_extractors_read_what_is_there() {
    let request = from_peer(Some([192, 0, 2, 77]), "x-api-key", &[b"k-1"]);
    assert_eq!(PeerIp::default().key_of(&request), ok("192.0.2.77"));
    assert_eq!(
        PeerIp::new(IpPrefix::new(24, 48)).key_of(&request),
        ok("192.0.2.0")
    );
    let api_key = HeaderKey::new(HeaderName::from_static("x-api-key"));
    assert_eq!(
        api_key.key_of(&request),
        Ok(Some(HeaderValue::from_static("k-1")))
    );
    assert_eq!(api_key.key_of(&from_peer(None, "x", &[])), Ok(None));
    // Another extension type, read through a function.
    #[derive(Clone)]
    struct Info(SocketAddr);
    let mut request = Request::new(());
    request
        .extensions_mut()
        .insert(Info(SocketAddr::from(([198, 51, 100, 1], 1))));
    let peer = PeerIp::from_extension(IpPrefix::default(), |info: &Info| info.0);
    assert_eq!(peer.key_of(&request), ok("198.51.100.1"));
    let behind_one = ForwardedIp::x_forwarded_for(1).with_peer(peer.clone());
    assert_eq!(behind_one.key_of(&request), ok("198.51.100.1"));
    let error = peer.key_of(&Request::new(())).unwrap_err();
    assert!(error.to_string().contains("Info"), "{error}");
}

/// Axum's `ConnectInfo`, read by the default extractors with the `axum` feature.
#[cfg(feature = "axum")]
#[test]
fn with_the_axum_feature_the_default_extractors_read_connect_info() {
    use axum::extract::ConnectInfo;
    let mut request = from_peer(None, "x-forwarded-for", &[b"6.6.6.6\xff, 203.0.113.7"]);
    request
        .extensions_mut()
        .insert(ConnectInfo(SocketAddr::from((PROXY, 1))));
    assert_eq!(PeerIp::default().key_of(&request), ok("10.0.0.5"));
    assert_eq!(
        PeerIp::connect_info(IpPrefix::default()).key_of(&request),
        ok("10.0.0.5")
    );
    assert_eq!(
        ForwardedIp::x_forwarded_for(1).key_of(&request),
        ok("203.0.113.7")
    );
}

/// Through the layer: a request without a key gets a `500` with the reason, and does not take a
/// token from anyone's bucket; the next client with an address is served.
#[tokio::test(start_paused = true)]
async fn the_layer_refuses_a_request_without_a_key_with_a_500_that_says_why() {
    let quota = Quota::new(Rate::per_second(1)).burst(1);
    let limiter = Arc::new(KeyedLimiter::new(
        quota,
        TokioClock::new(),
        100,
        WhenFull::Refuse,
    ));
    let layer = AnswerLayer::per_key(Arc::clone(&limiter), ForwardedIp::x_forwarded_for(1));
    let mut service = layer.layer(service_fn(|_: Request<String>| async {
        Ok::<_, Infallible>(Response::new(String::from("ok")))
    }));
    let without_peer = || {
        Request::builder()
            .header("x-forwarded-for", "203.0.113.7")
            .body(String::new())
            .unwrap()
    };
    for _ in 0..3 {
        let response = service
            .ready()
            .await
            .unwrap()
            .call(without_peer())
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert!(
            response.body().starts_with("no client address"),
            "{}",
            response.body()
        );
        assert!(response.headers().get("retry-after").is_none());
        assert!(response.headers().get("ratelimit").is_none());
    }
    assert_eq!(limiter.len(), 0, "no bucket for requests without a key");
    let mut with_peer = without_peer();
    with_peer
        .extensions_mut()
        .insert(SocketAddr::from((PROXY, 1)));
    let response = service
        .ready()
        .await
        .unwrap()
        .call(with_peer)
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
}

//! `AnswerLayer`'s settings: the policy's name, which headers, the status of an over-limit
//! answer and its body. Each row is a layer as configured and the answer it gives the sixth
//! request against a burst of five (refilling two a second, 100 ms later): exactly these headers
//! and no other rate-limit header.

use core::time::Duration;
use std::convert::Infallible;
use std::sync::Arc;

use http::{Request, Response, StatusCode};
use tollgate::{headers, KeyedLimiter, Quota, Rate, TokenBucket, TokioClock, WhenFull};
use tollgate_tower::extract::PeerIp;
use tollgate_tower::{AnswerLayer, HeaderStyle, Limit};
use tower::{service_fn, Layer, Service, ServiceExt};

/// Every rate-limit header a style may write.
const RATE_LIMIT_HEADERS: &[&str] = &[
    "retry-after",
    "ratelimit",
    "ratelimit-policy",
    "x-ratelimit-limit",
    "x-ratelimit-remaining",
    "x-ratelimit-reset",
    "ratelimit-limit",
    "ratelimit-remaining",
    "ratelimit-reset",
];

/// The answer to the request `layer` refuses: the sixth within 100 ms against a burst of five.
async fn refusal<L>(layer: AnswerLayer<L>) -> Response<String>
where
    L: Limit<Request<String>> + Send + Sync + 'static,
{
    let mut service = layer.layer(service_fn(|_: Request<String>| async {
        Ok::<_, Infallible>(Response::new(String::from("ok")))
    }));
    for _ in 0..5 {
        let response = service
            .ready()
            .await
            .unwrap()
            .call(Request::new(String::new()));
        assert_eq!(response.await.unwrap().status(), StatusCode::OK);
    }
    tokio::time::advance(Duration::from_millis(100)).await;
    let refused = service
        .ready()
        .await
        .unwrap()
        .call(Request::new(String::new()));
    refused.await.unwrap()
}

fn bucket() -> Arc<TokenBucket<TokioClock>> {
    let quota = Quota::new(Rate::per_second(2)).burst(5);
    Arc::new(TokenBucket::try_new(quota, TokioClock::new()).unwrap())
}

/// The rate-limit headers `response` carries, in [`RATE_LIMIT_HEADERS`]' order.
fn rate_limit_headers(response: &Response<String>) -> Vec<(&'static str, String)> {
    RATE_LIMIT_HEADERS
        .iter()
        .filter_map(|&name| {
            let value = response.headers().get(name)?;
            Some((name, value.to_str().unwrap().to_owned()))
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn each_setting_changes_its_part_of_the_answer_and_nothing_else() {
    type Configure =
        fn(AnswerLayer<TokenBucket<TokioClock>>) -> AnswerLayer<TokenBucket<TokioClock>>;
    /// (settings, status, rate-limit headers, content type, body)
    type Row<'a> = (Configure, u16, &'a [(&'a str, &'a str)], &'a str, &'a str);
    let rows: &[Row] = &[
        (
            |layer| layer,
            429,
            &[
                ("retry-after", "1"),
                ("ratelimit", "\"default\";r=0;t=3"),
                ("ratelimit-policy", "\"default\";q=5;w=3"),
            ],
            "text/plain; charset=utf-8",
            "rate limited: retry after 400 ms\n",
        ),
        (
            |layer| layer.policy_name("per-ip"),
            429,
            &[
                ("retry-after", "1"),
                ("ratelimit", "\"per-ip\";r=0;t=3"),
                ("ratelimit-policy", "\"per-ip\";q=5;w=3"),
            ],
            "text/plain; charset=utf-8",
            "rate limited: retry after 400 ms\n",
        ),
        (
            // Quotes and backslashes escaped, what is not printable ASCII left out.
            |layer| layer.policy_name("a\"b\\c\u{e9}\n"),
            429,
            &[
                ("retry-after", "1"),
                ("ratelimit", "\"a\\\"b\\\\c\";r=0;t=3"),
                ("ratelimit-policy", "\"a\\\"b\\\\c\";q=5;w=3"),
            ],
            "text/plain; charset=utf-8",
            "rate limited: retry after 400 ms\n",
        ),
        (
            |layer| layer.headers(HeaderStyle::XRateLimit),
            429,
            &[
                ("retry-after", "1"),
                ("x-ratelimit-limit", "5"),
                ("x-ratelimit-remaining", "0"),
                ("x-ratelimit-reset", "3"),
            ],
            "text/plain; charset=utf-8",
            "rate limited: retry after 400 ms\n",
        ),
        (
            |layer| layer.headers(HeaderStyle::Legacy).policy_name("unused"),
            429,
            &[
                ("retry-after", "1"),
                ("ratelimit-limit", "5"),
                ("ratelimit-remaining", "0"),
                ("ratelimit-reset", "3"),
            ],
            "text/plain; charset=utf-8",
            "rate limited: retry after 400 ms\n",
        ),
        (
            |layer| layer.headers(HeaderStyle::RetryAfter),
            429,
            &[("retry-after", "1")],
            "text/plain; charset=utf-8",
            "rate limited: retry after 400 ms\n",
        ),
        (
            |layer| layer.status(StatusCode::SERVICE_UNAVAILABLE),
            503,
            &[
                ("retry-after", "1"),
                ("ratelimit", "\"default\";r=0;t=3"),
                ("ratelimit-policy", "\"default\";q=5;w=3"),
            ],
            "text/plain; charset=utf-8",
            "rate limited: retry after 400 ms\n",
        ),
        (
            |layer| {
                layer.body(|refused| {
                    let ms = refused.retry_after().unwrap().as_millis();
                    format!("{{\"error\":\"rate_limited\",\"retry_after_ms\":{ms}}}")
                })
            },
            429,
            &[
                ("retry-after", "1"),
                ("ratelimit", "\"default\";r=0;t=3"),
                ("ratelimit-policy", "\"default\";q=5;w=3"),
            ],
            "application/json",
            "{\"error\":\"rate_limited\",\"retry_after_ms\":400}",
        ),
        (
            |layer| {
                layer
                    .policy_name("all")
                    .headers(HeaderStyle::RetryAfter)
                    .status(StatusCode::FORBIDDEN)
                    .body(|_| String::from("slow down"))
            },
            403,
            &[("retry-after", "1")],
            "text/plain; charset=utf-8",
            "slow down",
        ),
    ];
    for (i, (configure, status, expected, content_type, body)) in rows.iter().enumerate() {
        let response = refusal(configure(AnswerLayer::new(bucket()))).await;
        assert_eq!(response.status().as_u16(), *status, "row {i}");
        let expected: Vec<_> = expected
            .iter()
            .map(|&(name, value)| {
                let name = *RATE_LIMIT_HEADERS.iter().find(|&&n| n == name).unwrap();
                (name, value.to_owned())
            })
            .collect();
        let mut got = rate_limit_headers(&response);
        got.sort();
        let mut expected = expected;
        expected.sort();
        assert_eq!(got, expected, "row {i}");
        assert_eq!(response.headers()["content-type"], *content_type, "row {i}");
        assert_eq!(response.body(), body, "row {i}");
    }
}

/// What a client library reads back from each style: the draft's policy with its name, the
/// legacy limit with the window the client knows.
#[tokio::test(start_paused = true)]
async fn the_headers_each_style_writes_read_back_as_the_quota() {
    let named = refusal(AnswerLayer::new(bucket()).policy_name("per-ip")).await;
    let policy = named.headers()["ratelimit-policy"].to_str().unwrap();
    let policy = headers::policies(policy).next().unwrap().unwrap();
    assert_eq!(
        (policy.name(), policy.limit(), policy.window_secs()),
        ("per-ip", 5, 3)
    );
    let legacy = refusal(AnswerLayer::new(bucket()).headers(HeaderStyle::Legacy)).await;
    let limit = legacy.headers()["ratelimit-limit"].to_str().unwrap();
    let policy = headers::legacy_policy_with_window(limit, 3).unwrap();
    assert_eq!((policy.limit(), policy.window_secs()), (5, 3));
}

/// The status setting is for a client over its limit; the answers that mean something else
/// keep theirs: 503 for a new client without room, 500 for a request without a key.
#[tokio::test(start_paused = true)]
async fn the_other_refusals_keep_their_status_and_a_keyless_one_has_no_rate_limit_headers() {
    let quota = Quota::new(Rate::per_second(1)).burst(1);
    let limiter = Arc::new(KeyedLimiter::new(
        quota,
        TokioClock::new(),
        1,
        WhenFull::Refuse,
    ));
    let layer = AnswerLayer::per_key(limiter, PeerIp::default())
        .status(StatusCode::FORBIDDEN)
        .headers(HeaderStyle::XRateLimit);
    let mut service = layer.layer(service_fn(|_: Request<String>| async {
        Ok::<_, Infallible>(Response::new(String::from("ok")))
    }));
    let from = |last: u8| {
        let mut request = Request::new(String::new());
        request
            .extensions_mut()
            .insert(std::net::SocketAddr::from(([192, 0, 2, last], 1)));
        request
    };
    // (request, status, has rate-limit headers)
    let rows = [
        (from(1), 200, false),
        (from(1), 403, true), // over its limit: the status set
        (from(2), 503, true), // no room for a new client
        (Request::new(String::new()), 500, false), // no key
    ];
    for (i, (request, status, limited)) in rows.into_iter().enumerate() {
        let response = service.ready().await.unwrap().call(request).await.unwrap();
        assert_eq!(response.status().as_u16(), status, "row {i}");
        assert_eq!(
            !rate_limit_headers(&response).is_empty(),
            limited,
            "row {i}"
        );
    }
}

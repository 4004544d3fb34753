//! `AnswerLayer`'s settings: the policy's name, which headers, the status of an over-limit
//! answer and its body. Each row is a layer as configured and the answer it gives the sixth
//! request against a burst of five (refilling two a second, 100 ms later): exactly these headers
//! and no other rate-limit header. Then the headers of an answer that let the request through:
//! each style counting down, the setting that turns them off, the limits that add none, and a
//! route's own limit inside the layer's.

use core::time::Duration;
use std::convert::Infallible;
use std::sync::Arc;

use http::{Request, Response, StatusCode};
use tollgate::{headers, KeyedLimiter, Quota, Rate, TokenBucket, TokioClock, WhenFull};
use tollgate_tower::extract::PeerIp;
use tollgate_tower::{AnswerLayer, DryRun, HeaderStyle, Limit, RateLimited};
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

/// The inner service: `200 ok`.
async fn ok(_: Request<String>) -> Result<Response<String>, Infallible> {
    Ok(Response::new(String::from("ok")))
}

/// The answer to the request `layer` refuses: the sixth within 100 ms against a burst of five.
async fn refusal<L>(layer: AnswerLayer<L>) -> Response<String>
where
    L: Limit<Request<String>> + Send + Sync + 'static,
{
    let mut service = layer.layer(service_fn(ok));
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
    bucket_of(Quota::new(Rate::per_second(2)).burst(5))
}

fn bucket_of(quota: Quota) -> Arc<TokenBucket<TokioClock>> {
    Arc::new(TokenBucket::try_new(quota, TokioClock::new()).unwrap())
}

/// The rate-limit headers `response` carries, every line of each, in [`RATE_LIMIT_HEADERS`]'
/// order.
fn rate_limit_headers(response: &Response<String>) -> Vec<(&'static str, String)> {
    RATE_LIMIT_HEADERS
        .iter()
        .flat_map(|&name| {
            let values = response.headers().get_all(name).iter();
            values.map(move |value| (name, value.to_str().unwrap().to_owned()))
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
    let mut service = layer.layer(service_fn(ok));
    let from = |last: u8| {
        let mut request = Request::new(String::new());
        request
            .extensions_mut()
            .insert(std::net::SocketAddr::from(([192, 0, 2, last], 1)));
        request
    };
    // (request, status, has rate-limit headers)
    let rows = [
        (from(1), 200, true),                      // let through: the tokens it has left
        (from(1), 403, true),                      // over its limit: the status set
        (from(2), 503, true),                      // no room for a new client
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

/// Three at once, then one a minute: `r` and `t` stay exact between calls.
const SLOW: Quota = Quota::new(Rate::new(1, Duration::from_secs(60))).burst(3);

/// The answers `layer` gives `n` requests in a row.
async fn answers<L>(layer: AnswerLayer<L>, n: usize) -> Vec<Response<String>>
where
    L: Limit<Request<String>> + Send + Sync + 'static,
{
    let mut service = layer.layer(service_fn(ok));
    let mut answers = Vec::new();
    for _ in 0..n {
        let answer = service.ready().await.unwrap().call(Request::default());
        answers.push(answer.await.unwrap());
    }
    answers
}

#[tokio::test(start_paused = true)]
async fn each_style_counts_down_on_allowed_answers_and_the_setting_turns_them_off() {
    type Configure =
        fn(AnswerLayer<TokenBucket<TokioClock>>) -> AnswerLayer<TokenBucket<TokioClock>>;
    // (settings, the second answer's rate-limit headers: 3 tokens, 1 a minute)
    let rows: &[(Configure, &[(&str, &str)])] = &[
        (
            |layer| layer,
            &[
                ("ratelimit", "\"default\";r=1;t=120"),
                ("ratelimit-policy", "\"default\";q=3;w=180"),
            ],
        ),
        (
            |layer| layer.policy_name("api"),
            &[
                ("ratelimit", "\"api\";r=1;t=120"),
                ("ratelimit-policy", "\"api\";q=3;w=180"),
            ],
        ),
        (
            |layer| layer.headers(HeaderStyle::XRateLimit),
            &[
                ("x-ratelimit-limit", "3"),
                ("x-ratelimit-remaining", "1"),
                ("x-ratelimit-reset", "120"),
            ],
        ),
        (
            |layer| layer.headers(HeaderStyle::Legacy),
            &[
                ("ratelimit-limit", "3"),
                ("ratelimit-remaining", "1"),
                ("ratelimit-reset", "120"),
            ],
        ),
        // Retry-After alone has nothing to say of a request let through.
        (|layer| layer.headers(HeaderStyle::RetryAfter), &[]),
        (|layer| layer.headers_on_allowed(false), &[]),
        (
            |layer| layer.headers_on_allowed(false).headers_on_allowed(true),
            &[
                ("ratelimit", "\"default\";r=1;t=120"),
                ("ratelimit-policy", "\"default\";q=3;w=180"),
            ],
        ),
    ];
    for (i, (configure, want)) in rows.iter().enumerate() {
        let answers = answers(configure(AnswerLayer::new(bucket_of(SLOW))), 3).await;
        assert!(answers.iter().all(|a| a.status() == StatusCode::OK));
        let want: Vec<_> = want.iter().map(|&(n, v)| (n, v.to_owned())).collect();
        assert_eq!(rate_limit_headers(&answers[1]), want, "row {i}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_dry_run_an_unlimited_bucket_and_a_limit_of_ones_own_add_nothing() {
    // A limit on trial changes nothing a client sees.
    let shadow = Arc::new(DryRun::new(
        TokenBucket::try_new(SLOW, TokioClock::new()).unwrap(),
    ));
    struct Always;
    impl<Req> Limit<Req> for Always {
        fn check(&self, _: &Req) -> Result<(), RateLimited> {
            Ok(())
        }
    }
    let answers = [
        answers(AnswerLayer::new(shadow), 4).await,
        answers(AnswerLayer::new(bucket_of(Quota::unlimited())), 4).await,
        answers(
            AnswerLayer::new(bucket_of(Quota::unlimited())).headers(HeaderStyle::XRateLimit),
            4,
        )
        .await,
        answers(AnswerLayer::new(Arc::new(Always)), 4).await,
    ];
    for (i, answers) in answers.iter().enumerate() {
        for answer in answers {
            assert_eq!(answer.status(), StatusCode::OK);
            assert_eq!(rate_limit_headers(answer), [], "limit {i}");
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_routes_own_limit_inside_the_layers_keeps_its_fields_beside_them() {
    // The route's limit (burst 2, one token a minute) inside the site's (burst 3).
    let route = AnswerLayer::new(bucket_of(
        Quota::new(Rate::new(1, Duration::from_secs(60))).burst(2),
    ))
    .policy_name("route");
    // (style, the answer's rate-limit headers)
    let rows: [(HeaderStyle, &[(&str, &str)]); 2] = [
        // The draft's fields are lists: both policies, the route's first.
        (
            HeaderStyle::Draft,
            &[
                ("ratelimit", "\"route\";r=1;t=60"),
                ("ratelimit", "\"default\";r=2;t=60"),
                ("ratelimit-policy", "\"route\";q=2;w=120"),
                ("ratelimit-policy", "\"default\";q=3;w=180"),
            ],
        ),
        // A count style has one value per name: the route's, nearer the handler, stays.
        (
            HeaderStyle::XRateLimit,
            &[
                ("x-ratelimit-limit", "2"),
                ("x-ratelimit-remaining", "0"),
                ("x-ratelimit-reset", "120"),
            ],
        ),
    ];
    for (i, (style, want)) in rows.into_iter().enumerate() {
        let inner = route.clone().headers(style).layer(service_fn(ok));
        let site = AnswerLayer::new(bucket_of(SLOW)).headers(style);
        let mut service = site.layer(inner);
        let answer = service.ready().await.unwrap().call(Request::default());
        let want: Vec<_> = want.iter().map(|&(n, v)| (n, v.to_owned())).collect();
        assert_eq!(rate_limit_headers(&answer.await.unwrap()), want, "row {i}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_newcomer_let_through_on_the_shared_overflow_bucket_gets_no_level_of_its_own() {
    // Room for one client; newcomers beyond it share the overflow bucket.
    let limiter = Arc::new(KeyedLimiter::new(
        SLOW,
        TokioClock::new(),
        1,
        WhenFull::Admit,
    ));
    let key = |request: &Request<String>| request.uri().path().to_owned();
    let mut service = AnswerLayer::per_key(limiter, key).layer(service_fn(ok));
    // (client, status, RateLimit)
    let rows = [
        ("/a", 200, Some("\"default\";r=2;t=60")),
        // Its own bucket would read full ("r=3;t=0"), which is not what let it through.
        ("/b", 200, None),
        ("/a", 200, Some("\"default\";r=1;t=120")),
    ];
    for (i, (path, status, rate_limit)) in rows.into_iter().enumerate() {
        let request = Request::get(path).body(String::new()).unwrap();
        let answer = service.ready().await.unwrap().call(request).await.unwrap();
        let got = answer
            .headers()
            .get("ratelimit")
            .map(|v| v.to_str().unwrap());
        assert_eq!(
            (answer.status().as_u16(), got),
            (status, rate_limit),
            "row {i}"
        );
    }
}

//! Every error message says which input is wrong and why: one row per input a user may get
//! wrong, with the message it reads, word for word, and no two inputs sharing one message.

use std::time::Duration;

use tollgate::headers::{self, HeaderError};
use tollgate::{ConfigError, Quota, Rate};

fn config_error(quota: Quota) -> ConfigError {
    quota.validate().unwrap_err()
}

#[test]
fn each_input_a_rate_refuses_has_its_own_message() {
    let minute = Duration::from_secs(60);
    // (what was written, error, message)
    let rows: &[(&str, ConfigError, &str)] = &[
        (
            "Rate::new(1, Duration::MAX)",
            config_error(Quota::new(Rate::new(1, Duration::MAX))),
            "rate period exceeds 584 years (u64::MAX nanoseconds); give the rate over a shorter period",
        ),
        (
            "minus_percent(101)",
            config_error(Quota::new(Rate::per_second(1).minus_percent(101))),
            "minus_percent removes more than 100 % of the rate, leaving less than nothing (minus_percent(101))",
        ),
        (
            "Quota::within(10, minute).minus_percent(150)",
            config_error(Quota::within(10, minute).minus_percent(150)),
            "minus_percent removes more than 100 % of the rate, leaving less than nothing (minus_percent(150))",
        ),
        (
            "divided_by(0)",
            config_error(Quota::new(Rate::per_second(1).divided_by(0))),
            "divided_by(0): a rate cannot be shared among zero parts",
        ),
        (
            "Quota::within(10, minute).divided_by(0)",
            config_error(Quota::within(10, minute).divided_by(0)),
            "divided_by(0): a rate cannot be shared among zero parts",
        ),
        (
            "divided_by(u64::MAX) twice",
            config_error(Quota::new(
                Rate::per_second(1).divided_by(u64::MAX).divided_by(u64::MAX),
            )),
            "rate out of range: a sizing helper's exact result does not fit 64-bit tokens per nanoseconds; divide less finely or count tokens in coarser units",
        ),
        (
            // The first cause is the one reported.
            "divided_by(0).minus_percent(101)",
            config_error(Quota::new(Rate::per_second(1).divided_by(0).minus_percent(101))),
            "divided_by(0): a rate cannot be shared among zero parts",
        ),
        (
            "Rate::per_second(0)",
            config_error(Quota::new(Rate::per_second(0))),
            "rate is zero",
        ),
        (
            "Rate::new(1, Duration::ZERO)",
            config_error(Quota::new(Rate::new(1, Duration::ZERO))),
            "rate period is zero",
        ),
        (
            "burst(0)",
            config_error(Quota::new(Rate::per_second(1)).burst(0)),
            "burst is zero",
        ),
        (
            "burst(2).start_with(3)",
            config_error(Quota::new(Rate::per_second(1)).burst(2).start_with(3)),
            "start fill is above the burst (3 > 2)",
        ),
    ];
    for (input, error, message) in rows {
        assert_eq!(error.to_string(), *message, "{input}");
    }
    // The rate itself says so too, when printed.
    assert_eq!(
        Rate::per_second(1).divided_by(0).to_string(),
        "divided_by(0): a rate cannot be shared among zero parts"
    );
    let errors: Vec<_> = rows
        .iter()
        .map(|&(input, error, _)| (input, error, error.to_string()))
        .collect();
    assert_distinct(&errors);
}

#[test]
fn each_header_a_client_cannot_read_says_what_it_is() {
    // (input, error, message)
    let rows: &[(&str, Result<Duration, HeaderError>, &str)] = &[
        (
            "Retry-After: 1.5",
            headers::retry_after("1.5", 0),
            "fractional delay: `Retry-After` is whole seconds (`2`, not `1.5`), or an HTTP date",
        ),
        (
            "Retry-After: -1",
            headers::retry_after("-1", 0),
            "negative delay: `Retry-After` is whole seconds from 0 up, or an HTTP date",
        ),
        (
            "Retry-After: +3",
            headers::retry_after("+3", 0),
            "expected a non-negative integer",
        ),
        (
            "Retry-After: soon",
            headers::retry_after("soon", 0),
            "not an IMF-fixdate such as `Sun, 06 Nov 1994 08:49:37 GMT` from 1970 on",
        ),
        (
            "Retry-After: (empty)",
            headers::retry_after(" ", 0),
            "empty header field or list member",
        ),
    ];
    for (input, got, message) in rows {
        assert_eq!(got.unwrap_err().to_string(), *message, "{input}");
    }
    let errors: Vec<_> = rows
        .iter()
        .map(|(input, got, _)| (*input, got.unwrap_err(), got.unwrap_err().to_string()))
        .collect();
    assert_distinct(&errors);
    let bare = headers::legacy_policy("100").unwrap_err();
    assert_eq!(
        bare.to_string(),
        "`RateLimit-Limit` gives a limit without a window (`w`); read it with \
         `legacy_policy_with_window` and the window you know"
    );
    let policy = headers::legacy_policy_with_window("100", 60).unwrap();
    assert_eq!((policy.limit(), policy.window_secs()), (100, 60));
}

/// Two errors read the same only when they are the same error: no message stands for two
/// mistakes.
fn assert_distinct<E: PartialEq + std::fmt::Debug>(errors: &[(&str, E, String)]) {
    for (input, error, message) in errors {
        for (other_input, other, other_message) in errors {
            assert_eq!(
                error == other,
                message == other_message,
                "{input} ({error:?}) and {other_input} ({other:?}): {message:?}, {other_message:?}"
            );
        }
    }
}

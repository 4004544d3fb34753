//! Reading upstream rate-limit headers: tables of (field value, expected) rows, malformed input
//! included.

use std::time::Duration;

use tollgate::headers::{self, HeaderError};
use tollgate::{Quota, Rate};

/// Sun, 06 Nov 1994 08:49:37 GMT
const RFC_EXAMPLE: u64 = 784_111_777;

#[test]
fn retry_after_in_seconds_or_as_a_date() {
    let now = RFC_EXAMPLE - 90;
    let rows: &[(&str, Result<Duration, HeaderError>)] = &[
        ("0", Ok(Duration::ZERO)),
        ("120", Ok(Duration::from_secs(120))),
        (" \t7 ", Ok(Duration::from_secs(7))),
        ("18446744073709551615", Ok(Duration::from_secs(u64::MAX))),
        ("18446744073709551616", Err(HeaderError::Overflow)),
        ("000000000000000000001", Err(HeaderError::Overflow)),
        ("Sun, 06 Nov 1994 08:49:37 GMT", Ok(Duration::from_secs(90))),
        ("Sun, 06 Nov 1994 08:48:07 GMT", Ok(Duration::ZERO)),
        ("Sun, 06 Nov 1994 08:00:00 GMT", Ok(Duration::ZERO)), // past: retry now
        ("", Err(HeaderError::Empty)),
        ("  ", Err(HeaderError::Empty)),
        ("-1", Err(HeaderError::NegativeDelay)),
        ("-0.5", Err(HeaderError::NegativeDelay)),
        ("1.5", Err(HeaderError::FractionalDelay)),
        (".5", Err(HeaderError::FractionalDelay)),
        ("2.", Err(HeaderError::FractionalDelay)),
        ("+3", Err(HeaderError::NotANumber)),
        ("-", Err(HeaderError::BadDate)),
        ("1e3", Err(HeaderError::BadDate)),
        ("soon", Err(HeaderError::BadDate)),
        // The obsolete forms are refused, not misread.
        ("Sunday, 06-Nov-94 08:49:37 GMT", Err(HeaderError::BadDate)),
        ("Sun Nov  6 08:49:37 1994", Err(HeaderError::BadDate)),
        ("Mon, 06 Nov 1994 08:49:37 GMT", Err(HeaderError::BadDate)), // wrong weekday
        ("Sun, 06 Nov 1994 08:49:37 UTC", Err(HeaderError::BadDate)),
        ("Sun, 31 Nov 1994 08:49:37 GMT", Err(HeaderError::BadDate)),
        ("Sun, 06 Nov 1994 24:00:00 GMT", Err(HeaderError::BadDate)),
        ("Sun, 06 Foo 1994 08:49:37 GMT", Err(HeaderError::BadDate)),
        ("Sun, 0x Nov 1994 08:49:37 GMT", Err(HeaderError::BadDate)),
        ("Sun, 06 Nov 1994 08:49:37 GMTX", Err(HeaderError::BadDate)),
        ("Wed, 31 Dec 1969 23:59:59 GMT", Err(HeaderError::BadDate)),
        (
            "Sun, 06 Nov 1994 08:49:37 GM\u{e9}",
            Err(HeaderError::BadDate),
        ),
    ];
    for (value, expected) in rows {
        assert_eq!(headers::retry_after(value, now), *expected, "{value:?}");
    }
}

#[test]
fn http_dates_across_the_calendar() {
    let rows = [
        ("Thu, 01 Jan 1970 00:00:00 GMT", 0),
        ("Sun, 06 Nov 1994 08:49:37 GMT", RFC_EXAMPLE),
        ("Tue, 29 Feb 2000 12:00:00 GMT", 951_825_600),
        ("Mon, 30 Nov 2026 13:00:00 GMT", 1_796_043_600),
        ("Fri, 31 Dec 9999 23:59:59 GMT", 253_402_300_799),
    ];
    for (value, secs) in rows {
        assert_eq!(headers::http_date(value), Ok(secs), "{value}");
    }
    assert_eq!(
        headers::http_date("Thu, 29 Feb 2001 12:00:00 GMT"),
        Err(HeaderError::BadDate)
    );
}

#[test]
fn policies_in_the_structured_field_form() {
    type Row<'a> = (&'a str, &'a [Result<(&'a str, u64, u64), HeaderError>]);
    let rows: &[Row] = &[
        (r#""default";q=100;w=60"#, &[Ok(("default", 100, 60))]),
        (
            r#""burst";q=100;w=60, "daily";q=1000;w=86400;qu="requests""#,
            &[Ok(("burst", 100, 60)), Ok(("daily", 1000, 86_400))],
        ),
        (r#"  day; q=5;  w=1 "#, &[Ok(("day", 5, 1))]),
        (r#"day ;q=5;w=1"#, &[Err(HeaderError::Syntax)]), // no space before a parameter
        (r#"p;pk=:AAE=:;q=9;w=3;flag"#, &[Ok(("p", 9, 3))]),
        (r#""a\"b";q=1;w=1"#, &[Ok((r#"a\"b"#, 1, 1))]),
        (r#""default";w=60"#, &[Err(HeaderError::MissingLimit)]),
        (r#""default";q=100"#, &[Err(HeaderError::MissingWindow)]),
        (r#""default";q=0;w=60"#, &[Err(HeaderError::Zero)]),
        (r#""default";q=-1;w=60"#, &[Err(HeaderError::NotANumber)]),
        (r#""default";q=1.5;w=60"#, &[Err(HeaderError::NotANumber)]),
        (
            r#""default";q=9;w=60;x=1.5;y=?0"#,
            &[Ok(("default", 9, 60))],
        ),
        (r#""default";q=9;w=60;x=1."#, &[Err(HeaderError::Syntax)]),
        (r#""default";q=9;w=60;x=:AA"#, &[Err(HeaderError::Syntax)]),
        (r#""default";q="100";w=60"#, &[Err(HeaderError::NotANumber)]),
        (
            r#""default";q=1000000000000000;w=60"#,
            &[Err(HeaderError::Overflow)],
        ),
        (r#""default;q=100;w=60"#, &[Err(HeaderError::Syntax)]),
        (r#""default";Q=100"#, &[Err(HeaderError::Syntax)]),
        (r#""default" q=100"#, &[Err(HeaderError::Syntax)]),
        (r#""a";q=1;w=1,"#, &[Err(HeaderError::Empty)]),
        (
            r#""a";q=1;w=1,,"b""#,
            &[Ok(("a", 1, 1)), Err(HeaderError::Syntax)],
        ),
        // An error stops the list: what follows cannot be split reliably.
        (r#"@;q=1;w=1, "b";q=1;w=1"#, &[Err(HeaderError::Syntax)]),
        ("", &[]),
    ];
    for (value, expected) in rows {
        let got: Vec<_> = headers::policies(value)
            .map(|p| p.map(|p| (p.name(), p.limit(), p.window_secs())))
            .collect();
        assert_eq!(got, *expected, "{value:?}");
    }
}

#[test]
fn a_policy_becomes_a_quota() {
    let policy = headers::policies(r#""default";q=100;w=60"#)
        .next()
        .unwrap()
        .unwrap();
    assert_eq!(
        policy.quota(10),
        Quota::new(Rate::new(100, Duration::from_secs(60))).burst(10)
    );
}

#[test]
fn remaining_in_the_structured_field_form_and_the_pause_it_asks_for() {
    type Row<'a> = (
        &'a str,
        Result<(u64, Option<u64>, Option<Duration>), HeaderError>,
    );
    let rows: &[Row] = &[
        (r#""default";r=50;t=30"#, Ok((50, Some(30), None))),
        (
            r#""default";r=0;t=30"#,
            Ok((0, Some(30), Some(Duration::from_secs(30)))),
        ),
        (r#""default";r=0"#, Ok((0, None, None))),
        (r#""default";t=30"#, Err(HeaderError::MissingRemaining)),
        (r#""default";r=x"#, Err(HeaderError::NotANumber)),
        (r#""default";r="#, Err(HeaderError::Empty)),
    ];
    for (value, expected) in rows {
        let got = headers::remaining(value)
            .next()
            .unwrap()
            .map(|r| (r.remaining(), r.reset_secs(), r.pause()));
        assert_eq!(got, *expected, "{value:?}");
    }
}

#[test]
fn the_older_separate_fields() {
    type LimitRow<'a> = (&'a str, Result<(u64, u64), HeaderError>);
    let rows: &[LimitRow] = &[
        ("100;w=60", Ok((100, 60))),
        ("100, 100;w=60, 1000;w=3600", Ok((100, 60))),
        ("100", Err(HeaderError::LegacyWithoutWindow)),
        ("100, 200", Err(HeaderError::LegacyWithoutWindow)),
        ("0;w=60", Err(HeaderError::Zero)),
        ("abc;w=60", Err(HeaderError::NotANumber)),
        ("100;w=", Err(HeaderError::Empty)),
        ("", Err(HeaderError::Empty)),
    ];
    for (value, expected) in rows {
        let got = headers::legacy_policy(value).map(|p| (p.limit(), p.window_secs()));
        assert_eq!(got, *expected, "{value:?}");
    }
    // With the window the caller knows: the field's own window first.
    type KnownRow<'a> = (&'a str, u64, Result<(u64, u64), HeaderError>);
    let rows: &[KnownRow] = &[
        ("100", 60, Ok((100, 60))),
        (" 100 ", 1, Ok((100, 1))),
        ("100, 200", 60, Ok((100, 60))),
        ("100, 100;w=3600", 60, Ok((100, 3600))),
        ("100", 0, Err(HeaderError::Zero)),
        ("0", 60, Err(HeaderError::Zero)),
        ("abc", 60, Err(HeaderError::NotANumber)),
        ("", 60, Err(HeaderError::Empty)),
        ("100;w=", 60, Err(HeaderError::Empty)),
    ];
    for (value, window, expected) in rows {
        let got = headers::legacy_policy_with_window(value, *window)
            .map(|p| (p.limit(), p.window_secs()));
        assert_eq!(got, *expected, "{value:?} {window}");
    }
    type StateRow<'a> = (&'a str, &'a str, Result<Option<Duration>, HeaderError>);
    let rows: &[StateRow] = &[
        ("0", "12", Ok(Some(Duration::from_secs(12)))),
        ("3", "12", Ok(None)),
        (" 0 ", " 1 ", Ok(Some(Duration::from_secs(1)))),
        ("", "12", Err(HeaderError::Empty)),
        ("-1", "12", Err(HeaderError::NotANumber)),
        ("0", "1e3", Err(HeaderError::NotANumber)),
        ("0", "99999999999999999999", Err(HeaderError::Overflow)),
    ];
    for (remaining, reset, expected) in rows {
        let got = headers::legacy_remaining(remaining, reset).map(|r| r.pause());
        assert_eq!(got, *expected, "{remaining:?} {reset:?}");
    }
}

#[test]
fn no_input_panics() {
    // Every prefix and every single-byte change of some valid fields: errors, never panics.
    let seeds = [
        r#""default";q=100;w=60, "day";q=1000;w=86400"#,
        r#""default";r=0;t=30"#,
        "Sun, 06 Nov 1994 08:49:37 GMT",
        "100, 100;w=60",
    ];
    let alphabet = b" \t\",;=?*:-.0129aqwrtGMT\\\xff";
    for seed in seeds {
        for cut in 0..=seed.len() {
            let mut bytes = seed.as_bytes().to_vec();
            bytes.truncate(cut);
            for at in 0..bytes.len().max(1) {
                for &b in alphabet {
                    let mut changed = bytes.clone();
                    if at < changed.len() {
                        changed[at] = b;
                    } else {
                        changed.push(b);
                    }
                    let Ok(text) = std::str::from_utf8(&changed) else {
                        continue;
                    };
                    let _ = headers::retry_after(text, 0);
                    let _ = headers::policies(text).count();
                    let _ = headers::remaining(text).count();
                    let _ = headers::legacy_policy(text);
                    let _ = headers::legacy_policy_with_window(text, 60);
                    let _ = headers::legacy_remaining(text, text);
                }
            }
        }
    }
}

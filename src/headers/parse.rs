//! Reading an upstream's headers: `Retry-After`, HTTP dates, the IETF `RateLimit-Policy` /
//! `RateLimit` fields and the older `RateLimit-Limit`, `-Remaining`, `-Reset` fields.

use core::fmt;
use core::time::Duration;

use crate::{Quota, Rate};

/// Why a header could not be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum HeaderError {
    /// The field is empty, or a list member is.
    Empty,
    /// A number was expected: digits only, no sign, no fraction.
    NotANumber,
    /// A number too large to hold (more than 15 digits where a structured field allows 15, or
    /// beyond `u64`).
    Overflow,
    /// An HTTP date that is not a valid IMF-fixdate such as `Sun, 06 Nov 1994 08:49:37 GMT`
    /// (the obsolete RFC 850 and asctime forms are not read), or is before 1970.
    BadDate,
    /// A structured field that does not parse: a bad string, token, parameter or separator.
    Syntax,
    /// A policy without its `q` (quota) parameter.
    MissingLimit,
    /// A policy without its `w` (window) parameter.
    MissingWindow,
    /// A state without its `r` (remaining) parameter.
    MissingRemaining,
    /// A policy whose quota or window is zero: it could grant nothing.
    Zero,
    /// A `Retry-After` delay below zero, such as `-1`: delta-seconds count from zero up.
    NegativeDelay,
    /// A `Retry-After` delay with a fraction, such as `1.5`: delta-seconds are whole seconds.
    FractionalDelay,
    /// A `RateLimit-Limit` that gives a limit and no window (`100`, no `w` parameter): read it
    /// with [`legacy_policy_with_window`] and the window the caller knows.
    LegacyWithoutWindow,
}

impl fmt::Display for HeaderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            HeaderError::Empty => "empty header field or list member",
            HeaderError::NotANumber => "expected a non-negative integer",
            HeaderError::Overflow => "integer too large",
            HeaderError::BadDate => {
                "not an IMF-fixdate such as `Sun, 06 Nov 1994 08:49:37 GMT` from 1970 on"
            }
            HeaderError::Syntax => "malformed structured field",
            HeaderError::MissingLimit => "rate-limit policy without its `q` parameter",
            HeaderError::MissingWindow => "rate-limit policy without its `w` parameter",
            HeaderError::MissingRemaining => "rate-limit state without its `r` parameter",
            HeaderError::Zero => "rate-limit policy with a zero quota or window",
            HeaderError::NegativeDelay => {
                "negative delay: `Retry-After` is whole seconds from 0 up, or an HTTP date"
            }
            HeaderError::FractionalDelay => {
                "fractional delay: `Retry-After` is whole seconds (`2`, not `1.5`), or an HTTP date"
            }
            HeaderError::LegacyWithoutWindow => {
                "`RateLimit-Limit` gives a limit without a window (`w`); read it with \
                 `legacy_policy_with_window` and the window you know"
            }
        })
    }
}

impl core::error::Error for HeaderError {}

/// The pause a `Retry-After` value asks for: delta-seconds, or an IMF-fixdate HTTP date read
/// against `now_unix_secs` (a date already past is a zero pause). Pass it to
/// [`TokenBucket::pause_for`](crate::TokenBucket::pause_for).
pub fn retry_after(value: &str, now_unix_secs: u64) -> Result<Duration, HeaderError> {
    let value = trim_ows(value);
    if value.is_empty() {
        return Err(HeaderError::Empty);
    }
    if value.bytes().all(|b| b.is_ascii_digit()) {
        return decimal(value, 20).map(Duration::from_secs);
    }
    if let Some(error) = not_delta_seconds(value) {
        return Err(error);
    }
    let at = http_date(value)?;
    Ok(Duration::from_secs(at.saturating_sub(now_unix_secs)))
}

/// Why a number that is not delta-seconds is not (`-1`, `1.5`, `+3`); `None` when the value is
/// no number at all, and so read as a date.
fn not_delta_seconds(value: &str) -> Option<HeaderError> {
    let unsigned = value.trim_start_matches(['-', '+']);
    let numeric = unsigned.bytes().any(|b| b.is_ascii_digit())
        && unsigned.bytes().all(|b| b.is_ascii_digit() || b == b'.');
    if !numeric {
        return None;
    }
    Some(if value.starts_with('-') {
        HeaderError::NegativeDelay
    } else if unsigned.contains('.') {
        HeaderError::FractionalDelay
    } else {
        HeaderError::NotANumber
    })
}

/// An IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`) in Unix seconds. The weekday must match
/// the date.
pub fn http_date(value: &str) -> Result<u64, HeaderError> {
    let b = value.as_bytes();
    if b.len() != 29
        || &b[3..5] != b", "
        || b[7] != b' '
        || b[11] != b' '
        || b[16] != b' '
        || b[19] != b':'
        || b[22] != b':'
        || &b[25..] != b" GMT"
    {
        return Err(HeaderError::BadDate);
    }
    let field = |range: core::ops::Range<usize>| {
        value
            .get(range)
            .filter(|s| s.bytes().all(|c| c.is_ascii_digit()))
            .and_then(|s| decimal(s, 4).ok())
            .ok_or(HeaderError::BadDate)
    };
    let (day, year) = (field(5..7)?, field(12..16)?);
    let (hour, minute, second) = (field(17..19)?, field(20..22)?, field(23..25)?);
    const MONTHS: [&[u8]; 12] = [
        b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov",
        b"Dec",
    ];
    let month = MONTHS
        .iter()
        .position(|&m| m == &b[8..11])
        .ok_or(HeaderError::BadDate)? as u64
        + 1;
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let month_days = [
        31,
        if leap { 29 } else { 28 },
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    // 60 seconds for a leap second: it reads as the next minute's first.
    if year < 1970
        || day == 0
        || day > month_days[month as usize - 1]
        || hour > 23
        || minute > 59
        || second > 60
    {
        return Err(HeaderError::BadDate);
    }
    let days = days_from_civil(year, month, day);
    const WEEKDAYS: [&[u8]; 7] = [b"Thu", b"Fri", b"Sat", b"Sun", b"Mon", b"Tue", b"Wed"];
    if WEEKDAYS[(days % 7) as usize] != &b[..3] {
        return Err(HeaderError::BadDate);
    }
    Ok(days * 86_400 + hour * 3_600 + minute * 60 + second)
}

/// Days from 1970-01-01 to a date from 1970 on (Hinnant's `days_from_civil`).
fn days_from_civil(year: u64, month: u64, day: u64) -> u64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y / 400;
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// One policy of a `RateLimit-Policy` field: `limit` units per `window_secs` seconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Policy<'a> {
    name: &'a str,
    limit: u64,
    window_secs: u64,
}

impl<'a> Policy<'a> {
    /// The policy's name as the field spells it (a string's escapes are left as they are); empty
    /// in the older `RateLimit-Limit` form.
    pub fn name(&self) -> &'a str {
        self.name
    }

    /// The quota units the window allows (`q`).
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// The window in seconds (`w`).
    pub fn window_secs(&self) -> u64 {
        self.window_secs
    }

    /// The policy's rate: `limit` per window.
    pub fn rate(&self) -> Rate {
        Rate::new(self.limit, Duration::from_secs(self.window_secs))
    }

    /// A quota at the policy's rate, holding `burst` tokens. Over any span `T` a bucket grants
    /// at most `burst + limit × T / window`: a burst of the whole limit can let through up to
    /// twice the limit within one window, so against an upstream that counts fixed or sliding
    /// windows, keep the burst a small part of the limit.
    pub fn quota(&self, burst: u64) -> Quota {
        Quota::new(self.rate()).burst(burst)
    }
}

/// The upstream's account of a policy from a `RateLimit` field: `remaining` units left, the
/// window resetting in `reset_secs`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Remaining<'a> {
    name: &'a str,
    remaining: u64,
    reset_secs: Option<u64>,
}

impl<'a> Remaining<'a> {
    /// The policy's name, as in [`Policy::name`].
    pub fn name(&self) -> &'a str {
        self.name
    }

    /// The quota units left in the window (`r`).
    pub fn remaining(&self) -> u64 {
        self.remaining
    }

    /// Seconds until the window resets (`t`), when given.
    pub fn reset_secs(&self) -> Option<u64> {
        self.reset_secs
    }

    /// The pause to take: until the reset when nothing remains, else none.
    pub fn pause(&self) -> Option<Duration> {
        match (self.remaining, self.reset_secs) {
            (0, Some(secs)) => Some(Duration::from_secs(secs)),
            _ => None,
        }
    }
}

/// The policies of a `RateLimit-Policy` field, in order, such as
/// `"default";q=100;w=60, "daily";q=1000;w=86400`. Each is a [`Policy`] or why it is not.
pub fn policies(value: &str) -> impl Iterator<Item = Result<Policy<'_>, HeaderError>> {
    Members::new(value).map(|member| {
        let member = member?;
        let limit = member.q.ok_or(HeaderError::MissingLimit)?;
        let window_secs = member.w.ok_or(HeaderError::MissingWindow)?;
        if limit == 0 || window_secs == 0 {
            return Err(HeaderError::Zero);
        }
        Ok(Policy {
            name: member.name,
            limit,
            window_secs,
        })
    })
}

/// The states of a `RateLimit` field, in order, such as `"default";r=50;t=30`.
pub fn remaining(value: &str) -> impl Iterator<Item = Result<Remaining<'_>, HeaderError>> {
    Members::new(value).map(|member| {
        let member = member?;
        Ok(Remaining {
            name: member.name,
            remaining: member.r.ok_or(HeaderError::MissingRemaining)?,
            reset_secs: member.t,
        })
    })
}

/// A policy from the older `RateLimit-Limit` field, such as `100, 100;w=60`: the first member
/// with a window. A bare limit (`100`) gives no window: [`HeaderError::LegacyWithoutWindow`],
/// for [`legacy_policy_with_window`].
pub fn legacy_policy(limit: &str) -> Result<Policy<'_>, HeaderError> {
    let mut first_error = HeaderError::Empty;
    for member in Members::new(limit) {
        match member {
            Ok(Member {
                number: Some(limit),
                w: Some(window_secs),
                ..
            }) if limit > 0 && window_secs > 0 => {
                return Ok(Policy {
                    name: "",
                    limit,
                    window_secs,
                })
            }
            Ok(Member {
                number: Some(_),
                w: Some(_),
                ..
            }) => first_error = HeaderError::Zero,
            Ok(Member { number: None, .. }) => return Err(HeaderError::NotANumber),
            Ok(_) if first_error == HeaderError::Empty => {
                first_error = HeaderError::LegacyWithoutWindow;
            }
            Ok(_) => {}
            Err(error) => return Err(error),
        }
    }
    Err(first_error)
}

/// A policy from the older `RateLimit-Limit` field with the window the caller knows (from the
/// upstream's documentation, say), in seconds: a member's own `w` where the field gives one, as
/// [`legacy_policy`] reads it, else the first member's limit over `window_secs`.
///
/// ```
/// use tollgate::headers::{self, HeaderError};
///
/// assert_eq!(headers::legacy_policy("100"), Err(HeaderError::LegacyWithoutWindow));
/// let policy = headers::legacy_policy_with_window("100", 60)?;
/// assert_eq!((policy.limit(), policy.window_secs()), (100, 60));
/// let policy = headers::legacy_policy_with_window("100;w=3600", 60)?; // the field's own window
/// assert_eq!(policy.window_secs(), 3600);
/// # Ok::<(), HeaderError>(())
/// ```
pub fn legacy_policy_with_window(limit: &str, window_secs: u64) -> Result<Policy<'_>, HeaderError> {
    match legacy_policy(limit) {
        Err(HeaderError::LegacyWithoutWindow) => {}
        read => return read,
    }
    if window_secs == 0 {
        return Err(HeaderError::Zero);
    }
    for member in Members::new(limit) {
        if let Ok(Member {
            number: Some(limit),
            ..
        }) = member
        {
            if limit == 0 {
                return Err(HeaderError::Zero);
            }
            return Ok(Policy {
                name: "",
                limit,
                window_secs,
            });
        }
    }
    Err(HeaderError::LegacyWithoutWindow)
}

/// The state from the older `RateLimit-Remaining` and `RateLimit-Reset` fields (seconds).
pub fn legacy_remaining<'a>(remaining: &str, reset: &str) -> Result<Remaining<'a>, HeaderError> {
    Ok(Remaining {
        name: "",
        remaining: integer(trim_ows(remaining))?,
        reset_secs: Some(integer(trim_ows(reset))?),
    })
}

/// One list member with the parameters these fields use; others are checked and skipped.
#[derive(Default)]
struct Member<'a> {
    name: &'a str,
    number: Option<u64>,
    q: Option<u64>,
    w: Option<u64>,
    r: Option<u64>,
    t: Option<u64>,
}

/// The members of a structured-field list (RFC 8941 §3.1), without allocating.
struct Members<'a> {
    rest: &'a str,
    failed: bool,
}

impl<'a> Members<'a> {
    fn new(value: &'a str) -> Self {
        Self {
            rest: trim_ows(value),
            failed: false,
        }
    }

    fn member(&mut self) -> Result<Member<'a>, HeaderError> {
        let mut member = Member::default();
        let (item, rest) = bare_item(self.rest)?;
        match item {
            Item::Name(name) => member.name = name,
            Item::Integer(n) => member.number = Some(n),
            Item::Other => {}
        }
        self.rest = rest;
        while let Some(rest) = self.rest.strip_prefix(';') {
            let rest = rest.trim_start_matches(' ');
            let key_len = rest
                .bytes()
                .position(|b| {
                    !(b.is_ascii_lowercase() || b.is_ascii_digit() || b"_-.*".contains(&b))
                })
                .unwrap_or(rest.len());
            if key_len == 0
                || !rest.as_bytes()[0].is_ascii_lowercase() && rest.as_bytes()[0] != b'*'
            {
                return Err(HeaderError::Syntax);
            }
            let (key, rest) = rest.split_at(key_len);
            let (value, rest) = match rest.strip_prefix('=') {
                Some(rest) => {
                    let (value, rest) = bare_item(rest)?;
                    (Some(value), rest)
                }
                None => (None, rest), // a boolean true
            };
            self.rest = rest;
            let slot = match key {
                "q" => &mut member.q,
                "w" => &mut member.w,
                "r" => &mut member.r,
                "t" => &mut member.t,
                _ => continue,
            };
            match value {
                Some(Item::Integer(n)) => *slot = Some(n),
                _ => return Err(HeaderError::NotANumber),
            }
        }
        self.rest = trim_ows(self.rest);
        if let Some(rest) = self.rest.strip_prefix(',') {
            self.rest = trim_ows(rest);
            if self.rest.is_empty() {
                return Err(HeaderError::Empty); // a trailing comma
            }
        } else if !self.rest.is_empty() {
            return Err(HeaderError::Syntax);
        }
        Ok(member)
    }
}

impl<'a> Iterator for Members<'a> {
    type Item = Result<Member<'a>, HeaderError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.rest.is_empty() {
            return None;
        }
        let member = self.member();
        // After an error the rest cannot be split reliably: stop.
        self.failed = member.is_err();
        Some(member)
    }
}

enum Item<'a> {
    /// A string or a token.
    Name(&'a str),
    /// A non-negative integer.
    Integer(u64),
    /// A decimal, byte sequence or boolean: valid, and never what these fields count with.
    Other,
}

/// A string, token, non-negative integer or boolean at the start of `s`, and the rest.
fn bare_item(s: &str) -> Result<(Item<'_>, &str), HeaderError> {
    let bytes = s.as_bytes();
    match bytes.first() {
        None => Err(HeaderError::Empty),
        Some(b'"') => {
            let mut i = 1;
            while i < bytes.len() {
                match bytes[i] {
                    b'\\' if matches!(bytes.get(i + 1), Some(b'"' | b'\\')) => i += 2,
                    b'"' => return Ok((Item::Name(&s[1..i]), &s[i + 1..])),
                    b' '..=b'~' if bytes[i] != b'\\' => i += 1,
                    _ => return Err(HeaderError::Syntax),
                }
            }
            Err(HeaderError::Syntax) // unterminated
        }
        Some(b'-') => Err(HeaderError::NotANumber),
        Some(b) if b.is_ascii_digit() => {
            let len = bytes
                .iter()
                .position(|b| !b.is_ascii_digit())
                .unwrap_or(bytes.len());
            if bytes.get(len) == Some(&b'.') {
                // A decimal: up to 12 integer and 3 fractional digits.
                let frac = bytes[len + 1..]
                    .iter()
                    .position(|b| !b.is_ascii_digit())
                    .unwrap_or(bytes.len() - len - 1);
                if len > 12 || frac == 0 || frac > 3 {
                    return Err(HeaderError::Syntax);
                }
                return Ok((Item::Other, &s[len + 1 + frac..]));
            }
            Ok((Item::Integer(decimal(&s[..len], 15)?), &s[len..]))
        }
        Some(b'?') => match bytes.get(1) {
            Some(b'0' | b'1') => Ok((Item::Other, &s[2..])),
            _ => Err(HeaderError::Syntax),
        },
        Some(b':') => {
            let len = bytes[1..]
                .iter()
                .position(|&b| !(b.is_ascii_alphanumeric() || b"+/=".contains(&b)))
                .unwrap_or(bytes.len() - 1);
            match bytes.get(1 + len) {
                Some(b':') => Ok((Item::Other, &s[len + 2..])),
                _ => Err(HeaderError::Syntax),
            }
        }
        Some(b) if b.is_ascii_alphabetic() || *b == b'*' => {
            let len = bytes
                .iter()
                .position(|&b| !(b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~:/".contains(&b)))
                .unwrap_or(bytes.len());
            Ok((Item::Name(&s[..len]), &s[len..]))
        }
        Some(_) => Err(HeaderError::Syntax),
    }
}

/// A plain field integer: digits only.
fn integer(s: &str) -> Result<u64, HeaderError> {
    if s.is_empty() {
        return Err(HeaderError::Empty);
    }
    if !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(HeaderError::NotANumber);
    }
    decimal(s, 20)
}

/// ASCII digits, at most `max_digits` of them, as a `u64`.
fn decimal(digits: &str, max_digits: usize) -> Result<u64, HeaderError> {
    if digits.len() > max_digits {
        return Err(HeaderError::Overflow);
    }
    digits.bytes().try_fold(0u64, |n, b| {
        n.checked_mul(10)
            .and_then(|n| n.checked_add(u64::from(b - b'0')))
            .ok_or(HeaderError::Overflow)
    })
}

/// Without leading and trailing spaces and tabs.
fn trim_ows(s: &str) -> &str {
    s.trim_matches([' ', '\t'])
}

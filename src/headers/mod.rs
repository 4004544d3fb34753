//! Rate-limit headers, both ways.
//!
//! - **Reading** an upstream's (`parse`, `no_std`, no allocation, no clock): `Retry-After` into
//!   a pause, and the IETF `RateLimit-Policy` / `RateLimit` fields (and the older
//!   `RateLimit-Limit`, `-Remaining`, `-Reset` fields) into a [`Quota`](crate::Quota) or a
//!   pause. The caller passes the current time where an HTTP date needs one. Malformed input is
//!   a [`HeaderError`], never a panic.
//! - **Writing** an answer's (`respond`, with `std`): `RateLimitHeaders` for a `429` or `503`
//!   answer or one that let the request through, as the tower layer writes them, and [`HumanDuration`], a duration as a person reads it
//!   (`1.2 s`, `350 ms`) for the answer's body.
//!
//! ```
//! use core::time::Duration;
//! use tollgate::headers;
//!
//! // 429 Too Many Requests, Retry-After: 3
//! assert_eq!(headers::retry_after("3", 0), Ok(Duration::from_secs(3)));
//! // Retry-After as an HTTP date, 90 s after "now" (Unix seconds the caller read)
//! let now = 784_111_687; // Sun, 06 Nov 1994 08:48:07 GMT
//! assert_eq!(
//!     headers::retry_after("Sun, 06 Nov 1994 08:49:37 GMT", now),
//!     Ok(Duration::from_secs(90))
//! );
//!
//! let policy = headers::policies(r#""default";q=100;w=60"#).next().unwrap().unwrap();
//! assert_eq!((policy.name(), policy.limit(), policy.window_secs()), ("default", 100, 60));
//! let state = headers::remaining(r#""default";r=0;t=30"#).next().unwrap().unwrap();
//! assert_eq!(state.pause(), Some(Duration::from_secs(30)));
//! ```

mod parse;
#[cfg(feature = "std")]
mod respond;

pub use parse::*;
#[cfg(feature = "std")]
pub use respond::{RateLimitHeaders, RATE_LIMIT, RATE_LIMIT_POLICY, RETRY_AFTER};

pub use crate::error::HumanDuration;

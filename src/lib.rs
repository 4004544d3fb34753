//! # tollgate
//!
//! A token-bucket rate limiter whose whole state is one atomic word, updated by a
//! compare-exchange loop against a clock the caller injects. `no_std`, no heap, no lock, no
//! floating point, no background timer: it runs the same on a Cortex-M0 in an interrupt handler
//! and on a server path making ten million checks a second.
//!
//! ```
//! use core::time::Duration;
//! use tollgate::{Denied, ManualClock, Quota, Rate, TokenBucket};
//!
//! let clock = ManualClock::new();
//! let bucket = TokenBucket::try_new(Quota::new(Rate::per_second(2)).burst(5), &clock)?;
//!
//! // Twelve requests 0.2 s apart: the burst of five, then two a second.
//! let mut allowed = Vec::new();
//! for _ in 0..12 {
//!     allowed.push(bucket.try_acquire(1).is_ok());
//!     clock.advance(Duration::from_millis(200));
//! }
//! let (y, n) = (true, false);
//! assert_eq!(allowed, [y, y, y, y, y, y, y, n, y, n, y, n]);
//! # Ok::<(), tollgate::ConfigError>(())
//! ```
//!
//! ## The model
//!
//! A bucket has a [`Rate`] (tokens per period), a burst (the most it holds) and a fill at start.
//! Tokens accrue continuously at the rate and stop at the burst; acquiring `n` spends `n`. The
//! word holds the instant at which the bucket would be empty given every grant so far (the GCRA
//! "theoretical arrival time" shifted by the burst), in integer units in which both a clock tick
//! and a token are whole numbers. So grants are exact: over any span they equal
//! `floor(start fill + rate × elapsed)`, capped by the burst, with no drift and no rounding.
//!
//! Where a rate and clock need more distinct instants than the word holds for a century of idle
//! time (171 per minute on a nanosecond clock, say), the bucket reads its clock to a power of two
//! of ticks instead (32 ns there, see [`TokenBucket::resolution`]), and is exact for the clock
//! read that way. A rate that no layout holds exactly (549 637 per second on a nanosecond clock:
//! a century of it at sub-tick precision needs more than 64 bits) is rounded down by less than
//! one part per million and reported by [`TokenBucket::tick_rate`] and [`TokenBucket::is_exact`].
//! A configuration the word cannot hold even then — a trillion tokens a second, or a burst of
//! millennia — is a [`ConfigError`], never a wrong answer.
//!
//! ## Features
//!
//! | feature | default | what it adds |
//! |---|---|---|
//! | `std` | yes | `StdClock`; `TokenBucket::acquire_blocking`: blocking waits for threads; `KeyedLimiter`: per-key limits for servers, sharded and capped |
//! | `tokio` | no | `TokioClock`, `TokenBucket::acquire(n).await`: cancel-safe async waits; `io::Throttled`: byte-rate `AsyncRead` / `AsyncWrite`; `wait::RemoteLine`, the line of a remote bucket's waiters |
//! | `embedded-hal` | no | `TokenBucket::acquire_with_delay`: blocking waits through `DelayNs` |
//! | `embassy-time` | no | `EmbassyClock`; `wait::EmbassyWait`: `acquire(n).await` on embassy-time's timer, any executor, no heap (Rust 1.85) |
//! | `embedded-hal-async` | no | `TokenBucket::acquire_with_async_delay`: async waits through `embedded-hal-async`'s `DelayNs`, no heap |
//! | `keyed-table` | no | `KeyedTable`: per-key limits in fixed memory, safe in interrupt handlers |
//! | `quanta` | no | `TscClock`: the CPU's time-stamp counter, for hot paths (implies `std`) |
//! | `coarse-clock` | no | `CoarseClock`: one atomic refreshed every millisecond (implies `std`) |
//! | `metrics` | no | `observe::Metrics`: a limit's counts sent to the `metrics` facade (implies `std`) |
//! | `defmt` | no | `defmt::Format` on the public types |
//! | `word64` | no | the 64-bit word on targets without native 64-bit atomics, in a cell behind critical sections (the firmware provides the `critical-section` implementation) |
//!
//! Always available: [`Limits`] (several buckets taken all-or-none), `TokenBucket::pause_for`
//! after a 429, [`headers`] (`Retry-After` and the IETF `RateLimit` headers), [`Jitter`],
//! [`observe`] (counts of grants, denials and waits, costing nothing unless used), [`wait`]
//! (the seam for buckets kept elsewhere), and `AdjustableBucket` (live `set_quota`, where the
//! target has 64-bit atomics).
//!
//! Without `std` the crate is `no_std` and needs only atomics. On targets without
//! compare-and-swap (thumbv6m, riscv32imc) the final firmware chooses how portable-atomic
//! provides it (its `critical-section` feature or `--cfg portable_atomic_unsafe_assume_single_core`);
//! this crate never does.
//!
//! In firmware, declare a `static` bucket with [`static_bucket!`]: its quota is solved at
//! compile time and folded into the code of every check ([`Folded`]), so the check costs what
//! a bucket written by hand with its constants costs, and the bucket is its word alone in RAM.
//! A denial's [`retry_after`](Denied::retry_after) is worked out only when read.
//!
//! ## The sibling crates
//!
//! - `tollgate-tower`: tower middleware over these buckets: HTTP answers (429 and 503 with
//!   `Retry-After` and `RateLimit` headers), key extractors, rejection as an error,
//!   backpressure, dry run.
//! - `tollgate-redis`: the same bucket kept in Redis or a Redis Cluster, one quota for many
//!   processes; per-key quotas; leased tokens.
//!
//! Both use only this crate's public API; their waits plug into [`wait`]'s seam, as any other
//! backend can.
//!
//! ## Model-check your code with tollgate
//!
//! Build your own crate's tests with `RUSTFLAGS="--cfg loom"` and tollgate takes its atomics from
//! [loom](https://docs.rs/loom): every bucket's word, `KeyedTable`'s counts (its critical
//! section becomes loom's mutex, which excludes as a critical section does), `ManualClock`,
//! `observe::Counters`. Loom then explores every interleaving of your threads through
//! tollgate's calls as well as through your own code, so a race between your check and your act
//! is found even when the shared state it races on is a bucket.
//!
//! What changes under `cfg(loom)`:
//!
//! - Constructors are not `const` (loom's atomics cannot be built in one): build buckets and
//!   tables inside the model with `try_new` (or `new`), not in `static`s, and share them with
//!   `loom::sync::Arc`. [`Clock`] is implemented for `loom::sync::Arc<C>`, so one
//!   `Arc<ManualClock>` can be the clock of several limits.
//! - Drive time with `ManualClock` (a modeled atomic), never with a real clock: a model must do
//!   the same thing on every run.
//! - The default word is `u64` (loom's atomics are 64-bit): name `TokenBucket<C, u32>` to model
//!   the 32-bit word your microcontroller uses. `AdjustableBucket` exists on the `u32` word only
//!   (loom has no 128-bit atomics).
//!
//! What is not modeled, and why:
//!
//! - `CoarseClock` compiles, but its reading is a real atomic refreshed by a real thread: a clock
//!   is the model's input, not its state. `StdClock` and `TscClock` read real time. Use
//!   `ManualClock` in models.
//! - `KeyedLimiter` (feature `std`) compiles, but its map keeps std's locks and atomics, so loom
//!   sees none of its interleavings; model a `KeyedTable` of the same quota instead.
//! - The async waits of `embassy-time` and `embedded-hal-async` compile, but their line is a
//!   `static` on the `critical-section` crate, whose `std` implementation excludes nothing
//!   between loom's threads (they share one OS thread): call `try_acquire` in models.
//! - The `tokio` feature: tokio does not build under a downstream `--cfg loom` (it is tokio's
//!   own test configuration). The waiters' line behind the tokio waits is modeled by this crate's
//!   `tests/loom/loom_waits.rs`.
//!
//! A complete model (`examples/loom-downstream` in the repository is this crate, with a bug
//! planted behind a feature that the model catches). `Cargo.toml`:
//!
//! ```toml
//! [dependencies]
//! tollgate = { version = "0.1", default-features = false, features = ["keyed-table"] }
//!
//! [target.'cfg(loom)'.dependencies]
//! loom = "0.7"
//!
//! [lints.rust]
//! unexpected_cfgs = { level = "warn", check-cfg = ['cfg(loom)'] }
//! ```
//!
//! `tests/model.rs`, run with `RUSTFLAGS="--cfg loom" cargo test --release --test model` (not a
//! doctest here, which has no loom: `examples/loom-downstream/tests/doc_example.rs` is this file,
//! run in CI):
//!
//! ```text
//! #![cfg(loom)]
//! use loom::sync::atomic::{AtomicU32, Ordering::Relaxed};
//! use loom::sync::Arc;
//! use tollgate::{KeyedTable, ManualClock, Quota, Rate, TokenBucket, WhenFull};
//!
//! /// Your code: a two-frame message goes out whole, under a per-sensor and a link limit.
//! struct Uplink {
//!     link: TokenBucket<Arc<ManualClock>>,
//!     per_sensor: KeyedTable<u8, Arc<ManualClock>, 4>,
//!     frames: AtomicU32,
//! }
//!
//! impl Uplink {
//!     fn send_pair(&self, sensor: u8) -> bool {
//!         // Each limit takes both frames in one call, or nothing. (A check of `available()`
//!         // followed by two takes of one would race: the model below finds it.)
//!         let sent =
//!             self.per_sensor.try_acquire(sensor, 2).is_ok() && self.link.try_acquire(2).is_ok();
//!         if sent {
//!             self.frames.fetch_add(2, Relaxed);
//!         }
//!         sent
//!     }
//! }
//!
//! #[test]
//! fn a_message_goes_out_whole() {
//!     loom::model(|| {
//!         let clock = Arc::new(ManualClock::new());
//!         let room = Quota::new(Rate::per_second(10)).burst(3);
//!         let uplink = Arc::new(Uplink {
//!             link: TokenBucket::try_new(room, clock.clone()).unwrap(),
//!             per_sensor: KeyedTable::try_new(room, clock, WhenFull::Refuse).unwrap(),
//!             frames: AtomicU32::new(0),
//!         });
//!         let other = {
//!             let uplink = uplink.clone();
//!             loom::thread::spawn(move || uplink.send_pair(7))
//!         };
//!         let sent = [uplink.send_pair(7), other.join().unwrap()];
//!         assert_eq!(uplink.frames.load(Relaxed), 2, "{sent:?}");
//!     });
//! }
//! ```
//!
//! ## Minimum supported Rust version
//!
//! Rust 1.81, with every feature but `embassy-time`, which needs Rust 1.85 (embassy's crates
//! are edition 2024); CI checks both with those toolchains. A change of the minimum version is
//! a minor version's change while the crate is 0.x.
//!
//! ## Guarantees
//!
//! - No more tokens than `burst + rate × elapsed`, under any interleaving of threads or interrupts.
//! - A denial changes nothing and says exactly when to retry ([`Denied::Insufficient`]).
//! - A request larger than the burst fails at once ([`Denied::ExceedsCapacity`]), never waits.
//! - A clock that steps backwards mints nothing: the bucket reads the step as time not yet earned.
//! - Nothing in a call allocates or panics; arithmetic on the word wraps by design and every
//!   other operation is checked at construction.

#![no_std]
#![cfg_attr(docsrs, feature(doc_cfg))]
// Where other crates' docs link this one's items when its docs are not built beside them (a
// sibling's docs built alone, as docs.rs builds them); `scripts/check-doc-links.sh` keeps the
// version in step with Cargo.toml's.
#![doc(html_root_url = "https://docs.rs/tollgate/0.1.0")]

#[cfg(any(feature = "std", test, loom))]
extern crate std;

// Each condition the crate builds on is spelled once, here, as `cfg_<name>!(op; items)`, which
// puts `#[cfg(op(condition))]` on each item (`any` for the condition, `not` for its complement);
// the `with_*!` macros name the uses. `cfg_atomic64!(op, attr; items)` keeps the items
// everywhere and puts `attr` on them where `op(condition)` holds.

/// Native 64-bit atomics, or loom (whose atomics are always 64-bit, so the models see these
/// items too): `AdjustableBucket`, `ManualClock`, the `u64` default word.
macro_rules! cfg_atomic64 {
    ($op:ident; $($item:item)*) => {
        $( $crate::cfg_atomic64!(@ cfg $op []; $item); )*
    };
    ($op:ident, $attr:meta; $($item:item)*) => {
        $( $crate::cfg_atomic64!(@ cfg_attr $op [, $attr]; $item); )*
    };
    (@ $kind:ident $op:ident [$($attr:tt)*]; $item:item) => {
        #[$kind($op(any(loom, target_has_atomic = "64")) $($attr)*)] $item
    };
}
/// A lock-free 128-bit atomic, which holds `AdjustableBucket`'s 64-bit word beside its
/// generation: aarch64 always, x86_64 with cmpxchg16b at compile time or, with `std`, detected
/// at run time. Loom has no 128-bit atomics.
macro_rules! cfg_atomic128 {
    ($op:ident; $($item:item)*) => {
        $(
            #[cfg($op(all(
                not(loom),
                target_has_atomic = "64",
                any(
                    target_arch = "aarch64",
                    all(target_arch = "x86_64", any(target_feature = "cmpxchg16b", feature = "std"))
                )
            )))]
            $item
        )*
    };
}

/// Items that need native 64-bit atomics (see `cfg_atomic64`).
macro_rules! with_atomic64 {
    ($($item:item)*) => { $crate::cfg_atomic64!(any; $($item)*); };
}
/// Items for targets without native 64-bit atomics.
macro_rules! without_atomic64 {
    ($($item:item)*) => { $crate::cfg_atomic64!(not; $($item)*); };
}
/// Items for 64-bit cells: native 64-bit atomics, or the `word64` feature asking for the `u64`
/// word where there are none (its cell then behind critical sections, `sync::CriticalU64`).
macro_rules! with_word64 {
    ($($item:item)*) => {
        $crate::cfg_atomic64!(any; $($item)*);
        $crate::cfg_atomic64!(not; $( #[cfg(feature = "word64")] $item )*);
    };
}
/// Items for the lock-free 128-bit atomic (see `cfg_atomic128`).
macro_rules! with_atomic128 {
    ($($item:item)*) => { $crate::cfg_atomic128!(any; $($item)*); };
}
/// Items for targets with 64-bit atomics but no lock-free 128-bit ones (and loom).
macro_rules! with_atomic64_only {
    ($($item:item)*) => { $crate::with_atomic64! { $crate::cfg_atomic128!(not; $($item)*); } };
}
/// A `const fn`, or a plain `fn` under loom, whose atomics cannot be built in a `const`: the
/// constructors of everything that holds an atomic. One item per invocation.
macro_rules! const_fn_unless_loom {
    ($(#[$attr:meta])* $vis:vis const fn $name:ident $($rest:tt)*) => {
        #[cfg(not(loom))]
        $(#[$attr])* $vis const fn $name $($rest)*
        #[cfg(loom)]
        $(#[$attr])* $vis fn $name $($rest)*
    };
}
pub(crate) use const_fn_unless_loom;
pub(crate) use {
    cfg_atomic128, cfg_atomic64, with_atomic128, with_atomic64, with_atomic64_only, with_word64,
    without_atomic64,
};

mod bucket;
mod clock;
mod engine;
mod error;
pub mod guide;
pub mod headers;
#[cfg(feature = "tokio")]
pub mod io;
#[cfg(any(feature = "std", feature = "keyed-table"))]
mod keyed;
mod limits;
pub mod observe;
mod rate;
pub mod wait;
with_atomic64! {
    mod adjustable;
}

pub use bucket::{Pause, Reservation, TickRate, TokenBucket, UnitBounds};
pub use clock::Clock;
#[cfg(feature = "coarse-clock")]
pub use clock::CoarseClock;
#[cfg(feature = "embassy-time")]
pub use clock::EmbassyClock;
#[cfg(feature = "std")]
pub use clock::StdClock;
#[cfg(feature = "tokio")]
pub use clock::TokioClock;
#[cfg(feature = "quanta")]
pub use clock::TscClock;
pub use engine::folded::{ConstQuota, Folded};
pub use engine::word::{DefaultWord, Word};
pub use error::{ConfigError, Denied, RetryAfter};
#[cfg(feature = "keyed-table")]
pub use keyed::KeyedTable;
#[cfg(any(feature = "std", feature = "keyed-table"))]
pub use keyed::{IpPrefix, KeyedConfigError, KeyedDenied, SetTierError, Tier, WhenFull, MAX_TIERS};
#[cfg(feature = "std")]
pub use keyed::{KeyHasher, KeyedLimiter, KeyedLimiterBuilder};
pub use limits::{Limits, LimitsReservation};
pub use rate::{Quota, Rate};
pub use wait::{Jitter, Jittered};
with_atomic64! {
    pub use adjustable::{AdjustableBucket, AdjustableReservation, SetQuotaError};
    pub use clock::ManualClock;
    pub use engine::word::{AdjustableWord, DefaultAdjustableWord};
}

/// Loom models only: the mutant the models must catch (see `engine::sync::models`).
#[cfg(loom)]
#[doc(hidden)]
pub use engine::sync::models as sync_models;

/// Loom models only: the waiters' line, stepped by hand.
#[cfg(all(loom, feature = "std"))]
#[doc(hidden)]
pub use wait::queue::models as wait_models;

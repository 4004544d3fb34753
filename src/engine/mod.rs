//! The engine: everything between a quota and one compare-exchange on one word. The public
//! types ([`TokenBucket`](crate::TokenBucket), the keyed tables, `AdjustableBucket`) are thin
//! faces over it.
//!
//! - [`word`]: the width of the atomic word and its never-used mark.
//! - [`sync`]: the one place that chooses between loom's atomics and real ones.
//! - [`layout`]: the solver that maps a quota and a clock onto the word (`Layout`), and, in
//!   `layout::transition`, the pure functions `(old word, now) -> new word, or a denial`.
//! - [`cell`]: the one compare-exchange driver that runs a transition against a word.
//! - [`div`]: 64-bit division without the division routine on 32-bit targets, and without any
//!   on cores with no divide instruction.
//! - [`folded`]: the word of a bucket whose quota is a compile-time constant, its layout a
//!   constant of the type (`static_bucket!`).

pub(crate) mod cell;
pub(crate) mod div;
pub(crate) mod folded;
pub(crate) mod layout;
pub(crate) mod sync;
pub(crate) mod word;

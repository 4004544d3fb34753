//! The guides: how to use tollgate, a page for each kind of use. The same pages are in the
//! repository's `docs/` directory.
//!
//! - [`waits`]: blocking, async and on microcontrollers; the line, giving up, jitter.
//! - [`firmware`]: `static` buckets, interrupts, the 32-bit word and its horizon.
//! - [`keyed_and_http`]: per-key limits in fixed memory or sharded tables, and the HTTP layers.
//! - [`upstream`]: several limits of one upstream, 429s, hard window caps.
//! - [`streams`]: byte-rate streams.
//! - [`observability`]: counts, metrics and logs.
//! - [`rules`]: the two rules, the guarantees and how exact is exact.
//! - [`speed`]: every bench, its command and its figures.
//! - [`design`]: design choices where the design was silent.
//!
//! Sharing one quota across processes (Redis) is `tollgate-redis`'s guide.

/// The guides' links to each other, for rustdoc. A guide's markdown links another by its file
/// name, as a reference (`[the two rules][rules.md]`, with `[rules.md]: rules.md` at its foot),
/// which a repository's web view follows. Each guide's docs start with these definitions of the
/// same labels, and the first definition of a label is the one markdown keeps: rustdoc follows
/// the module, the web view the file.
macro_rules! guide_links {
    () => {
        "[waits.md]: crate::guide::waits\n\
         [firmware.md]: crate::guide::firmware\n\
         [keyed-and-http.md]: crate::guide::keyed_and_http\n\
         [upstream.md]: crate::guide::upstream\n\
         [streams.md]: crate::guide::streams\n\
         [observability.md]: crate::guide::observability\n\
         [rules.md]: crate::guide::rules\n\
         [speed.md]: crate::guide::speed\n\
         [design.md]: crate::guide::design\n"
    };
}

#[doc = guide_links!()]
#[cfg_attr(all(feature = "std", feature = "tokio", feature = "embedded-hal"), doc = include_str!("../docs/waits.md"))]
#[cfg_attr(
    not(all(feature = "std", feature = "tokio", feature = "embedded-hal")),
    doc = "This guide's examples need the features `std`, `tokio` and `embedded-hal`: build the docs with them, as docs.rs does."
)]
pub mod waits {}

#[doc = guide_links!()]
#[doc = include_str!("../docs/firmware.md")]
pub mod firmware {}

#[doc = guide_links!()]
#[cfg_attr(feature = "keyed-table", doc = include_str!("../docs/keyed-and-http.md"))]
#[cfg_attr(
    not(feature = "keyed-table"),
    doc = "This guide's examples need the feature `keyed-table`: build the docs with them, as docs.rs does."
)]
pub mod keyed_and_http {}

#[doc = guide_links!()]
#[cfg_attr(feature = "tokio", doc = include_str!("../docs/upstream.md"))]
#[cfg_attr(
    not(feature = "tokio"),
    doc = "This guide's examples need the feature `tokio`: build the docs with them, as docs.rs does."
)]
pub mod upstream {}

#[doc = guide_links!()]
#[cfg_attr(feature = "tokio", doc = include_str!("../docs/streams.md"))]
#[cfg_attr(
    not(feature = "tokio"),
    doc = "This guide's examples need the feature `tokio`: build the docs with them, as docs.rs does."
)]
pub mod streams {}

#[doc = guide_links!()]
#[cfg_attr(feature = "std", doc = include_str!("../docs/observability.md"))]
#[cfg_attr(
    not(feature = "std"),
    doc = "This guide's examples need the feature `std`: build the docs with them, as docs.rs does."
)]
pub mod observability {}

#[doc = guide_links!()]
#[doc = include_str!("../docs/rules.md")]
pub mod rules {}

#[doc = guide_links!()]
#[doc = include_str!("../docs/speed.md")]
pub mod speed {}

#[doc = guide_links!()]
#[doc = include_str!("../docs/design.md")]
pub mod design {}

//! The README's snippets as doctests: `cargo test -p tollgate-readme --doc`.
#![doc = include_str!("../../README.md")]

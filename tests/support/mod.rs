//! What the tests share: a counter clock at any frequency, durations spelled short, and the
//! programs the Redis tests start (found or installed, in `system.rs`, which
//! `tests/redis/support.rs` includes).
//!
//! A test in `tests/` takes it with `mod support;`, one in a folder of `tests/` with
//! `#[path = "../support/mod.rs"] mod support;`.

#![allow(dead_code)] // each test uses its own part

use std::time::Duration;

pub mod counter;
pub mod floor;

/// `millis` milliseconds.
pub fn ms(millis: u64) -> Duration {
    Duration::from_millis(millis)
}

/// Runs `test` in real time on a multi-threaded tokio runtime with two workers.
pub fn on_two_workers(test: impl std::future::Future<Output = ()>) {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap()
        .block_on(test);
}

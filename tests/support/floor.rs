//! This host's floor for a waiter at a burst of one, shared by the real-time wait tests and the
//! waits bench (`bench/benches/waits.rs` includes this file).

use std::time::{Duration, Instant};

/// Grants per second of a thread that sleeps to each instant of a `per_second` schedule
/// (`std::thread::sleep`, the kernel's high-resolution timer) and keeps it unless it wakes more
/// than one period late, as a waiter that takes ahead keeps the bucket's: what this host's
/// wake-ups cost any waiter at a burst of one.
pub fn sleeper_floor(per_second: u64, length: Duration) -> f64 {
    let period = Duration::from_nanos(1_000_000_000 / per_second);
    let start = Instant::now();
    let (mut instant, mut grants) = (start, 0u64);
    while instant < start + length {
        let now = Instant::now();
        if instant > now {
            std::thread::sleep(instant - now);
        }
        let now = Instant::now();
        grants += 1;
        instant = if now - instant > period {
            now
        } else {
            instant + period
        };
    }
    grants as f64 / start.elapsed().as_secs_f64()
}

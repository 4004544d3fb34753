//! A tour of tollgate in real time: a few seconds, printed as it happens.
//!
//! Run it with `cargo run --release --example tour`.

use std::thread;
use std::time::{Duration, Instant};

use tollgate::{Denied, Quota, Rate, StdClock, TokenBucket};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    twelve_requests()?;
    Ok(())
}

/// Rate 2/s, burst 5, twelve requests 0.2 s apart: the burst of five, two that slip through on
/// the refill, then allow / block at two a second.
fn twelve_requests() -> Result<(), Box<dyn std::error::Error>> {
    println!("== Twelve requests 0.2 s apart, rate 2/s, burst 5");
    let bucket = TokenBucket::try_new(Quota::new(Rate::per_second(2)).burst(5), StdClock)?;
    let start = Instant::now();
    for i in 0..12u32 {
        // An absolute schedule, so that oversleeping one step does not shift the next.
        let at = start + Duration::from_millis(200) * i;
        thread::sleep(at.saturating_duration_since(Instant::now()));
        let t = start.elapsed().as_secs_f64();
        match bucket.try_acquire(1) {
            Ok(()) => println!("request {:>2} at {t:.2} s: ALLOWED", i + 1),
            Err(Denied::Insufficient { retry_after }) => println!(
                "request {:>2} at {t:.2} s: BLOCKED (429, Retry-After {:.0} ms)",
                i + 1,
                retry_after.as_secs_f64() * 1e3
            ),
            Err(other) => println!("request {:>2}: {other}", i + 1),
        }
    }
    println!(
        "A request larger than the bucket: {}",
        bucket.try_acquire(6).unwrap_err()
    );
    println!();
    Ok(())
}

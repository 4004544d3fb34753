//! A tour of tollgate in real time: about fifteen seconds, printed as it happens.
//!
//! Run it with `cargo run --release --example tour`. It fails (exit status 1) if a measured
//! property does not hold: no second after the first above the rate, no caller served early,
//! callers served in arrival order.

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use tollgate::{Denied, Quota, Rate, StdClock, TokenBucket};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    twelve_requests()?;
    two_hundred_acquisitions()?;
    twenty_concurrent_callers()?;
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
                retry_after.get().as_secs_f64() * 1e3
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

/// 200 acquisitions at rate 20, burst 20, by eight threads sharing the bucket, counted per
/// second: the burst and the first second's refill, then twenty a second. The run takes
/// (n − burst) / rate = 9 s.
fn two_hundred_acquisitions() -> Result<(), Box<dyn std::error::Error>> {
    const N: u32 = 200;
    const RATE: u32 = 20;
    const BURST: u32 = 20;
    const THREADS: u32 = 8;
    println!("== {N} acquisitions at rate {RATE}/s, burst {BURST}, by {THREADS} threads");
    let start = Instant::now();
    let bucket = TokenBucket::try_new(
        Quota::new(Rate::per_second(RATE.into())).burst(BURST.into()),
        StdClock,
    )?;
    let granted: Vec<Duration> = thread::scope(|scope| {
        let threads: Vec<_> = (0..THREADS)
            .map(|_| {
                scope.spawn(|| {
                    (0..N / THREADS)
                        .map(|_| bucket.acquire_blocking(1).map(|_| start.elapsed()))
                        .collect::<Result<Vec<_>, Denied>>()
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|t| t.join().expect("an acquiring thread panicked"))
            .collect::<Result<Vec<_>, Denied>>()
            .map(|per_thread| per_thread.concat())
    })?;
    let elapsed = start.elapsed();

    let seconds = granted.iter().map(|at| at.as_secs()).max().unwrap_or(0) + 1;
    let mut per_second = vec![0u32; seconds as usize];
    for at in &granted {
        per_second[at.as_secs() as usize] += 1;
    }
    for (second, &count) in per_second.iter().enumerate() {
        let note = if second == 0 { "  (burst + rate)" } else { "" };
        println!(
            "second {:>2}: {count:>3} {}{note}",
            second + 1,
            "#".repeat(count as usize)
        );
    }
    let expected = Duration::from_secs_f64(f64::from(N - BURST) / f64::from(RATE));
    let off = (elapsed.as_secs_f64() / expected.as_secs_f64() - 1.0) * 100.0;
    println!(
        "{N} acquisitions in {:.2} s; (n - burst) / rate = ({N} - {BURST}) / {RATE} = {:.2} s ({off:+.1} %)",
        elapsed.as_secs_f64(),
        expected.as_secs_f64(),
    );
    let above = per_second[1..].iter().any(|&count| count > RATE);
    println!(
        "no second after the first above {RATE}: {}",
        if above { "NO" } else { "yes" }
    );
    println!();
    if above || elapsed < expected {
        return Err("the measured rate broke the quota".into());
    }
    Ok(())
}

/// Twenty threads arrive 2 ms apart at a bucket of rate 5, burst 5: five are served at once,
/// then one every 200 ms, the last at 3 s, in the order they arrived. Each sleeps once, for its
/// own reservation, with no lock held.
fn twenty_concurrent_callers() -> Result<(), Box<dyn std::error::Error>> {
    println!("== 20 concurrent callers, rate 5/s, burst 5");
    let start = Instant::now();
    let bucket = TokenBucket::try_new(Quota::new(Rate::per_second(5)).burst(5), StdClock)?;
    let mut served: Vec<(Duration, usize)> = thread::scope(|scope| {
        let mut threads = Vec::new();
        for caller in 0..20 {
            let (arrived, arrival) = mpsc::channel();
            let bucket = &bucket;
            threads.push(scope.spawn(move || {
                let _ = arrived.send(());
                bucket
                    .acquire_blocking(1)
                    .map(|_| (start.elapsed(), caller))
            }));
            // One arrival at a time, so that the arrival order is known.
            let _ = arrival.recv();
            thread::sleep(Duration::from_millis(2));
        }
        threads
            .into_iter()
            .map(|t| t.join().expect("a caller panicked"))
            .collect::<Result<Vec<_>, Denied>>()
    })?;
    served.sort();
    let mut early = false;
    for (rank, &(at, caller)) in served.iter().enumerate() {
        let due = Duration::from_millis(200 * (rank as u64).saturating_sub(4));
        early |= at < due;
        println!(
            "caller {:>2} served at {:.2} s",
            caller + 1,
            at.as_secs_f64()
        );
    }
    // The burst is served at once, so among those five only the set matters; every later
    // caller must come in its place, 200 ms after the one before.
    let mut burst: Vec<usize> = served[..5].iter().map(|&(_, caller)| caller).collect();
    burst.sort_unstable();
    let in_order = burst == [0, 1, 2, 3, 4]
        && (served.iter().enumerate().skip(5)).all(|(rank, &(_, caller))| rank == caller);
    let last = served.last().map_or(Duration::ZERO, |&(at, _)| at);
    println!(
        "last served at {:.2} s (5 at once, then 15 at 5/s = 3.00 s); in arrival order: {}",
        last.as_secs_f64(),
        if in_order { "yes" } else { "NO" }
    );
    println!();
    if early || !in_order {
        return Err("callers were served early or out of order".into());
    }
    Ok(())
}

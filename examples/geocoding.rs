//! The design documents' geocoding job in real time: a provider that allows 1 request a second,
//! less 5 %, split over three worker tasks, each with its own bucket built `start_empty` and
//! phased by its index (`Quota::phase(i, 3)`), so that no two of the three ever start requests
//! within one second of each other.
//!
//! ```text
//! cargo run --features tokio --example geocoding               # 8 s
//! cargo run --features tokio --example geocoding -- 60         # 60 s
//! cargo run --features tokio --example geocoding -- 8 lockstep # without phases: fails
//! ```
//!
//! Prints each worker's start times and the most starts in any one-second window across the
//! three, and exits with status 1 if that is above 1.

use std::process::ExitCode;
use std::time::Duration;

use tokio::time::Instant;
use tollgate::{Quota, Rate, TokenBucket, TokioClock};

const WORKERS: u16 = 3;

#[tokio::main]
async fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let seconds: u64 = match args.next().map(|s| s.parse()) {
        None => 8,
        Some(Ok(seconds)) => seconds,
        Some(Err(_)) => {
            eprintln!("usage: geocoding [seconds] [lockstep]");
            return ExitCode::from(2);
        }
    };
    let lockstep = args.next().as_deref() == Some("lockstep");
    let span = Duration::from_secs(seconds);

    let per_worker = Quota::new(Rate::per_second(1).minus_percent(5).divided_by(3)).start_empty();
    println!(
        "{WORKERS} workers at {} each, for {seconds} s{}",
        per_worker.rate(),
        if lockstep { ", without phases" } else { "" }
    );
    // Built together, as a job's workers start together: each bucket's schedule starts when it
    // is built, and worker i's runs i/3 of a period (1.053 s) behind worker 0's.
    let start = Instant::now();
    let buckets: Vec<_> = (0..WORKERS)
        .map(|i| {
            let quota = if lockstep {
                per_worker
            } else {
                per_worker.phase(i, WORKERS)
            };
            TokenBucket::try_new(quota, TokioClock::new()).expect("a valid quota")
        })
        .collect();
    let workers: Vec<_> = buckets
        .into_iter()
        .map(|bucket| {
            tokio::spawn(async move {
                let mut starts = Vec::new();
                loop {
                    if let Err(denied) = bucket.acquire(1).await {
                        panic!("a request within the burst is never refused: {denied}");
                    }
                    let at = start.elapsed();
                    if at > span {
                        return starts;
                    }
                    starts.push(at); // the request would start here
                }
            })
        })
        .collect();

    let mut all = Vec::new();
    for (i, worker) in workers.into_iter().enumerate() {
        let starts = worker.await.expect("a worker task");
        let shown: Vec<String> = starts
            .iter()
            .map(|s| format!("{:.3}", s.as_secs_f64()))
            .collect();
        println!("worker {i}: {}", shown.join(" "));
        all.extend(starts);
    }
    all.sort();
    let most = (0..all.len())
        .map(|i| {
            all[i..]
                .iter()
                .take_while(|&&s| s < all[i] + Duration::from_secs(1))
                .count()
        })
        .max()
        .unwrap_or(0);
    let closest = all.windows(2).map(|pair| pair[1] - pair[0]).min();
    println!("starts: {}", all.len());
    if let Some(closest) = closest {
        println!("closest two starts: {:.3} s apart", closest.as_secs_f64());
    }
    println!("most starts in any 1 s window: {most}");
    if most > 1 {
        eprintln!("two requests started within one second: the provider refuses one");
        return ExitCode::from(1);
    }
    ExitCode::SUCCESS
}

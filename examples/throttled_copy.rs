//! A socket copied at a set rate: a sender pushes bytes over loopback as fast as it can, a copier
//! passes them on to a receiver through a [`Throttled`] writer, and the receiver times them.
//! Prints the achieved rate and exits 1 if the copy took more than 2 % more or less than
//! `bytes / rate`.
//!
//! ```text
//! cargo run --release --example throttled_copy --features tokio            # 50 MB at 10 MB/s
//! cargo run --release --example throttled_copy --features tokio -- 20 4    # 20 MB at 4 MB/s
//! ```

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;
use tollgate::io::Throttled;
use tollgate::{Quota, Rate, TokenBucket, TokioClock};

const MB: u64 = 1_000_000;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> std::io::Result<ExitCode> {
    let mut args = std::env::args().skip(1).map(|arg| arg.parse::<u64>());
    let megabytes = args.next().transpose().ok().flatten().unwrap_or(50);
    let per_second = args.next().transpose().ok().flatten().unwrap_or(10);
    if megabytes == 0 || per_second == 0 {
        eprintln!("usage: throttled_copy [megabytes > 0] [megabytes a second > 0]");
        return Ok(ExitCode::from(2));
    }
    let bytes = megabytes * MB;

    // From empty, so that the copy takes bytes / rate exactly. A burst of a tenth of a second
    // of the rate: a copier that wakes late (a busy machine) loses nothing to the cap unless it
    // is late by more than that less one chunk (`io::copy` writes 8 KiB at a time).
    let quota = Quota::new(Rate::per_second(per_second * MB))
        .burst(per_second * MB / 10)
        .start_empty();
    let bucket = Arc::new(TokenBucket::try_new(quota, TokioClock::new()).expect("a valid quota"));

    let (sender, receiver) = (
        TcpListener::bind("127.0.0.1:0").await?,
        TcpListener::bind("127.0.0.1:0").await?,
    );
    let (from, to) = (sender.local_addr()?, receiver.local_addr()?);

    // The sender: as fast as loopback goes.
    tokio::spawn(async move {
        let (mut socket, _) = sender.accept().await?;
        let block = vec![0x5a; 64 * 1024];
        let mut left = bytes;
        while left > 0 {
            let n = left.min(block.len() as u64) as usize;
            socket.write_all(&block[..n]).await?;
            left -= n as u64;
        }
        socket.shutdown().await
    });
    // The receiver: counts the bytes and notes when the last one came.
    let received = tokio::spawn(async move {
        let (mut socket, _) = receiver.accept().await?;
        let mut buffer = vec![0; 64 * 1024];
        let mut total = 0u64;
        loop {
            let n = socket.read(&mut buffer).await?;
            if n == 0 {
                return Ok::<_, std::io::Error>((total, Instant::now()));
            }
            total += n as u64;
        }
    });

    let mut source = TcpStream::connect(from).await?;
    let mut paced = Throttled::new(TcpStream::connect(to).await?, Arc::clone(&bucket));
    let start = Instant::now();
    let copied = tokio::io::copy(&mut source, &mut paced).await?;
    paced.shutdown().await?;
    let (total, last) = received.await.expect("the receiver runs")?;

    let took = last.duration_since(start);
    let expected = Duration::from_nanos(bytes * 1_000_000_000 / (per_second * MB));
    let achieved = total as f64 / took.as_secs_f64() / MB as f64;
    let off = took.as_secs_f64() / expected.as_secs_f64() - 1.0;
    println!(
        "copied {total} bytes in {:.3} s: {achieved:.3} MB/s (asked {per_second} MB/s, \
         {:.3} s expected, {:+.2} %)",
        took.as_secs_f64(),
        expected.as_secs_f64(),
        off * 100.0
    );
    if copied != bytes || total != bytes || off.abs() > 0.02 {
        eprintln!(
            "out of bounds: {copied} copied, {total} received, {:+.2} %",
            off * 100.0
        );
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

//! Byte-rate streams under tokio's paused time: the bytes that pass by any instant never exceed
//! what the bucket grants (`burst + rate × t`, in integers), fall short of it by at most one
//! chunk while the stream keeps up, large writes are split rather than refused, and a wait given
//! up takes nothing.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::time::{timeout, Instant};
use tollgate::io::Throttled;
use tollgate::{Quota, Rate, TokenBucket, TokioClock};

type Bucket = Arc<TokenBucket<TokioClock>>;

fn bucket(quota: Quota) -> Bucket {
    Arc::new(TokenBucket::try_new(quota, TokioClock::new()).unwrap())
}

/// A writer that logs when each byte arrived, takes at most `most` bytes a write, and, when
/// `stall` is set, is not ready on every other write (it wakes itself to be polled again).
struct Recorder {
    start: Instant,
    most: usize,
    stall: bool,
    stalled: bool,
    /// (time since start, bytes written then)
    log: Vec<(Duration, usize)>,
}

impl Recorder {
    fn new(most: usize, stall: bool) -> Self {
        Recorder {
            start: Instant::now(),
            most,
            stall,
            stalled: false,
            log: Vec::new(),
        }
    }

    fn total(&self) -> usize {
        self.log.iter().map(|&(_, n)| n).sum()
    }
}

impl AsyncWrite for Recorder {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.stall && !self.stalled {
            self.stalled = true;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        self.stalled = false;
        let n = buf.len().min(self.most);
        let at = self.start.elapsed();
        self.log.push((at, n));
        Poll::Ready(Ok(n))
    }
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// Checks `log` at every instant: the bytes by time `t` are at most `burst + rate × t` (exact,
/// in integers) and, once all that `t` brought has passed, at least that less `slack` (or all of
/// them).
fn assert_paced(log: &[(Duration, usize)], burst: u64, per_second: u64, slack: u64) {
    let all: u64 = log.iter().map(|&(_, n)| n as u64).sum();
    let mut total = 0u64;
    for (i, &(at, n)) in log.iter().enumerate() {
        total += n as u64;
        let granted = burst + (per_second as u128 * at.as_nanos() / 1_000_000_000) as u64;
        assert!(
            total <= granted,
            "{total} bytes by {at:?}: more than the {granted} granted"
        );
        let last_at_this_instant = log.get(i + 1).map_or(true, |&(next, _)| next > at);
        if last_at_this_instant {
            assert!(
                total + slack >= granted.min(all),
                "{total} bytes by {at:?}: short of the {granted} granted by more than {slack}"
            );
        }
    }
}

#[tokio::test(start_paused = true)]
async fn writes_stay_within_the_grants_at_every_instant_whatever_the_inner_writer_does() {
    // (inner writer takes at most, stalls, chunk): a fast writer, one that takes 7 bytes at a
    // time, one that is not ready every other time; chunks of the whole burst (asked for
    // beyond it: the burst is the most), of half of it (the default) and smaller.
    let rows = [
        (usize::MAX, false, u32::MAX),
        (7, false, u32::MAX),
        (usize::MAX, true, u32::MAX),
        (usize::MAX, false, 150),
        (7, true, 64),
    ];
    for (most, stall, chunk) in rows {
        let quota = Quota::new(Rate::per_second(1_000)).burst(300);
        let start = Instant::now();
        let mut out = Throttled::new(Recorder::new(most, stall), bucket(quota)).with_chunk(chunk);
        out.write_all(&[1; 5_000]).await.unwrap();
        // The burst at once, then 4 700 bytes at 1 000 a second.
        assert_eq!(
            start.elapsed(),
            Duration::from_millis(4_700),
            "{most} {stall} {chunk}"
        );
        let log = &out.get_ref().log;
        assert_eq!(out.get_ref().total(), 5_000);
        assert_eq!(out.chunk(), chunk.min(300));
        assert_paced(log, 300, 1_000, u64::from(out.chunk()));
    }
}

#[tokio::test(start_paused = true)]
async fn a_write_larger_than_the_burst_is_split_not_refused() {
    let quota = Quota::new(Rate::per_second(100)).burst(300);
    let mut out = Throttled::new(Recorder::new(usize::MAX, false), bucket(quota));
    assert_eq!(out.chunk(), 150); // half the burst
                                  // One write: one chunk, at once.
    assert_eq!(out.write(&[0; 1_000]).await.unwrap(), 150);
    // The rest in chunks no larger than that, each when it has accrued: the last byte when
    // 1 000 have, 7 s after the first 300.
    out.write_all(&[0; 850]).await.unwrap();
    let log = &out.get_ref().log;
    let sizes: Vec<usize> = log.iter().map(|&(_, n)| n).collect();
    assert_eq!(sizes, [150, 150, 150, 150, 150, 150, 100]);
    let times: Vec<Duration> = log.iter().map(|&(t, _)| t).collect();
    let expected = [0, 0, 1_500, 3_000, 4_500, 6_000, 7_000].map(Duration::from_millis);
    assert_eq!(times, expected);
}

#[tokio::test(start_paused = true)]
async fn waits_that_wake_late_lose_nothing_in_chunks_of_half_the_burst() {
    // 1 MB/s in 32 KiB chunks: each is due 32.768 ms after the last, and tokio's timer wakes
    // it on the next millisecond. What accrues meanwhile fits in the other half of the burst.
    let quota = Quota::new(Rate::per_second(1_000_000))
        .burst(64 * 1024)
        .start_empty();
    // (chunk, time to write 300 000 bytes): chunks of the whole burst, which has no room for a
    // late wake-up, take their bytes up to two milliseconds before they fall due and sleep
    // the rest holding them, so they lose nothing to the cap either.
    for (chunk, expected_ms) in [(32 * 1024, 300), (64 * 1024, 300)] {
        let start = Instant::now();
        let mut out = Throttled::new(Recorder::new(usize::MAX, false), bucket(quota));
        out = out.with_chunk(chunk);
        out.write_all(&[0; 300_000]).await.unwrap();
        assert_eq!(
            start.elapsed(),
            Duration::from_millis(expected_ms),
            "{chunk}"
        );
        assert_paced(&out.get_ref().log, 0, 1_000_000, u64::from(chunk));
    }
}

/// A reader of `len` bytes that hands out at most `most` a read.
struct Source {
    left: usize,
    most: usize,
}

impl AsyncRead for Source {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let n = self.left.min(self.most).min(buf.remaining());
        buf.put_slice(&vec![2; n]);
        self.left -= n;
        Poll::Ready(Ok(()))
    }
}

#[tokio::test(start_paused = true)]
async fn reads_are_paid_before_they_move_and_stay_within_the_grants() {
    // (source hands out at most, reader's buffer)
    for (most, buffer) in [(usize::MAX, 8 * 1024), (5, 8 * 1024), (usize::MAX, 100)] {
        let quota = Quota::new(Rate::per_second(1_000)).burst(250).start_empty();
        let start = Instant::now();
        let mut source = Throttled::new(Source { left: 3_000, most }, bucket(quota));
        let mut sink = Recorder::new(usize::MAX, false);
        let mut chunk = vec![0; buffer];
        loop {
            let n = source.read(&mut chunk).await.unwrap();
            if n == 0 {
                break;
            }
            sink.write_all(&chunk[..n]).await.unwrap();
        }
        assert_eq!(sink.total(), 3_000);
        assert!(source.read_ahead().is_empty());
        // From empty: the last byte is paid for once 3 000 have accrued.
        assert_eq!(start.elapsed(), Duration::from_secs(3), "{most} {buffer}");
        assert_paced(&sink.log, 0, 1_000, 250);
    }
}

#[tokio::test(start_paused = true)]
async fn a_wait_given_up_takes_nothing_and_bytes_paid_for_are_kept() {
    // Chunks of 100 bytes, one second of the rate.
    let quota = Quota::new(Rate::per_second(100)).burst(200).start_empty();
    let shared = bucket(quota);
    let start = Instant::now();
    let mut out = Throttled::new(Recorder::new(usize::MAX, false), Arc::clone(&shared));
    // Given up half-way through the wait for a full chunk: nothing was taken.
    let gave_up = timeout(Duration::from_millis(500), out.write(&[0; 100])).await;
    assert!(gave_up.is_err());
    assert_eq!(shared.available(), 50);
    assert!(out.get_ref().log.is_empty());
    // The next write resumes the wait and is served when the chunk has accrued.
    assert_eq!(out.write(&[0; 100]).await.unwrap(), 100);
    assert_eq!(start.elapsed(), Duration::from_secs(1));
    assert_eq!(shared.available(), 0);

    // A stream dropped while it waits leaves the line: the next one is served on time.
    let mut dropped = Throttled::new(Recorder::new(usize::MAX, false), Arc::clone(&shared));
    assert!(poll_once(Box::pin(dropped.write(&[0; 100])))
        .await
        .is_none());
    drop(dropped);
    let mut next = Throttled::new(Recorder::new(usize::MAX, false), Arc::clone(&shared));
    assert_eq!(next.write(&[0; 100]).await.unwrap(), 100);
    assert_eq!(start.elapsed(), Duration::from_secs(2));

    // Paid for, but the inner writer was not ready when the caller gave up: the bytes stay
    // paid for, and the next write uses them at once, taking nothing more.
    tokio::time::advance(Duration::from_secs(1)).await;
    let mut stalled = Throttled::new(Recorder::new(usize::MAX, true), Arc::clone(&shared));
    assert_eq!(shared.available(), 100);
    assert!(poll_once(Box::pin(stalled.write(&[0; 100])))
        .await
        .is_none());
    assert_eq!(shared.available(), 0);
    assert_eq!(stalled.write(&[0; 100]).await.unwrap(), 100);
    assert_eq!(start.elapsed(), Duration::from_secs(3));
    assert_eq!(shared.available(), 0);
}

/// Polls `future` once: its output if it was ready.
async fn poll_once<F: std::future::Future + Unpin>(mut future: F) -> Option<F::Output> {
    std::future::poll_fn(|cx| {
        Poll::Ready(match Pin::new(&mut future).poll(cx) {
            Poll::Ready(out) => Some(out),
            Poll::Pending => None,
        })
    })
    .await
}

#[tokio::test(start_paused = true)]
async fn a_read_given_up_keeps_its_bytes_and_takes_nothing_and_the_end_costs_nothing() {
    // Chunks of 100 bytes, one second of the rate; a source of 150 bytes, ready at once.
    let quota = Quota::new(Rate::per_second(100)).burst(200).start_empty();
    let shared = bucket(quota);
    let start = Instant::now();
    let mut source = Throttled::new(
        Source {
            left: 150,
            most: usize::MAX,
        },
        Arc::clone(&shared),
    );
    let mut buffer = [0u8; 1_000];
    // Given up half-way through paying for the first chunk: read ahead, nothing taken.
    assert!(
        timeout(Duration::from_millis(500), source.read(&mut buffer))
            .await
            .is_err()
    );
    assert_eq!(source.read_ahead().len(), 100);
    assert_eq!(shared.available(), 50);
    // (bytes read, when): the chunk once paid for, the rest once it accrued, then the end, at
    // once and for nothing.
    let mut reads = Vec::new();
    for _ in 0..3 {
        let n = source.read(&mut buffer).await.unwrap();
        reads.push((n, start.elapsed()));
    }
    let expected =
        [(100, 1_000), (50, 1_500), (0, 1_500)].map(|(n, ms)| (n, Duration::from_millis(ms)));
    assert_eq!(reads, expected);
    assert_eq!(shared.available(), 0);
    tokio::time::advance(Duration::from_millis(500)).await;
    assert_eq!(shared.available(), 50);
}

#[tokio::test(start_paused = true)]
async fn streams_sharing_a_bucket_share_its_rate_and_never_exceed_it_together() {
    let quota = Quota::new(Rate::per_second(1_000)).burst(200).start_empty();
    let shared = bucket(quota);
    let start = Instant::now();
    let tasks: Vec<_> = (0..3)
        .map(|_| {
            let bucket = Arc::clone(&shared);
            tokio::spawn(async move {
                let mut out = Throttled::new(Recorder::new(usize::MAX, false), bucket);
                out.get_mut().start = start;
                out.write_all(&[0; 1_000]).await.unwrap();
                out.into_inner().log
            })
        })
        .collect();
    let mut log = Vec::new();
    for task in tasks {
        log.extend(task.await.unwrap());
    }
    log.sort();
    assert_eq!(start.elapsed(), Duration::from_secs(3));
    assert_paced(&log, 0, 1_000, 3 * 200);
}

//! Byte-rate streams under tokio's paused time: the bytes that pass over any span never exceed
//! what the bucket grants (`burst + rate × t`, in integers), with stalled writers, partial
//! writes, cancelled polls and many streams on one bucket; they fall short of it by at most one
//! chunk while the stream keeps up, large writes are split rather than refused, and a wait
//! given up takes nothing.

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
    // (chunk, most time to write 300 000 bytes): chunks of the whole burst have no room for a
    // late wake-up: a turn used late gives back what the cap would have cut meanwhile, and
    // loses that time (the timer's lateness, within a millisecond a chunk).
    for (chunk, most_ms) in [(32 * 1024, 300), (64 * 1024, 306)] {
        let start = Instant::now();
        let mut out = Throttled::new(Recorder::new(usize::MAX, false), bucket(quota));
        out = out.with_chunk(chunk);
        out.write_all(&[0; 300_000]).await.unwrap();
        let elapsed = start.elapsed();
        assert!(
            elapsed >= Duration::from_millis(300) && elapsed <= Duration::from_millis(most_ms),
            "{chunk}: {elapsed:?}"
        );
        assert_paced(&out.get_ref().log, 0, 1_000_000, u64::from(chunk));
        let worst = worst_span(&out.get_ref().log, 1_000_000);
        assert!(worst <= 64 * 1024, "{chunk}: {worst} beyond rate × t");
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
async fn a_wait_given_up_takes_nothing_and_bytes_paid_for_and_not_moved_are_given_back() {
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

    // Paid for, but the inner writer was not ready: the bytes are given back before the poll
    // returns (held, they would pass on top of what the bucket refills meanwhile), and the
    // next write pays for them again.
    tokio::time::advance(Duration::from_secs(1)).await;
    let mut stalled = Throttled::new(Recorder::new(usize::MAX, true), Arc::clone(&shared));
    assert_eq!(shared.available(), 100);
    assert!(poll_once(Box::pin(stalled.write(&[0; 100])))
        .await
        .is_none());
    assert_eq!(shared.available(), 100);
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

/// The most bytes `log` passed within one span `[a, b]` beyond `per_second × (b − a)` (rounded
/// down): the burst bounds it when the stream kept to the bucket over every span.
fn worst_span(log: &[(Duration, usize)], per_second: u64) -> u64 {
    // The bytes of each instant together: a span starts and ends on an instant.
    let mut sorted = log.to_vec();
    sorted.sort();
    let mut log: Vec<(Duration, usize)> = Vec::new();
    for (at, n) in sorted {
        match log.last_mut() {
            Some((last, bytes)) if *last == at => *bytes += n,
            _ => log.push((at, n)),
        }
    }
    let mut worst = 0;
    for (i, &(from, _)) in log.iter().enumerate() {
        let mut bytes = 0u64;
        for &(to, n) in &log[i..] {
            bytes += n as u64;
            let accrued = (u128::from(per_second) * (to - from).as_nanos() / 1_000_000_000) as u64;
            worst = worst.max(bytes.saturating_sub(accrued));
        }
    }
    worst
}

/// A writer the test opens and closes: closed, it is not ready (and wakes its writer when
/// opened); open, it takes at most `most` bytes a write and logs when they arrived.
#[derive(Clone)]
struct Gate(Arc<std::sync::Mutex<GateState>>);

struct GateState {
    start: Instant,
    open: bool,
    most: usize,
    /// Closes again after this many writes taken while open (`usize::MAX`: stays open).
    writes_left: usize,
    waker: Option<std::task::Waker>,
    log: Vec<(Duration, usize)>,
}

impl Gate {
    fn new(start: Instant, open: bool, most: usize) -> Self {
        Gate(Arc::new(std::sync::Mutex::new(GateState {
            start,
            open,
            most,
            writes_left: usize::MAX,
            waker: None,
            log: Vec::new(),
        })))
    }

    /// Lets `writes` more writes through, then closes.
    fn close_after(&self, writes: usize) {
        self.0.lock().unwrap().writes_left = writes;
    }

    fn open(&self) {
        let mut state = self.0.lock().unwrap();
        state.open = true;
        state.writes_left = usize::MAX;
        if let Some(waker) = state.waker.take() {
            waker.wake();
        }
    }

    fn log(&self) -> Vec<(Duration, usize)> {
        self.0.lock().unwrap().log.clone()
    }
}

impl AsyncWrite for Gate {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let mut state = self.0.lock().unwrap();
        if !state.open || state.writes_left == 0 {
            state.open = false;
            state.waker = Some(cx.waker().clone());
            return Poll::Pending;
        }
        state.writes_left -= 1;
        let n = buf.len().min(state.most);
        let at = state.start.elapsed();
        state.log.push((at, n));
        Poll::Ready(Ok(n))
    }
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// The case and its kin: 1 000 B/s, burst 1 000; each stream's inner writer takes
/// `open_writes` writes of at most `most` bytes, then is not ready for 10 s (a peer that stopped
/// reading), then takes everything. Over every span, the bytes of all the streams together stay
/// within `burst + rate × t`.
#[tokio::test(start_paused = true)]
async fn stalled_and_partial_writers_pass_no_more_than_the_bucket_grants_over_any_span() {
    // (streams, chunk, bytes each writer takes at a time, writes it takes before it stalls)
    let rows: &[(usize, u32, usize, usize)] = &[
        (1, 500, usize::MAX, 0), // the issue's: stalled once the first chunk was paid for
        (1, 500, usize::MAX, 1), // stalled after a chunk passed
        (1, 500, 100, 1),        // a partial write, then stalled
        (1, 1_000, 7, 3),        // chunks of the whole burst, partial writes
        (4, 500, usize::MAX, 0), // four streams on one bucket: the 3 000
        (4, 250, 99, 2),
    ];
    let mut worst = Vec::new();
    for &(streams, chunk, most, open_writes) in rows {
        let quota = Quota::new(Rate::per_second(1_000)).burst(1_000);
        let shared = bucket(quota);
        let start = Instant::now();
        let gates: Vec<Gate> = (0..streams)
            .map(|_| {
                let gate = Gate::new(start, true, most);
                gate.close_after(open_writes);
                gate
            })
            .collect();
        let tasks: Vec<_> = gates
            .iter()
            .map(|gate| {
                let mut out = Throttled::new(gate.clone(), Arc::clone(&shared)).with_chunk(chunk);
                tokio::spawn(async move { out.write_all(&[0; 3_000]).await.unwrap() })
            })
            .collect();
        tokio::time::sleep(Duration::from_secs(10)).await;
        for gate in &gates {
            gate.open();
        }
        for task in tasks {
            task.await.unwrap();
        }
        let log: Vec<_> = gates.iter().flat_map(Gate::log).collect();
        assert_eq!(log.iter().map(|&(_, n)| n).sum::<usize>(), 3_000 * streams);
        worst.push((streams, chunk, most, open_writes, worst_span(&log, 1_000)));
    }
    // (streams, chunk, writes of, stalled after, most bytes in a span beyond rate × t)
    assert!(
        worst.iter().all(|row| row.4 <= 1_000),
        "against a burst of 1 000: {worst:?}"
    );
}

/// A write whose poll is cancelled after its turn came (a chunk of the whole burst takes its
/// bytes just before they fall due, and sleeps to that instant holding them), and resumed 10 s
/// later: what it held is given back less what the cap cut, so it passes on top of no full
/// bucket.
#[tokio::test(start_paused = true)]
async fn a_poll_cancelled_after_its_turn_and_resumed_late_passes_no_more_than_granted() {
    let mut worst = Vec::new();
    for streams in [1, 4] {
        let quota = Quota::new(Rate::per_second(1_000))
            .burst(1_000)
            .start_empty();
        let shared = bucket(quota);
        let start = Instant::now();
        let mut outs: Vec<_> = (0..streams)
            .map(|_| {
                Throttled::new(Gate::new(start, true, usize::MAX), Arc::clone(&shared))
                    .with_chunk(1_000)
            })
            .collect();
        // Each waits in line for its whole-burst chunk, and gives up a moment before its turn
        // would end: after the bytes were taken, before they moved.
        for (i, out) in outs.iter_mut().enumerate() {
            let turn = Duration::from_millis(1_000 * (i as u64 + 1) - 1);
            let cancelled = timeout(turn - start.elapsed(), out.write(&[0; 1_000])).await;
            assert!(cancelled.is_err());
        }
        tokio::time::sleep(Duration::from_secs(10)).await;
        let tasks: Vec<_> = outs
            .into_iter()
            .map(|mut out| {
                tokio::spawn(async move {
                    out.write_all(&[0; 2_000]).await.unwrap();
                    out.into_inner().log()
                })
            })
            .collect();
        let mut log = Vec::new();
        for task in tasks {
            log.extend(task.await.unwrap());
        }
        assert_eq!(log.iter().map(|&(_, n)| n).sum::<usize>(), 2_000 * streams);
        worst.push((streams, worst_span(&log, 1_000)));
    }
    // (streams, most bytes in a span beyond rate × t)
    assert!(
        worst.iter().all(|row| row.1 <= 1_000),
        "against a burst of 1 000: {worst:?}"
    );
}

/// Nothing stalls: over a long run the streams pass at least 98 % of the rate, one stream or
/// four on one bucket, whole writes or partial ones.
#[tokio::test(start_paused = true)]
async fn over_a_long_run_streams_that_keep_up_get_the_rate() {
    // (streams, bytes the writer takes at a time, chunk: 0 for the default)
    let rows: &[(usize, usize, u32)] = &[
        (1, usize::MAX, 0),
        (1, 1_000, 0),
        (4, usize::MAX, 0),
        (4, 777, 0),
        (1, usize::MAX, 64 * 1024),
        (3, usize::MAX, 64 * 1024),
    ];
    const RATE: u64 = 1_000_000;
    let mut shares = Vec::new();
    for &(streams, most, chunk) in rows {
        let quota = Quota::new(Rate::per_second(RATE))
            .burst(64 * 1024)
            .start_empty();
        let shared = bucket(quota);
        let start = Instant::now();
        let each = 10 * RATE as usize / streams; // 20 s of the rate in all
        let tasks: Vec<_> = (0..streams)
            .map(|_| {
                let mut out = Throttled::new(Gate::new(start, true, most), Arc::clone(&shared));
                if chunk > 0 {
                    out = out.with_chunk(chunk);
                }
                tokio::spawn(async move {
                    out.write_all(&vec![0; each]).await.unwrap();
                    out.into_inner().log()
                })
            })
            .collect();
        let mut log = Vec::new();
        for task in tasks {
            log.extend(task.await.unwrap());
        }
        let elapsed = start.elapsed().as_secs_f64();
        let share = (each * streams) as f64 / elapsed / RATE as f64;
        shares.push((streams, most, chunk, (share * 10_000.0).round() / 100.0));
        assert!(worst_span(&log, RATE) <= 64 * 1024);
    }
    // (streams, writes of, chunk, % of the rate)
    assert!(
        shares.iter().all(|row| row.3 >= 98.0),
        "at least 98 % of the rate: {shares:?}"
    );
}

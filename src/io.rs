//! Byte-rate streams: [`Throttled`] wraps a tokio `AsyncRead` / `AsyncWrite` and pays one token
//! per byte, before the bytes move.

use core::future::Future;
use core::pin::Pin;
use core::task::{ready, Context, Poll};
use core::time::Duration;
use std::boxed::Box;
use std::io;
use std::ops::Deref;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::wait::queue::{Step, Waiter};
use crate::wait::GiveBack;
use crate::{Clock, Denied, Reservation, TokenBucket, Word};

/// A stream whose bytes are paid for from a bucket, one token a byte, before they move.
///
/// Each write asks for the bytes it may move — at most the buffer, at most one chunk (half the
/// burst unless [`with_chunk`](Self::with_chunk) says otherwise) — waits in the bucket's line as
/// [`TokenBucket::acquire`] does, then moves at most what it paid for. Each read takes what the
/// inner stream has ready into a buffer of its own (at most one chunk, and at most 64 KiB,
/// allocated at the first read), pays for what its caller can take of it, then hands that on:
/// so the end of a stream, or a read that brings fewer bytes than asked, costs nothing. A write larger than the
/// burst is split (it returns having written one chunk, as writes may; `write_all` and
/// `io::copy` go on with the rest), never refused. So over every span the bytes that pass are
/// at most what the bucket grants, `burst + rate × elapsed`, exactly, however many streams
/// share the bucket; with a stream that keeps up, they fall short of it by at most one chunk.
///
/// **No paid bytes are held.** A poll gives back, before it returns, what it paid for and did
/// not move: the inner writer was not ready, or took part of them. Held, they would pass later
/// on top of what the bucket refilled meanwhile (a peer that stops reading for ten seconds
/// would then get a chunk beyond a full burst, and each stream on a shared bucket one more).
/// The next write pays again. A turn in line used late (the stream was not polled when it came)
/// is given back the same way, less what the burst cap would have cut meanwhile, and paid for
/// again at once if the bucket holds it.
///
/// **Cancel-safe.** Nothing is taken while waiting: a read or write future dropped mid-wait
/// has taken nothing, and the stream keeps its place in the bucket's line for its next read or
/// write (dropping the stream leaves the line; a stream that is neither polled nor dropped
/// holds up those behind it on a shared bucket, as an unpolled waiter does). No lock is held
/// across a wait.
///
/// One bucket may pace many streams (behind an `Arc`, or a `&'static` bucket): they share its
/// rate, served in the order they asked. A stream that reads and writes pays for both from the
/// same bucket; give each direction a bucket of its own with `tokio::io::split`. The stream
/// must be `Unpin` (`Box::pin` one that is not).
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use tokio::io::AsyncWriteExt;
/// use tollgate::io::Throttled;
/// use tollgate::{Quota, Rate, TokenBucket, TokioClock};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // 1 MB/s, from empty, in chunks of at most 32 KiB (half the burst).
/// let rate = Quota::new(Rate::per_second(1_000_000)).burst(64 * 1024).start_empty();
/// let bucket = Arc::new(TokenBucket::try_new(rate, TokioClock::new())?);
/// let mut out = Throttled::new(Vec::new(), bucket);
/// let start = tokio::time::Instant::now();
/// out.write_all(&[7; 2_500_000]).await?; // 2.5 MB: split into chunks, never refused
/// assert_eq!(start.elapsed(), Duration::from_millis(2_500));
/// assert_eq!(out.get_ref().len(), 2_500_000);
/// # Ok(())
/// # }
/// ```
pub struct Throttled<S, B> {
    inner: S,
    bucket: B,
    chunk: u32,
    read: Side,
    write: Side,
    /// Bytes read from the inner stream and not yet paid for and handed on.
    stash: Stash,
}

/// The most a read holds back from its caller while it pays: the inner stream is read this far
/// ahead at most.
const STASH_BYTES: u32 = 64 * 1024;

/// Bytes read ahead, `bytes[start..end]`, allocated at the first read.
#[derive(Default)]
struct Stash {
    bytes: Box<[u8]>,
    start: usize,
    end: usize,
}

/// A wait in the bucket's line, owning its handle on the bucket.
type Wait = Pin<Box<dyn Future<Output = Result<Reservation, Denied>> + Send>>;

/// One direction's wait in line, if it is waiting. It holds no tokens between polls: what a
/// poll pays for and does not move, it gives back before it returns.
#[derive(Default)]
struct Side {
    wait: Option<Wait>,
}

impl<S, B, C, W> Throttled<S, B>
where
    B: Deref<Target = TokenBucket<C, W>>,
    C: Clock,
    W: Word,
{
    /// Paces `inner` by `bucket`, one token a byte, in chunks of half the burst (at least one
    /// byte, at most `u32::MAX`).
    ///
    /// Half, so that a wait that wakes late — tokio's timer fires up to two milliseconds after its
    /// instant, and a task may run later still — loses nothing: what accrues meanwhile fits in
    /// the other half instead of spilling over the burst. A stream paced at `rate` then keeps
    /// its rate as long as it wakes within `burst / 2 / rate` of its turn.
    pub fn new(inner: S, bucket: B) -> Self {
        let burst = largest_chunk(&bucket);
        Self {
            inner,
            chunk: (burst / 2).max(1),
            bucket,
            read: Side::default(),
            write: Side::default(),
            stash: Stash::default(),
        }
    }

    /// Pays for at most `bytes` at a time, from one byte to the whole burst: smaller chunks
    /// pace more smoothly, at the cost of more turns in the line. A chunk of the whole burst
    /// has no room for lateness: its wait takes the bytes up to two milliseconds before they
    /// fall due, and a task that runs after their instant (tokio's timer wakes on the next
    /// millisecond) gives back what accrued beyond the burst meanwhile, losing that time.
    pub fn with_chunk(mut self, bytes: u32) -> Self {
        self.chunk = bytes.clamp(1, largest_chunk(&self.bucket));
        self
    }

    /// The largest chunk paid for at once.
    pub fn chunk(&self) -> u32 {
        self.chunk
    }

    /// The bucket.
    pub fn bucket(&self) -> &B {
        &self.bucket
    }

    /// The inner stream.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner stream, to use unpaced. Reading from it directly skips the bytes
    /// [read ahead](Self::read_ahead).
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Bytes read from the inner stream and not yet paid for nor handed on: the next reads
    /// hand them on first.
    pub fn read_ahead(&self) -> &[u8] {
        &self.stash.bytes[self.stash.start..self.stash.end]
    }

    /// The inner stream, giving up what was paid for and not moved, and the bytes
    /// [read ahead](Self::read_ahead): take those first if the stream is read further.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl Side {
    /// Tokens paid for, at least one byte's: `want` at once if nobody waits and the bucket
    /// holds them, else once the line serves them. A reservation served late (its caller was
    /// not polled when it fell due: a cancelled or stalled poll) is given back and paid for
    /// again now, so that tokens held while the bucket refilled never pass on top of a full
    /// burst.
    fn poll_paid<C, W, B>(
        &mut self,
        bucket: &B,
        want: u32,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<Reservation>>
    where
        B: Deref<Target = TokenBucket<C, W>> + Clone + Send + 'static,
        C: Clock + Sync,
        W: Word,
    {
        loop {
            if self.wait.is_none() {
                if let Some(paid) = take_now(bucket, want, cx) {
                    return Poll::Ready(Ok(paid));
                }
            }
            let wait = self.wait.get_or_insert_with(|| {
                let bucket = bucket.clone();
                Box::pin(async move { bucket.acquire_reservation(want, Duration::MAX).await })
            });
            let served = ready!(wait.as_mut().poll(cx));
            self.wait = None;
            let paid = served.map_err(io::Error::other)?;
            // Signed difference on ticks, as the bucket compares them.
            let late = bucket.clock().now().wrapping_sub(paid.due_ticks()) as i64 > 0;
            if !late {
                return Poll::Ready(Ok(paid));
            }
            // Given back, less what the burst cap would have cut while it was held, and taken
            // again at once if the bucket holds it (this stream was just served in turn); else
            // the stream joins the line again.
            bucket.give_back(paid);
            if let Ok(paid) = bucket.reserve(want, Duration::ZERO) {
                return Poll::Ready(Ok(paid));
            }
        }
    }
}

/// Gives back to `bucket` what of `paid` did not move (`moved` of its tokens did): tokens
/// held past this poll would let the bucket refill beside them.
fn settle<C: Clock, W: Word>(bucket: &TokenBucket<C, W>, mut paid: Reservation, moved: usize) {
    let unused = paid
        .tokens()
        .saturating_sub(u32::try_from(moved).unwrap_or(u32::MAX));
    if unused > 0 {
        bucket.give_back(paid.split_off(unused));
    }
}

/// Takes `want` at once if nobody waits in the bucket's line and it holds them, without joining
/// the line (and so without allocating a wait).
fn take_now<C: Clock, W: Word>(
    bucket: &TokenBucket<C, W>,
    want: u32,
    cx: &Context<'_>,
) -> Option<Reservation> {
    let mut waiter = Waiter::new([bucket], [want], Some(Duration::ZERO)).ok()?;
    // A zero timeout never sleeps in line: it is served now or gives up (and leaves the line
    // when dropped, if it had joined one whose head was due).
    match waiter.step(cx.waker(), |_ahead| bucket.reserve(want, Duration::ZERO)) {
        // Served, unless a holder ahead in line has not yet returned: then the tokens go back,
        // and the stream waits behind it.
        Step::Done(Ok((paid, _waited))) => {
            if waiter.try_release(cx.waker()) {
                Some(paid)
            } else {
                crate::wait::GiveBack::give_back(bucket, paid);
                None
            }
        }
        _ => None,
    }
}

/// The burst, or `u32::MAX` where the burst is larger: the most one wait may ask for.
fn largest_chunk<C: Clock, W: Word>(bucket: &TokenBucket<C, W>) -> u32 {
    u32::try_from(bucket.quota().burst_size()).unwrap_or(u32::MAX)
}

/// `len` bytes asked for, in a chunk no larger than `chunk`.
fn ask(len: usize, chunk: u32) -> u32 {
    u32::try_from(len).unwrap_or(u32::MAX).min(chunk)
}

impl<S, B, C, W> AsyncWrite for Throttled<S, B>
where
    S: AsyncWrite + Unpin,
    B: Deref<Target = TokenBucket<C, W>> + Clone + Send + Unpin + 'static,
    C: Clock + Sync,
    W: Word,
{
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if buf.is_empty() {
            return Pin::new(&mut this.inner).poll_write(cx, buf);
        }
        let paid = ready!(this
            .write
            .poll_paid(&this.bucket, ask(buf.len(), this.chunk), cx))?;
        let allowed = buf.len().min(paid.tokens() as usize);
        let written = Pin::new(&mut this.inner).poll_write(cx, &buf[..allowed]);
        let moved = match &written {
            Poll::Ready(Ok(written)) => *written,
            Poll::Ready(Err(_)) | Poll::Pending => 0,
        };
        settle(&this.bucket, paid, moved);
        written
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

impl<S, B, C, W> AsyncRead for Throttled<S, B>
where
    S: AsyncRead + Unpin,
    B: Deref<Target = TokenBucket<C, W>> + Clone + Send + Unpin + 'static,
    C: Clock + Sync,
    W: Word,
{
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if buf.remaining() == 0 {
            return Pin::new(&mut this.inner).poll_read(cx, buf);
        }
        let stash = &mut this.stash;
        if stash.start == stash.end {
            if stash.bytes.is_empty() {
                stash.bytes = std::vec![0; this.chunk.min(STASH_BYTES) as usize].into();
            }
            let mut ahead = ReadBuf::new(&mut stash.bytes);
            ready!(Pin::new(&mut this.inner).poll_read(cx, &mut ahead))?;
            (stash.start, stash.end) = (0, ahead.filled().len());
            if stash.end == 0 {
                return Poll::Ready(Ok(())); // the end of the stream costs nothing
            }
        }
        let held = stash.end - stash.start;
        let paid = ready!(this.read.poll_paid(
            &this.bucket,
            ask(held.min(buf.remaining()), this.chunk),
            cx
        ))?;
        let handed = held.min(buf.remaining()).min(paid.tokens() as usize);
        buf.put_slice(&stash.bytes[stash.start..stash.start + handed]);
        stash.start += handed;
        settle(&this.bucket, paid, handed);
        Poll::Ready(Ok(()))
    }
}

impl<S: core::fmt::Debug, B> core::fmt::Debug for Throttled<S, B> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Throttled")
            .field("inner", &self.inner)
            .field("chunk", &self.chunk)
            .field("waiting_to_read", &self.read.wait.is_some())
            .field("waiting_to_write", &self.write.wait.is_some())
            .finish_non_exhaustive()
    }
}

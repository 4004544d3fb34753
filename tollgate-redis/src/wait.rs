//! [`RedisBucket`]'s waits, over the core's wait seam ([`tollgate::wait`]): a line in this
//! process ([`RemoteLine`](tollgate::wait::RemoteLine)), a take that is a round trip
//! ([`TakeLater`]), a take the caller does not act on given back through [`CancelOnDrop`], and
//! [`Jitter`] after a wait that slept.

use core::time::Duration;
use std::sync::Arc;

use super::{Error, RedisBucket, RedisReservation};
use tollgate::wait::{CancelOnDrop, GiveBack, TakeLater};
use tollgate::{Denied, Jitter};

impl GiveBack for RedisBucket {
    type Cost = u32;
    type Taken = RedisReservation;

    /// Starts the give-back (the script's refund) as a task of the runtime, which outlives
    /// the dropped wait. With no runtime left to run it, the tokens stay taken: fewer grants,
    /// never more.
    fn give_back(&self, taken: RedisReservation) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let inner = Arc::clone(&self.inner);
        // A give-back Redis cannot answer leaves the tokens taken, as `cancel`'s does.
        drop(runtime.spawn(async move { inner.give_back(taken, true).await }));
    }
}

impl TakeLater for RedisBucket {
    type Error = Error;

    async fn take_later(&self, n: u32) -> Result<RedisReservation, Error> {
        self.inner.take(n).await.map(|(_, taken)| taken)
    }
}

impl RedisBucket {
    /// Takes `n` tokens, waiting for them as long as it takes; returns the time waited.
    ///
    /// The callers of a bucket (and its clones) wait in one line in this process, in the
    /// order they called, and only the head asks Redis, with a call like
    /// [`try_acquire`](Self::try_acquire): when its estimate from Redis's last answer says its
    /// tokens are due, and again after the `retry_after` Redis answers if another process took
    /// them first. A caller arriving with nobody in line asks at once. Each call the head makes
    /// is decided by the fault policy if Redis cannot answer: `FailClosed` ends the wait with
    /// [`Error::Unavailable`], `FailOpen` grants, `Fallback` takes from the local bucket or
    /// sleeps for its `retry_after` and asks Redis again. While Redis gives no answer, the
    /// waiters ask at once rather than in turn, so that a frozen server costs each of them one
    /// timeout, not one per waiter ahead. `n` above the burst fails at once
    /// with [`Denied::ExceedsCapacity`]; `n = 0` completes at once.
    ///
    /// **Cancel-safe, and giving up costs nothing.** Nothing is taken before the tokens are
    /// due, so a future dropped while it waits (`tokio::time::timeout`, `select!`, an aborted
    /// task) leaves the bucket as if it had never queued, and the next in line moves up.
    /// A future dropped during the head's round trip takes nothing if Redis runs the call after
    /// half its timeout; otherwise what it took is given back when its answer arrives (see the
    /// crate's *Faults*), never granted twice. A future dropped during its [`Jitter`] gives its take back, less what the burst
    /// cap would have cut since (a call to Redis started on the runtime as it drops).
    ///
    /// **Jitter.** A wait that slept (in line, or for Redis's `retry_after`) then sleeps the
    /// bucket's [`jitter`](Self::jitter) holding its tokens, as every wait of the crate does,
    /// so that waiters of many processes woken by the same refill do not all call at once. A
    /// caller served at once gets none. Set it with [`Builder::jitter`](super::Builder::jitter).
    ///
    /// The line is per process and per bucket value: processes sharing a key (and separate
    /// `RedisBucket`s built for one key in one process) do not share a line, and their heads
    /// are served in the order Redis receives their calls. Tokens go to whoever asks first
    /// once they have accrued, so across processes there is no FIFO and a long wait has no
    /// priority; use [`reserve`](Self::reserve) for a place in Redis's own order.
    pub async fn acquire(&self, n: u32) -> Result<Duration, Error> {
        self.acquire_timeout(n, Duration::MAX).await
    }

    /// Like [`acquire`](Self::acquire), but gives up, having taken nothing, if the tokens are
    /// not taken within `timeout`: [`Denied::Insufficient`] says how much longer it would have
    /// waited, by this process's estimate. It fails at once when the estimate (the tokens of
    /// everyone in line ahead, then its own, from Redis's last answer) or, at the head, Redis's
    /// answer already exceeds `timeout`. The jitter may add to `timeout`.
    pub async fn acquire_timeout(&self, n: u32, timeout: Duration) -> Result<Duration, Error> {
        let began = tokio::time::Instant::now();
        let inner = &*self.inner;
        let l = &inner.layout;
        if n as u64 > l.burst {
            return Err(Error::by_redis(Denied::ExceedsCapacity { burst: l.burst }));
        }
        if n == 0 {
            return Ok(Duration::ZERO);
        }
        let cost = l.cost(n);
        let deadline = began.checked_add(timeout);
        let left = || deadline.map(|at| at.saturating_duration_since(tokio::time::Instant::now()));
        let (place, ahead) = inner.line.join(cost);
        if ahead > 0 && !inner.line.in_outage() {
            let estimate = inner.due_in(ahead.saturating_add(cost));
            if estimate > timeout {
                return Err(Error::by_redis(Denied::insufficient(estimate - timeout)));
            }
        }
        // Whether to wait for the estimate before asking: not for a caller that found nobody
        // in line, nor after Redis's own `retry_after`.
        let mut estimate_first = ahead > 0;
        // Whether the wait slept (in line, for the estimate, or for Redis's `retry_after`): a
        // caller served at once gets no jitter, as in every wait.
        let mut slept = ahead > 0;
        loop {
            if !place.until_head(deadline).await {
                let estimate = inner.due_in(place.ahead_units().saturating_add(cost));
                return Err(Error::by_redis(Denied::insufficient(estimate)));
            }
            if core::mem::take(&mut estimate_first) && place.is_head() && !inner.line.in_outage() {
                // At the head: ask Redis when the estimate says the tokens are there.
                let due_in = inner.due_in(cost);
                if let Some(left) = left() {
                    if due_in > left {
                        return Err(Error::by_redis(Denied::insufficient(due_in - left)));
                    }
                }
                if !due_in.is_zero() {
                    tokio::time::sleep(due_in).await;
                }
            }
            let error = match self.take_later(n).await {
                Ok(taken) => {
                    drop(place); // the next in line is the head
                    let guard = CancelOnDrop::new(self, taken);
                    let waited = if slept {
                        began.elapsed()
                    } else {
                        Duration::ZERO
                    };
                    let jitter = inner.jitter.after(waited);
                    if !jitter.is_zero() {
                        tokio::time::sleep(jitter).await;
                    }
                    guard.keep();
                    return Ok(began.elapsed());
                }
                Err(error) => error,
            };
            let (retry_after, source) = match error {
                Error::Denied {
                    denied: Denied::Insufficient { retry_after },
                    source,
                } => (retry_after, source),
                error => return Err(error),
            };
            if let Some(left) = left() {
                if retry_after.get() > left {
                    return Err(Error::Denied {
                        denied: Denied::insufficient(retry_after.get() - left),
                        source,
                    });
                }
            }
            // (A zero sleep would still wait for the timer's next millisecond.)
            tokio::time::sleep(retry_after.get().max(Duration::from_micros(1))).await;
            slept = true;
        }
    }

    /// The jitter a wait sleeps after it slept, holding its tokens: [`Jitter::none`] unless
    /// [`Builder::jitter`](super::Builder::jitter) set one.
    pub fn jitter(&self) -> &Jitter {
        &self.inner.jitter
    }
}

//! A timer for the last stretch of an async wait, finer than tokio's: one process-wide thread
//! that parks until the earliest deadline it holds and wakes the tasks whose deadlines passed.
//!
//! tokio's timer counts whole milliseconds: it rounds a deadline up to the next millisecond, and
//! its driver parks in whole milliseconds too, so a sleep can end up to two milliseconds late.
//! `thread::park_timeout` ends within the kernel's timer slack (50 µs for an ordinary thread on
//! Linux) and a wake-up's latency, tens of microseconds. A wait whose burst cannot hold a late
//! wake-up's time sleeps its last two milliseconds here instead, so that a caller at one token a
//! millisecond is back before its next token is due; the thread costs a wake-up per sleep, not a
//! spinning core. Time on this timer is real time: a wait under tokio's paused clock never uses
//! it.
//!
//! A sleep that is dropped leaves its entry until the deadline passes (at most the last stretch,
//! two milliseconds); the thread then wakes a waker nobody waits on, which does nothing.

use core::cmp::Ordering;
use core::future::Future;
use core::pin::Pin;
use core::task::{Context, Poll, Waker};
use std::collections::BinaryHeap;
use std::sync::{Mutex, OnceLock};
use std::thread::{self, Thread};
use std::time::Instant;
use std::vec::Vec;

/// One sleeping task: woken once `at` has passed.
struct Entry {
    at: Instant,
    /// Breaks ties in the order of registration.
    seq: u64,
    waker: Waker,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Entry {}

impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Entry {
    /// Reversed: `BinaryHeap` is a max-heap, and the earliest deadline must come first.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

/// The deadlines, earliest first, and the count that orders equal ones.
struct Timers {
    heap: BinaryHeap<Entry>,
    next_seq: u64,
}

static TIMERS: Mutex<Timers> = Mutex::new(Timers {
    heap: BinaryHeap::new(),
    next_seq: 0,
});

/// The timer thread, started at the first use; `None` if it could not be started.
static THREAD: OnceLock<Option<Thread>> = OnceLock::new();

fn timers() -> std::sync::MutexGuard<'static, Timers> {
    // Nothing under the lock can panic but an allocation failure; if one did, the heap is
    // still whole: carry on with it.
    TIMERS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The timer thread, started if it is not yet; `None` where no thread can be started.
fn thread() -> Option<&'static Thread> {
    THREAD
        .get_or_init(|| {
            thread::Builder::new()
                .name("tollgate-timer".into())
                .spawn(run)
                .ok()
                .map(|handle| handle.thread().clone())
        })
        .as_ref()
}

/// Whether the precise timer can be used: its thread runs (it is started here if need be).
pub(crate) fn available() -> bool {
    thread().is_some()
}

/// The thread: wakes what is due, outside the lock, then parks until the next deadline (or
/// until a sooner one is registered, which unparks it).
fn run() {
    let mut due: Vec<Waker> = Vec::new();
    loop {
        let next = {
            let mut timers = timers();
            let now = Instant::now();
            while timers.heap.peek().is_some_and(|entry| entry.at <= now) {
                if let Some(entry) = timers.heap.pop() {
                    due.push(entry.waker);
                }
            }
            timers.heap.peek().map(|entry| entry.at)
        };
        for waker in due.drain(..) {
            waker.wake();
        }
        match next {
            Some(at) => thread::park_timeout(at.saturating_duration_since(Instant::now())),
            None => thread::park(),
        }
    }
}

/// Wakes `waker` once `at` has passed. `false` if there is no timer thread.
fn register(at: Instant, waker: Waker) -> bool {
    let Some(thread) = thread() else {
        return false;
    };
    let earliest = {
        let mut timers = timers();
        let earliest = timers.heap.peek().map_or(true, |first| at < first.at);
        let seq = timers.next_seq;
        timers.next_seq = seq.wrapping_add(1);
        timers.heap.push(Entry { at, seq, waker });
        earliest
    };
    // The thread parks until the earliest deadline it saw: a sooner one must wake it.
    if earliest {
        thread.unpark();
    }
    true
}

/// A sleep until an instant of real time on the precise timer.
#[derive(Debug)]
pub(crate) struct PreciseSleep {
    at: Instant,
    /// The waker registered for `at`, if any.
    registered: Option<Waker>,
}

impl PreciseSleep {
    pub(crate) fn new(at: Instant) -> Self {
        Self {
            at,
            registered: None,
        }
    }

    /// Sleeps until `at` instead.
    pub(crate) fn reset(&mut self, at: Instant) {
        if at != self.at {
            self.at = at;
            self.registered = None;
        }
    }
}

impl Future for PreciseSleep {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        if Instant::now() >= this.at {
            return Poll::Ready(());
        }
        let known = this
            .registered
            .as_ref()
            .is_some_and(|waker| waker.will_wake(cx.waker()));
        if !known {
            if !register(this.at, cx.waker().clone()) {
                // No thread: nothing would wake the task, so look again at once. Callers
                // check `available` first, so this is only a fallback that cannot hang.
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            this.registered = Some(cx.waker().clone());
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::boxed::Box;
    use std::sync::Arc;
    use std::task::Wake;
    use std::time::Duration;

    struct Unpark(Thread);

    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }

    #[test]
    fn sleeps_end_after_their_deadline_in_any_order_of_registration() {
        assert!(available());
        let waker = Waker::from(Arc::new(Unpark(thread::current())));
        let start = Instant::now();
        // Registered latest first: each still ends at or after its own deadline.
        let deadlines = [3u64, 1, 2].map(|ms| start + Duration::from_millis(ms));
        let mut sleeps = deadlines.map(|at| Box::pin(PreciseSleep::new(at)));
        let mut cx = Context::from_waker(&waker);
        let mut ended = [None; 3];
        while ended.iter().any(Option::is_none) {
            for (i, sleep) in sleeps.iter_mut().enumerate() {
                if ended[i].is_none() && sleep.as_mut().poll(&mut cx).is_ready() {
                    ended[i] = Some(Instant::now());
                }
            }
            thread::park_timeout(Duration::from_millis(50));
        }
        for (at, end) in deadlines.into_iter().zip(ended) {
            let end = end.unwrap_or(start);
            assert!(end >= at, "ended before its deadline");
            // Generous above: a loaded machine delays the wake-up, never brings it forward.
            assert!(end < at + Duration::from_millis(200));
        }
    }
}

//! The line of a remote bucket's waiters in this process: callers wait in arrival order, and
//! only the head asks the server to take, when its tokens are due, so a waiter that gives up has
//! taken nothing.
//!
//! It is the local waits' rule ([`crate::wait`]) with an asynchronous take: the head cannot
//! hold a lock across a round trip, so the line only says who the head is and what the server
//! last reported; the head makes its calls with no lock held. Nothing here is shared with other
//! processes: each process's head competes with theirs at the server, first come first served.
//!
//! While the server gives the bucket no answer (an outage its fault policy decides), the turns
//! are suspended: every waiter asks at once, so that a frozen server costs each one timeout
//! rather than one per waiter ahead. The first answer restores them.

use core::future::{poll_fn, Future};
use core::pin::pin;
use core::task::{Poll, Waker};
use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::vec::Vec;

use tokio::time::{sleep_until, Instant};

/// The waiters of one remote bucket (and its clones) in this process, first come first: see
/// [the module](crate::wait) for how a backend uses it.
///
/// ```
/// use tollgate::wait::RemoteLine;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let line = RemoteLine::default();
/// let (first, ahead) = line.join(3); // three units: nobody ahead, the head at once
/// assert_eq!(ahead, 0);
/// let (second, ahead) = line.join(1);
/// assert_eq!((ahead, second.is_head()), (3, false));
/// drop(first); // served (or gave up): the next is the head, woken once
/// assert!(second.until_head(None).await);
/// # }
/// ```
#[derive(Default)]
pub struct RemoteLine {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Live waiters only: one that leaves is removed at once. Sorted by id.
    entries: VecDeque<Entry>,
    next_id: u64,
    /// The level in units that the server last reported to this bucket, and when that was seen.
    last_level: Option<(Instant, i128)>,
    /// The bucket's last call got no answer from the server: the fault policy decides, and
    /// waiters need not take turns to ask (see [`RemoteLine::saw_outage`]).
    outage: bool,
}

struct Entry {
    id: u64,
    /// What the waiter will take, in the layout's units.
    units: u64,
    /// Woken when the waiter becomes the head.
    waker: Option<Waker>,
}

/// A waiter's place in a [`RemoteLine`]. Dropping it leaves the line, and wakes the next waiter
/// if this one was the head.
pub struct RemotePlace<'a> {
    line: &'a RemoteLine,
    id: u64,
}

impl RemoteLine {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Nothing under the lock can panic; if something did, the line is still whole.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Joins the back of the line for `units` (the backend's own measure of a request); also
    /// returns the units of the waiters ahead (zero: it is the head at once).
    pub fn join(&self, units: u64) -> (RemotePlace<'_>, u64) {
        let mut state = self.lock();
        let ahead = state
            .entries
            .iter()
            .map(|e| e.units)
            .fold(0, u64::saturating_add);
        let id = state.next_id;
        state.next_id += 1;
        state.entries.push_back(Entry {
            id,
            units,
            waker: None,
        });
        (RemotePlace { line: self, id }, ahead)
    }

    /// Records the level (in the backend's units) the server reported just now.
    pub fn saw_level(&self, level: i128) {
        self.lock().last_level = Some((Instant::now(), level));
    }

    /// Records whether the bucket's last call got an answer from the server. While it gets none,
    /// every waiter asks at once, as if it headed the line: each call then waits out its
    /// timeout before the fault policy decides, and one at a time the line would be decided
    /// once per timeout. A call given up meanwhile takes nothing if the server runs it late (the
    /// backend's own deadline). The first answer restores the turns.
    pub fn saw_outage(&self, outage: bool) {
        let wake: Vec<Waker> = {
            let mut state = self.lock();
            let began = outage && !state.outage;
            state.outage = outage;
            if began {
                state
                    .entries
                    .iter_mut()
                    .filter_map(|e| e.waker.take())
                    .collect()
            } else {
                Vec::new()
            }
        };
        for waker in wake {
            waker.wake();
        }
    }

    /// Whether the bucket's last call got no answer from the server.
    pub fn in_outage(&self) -> bool {
        self.lock().outage
    }

    /// The level the server last reported, and when it was seen.
    pub fn last_level(&self) -> Option<(Instant, i128)> {
        self.lock().last_level
    }
}

impl RemotePlace<'_> {
    /// The units of the waiters ahead of this one.
    pub fn ahead_units(&self) -> u64 {
        self.line
            .lock()
            .entries
            .iter()
            .take_while(|e| e.id < self.id)
            .map(|e| e.units)
            .fold(0, u64::saturating_add)
    }

    /// Whether this waiter heads the line.
    pub fn is_head(&self) -> bool {
        self.line
            .lock()
            .entries
            .front()
            .is_some_and(|e| e.id == self.id)
    }

    /// Waits until this waiter heads the line or the server is out (`true`), or until
    /// `deadline` (`false`). Woken once, by the head that leaves before it (or when an outage
    /// begins).
    pub async fn until_head(&self, deadline: Option<Instant>) -> bool {
        let mut timer = pin!(deadline.map(sleep_until));
        poll_fn(|cx| {
            {
                let mut state = self.line.lock();
                let Some(entry) = state.entries.front_mut() else {
                    return Poll::Ready(true); // unreachable while this place lives
                };
                if entry.id == self.id || state.outage {
                    return Poll::Ready(true);
                }
                if let Some(entry) = state.entries.iter_mut().find(|e| e.id == self.id) {
                    match &entry.waker {
                        Some(known) if known.will_wake(cx.waker()) => {}
                        _ => entry.waker = Some(cx.waker().clone()),
                    }
                }
            }
            match timer.as_mut().as_pin_mut().map(|timer| timer.poll(cx)) {
                Some(Poll::Ready(())) => Poll::Ready(false),
                _ => Poll::Pending,
            }
        })
        .await
    }
}

impl Drop for RemotePlace<'_> {
    fn drop(&mut self) {
        let wake = {
            let mut state = self.line.lock();
            let was_head = state.entries.front().is_some_and(|e| e.id == self.id);
            if let Ok(at) = state.entries.binary_search_by_key(&self.id, |e| e.id) {
                state.entries.remove(at);
            }
            if was_head {
                state.entries.front_mut().and_then(|head| head.waker.take())
            } else {
                None
            }
        };
        // Woken with the lock released, so that no waker runs under it.
        if let Some(waker) = wake {
            waker.wake();
        }
    }
}

#[cfg(test)]
mod tests {
    use core::task::{Context, Waker};
    use std::boxed::Box;
    use std::future::Future;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::Wake;

    use super::RemoteLine;

    /// Counts its wakes.
    #[derive(Default)]
    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn wakes(count: &Count) -> usize {
        count.0.load(Ordering::Relaxed)
    }

    /// Polls `place.until_head(None)` once with `waker`: whether it heads the line now.
    fn heads(place: &super::RemotePlace<'_>, waker: &Waker) -> bool {
        let mut future = Box::pin(place.until_head(None));
        future
            .as_mut()
            .poll(&mut Context::from_waker(waker))
            .is_ready()
    }

    /// First come first served; a waiter that leaves from the middle wakes nobody, the head
    /// that leaves wakes the next one once; what is ahead counts live waiters only.
    #[test]
    fn the_head_that_leaves_wakes_the_next_once() {
        let line = RemoteLine::default();
        let (a, ahead_a) = line.join(1);
        let (b, ahead_b) = line.join(2);
        let (c, ahead_c) = line.join(4);
        assert_eq!((ahead_a, ahead_b, ahead_c), (0, 1, 3));
        let (wake_b, wake_c) = (Arc::new(Count::default()), Arc::new(Count::default()));
        let (waker_b, waker_c) = (Waker::from(wake_b.clone()), Waker::from(wake_c.clone()));
        assert!(heads(&a, &Waker::from(Arc::new(Count::default()))));
        assert!(!heads(&b, &waker_b));
        assert!(!heads(&c, &waker_c));
        drop(b); // gives up from the middle
        assert_eq!((wakes(&wake_b), wakes(&wake_c)), (0, 0));
        assert_eq!(c.ahead_units(), 1);
        drop(a); // served
        assert_eq!(wakes(&wake_c), 1);
        assert!(heads(&c, &waker_c));
        assert_eq!(c.ahead_units(), 0);
    }

    /// An outage wakes every waiter, and each may ask at once; an answer restores the turns.
    #[test]
    fn an_outage_suspends_the_turns() {
        let line = RemoteLine::default();
        let (_a, _) = line.join(1);
        let (b, _) = line.join(1);
        let wake_b = Arc::new(Count::default());
        let waker_b = Waker::from(wake_b.clone());
        assert!(!heads(&b, &waker_b));
        line.saw_outage(true);
        assert_eq!(wakes(&wake_b), 1);
        assert!(heads(&b, &waker_b));
        line.saw_outage(true); // still out: no second wake
        assert_eq!(wakes(&wake_b), 1);
        line.saw_outage(false);
        assert!(!heads(&b, &waker_b));
    }
}

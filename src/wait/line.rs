//! The waiters' line without a heap, for the async waits on microcontrollers (`embassy-time`,
//! `embedded-hal-async`): [`LINE_CAPACITY`] places in one `static`, under a critical section
//! held only to look, join, take as the head or leave, never across an `.await`.
//!
//! Every limit's waiters share the places; each knows its limit by a key (its address) and its
//! order by a ticket. The head of a limit's line is its waiter with the lowest ticket. Each
//! place keeps its waiter's *estimate*: the instant its limit will hold the tokens of everyone
//! ahead and its own. A waiter behind others sleeps until its estimate on its own timer and,
//! without give-ups, is then the head with its tokens due: one wake. A waiter that gives up
//! marks the places behind it *stale* (their estimates are now too late); the head that leaves
//! wakes the next waiter only when it is stale or has no timer of its own.

use core::cell::RefCell;
use core::future::Future;
use core::pin::Pin;
use core::task::{Context, Poll, Waker};

use critical_section::Mutex;

/// How many waiters, over every limit, hold a place in line at once. A waiter that finds no
/// place waits outside the line, unordered among those outside, but never taking while anyone
/// waits in its limit's line (the waits' docs say what that costs).
pub const LINE_CAPACITY: usize = 16;

/// One place: free while `key` is 0.
pub(crate) struct Place {
    key: usize,
    ticket: u32,
    /// The instant, on the limit's clock, its tokens are estimated to fall due.
    pub(crate) due: u64,
    waker: Option<Waker>,
    /// Its own timer fires in time for `due`: the head before it need not wake it.
    pub(crate) timer: bool,
    /// Someone ahead gave up after `due` was estimated: it is too late.
    pub(crate) stale: bool,
    /// The head before it left and woke it.
    woken: bool,
    /// Served ahead of its tokens' instant (or behind such a waiter): holds its place until it
    /// returns, so that nobody behind it returns first. Only the waiters behind the holders
    /// wait for tokens.
    holding: bool,
    /// A holder back from its sleep, waiting for the holders ahead of it to return.
    releasing: bool,
}

impl Place {
    const FREE: Place = Place {
        key: 0,
        ticket: 0,
        due: 0,
        waker: None,
        timer: false,
        stale: false,
        woken: false,
        holding: false,
        releasing: false,
    };
}

// The docs state a place's RAM on a 32-bit target.
#[cfg(target_pointer_width = "32")]
const _: () = assert!(core::mem::size_of::<Place>() == 32);

/// Every place, and what the waits have learnt of their timers.
pub(crate) struct Line {
    places: [Place; LINE_CAPACITY],
    next_ticket: u32,
    /// The latest any waiter's timer has woken it after the instant it asked for, in
    /// nanoseconds (saturating): how far ahead a head takes where its burst has no room for
    /// that lateness.
    late_nanos: u32,
}

static LINE: Mutex<RefCell<Line>> = Mutex::new(RefCell::new(Line {
    places: [Place::FREE; LINE_CAPACITY],
    next_ticket: 0,
    late_nanos: 0,
}));

/// Runs `f` on the line, in a critical section: keep it short (no `.await`, no waker woken).
pub(crate) fn with<R>(f: impl FnOnce(&mut Line) -> R) -> R {
    critical_section::with(|cs| f(&mut LINE.borrow_ref_mut(cs)))
}

/// `index` as a place's index: every index handed around is one already, and saying so lets
/// the compiler drop the bounds checks (and their panics) from the line's code.
fn slot(index: usize) -> usize {
    const _: () = assert!(LINE_CAPACITY.is_power_of_two());
    index % LINE_CAPACITY
}

/// Whether ticket `a` came before `b`: tickets wrap, and fewer than 2^31 are ever in line.
fn earlier(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

impl Line {
    /// Whether the waiter at `index` has no waiter of its limit ahead of it that still waits
    /// for tokens (holders ahead of it have theirs).
    pub(crate) fn heads(&self, index: usize) -> bool {
        !self.anyone_ahead(index, true)
    }

    /// Whether the waiter at `index` may return: nobody of its limit is ahead of it.
    pub(crate) fn free_to_return(&self, index: usize) -> bool {
        !self.anyone_ahead(index, false)
    }

    /// Whether a waiter of the same limit is ahead of the one at `index`; `waiting`: among the
    /// waiters still waiting for tokens only.
    fn anyone_ahead(&self, index: usize, waiting: bool) -> bool {
        let me = &self.places[slot(index)];
        self.places
            .iter()
            .any(|p| p.key == me.key && !(waiting && p.holding) && earlier(p.ticket, me.ticket))
    }

    /// Whether anyone in `key`'s line still waits for tokens.
    pub(crate) fn has_waiting(&self, key: usize) -> bool {
        self.places.iter().any(|p| p.key == key && !p.holding)
    }

    /// The waiter at `at` was served and holds its place until it returns: the next waiter
    /// of its limit that waits for tokens is the head now. Returns its waker when it must be
    /// woken: its estimate is stale, or it has no timer.
    pub(crate) fn hold(&mut self, at: &InLine) -> Option<Waker> {
        let key = {
            let me = &mut self.places[slot(at.index)];
            me.holding = true;
            me.key
        };
        self.hand_on(key)
    }

    /// The holder at `at` is back from its sleep: `true` if it may return now (then it leaves
    /// through [`leave`](Self::leave)); otherwise its waker is woken when it may.
    pub(crate) fn release(&mut self, at: &InLine) -> bool {
        if self.free_to_return(at.index) {
            return true;
        }
        self.places[slot(at.index)].releasing = true;
        false
    }

    /// The head of `key`'s line (its first waiter still waiting for tokens), to be woken if its
    /// estimate is stale or it has no timer.
    fn hand_on(&mut self, key: usize) -> Option<Waker> {
        let head = &mut self.places[slot(self.end_of(key, true, true)?)];
        if head.timer && !head.stale {
            return None;
        }
        head.woken = true;
        head.waker.take()
    }

    /// The first (`first`) or last waiter of `key`'s line, if anyone waits on it; `waiting`:
    /// among the waiters still waiting for tokens only.
    fn end_of(&self, key: usize, first: bool, waiting: bool) -> Option<usize> {
        let mut end: Option<usize> = None;
        for (i, p) in self.places.iter().enumerate() {
            if waiting && p.holding {
                continue;
            }
            let beyond = |h: usize| {
                let (a, b) = (p.ticket, self.places[slot(h)].ticket);
                if first {
                    earlier(a, b)
                } else {
                    earlier(b, a)
                }
            };
            if p.key == key && end.map_or(true, beyond) {
                end = Some(i);
            }
        }
        end
    }

    /// The last waiter of `key`'s line, if anyone waits on it.
    pub(crate) fn last_of(&self, key: usize) -> Option<&Place> {
        self.end_of(key, false, false)
            .map(|i| &self.places[slot(i)])
    }

    /// Takes a free place at the back of `key`'s line (`key`: never 0), estimated due at `due`;
    /// `None` when every place is taken.
    pub(crate) fn join(&mut self, key: usize, due: u64, stale: bool) -> Option<InLine> {
        let index = self.places.iter().position(|p| p.key == 0)?;
        let ticket = self.next_ticket;
        self.next_ticket = ticket.wrapping_add(1);
        self.places[slot(index)] = Place {
            key,
            ticket,
            due,
            waker: None,
            timer: false,
            stale,
            woken: false,
            holding: false,
            releasing: false,
        };
        Some(InLine { index })
    }

    /// The place of `at`.
    pub(crate) fn place(&mut self, at: &InLine) -> &mut Place {
        &mut self.places[slot(at.index)]
    }

    /// Takes `at` out of the line; `served` when it leaves with its tokens. A waiter that gives
    /// up makes the estimates of those behind it stale. Returns the waker to wake: of the
    /// holder behind it, back from its sleep, that may now return; or of the new head, when it
    /// must be woken (its estimate is stale, or it has no timer).
    pub(crate) fn leave(&mut self, at: InLine, served: bool) -> Option<Waker> {
        let index = at.index;
        core::mem::forget(at);
        let (key, ticket, holding) = (
            self.places[slot(index)].key,
            self.places[slot(index)].ticket,
            self.places[slot(index)].holding,
        );
        let was_head = !holding && self.heads(index);
        self.places[slot(index)] = Place::FREE;
        if !served {
            for p in self.places.iter_mut() {
                if p.key == key && earlier(ticket, p.ticket) {
                    p.stale = true;
                }
            }
        }
        if let Some(first) = self.end_of(key, true, false) {
            let first = &mut self.places[slot(first)];
            if first.holding && first.releasing {
                first.woken = true;
                return first.waker.take();
            }
        }
        if !was_head {
            return None;
        }
        self.hand_on(key)
    }

    /// Whether anyone waits in `key`'s line.
    pub(crate) fn has(&self, key: usize) -> bool {
        self.places.iter().any(|p| p.key == key)
    }

    /// The lateness learnt so far (see [`learn_lateness`](Self::learn_lateness)), in
    /// nanoseconds.
    pub(crate) fn late_nanos(&self) -> u32 {
        self.late_nanos
    }

    /// A timer woke its waiter `nanos` after the instant asked for: the largest such lateness
    /// is kept. Never forgotten: a lateness that varies from wake to wake (a periodic tick
    /// against instants between ticks) needs its largest, and a figure that forgets dips below
    /// it and loses what the cap cuts. A one-off stall kept costs wakes (heads take that far
    /// ahead, and wake twice), never tokens.
    pub(crate) fn learn_lateness(&mut self, nanos: u32) {
        self.late_nanos = self.late_nanos.max(nanos);
    }
}

/// A place in line. Leave it through [`Line::leave`]; dropping it (a future dropped while it
/// waits) leaves as a waiter that gave up, waking the next waiter if it was the head.
pub(crate) struct InLine {
    index: usize,
}

impl InLine {
    /// Its place's index in the line.
    pub(crate) fn index(&self) -> usize {
        self.index
    }

    /// Resolves once the head before this waiter leaves and wakes it (see [`Line::leave`]).
    pub(crate) fn turn(&self) -> Turn<'_> {
        Turn { place: self }
    }
}

impl Drop for InLine {
    fn drop(&mut self) {
        let next = with(|line| line.leave(InLine { index: self.index }, false));
        // Woken outside the critical section: a waker may run executor code.
        if let Some(waker) = next {
            waker.wake();
        }
    }
}

/// The future of [`InLine::turn`].
pub(crate) struct Turn<'a> {
    place: &'a InLine,
}

impl Future for Turn<'_> {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        with(|line| {
            let place = line.place(self.place);
            if place.woken {
                place.woken = false;
                return Poll::Ready(());
            }
            match &place.waker {
                Some(waker) if waker.will_wake(cx.waker()) => {}
                _ => place.waker = Some(cx.waker().clone()),
            }
            Poll::Pending
        })
    }
}

/// Waiters in line now, over every limit: for tests and the firmware's report.
pub fn waiters_in_line() -> usize {
    with(|line| line.places.iter().filter(|p| p.key != 0).count())
}

/// The latest the waits have seen a timer wake a waiter after the instant it asked for (the
/// driver's alarm granularity and the executor's delay in polling): where a bucket's burst has
/// no room for that lateness beyond a waiter's tokens, the head of its line takes that far
/// ahead of its tokens' instant, so that a late timer never moves the bucket's schedule. Zero
/// until a timer has woken late.
pub fn timer_lateness() -> core::time::Duration {
    core::time::Duration::from_nanos(with(|line| line.late_nanos).into())
}

/// Forgets the lateness learnt so far: for tests that start from a timer that was never late.
#[doc(hidden)]
pub fn forget_timer_lateness() {
    with(|line| line.late_nanos = 0);
}

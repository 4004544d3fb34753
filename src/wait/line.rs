//! The waiters' line without a heap, for the async waits on microcontrollers (`embassy-time`,
//! `embedded-hal-async`): [`LINE_CAPACITY`] places in one `static`, under a critical section
//! held only to join, look, park or leave, never across an `.await`.
//!
//! Every limit's waiters share the places; each knows its limit by address (a waiter borrows its
//! limit, so the address cannot be reused while it waits) and its order by a ticket. The head of
//! a limit's line is its waiter with the lowest ticket. Only the head takes; the others are
//! parked with their waker and woken once, by the head that leaves before them.

use core::cell::RefCell;
use core::future::Future;
use core::pin::Pin;
use core::task::{Context, Poll, Waker};

use critical_section::Mutex;

/// How many waiters, over every limit, hold a place in line at once. A waiter that finds no
/// place waits outside the line, unordered (the waits' docs say what that costs).
pub const LINE_CAPACITY: usize = 16;

/// One place: free while `key` is 0.
struct Place {
    key: usize,
    ticket: u32,
    waker: Option<Waker>,
}

impl Place {
    const FREE: Place = Place {
        key: 0,
        ticket: 0,
        waker: None,
    };
}

struct Line {
    places: [Place; LINE_CAPACITY],
    next_ticket: u32,
}

static LINE: Mutex<RefCell<Line>> = Mutex::new(RefCell::new(Line {
    places: [Place::FREE; LINE_CAPACITY],
    next_ticket: 0,
}));

/// Whether ticket `a` came before `b`: tickets wrap, and fewer than 2^31 are ever in line.
fn earlier(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

impl Line {
    /// Whether the waiter at `index` has no waiter of its limit ahead of it.
    fn heads(&self, index: usize) -> bool {
        let me = &self.places[index];
        !self
            .places
            .iter()
            .any(|p| p.key == me.key && earlier(p.ticket, me.ticket))
    }

    /// The index of the head of `key`'s line, if anyone waits on it.
    fn head_of(&self, key: usize) -> Option<usize> {
        let mut head: Option<usize> = None;
        for (i, p) in self.places.iter().enumerate() {
            if p.key == key && head.map_or(true, |h| earlier(p.ticket, self.places[h].ticket)) {
                head = Some(i);
            }
        }
        head
    }
}

/// Where a caller stands after [`join`].
pub(crate) enum Joined {
    /// In line, at `InLine::heads` or behind others.
    InLine(InLine),
    /// Every place is taken: the caller waits outside the line, trying when its tokens are due
    /// and taking nothing before, so it keeps the rule that giving up is free, but not arrival
    /// order (it may take tokens before those in line whose turn it is).
    Outside,
}

/// A place in line. Dropping it leaves the line and wakes the next waiter of its limit, if it
/// was the head.
pub(crate) struct InLine {
    index: usize,
}

/// Joins `key`'s line (`key`: the limit's address, never 0).
pub(crate) fn join(key: usize) -> Joined {
    critical_section::with(|cs| {
        let mut line = LINE.borrow_ref_mut(cs);
        let Some(index) = line.places.iter().position(|p| p.key == 0) else {
            return Joined::Outside;
        };
        let ticket = line.next_ticket;
        line.next_ticket = ticket.wrapping_add(1);
        line.places[index] = Place {
            key,
            ticket,
            waker: None,
        };
        Joined::InLine(InLine { index })
    })
}

impl InLine {
    /// Whether this waiter heads its limit's line now.
    pub(crate) fn heads(&self) -> bool {
        critical_section::with(|cs| LINE.borrow_ref(cs).heads(self.index))
    }

    /// Resolves when this waiter heads its line: parks its waker until the head before it
    /// leaves and wakes it, once.
    pub(crate) fn turn(&self) -> Turn<'_> {
        Turn { place: self }
    }
}

impl Drop for InLine {
    fn drop(&mut self) {
        let next = critical_section::with(|cs| {
            let mut line = LINE.borrow_ref_mut(cs);
            let key = line.places[self.index].key;
            let was_head = line.heads(self.index);
            line.places[self.index] = Place::FREE;
            if was_head {
                let head = line.head_of(key)?;
                line.places[head].waker.take()
            } else {
                None
            }
        });
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
        let index = self.place.index;
        critical_section::with(|cs| {
            let mut line = LINE.borrow_ref_mut(cs);
            if line.heads(index) {
                line.places[index].waker = None;
                Poll::Ready(())
            } else {
                let slot = &mut line.places[index].waker;
                match slot {
                    Some(waker) if waker.will_wake(cx.waker()) => {}
                    _ => *slot = Some(cx.waker().clone()),
                }
                Poll::Pending
            }
        })
    }
}

/// Waiters in line now, over every limit: for tests and the firmware's report.
pub fn waiters_in_line() -> usize {
    critical_section::with(|cs| {
        LINE.borrow_ref(cs)
            .places
            .iter()
            .filter(|p| p.key != 0)
            .count()
    })
}

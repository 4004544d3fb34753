//! A clock whose reading can be held: a thread reads it, then waits while the test does what
//! it likes, as a thread descheduled (or waiting on a lock) between reading the clock and
//! using the reading would.
//!
//! A test in `tests/` takes it with `#[path = "keyed/gate.rs"] mod gate;`.

#![allow(dead_code)] // each test uses its own part

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::thread::{Scope, ScopedJoinHandle};
use std::time::Duration;

use tollgate::Clock;

/// Nanoseconds the test moves by hand, as `ManualClock`; a thread's first reading can be held.
#[derive(Debug, Default)]
pub struct GateClock {
    ns: AtomicU64,
}

thread_local! {
    /// On a held thread: where to say "read", and where the word to go on comes from.
    static GATE: RefCell<Option<(Sender<()>, Receiver<()>)>> = const { RefCell::new(None) };
    /// The thread's last reading.
    static LAST: Cell<u64> = const { Cell::new(0) };
}

impl GateClock {
    pub const fn new() -> Self {
        Self {
            ns: AtomicU64::new(0),
        }
    }

    pub fn advance(&self, by: Duration) {
        self.ns.fetch_add(by.as_nanos() as u64, Ordering::SeqCst);
    }

    pub fn now_ns(&self) -> u64 {
        self.ns.load(Ordering::SeqCst)
    }
}

impl Clock for GateClock {
    const TICKS_PER_SECOND: u64 = 1_000_000_000;

    fn now(&self) -> u64 {
        let ns = self.ns.load(Ordering::SeqCst);
        LAST.set(ns);
        // A held thread stops here, its reading taken, until the test lets it go.
        if let Some((read, go)) = GATE.with(|gate| gate.borrow_mut().take()) {
            let _ = read.send(());
            let _ = go.recv();
        }
        ns
    }
}

/// A call running on its own thread, held just after its first reading of a [`GateClock`].
pub struct Held<'scope, T> {
    go: Sender<()>,
    thread: ScopedJoinHandle<'scope, (T, u64)>,
}

/// Starts `call` on a thread of `scope` and returns once it has read the clock (or finished
/// without reading it): the call is then held, its reading taken, until
/// [`release`](Held::release).
pub fn hold<'scope, T: Send + 'scope>(
    scope: &'scope Scope<'scope, '_>,
    call: impl FnOnce() -> T + Send + 'scope,
) -> Held<'scope, T> {
    let (read_tx, read_rx) = channel();
    let (go_tx, go_rx) = channel();
    let thread = scope.spawn(move || {
        GATE.with(|gate| *gate.borrow_mut() = Some((read_tx, go_rx)));
        let result = call();
        // A call that never read the clock lets the test go on all the same.
        if let Some((read, _)) = GATE.with(|gate| gate.borrow_mut().take()) {
            let _ = read.send(());
        }
        (result, LAST.get())
    });
    read_rx
        .recv()
        .expect("the held thread read the clock or finished");
    Held { go: go_tx, thread }
}

impl<T> Held<'_, T> {
    /// Lets the call go on with the reading it took, and waits for its result and the last
    /// reading it took (the one a grant was made at: the held one, or a fresh one the call took
    /// after it).
    pub fn release(self) -> (T, u64) {
        let _ = self.go.send(());
        self.thread.join().expect("the held call panicked")
    }
}

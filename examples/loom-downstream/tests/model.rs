//! The uplink's promise under loom: two senders of the same sensor, with room for one message
//! and a half, never send half a message, and never more frames than the limits hold.
//!
//! `RUSTFLAGS="--cfg loom" cargo test --release` (passes: the promise holds in every
//! interleaving); with `--features planted-bug` the test passes only if the model panics with
//! "half a message", i.e. loom found the interleaving that breaks the racy version.
#![cfg(loom)]

use std::sync::atomic::{AtomicUsize, Ordering};

use loom::sync::Arc;
use loom::thread;
use loom_downstream::{Refused, Uplink, FRAMES};
use tollgate::ManualClock;

/// Three frames of room: one whole message, and a half that must never go out.
const ROOM: u64 = 3;

#[test]
#[cfg_attr(feature = "planted-bug", should_panic(expected = "half a message"))]
fn two_senders_never_send_half_a_message() {
    static EXECUTIONS: AtomicUsize = AtomicUsize::new(0);
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(2);
    builder.check(|| {
        let executions = EXECUTIONS.fetch_add(1, Ordering::Relaxed) + 1;
        // The clock stands still: the model is about the room there is, not its refill.
        let clock = Arc::new(ManualClock::new());
        let uplink = Arc::new(Uplink::new(clock, ROOM, ROOM).unwrap());
        let senders: Vec<_> = (0..2)
            .map(|_| {
                let uplink = uplink.clone();
                thread::spawn(move || uplink.send_pair(7))
            })
            .collect();
        let results: Vec<_> = senders.into_iter().map(|s| s.join().unwrap()).collect();
        let frames = uplink.frames();
        assert!(
            frames % FRAMES == 0 && !results.contains(&Err(Refused::HalfSent)),
            "half a message sent in execution {executions}: {frames} frames, {results:?}"
        );
        assert!(
            u64::from(frames) <= ROOM,
            "{frames} frames from {ROOM} of room"
        );
        // One of the two sends its message, whichever wins.
        assert_eq!(
            results.iter().filter(|r| r.is_ok()).count(),
            1,
            "{results:?}"
        );
    });
    println!(
        "every interleaving explored: {} executions",
        EXECUTIONS.load(Ordering::Relaxed)
    );
}

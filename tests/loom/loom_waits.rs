//! Loom models of the waiters' line: a waiter giving up while the head is served, the head
//! giving up while the next waiter looks at the line, and waiters on two buckets and on one of
//! them joining at once. Every interleaving (up to the preemption bound) must leave the bucket as
//! if the one that gave up had never queued, lose no wake-up, deadlock on no lock, take from all
//! buckets or none, and leave no place behind in the line.
//!
//! Run with `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test --release --test
//! loom_waits --target-dir target/loom`.
#![cfg(loom)]

use std::task::{Wake, Waker};
use std::time::Duration;

use loom::sync::atomic::{AtomicBool, Ordering};
use loom::thread;
use tollgate::wait_models::{line_len, ModelWaiter};
use tollgate::{Denied, ManualClock, Quota, Rate, TokenBucket};

/// One token every 10 ns on the nanosecond clock.
const RATE: Rate = Rate::per_second(100_000_000);
const T0: u64 = 1_000_000;

/// Leaked, so that waiters borrowing it can move to the models' threads (a few hundred bytes
/// per execution).
fn empty_bucket() -> &'static TokenBucket<ManualClock> {
    let quota = Quota::new(RATE).burst(1).start_empty();
    Box::leak(Box::new(
        TokenBucket::try_new(quota, ManualClock::starting_at(T0)).unwrap(),
    ))
}

/// A waker that records that it was woken.
struct Flag(AtomicBool);

impl Wake for Flag {
    fn wake(self: std::sync::Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &std::sync::Arc<Self>) {
        // Release: pairs with the Acquire below; the line's lock orders the rest.
        self.0.store(true, Ordering::Release);
    }
}

fn flag() -> (std::sync::Arc<Flag>, Waker) {
    let flag = std::sync::Arc::new(Flag(AtomicBool::new(false)));
    let waker = Waker::from(flag.clone());
    (flag, waker)
}

#[test]
fn a_waiter_giving_up_while_the_head_is_served_strands_nothing() {
    loom::model(|| {
        let bucket = empty_bucket();
        let (_, waker) = flag();
        let mut head = ModelWaiter::new([bucket], [1]).unwrap();
        assert_eq!(head.step(&waker), None, "empty: the head sleeps");
        let mut behind = ModelWaiter::new([bucket], [1]).unwrap();
        assert_eq!(behind.step(&waker), None);
        bucket.clock().advance(Duration::from_nanos(10)); // the head's token is due

        let served = {
            let waker = waker.clone();
            thread::spawn(move || head.step(&waker))
        };
        drop(behind); // gives up, racing the head's grant
        assert_eq!(served.join().unwrap(), Some(Ok(Duration::from_nanos(10))));

        assert_eq!(line_len(bucket), 0, "no place left in the line");
        // One token taken, by the head; none by the one that gave up.
        assert!(bucket.try_acquire(1).is_err());
        bucket.clock().advance(Duration::from_nanos(10));
        assert_eq!(bucket.try_acquire(1), Ok(()));
    });
}

#[test]
fn the_head_giving_up_while_the_next_looks_loses_no_wake_up() {
    loom::model(|| {
        let bucket = empty_bucket();
        let (_, head_waker) = flag();
        let (woken, waker) = flag();
        let mut head = ModelWaiter::new([bucket], [1]).unwrap();
        assert_eq!(head.step(&head_waker), None);
        let mut next = ModelWaiter::new([bucket], [1]).unwrap();
        assert_eq!(next.step(&waker), None); // its estimate: 20 ns
        bucket.clock().advance(Duration::from_nanos(10)); // one token is due

        let gives_up = thread::spawn(move || drop(head));
        let first_look = next.step(&waker);
        gives_up.join().unwrap();

        let served = match first_look {
            Some(done) => done,
            None => {
                // It looked before the head left: the head's leaving must have woken it,
                // since its own timer (20 ns) is later than its token (now).
                assert!(woken.0.load(Ordering::Acquire), "lost wake-up");
                next.step(&waker).expect("at the head with its token due")
            }
        };
        assert_eq!(served, Ok(Duration::from_nanos(10)));
        assert_eq!(line_len(bucket), 0);
        assert_eq!(
            bucket.try_acquire(1),
            Err(Denied::insufficient(Duration::from_nanos(10)))
        );
    });
}

/// Two buckets with one token each, and a frozen clock: a waiter on both and a waiter on the
/// second join and look at once, each from its own thread, then the second gives up. Whoever
/// comes first in the second bucket's line is served; the other waits without taking anything,
/// and the lines' locks (taken in shard order) never deadlock.
#[test]
fn waiters_on_two_buckets_and_on_one_take_all_or_none_without_deadlock() {
    loom::model(|| {
        let quota = Quota::new(RATE).burst(1);
        let first: &'static TokenBucket<ManualClock> = Box::leak(Box::new(
            TokenBucket::try_new(quota, ManualClock::starting_at(T0)).unwrap(),
        ));
        let second: &'static TokenBucket<ManualClock> = Box::leak(Box::new(
            TokenBucket::try_new(quota, ManualClock::starting_at(T0)).unwrap(),
        ));
        let both = thread::spawn(move || {
            let (_, waker) = flag();
            let mut both = ModelWaiter::new([first, second], [1, 1]).unwrap();
            let done = both.step(&waker);
            (done, line_len(first))
        });
        let (_, waker) = flag();
        let mut one = ModelWaiter::new([second], [1]).unwrap();
        let one_done = one.step(&waker);
        let (both_done, _) = both.join().unwrap();
        // Exactly one is served at once: the second bucket has one token.
        match (both_done, one_done) {
            (Some(Ok(_)), None) => {
                assert!(
                    first.try_acquire(1).is_err(),
                    "both buckets were taken from"
                );
            }
            (None, Some(Ok(_))) => {
                // The waiter on both took from neither.
                assert_eq!(first.try_acquire(1), Ok(()));
                // It waits in both lines; drop it to give up.
            }
            other => panic!("exactly one is served at once, not {other:?}"),
        }
        drop(one);
        assert!(second.try_acquire(1).is_err());
    });
}

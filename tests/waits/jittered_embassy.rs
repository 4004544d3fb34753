//! `Jittered`'s no-heap async waits: on embassy-time's mock driver, the jitter after the
//! tokens' instant and a future dropped during it giving its tokens back; through an
//! `embedded-hal-async` `DelayNs` on a `ManualClock`, the jitter added after a wait that slept.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use embassy_time::MockDriver;
use tollgate::wait::EmbassyWait;
use tollgate::{EmbassyClock, Jitter, Limits, ManualClock, Quota, Rate, TokenBucket};

fn ms(millis: u64) -> Duration {
    Duration::from_millis(millis)
}

fn advance(d: Duration) {
    MockDriver::get().advance(embassy_time::Duration::from_nanos(d.as_nanos() as u64));
}

/// The first draw of a jitter of `max` from `seed`.
fn first_draw(max: Duration, seed: u64) -> Duration {
    Jitter::up_to(max, seed).next()
}

/// Wakes nothing: the tests poll after each move of the clock.
struct Noop;

impl Wake for Noop {
    fn wake(self: Arc<Self>) {}
}

fn poll_once<F: Future>(future: std::pin::Pin<&mut F>) -> Poll<F::Output> {
    future.poll(&mut Context::from_waker(&Waker::from(Arc::new(Noop))))
}

#[test]
fn embassy_waits_sleep_the_jitter_holding_their_take() {
    // One test in this binary: the mock driver is process-wide.
    MockDriver::get().reset();
    let quota = Quota::new(Rate::per_second(1)).burst(1).start_empty();
    let draw = first_draw(Duration::from_secs(10), 3);
    assert!(
        draw > ms(1_000),
        "the test needs a draw over a second: {draw:?}"
    );

    // Dropped half a second into its jitter: the token taken at 1 s comes back.
    let bucket = TokenBucket::try_new(quota, EmbassyClock).unwrap();
    let jitter = Jitter::up_to(Duration::from_secs(10), 3);
    {
        let jittered = bucket.jittered(&jitter);
        let mut wait = pin!(EmbassyWait::acquire(&jittered, 1));
        assert!(poll_once(wait.as_mut()).is_pending());
        advance(ms(1_000));
        assert!(poll_once(wait.as_mut()).is_pending()); // took, and sleeps its jitter
        assert_eq!(bucket.available(), 0);
        advance(ms(500));
        assert!(poll_once(wait.as_mut()).is_pending());
    }
    // Given back: the bucket is full, as if the waiter had never come (spent, it would hold
    // half a token: 0 whole).
    assert_eq!(bucket.available(), 1);

    // Waited out: its token's instant and then its draw.
    MockDriver::get().reset();
    let bucket = TokenBucket::try_new(quota, EmbassyClock).unwrap();
    let jitter = Jitter::up_to(Duration::from_secs(10), 3);
    let jittered = bucket.jittered(&jitter);
    let mut wait = pin!(EmbassyWait::acquire_timeout(
        &jittered,
        1,
        Duration::from_secs(5)
    ));
    assert!(poll_once(wait.as_mut()).is_pending());
    advance(ms(1_000));
    assert!(poll_once(wait.as_mut()).is_pending());
    advance(draw);
    let Poll::Ready(waited) = poll_once(wait.as_mut()) else {
        panic!("the jitter is over");
    };
    let waited = waited.unwrap();
    assert!(
        waited.abs_diff(ms(1_000) + draw) <= Duration::from_micros(2),
        "{waited:?}"
    );

    // `Limits` with a jitter: the same, every part given back.
    MockDriver::get().reset();
    let fast = TokenBucket::try_new(
        Quota::new(Rate::per_second(10)).burst(1).start_empty(),
        EmbassyClock,
    )
    .unwrap();
    let slow = TokenBucket::try_new(quota, EmbassyClock).unwrap();
    let limits = Limits::new([&fast, &slow]).with_jitter(Jitter::up_to(Duration::from_secs(10), 3));
    {
        let mut wait = pin!(EmbassyWait::acquire(&limits, [1, 1]));
        assert!(poll_once(wait.as_mut()).is_pending());
        advance(ms(1_000));
        assert!(poll_once(wait.as_mut()).is_pending()); // took both, and sleeps its jitter
        assert_eq!((fast.available(), slow.available()), (0, 0));
        advance(ms(500));
        assert!(poll_once(wait.as_mut()).is_pending());
    }
    assert_eq!((fast.available(), slow.available()), (1, 1));
    let mut wait = pin!(EmbassyWait::acquire(&limits, [1, 1]));
    assert_eq!(poll_once(wait.as_mut()), Poll::Ready(Ok(Duration::ZERO))); // at once: no jitter
}

/// A delay that moves a manual clock at once.
struct Skip<'a>(&'a ManualClock);

impl embedded_hal_async::delay::DelayNs for Skip<'_> {
    async fn delay_ns(&mut self, ns: u32) {
        self.0.advance(Duration::from_nanos(ns.into()));
    }
}

#[test]
fn async_delay_waits_add_the_jitter_after_a_wait_that_slept() {
    let clock = ManualClock::new();
    let bucket = TokenBucket::try_new(
        Quota::new(Rate::per_second(4)).burst(1).start_empty(),
        &clock,
    )
    .unwrap();
    let jitter = Jitter::up_to(ms(100), 9);
    let draw = first_draw(ms(100), 9);
    let jittered = bucket.jittered(&jitter);
    let mut delay = Skip(&clock);
    let mut wait = pin!(jittered.acquire_with_async_delay(1, &mut delay));
    let Poll::Ready(waited) = poll_once(wait.as_mut()) else {
        panic!("a delay that moves the clock at once never leaves the wait pending");
    };
    assert_eq!(waited, Ok(ms(250) + draw));
    // Served at once: no jitter.
    clock.advance(ms(250));
    let mut delay = Skip(&clock);
    let mut wait = pin!(jittered.acquire_timeout_with_async_delay(1, ms(10), &mut delay));
    assert_eq!(poll_once(wait.as_mut()), Poll::Ready(Ok(Duration::ZERO)));
}

//! Blocking waits through `embedded-hal`'s `DelayNs`, with a fake delay that moves a
//! `ManualClock` and counts its calls.

#[path = "../support/mod.rs"]
mod support;
use support::ms;

use std::time::Duration;

use embedded_hal::delay::DelayNs;
use tollgate::{Clock, Denied, ManualClock, Quota, Rate, TokenBucket};

/// A delay that moves the manual clock by exactly what it is asked, and counts its calls (each
/// call is one wake-up of the waiting caller).
struct ClockDelay<'a> {
    clock: &'a ManualClock,
    calls: u32,
}

impl<'a> ClockDelay<'a> {
    fn new(clock: &'a ManualClock) -> Self {
        Self { clock, calls: 0 }
    }
    fn sleep(&mut self, by: Duration) {
        self.calls += 1;
        self.clock.advance(by);
    }
}

impl DelayNs for ClockDelay<'_> {
    fn delay_ns(&mut self, ns: u32) {
        self.sleep(Duration::from_nanos(ns.into()));
    }
    fn delay_us(&mut self, us: u32) {
        self.sleep(Duration::from_micros(us.into()));
    }
    fn delay_ms(&mut self, ms: u32) {
        self.sleep(Duration::from_millis(ms.into()));
    }
}

/// A delay that moves the manual clock in 100 ms steps and, at `interrupt_at`, lets another
/// execution context take a token, as an interrupt handler would.
struct Interrupted<'a> {
    clock: &'a ManualClock,
    bucket: &'a TokenBucket<&'a ManualClock>,
    interrupt_at: Duration,
    taken_by_interrupt: bool,
    calls: Vec<Duration>,
}

impl DelayNs for Interrupted<'_> {
    fn delay_ns(&mut self, ns: u32) {
        let asked = Duration::from_nanos(ns.into());
        self.calls.push(asked);
        let step = ms(100);
        let mut left = asked;
        while !left.is_zero() {
            let by = left.min(step);
            self.clock.advance(by);
            left -= by;
            let now = Duration::from_nanos(self.clock.now());
            if now == self.interrupt_at {
                self.taken_by_interrupt = self.bucket.try_acquire(1).is_ok();
            }
        }
    }
}

#[test]
fn two_hundred_acquisitions_at_rate_20_burst_20_take_nine_seconds_twenty_a_second() {
    let clock = ManualClock::new();
    let bucket = TokenBucket::try_new(Quota::new(Rate::per_second(20)).burst(20), &clock).unwrap();
    let mut delay = ClockDelay::new(&clock);
    let mut per_second = [0u32; 10];
    for _ in 0..200 {
        bucket.acquire_with_delay(1, &mut delay).unwrap();
        per_second[Duration::from_nanos(clock.now()).as_secs() as usize] += 1;
    }
    // The burst and the first second's refill, then the rate, then the last token at 9 s.
    assert_eq!(per_second, [39, 20, 20, 20, 20, 20, 20, 20, 20, 1]);
    // (n − burst) / rate = (200 − 20) / 20 = 9 s, and one wake-up per caller that waited.
    assert_eq!(clock.now(), 9_000_000_000);
    assert_eq!(delay.calls, 180);
}

#[test]
fn a_waiting_context_holds_its_place_and_its_schedule() {
    let clock = ManualClock::new();
    let bucket = TokenBucket::try_new(
        Quota::new(Rate::per_second(5)).burst(5).start_empty(),
        &clock,
    )
    .unwrap();
    let mut delay = Interrupted {
        clock: &clock,
        bucket: &bucket,
        interrupt_at: ms(600),
        taken_by_interrupt: false,
        calls: Vec::new(),
    };
    // Five tokens are due at 1 s and the waiting context has reserved them: an interrupt at
    // 600 ms finds the bucket owing them and takes none, and the waiter is served at 1 s, once.
    assert_eq!(bucket.acquire_with_delay(5, &mut delay), Ok(ms(1_000)));
    assert!(!delay.taken_by_interrupt);
    assert_eq!(delay.calls, [ms(1_000)]);
    assert_eq!(bucket.available(), 0);
}

#[test]
fn a_late_wake_up_loses_the_schedule_nothing() {
    // Burst 1 at 10/s, and a delay that always wakes 300 µs late: the grants stay 100 ms apart
    // on the bucket's schedule, not 100.3 ms.
    let clock = ManualClock::new();
    let bucket = TokenBucket::try_new(
        Quota::new(Rate::per_second(10)).burst(1).start_empty(),
        &clock,
    )
    .unwrap();
    let mut delay = Late(&clock);
    for k in 1..=20u64 {
        bucket.acquire_with_delay(1, &mut delay).unwrap();
        assert!(
            clock.now() <= k * 100_000_000 + 300_000,
            "grant {k} at {}",
            clock.now()
        );
    }
}

/// A delay that oversleeps by 300 µs, as a timer with coarse ticks would.
struct Late<'a>(&'a ManualClock);

impl DelayNs for Late<'_> {
    fn delay_ns(&mut self, ns: u32) {
        self.0
            .advance(Duration::from_nanos(u64::from(ns) + 300_000));
    }
}

#[test]
fn a_request_larger_than_the_burst_fails_without_delaying() {
    let clock = ManualClock::new();
    let bucket = TokenBucket::try_new(
        Quota::new(Rate::per_second(5)).burst(5).start_empty(),
        &clock,
    )
    .unwrap();
    let mut delay = ClockDelay::new(&clock);
    assert_eq!(
        bucket.acquire_with_delay(6, &mut delay),
        Err(Denied::ExceedsCapacity { burst: 5 })
    );
    assert_eq!(bucket.acquire_with_delay(0, &mut delay), Ok(Duration::ZERO));
    assert_eq!((delay.calls, clock.now()), (0, 0));
}

#[test]
fn an_hour_long_wait_is_one_call_never_cut_short() {
    let clock = ManualClock::new();
    let bucket = TokenBucket::try_new(Quota::new(Rate::per_hour(1)).start_empty(), &clock).unwrap();
    let mut delay = ClockDelay::new(&clock);
    assert_eq!(
        bucket.acquire_with_delay(1, &mut delay),
        Ok(Duration::from_secs(3_600))
    );
    assert_eq!(delay.calls, 1);
    assert_eq!(clock.now(), 3_600_000_000_000);
    assert_eq!(
        bucket.try_acquire(1),
        Err(Denied::insufficient(Duration::from_secs(3_600)))
    );
}

#[test]
fn the_32_bit_word_waits_the_same() {
    let clock = ManualClock::new();
    let bucket =
        TokenBucket::<_, u32>::try_new_with_word(Quota::new(Rate::per_second(5)).burst(5), &clock)
            .unwrap();
    let mut delay = ClockDelay::new(&clock);
    let waited: Vec<Duration> = (0..8)
        .map(|_| bucket.acquire_with_delay(1, &mut delay).unwrap())
        .collect();
    // The 32-bit word holds 5/s on a nanosecond clock rounded down by under a millionth (an
    // hour of instants in 32 bits needs it): each wait is 200 ms and a few nanoseconds.
    for (i, wait) in waited.iter().enumerate() {
        let exact = if i < 5 { Duration::ZERO } else { ms(200) };
        assert!(
            *wait >= exact && *wait - exact <= Duration::from_micros(1),
            "{waited:?}"
        );
    }
    assert_eq!(delay.calls, 3);
    assert!(
        clock.now().abs_diff(600_000_000) <= 3_000,
        "{}",
        clock.now()
    );
}

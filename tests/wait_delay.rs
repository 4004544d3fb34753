//! Blocking waits through `embedded-hal`'s `DelayNs`, with a fake delay that moves a
//! `ManualClock` and counts its calls.

use std::time::Duration;

use embedded_hal::delay::DelayNs;
use tollgate::{Clock, Denied, ManualClock, Quota, Rate, TokenBucket};

fn ms(millis: u64) -> Duration {
    Duration::from_millis(millis)
}

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

/// A delay that records what it is asked and lets no time pass: callers that all arrived
/// before any of them slept, each in its own execution context.
#[derive(Default)]
struct Recorder(Vec<Duration>);

impl DelayNs for Recorder {
    fn delay_ns(&mut self, ns: u32) {
        self.0.push(Duration::from_nanos(ns.into()));
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
fn twenty_callers_arriving_together_each_sleep_once_until_their_own_turn() {
    let clock = ManualClock::new();
    let bucket = TokenBucket::try_new(Quota::new(Rate::per_second(5)).burst(5), &clock).unwrap();
    let asked: Vec<(Duration, Vec<Duration>)> = (0..20)
        .map(|_| {
            let mut delay = Recorder::default();
            let waited = bucket.acquire_with_delay(1, &mut delay).unwrap();
            (waited, delay.0)
        })
        .collect();
    // (time waited, the delays asked for): the burst asks for none, every other caller for one,
    // 200 ms after the caller before it.
    let expected: Vec<(Duration, Vec<Duration>)> = (0..20u64)
        .map(|caller| match caller {
            0..=4 => (Duration::ZERO, vec![]),
            _ => (ms(200 * (caller - 4)), vec![ms(200 * (caller - 4))]),
        })
        .collect();
    assert_eq!(asked, expected);
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
        Err(Denied::Insufficient {
            retry_after: Duration::from_secs(3_600)
        })
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

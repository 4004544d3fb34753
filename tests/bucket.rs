//! The bucket's behaviour, pinned with a `ManualClock`: tables of (time, n, expected) rows.

use std::sync::Barrier;
use std::thread;
use std::time::Duration;

use tollgate::{Clock, ConfigError, Denied, ManualClock, Quota, Rate, TokenBucket, Word};

const MS: u64 = 1_000_000;

/// What a row expects.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Expect {
    /// Granted.
    Y,
    /// Denied, retry after this many milliseconds.
    N(u64),
    /// Larger than the burst.
    Never,
}
use Expect::{Never, N, Y};

/// A microsecond counter over a `ManualClock`: the 32-bit word holds these tables' rates
/// exactly on it (on a nanosecond clock it rounds them down by under a millionth, and a row at
/// an exact instant would then come a few nanoseconds early).
struct Micros<'a>(&'a ManualClock);

impl Clock for Micros<'_> {
    const TICKS_PER_SECOND: u64 = 1_000_000;
    fn now(&self) -> u64 {
        self.0.now() / 1_000
    }
}

/// Runs rows of (milliseconds since start, n, expected) against a fresh bucket on each word:
/// the 64-bit word on nanoseconds, the 32-bit word on microseconds.
fn run_table(quota: Quota, rows: &[(u64, u32, Expect)]) {
    let clock = ManualClock::new();
    let wide = TokenBucket::<_, u64>::try_new_with_word(quota, &clock).unwrap();
    run_table_on(&wide, &clock, rows);
    let clock = ManualClock::new();
    let narrow = TokenBucket::<_, u32>::try_new_with_word(quota, Micros(&clock)).unwrap();
    assert!(narrow.is_exact(), "{quota}");
    run_table_on(&narrow, &clock, rows);
}

fn run_table_on<C: Clock, W: Word>(
    bucket: &TokenBucket<C, W>,
    clock: &ManualClock,
    rows: &[(u64, u32, Expect)],
) {
    let quota = bucket.quota();
    for &(at_ms, n, expect) in rows {
        clock.set(at_ms * MS);
        let got = match bucket.try_acquire(n) {
            Ok(()) => Y,
            Err(Denied::Insufficient { retry_after }) => {
                let ms = retry_after.get().as_millis() as u64;
                assert_eq!(retry_after, Duration::from_millis(ms), "exact to the ms");
                N(ms)
            }
            Err(Denied::ExceedsCapacity { burst }) => {
                assert_eq!(burst, quota.burst_size());
                Never
            }
            Err(other) => panic!("{other:?}"),
        };
        assert_eq!(got, expect, "{} bits, t = {at_ms} ms, n = {n}", W::BITS);
    }
}

#[test]
fn twelve_requests_at_two_per_second_with_a_burst_of_five() {
    // The burst of five, two more on the refill, then allow / block at two a second.
    run_table(
        Quota::new(Rate::per_second(2)).burst(5),
        &[
            (0, 1, Y),
            (200, 1, Y),
            (400, 1, Y),
            (600, 1, Y),
            (800, 1, Y),
            (1_000, 1, Y),
            (1_200, 1, Y),
            (1_400, 1, N(100)),
            (1_600, 1, Y),
            (1_800, 1, N(200)),
            (2_000, 1, Y),
            (2_200, 1, N(300)),
        ],
    );
}

#[test]
fn denials_take_nothing_and_say_exactly_when() {
    run_table(
        Quota::new(Rate::per_second(10)).burst(10),
        &[
            (0, 10, Y),
            (0, 1, N(100)),
            (0, 1, N(100)), // the denial took nothing
            (50, 1, N(50)),
            (50, 3, N(250)),
            (99, 1, N(1)),
            (100, 1, Y),
            (100, 1, N(100)),
            (1_000, 10, N(100)), // 9 tokens after 900 ms
            (1_100, 10, Y),
            (5_000, 11, Never),
            (5_000, 10, Y), // a full bucket holds exactly the burst
            (5_000, 0, Y),  // zero tokens always pass, even when empty
        ],
    );
}

#[test]
fn exact_rational_rates_do_not_drift() {
    // 22.5 per second: one token every 44 444 444.4… ns. The word reads this clock to 8 ns
    // (see `resolution`), so the k-th token lands on the first 8 ns step at or after k × 44.4… ms.
    let quota = Quota::new(Rate::per_second(100).minus_percent(10).divided_by(4))
        .burst(1)
        .start_empty();
    let clock = ManualClock::new();
    let bucket = TokenBucket::try_new(quota, &clock).unwrap();
    assert_eq!(bucket.resolution(), Duration::from_nanos(8));
    let rows: [(u64, Option<u64>); 7] = [
        (0, Some(44_444_448)),
        (44_444_447, Some(1)),
        (44_444_448, None),
        (44_444_448, Some(44_444_448)),
        (88_888_895, Some(1)),
        (88_888_896, None),
        (3_600_000 * MS, None),
    ];
    for (at_ns, retry_ns) in rows {
        clock.set(at_ns);
        let expected = match retry_ns {
            None => Ok(()),
            Some(ns) => Err(Denied::insufficient(Duration::from_nanos(ns))),
        };
        assert_eq!(bucket.try_acquire(1), expected, "t = {at_ns} ns");
    }
    // After an hour exactly 81 000 tokens have accrued since the start, and the next one comes
    // 44.4 ms later: no drift over 81 000 periods.
    let clock = ManualClock::new();
    let bucket = TokenBucket::try_new(quota.burst(100_000), &clock).unwrap();
    clock.set(3_600_000 * MS);
    assert_eq!(bucket.available(), 81_000);
    clock.set(3_600_000 * MS + 44_444_440);
    assert_eq!(bucket.available(), 81_000);
    clock.set(3_600_000 * MS + 44_444_448);
    assert_eq!(bucket.available(), 81_001);
}

#[test]
fn start_full_empty_or_with_n() {
    let rate = Rate::per_second(1);
    let rows = [
        (Quota::new(rate).burst(4), 4),
        (Quota::new(rate).burst(4).start_empty(), 0),
        (Quota::new(rate).burst(4).start_with(3), 3),
        (Quota::new(rate).burst(4).start_empty().start_full(), 4),
        (Quota::new(rate), 1),
    ];
    for (quota, fill) in rows {
        let clock = ManualClock::new();
        let bucket = TokenBucket::try_new(quota, &clock).unwrap();
        assert_eq!(bucket.available(), fill, "{quota:?}");
        for _ in 0..fill {
            assert_eq!(bucket.try_acquire(1), Ok(()));
        }
        assert!(bucket.try_acquire(1).is_err());
    }
}

#[test]
fn a_const_bucket_applies_its_start_fill_at_first_use() {
    static CLOCK: ManualClock = ManualClock::starting_at(5_000 * MS);
    static GATE: TokenBucket<&ManualClock> =
        TokenBucket::new(Quota::new(Rate::per_second(10)).start_empty(), &CLOCK);
    // Five seconds after the clock's origin, but the bucket's first use: still empty.
    assert_eq!(GATE.available(), 0);
    assert_eq!(
        GATE.try_acquire(1),
        Err(Denied::insufficient(Duration::from_millis(100)))
    );
    // The first use was written although it was denied: the start does not slide.
    CLOCK.advance(Duration::from_millis(100));
    assert_eq!(GATE.try_acquire(1), Ok(()));
}

/// A `const`-built bucket on either word, first used by a grant, by a request above its burst,
/// and by threads racing for its first use on a frozen clock: the start fill is written once,
/// whoever writes it, and not a token more is granted.
#[test]
fn a_const_bucket_on_either_word_fills_once_whoever_uses_it_first() {
    macro_rules! on_word {
        ($word:ty) => {{
            let quota = Quota::new(Rate::per_second(10)).burst(5);
            let clock = ManualClock::starting_at(7_000 * MS);
            // The first use a grant of more than one token.
            let bucket = TokenBucket::<_, $word>::new_with_word(quota, &clock);
            assert_eq!(bucket.try_acquire(2), Ok(()));
            assert_eq!(bucket.try_acquire(3), Ok(()));
            // A tenth of a second, as the word reads the clock: the 32-bit word reads it in
            // units of about a microsecond, and its first reading is rounded down to one.
            let wait = bucket.try_acquire(1).unwrap_err().retry_after().unwrap();
            let tenth = Duration::from_millis(100);
            assert!(
                wait <= tenth && wait + bucket.resolution() > tenth,
                "{} word: {wait:?}",
                stringify!($word)
            );
            clock.advance(wait - Duration::from_nanos(1));
            assert!(bucket.try_acquire(1).is_err());
            clock.advance(Duration::from_nanos(1));
            assert_eq!(bucket.try_acquire(1), Ok(()));
            // The first use a request that can never fit: the fill is still written once.
            let bucket = TokenBucket::<_, $word>::new_with_word(quota, &clock);
            assert_eq!(
                bucket.try_acquire(6),
                Err(Denied::ExceedsCapacity { burst: 5 })
            );
            assert_eq!(bucket.available(), 5);
            clock.advance(Duration::from_secs(3));
            assert_eq!(bucket.available(), 5);
            // Threads racing for the first use of fresh buckets: exactly the burst, each time.
            for round in 0..2_000 {
                let bucket = TokenBucket::<_, $word>::new_with_word(quota, &clock);
                let barrier = Barrier::new(4);
                let granted: u32 = thread::scope(|s| {
                    let racers: Vec<_> = (0..4)
                        .map(|_| {
                            s.spawn(|| {
                                barrier.wait();
                                (0..3).filter(|_| bucket.try_acquire(1).is_ok()).count() as u32
                            })
                        })
                        .collect();
                    racers.into_iter().map(|r| r.join().unwrap()).sum()
                });
                assert_eq!(granted, 5, "{} word, round {round}", stringify!($word));
            }
        }};
    }
    on_word!(u32);
    on_word!(u64);
}

/// A clock that runs a hook once, inside a read, after the reading is taken: another caller
/// acting between a reservation's reading and its compare-exchange.
struct HookClock<'a> {
    clock: ManualClock,
    hook: std::cell::Cell<Option<&'a dyn Fn()>>,
}

impl HookClock<'_> {
    fn starting_at(ticks: u64) -> Self {
        HookClock {
            clock: ManualClock::starting_at(ticks),
            hook: std::cell::Cell::new(None),
        }
    }
}

impl Clock for &HookClock<'_> {
    const TICKS_PER_SECOND: u64 = 1_000_000_000;
    fn now(&self) -> u64 {
        let reading = self.clock.now();
        if let Some(hook) = self.hook.take() {
            hook();
        }
        reading
    }
}

/// A reservation whose reading is overtaken (another caller moves the clock on and takes the
/// last token between the reading and the reservation's compare-exchange) waits from a reading
/// that shows the clock moved, never for time already past when it lands.
#[test]
fn a_wait_is_from_a_reading_no_older_than_the_word_it_lands_on() {
    for first_use in [false, true] {
        let clock = HookClock::starting_at(7_000 * MS);
        let quota = Quota::new(Rate::per_second(10)).burst(1);
        let bucket = if first_use {
            TokenBucket::new(quota, &clock)
        } else {
            TokenBucket::try_new(quota, &clock).unwrap()
        };
        let another_caller = || {
            clock.clock.advance(Duration::from_millis(50));
            assert_eq!(bucket.try_acquire(1), Ok(()));
        };
        clock.hook.set(Some(&another_caller));
        let reservation = bucket.reserve(1, Duration::from_secs(1)).unwrap();
        assert!(clock.hook.take().is_none(), "the hook ran");
        // The token after the taken one is due 100 ms after the take, 50 ms after the first
        // reading: the wait is 100 ms, not 150.
        assert_eq!(
            reservation.wait(),
            Duration::from_millis(100),
            "first use: {first_use}"
        );
        assert_eq!(reservation.due_ticks(), 7_150 * MS);
    }
}

#[test]
fn reservations_queue_in_arrival_order() {
    let clock = ManualClock::new();
    let bucket = TokenBucket::try_new(
        Quota::new(Rate::per_second(5)).burst(5).start_empty(),
        &clock,
    )
    .unwrap();
    let waits: Vec<_> = (1..=5)
        .map(|_| bucket.reserve(1, Duration::from_secs(10)).unwrap().wait())
        .collect();
    let ms = |ms| Duration::from_millis(ms);
    assert_eq!(waits, [ms(200), ms(400), ms(600), ms(800), ms(1_000)]);
    // A reservation that would wait past max_wait takes nothing, and says when it would fit.
    assert_eq!(
        bucket.reserve(1, ms(1_000)),
        Err(Denied::insufficient(ms(200)))
    );
    assert_eq!(bucket.reserve(1, ms(1_200)).unwrap().wait(), ms(1_200));
    // In debt, try_acquire is denied until the queue has been served.
    assert_eq!(bucket.try_acquire(1), Err(Denied::insufficient(ms(1_400))));
    assert_eq!(bucket.available(), 0);
}

#[test]
fn cancelling_gives_back_only_while_nothing_came_after() {
    let ms = |ms| Duration::from_millis(ms);
    let clock = ManualClock::new();
    let bucket = TokenBucket::try_new(
        Quota::new(Rate::per_second(1)).burst(5).start_empty(),
        &clock,
    )
    .unwrap();
    let a = bucket.reserve(3, ms(60_000)).unwrap(); // due at 3 s
    let b = bucket.reserve(2, ms(60_000)).unwrap(); // due at 5 s
    assert_eq!((a.wait(), b.wait()), (ms(3_000), ms(5_000)));
    // b counts on a's tokens (the word cannot tell it from a pause): a gives back nothing.
    bucket.cancel(a);
    assert_eq!(bucket.reserve(1, ms(60_000)).unwrap().wait(), ms(6_000));
    // The last reservation gives back all it took.
    let c = bucket.reserve(1, ms(60_000)).unwrap();
    assert_eq!(c.wait(), ms(7_000));
    bucket.cancel(c);
    assert_eq!(bucket.reserve(1, ms(60_000)).unwrap().wait(), ms(7_000));

    // A reservation that is already due gives back nothing.
    let clock = ManualClock::new();
    let bucket = TokenBucket::try_new(
        Quota::new(Rate::per_second(1)).burst(2).start_empty(),
        &clock,
    )
    .unwrap();
    let due = bucket.reserve(1, ms(5_000)).unwrap();
    clock.advance(ms(1_000));
    bucket.cancel(due);
    assert_eq!(bucket.available(), 0);

    // Cancelling everything restores the bucket, never beyond its burst.
    let clock = ManualClock::new();
    let bucket = TokenBucket::try_new(Quota::new(Rate::per_second(1)).burst(2), &clock).unwrap();
    let first = bucket.reserve(2, ms(0)).unwrap();
    let second = bucket.reserve(2, ms(2_000)).unwrap();
    bucket.cancel(second);
    bucket.cancel(first); // due at once: already used
    assert_eq!(bucket.available(), 0);
    clock.advance(ms(10_000));
    assert_eq!(bucket.available(), 2);
}

#[test]
fn cancelling_in_any_order_never_gives_back_more_than_was_taken() {
    let ms = |ms| Duration::from_millis(ms);
    let clock = ManualClock::new();
    let bucket = TokenBucket::try_new(
        Quota::new(Rate::per_second(1)).burst(5).start_empty(),
        &clock,
    )
    .unwrap();
    let a = bucket.reserve(3, ms(60_000)).unwrap();
    let b = bucket.reserve(2, ms(60_000)).unwrap();
    bucket.cancel(a); // gives back nothing: b came after it
    bucket.cancel(b); // gives back 2: nothing came after it
                      // 5 taken, 2 given back: 3 still owed, so the next token is due at 4 s.
    assert_eq!(bucket.try_acquire(1), Err(Denied::insufficient(ms(4_000))));
}

#[test]
fn n_above_the_burst_fails_at_once_even_in_debt() {
    let clock = ManualClock::new();
    let bucket = TokenBucket::try_new(Quota::new(Rate::per_hour(1)).burst(3), &clock).unwrap();
    let _debt = bucket.reserve(3, Duration::from_secs(100_000)).unwrap();
    let _more = bucket.reserve(3, Duration::from_secs(100_000)).unwrap();
    let never = Denied::ExceedsCapacity { burst: 3 };
    assert_eq!(bucket.try_acquire(4), Err(never));
    assert_eq!(
        bucket.reserve(4, Duration::MAX).map(|r| r.wait()),
        Err(never)
    );
    assert_eq!(bucket.try_acquire(u32::MAX), Err(never));
}

#[test]
fn a_clock_stepping_backwards_mints_nothing() {
    let s = |s| Duration::from_secs(s);
    let clock = ManualClock::starting_at(100 * 1_000 * MS);
    let bucket = TokenBucket::try_new(Quota::new(Rate::per_second(1)).burst(5), &clock).unwrap();
    assert_eq!(bucket.try_acquire(5), Ok(()));
    // The clock steps back ten seconds: the bucket reads that as time not yet earned.
    clock.set(90 * 1_000 * MS);
    assert_eq!(bucket.available(), 0);
    assert_eq!(bucket.try_acquire(1), Err(Denied::insufficient(s(11))));
    // Back at the instant of the last grant, the bucket is as empty as it was then.
    clock.set(100 * 1_000 * MS);
    assert_eq!(bucket.available(), 0);
    clock.advance(s(3));
    assert_eq!(bucket.available(), 3);
}

#[test]
fn a_clock_jumping_forward_by_years_fills_the_bucket_and_no_more() {
    let clock = ManualClock::new();
    let bucket = TokenBucket::try_new(Quota::new(Rate::per_second(7)).burst(9), &clock).unwrap();
    assert_eq!(bucket.try_acquire(9), Ok(()));
    for years in [1u64, 10, 50, 99] {
        clock.advance(Duration::from_secs(years * 31_557_600));
        assert_eq!(bucket.available(), 9, "{years} years");
        assert_eq!(bucket.try_acquire(9), Ok(()));
        assert!(bucket.try_acquire(1).is_err());
    }
    assert!(bucket.idle_horizon() >= Duration::from_secs(100 * 31_557_600));
}

#[test]
fn the_clock_may_wrap_like_a_hardware_counter() {
    let clock = ManualClock::starting_at(u64::MAX - 150 * MS);
    let bucket = TokenBucket::try_new(Quota::new(Rate::per_second(10)).burst(2), &clock).unwrap();
    assert_eq!(bucket.try_acquire(2), Ok(()));
    clock.advance(Duration::from_millis(100)); // still before the wrap
    assert_eq!(bucket.try_acquire(1), Ok(()));
    clock.advance(Duration::from_millis(100)); // past it
    assert_eq!(bucket.try_acquire(1), Ok(()));
    assert_eq!(
        bucket.try_acquire(1),
        Err(Denied::insufficient(Duration::from_millis(100)))
    );
    clock.advance(Duration::from_secs(1));
    assert_eq!(bucket.available(), 2);
}

#[test]
fn fifteen_threads_on_a_frozen_clock_get_exactly_the_burst() {
    for _ in 0..200 {
        let clock = ManualClock::new();
        let bucket =
            TokenBucket::try_new(Quota::new(Rate::per_second(1)).burst(5), &clock).unwrap();
        let barrier = Barrier::new(15);
        let granted: usize = thread::scope(|scope| {
            let handles: Vec<_> = (0..15)
                .map(|_| {
                    scope.spawn(|| {
                        barrier.wait();
                        bucket.try_acquire(1).is_ok()
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap() as usize)
                .sum()
        });
        assert_eq!(granted, 5);
    }
}

#[test]
fn configuration_errors_are_clear() {
    let clock = ManualClock::new();
    let rows = [
        (Quota::new(Rate::per_second(0)), ConfigError::ZeroRate),
        (
            Quota::new(Rate::new(3, Duration::ZERO)),
            ConfigError::ZeroPeriod,
        ),
        (
            Quota::new(Rate::per_second(3)).burst(0),
            ConfigError::ZeroBurst,
        ),
        (
            Quota::new(Rate::per_second(3)).burst(3).start_with(4),
            ConfigError::StartAboveBurst { start: 4, burst: 3 },
        ),
        (
            Quota::new(Rate::per_second(3).minus_percent(120)),
            ConfigError::PercentAbove100 { percent: 120 },
        ),
        (
            Quota::new(Rate::per_second(1_000_000_000_000)),
            ConfigError::Unrepresentable,
        ),
    ];
    for (quota, error) in rows {
        assert_eq!(TokenBucket::try_new(quota, &clock).err(), Some(error));
        assert!(!error.to_string().is_empty());
    }
    assert_eq!(
        ConfigError::StartAboveBurst { start: 4, burst: 3 }.to_string(),
        "start fill is above the burst (4 > 3)"
    );
}

#[test]
fn quantized_clocks_are_reported() {
    let clock = ManualClock::new();
    let exact = TokenBucket::try_new(Quota::new(Rate::per_second(2)), &clock).unwrap();
    assert_eq!(exact.resolution(), Duration::from_nanos(1));
    let coarse = TokenBucket::try_new(Quota::new(Rate::per_minute(171)), &clock).unwrap();
    assert_eq!(coarse.resolution(), Duration::from_nanos(32));
    assert!(coarse.idle_horizon() >= Duration::from_secs(100 * 31_557_600));
}

#[test]
fn a_reservation_waits_from_the_reading_its_compare_exchange_lands_on() {
    // 100/s, burst 1, empty at 0. The reserving caller reads 0 ms, is preempted for 10 ms,
    // and meanwhile another caller takes the token that accrued. Read once, the reservation
    // would say 20 ms (from 0 ms); from the reading that lands, it is 10 ms (from 10 ms).
    let clock = HookClock::starting_at(0);
    let quota = Quota::new(Rate::per_second(100)).burst(1).start_empty();
    let bucket = TokenBucket::try_new(quota, &clock).unwrap();
    let another_caller = || {
        clock.clock.advance(Duration::from_millis(10));
        assert_eq!(bucket.try_acquire(1), Ok(()));
    };
    clock.hook.set(Some(&another_caller));
    let reservation = bucket.reserve(1, Duration::from_secs(1)).unwrap();
    assert_eq!(reservation.wait(), Duration::from_millis(10));
    assert_eq!(reservation.due_ticks(), 20 * MS);
    // Nothing was minted: the next token is due 10 ms after this one.
    assert_eq!(
        bucket.try_acquire(1),
        Err(Denied::insufficient(Duration::from_millis(20)))
    );
}

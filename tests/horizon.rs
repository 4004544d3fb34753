//! The 32-bit word's idle horizon at the common firmware timer rates: the figures the docs of
//! `Word` give for how often `touch` must run, computed by the solver itself.
//!
//! `cargo test --test horizon -- --nocapture` prints the table.

use core::time::Duration;

use tollgate::{Clock, Quota, Rate, TokenBucket};

/// A timer of `F` Hz; only its frequency matters to the layout.
struct Timer<const F: u64>;
impl<const F: u64> Clock for Timer<F> {
    const TICKS_PER_SECOND: u64 = F;
    fn now(&self) -> u64 {
        0
    }
}

const MIN: u64 = 60;
const HOUR: u64 = 60 * MIN;
const DAY: u64 = 24 * HOUR;

/// The horizon of `rate` per second with `burst` on a timer of `F` Hz, on the 32-bit word.
fn horizon<const F: u64>(rate: u64, burst: u64) -> Duration {
    let quota = Quota::new(Rate::per_second(rate)).burst(burst);
    let bucket = TokenBucket::<_, u32>::try_new_with_word(quota, Timer::<F>)
        .unwrap_or_else(|e| panic!("{rate}/s burst {burst} at {F} Hz: {e}"));
    bucket.idle_horizon()
}

#[test]
fn touch_intervals_on_the_32_bit_word_are_as_documented() {
    // (timer Hz, rate /s, burst, the documented horizon: at least, at most), in seconds.
    type Row = (u64, u64, u64, Duration, u64, u64);
    let rows: [Row; 25] = [
        // 32 768 Hz (RTC): about a day and a half up to 10^4/s, then 2^32 tokens' time.
        (32_768, 2, 5, horizon::<32_768>(2, 5), 36 * HOUR, 40 * HOUR),
        (
            32_768,
            1_000,
            100,
            horizon::<32_768>(1_000, 100),
            36 * HOUR,
            40 * HOUR,
        ),
        (
            32_768,
            10_000,
            1_000,
            horizon::<32_768>(10_000, 1_000),
            36 * HOUR,
            40 * HOUR,
        ),
        (
            32_768,
            100_000,
            10_000,
            horizon::<32_768>(100_000, 10_000),
            11 * HOUR,
            12 * HOUR,
        ),
        (
            32_768,
            1_000_000,
            1_000,
            horizon::<32_768>(1_000_000, 1_000),
            71 * MIN,
            72 * MIN,
        ),
        // 1 kHz (a millisecond tick): 49 days up to 10^3/s.
        (1_000, 2, 5, horizon::<1_000>(2, 5), 49 * DAY, 50 * DAY),
        (
            1_000,
            1_000,
            100,
            horizon::<1_000>(1_000, 100),
            49 * DAY,
            50 * DAY,
        ),
        (
            1_000,
            10_000,
            1_000,
            horizon::<1_000>(10_000, 1_000),
            4 * DAY,
            5 * DAY,
        ),
        (
            1_000,
            100_000,
            10_000,
            horizon::<1_000>(100_000, 10_000),
            11 * HOUR,
            12 * HOUR,
        ),
        // 1 MHz (embassy-time's default tick): 2^32 µs, about 71 minutes, at every rate up
        // to 10^6/s.
        (
            1_000_000,
            1,
            1,
            horizon::<1_000_000>(1, 1),
            71 * MIN,
            72 * MIN,
        ),
        (
            1_000_000,
            2,
            5,
            horizon::<1_000_000>(2, 5),
            71 * MIN,
            72 * MIN,
        ),
        (
            1_000_000,
            1_000,
            100,
            horizon::<1_000_000>(1_000, 100),
            71 * MIN,
            72 * MIN,
        ),
        (
            1_000_000,
            1_000_000,
            1_000,
            horizon::<1_000_000>(1_000_000, 1_000),
            71 * MIN,
            72 * MIN,
        ),
        // Core clocks (8 to 120 MHz) and a nanosecond clock: an hour or more, up to 10^6/s.
        (8_000_000, 2, 5, horizon::<8_000_000>(2, 5), HOUR, 72 * MIN),
        (
            16_000_000,
            2,
            5,
            horizon::<16_000_000>(2, 5),
            HOUR,
            72 * MIN,
        ),
        (
            16_000_000,
            1_000,
            100,
            horizon::<16_000_000>(1_000, 100),
            HOUR,
            72 * MIN,
        ),
        (
            48_000_000,
            2,
            5,
            horizon::<48_000_000>(2, 5),
            HOUR,
            96 * MIN,
        ),
        (
            48_000_000,
            10_000,
            1_000,
            horizon::<48_000_000>(10_000, 1_000),
            HOUR,
            96 * MIN,
        ),
        (
            64_000_000,
            2,
            5,
            horizon::<64_000_000>(2, 5),
            HOUR,
            72 * MIN,
        ),
        (
            64_000_000,
            1_000_000,
            1_000,
            horizon::<64_000_000>(1_000_000, 1_000),
            HOUR,
            72 * MIN,
        ),
        (
            120_000_000,
            1_000,
            100,
            horizon::<120_000_000>(1_000, 100),
            HOUR,
            77 * MIN,
        ),
        (
            1_000_000_000,
            1,
            1,
            horizon::<1_000_000_000>(1, 1),
            HOUR,
            72 * MIN,
        ),
        (
            1_000_000_000,
            100_000,
            10_000,
            horizon::<1_000_000_000>(100_000, 10_000),
            HOUR,
            72 * MIN,
        ),
        // Above 10^6/s: 2^32 tokens' time, on any timer (43 s at 10^8/s).
        (
            1_000_000,
            100_000_000,
            100_000,
            horizon::<1_000_000>(100_000_000, 100_000),
            42,
            43,
        ),
        (
            64_000_000,
            100_000_000,
            100_000,
            horizon::<64_000_000>(100_000_000, 100_000),
            42,
            43,
        ),
    ];
    for (hz, rate, burst, horizon, at_least, at_most) in rows {
        println!("{hz:>13} Hz {rate:>11}/s burst {burst:>7}: touch within {horizon:?}");
        assert!(
            horizon >= Duration::from_secs(at_least) && horizon <= Duration::from_secs(at_most),
            "{rate}/s burst {burst} at {hz} Hz: horizon {horizon:?}, documented {at_least}..={at_most} s"
        );
    }
}

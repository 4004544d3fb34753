//! A clock that jumps back and forth, as a time-stamp counter read on cores that disagree does:
//! the bucket credits no span of time twice, so it never grants beyond
//! `burst + rate × (latest reading − first reading)`. A step back costs waiting, never tokens.

use core::time::Duration;

use proptest::prelude::*;
use tollgate::{Denied, ManualClock, Quota, Rate, TokenBucket};

const MS: u64 = 1_000_000;

#[test]
fn a_step_back_is_time_not_yet_earned() {
    // One token a millisecond, burst 2, full at 10 ms.
    let clock = ManualClock::starting_at(10 * MS);
    let quota = Quota::new(Rate::new(1, Duration::from_millis(1))).burst(2);
    let bucket = TokenBucket::try_new(quota, &clock).unwrap();

    // (clock reading in ms, Ok or the retry_after in ms)
    let rows: [(u64, Result<(), u64>); 13] = [
        (10, Ok(())),
        (10, Ok(())),
        (10, Err(1)),
        (7, Err(4)),  // another core, 3 ms behind: denied until it catches up
        (11, Ok(())), // back on time: the one token earned since 10 ms
        (8, Err(4)),
        (11, Err(1)),
        (12, Ok(())),
        (14, Ok(())), // a core 2 ms ahead spends what 12..14 will earn
        (14, Ok(())),
        (12, Err(3)), // back on time: those two tokens are not granted again
        (14, Err(1)),
        (15, Ok(())),
    ];
    for (at_ms, expected) in rows {
        clock.set(at_ms * MS);
        let expected =
            expected.map_err(|retry_ms| Denied::insufficient(Duration::from_millis(retry_ms)));
        assert_eq!(bucket.try_acquire(1), expected, "at {at_ms} ms");
    }
    // Grants: 7 = burst 2 + 1 token/ms × (15 ms latest − 10 ms first).
}

proptest! {
    /// Readings wander up to `skew` either side of a true clock that only moves forward; the
    /// grants never exceed what the latest reading has earned since the first.
    #[test]
    fn a_wandering_clock_mints_nothing(
        skew_ms in 0u64..20,
        burst in 1u64..8,
        steps in prop::collection::vec((0u64..3 * MS, -1.0f64..1.0, 1u32..3), 1..400),
    ) {
        let start = 100 * MS;
        let clock = ManualClock::starting_at(start);
        let quota = Quota::new(Rate::new(1, Duration::from_millis(1))).burst(burst);
        let bucket = TokenBucket::try_new(quota, &clock).unwrap();

        let (mut true_now, mut latest, mut granted) = (start, start, 0u64);
        for (advance, offset, n) in steps {
            true_now += advance;
            let reading = true_now.saturating_add_signed((offset * (skew_ms * MS) as f64) as i64);
            clock.set(reading);
            latest = latest.max(reading);
            if bucket.try_acquire(n).is_ok() {
                granted += u64::from(n);
            }
            let earned = burst + (latest - start) / MS;
            prop_assert!(granted <= earned, "granted {granted} > earned {earned}");
        }
        // And the bucket recovers: once the clock is past every reading, tokens flow again.
        clock.set(latest + burst * MS);
        prop_assert!(bucket.try_acquire(1).is_ok());
    }
}

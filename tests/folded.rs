//! A bucket whose quota is folded into its code (`static_bucket!`, the word `Folded`) answers
//! exactly as a bucket that keeps its layout beside its word: every decision, every
//! `retry_after`, `available` and `until_full`, through first use, drains, long idles past the
//! 32-bit word's horizon and clocks stepped back, on both words and on each kind of 32-bit
//! layout (fixed point read every tick, and quanta of many ticks).

use core::sync::atomic::{AtomicU64, Ordering};
use core::time::Duration;

use tollgate::{
    static_bucket, Clock, ConfigError, ConstQuota, Folded, Quota, Rate, TokenBucket, Word,
};

/// A clock of `HZ` ticks a second reading what the test set.
#[derive(Clone, Copy, Debug)]
struct At<const HZ: u64>(&'static AtomicU64);

impl<const HZ: u64> Clock for At<HZ> {
    const TICKS_PER_SECOND: u64 = HZ;
    fn now(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A small deterministic noise source.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Runs the same script against `folded` and `plain` (each on its own time cell), comparing
/// every answer. Steps: a take of 1 to burst + 1 tokens, a short step of time, a step of up to
/// several refills, an idle of days (past any 32-bit horizon), a step back, and a touch.
fn agree<const HZ: u64, W: Word, V: Word>(
    folded: &TokenBucket<At<HZ>, W>,
    folded_time: &AtomicU64,
    plain: &TokenBucket<At<HZ>, V>,
    plain_time: &AtomicU64,
    burst: u64,
    seed: u64,
) {
    let mut noise = XorShift(seed);
    let mut now: u64 = noise.next() >> 8;
    let (mut grants, mut denials) = (0, 0);
    for step in 0..4_000 {
        let r = noise.next();
        match r % 16 {
            0..=8 => {
                let n = (r >> 8) % (burst + 1) + 1;
                let (a, b) = (folded.try_acquire(n as u32), plain.try_acquire(n as u32));
                assert_eq!(a, b, "step {step}: take {n} at {now}");
                assert_eq!(
                    a.map_err(|d| d.retry_after()),
                    b.map_err(|d| d.retry_after())
                );
                if a.is_ok() {
                    grants += 1;
                } else {
                    denials += 1;
                }
            }
            9..=11 => now = now.wrapping_add((r >> 8) % (HZ / 10 + 1)),
            12 => now = now.wrapping_add((r >> 8) % (5 * HZ + 1)),
            13 => now = now.wrapping_add(HZ * 86_400 * ((r >> 8) % 5 + 1)),
            14 => now = now.wrapping_sub((r >> 8) % (HZ + 1)),
            _ => {
                folded.touch();
                plain.touch();
            }
        }
        folded_time.store(now, Ordering::Relaxed);
        plain_time.store(now, Ordering::Relaxed);
        assert_eq!(folded.available(), plain.available(), "step {step}");
        assert_eq!(folded.until_full(), plain.until_full(), "step {step}");
    }
    assert!(
        grants > 50 && denials > 500,
        "{grants} grants, {denials} denials"
    );
}

macro_rules! differential {
    ($test:ident, $hz:expr, $word:ty, $quota:expr, $burst:expr) => {
        #[test]
        fn $test() {
            static FOLDED_TIME: AtomicU64 = AtomicU64::new(0);
            static PLAIN_TIME: AtomicU64 = AtomicU64::new(0);
            static_bucket! {
                static FOLDED: TokenBucket<At<{ $hz }>, $word> =
                    TokenBucket::new($quota, At(&FOLDED_TIME));
            }
            static PLAIN: TokenBucket<At<{ $hz }>, $word> =
                TokenBucket::<_, $word>::new_with_word($quota, At(&PLAIN_TIME));
            assert_eq!(FOLDED.quota(), PLAIN.quota());
            assert_eq!(FOLDED.is_exact(), PLAIN.is_exact());
            agree(
                &FOLDED,
                &FOLDED_TIME,
                &PLAIN,
                &PLAIN_TIME,
                $burst,
                0x9e37_79b9_7f4a_7c15,
            );
        }
    };
}

// The 32-bit word read every tick, in fixed point (the firmware's case).
differential!(
    narrow_fixed_point_on_a_firmware_timer,
    12_500_000,
    u32,
    Quota::new(Rate::per_second(2)).burst(5),
    5
);
differential!(
    narrow_fixed_point_below_a_unit_a_tick,
    1_000_000_000,
    u32,
    Quota::new(Rate::per_minute(171)).burst(9),
    9
);
differential!(
    narrow_fixed_point_above_a_unit_a_tick,
    32_768,
    u32,
    Quota::new(Rate::per_second(100_000)).burst(1_000),
    1_000
);
// The 32-bit word read in quanta of many ticks: a slow rate on a fast clock.
differential!(
    narrow_quanta_of_many_ticks,
    1_000_000_000,
    u32,
    Quota::new(Rate::per_day(1)).burst(1),
    1
);
// The 64-bit word.
differential!(
    wide_on_a_firmware_timer,
    12_500_000,
    u64,
    Quota::new(Rate::per_second(2)).burst(5),
    5
);
differential!(
    wide_on_a_nanosecond_clock,
    1_000_000_000,
    u64,
    Quota::new(Rate::new(3, Duration::from_millis(700))).burst(4),
    4
);

/// The slow case above is read in quanta of a power of two of ticks (the other 32-bit cases
/// in fixed point), so both kinds of the 32-bit word's layout are compared.
#[test]
fn the_slow_case_is_read_in_quanta() {
    static T: AtomicU64 = AtomicU64::new(0);
    let quanta = TokenBucket::<_, u32>::try_new_with_word(
        Quota::new(Rate::per_day(1)).burst(1),
        At::<1_000_000_000>(&T),
    )
    .unwrap();
    let step = quanta.resolution_ticks();
    assert!(step > 1 << 20 && step.is_power_of_two(), "{step}");
}

/// A folded word holds its own quota only: built at run time with another, it is refused.
#[test]
fn a_folded_word_holds_its_own_quota_only() {
    static T: AtomicU64 = AtomicU64::new(0);
    struct Two;
    impl ConstQuota for Two {
        type Clock = At<1_000_000>;
        const QUOTA: Quota = Quota::new(Rate::per_second(2)).burst(5);
    }
    let own =
        TokenBucket::<_, Folded<Two, u32>>::try_new_with_word(Two::QUOTA, At::<1_000_000>(&T));
    assert!(own.is_ok());
    let other = TokenBucket::<_, Folded<Two, u32>>::try_new_with_word(
        Quota::new(Rate::per_second(3)).burst(5),
        At::<1_000_000>(&T),
    );
    assert_eq!(other.err(), Some(ConfigError::Unrepresentable));
}

/// The folded bucket stores no layout: the word and the clock only.
#[test]
fn a_folded_bucket_is_its_word_and_its_clock() {
    struct Two;
    impl ConstQuota for Two {
        type Clock = At<1_000_000>;
        const QUOTA: Quota = Quota::new(Rate::per_second(2)).burst(5);
    }
    assert_eq!(
        core::mem::size_of::<TokenBucket<At<1_000_000>, Folded<Two, u32>>>(),
        core::mem::size_of::<(u32, At<1_000_000>)>()
    );
    assert!(
        core::mem::size_of::<TokenBucket<At<1_000_000>, u32>>()
            > core::mem::size_of::<(u32, At<1_000_000>)>()
    );
}

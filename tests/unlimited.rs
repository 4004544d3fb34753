//! An unlimited quota: every call of every kind is granted at once, on both words, and nothing
//! else of the bucket's reads (its resolution, horizon, pause, quota) says anything else.

use std::time::Duration;

use tollgate::{ConfigError, Denied, Limits, ManualClock, Pause, Quota, Rate, TokenBucket, Word};

fn every_call_granted<W: Word>() {
    let clock = ManualClock::new();
    let bucket = TokenBucket::<_, W>::try_new_with_word(Quota::unlimited(), &clock).unwrap();
    assert!(bucket.is_unlimited());
    // Idle lengths from none to decades, and requests up to the largest `n`.
    for (step, n) in [
        (0, u32::MAX),
        (1, 1),
        (0, u32::MAX),
        (1_000_000_000, 7),
        (86_400 * 365 * 40 * 1_000_000_000, u32::MAX),
        (0, 0),
    ] {
        clock.advance(Duration::from_nanos(step));
        for _ in 0..1_000 {
            assert_eq!(bucket.try_acquire(n), Ok(()));
        }
        let r = bucket.reserve(n, Duration::ZERO).unwrap();
        assert_eq!(r.wait(), Duration::ZERO);
        assert_eq!(r.tokens(), n);
        bucket.cancel(r);
        assert_eq!(bucket.available(), u64::MAX);
        assert_eq!(bucket.until_full(), Duration::ZERO);
    }
    // A clock stepped back grants as well: there is nothing to mint.
    clock.set(0);
    assert_eq!(bucket.try_acquire(u32::MAX), Ok(()));
    bucket.touch();
    assert_eq!(bucket.pause_for(Duration::from_secs(5)), Pause::Unlimited);
    assert_eq!(bucket.try_acquire(1), Ok(()));
    assert_eq!(bucket.max_pause(), Duration::ZERO);
    assert_eq!(bucket.idle_horizon(), Duration::MAX);
    assert_eq!(bucket.resolution_ticks(), 1);
    assert!(bucket.is_exact());
    assert!(bucket.quota().is_unlimited());
    assert_eq!(bucket.quota(), Quota::unlimited());
    assert_eq!(bucket.tick_rate().ticks, 0);
    assert!(format!("{bucket:?}").contains("unlimited"));
}

#[test]
fn an_unlimited_bucket_grants_every_call_on_the_32_bit_word() {
    every_call_granted::<u32>();
}

#[cfg(target_has_atomic = "64")]
#[test]
fn an_unlimited_bucket_grants_every_call_on_the_64_bit_word() {
    every_call_granted::<u64>();
}

#[test]
fn a_static_unlimited_bucket_is_a_constant() {
    static CLOCK: ManualClock = ManualClock::new();
    static OFF: TokenBucket<&ManualClock> = TokenBucket::new(Quota::unlimited(), &CLOCK);
    assert!(OFF.is_unlimited());
    assert_eq!(OFF.try_acquire(u32::MAX), Ok(()));
}

#[test]
fn a_limited_bucket_is_not_unlimited() {
    let clock = ManualClock::new();
    let bucket = TokenBucket::try_new(Quota::new(Rate::per_second(1)).burst(1), &clock).unwrap();
    assert!(!bucket.is_unlimited());
    assert_eq!(bucket.try_acquire(1), Ok(()));
    assert!(bucket.try_acquire(1).is_err());
}

#[test]
fn unlimited_stays_unlimited_through_the_sizing_helpers() {
    let rate = Rate::UNLIMITED.minus_percent(5).divided_by(3);
    assert!(rate.is_unlimited());
    assert_eq!(rate.to_string(), "unlimited");
    let quota = Quota::new(rate).burst(4).start_empty();
    assert!(quota.is_unlimited());
    assert_eq!(quota.burst_size(), u64::MAX);
    // A finite rate is never unlimited, however fast.
    assert!(!Rate::per_second(u64::MAX).is_unlimited());
    assert!(!Quota::new(Rate::per_second(u64::MAX)).is_unlimited());
}

#[test]
fn the_limiters_that_take_no_unlimited_quota_say_so() {
    assert_eq!(
        Quota::unlimited().validate(),
        Err(ConfigError::UnlimitedNotTaken)
    );
    let message = ConfigError::UnlimitedNotTaken.to_string();
    assert!(message.contains("finite rate"), "{message}");
}

#[test]
fn limits_with_an_unlimited_member_are_the_other_members() {
    let clock = ManualClock::new();
    let off = TokenBucket::try_new(Quota::unlimited(), &clock).unwrap();
    let on = TokenBucket::try_new(Quota::new(Rate::per_second(2)).burst(2), &clock).unwrap();
    let both = Limits::new([&off, &on]);
    assert_eq!(both.try_acquire([u32::MAX, 2]), Ok(()));
    assert_eq!(
        both.try_acquire([1, 1]),
        Err(Denied::insufficient(Duration::from_millis(500)))
    );
    clock.advance(Duration::from_millis(500));
    let r = both.reserve([5, 1], Duration::ZERO).unwrap();
    assert_eq!(r.wait(), Duration::ZERO);
    assert!(both.try_acquire([1, 1]).is_err());
    assert_eq!(
        both.try_acquire([1, 3]),
        Err(Denied::ExceedsCapacity { burst: 2 })
    );
}

#[cfg(feature = "std")]
#[test]
fn blocking_waits_on_an_unlimited_bucket_return_at_once() {
    let bucket = TokenBucket::try_new(Quota::unlimited(), tollgate::StdClock).unwrap();
    for n in [0, 1, u32::MAX] {
        assert_eq!(bucket.acquire_blocking(n), Ok(Duration::ZERO));
        assert_eq!(
            bucket.acquire_blocking_timeout(n, Duration::ZERO),
            Ok(Duration::ZERO)
        );
    }
}

#[cfg(feature = "tokio")]
#[tokio::test(start_paused = true)]
async fn async_waits_on_an_unlimited_bucket_return_at_once() {
    use tollgate::wait::GiveBack;
    let bucket = TokenBucket::try_new(Quota::unlimited(), tollgate::TokioClock::new()).unwrap();
    let start = tokio::time::Instant::now();
    for n in [0, 1, 1_000, u32::MAX] {
        assert_eq!(bucket.acquire(n).await, Ok(Duration::ZERO));
        assert_eq!(
            bucket.acquire_timeout(n, Duration::ZERO).await,
            Ok(Duration::ZERO)
        );
        let turn = bucket.acquire_reservation(n, Duration::ZERO).await.unwrap();
        bucket.give_back(turn);
    }
    // Many tasks at once: none waits.
    let bucket = std::sync::Arc::new(bucket);
    let tasks: Vec<_> = (0..1_000)
        .map(|_| {
            let bucket = bucket.clone();
            tokio::spawn(async move { bucket.acquire(u32::MAX).await })
        })
        .collect();
    for task in tasks {
        assert_eq!(task.await.unwrap(), Ok(Duration::ZERO));
    }
    assert_eq!(start.elapsed(), Duration::ZERO);
}

#[cfg(feature = "std")]
mod keyed {
    use super::*;
    use tollgate::{KeyedConfigError, KeyedLimiter, Tier, WhenFull};

    #[test]
    fn an_unlimited_keyed_limiter_grants_every_key_and_holds_none() {
        let clock = ManualClock::new();
        let limiter =
            KeyedLimiter::try_new(Quota::unlimited(), &clock, 4, WhenFull::Refuse).unwrap();
        assert!(limiter.is_unlimited());
        // Far more keys than its capacity, each far above any burst.
        for key in 0..10_000u32 {
            assert_eq!(limiter.try_acquire(&key, u32::MAX), Ok(()));
        }
        assert_eq!(limiter.len(), 0);
        assert_eq!(limiter.available(&7), u64::MAX);
        assert_eq!(limiter.set_tier(&7, Tier(0)), Ok(false));
        assert!(limiter.quota().is_unlimited());
        assert_eq!(limiter.until_room(), Duration::ZERO);
        let (quota, until_full) = limiter.quota_and_until_full(&7);
        assert!(quota.is_unlimited());
        assert_eq!(until_full, Duration::ZERO);
    }

    #[test]
    fn waits_on_an_unlimited_keyed_limiter_return_at_once() {
        let limiter =
            KeyedLimiter::try_new(Quota::unlimited(), tollgate::StdClock, 4, WhenFull::Refuse)
                .unwrap();
        for key in 0..100u32 {
            assert_eq!(limiter.acquire_blocking(&key, u32::MAX), Ok(Duration::ZERO));
            assert_eq!(
                limiter.acquire_blocking_timeout(&key, 1, Duration::ZERO),
                Ok(Duration::ZERO)
            );
        }
        assert_eq!(limiter.len(), 0);
    }

    #[cfg(feature = "tokio")]
    #[tokio::test(start_paused = true)]
    async fn async_waits_on_an_unlimited_keyed_limiter_return_at_once() {
        let limiter = KeyedLimiter::try_new(
            Quota::unlimited(),
            tollgate::TokioClock::new(),
            4,
            WhenFull::Refuse,
        )
        .unwrap();
        for key in 0..100u32 {
            assert_eq!(limiter.acquire(&key, u32::MAX).await, Ok(Duration::ZERO));
            assert_eq!(
                limiter.acquire_timeout(&key, 1, Duration::ZERO).await,
                Ok(Duration::ZERO)
            );
        }
        assert_eq!(limiter.len(), 0);
    }

    #[test]
    fn a_limited_keyed_limiter_still_refuses_above_its_burst() {
        let clock = ManualClock::new();
        let limiter = KeyedLimiter::try_new(
            Quota::new(Rate::per_second(1)).burst(2),
            &clock,
            4,
            WhenFull::Refuse,
        )
        .unwrap();
        assert!(!limiter.is_unlimited());
        assert!(limiter.try_acquire(&1u32, 3).is_err());
        assert_eq!(limiter.try_acquire(&1u32, 2), Ok(()));
        assert!(limiter.try_acquire(&1u32, 1).is_err());
    }

    #[test]
    fn a_tier_cannot_be_unlimited() {
        let clock = ManualClock::new();
        let built = KeyedLimiter::<u32, _>::builder(Quota::new(Rate::per_second(1)), &clock)
            .tiers([Quota::unlimited()], |_| Tier(1))
            .build();
        assert_eq!(
            built.err(),
            Some(KeyedConfigError::Quota(ConfigError::UnlimitedNotTaken))
        );
    }
}

#[cfg(feature = "std")]
#[test]
fn headers_state_no_policy_for_an_unlimited_quota() {
    use tollgate::headers::RateLimitHeaders;
    let written = RateLimitHeaders::refusal(&Quota::unlimited(), Duration::ZERO, None);
    assert_eq!(written.pairs().count(), 0);
    let limited = RateLimitHeaders::refusal(
        &Quota::new(Rate::per_second(2)).burst(5),
        Duration::from_secs(1),
        Some(Duration::from_millis(500)),
    );
    let names: Vec<_> = limited.pairs().map(|(name, _)| name).collect();
    assert_eq!(names, ["retry-after", "ratelimit", "ratelimit-policy"]);
}

#[cfg(target_has_atomic = "64")]
#[test]
fn an_adjustable_bucket_refuses_an_unlimited_quota_at_build_and_at_change() {
    use tollgate::AdjustableBucket;
    let clock = ManualClock::new();
    assert_eq!(
        AdjustableBucket::try_new(Quota::unlimited(), &clock).err(),
        Some(ConfigError::UnlimitedNotTaken)
    );
    let bucket = AdjustableBucket::try_new(Quota::new(Rate::per_second(1)), &clock).unwrap();
    assert_eq!(
        bucket.set_quota(Quota::unlimited()).err(),
        Some(tollgate::SetQuotaError::Config(
            ConfigError::UnlimitedNotTaken
        ))
    );
    assert_eq!(bucket.try_acquire(1), Ok(()));
    assert!(bucket.try_acquire(1).is_err());
}

#[cfg(feature = "embedded-hal")]
#[test]
fn a_delay_wait_on_an_unlimited_bucket_never_sleeps() {
    struct Counting(u64);
    impl embedded_hal::delay::DelayNs for Counting {
        fn delay_ns(&mut self, ns: u32) {
            self.0 += u64::from(ns);
        }
    }
    let clock = ManualClock::new();
    let bucket = TokenBucket::try_new(Quota::unlimited(), &clock).unwrap();
    let mut delay = Counting(0);
    for n in [1, 1_000, u32::MAX] {
        assert_eq!(bucket.acquire_with_delay(n, &mut delay), Ok(Duration::ZERO));
    }
    assert_eq!(delay.0, 0);
}

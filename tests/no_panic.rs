//! The hot path has no panic path: each wrapper below is `#[no_panic]`, which makes the link fail
//! if the optimizer cannot prove that the function never panics.
//!
//! Run with `cargo test --release --test no_panic`. The proof needs the optimizer to see every
//! function on the path: the crate's release profile builds it as one codegen unit, and the
//! transition's functions are `#[inline]`, so none is an opaque call that might unwind. A debug
//! build keeps overflow checks and proves nothing, so there this file is empty.
#![cfg(all(not(debug_assertions), not(loom)))]

use core::time::Duration;

use no_panic::no_panic;
use std::sync::atomic::{AtomicU64, Ordering};
use tollgate::{Clock, Denied, ManualClock, Quota, Rate, Reservation, TokenBucket};

/// A free-running 32 768 Hz counter, as a firmware's RTC would be.
#[derive(Debug, Default)]
struct Rtc(AtomicU64);

impl Clock for Rtc {
    const TICKS_PER_SECOND: u64 = 32_768;
    fn now(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A clock that reads the same instant forever: no assumption about the value it returns.
struct Stuck(u64);

impl Clock for Stuck {
    const TICKS_PER_SECOND: u64 = 1_000_000;
    fn now(&self) -> u64 {
        self.0
    }
}

macro_rules! hot_path {
    ($module:ident, $clock:ty, $word:ty) => {
        mod $module {
            use super::*;

            pub type Bucket = TokenBucket<$clock, $word>;

            #[no_panic]
            #[inline(never)]
            pub fn try_acquire(bucket: &Bucket, n: u32) -> Result<(), Denied> {
                bucket.try_acquire(n)
            }

            #[no_panic]
            #[inline(never)]
            pub fn reserve(
                bucket: &Bucket,
                n: u32,
                max_wait: Duration,
            ) -> Result<Reservation, Denied> {
                bucket.reserve(n, max_wait)
            }

            #[no_panic]
            #[inline(never)]
            pub fn cancel(bucket: &Bucket, reservation: Reservation) {
                bucket.cancel(reservation)
            }

            #[no_panic]
            #[inline(never)]
            pub fn available(bucket: &Bucket) -> u64 {
                bucket.available()
            }

            #[no_panic]
            #[inline(never)]
            pub fn touch(bucket: &Bucket) {
                bucket.touch()
            }
        }
    };
}

hot_path!(manual, &'static ManualClock, u64);
hot_path!(manual_u32, &'static ManualClock, u32);
hot_path!(rtc, Rtc, u64);
hot_path!(rtc_u32, Rtc, u32);
hot_path!(stuck, Stuck, u64);

static CLOCK: ManualClock = ManualClock::new();

/// The wrappers run too, so the functions proven are the ones the bucket uses.
#[test]
fn the_hot_path_is_proven_not_to_panic() {
    let quota = Quota::new(Rate::per_second(10)).burst(3);

    let bucket = manual::Bucket::try_new_with_word(quota, &CLOCK).unwrap();
    assert_eq!(manual::available(&bucket), 3);
    assert_eq!(manual::try_acquire(&bucket, 3), Ok(()));
    let reservation = manual::reserve(&bucket, 1, Duration::MAX).unwrap();
    assert_eq!(reservation.wait(), Duration::from_millis(100));
    manual::cancel(&bucket, reservation);
    manual::touch(&bucket);
    assert_eq!(
        manual::try_acquire(&bucket, 1),
        Err(Denied::insufficient(Duration::from_millis(100)))
    );

    let bucket = manual_u32::Bucket::try_new_with_word(quota, &CLOCK).unwrap();
    assert_eq!(
        manual_u32::try_acquire(&bucket, 4),
        Err(Denied::ExceedsCapacity { burst: 3 })
    );
    let reservation = manual_u32::reserve(&bucket, 3, Duration::ZERO).unwrap();
    manual_u32::cancel(&bucket, reservation);
    manual_u32::touch(&bucket);
    assert_eq!(manual_u32::available(&bucket), 0);

    let bucket = rtc::Bucket::new(quota.start_empty(), Rtc::default());
    assert!(rtc::try_acquire(&bucket, 1).is_err());
    bucket.clock().0.store(32_768, Ordering::Relaxed);
    assert_eq!(rtc::available(&bucket), 3);
    let reservation = rtc::reserve(&bucket, 3, Duration::ZERO).unwrap();
    rtc::cancel(&bucket, reservation);
    rtc::touch(&bucket);

    let bucket = rtc_u32::Bucket::try_new_with_word(quota, Rtc::default()).unwrap();
    assert_eq!(rtc_u32::try_acquire(&bucket, 2), Ok(()));
    let reservation = rtc_u32::reserve(&bucket, 2, Duration::from_secs(1)).unwrap();
    rtc_u32::cancel(&bucket, reservation);
    rtc_u32::touch(&bucket);
    assert_eq!(rtc_u32::available(&bucket), 1);

    let bucket = stuck::Bucket::try_new(quota, Stuck(u64::MAX)).unwrap();
    assert_eq!(stuck::try_acquire(&bucket, 3), Ok(()));
    assert!(stuck::try_acquire(&bucket, 1).is_err());
    let too_many = stuck::reserve(&bucket, u32::MAX, Duration::MAX);
    assert_eq!(too_many, Err(Denied::ExceedsCapacity { burst: 3 }));
    let reservation = stuck::reserve(&bucket, 1, Duration::MAX).unwrap();
    assert_eq!(reservation.wait(), Duration::from_millis(100));
    stuck::cancel(&bucket, reservation);
    stuck::touch(&bucket);
    assert_eq!(stuck::available(&bucket), 0);
}

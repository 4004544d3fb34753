//! Loom models of the upstream features: a pause racing acquires, and several buckets taken
//! from all or none while a pause lands. Run with
//! `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test --release --test loom_upstream`.
#![cfg(loom)]

use std::time::Duration;

use loom::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use loom::sync::Arc;
use loom::thread;
use tollgate::{Clock, Denied, Limits, Pause, Quota, Rate, TokenBucket};

/// A frozen nanosecond clock: grants come only from the burst, so every token is accounted for.
struct Frozen;
impl Clock for Frozen {
    const TICKS_PER_SECOND: u64 = 1_000_000_000;
    fn now(&self) -> u64 {
        0
    }
}

fn bucket(burst: u64) -> TokenBucket<Frozen> {
    TokenBucket::try_new(Quota::new(Rate::per_second(1)).burst(burst), Frozen).unwrap()
}

#[test]
fn no_grant_is_ordered_after_a_pause_and_the_pause_is_not_shortened() {
    loom::model(|| {
        let bucket = Arc::new(bucket(2));
        let paused = Arc::new(AtomicBool::new(false));
        let acquirer = {
            let (bucket, paused) = (bucket.clone(), paused.clone());
            thread::spawn(move || {
                let mut granted = 0;
                for _ in 0..2 {
                    // Acquire: if the pause's flag is seen, so is its write to the word.
                    let after_pause = paused.load(Ordering::Acquire);
                    if bucket.try_acquire(1).is_ok() {
                        assert!(!after_pause, "granted after the pause landed");
                        granted += 1;
                    }
                }
                granted
            })
        };
        let pause = bucket.pause_for(Duration::from_secs(3));
        // Release: publishes the pause's write to the word with the flag.
        paused.store(true, Ordering::Release);
        assert_eq!(
            pause,
            Pause::Paused {
                resumes_after: Duration::from_secs(3)
            }
        );
        let granted = acquirer.join().unwrap();
        assert!(granted <= 2);
        // Whatever the interleaving: empty at 3 s, the next token at 4 s.
        assert_eq!(
            bucket.try_acquire(1),
            Err(Denied::insufficient(Duration::from_secs(4)))
        );
    });
}

#[test]
fn limits_grant_all_or_none_and_lose_no_token_while_a_pause_lands() {
    loom::model(|| {
        let a = Arc::new(bucket(2));
        let b = Arc::new(bucket(1));
        let granted = Arc::new(AtomicU32::new(0));
        let callers: Vec<_> = (0..2)
            .map(|_| {
                let (a, b, granted) = (a.clone(), b.clone(), granted.clone());
                thread::spawn(move || {
                    if Limits::new([&*a, &*b]).try_acquire([1, 1]).is_ok() {
                        // Relaxed: read after join.
                        granted.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        // A 429 for the second bucket's upstream, racing the callers: a caller denied by it
        // gives its token in the first bucket back.
        let _ = b.pause_for(Duration::from_secs(10));
        for caller in callers {
            caller.join().unwrap();
        }
        let granted = granted.load(Ordering::Relaxed);
        // b holds one token: at most one caller, and a lost exactly what was granted.
        assert!(granted <= 1);
        assert_eq!(a.available(), 2 - u64::from(granted));
        // b is paused whatever else happened.
        assert_eq!(b.available(), 0);
    });
}

#[test]
fn a_quota_change_racing_acquires_mints_nothing() {
    loom::model(|| {
        let bucket = Arc::new(
            tollgate::AdjustableBucket::try_new(Quota::new(Rate::per_second(1)).burst(2), Frozen)
                .unwrap(),
        );
        let acquirer = {
            let bucket = bucket.clone();
            thread::spawn(move || (0..2).filter(|_| bucket.try_acquire(1).is_ok()).count() as u64)
        };
        // Down to a burst of 1 at another rate (so other units), racing the two acquires.
        bucket
            .set_quota(Quota::new(Rate::new(1, Duration::from_secs(3))).burst(1))
            .unwrap();
        let granted = acquirer.join().unwrap();
        let left = bucket.available();
        // The bucket held 2; the change keeps what is left, capped at 1, and mints nothing. So
        // the change first grants 1, one acquire first grants 2, both first grant 2; the
        // bucket ends empty every time.
        assert!((1..=2).contains(&granted), "granted {granted}");
        assert_eq!(left, 0);
        assert_eq!(bucket.burst(), 1);
        // Empty to the unit: the next token is a whole period away. A take computed with the
        // old quota but landing after the change would leave a fraction behind.
        // (The 32-bit layout holds 1 per 3 s on a nanosecond clock rounded down by under a
        // millionth: the period, and at most a microsecond more.)
        let Err(Denied::Insufficient { retry_after }) = bucket.try_acquire(1) else {
            panic!("granted from an empty bucket");
        };
        let retry_after = retry_after.get();
        assert!(
            retry_after >= Duration::from_secs(3)
                && retry_after - Duration::from_secs(3) <= Duration::from_micros(1),
            "{retry_after:?}"
        );
    });
}

/// A clock that moves 7 µs at every reading, so that quota changes and acquires land at
/// instants that are no multiple of either layout's step. A plain atomic, outside the model:
/// the interleavings explored are the bucket's, and the clock only has to move.
#[derive(Clone)]
struct Stepping(std::sync::Arc<std::sync::atomic::AtomicU64>);
impl Clock for Stepping {
    const TICKS_PER_SECOND: u64 = 1_000_000_000;
    fn now(&self) -> u64 {
        // Relaxed: the clock is a counter; the bucket's own word orders its decisions.
        self.0
            .fetch_add(7_000, std::sync::atomic::Ordering::Relaxed)
            + 7_000
    }
}

#[test]
fn quota_changes_between_layouts_of_different_resolutions_mint_nothing() {
    loom::model(|| {
        let ticks = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let (slow, fast) = (
            Quota::new(Rate::per_second(50_000)).burst(4).start_empty(),
            Quota::new(Rate::per_second(50_001)).burst(4),
        );
        let bucket =
            Arc::new(tollgate::AdjustableBucket::try_new(slow, Stepping(ticks.clone())).unwrap());
        let acquirer = {
            let bucket = bucket.clone();
            thread::spawn(move || (0..2).filter(|_| bucket.try_acquire(1).is_ok()).count() as u64)
        };
        bucket.set_quota(fast).unwrap();
        let granted = acquirer.join().unwrap();
        let left = bucket.available();
        // Every token granted or held accrued at the higher rate since the start, empty.
        let elapsed_ns = ticks.load(std::sync::atomic::Ordering::Relaxed);
        let accrued = 50_001 * elapsed_ns / 1_000_000_000;
        assert!(
            granted + left <= accrued,
            "{granted} granted and {left} held, {accrued} accrued in {elapsed_ns} ns"
        );
    });
}

/// A nanosecond clock the model sets between its phases (not a modelled atomic: only the main
/// thread moves it, after the others have joined).
#[derive(Clone)]
struct Set(Arc<std::sync::atomic::AtomicU64>);
impl Clock for Set {
    const TICKS_PER_SECOND: u64 = 1_000_000_000;
    fn now(&self) -> u64 {
        self.0.load(std::sync::atomic::Ordering::Relaxed)
    }
}

#[test]
fn a_limits_part_held_racing_a_take_never_fills_its_bucket_past_the_burst() {
    loom::model(|| {
        let clock = Set(Arc::new(std::sync::atomic::AtomicU64::new(0)));
        // a: 1/s, burst 2, full; b: a token every 2 s, none yet.
        let a = Quota::new(Rate::per_second(1)).burst(2);
        let b = Quota::new(Rate::per_minute(30)).burst(1).start_empty();
        let a = Arc::new(TokenBucket::try_new(a, clock.clone()).unwrap());
        let b = Arc::new(TokenBucket::try_new(b, clock.clone()).unwrap());
        let taker = {
            let a = a.clone();
            thread::spawn(move || u64::from(a.try_acquire(1).is_ok()))
        };
        // a's part is due now, b's in 2 s: a's is held until then, when a would have refilled.
        let reservation = Limits::new([&*a, &*b])
            .reserve([1, 1], Duration::from_secs(3))
            .unwrap();
        assert_eq!(reservation.wait(), Duration::from_secs(2));
        let taken = taker.join().unwrap();
        // At the instant the caller acts, a holds at most its burst beside the part, and over
        // the 2 s the part, the take and what a holds then stay within burst + rate × 2 s.
        clock
            .0
            .store(2_000_000_000, std::sync::atomic::Ordering::Relaxed);
        let held = a.available();
        assert!(held + 1 <= 2, "{held} beside the part");
        assert!(taken + 1 + held <= 4, "{taken} taken, {held} held");
    });
}

//! Real threads on one `KeyedLimiter`: floods of new keys, returning keys that become
//! protected, tier moves, sweeps and touches, all at once on a clock another thread moves. The
//! counts a user reads never pass the capacity or the protected share, whatever moment they are
//! read at, and once the threads are done the counts are the keys held and every slot can be
//! used again.
//!
//! Small enough to run under ThreadSanitizer (`STRESS_ROUNDS` scales it):
//!
//! ```text
//! RUSTFLAGS="-Zsanitizer=thread" cargo +nightly test -Zbuild-std \
//!     --target x86_64-unknown-linux-gnu -p tollgate --test keyed_stress
//! ```

use core::time::Duration;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread;

use tollgate::{KeyedLimiter, ManualClock, Quota, Rate, Tier, WhenFull};

const CAPACITY: usize = 64;
const PROTECTED: usize = CAPACITY - CAPACITY / 4;
/// Keys each flooding thread tries, unless `STRESS_ROUNDS` says otherwise.
const ROUNDS: u64 = 20_000;
/// Keys that come back: protected after their second grant.
const RETURNING: u64 = 100;

fn rounds() -> u64 {
    std::env::var("STRESS_ROUNDS")
        .ok()
        .and_then(|rounds| rounds.parse().ok())
        .unwrap_or(ROUNDS)
}

#[test]
fn counts_read_under_load_never_pass_the_capacity_and_come_out_exact() {
    let clock = ManualClock::new();
    let slow = Quota::new(Rate::per_second(10)).burst(2);
    let fast = Quota::new(Rate::per_second(1_000)).burst(4);
    for when_full in [WhenFull::Refuse, WhenFull::Admit] {
        let limiter = KeyedLimiter::<u64, _>::builder(slow, &clock)
            .capacity(CAPACITY)
            .shards(8)
            .when_full(when_full)
            .protection(Duration::from_millis(50))
            .tiers([fast], |key| Tier((key % 2) as u8))
            .build()
            .unwrap();
        let rounds = rounds();
        let done = AtomicBool::new(false);
        let flooders_done = AtomicUsize::new(0);
        let (most, most_protected) = thread::scope(|scope| {
            for flooder in 0..2u64 {
                let (limiter, clock, flooders_done) = (&limiter, &clock, &flooders_done);
                scope.spawn(move || {
                    for i in 0..rounds {
                        let _ = limiter.try_acquire(&(1_000 + flooder * rounds + i), 1);
                        if flooder == 0 {
                            clock.advance(Duration::from_micros(50));
                        }
                    }
                    flooders_done.fetch_add(1, Ordering::Relaxed);
                });
            }
            let (limiter, done) = (&limiter, &done);
            scope.spawn(move || {
                let mut i = 0u64;
                while !done.load(Ordering::Relaxed) {
                    let key = i % RETURNING;
                    let _ = limiter.try_acquire(&key, 1);
                    if i % 7 == 0 {
                        let _ = limiter.set_tier(&key, Tier((i / 7 % 2) as u8));
                    }
                    i += 1;
                }
            });
            scope.spawn(move || {
                while !done.load(Ordering::Relaxed) {
                    limiter.sweep();
                    limiter.touch_all();
                    let _ = limiter.until_room();
                    thread::yield_now();
                }
            });
            let sampler = scope.spawn(move || {
                let (mut most, mut most_protected) = (0, 0);
                while !done.load(Ordering::Relaxed) {
                    most = limiter.len().max(most);
                    most_protected = limiter.protected_len().max(most_protected);
                }
                (most, most_protected)
            });
            while flooders_done.load(Ordering::Relaxed) < 2 {
                thread::yield_now();
            }
            done.store(true, Ordering::Relaxed);
            sampler.join().unwrap()
        });
        assert!(most <= CAPACITY, "{when_full:?}: len() read {most}");
        assert!(
            most_protected <= PROTECTED,
            "{when_full:?}: protected_len() read {most_protected}"
        );
        assert!(
            most > CAPACITY / 2,
            "{when_full:?}: the floods filled it ({most})"
        );

        // Quiet now: the count is the keys held.
        let used = (0..RETURNING).chain(1_000..1_000 + 2 * rounds);
        let held = used.filter(|key| limiter.tier(key).is_some()).count();
        assert_eq!(limiter.len(), held, "{when_full:?}");
        // Everything full and past its windows (a slow bucket refills in 200 ms, then the
        // default probation of a second): all of it goes, and every slot is there again.
        clock.advance(Duration::from_secs(2));
        limiter.sweep();
        assert_eq!((limiter.len(), limiter.protected_len()), (0, 0));
        for key in 0..CAPACITY as u64 {
            assert_eq!(limiter.try_acquire(&(u64::MAX - key), 1), Ok(()));
        }
        assert_eq!(limiter.len(), CAPACITY);
    }
}

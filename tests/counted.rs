//! `Counted` counts what its callers were answered, exactly, under threads: eight threads race
//! takes of one to three tokens on one bucket (and a keyed limiter) as they move the clock, each
//! tallying its own answers; the counters must equal the sums of the tallies, call for call and
//! token for token.

use std::thread;
use std::time::Duration;

use tollgate::observe::{Counted, Counters, Counts};
use tollgate::{KeyedLimiter, ManualClock, Quota, Rate, TokenBucket, WhenFull};

/// A caller's own tally of its answers.
#[derive(Default, Debug, Clone, Copy, PartialEq, Eq)]
struct Tally {
    granted_calls: u64,
    granted_tokens: u64,
    denied_calls: u64,
    denied_tokens: u64,
}

impl Tally {
    fn add(&mut self, n: u32, granted: bool) {
        if granted {
            self.granted_calls += 1;
            self.granted_tokens += u64::from(n);
        } else {
            self.denied_calls += 1;
            self.denied_tokens += u64::from(n);
        }
    }

    fn sum(tallies: impl IntoIterator<Item = Tally>) -> Tally {
        tallies.into_iter().fold(Tally::default(), |a, b| Tally {
            granted_calls: a.granted_calls + b.granted_calls,
            granted_tokens: a.granted_tokens + b.granted_tokens,
            denied_calls: a.denied_calls + b.denied_calls,
            denied_tokens: a.denied_tokens + b.denied_tokens,
        })
    }

    fn of(counts: Counts) -> Tally {
        Tally {
            granted_calls: counts.granted_calls,
            granted_tokens: counts.granted_tokens,
            denied_calls: counts.denied_calls,
            denied_tokens: counts.denied_tokens,
        }
    }
}

/// Runs `call(thread, i)` on eight threads, 20 000 times each, every other call moving the
/// clock on by 25 µs.
fn race(clock: &ManualClock, call: impl Fn(usize, u64) -> (u32, bool) + Sync) -> Tally {
    thread::scope(|s| {
        let tallies: Vec<_> = (0..8)
            .map(|t| {
                let call = &call;
                s.spawn(move || {
                    let mut tally = Tally::default();
                    for i in 0..20_000 {
                        if i % 2 == 0 {
                            clock.advance(Duration::from_micros(25));
                        }
                        let (n, granted) = call(t, i);
                        tally.add(n, granted);
                    }
                    tally
                })
            })
            .collect();
        Tally::sum(tallies.into_iter().map(|h| h.join().unwrap()))
    })
}

#[test]
fn a_counted_bucket_counts_every_answer_its_callers_got() {
    let clock = ManualClock::new();
    let counters = Counters::new();
    let bucket = Counted::new(
        TokenBucket::try_new(Quota::new(Rate::per_second(20_000)).burst(50), &clock).unwrap(),
        &counters,
    );
    let tallied = race(&clock, |t, i| {
        let n = 1 + ((t as u64 + i) % 3) as u32;
        (n, bucket.try_acquire(n).is_ok())
    });
    assert_eq!(Tally::of(counters.counts()), tallied);
    // Both answers happened, many times: the race was real.
    assert!(
        tallied.granted_calls > 1_000 && tallied.denied_calls > 1_000,
        "{tallied:?}"
    );
}

#[test]
fn a_counted_keyed_limiter_counts_every_answer_its_callers_got() {
    let clock = ManualClock::new();
    let counters = Counters::new();
    let limiter = Counted::new(
        KeyedLimiter::new(
            Quota::new(Rate::per_second(5_000)).burst(20),
            &clock,
            64,
            WhenFull::Refuse,
        ),
        &counters,
    );
    let tallied = race(&clock, |t, i| {
        let n = 1 + (i % 2) as u32;
        // Keys shared between threads, and more keys than the limiter holds.
        let key = (t as u64 * 7 + i) % 100;
        (n, limiter.try_acquire(&key, n).is_ok())
    });
    assert_eq!(Tally::of(counters.counts()), tallied);
    assert!(
        tallied.granted_calls > 1_000 && tallied.denied_calls > 1_000,
        "{tallied:?}"
    );
}

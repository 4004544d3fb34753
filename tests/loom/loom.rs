//! Loom models of the bucket: every interleaving of two or three threads (up to the preemption
//! bound) is run, and each outcome is checked two ways: against plain bounds that any correct
//! limiter meets (never more than the start fill plus the rate times the time the clock showed;
//! a cancel never gives back more than was taken), and against a reference computation of the
//! model for some order of the operations, so that every denial's `retry_after`, every
//! reservation's due instant and every `available` reading is the one the state it must have
//! observed gives.
//!
//! Run with `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test --release --test loom`.
#![cfg(loom)]

use std::time::Duration;

use loom::sync::Arc;
use loom::thread;
use tollgate::{Clock, Denied, ManualClock, Quota, Rate, Reservation, TokenBucket};

/// One token every 10 ns on the nanosecond `ManualClock`: the word counts one unit per tick,
/// so the reference can work in plain nanoseconds.
const TOKEN_NS: i128 = 10;
const RATE: Rate = Rate::per_second(100_000_000);
/// Where the clock starts: away from zero, so that nothing depends on it.
const T0: u64 = 1_000_000;
const MAX_WAIT: Duration = Duration::from_secs(1);

type Bucket = TokenBucket<ManualClock>;

fn bucket(quota: Quota) -> Arc<Bucket> {
    Arc::new(TokenBucket::try_new(quota, ManualClock::starting_at(T0)).unwrap())
}

/// What a thread did, and what it saw.
#[derive(Clone, Debug, PartialEq)]
enum Event {
    Acquire(u32, Result<(), Denied>),
    /// A reservation of `tokens`, due at `due_ticks`.
    Reserve {
        tokens: u32,
        due_ticks: u64,
    },
    Cancel {
        tokens: u32,
        due_ticks: u64,
    },
    Available(u64),
    Advance(u64),
}

fn acquire(bucket: &Bucket, n: u32) -> Event {
    Event::Acquire(n, bucket.try_acquire(n))
}

fn reserve(bucket: &Bucket, n: u32) -> (Event, Reservation) {
    let reservation = bucket.reserve(n, MAX_WAIT).expect("within the debt bound");
    let event = Event::Reserve {
        tokens: n,
        due_ticks: reservation.due_ticks(),
    };
    (event, reservation)
}

fn cancel(bucket: &Bucket, reservation: Reservation) -> Event {
    let event = Event::Cancel {
        tokens: reservation.tokens(),
        due_ticks: reservation.due_ticks(),
    };
    bucket.cancel(reservation);
    event
}

fn advance(bucket: &Bucket, ns: u64) -> Event {
    bucket.clock().advance(Duration::from_nanos(ns));
    Event::Advance(ns)
}

/// The bucket in plain integers: `empty_at` is the instant, in nanoseconds, at which it would be
/// empty given every grant so far; its level at `now` is `now - empty_at`, at most the burst.
#[derive(Clone, Copy, Debug)]
struct Reference {
    empty_at: i128,
    burst: i128,
}

impl Reference {
    fn new(quota: &Quota) -> Self {
        Reference {
            empty_at: T0 as i128 - quota.start_fill() as i128 * TOKEN_NS,
            burst: quota.burst_size() as i128,
        }
    }

    fn level(&self, now: i128) -> i128 {
        (now - self.empty_at).min(self.burst * TOKEN_NS)
    }

    /// The state after `event` happened at `now`, if the reference agrees with what was seen.
    fn apply(mut self, event: &Event, now: u64) -> Option<Self> {
        let now = now as i128;
        match *event {
            Event::Acquire(n, seen) => {
                let cost = n as i128 * TOKEN_NS;
                let level = self.level(now);
                let expected = if n as i128 > self.burst {
                    Err(Denied::ExceedsCapacity {
                        burst: self.burst as u64,
                    })
                } else if level >= cost {
                    self.empty_at = now - (level - cost);
                    Ok(())
                } else {
                    let short = (cost - level) as u64;
                    Err(Denied::insufficient(Duration::from_nanos(short)))
                };
                (expected == seen).then_some(self)
            }
            Event::Reserve { tokens, due_ticks } => {
                let cost = tokens as i128 * TOKEN_NS;
                let level = self.level(now);
                self.empty_at = now - (level - cost);
                let due = now.max(self.empty_at);
                (due == due_ticks as i128).then_some(self)
            }
            Event::Cancel { tokens, due_ticks } => {
                let due = due_ticks as i128;
                if due > now {
                    // Everything not yet counted on by later reservations comes back.
                    let overtaken = (self.empty_at - due).max(0);
                    let restore = tokens as i128 * TOKEN_NS - overtaken;
                    if restore > 0 {
                        let level = (self.level(now) + restore).min(self.burst * TOKEN_NS);
                        self.empty_at = now - level;
                    }
                }
                Some(self)
            }
            Event::Available(seen) => {
                let tokens = self.level(now).max(0) / TOKEN_NS;
                (tokens == seen as i128).then_some(self)
            }
            Event::Advance(_) => Some(self),
        }
    }
}

/// Whether some interleaving of the threads' events, each thread in its own order, explains
/// every outcome: each operation read the clock at a value the clock had shown by then and no
/// earlier than that thread's previous reading.
fn explained(reference: Reference, threads: &[Vec<Event>]) -> bool {
    fn search(
        reference: Reference,
        threads: &[Vec<Event>],
        next: &mut [usize],
        last_read: &mut [u64],
        clock: &mut Vec<u64>,
    ) -> bool {
        if next.iter().zip(threads).all(|(&i, t)| i == t.len()) {
            return true;
        }
        for thread in 0..threads.len() {
            let Some(event) = threads[thread].get(next[thread]) else {
                continue;
            };
            next[thread] += 1;
            let found = if let Event::Advance(ns) = *event {
                clock.push(clock.last().unwrap() + ns);
                let found = search(reference, threads, next, last_read, clock);
                clock.pop();
                found
            } else {
                let candidates: Vec<u64> = clock
                    .iter()
                    .copied()
                    .filter(|&t| t >= last_read[thread])
                    .collect();
                candidates.into_iter().any(|now| {
                    let Some(after) = reference.apply(event, now) else {
                        return false;
                    };
                    let previous = std::mem::replace(&mut last_read[thread], now);
                    let found = search(after, threads, next, last_read, clock);
                    last_read[thread] = previous;
                    found
                })
            };
            next[thread] -= 1;
            if found {
                return true;
            }
        }
        false
    }
    let mut next = vec![0; threads.len()];
    let mut last_read = vec![T0; threads.len()];
    search(reference, threads, &mut next, &mut last_read, &mut vec![T0])
}

fn tokens_acquired(threads: &[Vec<Event>]) -> u64 {
    threads
        .iter()
        .flatten()
        .map(|event| match event {
            Event::Acquire(n, Ok(())) => *n as u64,
            _ => 0,
        })
        .sum()
}

/// Checks a run of acquisitions: no more than the start fill plus one token per 10 ns the clock
/// moved, and every outcome explained by the reference for some order.
fn check_acquisitions(quota: &Quota, bucket: &Bucket, threads: &[Vec<Event>]) {
    let elapsed_ns = bucket.clock().now() - T0;
    let granted = tokens_acquired(threads);
    let bound = quota.start_fill() + elapsed_ns / TOKEN_NS as u64;
    assert!(
        granted <= bound,
        "over-grant: {granted} tokens granted, at most {bound} earned: {threads:?}"
    );
    assert!(
        explained(Reference::new(quota), threads),
        "no order of the operations explains {threads:?}"
    );
}

fn spawn<F>(bucket: &Arc<Bucket>, body: F) -> thread::JoinHandle<Vec<Event>>
where
    F: FnOnce(&Bucket) -> Vec<Event> + 'static,
{
    let bucket = bucket.clone();
    thread::spawn(move || body(&bucket))
}

fn join(handles: Vec<thread::JoinHandle<Vec<Event>>>) -> Vec<Vec<Event>> {
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

#[test]
fn two_threads_on_a_frozen_clock_share_the_burst() {
    let quota = Quota::new(RATE).burst(3);
    loom::model(move || {
        let bucket = bucket(quota);
        let threads = join(vec![
            spawn(&bucket, |b| vec![acquire(b, 1), acquire(b, 1)]),
            spawn(&bucket, |b| vec![acquire(b, 2)]),
        ]);
        check_acquisitions(&quota, &bucket, &threads);
        // The clock never moved: exactly the burst is granted when four tokens are asked for,
        // unless the request for two came when only one was left.
        let granted = tokens_acquired(&threads);
        assert!(granted == 3 || granted == 2, "{threads:?}");
    });
}

#[test]
fn three_threads_on_a_frozen_clock_share_the_burst() {
    let quota = Quota::new(RATE).burst(2);
    loom::model(move || {
        let bucket = bucket(quota);
        let threads = join(vec![
            spawn(&bucket, |b| vec![acquire(b, 1)]),
            spawn(&bucket, |b| vec![acquire(b, 1)]),
            spawn(&bucket, |b| vec![acquire(b, 1)]),
        ]);
        check_acquisitions(&quota, &bucket, &threads);
        assert_eq!(tokens_acquired(&threads), 2, "{threads:?}");
    });
}

#[test]
fn two_threads_on_an_advancing_clock_get_what_it_showed() {
    let quota = Quota::new(RATE).burst(2).start_with(1);
    loom::model(move || {
        let bucket = bucket(quota);
        let threads = join(vec![
            spawn(&bucket, |b| vec![acquire(b, 1), acquire(b, 1)]),
            spawn(&bucket, |b| vec![advance(b, 15), acquire(b, 1)]),
        ]);
        check_acquisitions(&quota, &bucket, &threads);
    });
}

#[test]
fn three_threads_on_an_advancing_clock_get_what_it_showed() {
    let quota = Quota::new(RATE).burst(2).start_with(1);
    loom::model(move || {
        let bucket = bucket(quota);
        let threads = join(vec![
            spawn(&bucket, |b| vec![acquire(b, 1), acquire(b, 1)]),
            spawn(&bucket, |b| vec![acquire(b, 1)]),
            spawn(&bucket, |b| {
                vec![advance(b, 10), acquire(b, 1), advance(b, 10)]
            }),
        ]);
        check_acquisitions(&quota, &bucket, &threads);
    });
}

#[test]
fn racing_first_uses_apply_the_start_fill_once() {
    // Built like a `static`: the word holds the never-used mark until a first use applies the
    // start fill, and two first uses race to do it.
    let quota = Quota::new(RATE).burst(2);
    loom::model(move || {
        let bucket = Arc::new(TokenBucket::new(quota, ManualClock::starting_at(T0)));
        let threads = join(vec![
            spawn(&bucket, |b| vec![acquire(b, 1), acquire(b, 1)]),
            spawn(&bucket, |b| vec![acquire(b, 1)]),
        ]);
        check_acquisitions(&quota, &bucket, &threads);
        assert_eq!(tokens_acquired(&threads), 2, "{threads:?}");
    });
}

/// Tokens of the reservations still held, and their due instants.
fn live_reservations(threads: &[Vec<Event>]) -> Vec<(u64, u32)> {
    let mut live = Vec::new();
    for event in threads.iter().flatten() {
        if let Event::Reserve { tokens, due_ticks } = *event {
            live.push((due_ticks, tokens));
        }
    }
    for event in threads.iter().flatten() {
        if let Event::Cancel { tokens, due_ticks } = *event {
            let i = live.iter().position(|&r| r == (due_ticks, tokens)).unwrap();
            live.remove(i);
        }
    }
    live.sort_unstable();
    live
}

#[test]
fn reserve_racing_cancel_gives_back_no_more_than_was_taken() {
    let quota = Quota::new(RATE).burst(4).start_empty();
    loom::model(move || {
        let bucket = bucket(quota);
        let (first, r1) = reserve(&bucket, 2);
        let (second, _kept) = reserve(&bucket, 1);
        let mut threads = join(vec![
            spawn(&bucket, move |b| vec![cancel(b, r1)]),
            spawn(&bucket, |b| vec![reserve(b, 1).0]),
            spawn(&bucket, |b| vec![reserve(b, 1).0]),
        ]);
        // A probe after the race shows where the bucket's debt ends.
        let (probe, _) = reserve(&bucket, 1);
        threads.insert(0, vec![first, second]);
        threads.push(vec![probe.clone()]);

        // Never gives back more than was taken: the debt still covers every live reservation.
        let Event::Reserve { due_ticks, .. } = probe else {
            unreachable!()
        };
        let debt_ns = (due_ticks - T0) as i128 - TOKEN_NS;
        let live = live_reservations(&threads);
        let held: i128 = live.iter().map(|&(_, n)| n as i128).sum::<i128>() - 1; // less the probe
        assert!(
            debt_ns >= held * TOKEN_NS,
            "gave back too much: {debt_ns} ns of debt for {held} held tokens: {threads:?}"
        );
        // No over-grant: by any instant, the live reservations due hold no more than had accrued.
        let mut due_by = 0;
        for &(due, n) in &live {
            due_by += n as i128;
            assert!(
                due_by * TOKEN_NS <= (due - T0) as i128,
                "{due_by} tokens due by {due}: {threads:?}"
            );
        }
        // The two racing reservations queue one behind the other.
        let racing: Vec<u64> = threads[2..4]
            .iter()
            .flatten()
            .map(|event| match event {
                Event::Reserve { due_ticks, .. } => *due_ticks,
                _ => unreachable!(),
            })
            .collect();
        assert!(
            racing[0].abs_diff(racing[1]) >= TOKEN_NS as u64,
            "{threads:?}"
        );
        assert!(
            explained(Reference::new(&quota), &threads),
            "no order of the operations explains {threads:?}"
        );
    });
}

#[test]
fn available_racing_acquisitions_reads_a_state_that_existed() {
    let quota = Quota::new(RATE).burst(3);
    loom::model(move || {
        let bucket = bucket(quota);
        let threads = join(vec![
            spawn(&bucket, |b| vec![acquire(b, 1), acquire(b, 2)]),
            spawn(&bucket, |b| {
                vec![
                    Event::Available(b.available()),
                    Event::Available(b.available()),
                ]
            }),
        ]);
        check_acquisitions(&quota, &bucket, &threads);
        // On a frozen clock the readings only go down.
        let [Event::Available(a), Event::Available(b)] = threads[1][..] else {
            unreachable!()
        };
        assert!(a >= b && a <= 3, "{threads:?}");
    });
}

#[test]
fn available_racing_acquisitions_on_an_advancing_clock() {
    let quota = Quota::new(RATE).burst(2).start_with(1);
    loom::model(move || {
        let bucket = bucket(quota);
        let threads = join(vec![
            spawn(&bucket, |b| vec![acquire(b, 1), acquire(b, 1)]),
            spawn(&bucket, |b| {
                vec![advance(b, 10), Event::Available(b.available())]
            }),
        ]);
        check_acquisitions(&quota, &bucket, &threads);
    });
}

/// The models bite: with the compare-exchange replaced by a load and a blind store, two threads
/// both take the last token, and the model finds that interleaving.
#[test]
fn the_models_catch_a_lost_update() {
    let quota = Quota::new(RATE).burst(1);
    let caught = std::panic::catch_unwind(|| {
        tollgate::sync_models::with_blind_stores(|| {
            loom::model(move || {
                let bucket =
                    Arc::new(TokenBucket::try_new(quota, ManualClock::starting_at(T0)).unwrap());
                let threads = join(vec![
                    spawn(&bucket, |b| vec![acquire(b, 1)]),
                    spawn(&bucket, |b| vec![acquire(b, 1)]),
                ]);
                check_acquisitions(&quota, &bucket, &threads);
            })
        });
    });
    let payload = caught.expect_err("the broken transition went unnoticed");
    let message = payload
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| payload.downcast_ref::<&str>().copied())
        .unwrap_or_default();
    assert!(message.starts_with("over-grant"), "{message}");
}

//! The README's table: ns per `try_acquire(1)` on one thread, tollgate beside its floor and
//! governor on each clock, measured in interleaved rounds (every limiter once a round, in turn)
//! and reported as medians, so that a shared machine's slow spells fall on all of them alike.
//!
//! `cargo bench --bench ratios` (`-- 41` for the rounds; 31 by default). Then each limiter's
//! denial divided by its grant, the two timed in the same rounds (every clock's grants and
//! denials of tollgate and governor together), round by round. The denials then again
//! beside their own floor (the clock's read, one load, one compare: a denial writes nothing),
//! and read for their wait, as a 429 with `Retry-After` reads it (tollgate's `retry_after()`;
//! governor's denial holds the instant it is ready, so `wait_time_from` a fresh reading). Then
//! the same limiters
//! shared by two threads: million checks per second, the floor there being the most a shared
//! word can take (clock, load, compare-exchange). Last, two threads on a limiter each, the two
//! side by side in memory as a `Vec` holds them: what they share is cache lines only. The two
//! threaded tables also give tollgate's ratio to governor round by round (median and quartiles):
//! contended figures move by a tenth from run to run, and a round's two figures move together.
//!
//! The floor is what no limiter on that clock can beat: the clock's read (for the TSC,
//! `TscClock`'s: the counter read in place and scaled to nanoseconds by one multiply), one load
//! and one compare-exchange. The TSC's grants are also set beside the floor on quanta's own
//! reading of the counter (its `raw` and `delta_as_nanos`, the reading governor's default clock
//! makes), the floor that `TscClock`'s reading was first measured against.

mod common;

use std::hint::black_box;
use std::time::Instant;

use common::{
    by_round, floor, line_up, line_up_deny_floors, line_up_neighbours, line_up_waits, median,
    time_on_threads, Check, Path, QuantaReading,
};

/// Checks per timing: long enough to dwarf `Instant::now()`, short enough for many rounds.
const CHECKS: u64 = 200_000;

fn ns_per_check(limiter: &dyn Check) -> f64 {
    let start = Instant::now();
    black_box(limiter.run(CHECKS));
    start.elapsed().as_nanos() as f64 / CHECKS as f64
}

/// Million checks per second with `threads` threads on the one limiter.
fn million_per_second(limiter: &dyn Check, threads: usize) -> f64 {
    let checks = CHECKS * threads as u64;
    checks as f64 / time_on_threads(limiter, threads, checks).as_secs_f64() / 1e6
}

/// Medians by name for every limiter of `all` of `measure`, in interleaved rounds.
fn medians_of(
    all: Vec<(&'static str, Box<dyn Check>)>,
    rounds: usize,
    measure: impl Fn(&dyn Check) -> f64,
) -> Vec<(&'static str, f64)> {
    samples_of(all, rounds, measure)
        .into_iter()
        .map(|(name, xs)| (name, median(xs)))
        .collect()
}

/// Every round's figure by name for every limiter of `all` of `measure`, in interleaved rounds.
fn samples_of(
    all: Vec<(&'static str, Box<dyn Check>)>,
    rounds: usize,
    measure: impl Fn(&dyn Check) -> f64,
) -> Vec<(&'static str, Vec<f64>)> {
    for (_, limiter) in &all {
        measure(&**limiter); // warm-up
    }
    let mut samples = vec![Vec::with_capacity(rounds); all.len()];
    for _ in 0..rounds {
        for (i, (_, limiter)) in all.iter().enumerate() {
            samples[i].push(measure(&**limiter));
        }
    }
    all.iter().map(|(name, _)| *name).zip(samples).collect()
}

/// `ours ÷ theirs` round by round ([`by_round`]): its median and quartiles.
fn paired(ours: &[f64], theirs: &[f64]) -> (f64, f64, f64) {
    let ratios = by_round(ours, theirs);
    let at = |q: usize| ratios[(ratios.len() - 1) * q / 4];
    (at(1), at(2), at(3))
}

/// The rows of a table of `threads` threads, million checks per second, from every round's
/// figure of the limiters of `all`: medians, their ratio and the ratio round by round.
fn print_threaded(
    all: Vec<(&'static str, Box<dyn Check>)>,
    rounds: usize,
    threads: usize,
    path: &str,
) {
    let samples = samples_of(all, rounds, |limiter| million_per_second(limiter, threads));
    let medians: Vec<(&'static str, f64)> = samples
        .iter()
        .map(|(name, xs)| (*name, median(xs.clone())))
        .collect();
    let get = |name: &str| named(&samples, name).as_slice();
    for (clock, floor, ours, theirs, peer) in rows(&medians, false) {
        let (q1, mid, q3) = paired(
            get(&format!("{clock}/tollgate")),
            get(&format!("{clock}/{peer}")),
        );
        println!(
            "| {clock}, {path} | {floor:.1} | {ours:.1} | {theirs:.1} ({peer}) | {:.2} | {mid:.2} ({q1:.2}–{q3:.2}) |",
            ours / theirs,
        );
    }
}

/// The figure measured for the limiter called `name`.
fn named<'a, T>(figures: &'a [(&'static str, T)], name: &str) -> &'a T {
    &figures.iter().find(|(n, _)| *n == name).unwrap().1
}

/// Each clock with the governor beside it on the same clock class.
const PEERS: [(&str, &str); 4] = [
    ("manual", "manual/governor-fake"),
    ("std", "std/governor-monotonic"),
    ("tsc", "tsc/governor-default"),
    ("coarse", "coarse/governor-upkeep"),
];

/// One row per clock of `m`: `(clock, floor, tollgate, governor, governor's clock)`.
fn rows<'a>(
    m: &'a [(&'static str, f64)],
    with_manual: bool,
) -> impl Iterator<Item = (&'static str, f64, f64, f64, &'static str)> + 'a {
    let get = move |name: &str| *named(m, name);
    PEERS
        .into_iter()
        .filter(move |(clock, _)| with_manual || *clock != "manual")
        .map(move |(clock, peer)| {
            let floor = get(&format!("{clock}/floor"));
            let ours = get(&format!("{clock}/tollgate"));
            let theirs = get(peer);
            (clock, floor, ours, theirs, peer.split('/').nth(1).unwrap())
        })
}

/// The name a denial's limiter goes by among the grants' in the same rounds.
fn denial(name: &str) -> String {
    format!("deny:{name}")
}

fn main() {
    let rounds = std::env::args()
        .skip(1)
        .find_map(|arg| arg.parse().ok())
        .unwrap_or(31);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!("try_acquire(1), one thread, medians of {rounds} interleaved rounds; {cores} cores");
    println!();
    println!("| path | floor | tollgate | governor | tollgate ÷ floor | tollgate ÷ governor |");
    println!("|---|---|---|---|---|---|");
    let mut deny_floors = Vec::new();
    let mut quanta_floor = None;
    for path in [Path::Allow, Path::Deny] {
        let mut all = line_up(path, true);
        if path == Path::Deny {
            all.extend(line_up_deny_floors());
        } else {
            all.push(("tsc/quanta-floor", Box::new(floor(QuantaReading::new()))));
        }
        let m = medians_of(all, rounds, ns_per_check);
        if path == Path::Deny {
            deny_floors = m.clone();
        }
        for (clock, floor, ours, theirs, peer) in rows(&m, true) {
            println!(
                "| {clock}, {} | {floor:.1} | {ours:.1} | {theirs:.1} ({peer}) | {:.2} | {:.2} |",
                path.name(),
                ours / floor,
                ours / theirs,
            );
        }
        // The cheapest clock against governor's default (the TSC through quanta).
        let get = |name: &str| *named(&m, name);
        if path == Path::Allow {
            quanta_floor = Some((get("tsc/quanta-floor"), get("tsc/tollgate")));
        }
        let (coarse, default) = (get("coarse/tollgate"), get("tsc/governor-default"));
        println!(
            "| coarse, {} | | {coarse:.1} | {default:.1} (default) | | {:.2} |",
            path.name(),
            coarse / default
        );
    }
    if let Some((floor, ours)) = quanta_floor {
        println!();
        println!(
            "The TSC's grant beside the floor on quanta's own reading of the counter (its `raw` \
             and `delta_as_nanos`), the same rounds: {ours:.1} ns against {floor:.1}, {:.2} × it",
            ours / floor
        );
    }
    // A denial beside a grant of the same limiter, in the same rounds.
    let limiters = |path| {
        line_up(path, true)
            .into_iter()
            .filter(|(name, _)| {
                name.ends_with("/tollgate") || PEERS.iter().any(|(_, peer)| peer == name)
            })
            .collect::<Vec<_>>()
    };
    let mut both = limiters(Path::Allow);
    let denials = limiters(Path::Deny)
        .into_iter()
        .map(|(name, limiter)| (&*Box::leak(denial(name).into_boxed_str()), limiter));
    both.extend(denials);
    let samples = samples_of(both, rounds, ns_per_check);
    let series = |name: &str| named(&samples, name).as_slice();
    let quartiles = |name: &str| {
        let (q1, mid, q3) = paired(series(&denial(name)), series(name));
        format!("{mid:.2} ({q1:.2}–{q3:.2})")
    };
    println!();
    println!(
        "A denial ÷ a grant of the same limiter, timed in the same rounds ({rounds}), round by \
         round: median (quartiles)"
    );
    println!();
    println!("| clock | tollgate | governor |");
    println!("|---|---|---|");
    for (clock, peer) in PEERS {
        println!(
            "| {clock} | {} | {} ({}) |",
            quartiles(&format!("{clock}/tollgate")),
            quartiles(peer),
            peer.split('/').nth(1).unwrap()
        );
    }
    // The denials beside what no denial can beat: the clock's read, one load, one compare.
    let get = |name: &str| *named(&deny_floors, name);
    println!();
    println!(
        "Denied, beside the denial's floor (the clock's read, one load, one compare), ns per \
         check, the same rounds"
    );
    println!();
    println!(
        "| clock | denial floor | tollgate | governor | tollgate ÷ floor | governor ÷ floor |"
    );
    println!("|---|---|---|---|---|---|");
    for (clock, peer) in PEERS {
        let floor = get(&format!("{clock}/deny-floor"));
        let (ours, theirs) = (get(&format!("{clock}/tollgate")), get(peer));
        println!(
            "| {clock} | {floor:.1} | {ours:.1} | {theirs:.1} ({}) | {:.2} | {:.2} |",
            peer.split('/').nth(1).unwrap(),
            ours / floor,
            theirs / floor
        );
    }
    // A denial read for its wait, as a 429 with `Retry-After` reads it.
    let waits = medians_of(line_up_waits(), rounds, ns_per_check);
    let get = |name: &str| *named(&waits, name);
    println!();
    println!(
        "Denied and the wait read (`retry_after()`; governor: `wait_time_from(clock.now())`), \
         ns per check, one thread, medians of {rounds} interleaved rounds"
    );
    println!();
    println!("| clock | tollgate | governor | tollgate ÷ governor |");
    println!("|---|---|---|---|");
    for (clock, peer) in PEERS {
        let (ours, theirs) = (get(&format!("{clock}/tollgate")), get(peer));
        println!(
            "| {clock} | {ours:.1} | {theirs:.1} ({}) | {:.2} |",
            peer.split('/').nth(1).unwrap(),
            ours / theirs
        );
    }
    // Two threads on one bucket: the word's cache line moves between the cores on every grant.
    let threads = 2;
    println!();
    println!(
        "{threads} threads on one shared limiter, million checks per second (more is better), \
         medians of {rounds} interleaved rounds"
    );
    println!();
    println!(
        "| path | floor | tollgate | governor | tollgate ÷ governor | round by round: median (quartiles) |"
    );
    println!("|---|---|---|---|---|---|");
    for path in [Path::Allow, Path::Deny] {
        print_threaded(line_up(path, false), rounds, threads, path.name());
    }
    // Two threads, a limiter each, the two side by side in one allocation: they share no
    // limiter, only the cache lines their layout puts them on.
    println!();
    println!(
        "{threads} threads, a limiter each, side by side in one `Vec`, million checks per \
         second (more is better; the floor: padded apart), medians of {rounds} interleaved rounds"
    );
    println!();
    println!(
        "| path | floor | tollgate | governor | tollgate ÷ governor | round by round: median (quartiles) |"
    );
    println!("|---|---|---|---|---|---|");
    print_threaded(line_up_neighbours(threads), rounds, threads, "allow");
}

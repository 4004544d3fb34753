//! Loom models of `KeyedTable`: under `cfg(loom)` its slots' critical section is loom's mutex
//! and its words and counts are loom's atomics, so these explore every interleaving of two
//! threads claiming slots and taking tokens.
//!
//! Run with `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test --release --features
//! keyed-table --test loom_keyed`.
#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;
use tollgate::{KeyedDenied, KeyedTable, ManualClock, Quota, Rate, WhenFull};

type Table = KeyedTable<u8, Arc<ManualClock>, 1>;

fn table() -> Arc<Table> {
    let clock = Arc::new(ManualClock::new());
    // One slot, one token per key: a second grant of a key, or a second key, must wait.
    let quota = Quota::new(Rate::per_second(1)).burst(1);
    Arc::new(KeyedTable::try_new(quota, clock, WhenFull::Refuse).unwrap())
}

/// Two threads, each with a new key, for a table of one slot whose bucket is then in use:
/// exactly one key gets the slot and its token; the other is refused, and the table holds one
/// key.
#[test]
fn two_new_keys_never_share_one_slot() {
    loom::model(|| {
        let table = table();
        let other = {
            let table = table.clone();
            thread::spawn(move || table.try_acquire(2, 1))
        };
        let mine = table.try_acquire(1, 1);
        let theirs = other.join().unwrap();
        let granted = [mine, theirs].iter().filter(|r| r.is_ok()).count();
        assert_eq!(granted, 1, "{mine:?} {theirs:?}");
        let refused = if mine.is_ok() { theirs } else { mine };
        assert_eq!(refused, Err(KeyedDenied::Full { capacity: 1 }));
        assert_eq!(table.len(), 1);
    });
}

/// Two threads taking the same key's only token: exactly one gets it.
#[test]
fn one_keys_token_goes_once() {
    loom::model(|| {
        let table = table();
        let other = {
            let table = table.clone();
            thread::spawn(move || table.try_acquire(7, 1).is_ok())
        };
        let mine = table.try_acquire(7, 1).is_ok();
        let theirs = other.join().unwrap();
        assert!(mine ^ theirs, "{mine} {theirs}");
        assert_eq!(table.available(&7), 0);
    });
}

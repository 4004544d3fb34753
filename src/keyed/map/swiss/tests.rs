//! The table against a `HashMap` model: insertions, removals, evictions, shrinking, iteration
//! and length, on entries of each geometry and on hashes that collide on purpose.

use std::collections::HashMap;
use std::string::{String, ToString};
use std::vec::Vec;

use proptest::prelude::*;

use super::*;

/// A table's entry in these tests: a key and a value that follows it.
trait TestEntry {
    fn new(key: u64, value: u64) -> Self;
    fn key(&self) -> u64;
    fn value(&self) -> u64;
    fn set_value(&mut self, value: u64);
}

/// 16 bytes: three a line, as a `u64` key with its 64-bit word.
impl TestEntry for (u64, u64) {
    fn new(key: u64, value: u64) -> Self {
        (key, value)
    }
    fn key(&self) -> u64 {
        self.0
    }
    fn value(&self) -> u64 {
        self.1
    }
    fn set_value(&mut self, value: u64) {
        self.1 = value;
    }
}

/// 8 bytes: seven a line.
impl TestEntry for (u32, u32) {
    fn new(key: u64, value: u64) -> Self {
        (key as u32, value as u32)
    }
    fn key(&self) -> u64 {
        u64::from(self.0)
    }
    fn value(&self) -> u64 {
        u64::from(self.1)
    }
    fn set_value(&mut self, value: u64) {
        self.1 = value as u32;
    }
}

/// 32 bytes, dropped with care: groups of several lines, and a key that owns memory.
impl TestEntry for (String, u64) {
    fn new(key: u64, value: u64) -> Self {
        (key.to_string(), value)
    }
    fn key(&self) -> u64 {
        self.0.parse().unwrap()
    }
    fn value(&self) -> u64 {
        self.1
    }
    fn set_value(&mut self, value: u64) {
        self.1 = value;
    }
}

/// A well-spread hash, or one that sends every key to a few groups with a few tags, so that
/// keys pass over full groups and share tags.
fn hash_of(key: u64, colliding: bool) -> u64 {
    if colliding {
        (key % 3) | ((key % 2) << 63)
    } else {
        key.wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(29)
    }
}

#[derive(Clone, Debug)]
enum Op {
    /// Inserts the key if it is absent, else sets its value.
    Put(u64, u64),
    Remove(u64),
    /// Keeps the keys whose value is not a multiple of this, adding one to those kept.
    Evict(u64),
    Shrink,
}

/// Up to 200 operations; fewer under miri, which runs each thousands of times slower.
fn ops() -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(op(), 0..if cfg!(miri) { 60 } else { 200 })
}

/// The keys a table is planned for: none (it only doubles) or up to past the 48 keys the
/// operations use, so that tables grow to group counts that are not powers of two.
fn planned() -> impl Strategy<Value = usize> {
    0..64usize
}

fn op() -> impl Strategy<Value = Op> {
    // Few keys, so that puts meet held keys and removals find them.
    let key = 0..48u64;
    prop_oneof![
        6 => (key.clone(), any::<u64>()).prop_map(|(k, v)| Op::Put(k, v)),
        3 => key.prop_map(Op::Remove),
        1 => (1..5u64).prop_map(Op::Evict),
        1 => Just(Op::Shrink),
    ]
}

/// Runs `ops` on a table of `E` and on a `HashMap`, checking after each step that they hold
/// the same keys and values, and that the table's length and iteration say so.
fn against_model<E: TestEntry>(ops: &[Op], colliding: bool, planned: usize) {
    let hash = |e: &E| hash_of(e.key(), colliding);
    let mut table = SwissTable::<E>::new();
    let mut model = HashMap::new();
    for op in ops {
        match *op {
            Op::Put(key, value) => {
                let value = E::new(key, value).value(); // as the entry keeps it
                match table.find_mut(hash_of(key, colliding), |e| e.key() == key) {
                    Some(entry) => entry.set_value(value),
                    None => {
                        let entry = table.insert(
                            hash_of(key, colliding),
                            E::new(key, value),
                            planned,
                            hash,
                        );
                        assert_eq!(entry.key(), key);
                    }
                }
                model.insert(key, value);
            }
            Op::Remove(key) => {
                let removed = table.remove(hash_of(key, colliding), |e| e.key() == key);
                assert_eq!(removed.map(|e| e.value()), model.remove(&key));
            }
            Op::Evict(divisor) => {
                let keep = |value: u64| value % divisor != 0;
                table.retain(
                    |e| {
                        let kept = keep(e.value());
                        e.set_value(e.value().wrapping_add(1));
                        kept
                    },
                    hash,
                );
                model.retain(|_, value| keep(*value));
                for value in model.values_mut() {
                    *value = E::new(0, value.wrapping_add(1)).value();
                }
            }
            Op::Shrink => table.shrink(hash),
        }
        assert_eq!(table.len(), model.len());
        let mut held: Vec<(u64, u64)> = table.iter().map(|e| (e.key(), e.value())).collect();
        held.sort_unstable();
        let mut expected: Vec<(u64, u64)> = model.iter().map(|(&k, &v)| (k, v)).collect();
        expected.sort_unstable();
        assert_eq!(held, expected);
        for key in 0..48 {
            let found = table.find(hash_of(key, colliding), |e| e.key() == key);
            assert_eq!(
                found.map(|e| e.value()),
                model.get(&key).copied(),
                "key {key}"
            );
        }
    }
}

fn config() -> ProptestConfig {
    ProptestConfig {
        // Miri runs each case thousands of times slower.
        cases: if cfg!(miri) { 2 } else { 256 },
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn sixteen_byte_entries_follow_the_model(ops in ops(), colliding: bool, planned in planned()) {
        against_model::<(u64, u64)>(&ops, colliding, planned);
    }

    #[test]
    fn eight_byte_entries_follow_the_model(ops in ops(), colliding: bool, planned in planned()) {
        against_model::<(u32, u32)>(&ops, colliding, planned);
    }

    #[test]
    fn entries_that_own_memory_follow_the_model(ops in ops(), colliding: bool, planned in planned()) {
        against_model::<(String, u64)>(&ops, colliding, planned);
    }
}

/// The group of each entry size, as the docs state it: seven `u64` keys with their words in a
/// pair of lines, four or more small entries in one line, seven larger ones packed.
#[test]
fn groups_fit_the_entries() {
    assert_eq!(geometry(8, 8), (64, 7));
    assert_eq!(geometry(12, 8), (64, 4));
    assert_eq!(geometry(16, 8), (128, 7));
    assert_eq!(geometry(24, 8), (176, 7));
    assert_eq!(geometry(32, 8), (232, 7));
    assert_eq!(geometry(20, 8), (152, 7));
    assert_eq!(geometry(48, 16), (352, 7));
    assert_eq!(SwissTable::<(u64, u64)>::GROUP_BYTES, 128);
    assert_eq!(SwissTable::<(u64, u64)>::ALIGN, 128);
}

/// A table at a steady number of keys under a flood of insertions and removals keeps its size:
/// removal leaves nothing behind that counts against the load limit.
#[test]
fn a_flood_at_a_steady_count_never_grows_the_table() {
    let hash = |e: &(u64, u64)| hash_of(e.0, false);
    let mut table = SwissTable::new();
    let steady = if cfg!(miri) { 40 } else { 1000 };
    for key in 0..steady {
        table.insert(hash_of(key, false), (key, 0), 0, hash);
    }
    let size = table.allocation_size();
    for key in steady..steady * 20 {
        let gone = key - steady;
        assert!(table
            .remove(hash_of(gone, false), |e| e.0 == gone)
            .is_some());
        table.insert(hash_of(key, false), (key, 0), 0, hash);
        assert_eq!(table.allocation_size(), size, "after {key}");
    }
    assert_eq!(table.len(), steady as usize);
}

/// Only matching tags are compared, and every byte's match is exact.
#[test]
fn a_tag_matches_its_own_bytes_only() {
    let header = u64::from_le_bytes([0x81, 0x00, 0x81, 0xff, 0x01, 0x80, 0x81, 0x05]);
    assert_eq!(
        matching_bytes(header, 0x81),
        u64::from_le_bytes([0x80, 0, 0x80, 0, 0, 0, 0x80, 0])
    );
    assert_eq!(matching_bytes(0, 0x80), 0);
}

/// From any home group of any group count, the probe visits every group of the table once
/// (passing over those past the end) before it says it has visited them all.
#[test]
fn the_probe_visits_every_group_once_at_any_group_count() {
    // Arithmetic alone, no memory to check: under miri, where 70 counts take three minutes,
    // the first 20 (powers of two up to 16 and the counts on either side of them).
    let most = if cfg!(miri) { 20 } else { 70 };
    for groups in 1..=most {
        for hash in (0..groups as u64 * 3).map(|i| (i << 32) / (groups as u64 * 3)) {
            let mut probe = Probe::new(hash, groups, groups.next_power_of_two() - 1);
            let mut seen = std::vec![false; groups];
            loop {
                assert!(probe.group < groups);
                assert!(
                    !seen[probe.group],
                    "{groups} groups: group {} twice",
                    probe.group
                );
                seen[probe.group] = true;
                if !probe.next() {
                    break;
                }
            }
            assert!(
                seen.iter().all(|&s| s),
                "{groups} groups: a group never visited"
            );
        }
    }
}

/// A table planned for a number of keys grows to the groups that hold them, not to the
/// doubling past them, and is nearly full there; past its plan it doubles again.
#[test]
fn a_table_grows_to_its_plan_and_doubles_past_it() {
    let hash = |e: &(u64, u64)| hash_of(e.0, false);
    let planned = if cfg!(miri) { 200 } else { 10_000 };
    let mut table = SwissTable::new();
    for key in 0..planned as u64 {
        table.insert(hash_of(key, false), (key, 0), planned, hash);
    }
    let groups = table.allocation_size() / 128;
    assert_eq!(groups, SwissTable::<(u64, u64)>::groups_for(planned));
    assert!(!groups.is_power_of_two());
    assert!(planned as f64 / (groups * 7) as f64 > 0.9);
    for key in planned as u64..(planned as u64 * 3 / 2) {
        table.insert(hash_of(key, false), (key, 0), planned, hash);
    }
    assert_eq!(table.allocation_size() / 128, 2 * groups);
    for key in 0..planned as u64 * 3 / 2 {
        assert!(table.find(hash_of(key, false), |e| e.0 == key).is_some());
    }
}

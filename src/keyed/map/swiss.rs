//! A shard's hash table of entries, laid out so that a lookup of a held key reads one
//! cache line, or one aligned pair of cache lines, when the entries are small.
//!
//! The table is a number of *groups*, each starting with an eight-byte header: one byte
//! per slot (0 when the slot is empty, otherwise `0x80` and the top seven bits of the key's
//! hash) and, in the last byte, how many keys passed over this group because it was full when
//! they were inserted. The entries follow the header: seven `u64` keys with their 64-bit words
//! fill a 128-byte pair of cache lines (three in the header's cache line), so the tags and the entry of a
//! held key arrive together, where a table of control bytes apart from its entries costs two
//! cache misses (and two pages) per lookup. See [`geometry`] for other entry sizes.
//!
//! A key is looked for in its home group (the hash's low 32 bits scaled to the group count, so
//! that a table can have any number of groups), then along a triangular probe over the next
//! power of two of groups, passing over those past the table's end; a lookup stops at the first
//! group that no key passed over. Removal leaves no deleted mark: it takes one from the count
//! of each group the key passed over, so a table at a steady number of keys under a flood of
//! insertions and evictions never grows for removed keys, and never needs a rebuild at its
//! size. A count that reaches 255 stays there until the table is rebuilt (it only makes
//! lookups of absent keys probe further).
//!
//! The slots of a group are raw memory: this is the crate's one module with `unsafe` code, and
//! every block says why it holds. The table is tested against a `HashMap` model (below, also
//! under miri).

#![allow(unsafe_code)]

use core::alloc::Layout;
use core::marker::PhantomData;
use core::mem::{align_of, needs_drop, size_of};
use core::ptr::NonNull;
use std::alloc::{alloc_zeroed, dealloc, handle_alloc_error};
use std::vec::Vec;

/// A cache line; groups are aligned to one.
const LINE: usize = 64;
/// The most slots a group has: one header byte each, and one byte for the overflow count.
const MAX_SLOTS: usize = 7;
/// The header byte that counts the keys that passed over the group.
const OVERFLOW_BYTE: usize = 7;
/// A slot's header byte when the slot holds an entry: the high bit, and the tag below it.
const FULL: u8 = 0x80;
const LOW_BITS: u64 = 0x0101_0101_0101_0101;
const HIGH_BITS: u64 = 0x8080_8080_8080_8080;

/// How many bytes a group of `E` takes and how many entries it holds.
///
/// One line if it holds four entries or more (eight bytes or less each). Otherwise seven
/// entries after the header: in a pair of cache lines, aligned to 128 bytes, if they fit (three
/// `u64` keys with their words in the header's line, four in the next), so that a lookup of a
/// held key reads the one pair of cache lines, which processors commonly fetch together; else packed
/// (a larger entry outside the header's line costs a second load, as a separate table of
/// control bytes would, and the group takes no more room than such a table).
const fn geometry(size: usize, header: usize) -> (usize, usize) {
    let one_line = (LINE - header) / size;
    if one_line >= 4 {
        return (LINE, min(one_line, MAX_SLOTS));
    }
    let packed = header + MAX_SLOTS * size;
    if packed <= 2 * LINE {
        (2 * LINE, MAX_SLOTS)
    } else {
        (packed.next_multiple_of(header), MAX_SLOTS)
    }
}

const fn min(a: usize, b: usize) -> usize {
    if a < b {
        a
    } else {
        b
    }
}

/// A hash table of entries `E`, each found by its hash and an equality test. Not a concurrent
/// table: the shard's lock keeps writers (`&mut self`) apart from readers (`&self`), and a
/// reader changes an entry only through its atomics.
pub(crate) struct SwissTable<E> {
    /// `groups` groups of `Self::GROUP_BYTES` bytes each, or dangling when `groups` is 0.
    memory: NonNull<u8>,
    /// 0 before the first insertion and after the last shrink.
    groups: usize,
    /// The next power of two of `groups`, less one: the probe's range, kept beside `groups`
    /// so that a lookup does not work it out.
    mask: usize,
    len: usize,
    _entries: PhantomData<E>,
}

// SAFETY: the table owns its entries as a `Vec<E>` would; sending it sends them.
unsafe impl<E: Send> Send for SwissTable<E> {}
// SAFETY: `&self` methods hand out `&E` and read headers that only `&mut self` methods write,
// as a `Vec<E>` shared between threads would.
unsafe impl<E: Sync> Sync for SwissTable<E> {}

impl<E> SwissTable<E> {
    const SIZE: usize = size_of::<E>();
    /// The header's bytes: eight, or the entry's alignment if larger, so that the first entry
    /// is aligned.
    const HEADER: usize = if align_of::<E>() > 8 {
        align_of::<E>()
    } else {
        8
    };
    const GEOMETRY: (usize, usize) = geometry(Self::SIZE, Self::HEADER);
    const GROUP_BYTES: usize = Self::GEOMETRY.0;
    const SLOTS: usize = Self::GEOMETRY.1;
    /// A pair of cache lines is aligned to its size, as processors pair lines; any other group to a
    /// line.
    const ALIGN: usize = if Self::GROUP_BYTES == 2 * LINE {
        2 * LINE
    } else {
        LINE
    };
    /// The high bit of each slot's header byte.
    const SLOT_BITS: u64 = HIGH_BITS & ((1 << (8 * Self::SLOTS)) - 1);

    /// An empty table, which allocates nothing.
    pub fn new() -> Self {
        // Groups are aligned to a line, and an entry holds at least its word.
        const { assert!(size_of::<E>() > 0 && align_of::<E>() <= LINE) };
        SwissTable {
            memory: NonNull::dangling(),
            groups: 0,
            mask: 0,
            len: 0,
            _entries: PhantomData,
        }
    }

    /// Entries held.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Bytes allocated for the groups.
    pub fn allocation_size(&self) -> usize {
        self.groups * Self::GROUP_BYTES
    }

    /// How many entries the table holds before it doubles: fifteen sixteenths of its slots,
    /// rounded down (all of them in a table of fewer than eight). A held key is found in its
    /// home group or a group or two along, whose tags arrive with the entries, so the table can
    /// run fuller than a table of control bytes apart from its entries (hashbrown's seven
    /// eighths): at seven eighths its slots, at 18.3 bytes each, put it above hashbrown's
    /// 17-byte slots per key held.
    fn max_len(groups: usize) -> usize {
        let slots = groups * Self::SLOTS;
        if slots < 8 {
            slots
        } else {
            slots - slots.div_ceil(16)
        }
    }

    /// The fewest groups (none for no entry) that hold `len` entries.
    fn groups_for(len: usize) -> usize {
        if len == 0 {
            return 0;
        }
        let slots = if len < 8 { len } else { len + len.div_ceil(15) };
        let mut groups = slots.div_ceil(Self::SLOTS);
        while Self::max_len(groups) < len {
            groups += 1;
        }
        groups
    }

    /// How many groups a table at its load limit grows to: twice as many, but no more than
    /// hold `planned` entries if that is more than it has, so that a table that reaches what
    /// it was planned for is nearly full rather than just past a doubling.
    fn grown(&self, planned: usize) -> usize {
        let doubled = (self.groups * 2).max(Self::groups_for(self.len + 1));
        // Only a plan that the doubled table would hold with room to spare counts (which also
        // keeps a plan of any size, up to `usize::MAX` keys, from overflowing `groups_for`).
        if planned > self.len && planned < Self::max_len(doubled) {
            Self::groups_for(planned)
        } else {
            doubled
        }
    }

    /// The layout of `groups` groups.
    fn layout(groups: usize) -> Layout {
        let bytes = groups
            .checked_mul(Self::GROUP_BYTES)
            .expect("a keyed table larger than the address space");
        Layout::from_size_align(bytes, Self::ALIGN)
            .expect("a keyed table larger than the address space")
    }

    /// The start of group `group`.
    ///
    /// # Safety
    ///
    /// `group < self.groups`.
    #[inline]
    unsafe fn group(&self, group: usize) -> *mut u8 {
        // SAFETY: the caller's bound keeps the offset within the allocation.
        unsafe { self.memory.as_ptr().add(group * Self::GROUP_BYTES) }
    }

    /// Group `group`'s header, little-endian: slot `i`'s byte is byte `i`.
    ///
    /// # Safety
    ///
    /// `group < self.groups`.
    #[inline]
    unsafe fn header(&self, group: usize) -> u64 {
        // SAFETY: the group is allocated and aligned to eight bytes at least (the allocation to
        // a line, a group's size to its header's); its header is initialized (the allocation
        // is zeroed) and written only through `&mut self`.
        u64::from_le(unsafe { self.group(group).cast::<u64>().read() })
    }

    /// The entry in slot `slot` of group `group`.
    ///
    /// # Safety
    ///
    /// `group < self.groups`, `slot < Self::SLOTS`.
    #[inline]
    unsafe fn slot(&self, group: usize, slot: usize) -> *mut E {
        // SAFETY: the header and the slots before it lie within the group (see `geometry`),
        // and `HEADER` and `SIZE` are multiples of `E`'s alignment.
        unsafe {
            self.group(group)
                .add(Self::HEADER + slot * Self::SIZE)
                .cast::<E>()
        }
    }

    /// Where the entry of this hash that `eq` accepts lies: its group, its slot, and the probe
    /// that reached the group.
    #[inline]
    fn locate(&self, hash: u64, mut eq: impl FnMut(&E) -> bool) -> Option<(usize, usize, Probe)> {
        if self.len == 0 {
            return None;
        }
        let tag = tag_of(hash);
        let mut probe = self.probe(hash);
        loop {
            // SAFETY: the probe stays below `self.groups`.
            let header = unsafe { self.header(probe.group) };
            let mut matches = matching_bytes(header, tag) & Self::SLOT_BITS;
            while matches != 0 {
                let slot = (matches.trailing_zeros() / 8) as usize;
                // SAFETY: a slot whose header byte has the high bit holds an entry.
                if eq(unsafe { &*self.slot(probe.group, slot) }) {
                    return Some((probe.group, slot, probe));
                }
                matches &= matches - 1;
            }
            if overflow(header) == 0 || !probe.next() {
                return None;
            }
        }
    }

    /// The entry of this hash that `eq` accepts.
    #[inline]
    pub fn find(&self, hash: u64, eq: impl FnMut(&E) -> bool) -> Option<&E> {
        let (group, slot, _) = self.locate(hash, eq)?;
        // SAFETY: `locate` found an entry there; it lives as long as `&self`.
        Some(unsafe { &*self.slot(group, slot) })
    }

    /// The entry of this hash that `eq` accepts, to change.
    pub fn find_mut(&mut self, hash: u64, eq: impl FnMut(&E) -> bool) -> Option<&mut E> {
        let (group, slot, _) = self.locate(hash, eq)?;
        // SAFETY: `locate` found an entry there, and `&mut self` borrows it uniquely.
        Some(unsafe { &mut *self.slot(group, slot) })
    }

    /// Takes the entry of this hash that `eq` accepts out of the table.
    pub fn remove(&mut self, hash: u64, eq: impl FnMut(&E) -> bool) -> Option<E> {
        let (group, slot, probe) = self.locate(hash, eq)?;
        Some(self.take(hash, group, slot, probe.steps))
    }

    /// Moves the entry out of `slot` of `group`, which `steps` steps of `hash`'s probe reached:
    /// the slot is emptied and each group the key passed over counts one key fewer.
    fn take(&mut self, hash: u64, group: usize, slot: usize, steps: usize) -> E {
        // SAFETY: the caller found an entry there; emptying its header byte below gives up the
        // table's ownership of it, so it is read out exactly once.
        let entry = unsafe {
            self.group(group).add(slot).write(0);
            self.slot(group, slot).read()
        };
        self.len -= 1;
        let mut probe = self.probe(hash);
        while probe.steps < steps {
            // SAFETY: the probe stays below `self.groups`.
            let count = unsafe { &mut *self.group(probe.group).add(OVERFLOW_BYTE) };
            if *count != u8::MAX {
                *count -= 1;
            }
            probe.next();
        }
        entry
    }

    /// Inserts `entry`, whose key the table does not hold, growing the table first if it is
    /// at its load limit: doubling it, or less if `planned` entries fit in fewer groups than
    /// that (`rehash` gives each entry's hash); returns it.
    pub fn insert(
        &mut self,
        hash: u64,
        entry: E,
        planned: usize,
        rehash: impl Fn(&E) -> u64,
    ) -> &E {
        self.reserve_one(planned, &rehash);
        let (group, slot) = self.place(hash);
        // SAFETY: `place` returned an empty slot, now marked as held; the write moves the entry
        // in without dropping what the slot held (nothing).
        unsafe {
            let at = self.slot(group, slot);
            at.write(entry);
            self.len += 1;
            &*at
        }
    }

    /// Grows the table if it is at its load limit, as [`insert`](Self::insert) would, so that
    /// the next insertion runs no `rehash`: a caller that moves an entry between tables makes
    /// room first, so that a panicking hash leaves the entry where it was.
    pub fn reserve_one(&mut self, planned: usize, rehash: &impl Fn(&E) -> u64) {
        if self.len == Self::max_len(self.groups) {
            self.resize(self.grown(planned), rehash);
        }
    }

    /// Marks the first empty slot on `hash`'s probe as held and returns it, counting the key in
    /// each full group it passes over. The table has an empty slot.
    fn place(&mut self, hash: u64) -> (usize, usize) {
        let mut probe = self.probe(hash);
        loop {
            // SAFETY: the probe stays below `self.groups`.
            let header = unsafe { self.header(probe.group) };
            let empty = !header & Self::SLOT_BITS;
            if empty != 0 {
                let slot = (empty.trailing_zeros() / 8) as usize;
                // SAFETY: a header byte of an allocated group.
                unsafe { self.group(probe.group).add(slot).write(tag_of(hash)) };
                return (probe.group, slot);
            }
            // SAFETY: a header byte of an allocated group.
            let count = unsafe { &mut *self.group(probe.group).add(OVERFLOW_BYTE) };
            *count = count.saturating_add(1);
            // The probe visits every group, and one has room: `len < max_len`.
            probe.next();
        }
    }

    /// Every entry.
    pub fn iter(&self) -> impl Iterator<Item = &E> + '_ {
        (0..self.groups).flat_map(move |group| {
            // SAFETY: `group < self.groups`.
            let header = unsafe { self.header(group) };
            (0..Self::SLOTS)
                .filter(move |&slot| holds(header, slot))
                // SAFETY: a slot whose header byte has the high bit holds an entry, which lives
                // as long as `&self`.
                .map(move |slot| unsafe { &*self.slot(group, slot) })
        })
    }

    /// Keeps the entries for which `keep` says `true` and drops the others (`rehash` gives an
    /// entry's hash, to find the groups it passed over). Every hash is taken before any entry
    /// goes, so a panicking `rehash` drops nothing.
    pub fn retain(&mut self, mut keep: impl FnMut(&mut E) -> bool, rehash: impl Fn(&E) -> u64) {
        let mut dropped = Vec::new();
        for group in 0..self.groups {
            for slot in 0..Self::SLOTS {
                // SAFETY: `group < self.groups`.
                if !holds(unsafe { self.header(group) }, slot) {
                    continue;
                }
                // SAFETY: the slot holds an entry; no other reference to it is alive.
                let entry = unsafe { &mut *self.slot(group, slot) };
                if !keep(entry) {
                    dropped.push((group, slot, rehash(entry)));
                }
            }
        }
        for (group, slot, hash) in dropped {
            let steps = self.probe(hash).steps_to(group);
            drop(self.take(hash, group, slot, steps));
        }
    }

    /// Gives memory back once the table is mostly empty: rebuilt at the power of two of groups
    /// its entries need (so that it has room to grow again before it doubles).
    pub fn shrink(&mut self, rehash: impl Fn(&E) -> u64) {
        if self.len.saturating_mul(4) < Self::max_len(self.groups) {
            let groups = Self::groups_for(self.len);
            self.resize(
                if groups == 0 {
                    0
                } else {
                    groups.next_power_of_two()
                },
                &rehash,
            );
        }
    }

    /// The probe of `hash`. The table has a group.
    #[inline]
    fn probe(&self, hash: u64) -> Probe {
        Probe::new(hash, self.groups, self.mask)
    }

    /// Moves every entry into a new allocation of `groups` groups (none if 0), which holds them.
    fn resize(&mut self, groups: usize, rehash: &impl Fn(&E) -> u64) {
        let mut resized = SwissTable::<E>::new();
        if groups > 0 {
            let layout = Self::layout(groups);
            // SAFETY: the layout has a nonzero size: `groups > 0` and `GROUP_BYTES > 0`.
            let memory = unsafe { alloc_zeroed(layout) };
            resized.memory = NonNull::new(memory).unwrap_or_else(|| handle_alloc_error(layout));
            resized.groups = groups;
            resized.mask = groups.next_power_of_two() - 1;
        }
        // Every entry is hashed before any moves, so a panicking hash leaves this table whole
        // and the new one empty.
        let mut hashes = Vec::with_capacity(self.len);
        hashes.extend(self.iter().map(rehash));
        let mut hashes = hashes.into_iter();
        for group in 0..self.groups {
            for slot in 0..Self::SLOTS {
                // SAFETY: `group < self.groups`.
                if !holds(unsafe { self.header(group) }, slot) {
                    continue;
                }
                // `iter` visits the held slots in this order, one hash each.
                let Some(hash) = hashes.next() else {
                    unreachable!("a held slot that `iter` did not visit")
                };
                // SAFETY: the slot holds an entry; its header byte is emptied and it is read out
                // once, to move into the new table.
                let entry = unsafe {
                    self.group(group).add(slot).write(0);
                    self.len -= 1;
                    self.slot(group, slot).read()
                };
                let (to_group, to_slot) = resized.place(hash);
                // SAFETY: `place` returned an empty slot, now marked as held.
                unsafe { resized.slot(to_group, to_slot).write(entry) };
                resized.len += 1;
            }
        }
        *self = resized;
    }
}

impl<E> Drop for SwissTable<E> {
    fn drop(&mut self) {
        if self.groups == 0 {
            return;
        }
        if needs_drop::<E>() {
            for group in 0..self.groups {
                for slot in 0..Self::SLOTS {
                    // SAFETY: `group < self.groups`; a slot whose header byte has the high bit
                    // holds an entry, dropped once here as the table goes.
                    unsafe {
                        if holds(self.header(group), slot) {
                            self.slot(group, slot).drop_in_place();
                        }
                    }
                }
            }
        }
        // SAFETY: allocated in `resize` with this layout.
        unsafe { dealloc(self.memory.as_ptr(), Self::layout(self.groups)) };
    }
}

/// A slot's header byte for a key of this hash: the high bit, and the hash's top seven bits.
#[inline]
fn tag_of(hash: u64) -> u8 {
    FULL | (hash >> 57) as u8
}

/// Whether the slot whose byte of `header` this is holds an entry.
#[inline]
fn holds(header: u64, slot: usize) -> bool {
    header & (u64::from(FULL) << (8 * slot)) != 0
}

/// The high bit of each byte of `header` equal to `tag`, and no other bit.
#[inline]
fn matching_bytes(header: u64, tag: u8) -> u64 {
    let differ = header ^ (LOW_BITS * u64::from(tag));
    // A byte of `differ` is zero iff neither its low seven bits, carried into the high bit by
    // adding 0x7f, nor its high bit are set; no carry crosses a byte.
    !(((differ & !HIGH_BITS) + !HIGH_BITS) | differ | !HIGH_BITS)
}

/// How many keys passed over the group whose header this is.
#[inline]
fn overflow(header: u64) -> u64 {
    header >> (8 * OVERFLOW_BYTE)
}

/// The home group of a key of this hash among `groups`: the hash's low 32 bits scaled to the
/// group count (a multiply and a shift, where a power of two of groups would take a mask), so
/// that each group is home to an equal share of hashes. The top bits are the tag's, and the
/// shard's bits lie above bit 40.
#[inline]
fn home(hash: u64, groups: usize) -> usize {
    // In 128 bits, so that no group count overflows the product.
    ((u128::from(hash as u32) * groups as u128) >> 32) as usize
}

/// A triangular probe over the next power of two of groups: from the hash's home group, 1, 2,
/// 3… groups further each step, modulo that power of two, which visits each of its groups once
/// in as many steps; the groups past the table's end are passed over without being read.
#[derive(Clone, Copy)]
struct Probe {
    group: usize,
    /// Steps taken, counting the groups passed over past the end.
    steps: usize,
    /// The power of two of groups the probe runs over, less one.
    mask: usize,
    groups: usize,
}

impl Probe {
    /// The probe of `hash` over `groups` groups (at least one), `mask` their next power of two
    /// less one.
    #[inline]
    fn new(hash: u64, groups: usize, mask: usize) -> Self {
        Probe {
            group: home(hash, groups),
            steps: 0,
            mask,
            groups,
        }
    }

    /// Moves to the next group of the table; `false` once every group has been visited (the
    /// probe then stays where it was).
    #[inline]
    fn next(&mut self) -> bool {
        // The groups past the table's end are stepped over in `at`, never stored in `group`.
        let mut at = self.group;
        let moved = loop {
            if self.steps >= self.mask {
                break false;
            }
            self.steps += 1;
            at = (at + self.steps) & self.mask;
            if at < self.groups {
                self.group = at;
                break true;
            }
        };
        debug_assert!(self.group < self.groups, "a probe left its table");
        moved
    }

    /// How many steps the probe takes to reach `group`, which is on it.
    fn steps_to(mut self, group: usize) -> usize {
        while self.group != group {
            self.next();
        }
        self.steps
    }
}

#[cfg(test)]
mod tests;

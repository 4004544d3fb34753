//! The keyed limiter's shard table on `hashbrown::HashTable`, with the same interface as the
//! hand-written [`SwissTable`](super::swiss::SwissTable), so that the two can be measured under
//! the same shards, entries and locks (feature `keyed-hashbrown`).

/// A shard's table of entries `E` on `hashbrown::HashTable`.
pub(crate) struct BrownTable<E>(hashbrown::HashTable<E>);

impl<E> BrownTable<E> {
    /// An empty table, which allocates nothing.
    pub fn new() -> Self {
        Self(hashbrown::HashTable::new())
    }

    /// Entries held.
    #[inline]
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Bytes allocated for the table.
    pub fn allocation_size(&self) -> usize {
        self.0.allocation_size()
    }

    /// The entry of this hash that `eq` accepts.
    #[inline]
    pub fn find(&self, hash: u64, eq: impl FnMut(&E) -> bool) -> Option<&E> {
        self.0.find(hash, eq)
    }

    /// The entry of this hash that `eq` accepts, to change.
    pub fn find_mut(&mut self, hash: u64, eq: impl FnMut(&E) -> bool) -> Option<&mut E> {
        self.0.find_mut(hash, eq)
    }

    /// Takes the entry of this hash that `eq` accepts out of the table.
    pub fn remove(&mut self, hash: u64, eq: impl FnMut(&E) -> bool) -> Option<E> {
        self.0
            .find_entry(hash, eq)
            .ok()
            .map(|entry| entry.remove().0)
    }

    /// Inserts `entry`, whose key the table does not hold, growing the table first as
    /// [`reserve_one`](Self::reserve_one) does; returns it.
    pub fn insert(
        &mut self,
        hash: u64,
        entry: E,
        planned: usize,
        rehash: impl Fn(&E) -> u64,
    ) -> &E {
        self.reserve_one(planned, &rehash);
        self.0.insert_unique(hash, entry, rehash).into_mut()
    }

    /// Grows the table if it is full: to hold `planned` entries if that is less than a doubling
    /// would hold, else by doubling (hashbrown's own growth).
    pub fn reserve_one(&mut self, planned: usize, rehash: &impl Fn(&E) -> u64) {
        let (len, capacity) = (self.0.len(), self.0.capacity());
        if len < capacity {
            return;
        }
        let doubled = (capacity * 2).max(4);
        let additional = if planned > len && planned < doubled {
            planned - len
        } else {
            1
        };
        self.0.reserve(additional, rehash);
    }

    /// Every entry.
    pub fn iter(&self) -> impl Iterator<Item = &E> + '_ {
        self.0.iter()
    }

    /// Keeps the entries for which `keep` says `true` and drops the others.
    pub fn retain(&mut self, keep: impl FnMut(&mut E) -> bool, _rehash: impl Fn(&E) -> u64) {
        self.0.retain(keep);
    }

    /// Gives memory back once the table is mostly empty.
    pub fn shrink(&mut self, rehash: impl Fn(&E) -> u64) {
        if self.0.len().saturating_mul(4) < self.0.capacity() {
            self.0.shrink_to(self.0.len().next_power_of_two(), rehash);
        }
    }
}

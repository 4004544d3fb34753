//! Counted keyed limits (`tollgate-tower` counts its layers' `Limit` itself).

use core::time::Duration;

use super::{Counted, Observe};
use crate::{Clock, KeyedDenied, Word};

#[cfg(feature = "std")]
impl<K, C, W, S, O> Counted<crate::KeyedLimiter<K, C, W, S>, O>
where
    K: core::hash::Hash + Eq + Clone,
    C: Clock,
    W: Word,
    S: core::hash::BuildHasher,
    O: Observe,
{
    /// [`KeyedLimiter::try_acquire`](crate::KeyedLimiter::try_acquire), counted: one count for
    /// the whole limiter, whichever the key. A new key refused for want of room counts as denied.
    #[inline]
    pub fn try_acquire(&self, key: &K, n: u32) -> Result<(), KeyedDenied> {
        self.report(n, self.inner.try_acquire(key, n), |_| Duration::ZERO)
    }
}

#[cfg(feature = "keyed-table")]
impl<K: Eq, C: Clock, const N: usize, W: Word, O: Observe>
    Counted<crate::KeyedTable<K, C, N, W>, O>
{
    /// [`KeyedTable::try_acquire`](crate::KeyedTable::try_acquire), counted. Safe in interrupt
    /// handlers with an observer that is ([`Counters`](super::Counters) is).
    #[inline]
    pub fn try_acquire(&self, key: K, n: u32) -> Result<(), KeyedDenied> {
        self.report(n, self.inner.try_acquire(key, n), |_| Duration::ZERO)
    }
}

#[cfg(all(test, feature = "keyed-table"))]
crate::with_atomic64! {
    mod tests {
        use super::*;
        use crate::observe::Counters;
        use crate::{KeyedTable, ManualClock, Quota, Rate, WhenFull};

        const QUOTA: Quota = Quota::new(Rate::per_second(1)).burst(2);
        static CLOCK: ManualClock = ManualClock::new();
        static COUNTS: Counters = Counters::new();
        /// As firmware keeps one: the table and its counts in `static`s, built at compile time.
        static TABLE: Counted<KeyedTable<u8, &ManualClock, 2>, &Counters> =
            Counted::new(KeyedTable::new(QUOTA, &CLOCK, WhenFull::Refuse), &COUNTS);

        #[test]
        fn a_static_keyed_table_is_counted_whole() {
            // (key, tokens, granted?): two keys fill the table, a third finds no room.
            let rows = [
                (1, 2, true),
                (1, 1, false),
                (2, 1, true),
                (3, 1, false),
                (2, 3, false),
            ];
            for (key, n, granted) in rows {
                assert_eq!(TABLE.try_acquire(key, n).is_ok(), granted, "key {key}, {n}");
            }
            let counts = COUNTS.counts();
            assert_eq!((counts.granted_calls, counts.granted_tokens), (2, 3));
            assert_eq!((counts.denied_calls, counts.denied_tokens), (3, 5));
        }
    }
}

//! Counted keyed limits, and the tower layer's [`Limit`](crate::layer::Limit) counted.

use core::time::Duration;

use super::{Counted, Observe};
use crate::{Clock, KeyedDenied, Word};

#[cfg(feature = "std")]
impl<K: core::hash::Hash + Eq + Clone, C: Clock, W: Word, O: Observe>
    Counted<crate::KeyedLimiter<K, C, W>, O>
{
    /// [`KeyedLimiter::try_acquire`](crate::KeyedLimiter::try_acquire), counted: one count for
    /// the whole limiter, whichever the key. A new key refused for want of room counts as denied.
    #[inline]
    pub fn try_acquire(&self, key: &K, n: u32) -> Result<(), KeyedDenied> {
        self.report(n, self.inner.try_acquire(key, n), |_| Duration::ZERO)
    }
}

#[cfg(all(feature = "heapless", not(loom)))]
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

/// Counts each request a tower layer lets through as one token granted, each it refuses as one
/// denied: wrap the layer's limit, `RejectLayer::new(Arc::new(Counted::new(limit, counters)))`.
#[cfg(feature = "tower")]
impl<Req, L: crate::layer::Limit<Req>, O: Observe> crate::layer::Limit<Req> for Counted<L, O> {
    fn check(&self, request: &Req) -> Result<(), crate::layer::RateLimited> {
        self.report(1, self.inner.check(request), |_| Duration::ZERO)
    }
}

//! The width of the atomic word that holds a bucket's whole state.

#[cfg(any(loom, target_has_atomic = "64", feature = "word64"))]
use crate::engine::sync::AtomicU64;
use crate::engine::sync::{AtomicU32, Ordering};

/// The word a bucket keeps its state in: `u64` where the target has native 64-bit atomics,
/// `u32` where it does not.
///
/// A 32-bit microcontroller without 64-bit atomics would get them from a spin lock, which can
/// deadlock when an interrupt handler touches the bucket; the 32-bit word avoids that at the
/// cost of a finite idle horizon (see [`TokenBucket::idle_horizon`](crate::TokenBucket::idle_horizon)).
/// Hosts may choose the `u32` word too, to halve the memory of a bucket. A firmware that provides
/// portable-atomic's critical section may choose `u64` there with the `word64` feature and get
/// the 64-bit word's guarantees.
///
/// The trait is sealed: `u32` and `u64` are its only implementations.
pub trait Word: sealed::Sealed + Copy + 'static {
    /// The atomic cell holding the word.
    #[doc(hidden)]
    type Atomic: Send + Sync + core::fmt::Debug;
    /// Width in bits.
    #[doc(hidden)]
    const BITS: u32;
    /// A cell holding the "not yet used" mark, for `const` construction.
    #[cfg(not(loom))]
    #[doc(hidden)]
    const UNUSED: Self::Atomic;
    /// A cell holding `value`.
    #[doc(hidden)]
    fn cell(value: u64) -> Self::Atomic;
    /// The word, widened to `u64`.
    #[doc(hidden)]
    fn load(cell: &Self::Atomic) -> u64;
    /// Replaces `current` with `new`, or returns what the word holds instead. May fail
    /// spuriously; callers loop.
    #[doc(hidden)]
    fn compare_exchange(cell: &Self::Atomic, current: u64, new: u64) -> Result<(), u64>;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for u32 {}
    impl Sealed for u64 {}
}

crate::with_atomic64! {
    /// The word a bucket uses unless told otherwise.
    pub type DefaultWord = u64;
}
crate::without_atomic64! {
    /// The word a bucket uses unless told otherwise.
    pub type DefaultWord = u32;
}

/// The mark a never-used word holds: the high bit. A transition that would store exactly this
/// value stores the next one instead (one unit later, never a token more).
pub(crate) const fn unused_mark(bits: u32) -> u64 {
    1 << (bits - 1)
}

// Relaxed everywhere: the word is the bucket's entire state and no other memory is published
// through it. Each successful compare-exchange replaces exactly the value the transition read,
// so grants follow the word's single modification order whatever the ordering.

impl Word for u32 {
    type Atomic = AtomicU32;
    const BITS: u32 = 32;
    #[cfg(not(loom))]
    const UNUSED: AtomicU32 = AtomicU32::new(unused_mark(32) as u32);
    fn cell(value: u64) -> AtomicU32 {
        AtomicU32::new(value as u32)
    }
    #[inline]
    fn load(cell: &AtomicU32) -> u64 {
        cell.load(Ordering::Relaxed) as u64
    }
    #[inline]
    fn compare_exchange(cell: &AtomicU32, current: u64, new: u64) -> Result<(), u64> {
        cell.compare_exchange_weak(
            current as u32,
            new as u32,
            Ordering::Relaxed,
            Ordering::Relaxed,
        )
        .map(drop)
        .map_err(u64::from)
    }
}

/// Where the target has native 64-bit atomics; on others with the `word64` feature, through
/// portable-atomic's fallback (the final firmware enables its `critical-section` feature).
#[cfg(any(loom, target_has_atomic = "64", feature = "word64"))]
impl Word for u64 {
    type Atomic = AtomicU64;
    const BITS: u32 = 64;
    #[cfg(not(loom))]
    const UNUSED: AtomicU64 = AtomicU64::new(unused_mark(64));
    fn cell(value: u64) -> AtomicU64 {
        AtomicU64::new(value)
    }
    #[inline]
    fn load(cell: &AtomicU64) -> u64 {
        cell.load(Ordering::Relaxed)
    }
    #[inline]
    fn compare_exchange(cell: &AtomicU64, current: u64, new: u64) -> Result<(), u64> {
        cell.compare_exchange_weak(current, new, Ordering::Relaxed, Ordering::Relaxed)
            .map(drop)
    }
}

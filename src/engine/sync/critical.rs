//! The 64-bit word's cell on targets without native 64-bit atomics: a `u64` that only a
//! critical section (the `critical-section` crate, which the final firmware provides) reads or
//! writes. Interrupts are masked for the few instructions of an update, so a handler that
//! interrupts code using the word waits for nothing: it runs before or after the update, never
//! inside it, and there is no lock to find held.

use core::cell::Cell;

use critical_section::Mutex;

use crate::engine::sync::Ordering;

/// A `u64` behind critical sections, with the methods of `AtomicU64` that the word uses, and
/// [`update`](Self::update), which runs a whole transition in one critical section. The
/// orderings asked for are ignored: a critical section orders everything on either side of it.
/// Public only as the cell type of the `u64` word, in a module nobody outside can name.
pub struct CriticalU64(Mutex<Cell<u64>>);

impl CriticalU64 {
    /// A cell holding `value`.
    pub(crate) const fn new(value: u64) -> Self {
        CriticalU64(Mutex::new(Cell::new(value)))
    }

    /// The value.
    #[inline]
    pub(crate) fn load(&self, _: Ordering) -> u64 {
        critical_section::with(|cs| self.0.borrow(cs).get())
    }

    /// Replaces `current` with `new`, or returns the value found instead. Never fails
    /// spuriously.
    #[inline]
    pub(crate) fn compare_exchange_weak(
        &self,
        current: u64,
        new: u64,
        _: Ordering,
        _: Ordering,
    ) -> Result<u64, u64> {
        critical_section::with(|cs| {
            let cell = self.0.borrow(cs);
            let found = cell.get();
            if found == current {
                cell.set(new);
                Ok(found)
            } else {
                Err(found)
            }
        })
    }

    /// Runs `transition` on the value and stores the value it gives (`None`: stores nothing),
    /// all in one critical section: the whole of an update, where the compare-exchange loop
    /// would take one critical section to load and one more for each compare-exchange.
    #[inline(always)]
    pub(crate) fn update<R>(&self, transition: impl FnOnce(u64) -> (Option<u64>, R)) -> R {
        critical_section::with(|cs| {
            let cell = self.0.borrow(cs);
            let (new, out) = transition(cell.get());
            if let Some(new) = new {
                cell.set(new);
            }
            out
        })
    }
}

impl core::fmt::Debug for CriticalU64 {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_tuple("CriticalU64")
            .field(&self.load(Ordering::Relaxed))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_loads_compares_and_exchanges_as_an_atomic_does() {
        let cell = CriticalU64::new(u64::MAX - 1);
        assert_eq!(cell.load(Ordering::Relaxed), u64::MAX - 1);
        let swap = |current, new| {
            cell.compare_exchange_weak(current, new, Ordering::Relaxed, Ordering::Relaxed)
        };
        assert_eq!(swap(u64::MAX - 1, 1 << 40), Ok(u64::MAX - 1));
        assert_eq!(swap(u64::MAX - 1, 7), Err(1 << 40));
        assert_eq!(cell.load(Ordering::Relaxed), 1 << 40);
        assert_eq!(std::format!("{cell:?}"), "CriticalU64(1099511627776)");
    }

    #[test]
    fn an_update_stores_what_its_transition_gives_or_nothing() {
        let cell = CriticalU64::new(5);
        assert_eq!(cell.update(|word| (Some(word + 3), word)), 5);
        assert_eq!(cell.update(|word| (None, word)), 8);
        assert_eq!(cell.load(Ordering::Relaxed), 8);
    }

    /// Threads stand in for interrupt handlers: critical-section's `std` implementation is one
    /// process-wide lock, so every update excludes every other, and none is lost.
    #[test]
    fn concurrent_updates_lose_nothing_across_both_halves() {
        const THREADS: u64 = 4;
        // Fewer under miri, which interprets every step.
        const UPDATES: u64 = if cfg!(miri) { 200 } else { 10_000 };
        // Each update adds 2^32 - 1: a carry from the low half to the high half on most of them.
        const STEP: u64 = u32::MAX as u64;
        let cell = CriticalU64::new(0);
        std::thread::scope(|scope| {
            for thread in 0..THREADS {
                let cell = &cell;
                scope.spawn(move || {
                    for i in 0..UPDATES {
                        if (thread + i) % 2 == 0 {
                            cell.update(|word| (Some(word.wrapping_add(STEP)), ()));
                        } else {
                            let mut word = cell.load(Ordering::Relaxed);
                            while let Err(found) = cell.compare_exchange_weak(
                                word,
                                word.wrapping_add(STEP),
                                Ordering::Relaxed,
                                Ordering::Relaxed,
                            ) {
                                word = found;
                            }
                        }
                    }
                });
            }
        });
        assert_eq!(cell.load(Ordering::Relaxed), THREADS * UPDATES * STEP);
    }
}

//! The one place that chooses atomics: loom's under `cfg(loom)` so models can explore every
//! interleaving, portable-atomic's otherwise.
//!
//! portable-atomic compiles to the core atomics where the target has them. On targets without
//! compare-and-swap (thumbv6m, riscv32imc) it needs the final firmware to choose how to provide
//! it (its `critical-section` feature or the `portable_atomic_unsafe_assume_single_core` cfg);
//! this library never chooses for it. The 64-bit word's cell ([`Atomic64`]) is a native 64-bit
//! atomic where the target has one; elsewhere the `word64` feature makes it [`CriticalU64`], a
//! `u64` behind critical sections (the `critical-section` crate, whose implementation the final
//! firmware provides), never portable-atomic's fallback, a spin lock on cores with 32-bit
//! compare-and-swap that an interrupt handler could find held for ever.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU32, AtomicU64, Ordering};

#[cfg(not(loom))]
pub(crate) use portable_atomic::{AtomicU32, Ordering};

crate::with_atomic64! {
    #[cfg(not(loom))]
    pub(crate) use portable_atomic::AtomicU64;
    /// The cell of the 64-bit word: the target's own 64-bit atomic (loom's under loom).
    pub(crate) type Atomic64 = AtomicU64;
}

// The cell behind critical sections: tested on every host, built for the `u64` word where the
// target has no 64-bit atomics.
#[cfg(test)]
mod critical;
crate::without_atomic64! {
    #[cfg(all(not(test), feature = "word64"))]
    mod critical;
}

crate::without_atomic64! {
    #[cfg(feature = "word64")]
    pub(crate) use critical::CriticalU64;
    /// The cell of the 64-bit word: a `u64` behind critical sections, here where the target
    /// has no 64-bit atomics.
    #[cfg(feature = "word64")]
    pub(crate) type Atomic64 = CriticalU64;
}

// `AdjustableBucket`'s state on the 64-bit word, only where it is lock-free (see
// `word::AdjustableWord`).
crate::with_atomic128! {
    pub(crate) use portable_atomic::AtomicU128;
}

#[cfg(loom)]
pub(crate) use loom::{
    hint::spin_loop,
    sync::atomic::{fence, AtomicBool},
};

crate::with_atomic64! {
    #[cfg(not(loom))]
    pub(crate) use {
        core::hint::spin_loop,
        portable_atomic::{fence, AtomicBool},
    };
}

/// The lock of the waiters' queues (`wait::queue`): held only to push, pop and take, never
/// across a wait. Under loom the queues' registry is a loom `lazy_static`, so that each
/// execution of a model starts with empty lines.
#[cfg(all(loom, feature = "std"))]
pub(crate) use loom::{
    lazy_static,
    sync::{Mutex, MutexGuard},
};

#[cfg(all(not(loom), feature = "std"))]
pub(crate) use std::sync::{Mutex, MutexGuard};

/// The lock of a `KeyedTable`'s slots: a critical section (the `critical-section` crate, which
/// the final firmware provides), or loom's mutex under loom. The critical-section crate's `std`
/// implementation keeps its "held" flag per OS thread, and loom runs every thread of a model on
/// one, so under loom it would exclude nothing; loom's mutex makes the models explore exactly
/// the exclusion that a critical section gives.
#[cfg(feature = "keyed-table")]
pub(crate) struct SlotLock<T> {
    #[cfg(not(loom))]
    inner: critical_section::Mutex<core::cell::RefCell<T>>,
    #[cfg(loom)]
    inner: loom::sync::Mutex<T>,
}

#[cfg(feature = "keyed-table")]
impl<T> SlotLock<T> {
    crate::const_fn_unless_loom! {
        /// A lock holding `value`.
        pub(crate) const fn new(value: T) -> Self {
            Self {
                #[cfg(not(loom))]
                inner: critical_section::Mutex::new(core::cell::RefCell::new(value)),
                #[cfg(loom)]
                inner: loom::sync::Mutex::new(value),
            }
        }
    }

    /// Runs `f` on the value with the lock held. Never nested: `f` takes no lock.
    #[inline]
    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        #[cfg(not(loom))]
        {
            critical_section::with(|cs| f(&mut self.inner.borrow_ref_mut(cs)))
        }
        #[cfg(loom)]
        {
            // A panic in a model fails the model; the value is not read after it.
            f(&mut self.inner.lock().unwrap_or_else(|p| p.into_inner()))
        }
    }
}

/// Atomics that stay real under loom: `CoarseClock`'s process-wide reading, refreshed by a
/// thread of its own, which a model takes as input as it takes any clock's (models drive time
/// with `ManualClock`).
#[cfg(feature = "coarse-clock")]
pub(crate) mod unmodeled {
    pub(crate) use portable_atomic::{AtomicU64, Ordering};
}

/// Loom models only: the mutant the models must catch, kept here rather than in a bucket.
///
/// Loom runs every thread of a model on the thread that called `loom::model`, so a flag local to
/// that thread reaches every thread of the model and no other test.
#[cfg(loom)]
pub mod models {
    use core::cell::Cell;

    std::thread_local! {
        static BLIND_STORES: Cell<bool> = const { Cell::new(false) };
    }

    /// Runs `model` with the compare-exchange driver broken: it loads the word, then stores its
    /// transition's result without comparing (a lost update). A model that passes under this
    /// catches nothing.
    pub fn with_blind_stores<T>(model: impl FnOnce() -> T) -> T {
        struct Reset;
        impl Drop for Reset {
            fn drop(&mut self) {
                BLIND_STORES.with(|on| on.set(false));
            }
        }
        BLIND_STORES.with(|on| on.set(true));
        let _reset = Reset;
        model()
    }

    /// Whether the driver stores blindly (see [`with_blind_stores`]).
    pub(crate) fn blind_stores() -> bool {
        BLIND_STORES.with(Cell::get)
    }
}

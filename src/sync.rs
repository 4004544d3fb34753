//! The one place that chooses atomics: loom's under `cfg(loom)` so models can explore every
//! interleaving, portable-atomic's otherwise.
//!
//! portable-atomic compiles to the core atomics where the target has them. On targets without
//! compare-and-swap (thumbv6m, riscv32imc) it needs the final firmware to choose how to provide
//! it (its `critical-section` feature or the `portable_atomic_unsafe_assume_single_core` cfg);
//! this library never chooses for it. 64-bit cells are used only where the target has native
//! 64-bit atomics, or where the `word64` feature asks for them: then portable-atomic falls back
//! to a lock, which the final firmware makes a critical section.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU32, AtomicU64, Ordering};

#[cfg(not(loom))]
pub(crate) use portable_atomic::{AtomicU32, Ordering};

#[cfg(all(not(loom), any(target_has_atomic = "64", feature = "word64")))]
pub(crate) use portable_atomic::AtomicU64;

/// `AdjustableBucket`'s state on the 64-bit word, only where it is lock-free (see
/// `word::AdjustableWord`).
#[cfg(all(
    not(loom),
    target_has_atomic = "64",
    any(
        target_arch = "aarch64",
        all(
            target_arch = "x86_64",
            any(target_feature = "cmpxchg16b", feature = "std")
        )
    )
))]
pub(crate) use portable_atomic::AtomicU128;

#[cfg(loom)]
pub(crate) use loom::{
    hint::spin_loop,
    sync::atomic::{fence, AtomicBool},
};

#[cfg(all(not(loom), target_has_atomic = "64"))]
pub(crate) use {
    core::hint::spin_loop,
    portable_atomic::{fence, AtomicBool},
};

/// The lock of the waiters' queues (`wait::queue`): held only to push, pop and take, never
/// across a wait.
#[cfg(all(loom, feature = "std"))]
pub(crate) use loom::sync::{Mutex, MutexGuard};

#[cfg(all(not(loom), feature = "std"))]
pub(crate) use std::sync::{Mutex, MutexGuard};

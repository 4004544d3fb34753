//! Waiting for tokens, for every kind of gate: one crate-private trait ([`ReserveCancel`]:
//! take now, or give back what was taken), one guard that gives back on drop
//! ([`CancelOnDrop`]), and [`Jitter`] after any wait that slept.
//!
//! Waiters line up per bucket ([`queue`]): only the head of the line takes its tokens, when they
//! fall due, so a waiter that gives up leaves nothing behind. The same line serves threads
//! ([`blocking`]), tokio tasks ([`tokio`](self::tokio)), [`Limits`](crate::Limits) and tower's
//! backpressure. Without `std` there is no line (it needs a heap): [`delay`] sleeps until the
//! tokens are due and then tries, so it too takes nothing before it acts. `RedisBucket`'s line
//! is its own (`redis::line`): its takes are calls to Redis, which this trait's synchronous
//! take cannot make.

#[cfg(any(feature = "std", feature = "embedded-hal"))]
crate::with_atomic64! {
    mod adjustable;
}
#[cfg(feature = "std")]
pub(crate) mod blocking;
// Only the waits use it, and without them there are none.
#[cfg(feature = "embedded-hal")]
mod delay;
#[cfg(any(feature = "std", feature = "embedded-hal"))]
mod gate;
mod jitter;
#[cfg(feature = "std")]
pub(crate) mod queue;
#[cfg(feature = "tokio")]
pub(crate) mod tokio;

#[cfg(feature = "std")]
pub(crate) use self::blocking::acquire_blocking;
#[cfg(feature = "embedded-hal")]
pub(crate) use self::delay::acquire_with_delay;
#[cfg(any(feature = "std", feature = "embedded-hal"))]
pub(crate) use self::gate::{jitter_after, CancelOnDrop, ReserveCancel};
pub use self::jitter::Jitter;
#[cfg(feature = "tokio")]
pub(crate) use self::tokio::acquire_async;

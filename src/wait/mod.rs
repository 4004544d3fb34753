//! Waiting for tokens, for every kind of gate: one crate-private trait ([`ReserveCancel`]: what
//! a request costs, and give back what was taken), whose take completes now ([`ReserveNow`], a
//! compare-exchange: `TokenBucket`, `AdjustableBucket`, [`Limits`](crate::Limits)) or after a
//! round trip (`ReserveLater`: `RedisBucket`); one guard that gives back on drop
//! ([`CancelOnDrop`]); and [`Jitter`] after any wait that slept.
//!
//! Waiters line up per bucket ([`queue`]): only the head of the line takes its tokens, when they
//! fall due, so a waiter that gives up leaves nothing behind. The same line serves threads
//! ([`blocking`]), tokio tasks ([`tokio`](self::tokio)), [`Limits`](crate::Limits) and tower's
//! backpressure. Without `std` there is no line (it needs a heap): [`delay`] sleeps until the
//! tokens are due and then tries, so it too takes nothing before it acts. `RedisBucket`'s line
//! is its own (`redis::line`), because this one takes under its lock and a round trip cannot be
//! made there; its waits (`redis::wait`) take through `ReserveLater` with no lock held, then
//! sleep the jitter in the same [`CancelOnDrop`], whose give-back starts a call to Redis.

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
#[cfg(feature = "tokio")]
mod precise;
#[cfg(feature = "std")]
pub(crate) mod queue;
#[cfg(feature = "tokio")]
pub(crate) mod tokio;

#[cfg(feature = "std")]
pub(crate) use self::blocking::acquire_blocking;
#[cfg(feature = "embedded-hal")]
pub(crate) use self::delay::acquire_with_delay;
#[cfg(any(feature = "std", feature = "embedded-hal"))]
pub(crate) use self::gate::{jitter_after, CancelOnDrop, ReserveNow};
#[cfg(feature = "redis")]
pub(crate) use self::gate::{ReserveCancel, ReserveLater};
pub use self::jitter::Jitter;
#[cfg(feature = "tokio")]
pub(crate) use self::tokio::acquire_async;

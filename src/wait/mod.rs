//! Waiting for tokens. Every wait is a reservation: the caller takes its tokens first, then
//! sleeps until its own instant, so waiters are served in arrival order, each wakes once, and no
//! lock is held across a sleep.

#[cfg(feature = "std")]
mod blocking;
#[cfg(feature = "embedded-hal")]
mod delay;
#[cfg(feature = "tokio")]
mod tokio;

#[cfg(feature = "embedded-hal")]
pub(crate) use self::delay::delay_for;
#[cfg(feature = "tokio")]
pub use self::tokio::TokioClock;

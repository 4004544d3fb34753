//! Waiting for tokens. Waiters line up per bucket ([`queue`]): only the head of the line takes
//! its tokens, when they fall due, so a waiter that gives up leaves nothing behind. The same
//! line serves threads ([`blocking`]), tokio tasks ([`tokio`](self::tokio)),
//! [`Limits`](crate::Limits) and tower's backpressure. Without `std` there is no line (it needs a heap):
//! [`delay`] sleeps until the tokens are due and then tries, so it too takes nothing before it
//! acts.

#[cfg(feature = "std")]
mod blocking;
#[cfg(feature = "embedded-hal")]
mod delay;
mod jitter;
#[cfg(feature = "std")]
pub(crate) mod queue;
#[cfg(feature = "tokio")]
mod tokio;

#[cfg(feature = "std")]
pub(crate) use self::blocking::wait_blocking;
#[cfg(feature = "embedded-hal")]
pub(crate) use self::delay::{delay_for, wait_with_delay};
pub use self::jitter::Jitter;
#[cfg(feature = "tokio")]
pub(crate) use self::tokio::wait_async;

//! Waiting for tokens, and the seam where a bucket kept elsewhere plugs into the same waits.
//!
//! Every wait of the crate follows one rule: waiters line up per bucket, and only the head of the
//! line takes its tokens, when they fall due, so a waiter that gives up (a dropped future, a
//! timeout) leaves nothing behind, whatever waits behind it. The waits themselves are methods of
//! the buckets: `acquire_blocking` (threads, `std`), `acquire` and `acquire_timeout` (tokio,
//! `tokio`), `acquire_with_delay` (`embedded-hal`'s `DelayNs`), and on microcontrollers the
//! async `EmbassyWait` (`embassy-time`) and `acquire_with_async_delay` (`embedded-hal-async`),
//! whose line needs no heap: `LINE_CAPACITY` places in a `static` on a critical section.
//! `acquire_with_delay` blocks, and has no line: it sleeps until the tokens are due and then
//! tries, so it too takes nothing before it acts.
//!
//! Each of these waits also comes with a [`Jitter`] after a wait that slept, through
//! [`Jittered`] (`bucket.jittered(&jitter).acquire(n)`), in the same line.
//!
//! # The seam for remote buckets
//!
//! A bucket whose take is a round trip (a script in Redis: the `tollgate-redis` crate) cannot
//! take under the line's lock. It gets the same waits from three pieces, which any other backend
//! can use the same way:
//!
//! - [`GiveBack`] and [`TakeLater`]: what a request costs, the take that completes when the
//!   server answers, and how a take the caller does not act on goes back (a call started as the
//!   caller drops, which never blocks).
//! - `RemoteLine` (feature `tokio`): the waiters of one bucket in this process, in arrival
//!   order. Only the head calls `take_later`, with no lock held; a waiter that leaves wakes the
//!   next once; while the server gives no answer the turns are suspended, so a frozen server
//!   costs each waiter one timeout rather than one per waiter ahead.
//! - [`CancelOnDrop`]: holds a take across the `.await`s between the take and the caller's act
//!   (the [`Jitter`] after a wait that slept), and gives it back if the future is dropped there.
//!
//! The local buckets implement [`GiveBack`] with their refund rule: what goes back is what was
//! taken, less what the burst cap would have cut since, never a token more.

#[cfg(any(feature = "embassy-time", feature = "embedded-hal-async"))]
mod async_line;
#[cfg(any(feature = "std", feature = "embedded-hal"))]
crate::with_atomic64! {
    mod adjustable;
}
#[cfg(feature = "std")]
pub(crate) mod blocking;
// Only the waits use it, and without them there are none.
#[cfg(feature = "embedded-hal")]
mod delay;
#[cfg(feature = "embedded-hal-async")]
mod delay_async;
#[cfg(feature = "embassy-time")]
mod embassy;
mod gate;
mod jitter;
mod jittered;
#[cfg(any(feature = "embassy-time", feature = "embedded-hal-async"))]
mod line;
#[cfg(feature = "tokio")]
mod precise;
#[cfg(feature = "std")]
pub(crate) mod queue;
#[cfg(feature = "tokio")]
mod remote;
#[cfg(feature = "tokio")]
pub(crate) mod tokio;

#[cfg(feature = "std")]
pub(crate) use self::blocking::acquire_blocking;
#[cfg(feature = "embedded-hal")]
pub(crate) use self::delay::acquire_with_delay;
#[cfg(feature = "embassy-time")]
pub use self::embassy::EmbassyWait;
#[cfg(any(feature = "std", feature = "embedded-hal"))]
pub(crate) use self::gate::ReserveNow;
pub use self::gate::{CancelOnDrop, GiveBack, TakeLater};
pub(crate) use self::jitter::splitmix64;
pub use self::jitter::Jitter;
pub use self::jittered::Jittered;
#[cfg(any(feature = "embassy-time", feature = "embedded-hal-async"))]
pub use self::line::{forget_timer_lateness, timer_lateness, waiters_in_line, LINE_CAPACITY};
#[cfg(feature = "tokio")]
pub use self::remote::{RemoteLine, RemotePlace};
#[cfg(feature = "tokio")]
pub(crate) use self::tokio::acquire_async;

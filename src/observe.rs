//! Observability: counts of what a limit granted, denied and made wait, kept beside the bucket,
//! never in it.
//!
//! [`Counted`] wraps a limit (a [`TokenBucket`], a keyed limiter, `tollgate-tower`'s `Limit`) and tells an
//! [`Observe`]r about each call it passes on. The bucket's word and size are untouched: a bucket
//! that nobody counts pays nothing, and `Counted<_, ()>` compiles to the bare call. [`Counters`]
//! is the observer for every target: relaxed atomic adds, no lock and no allocation, so it works
//! in `no_std` and in interrupt handlers and can live in a `static`. With the `metrics` feature,
//! `Metrics` sends the same events to the `metrics` facade.
//!
//! ```
//! use tollgate::observe::{Counted, Counters, Counts};
//! use tollgate::{ManualClock, Quota, Rate, TokenBucket};
//!
//! static COUNTS: Counters = Counters::new();
//! let clock = ManualClock::new();
//! let bucket = TokenBucket::try_new(Quota::new(Rate::per_second(2)).burst(5), &clock)?;
//! let gate = Counted::new(bucket, &COUNTS);
//!
//! for _ in 0..4 {
//!     let _ = gate.try_acquire(2); // 2 + 2 granted, then 1 left: two refusals
//! }
//! let counts = COUNTS.counts();
//! assert_eq!((counts.granted_calls, counts.granted_tokens), (2, 4));
//! assert_eq!((counts.denied_calls, counts.denied_tokens), (2, 4));
//! # Ok::<(), tollgate::ConfigError>(())
//! ```

use core::time::Duration;

// Counts order nothing else: each is a tally read on its own.
use crate::engine::sync::Ordering::Relaxed;
use crate::{Clock, Denied, Reservation, TokenBucket, Word};

#[cfg(any(feature = "std", feature = "keyed-table"))]
mod keyed;
#[cfg(feature = "metrics")]
mod metrics;
#[cfg(feature = "std")]
mod waits;

#[cfg(feature = "metrics")]
pub use self::metrics::Metrics;

/// What a counted limit reports. Every method does nothing unless overridden, and `()` overrides
/// none: the zero-sized observer that costs nothing.
///
/// Methods take `&self` and must not block: they run on the caller's path, possibly in an
/// interrupt handler.
pub trait Observe {
    /// A call got `tokens`, after waiting `waited` (zero for a grant at once; for a
    /// [`reserve`](TokenBucket::reserve), the wait the reservation has before it is due).
    #[inline]
    fn granted(&self, tokens: u32, waited: Duration) {
        let _ = (tokens, waited);
    }

    /// A call for `tokens` was refused, took nothing (over the limit, beyond the burst, or out
    /// of time in a wait).
    #[inline]
    fn denied(&self, tokens: u32) {
        let _ = tokens;
    }

    /// A call began waiting in line; [`wait_ended`](Self::wait_ended) follows, however the wait
    /// ends (served, refused, or its future dropped).
    #[inline]
    fn wait_began(&self) {}

    /// A wait that [`wait_began`](Self::wait_began) is over.
    #[inline]
    fn wait_ended(&self) {}
}

impl Observe for () {}

/// Observers behind a reference or a shared pointer observe through it.
macro_rules! forward {
    ($($pointer:ty),*) => {$(
        impl<O: Observe + ?Sized> Observe for $pointer {
            #[inline]
            fn granted(&self, tokens: u32, waited: Duration) {
                (**self).granted(tokens, waited);
            }
            #[inline]
            fn denied(&self, tokens: u32) {
                (**self).denied(tokens);
            }
            #[inline]
            fn wait_began(&self) {
                (**self).wait_began();
            }
            #[inline]
            fn wait_ended(&self) {
                (**self).wait_ended();
            }
        }
    )*};
}
forward!(&O);
#[cfg(feature = "std")]
forward!(std::sync::Arc<O>);

// The atomics counters are kept in: 64 bits where the target has them, else 32 bits that wrap
// (never portable-atomic's 64-bit fallback, a lock an interrupt handler could deadlock on).
// Under loom they are loom's 64-bit atomics, modeled like the buckets' words.
crate::with_atomic64! {
    type Cell = crate::engine::sync::AtomicU64;
}
crate::without_atomic64! {
    type Cell = crate::engine::sync::AtomicU32;
}

/// Counts of calls and tokens granted, denied and made to wait: relaxed atomic adds, usable in a
/// `static`, in `no_std` and in interrupt handlers.
///
/// Each count is its own atomic, read one at a time by [`counts`](Self::counts): a reading
/// taken while calls run may show a call's tokens without its call, never counts that did not
/// happen. On targets without 64-bit atomics (32-bit microcontrollers) the counts wrap at 2^32,
/// as Prometheus-style counters are read (by their increase) that is harmless if read within
/// each wrap.
#[derive(Debug, Default)]
pub struct Counters {
    granted_calls: Cell,
    granted_tokens: Cell,
    denied_calls: Cell,
    denied_tokens: Cell,
    waited_calls: Cell,
    waited_tokens: Cell,
    waiting: Cell,
}

/// A reading of [`Counters`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Counts {
    /// Calls that got their tokens, at once or after a wait.
    pub granted_calls: u64,
    /// Tokens those calls got.
    pub granted_tokens: u64,
    /// Calls refused.
    pub denied_calls: u64,
    /// Tokens those calls asked for.
    pub denied_tokens: u64,
    /// Granted calls that waited first (reservations due later included).
    pub waited_calls: u64,
    /// Tokens those calls got.
    pub waited_tokens: u64,
    /// Calls waiting in line now.
    pub waiting: u64,
}

impl Counters {
    crate::const_fn_unless_loom! {
        /// All counts at zero.
        pub const fn new() -> Self {
            Self {
                granted_calls: Cell::new(0),
                granted_tokens: Cell::new(0),
                denied_calls: Cell::new(0),
                denied_tokens: Cell::new(0),
                waited_calls: Cell::new(0),
                waited_tokens: Cell::new(0),
                waiting: Cell::new(0),
            }
        }
    }

    /// The counts now.
    // The cells are `u32` on targets without 64-bit atomics: there the conversion is not idle.
    #[allow(clippy::useless_conversion)]
    pub fn counts(&self) -> Counts {
        let read = |cell: &Cell| u64::from(cell.load(Relaxed));
        Counts {
            granted_calls: read(&self.granted_calls),
            granted_tokens: read(&self.granted_tokens),
            denied_calls: read(&self.denied_calls),
            denied_tokens: read(&self.denied_tokens),
            waited_calls: read(&self.waited_calls),
            waited_tokens: read(&self.waited_tokens),
            waiting: read(&self.waiting),
        }
    }
}

// The cells are `u64` where the target has 64-bit atomics: there `u32::into` is not idle.
#[allow(clippy::useless_conversion)]
impl Observe for Counters {
    #[inline]
    fn granted(&self, tokens: u32, waited: Duration) {
        self.granted_calls.fetch_add(1, Relaxed);
        self.granted_tokens.fetch_add(tokens.into(), Relaxed);
        if !waited.is_zero() {
            self.waited_calls.fetch_add(1, Relaxed);
            self.waited_tokens.fetch_add(tokens.into(), Relaxed);
        }
    }

    #[inline]
    fn denied(&self, tokens: u32) {
        self.denied_calls.fetch_add(1, Relaxed);
        self.denied_tokens.fetch_add(tokens.into(), Relaxed);
    }

    fn wait_began(&self) {
        self.waiting.fetch_add(1, Relaxed);
    }

    fn wait_ended(&self) {
        self.waiting.fetch_sub(1, Relaxed);
    }
}

/// A limit whose calls are reported to an [`Observe`]r: the limit's own methods, each counted.
///
/// The wrapped limit is unchanged (reach it with [`inner`](Self::inner) for what is not
/// counted: `available`, `quota`, `cancel`…). `O` is often `&Counters` (a `static`, or one kept
/// elsewhere), `Arc<Counters>` to share with a `/metrics` route, or `()` to count nothing.
#[derive(Debug, Default)]
pub struct Counted<L, O = Counters> {
    inner: L,
    observer: O,
}

impl<L, O: Observe> Counted<L, O> {
    /// Reports `inner`'s calls to `observer`.
    pub const fn new(inner: L, observer: O) -> Self {
        Self { inner, observer }
    }

    /// The wrapped limit: calls made on it directly are not counted.
    pub fn inner(&self) -> &L {
        &self.inner
    }

    /// The observer.
    pub fn observer(&self) -> &O {
        &self.observer
    }

    /// The limit and the observer, apart again.
    pub fn into_parts(self) -> (L, O) {
        (self.inner, self.observer)
    }

    /// Reports the outcome of a call for `tokens` that waited `waited` when it succeeded.
    #[inline]
    pub(crate) fn report<T, E>(
        &self,
        tokens: u32,
        result: Result<T, E>,
        waited: impl FnOnce(&T) -> Duration,
    ) -> Result<T, E> {
        match &result {
            Ok(granted) => self.observer.granted(tokens, waited(granted)),
            Err(_) => self.observer.denied(tokens),
        }
        result
    }
}

impl<C: Clock, W: Word, O: Observe> Counted<TokenBucket<C, W>, O> {
    /// [`TokenBucket::try_acquire`], counted. `n = 0` counts as a grant of no tokens.
    #[inline]
    pub fn try_acquire(&self, n: u32) -> Result<(), Denied> {
        self.report(n, self.inner.try_acquire(n), |_| Duration::ZERO)
    }

    /// [`TokenBucket::reserve`], counted when made: a reservation due later counts as a grant
    /// that waited. A reservation given back with [`cancel`](TokenBucket::cancel) (on
    /// [`inner`](Self::inner)) stays counted.
    pub fn reserve(&self, n: u32, max_wait: Duration) -> Result<Reservation, Denied> {
        self.report(n, self.inner.reserve(n, max_wait), Reservation::wait)
    }

    /// [`TokenBucket::acquire_with_delay`], counted.
    #[cfg(feature = "embedded-hal")]
    pub fn acquire_with_delay(
        &self,
        n: u32,
        delay: &mut impl embedded_hal::delay::DelayNs,
    ) -> Result<Duration, Denied> {
        let _waiting = Waiting::new(&self.observer);
        self.report(n, self.inner.acquire_with_delay(n, delay), |&w| w)
    }
}

/// A wait in progress: reported when made and when dropped, however the wait ends.
#[cfg(any(feature = "std", feature = "embedded-hal"))]
pub(crate) struct Waiting<'a, O: Observe> {
    observer: &'a O,
}

#[cfg(any(feature = "std", feature = "embedded-hal"))]
impl<'a, O: Observe> Waiting<'a, O> {
    pub(crate) fn new(observer: &'a O) -> Self {
        observer.wait_began();
        Self { observer }
    }
}

#[cfg(any(feature = "std", feature = "embedded-hal"))]
impl<O: Observe> Drop for Waiting<'_, O> {
    fn drop(&mut self) {
        self.observer.wait_ended();
    }
}

#[cfg(test)]
crate::with_atomic64! {
    mod tests {
        use super::*;
        use crate::{ManualClock, Quota, Rate};

        #[test]
        fn an_unused_observer_adds_nothing() {
            type Bucket<'a> = TokenBucket<&'a ManualClock>;
            assert_eq!(core::mem::size_of::<()>(), 0);
            assert_eq!(
                core::mem::size_of::<Counted<Bucket<'_>, ()>>(),
                core::mem::size_of::<Bucket<'_>>()
            );
        }

        #[test]
        fn reservations_count_as_grants_that_waited_and_refusals_as_denials() {
            let clock = ManualClock::new();
            let bucket =
                TokenBucket::try_new(Quota::new(Rate::per_second(10)).burst(4), &clock).unwrap();
            let counters = Counters::new();
            let gate = Counted::new(bucket, &counters);
            // (call, granted?)
            assert!(gate.reserve(4, Duration::ZERO).is_ok()); // at once
            assert!(gate.reserve(2, Duration::from_millis(200)).is_ok()); // due in 200 ms
            assert!(gate.reserve(1, Duration::from_millis(200)).is_err()); // would wait 300 ms
            assert!(gate.try_acquire(5).is_err()); // beyond the burst
            assert!(gate.try_acquire(0).is_ok());
            assert_eq!(
                counters.counts(),
                Counts {
                    granted_calls: 3,
                    granted_tokens: 6,
                    denied_calls: 2,
                    denied_tokens: 6,
                    waited_calls: 1,
                    waited_tokens: 2,
                    waiting: 0,
                }
            );
        }

        #[cfg(feature = "embedded-hal")]
        #[test]
        fn waits_through_a_delay_are_counted() {
            /// A delay that moves the manual clock on instead of sleeping.
            struct Advance<'a>(&'a ManualClock);
            impl embedded_hal::delay::DelayNs for Advance<'_> {
                fn delay_ns(&mut self, ns: u32) {
                    self.0.advance(Duration::from_nanos(ns.into()));
                }
            }
            let clock = ManualClock::new();
            let quota = Quota::new(Rate::per_second(10)).burst(10).start_empty();
            let counters = Counters::new();
            let gate = Counted::new(TokenBucket::try_new(quota, &clock).unwrap(), &counters);
            let waited = gate.acquire_with_delay(2, &mut Advance(&clock));
            assert_eq!(waited, Ok(Duration::from_millis(200)));
            assert!(gate.acquire_with_delay(11, &mut Advance(&clock)).is_err());
            let counts = counters.counts();
            assert_eq!((counts.granted_calls, counts.waited_tokens), (1, 2));
            assert_eq!((counts.denied_calls, counts.waiting), (1, 0));
        }
    }
}

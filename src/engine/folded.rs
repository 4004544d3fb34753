//! A quota known at compile time, folded into the code of the bucket that enforces it.
//!
//! A [`TokenBucket`](crate::TokenBucket) keeps its layout beside its word, so a `static`
//! bucket is writable memory as a whole and every check loads the layout's fields from it. On
//! the word [`Folded<Q, W>`](Folded) the layout is not stored at all: it is a constant of the
//! type, solved at compile time from [`ConstQuota::QUOTA`] and the clock's frequency, so the
//! compiler folds every field into the instructions that read it, as it folds the constants
//! of a bucket written by hand. The bucket is the word and the clock only.
//!
//! [`static_bucket!`](crate::static_bucket) declares both at once.

use core::fmt;
use core::marker::PhantomData;

use crate::clock::Clock;
use crate::engine::layout::{Layout, Unpacked};
use crate::engine::word::{sealed, Word};
use crate::{ConfigError, DefaultWord, Quota};

/// A quota known at compile time and the clock it is read on: what [`Folded`] solves its
/// layout from. [`static_bucket!`](crate::static_bucket) implements it for a type of its own;
/// implement it by hand to name that type.
///
/// ```
/// use tollgate::{ConstQuota, Folded, ManualClock, Quota, Rate, TokenBucket};
///
/// struct Gate;
/// impl ConstQuota for Gate {
///     type Clock = &'static ManualClock;
///     const QUOTA: Quota = Quota::new(Rate::per_second(2)).burst(5);
/// }
///
/// static CLOCK: ManualClock = ManualClock::new();
/// static GATE: TokenBucket<&ManualClock, Folded<Gate, u32>> = TokenBucket::folded(&CLOCK);
///
/// assert!(GATE.try_acquire(5).is_ok());
/// assert!(GATE.try_acquire(1).is_err());
/// ```
pub trait ConstQuota: 'static {
    /// The clock the bucket reads.
    type Clock: Clock;
    /// The quota.
    const QUOTA: Quota;
}

/// The word `W` of a bucket whose quota `Q` is a compile-time constant: the layout is a
/// constant of this type rather than a field of the bucket (see [`ConstQuota`]).
///
/// A bad quota is a compile error, as in any `static` bucket. At run time only `Q`'s own
/// quota builds a bucket on this word; any other is refused with
/// [`ConfigError::Unrepresentable`].
pub struct Folded<Q, W = DefaultWord>(PhantomData<fn() -> (Q, W)>);

impl<Q, W> Clone for Folded<Q, W> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<Q, W> Copy for Folded<Q, W> {}

impl<Q, W> fmt::Debug for Folded<Q, W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Folded")
    }
}

impl<Q: ConstQuota, W: Word> Folded<Q, W> {
    /// The layout, solved at compile time: a bad quota fails the build where the bucket's type
    /// is used.
    pub(crate) const LAYOUT: Layout = {
        let layout =
            crate::bucket::solved(&Q::QUOTA, <Q::Clock as Clock>::TICKS_PER_SECOND, W::BITS);
        // The 32-bit word's transitions assume what its stored form checks.
        if W::BITS == 32 && crate::engine::layout::Narrow::pack(&layout).is_none() {
            panic!("{}", ConfigError::Unrepresentable.message())
        }
        layout
    };
}

impl<Q, W> sealed::Sealed for Folded<Q, W> {}

impl<Q: ConstQuota, W: Word> Word for Folded<Q, W> {
    type Atomic = W::Atomic;
    const BITS: u32 = W::BITS;
    #[cfg(not(loom))]
    #[allow(clippy::declare_interior_mutable_const)] // a fresh cell for each bucket, as `W`'s
    const UNUSED: W::Atomic = W::UNUSED;
    fn cell(value: u64) -> W::Atomic {
        W::cell(value)
    }
    #[inline(always)]
    fn load(cell: &W::Atomic) -> u64 {
        W::load(cell)
    }
    #[inline(always)]
    fn compare_exchange(cell: &W::Atomic, current: u64, new: u64) -> Result<(), u64> {
        W::compare_exchange(cell, current, new)
    }
    const IN_CRITICAL_SECTION: bool = W::IN_CRITICAL_SECTION;
    #[inline(always)]
    fn update<R>(cell: &W::Atomic, transition: impl FnMut(u64) -> (Option<u64>, R)) -> R {
        W::update(cell, transition)
    }
    type Stored = ();
    type LayoutRef<'a> = Unpacked;
    type Align = W::Align;
    fn pack(layout: &Layout) -> Option<()> {
        (*layout == Self::LAYOUT).then_some(())
    }
    #[inline(always)]
    fn unpack(_: &()) -> Unpacked {
        Unpacked::of(Self::LAYOUT)
    }
}

/// Declares a `static` [`TokenBucket`](crate::TokenBucket) whose quota the compiler folds into
/// its code: the same declaration as a plain `static` bucket, wrapped in the macro.
///
/// A plain `static` bucket keeps its layout beside its atomic word, so the whole `static` is
/// writable memory and every check loads the layout from it. This one's layout is a constant
/// of its word type ([`Folded`]), and a check costs what a bucket written by hand with its
/// constants costs. It also takes less RAM: the word and the clock only, and everything a bucket
/// does it does.
///
/// The quota's type is a struct of the static's name (in the type namespace, where the static
/// is not); the bucket's type is `TokenBucket<Clock, Folded<NAME, Word>>`, the word the
/// [`DefaultWord`] unless given.
///
/// ```
/// use tollgate::{static_bucket, ManualClock, Quota, Rate, TokenBucket};
///
/// static CLOCK: ManualClock = ManualClock::new();
///
/// static_bucket! {
///     /// Two a second, five at once.
///     static GATE: TokenBucket<&'static ManualClock> =
///         TokenBucket::new(Quota::new(Rate::per_second(2)).burst(5), &CLOCK);
/// }
///
/// assert!(GATE.try_acquire(5).is_ok());
/// let denied = GATE.try_acquire(1).unwrap_err();
/// assert_eq!(denied.retry_after(), Some(core::time::Duration::from_millis(500)));
/// ```
///
/// A quota the word cannot hold fails the build, as in any `static` bucket.
#[macro_export]
macro_rules! static_bucket {
    (
        $(#[$meta:meta])*
        $vis:vis static $name:ident : TokenBucket<$clock:ty $(, $word:ty)? $(,)?> =
            TokenBucket::new($quota:expr, $clock_value:expr $(,)?);
    ) => {
        // The quota's type takes the static's name: a struct with braces lives in the type
        // namespace only, beside the static in the value namespace, so the macro needs no
        // name of its own and works wherever a `static` may be declared.
        #[doc(hidden)]
        #[allow(non_camel_case_types)]
        $vis struct $name {}

        impl $crate::ConstQuota for $name {
            type Clock = $clock;
            const QUOTA: $crate::Quota = $quota;
        }

        $(#[$meta])*
        $vis static $name: $crate::TokenBucket<
            $clock,
            $crate::Folded<$name, $crate::static_bucket!(@word $($word)?)>,
        > = $crate::TokenBucket::folded($clock_value);
    };
    (@word) => { $crate::DefaultWord };
    (@word $word:ty) => { $word };
}

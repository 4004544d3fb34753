//! What every wait shares: the gate it takes from ([`GiveBack`], with its take completing now,
//! [`ReserveNow`], or after a round trip, [`TakeLater`]) and the guard that gives a take back if
//! the caller goes away before acting ([`CancelOnDrop`]).

#[cfg(any(feature = "std", feature = "embedded-hal"))]
use core::time::Duration;

#[cfg(any(feature = "std", feature = "embedded-hal"))]
use crate::Denied;
use crate::{Clock, Limits, LimitsReservation, Reservation, TokenBucket, Word};

/// What every wait needs from a gate, however its take completes: what a request costs, what a
/// take holds, and how to give a take back when the caller will not act on it after all (a
/// task dropped during its jitter, a service dropped between `poll_ready` and `call`).
///
/// The crate's own buckets implement it with their refund rule; a remote bucket (Redis, in the
/// `tollgate-redis` crate) implements it with a call that starts the give-back and returns.
/// Its take is the crate's own compare-exchange for a local bucket, and [`TakeLater`] for one
/// that decides in a round trip.
pub trait GiveBack {
    /// What one request costs: tokens, or one count per bucket of a [`Limits`].
    type Cost: Copy;
    /// What a take holds until the caller acts or gives it back.
    type Taken;
    /// Gives back what a take took, less what the burst cap would have cut since: never a
    /// token more than was taken. Never blocks, so that a drop can call it: a gate whose
    /// give-back is a round trip starts it and returns.
    fn give_back(&self, taken: Self::Taken);
}

#[cfg(any(feature = "std", feature = "embedded-hal"))]
/// A gate whose take completes at once: [`TokenBucket`], `AdjustableBucket`, [`Limits`].
pub(crate) trait ReserveNow: GiveBack {
    /// Takes `cost` now, or says how long until it could. A denial takes nothing. The
    /// `DelayNs` wait's take; a build without it has no caller.
    #[cfg_attr(not(feature = "embedded-hal"), allow(dead_code))]
    fn reserve_now(&self, cost: Self::Cost) -> Result<Self::Taken, Denied>;
    /// Takes `cost` now if it falls due within `ahead`, and says how long until it is due (on
    /// the reading its compare-exchange landed on); otherwise says how long until the same call
    /// would succeed. A denial takes nothing. The async wait's take, where the timer may wake
    /// up to `ahead` late: taken early, the tokens are due at their instant however late the
    /// caller acts, so the schedule loses nothing to the timer. The line's waits (blocking and
    /// async) take ahead; a build without them has no caller.
    #[cfg_attr(not(feature = "std"), allow(dead_code))]
    fn reserve_ahead(
        &self,
        cost: Self::Cost,
        ahead: Duration,
    ) -> Result<(Self::Taken, Duration), Denied>;
    /// Takes `cost` now for good, or says how long until it could: the fast path of a wait
    /// with nobody in line, which has no jitter to hold the take through. Only the line has
    /// that path; a build without it (`embedded-hal` alone) has no caller.
    #[cfg_attr(not(feature = "std"), allow(dead_code))]
    fn take_at_once(&self, cost: Self::Cost) -> Result<(), Denied>;
}

/// A gate whose take completes when a server answers: a remote bucket, such as
/// `tollgate-redis`'s `RedisBucket`. Its waiters cannot take under a lock held across the
/// round trip, so they wait in a `RemoteLine` (feature `tokio`) and only its head calls
/// `take_later`, with no lock held; a take the caller does not act on goes back through
/// [`CancelOnDrop`], as every local wait's does.
pub trait TakeLater: GiveBack {
    /// Why a take failed: denied, or the server's fault.
    type Error;
    /// Takes `cost` when the answer comes, or says why not. A denial takes nothing.
    fn take_later(
        &self,
        cost: Self::Cost,
    ) -> impl core::future::Future<Output = Result<Self::Taken, Self::Error>> + Send;
}

impl<C: Clock, W: Word> GiveBack for TokenBucket<C, W> {
    type Cost = u32;
    type Taken = Reservation;
    fn give_back(&self, taken: Reservation) {
        self.refund(taken);
        // A take held ahead of its instant went back: the head of the line, asleep until its
        // own estimate, may be due sooner now.
        #[cfg(feature = "std")]
        super::queue::given_back(self);
    }
}

#[cfg(any(feature = "std", feature = "embedded-hal"))]
impl<C: Clock, W: Word> ReserveNow for TokenBucket<C, W> {
    fn reserve_now(&self, n: u32) -> Result<Reservation, Denied> {
        self.reserve(n, Duration::ZERO)
    }
    fn reserve_ahead(&self, n: u32, ahead: Duration) -> Result<(Reservation, Duration), Denied> {
        self.reserve(n, ahead).map(|taken| {
            let due_in = taken.wait();
            (taken, due_in)
        })
    }
    #[inline(always)]
    fn take_at_once(&self, n: u32) -> Result<(), Denied> {
        self.try_acquire(n)
    }
}

impl<C: Clock, const N: usize, W: Word> GiveBack for Limits<'_, C, N, W> {
    type Cost = [u32; N];
    type Taken = LimitsReservation<N>;
    fn give_back(&self, mut taken: LimitsReservation<N>) {
        self.refund_parts(&mut taken.parts);
        // As a single bucket's give-back: each line's head may be due sooner now.
        #[cfg(feature = "std")]
        for bucket in self.buckets() {
            super::queue::given_back(*bucket);
        }
    }
}

#[cfg(any(feature = "std", feature = "embedded-hal"))]
impl<C: Clock, const N: usize, W: Word> ReserveNow for Limits<'_, C, N, W> {
    fn reserve_now(&self, costs: [u32; N]) -> Result<LimitsReservation<N>, Denied> {
        self.reserve(costs, Duration::ZERO)
    }
    fn reserve_ahead(
        &self,
        costs: [u32; N],
        ahead: Duration,
    ) -> Result<(LimitsReservation<N>, Duration), Denied> {
        self.reserve(costs, ahead).map(|taken| {
            let due_in = taken.wait();
            (taken, due_in)
        })
    }
    fn take_at_once(&self, costs: [u32; N]) -> Result<(), Denied> {
        self.try_acquire(costs)
    }
}

/// Holds what a wait took while the caller is not yet acting on it, and gives it back
/// ([`GiveBack::give_back`]) if the guard is dropped first: the one cancel rule of every wait.
/// A wait holds its take in one across every `.await` between the take and its return (the
/// sleep to the tokens' instant, the jitter), so a future dropped there leaves the gate as if
/// it had never taken.
pub struct CancelOnDrop<'g, G: GiveBack> {
    gate: &'g G,
    taken: Option<G::Taken>,
}

impl<'g, G: GiveBack> CancelOnDrop<'g, G> {
    /// Holds `taken`, which came from `gate`.
    pub fn new(gate: &'g G, taken: G::Taken) -> Self {
        CancelOnDrop {
            gate,
            taken: Some(taken),
        }
    }

    /// The caller acts: the tokens are spent.
    pub fn keep(mut self) {
        drop(self.taken.take());
    }

    /// Hands the take to the caller, who from now on gives it back or spends it.
    pub fn into_taken(mut self) -> G::Taken {
        match self.taken.take() {
            Some(taken) => taken,
            // Only `keep` and `into_taken` empty the guard, and both consume it.
            None => unreachable!("a guard holds its take until it is consumed"),
        }
    }
}

impl<G: GiveBack> Drop for CancelOnDrop<'_, G> {
    fn drop(&mut self) {
        if let Some(taken) = self.taken.take() {
            self.gate.give_back(taken);
        }
    }
}

impl<G: GiveBack> core::fmt::Debug for CancelOnDrop<'_, G> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("CancelOnDrop")
            .field("holding", &self.taken.is_some())
            .finish_non_exhaustive()
    }
}

//! What every wait shares: the gate it takes from ([`ReserveCancel`], with its take completing
//! now, [`ReserveNow`], or after a round trip, `ReserveLater`), the guard that gives a take back
//! if the caller goes away before acting ([`CancelOnDrop`]), and the jitter after a wait that
//! slept.

use core::time::Duration;

use super::Jitter;
use crate::{Clock, Denied, Limits, LimitsReservation, Reservation, TokenBucket, Word};

/// What every wait needs from a gate, however its take completes: what a request costs, what a
/// take holds, and how to give a take back when the caller will not act on it after all (a
/// task dropped during its jitter). The take itself is [`ReserveNow`] for a gate that decides
/// with a compare-exchange, and `ReserveLater` for one that decides in a round trip (a
/// `RedisBucket`).
pub(crate) trait ReserveCancel {
    /// What one request costs: tokens, or one count per bucket of a [`Limits`].
    type Cost: Copy;
    /// What a take holds until the caller acts or gives it back.
    type Taken;
    /// Gives back what a take took, less what the burst cap would have cut since: never a
    /// token more than was taken. Never blocks, so that a drop can call it: a gate whose
    /// give-back is a round trip starts it and returns.
    fn cancel(&self, taken: Self::Taken);
}

/// A gate whose take completes at once: [`TokenBucket`], `AdjustableBucket`, [`Limits`].
pub(crate) trait ReserveNow: ReserveCancel {
    /// Takes `cost` now, or says how long until it could. A denial takes nothing.
    fn reserve_now(&self, cost: Self::Cost) -> Result<Self::Taken, Denied>;
    /// Takes `cost` now if it falls due within `ahead`, and says how long until it is due (on
    /// the reading its compare-exchange landed on); otherwise says how long until the same call
    /// would succeed. A denial takes nothing. The async wait's take, where the timer may wake
    /// up to `ahead` late: taken early, the tokens are due at their instant however late the
    /// caller acts, so the schedule loses nothing to the timer. Only the async wait takes
    /// ahead; a build without it has no caller.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
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

/// A gate whose take completes when a server answers: `RedisBucket`. Its line cannot hold a
/// lock across the take, so it keeps its own (`redis::line`), but the guard and the jitter are
/// the same.
#[cfg(feature = "redis")]
pub(crate) trait ReserveLater: ReserveCancel {
    /// Why a take failed: denied, or the server's fault.
    type Error;
    /// Takes `cost` when the answer comes, or says why not. A denial takes nothing.
    async fn reserve_later(&self, cost: Self::Cost) -> Result<Self::Taken, Self::Error>;
}

impl<C: Clock, W: Word> ReserveCancel for TokenBucket<C, W> {
    type Cost = u32;
    type Taken = Reservation;
    fn cancel(&self, taken: Reservation) {
        self.refund(taken);
    }
}

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

impl<C: Clock, const N: usize, W: Word> ReserveCancel for Limits<'_, C, N, W> {
    type Cost = [u32; N];
    type Taken = LimitsReservation<N>;
    fn cancel(&self, mut taken: LimitsReservation<N>) {
        self.refund_parts(&mut taken.parts);
    }
}

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

/// Holds what a wait took while the caller is not yet acting on it, and gives it back if the
/// guard is dropped first: the one cancel rule of every wait.
pub(crate) struct CancelOnDrop<'g, G: ReserveCancel> {
    gate: &'g G,
    taken: Option<G::Taken>,
}

impl<'g, G: ReserveCancel> CancelOnDrop<'g, G> {
    pub(crate) fn new(gate: &'g G, taken: G::Taken) -> Self {
        CancelOnDrop {
            gate,
            taken: Some(taken),
        }
    }

    /// The caller acts: the tokens are spent.
    pub(crate) fn keep(mut self) {
        drop(self.taken.take());
    }
}

impl<G: ReserveCancel> Drop for CancelOnDrop<'_, G> {
    fn drop(&mut self) {
        if let Some(taken) = self.taken.take() {
            self.gate.cancel(taken);
        }
    }
}

/// The jitter after a wait that slept `waited`: none for a caller served at once, which has no
/// crowd to spread from.
pub(crate) fn jitter_after(jitter: &Jitter, waited: Duration) -> Duration {
    if waited.is_zero() {
        Duration::ZERO
    } else {
        jitter.next()
    }
}

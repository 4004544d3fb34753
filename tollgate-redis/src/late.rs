//! Answers that arrive after their caller gave up: what the call took is given back.
//!
//! A deadline in Redis time stops a call that Redis runs late (queued behind a stall), but not
//! one that ran at once and whose answer is slow to come back: no deadline can know the return
//! path's delay. So each call is sent from a task of its own that outlives its caller. If the
//! caller is gone when the answer arrives (it timed out, or its future was dropped) and the
//! answer says tokens were taken, the task gives them back by the script's refund rule: all of
//! them, less what the burst cap would have cut since (so that a bucket never ends fuller than
//! if the call had never run), and nothing while a later reservation holds the bucket in debt,
//! nor into a new incarnation of the key. What the refund cannot give back stays taken: fewer
//! grants, never more.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::vec::Vec;

use ::redis::Cmd;
use tokio::sync::oneshot;

use super::connection::{Answer, Shared};
use super::layout::Layout;

/// How much longer than the caller a call's task waits for its answer: past this the tokens
/// stay taken, and the task's hold on the connection ends.
const PATIENCE: u32 = 10;

/// What a call took if its answer says it was granted: given back if its caller is gone.
#[derive(Clone)]
pub(super) struct Taken {
    /// The bucket's Redis key.
    pub(super) key: Vec<u8>,
    pub(super) layout: Layout,
    /// Units the call takes if granted; 0 for a call that takes nothing (a peek, a give-back).
    pub(super) cost: u64,
}

/// The fallback's owed units a call carried to Redis, and the counter they were taken from.
/// Once its caller gave up, the call's task owns them: owed again unless the script ran.
pub(super) struct Charge(pub(super) Option<(Arc<AtomicU64>, u64)>);

impl Charge {
    /// Owes the units again: the script did not run, or may not have.
    pub(super) fn owe_again(self) {
        if let Some((owed, units)) = self.0 {
            // Relaxed: a counter, drained by the next call that reaches Redis.
            owed.fetch_add(units, Ordering::Relaxed);
        }
    }
}

/// Hands `result` to the caller (`true`), or, if the caller is gone, gives back what the
/// answered calls took (`false`).
pub(super) async fn deliver<T>(
    shared: &Shared,
    to: oneshot::Sender<T>,
    result: T,
    taken: impl IntoIterator<Item = (Taken, Answer)>,
) -> bool {
    if to.send(result).is_ok() {
        return true;
    }
    let refunds: Vec<Cmd> = taken
        .into_iter()
        .filter_map(|(taken, answer)| taken.settle(shared, answer))
        .collect();
    if refunds.is_empty() {
        return false;
    }
    let (_, mut link) = shared.manager();
    let mut pipe = ::redis::pipe();
    pipe.ignore_errors();
    for refund in refunds {
        pipe.add_command(refund);
    }
    // A refund Redis cannot run leaves the tokens taken: fewer grants, never more.
    let _ = pipe.query_async::<::redis::Value>(&mut link).await;
    false
}

/// How long a call's task waits for its answer: `PATIENCE` times the caller's timeout, or on a
/// cluster the timeout alone. A cluster's client keeps retrying a call to a master that died
/// (reconnecting, re-reading its map of slots), and calls held in flight past their caller
/// hold up its calls to every other master; there a call dropped at its timeout keeps what it
/// took if it ran (fewer grants, never more), as before.
pub(super) fn patience(shared: &Shared, timeout: core::time::Duration) -> core::time::Duration {
    if shared.is_cluster() {
        timeout
    } else {
        timeout.saturating_mul(PATIENCE)
    }
}

impl Taken {
    /// The refund of what `answer` says was taken, if anything.
    fn settle(self, shared: &Shared, answer: Answer) -> Option<Cmd> {
        let (status, debt_us, debt_frac, now_us, epoch) = answer;
        // Denied, or run past its deadline (did nothing): nothing to give back.
        if status != 1 || self.cost == 0 {
            return None;
        }
        let l = &self.layout;
        let pair = |units: u128| {
            let (us, frac) = l.pair(units);
            (us as u64, frac)
        };
        let ceiling = pair(l.ceiling_units as u128);
        let max_debt = pair(l.max_debt_units);
        let cost = pair(self.cost as u128);
        let mut refund = shared.script_call(&self.key);
        refund
            .arg("refund")
            .arg(l.units_per_us)
            .arg(ceiling.0)
            .arg(ceiling.1)
            .arg(ceiling.0) // an absent key: nothing to give back into
            .arg(ceiling.1)
            .arg(max_debt.0)
            .arg(max_debt.1)
            .arg("") // no deadline: the rule gives back only what is still owed
            .arg("") // Redis `TIME`
            .arg(0) // nothing charged
            .arg(0)
            .arg(cost.0)
            .arg(cost.1)
            .arg(now_us + debt_us) // the instant the take was due
            .arg(debt_frac)
            .arg(epoch);
        Some(refund)
    }
}

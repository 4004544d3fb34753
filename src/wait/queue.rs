//! The waiters' queue: callers wait in arrival order, and only the head of the line takes its
//! tokens, when they fall due, through the bucket's own try path.
//!
//! Nothing is taken before it is due, so a waiter that gives up (a dropped future, a timeout, a
//! thread whose deadline passed) leaves the bucket as if it had never queued, whatever waits
//! behind it: it leaves the line, and if it was the head, the next waiter becomes the head. No
//! reservation is left for anybody to give back, so under overload with callers that give up,
//! the bucket keeps granting at its rate.
//!
//! The queue lives outside the bucket, whose whole state stays one word: a process-wide
//! registry of [`SHARDS`] locks, each over the lines of the buckets whose address falls in it.
//! A line is made for a bucket's first waiter and removed with its last; waiters borrow their
//! buckets, so a bucket cannot be dropped (and its address reused) while anyone waits on it. A
//! lock is held only to join, leave, or take as the head — a compare-exchange on the word —
//! never across a wait.
//!
//! Each waiter sleeps until its *estimate*: when the bucket will hold the tokens of everyone
//! ahead and its own. Without give-ups the estimate is exact, so a waiter wakes once, finds
//! itself at the head with its tokens due, and takes them. When the head leaves (served or
//! given up), it wakes the new head if that one's timer would fire later than its tokens fall
//! due (someone ahead gave up), or if it has no timer (its estimate passed before its turn came).
//! A waiter on several buckets ([`Limits`](crate::Limits)) has a place in each of their lines,
//! joined under all their locks at once (taken in shard order, so none deadlocks and every line
//! agrees on who came first), and takes from all or none when it heads every one of them.
//!
//! A waiter leaves its lines when it is dropped. One that is leaked instead (`mem::forget` on a
//! wait's future) never leaves: like a forgotten lock guard, it holds up the waiters behind it
//! on that bucket for good, while `try_acquire` and `reserve` go on working.

use core::task::Waker;
use core::time::Duration;
use std::collections::VecDeque;
use std::vec::Vec;

use super::ReserveNow;
use crate::clock::{duration_to_ticks_ceil, duration_to_ticks_floor, ticks_to_duration_ceil};
use crate::engine::sync::{AtomicU32, Mutex, MutexGuard, Ordering};
use crate::{Clock, Denied, TokenBucket, Word};

/// What the waiters' line needs from a bucket: what a request costs in its units, its clock,
/// and how long until it would hold a number of units. Implemented by the buckets that have a
/// line: [`TokenBucket`] and `AdjustableBucket`.
pub(crate) trait Lined {
    /// The bucket's clock.
    type Clock: Clock;
    /// `n` tokens in the bucket's units, or [`Denied::ExceedsCapacity`].
    fn units_for(&self, n: u32) -> Result<u64, Denied>;
    /// The bucket's clock now.
    fn now_ticks(&self) -> u64;
    /// Ticks from `now_ticks` until the bucket holds `units` (which may exceed the burst: the
    /// line takes tokens as they accrue, so the cap never applies). Takes nothing.
    fn ticks_until_holding(&self, now_ticks: u64, units: u64) -> u64;
    /// Ticks the burst beyond `units` takes to accrue at `now_ticks`: how late a take of
    /// `units` may come without losing time to the burst's cap. Only the async driver's timer
    /// wakes late; a build without it has no caller.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    fn slack_ticks(&self, now_ticks: u64, units: u64) -> u64;
    /// Which line the bucket's waiters share: the bucket's address, unless its bucket moves
    /// (a keyed limiter's entry, in a table that rehashes), where it is an address that stays
    /// put while anyone waits and that no other bucket has meanwhile.
    #[inline(always)]
    fn line_key(&self) -> usize {
        self as *const Self as *const u8 as usize
    }
}

/// How many locks the registry spreads the lines over.
#[cfg(not(loom))]
pub(crate) const SHARDS: usize = 64;
/// One under loom: which shard a bucket falls in depends on its address, which differs from one
/// execution of a model to the next, and loom needs every execution to take the same locks.
#[cfg(loom)]
pub(crate) const SHARDS: usize = 1;

/// One waiter's place in one bucket's line.
#[derive(Debug)]
struct Entry {
    /// Increasing along the line: the line is sorted by it.
    id: u64,
    /// What the waiter will take from this bucket, in the bucket's units.
    units: u64,
    /// Given up, not yet swept from the line (only the front is swept).
    gone: bool,
    waker: Option<Waker>,
    /// The clock tick at which the waiter's own timer fires, if it has one.
    timer_at: Option<u64>,
    /// Took ahead of its tokens' instant and sleeps to it: no longer waits for tokens, but
    /// holds its place until it returns, so that nobody behind it returns first.
    holding: bool,
    /// A holder back from its sleep, waiting for the holders ahead of it to return.
    releasing: bool,
    /// A holder's tokens' instant, on the bucket's clock.
    due_at: u64,
    /// The waiter has places in other lines too (a wait on several buckets): freed here, it
    /// may still be held up there, so it leaves every line itself once free in all of them.
    spans: bool,
}

/// The waiters of one bucket, first come first.
///
/// Its front is always a live waiter that may not yet return: a waiter that gives up is swept
/// once it reaches the front, and a holder freed to return is taken out there and then (its
/// waiter finds its place gone), unless it has places in other lines: it is woken, and leaves
/// all its lines itself once free in each. Holders come before every waiter still waiting for
/// tokens, since only the first of those takes.
#[derive(Debug)]
struct Line {
    /// The bucket's address.
    key: usize,
    entries: VecDeque<Entry>,
    next_id: u64,
    /// Units of tokens that the waiters still in the line will take.
    queued_units: u64,
    /// Waiters in the line still waiting for tokens (not holders, not given up).
    waiting: usize,
}

impl Line {
    /// A line whose places are numbered from `first_id`: never a number a waiter of an earlier
    /// line of the same bucket may still hold.
    fn new(key: usize, first_id: u64) -> Self {
        Line {
            key,
            entries: VecDeque::new(),
            next_id: first_id,
            queued_units: 0,
            waiting: 0,
        }
    }

    /// The waiter that takes next: the first one still waiting for tokens.
    fn head(&self) -> Option<&Entry> {
        if self.waiting == 0 {
            return None;
        }
        self.entries.iter().find(|e| !e.gone && !e.holding)
    }

    fn head_mut(&mut self) -> Option<&mut Entry> {
        if self.waiting == 0 {
            return None;
        }
        self.entries.iter_mut().find(|e| !e.gone && !e.holding)
    }

    /// Whether the waiter `id` may return: nobody is ahead of it (or it was freed already).
    fn free_to_return(&self, id: u64) -> bool {
        self.entries.front().map_or(true, |front| front.id >= id)
    }

    /// Wakes the holder at the front if it is ahead of `id` and still asleep past its tokens'
    /// instant (`now` or before), so that it returns at once rather than when its timer wakes
    /// it late, and those behind it are not held up by the timer's lateness.
    fn wake_late(&mut self, id: u64, now: u64, wake: &mut Vec<Waker>) {
        if let Some(front) = self.entries.front_mut() {
            let late = (now.wrapping_sub(front.due_at) as i64) >= 0;
            if front.id < id && front.holding && !front.releasing && late {
                wake.extend(front.waker.take());
            }
        }
    }

    /// Frees the holders at the front back from their sleep, in line order, taking them out
    /// and collecting their wakers; then wakes the new front if it is a holder asleep past its
    /// instant. A holder with places in other lines is woken but stays at the front: it may
    /// still be held up in another line, and nobody behind it here returns before it.
    fn free_returns(&mut self, now: u64, wake: &mut Vec<Waker>) {
        while let Some(front) = self.entries.front_mut() {
            if !(front.holding && front.releasing) {
                break;
            }
            wake.extend(front.waker.take());
            if front.spans {
                break;
            }
            self.entries.pop_front();
            self.sweep();
        }
        self.wake_late(u64::MAX, now, wake);
    }

    /// Takes the given-up waiters off the front.
    fn sweep(&mut self) {
        while self.entries.front().is_some_and(|e| e.gone) {
            self.entries.pop_front();
        }
    }

    fn find(&mut self, id: u64) -> Option<&mut Entry> {
        let at = self.entries.binary_search_by_key(&id, |e| e.id).ok()?;
        self.entries.get_mut(at)
    }

    /// Takes `id` out of the line. Returns whether it was the head, the waiter taking next.
    fn leave(&mut self, id: u64) -> bool {
        let was_head = self.head().is_some_and(|e| e.id == id);
        if let Some(entry) = self.find(id) {
            if !entry.gone {
                entry.gone = true;
                entry.waker = None;
                let (units, holding) = (entry.units, entry.holding);
                self.queued_units = self.queued_units.saturating_sub(units);
                if !holding {
                    self.waiting = self.waiting.saturating_sub(1);
                }
            }
        }
        self.sweep();
        was_head
    }
}

/// The lines of the buckets whose address falls in one shard, and the first place number a
/// new line takes: above every number a closed line gave out, so that a waiter whose place
/// was taken out of a line never finds another's under its number.
struct Shard {
    lines: Vec<Line>,
    next_id: u64,
}

impl Shard {
    const fn new() -> Self {
        Shard {
            lines: Vec::new(),
            next_id: 0,
        }
    }
}

/// Every bucket's line, spread over [`SHARDS`] locks.
struct Registry {
    shards: [Mutex<Shard>; SHARDS],
    counts: Counts,
}

/// How many lines there are, read without a lock by every wait that can take at once: a zero
/// says that nobody waits, and the wait takes at once. Written only as a line opens or closes,
/// under its shard's lock, and on cache lines of their own, apart from the locks.
#[repr(C, align(64))]
struct Counts {
    /// Every shard's lines: zero while nobody waits on any bucket, so that a wait can take at
    /// once after one load of a fixed address (no bucket's shard to work out).
    all: AtomicU32,
    /// Each shard's lines: zero while nobody waits on any bucket of the shard.
    lines: [AtomicU32; SHARDS],
}

#[cfg(not(loom))]
static REGISTRY: Registry = Registry {
    shards: [const { Mutex::new(Shard::new()) }; SHARDS],
    counts: Counts {
        all: AtomicU32::new(0),
        lines: [const { AtomicU32::new(0) }; SHARDS],
    },
};

#[cfg(not(loom))]
fn registry() -> &'static Registry {
    &REGISTRY
}

#[cfg(loom)]
crate::engine::sync::lazy_static! {
    static ref REGISTRY: Registry = Registry {
        shards: core::array::from_fn(|_| Mutex::new(Shard::new())),
        counts: Counts {
            all: AtomicU32::new(0),
            lines: core::array::from_fn(|_| AtomicU32::new(0)),
        },
    };
}

#[cfg(loom)]
fn registry() -> &'static Registry {
    &REGISTRY
}

#[cfg(not(loom))]
fn shard_of(key: usize) -> usize {
    // Buckets are at least word-aligned and often larger: mix the address before taking bits.
    let mixed = (key as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (mixed >> 58) as usize % SHARDS
}

#[cfg(loom)]
fn shard_of(_key: usize) -> usize {
    0
}

/// The locks of a waiter's shards, taken in shard order. Wakers handed to it are woken after
/// the locks are released, so that no waker runs under a line's lock.
struct Locked<const N: usize> {
    /// `(shard, guard)`, one per distinct shard.
    guards: [Option<(usize, MutexGuard<'static, Shard>)>; N],
    wake: Vec<Waker>,
}

impl<const N: usize> Drop for Locked<N> {
    fn drop(&mut self) {
        for guard in &mut self.guards {
            drop(guard.take());
        }
        for waker in self.wake.drain(..) {
            waker.wake();
        }
    }
}

impl<const N: usize> Locked<N> {
    fn lock(keys: &[usize; N]) -> Self {
        let mut shards: [usize; N] = core::array::from_fn(|i| shard_of(keys[i]));
        shards.sort_unstable();
        let mut guards: [Option<(usize, MutexGuard<'static, Shard>)>; N] =
            core::array::from_fn(|_| None);
        let mut last = None;
        for (slot, shard) in guards.iter_mut().zip(shards) {
            if last == Some(shard) {
                continue;
            }
            last = Some(shard);
            // A panic never happens under the lock (nothing there can panic), but if one did,
            // the lines are still whole: carry on with them.
            let guard = match registry().shards[shard].lock() {
                Ok(guard) => guard,
                Err(poisoned) => poisoned.into_inner(),
            };
            *slot = Some((shard, guard));
        }
        Locked {
            guards,
            wake: Vec::new(),
        }
    }

    fn shard(&mut self, key: usize) -> Option<&mut Shard> {
        let shard = shard_of(key);
        self.guards
            .iter_mut()
            .flatten()
            .find(|(s, _)| *s == shard)
            .map(|(_, guard)| &mut **guard)
    }

    fn line(&mut self, key: usize) -> Option<&mut Line> {
        self.shard(key)?
            .lines
            .iter_mut()
            .find(|line| line.key == key)
    }

    fn line_or_new(&mut self, key: usize) -> Option<&mut Line> {
        let shard = self.shard(key)?;
        let at = match shard.lines.iter().position(|line| line.key == key) {
            Some(at) => at,
            None => {
                shard.lines.push(Line::new(key, shard.next_id));
                opened(key, shard.lines.len());
                shard.lines.len() - 1
            }
        };
        shard.lines.get_mut(at)
    }

    fn drop_if_empty(&mut self, key: usize) {
        if let Some(shard) = self.shard(key) {
            if let Some(at) = shard
                .lines
                .iter()
                .position(|line| line.key == key && line.entries.is_empty())
            {
                let line = shard.lines.swap_remove(at);
                shard.next_id = shard.next_id.max(line.next_id);
                closed(key, shard.lines.len());
            }
        }
    }
}

/// Publishes a line opened for `key`, whose shard now holds `lines`, under the shard's lock.
/// Relaxed: the counts are a hint for [`at_once`], which orders nothing by them (a waiter
/// joining as a wait reads a zero is overtaken once, as by a `try_acquire`).
fn opened(key: usize, lines: usize) {
    let counts = &registry().counts;
    counts.all.fetch_add(1, Ordering::Relaxed);
    counts.lines[shard_of(key)].store(saturated(lines), Ordering::Relaxed);
}

/// Publishes a line closed for `key`, whose shard now holds `lines`, under the shard's lock.
fn closed(key: usize, lines: usize) {
    let counts = &registry().counts;
    counts.lines[shard_of(key)].store(saturated(lines), Ordering::Relaxed);
    counts.all.fetch_sub(1, Ordering::Relaxed);
}

/// `lines` as a count, at most `u32::MAX` (more than a line per bucket a process can hold, on
/// a 32-bit host).
fn saturated(lines: usize) -> u32 {
    u32::try_from(lines).unwrap_or(u32::MAX)
}

/// The wait's fast path: when nobody waits on any of `buckets` (nor on a bucket sharing their
/// shards), `take` at once, without a lock, a line or a timer. `None` when the wait must join
/// the line: someone waits, or the tokens are not there yet.
#[inline(always)]
pub(crate) fn at_once<B: Lined, const N: usize>(
    buckets: [&B; N],
    take: impl FnOnce() -> Result<(), Denied>,
) -> Option<Result<(), Denied>> {
    if !nobody_waits(buckets) {
        return None;
    }
    settled(take())
}

/// What a take at once settles: a grant or a refusal, or `None` for tokens not there yet (the
/// wait then joins the line).
#[inline(always)]
fn settled(taken: Result<(), Denied>) -> Option<Result<(), Denied>> {
    match taken {
        Err(Denied::Insufficient { .. }) => None,
        settled => Some(settled),
    }
}

/// Whether nobody waits on any of `buckets`, nor on a bucket sharing their shards.
#[inline(always)]
fn nobody_waits<B: Lined, const N: usize>(buckets: [&B; N]) -> bool {
    let counts = &registry().counts;
    counts.all.load(Ordering::Relaxed) == 0
        || buckets
            .iter()
            .all(|&bucket| counts.lines[shard_of(key_of(bucket))].load(Ordering::Relaxed) == 0)
}

/// The start of one bucket's wait for `n` tokens, shared by the blocking and the async one:
/// `Some` when it is over already (`n = 0`, taken at once with nobody in line, or refused),
/// `None` when the caller must line up ([`Waiter::new`]). Small on purpose: a result holding
/// the waiter would be copied whole on the path that takes at once, a stall there of about a
/// quarter of its cost.
#[inline(always)]
pub(crate) fn settled_at_once<B: Lined + ReserveNow<Cost = u32>>(
    bucket: &B,
    n: u32,
) -> Option<Result<(), Denied>> {
    if n == 0 {
        return Some(Ok(()));
    }
    // `at_once`'s steps, not a call of it: its `take`, a closure, was left a call in some
    // callers.
    if !nobody_waits([bucket]) {
        return None;
    }
    settled(bucket.take_at_once(n))
}

/// What a take holds: whether it took ahead of its tokens' instant, so that its caller sleeps
/// to that instant holding it. Its waiter then holds its place in line until the caller
/// returns ([`Waiter::try_release`]), so that nobody behind it, and no newcomer, returns first.
pub(crate) trait Held {
    /// How long until the take's tokens fall due.
    fn due_in(&self) -> Duration;
}

impl Held for () {
    fn due_in(&self) -> Duration {
        Duration::ZERO
    }
}

impl<T> Held for (T, Duration) {
    fn due_in(&self) -> Duration {
        self.1
    }
}

impl Held for crate::Reservation {
    fn due_in(&self) -> Duration {
        self.wait()
    }
}

/// What a waiter does next.
pub(crate) enum Step<T> {
    /// Served (with what it took and the time it waited) or refused: the wait is over.
    Done(Result<(T, Duration), Denied>),
    /// Sleep until woken, or look again at this instant at the latest.
    Sleep(Option<Look>),
}

/// The instant, on the bucket's clock, a waiter looks again at the latest, and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Look {
    /// It heads the line and its tokens fall due then: it takes at that instant.
    Due(u64),
    /// Its estimated turn, behind others.
    Turn(u64),
    /// It gives up then.
    Deadline(u64),
}

impl Look {
    /// The instant, in the bucket's ticks.
    pub(crate) fn at(self) -> u64 {
        match self {
            Look::Due(at) | Look::Turn(at) | Look::Deadline(at) => at,
        }
    }
}

/// What a driver does about a [`Look`], from a reading of the clock taken after the step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Plan {
    /// The instant has passed: look again now, without sleeping.
    Again,
    /// Sleep this many ticks, then look again.
    Sleep(u64),
}

/// The plan for `look` at `now`, for a driver whose timer may wake up to `early_ticks` late
/// (its granularity) and whose head takes up to `early_ticks` ahead of its tokens' instant
/// (see [`Waiter::early`]): a turn's timer is set `early_ticks` ahead, so that it wakes in time
/// to take ahead. A due take's instant is already the earliest it can take, and a deadline is
/// exact: both are slept to.
pub(crate) fn plan(look: Look, now: u64, early_ticks: u64) -> Plan {
    let left = look.at().wrapping_sub(now) as i64;
    if left <= 0 {
        return Plan::Again;
    }
    let left = left as u64;
    match look {
        Look::Turn(_) if left > early_ticks => Plan::Sleep(left - early_ticks),
        _ => Plan::Sleep(left),
    }
}

/// A caller waiting for `costs[i]` tokens from `buckets[i]`, from all or none. Dropping it
/// leaves the lines as if it had never joined them.
pub(crate) struct Waiter<'a, B: Lined, const N: usize> {
    buckets: [&'a B; N],
    keys: [usize; N],
    units: [u64; N],
    /// Its place in each line, once it has joined them.
    ids: Option<[u64; N]>,
    start_ticks: u64,
    /// When it gives up, on the first bucket's clock.
    deadline_ticks: Option<u64>,
    timer_at: Option<u64>,
    /// Whether it heads every line it is in, as of its last look.
    heading: bool,
    /// How early its driver's timer wakes it (see [`plan`]): a turn estimated closer than
    /// this is left to the head before it to wake, rather than to the timer.
    early_ticks: u64,
    /// A take held ahead no longer than this keeps no place in line (see [`spun`](Self::spun)).
    spun: Duration,
}

impl<'a, B: Lined, const N: usize> Waiter<'a, B, N> {
    /// A waiter for `costs[i]` from `buckets[i]` that gives up after `timeout` (never if
    /// `None`). A cost above a bucket's burst fails here, at once.
    pub(crate) fn new(
        buckets: [&'a B; N],
        costs: [u32; N],
        timeout: Option<Duration>,
    ) -> Result<Self, Denied> {
        let mut units = [0u64; N];
        for (i, (bucket, &n)) in buckets.iter().zip(&costs).enumerate() {
            units[i] = if n == 0 { 0 } else { bucket.units_for(n)? };
        }
        let start_ticks = buckets.first().map_or(0, |b| b.now_ticks());
        // A timeout beyond half the clock's range is longer than any wait the word can hold
        // (and would read as past in the signed comparisons): no deadline.
        let deadline_ticks = timeout
            .map(duration_to_ticks_floor::<B::Clock>)
            .filter(|&ticks| ticks < 1 << 62)
            .map(|ticks| start_ticks.wrapping_add(ticks));
        Ok(Waiter {
            keys: core::array::from_fn(|i| key_of(buckets[i])),
            buckets,
            units,
            ids: None,
            start_ticks,
            deadline_ticks,
            timer_at: None,
            heading: false,
            early_ticks: 0,
            spun: Duration::ZERO,
        })
    }

    /// For a driver whose timer may wake `ticks` late (see [`plan`]), where a late take would
    /// lose time to a burst's cap: a burst with room for `ticks` of lateness beyond this
    /// waiter's tokens keeps what accrues meanwhile, and its waiters take when woken; with
    /// less room, the head takes up to `ticks` ahead of its tokens' instant (the driver's take
    /// reserves them, and its caller sleeps to the instant holding them), so that a late timer
    /// delays the caller, never the bucket's schedule.
    pub(crate) fn early(mut self, ticks: u64) -> Self {
        let now = self.now();
        let holds = (0..N).all(|i| self.buckets[i].slack_ticks(now, self.units[i]) >= ticks);
        self.early_ticks = if holds { 0 } else { ticks };
        self
    }

    /// For a driver that spins through a take held ahead no longer than `spun`, rather than
    /// sleeping on a timer that may wake it late: such a take keeps no place in line, since
    /// its caller is back at the tokens' instant, before anyone behind it can be.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn spun(mut self, spun: Duration) -> Self {
        self.spun = spun;
        self
    }

    /// How early its driver's timer wakes it: see [`early`](Self::early).
    pub(crate) fn early_ticks(&self) -> u64 {
        self.early_ticks
    }

    /// The first bucket's clock now.
    pub(crate) fn now(&self) -> u64 {
        self.buckets.first().map_or(0, |b| b.now_ticks())
    }

    /// One look at the line, under its locks: take if this waiter heads every line and its
    /// tokens are due; otherwise say how long to sleep. `take(ahead)` is the all-or-none try
    /// path, which may take up to `ahead` before the tokens' instant (zero unless the driver
    /// asked for [`early`](Self::early), and never past the deadline), and otherwise says how
    /// long until it could; `waker` is what the head that leaves before it wakes.
    ///
    /// Served, the waiter still holds its place if it took ahead of its tokens' instant or a
    /// holder ahead of it has not yet returned: its caller then returns only once
    /// [`try_release`](Self::try_release) says so.
    pub(crate) fn step<T: Held>(
        &mut self,
        waker: &Waker,
        take: impl FnOnce(Duration) -> Result<T, Denied>,
    ) -> Step<T> {
        let mut locked = Locked::lock(&self.keys);
        let now = self.now();
        // A take ahead never reaches past the deadline: the tokens it takes fall due by then.
        let ahead = self
            .early_ticks
            .min(self.time_left(now).unwrap_or(u64::MAX));
        let take = || take(ticks_to_duration_floor::<B::Clock>(ahead));
        let Some(ids) = self.ids else {
            return self.join(&mut locked, now, ahead, waker, take);
        };
        let heads_all =
            self.keys.iter().zip(&ids).all(|(&key, &id)| {
                locked.line(key).and_then(|l| l.head()).map(|e| e.id) == Some(id)
            });
        self.heading = heads_all;
        if heads_all {
            match take() {
                Ok(taken) => {
                    let behind =
                        !self.keys.iter().zip(&ids).all(|(&key, &id)| {
                            locked.line(key).map_or(true, |l| l.free_to_return(id))
                        });
                    if taken.due_in() > self.spun || behind {
                        self.hold(&mut locked, &ids, now, taken.due_in());
                    } else {
                        self.leave(&mut locked, now);
                    }
                    return Step::Done(Ok((taken, self.waited(now))));
                }
                Err(Denied::Insufficient { retry_after }) => {
                    // The take may come `ahead` before the instant: that instant is the
                    // deadline's measure.
                    let retry = duration_to_ticks_ceil::<B::Clock>(retry_after.get());
                    if let Some(left) = self.time_left(now) {
                        if retry.saturating_add(ahead) > left {
                            self.leave(&mut locked, now);
                            return Step::Done(Err(Denied::insufficient(
                                ticks_to_duration_ceil::<B::Clock>(
                                    retry.saturating_add(ahead) - left,
                                ),
                            )));
                        }
                    }
                    self.timer_at = Some(now.wrapping_add(retry));
                }
                Err(never) => {
                    self.leave(&mut locked, now);
                    return Step::Done(Err(never));
                }
            }
        } else {
            if self.time_left(now) == Some(0) {
                let retry_after = self.estimate_ahead(&mut locked, now, &ids);
                self.leave(&mut locked, now);
                return Step::Done(Err(Denied::insufficient(retry_after)));
            }
            // Its estimate passed before its turn came, or comes sooner than its timer can
            // wake it: the head that leaves wakes it.
            if self
                .timer_at
                .is_some_and(|at| (at.wrapping_sub(now) as i64) <= self.early_ticks as i64)
            {
                self.timer_at = None;
            }
        }
        self.record(&mut locked, &ids, waker);
        Step::Sleep(self.next_look(now))
    }

    /// The first look: straight to the try path when nobody waits, else to the back of the
    /// lines.
    fn join<T: Held>(
        &mut self,
        locked: &mut Locked<N>,
        now: u64,
        ahead: u64,
        waker: &Waker,
        take: impl FnOnce() -> Result<T, Denied>,
    ) -> Step<T> {
        // Nobody waits for tokens; holders (back from their takes, not yet returned) may.
        let nobody_waits = self
            .keys
            .iter()
            .all(|&key| locked.line(key).map_or(true, |l| l.head().is_none()));
        // The instant its tokens fall due, and (for a take ahead) the one it can take them.
        let (wait, due) = if nobody_waits {
            match take() {
                Ok(taken) => {
                    let holders = self
                        .keys
                        .iter()
                        .any(|&key| locked.line(key).is_some_and(|l| !l.entries.is_empty()));
                    // Taken ahead, or behind holders: it holds a place until it may return.
                    if taken.due_in() > self.spun || holders {
                        let ids = self.enter(locked, None, waker);
                        self.hold(locked, &ids, now, taken.due_in());
                    }
                    return Step::Done(Ok((taken, Duration::ZERO)));
                }
                Err(Denied::Insufficient { retry_after }) => {
                    let retry = duration_to_ticks_ceil::<B::Clock>(retry_after.get());
                    (retry, retry.saturating_add(ahead))
                }
                Err(never) => return Step::Done(Err(never)),
            }
        } else {
            // When each bucket holds the tokens of everyone in its line and this waiter's.
            let mut wait = 0;
            for i in 0..N {
                let queued = locked.line(self.keys[i]).map_or(0, |l| l.queued_units);
                let bucket = self.buckets[i];
                wait =
                    wait.max(bucket.ticks_until_holding(now, queued.saturating_add(self.units[i])));
            }
            (wait, wait)
        };
        if let Some(left) = self.time_left(now) {
            if due > left {
                return Step::Done(Err(Denied::insufficient(
                    ticks_to_duration_ceil::<B::Clock>(due - left),
                )));
            }
        }
        self.heading = nobody_waits;
        // Behind others, a turn closer than the timer can wake to is left to the head before.
        self.timer_at = (nobody_waits || wait > self.early_ticks).then(|| now.wrapping_add(wait));
        self.enter(locked, self.timer_at, waker);
        Step::Sleep(self.next_look(now))
    }

    /// Joins the back of every line, its own timer firing at `timer_at`; returns its places.
    fn enter(&mut self, locked: &mut Locked<N>, timer_at: Option<u64>, waker: &Waker) -> [u64; N] {
        let mut ids = [0u64; N];
        let spans = self.keys.iter().any(|&key| key != self.keys[0]);
        for i in 0..N {
            let (key, units) = (self.keys[i], self.units[i]);
            let Some(line) = locked.line_or_new(key) else {
                continue;
            };
            line.queued_units = line.queued_units.saturating_add(units);
            // A bucket named twice has one place in its line, for both costs.
            if let Some(j) = self.keys[..i].iter().position(|&k| k == key) {
                ids[i] = ids[j];
                if let Some(entry) = line.find(ids[j]) {
                    entry.units = entry.units.saturating_add(units);
                }
                continue;
            }
            ids[i] = line.next_id;
            line.next_id += 1;
            line.waiting += 1;
            line.entries.push_back(Entry {
                id: ids[i],
                units,
                gone: false,
                waker: Some(waker.clone()),
                timer_at,
                holding: false,
                releasing: false,
                due_at: 0,
                spans,
            });
        }
        self.ids = Some(ids);
        ids
    }

    /// Served, it holds its place in every line until it may return: its units are no longer
    /// queued (the bucket holds its take), and the waiter behind it, the new head, is handed
    /// the turn.
    fn hold(&mut self, locked: &mut Locked<N>, ids: &[u64; N], now: u64, due_in: Duration) {
        let due_at = now.wrapping_add(duration_to_ticks_ceil::<B::Clock>(due_in));
        let mut woken = Vec::new();
        for (i, (&key, &id)) in self.keys.iter().zip(ids).enumerate() {
            let Some(line) = locked.line(key) else {
                continue;
            };
            let (mut units, mut was_waiting) = (0, false);
            if let Some(entry) = line.find(id) {
                units = core::mem::take(&mut entry.units);
                was_waiting = !entry.holding && !entry.gone;
                entry.timer_at = None;
                entry.holding = true;
                entry.due_at = due_at;
            }
            line.queued_units = line.queued_units.saturating_sub(units);
            if was_waiting {
                line.waiting = line.waiting.saturating_sub(1);
            }
            woken.extend(hand_on(line, self.buckets[i], now));
            line.wake_late(id, now, &mut woken);
        }
        locked.wake.append(&mut woken);
        self.timer_at = None;
    }

    /// Whether the caller of a served wait may return: `true` once every holder ahead of it in
    /// each line has returned (it then leaves its lines, freeing the holders behind it that
    /// are back from their sleeps), at once for a waiter that holds no place. Otherwise
    /// `waker` is woken when it may.
    pub(crate) fn try_release(&mut self, waker: &Waker) -> bool {
        let Some(ids) = self.ids else {
            return true;
        };
        let mut locked = Locked::lock(&self.keys);
        let free = self
            .keys
            .iter()
            .zip(&ids)
            .all(|(&key, &id)| locked.line(key).map_or(true, |l| l.free_to_return(id)));
        let now = self.now();
        if free {
            self.leave(&mut locked, now);
            return true;
        }
        let mut woken = Vec::new();
        for (&key, &id) in self.keys.iter().zip(&ids) {
            let Some(line) = locked.line(key) else {
                continue;
            };
            line.wake_late(id, now, &mut woken);
            if let Some(entry) = line.find(id) {
                entry.releasing = true;
                match &entry.waker {
                    Some(known) if known.will_wake(waker) => {}
                    _ => entry.waker = Some(waker.clone()),
                }
            }
        }
        locked.wake.append(&mut woken);
        false
    }

    /// Keeps the lines' copy of this waiter's waker and timer up to date.
    fn record(&self, locked: &mut Locked<N>, ids: &[u64; N], waker: &Waker) {
        for (&key, &id) in self.keys.iter().zip(ids) {
            if let Some(entry) = locked.line(key).and_then(|l| l.find(id)) {
                entry.timer_at = self.timer_at;
                match &entry.waker {
                    Some(known) if known.will_wake(waker) => {}
                    _ => entry.waker = Some(waker.clone()),
                }
            }
        }
    }

    /// Leaves every line; where it was the head, hands the head on.
    fn leave(&mut self, locked: &mut Locked<N>, now: u64) {
        let Some(ids) = self.ids.take() else {
            return;
        };
        let mut woken = Vec::new();
        for (i, &id) in ids.iter().enumerate() {
            let key = self.keys[i];
            let Some(line) = locked.line(key) else {
                continue;
            };
            if line.leave(id) {
                woken.extend(hand_on(line, self.buckets[i], now));
            }
            line.free_returns(now, &mut woken);
            locked.drop_if_empty(key);
        }
        locked.wake.append(&mut woken);
    }

    /// How long until the tokens of everyone ahead and its own would be there.
    fn estimate_ahead(&self, locked: &mut Locked<N>, now: u64, ids: &[u64; N]) -> Duration {
        let mut wait = 0;
        for (i, &id) in ids.iter().enumerate() {
            let Some(line) = locked.line(self.keys[i]) else {
                continue;
            };
            let ahead: u64 = line
                .entries
                .iter()
                .take_while(|e| e.id < id)
                .filter(|e| !e.gone)
                .map(|e| e.units)
                .fold(0, u64::saturating_add);
            let bucket = self.buckets[i];
            wait = wait.max(bucket.ticks_until_holding(now, ahead.saturating_add(self.units[i])));
        }
        ticks_to_duration_ceil::<B::Clock>(wait)
    }

    /// Ticks left before the deadline: `None` without one.
    fn time_left(&self, now: u64) -> Option<u64> {
        let deadline = self.deadline_ticks?;
        Some((deadline.wrapping_sub(now) as i64).max(0) as u64)
    }

    /// Its timer or its deadline, whichever comes first; `None`: until woken.
    fn next_look(&self, now: u64) -> Option<Look> {
        let timer = self.timer_at.map(|at| {
            if self.heading {
                Look::Due(at)
            } else {
                Look::Turn(at)
            }
        });
        let deadline = self.deadline_ticks.map(Look::Deadline);
        let from_now = |look: &Look| look.at().wrapping_sub(now) as i64;
        match (timer, deadline) {
            (Some(a), Some(b)) => Some(if from_now(&b) < from_now(&a) { b } else { a }),
            (a, b) => a.or(b),
        }
    }

    fn waited(&self, now: u64) -> Duration {
        ticks_to_duration_ceil::<B::Clock>((now.wrapping_sub(self.start_ticks) as i64).max(0) as u64)
    }
}

impl<B: Lined, const N: usize> Drop for Waiter<'_, B, N> {
    fn drop(&mut self) {
        if self.ids.is_some() {
            let mut locked = Locked::lock(&self.keys);
            let now = self.now();
            self.leave(&mut locked, now);
        }
    }
}

/// The head left `line`: the new head's waker, unless its own timer fires in time for its
/// tokens.
fn hand_on<B: Lined>(line: &mut Line, bucket: &B, now: u64) -> Option<Waker> {
    let head = line.head_mut()?;
    let due = now.wrapping_add(bucket.ticks_until_holding(now, head.units));
    let timer_in_time = head
        .timer_at
        .is_some_and(|at| (at.wrapping_sub(now) as i64) > 0 && (due.wrapping_sub(at) as i64) >= 0);
    if timer_in_time {
        None
    } else {
        head.waker.take()
    }
}

/// Tokens went back to `bucket` outside its line (a take held ahead of its instant, dropped
/// with its `CancelOnDrop`): wakes the head of the line if its timer would fire later than its
/// tokens now fall due, as [`hand_on`] does when a head leaves, so that the head is served at
/// the turn the dropped take would have had. A wake only when someone gave up.
pub(crate) fn given_back<B: Lined>(bucket: &B) {
    if nobody_waits([bucket]) {
        return;
    }
    let key = key_of(bucket);
    let mut locked = Locked::<1>::lock(&[key]);
    let now = bucket.now_ticks();
    let waker = locked.line(key).and_then(|line| hand_on(line, bucket, now));
    // Woken when the lock is released.
    locked.wake.extend(waker);
}

/// The whole nanoseconds of `ticks`, rounded down: how far ahead a take may come, which must
/// not reach past what the ticks allow. Off the hot path (once per look of a lined waiter).
fn ticks_to_duration_floor<C: Clock>(ticks: u64) -> Duration {
    let per_second = u128::from(C::TICKS_PER_SECOND.max(1));
    let nanos = u128::from(ticks) * 1_000_000_000 / per_second;
    let secs = u64::try_from(nanos / 1_000_000_000).unwrap_or(u64::MAX);
    Duration::new(secs, (nanos % 1_000_000_000) as u32)
}

fn key_of<B: Lined>(bucket: &B) -> usize {
    bucket.line_key()
}

impl<C: Clock, W: Word> Lined for TokenBucket<C, W> {
    type Clock = C;
    fn units_for(&self, n: u32) -> Result<u64, Denied> {
        self.layout().cost(n)
    }
    fn now_ticks(&self) -> u64 {
        self.clock().now()
    }
    fn ticks_until_holding(&self, now_ticks: u64, units: u64) -> u64 {
        let p = self.layout();
        if p.is_unlimited() {
            return 0;
        }
        let now_units = p.units_at(now_ticks);
        let word = self.cell(&p).read(now_units);
        // Within the range `take` reads: beyond the debt bound a wait is decades anyway.
        let units = units.min(p.max_debt_units());
        match p.take(word, now_units, units, 0) {
            Ok(_) => 0,
            Err(short) => p.ticks_until(now_ticks, short),
        }
    }
    fn slack_ticks(&self, now_ticks: u64, units: u64) -> u64 {
        let p = self.layout();
        if p.is_unlimited() {
            return u64::MAX;
        }
        p.ticks_until(now_ticks, p.burst_units().saturating_sub(units))
    }
}

/// Loom models only: one waiter on one bucket, stepped by hand, and the length of a line.
#[cfg(loom)]
#[doc(hidden)]
pub mod models {
    use core::task::Waker;
    use core::time::Duration;

    use super::{key_of, Locked, Step, Waiter};
    use crate::{Clock, Denied, Limits, TokenBucket, Word};

    /// A waiter for `costs[i]` tokens from `buckets[i]`, all or none; dropping it gives up.
    pub struct ModelWaiter<'a, C: Clock, W: Word, const N: usize>(
        Waiter<'a, TokenBucket<C, W>, N>,
        [u32; N],
    );

    impl<'a, C: Clock, W: Word, const N: usize> ModelWaiter<'a, C, W, N> {
        /// A waiter for `costs[i]` tokens from `buckets[i]`, with no timeout.
        pub fn new(buckets: [&'a TokenBucket<C, W>; N], costs: [u32; N]) -> Result<Self, Denied> {
            Waiter::new(buckets, costs, None).map(|waiter| ModelWaiter(waiter, costs))
        }

        /// One look at the lines: `Some` when the wait is over (served or refused), `None` when
        /// it sleeps until `waker` is woken or its timer fires.
        pub fn step(&mut self, waker: &Waker) -> Option<Result<Duration, Denied>> {
            let limits = Limits::new(self.0.buckets);
            let costs = self.1;
            match self.0.step(waker, |_ahead| limits.try_acquire(costs)) {
                Step::Done(done) => Some(done.map(|((), waited)| waited)),
                Step::Sleep(_) => None,
            }
        }
    }

    /// Waiters in `bucket`'s line, given-up ones not yet swept included.
    pub fn line_len<C: Clock, W: Word>(bucket: &TokenBucket<C, W>) -> usize {
        let key = key_of(bucket);
        Locked::<1>::lock(&[key])
            .line(key)
            .map_or(0, |line| line.entries.len())
    }
}

/// Callers in `bucket`'s line, waiting or holding, given-up ones left out: for tests that
/// place a caller behind another in real time.
#[cfg(all(test, not(loom)))]
pub(crate) fn in_line<B: Lined>(bucket: &B) -> usize {
    let key = key_of(bucket);
    Locked::<1>::lock(&[key])
        .line(key)
        .map_or(0, |line| line.entries.iter().filter(|e| !e.gone).count())
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::{shard_of, SHARDS};

    /// Buckets laid out one after another, at the strides a bucket on the 64-bit word takes (a
    /// line, two with a stateful clock, more with a larger one), fall in as many shards as an
    /// even spread would give them, twice that at most: their waits take different locks and
    /// their takes at once read different counts. (A mix of shifts and an exclusive or, cheaper
    /// to compute on every take at once, put five times the even share in one shard at a
    /// stride of five lines.)
    #[test]
    fn neighbouring_buckets_fall_in_different_shards() {
        for stride in [64usize, 128, 192, 256, 320, 4_096, 8_192] {
            for base in [
                0x7f00_0000_0000usize,
                0x5555_5555_5000,
                0x1000_0040,
                0x7ffd_1234_5680,
            ] {
                for run in [SHARDS, 4 * SHARDS] {
                    let mut seen = [0usize; SHARDS];
                    for i in 0..run {
                        seen[shard_of(base + i * stride)] += 1;
                    }
                    let most = *seen.iter().max().unwrap();
                    // An even spread puts `run / SHARDS` in each; allow twice that.
                    assert!(
                        most <= 2 * (run / SHARDS),
                        "{run} buckets at a stride of {stride} from {base:#x}: {most} in one shard"
                    );
                }
            }
        }
    }
}

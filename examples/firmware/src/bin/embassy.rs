//! tollgate on embassy-executor: `static` buckets on `EmbassyClock`, tasks waiting through
//! `EmbassyWait`, and the SysTick interrupt handler taking from the same bucket and keyed table.
//! The time driver is the firmware's (`tollgate_firmware::embassy_driver`, on SysTick).
//!
//! Checks, each printing a line that ends in `ok` or `FAILED`, then `PASS` or `FAIL`:
//!
//! 1. the design's twelve requests 0.2 s apart at 2/s, burst 5, paced by embassy-time's `Timer`;
//! 2. waits given up: one in line timing out, one dropped by `with_timeout`; the waiter after
//!    them is served when it would have been had they never come, and the line is empty after;
//! 3. three tasks waiting on one bucket while the SysTick handler takes from it too, and each
//!    task waiting on its own id in a keyed table the handler takes from as well: the grants
//!    against `burst + rate × elapsed`, for the bucket and for each id;
//! 4. five waiters on one bucket, each polled twice in its wait (as it arrives, and at its
//!    estimate, when its token is due), served in arrival order;
//! 5. one task at 100/s with a burst of one, on a driver whose timers wake up to a tick late:
//!    the rate against `rate × elapsed`;
//! 6. twice the rate asked by callers who give up after 30 ms: goodput stays at the rate.
//!
//! Run with `cargo run --release --features embassy --bin tollgate-embassy --target
//! thumbv7m-none-eabi` (or thumbv7em-none-eabihf) from this directory.

#![no_std]
#![no_main]

use core::sync::atomic::{AtomicBool, AtomicU32, Ordering::Relaxed};

use cortex_m_rt::exception;
use cortex_m_semihosting::{debug, hprintln};
use embassy_executor::Spawner;
use embassy_time::{with_timeout, Duration, Instant, Timer};
use tollgate::wait::{waiters_in_line, EmbassyWait, LINE_CAPACITY};
use tollgate::{Denied, EmbassyClock, KeyedTable, Quota, Rate, TokenBucket, WhenFull};
use tollgate_firmware::board::NAME;
use tollgate_firmware::{embassy_driver, systick};

/// The design's example: 2 tokens a second, at most 5 at once.
static TABLE: TokenBucket<EmbassyClock> =
    TokenBucket::new(Quota::new(Rate::per_second(2)).burst(5), EmbassyClock);

/// Paced waits: 10 a second, one at a time, from empty.
static PACED: TokenBucket<EmbassyClock> = TokenBucket::new(
    Quota::new(Rate::per_second(10)).burst(1).start_empty(),
    EmbassyClock,
);

const OVERLOAD_RATE: u64 = 100;
/// Asked at twice its rate by callers who give up after 30 ms. A burst of one: no room for
/// what accrues while the head's timer wakes late (this driver wakes timers on the
/// millisecond's interrupt), so the head takes ahead by the lateness the line has learnt.
static OVERLOAD: TokenBucket<EmbassyClock> = TokenBucket::new(
    Quota::new(Rate::per_second(OVERLOAD_RATE)).burst(1),
    EmbassyClock,
);
const OVERLOAD_BURST: u64 = 1;

const ONE_RATE: u64 = 100;
/// One task taking a token at a time at 100/s, burst 1, from empty: every token's instant falls
/// between two of the driver's millisecond ticks.
static ONE: TokenBucket<EmbassyClock> = TokenBucket::new(
    Quota::new(Rate::per_second(ONE_RATE))
        .burst(1)
        .start_empty(),
    EmbassyClock,
);
static OVERLOAD_GRANTS: AtomicU32 = AtomicU32::new(0);
static OVERLOAD_GAVE_UP: AtomicU32 = AtomicU32::new(0);
static OVERLOAD_UNSPAWNED: AtomicU32 = AtomicU32::new(0);

const SHARED_RATE: u64 = 200;
const SHARED_BURST: u64 = 10;
/// Waited on by the tasks, taken by the SysTick handler.
static SHARED: TokenBucket<EmbassyClock> = TokenBucket::new(
    Quota::new(Rate::per_second(SHARED_RATE)).burst(SHARED_BURST),
    EmbassyClock,
);

const KEY_RATE: u64 = 50;
const KEY_BURST: u64 = 2;
/// One bucket per id: each task's id, and the handler's.
static PER_ID: KeyedTable<u16, EmbassyClock, 4> = KeyedTable::new(
    Quota::new(Rate::per_second(KEY_RATE)).burst(KEY_BURST),
    EmbassyClock,
    WhenFull::Refuse,
);
const HANDLER_ID: u16 = 0x700;

// Statistics read after the fact: Relaxed throughout (one core).
static TICKS: AtomicU32 = AtomicU32::new(0);
static HANDLER_GRANTS: AtomicU32 = AtomicU32::new(0);
static HANDLER_KEY_GRANTS: AtomicU32 = AtomicU32::new(0);
static TASK_GRANTS: AtomicU32 = AtomicU32::new(0);
static TASK_KEY_GRANTS: [AtomicU32; 3] = [const { AtomicU32::new(0) }; 3];
static MAX_IN_LINE: AtomicU32 = AtomicU32::new(0);
/// When each paced waiter finished, in µs since the scenario began, and whether it was served.
static PACED_AT_US: [AtomicU32; 4] = [const { AtomicU32::new(0) }; 4];
static PACED_SERVED: [AtomicBool; 4] = [const { AtomicBool::new(false) }; 4];

#[exception]
fn SysTick() {
    systick::on_interrupt();
    embassy_driver::on_interrupt();
    // Every seventh interrupt: 143 tries a second, against rates of 200 (the shared bucket, so
    // the tasks, woken by this same interrupt, get the rest) and 50 (its own id).
    let tick = TICKS.fetch_add(1, Relaxed);
    if tick % 7 == 0 {
        let granted = match PHASE.load(Relaxed) {
            PHASE_SHARED => SHARED.try_acquire(1).is_ok().then_some(&HANDLER_GRANTS),
            PHASE_KEYED => PER_ID
                .try_acquire(HANDLER_ID, 1)
                .is_ok()
                .then_some(&HANDLER_KEY_GRANTS),
            _ => None,
        };
        if let Some(count) = granted {
            count.fetch_add(1, Relaxed);
        }
    }
}

#[embassy_executor::main]
async fn main(spawner: Spawner) {
    let Some(mut core) = cortex_m::Peripherals::take() else {
        finish(false);
    };
    systick::start(&mut core.SYST);
    hprintln!("tollgate on embassy-executor, {}", NAME);
    let mut passed = twelve_requests().await;
    passed &= given_up(&spawner).await;
    passed &= contention(&spawner).await;
    passed &= one_wake_each(&spawner).await;
    passed &= burst_of_one().await;
    passed &= overload(&spawner).await;
    finish(passed);
}

/// The design's table, each request right after embassy-time's timer wakes the task.
async fn twelve_requests() -> bool {
    const EXPECTED: [bool; 12] = [
        true, true, true, true, true, true, true, false, true, false, true, false,
    ];
    hprintln!();
    hprintln!("== Twelve requests 0.2 s apart: {}", TABLE.quota());
    // Start right after a timer wake, as every later request is.
    Timer::after_millis(1).await;
    let start = Instant::now();
    let mut matched = 0;
    for (i, &expected) in EXPECTED.iter().enumerate() {
        Timer::at(start + Duration::from_millis(200 * i as u64)).await;
        let result = TABLE.try_acquire(1);
        let at_ms = 200 * i;
        let verdict_word = if result.is_ok() { "ALLOWED" } else { "BLOCKED" };
        hprintln!(
            "request {:>2} at {}.{:03} s: {}",
            i + 1,
            at_ms / 1000,
            at_ms % 1000,
            verdict_word
        );
        if result.is_ok() == expected {
            matched += 1;
        }
    }
    let too_big = EmbassyWait::acquire(&TABLE, 6).await;
    hprintln!("six at once, waited for: {:?}", too_big);
    let ok = matched == EXPECTED.len() && too_big == Err(Denied::ExceedsCapacity { burst: 5 });
    hprintln!(
        "twelve requests: {} of {} as the design's table: {}",
        matched,
        EXPECTED.len(),
        verdict(ok)
    );
    ok
}

/// How waiter `id` of the paced bucket behaves.
#[derive(Clone, Copy)]
enum Patience {
    /// Waits as long as it takes.
    Forever,
    /// `acquire_timeout` with this many ms.
    TimesOut(u64),
    /// `with_timeout` drops its `acquire` after this many ms.
    Dropped(u64),
}

#[embassy_executor::task(pool_size = 4)]
async fn paced_waiter(id: usize, start: Instant, patience: Patience) {
    // Arrive in `id` order, a millisecond apart.
    Timer::at(start + Duration::from_millis(id as u64)).await;
    let served = match patience {
        Patience::Forever => EmbassyWait::acquire(&PACED, 1).await.is_ok(),
        Patience::TimesOut(ms) => {
            EmbassyWait::acquire_timeout(&PACED, 1, core::time::Duration::from_millis(ms))
                .await
                .is_ok()
        }
        Patience::Dropped(ms) => matches!(
            with_timeout(Duration::from_millis(ms), EmbassyWait::acquire(&PACED, 1)).await,
            Ok(Ok(_))
        ),
    };
    PACED_AT_US[id].store((Instant::now() - start).as_micros() as u32, Relaxed);
    PACED_SERVED[id].store(served, Relaxed);
}

/// Four waiters on 10/s from empty, a millisecond apart: the first served after 100 ms; the
/// second (150 ms timeout) gives up as it arrives, its estimate 200 ms away; the third
/// is dropped by `with_timeout` after 150 ms in line; the fourth is served 100 ms after the
/// first, as if those two had never queued.
async fn given_up(spawner: &Spawner) -> bool {
    hprintln!();
    hprintln!("== Waits given up: {}", PACED.quota());
    PACED.touch();
    let start = Instant::now() + Duration::from_millis(2);
    let patience = [
        Patience::Forever,
        Patience::TimesOut(150),
        Patience::Dropped(150),
        Patience::Forever,
    ];
    for (id, &p) in patience.iter().enumerate() {
        spawner.spawn(paced_waiter(id, start, p).unwrap());
    }
    Timer::at(start + Duration::from_millis(20)).await;
    let in_line = waiters_in_line();
    Timer::at(start + Duration::from_millis(400)).await;
    let names = ["waits", "times out at 150 ms", "dropped at 150 ms", "waits"];
    // The second failed as it arrived: three in line.
    let mut ok = in_line == 3;
    // Instants from the first waiter's grant (the bucket's first use started its empty fill
    // on the first waiter's arrival): the second, whose token could not come within its
    // timeout, gives up as soon as it heads the line; the third is dropped 150 ms after it
    // came; the fourth gets the next token, 100 ms after the first, as if neither had queued.
    let first_us = i64::from(PACED_AT_US[0].load(Relaxed));
    // (served, µs after the first grant): the second's estimate (a token after the first's)
    // is past its patience, so it fails as it arrives, a millisecond after the scenario began.
    let expected = [
        (true, 0),
        (false, 1_000 - first_us),
        (false, 150_000 + 2_000 - 100_000),
        (true, 100_000),
    ];
    for id in 0..4 {
        let served = PACED_SERVED[id].load(Relaxed);
        let at_us = i64::from(PACED_AT_US[id].load(Relaxed));
        let (want_served, want_us) = expected[id];
        let since_first = at_us - first_us;
        // Within 2 ms: the timer wakes on the millisecond's interrupt.
        let on_time = since_first >= want_us - 2_000 && since_first <= want_us + 2_000;
        let this = served == want_served && on_time;
        ok &= this;
        hprintln!(
            "waiter {} ({}): {} {} us after the first grant: {}",
            id + 1,
            names[id],
            if served { "served" } else { "gave up" },
            since_first,
            verdict(this)
        );
    }
    let after = waiters_in_line();
    ok &= after == 0;
    hprintln!(
        "in line: {} of {} places while waiting, {} after: {}",
        in_line,
        LINE_CAPACITY,
        after,
        verdict(ok)
    );
    hprintln!("waits given up: {}", verdict(ok));
    ok
}

const CONTENTION_MS: u64 = 2_000;
const KEYED_MS: u64 = 1_000;

/// What the SysTick handler contends for: nothing, the shared bucket, or its id in the table.
static PHASE: AtomicU32 = AtomicU32::new(PHASE_NONE);
const PHASE_NONE: u32 = 0;
const PHASE_SHARED: u32 = 1;
const PHASE_KEYED: u32 = 2;

#[embassy_executor::task(pool_size = 6)]
async fn worker(n: usize, until: Instant, keyed: bool) {
    let id = 0x100 + n as u16;
    while Instant::now() < until {
        if keyed {
            // The task's own id, waited for in that id's line of the keyed table.
            if PER_ID.acquire(id, 1).await.is_ok() {
                TASK_KEY_GRANTS[n].fetch_add(1, Relaxed);
            }
        } else {
            if EmbassyWait::acquire(&SHARED, 1).await.is_ok() {
                TASK_GRANTS.fetch_add(1, Relaxed);
            }
            MAX_IN_LINE.fetch_max(waiters_in_line() as u32, Relaxed);
        }
    }
}

/// Runs three workers until `ms` have passed with the handler in `phase`; returns the time
/// the handler contended and the time until every worker's last wait had ended, in µs.
async fn run_workers(spawner: &Spawner, ms: u64, keyed: bool, phase: u32) -> (u64, u64) {
    Timer::after_millis(1).await;
    let start = Instant::now();
    let until = start + Duration::from_millis(ms);
    PHASE.store(phase, Relaxed);
    for n in 0..3 {
        spawner.spawn(worker(n, until, keyed).unwrap());
    }
    Timer::at(until).await;
    PHASE.store(PHASE_NONE, Relaxed);
    let contended_us = (Instant::now() - start).as_micros();
    // Let the workers finish the waits they are in: at most one token's time each.
    Timer::after_millis(50).await;
    (contended_us, (Instant::now() - start).as_micros())
}

/// Three tasks waiting on one bucket for two seconds while the SysTick handler takes from it
/// every seven milliseconds; then three tasks each waiting on its own id in a keyed table
/// (`KeyedTable::acquire`) for a second while the handler takes from an id of its own.
async fn contention(spawner: &Spawner) -> bool {
    hprintln!();
    hprintln!(
        "== Three tasks and the SysTick handler on one bucket, {} ms: {}",
        CONTENTION_MS,
        SHARED.quota()
    );
    let (contended_us, elapsed_us) = run_workers(spawner, CONTENTION_MS, false, PHASE_SHARED).await;
    let tasks = u64::from(TASK_GRANTS.load(Relaxed));
    let handler = u64::from(HANDLER_GRANTS.load(Relaxed));
    let granted = tasks + handler;
    // Never more than the burst plus the rate over the whole span; and with demand above the
    // rate throughout, every token accrued while all contended was granted (within two).
    let bound = SHARED_BURST + SHARED_RATE * elapsed_us / 1_000_000;
    let accrued = SHARED_BURST + SHARED_RATE * contended_us / 1_000_000;
    // (And both sides got some: the handler's tries fall between the tasks' wakes.)
    let ok = granted <= bound && granted + 2 >= accrued && tasks > 0 && handler > 0;
    hprintln!(
        "granted {} ({} to the tasks, {} to the handler) in {} us; bound burst + rate x elapsed = {}: {}",
        granted,
        tasks,
        handler,
        elapsed_us,
        bound,
        verdict(ok)
    );
    hprintln!(
        "at most {} tasks in line at once",
        MAX_IN_LINE.load(Relaxed)
    );

    hprintln!();
    hprintln!(
        "== Three tasks waiting on their own ids, the handler on its own, {} ms: {} per id",
        KEYED_MS,
        PER_ID.quota()
    );
    let (contended_us, elapsed_us) = run_workers(spawner, KEYED_MS, true, PHASE_KEYED).await;
    let key_bound = KEY_BURST + KEY_RATE * elapsed_us / 1_000_000;
    let key_accrued = KEY_BURST + KEY_RATE * contended_us / 1_000_000;
    let mut keys_ok = true;
    for (n, grants) in TASK_KEY_GRANTS.iter().enumerate() {
        let got = u64::from(grants.load(Relaxed));
        // Each id's waiter gets its id's rate, never more.
        let this = got <= key_bound && got + 2 >= key_accrued;
        keys_ok &= this;
        hprintln!(
            "id {:#x}: {} grants, bound {}: {}",
            0x100 + n,
            got,
            key_bound,
            verdict(this)
        );
    }
    let handler_keys = u64::from(HANDLER_KEY_GRANTS.load(Relaxed));
    let this = handler_keys <= key_bound && handler_keys + 2 >= key_accrued;
    keys_ok &= this;
    hprintln!(
        "id {:#x} (handler): {} grants, bound {}: {}",
        HANDLER_ID,
        handler_keys,
        key_bound,
        verdict(this)
    );
    hprintln!("keyed table shared with the handler: {}", verdict(keys_ok));
    let all = ok && keys_ok;
    hprintln!("contention: {}", verdict(all));
    all
}

/// Wakes: 20 a second, burst 2, from empty. The burst has room for a late timer beyond one
/// token, so the head takes when woken (no take ahead), and each waiter should wake once.
static WAKES: TokenBucket<EmbassyClock> = TokenBucket::new(
    Quota::new(Rate::per_second(20)).burst(2).start_empty(),
    EmbassyClock,
);
const WAKERS: usize = 5;
/// Each waiter's polls inside its wait, and when it was served (µs since the scenario began).
static WAKE_POLLS: [AtomicU32; WAKERS] = [const { AtomicU32::new(0) }; WAKERS];
static WAKE_AT_US: [AtomicU32; WAKERS] = [const { AtomicU32::new(0) }; WAKERS];
static WAKE_ORDER: AtomicU32 = AtomicU32::new(0);
static WAKE_RANK: [AtomicU32; WAKERS] = [const { AtomicU32::new(0) }; WAKERS];

/// `future`, counting each poll in `polls`.
async fn counted<F: core::future::Future>(future: F, polls: &AtomicU32) -> F::Output {
    let mut future = core::pin::pin!(future);
    core::future::poll_fn(|cx| {
        polls.fetch_add(1, Relaxed);
        future.as_mut().poll(cx)
    })
    .await
}

#[embassy_executor::task(pool_size = 5)]
async fn counted_waiter(id: usize, start: Instant) {
    Timer::at(start + Duration::from_millis(id as u64)).await;
    let _ = counted(EmbassyWait::acquire(&WAKES, 1), &WAKE_POLLS[id]).await;
    WAKE_AT_US[id].store((Instant::now() - start).as_micros() as u32, Relaxed);
    WAKE_RANK[id].store(WAKE_ORDER.fetch_add(1, Relaxed), Relaxed);
}

/// Five waiters a millisecond apart on 20/s from empty: each is served in arrival order, a
/// token (50 ms) after the one before, and is polled twice in its wait: as it arrives, and
/// when its own timer fires at its estimate, when it heads the line with its token due.
async fn one_wake_each(spawner: &Spawner) -> bool {
    hprintln!();
    hprintln!(
        "== One wake per waiter: {} waiters, {}",
        WAKERS,
        WAKES.quota()
    );
    WAKES.touch();
    let start = Instant::now() + Duration::from_millis(1);
    for id in 0..WAKERS {
        spawner.spawn(counted_waiter(id, start).unwrap());
    }
    Timer::at(start + Duration::from_millis(50 * WAKERS as u64 + 20)).await;
    let mut ok = true;
    let first_us = WAKE_AT_US[0].load(Relaxed);
    for id in 0..WAKERS {
        let polls = WAKE_POLLS[id].load(Relaxed);
        let at_us = WAKE_AT_US[id].load(Relaxed);
        let rank = WAKE_RANK[id].load(Relaxed) as usize;
        // The first's token 50 ms after the touch, a millisecond before the scenario began,
        // served within the few milliseconds a timer and the executor add; each other's 50 ms
        // after the one before, on the bucket's schedule (within a late timer's 2 ms).
        let (due_us, early_us, late_us) = if id == 0 {
            (49_000, 0, 5_000)
        } else {
            (first_us + 50_000 * id as u32, 2_000, 2_000)
        };
        let on_time = at_us + early_us >= due_us && at_us <= due_us + late_us;
        let this = polls == 2 && rank == id && on_time;
        ok &= this;
        hprintln!(
            "waiter {}: served {} at {} us, polled {} times: {}",
            id + 1,
            rank + 1,
            at_us,
            polls,
            verdict(this)
        );
    }
    hprintln!("one wake per waiter: {}", verdict(ok));
    ok
}

const ONE_MS: u64 = 2_000;

/// One task taking one token at a time from a bucket of burst 1 at 100/s for two seconds:
/// each token's instant falls between the driver's ticks, so every timer wakes late, and the
/// bucket would cap away that lateness on every token if the head took only when woken.
async fn burst_of_one() -> bool {
    hprintln!();
    hprintln!("== One task, {} ms: {}", ONE_MS, ONE.quota());
    Timer::after_millis(1).await;
    ONE.touch();
    let start = Instant::now();
    let until = start + Duration::from_millis(ONE_MS);
    let mut granted = 0u64;
    while Instant::now() < until {
        if EmbassyWait::acquire(&ONE, 1).await.is_ok() {
            granted += 1;
        }
    }
    let elapsed_us = (Instant::now() - start).as_micros();
    // From empty: at most rate x elapsed (the touch came first, so a hair more is allowed).
    let bound = 1 + ONE_RATE * elapsed_us / 1_000_000;
    let accrued = ONE_RATE * elapsed_us / 1_000;
    // Per mille of the rate over the span.
    let rate = granted * 1_000_000 / accrued.max(1);
    let late = tollgate::wait::timer_lateness().as_micros();
    let ok = granted <= bound && rate >= 990;
    hprintln!(
        "granted {} in {} us: {}.{:03} of the rate; bound burst + rate x elapsed = {}; timer lateness learnt {} us: {}",
        granted,
        elapsed_us,
        rate / 1_000,
        rate % 1_000,
        bound,
        late,
        verdict(ok)
    );
    hprintln!("burst of one at the rate: {}", verdict(ok));
    ok
}

const OVERLOAD_MS: u64 = 2_000;
const PATIENCE_MS: u64 = 30;

#[embassy_executor::task(pool_size = 12)]
async fn impatient() {
    let patience = core::time::Duration::from_millis(PATIENCE_MS);
    match EmbassyWait::acquire_timeout(&OVERLOAD, 1, patience).await {
        Ok(_) => OVERLOAD_GRANTS.fetch_add(1, Relaxed),
        Err(_) => OVERLOAD_GAVE_UP.fetch_add(1, Relaxed),
    };
}

/// A caller every 5 ms (twice the rate of 100/s), each giving up after 30 ms: goodput stays at
/// the rate, since a caller who gives up took nothing.
async fn overload(spawner: &Spawner) -> bool {
    hprintln!();
    hprintln!(
        "== Twice the rate, callers giving up after {} ms, {} ms: {}",
        PATIENCE_MS,
        OVERLOAD_MS,
        OVERLOAD.quota()
    );
    Timer::after_millis(1).await;
    let start = Instant::now();
    let arrivals = OVERLOAD_MS * 2 * OVERLOAD_RATE / 1_000;
    for i in 0..arrivals {
        Timer::at(start + Duration::from_micros(i * 1_000_000 / (2 * OVERLOAD_RATE))).await;
        match impatient() {
            Ok(task) => spawner.spawn(task),
            Err(_) => {
                OVERLOAD_UNSPAWNED.fetch_add(1, Relaxed);
            }
        }
    }
    Timer::after_millis(PATIENCE_MS + 10).await;
    let elapsed_us = (Instant::now() - start).as_micros();
    let granted = u64::from(OVERLOAD_GRANTS.load(Relaxed));
    let gave_up = u64::from(OVERLOAD_GAVE_UP.load(Relaxed));
    let unspawned = u64::from(OVERLOAD_UNSPAWNED.load(Relaxed));
    let bound = OVERLOAD_BURST + OVERLOAD_RATE * elapsed_us / 1_000_000;
    // Per mille of burst + rate × elapsed: what the bucket could grant at most.
    let goodput = granted * 1_000 / bound;
    let ok = granted <= bound && goodput >= 990 && unspawned == 0;
    hprintln!(
        "{} callers in {} us: {} served, {} gave up, {} not started; bound burst + rate x elapsed = {}; goodput {}.{:03} of it: {}",
        arrivals,
        elapsed_us,
        granted,
        gave_up,
        unspawned,
        bound,
        goodput / 1_000,
        goodput % 1_000,
        verdict(ok)
    );
    hprintln!("overload with callers giving up: {}", verdict(ok));
    ok
}

/// Reports the verdict and exits qemu with its status.
fn finish(passed: bool) -> ! {
    if passed {
        hprintln!("PASS");
        debug::exit(debug::EXIT_SUCCESS);
    } else {
        hprintln!("FAIL");
        debug::exit(debug::EXIT_FAILURE);
    }
    loop {
        cortex_m::asm::wfi();
    }
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo) -> ! {
    hprintln!("panic: {}", info);
    finish(false);
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "ok"
    } else {
        "FAILED"
    }
}

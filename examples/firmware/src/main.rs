//! tollgate on a microcontroller: `static` buckets on the SysTick timer, taken from the main loop
//! and from the SysTick interrupt handler, with blocking waits through `DelayNs`.
//!
//! It runs three checks and exits through semihosting with success only if all pass:
//!
//! 1. twelve requests 0.2 s apart against rate 2/s, burst 5, paced by SysTick: the design's
//!    table, seven allowed, then blocked and allowed in turn;
//! 2. five `acquire_with_delay` calls at 10/s from empty: each waits its 100 ms, on schedule;
//! 3. the main loop and the SysTick handler taking from one bucket for two seconds: the grants
//!    never exceed `burst + rate × elapsed`, checked after every call of the main loop; on the
//!    Cortex-M3 again on the 64-bit word, whose cell there is behind critical sections;
//! 4. a table of per-CAN-id buckets (`KeyedTable`): each id its own burst, a new id refused while
//!    every slot's bucket is in use, and admitted in place of one that has refilled.
//!
//! Run it with `cargo run --release --target thumbv7m-none-eabi` (or thumbv6m-none-eabi,
//! thumbv7em-none-eabihf) from this directory: the runner starts qemu-system-arm.

#![no_std]
#![no_main]

use core::fmt;
use core::sync::atomic::{compiler_fence, Ordering};

use cortex_m_rt::{entry, exception};
use cortex_m_semihosting::{debug, hprintln};
use embedded_hal::delay::DelayNs;
use portable_atomic::{AtomicBool, AtomicU32, AtomicU8};
use tollgate::{Clock, Denied, KeyedDenied, KeyedTable, Quota, Rate, TokenBucket, WhenFull, Word};
use tollgate_firmware::board::{CORE_HZ, ICOUNT_SHIFT, NAME};
use tollgate_firmware::systick::{self, SysTickClock, SysTickDelay, INTERRUPT_HZ, PERIOD_TICKS};

/// The design's example: 2 tokens a second, at most 5 at once.
static TABLE: TokenBucket<SysTickClock> =
    TokenBucket::new(Quota::new(Rate::per_second(2)).burst(5), SysTickClock);

/// The design's example again, on the 64-bit word (the Cortex-M3 only: the firmware enables
/// tollgate's `word64` there, whose cell is a `u64` behind critical sections: see
/// `Cargo.toml`). It must answer exactly as `TABLE` does, and hold a century of idle time.
#[cfg(board = "lm3s6965evb")]
static WIDE: TokenBucket<SysTickClock, u64> =
    TokenBucket::<_, u64>::new_with_word(Quota::new(Rate::per_second(2)).burst(5), SysTickClock);

/// Paced blocking waits: 10 a second, one at a time, from empty.
static PACED: TokenBucket<SysTickClock> = TokenBucket::new(
    Quota::new(Rate::per_second(10)).burst(1).start_empty(),
    SysTickClock,
);

/// One bucket per CAN id, four slots, 10 frames a second each, at most 2 at once. When every
/// slot holds an id whose bucket is not full, a new id is refused (fail closed).
static PER_ID: KeyedTable<u16, SysTickClock, 4> = KeyedTable::new(
    Quota::new(Rate::per_second(10)).burst(2),
    SysTickClock,
    WhenFull::Refuse,
);

const SHARED_RATE: u64 = 200;
const SHARED_BURST: u64 = 10;
const CONTENTION_SECONDS: u64 = 2;

/// Taken from the main loop and from the SysTick handler at once.
static SHARED: TokenBucket<SysTickClock> = TokenBucket::new(
    Quota::new(Rate::per_second(SHARED_RATE)).burst(SHARED_BURST),
    SysTickClock,
);

/// `SHARED` again on the 64-bit word (the Cortex-M3 only), taken from the main loop and the
/// SysTick handler at once: the handler interrupts the main loop's checks, which a spin lock
/// held by the interrupted check would turn into a hang.
#[cfg(board = "lm3s6965evb")]
static SHARED_WIDE: TokenBucket<SysTickClock, u64> = TokenBucket::<_, u64>::new_with_word(
    Quota::new(Rate::per_second(SHARED_RATE)).burst(SHARED_BURST),
    SysTickClock,
);

/// Which bucket the SysTick handler takes from while the main loop contends with it.
const CONTEND_NONE: u8 = 0;
const CONTEND_SHARED: u8 = 1;
#[cfg(board = "lm3s6965evb")]
const CONTEND_SHARED_WIDE: u8 = 2;

// What the SysTick handler did while the main loop contended with it. Relaxed throughout: one
// core, and each counter is a statistic read after the fact, not a message.
static CONTENDING: AtomicU8 = AtomicU8::new(CONTEND_NONE);
static MAIN_ACQUIRING: AtomicBool = AtomicBool::new(false);
static HANDLER_ATTEMPTS: AtomicU32 = AtomicU32::new(0);
static HANDLER_GRANTS: AtomicU32 = AtomicU32::new(0);
static HANDLER_PREEMPTED: AtomicU32 = AtomicU32::new(0);

/// Touch the buckets this often, in SysTick interrupts: each second, far within their idle
/// horizon, so that the touches also run during the checks (and contend with the main loop).
const TOUCH_EVERY: u32 = INTERRUPT_HZ as u32;
/// SysTick interrupts left until the next touch; only the handler uses it.
static UNTIL_TOUCH: AtomicU32 = AtomicU32::new(TOUCH_EVERY);

#[exception]
fn SysTick() {
    systick::on_interrupt();
    // The 32-bit word reads correctly for `idle_horizon()` without a write (46 minutes for
    // TABLE on the M3); a touch now and then keeps an idle bucket readable for ever, and leaves
    // a bucket not used yet as it is.
    let left = UNTIL_TOUCH.load(Ordering::Relaxed) - 1;
    if left == 0 {
        TABLE.touch();
        PACED.touch();
        SHARED.touch();
        #[cfg(board = "lm3s6965evb")]
        {
            WIDE.touch();
            SHARED_WIDE.touch();
        }
    }
    UNTIL_TOUCH.store(
        if left == 0 { TOUCH_EVERY } else { left },
        Ordering::Relaxed,
    );
    let granted = match CONTENDING.load(Ordering::Relaxed) {
        CONTEND_SHARED => SHARED.try_acquire(1).is_ok(),
        #[cfg(board = "lm3s6965evb")]
        CONTEND_SHARED_WIDE => SHARED_WIDE.try_acquire(1).is_ok(),
        _ => return,
    };
    if MAIN_ACQUIRING.load(Ordering::Relaxed) {
        HANDLER_PREEMPTED.fetch_add(1, Ordering::Relaxed);
    }
    HANDLER_ATTEMPTS.fetch_add(1, Ordering::Relaxed);
    HANDLER_GRANTS.fetch_add(u32::from(granted), Ordering::Relaxed);
}

#[entry]
fn main() -> ! {
    let Some(mut core) = cortex_m::Peripherals::take() else {
        finish(false);
    };
    systick::start(&mut core.SYST);

    hprintln!("tollgate firmware on {}", NAME);
    let mut passed = timer_rate();
    passed &= twelve_requests(&TABLE);
    #[cfg(board = "lm3s6965evb")]
    {
        passed &= wide_word();
    }
    passed &= blocking_waits();
    passed &= contention(&SHARED, CONTEND_SHARED, "32-bit word");
    #[cfg(board = "lm3s6965evb")]
    {
        passed &= contention(&SHARED_WIDE, CONTEND_SHARED_WIDE, "64-bit word");
    }
    passed &= keyed_table();
    finish(passed);
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

/// Checks that SysTick counts at `CORE_HZ`: under `-icount shift=s` an instruction is 2^s ns of
/// virtual time, so 10 000 instructions must span 10 000 × 2^s × `CORE_HZ` / 10^9 ticks.
fn timer_rate() -> bool {
    const ITERATIONS: u32 = 5_000;
    let instructions = 2 * u64::from(ITERATIONS);
    let measured = systick::ticks_over_instructions(ITERATIONS);
    let expected = instructions * (1 << ICOUNT_SHIFT) * CORE_HZ / 1_000_000_000;
    // A few instructions of overhead around the loop, and a tick of rounding.
    let ok = measured >= expected && measured <= expected + expected / 100;
    hprintln!(
        "SysTick: processor clock {} Hz, interrupt every {} ms; {} ticks over {} instructions \
         of {} ns (expected {}): {}",
        CORE_HZ,
        1_000 / INTERRUPT_HZ,
        measured,
        instructions,
        1u32 << ICOUNT_SHIFT,
        expected,
        verdict(ok)
    );
    hprintln!(
        "bucket: {} bytes, {}-bit word; rate 2/s reads the clock to {} ns, idle horizon {} s",
        core::mem::size_of::<TokenBucket<SysTickClock>>(),
        8 * core::mem::size_of::<tollgate::DefaultWord>(),
        TABLE.resolution().as_nanos(),
        TABLE.idle_horizon().as_secs()
    );
    ok
}

/// The design's table: twelve requests 0.2 s apart at rate 2/s, burst 5. Each request is made
/// right after the SysTick interrupt that ends its 200 ms, so the requests are exactly 0.2 s
/// apart in timer ticks (see `request`).
fn twelve_requests<W: Word>(table: &TokenBucket<SysTickClock, W>) -> bool {
    /// The instant and the answer of one request. One function for all twelve, so that the
    /// bucket reads its clock the same number of instructions after the interrupt each time
    /// (under qemu's `-icount`, time is instructions): inlined into the loop, the compiler may
    /// peel the first request off it and schedule it differently, and the eleventh request, due
    /// exactly 2 s after the first, would then read a few ticks short of its token.
    #[inline(never)]
    fn request<W: Word>(table: &TokenBucket<SysTickClock, W>) -> (u64, Result<(), Denied>) {
        let at = SysTickClock.now();
        (at, table.try_acquire(1))
    }

    const EXPECTED: [bool; 12] = [
        true, true, true, true, true, true, true, false, true, false, true, false,
    ];
    hprintln!();
    hprintln!(
        "== Twelve requests 0.2 s apart: {}, on the {}-bit word",
        table.quota(),
        W::BITS
    );
    let first = systick::interrupts() + 1;
    let mut start = None;
    let mut matched = 0;
    for (i, &expected) in EXPECTED.iter().enumerate() {
        systick::sleep_until_interrupt(first + 200 * i as u64);
        let (at, result) = request(table);
        let since = at - *start.get_or_insert(at);
        let n = i + 1;
        match result {
            Ok(()) => hprintln!("request {:>2} at {} s: ALLOWED", n, Seconds(since)),
            Err(Denied::Insufficient { retry_after }) => hprintln!(
                "request {:>2} at {} s: BLOCKED (retry after {} ms)",
                n,
                Seconds(since),
                Millis(retry_after.get().as_nanos() as u64)
            ),
            Err(other) => hprintln!("request {:>2} at {} s: {}", n, Seconds(since), other),
        }
        if result.is_ok() == expected {
            matched += 1;
        }
    }
    let too_big = table.try_acquire(6);
    hprintln!("six at once: {:?}", too_big);
    let ok = matched == EXPECTED.len() && too_big == Err(Denied::ExceedsCapacity { burst: 5 });
    hprintln!(
        "twelve requests: {} of {} as the design's table: {}",
        matched,
        EXPECTED.len(),
        verdict(ok)
    );
    ok
}

/// The 64-bit word on the Cortex-M3: the design's table again, and a century of idle horizon.
#[cfg(board = "lm3s6965evb")]
fn wide_word() -> bool {
    const CENTURY_SECS: u64 = 100 * 31_557_600;
    let agrees = twelve_requests(&WIDE);
    let horizon = WIDE.idle_horizon().as_secs();
    let ok = agrees && horizon >= CENTURY_SECS;
    hprintln!(
        "64-bit word ({} bytes, behind critical sections): the design's \
         table, idle horizon {} years: {}",
        core::mem::size_of::<TokenBucket<SysTickClock, u64>>(),
        horizon / 31_557_600,
        verdict(ok)
    );
    ok
}

/// Five blocking acquisitions at 10/s from empty, through `DelayNs`: each returns after the
/// 100 ms it reports, and the grants land on the bucket's schedule.
fn blocking_waits() -> bool {
    const CALLS: u64 = 5;
    // Time a call may take beyond its wait: the try before the sleep and the one after it
    // (each reads the clock in fixed point and converts ticks to a `Duration`), and the delay's
    // last spin. Largest on the Cortex-M0, which multiplies and divides 64-bit numbers in
    // software, so the slack is sized for it.
    const SLACK_NS: u64 = 500_000;
    hprintln!();
    hprintln!(
        "== Blocking waits through DelayNs (acquire_with_delay): {}, from empty",
        PACED.quota()
    );
    let mut delay = SysTickDelay;
    let start = SysTickClock.now();
    let mut ok = true;
    for call in 1..=CALLS {
        let before = SysTickClock.now();
        let Ok(waited) = PACED.acquire_with_delay(1, &mut delay) else {
            hprintln!("acquire {}: denied", call);
            ok = false;
            continue;
        };
        let after = SysTickClock.now();
        let waited_ns = waited.as_nanos() as u64;
        let took_ns = ticks_to_ns(after - before);
        let at_ns = ticks_to_ns(after - start);
        let due_ns = call * 100_000_000;
        // The bucket reads its clock to its resolution from the instant of its first use: a
        // grant may come up to one step of that reading before `start + call × 100 ms`.
        let step_ns = PACED.resolution().as_nanos() as u64;
        let fine = took_ns >= waited_ns
            && took_ns <= waited_ns + SLACK_NS
            && at_ns + step_ns >= due_ns
            && at_ns <= due_ns + SLACK_NS;
        ok &= fine;
        hprintln!(
            "acquire {}: waited {} ms (the call took {} ms), granted at {} s: {}",
            call,
            Millis(waited_ns),
            Millis(took_ns),
            Seconds(after - start),
            verdict(fine)
        );
    }
    hprintln!("blocking waits: {}", verdict(ok));
    ok
}

/// The main loop and the SysTick handler take from `shared` at once for two seconds (`which`
/// tells the handler which bucket that is). After each of its calls the main loop counts every
/// grant so far, then reads the clock, and checks `grants <= burst + rate × elapsed`: a grant
/// counted was made before that reading.
fn contention<W: Word>(shared: &TokenBucket<SysTickClock, W>, which: u8, word: &str) -> bool {
    hprintln!();
    hprintln!(
        "== Main loop and SysTick handler acquiring together for {} s, {}: {}",
        CONTENTION_SECONDS,
        word,
        shared.quota()
    );
    HANDLER_ATTEMPTS.store(0, Ordering::Relaxed);
    HANDLER_GRANTS.store(0, Ordering::Relaxed);
    HANDLER_PREEMPTED.store(0, Ordering::Relaxed);
    let start = SysTickClock.now();
    let end = start + CONTENTION_SECONDS * CORE_HZ;
    let mut noise = XorShift32(0x2545_f491);
    let mut main_grants = 0u64;
    let mut checks = 0u64;
    let mut exceeded = 0u64;
    let mut backwards = 0u64;
    let mut last = start;
    let (mut total, mut bound);
    CONTENDING.store(which, Ordering::Relaxed);
    loop {
        MAIN_ACQUIRING.store(true, Ordering::Relaxed);
        // Keeps the flag's stores on either side of the call, where the handler must see them.
        compiler_fence(Ordering::SeqCst);
        let granted = shared.try_acquire(1).is_ok();
        compiler_fence(Ordering::SeqCst);
        MAIN_ACQUIRING.store(false, Ordering::Relaxed);
        main_grants += u64::from(granted);

        total = main_grants + u64::from(HANDLER_GRANTS.load(Ordering::Relaxed));
        let now = SysTickClock.now();
        if now < last {
            backwards += 1;
        }
        last = now;
        bound = SHARED_BURST + SHARED_RATE * (now - start) / CORE_HZ;
        checks += 1;
        if total > bound {
            exceeded += 1;
        }
        if now >= end {
            break;
        }
        // Up to a period's pause, so that the handler wins its share of the tokens.
        systick::wait_until(now + u64::from(noise.next()) % PERIOD_TICKS);
    }
    CONTENDING.store(CONTEND_NONE, Ordering::Relaxed);
    let handler_grants = u64::from(HANDLER_GRANTS.load(Ordering::Relaxed));
    let attempts = HANDLER_ATTEMPTS.load(Ordering::Relaxed);
    let preempted = HANDLER_PREEMPTED.load(Ordering::Relaxed);

    hprintln!(
        "granted {} (main loop {}, SysTick handler {} of {} attempts); bound at the end {} = {} + {}/s x {} s",
        total,
        main_grants,
        handler_grants,
        attempts,
        bound,
        SHARED_BURST,
        SHARED_RATE,
        Seconds(last - start)
    );
    let never_exceeded = exceeded == 0;
    hprintln!(
        "grants <= burst + rate x elapsed: checked {} times, exceeded {} times: {}",
        checks,
        exceeded,
        verdict(never_exceeded)
    );
    // Both sides always want more than the rate, so the bucket should hand out all it has.
    let all_handed_out = total + 2 >= bound;
    hprintln!(
        "every token accrued was granted (within 2 of the bound): {}",
        verdict(all_handed_out)
    );
    let contended = handler_grants > 0 && main_grants > 0 && preempted > 0;
    hprintln!(
        "the handler interrupted the main loop's try_acquire {} times: {}",
        preempted,
        verdict(contended)
    );
    let monotonic = backwards == 0;
    hprintln!(
        "clock read {} times by the main loop, never backwards: {}",
        checks,
        verdict(monotonic)
    );
    let ok = never_exceeded && all_handed_out && contended && monotonic;
    hprintln!("contention, {}: {}", word, verdict(ok));
    ok
}

/// Four CAN ids fill the table's four slots, each with its own burst; a fifth id is refused while
/// every bucket is in use, and takes the slot of a bucket that has refilled (a full bucket is the
/// same as an absent one, so evicting it changes no decision).
fn keyed_table() -> bool {
    hprintln!();
    hprintln!(
        "== Per CAN id: a table of {} slots, {} each",
        PER_ID.capacity(),
        PER_ID.quota()
    );
    let mut ok = true;
    for id in [0x100u16, 0x101, 0x102, 0x103] {
        let burst = PER_ID.try_acquire(id, 2);
        let third = PER_ID.try_acquire(id, 1);
        let fine =
            burst.is_ok() && matches!(third, Err(KeyedDenied::Denied(Denied::Insufficient { .. })));
        hprintln!(
            "id {:#x}: two at once, the third denied: {}",
            id,
            verdict(fine)
        );
        ok &= fine;
    }
    let newcomer = PER_ID.try_acquire(0x200, 1);
    let fine = newcomer == Err(KeyedDenied::Full { capacity: 4 });
    hprintln!(
        "id 0x200 while every bucket is in use: {:?}: {}",
        newcomer,
        verdict(fine)
    );
    ok &= fine;
    // 200 ms later every bucket has refilled: one of them gives its slot to the newcomer.
    SysTickDelay.delay_ms(200);
    let newcomer = PER_ID.try_acquire(0x200, 1);
    let fine = newcomer.is_ok() && PER_ID.len() == 4;
    hprintln!(
        "id 0x200 once the buckets refilled: {:?}: {}",
        newcomer,
        verdict(fine)
    );
    ok &= fine;
    hprintln!("keyed table: {}", verdict(ok));
    ok
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "ok"
    } else {
        "FAILED"
    }
}

fn ticks_to_ns(ticks: u64) -> u64 {
    (u128::from(ticks) * 1_000_000_000 / u128::from(CORE_HZ)) as u64
}

/// Clock ticks as seconds with three decimals, rounded down.
struct Seconds(u64);

impl fmt::Display for Seconds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.0 * 1_000 / SysTickClock::TICKS_PER_SECOND;
        write!(f, "{}.{:03}", ms / 1_000, ms % 1_000)
    }
}

/// Nanoseconds as milliseconds with three decimals, rounded down.
struct Millis(u64);

impl fmt::Display for Millis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let us = self.0 / 1_000;
        write!(f, "{}.{:03}", us / 1_000, us % 1_000)
    }
}

/// A small deterministic noise source for the main loop's pauses.
struct XorShift32(u32);

impl XorShift32 {
    fn next(&mut self) -> u32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 17;
        self.0 ^= self.0 << 5;
        self.0
    }
}

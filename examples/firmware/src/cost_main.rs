// The body of the cost harness's two programs (`src/bin/cost_one.rs` and `cost_many.rs`), which
// differ only in `MANY`: whether each bucket's check has call sites besides the measured one.
// See `tollgate_firmware::cost` for how a figure is taken.

use core::hint::black_box;

use cortex_m_rt::entry;
use cortex_m_semihosting::{debug, hprintln};
use tollgate::{static_bucket, Quota, Rate, TokenBucket};
use tollgate_firmware::board::NAME;
use tollgate_firmware::cost::{
    advance_a_second, hundredths_per_call, start_counter, Hundredths, Naive, Virtual, BURST,
    CALLS, EXTRA_SITES, RATE_PER_SECOND,
};

const QUOTA: Quota = Quota::new(Rate::per_second(RATE_PER_SECOND)).burst(BURST);

// One bucket per case, each on a clock type of its own (see `tollgate_firmware::cost`): the
// quota folded into the code (`static_bucket!`), as a firmware declares a `static` bucket.
static_bucket! {
    static TG_GRANTED: TokenBucket<Virtual<0>, u32> = TokenBucket::new(QUOTA, Virtual);
}
static_bucket! {
    static TG_DENIED: TokenBucket<Virtual<1>, u32> = TokenBucket::new(QUOTA, Virtual);
}
static_bucket! {
    static TG_RETRY: TokenBucket<Virtual<2>, u32> = TokenBucket::new(QUOTA, Virtual);
}
// The same quota in a plain `static` bucket (`TokenBucket::new`), its layout stored beside its
// word: reported beside the others, with no bound (the bounds are for the folded one).
static PLAIN_GRANTED: TokenBucket<Virtual<9>, u32> =
    TokenBucket::<_, u32>::new_with_word(QUOTA, Virtual);
static PLAIN_DENIED: TokenBucket<Virtual<10>, u32> =
    TokenBucket::<_, u32>::new_with_word(QUOTA, Virtual);
static PLAIN_RETRY: TokenBucket<Virtual<11>, u32> =
    TokenBucket::<_, u32>::new_with_word(QUOTA, Virtual);
static NAIVE_GRANTED: Naive<Virtual<3>> = Naive::new(Virtual);
static NAIVE_DENIED: Naive<Virtual<4>> = Naive::new(Virtual);
static NAIVE_RETRY: Naive<Virtual<5>> = Naive::new(Virtual);
#[cfg(board = "lm3s6965evb")]
static_bucket! {
    static WIDE_GRANTED: TokenBucket<Virtual<6>, u64> = TokenBucket::new(QUOTA, Virtual);
}
#[cfg(board = "lm3s6965evb")]
static_bucket! {
    static WIDE_DENIED: TokenBucket<Virtual<7>, u64> = TokenBucket::new(QUOTA, Virtual);
}
#[cfg(board = "lm3s6965evb")]
static_bucket! {
    static WIDE_RETRY: TokenBucket<Virtual<8>, u64> = TokenBucket::new(QUOTA, Virtual);
}

// The measured loops: each returns how many of its calls were granted (or, reading
// `retry_after`, denied with a time to wait), which the harness checks.
macro_rules! granted {
    ($name:ident, $bucket:expr) => {
        #[inline(never)]
        fn $name(calls: u32) -> u32 {
            let mut granted = 0;
            for _ in 0..calls {
                advance_a_second();
                granted += u32::from(black_box($bucket.try_acquire(1).is_ok()));
            }
            granted
        }
    };
}
macro_rules! denied {
    ($name:ident, $bucket:expr) => {
        #[inline(never)]
        fn $name(calls: u32) -> u32 {
            // Emptied first (the granted cases move time on): time stands still from here.
            while $bucket.try_acquire(1).is_ok() {}
            let mut granted = 0;
            for _ in 0..calls {
                granted += u32::from(black_box($bucket.try_acquire(1).is_ok()));
            }
            granted
        }
    };
}
macro_rules! retry {
    ($name:ident, $bucket:expr) => {
        #[inline(never)]
        fn $name(calls: u32) -> u32 {
            while $bucket.try_acquire(1).is_ok() {}
            let mut waits = 0;
            for _ in 0..calls {
                let wait = $bucket.try_acquire(1).err().and_then(|d| d.retry_after());
                waits += u32::from(black_box(wait).is_some_and(|w| !w.is_zero()));
            }
            waits
        }
    };
}
macro_rules! naive_retry {
    ($name:ident, $bucket:expr) => {
        #[inline(never)]
        fn $name(calls: u32) -> u32 {
            while $bucket.try_acquire(1).is_ok() {}
            let mut waits = 0;
            for _ in 0..calls {
                let wait = $bucket.try_acquire(1).err().map(|d| d.retry_after());
                waits += u32::from(black_box(wait).is_some_and(|w| !w.is_zero()));
            }
            waits
        }
    };
}

granted!(tg_granted, TG_GRANTED);
denied!(tg_denied, TG_DENIED);
retry!(tg_retry, TG_RETRY);
granted!(plain_granted, PLAIN_GRANTED);
denied!(plain_denied, PLAIN_DENIED);
retry!(plain_retry, PLAIN_RETRY);
granted!(naive_granted, NAIVE_GRANTED);
denied!(naive_denied, NAIVE_DENIED);
naive_retry!(naive_retry, NAIVE_RETRY);
#[cfg(board = "lm3s6965evb")]
granted!(wide_granted, WIDE_GRANTED);
#[cfg(board = "lm3s6965evb")]
denied!(wide_denied, WIDE_DENIED);
#[cfg(board = "lm3s6965evb")]
retry!(wide_retry, WIDE_RETRY);

// The empty loops the cases are measured against: the same loop, the same clock moves and the
// same kind of value kept, without the check.
#[inline(never)]
fn empty_moving(calls: u32) -> u32 {
    let mut granted = 0;
    for _ in 0..calls {
        advance_a_second();
        granted += u32::from(black_box(true));
    }
    granted
}
#[inline(never)]
fn empty_still(calls: u32) -> u32 {
    let mut granted = 0;
    for _ in 0..calls {
        granted += u32::from(black_box(false));
    }
    granted
}
#[inline(never)]
fn empty_wait(calls: u32) -> u32 {
    let mut waits = 0;
    for _ in 0..calls {
        let wait = Some(core::time::Duration::from_nanos(u64::from(calls)));
        waits += u32::from(black_box(wait).is_some_and(|w| !w.is_zero()));
    }
    waits
}

/// The other call sites of each bucket's check in the many-call-site program: what an
/// application does elsewhere with the same bucket (a poll, a match on the denial, a bigger
/// request, a check in a loop). Run once, before the measurements.
#[inline(never)]
fn other_call_sites() {
    macro_rules! sites {
        ($bucket:expr) => {{
            black_box($bucket.try_acquire(1).is_ok());
            if let Err(denied) = $bucket.try_acquire(2) {
                black_box(denied);
            }
            black_box($bucket.try_acquire(black_box(1)).is_err());
            for n in 1..3 {
                black_box($bucket.try_acquire(n).is_ok());
            }
            black_box($bucket.try_acquire(3).is_ok());
        }};
    }
    if !MANY {
        return;
    }
    sites!(TG_GRANTED);
    sites!(TG_DENIED);
    sites!(TG_RETRY);
    sites!(PLAIN_GRANTED);
    sites!(PLAIN_DENIED);
    sites!(PLAIN_RETRY);
    sites!(NAIVE_GRANTED);
    sites!(NAIVE_DENIED);
    sites!(NAIVE_RETRY);
    #[cfg(board = "lm3s6965evb")]
    {
        sites!(WIDE_GRANTED);
        sites!(WIDE_DENIED);
        sites!(WIDE_RETRY);
    }
}
const _: () = assert!(EXTRA_SITES == 5, "other_call_sites has five per bucket");

/// One row: the three operations of one bucket beside the naive bucket's, each with its verdict
/// against the bound. Returns whether all three pass.
/// A measured loop and the count it must return.
type Case = (fn(u32) -> u32, u32);

fn row(name: &str, cases: [Case; 3], naive: &[u64; 3], bounded: bool) -> bool {
    const OPS: [&str; 3] = ["granted", "denied", "denied + retry_after"];
    // The bounds, in hundredths of the naive bucket's figure: 1.25 x, 1 x, 2 x.
    const BOUNDS: [u64; 3] = [125, 100, 200];
    let empties: [fn(u32) -> u32; 3] = [empty_moving, empty_still, empty_wait];
    let mut ok = true;
    for i in 0..3 {
        let (case, expected) = cases[i];
        let counted = case(CALLS);
        let figure = hundredths_per_call(case, empties[i]);
        let bound = naive[i] * BOUNDS[i] / 100;
        let pass = counted == expected && (figure <= bound || !bounded);
        ok &= pass;
        hprintln!(
            "{:<18} {:<22} {:>7} naive {:>7}  ratio {:>5}  bound {:>7}  {}{}",
            name,
            OPS[i],
            Hundredths(figure),
            Hundredths(naive[i]),
            Hundredths(figure * 100 / naive[i].max(1)),
            Hundredths(bound),
            match (pass, bounded) {
                (false, _) => "FAIL",
                (true, true) => "PASS",
                (true, false) => "(no bound)",
            },
            if counted == expected { "" } else { " (the case did not run as meant)" }
        );
    }
    ok
}

#[entry]
fn main() -> ! {
    let Some(mut core) = cortex_m::Peripherals::take() else {
        debug::exit(debug::EXIT_FAILURE);
        loop {
        cortex_m::asm::wfi();
    }
    };
    start_counter(&mut core.SYST);
    other_call_sites();
    hprintln!(
        "cost on {}: {} call site{} per bucket, {}, instructions per call (-icount shift=0)",
        NAME,
        if MANY { 1 + EXTRA_SITES } else { 1 },
        if MANY { "s" } else { "" },
        QUOTA
    );
    let naive_cases: [Case; 3] = [(naive_granted, CALLS), (naive_denied, 0), (naive_retry, CALLS)];
    let mut naive = [0; 3];
    let empties: [fn(u32) -> u32; 3] = [empty_moving, empty_still, empty_wait];
    let mut naive_ok = true;
    for i in 0..3 {
        naive_ok &= naive_cases[i].0(CALLS) == naive_cases[i].1;
        naive[i] = hundredths_per_call(naive_cases[i].0, empties[i]);
    }
    let mut ok = naive_ok;
    if !naive_ok {
        hprintln!("the naive bucket did not run as meant: FAIL");
    }
    ok &= row(
        "static_bucket!",
        [(tg_granted, CALLS), (tg_denied, 0), (tg_retry, CALLS)],
        &naive,
        true,
    );
    #[cfg(board = "lm3s6965evb")]
    {
        ok &= row(
            "static_bucket! u64",
            [(wide_granted, CALLS), (wide_denied, 0), (wide_retry, CALLS)],
            &naive,
            true,
        );
    }
    ok &= row(
        "TokenBucket::new",
        [(plain_granted, CALLS), (plain_denied, 0), (plain_retry, CALLS)],
        &naive,
        false,
    );
    if ok {
        hprintln!("cost: PASS");
        debug::exit(debug::EXIT_SUCCESS);
    } else {
        hprintln!("cost: FAIL");
        debug::exit(debug::EXIT_FAILURE);
    }
    loop {
        cortex_m::asm::wfi();
    }
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo) -> ! {
    hprintln!("panic: {}", info);
    debug::exit(debug::EXIT_FAILURE);
    loop {
        cortex_m::asm::wfi();
    }
}

//! Hostile input: configurations that make no sense, requests at the limits of their types, and
//! clocks that lie. Each gets a clear error or stays within its bound: never a panic, a hang or
//! an extra token. These run in debug builds too, where every non-wrapping operation in the
//! library is overflow-checked, so an overflow would show here as a panic.

use std::cell::Cell;
use std::time::Duration;

use tollgate::{Clock, ConfigError, Denied, ManualClock, Quota, Rate, TokenBucket};

/// One token every 10 ns on a nanosecond clock: the word then counts exactly one unit per tick,
/// so "time the clock showed" below is plain nanoseconds.
const FAST: Rate = Rate::per_second(100_000_000);
const TOKEN_NS: u64 = 10;

fn refused(quota: Quota) -> (ConfigError, ConfigError, String) {
    let clock = ManualClock::new();
    let wide = TokenBucket::try_new(quota, &clock).unwrap_err();
    let narrow = TokenBucket::<_, u32>::try_new_with_word(quota, &clock).unwrap_err();
    (wide, narrow, wide.to_string())
}

/// The `const` constructor refuses the same quotas with a panic carrying the same message (a
/// compile error when the bucket is a `static`).
fn const_constructor_panics_with(quota: Quota, message: &str) {
    let panic = std::panic::catch_unwind(|| TokenBucket::new(quota, ManualClock::new()))
        .expect_err("a bad quota was accepted");
    let text = panic.downcast_ref::<String>().unwrap();
    assert!(text.starts_with(message), "{text}");
}

#[test]
fn a_zero_rate_is_refused() {
    let quota = Quota::new(Rate::per_second(0));
    let (wide, narrow, text) = refused(quota);
    assert_eq!(
        (wide, narrow),
        (ConfigError::ZeroRate, ConfigError::ZeroRate)
    );
    assert_eq!(text, "rate is zero");
    const_constructor_panics_with(quota, "rate is zero");
}

#[test]
fn a_zero_period_is_refused() {
    let quota = Quota::new(Rate::new(5, Duration::ZERO));
    let (wide, narrow, text) = refused(quota);
    assert_eq!(
        (wide, narrow),
        (ConfigError::ZeroPeriod, ConfigError::ZeroPeriod)
    );
    assert_eq!(text, "rate period is zero");
    const_constructor_panics_with(quota, "rate period is zero");
}

#[test]
fn a_zero_burst_is_refused() {
    let quota = Quota::new(Rate::per_second(5)).burst(0);
    let (wide, narrow, text) = refused(quota);
    assert_eq!(
        (wide, narrow),
        (ConfigError::ZeroBurst, ConfigError::ZeroBurst)
    );
    assert_eq!(text, "burst is zero");
    const_constructor_panics_with(quota, "burst is zero");
}

#[test]
fn a_start_above_the_burst_is_refused() {
    let quota = Quota::new(Rate::per_second(5)).burst(5).start_with(6);
    let (wide, narrow, text) = refused(quota);
    let error = ConfigError::StartAboveBurst { start: 6, burst: 5 };
    assert_eq!((wide, narrow), (error, error));
    assert_eq!(text, "start fill is above the burst (6 > 5)");
    const_constructor_panics_with(quota, "start fill is above the burst");
}

#[test]
fn a_clock_with_no_ticks_is_refused() {
    #[derive(Debug)]
    struct Frozen;
    impl Clock for Frozen {
        const TICKS_PER_SECOND: u64 = 0;
        fn now(&self) -> u64 {
            0
        }
    }
    let quota = Quota::new(Rate::per_second(5));
    let error = TokenBucket::try_new(quota, Frozen).unwrap_err();
    assert_eq!(error, ConfigError::ZeroClockFrequency);
}

#[test]
fn u32_max_tokens_is_refused_at_once_by_a_smaller_bucket() {
    let clock = ManualClock::new();
    let bucket = TokenBucket::try_new(Quota::new(Rate::per_second(5)), &clock).unwrap();
    let too_many = Denied::ExceedsCapacity { burst: 5 };
    assert_eq!(bucket.try_acquire(u32::MAX), Err(too_many));
    assert_eq!(bucket.reserve(u32::MAX, Duration::MAX), Err(too_many));
    assert_eq!(too_many.retry_after(), None);
    // Nothing was taken.
    assert_eq!(bucket.available(), 5);

    let small =
        TokenBucket::<_, u32>::try_new_with_word(Quota::new(Rate::per_second(5)), &clock).unwrap();
    assert_eq!(small.try_acquire(u32::MAX), Err(too_many));
    assert_eq!(small.reserve(u32::MAX, Duration::MAX), Err(too_many));
    assert_eq!(small.available(), 5);
}

#[test]
fn u32_max_tokens_is_served_exactly_by_a_bucket_that_holds_them() {
    let clock = ManualClock::new();
    let burst = u32::MAX as u64;
    // A billion tokens a second: u32::MAX of them accrue in 4.29 s.
    let quota = Quota::new(Rate::per_second(1_000_000_000)).burst(burst);
    let bucket = TokenBucket::try_new(quota, &clock).unwrap();
    assert_eq!(bucket.try_acquire(u32::MAX), Ok(()));
    assert_eq!(bucket.available(), 0);
    let refill = Duration::from_nanos(burst);
    assert_eq!(
        bucket.try_acquire(u32::MAX),
        Err(Denied::insufficient(refill))
    );
    let reservation = bucket.reserve(u32::MAX, Duration::MAX).unwrap();
    assert_eq!(reservation.wait(), refill);
    assert_eq!(reservation.due_ticks(), burst);
    // It is owed until then: nothing more until twice the refill.
    clock.advance(refill);
    assert_eq!(
        bucket.try_acquire(1),
        Err(Denied::insufficient(Duration::from_nanos(1)))
    );
    clock.advance(refill);
    assert_eq!(bucket.try_acquire(u32::MAX), Ok(()));

    // The 32-bit word cannot hold such a burst: an error, not a wrong limit.
    assert_eq!(
        TokenBucket::<_, u32>::try_new_with_word(quota, &clock).unwrap_err(),
        ConfigError::Unrepresentable
    );
}

/// Reserves `n` with `Duration::MAX` until the bucket refuses; checks that no reservation is due
/// before its tokens have accrued, and that the refusal says when the call would succeed.
fn reserve_forever<W: tollgate::Word>(
    bucket: &TokenBucket<&ManualClock, W>,
    n: u32,
    clock: &ManualClock,
    token_ns: u128,
    limit: usize,
) -> usize {
    let start_ns = clock.now() as u128;
    let burst = bucket.quota().burst_size() as u128;
    let mut reserved: u128 = 0;
    for made in 0..limit {
        match bucket.reserve(n, Duration::MAX) {
            Ok(reservation) => {
                reserved += n as u128;
                // The tokens reserved so far had all accrued by this one's due instant.
                let due_ns = start_ns + reservation.wait().as_nanos();
                assert!(
                    reserved.saturating_sub(burst) * token_ns <= due_ns - start_ns,
                    "reservation {made} due too early: {reservation:?}"
                );
            }
            Err(Denied::Insufficient { retry_after }) => {
                // Refused for exceeding the debt bound, which is far away but not infinitely.
                assert!(retry_after.get() > Duration::ZERO);
                assert!(retry_after.get() < Duration::from_secs(1 << 40));
                return made;
            }
            Err(other) => panic!("{other:?}"),
        }
    }
    panic!("{limit} reservations of {n} and no refusal: the debt is unbounded");
}

#[test]
fn an_unbounded_wait_still_meets_the_debt_bound() {
    // One token a day, 50 000 in the bucket: a reservation of all of them runs 137 years into
    // debt, and the word allows about 146, so the second one is refused.
    let clock = ManualClock::new();
    let quota = Quota::new(Rate::per_day(1)).burst(50_000);
    let bucket = TokenBucket::try_new(quota, &clock).unwrap();
    let day_ns = 86_400 * 1_000_000_000;
    let made = reserve_forever(&bucket, 50_000, &clock, day_ns, 10);
    assert_eq!(made, 2, "the burst, then 137 years of debt");

    // The 32-bit word: ten a second, reservations of ten.
    let quota = Quota::new(Rate::per_second(10)).burst(10);
    let small = TokenBucket::<_, u32>::try_new_with_word(quota, &clock).unwrap();
    let made = reserve_forever(&small, 10, &clock, 100_000_000, 100_000);
    assert!(made > 1, "{made}");
    // Deep in debt, `try_acquire` still answers, with the time the debt takes to clear.
    let Err(Denied::Insufficient { retry_after }) = small.try_acquire(1) else {
        panic!("granted out of debt");
    };
    assert!(retry_after.get() >= Duration::from_secs(made as u64 - 1));
}

/// A clock that returns what a xorshift generator says, and remembers its last answer.
struct RandomClock {
    state: Cell<u64>,
    last: Cell<u64>,
    /// Each reading is `base + (random % spread) - spread / 2`, and the base moves forward by
    /// up to `drift` per reading; `spread = 0` returns raw 64-bit random values.
    base: Cell<u64>,
    spread: u64,
    drift: u64,
}

impl RandomClock {
    fn new(seed: u64, spread: u64, drift: u64) -> Self {
        RandomClock {
            state: Cell::new(seed),
            last: Cell::new(0),
            base: Cell::new(1 << 40),
            spread,
            drift,
        }
    }

    fn random(&self) -> u64 {
        let mut x = self.state.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.state.set(x);
        x
    }
}

impl Clock for RandomClock {
    const TICKS_PER_SECOND: u64 = 1_000_000_000;
    fn now(&self) -> u64 {
        let value = if self.spread == 0 {
            self.random()
        } else {
            let base = self.base.get() + self.random() % (self.drift + 1);
            self.base.set(base);
            base + self.random() % self.spread - self.spread / 2
        };
        self.last.set(value);
        value
    }
}

/// The clock's step from `from` to `to` as the word reads it: two's complement, so a step of
/// more than 2^63 ticks forward reads as a step back, exactly as a clock wrapping at u64::MAX.
fn forward_span(from: u64, to: u64) -> u64 {
    (to.wrapping_sub(from) as i64).max(0) as u64
}

/// A clock returning random 64-bit values. The honest bound: the bucket credits time only
/// between the clock readings at which it granted, once, read as a signed step, and never more
/// than a burst of it. So with `t_0` the reading at construction and `t_1, t_2, …` the readings
/// at which tokens were granted,
///
///   tokens granted × 10 ns <= start fill × 10 ns + Σ min(burst × 10 ns, forward_span(t_(k-1), t_k)).
///
/// It cannot be "the largest forward span the clock showed" alone: random readings go round
/// the 64-bit circle again and again, each forward step of less than 2^63 ticks is time elapsed
/// for a clock that may wrap, and it may refill the bucket. What the bucket must not do is
/// credit a backward step, or the same span twice, or more than a burst at once: the bound
/// above, checked after every grant, says exactly that.
#[test]
fn a_random_clock_credits_no_time_twice() {
    for seed in [1, 0x9E37_79B9_7F4A_7C15, 0xDEAD_BEEF] {
        let clock = RandomClock::new(seed, 0, 0);
        let quota = Quota::new(FAST).burst(20).start_with(7);
        let bucket = TokenBucket::try_new(quota, &clock).unwrap();
        assert_eq!(bucket.resolution(), Duration::from_nanos(1));
        let mut last_grant = clock.last.get();
        let mut credit_ns: u128 = 7 * TOKEN_NS as u128;
        let mut granted: u128 = 0;
        for i in 0..20_000u32 {
            // Mostly the whole burst, so that the bound is tight; some smaller, some above it.
            let n = [20, 20, 20, 20, 13, 25, 0][i as usize % 7];
            match bucket.try_acquire(n) {
                Ok(()) if n > 0 => {
                    let now = clock.last.get();
                    credit_ns += forward_span(last_grant, now).min(20 * TOKEN_NS) as u128;
                    last_grant = now;
                    granted += n as u128;
                    assert!(
                        granted * TOKEN_NS as u128 <= credit_ns,
                        "seed {seed:x}, call {i}: {granted} tokens for {credit_ns} ns"
                    );
                }
                Ok(()) => {}
                Err(Denied::ExceedsCapacity { burst }) => assert!(n as u64 > burst),
                Err(Denied::Insufficient { retry_after }) => {
                    // At most half the word: the furthest behind the word can read a reading.
                    assert!(
                        retry_after.get().as_nanos() <= (1 << 63) + 250,
                        "{retry_after:?}"
                    );
                }
                Err(other) => panic!("{other:?}"),
            }
            assert!(bucket.available() <= 20);
        }
        // Tight, not vacuous: the grants come to over 85 % of the bound (93 % with these seeds).
        assert!(
            granted * TOKEN_NS as u128 * 100 >= credit_ns * 85,
            "seed {seed:x}: {granted} tokens for {credit_ns} ns"
        );
    }
}

/// Every operation on a random clock, reservations and cancels among them: nothing panics or
/// hangs, the bucket never reads above its burst, and each reservation waits no longer than
/// it was allowed to.
#[test]
fn every_operation_survives_a_random_clock() {
    let clock = RandomClock::new(0x0123_4567_89AB_CDEF, 0, 0);
    let quota = Quota::new(Rate::per_minute(171)).burst(9);
    let bucket = TokenBucket::try_new(quota, &clock).unwrap();
    let narrow = TokenBucket::<_, u32>::try_new_with_word(quota, &clock).unwrap();
    let mut held = [Vec::new(), Vec::new()];
    for i in 0..20_000u64 {
        let r = clock.random();
        let n = (r % 12) as u32;
        let max_wait = match r % 4 {
            0 => Duration::ZERO,
            1 => Duration::from_nanos(r >> 20),
            2 => Duration::from_secs(r >> 8),
            _ => Duration::MAX,
        };
        for (bucket, held) in [&bucket as &dyn Ops, &narrow].into_iter().zip(&mut held) {
            let _ = bucket.try_acquire(n);
            if let Ok(reservation) = bucket.reserve(n, max_wait) {
                assert!(reservation.wait() <= max_wait);
                held.push(reservation);
            }
            if i % 3 == 0 {
                if let Some(reservation) = held.pop() {
                    bucket.cancel(reservation);
                }
            }
            if i % 7 == 0 {
                bucket.touch();
            }
            assert!(bucket.available() <= 9);
        }
    }
}

/// The operations of buckets on either word, so one loop drives both.
trait Ops {
    fn try_acquire(&self, n: u32) -> Result<(), Denied>;
    fn reserve(&self, n: u32, max_wait: Duration) -> Result<tollgate::Reservation, Denied>;
    fn cancel(&self, reservation: tollgate::Reservation);
    fn touch(&self);
    fn available(&self) -> u64;
}

impl<C: Clock, W: tollgate::Word> Ops for TokenBucket<C, W> {
    fn try_acquire(&self, n: u32) -> Result<(), Denied> {
        TokenBucket::try_acquire(self, n)
    }
    fn reserve(&self, n: u32, max_wait: Duration) -> Result<tollgate::Reservation, Denied> {
        TokenBucket::reserve(self, n, max_wait)
    }
    fn cancel(&self, reservation: tollgate::Reservation) {
        TokenBucket::cancel(self, reservation)
    }
    fn touch(&self) {
        TokenBucket::touch(self)
    }
    fn available(&self) -> u64 {
        TokenBucket::available(self)
    }
}

/// A clock that jitters: each reading lands up to 100 ns either side of a base that creeps
/// forward 15 ns a reading on average, so it steps back about every other reading. A bucket that credited each forward
/// step would mint on every back-and-forth; this one credits only the time beyond the furthest
/// point it has granted up to, so with `t_0` the reading at construction:
///
///   tokens granted × 10 ns <= start fill × 10 ns + (latest instant any grant is due at − t_0)
///
/// where a grant from `try_acquire` is due at the reading it was made at, and a reservation at
/// its due tick.
#[test]
fn a_jittering_clock_mints_nothing() {
    let clock = RandomClock::new(0x5EED, 200, 30);
    let quota = Quota::new(FAST).burst(50);
    let bucket = TokenBucket::try_new(quota, &clock).unwrap();
    let t0 = clock.last.get();
    let mut latest = t0;
    let mut granted: u64 = 0;
    for i in 0..100_000u32 {
        let n = 1 + i % 3;
        if i % 2 == 0 {
            if bucket.try_acquire(n).is_ok() {
                granted += n as u64;
                latest = latest.max(clock.last.get());
            }
        } else if let Ok(reservation) = bucket.reserve(n, Duration::from_nanos(200)) {
            granted += n as u64;
            latest = latest.max(reservation.due_ticks());
        }
        assert!(
            granted * TOKEN_NS <= 50 * TOKEN_NS + (latest - t0),
            "call {i}: {granted} tokens by {} ns",
            latest - t0
        );
    }
    // The bound is tight, not vacuous: the bucket kept up with the clock.
    assert!(
        granted * TOKEN_NS * 10 >= (latest - t0) * 9,
        "{granted} tokens by {} ns",
        latest - t0
    );
}

/// A clock stuck at the last tick it can show: the burst is granted once, and after that every
/// call answers at once with the same retry time, on both words and on a quantized rate.
#[test]
fn a_clock_stuck_at_u64_max_grants_the_burst_once() {
    struct Stuck;
    impl Clock for Stuck {
        const TICKS_PER_SECOND: u64 = 1_000_000_000;
        fn now(&self) -> u64 {
            u64::MAX
        }
    }
    fn check<W: tollgate::Word>(bucket: &TokenBucket<Stuck, W>, token: Duration) {
        let burst = bucket.quota().burst_size() as u32;
        assert_eq!(bucket.available(), burst as u64);
        assert_eq!(bucket.try_acquire(burst), Ok(()));
        for _ in 0..1_000 {
            let Err(Denied::Insufficient { retry_after }) = bucket.try_acquire(1) else {
                panic!("a token from a clock that never moves");
            };
            // One token's time, read to the bucket's resolution.
            assert!(
                retry_after.get().abs_diff(token) <= bucket.resolution(),
                "{retry_after:?}"
            );
            assert_eq!(bucket.available(), 0);
            bucket.touch();
        }
        let reservation = bucket.reserve(1, Duration::MAX).unwrap();
        assert!(reservation.wait().abs_diff(token) <= bucket.resolution());
        assert_eq!(
            reservation.due_ticks(),
            (reservation.wait().as_nanos() as u64).wrapping_add(u64::MAX)
        );
        bucket.cancel(reservation);
        assert_eq!(bucket.available(), 0);
    }
    let fast = Quota::new(FAST).burst(5);
    let token = Duration::from_nanos(TOKEN_NS);
    check(&TokenBucket::try_new(fast, Stuck).unwrap(), token);
    check(&TokenBucket::new(fast, Stuck), token);
    check(
        &TokenBucket::<_, u32>::try_new_with_word(fast, Stuck).unwrap(),
        token,
    );
    // 171 a minute is read to 32 ns on the 64-bit word.
    let odd = Quota::new(Rate::per_minute(171)).burst(3);
    let token = Duration::from_nanos(60_000_000_000 / 171 + 1);
    check(&TokenBucket::try_new(odd, Stuck).unwrap(), token);
    check(
        &TokenBucket::<_, u32>::try_new_with_word(odd, Stuck).unwrap(),
        token,
    );
}

/// A clock that wraps at u64::MAX, as a hardware counter does, loses and mints nothing.
#[test]
fn a_wrapping_clock_grants_exactly_the_rate() {
    let clock = ManualClock::starting_at(u64::MAX - 1_000);
    let bucket = TokenBucket::try_new(Quota::new(FAST).burst(4).start_empty(), &clock).unwrap();
    let mut granted = 0;
    for _ in 0..400 {
        clock.advance(Duration::from_nanos(5));
        while bucket.try_acquire(1).is_ok() {
            granted += 1;
        }
    }
    // 2 000 ns across the wrap: exactly 200 tokens.
    assert_eq!(granted, 200);
}

/// A 32-bit word left idle past its horizon reads full again, but for a sliver of each turn of
/// its ring where it reads at most two bursts in debt, never fuller than it is; `touch` within
/// the horizon keeps it exact.
#[test]
fn an_idle_32_bit_word_past_its_horizon_reads_full_or_briefly_owes_two_bursts() {
    let clock = ManualClock::new();
    let quota = Quota::new(Rate::per_second(10)).burst(10);
    let bucket = TokenBucket::<_, u32>::try_new_with_word(quota, &clock).unwrap();
    let horizon = bucket.idle_horizon();
    assert!(horizon >= Duration::from_secs(3_600), "{horizon:?}");
    assert_eq!(bucket.try_acquire(10), Ok(()));

    // Exactly at the horizon it is full, and a touch there keeps it so for another.
    clock.advance(horizon);
    assert_eq!(bucket.available(), 10);
    bucket.touch();
    clock.advance(horizon);
    assert_eq!(bucket.available(), 10);

    // Wherever an idle span ends, no more than the burst comes out at once, and a denial never
    // asks for more than three bursts' refill (3 s).
    let mut misread = 0;
    let spans = 4_000u32;
    for i in 1..=spans {
        clock.advance(horizon / 97 * (i % 211));
        match bucket.try_acquire(10) {
            Ok(()) => {}
            Err(Denied::Insufficient { retry_after }) => {
                misread += 1;
                assert!(
                    retry_after.get() <= Duration::from_secs(3),
                    "{retry_after:?}"
                );
                clock.advance(retry_after.get());
                assert_eq!(bucket.try_acquire(10), Ok(()));
            }
            Err(other) => panic!("{other:?}"),
        }
        assert!(
            bucket.try_acquire(1).is_err(),
            "more than the burst at once"
        );
    }
    assert!(
        misread * 100 <= spans,
        "{misread} of {spans} idle spans misread"
    );
}

//! The async waits without a heap, on embassy-time's mock driver: arrival order, one wake per
//! turn, a request above the burst failing at once, giving up leaving the bucket as if the
//! waiter had never queued, goodput at the rate under 2× overload with callers giving up, and
//! the line's bound. Time moves only when a test advances the mock driver; the executor is the
//! small one below, which counts every poll. The waits are called through the trait, as a
//! build that also enables `tokio` (whose inherent `acquire` would win) must.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Wake, Waker};
use std::time::Duration;

use embassy_time::MockDriver;
use tollgate::wait::{waiters_in_line, EmbassyWait, LINE_CAPACITY};
use tollgate::{
    Denied, EmbassyClock, KeyedDenied, KeyedTable, Limits, ManualClock, Quota, Rate, TokenBucket,
    WhenFull,
};

/// The mock driver and the line are process-wide: one test at a time.
fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    let guard = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    MockDriver::get().reset();
    // What the line learnt of an earlier test's timers.
    tollgate::wait::forget_timer_lateness();
    guard
}

fn advance(d: Duration) {
    MockDriver::get().advance(embassy_time::Duration::from_nanos(d.as_nanos() as u64));
}

fn now() -> Duration {
    Duration::from_micros(embassy_time::Instant::now().as_micros())
}

type Task<'a> = Pin<Box<dyn Future<Output = ()> + 'a>>;

struct Flag(std::sync::atomic::AtomicBool);
impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// Tasks polled when woken, each poll counted.
struct Executor<'a> {
    tasks: Vec<(Option<Task<'a>>, Arc<Flag>, usize)>,
}

impl<'a> Executor<'a> {
    fn new() -> Self {
        Self { tasks: Vec::new() }
    }
    fn spawn(&mut self, task: impl Future<Output = ()> + 'a) -> usize {
        let flag = Arc::new(Flag(true.into()));
        self.tasks.push((Some(Box::pin(task)), flag, 0));
        self.tasks.len() - 1
    }
    /// Drops task `i`'s future (a caller giving up).
    fn cancel(&mut self, i: usize) {
        self.tasks[i].0 = None;
    }
    /// Polls woken tasks until none is.
    fn run(&mut self) {
        loop {
            let mut polled = false;
            for i in 0..self.tasks.len() {
                polled |= self.poll_woken(i);
            }
            if !polled {
                return;
            }
        }
    }
    /// Polls task `i` alone, if it is woken: an executor owes woken tasks no order.
    fn run_one(&mut self, i: usize) {
        self.poll_woken(i);
    }
    /// Polls task `i` if it is woken; whether it was.
    fn poll_woken(&mut self, i: usize) -> bool {
        let (task, flag, polls) = &mut self.tasks[i];
        if task.is_none() || !flag.0.swap(false, Ordering::SeqCst) {
            return false;
        }
        *polls += 1;
        let waker = Waker::from(flag.clone());
        let mut cx = Context::from_waker(&waker);
        if task.as_mut().unwrap().as_mut().poll(&mut cx).is_ready() {
            *task = None;
        }
        true
    }
    fn polls(&self, i: usize) -> usize {
        self.tasks[i].2
    }
    fn done(&self, i: usize) -> bool {
        self.tasks[i].0.is_none()
    }
}

fn bucket(per_second: u64, burst: u64) -> TokenBucket<EmbassyClock> {
    let quota = Quota::new(Rate::per_second(per_second))
        .burst(burst)
        .start_empty();
    TokenBucket::try_new(quota, EmbassyClock).unwrap()
}

#[test]
fn waiters_are_served_in_arrival_order_each_woken_once_for_its_turn() {
    let _serial = serial();
    let gate = bucket(10, 1);
    let served = Mutex::new(Vec::new());
    let mut ex = Executor::new();
    for name in 0..5 {
        let (gate, served) = (&gate, &served);
        ex.spawn(async move {
            let waited = EmbassyWait::acquire(gate, 1).await.unwrap();
            served.lock().unwrap().push((name, now(), waited));
        });
    }
    ex.run();
    for _ in 0..5 {
        advance(Duration::from_millis(100));
        ex.run();
    }
    let ms = Duration::from_millis;
    assert_eq!(
        *served.lock().unwrap(),
        [
            (0, ms(100), ms(100)),
            (1, ms(200), ms(200)),
            (2, ms(300), ms(300)),
            (3, ms(400), ms(400)),
            (4, ms(500), ms(500)),
        ]
    );
    // Each waiter: its first poll, and its own timer at its estimate, when it heads the line
    // with its token due. Never woken by another's turn or timer.
    for i in 0..5 {
        assert_eq!(ex.polls(i), 2, "waiter {i}");
    }
    assert_eq!(waiters_in_line(), 0);
}

#[test]
fn a_request_above_the_burst_fails_at_once_and_joins_no_line() {
    let _serial = serial();
    let gate = bucket(10, 5);
    let result = Mutex::new(None);
    let mut ex = Executor::new();
    let (g, r) = (&gate, &result);
    let task = ex.spawn(async move {
        *r.lock().unwrap() = Some(EmbassyWait::acquire(g, 6).await);
    });
    ex.run();
    assert!(ex.done(task));
    assert_eq!(ex.polls(task), 1);
    assert_eq!(
        result.lock().unwrap().take(),
        Some(Err(Denied::ExceedsCapacity { burst: 5 }))
    );
    assert_eq!(waiters_in_line(), 0);
}

#[test]
fn timeouts_fail_at_once_when_the_tokens_come_too_late_and_take_nothing() {
    let _serial = serial();
    let gate = bucket(5, 5);
    let results = Mutex::new(Vec::new());
    let mut ex = Executor::new();
    let (g, r) = (&gate, &results);
    ex.spawn(async move {
        let first = EmbassyWait::acquire_timeout(g, 5, Duration::from_millis(400)).await;
        r.lock().unwrap().push((now(), first));
        let second = EmbassyWait::acquire_timeout(g, 2, Duration::from_millis(400)).await;
        r.lock().unwrap().push((now(), second));
    });
    ex.run();
    for _ in 0..4 {
        advance(Duration::from_millis(100));
        ex.run();
    }
    let ms = Duration::from_millis;
    assert_eq!(
        *results.lock().unwrap(),
        [
            (ms(0), Err(Denied::insufficient(ms(600)))),
            (ms(400), Ok(ms(400))),
        ]
    );
}

#[test]
fn a_wait_given_up_leaves_the_bucket_as_if_it_had_never_queued() {
    let _serial = serial();
    // Rows: which of three waiters give up (dropped at 50 ms, or timing out at 50 ms), and
    // when each of the others is served: as if those had never come.
    let ms = Duration::from_millis;
    for (dropped, timed_out, expected) in [
        (vec![0], vec![], vec![(1, ms(100)), (2, ms(200))]),
        (vec![1], vec![], vec![(0, ms(100)), (2, ms(200))]),
        (vec![], vec![0], vec![(1, ms(100)), (2, ms(200))]),
        (vec![], vec![1], vec![(0, ms(100)), (2, ms(200))]),
        (vec![0], vec![1], vec![(2, ms(100))]),
    ] {
        MockDriver::get().reset();
        let gate = bucket(10, 1);
        let served = Mutex::new(Vec::new());
        let mut ex = Executor::new();
        for name in 0..3 {
            let (gate, served) = (&gate, &served);
            let patience = if timed_out.contains(&name) {
                ms(50)
            } else {
                ms(10_000)
            };
            ex.spawn(async move {
                if EmbassyWait::acquire_timeout(gate, 1, patience)
                    .await
                    .is_ok()
                {
                    served.lock().unwrap().push((name, now()));
                }
            });
        }
        ex.run();
        advance(ms(50));
        for &i in &dropped {
            ex.cancel(i);
        }
        ex.run();
        for _ in 0..4 {
            advance(ms(50));
            ex.run();
        }
        assert_eq!(
            *served.lock().unwrap(),
            expected,
            "dropped {dropped:?} timed out {timed_out:?}"
        );
        assert_eq!(waiters_in_line(), 0);
    }
}

#[test]
fn goodput_stays_at_the_rate_under_double_overload_with_callers_giving_up() {
    let _serial = serial();
    // 10 a second asked for at 20 a second, each caller giving up after 300 ms, for 20 s.
    let gate = bucket(10, 2);
    let granted = AtomicUsize::new(0);
    let mut ex = Executor::new();
    let step = Duration::from_millis(50);
    let seconds = 20;
    for _ in 0..(seconds * 20) {
        let (gate, granted) = (&gate, &granted);
        ex.spawn(async move {
            if EmbassyWait::acquire_timeout(gate, 1, Duration::from_millis(300))
                .await
                .is_ok()
            {
                granted.fetch_add(1, Ordering::Relaxed);
            }
        });
        ex.run();
        advance(step);
        ex.run();
    }
    let elapsed = now().as_secs_f64();
    let granted = granted.load(Ordering::Relaxed) as f64;
    let bound = 2.0 + 10.0 * elapsed;
    println!(
        "granted {granted} in {elapsed} s: bound {bound}, goodput {:.3} of the rate",
        granted / (10.0 * elapsed)
    );
    assert!(granted <= bound, "{granted} above {bound}");
    assert!(
        granted >= 10.0 * elapsed - 1.0,
        "{granted}: goodput below the rate"
    );
}

#[test]
fn past_the_lines_bound_a_waiter_waits_unordered_and_still_takes_nothing_before_it_acts() {
    let _serial = serial();
    let gate = bucket(100, 1);
    let extra = 4;
    let served = Mutex::new(Vec::new());
    let mut ex = Executor::new();
    for name in 0..LINE_CAPACITY + extra {
        let (gate, served) = (&gate, &served);
        ex.spawn(async move {
            EmbassyWait::acquire(gate, 1).await.unwrap();
            served.lock().unwrap().push(name);
        });
    }
    ex.run();
    assert_eq!(waiters_in_line(), LINE_CAPACITY);
    let mut ticks = 0;
    while served.lock().unwrap().len() < LINE_CAPACITY + extra {
        advance(Duration::from_millis(10));
        ex.run();
        ticks += 1;
        assert!(
            ticks <= 2 * (LINE_CAPACITY + extra),
            "stuck: {:?}",
            served.lock().unwrap()
        );
        assert!(waiters_in_line() <= LINE_CAPACITY);
    }
    // Never more than the rate: one token per 10 ms.
    assert_eq!(
        now(),
        Duration::from_millis(10 * (LINE_CAPACITY + extra) as u64)
    );
    // Those in line kept their order among themselves.
    let in_line: Vec<_> = served
        .lock()
        .unwrap()
        .iter()
        .copied()
        .filter(|&n| n < LINE_CAPACITY)
        .collect();
    assert_eq!(in_line, (0..LINE_CAPACITY).collect::<Vec<_>>());
    assert_eq!(waiters_in_line(), 0);
}

#[test]
fn limits_wait_in_one_line_and_take_from_all_or_none() {
    let _serial = serial();
    let per_second = bucket(10, 1);
    let per_minute =
        TokenBucket::try_new(Quota::new(Rate::per_minute(3)).burst(3), EmbassyClock).unwrap();
    let both = Limits::new([&per_second, &per_minute]);
    let served = Mutex::new(Vec::new());
    let mut ex = Executor::new();
    for name in 0..4 {
        let (both, served) = (&both, &served);
        ex.spawn(async move {
            if EmbassyWait::acquire_timeout(both, [1, 1], Duration::from_secs(1))
                .await
                .is_ok()
            {
                served.lock().unwrap().push((name, now()));
            }
        });
    }
    ex.run();
    for _ in 0..12 {
        advance(Duration::from_millis(100));
        ex.run();
    }
    let ms = Duration::from_millis;
    // Three a minute: the fourth times out at 1 s; the per-minute bucket lost nothing to it.
    assert_eq!(
        *served.lock().unwrap(),
        [(0, ms(100)), (1, ms(200)), (2, ms(300))]
    );
    assert_eq!(per_minute.available(), 0);
    assert_eq!(waiters_in_line(), 0);
}

/// An async delay that moves a manual clock, as a test double for a HAL's timer.
struct Skip<'a>(&'a ManualClock);
impl embedded_hal_async::delay::DelayNs for Skip<'_> {
    async fn delay_ns(&mut self, ns: u32) {
        self.0.advance(Duration::from_nanos(ns.into()));
    }
}

#[test]
fn the_delay_ns_wait_sleeps_until_the_tokens_are_due() {
    let _serial = serial();
    let clock = ManualClock::new();
    let gate = TokenBucket::try_new(
        Quota::new(Rate::per_second(4)).burst(2).start_empty(),
        &clock,
    )
    .unwrap();
    let result = Mutex::new(Vec::new());
    let mut ex = Executor::new();
    let (g, r, c) = (&gate, &result, &clock);
    ex.spawn(async move {
        let mut delay = Skip(c);
        let first = g.acquire_with_async_delay(1, &mut delay).await;
        let second = g.acquire_with_async_delay(2, &mut delay).await;
        let above = g.acquire_with_async_delay(3, &mut delay).await;
        let late = g
            .acquire_timeout_with_async_delay(2, Duration::from_millis(100), &mut delay)
            .await;
        r.lock().unwrap().extend([first, second, above, late]);
    });
    ex.run();
    let ms = Duration::from_millis;
    assert_eq!(
        *result.lock().unwrap(),
        [
            Ok(ms(250)),
            Ok(ms(500)),
            Err(Denied::ExceedsCapacity { burst: 2 }),
            Err(Denied::insufficient(ms(400))),
        ]
    );
}

#[test]
fn a_keyed_tables_waits_line_up_per_key_and_a_full_table_fails_at_once() {
    let _serial = serial();
    let quota = Quota::new(Rate::per_second(10)).burst(1).start_empty();
    let table: KeyedTable<u16, EmbassyClock, 2> =
        KeyedTable::try_new(quota, EmbassyClock, WhenFull::Refuse).unwrap();
    let served = Mutex::new(Vec::new());
    let mut ex = Executor::new();
    // Three waiters on key 1, one on key 2, and a third key when both slots are busy; the
    // second waiter on key 1 gives up at 150 ms.
    for (name, key, patience) in [
        (0, 1u16, 10_000),
        (1, 1, 150),
        (2, 2, 10_000),
        (3, 1, 10_000),
        (4, 3, 10_000),
    ] {
        let (table, served) = (&table, &served);
        ex.spawn(async move {
            let result = table
                .acquire_timeout(key, 1, Duration::from_millis(patience))
                .await;
            served
                .lock()
                .unwrap()
                .push((name, now(), result.map(|_| ())));
        });
    }
    ex.run();
    for _ in 0..4 {
        advance(Duration::from_millis(50));
        ex.run();
    }
    let ms = Duration::from_millis;
    let full = Err(KeyedDenied::Full { capacity: 2 });
    let gave_up = Err(KeyedDenied::Denied(Denied::insufficient(ms(50))));
    assert_eq!(
        *served.lock().unwrap(),
        [
            // The second of key 1 would have its token at 200 ms, 50 ms past its patience: it
            // fails as it arrives, 50 ms short.
            (1, ms(0), gave_up),
            // Key 3 finds both slots held by buckets in use: refused at once.
            (4, ms(0), full),
            (0, ms(100), Ok(())),
            // Key 2's waiter waited behind nobody: key 1's line is not its own.
            (2, ms(100), Ok(())),
            // The third of key 1 takes the token the second would have had.
            (3, ms(200), Ok(())),
        ]
    );
    assert_eq!(waiters_in_line(), 0);
}

#[test]
fn waiters_of_unequal_costs_each_wake_once_and_are_served_when_their_tokens_accrue() {
    let _serial = serial();
    // 10 a second, burst 3, from empty: costs 1, 3, 2, 1, 3 fall due at 100, 400, 600, 700
    // and 1 000 ms. Time moves in 10 ms steps, so a waiter polled for anything but its own
    // timer at its instant would show up in its count.
    let gate = bucket(10, 3);
    let served = Mutex::new(Vec::new());
    let mut ex = Executor::new();
    let costs = [1u32, 3, 2, 1, 3];
    for (name, &cost) in costs.iter().enumerate() {
        let (gate, served) = (&gate, &served);
        ex.spawn(async move {
            EmbassyWait::acquire(gate, cost).await.unwrap();
            served.lock().unwrap().push((name, now()));
        });
    }
    ex.run();
    for _ in 0..110 {
        advance(Duration::from_millis(10));
        ex.run();
    }
    let ms = Duration::from_millis;
    assert_eq!(
        *served.lock().unwrap(),
        [
            (0, ms(100)),
            (1, ms(400)),
            (2, ms(600)),
            (3, ms(700)),
            (4, ms(1_000))
        ]
    );
    for i in 0..costs.len() {
        assert_eq!(ex.polls(i), 2, "waiter {i}");
    }
    assert_eq!(waiters_in_line(), 0);
}

#[test]
fn a_waiter_behind_one_that_gave_up_is_woken_early_and_served_on_time() {
    let _serial = serial();
    // 10 a second, burst 1: the second of three gives up at 50 ms, so the third's estimate
    // (300 ms) is a token too late. It is woken as the first leaves and served at 200 ms.
    let gate = bucket(10, 1);
    let served = Mutex::new(Vec::new());
    let mut ex = Executor::new();
    for name in 0..3 {
        let (gate, served) = (&gate, &served);
        ex.spawn(async move {
            EmbassyWait::acquire(gate, 1).await.unwrap();
            served.lock().unwrap().push((name, now()));
        });
    }
    ex.run();
    advance(Duration::from_millis(50));
    ex.cancel(1);
    ex.run();
    for _ in 0..30 {
        advance(Duration::from_millis(10));
        ex.run();
    }
    let ms = Duration::from_millis;
    assert_eq!(*served.lock().unwrap(), [(0, ms(100)), (2, ms(200))]);
    // The first: one wake. The third: woken as the first left, then its timer for its token.
    assert_eq!(ex.polls(0), 2);
    assert_eq!(ex.polls(2), 3);
}

#[test]
fn waiters_past_the_lines_bound_never_take_before_those_in_line() {
    let _serial = serial();
    // 100 a second, burst 2, from empty. The line's places wait for two tokens each; the
    // callers outside it want one, which accrues first: they still wait until nobody is in
    // line, and a caller arriving later finds its place behind everyone there.
    let gate = bucket(100, 2);
    let extra = 4;
    let served = Mutex::new(Vec::new());
    let mut ex = Executor::new();
    for name in 0..LINE_CAPACITY + extra {
        let (gate, served) = (&gate, &served);
        let cost = if name < LINE_CAPACITY { 2 } else { 1 };
        ex.spawn(async move {
            EmbassyWait::acquire(gate, cost).await.unwrap();
            served.lock().unwrap().push((name, now()));
        });
    }
    ex.run();
    assert_eq!(waiters_in_line(), LINE_CAPACITY);
    let mut steps = 0;
    while served.lock().unwrap().len() < LINE_CAPACITY + extra {
        advance(Duration::from_millis(1));
        ex.run();
        steps += 1;
        assert!(steps <= 1_000, "stuck: {:?}", served.lock().unwrap());
    }
    let served = served.lock().unwrap();
    let order: Vec<usize> = served.iter().map(|&(name, _)| name).collect();
    // Everyone in line first, in arrival order; then those who waited outside.
    assert_eq!(
        order[..LINE_CAPACITY],
        (0..LINE_CAPACITY).collect::<Vec<_>>()[..]
    );
    // Never more than the rate: 2 tokens per 20 ms for the line, then one per 10 ms.
    for (k, &(name, at)) in served.iter().enumerate() {
        let tokens: u64 = served[..=k]
            .iter()
            .map(|&(n, _)| if n < LINE_CAPACITY { 2 } else { 1 })
            .sum();
        assert!(
            tokens as u128 * 10 <= at.as_millis(),
            "{name} served at {at:?} with {tokens} tokens granted"
        );
    }
    assert_eq!(waiters_in_line(), 0);
}

/// One caller at a time taking a token from `gate` for `seconds` on the mock driver, whose
/// timers fire only as time moves, here in steps of 1 ms, as on a driver that checks its queue
/// on a 1 ms tick: a wake for an instant between two ticks comes at the next. Returns the grants
/// per second over the rate.
fn rate_on_a_late_timer(gate: &TokenBucket<EmbassyClock>, per_second: u64, seconds: u64) -> f64 {
    let granted = AtomicUsize::new(0);
    let mut ex = Executor::new();
    let g = &granted;
    let start = now();
    ex.spawn(async move {
        loop {
            EmbassyWait::acquire(gate, 1).await.unwrap();
            g.fetch_add(1, Ordering::Relaxed);
        }
    });
    ex.run();
    for _ in 0..seconds * 1_000 {
        advance(Duration::from_millis(1));
        ex.run();
    }
    let elapsed = (now() - start).as_secs_f64();
    granted.load(Ordering::Relaxed) as f64 / (per_second as f64 * elapsed)
}

#[test]
fn a_burst_of_one_keeps_the_rate_on_a_timer_that_wakes_late() {
    let _serial = serial();
    // 300 a second, burst 1 (no room for a late wake), from empty: a token every 3.33 ms, and
    // each wake for one up to 1 ms late. A take when woken would lose that lateness on every
    // token; the head takes ahead by the lateness the line has seen instead.
    let gate = bucket(300, 1);
    let rate = rate_on_a_late_timer(&gate, 300, 10);
    let late = tollgate::wait::timer_lateness();
    println!("burst 1 at 300/s on a 1 ms tick: {rate:.4} of the rate; lateness seen {late:?}");
    assert!(rate >= 0.99, "{rate:.4} of the rate");
    assert!(late <= Duration::from_millis(1), "{late:?}");
}

#[test]
fn a_newcomer_never_returns_before_a_waiter_holding_a_take_ahead() {
    let _serial = serial();
    // 1 000 a second, burst 1, from empty. The first wait's timer fires a millisecond late, so
    // the line learns that lateness and its heads take that far ahead of their instants.
    let gate = bucket(1_000, 1);
    let order = Mutex::new(Vec::new());
    let mut ex = Executor::new();
    let (g, o) = (&gate, &order);
    ex.spawn(async move {
        EmbassyWait::acquire(g, 1).await.unwrap();
    });
    ex.run();
    advance(Duration::from_millis(2));
    ex.run();
    assert!(ex.done(0));
    assert_eq!(tollgate::wait::timer_lateness(), Duration::from_millis(1));
    // At 2 ms: the next token falls due at 3 ms, within the learnt lateness, so the head takes
    // it now and sleeps to 3 ms holding it.
    let holder = ex.spawn(async move {
        EmbassyWait::acquire(g, 1).await.unwrap();
        o.lock().unwrap().push("holder");
    });
    ex.run();
    assert!(!ex.done(holder));
    // Time moves past its instant, and past the next token's, before its task is polled; a
    // newcomer polled first finds a token there, but the holder asked first.
    advance(Duration::from_millis(3));
    let newcomer = ex.spawn(async move {
        EmbassyWait::acquire(g, 1).await.unwrap();
        o.lock().unwrap().push("newcomer");
    });
    ex.run_one(newcomer);
    ex.run();
    assert!(ex.done(holder) && ex.done(newcomer));
    assert_eq!(*order.lock().unwrap(), ["holder", "newcomer"]);
    assert_eq!(waiters_in_line(), 0);
}

/// An async delay on a manual clock that overshoots to the next whole millisecond, plus 0.3:
/// a HAL timer on a 1 ms tick.
struct Coarse<'a>(&'a ManualClock);
impl embedded_hal_async::delay::DelayNs for Coarse<'_> {
    async fn delay_ns(&mut self, ns: u32) {
        let at = self.0.now() + u64::from(ns);
        let ms = 1_000_000;
        let late_at = at.div_ceil(ms) * ms + 300_000;
        self.0.set(late_at);
    }
}
use tollgate::Clock as _;

#[test]
fn the_delay_ns_wait_keeps_the_rate_at_a_burst_of_one_on_a_late_delay() {
    let _serial = serial();
    let clock = ManualClock::new();
    let gate = TokenBucket::try_new(
        Quota::new(Rate::per_second(100)).burst(1).start_empty(),
        &clock,
    )
    .unwrap();
    let granted = AtomicUsize::new(0);
    let mut ex = Executor::new();
    let (g, n, c) = (&gate, &granted, &clock);
    let seconds = 10;
    ex.spawn(async move {
        let mut delay = Coarse(c);
        while c.now() < seconds * 1_000_000_000 {
            g.acquire_with_async_delay(1, &mut delay).await.unwrap();
            n.fetch_add(1, Ordering::Relaxed);
        }
    });
    ex.run();
    let elapsed = clock.now() as f64 / 1e9;
    let rate = granted.load(Ordering::Relaxed) as f64 / (100.0 * elapsed);
    println!(
        "acquire_with_async_delay, burst 1 at 100/s, a delay late to the ms: {rate:.4} of the rate"
    );
    assert!(rate >= 0.99, "{rate:.4} of the rate");
    assert!(granted.load(Ordering::Relaxed) as f64 <= 1.0 + 100.0 * elapsed);
}

#[test]
fn random_arrivals_costs_timeouts_and_drops_never_overtake_a_waiter_or_mint() {
    let _serial = serial();
    // A line kept below its capacity, so every waiter is in it: callers arrive at random
    // instants with random costs, some waiting as long as it takes, some with a timeout, some
    // dropped at a random instant. Whatever happens, a caller is never served while one who
    // arrived before it still waits, the grants stay within burst + rate x elapsed, and every
    // caller's wait ends.
    for seed in 1..=8u64 {
        MockDriver::get().reset();
        let mut rng = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut next = move |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % n
        };
        let (rate, burst) = (50, 1 + next(4));
        let gate = TokenBucket::try_new(
            Quota::new(Rate::per_second(rate)).burst(burst),
            EmbassyClock,
        )
        .unwrap();
        let finished = AtomicUsize::new(0);
        // (arrival index, completion sequence, served, tokens)
        let log = Mutex::new(Vec::new());
        let mut ex = Executor::new();
        let mut drops = Vec::new();
        let mut steps = 0;
        let callers = 120;
        while ex.tasks.len() < callers || finished.load(Ordering::Relaxed) < callers {
            let pending = ex.tasks.len() - finished.load(Ordering::Relaxed);
            if ex.tasks.len() < callers && pending < LINE_CAPACITY - 4 && next(3) == 0 {
                let name = ex.tasks.len();
                let cost = 1 + next(burst) as u32;
                let patience = match next(3) {
                    0 => None,
                    _ => Some(Duration::from_millis(5 + next(200))),
                };
                if next(5) == 0 {
                    drops.push((name, now() + Duration::from_millis(next(150))));
                }
                let (gate, log, finished) = (&gate, &log, &finished);
                ex.spawn(async move {
                    let result = match patience {
                        None => EmbassyWait::acquire(gate, cost).await,
                        Some(t) => EmbassyWait::acquire_timeout(gate, cost, t).await,
                    };
                    let mut log = log.lock().unwrap();
                    let seq = log.len();
                    log.push((name, seq, result.is_ok(), cost, now()));
                    finished.fetch_add(1, Ordering::Relaxed);
                });
            }
            ex.run();
            for &(name, at) in &drops {
                if at <= now() && !ex.done(name) {
                    ex.cancel(name);
                    let mut log = log.lock().unwrap();
                    let seq = log.len();
                    log.push((name, seq, false, 0, now()));
                    finished.fetch_add(1, Ordering::Relaxed);
                }
            }
            advance(Duration::from_micros(100 + next(3_000)));
            ex.run();
            steps += 1;
            assert!(steps < 200_000, "seed {seed}: stuck");
        }
        let log = log.lock().unwrap();
        let done_at: Vec<usize> = {
            let mut at = vec![usize::MAX; callers];
            for &(name, seq, ..) in log.iter() {
                at[name] = at[name].min(seq);
            }
            at
        };
        let mut granted = 0u64;
        for &(name, seq, served, cost, at) in log.iter() {
            if !served {
                continue;
            }
            for (earlier, &done) in done_at.iter().enumerate().take(name) {
                assert!(
                    done < seq,
                    "seed {seed}: {name} served at {at:?} while {earlier} still waited"
                );
            }
            granted += u64::from(cost);
            let bound = burst as f64 + rate as f64 * at.as_secs_f64();
            assert!(
                granted as f64 <= bound + 1e-9,
                "seed {seed}: {granted} > {bound}"
            );
        }
        assert_eq!(waiters_in_line(), 0, "seed {seed}");
    }
}

#[test]
fn an_unlimited_bucket_serves_every_embedded_wait_at_its_first_poll() {
    let _serial = serial();
    let gate = TokenBucket::try_new(Quota::unlimited(), EmbassyClock).unwrap();
    let served = Mutex::new(Vec::new());
    let mut ex = Executor::new();
    for name in 0..(2 * LINE_CAPACITY) {
        let (gate, served) = (&gate, &served);
        ex.spawn(async move {
            let waited = EmbassyWait::acquire(gate, u32::MAX).await.unwrap();
            let timed = EmbassyWait::acquire_timeout(gate, 7, Duration::ZERO).await;
            served.lock().unwrap().push((name, waited, timed));
        });
    }
    ex.run();
    let served = served.lock().unwrap();
    assert_eq!(served.len(), 2 * LINE_CAPACITY);
    for (i, &(name, waited, timed)) in served.iter().enumerate() {
        assert_eq!(
            (name, waited, timed),
            (i, Duration::ZERO, Ok(Duration::ZERO))
        );
        assert_eq!(ex.polls(i), 1);
    }
}

/// A key with a wait lined up keeps its slot: however long its bucket reads full before the
/// waiter's timer runs (protection off, so that a full bucket is otherwise evictable at once),
/// a newcomer evicts another key, then finds the table full; the waited-on key counts as
/// protected meanwhile. Fails without the pin: the newcomer evicts the key from under its
/// waiter, which then waits on a bucket made anew.
#[test]
fn a_keyed_tables_key_with_waiters_is_never_evicted() {
    let _serial = serial();
    let quota = Quota::new(Rate::per_second(10)).burst(1).start_empty();
    let table: KeyedTable<u16, EmbassyClock, 2> =
        KeyedTable::try_new(quota, EmbassyClock, WhenFull::Refuse)
            .unwrap()
            .protect_for(Duration::ZERO);
    let served = Mutex::new(Vec::new());
    let mut ex = Executor::new();
    {
        let (table, served) = (&table, &served);
        ex.spawn(async move {
            let result = table.acquire(1, 1).await;
            served.lock().unwrap().push((now(), result.map(|_| ())));
        });
    }
    ex.run();
    assert!(table.try_acquire(2, 1).is_err()); // held, empty, no waiter
    assert_eq!(table.protected_len(), 1);
    // Both buckets full for ten seconds before the waiter's timer runs.
    advance(Duration::from_secs(10));
    // Key 3 evicts key 2, not key 1 (and starts empty, as the quota says).
    assert!(matches!(
        table.try_acquire(3, 1),
        Err(KeyedDenied::Denied(_))
    ));
    assert_eq!(table.tier(&2), None);
    assert_eq!(
        table.try_acquire(4, 1),
        Err(KeyedDenied::Full { capacity: 2 })
    );
    assert_eq!(table.tier(&1), Some(tollgate::Tier(0)));
    ex.run();
    assert_eq!(*served.lock().unwrap(), [(Duration::from_secs(10), Ok(()))]);
    assert_eq!(
        table.available(&1),
        0,
        "the waiter took from the bucket it waited on"
    );
    // Served: the slot is evictable again once its bucket is full; the newcomer's bucket
    // starts empty, as the quota says.
    advance(Duration::from_millis(100));
    assert!(matches!(
        table.try_acquire(4, 1),
        Err(KeyedDenied::Denied(_))
    ));
    assert_eq!(table.tier(&4), Some(tollgate::Tier(0)));
    assert_eq!(waiters_in_line(), 0);
}

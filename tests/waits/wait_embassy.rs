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
            for (task, flag, polls) in &mut self.tasks {
                if task.is_some() && flag.0.swap(false, Ordering::SeqCst) {
                    polled = true;
                    *polls += 1;
                    let waker = Waker::from(flag.clone());
                    let mut cx = Context::from_waker(&waker);
                    if task.as_mut().unwrap().as_mut().poll(&mut cx).is_ready() {
                        *task = None;
                    }
                }
            }
            if !polled {
                return;
            }
        }
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
    // The head: its first poll and its timer. Each other: its first poll, its turn, its timer;
    // never woken by another's turn or timer.
    assert_eq!(ex.polls(0), 2);
    for i in 1..5 {
        assert_eq!(ex.polls(i), 3, "waiter {i}");
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
            // Key 3 finds both slots held by buckets in use: refused at once.
            (4, ms(0), full),
            (0, ms(100), Ok(())),
            // The second of key 1 heads its line at 100 ms with its token 100 ms away and
            // 50 ms of patience left: it gives up then, 50 ms short.
            (1, ms(100), gave_up),
            // Key 2's waiter waited behind nobody: key 1's line is not its own.
            (2, ms(100), Ok(())),
            // The third of key 1 takes the token the second would have had.
            (3, ms(200), Ok(())),
        ]
    );
    assert_eq!(waiters_in_line(), 0);
}

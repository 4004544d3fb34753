//! Quotas per key: tiers in the sharded limiter and in the fixed table, a key moved between
//! tiers at run time, and the rule that a move never mints.

use core::time::Duration;

use tollgate::{
    Denied, KeyedConfigError, KeyedDenied, KeyedLimiter, KeyedTable, ManualClock, Quota, Rate,
    SetTierError, Tier, TokenBucket, WhenFull,
};

const FREE: Quota = Quota::new(Rate::per_second(5)).burst(10);
const PAID: Quota = Quota::new(Rate::per_second(50)).burst(100);
const STRICT: Quota = Quota::new(Rate::new(1, Duration::from_secs(10))).burst(1);
const TIERS: [Quota; 3] = [FREE, PAID, STRICT];

/// Even keys are free, odd keys paid; nobody starts strict.
fn plan(key: &u32) -> Tier {
    Tier((key % 2) as u8)
}

/// What the tests ask of both kinds of keyed limiter.
trait Tiered {
    fn acquire(&self, key: u32, n: u32) -> Result<(), KeyedDenied>;
    fn set_tier(&self, key: u32, tier: Tier) -> Result<bool, SetTierError>;
    fn available(&self, key: u32) -> u64;
    fn tier(&self, key: u32) -> Option<Tier>;
    /// A bucket on `quota` on the subject's word: the reference for its decisions.
    fn reference<'c>(&self, quota: Quota, clock: &'c ManualClock) -> Box<dyn Fn() -> bool + 'c>;
}

fn reference_on<'c, W: tollgate::Word>(
    quota: Quota,
    clock: &'c ManualClock,
) -> Box<dyn Fn() -> bool + 'c> {
    let bucket = TokenBucket::<_, W>::try_new_with_word(quota, clock).unwrap();
    Box::new(move || bucket.try_acquire(1).is_ok())
}

impl Tiered for KeyedLimiter<u32, &ManualClock> {
    fn acquire(&self, key: u32, n: u32) -> Result<(), KeyedDenied> {
        self.try_acquire(&key, n)
    }
    fn set_tier(&self, key: u32, tier: Tier) -> Result<bool, SetTierError> {
        KeyedLimiter::set_tier(self, &key, tier)
    }
    fn available(&self, key: u32) -> u64 {
        KeyedLimiter::available(self, &key)
    }
    fn tier(&self, key: u32) -> Option<Tier> {
        KeyedLimiter::tier(self, &key)
    }
    fn reference<'c>(&self, quota: Quota, clock: &'c ManualClock) -> Box<dyn Fn() -> bool + 'c> {
        reference_on::<tollgate::DefaultWord>(quota, clock)
    }
}

impl<W: tollgate::Word> Tiered for KeyedTable<u32, &ManualClock, 8, W, 3> {
    fn acquire(&self, key: u32, n: u32) -> Result<(), KeyedDenied> {
        self.try_acquire(key, n)
    }
    fn set_tier(&self, key: u32, tier: Tier) -> Result<bool, SetTierError> {
        KeyedTable::set_tier(self, &key, tier)
    }
    fn available(&self, key: u32) -> u64 {
        KeyedTable::available(self, &key)
    }
    fn tier(&self, key: u32) -> Option<Tier> {
        KeyedTable::tier(self, &key)
    }
    fn reference<'c>(&self, quota: Quota, clock: &'c ManualClock) -> Box<dyn Fn() -> bool + 'c> {
        reference_on::<W>(quota, clock)
    }
}

fn limiter(clock: &ManualClock) -> KeyedLimiter<u32, &ManualClock> {
    KeyedLimiter::builder(FREE, clock)
        .capacity(64)
        .shards(4)
        .tiers([PAID, STRICT], plan)
        .build()
        .unwrap()
}

fn table<W: tollgate::Word>(clock: &ManualClock) -> KeyedTable<u32, &ManualClock, 8, W, 3> {
    KeyedTable::try_with_tiers(TIERS, plan, clock, WhenFull::Refuse).unwrap()
}

/// Every subject on a fresh clock of its own; a failure names the subject.
fn each_subject(test: impl Fn(&ManualClock, &dyn Tiered)) {
    let run = |name: &str, test: &dyn Fn()| {
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(test));
        assert!(outcome.is_ok(), "failed on {name}");
    };
    run("KeyedLimiter", &|| {
        let clock = ManualClock::new();
        test(&clock, &limiter(&clock));
    });
    run("KeyedTable, 64-bit word", &|| {
        let clock = ManualClock::new();
        test(&clock, &table::<u64>(&clock));
    });
    run("KeyedTable, 32-bit word", &|| {
        let clock = ManualClock::new();
        test(&clock, &table::<u32>(&clock));
    });
}

/// Greedy: takes one token at a time until refused; how many it got.
fn drain(subject: &dyn Tiered, key: u32) -> u64 {
    let mut granted = 0;
    while subject.acquire(key, 1).is_ok() {
        granted += 1;
    }
    granted
}

#[test]
fn each_tier_gets_exactly_its_own_quota() {
    each_subject(|clock, subject| {
        let (free_reference, paid_reference) = (
            subject.reference(FREE, clock),
            subject.reference(PAID, clock),
        );
        let (mut free, mut paid, mut expected_free, mut expected_paid) = (0, 0, 0, 0);
        // Ten seconds of greedy callers, asking every millisecond.
        for _ in 0..=10_000 {
            free += drain(subject, 2);
            paid += drain(subject, 3);
            while free_reference() {
                expected_free += 1;
            }
            while paid_reference() {
                expected_paid += 1;
            }
            clock.advance(Duration::from_millis(1));
        }
        assert_eq!(
            (free, paid),
            (expected_free, expected_paid),
            "as one bucket per key"
        );
        // burst + rate × 10 s, less what the 32-bit word's layout rounds off (a token at most).
        assert!((59..=60).contains(&free), "free: {free}");
        assert!((599..=600).contains(&paid), "paid: {paid}");
        assert_eq!(subject.tier(2), Some(Tier(0)));
        assert_eq!(subject.tier(3), Some(Tier(1)));
    });
}

#[test]
fn a_move_keeps_the_tokens_capped_by_the_new_burst_and_touches_no_other_key() {
    each_subject(|clock, subject| {
        // (key, tokens taken before, tier to, tokens held after)
        let rows = [
            (0, 1, Tier(1), 9),   // 9 left of the free 10: not the paid burst of 100
            (1, 1, Tier(0), 10),  // 99 left of the paid 100: capped by the free burst
            (3, 95, Tier(0), 5),  // 5 left of 100: kept as they are
            (5, 100, Tier(2), 0), // an empty bucket stays empty
            (7, 50, Tier(2), 1),  // 50 left: capped by the strict burst of 1
            (4, 3, Tier(0), 7),   // a move to its own tier changes nothing
        ];
        for (key, taken, to, after) in rows {
            for _ in 0..taken {
                subject.acquire(key, 1).unwrap();
            }
            let others: Vec<_> = (0..8)
                .filter(|&k| k != key)
                .map(|k| (k, subject.tier(k), subject.available(k)))
                .collect();
            assert_eq!(subject.set_tier(key, to), Ok(true), "key {key}");
            assert_eq!(subject.available(key), after, "key {key}");
            assert_eq!(subject.tier(key), Some(to));
            for (k, tier, available) in others {
                assert_eq!(
                    (subject.tier(k), subject.available(k)),
                    (tier, available),
                    "key {k}"
                );
            }
        }
        // The strict key refills at its own rate: one token about ten seconds after it was
        // empty (the 32-bit word reads the clock a little coarser), and no sooner.
        let wait = subject.acquire(5, 1).unwrap_err().retry_after().unwrap();
        assert!(
            wait >= Duration::from_secs(10) && wait < Duration::from_millis(10_001),
            "{wait:?}"
        );
        clock.advance(wait - Duration::from_nanos(1));
        assert_eq!(drain(subject, 5), 0);
        clock.advance(Duration::from_nanos(1));
        assert_eq!(drain(subject, 5), 1);
    });
}

#[test]
fn bad_tiers_are_errors_and_take_nothing() {
    each_subject(|_clock, subject| {
        assert_eq!(
            subject.set_tier(9, Tier(3)),
            Err(SetTierError::UnknownTier {
                tier: Tier(3),
                tiers: 3
            })
        );
        assert_eq!(subject.set_tier(9, Tier(1)), Ok(false), "a key not held");
        assert_eq!(subject.tier(9), None);
        // A request above every burst is refused before a key is added; above its own
        // tier's, it takes nothing.
        assert_eq!(
            subject.acquire(9, 101),
            Err(KeyedDenied::Denied(Denied::ExceedsCapacity { burst: 100 }))
        );
        assert_eq!(subject.tier(9), None);
        assert_eq!(
            subject.acquire(8, 11),
            Err(KeyedDenied::Denied(Denied::ExceedsCapacity { burst: 10 }))
        );
        assert_eq!(subject.available(8), 10);
    });
    let clock = ManualClock::new();
    let broken = KeyedLimiter::builder(FREE, &clock)
        .capacity(4)
        .tiers([PAID], |key: &u32| Tier(*key as u8))
        .build()
        .unwrap();
    assert_eq!(
        broken.try_acquire(&7, 1),
        Err(KeyedDenied::UnknownTier(Tier(7)))
    );
    assert!(broken.is_empty());
    let broken: KeyedTable<u32, _, 4, u64, 2> = KeyedTable::try_with_tiers(
        [FREE, PAID],
        |key| Tier(*key as u8),
        &clock,
        WhenFull::Refuse,
    )
    .unwrap();
    assert_eq!(
        broken.try_acquire(7, 1),
        Err(KeyedDenied::UnknownTier(Tier(7)))
    );
    assert!(broken.is_empty());

    let none: Result<KeyedTable<u32, _, 4, u64, 0>, _> =
        KeyedTable::try_with_tiers([], plan, &clock, WhenFull::Refuse);
    assert_eq!(none.unwrap_err(), KeyedConfigError::TierCount);
    let many = KeyedLimiter::builder(FREE, &clock)
        .capacity(4)
        .tiers([PAID; 256], plan)
        .build();
    assert_eq!(many.unwrap_err(), KeyedConfigError::TierCount);
    let zero = KeyedLimiter::<u32, _>::builder(FREE, &clock).build();
    assert_eq!(zero.unwrap_err(), KeyedConfigError::ZeroCapacity);
}

/// A small deterministic generator: the adversary's dice.
struct Dice(u64);

impl Dice {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// Tokens in units of 10^-10: every tier's rate is a whole number of them per nanosecond.
const UNITS_PER_TOKEN: u128 = 10_000_000_000;

/// The most one key's bucket may hold, by the rules: it refills at its tier's rate up to its
/// tier's burst, loses what it grants, and a move keeps what it holds, capped by the new
/// burst. Exact for the 64-bit word; the 32-bit word may hold less, never more.
struct Model {
    tier: usize,
    at_ns: u128,
    units: u128,
    /// The current stretch on one tier: since when, and grants within it.
    since_ns: u128,
    granted: u128,
}

impl Model {
    fn new(tier: usize) -> Self {
        let burst = u128::from(TIERS[tier].burst_size()) * UNITS_PER_TOKEN;
        Self {
            tier,
            at_ns: 0,
            units: burst,
            since_ns: 0,
            granted: 0,
        }
    }

    fn burst_units(&self) -> u128 {
        u128::from(TIERS[self.tier].burst_size()) * UNITS_PER_TOKEN
    }

    fn advance(&mut self, now_ns: u128) {
        let rate = TIERS[self.tier].rate();
        let per_ns = u128::from(rate.tokens()) * UNITS_PER_TOKEN / rate.period().as_nanos();
        self.units = (self.units + per_ns * (now_ns - self.at_ns)).min(self.burst_units());
        self.at_ns = now_ns;
    }

    fn grant(&mut self, key: u32, n: u32, now_ns: u128) {
        self.advance(now_ns);
        let cost = u128::from(n) * UNITS_PER_TOKEN;
        assert!(
            self.units >= cost,
            "key {key} on tier {} minted at {now_ns} ns",
            self.tier
        );
        self.units -= cost;
        self.granted += u128::from(n);
    }

    fn move_to(&mut self, key: u32, tier: usize, now_ns: u128) {
        self.check_stretch(key, now_ns);
        self.advance(now_ns);
        self.tier = tier;
        self.units = self.units.min(self.burst_units());
        (self.since_ns, self.granted) = (now_ns, 0);
    }

    /// Grants within the stretch never exceed its tier's burst + rate × its length.
    fn check_stretch(&self, key: u32, now_ns: u128) {
        let rate = TIERS[self.tier].rate();
        let period_ns = rate.period().as_nanos();
        let burst = u128::from(TIERS[self.tier].burst_size());
        let elapsed = now_ns - self.since_ns;
        assert!(
            self.granted * period_ns <= burst * period_ns + u128::from(rate.tokens()) * elapsed,
            "key {key} on tier {} got {} in {elapsed} ns",
            self.tier,
            self.granted
        );
    }
}

#[test]
fn moves_between_tiers_never_mint_however_often_they_come() {
    for seed in 1..=20u64 {
        each_subject(|clock, subject| {
            let mut dice = Dice(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
            let mut now_ns = 0u128;
            let mut models: Vec<Model> = (0..6u32)
                .map(|key| Model::new(plan(&key).0 as usize))
                .collect();
            for _ in 0..3_000 {
                // Mostly short steps, so that moves catch buckets part-way through a refill.
                let step = Duration::from_micros(dice.below(200_000) >> (dice.below(4) * 4));
                clock.advance(step);
                now_ns += step.as_nanos();
                let key = dice.below(6) as u32;
                let model = &mut models[key as usize];
                if dice.below(3) == 0 {
                    // The adversary flips tiers to catch a fuller bucket.
                    let to = dice.below(3) as usize;
                    let held = subject.tier(key).is_some();
                    assert_eq!(subject.set_tier(key, Tier(to as u8)), Ok(held));
                    if held {
                        model.move_to(key, to, now_ns);
                    }
                } else {
                    let n = 1 + dice.below(3) as u32;
                    while subject.acquire(key, n).is_ok() {
                        model.grant(key, n, now_ns);
                    }
                }
            }
            for (key, model) in models.iter().enumerate() {
                model.check_stretch(key as u32, now_ns);
            }
        });
    }
}

#[test]
fn the_builder_combines_shards_with_the_32_bit_word() {
    let clock = ManualClock::new();
    let limiter = KeyedLimiter::<u64, _>::builder(FREE, &clock)
        .capacity(1_000)
        .shards(8)
        .word::<u32>()
        .protection(Duration::from_secs(5))
        .when_full(WhenFull::Admit)
        .tiers([PAID], |key: &u64| Tier((*key % 2) as u8))
        .build()
        .unwrap();
    assert!(
        limiter.idle_horizon() < Duration::from_secs(2 * 3_600),
        "the 32-bit word's horizon"
    );
    assert_eq!(drain_limiter(&limiter, 0), 10);
    assert_eq!(drain_limiter(&limiter, 1), 100);
    // A u64 key and a 32-bit word: 16 bytes an entry, plus control bytes and free room.
    let per_key = limiter.heap_bytes() / limiter.len();
    assert!(per_key > 0);
}

fn drain_limiter(limiter: &KeyedLimiter<u64, &ManualClock, u32>, key: u64) -> u64 {
    let mut granted = 0;
    while limiter.try_acquire(&key, 1).is_ok() {
        granted += 1;
    }
    granted
}

#[test]
fn tiers_cost_no_memory_beyond_the_stated_bytes_per_key() {
    // At the capacity, the tables hold at most about 2.3 entries' worth per key: an entry
    // (24 bytes: a u64 key, the 64-bit word and the tier byte) and a control byte, in tables
    // between half and fifteen sixteenths full, plus the shards themselves.
    let clock = ManualClock::new();
    let capacity = 100_000;
    let limiter = KeyedLimiter::builder(FREE, &clock)
        .capacity(capacity)
        .shards(16)
        .tiers([PAID, STRICT], |key: &u64| Tier((*key % 3) as u8))
        .build()
        .unwrap();
    for key in 0..capacity as u64 {
        limiter.try_acquire(&key, 1).unwrap();
    }
    assert_eq!(limiter.len(), capacity);
    let per_key = limiter.heap_bytes() as f64 / capacity as f64;
    assert!(per_key <= 2.3 * 25.0 + 1.0, "{per_key:.1} bytes per key");
    println!("{per_key:.1} heap bytes per key at the capacity (u64 keys, 64-bit word, 3 tiers)");
}

#[test]
fn threads_taking_while_another_flips_the_tier_never_get_more_than_the_looser_tier_allows() {
    // Two threads take from key 0 as fast as they can while a third moves it between the free
    // tier and the strict one, and the clock runs two seconds in steps of 1 ms. Whatever the
    // interleaving, no grant comes from a word read under the other tier's layout: the key
    // gets at most what the looser tier alone would give, 10 + 5 × 2.
    fn run(clock: &ManualClock, subject: &(dyn Tiered + Sync)) -> (u64, u64) {
        let done = std::sync::atomic::AtomicBool::new(false);
        let granted = std::sync::atomic::AtomicU64::new(0);
        let moves = std::sync::atomic::AtomicU64::new(0);
        std::thread::scope(|scope| {
            for _ in 0..2 {
                scope.spawn(|| {
                    while !done.load(std::sync::atomic::Ordering::Relaxed) {
                        if subject.acquire(0, 1).is_ok() {
                            granted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                    }
                });
            }
            scope.spawn(|| {
                let mut to = 2;
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    if let Ok(true) = subject.set_tier(0, Tier(to)) {
                        moves.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        to = 2 - to;
                    }
                }
            });
            for _ in 0..2_000 {
                clock.advance(Duration::from_millis(1));
                // Let the others run at each instant, however busy the machine.
                let seen = granted.load(std::sync::atomic::Ordering::Relaxed)
                    + moves.load(std::sync::atomic::Ordering::Relaxed);
                while granted.load(std::sync::atomic::Ordering::Relaxed)
                    + moves.load(std::sync::atomic::Ordering::Relaxed)
                    < seen + 2
                {
                    std::thread::yield_now();
                }
            }
            done.store(true, std::sync::atomic::Ordering::Relaxed);
        });
        (granted.into_inner(), moves.into_inner())
    }
    let clock = ManualClock::new();
    let (granted, moves) = run(&clock, &limiter(&clock));
    assert!(granted <= 10 + 5 * 2, "limiter: {granted} granted");
    assert!(moves > 100, "limiter: only {moves} moves");
    let clock = ManualClock::new();
    let (granted, moves) = run(&clock, &table::<u64>(&clock));
    assert!(granted <= 10 + 5 * 2, "table: {granted} granted");
    assert!(moves > 100, "table: only {moves} moves");
}

#[path = "keyed/gate.rs"]
mod gate;

/// One key's grants on one tier (a stretch ends when the key moves, or its bucket is made anew
/// on another tier), each placed at the last clock reading its call took: a call that went on
/// with a stale reading is placed there, as if it had landed at once, and one that read the
/// clock again (to settle a debt, or under the lock that made a bucket) at that reading.
struct Stretch {
    tier: usize,
    /// (reading in ns, tokens), in the order the grants landed.
    grants: Vec<(u128, u128)>,
}

impl Stretch {
    /// Over every span `[a, b]` of the stretch, the tokens granted at readings within it are
    /// at most the tier's burst + rate × (b − a).
    fn check(&self, key: u32, case: &str) {
        let rate = TIERS[self.tier].rate();
        let (tokens, period) = (rate.tokens() as i128, rate.period().as_nanos() as i128);
        let burst = i128::from(TIERS[self.tier].burst_size());
        let mut grants = self.grants.clone();
        grants.sort_unstable();
        // The most of (tokens × t_i − period × granted before i) over the grants so far.
        let (mut before, mut best) = (0i128, i128::MIN);
        for (at, n) in grants {
            let at = at as i128;
            best = best.max(tokens * at - period * before);
            before += n as i128;
            let excess = period * before - tokens * at - best;
            assert!(
                excess <= burst * period,
                "{case}: key {key} on tier {} got more than its burst + rate × time over a span ending at {at} ns",
                self.tier
            );
        }
    }
}

/// The limiter against the rule each key's grants must keep, with what the model above leaves
/// out: a capacity below the keys, so that buckets are evicted and made anew (on the tier the
/// tier function picks), newcomers whose rounds of sweeps evict, sweeps, both policies,
/// protection and probation on and off, and *delayed readers*: calls that read the clock, then
/// wait while other calls run (moves, evictions, grants to the same key), and then go on with
/// their stale reading. Over every span on one tier, a key's grants (each placed at its call's
/// last reading) keep to the tier's burst + rate × the span, across its buckets' evictions.
#[test]
fn evictions_tier_moves_and_delayed_readers_never_mint() {
    let mut steps = 0u64;
    for seed in 1..=12u64 {
        for when_full in [WhenFull::Refuse, WhenFull::Admit] {
            for (shards, protection_ms) in [(1, 0), (4, 0), (1, 300), (4, 300)] {
                steps += evictions_and_delayed_readers(seed, when_full, shards, protection_ms);
            }
        }
    }
    assert!(steps >= 100_000, "{steps} steps");
}

/// One run of the model above; how many steps it took.
fn evictions_and_delayed_readers(
    seed: u64,
    when_full: WhenFull,
    shards: usize,
    protection_ms: u64,
) -> u64 {
    const KEYS: u32 = 6;
    const STEPS: u64 = 1_200;
    let case =
        format!("seed {seed}, {when_full:?}, {shards} shards, protection {protection_ms} ms");
    let clock = gate::GateClock::new();
    let limiter = KeyedLimiter::builder(FREE, &clock)
        .capacity(4)
        .shards(shards)
        .when_full(when_full)
        .protection(Duration::from_millis(protection_ms))
        .probation(Duration::from_millis(protection_ms))
        .tiers([PAID, STRICT], plan)
        .build()
        .unwrap();
    let mut dice = Dice(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ protection_ms ^ shards as u64);
    let mut stretches: Vec<Stretch> = (0..KEYS)
        .map(|key| Stretch {
            tier: plan(&key).0 as usize,
            grants: Vec::new(),
        })
        .collect();
    let mut newcomer = 1_000u32;
    // A grant to `key` that read the clock at `read_ns`: from its own bucket if the limiter
    // holds it now, else from the shared overflow bucket, which is not the key's.
    let granted = |stretches: &mut Vec<Stretch>, key: u32, n: u32, read_ns: u128| {
        let Some(tier) = limiter.tier(&key) else {
            assert_eq!(
                when_full,
                WhenFull::Admit,
                "{case}: key {key} granted, not held"
            );
            return;
        };
        let stretch = &mut stretches[key as usize];
        if stretch.tier != usize::from(tier.0) {
            // Made anew on another tier: a new stretch.
            stretch.check(key, &case);
            *stretch = Stretch {
                tier: usize::from(tier.0),
                grants: Vec::new(),
            };
        }
        stretch.grants.push((read_ns, u128::from(n)));
    };
    std::thread::scope(|scope| {
        // A held call: its handle, key, tokens, and steps left before it goes on.
        type Pending<'s> = (gate::Held<'s, Result<(), KeyedDenied>>, u32, u32, u64);
        let mut held: Option<Pending<'_>> = None;
        for _ in 0..STEPS {
            let now_ns = u128::from(clock.now_ns());
            let key = dice.below(u64::from(KEYS)) as u32;
            let n = 1 + dice.below(3) as u32;
            match dice.below(12) {
                0..=2 => {
                    // Mostly short steps; sometimes long enough for buckets to fill.
                    let ms = if dice.below(8) == 0 {
                        2_000 + dice.below(10_000)
                    } else {
                        dice.below(300)
                    };
                    clock.advance(Duration::from_millis(ms));
                }
                3..=5 => {
                    while limiter.try_acquire(&key, n).is_ok() {
                        granted(&mut stretches, key, n, now_ns);
                    }
                }
                6 => {
                    let to = usize::from(dice.below(3) as u8);
                    let held = limiter.tier(&key).is_some();
                    assert_eq!(limiter.set_tier(&key, Tier(to as u8)), Ok(held), "{case}");
                    let stretch = &mut stretches[key as usize];
                    if held && stretch.tier != to {
                        stretch.check(key, &case);
                        *stretch = Stretch {
                            tier: to,
                            grants: Vec::new(),
                        };
                    }
                }
                7 => {
                    limiter.sweep();
                }
                8..=9 => {
                    newcomer += 1;
                    let _ = limiter.try_acquire(&newcomer, 1);
                }
                _ => {
                    if held.is_none() {
                        let limiter = &limiter;
                        let call = gate::hold(scope, move || limiter.try_acquire(&key, n));
                        held = Some((call, key, n, 1 + dice.below(6)));
                    }
                }
            }
            // A held call goes on after a few steps, with the reading it took then.
            if let Some((call, key, n, wait)) = held.take() {
                if wait == 0 {
                    if let (Ok(()), read_ns) = call.release() {
                        granted(&mut stretches, key, n, u128::from(read_ns));
                    }
                } else {
                    held = Some((call, key, n, wait - 1));
                }
            }
        }
        if let Some((call, key, n, _)) = held {
            if let (Ok(()), read_ns) = call.release() {
                granted(&mut stretches, key, n, u128::from(read_ns));
            }
        }
    });
    for (key, stretch) in stretches.iter().enumerate() {
        stretch.check(key as u32, &case);
    }
    assert!(limiter.len() <= 4);
    STEPS
}

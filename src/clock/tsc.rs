//! [`TscClock`]: the CPU's time-stamp counter, calibrated by `quanta` (feature `quanta`).

use crate::Clock;

/// The CPU's cycle counter (`rdtsc` on x86-64, `cntvct_el0` on AArch64) through
/// [`quanta`](https://docs.rs/quanta), scaled to nanoseconds: the clock for hot paths on servers.
///
/// **What it costs.** One read of the counter, inlined where the bucket reads it, and the high
/// word of one 64 × 64-bit multiply, with no system call, no call into quanta and no shared
/// memory: about a third of [`StdClock`](crate::StdClock) on a machine whose kernel already reads
/// the TSC in the vDSO, and far less where it does not. (Where quanta has no invariant TSC, or
/// the counter is slower than 1 GHz, as on most AArch64 machines, the clock reads through
/// quanta's own calls instead.) Ticks are
/// nanoseconds, so [`TICKS_PER_SECOND`](Clock::TICKS_PER_SECOND) is fixed at 10^9 and a bucket
/// converts its rate once, at construction, exactly as on the other clocks.
///
/// **What it trades.** The counter is calibrated against the OS clock once per process (the first
/// `TscClock::new()` spends up to 200 ms doing so) and then runs free: it drifts from the OS
/// clock by the calibration's error, a few parts per million, and does not follow NTP. `quanta`
/// uses it only where the CPU reports an invariant TSC (and `rdtscp`); elsewhere it falls back to
/// the OS monotonic clock, with the same nanosecond ticks.
///
/// **Cores that disagree.** An invariant TSC can still differ between cores or sockets (a
/// hypervisor that migrates a guest, firmware that failed to synchronise them), so a thread that
/// moves may read a counter behind the one it read before. The bucket never credits such a step:
/// it reads time behind its word as time not yet earned and denies until the clock catches up.
/// A skew of `s` can therefore delay a grant by up to `s`, and cannot mint a token: grants stay
/// within `burst + rate × (latest reading − first reading)` (see `tests/backward_clock.rs`).
///
/// ```
/// use tollgate::{Quota, Rate, TokenBucket, TscClock};
///
/// let bucket = TokenBucket::try_new(Quota::new(Rate::per_second(1_000)), TscClock::new())?;
/// assert!(bucket.try_acquire(1).is_ok());
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
#[derive(Clone, Debug)]
pub struct TscClock {
    clock: quanta::Clock,
    /// Nanoseconds per count in 64 fractional bits (the high word of `count × scale` is the
    /// reading), or 0 where a count is a nanosecond or longer (no invariant counter: quanta's
    /// fallback on the OS clock counts nanoseconds) and quanta scales the count itself.
    scale: u64,
}

impl TscClock {
    /// A clock on the time-stamp counter; the first one in a process calibrates it.
    pub fn new() -> Self {
        let clock = quanta::Clock::new();
        Self {
            scale: scale_of(&clock),
            clock,
        }
    }

    /// The nanoseconds of `count` counts, where `scale` is not 0.
    #[inline]
    fn scaled(&self, count: u64) -> u64 {
        ((u128::from(count) * u128::from(self.scale)) >> 64) as u64
    }
}

impl Default for TscClock {
    fn default() -> Self {
        Self::new()
    }
}

/// `clock`'s calibration as nanoseconds per count in 64 fractional bits, 0 unless a count is
/// shorter than a nanosecond.
///
/// quanta scales a count by a factor and a shift that it computes at calibration, and does not
/// expose; its reading of 2^62 counts is that factor to within 2^-62 ns per count, so a reading
/// through the scale is within `count × 2^-62` ns of quanta's own (plus one for the rounding
/// down of each): under a nanosecond for the first 2^62 counts, 48 years of a 3 GHz counter.
fn scale_of(clock: &quanta::Clock) -> u64 {
    const COUNTS: u64 = 1 << 62;
    let nanos = clock.delta_as_nanos(0, COUNTS);
    if nanos < COUNTS {
        nanos << 2
    } else {
        0
    }
}

impl Clock for TscClock {
    const TICKS_PER_SECOND: u64 = 1_000_000_000;
    #[inline]
    fn now(&self) -> u64 {
        // Nanoseconds since the counter's own zero: the counter, read in place, then the high
        // word of one 64 × 64-bit multiply. quanta's own reading is a call into it (its `raw`
        // is not inlined across crates) that matches on its kind of clock, then
        // `delta_as_nanos`, which matches again, checks its arguments' order and shifts by a
        // calibrated amount, all of which a check would pay on every reading.
        if self.scale != 0 {
            self.scaled(count(&self.clock))
        } else {
            self.clock.delta_as_nanos(0, self.clock.raw())
        }
    }
}

/// The counter quanta reads, where its scale is not 0: `clock` counts the TSC then (on its OS
/// fallback and its mock a count is a nanosecond, so the scale is 0).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
#[allow(unsafe_code)]
fn count(_clock: &quanta::Clock) -> u64 {
    // SAFETY: `rdtsc` is in every x86-64 CPU and only reads the counter (quanta's own read is
    // this instruction); it touches no memory.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// The counter quanta reads (through its `raw`, a call: elsewhere the counter's instruction
/// needs `asm!`).
#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
fn count(clock: &quanta::Clock) -> u64 {
    clock.raw()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};
    use std::vec;

    #[test]
    fn ticks_are_nanoseconds_of_wall_time() {
        let clock = TscClock::new();
        let (tsc_start, start) = (clock.now(), Instant::now());
        std::thread::sleep(Duration::from_millis(50));
        let (tsc_end, elapsed) = (clock.now(), start.elapsed());
        let measured = Duration::from_nanos(tsc_end - tsc_start);
        // Calibration error is parts per million; the margin covers the two reads' placement on
        // a busy machine.
        let diff = measured.abs_diff(elapsed);
        assert!(
            diff < Duration::from_millis(2),
            "TSC {measured:?} vs OS {elapsed:?}"
        );
    }

    #[test]
    fn the_scale_reads_what_quantas_own_scaling_reads() {
        let clock = TscClock::new();
        if clock.scale == 0 {
            // No invariant counter here: every reading is quanta's own (the test below).
            return;
        }
        let quanta = |count| clock.clock.delta_as_nanos(0, count);
        let mut counts = vec![1, 2, 3, 1_000, 1 << 20, 1 << 32, 1 << 40, 1 << 50, 1 << 56];
        counts.extend([(1 << 62) - 1, 1 << 62, 1 << 63, u64::MAX - 1, u64::MAX]);
        counts.push(clock.clock.raw());
        // Scattered counts up to 2^62 (48 years of a 3 GHz counter).
        let mut x = 0x9E37_79B9_7F4A_7C15_u64;
        for _ in 0..10_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            counts.push(x >> (2 + x % 40));
        }
        for count in counts {
            let (ours, theirs) = (clock.scaled(count), quanta(count));
            // Within a nanosecond up to 2^62 counts, and `count × 2^-62` ns beyond.
            let bound = 1 + (count >> 62);
            assert!(
                ours.abs_diff(theirs) <= bound,
                "{count} counts: {ours} ns against quanta's {theirs}"
            );
            // Never backwards: one more count never reads less.
            assert!(clock.scaled(count.saturating_add(1)) >= ours);
        }
    }

    #[test]
    fn the_counter_read_in_place_is_quantas_counter() {
        let clock = TscClock::new();
        if clock.scale == 0 {
            return;
        }
        // Each reading between quanta's two around it (to the nanosecond of the scale's
        // rounding). A thread moved between cores in mid-sandwich may see their counters
        // disagree, so a few misses out of a thousand are allowed; a different counter or
        // scale misses every time.
        let quanta = || clock.clock.delta_as_nanos(0, clock.clock.raw());
        let misses = (0..1_000)
            .filter(|_| {
                let (before, ours, after) = (quanta(), clock.now(), quanta());
                !(before <= ours + 1 && ours <= after + 1)
            })
            .count();
        assert!(misses <= 10, "{misses} of 1 000 readings outside quanta's");
    }

    #[test]
    fn a_counter_of_nanoseconds_is_read_through_quanta() {
        // quanta's mock counts nanoseconds, as its fallback on the OS clock does.
        let (mock, counter) = quanta::Clock::mock();
        let clock = TscClock {
            scale: scale_of(&mock),
            clock: mock,
        };
        assert_eq!(clock.scale, 0);
        counter.increment(Duration::from_nanos(123_456_789_012));
        assert_eq!(clock.now(), 123_456_789_012);
    }
}

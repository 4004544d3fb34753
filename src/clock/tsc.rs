//! [`TscClock`]: the CPU's time-stamp counter, read through `quanta` (feature `quanta`).

use crate::Clock;

/// The CPU's cycle counter (`rdtsc` on x86-64, `cntvct_el0` on AArch64) through
/// [`quanta`](https://docs.rs/quanta), scaled to nanoseconds: the clock for hot paths on servers.
///
/// **What it costs.** One read of the counter and one 128-bit multiply-and-shift, with no system
/// call and no shared memory: about a third of [`StdClock`](crate::StdClock) on a machine whose
/// kernel already reads the TSC in the vDSO, and far less where it does not. Ticks are
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
#[derive(Clone, Debug, Default)]
pub struct TscClock {
    clock: quanta::Clock,
}

impl TscClock {
    /// A clock on the time-stamp counter; the first one in a process calibrates it.
    pub fn new() -> Self {
        Self {
            clock: quanta::Clock::new(),
        }
    }
}

impl Clock for TscClock {
    const TICKS_PER_SECOND: u64 = 1_000_000_000;
    #[inline]
    fn now(&self) -> u64 {
        // Nanoseconds since the counter's own zero: a raw read, then one multiply-and-shift.
        self.clock.delta_as_nanos(0, self.clock.raw())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

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
}

//! [`StdClock`]: `std::time::Instant` with one process-wide origin.

use super::Clock;
use std::sync::OnceLock;
use std::time::Instant;

/// `std::time::Instant` in nanoseconds since the first time any `StdClock` was read.
///
/// It is a zero-sized type, so a bucket on it can live in a `static`. One read costs one
/// `Instant::now()` (a vDSO call on Linux, about 20 ns) and one load of the shared origin.
/// The origin is shared by every `StdClock` in the process; 64 bits of nanoseconds last
/// 584 years.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct StdClock;

static ORIGIN: OnceLock<Instant> = OnceLock::new();

impl StdClock {
    /// Converts an `Instant` to this clock's ticks (zero for instants before the origin).
    #[inline]
    pub fn ticks_at(instant: Instant) -> u64 {
        nanos_since(*ORIGIN.get_or_init(Instant::now), instant)
    }
}

/// Nanoseconds from `origin` to `instant`: zero for an instant before the origin, `u64::MAX`
/// past 584 years, which fill the u64 (64-bit arithmetic, where `as_nanos` would multiply in
/// 128 bits). `StdClock` and `TokioClock` both read through it.
#[inline]
pub(crate) fn nanos_since(origin: Instant, instant: Instant) -> u64 {
    let since = instant.saturating_duration_since(origin);
    since
        .as_secs()
        .checked_mul(1_000_000_000)
        .and_then(|nanos| nanos.checked_add(u64::from(since.subsec_nanos())))
        .unwrap_or(u64::MAX)
}

impl Clock for StdClock {
    const TICKS_PER_SECOND: u64 = 1_000_000_000;
    #[inline]
    fn now(&self) -> u64 {
        Self::ticks_at(Instant::now())
    }
}

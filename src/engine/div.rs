//! 64-bit division for the paths that need one (a denial's `retry_after`, a request above the
//! burst), without the 64-bit division routine on 32-bit targets: there it costs about a
//! kilobyte of flash, more than the whole bucket. There it is long division in 16-bit digits on
//! the core's own 32-bit division (Hacker's Delight, `divlu` and `udivdi3`), without a loop, so
//! that the compiler can drop an unread result (a `retry_after` nobody asks for) along with its
//! computation. A core with no divide instruction at all ([`NO_DIVIDE`]: the Cortex-M0) would
//! take even its 32-bit divisions from the runtime's routines, and a count of leading zeros
//! with them, larger than the bucket again: there every division here is shift and subtract
//! ([`shift_subtract`]), a loop of a few dozen bytes, one step per bit of the quotient. On
//! 64-bit targets it is the CPU's division. None panics: a zero divisor, which no caller
//! passes, gives 0.

/// Whether the core has no divide instruction: ARM cores without compare-and-swap (ARMv6-M,
/// and the older ARMv4T and ARMv5TE) have none, nor RV32I without the M extension.
pub(crate) const NO_DIVIDE: bool = cfg!(any(
    all(target_arch = "arm", not(target_has_atomic = "32")),
    all(target_arch = "riscv32", not(target_feature = "m"))
));

/// `n / d`, for `d > 0` (0 for `d = 0`, which no caller passes: no panic path).
#[inline]
pub(crate) const fn div(n: u64, d: u64) -> u64 {
    #[cfg(target_pointer_width = "64")]
    {
        match n.checked_div(d) {
            Some(q) => q,
            None => 0,
        }
    }
    #[cfg(not(target_pointer_width = "64"))]
    {
        if NO_DIVIDE {
            shift_subtract(n, d)
        } else if n <= u32::MAX as u64 && d <= u32::MAX as u64 {
            div32(n as u32, d as u32) as u64
        } else {
            long_division(n, d)
        }
    }
}

/// `n / d`, for `d > 0`, where `n` is rarely below 2^32: [`div`] without its 32-bit shortcut
/// on a 32-bit core, whose check would cost more bytes than it saves time.
#[inline]
pub(crate) const fn div_wide(n: u64, d: u64) -> u64 {
    #[cfg(target_pointer_width = "64")]
    {
        div(n, d)
    }
    #[cfg(not(target_pointer_width = "64"))]
    {
        if NO_DIVIDE {
            shift_subtract(n, d)
        } else {
            long_division(n, d)
        }
    }
}

/// `ceil(n / d)`, for `d > 0`.
#[inline]
pub(crate) const fn div_ceil(n: u64, d: u64) -> u64 {
    let q = div(n, d);
    // q · d <= n: the product cannot overflow.
    q + (q.wrapping_mul(d) != n) as u64
}

/// `n / d` for `d > 0` on 32-bit divisions only: `udivdi3` of Hacker's Delight (9-5), in
/// 32-bit halves (a 64-bit shift by a variable amount is a dozen instructions on a 32-bit core).
#[cfg_attr(target_pointer_width = "64", allow(dead_code))] // tested on the host
#[inline(never)] // one copy; without a loop the compiler still knows it returns and writes nothing
const fn long_division(n: u64, d: u64) -> u64 {
    let (n_high, n_low) = ((n >> 32) as u32, n as u32);
    let (d_high, d_low) = ((d >> 32) as u32, d as u32);
    if d_high == 0 {
        let q_high = div32(n_high, d_low);
        let rem = n_high - q_high * d_low;
        return ((q_high as u64) << 32) | divlu(rem, n_low, d_low) as u64;
    }
    // Normalize the divisor to its top 32 bits (`shift` < 32); the estimate is then at most one
    // too large. The quotient is below 2^32, as the divisor is at least 2^32.
    let shift = d_high.leading_zeros();
    let d_top = (d_high << shift) | ((d_low >> 1) >> (31 - shift));
    // n / 2 < 2^63 and d_top >= 2^31: the high half is below the divisor, as `divlu` needs.
    let estimate = divlu(n_high >> 1, (n_high << 31) | (n_low >> 1), d_top);
    let mut q = (estimate >> (31 - shift)).saturating_sub(1) as u64;
    // q · d <= n here, and n - q · d < 2d.
    if n - q * d >= d {
        q += 1;
    }
    q
}

/// `(high · 2^32 + low) / d` for `high < d` (so the quotient fits 32 bits): `divlu` of
/// Hacker's Delight (9-3), two 16-bit digits, each estimate corrected at most twice.
#[cfg_attr(target_pointer_width = "64", allow(dead_code))]
#[inline(never)] // called twice by `long_division`: one copy, at every opt-level
const fn divlu(high: u32, low: u32, d: u32) -> u32 {
    const B: u32 = 1 << 16;
    let shift = d.leading_zeros();
    let d = d << shift;
    let (d1, d0) = (d >> 16, d & 0xFFFF);
    // high < d, so shifting it left by `shift` keeps every bit.
    let n32 = if shift == 0 {
        high
    } else {
        (high << shift) | (low >> (32 - shift))
    };
    let n10 = low << shift;
    let (n1, n0) = (n10 >> 16, n10 & 0xFFFF);

    let q1 = digit(n32, n1, d1, d0);
    let n21 = n32
        .wrapping_mul(B)
        .wrapping_add(n1)
        .wrapping_sub(q1.wrapping_mul(d));
    let q0 = digit(n21, n0, d1, d0);
    q1 * B + q0
}

/// One 16-bit digit of the quotient of `(n · 2^16 + next) / (d1 · 2^16 + d0)`, for a
/// normalized divisor (`d1 >= 2^15`) and `n` below it, in 32-bit arithmetic only: no product
/// below can overflow (Hacker's Delight 9-3). `q · d0` is formed only while `q < 2^16`, and
/// `rem · 2^16 + next` only while `rem < 2^16`.
#[cfg_attr(target_pointer_width = "64", allow(dead_code))]
#[inline(never)] // called twice by `divlu`: one copy, at every opt-level
const fn digit(n: u32, next: u32, d1: u32, d0: u32) -> u32 {
    const B: u32 = 1 << 16;
    // d1 >= 2^15 > 0: a 32-bit division.
    let mut q = div32(n, d1);
    let mut rem = n - q * d1;
    if q >= B || q * d0 > rem * B + next {
        q -= 1;
        rem += d1;
        if rem < B && (q >= B || q * d0 > rem * B + next) {
            q -= 1;
        }
    }
    q
}

/// `n / d` on the core's 32-bit division (by shift and subtract where it has none), and 0 for
/// `d = 0` (which no caller passes): no panic path, so the compiler may drop a division whose
/// result nobody reads.
#[inline]
pub(crate) const fn div32(n: u32, d: u32) -> u32 {
    if NO_DIVIDE {
        return shift_subtract(n as u64, d as u64) as u32;
    }
    match n.checked_div(d) {
        Some(q) => q,
        None => 0,
    }
}

/// `n / d` by shift and subtract, for a core with no divide instruction: the divisor doubled
/// until it passes half the dividend, then halved back, subtracting where it fits, one quotient
/// bit a step. The steps are the quotient's bits, and most quotients here are small (a wait in
/// ticks, in seconds); in 32 bits while the dividend fits them. 0 for `d = 0`.
#[inline(never)] // one copy for every division of the crate
const fn shift_subtract(n: u64, d: u64) -> u64 {
    if d == 0 || d > n {
        return 0;
    }
    // d <= n: both fit 32 bits when n does.
    if n <= u32::MAX as u64 {
        return restoring!(u32, n as u32, d as u32) as u64;
    }
    restoring!(u64, n, d)
}

/// The division of [`shift_subtract`] in `$t`, the width of its operands, `0 < d <= n`. The
/// divisor is doubled four times at once while that fits (2^4 d <= n), then once at a time,
/// never past `n`, so no doubling overflows: a shift by a constant is a few instructions even
/// on a 64-bit number.
macro_rules! restoring {
    ($t:ty, $n:expr, $d:expr) => {{
        let (n, mut d): ($t, $t) = ($n, $d);
        let mut steps = 0;
        while d <= n >> 4 {
            d <<= 4;
            steps += 4;
        }
        while d <= n >> 1 {
            d <<= 1;
            steps += 1;
        }
        // The quotient's bits, from the highest: subtract the divisor where it fits.
        let (mut q, mut rem): ($t, $t) = (0, n);
        loop {
            q <<= 1;
            if rem >= d {
                rem -= d;
                q |= 1;
            }
            if steps == 0 {
                break q;
            }
            d >>= 1;
            steps -= 1;
        }
    }};
}
use restoring;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_division_divides_as_the_cpu_does() {
        let edges = [
            0,
            1,
            2,
            3,
            7,
            0xFFFF,
            0x1_0000,
            0x8000_0000,
            1_000_000_000,
            u32::MAX as u64 - 1,
            u32::MAX as u64,
            u32::MAX as u64 + 1,
            0x1_0000_0001,
            0xFFFF_FFFF_0000_0000,
            (1 << 63) - 1,
            1 << 63,
            (1 << 63) + 1,
            u64::MAX - 1,
            u64::MAX,
        ];
        for n in edges {
            for d in edges.into_iter().filter(|&d| d > 0) {
                assert_eq!(long_division(n, d), n / d, "{n} / {d}");
                assert_eq!(shift_subtract(n, d), n / d, "{n} / {d}");
                assert_eq!(div(n, d), n / d, "{n} / {d}");
                assert_eq!(div_ceil(n, d), n.div_ceil(d), "{n} / {d}");
            }
        }
        // Operands of every width, against the CPU.
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        // Fewer under miri, which interprets every step.
        let rounds = if cfg!(miri) { 2_000 } else { 200_000 };
        for _ in 0..rounds {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let n = x >> (x % 61);
            let d = (x.rotate_left(29) >> (x.rotate_left(7) % 64)).max(1);
            assert_eq!(long_division(n, d), n / d, "{n} / {d}");
            assert_eq!(shift_subtract(n, d), n / d, "{n} / {d}");
            let (n32, d32) = (n as u32, (d as u32).max(1));
            assert_eq!(shift_subtract(n32.into(), d32.into()), (n32 / d32).into());
        }
        assert_eq!(shift_subtract(5, 0), 0);
    }
}

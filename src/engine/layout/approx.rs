//! Best rational approximation from below, for rates the word cannot hold exactly.
//!
//! All `const fn`, in integers: continued fractions with bounded numerator and denominator, and
//! a 256-bit comparison to measure the error.

/// The largest `p / q <= n / d` with `1 <= q <= q_max` and `p <= p_max`, by continued fractions:
/// the last lower convergent, or the best lower semiconvergent before the first convergent that
/// leaves the bounds. `n, d >= 1`.
pub(crate) const fn best_lower(n: u128, d: u128, p_max: u128, q_max: u128) -> (u128, u128) {
    // (prev, cur) are convergents i-2 and i-1, starting from p/q = 0/1 and 1/0.
    let (mut p_prev, mut q_prev, mut p_cur, mut q_cur) = (0u128, 1u128, 1u128, 0u128);
    let (mut num, mut den) = (n, d);
    let mut i = 0u32;
    while den != 0 {
        let c = num / den;
        (num, den) = (den, num - c * den);
        let next = match (mul_add(c, p_cur, p_prev), mul_add(c, q_cur, q_prev)) {
            (Some(p), Some(q)) if p <= p_max && q <= q_max => Some((p, q)),
            _ => None,
        };
        let Some((p_next, q_next)) = next else {
            if i % 2 == 1 {
                // Convergent i is above n / d; the best below within bounds is convergent i-1.
                return (p_cur, q_cur);
            }
            // Convergent i is below n / d: step from convergent i-2 towards it as far as the
            // bounds allow (semiconvergents increase with j).
            let mut j = c;
            if q_cur > 0 && (q_max - q_prev) / q_cur < j {
                j = (q_max - q_prev) / q_cur;
            }
            if p_cur > 0 && (p_max - p_prev) / p_cur < j {
                j = (p_max - p_prev) / p_cur;
            }
            return (p_prev + j * p_cur, q_prev + j * q_cur);
        };
        (p_prev, q_prev, p_cur, q_cur) = (p_cur, q_cur, p_next, q_next);
        i += 1;
    }
    // The expansion ended inside the bounds: the last convergent is n / d itself.
    (p_cur, q_cur)
}

const fn mul_add(a: u128, b: u128, c: u128) -> Option<u128> {
    match a.checked_mul(b) {
        Some(ab) => ab.checked_add(c),
        None => None,
    }
}

/// Whether `p / q` is below `n / d` by at most a relative `2^-bits`, for `p / q <= n / d`:
/// `(q·n - p·d) · 2^bits <= q·n`, in 256-bit arithmetic.
pub(crate) const fn within(p: u128, q: u128, n: u128, d: u128, bits: u32) -> bool {
    let qn = mul_wide(q, n);
    let pd = mul_wide(p, d);
    let (diff, borrow) = sub_wide(qn, pd);
    if borrow {
        return false; // p / q above n / d: not a lower approximation
    }
    // diff << bits <= qn, without overflow: compare diff <= qn >> bits, rounding qn down is safe
    // because diff is an integer.
    let shifted = shr_wide(qn, bits);
    !gt_wide(diff, shifted)
}

/// (high, low) halves of a 256-bit number.
type Wide = (u128, u128);

const fn mul_wide(a: u128, b: u128) -> Wide {
    const LOW: u128 = u64::MAX as u128;
    let (a1, a0) = (a >> 64, a & LOW);
    let (b1, b0) = (b >> 64, b & LOW);
    let lo = a0 * b0;
    let mid1 = a1 * b0;
    let mid2 = a0 * b1;
    let hi = a1 * b1;
    let (mid, mid_carry) = mid1.overflowing_add(mid2);
    let (lo, lo_carry) = lo.overflowing_add(mid << 64);
    let hi = hi + (mid >> 64) + ((mid_carry as u128) << 64) + lo_carry as u128;
    (hi, lo)
}

const fn sub_wide(a: Wide, b: Wide) -> (Wide, bool) {
    let (lo, borrow_lo) = a.1.overflowing_sub(b.1);
    let (hi, borrow_hi1) = a.0.overflowing_sub(b.0);
    let (hi, borrow_hi2) = hi.overflowing_sub(borrow_lo as u128);
    ((hi, lo), borrow_hi1 || borrow_hi2)
}

const fn shr_wide(a: Wide, bits: u32) -> Wide {
    if bits == 0 {
        a
    } else if bits >= 128 {
        (0, a.0 >> (bits - 128))
    } else {
        (a.0 >> bits, (a.1 >> bits) | (a.0 << (128 - bits)))
    }
}

const fn gt_wide(a: Wide, b: Wide) -> bool {
    a.0 > b.0 || (a.0 == b.0 && a.1 > b.1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn best_lower_approximations() {
        // (n, d, p_max, q_max, best)
        let rows = [
            (1, 3, 100, 100, (1, 3)),                     // exact
            (314_159, 100_000, 1_000, 1_000, (688, 219)), // pi from below: 3.14155…
            (355, 113, 1_000, 112, (333, 106)),
            (7, 2, 3, 10, (3, 1)),    // capped by the numerator
            (1, 1000, 5, 10, (0, 1)), // nothing positive fits
            (
                549_637,
                1_000_000_000,
                512,
                u64::MAX as u128,
                (426, 775_057),
            ),
        ];
        for (n, d, p_max, q_max, best) in rows {
            let (p, q) = best_lower(n, d, p_max, q_max);
            assert_eq!((p, q), best, "{n}/{d}");
            assert!(p * d <= n * q, "{p}/{q} above {n}/{d}");
        }
    }

    #[test]
    fn best_lower_is_best() {
        // Against brute force over small bounds.
        for n in 1..40u128 {
            for d in 1..40u128 {
                for bound in [1u128, 2, 5, 13] {
                    let (p, q) = best_lower(n, d, bound, bound);
                    let mut best = (0u128, 1u128);
                    for bq in 1..=bound {
                        for bp in 0..=bound {
                            if bp * d <= n * bq && bp * best.1 > best.0 * bq {
                                best = (bp, bq);
                            }
                        }
                    }
                    assert_eq!(p * best.1, best.0 * q, "{n}/{d} within {bound}");
                }
            }
        }
    }

    #[test]
    fn relative_error_in_wide_arithmetic() {
        assert!(within(1, 3, 1, 3, 64));
        assert!(within(999_999, 1_000_000, 1, 1, 19));
        assert!(!within(999_999, 1_000_000, 1, 1, 20));
        assert!(!within(2, 3, 1, 3, 1)); // above
        let big = u128::MAX / 3;
        assert!(within(big - 1, big, u128::MAX, u128::MAX, 100));
        assert!(!within(big - 1, big, u128::MAX, u128::MAX, 130));
    }
}

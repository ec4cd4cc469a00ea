//! Per-lane arithmetic helpers whose ISA definitions are more than a one-liner. Each cites
//! the instruction it implements; the executor maps opcodes onto them.

use super::fp;

/// Whether `x` is a signalling NaN (quiet bit clear).
pub fn is_snan_f32(x: f32) -> bool {
    x.is_nan() && x.to_bits() & 0x0040_0000 == 0
}

/// `x` with the quiet bit set (a signalling NaN becomes quiet, others are unchanged).
pub fn quiet_f32(x: f32) -> f32 {
    if x.is_nan() {
        f32::from_bits(x.to_bits() | 0x0040_0000)
    } else {
        x
    }
}

/// `V_MAX_F32` / `V_MIN_F32` (`max == false`): IEEE-754-2008 maxNum/minNum as the ISA
/// defines them. With `MODE.IEEE` set a signalling NaN input produces its quieted self;
/// otherwise a NaN operand is ignored in favour of the other. +0 is larger than -0.
pub fn minmax_f32(a: f32, b: f32, max: bool, ieee: bool) -> f32 {
    if ieee {
        if is_snan_f32(a) {
            return quiet_f32(a);
        }
        if is_snan_f32(b) {
            return quiet_f32(b);
        }
    }
    if a.is_nan() {
        return if b.is_nan() { quiet_f32(a) } else { b };
    }
    if b.is_nan() {
        return a;
    }
    if a == b {
        // Only distinguishes ±0: max prefers +0, min prefers -0.
        let a_neg = a.is_sign_negative();
        return if a_neg == max { b } else { a };
    }
    if (a > b) == max { a } else { b }
}

/// `V_MAX_F64` / `V_MIN_F64`, same rules as [`minmax_f32`].
pub fn minmax_f64(a: f64, b: f64, max: bool, ieee: bool) -> f64 {
    let snan = |x: f64| x.is_nan() && x.to_bits() & (1 << 51) == 0;
    let quiet = |x: f64| {
        if x.is_nan() {
            f64::from_bits(x.to_bits() | (1 << 51))
        } else {
            x
        }
    };
    if ieee {
        if snan(a) {
            return quiet(a);
        }
        if snan(b) {
            return quiet(b);
        }
    }
    if a.is_nan() {
        return if b.is_nan() { quiet(a) } else { b };
    }
    if b.is_nan() {
        return a;
    }
    if a == b {
        return if a.is_sign_negative() == max { b } else { a };
    }
    if (a > b) == max { a } else { b }
}

/// `V_MAXIMUM3_F32`-style NaN-propagating max/min (IEEE-754-2019 maximum/minimum).
pub fn maximum_f32(a: f32, b: f32, max: bool) -> f32 {
    if a.is_nan() {
        return quiet_f32(a);
    }
    if b.is_nan() {
        return quiet_f32(b);
    }
    minmax_f32(a, b, max, false)
}

/// `V_MED3_F32`: the median of three, NaN handling per the ISA: if any input is NaN the
/// result is `min3` of them (which ignores quiet NaNs).
pub fn med3_f32(a: f32, b: f32, c: f32, ieee: bool) -> f32 {
    if a.is_nan() || b.is_nan() || c.is_nan() {
        return minmax_f32(minmax_f32(a, b, false, ieee), c, false, ieee);
    }
    let max3 = minmax_f32(minmax_f32(a, b, true, ieee), c, true, ieee);
    if max3 == a {
        minmax_f32(b, c, true, ieee)
    } else if max3 == b {
        minmax_f32(a, c, true, ieee)
    } else {
        minmax_f32(a, b, true, ieee)
    }
}

/// `V_PERM_B32`: each result byte is selected from the eight bytes of `{s0, s1}` (s1 is the
/// low dword) by the corresponding byte of `sel`: 0-7 pick a byte, 8-11 replicate the sign
/// bit of byte 1, 3, 5, 7, 12 gives 0x00 and 13-255 give 0xFF (CDNA ISA V_PERM_B32).
pub fn perm_b32(s0: u32, s1: u32, sel: u32) -> u32 {
    let bytes = ((s0 as u64) << 32) | s1 as u64;
    let byte = |i: u32| ((bytes >> (8 * i)) & 0xff) as u32;
    let mut out = 0;
    for lane in 0..4 {
        let s = (sel >> (8 * lane)) & 0xff;
        let b = match s {
            0..=7 => byte(s),
            8..=11 => {
                let src = 2 * (s - 8) + 1;
                if byte(src) & 0x80 != 0 { 0xff } else { 0 }
            }
            12 => 0,
            _ => 0xff,
        };
        out |= b << (8 * lane);
    }
    out
}

/// `V_BITOP3_B32`/`_B16`: bit `i` of the result is bit `(s0[i] << 2) | (s1[i] << 1) | s2[i]`
/// of the 8-bit truth table `ttbl`.
pub fn bitop3(s0: u32, s1: u32, s2: u32, ttbl: u8) -> u32 {
    let mut out = 0;
    for idx in 0..8u32 {
        if ttbl >> idx & 1 == 0 {
            continue;
        }
        let m0 = if idx & 4 != 0 { s0 } else { !s0 };
        let m1 = if idx & 2 != 0 { s1 } else { !s1 };
        let m2 = if idx & 1 != 0 { s2 } else { !s2 };
        out |= m0 & m1 & m2;
    }
    out
}

/// Unsigned field extract: `width` bits at `offset & 31`, a zero width gives 0 and a width of
/// 32 or more keeps every bit above the offset. `V_BFE_U32` masks its width to 5 bits before
/// calling this; `S_BFE_U32` passes its 7-bit width field.
pub fn bfe_u32(x: u32, offset: u32, width: u32) -> u32 {
    let o = offset & 31;
    match width {
        0 => 0,
        w if w >= 32 => x >> o,
        w => (x >> o) & ((1u32 << w) - 1),
    }
}

/// Signed field extract: like [`bfe_u32`], then sign-extended from the field's top bit.
pub fn bfe_i32(x: u32, offset: u32, width: u32) -> u32 {
    let v = bfe_u32(x, offset, width);
    match width {
        0 => 0,
        w if w >= 32 => ((x as i32) >> (offset & 31)) as u32,
        w => (((v << (32 - w)) as i32) >> (32 - w)) as u32,
    }
}

/// 64-bit field extract (`S_BFE_U64`/`S_BFE_I64`; offset and width each 6 bits, width 0 -> 0).
pub fn bfe_64(x: u64, offset: u32, width: u32, signed: bool) -> u64 {
    let (o, w) = (offset & 63, width & 127);
    if w == 0 {
        return 0;
    }
    let w = w.min(64);
    let v = if w == 64 {
        x >> o
    } else {
        (x >> o) & ((1u64 << w) - 1)
    };
    if signed && w < 64 {
        (((v << (64 - w)) as i64) >> (64 - w)) as u64
    } else {
        v
    }
}

/// `V_ALIGNBIT_B32`: `({s0, s1} >> (s2 & 31))[31:0]`.
pub fn alignbit(s0: u32, s1: u32, s2: u32) -> u32 {
    ((((s0 as u64) << 32) | s1 as u64) >> (s2 & 31)) as u32
}

/// `V_ALIGNBYTE_B32`: `({s0, s1} >> (8 * (s2 & 3)))[31:0]`.
pub fn alignbyte(s0: u32, s1: u32, s2: u32) -> u32 {
    ((((s0 as u64) << 32) | s1 as u64) >> (8 * (s2 & 3))) as u32
}

/// `V_LSHL_ADD_U64`: `(s0 << s1) + s2` where only shift counts 0-4 are supported; the CDNA4
/// ISA says other counts behave as a shift of zero.
pub fn lshl_add_u64(s0: u64, shift: u32, s2: u64) -> u64 {
    let sh = if shift <= 4 { shift } else { 0 };
    (s0 << sh).wrapping_add(s2)
}

/// `V_CVT_PK_BF16_F32`: `{bf16(s1), bf16(s0)}` with round-to-nearest-even.
pub fn cvt_pk_bf16_f32(s0: f32, s1: f32) -> u32 {
    fp::f32_to_bf16(s0) as u32 | ((fp::f32_to_bf16(s1) as u32) << 16)
}

/// `V_CVT_PK_F16_F32`-style pack with RNE (`V_CVT_PKRTZ_F16_F32` differs: it truncates).
pub fn cvt_pk_f16_f32(s0: f32, s1: f32) -> u32 {
    fp::f32_to_f16(s0) as u32 | ((fp::f32_to_f16(s1) as u32) << 16)
}

/// `V_CVT_PKRTZ_F16_F32`: pack two halves converted with round-toward-zero.
pub fn cvt_pkrtz_f16_f32(s0: f32, s1: f32) -> u32 {
    f32_to_f16_rtz(s0) as u32 | ((f32_to_f16_rtz(s1) as u32) << 16)
}

/// f32 to f16 rounding toward zero (overflow gives the largest finite half, as RTZ does).
pub fn f32_to_f16_rtz(x: f32) -> u16 {
    if x.is_nan() || x.is_infinite() {
        return fp::f32_to_f16(x);
    }
    let r = fp::f32_to_f16(x);
    // Round-to-nearest may have gone away from zero; step back toward zero if so.
    let back = fp::f16_to_f32(r);
    if back.abs() > x.abs() {
        if r & 0x7fff == 0 { r } else { r - 1 }
    } else {
        r
    }
}

/// The scale factor of the `v_cvt_scalef32_*` family as an exact f64 (`2^(e - 127)`, NaN for
/// an exponent field of 0xFF).
pub fn scalef32(scale_bits: u32) -> f64 {
    fp::e8m0_to_f64(fp::scalef32_exponent(scale_bits))
}

/// `V_CVT_SCALEF32_*` narrowing: `code(x / scale)` with one RNE rounding. `saturate` models
/// `MODE.FP16_OVFL` / the clamp bit (FP6/BF6/FP4 always saturate: they have no Inf/NaN).
pub fn cvt_scalef32_to(fmt: &fp::MiniFloat, x: f32, scale_bits: u32, saturate: bool) -> u32 {
    let v = x as f64 / scalef32(scale_bits);
    let overflow = if saturate {
        fp::Overflow::Saturate
    } else {
        fp::Overflow::InfOrNan
    };
    fmt.encode(v, overflow)
}

/// `V_CVT_SCALEF32_*` widening: `decode(code) * scale` as an exact f64 (the caller rounds to
/// the destination type once).
pub fn cvt_scalef32_from(fmt: &fp::MiniFloat, code: u32, scale_bits: u32) -> f64 {
    fmt.decode(code) * scalef32(scale_bits)
}

/// `V_MBCNT_LO/HI`-style count of set bits of `mask` below `lane` (within 32 bits).
pub fn count_below(mask: u32, lane: u32) -> u32 {
    if lane == 0 {
        0
    } else {
        (mask & (u32::MAX >> (32 - lane.min(32)))).count_ones()
    }
}

/// `V_DIV_FIXUP`-free integer helpers: signed 32x32 high product.
pub fn mul_hi_i32(a: u32, b: u32) -> u32 {
    (((a as i32 as i64) * (b as i32 as i64)) >> 32) as u32
}

/// Unsigned 32x32 high product.
pub fn mul_hi_u32(a: u32, b: u32) -> u32 {
    (((a as u64) * (b as u64)) >> 32) as u32
}

/// `V_FFBH_U32`: position of the first set bit counting from the MSB, 0xFFFFFFFF if none.
pub fn ffbh_u32(x: u32) -> u32 {
    if x == 0 { u32::MAX } else { x.leading_zeros() }
}

/// `V_FFBL_B32`: position of the first set bit counting from the LSB, 0xFFFFFFFF if none.
pub fn ffbl_b32(x: u32) -> u32 {
    if x == 0 { u32::MAX } else { x.trailing_zeros() }
}

/// `V_FFBH_I32`: first bit that differs from the sign bit, counting from the MSB;
/// 0xFFFFFFFF for 0 and -1.
pub fn ffbh_i32(x: u32) -> u32 {
    let y = if (x as i32) < 0 { !x } else { x };
    if y == 0 {
        u32::MAX
    } else {
        y.leading_zeros() - 1
    }
}

/// f32 to i32 as `V_CVT_I32_F32` defines it: truncation, saturating at the range ends, NaN
/// gives 0.
pub fn cvt_i32_f32(x: f32) -> u32 {
    // Rust's `as` already saturates and maps NaN to 0, which is the ISA behaviour.
    x as i32 as u32
}

/// f32 to u32 (`V_CVT_U32_F32`): truncation, negative and NaN give 0, saturating high.
pub fn cvt_u32_f32(x: f32) -> u32 {
    x as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perm_selects_bytes_signs_and_constants() {
        let s0 = 0x8877_6655; // bytes 4..7
        let s1 = 0x4433_2211; // bytes 0..3
        assert_eq!(perm_b32(s0, s1, 0x0706_0504), s0);
        assert_eq!(perm_b32(s0, s1, 0x0302_0100), s1);
        assert_eq!(perm_b32(s0, s1, 0x0004_0700), 0x1155_8811);
        // 8: sign of byte 1 (0x22 -> 0), 11: sign of byte 7 (0x88 -> 0xff), 12: 0, 13: 0xff.
        assert_eq!(perm_b32(s0, s1, 0x0d0c_0b08), 0xff00_ff00);
        assert_eq!(perm_b32(s0, s1, 0xff0a_0904), 0xff00_0055); // bytes 5 (0x66) and 3 (0x44)
    }

    #[test]
    fn bitop3_truth_tables() {
        let (a, b, c) = (0xff00_ff00, 0xf0f0_f0f0, 0xcccc_cccc);
        assert_eq!(bitop3(a, b, c, 0x80), a & b & c); // only idx 7 (1,1,1)
        assert_eq!(bitop3(a, b, c, 0xf0), a); // idx with bit 2 set
        assert_eq!(bitop3(a, b, c, 0xcc), b);
        assert_eq!(bitop3(a, b, c, 0xaa), c);
        assert_eq!(bitop3(a, b, c, 0x96), a ^ b ^ c);
        assert_eq!(bitop3(a, b, c, 0xfe), a | b | c);
        assert_eq!(bitop3(a, b, c, 0x00), 0);
    }

    #[test]
    fn minmax_nan_and_zero_rules() {
        let snan = f32::from_bits(0x7f80_0001);
        let qnan = f32::NAN;
        assert_eq!(minmax_f32(1.0, qnan, true, true), 1.0);
        assert_eq!(minmax_f32(qnan, 1.0, false, false), 1.0);
        assert_eq!(minmax_f32(snan, 1.0, true, true).to_bits(), 0x7fc0_0001);
        assert_eq!(minmax_f32(snan, 1.0, true, false), 1.0);
        assert_eq!(minmax_f32(-0.0, 0.0, true, true).to_bits(), 0);
        assert_eq!(minmax_f32(0.0, -0.0, false, true).to_bits(), 0x8000_0000);
        assert_eq!(minmax_f32(2.0, -3.0, true, true), 2.0);
        assert_eq!(minmax_f32(2.0, -3.0, false, true), -3.0);
        assert!(maximum_f32(1.0, qnan, true).is_nan());
        assert_eq!(med3_f32(3.0, 1.0, 2.0, true), 2.0);
        assert_eq!(med3_f32(1.0, 3.0, 2.0, true), 2.0);
        assert_eq!(med3_f32(qnan, 3.0, 2.0, true), 2.0);
        assert_eq!(minmax_f64(1.0, f64::NAN, true, true), 1.0);
    }

    #[test]
    fn bit_fields() {
        assert_eq!(bfe_u32(0xabcd_1234, 8, 8), 0x12);
        assert_eq!(bfe_u32(0xabcd_1234, 28, 4), 0xa);
        assert_eq!(bfe_u32(0xabcd_1234, 0, 0), 0);
        assert_eq!(bfe_i32(0x0000_0f00, 8, 4), 0xffff_ffff);
        assert_eq!(bfe_i32(0x0000_0700, 8, 4), 7);
        assert_eq!(bfe_64(0xf000_0000_0000_0000, 60, 4, true), u64::MAX);
        assert_eq!(bfe_64(0xf000_0000_0000_0000, 60, 4, false), 0xf);
        assert_eq!(alignbit(0x1234_5678, 0x9abc_def0, 8), 0x789a_bcde);
        assert_eq!(alignbyte(0x1234_5678, 0x9abc_def0, 3), 0x3456_789a);
        assert_eq!(ffbh_u32(1), 31);
        assert_eq!(ffbh_u32(0), u32::MAX);
        assert_eq!(ffbl_b32(8), 3);
        assert_eq!(ffbh_i32(0xffff_fffe), 30);
        assert_eq!(ffbh_i32(u32::MAX), u32::MAX);
        assert_eq!(count_below(0xffff_ffff, 5), 5);
        assert_eq!(count_below(0b1010, 4), 2);
        assert_eq!(count_below(u32::MAX, 32), 32);
    }

    #[test]
    fn lshl_add_u64_rules() {
        assert_eq!(lshl_add_u64(3, 4, 1), 49);
        assert_eq!(lshl_add_u64(3, 5, 1), 4, "counts above 4 act as 0");
        assert_eq!(lshl_add_u64(u64::MAX, 0, 2), 1);
    }

    #[test]
    fn conversions() {
        assert_eq!(cvt_pk_bf16_f32(1.0, -2.0), 0xc000_3f80);
        assert_eq!(cvt_pk_f16_f32(1.0, 2.0), 0x4000_3c00);
        // 1 + 2^-11 + 2^-12 rounds to nearest (up) but RTZ truncates.
        let x = 1.0 + 2f32.powi(-11) + 2f32.powi(-12);
        assert_eq!(fp::f32_to_f16(x), 0x3c01);
        assert_eq!(f32_to_f16_rtz(x), 0x3c00);
        assert_eq!(f32_to_f16_rtz(-x), 0xbc00);
        assert_eq!(f32_to_f16_rtz(1e6), 0x7bff);
        assert_eq!(cvt_i32_f32(-3.7), (-3i32) as u32);
        assert_eq!(cvt_i32_f32(f32::NAN), 0);
        assert_eq!(cvt_i32_f32(3e9), i32::MAX as u32);
        assert_eq!(cvt_u32_f32(-1.0), 0);
        assert_eq!(mul_hi_i32((-2i32) as u32, 3), u32::MAX);
        assert_eq!(mul_hi_u32(0x8000_0000, 4), 2);
    }

    #[test]
    fn scaled_conversions() {
        let two = 2.0f32.to_bits(); // exponent field 128 -> scale 2
        // 6.0 / 2 = 3.0 -> FP4 code 0b0101; 13 / 2 = 6.5 saturates to 6.
        assert_eq!(cvt_scalef32_to(&fp::FP4_E2M1, 6.0, two, true), 0b0101);
        assert_eq!(cvt_scalef32_to(&fp::FP4_E2M1, 13.0, two, true), 0b0111);
        assert_eq!(cvt_scalef32_from(&fp::FP4_E2M1, 0b1111, two), -12.0);
        // FP8 without saturation: 1000 / 2 = 500 rounds past 448 -> NaN code.
        assert_eq!(cvt_scalef32_to(&fp::FP8_E4M3, 1000.0, two, false), 0x7f);
        assert_eq!(cvt_scalef32_to(&fp::FP8_E4M3, 1000.0, two, true), 0x7e);
        // Scale exponent 0xFF is NaN: widening gives NaN.
        assert!(cvt_scalef32_from(&fp::FP4_E2M1, 2, 0x7f80_0000).is_nan());
        // Sign and mantissa of the scale operand are ignored.
        assert_eq!(
            cvt_scalef32_from(&fp::FP4_E2M1, 2, (-2.5f32).to_bits()),
            2.0
        );
    }
}

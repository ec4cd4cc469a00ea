//! VALU division steps (`v_div_scale`, `v_div_fmas`, `v_div_fixup`) and transcendentals
//! (`v_rcp`, `v_rsq`, `v_sqrt`, `v_exp`, `v_log`, `v_sin`, `v_cos`).

use super::super::fault::{FaultKind, unimpl};
use super::super::operands::{write_v32, write_v64};
use super::super::sem::div::{DIV_F32, DIV_F64, div_fixup, div_fmas, div_scale, exp_f32, exp_f64};
use super::super::wave::Wave;
use super::*;
use crate::isa::{Inst, Opcode};

/// Executes the division steps and transcendentals; anything left is unimplemented.
pub(super) fn exec(w: &mut Wave, i: &Inst) -> Result<(), FaultKind> {
    use Opcode::*;
    match i.op {
        // Transcendentals: the hardware's are accurate to about 1 ulp; these are computed in
        // f64 and correctly rounded, so results can differ from a device in the last bit.
        // The f32 exponential and logarithm have no denormal path: a result below 2^-126 is
        // flushed to +0 and a denormal input reads as zero. That is why LLVM wraps them in a
        // rescaling when a function keeps denormals, and why kernels that call them bare
        // (Triton's flush-to-zero exp2, tilegen's softmax) see zeros there.
        V_EXP_F32 | V_EXP_LEGACY_F32 => op_f32(w, i, 1, |a| {
            let r = (a[0] as f64).exp2() as f32;
            if r.is_subnormal() { 0.0 } else { r }
        }),
        V_LOG_F32 | V_LOG_LEGACY_F32 => op_f32(w, i, 1, |a| {
            let x = if a[0].is_subnormal() { 0.0 } else { a[0] };
            (x as f64).log2() as f32
        }),
        V_RCP_F32 | V_RCP_IFLAG_F32 => op_f32(w, i, 1, |a| (1.0 / a[0] as f64) as f32),
        V_RSQ_F32 => op_f32(w, i, 1, |a| (1.0 / (a[0] as f64).sqrt()) as f32),
        V_SQRT_F32 => op_f32(w, i, 1, |a| (a[0] as f64).sqrt() as f32),
        V_SIN_F32 => op_f32(w, i, 1, |a| {
            ((a[0] as f64) * std::f64::consts::TAU).sin() as f32
        }),
        V_COS_F32 => op_f32(w, i, 1, |a| {
            ((a[0] as f64) * std::f64::consts::TAU).cos() as f32
        }),
        V_DIV_FIXUP_F32 => op_f32(w, i, 3, |a| {
            div_fixup(a[0] as f64, a[1] as f64, a[2] as f64, 150, |x| {
                exp_f32(x as f32)
            }) as f32
        }),
        V_DIV_FIXUP_F64 => op_f64(w, i, 3, |a| div_fixup(a[0], a[1], a[2], 1075, exp_f64)),
        V_DIV_SCALE_F32 | V_DIV_SCALE_F64 | V_DIV_FMAS_F32 | V_DIV_FMAS_F64 => div_ops(w, i),
        V_RCP_F64 => op_f64(w, i, 1, |a| 1.0 / a[0]),
        V_RSQ_F64 => op_f64(w, i, 1, |a| 1.0 / a[0].sqrt()),
        V_SQRT_F64 => op_f64(w, i, 1, |a| a[0].sqrt()),
        V_RCP_F16 => op_f16(w, i, 1, |a| 1.0 / a[0] as f64),
        V_SQRT_F16 => op_f16(w, i, 1, |a| (a[0] as f64).sqrt()),
        V_RSQ_F16 => op_f16(w, i, 1, |a| 1.0 / (a[0] as f64).sqrt()),
        V_LOG_F16 => op_f16(w, i, 1, |a| (a[0] as f64).log2()),
        V_EXP_F16 => op_f16(w, i, 1, |a| (a[0] as f64).exp2()),
        V_SIN_F16 => op_f16(w, i, 1, |a| (a[0] as f64 * std::f64::consts::TAU).sin()),
        V_COS_F16 => op_f16(w, i, 1, |a| (a[0] as f64 * std::f64::consts::TAU).cos()),
        _ => Err(unimpl(i, "")),
    }
}

/// `v_div_scale_*` and `v_div_fmas_*`, the scaling steps of LLVM's division expansion.
fn div_ops(w: &mut Wave, i: &Inst) -> Result<(), FaultKind> {
    use Opcode::*;
    let wide = matches!(i.op, V_DIV_SCALE_F64 | V_DIV_FMAS_F64);
    let s = if wide {
        f64_srcs(w, i, 3)?
    } else {
        f32_srcs(w, i, 3)?
            .into_iter()
            .map(|v| v.map(|x| x as f64))
            .collect()
    };
    let p = if wide { &DIV_F64 } else { &DIV_F32 };
    let exec = w.exec();
    let scale = matches!(i.op, V_DIV_SCALE_F32 | V_DIV_SCALE_F64);
    let vcc_in = w.vcc();
    let mut out = [0u64; 64];
    let mut vcc_out = 0u64;
    for l in 0..64 {
        let (a, b, c) = (s[0][l], s[1][l], s[2][l]);
        let d = if scale {
            let (d, flag) = div_scale(a, b, c, p, !wide);
            vcc_out |= (flag as u64) << l;
            d
        } else {
            div_fmas(a, b, c, vcc_in >> l & 1 != 0, p, !wide)
        };
        out[l] = d.to_bits();
    }
    if wide {
        write_v64(w, i.dst(), exec, &out)?;
    } else {
        let mut o32 = [0u32; 64];
        for l in 0..64 {
            o32[l] = (f64::from_bits(out[l]) as f32).to_bits();
        }
        write_v32(w, i.dst(), 0, exec, &o32)?;
    }
    if scale {
        write_mask_dst(w, i.sdst(), vcc_out & exec)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::exec::testutil::Harness;

    /// LLVM's f32 division expansion (as in compiled kernels, e.g. Triton softmax): the
    /// result must be the correctly rounded quotient for every input class, which pins down
    /// v_div_scale/v_div_fmas/v_div_fixup together. Expected values: host IEEE division.
    #[test]
    fn division_macro_is_correctly_rounded() {
        const MACRO: &[u32] = &[
            0xd1e00002, 0x04020301, // v_div_scale_f32 v2, s[0:1], v1, v1, v0
            0xd1e06a03, 0x04020300, // v_div_scale_f32 v3, vcc, v0, v1, v0
            0x7e084502, // v_rcp_f32_e32 v4, v2
            0xd1cb0005, 0x23ca0902, // v_fma_f32 v5, -v2, v4, 1.0
            0xd1cb0004, 0x04120905, // v_fma_f32 v4, v5, v4, v4
            0x0a0a0903, // v_mul_f32_e32 v5, v3, v4
            0xd1cb0006, 0x240e0b02, // v_fma_f32 v6, -v2, v5, v3
            0xd1cb0005, 0x04160906, // v_fma_f32 v5, v6, v4, v5
            0xd1cb0002, 0x240e0b02, // v_fma_f32 v2, -v2, v5, v3
            0xd1e20002, 0x04160902, // v_div_fmas_f32 v2, v2, v4, v5
            0xd1de0000, 0x04020302, // v_div_fixup_f32 v0, v2, v1, v0
        ];
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut rnd = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        // A float with a random sign and mantissa and a biased exponent in `exps`.
        let mut float_in = |exps: std::ops::RangeInclusive<u32>| {
            let r = rnd();
            let e = exps.start() + (r >> 40) as u32 % (exps.end() - exps.start() + 1);
            f32::from_bits(((r as u32) & 0x807f_ffff) | (e << 23))
        };
        // (numerator exponents, denominator exponents) per input class; 0 = denormal.
        let classes = [
            (107..=147, 107..=147), // ordinary
            (190..=254, 1..=90),    // quotient near or past overflow
            (1..=30, 137..=190),    // denormal quotient
            (100..=254, 253..=254), // denominator above 2^126 (denormal reciprocal)
            (1..=30, 253..=254),    // both: tiny numerator over a huge denominator
            (1..=147, 0..=0),       // denormal denominator
            (0..=0, 1..=254),       // denormal numerator
            (1..=23, 100..=140),    // tiny numerator
            (0..=0, 0..=0),         // denormal over denormal
        ];
        for (c, (ne, de)) in classes.iter().enumerate() {
            for _ in 0..4 {
                let mut h = Harness::new(MACRO);
                let pairs: Vec<(f32, f32)> = (0..64)
                    .map(|_| (float_in(ne.clone()), float_in(de.clone())))
                    .collect();
                h.set_v(0, |l| pairs[l].0.to_bits());
                h.set_v(1, |l| pairs[l].1.to_bits());
                h.run().unwrap();
                for (l, (n, d)) in pairs.iter().enumerate() {
                    let want = n / d;
                    let got = f32::from_bits(h.v(0)[l]);
                    assert_eq!(
                        got.to_bits(),
                        want.to_bits(),
                        "class {c}: {n:e} / {d:e} = {want:e}, got {got:e}"
                    );
                }
            }
        }
        // Special operands: zeros, infinities and NaN in every combination.
        let specials = [
            0.0f32,
            -0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            1.5,
            -3.0,
            f32::MAX,
        ];
        let mut h = Harness::new(MACRO);
        h.set_v(0, |l| specials[l % 8].to_bits());
        h.set_v(1, |l| specials[l / 8].to_bits());
        h.run().unwrap();
        for l in 0..64 {
            let (n, d) = (specials[l % 8], specials[l / 8]);
            let (want, got) = (n / d, f32::from_bits(h.v(0)[l]));
            if want.is_nan() {
                assert!(got.is_nan(), "{n} / {d} = NaN, got {got}");
            } else {
                assert_eq!(
                    got.to_bits(),
                    want.to_bits(),
                    "{n} / {d} = {want}, got {got}"
                );
            }
        }
    }

    /// `v_exp_f32` flushes results below 2^-126 to +0 and `v_log_f32` reads a denormal as
    /// zero; elsewhere they are 2^x and log2(x).
    #[test]
    fn exp_and_log_have_no_denormals() {
        const CODE: &[u32] = &[
            0x7e024100, // v_exp_f32_e32 v1, v0
            0x7e044300, // v_log_f32_e32 v2, v0
        ];
        let inputs = [
            3.0f32,
            -1.5,
            -126.0,
            -126.5,
            -140.0,
            -149.0,
            f32::NEG_INFINITY,
            0.0,
            f32::from_bits(0x0000_0100),
            f32::from_bits(0x8040_0000),
            f32::MIN_POSITIVE,
            8.0,
        ];
        let mut h = Harness::new(CODE);
        h.set_v(0, |l| inputs[l % inputs.len()].to_bits());
        h.run().unwrap();
        let (exps, logs) = (h.v(1), h.v(2));
        for (l, &x) in inputs.iter().enumerate() {
            let e = f32::from_bits(exps[l]);
            let want = if x < -126.0 { 0.0 } else { x.exp2() };
            assert_eq!(e.to_bits(), want.to_bits(), "exp2({x:e}) = {e:e}");
            let lg = f32::from_bits(logs[l]);
            let want = if x.is_subnormal() {
                f32::NEG_INFINITY
            } else {
                x.log2()
            };
            if want.is_nan() {
                assert!(lg.is_nan(), "log2({x:e}) = {lg:e}");
            } else {
                assert_eq!(lg.to_bits(), want.to_bits(), "log2({x:e}) = {lg:e}");
            }
        }
    }

    /// LLVM's f64 division expansion, checked like the f32 one.
    #[test]
    fn f64_division_macro_is_correctly_rounded() {
        const MACRO: &[u32] = &[
            0xd1e10004, 0x04020502, // v_div_scale_f64 v[4:5], s[0:1], v[2:3], v[2:3], v[0:1]
            0x7e0c4b04, // v_rcp_f64_e32 v[6:7], v[4:5]
            0xd1cc0008, 0x23ca0d04, // v_fma_f64 v[8:9], -v[4:5], v[6:7], 1.0
            0xd1cc0006, 0x041a1106, // v_fma_f64 v[6:7], v[6:7], v[8:9], v[6:7]
            0xd1cc0008, 0x23ca0d04, // v_fma_f64 v[8:9], -v[4:5], v[6:7], 1.0
            0xd1cc0006, 0x041a1106, // v_fma_f64 v[6:7], v[6:7], v[8:9], v[6:7]
            0xd1e16a08, 0x04020500, // v_div_scale_f64 v[8:9], vcc, v[0:1], v[2:3], v[0:1]
            0xd281000a, 0x00020d08, // v_mul_f64 v[10:11], v[8:9], v[6:7]
            0xd1cc0004, 0x24221504, // v_fma_f64 v[4:5], -v[4:5], v[10:11], v[8:9]
            0xd1e30004, 0x042a0d04, // v_div_fmas_f64 v[4:5], v[4:5], v[6:7], v[10:11]
            0xd1df0000, 0x04020504, // v_div_fixup_f64 v[0:1], v[4:5], v[2:3], v[0:1]
        ];
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut rnd = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut float_in = |exps: std::ops::RangeInclusive<u64>| {
            let r = rnd();
            let e = exps.start() + (rnd() >> 20) % (exps.end() - exps.start() + 1);
            f64::from_bits((r & 0x800f_ffff_ffff_ffff) | (e << 52))
        };
        let classes = [
            (1000..=1046, 1000..=1046), // ordinary
            (1800..=2046, 1..=600),     // quotient near or past overflow
            (1..=100, 1100..=1500),     // denormal quotient
            (900..=2046, 2045..=2046),  // denominator above 2^1022 (denormal reciprocal)
            (1..=100, 2045..=2046),     // both
            (1..=1046, 0..=0),          // denormal denominator
            (0..=0, 1..=2046),          // denormal numerator
            (1..=53, 900..=1100),       // tiny numerator
        ];
        for (c, (ne, de)) in classes.iter().enumerate() {
            for _ in 0..4 {
                let mut h = Harness::new(MACRO);
                let pairs: Vec<(f64, f64)> = (0..64)
                    .map(|_| (float_in(ne.clone()), float_in(de.clone())))
                    .collect();
                h.set_v(0, |l| pairs[l].0.to_bits() as u32);
                h.set_v(1, |l| (pairs[l].0.to_bits() >> 32) as u32);
                h.set_v(2, |l| pairs[l].1.to_bits() as u32);
                h.set_v(3, |l| (pairs[l].1.to_bits() >> 32) as u32);
                h.run().unwrap();
                for (l, (n, d)) in pairs.iter().enumerate() {
                    let want = n / d;
                    let got = f64::from_bits(h.v(0)[l] as u64 | (h.v(1)[l] as u64) << 32);
                    assert_eq!(
                        got.to_bits(),
                        want.to_bits(),
                        "class {c}: {n:e} / {d:e} = {want:e}, got {got:e}"
                    );
                }
            }
        }
    }
}

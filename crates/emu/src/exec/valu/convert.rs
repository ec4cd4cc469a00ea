//! VALU conversions: between f16/bf16/f32/f64 and integers, to and from FP8/BF8, and the
//! `v_cvt_scalef32_*` family with an E8M0 scale.

use super::super::alu;
use super::super::fault::{FaultKind, unimpl};
use super::super::fp::{self, BF8_E5M2, FP4_E2M1, FP8_E4M3, MiniFloat, Overflow};
use super::super::operands::{vreg, write_v32, write_v64};
use super::super::wave::Wave;
use super::*;
use crate::isa::{Encoding, Inst, Opcode};

fn byte_sel(i: &Inst) -> u32 {
    // VOP3 forms pick the byte with op_sel[1:0]; SDWA has already selected it.
    if i.encoding == Encoding::Vop3 {
        (i.mods.op_sel & 3) as u32
    } else {
        0
    }
}

fn word_sel(i: &Inst) -> u32 {
    if i.encoding == Encoding::Vop3 {
        (i.mods.op_sel & 1) as u32
    } else {
        0
    }
}

fn narrow_overflow(w: &Wave, i: &Inst) -> Overflow {
    if i.mods.clamp || fp16_ovfl(w) {
        Overflow::Saturate
    } else {
        Overflow::InfOrNan
    }
}

/// `v_cvt_scalef32_*`: conversions between f32/f16/bf16 and FP8/BF8/FP4 with an E8M0 scale
/// taken from the exponent field of source 1 (CDNA4 ISA 7.3).
fn scalef32(w: &mut Wave, i: &Inst) -> Result<(), FaultKind> {
    use Opcode::*;
    let src = fetch(w, i, 0)?;
    let scale = fetch(w, i, 1)?;
    let ovf = narrow_overflow(w, i);
    let exec = w.exec();
    // Widening to two f32 results (a 64-bit destination).
    let widen_pk_f32 = |fmt: &MiniFloat, per: u32, sel: u32| -> [u64; 64] {
        let mut out = [0u64; 64];
        for l in 0..64 {
            let bits = fmt.bits();
            let base = sel * per * bits;
            let lo =
                alu::cvt_scalef32_from(fmt, (src[l] >> base) & fmt.code_mask(), scale[l]) as f32;
            let hi =
                alu::cvt_scalef32_from(fmt, (src[l] >> (base + bits)) & fmt.code_mask(), scale[l])
                    as f32;
            out[l] = lo.to_bits() as u64 | ((hi.to_bits() as u64) << 32);
        }
        out
    };
    match i.op {
        V_CVT_SCALEF32_PK_F32_FP4 => {
            let out = widen_pk_f32(&FP4_E2M1, 2, byte_sel(i));
            write_v64(w, i.dst(), exec, &out)
        }
        V_CVT_SCALEF32_PK_F32_FP8 | V_CVT_SCALEF32_PK_F32_BF8 => {
            let fmt = if i.op == V_CVT_SCALEF32_PK_F32_FP8 {
                FP8_E4M3
            } else {
                BF8_E5M2
            };
            let out = widen_pk_f32(&fmt, 2, word_sel(i));
            write_v64(w, i.dst(), exec, &out)
        }
        V_CVT_SCALEF32_F32_FP8 | V_CVT_SCALEF32_F32_BF8 => {
            let fmt = if i.op == V_CVT_SCALEF32_F32_FP8 {
                FP8_E4M3
            } else {
                BF8_E5M2
            };
            let sel = byte_sel(i);
            let mut out = [0u32; 64];
            for l in 0..64 {
                out[l] = (alu::cvt_scalef32_from(&fmt, (src[l] >> (8 * sel)) & 0xff, scale[l])
                    as f32)
                    .to_bits();
            }
            store(w, i, &out)
        }
        V_CVT_SCALEF32_PK_BF16_FP4
        | V_CVT_SCALEF32_PK_F16_FP4
        | V_CVT_SCALEF32_PK_BF16_FP8
        | V_CVT_SCALEF32_PK_BF16_BF8
        | V_CVT_SCALEF32_PK_F16_FP8
        | V_CVT_SCALEF32_PK_F16_BF8 => {
            // Two elements of the selected byte (FP4) or word (FP8/BF8) become two halves.
            let (fmt, shift) = match i.op {
                V_CVT_SCALEF32_PK_BF16_FP4 | V_CVT_SCALEF32_PK_F16_FP4 => {
                    (FP4_E2M1, 8 * byte_sel(i))
                }
                V_CVT_SCALEF32_PK_BF16_FP8 | V_CVT_SCALEF32_PK_F16_FP8 => {
                    (FP8_E4M3, 16 * word_sel(i))
                }
                _ => (BF8_E5M2, 16 * word_sel(i)),
            };
            let to_bf16 = matches!(
                i.op,
                V_CVT_SCALEF32_PK_BF16_FP4
                    | V_CVT_SCALEF32_PK_BF16_FP8
                    | V_CVT_SCALEF32_PK_BF16_BF8
            );
            let bits = fmt.bits();
            // Hot in Triton's FP4-to-bf16 GEMM path, hence the table and the f32 route: an
            // FP8/BF8/FP4 value times a power of two in [2^-127, 2^127] has at most four
            // significant bits and a magnitude of at least 2^-145, so it is exact in f32 (or
            // overflows there exactly when it overflows bf16/f16), and converting the f32
            // rounds once, as converting the exact value would.
            let lut = fmt.cached_table();
            let mut out = [0u32; 64];
            for l in 0..64 {
                let mut r = 0u32;
                for e in 0..2 {
                    let code = (src[l] >> (shift + e * bits)) & fmt.code_mask();
                    let v = (lut[code as usize] as f64 * alu::scalef32(scale[l])) as f32;
                    let h = if v.is_nan() {
                        if to_bf16 { 0x7fc0 } else { 0x7e00 }
                    } else if to_bf16 {
                        fp::f32_to_bf16(v) as u32
                    } else {
                        fp::f32_to_f16(v) as u32
                    };
                    r |= h << (16 * e);
                }
                out[l] = r;
            }
            store(w, i, &out)
        }
        V_CVT_SCALEF32_F16_FP8 | V_CVT_SCALEF32_F16_BF8 => {
            // One element to one half; op_sel[1:0] pick the source byte, op_sel[3] the
            // destination half (the other half is kept).
            let fmt = if i.op == V_CVT_SCALEF32_F16_FP8 {
                FP8_E4M3
            } else {
                BF8_E5M2
            };
            let sel = byte_sel(i);
            let mut out = [0u16; 64];
            for l in 0..64 {
                let v = alu::cvt_scalef32_from(&fmt, (src[l] >> (8 * sel)) & 0xff, scale[l]);
                out[l] = if v.is_nan() {
                    0x7e00
                } else {
                    fp::F16.encode(v, Overflow::InfOrNan) as u16
                };
            }
            let hi = i.mods.op_sel >> 3 & 1 != 0;
            let old = w.vgpr[vreg(&i.dst(), 0)?];
            let mut merged = [0u32; 64];
            for l in 0..64 {
                merged[l] = if hi {
                    (old[l] & 0xffff) | ((out[l] as u32) << 16)
                } else {
                    (old[l] & 0xffff_0000) | out[l] as u32
                };
            }
            store(w, i, &merged)
        }
        V_CVT_SCALEF32_PK_FP8_F32 | V_CVT_SCALEF32_PK_BF8_F32 | V_CVT_SCALEF32_PK_FP4_F32 => {
            // Two f32 sources become two codes written to the word (FP8) or byte (FP4)
            // op_sel[3] / op_sel[3:2] selects; the rest of the destination is kept.
            let b = fetch(w, i, 1)?;
            let scale2 = fetch(w, i, 2)?;
            let (fmt, width, slot) = match i.op {
                V_CVT_SCALEF32_PK_FP8_F32 => (FP8_E4M3, 16, (i.mods.op_sel >> 3 & 1) as u32),
                V_CVT_SCALEF32_PK_BF8_F32 => (BF8_E5M2, 16, (i.mods.op_sel >> 3 & 1) as u32),
                _ => (FP4_E2M1, 8, (i.mods.op_sel >> 2 & 3) as u32),
            };
            let old = w.vgpr[vreg(&i.dst(), 0)?];
            let mut out = [0u32; 64];
            let sat = ovf == Overflow::Saturate;
            for l in 0..64 {
                let x0 = fmods(i, 0, f32::from_bits(src[l]));
                let x1 = fmods(i, 1, f32::from_bits(b[l]));
                let c0 = alu::cvt_scalef32_to(&fmt, x0, scale2[l], sat);
                let c1 = alu::cvt_scalef32_to(&fmt, x1, scale2[l], sat);
                let field = c0 | (c1 << fmt.bits());
                let mask = ((1u64 << width) - 1) as u32;
                out[l] = (old[l] & !(mask << (width * slot))) | ((field & mask) << (width * slot));
            }
            store(w, i, &out)
        }
        V_CVT_SCALEF32_PK_FP8_F16
        | V_CVT_SCALEF32_PK_BF8_F16
        | V_CVT_SCALEF32_PK_FP8_BF16
        | V_CVT_SCALEF32_PK_BF8_BF16
        | V_CVT_SCALEF32_PK_FP4_F16
        | V_CVT_SCALEF32_PK_FP4_BF16 => {
            // A packed pair of halves becomes two codes in the selected word/byte.
            let from_bf16 = matches!(
                i.op,
                V_CVT_SCALEF32_PK_FP8_BF16
                    | V_CVT_SCALEF32_PK_BF8_BF16
                    | V_CVT_SCALEF32_PK_FP4_BF16
            );
            let (fmt, width, slot) = match i.op {
                V_CVT_SCALEF32_PK_FP8_F16 | V_CVT_SCALEF32_PK_FP8_BF16 => {
                    (FP8_E4M3, 16, (i.mods.op_sel >> 3 & 1) as u32)
                }
                V_CVT_SCALEF32_PK_BF8_F16 | V_CVT_SCALEF32_PK_BF8_BF16 => {
                    (BF8_E5M2, 16, (i.mods.op_sel >> 3 & 1) as u32)
                }
                _ => (FP4_E2M1, 8, (i.mods.op_sel >> 2 & 3) as u32),
            };
            let old = w.vgpr[vreg(&i.dst(), 0)?];
            let sat = ovf == Overflow::Saturate;
            let mut out = [0u32; 64];
            for l in 0..64 {
                let h = |e: u32| {
                    let bits = (src[l] >> (16 * e)) as u16;
                    if from_bf16 {
                        fp::bf16_to_f32(bits)
                    } else {
                        fp::f16_to_f32(bits)
                    }
                };
                let field = alu::cvt_scalef32_to(&fmt, h(0), scale[l], sat)
                    | (alu::cvt_scalef32_to(&fmt, h(1), scale[l], sat) << fmt.bits());
                let mask = ((1u64 << width) - 1) as u32;
                out[l] = (old[l] & !(mask << (width * slot))) | ((field & mask) << (width * slot));
            }
            store(w, i, &out)
        }
        _ => Err(unimpl(
            i,
            "this scaled conversion (stochastic rounding and FP6/BF6 forms are not implemented)",
        )),
    }
}

/// Executes the conversions; the rest go on to [`super::div::exec`].
pub(super) fn exec(w: &mut Wave, i: &Inst) -> Result<(), FaultKind> {
    use Opcode::*;
    match i.op {
        // ---------------- conversions ----------------
        V_CVT_F32_I32 => cvt_to_f32(w, i, |x| x as i32 as f32),
        V_CVT_F32_U32 => cvt_to_f32(w, i, |x| x as f32),
        V_CVT_I32_F32 => op_f32_to_u32(w, i, alu::cvt_i32_f32),
        V_CVT_U32_F32 => op_f32_to_u32(w, i, alu::cvt_u32_f32),
        V_CVT_RPI_I32_F32 => {
            op_f32_to_u32(w, i, |x| alu::cvt_i32_f32((x as f64 + 0.5).floor() as f32))
        }
        V_CVT_FLR_I32_F32 => op_f32_to_u32(w, i, |x| alu::cvt_i32_f32(x.floor())),
        V_CVT_OFF_F32_I4 => cvt_to_f32(w, i, |x| (((x & 0xf) << 28) as i32 >> 28) as f32 / 16.0),
        V_CVT_F32_UBYTE0 => cvt_to_f32(w, i, |x| (x & 0xff) as f32),
        V_CVT_F32_UBYTE1 => cvt_to_f32(w, i, |x| ((x >> 8) & 0xff) as f32),
        V_CVT_F32_UBYTE2 => cvt_to_f32(w, i, |x| ((x >> 16) & 0xff) as f32),
        V_CVT_F32_UBYTE3 => cvt_to_f32(w, i, |x| (x >> 24) as f32),
        V_CVT_F16_F32 => {
            let a = f32_srcs(w, i, 1)?;
            let mut out = [0u16; 64];
            for l in 0..64 {
                out[l] = fp::f32_to_f16(omod_clamp(w, i, a[0][l] as f64) as f32);
            }
            store16(w, i, &out)
        }
        V_CVT_F32_F16 => {
            let a = fetch(w, i, 0)?;
            let mut out = [0u32; 64];
            for l in 0..64 {
                let x = fmods(i, 0, fp::f16_to_f32(half(i, 0, a[l])));
                out[l] = (omod_clamp(w, i, x as f64) as f32).to_bits();
            }
            store(w, i, &out)
        }
        V_CVT_F32_BF16 => {
            let a = fetch(w, i, 0)?;
            let mut out = [0u32; 64];
            for l in 0..64 {
                out[l] = fmods(i, 0, fp::bf16_to_f32(half(i, 0, a[l]))).to_bits();
            }
            store(w, i, &out)
        }
        V_CVT_F32_F64 => {
            let a = f64_srcs(w, i, 1)?;
            let mut out = [0u32; 64];
            for l in 0..64 {
                out[l] = (omod_clamp(w, i, a[0][l]) as f32).to_bits();
            }
            store(w, i, &out)
        }
        V_CVT_F64_F32 | V_CVT_F64_I32 | V_CVT_F64_U32 => {
            let a = fetch(w, i, 0)?;
            let mut out = [0u64; 64];
            for l in 0..64 {
                let x = match i.op {
                    V_CVT_F64_F32 => fmods(i, 0, f32::from_bits(a[l])) as f64,
                    V_CVT_F64_I32 => a[l] as i32 as f64,
                    _ => a[l] as f64,
                };
                out[l] = omod_clamp(w, i, x).to_bits();
            }
            let mask = w.exec();
            write_v64(w, i.dst(), mask, &out)
        }
        V_CVT_I32_F64 | V_CVT_U32_F64 => {
            let a = f64_srcs(w, i, 1)?;
            let mut out = [0u32; 64];
            for l in 0..64 {
                out[l] = if i.op == V_CVT_I32_F64 {
                    a[0][l] as i32 as u32
                } else {
                    a[0][l] as u32
                };
            }
            store(w, i, &out)
        }
        V_CVT_PK_BF16_F32 => {
            let s = f32_srcs(w, i, 2)?;
            let mut out = [0u32; 64];
            for l in 0..64 {
                out[l] = alu::cvt_pk_bf16_f32(s[0][l], s[1][l]);
            }
            store(w, i, &out)
        }
        V_CVT_PK_F16_F32 => {
            let s = f32_srcs(w, i, 2)?;
            let mut out = [0u32; 64];
            for l in 0..64 {
                out[l] = alu::cvt_pk_f16_f32(s[0][l], s[1][l]);
            }
            store(w, i, &out)
        }
        V_CVT_PKRTZ_F16_F32 => {
            let s = f32_srcs(w, i, 2)?;
            let mut out = [0u32; 64];
            for l in 0..64 {
                out[l] = alu::cvt_pkrtz_f16_f32(s[0][l], s[1][l]);
            }
            store(w, i, &out)
        }
        V_CVT_PK_U16_U32 => op_u32(w, i, 2, |a, _| a[0].min(0xffff) | (a[1].min(0xffff) << 16)),
        V_CVT_PK_I16_I32 => op_u32(w, i, 2, |a, _| {
            let c = |x: u32| (x as i32).clamp(i16::MIN as i32, i16::MAX as i32) as u16 as u32;
            c(a[0]) | (c(a[1]) << 16)
        }),
        V_PACK_B32_F16 => {
            let (a, b) = (fetch(w, i, 0)?, fetch(w, i, 1)?);
            let mut out = [0u32; 64];
            for l in 0..64 {
                let h = |k: usize, x: u32| {
                    fp::f32_to_f16(fmods(i, k, fp::f16_to_f32(half(i, k, x)))) as u32
                };
                out[l] = h(0, a[l]) | (h(1, b[l]) << 16);
            }
            store(w, i, &out)
        }
        V_CVT_F16_U16 | V_CVT_F16_I16 | V_CVT_U16_F16 | V_CVT_I16_F16 => conv16(w, i),
        V_CVT_F32_FP8 | V_CVT_F32_BF8 => {
            let fmt = if i.op == V_CVT_F32_FP8 {
                FP8_E4M3
            } else {
                BF8_E5M2
            };
            let a = fetch(w, i, 0)?;
            let sel = byte_sel(i);
            let mut out = [0u32; 64];
            for l in 0..64 {
                out[l] = fmt.decode_f32((a[l] >> (8 * sel)) & 0xff).to_bits();
            }
            // SDWA only selects the source byte here; the result is a whole f32.
            let mask = write_mask(w, i)?;
            write_v32(w, i.dst(), 0, mask, &out)
        }
        V_CVT_PK_F32_FP8 | V_CVT_PK_F32_BF8 => {
            let fmt = if i.op == V_CVT_PK_F32_FP8 {
                FP8_E4M3
            } else {
                BF8_E5M2
            };
            let a = fetch(w, i, 0)?;
            let sel = word_sel(i);
            let mut out = [0u64; 64];
            for l in 0..64 {
                let word = a[l] >> (16 * sel);
                let lo = fmt.decode_f32(word & 0xff).to_bits() as u64;
                let hi = fmt.decode_f32((word >> 8) & 0xff).to_bits() as u64;
                out[l] = lo | (hi << 32);
            }
            let mask = w.exec();
            write_v64(w, i.dst(), mask, &out)
        }
        V_CVT_PK_FP8_F32 | V_CVT_PK_BF8_F32 => {
            // Two f32 become two codes in the word op_sel[3] selects; the other word is kept.
            let fmt = if i.op == V_CVT_PK_FP8_F32 {
                FP8_E4M3
            } else {
                BF8_E5M2
            };
            let s = f32_srcs(w, i, 2)?;
            let ovf = narrow_overflow(w, i);
            let slot = (i.mods.op_sel >> 3 & 1) as u32;
            let old = w.vgpr[vreg(&i.dst(), 0)?];
            let mut out = [0u32; 64];
            for l in 0..64 {
                let field =
                    fmt.encode(s[0][l] as f64, ovf) | (fmt.encode(s[1][l] as f64, ovf) << 8);
                out[l] = (old[l] & !(0xffff << (16 * slot))) | (field << (16 * slot));
            }
            store(w, i, &out)
        }
        V_CVT_SCALEF32_PK_FP8_F32
        | V_CVT_SCALEF32_PK_BF8_F32
        | V_CVT_SCALEF32_SR_FP8_F32
        | V_CVT_SCALEF32_SR_BF8_F32
        | V_CVT_SCALEF32_PK_F32_FP8
        | V_CVT_SCALEF32_PK_F32_BF8
        | V_CVT_SCALEF32_F32_FP8
        | V_CVT_SCALEF32_F32_BF8
        | V_CVT_SCALEF32_PK_FP4_F32
        | V_CVT_SCALEF32_SR_PK_FP4_F32
        | V_CVT_SCALEF32_PK_F32_FP4
        | V_CVT_SCALEF32_PK_FP8_F16
        | V_CVT_SCALEF32_PK_BF8_F16
        | V_CVT_SCALEF32_SR_FP8_F16
        | V_CVT_SCALEF32_SR_BF8_F16
        | V_CVT_SCALEF32_PK_FP8_BF16
        | V_CVT_SCALEF32_PK_BF8_BF16
        | V_CVT_SCALEF32_SR_FP8_BF16
        | V_CVT_SCALEF32_SR_BF8_BF16
        | V_CVT_SCALEF32_PK_F16_FP8
        | V_CVT_SCALEF32_PK_F16_BF8
        | V_CVT_SCALEF32_F16_FP8
        | V_CVT_SCALEF32_F16_BF8
        | V_CVT_SCALEF32_PK_FP4_F16
        | V_CVT_SCALEF32_PK_FP4_BF16
        | V_CVT_SCALEF32_SR_PK_FP4_F16
        | V_CVT_SCALEF32_SR_PK_FP4_BF16
        | V_CVT_SCALEF32_PK_F16_FP4
        | V_CVT_SCALEF32_PK_BF16_FP4
        | V_CVT_SCALEF32_PK_BF16_FP8
        | V_CVT_SCALEF32_PK_BF16_BF8 => scalef32(w, i),
        V_CVT_NORM_I16_F16 | V_CVT_NORM_U16_F16 => {
            let a = fetch(w, i, 0)?;
            let signed = i.op == V_CVT_NORM_I16_F16;
            let mut out = [0u16; 64];
            for l in 0..64 {
                let x = fmods(i, 0, fp::f16_to_f32(half(i, 0, a[l]))) as f64;
                out[l] = if signed {
                    (x.clamp(-1.0, 1.0) * 32767.0).round_ties_even() as i16 as u16
                } else {
                    (x.clamp(0.0, 1.0) * 65535.0).round_ties_even() as u16
                };
            }
            store16(w, i, &out)
        }
        _ => super::div::exec(w, i),
    }
}

fn cvt_to_f32(w: &mut Wave, i: &Inst, f: impl Fn(u32) -> f32) -> Result<(), FaultKind> {
    let a = fetch(w, i, 0)?;
    let mut out = [0u32; 64];
    for l in 0..64 {
        out[l] = (omod_clamp(w, i, f(a[l]) as f64) as f32).to_bits();
    }
    store(w, i, &out)
}

fn op_f32_to_u32(w: &mut Wave, i: &Inst, f: impl Fn(f32) -> u32) -> Result<(), FaultKind> {
    let a = f32_srcs(w, i, 1)?;
    let mut out = [0u32; 64];
    for l in 0..64 {
        out[l] = f(a[0][l]);
    }
    store(w, i, &out)
}

fn conv16(w: &mut Wave, i: &Inst) -> Result<(), FaultKind> {
    use Opcode::*;
    let a = fetch(w, i, 0)?;
    let mut out = [0u16; 64];
    for l in 0..64 {
        let h = half(i, 0, a[l]);
        out[l] = match i.op {
            V_CVT_F16_U16 => fp::F16.encode(h as f64, Overflow::InfOrNan) as u16,
            V_CVT_F16_I16 => fp::F16.encode(h as i16 as f64, Overflow::InfOrNan) as u16,
            V_CVT_U16_F16 => {
                let x = fmods(i, 0, fp::f16_to_f32(h));
                if x.is_nan() {
                    0
                } else {
                    x.clamp(0.0, 65535.0) as u16
                }
            }
            _ => {
                let x = fmods(i, 0, fp::f16_to_f32(h));
                if x.is_nan() {
                    0
                } else {
                    x.clamp(i16::MIN as f32, i16::MAX as f32) as i16 as u16
                }
            }
        };
    }
    store16(w, i, &out)
}

#[cfg(test)]
mod tests {
    use crate::exec::testutil::Harness;

    /// FP4 to bf16/f16 with extreme scales (the scale is the exponent field of the f32
    /// source 1). FP4 codes: 0x7 = 6, 0x1 = 0.5, 0x3 = 1.5, 0x9 = -0.5; byte 0 holds element 0
    /// in its low nibble. Hand-derived:
    /// * lane 0, scale 2^127: bf16(6 * 2^127) overflows to 0x7f80, bf16(2^126) = 0x7e80;
    ///   scale 2^-24: f16(6 * 2^-24) = denormal 6 = 0x0006, f16(2^-25) ties to even = 0.
    /// * lane 1, scale 2^-127 (field 0): bf16(1.5 * 2^-127) = 96 * 2^-133 = 0x0060,
    ///   bf16(-0.5 * 2^-127) = 0x8020; scale 2^-15: f16(1.5 * 2^-15) = 768 * 2^-24 = 0x0300,
    ///   f16(-2^-16) = 0x8100.
    #[test]
    fn scaled_fp4_conversions_at_the_range_ends() {
        let mut h = Harness::new(&[
            0xd251000e, 0x00020702, // v_cvt_scalef32_pk_bf16_fp4 v14, v2, v3
            0xd250000f, 0x00020902, // v_cvt_scalef32_pk_f16_fp4 v15, v2, v4
        ]);
        h.set_v(2, |l| [0x17, 0x93][l % 2]);
        h.set_v(3, |l| [0x7f00_0000, 0x0000_0000][l % 2]);
        h.set_v(4, |l| [0x3380_0000, 0x3800_0000][l % 2]);
        h.run().unwrap();
        assert_eq!((h.v(14)[0], h.v(15)[0]), (0x7e80_7f80, 0x0000_0006));
        assert_eq!((h.v(14)[1], h.v(15)[1]), (0x8020_0060, 0x8100_0300));
    }

    #[test]
    fn scaled_fp4_conversion_selects_byte_and_scales() {
        let mut h = Harness::new(&[
            0xd251081f, 0x0002290e, // v_cvt_scalef32_pk_bf16_fp4 v31, v14, v20 op_sel:[1,0,0]
            0xd23f1800, 0x00021109, // v_cvt_scalef32_pk_f32_fp4 v[0:1], v9, v8 op_sel:[1,1,0]
        ]);
        // Byte 1 of v14 = 0x9f: low nibble 0xf = -6.0, high nibble 0x9 = -0.5.
        h.set_v(14, |_| 0x0000_9f00);
        h.set_v(20, |_| 4.0f32.to_bits());
        // Byte 3 of v9 = 0x73: 0x3 = 1.5, 0x7 = 6.0; scale 0.5.
        h.set_v(9, |_| 0x7300_0000);
        h.set_v(8, |_| 0.5f32.to_bits());
        h.run().unwrap();
        // -6 * 4 = -24 (bf16 0xc1c0), -0.5 * 4 = -2 (0xc000).
        assert_eq!(h.v(31)[0], 0xc000_c1c0);
        assert_eq!(
            (h.v(0)[0], h.v(1)[0]),
            (0.75f32.to_bits(), 3.0f32.to_bits())
        );
    }
}

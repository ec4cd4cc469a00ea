//! Number formats of the gfx950 VALU and matrix cores, implemented from the format
//! definitions (OCP MX v1.0 for the 8/6/4-bit formats and E8M0, IEEE 754 for f16/f32,
//! bfloat16 as the upper half of an f32).
//!
//! Everything here is deliberately independent of the workspace's host codec crate: the
//! emulator is used to check kernels whose inputs that crate produced, so the two must not be
//! able to share a bug.
//!
//! Decoding is exact: every value of every format here is representable in f32 (and f64).
//! Encoding takes an f64 so that a caller can apply a power-of-two scale exactly before the
//! single rounding step (the `v_cvt_scalef32_*` family divides by the scale first).

/// What a minifloat does with its largest exponent code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Specials {
    /// IEEE-style: the all-ones exponent means infinity (mantissa 0) or NaN (mantissa != 0).
    Ieee,
    /// OCP "fn" (finite, NaN): no infinity; only the all-ones exponent *and* all-ones mantissa
    /// code is NaN, every other code is finite (FP8 E4M3).
    NanOnlyAllOnes,
    /// Every code is a finite number: no infinity, no NaN (FP6, BF6, FP4).
    None,
}

/// What an encoder does with a value whose rounded magnitude exceeds the largest finite
/// value (and with an infinite input).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Overflow {
    /// Produce the format's infinity when it has one, otherwise its NaN (OCP
    /// "non-saturating" conversion; what gfx950 does with `MODE.FP16_OVFL` clear).
    InfOrNan,
    /// Clamp to the signed largest finite value (OCP "saturating" conversion; gfx950 with
    /// `MODE.FP16_OVFL` set, and always for FP6/BF6/FP4 which have nothing else).
    Saturate,
}

/// A small binary floating-point format: 1 sign bit, `exp_bits` exponent bits, `man_bits`
/// mantissa bits, exponent `bias`, and a convention for the top exponent code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MiniFloat {
    /// Human-readable name used in diagnostics.
    pub name: &'static str,
    /// Width of the exponent field.
    pub exp_bits: u32,
    /// Width of the mantissa (fraction) field.
    pub man_bits: u32,
    /// Exponent bias: a normal code with exponent field `e` scales by `2^(e - bias)`.
    pub bias: i32,
    /// Meaning of the all-ones exponent field.
    pub specials: Specials,
}

/// OCP FP8 E4M3 ("E4M3FN"): bias 7, no infinity, NaN = 0x7F/0xFF, max 448.
pub const FP8_E4M3: MiniFloat = MiniFloat {
    name: "fp8_e4m3",
    exp_bits: 4,
    man_bits: 3,
    bias: 7,
    specials: Specials::NanOnlyAllOnes,
};
/// OCP BF8 E5M2: bias 15, IEEE-like infinities and NaNs, max 57344.
pub const BF8_E5M2: MiniFloat = MiniFloat {
    name: "bf8_e5m2",
    exp_bits: 5,
    man_bits: 2,
    bias: 15,
    specials: Specials::Ieee,
};
/// OCP FP6 E2M3: bias 1, all codes finite, max 7.5.
pub const FP6_E2M3: MiniFloat = MiniFloat {
    name: "fp6_e2m3",
    exp_bits: 2,
    man_bits: 3,
    bias: 1,
    specials: Specials::None,
};
/// OCP BF6 E3M2: bias 3, all codes finite, max 28.
pub const BF6_E3M2: MiniFloat = MiniFloat {
    name: "bf6_e3m2",
    exp_bits: 3,
    man_bits: 2,
    bias: 3,
    specials: Specials::None,
};
/// OCP FP4 E2M1: bias 1, all codes finite, max 6.
pub const FP4_E2M1: MiniFloat = MiniFloat {
    name: "fp4_e2m1",
    exp_bits: 2,
    man_bits: 1,
    bias: 1,
    specials: Specials::None,
};
/// IEEE 754 binary16.
pub const F16: MiniFloat = MiniFloat {
    name: "f16",
    exp_bits: 5,
    man_bits: 10,
    bias: 15,
    specials: Specials::Ieee,
};
/// bfloat16: the upper 16 bits of an IEEE binary32.
pub const BF16: MiniFloat = MiniFloat {
    name: "bf16",
    exp_bits: 8,
    man_bits: 7,
    bias: 127,
    specials: Specials::Ieee,
};

/// `2^e` as an f64, exact for the whole f64 exponent range (including subnormals).
pub fn pow2(e: i32) -> f64 {
    if e > 1023 {
        f64::INFINITY
    } else if e >= -1022 {
        f64::from_bits(((e + 1023) as u64) << 52)
    } else if e >= -1074 {
        f64::from_bits(1u64 << (e + 1074))
    } else {
        0.0
    }
}

impl MiniFloat {
    /// Total width in bits, sign included.
    pub const fn bits(&self) -> u32 {
        1 + self.exp_bits + self.man_bits
    }

    /// Mask of the valid code bits.
    pub const fn code_mask(&self) -> u32 {
        (1u32 << self.bits()) - 1
    }

    const fn sign_bit(&self) -> u32 {
        1u32 << (self.exp_bits + self.man_bits)
    }

    const fn exp_max_field(&self) -> u32 {
        (1u32 << self.exp_bits) - 1
    }

    const fn man_mask(&self) -> u32 {
        (1u32 << self.man_bits) - 1
    }

    /// Exponent of the smallest normal number (also the exponent subnormals share).
    pub const fn min_normal_exp(&self) -> i32 {
        1 - self.bias
    }

    /// Largest finite positive value.
    pub fn max_finite(&self) -> f64 {
        let (exp_field, man) = match self.specials {
            // The all-ones exponent is reserved, so the top finite code is one exponent lower.
            Specials::Ieee => (self.exp_max_field() - 1, self.man_mask()),
            // All-ones exponent with all-ones mantissa is NaN; one mantissa step below is max.
            Specials::NanOnlyAllOnes => (self.exp_max_field(), self.man_mask() - 1),
            Specials::None => (self.exp_max_field(), self.man_mask()),
        };
        let significand = 1.0 + man as f64 / pow2(self.man_bits as i32);
        significand * pow2(exp_field as i32 - self.bias)
    }

    /// The code (positive sign) of the largest finite value.
    pub fn max_finite_code(&self) -> u32 {
        match self.specials {
            Specials::Ieee => ((self.exp_max_field() - 1) << self.man_bits) | self.man_mask(),
            Specials::NanOnlyAllOnes => {
                (self.exp_max_field() << self.man_bits) | (self.man_mask() - 1)
            }
            Specials::None => (self.exp_max_field() << self.man_bits) | self.man_mask(),
        }
    }

    /// The canonical quiet-NaN code (positive sign), if the format has NaNs.
    pub fn nan_code(&self) -> Option<u32> {
        match self.specials {
            // Exponent all ones, mantissa all ones: OCP's canonical E5M2 NaN pattern 0x7F.
            Specials::Ieee => Some((self.exp_max_field() << self.man_bits) | self.man_mask()),
            Specials::NanOnlyAllOnes => {
                Some((self.exp_max_field() << self.man_bits) | self.man_mask())
            }
            Specials::None => None,
        }
    }

    /// The code of +infinity, if the format has infinities.
    pub fn inf_code(&self) -> Option<u32> {
        match self.specials {
            Specials::Ieee => Some(self.exp_max_field() << self.man_bits),
            _ => None,
        }
    }

    /// Decodes `code` (low `bits()` bits are used) to the exact value it denotes.
    pub fn decode(&self, code: u32) -> f64 {
        let code = code & self.code_mask();
        let negative = code & self.sign_bit() != 0;
        let exp_field = (code >> self.man_bits) & self.exp_max_field();
        let man = code & self.man_mask();
        let magnitude = if exp_field == self.exp_max_field()
            && match self.specials {
                Specials::Ieee => true,
                Specials::NanOnlyAllOnes => man == self.man_mask(),
                Specials::None => false,
            } {
            if self.specials == Specials::Ieee && man == 0 {
                f64::INFINITY
            } else {
                f64::NAN
            }
        } else if exp_field == 0 {
            // Subnormal: no implicit leading one, exponent pinned to the minimum normal one.
            man as f64 * pow2(self.min_normal_exp() - self.man_bits as i32)
        } else {
            (pow2(self.man_bits as i32) + man as f64)
                * pow2(exp_field as i32 - self.bias - self.man_bits as i32)
        };
        if negative { -magnitude } else { magnitude }
    }

    /// Decodes `code` to f32. Exact for every format here except that a NaN comes back as
    /// the canonical f32 quiet NaN with the code's sign.
    pub fn decode_f32(&self, code: u32) -> f32 {
        self.decode(code) as f32
    }

    /// Encodes `x` with round-to-nearest-even, handling overflow as `overflow` says.
    ///
    /// Rounding treats the grid beyond the largest finite value as continuing with the same
    /// spacing, so a value exactly half-way between the largest finite value and the next
    /// (non-existent) step rounds to whichever has the even mantissa (OCP/IEEE rule). A NaN
    /// input gives the format's NaN with the input's sign, or +0 for formats without NaN
    /// (FP6/BF6/FP4; an assumption taken from AMD's rocjitsu emulator, which the OCP spec
    /// leaves implementation-defined). A result that rounds to zero keeps its sign.
    pub fn encode(&self, x: f64, overflow: Overflow) -> u32 {
        let sign = if x.is_sign_negative() {
            self.sign_bit()
        } else {
            0
        };
        if x.is_nan() {
            return match self.nan_code() {
                Some(nan) => sign | nan,
                None => 0,
            };
        }
        let a = x.abs();
        if a.is_infinite() {
            return sign | self.overflow_code(overflow);
        }
        if a == 0.0 {
            return sign;
        }
        // Exponent of `a` (a is a normal f64 for any input that came from f32 or a scaled f32).
        let a_exp = if a.to_bits() >> 52 == 0 {
            // f64 subnormal: far below any format's range, rounds to zero below.
            -1075
        } else {
            ((a.to_bits() >> 52) & 0x7ff) as i32 - 1023
        };
        let e = a_exp.max(self.min_normal_exp());
        let quantum_exp = e - self.man_bits as i32;
        // Scaling by a power of two is exact, so this is the only rounding step.
        let steps = (a * pow2(-quantum_exp)).round_ties_even();
        let v = steps * pow2(quantum_exp);
        if v > self.max_finite() {
            return sign | self.overflow_code(overflow);
        }
        if v == 0.0 {
            return sign;
        }
        sign | self.exact_code(v)
    }

    fn overflow_code(&self, overflow: Overflow) -> u32 {
        match (overflow, self.specials) {
            (Overflow::InfOrNan, Specials::Ieee) => self.exp_max_field() << self.man_bits,
            (Overflow::InfOrNan, Specials::NanOnlyAllOnes) => {
                (self.exp_max_field() << self.man_bits) | self.man_mask()
            }
            _ => self.max_finite_code(),
        }
    }

    /// Code of a positive value known to be exactly representable and finite.
    fn exact_code(&self, v: f64) -> u32 {
        let v_exp = ((v.to_bits() >> 52) & 0x7ff) as i32 - 1023;
        if v_exp < self.min_normal_exp() {
            let man = v / pow2(self.min_normal_exp() - self.man_bits as i32);
            man as u32
        } else {
            let exp_field = (v_exp + self.bias) as u32;
            let man = v / pow2(v_exp - self.man_bits as i32) - pow2(self.man_bits as i32);
            (exp_field << self.man_bits) | man as u32
        }
    }

    /// A 256-entry decode table for formats of at most 8 bits (codes index it directly),
    /// used to decode MFMA operands once per instruction.
    pub fn table(&self) -> [f32; 256] {
        let mut t = [0.0f32; 256];
        for (code, slot) in t.iter_mut().enumerate() {
            *slot = self.decode_f32(code as u32 & self.code_mask());
        }
        t
    }

    /// [`MiniFloat::table`], built once per process for the five MFMA operand formats (hot
    /// paths decode every element through it); other formats get a fresh table.
    pub fn cached_table(&self) -> std::borrow::Cow<'static, [f32; 256]> {
        use std::sync::OnceLock;
        static TABLES: [OnceLock<[f32; 256]>; 5] = [
            OnceLock::new(),
            OnceLock::new(),
            OnceLock::new(),
            OnceLock::new(),
            OnceLock::new(),
        ];
        let slot = [FP8_E4M3, BF8_E5M2, FP6_E2M3, BF6_E3M2, FP4_E2M1]
            .iter()
            .position(|f| f == self);
        match slot {
            Some(k) => std::borrow::Cow::Borrowed(TABLES[k].get_or_init(|| self.table())),
            None => std::borrow::Cow::Owned(self.table()),
        }
    }
}

/// The formats `cbsz`/`blgp` select for the f8f6f4 MFMAs (0 FP8, 1 BF8, 2 FP6, 3 BF6, 4 FP4).
pub fn f8f6f4_format(sel: u32) -> Option<MiniFloat> {
    match sel {
        0 => Some(FP8_E4M3),
        1 => Some(BF8_E5M2),
        2 => Some(FP6_E2M3),
        3 => Some(BF6_E3M2),
        4 => Some(FP4_E2M1),
        _ => None,
    }
}

/// OCP E8M0 scale: `2^(e - 127)`, with 0xFF meaning NaN. Code 0 is `2^-127`, which is an f32
/// subnormal (not zero).
pub fn e8m0_to_f64(e: u8) -> f64 {
    if e == 0xff {
        f64::NAN
    } else {
        pow2(e as i32 - 127)
    }
}

/// [`e8m0_to_f64`] as an f32 (exact: `2^-127` is the f32 subnormal 0x0040_0000).
pub fn e8m0_to_f32(e: u8) -> f32 {
    e8m0_to_f64(e) as f32
}

/// The scale the `v_cvt_scalef32_*` instructions take from an f32 operand: only the exponent
/// field (bits 30:23) is used, as an E8M0 value (CDNA4 ISA "data conversions": the scale is an
/// exponent with bias 127; sign and mantissa are ignored).
pub fn scalef32_exponent(scale_bits: u32) -> u8 {
    ((scale_bits >> 23) & 0xff) as u8
}

/// bf16 bits to f32 (exact).
pub fn bf16_to_f32(h: u16) -> f32 {
    f32::from_bits((h as u32) << 16)
}

/// f32 to bf16 with round-to-nearest-even; NaN stays NaN with the quiet bit set.
pub fn f32_to_bf16(x: f32) -> u16 {
    let b = x.to_bits();
    if x.is_nan() {
        // Keep the sign and top payload bits, force the quiet bit so truncation cannot turn
        // a NaN whose payload sits in the low half into an infinity.
        return ((b >> 16) | 0x0040) as u16;
    }
    let round = 0x7fff + ((b >> 16) & 1);
    (b.wrapping_add(round) >> 16) as u16
}

/// f16 bits to f32 (exact; NaN payloads are preserved in the high mantissa bits).
pub fn f16_to_f32(h: u16) -> f32 {
    let sign = ((h as u32) & 0x8000) << 16;
    let exp = ((h >> 10) & 0x1f) as u32;
    let man = (h & 0x3ff) as u32;
    let bits = if exp == 0x1f {
        sign | 0x7f80_0000 | (man << 13)
    } else if exp == 0 {
        if man == 0 {
            sign
        } else {
            // Normalise the subnormal: value = man * 2^-24.
            let shift = man.leading_zeros() - 21; // bring bit 10 to the top of the field
            let man_n = (man << shift) & 0x3ff;
            let e = 127 - 15 + 1 - shift;
            sign | (e << 23) | (man_n << 13)
        }
    } else {
        sign | ((exp + 127 - 15) << 23) | (man << 13)
    };
    f32::from_bits(bits)
}

/// f32 to f16 with round-to-nearest-even; overflow gives infinity, NaN gives a quiet NaN
/// that keeps the sign and the top payload bits.
pub fn f32_to_f16(x: f32) -> u16 {
    if x.is_nan() {
        let b = x.to_bits();
        return (((b >> 16) & 0x8000) | 0x7e00 | ((b >> 13) & 0x3ff)) as u16;
    }
    F16.encode(x as f64, Overflow::InfOrNan) as u16
}

/// f64 to f32 with round-to-nearest-even (the Rust cast already rounds this way).
pub fn f64_to_f32(x: f64) -> f32 {
    x as f32
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every FP8 E4M3 code, derived by hand from the format definition:
    /// e = 0 -> m * 2^-9; e in 1..15 -> (1 + m/8) * 2^(e-7); 0x7F/0xFF NaN.
    #[test]
    fn fp8_e4m3_every_code() {
        for code in 0u32..256 {
            let s = if code & 0x80 != 0 { -1.0 } else { 1.0 };
            let e = (code >> 3) & 0xf;
            let m = code & 7;
            let got = FP8_E4M3.decode(code);
            if e == 15 && m == 7 {
                assert!(got.is_nan(), "code {code:#x}");
                continue;
            }
            let want = if e == 0 {
                s * m as f64 / 512.0
            } else {
                s * (8.0 + m as f64) / 8.0 * 2f64.powi(e as i32 - 7)
            };
            assert_eq!(got, want, "code {code:#x}");
        }
        assert_eq!(FP8_E4M3.decode(0x7e), 448.0);
        assert_eq!(FP8_E4M3.decode(0x01), 2f64.powi(-9));
        assert_eq!(FP8_E4M3.decode(0x08), 2f64.powi(-6));
        assert_eq!(FP8_E4M3.decode(0x78), 256.0);
        assert_eq!(FP8_E4M3.max_finite(), 448.0);
        assert!(FP8_E4M3.decode(0x80).is_sign_negative());
    }

    /// Every BF8 E5M2 code: e = 0 -> m * 2^-16; e = 31 -> inf (m = 0) or NaN.
    #[test]
    fn bf8_e5m2_every_code() {
        for code in 0u32..256 {
            let s = if code & 0x80 != 0 { -1.0 } else { 1.0 };
            let e = (code >> 2) & 0x1f;
            let m = code & 3;
            let got = BF8_E5M2.decode(code);
            if e == 31 {
                if m == 0 {
                    assert_eq!(got, s * f64::INFINITY, "code {code:#x}");
                } else {
                    assert!(got.is_nan(), "code {code:#x}");
                }
                continue;
            }
            let want = if e == 0 {
                s * m as f64 * 2f64.powi(-16)
            } else {
                s * (4.0 + m as f64) / 4.0 * 2f64.powi(e as i32 - 15)
            };
            assert_eq!(got, want, "code {code:#x}");
        }
        assert_eq!(BF8_E5M2.decode(0x7b), 57344.0);
        assert_eq!(BF8_E5M2.max_finite(), 57344.0);
    }

    /// FP6 E2M3 has 64 codes; the positive half written out by hand.
    #[test]
    fn fp6_e2m3_every_code() {
        let positive = [
            0.0, 0.125, 0.25, 0.375, 0.5, 0.625, 0.75, 0.875, // subnormals m/8
            1.0, 1.125, 1.25, 1.375, 1.5, 1.625, 1.75, 1.875, // e=1
            2.0, 2.25, 2.5, 2.75, 3.0, 3.25, 3.5, 3.75, // e=2
            4.0, 4.5, 5.0, 5.5, 6.0, 6.5, 7.0, 7.5, // e=3
        ];
        for (code, want) in positive.iter().enumerate() {
            assert_eq!(FP6_E2M3.decode(code as u32), *want, "code {code}");
            assert_eq!(
                FP6_E2M3.decode(code as u32 | 0x20),
                -*want,
                "code {code} negative"
            );
        }
        assert_eq!(FP6_E2M3.max_finite(), 7.5);
    }

    /// BF6 E3M2: subnormals m * 2^-4, normals (1 + m/4) * 2^(e-3), max 28.
    #[test]
    fn bf6_e3m2_every_code() {
        let positive = [
            0.0, 0.0625, 0.125, 0.1875, // subnormals
            0.25, 0.3125, 0.375, 0.4375, // e=1
            0.5, 0.625, 0.75, 0.875, // e=2
            1.0, 1.25, 1.5, 1.75, // e=3
            2.0, 2.5, 3.0, 3.5, // e=4
            4.0, 5.0, 6.0, 7.0, // e=5
            8.0, 10.0, 12.0, 14.0, // e=6
            16.0, 20.0, 24.0, 28.0, // e=7
        ];
        for (code, want) in positive.iter().enumerate() {
            assert_eq!(BF6_E3M2.decode(code as u32), *want, "code {code}");
            assert_eq!(BF6_E3M2.decode(code as u32 | 0x20), -*want);
        }
        assert_eq!(BF6_E3M2.max_finite(), 28.0);
    }

    /// FP4 E2M1: {0, 0.5, 1, 1.5, 2, 3, 4, 6} and negatives.
    #[test]
    fn fp4_e2m1_every_code() {
        let positive = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0];
        for (code, want) in positive.iter().enumerate() {
            assert_eq!(FP4_E2M1.decode(code as u32), *want);
            assert_eq!(FP4_E2M1.decode(code as u32 | 8), -*want);
        }
        assert!(FP4_E2M1.decode(8).is_sign_negative());
        assert_eq!(FP4_E2M1.max_finite(), 6.0);
    }

    #[test]
    fn encode_roundtrips_every_finite_code() {
        for f in [FP8_E4M3, BF8_E5M2, FP6_E2M3, BF6_E3M2, FP4_E2M1] {
            for code in 0..=f.code_mask() {
                let v = f.decode(code);
                if v.is_finite() {
                    assert_eq!(
                        f.encode(v, Overflow::InfOrNan),
                        code,
                        "{} {code:#x}",
                        f.name
                    );
                }
            }
        }
    }

    #[test]
    fn encode_rounds_to_nearest_even() {
        // FP4: 2.5 is half-way between 2 (m=0) and 3 (m=1): even wins -> 2.
        assert_eq!(FP4_E2M1.encode(2.5, Overflow::Saturate), 0b0100);
        // 3.5 between 3 (m=1) and 4 (e=3,m=0): -> 4.
        assert_eq!(FP4_E2M1.encode(3.5, Overflow::Saturate), 0b0110);
        // 0.25 between 0 and 0.5 (subnormal m=1): even -> 0.
        assert_eq!(FP4_E2M1.encode(0.25, Overflow::Saturate), 0);
        assert_eq!(FP4_E2M1.encode(0.2500001, Overflow::Saturate), 1);
        // 5 between 4 and 6: 4 has m=0 -> 4.
        assert_eq!(FP4_E2M1.encode(5.0, Overflow::Saturate), 0b0110);
        // 6.9 saturates at 6; 100 saturates; -inf saturates negative.
        assert_eq!(FP4_E2M1.encode(6.9, Overflow::Saturate), 0b0111);
        assert_eq!(FP4_E2M1.encode(100.0, Overflow::InfOrNan), 0b0111);
        assert_eq!(
            FP4_E2M1.encode(f64::NEG_INFINITY, Overflow::InfOrNan),
            0b1111
        );
        // Negative zero keeps its sign; tiny negatives round to -0.
        assert_eq!(FP4_E2M1.encode(-0.0, Overflow::Saturate), 0b1000);
        assert_eq!(FP4_E2M1.encode(-0.1, Overflow::Saturate), 0b1000);
        // NaN has no encoding in FP4: +0.
        assert_eq!(FP4_E2M1.encode(f64::NAN, Overflow::Saturate), 0);
    }

    #[test]
    fn fp8_overflow_rules() {
        // 464 is half-way between 448 (m=110) and 480 (m=111, the NaN code): even -> 448.
        assert_eq!(FP8_E4M3.encode(464.0, Overflow::InfOrNan), 0x7e);
        // Anything that rounds past 448 is NaN when not saturating, 448 when saturating.
        assert_eq!(FP8_E4M3.encode(464.1, Overflow::InfOrNan), 0x7f);
        assert_eq!(FP8_E4M3.encode(-464.1, Overflow::InfOrNan), 0xff);
        assert_eq!(FP8_E4M3.encode(464.1, Overflow::Saturate), 0x7e);
        assert_eq!(FP8_E4M3.encode(f64::INFINITY, Overflow::InfOrNan), 0x7f);
        assert_eq!(FP8_E4M3.encode(f64::INFINITY, Overflow::Saturate), 0x7e);
        assert_eq!(FP8_E4M3.encode(-f64::NAN, Overflow::Saturate), 0xff);
        // Smallest subnormal 2^-9; half of it rounds to zero (even), a hair more to 2^-9.
        assert_eq!(FP8_E4M3.encode(2f64.powi(-10), Overflow::InfOrNan), 0);
        assert_eq!(
            FP8_E4M3.encode(2f64.powi(-10) * 1.01, Overflow::InfOrNan),
            1
        );
        // BF8: 57344 max; 61440 is the half-way point to 65536 (m=11 odd) -> rounds up -> inf.
        assert_eq!(BF8_E5M2.encode(61440.0, Overflow::InfOrNan), 0x7c);
        assert_eq!(BF8_E5M2.encode(61439.0, Overflow::InfOrNan), 0x7b);
        assert_eq!(BF8_E5M2.encode(61440.0, Overflow::Saturate), 0x7b);
        assert_eq!(BF8_E5M2.encode(f64::NEG_INFINITY, Overflow::InfOrNan), 0xfc);
        assert_eq!(BF8_E5M2.encode(f64::NAN, Overflow::InfOrNan), 0x7f);
    }

    #[test]
    fn e8m0_values() {
        assert_eq!(e8m0_to_f64(127), 1.0);
        assert_eq!(e8m0_to_f64(128), 2.0);
        assert_eq!(e8m0_to_f64(254), 2f64.powi(127));
        assert_eq!(e8m0_to_f64(0), 2f64.powi(-127));
        assert_eq!(e8m0_to_f32(0).to_bits(), 0x0040_0000);
        assert!(e8m0_to_f64(255).is_nan());
        assert_eq!(scalef32_exponent(1.0f32.to_bits()), 127);
        assert_eq!(scalef32_exponent((-3.0f32).to_bits()), 128); // sign/mantissa ignored
    }

    #[test]
    fn bf16_conversions() {
        assert_eq!(bf16_to_f32(0x3f80), 1.0);
        assert_eq!(f32_to_bf16(1.0), 0x3f80);
        // 1 + 2^-8 is half-way between bf16 1.0 and 1 + 2^-7: even (1.0) wins.
        assert_eq!(f32_to_bf16(f32::from_bits(0x3f80_8000)), 0x3f80);
        // 1 + 3*2^-8 is half-way between 1+2^-7 (odd) and 1+2^-6: rounds up to even.
        assert_eq!(f32_to_bf16(f32::from_bits(0x3f81_8000)), 0x3f82);
        assert_eq!(f32_to_bf16(f32::from_bits(0x3f80_8001)), 0x3f81);
        // Largest finite f32 rounds to bf16 infinity.
        assert_eq!(f32_to_bf16(f32::MAX), 0x7f80);
        assert_eq!(f32_to_bf16(f32::NEG_INFINITY), 0xff80);
        // A NaN whose payload is only in the low half stays NaN (quiet bit forced).
        let n = f32_to_bf16(f32::from_bits(0x7f80_0001));
        assert_eq!(n, 0x7fc0);
        // Denormals are kept: f32 0x0001_8000 -> bf16 0x0002 (tie to even).
        assert_eq!(f32_to_bf16(f32::from_bits(0x0001_8000)), 0x0002);
        assert_eq!(f32_to_bf16(-0.0), 0x8000);
    }

    #[test]
    fn f16_conversions() {
        assert_eq!(f16_to_f32(0x3c00), 1.0);
        assert_eq!(f16_to_f32(0x0001), 2f32.powi(-24));
        assert_eq!(f16_to_f32(0x03ff), 1023.0 * 2f32.powi(-24));
        assert_eq!(f16_to_f32(0x7bff), 65504.0);
        assert_eq!(f16_to_f32(0xfc00), f32::NEG_INFINITY);
        assert!(f16_to_f32(0x7e00).is_nan());
        assert_eq!(f32_to_f16(65504.0), 0x7bff);
        // 65520 is half-way between 65504 (odd mantissa) and 65536: rounds up to infinity.
        assert_eq!(f32_to_f16(65520.0), 0x7c00);
        assert_eq!(f32_to_f16(65519.0), 0x7bff);
        assert_eq!(f32_to_f16(2f32.powi(-25)), 0); // half of the smallest subnormal: even -> 0
        assert_eq!(f32_to_f16(2f32.powi(-25) * 1.5), 1);
        assert_eq!(f32_to_f16(-0.0), 0x8000);
        assert_eq!(f32_to_f16(f32::from_bits(0x7f80_0001)), 0x7e00);
        assert_eq!(f32_to_f16(f32::from_bits(0xffc0_0000)), 0xfe00);
    }

    /// Cross-check against an independent implementation (the `half` crate) for every f16.
    #[test]
    fn f16_exhaustive_against_half() {
        for h in 0u16..=u16::MAX {
            let ours = f16_to_f32(h);
            let theirs = half::f16::from_bits(h).to_f32();
            if theirs.is_nan() {
                assert!(ours.is_nan());
            } else {
                assert_eq!(ours.to_bits(), theirs.to_bits(), "{h:#x}");
                assert_eq!(f32_to_f16(ours), h, "{h:#x}");
            }
        }
    }

    #[test]
    fn f32_to_f16_sampled_against_half() {
        // Every 997th f32 bit pattern: covers rounding of all exponents.
        let mut b: u32 = 0;
        while let Some(next) = b.checked_add(997) {
            let x = f32::from_bits(b);
            if !x.is_nan() {
                assert_eq!(f32_to_f16(x), half::f16::from_f32(x).to_bits(), "{b:#x}");
                assert_eq!(f32_to_bf16(x), half::bf16::from_f32(x).to_bits(), "{b:#x}");
            }
            b = next;
        }
    }

    #[test]
    fn pow2_edges() {
        assert_eq!(pow2(0), 1.0);
        assert_eq!(pow2(-1074), f64::from_bits(1));
        assert_eq!(pow2(-1075), 0.0);
        assert_eq!(pow2(1024), f64::INFINITY);
    }
}

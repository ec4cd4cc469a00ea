//! OCP FP8: E4M3FN (bias 7, max 448, no Inf, NaN = `S.1111.111`) and E5M2 (bias 15, IEEE-like
//! Inf and NaN). Both have subnormals.

/// One of the two OCP FP8 formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fp8Format {
    /// 4 exponent bits (bias 7), 3 mantissa bits, max 448, no Inf, NaN only at `S.1111.111`.
    E4M3FN,
    /// 5 exponent bits (bias 15), 2 mantissa bits, max 57344, IEEE-style Inf and NaN.
    E5M2,
}

/// What an encoder does with a value beyond the largest finite magnitude (after rounding).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fp8Overflow {
    /// Clamp to ±max finite (Inf included).
    Saturate,
    /// Produce the format's overflow value: NaN for E4M3FN, ±Inf for E5M2.
    NonSaturating,
}

impl Fp8Format {
    const fn man_bits(self) -> u32 {
        match self {
            Fp8Format::E4M3FN => 3,
            Fp8Format::E5M2 => 2,
        }
    }

    const fn exp_mask(self) -> u8 {
        match self {
            Fp8Format::E4M3FN => 0xF,
            Fp8Format::E5M2 => 0x1F,
        }
    }

    /// The exponent bias.
    pub const fn bias(self) -> i32 {
        match self {
            Fp8Format::E4M3FN => 7,
            Fp8Format::E5M2 => 15,
        }
    }

    /// The largest finite magnitude.
    pub const fn max_finite(self) -> f32 {
        match self {
            Fp8Format::E4M3FN => 448.0,
            Fp8Format::E5M2 => 57344.0,
        }
    }

    /// The code of +max finite.
    pub const fn max_code(self) -> u8 {
        match self {
            Fp8Format::E4M3FN => 0x7E,
            Fp8Format::E5M2 => 0x7B,
        }
    }

    /// The positive NaN code the encoder produces (E5M2: the quiet NaN `0.11111.10`).
    pub const fn nan_code(self) -> u8 {
        match self {
            Fp8Format::E4M3FN => 0x7F,
            Fp8Format::E5M2 => 0x7E,
        }
    }

    /// Decodes `code` exactly (every FP8 value is an f32).
    pub fn decode(self, code: u8) -> f32 {
        let man = self.man_bits();
        let e = (code >> man) & self.exp_mask();
        let m = code & ((1 << man) - 1);
        let top = e == self.exp_mask();
        let mag = match self {
            Fp8Format::E4M3FN if top && m == 7 => f32::NAN,
            Fp8Format::E5M2 if top && m == 0 => f32::INFINITY,
            Fp8Format::E5M2 if top => f32::NAN,
            _ if e == 0 => m as f32 * pow2(1 - self.bias() - man as i32),
            _ => ((1u32 << man) + m as u32) as f32 * pow2(e as i32 - self.bias() - man as i32),
        };
        if code & 0x80 != 0 { -mag } else { mag }
    }

    /// Encodes `x` with round-to-nearest-even. Overflow (a magnitude that rounds above
    /// [`max_finite`](Self::max_finite), or Inf) follows `overflow`; NaN gives the NaN code with
    /// `x`'s sign. Zero keeps its sign.
    pub fn encode(self, x: f32, overflow: Fp8Overflow) -> u8 {
        let sign = if x.is_sign_negative() { 0x80 } else { 0 };
        if x.is_nan() {
            return sign | self.nan_code();
        }
        let over = sign
            | match (overflow, self) {
                (Fp8Overflow::Saturate, _) => self.max_code(),
                (Fp8Overflow::NonSaturating, Fp8Format::E4M3FN) => self.nan_code(),
                (Fp8Overflow::NonSaturating, Fp8Format::E5M2) => 0x7C,
            };
        if x.is_infinite() {
            return over;
        }
        let a = x.abs() as f64;
        if a == 0.0 {
            return sign;
        }
        let man = self.man_bits() as i32;
        let min_normal_exp = 1 - self.bias();
        // The spacing of representable values at `a`: subnormals share the smallest normal
        // binade's spacing. Dividing by a power of two is exact in f64, so only the rounding
        // below is inexact.
        let mut q = floor_log2(a).max(min_normal_exp) - man;
        let mut r = (a / pow2_f64(q)).round_ties_even() as u32;
        if r as f64 * pow2_f64(q) > self.max_finite() as f64 {
            return over;
        }
        if r < 1 << man {
            return sign | r as u8;
        }
        if r == 2 << man {
            // Rounded up into the next binade.
            r >>= 1;
            q += 1;
        }
        let e = (q + man + self.bias()) as u8;
        sign | (e << man) | (r - (1 << man)) as u8
    }
}

/// Decodes E4M3FN.
#[inline]
pub fn decode_e4m3fn(code: u8) -> f32 {
    Fp8Format::E4M3FN.decode(code)
}

/// Encodes E4M3FN (round-to-nearest-even; see [`Fp8Format::encode`]).
#[inline]
pub fn encode_e4m3fn(x: f32, overflow: Fp8Overflow) -> u8 {
    Fp8Format::E4M3FN.encode(x, overflow)
}

/// Decodes E5M2.
#[inline]
pub fn decode_e5m2(code: u8) -> f32 {
    Fp8Format::E5M2.decode(code)
}

/// Encodes E5M2 (round-to-nearest-even; see [`Fp8Format::encode`]).
#[inline]
pub fn encode_e5m2(x: f32, overflow: Fp8Overflow) -> u8 {
    Fp8Format::E5M2.encode(x, overflow)
}

/// `2^e` for `e` in the f32 normal range (all FP8 exponents are).
fn pow2(e: i32) -> f32 {
    f32::from_bits(((e + 127) as u32) << 23)
}

fn pow2_f64(e: i32) -> f64 {
    f64::from_bits(((e + 1023) as u64) << 52)
}

/// `floor(log2(a))` for a positive normal f64 (every f32 magnitude is one).
fn floor_log2(a: f64) -> i32 {
    ((a.to_bits() >> 52) & 0x7FF) as i32 - 1023
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const FORMATS: [Fp8Format; 2] = [Fp8Format::E4M3FN, Fp8Format::E5M2];

    /// The value of `code` from the format's field definition, written independently of
    /// `decode` (f64 arithmetic, `powi`).
    fn formula(f: Fp8Format, code: u8) -> f64 {
        let (eb, mb, bias) = match f {
            Fp8Format::E4M3FN => (4, 3, 7),
            Fp8Format::E5M2 => (5, 2, 15),
        };
        let s = if code >> 7 == 1 { -1.0 } else { 1.0 };
        let e = ((code >> mb) & ((1 << eb) - 1)) as i32;
        let m = (code & ((1 << mb) - 1)) as f64;
        let emax_field = (1 << eb) - 1;
        match f {
            Fp8Format::E4M3FN if e == emax_field && m == 7.0 => return f64::NAN,
            Fp8Format::E5M2 if e == emax_field && m == 0.0 => return s * f64::INFINITY,
            Fp8Format::E5M2 if e == emax_field => return f64::NAN,
            _ => {}
        }
        let frac = m / (1 << mb) as f64;
        if e == 0 {
            s * 2f64.powi(1 - bias) * frac
        } else {
            s * 2f64.powi(e - bias) * (1.0 + frac)
        }
    }

    /// Encodes by exhaustive search: nearest finite code, ties to the even code; the first value
    /// past the maximum (one more max-binade step) is the overflow candidate, with the parity of
    /// the code it would have had.
    fn nearest(f: Fp8Format, x: f32, overflow: Fp8Overflow) -> u8 {
        let sign = if x.is_sign_negative() { 0x80u8 } else { 0 };
        let a = x.abs() as f64;
        let max = f.max_finite() as f64;
        let step = max - formula(f, f.max_code() - 1);
        let over_code = sign
            | match (overflow, f) {
                (Fp8Overflow::Saturate, _) => f.max_code(),
                (_, Fp8Format::E4M3FN) => 0x7F,
                (_, Fp8Format::E5M2) => 0x7C,
            };
        // Past the overflow candidate the distances below lose precision in f64; the answer
        // is the overflow value anyway.
        if a >= max + step {
            return over_code;
        }
        // (value, code parity, code to return)
        let mut best: Option<(f64, u8, u8)> = None;
        let candidates = (0..=f.max_code())
            .map(|c| (formula(f, c), c & 1, sign | c))
            .chain(std::iter::once((
                max + step,
                (f.max_code() + 1) & 1,
                over_code,
            )));
        for (v, parity, code) in candidates {
            let better = match best {
                None => true,
                Some((bv, bp, _)) => {
                    let (d, bd) = ((v - a).abs(), (bv - a).abs());
                    d < bd || (d == bd && parity == 0 && bp == 1)
                }
            };
            if better {
                best = Some((v, parity, code));
            }
        }
        best.unwrap().2
    }

    #[test]
    fn decode_matches_the_formula_for_all_codes() {
        for f in FORMATS {
            for code in 0..=255u8 {
                let (got, want) = (f.decode(code) as f64, formula(f, code));
                if want.is_nan() {
                    assert!(got.is_nan(), "{f:?} {code:#x}");
                } else {
                    assert_eq!(got, want, "{f:?} {code:#x}");
                    assert_eq!(got.is_sign_negative(), code >= 0x80, "{f:?} {code:#x}");
                }
            }
        }
    }

    #[test]
    fn known_values() {
        assert_eq!(decode_e4m3fn(0x7E), 448.0);
        assert_eq!(decode_e4m3fn(0x01), 2f32.powi(-9));
        assert_eq!(decode_e4m3fn(0x08), 2f32.powi(-6));
        assert_eq!(decode_e4m3fn(0x38), 1.0);
        assert!(decode_e4m3fn(0x7F).is_nan() && decode_e4m3fn(0xFF).is_nan());
        assert_eq!(decode_e4m3fn(0x78), 256.0);
        assert_eq!(decode_e5m2(0x7B), 57344.0);
        assert_eq!(decode_e5m2(0x01), 2f32.powi(-16));
        assert_eq!(decode_e5m2(0x3C), 1.0);
        assert_eq!(decode_e5m2(0x7C), f32::INFINITY);
        assert_eq!(decode_e5m2(0xFC), f32::NEG_INFINITY);
        assert!(decode_e5m2(0x7D).is_nan() && decode_e5m2(0x7E).is_nan());
    }

    #[test]
    fn every_code_round_trips() {
        for f in FORMATS {
            for mode in [Fp8Overflow::Saturate, Fp8Overflow::NonSaturating] {
                for code in 0..=255u8 {
                    let v = f.decode(code);
                    let back = f.encode(v, mode);
                    if v.is_nan() {
                        assert!(f.decode(back).is_nan());
                        assert_eq!(back & 0x80, code & 0x80, "NaN keeps its sign");
                    } else if v.is_infinite() && mode == Fp8Overflow::Saturate {
                        assert_eq!(back, (code & 0x80) | f.max_code());
                    } else {
                        assert_eq!(back, code, "{f:?} {mode:?} {code:#x}");
                    }
                }
            }
        }
    }

    #[test]
    fn overflow_rules() {
        use Fp8Overflow::*;
        // E4M3FN: 464 is the tie between 448 (even mantissa) and the NaN slot; it stays 448.
        assert_eq!(encode_e4m3fn(464.0, NonSaturating), 0x7E);
        assert_eq!(encode_e4m3fn(464.1, NonSaturating), 0x7F);
        assert_eq!(encode_e4m3fn(-1e9, NonSaturating), 0xFF);
        assert_eq!(encode_e4m3fn(1e9, Saturate), 0x7E);
        assert_eq!(encode_e4m3fn(f32::NEG_INFINITY, Saturate), 0xFE);
        assert_eq!(encode_e4m3fn(f32::INFINITY, NonSaturating), 0x7F);
        // E5M2: 61440 ties between 57344 (odd mantissa) and 65536, so it overflows.
        assert_eq!(encode_e5m2(61439.0, NonSaturating), 0x7B);
        assert_eq!(encode_e5m2(61440.0, NonSaturating), 0x7C);
        assert_eq!(encode_e5m2(-61440.0, Saturate), 0xFB);
        assert_eq!(encode_e5m2(f32::INFINITY, NonSaturating), 0x7C);
        assert_eq!(encode_e5m2(f32::NAN, Saturate), 0x7E);
    }

    #[test]
    fn subnormals_and_underflow() {
        use Fp8Overflow::Saturate;
        // Half the smallest subnormal is a tie with zero (even): rounds to zero.
        assert_eq!(encode_e4m3fn(2f32.powi(-10), Saturate), 0x00);
        assert_eq!(encode_e4m3fn(-2f32.powi(-10) * 1.01, Saturate), 0x81);
        assert_eq!(encode_e4m3fn(-1e-30, Saturate), 0x80);
        // 1.5 subnormal steps is a tie between codes 1 and 2: even is 2.
        assert_eq!(encode_e4m3fn(1.5 * 2f32.powi(-9), Saturate), 0x02);
        // The largest subnormal plus half a step rounds up into the first normal.
        assert_eq!(encode_e5m2(3.5 * 2f32.powi(-16), Saturate), 0x04);
        assert_eq!(encode_e5m2(f32::from_bits(1), Saturate), 0x00);
    }

    fn interesting_f32() -> impl Strategy<Value = f32> {
        prop_oneof![
            -70000.0f32..70000.0,
            -2.0f32..2.0,
            -1e-3f32..1e-3,
            any::<u32>().prop_map(f32::from_bits),
        ]
    }

    proptest! {
        #[test]
        fn encode_matches_exhaustive_search(x in interesting_f32()) {
            prop_assume!(!x.is_nan());
            for f in FORMATS {
                for mode in [Fp8Overflow::Saturate, Fp8Overflow::NonSaturating] {
                    let expect = if x.is_infinite() {
                        f.encode(f32::MAX.copysign(x), mode)
                    } else {
                        nearest(f, x, mode)
                    };
                    prop_assert_eq!(f.encode(x, mode), expect, "{:?} {:?} {}", f, mode, x);
                }
            }
        }
    }
}

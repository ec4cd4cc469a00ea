//! Decoded operands: registers, inline constants, literals.

use std::fmt;

use super::desc::ValueType;

/// A scalar register with a name of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SpecialReg {
    /// `flat_scratch_lo` (scalar code 102); `flat_scratch` when two dwords wide.
    FlatScratchLo,
    /// `flat_scratch_hi` (103).
    FlatScratchHi,
    /// `xnack_mask_lo` (104); `xnack_mask` when two dwords wide.
    XnackMaskLo,
    /// `xnack_mask_hi` (105).
    XnackMaskHi,
    /// `vcc_lo` (106); `vcc` when two dwords wide.
    VccLo,
    /// `vcc_hi` (107).
    VccHi,
    /// `m0` (124).
    M0,
    /// `null` (125): reads as zero, writes are dropped.
    Null,
    /// `exec_lo` (126); `exec` when two dwords wide.
    ExecLo,
    /// `exec_hi` (127).
    ExecHi,
}

impl SpecialReg {
    /// The scalar operand code of this register.
    pub fn code(self) -> u8 {
        match self {
            SpecialReg::FlatScratchLo => 102,
            SpecialReg::FlatScratchHi => 103,
            SpecialReg::XnackMaskLo => 104,
            SpecialReg::XnackMaskHi => 105,
            SpecialReg::VccLo => 106,
            SpecialReg::VccHi => 107,
            SpecialReg::M0 => 124,
            SpecialReg::Null => 125,
            SpecialReg::ExecLo => 126,
            SpecialReg::ExecHi => 127,
        }
    }

    fn name(self, count: u8) -> &'static str {
        match (self, count >= 2) {
            (SpecialReg::FlatScratchLo, true) => "flat_scratch",
            (SpecialReg::FlatScratchLo, false) => "flat_scratch_lo",
            (SpecialReg::FlatScratchHi, _) => "flat_scratch_hi",
            (SpecialReg::XnackMaskLo, true) => "xnack_mask",
            (SpecialReg::XnackMaskLo, false) => "xnack_mask_lo",
            (SpecialReg::XnackMaskHi, _) => "xnack_mask_hi",
            (SpecialReg::VccLo, true) => "vcc",
            (SpecialReg::VccLo, false) => "vcc_lo",
            (SpecialReg::VccHi, _) => "vcc_hi",
            (SpecialReg::M0, _) => "m0",
            (SpecialReg::Null, _) => "null",
            (SpecialReg::ExecLo, true) => "exec",
            (SpecialReg::ExecLo, false) => "exec_lo",
            (SpecialReg::ExecHi, _) => "exec_hi",
        }
    }
}

/// The floating-point inline constants (source codes 240..=248).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum InlineFloat {
    /// 0.5
    Half,
    /// -0.5
    NegHalf,
    /// 1.0
    One,
    /// -1.0
    NegOne,
    /// 2.0
    Two,
    /// -2.0
    NegTwo,
    /// 4.0
    Four,
    /// -4.0
    NegFour,
    /// 1/(2π)
    InvTwoPi,
}

impl InlineFloat {
    const ALL: [InlineFloat; 9] = [
        InlineFloat::Half,
        InlineFloat::NegHalf,
        InlineFloat::One,
        InlineFloat::NegOne,
        InlineFloat::Two,
        InlineFloat::NegTwo,
        InlineFloat::Four,
        InlineFloat::NegFour,
        InlineFloat::InvTwoPi,
    ];

    /// The constant as an f64.
    pub fn value(self) -> f64 {
        match self {
            InlineFloat::Half => 0.5,
            InlineFloat::NegHalf => -0.5,
            InlineFloat::One => 1.0,
            InlineFloat::NegOne => -1.0,
            InlineFloat::Two => 2.0,
            InlineFloat::NegTwo => -2.0,
            InlineFloat::Four => 4.0,
            InlineFloat::NegFour => -4.0,
            InlineFloat::InvTwoPi => 0.5 / std::f64::consts::PI,
        }
    }

    /// IEEE single bits. 1/(2π) uses the hardware's constant 0x3E22F983.
    pub fn f32_bits(self) -> u32 {
        match self {
            InlineFloat::InvTwoPi => 0x3E22_F983,
            other => (other.value() as f32).to_bits(),
        }
    }

    /// IEEE half bits (1/(2π) is 0x3118).
    pub fn f16_bits(self) -> u16 {
        const BITS: [u16; 9] = [
            0x3800, 0xB800, 0x3C00, 0xBC00, 0x4000, 0xC000, 0x4400, 0xC400, 0x3118,
        ];
        BITS[self as usize]
    }

    /// bfloat16 bits (1/(2π) is 0x3E22).
    pub fn bf16_bits(self) -> u16 {
        const BITS: [u16; 9] = [
            0x3F00, 0xBF00, 0x3F80, 0xBF80, 0x4000, 0xC000, 0x4080, 0xC080, 0x3E22,
        ];
        BITS[self as usize]
    }

    /// IEEE double bits (1/(2π) is 0x3FC45F306DC9C882).
    pub fn f64_bits(self) -> u64 {
        match self {
            InlineFloat::InvTwoPi => 0x3FC4_5F30_6DC9_C882,
            other => other.value().to_bits(),
        }
    }

    fn name(self) -> &'static str {
        const NAMES: [&str; 8] = ["0.5", "-0.5", "1.0", "-1.0", "2.0", "-2.0", "4.0", "-4.0"];
        NAMES[self as usize]
    }
}

/// Read-only hardware values available as sources.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ConstReg {
    /// `src_flat_scratch_base_lo` (230).
    FlatScratchBaseLo,
    /// `src_flat_scratch_base_hi` (231).
    FlatScratchBaseHi,
    /// `src_shared_base` (235): aperture base of LDS in the flat address space.
    SharedBase,
    /// `src_shared_limit` (236).
    SharedLimit,
    /// `src_private_base` (237): aperture base of scratch in the flat address space.
    PrivateBase,
    /// `src_private_limit` (238).
    PrivateLimit,
    /// `src_pops_exiting_wave_id` (239).
    PopsExitingWaveId,
    /// `src_vccz` (251): 1 when VCC is zero.
    Vccz,
    /// `src_execz` (252): 1 when EXEC is zero.
    Execz,
    /// `src_scc` (253).
    Scc,
    /// `src_lds_direct` (254).
    LdsDirect,
}

impl ConstReg {
    /// The source code of this value.
    pub fn code(self) -> u8 {
        match self {
            ConstReg::FlatScratchBaseLo => 230,
            ConstReg::FlatScratchBaseHi => 231,
            ConstReg::SharedBase => 235,
            ConstReg::SharedLimit => 236,
            ConstReg::PrivateBase => 237,
            ConstReg::PrivateLimit => 238,
            ConstReg::PopsExitingWaveId => 239,
            ConstReg::Vccz => 251,
            ConstReg::Execz => 252,
            ConstReg::Scc => 253,
            ConstReg::LdsDirect => 254,
        }
    }

    fn name(self) -> &'static str {
        match self {
            ConstReg::FlatScratchBaseLo => "src_flat_scratch_base_lo",
            ConstReg::FlatScratchBaseHi => "src_flat_scratch_base_hi",
            ConstReg::SharedBase => "src_shared_base",
            ConstReg::SharedLimit => "src_shared_limit",
            ConstReg::PrivateBase => "src_private_base",
            ConstReg::PrivateLimit => "src_private_limit",
            ConstReg::PopsExitingWaveId => "src_pops_exiting_wave_id",
            ConstReg::Vccz => "src_vccz",
            ConstReg::Execz => "src_execz",
            ConstReg::Scc => "src_scc",
            ConstReg::LdsDirect => "src_lds_direct",
        }
    }
}

/// A decoded operand. Register operands carry their width in dwords (`v[4:7]` is
/// `Vgpr { reg: 4, count: 4 }`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Operand {
    /// Not present (also an `off` address or base register).
    #[default]
    None,
    /// Scalar registers `s[reg : reg+count-1]`.
    Sgpr {
        /// First register.
        reg: u8,
        /// Number of dwords.
        count: u8,
    },
    /// Vector registers.
    Vgpr {
        /// First register.
        reg: u8,
        /// Number of dwords.
        count: u8,
    },
    /// Accumulation registers.
    Agpr {
        /// First register.
        reg: u8,
        /// Number of dwords.
        count: u8,
    },
    /// Trap-handler temporaries `ttmp[reg : reg+count-1]`.
    Ttmp {
        /// First register (0..=15).
        reg: u8,
        /// Number of dwords.
        count: u8,
    },
    /// A named scalar register (`vcc`, `exec`, `m0`, ...).
    Special {
        /// Which register (the low half when `count` is 2).
        reg: SpecialReg,
        /// Number of dwords.
        count: u8,
    },
    /// Integer inline constant -16..=64.
    InlineInt(i8),
    /// Floating-point inline constant; its bits depend on the operand type.
    InlineFloat(InlineFloat),
    /// A hardware value (`src_scc`, `src_shared_base`, ...).
    Const(ConstReg),
    /// The 32-bit literal that follows the instruction.
    Literal(u32),
    /// An immediate field (SOPP/SOPK `simm16`, an SMEM byte offset, ...).
    Imm(u32),
}

impl Operand {
    /// Decode an 8-bit scalar source code (0..=254; 255, the literal marker, is handled by the
    /// caller). `count` is the operand width in dwords. Returns `None` for codes that are not
    /// valid sources.
    pub(crate) fn scalar_src(code: u32, count: u8) -> Option<Operand> {
        Some(match code {
            0..=101 => {
                let reg = align_sgpr(code as u8, count);
                // LLVM's SGPR file runs to s105, so tuples may reach past s101.
                if reg as u32 + count as u32 > 106 {
                    return None;
                }
                Operand::Sgpr { reg, count }
            }
            102..=107 | 124..=127 => {
                let reg = special(code as u8)?;
                // null belongs to every scalar register class; the others pair at most.
                if reg != SpecialReg::Null && (count > 2 || (count == 2 && !reg_pairs(reg))) {
                    return None;
                }
                Operand::Special { reg, count }
            }
            108..=123 => {
                let reg = align_sgpr(code as u8 - 108, count);
                if reg as u32 + count as u32 > 16 {
                    return None;
                }
                Operand::Ttmp { reg, count }
            }
            128..=192 => Operand::InlineInt((code - 128) as i8),
            193..=208 => Operand::InlineInt(-((code - 192) as i8)),
            240..=248 => Operand::InlineFloat(InlineFloat::ALL[(code - 240) as usize]),
            230 | 235..=239 | 251..=253 => Operand::Const(const_reg(code as u8)?),
            231 | 254 if count == 1 => Operand::Const(const_reg(code as u8)?),
            _ => return None,
        })
    }

    /// Decode a scalar destination register code (0..=127).
    pub(crate) fn scalar_dst(code: u32, count: u8) -> Option<Operand> {
        match code {
            0..=101 | 108..=123 => Operand::scalar_src(code, count),
            102..=107 | 124..=127 => Operand::scalar_src(code, count),
            _ => None,
        }
    }

    /// For scalar register operands, the operand code of the first register (s0 is 0, vcc_lo
    /// 106, ttmp0 108, m0 124, exec_lo 126): the index into a flat 128-entry scalar file.
    pub fn scalar_code(&self) -> Option<u8> {
        match *self {
            Operand::Sgpr { reg, .. } => Some(reg),
            Operand::Ttmp { reg, .. } => Some(108 + reg),
            Operand::Special { reg, .. } => Some(reg.code()),
            _ => None,
        }
    }

    /// Number of dwords a register operand spans (1 for constants).
    pub fn count(&self) -> u8 {
        match *self {
            Operand::Sgpr { count, .. }
            | Operand::Vgpr { count, .. }
            | Operand::Agpr { count, .. }
            | Operand::Ttmp { count, .. }
            | Operand::Special { count, .. } => count,
            Operand::None => 0,
            _ => 1,
        }
    }

    /// Whether the operand is a constant (inline, literal or immediate field).
    pub fn is_constant(&self) -> bool {
        matches!(
            self,
            Operand::InlineInt(_) | Operand::InlineFloat(_) | Operand::Literal(_) | Operand::Imm(_)
        )
    }

    /// The bits an inline constant or literal supplies to an operand of type `ty`, as the
    /// hardware (and LLVM's disassembler) read them: float constants take the type's own
    /// encoding, integers are sign-extended, and a literal for a 64-bit float fills the high
    /// dword. `None` for registers.
    pub fn constant_bits(&self, ty: ValueType) -> Option<u64> {
        match *self {
            Operand::InlineInt(v) => Some(match ty {
                ValueType::I16 | ValueType::F16 | ValueType::Bf16 => (v as i16 as u16) as u64,
                ValueType::F64 | ValueType::I64 => v as i64 as u64,
                _ => (v as i32 as u32) as u64,
            }),
            Operand::InlineFloat(f) => Some(match ty {
                ValueType::F16 | ValueType::V2F16 => f.f16_bits() as u64,
                ValueType::Bf16 | ValueType::V2Bf16 => f.bf16_bits() as u64,
                ValueType::F64 | ValueType::I64 => f.f64_bits(),
                ValueType::I16 => f.f16_bits() as u64,
                _ => f.f32_bits() as u64,
            }),
            Operand::Literal(v) => Some(match ty {
                ValueType::F64 => (v as u64) << 32,
                _ => v as u64,
            }),
            Operand::Imm(v) => Some(v as u64),
            _ => None,
        }
    }
}

/// LLVM (and the register file) address SGPR tuples at their natural alignment: an odd first
/// register of a pair names the pair below it.
fn align_sgpr(reg: u8, count: u8) -> u8 {
    match count {
        0 | 1 => reg,
        2 => reg & !1,
        _ => reg & !3,
    }
}

fn special(code: u8) -> Option<SpecialReg> {
    Some(match code {
        102 => SpecialReg::FlatScratchLo,
        103 => SpecialReg::FlatScratchHi,
        104 => SpecialReg::XnackMaskLo,
        105 => SpecialReg::XnackMaskHi,
        106 => SpecialReg::VccLo,
        107 => SpecialReg::VccHi,
        124 => SpecialReg::M0,
        125 => SpecialReg::Null,
        126 => SpecialReg::ExecLo,
        127 => SpecialReg::ExecHi,
        _ => return None,
    })
}

/// Registers that start a 64-bit pair.
fn reg_pairs(reg: SpecialReg) -> bool {
    matches!(
        reg,
        SpecialReg::FlatScratchLo
            | SpecialReg::XnackMaskLo
            | SpecialReg::VccLo
            | SpecialReg::ExecLo
            | SpecialReg::Null
    )
}

fn const_reg(code: u8) -> Option<ConstReg> {
    Some(match code {
        230 => ConstReg::FlatScratchBaseLo,
        231 => ConstReg::FlatScratchBaseHi,
        235 => ConstReg::SharedBase,
        236 => ConstReg::SharedLimit,
        237 => ConstReg::PrivateBase,
        238 => ConstReg::PrivateLimit,
        239 => ConstReg::PopsExitingWaveId,
        251 => ConstReg::Vccz,
        252 => ConstReg::Execz,
        253 => ConstReg::Scc,
        254 => ConstReg::LdsDirect,
        _ => return None,
    })
}

fn fmt_range(f: &mut fmt::Formatter<'_>, prefix: &str, reg: u32, count: u8) -> fmt::Result {
    if count <= 1 {
        write!(f, "{prefix}{reg}")
    } else {
        write!(f, "{prefix}[{reg}:{}]", reg + count as u32 - 1)
    }
}

/// Registers print as LLVM names them; constants print in their type-independent form (an
/// [`Inst`](super::Inst)'s own `Display` spells them by operand type, as llvm-objdump does).
impl fmt::Display for Operand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Operand::None => f.write_str("off"),
            Operand::Sgpr { reg, count } => fmt_range(f, "s", reg as u32, count),
            Operand::Vgpr { reg, count } => fmt_range(f, "v", reg as u32, count),
            Operand::Agpr { reg, count } => fmt_range(f, "a", reg as u32, count),
            Operand::Ttmp { reg, count } => fmt_range(f, "ttmp", reg as u32, count),
            Operand::Special { reg, count } => f.write_str(reg.name(count)),
            Operand::InlineInt(v) => write!(f, "{v}"),
            Operand::InlineFloat(InlineFloat::InvTwoPi) => f.write_str("0.15915494"),
            Operand::InlineFloat(x) => f.write_str(x.name()),
            Operand::Const(c) => f.write_str(c.name()),
            Operand::Literal(v) | Operand::Imm(v) => write!(f, "{v:#x}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scalar_codes_decode_like_the_isa_table() {
        let cases: &[(u32, u8, Option<&str>)] = &[
            (0, 1, Some("s0")),
            (101, 1, Some("s101")),
            (101, 2, Some("s[100:101]")),
            (102, 2, Some("flat_scratch")),
            (103, 2, None),
            (106, 1, Some("vcc_lo")),
            (106, 2, Some("vcc")),
            (109, 2, Some("ttmp[0:1]")),
            (124, 1, Some("m0")),
            (124, 2, None),
            (125, 2, Some("null")),
            (126, 2, Some("exec")),
            (128, 1, Some("0")),
            (192, 1, Some("64")),
            (193, 1, Some("-1")),
            (208, 1, Some("-16")),
            (209, 1, None),
            (242, 1, Some("1.0")),
            (248, 1, Some("0.15915494")),
            (249, 1, None),
            (250, 1, None),
            (253, 1, Some("src_scc")),
            (254, 1, Some("src_lds_direct")),
            (254, 2, None),
        ];
        for &(code, count, want) in cases {
            let got = Operand::scalar_src(code, count).map(|o| o.to_string());
            assert_eq!(got.as_deref(), want, "code {code} x{count}");
        }
    }

    #[test]
    fn inline_constants_take_the_operand_types_encoding() {
        let one = Operand::InlineFloat(InlineFloat::One);
        assert_eq!(one.constant_bits(ValueType::B32), Some(0x3F80_0000));
        assert_eq!(one.constant_bits(ValueType::F16), Some(0x3C00));
        assert_eq!(one.constant_bits(ValueType::Bf16), Some(0x3F80));
        assert_eq!(
            one.constant_bits(ValueType::F64),
            Some(0x3FF0_0000_0000_0000)
        );
        let m1 = Operand::InlineInt(-1);
        assert_eq!(m1.constant_bits(ValueType::B32), Some(0xFFFF_FFFF));
        assert_eq!(m1.constant_bits(ValueType::I64), Some(u64::MAX));
        assert_eq!(m1.constant_bits(ValueType::F16), Some(0xFFFF));
        assert_eq!(
            Operand::Literal(0x4000_0000).constant_bits(ValueType::F64),
            Some(0x4000_0000_0000_0000)
        );
        let inv = Operand::InlineFloat(InlineFloat::InvTwoPi);
        assert_eq!(inv.constant_bits(ValueType::B32), Some(0x3E22_F983));
        // The f32 constant is 1/(2π) rounded to single precision.
        assert!(((f32::from_bits(0x3E22_F983) as f64) - 0.5 / std::f64::consts::PI).abs() < 1e-8);
    }
}

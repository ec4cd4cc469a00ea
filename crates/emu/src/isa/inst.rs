//! The decoded instruction: what the executor consumes.

use std::fmt;

use super::desc::{Encoding, OpDesc, ROLE_COUNT, Role, ValueType};
use super::operand::Operand;
use super::tables::{DESCS, Opcode};

/// Source and output modifiers of vector ALU instructions. Bit `i` of a per-source field refers
/// to source `i`; `op_sel` bit 3 is the destination's half select.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Mods {
    /// Negate source (VOP3, SDWA, DPP); `neg_lo` of packed VOP3P.
    pub neg: u8,
    /// Absolute value of source (VOP3, SDWA, DPP; the `neg_hi` bits of `v_fma_mix*`).
    pub abs: u8,
    /// Sign-extend the selected SDWA source.
    pub sext: u8,
    /// Negate the high half of a packed source (VOP3P `neg_hi`).
    pub neg_hi: u8,
    /// Half selects: VOP3 `op_sel` (bit 3 = destination) or VOP3P `op_sel` (low half source).
    pub op_sel: u8,
    /// VOP3P `op_sel_hi` (high half source; for `v_fma_mix*` the f16-source selector).
    pub op_sel_hi: u8,
    /// Clamp the result.
    pub clamp: bool,
    /// Output modifier: 0 none, 1 ×2, 2 ×4, 3 ÷2.
    pub omod: u8,
    /// Truth table of `v_bitop3_b16/b32`.
    pub bitop3: u8,
    /// `fi` of the VOP3 permlane swaps (fetch inactive lanes).
    pub fi: bool,
    /// `bound_ctrl` of the VOP3 permlane swaps.
    pub bound_ctrl: bool,
}

/// SDWA operand selects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum SdwaSel {
    /// Bits 7:0.
    Byte0,
    /// Bits 15:8.
    Byte1,
    /// Bits 23:16.
    Byte2,
    /// Bits 31:24.
    Byte3,
    /// Bits 15:0.
    Word0,
    /// Bits 31:16.
    Word1,
    /// All 32 bits.
    #[default]
    Dword,
}

impl SdwaSel {
    pub(crate) fn from_bits(v: u32) -> Option<SdwaSel> {
        Some(match v {
            0 => SdwaSel::Byte0,
            1 => SdwaSel::Byte1,
            2 => SdwaSel::Byte2,
            3 => SdwaSel::Byte3,
            4 => SdwaSel::Word0,
            5 => SdwaSel::Word1,
            6 => SdwaSel::Dword,
            _ => return None,
        })
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            SdwaSel::Byte0 => "BYTE_0",
            SdwaSel::Byte1 => "BYTE_1",
            SdwaSel::Byte2 => "BYTE_2",
            SdwaSel::Byte3 => "BYTE_3",
            SdwaSel::Word0 => "WORD_0",
            SdwaSel::Word1 => "WORD_1",
            SdwaSel::Dword => "DWORD",
        }
    }
}

/// What SDWA does with the destination bits outside `dst_sel`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum DstUnused {
    /// Zero them.
    #[default]
    Pad,
    /// Sign-extend the selected part into them.
    Sext,
    /// Keep the old register contents.
    Preserve,
}

/// SDWA fields (neg/abs/sext/clamp/omod live in [`Mods`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sdwa {
    /// Destination select.
    pub dst_sel: SdwaSel,
    /// Destination unused-bits policy.
    pub dst_unused: DstUnused,
    /// Source 0 select.
    pub src0_sel: SdwaSel,
    /// Source 1 select.
    pub src1_sel: SdwaSel,
}

/// A DPP lane-movement control, decoded from the 9-bit `dpp_ctrl` field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DppCtrl {
    /// Within each group of four lanes, lane i reads lane `sel[i]`.
    QuadPerm([u8; 4]),
    /// Row (16 lanes) shift left by 1..=15.
    RowShl(u8),
    /// Row shift right by 1..=15.
    RowShr(u8),
    /// Row rotate right by 1..=15.
    RowRor(u8),
    /// Wave shift left by one lane.
    WaveShl1,
    /// Wave rotate left by one lane.
    WaveRol1,
    /// Wave shift right by one lane.
    WaveShr1,
    /// Wave rotate right by one lane.
    WaveRor1,
    /// Mirror lanes within each row.
    RowMirror,
    /// Mirror lanes within each half row.
    RowHalfMirror,
    /// Broadcast lane 15 of each row to the next row.
    RowBcast15,
    /// Broadcast lane 31 to rows 2 and 3.
    RowBcast31,
    /// Broadcast lane n of each row to the whole row (gfx90a+ `row_newbcast`).
    RowNewBcast(u8),
    /// A reserved encoding.
    Invalid(u16),
}

impl DppCtrl {
    /// Decode the 9-bit field.
    pub fn from_bits(v: u16) -> DppCtrl {
        match v {
            0x000..=0x0FF => DppCtrl::QuadPerm([
                (v & 3) as u8,
                ((v >> 2) & 3) as u8,
                ((v >> 4) & 3) as u8,
                ((v >> 6) & 3) as u8,
            ]),
            0x101..=0x10F => DppCtrl::RowShl((v & 0xF) as u8),
            0x111..=0x11F => DppCtrl::RowShr((v & 0xF) as u8),
            0x121..=0x12F => DppCtrl::RowRor((v & 0xF) as u8),
            0x130 => DppCtrl::WaveShl1,
            0x134 => DppCtrl::WaveRol1,
            0x138 => DppCtrl::WaveShr1,
            0x13C => DppCtrl::WaveRor1,
            0x140 => DppCtrl::RowMirror,
            0x141 => DppCtrl::RowHalfMirror,
            0x142 => DppCtrl::RowBcast15,
            0x143 => DppCtrl::RowBcast31,
            0x150..=0x15F => DppCtrl::RowNewBcast((v & 0xF) as u8),
            _ => DppCtrl::Invalid(v),
        }
    }
}

/// DPP fields (neg/abs live in [`Mods`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Dpp {
    /// The raw 9-bit control; see [`Dpp::control`].
    pub ctrl: u16,
    /// Rows (16-lane groups) that write their result.
    pub row_mask: u8,
    /// Banks (4-lane groups within a row) that write their result.
    pub bank_mask: u8,
    /// Read zero instead of disabling the lane when the source lane is invalid.
    pub bound_ctrl: bool,
}

impl Dpp {
    /// The decoded lane movement.
    pub fn control(&self) -> DppCtrl {
        DppCtrl::from_bits(self.ctrl)
    }
}

/// Matrix-instruction fields.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Mfma {
    /// Control broadcast size (for f8f6f4: the A-matrix format: 0 FP8, 1 BF8, 2 FP6, 3 BF6,
    /// 4 FP4).
    pub cbsz: u8,
    /// A-matrix broadcast id.
    pub abid: u8,
    /// B-matrix lane group pattern (for f8f6f4: the B-matrix format; for f64 MFMAs the `neg`
    /// bits of A, B, C).
    pub blgp: u8,
    /// C and D are accumulation registers.
    pub acc_cd: bool,
}

/// Memory-instruction fields.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemFlags {
    /// Byte offset: DS 16-bit (`offset1:offset0`), MUBUF 12-bit, FLAT 13-bit (signed for
    /// GLOBAL/SCRATCH), SMEM 21-bit signed immediate.
    pub offset: i32,
    /// DS first offset (in elements of the access) of two-address forms.
    pub offset0: u8,
    /// DS second offset.
    pub offset1: u8,
    /// MUBUF/MTBUF: the VGPR address includes an offset.
    pub offen: bool,
    /// MUBUF/MTBUF: the VGPR address includes an index.
    pub idxen: bool,
    /// Cache policy bit 0 (also "return the old value" of atomics).
    pub sc0: bool,
    /// Cache policy bit 1.
    pub sc1: bool,
    /// Non-temporal hint.
    pub nt: bool,
    /// MUBUF: the loaded data goes to LDS (at M0) instead of VGPRs.
    pub lds: bool,
    /// SMEM globally coherent.
    pub glc: bool,
    /// SCRATCH: a VGPR address is present (SVE).
    pub sve: bool,
    /// SMEM: the offset field holds an immediate (else an SGPR number).
    pub smem_imm: bool,
    /// SMEM: an SGPR offset is in `soffset`.
    pub smem_soe: bool,
    /// MTBUF data format.
    pub dfmt: u8,
    /// MTBUF number format.
    pub nfmt: u8,
}

/// One decoded instruction.
///
/// Operands are stored by [`Role`] (the encoding field they come from); implicit `vcc` operands
/// of `_e32`, SDWA and DPP forms are filled in under the role the `_e64` form encodes them with,
/// so an executor sees the same shape whatever the encoding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Inst {
    /// The operation.
    pub op: Opcode,
    /// The encoding it was decoded from.
    pub encoding: Encoding,
    /// Size in bytes, literal included.
    pub size: u8,
    pub(crate) operands: [Operand; ROLE_COUNT],
    /// Vector ALU modifiers.
    pub mods: Mods,
    /// SDWA fields (meaningful for SDWA encodings).
    pub sdwa: Sdwa,
    /// DPP fields (meaningful for DPP encodings).
    pub dpp: Dpp,
    /// Matrix fields.
    pub mfma: Mfma,
    /// Memory fields.
    pub mem: MemFlags,
    /// Target address of a PC-relative branch (`s_branch`, `s_cbranch_*`, `s_call_b64`):
    /// address of the next instruction plus four times the signed 16-bit immediate.
    pub branch_target: Option<u64>,
    pub(crate) desc: u16,
}

impl Inst {
    pub(crate) fn desc(&self) -> &'static OpDesc {
        &DESCS[self.desc as usize]
    }

    /// The operand in `role` ([`Operand::None`] when the instruction has none there).
    pub fn operand(&self, role: Role) -> Operand {
        self.operands[role as usize]
    }

    /// The vector (or compare-mask) destination.
    pub fn dst(&self) -> Operand {
        self.operand(Role::Vdst)
    }

    /// The scalar destination (SOP) or carry/condition output.
    pub fn sdst(&self) -> Operand {
        self.operand(Role::Sdst)
    }

    /// Source `i` (0..=2).
    pub fn src(&self, i: usize) -> Operand {
        match i {
            0 => self.operand(Role::Src0),
            1 => self.operand(Role::Src1),
            2 => self.operand(Role::Src2),
            _ => Operand::None,
        }
    }

    /// The printed mnemonic, suffix included (`v_add_f32_e64`).
    pub fn mnemonic(&self) -> &'static str {
        self.desc().mnemonic
    }

    /// The operands in printed order, with their roles.
    pub fn operands(&self) -> impl Iterator<Item = (Role, Operand)> + '_ {
        self.desc()
            .operands
            .iter()
            .map(move |d| (d.role, self.operands[d.role as usize]))
    }

    /// The constant type of the operand in `role`: how an inline constant or literal there is
    /// to be expanded (see [`Operand::constant_bits`]).
    pub fn value_type(&self, role: Role) -> ValueType {
        self.desc()
            .operands
            .iter()
            .find(|d| d.role == role)
            .map_or(ValueType::None, |d| d.ty)
    }
}

impl fmt::Display for Inst {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&super::print::format_inst(self))
    }
}

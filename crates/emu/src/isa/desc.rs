//! The shape of the generated opcode tables (`tables.rs`).
//!
//! Every entry describes one opcode in one encoding, exactly as LLVM's disassembler sees it: its
//! operands in printed order (each tied to the encoding field it comes from), every modifier field
//! with the values LLVM accepts and what it means for this opcode, and the order in which the
//! printed modifiers follow the operands. The decoder and printer are generic over these entries;
//! only behaviour that depends on *values* (an `off` address, a register file chosen by an `acc`
//! bit) is written by hand.

use super::tables::Opcode;

/// The encoding an instruction was decoded from. The same [`Opcode`] can appear under several
/// encodings (`v_add_f32` as VOP2, VOP3, SDWA and DPP).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Encoding {
    /// Scalar ALU, one source (`s_mov_b32`).
    Sop1,
    /// Scalar ALU, two sources (`s_add_u32`).
    Sop2,
    /// Scalar ALU with a 16-bit immediate (`s_movk_i32`).
    Sopk,
    /// Scalar compare (`s_cmp_eq_u32`).
    Sopc,
    /// Scalar program control (`s_branch`, `s_waitcnt`).
    Sopp,
    /// Scalar memory (`s_load_dwordx2`).
    Smem,
    /// Vector ALU, one source, 32-bit encoding (`_e32`).
    Vop1,
    /// Vector ALU, two sources, 32-bit encoding (`_e32`).
    Vop2,
    /// Vector compare, 32-bit encoding (`_e32`).
    Vopc,
    /// Vector ALU, 64-bit encoding (VOP3A/VOP3B, `_e64` forms of VOP1/2/C included).
    Vop3,
    /// Packed/mixed vector ALU (VOP3P).
    Vop3p,
    /// Matrix (VOP3P-MAI): MFMA, SMFMAC, `v_accvgpr_*`.
    Mai,
    /// A `v_mfma_ld_scale_b32` prefix fused with an f8f6f4 MFMA: the 128-bit scaled MFMA.
    MaiScaled,
    /// VOP1 with an SDWA dword.
    Vop1Sdwa,
    /// VOP2 with an SDWA dword.
    Vop2Sdwa,
    /// VOPC with an SDWA dword.
    VopcSdwa,
    /// VOP1 with a DPP dword.
    Vop1Dpp,
    /// VOP2 with a DPP dword.
    Vop2Dpp,
    /// Local/global data share.
    Ds,
    /// Untyped buffer memory.
    Mubuf,
    /// Typed buffer memory.
    Mtbuf,
    /// Flat memory (segment 0).
    Flat,
    /// Global memory (flat encoding, segment 2).
    Global,
    /// Scratch memory (flat encoding, segment 1).
    Scratch,
}

impl Encoding {
    /// The encoding family's name as the ISA manual spells it.
    pub fn name(self) -> &'static str {
        match self {
            Encoding::Sop1 => "SOP1",
            Encoding::Sop2 => "SOP2",
            Encoding::Sopk => "SOPK",
            Encoding::Sopc => "SOPC",
            Encoding::Sopp => "SOPP",
            Encoding::Smem => "SMEM",
            Encoding::Vop1 => "VOP1",
            Encoding::Vop2 => "VOP2",
            Encoding::Vopc => "VOPC",
            Encoding::Vop3 => "VOP3",
            Encoding::Vop3p => "VOP3P",
            Encoding::Mai => "VOP3P-MAI",
            Encoding::MaiScaled => "VOP3P-MAI (scaled)",
            Encoding::Vop1Sdwa => "VOP1 SDWA",
            Encoding::Vop2Sdwa => "VOP2 SDWA",
            Encoding::VopcSdwa => "VOPC SDWA",
            Encoding::Vop1Dpp => "VOP1 DPP",
            Encoding::Vop2Dpp => "VOP2 DPP",
            Encoding::Ds => "DS",
            Encoding::Mubuf => "MUBUF",
            Encoding::Mtbuf => "MTBUF",
            Encoding::Flat => "FLAT",
            Encoding::Global => "GLOBAL",
            Encoding::Scratch => "SCRATCH",
        }
    }

    /// Whether this is an SDWA form.
    pub fn is_sdwa(self) -> bool {
        matches!(
            self,
            Encoding::Vop1Sdwa | Encoding::Vop2Sdwa | Encoding::VopcSdwa
        )
    }

    /// Whether this is a DPP form.
    pub fn is_dpp(self) -> bool {
        matches!(self, Encoding::Vop1Dpp | Encoding::Vop2Dpp)
    }
}

/// The part an operand plays, named after the encoding field it comes from. Whether the
/// instruction reads or writes it is the opcode's business (`s_cmpk_*` reads its `sdst` field).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Role {
    /// Vector destination field (also the scalar mask destination of `v_cmp*_e64` and the SGPR
    /// destination of `v_readlane_b32`); `vcc` for the 32-bit compare forms.
    Vdst = 0,
    /// Scalar destination (SOP), or the carry/condition output of VOP3B and `_e32` carry ops.
    Sdst,
    /// First source.
    Src0,
    /// Second source.
    Src1,
    /// Third source (also the implicit `vcc` carry-in/condition of `_e32` forms).
    Src2,
    /// Scale source of the A matrix of a scaled MFMA.
    ScaleA,
    /// Scale source of the B matrix of a scaled MFMA.
    ScaleB,
    /// The mandatory literal constant of `v_fmamk`/`v_fmaak`/`v_madmk`/`v_madak`.
    K,
    /// The 16-bit immediate of SOPK/SOPP (and the mode byte of `s_set_gpr_idx_on`).
    Simm16,
    /// SMEM data registers (destination of loads, source of stores).
    Sdata,
    /// SMEM base address (64-bit) or buffer resource (128-bit).
    Sbase,
    /// SMEM offset: an immediate, or an SGPR when the `imm` bit is clear.
    Offset,
    /// DS address.
    Addr,
    /// DS first data operand.
    Data0,
    /// DS second data operand.
    Data1,
    /// MUBUF/MTBUF/FLAT vector address.
    Vaddr,
    /// MUBUF/MTBUF/FLAT data (load destination or store source).
    Vdata,
    /// MUBUF/MTBUF buffer resource (four SGPRs).
    Srsrc,
    /// MUBUF/MTBUF/SMEM scalar offset.
    Soffset,
    /// GLOBAL/SCRATCH scalar base address.
    Saddr,
}

/// Number of [`Role`]s.
pub const ROLE_COUNT: usize = 20;

/// How an encoding field is turned into an operand.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Enc {
    /// 9-bit VOP source: scalar codes 0..=255, vector registers 256..=511.
    Src9,
    /// 8-bit scalar source (SOP sources, MUBUF soffset).
    Ssrc8,
    /// A scalar register number (7 or 8 bits).
    Sreg,
    /// An 8-bit vector register number.
    Vreg,
    /// SMEM base: the field holds the SGPR number divided by two.
    Sbase,
    /// MUBUF resource: the field holds the SGPR number divided by four.
    Srsrc,
    /// GLOBAL/SCRATCH saddr: a scalar register, or `off` when 0x7F.
    Saddr,
    /// SDWA source: a VGPR, or a scalar code when the source's `s` bit is set.
    SdwaSrc,
    /// SDWA compare destination: `vcc`, or the `sdst` field when the `sd` bit is set.
    SdwaSdst,
    /// An immediate printed as described.
    Imm(ImmKind),
    /// The instruction's literal dword, printed in hexadecimal.
    Literal,
    /// The instruction's literal dword, printed like a 32-bit immediate (`s_setreg_imm32_b32`).
    LiteralImm32,
    /// Implicit `vcc` (printed, not encoded).
    Vcc,
}

/// How an immediate field prints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ImmKind {
    /// Always hexadecimal (`s_movk_i32 s0, 0x10`).
    Hex,
    /// Decimal up to 64, hexadecimal above (`s_nop 3`, `s_setprio 0x7f`).
    Imm32,
    /// A PC-relative branch offset in dwords, printed in decimal as stored.
    Branch,
    /// Decimal, and the operand is omitted when zero (`s_endpgm`).
    DecNz,
    /// `vmcnt(..) expcnt(..) lgkmcnt(..)`.
    Waitcnt,
    /// `sendmsg(...)`.
    Sendmsg,
    /// `hwreg(...)`.
    Hwreg,
    /// `gpr_idx(...)`.
    GprIdx,
    /// SMEM byte offset: signed 21-bit hexadecimal.
    SmemOffset,
}

/// The type of a source operand as far as constants are concerned: it decides the bit pattern an
/// inline constant stands for and how LLVM prints constants and literals.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ValueType {
    /// No constants allowed.
    None,
    /// 32-bit (integer, float, or packed pair of 32-bit values).
    B32,
    /// 16-bit integer.
    I16,
    /// IEEE half.
    F16,
    /// bfloat16.
    Bf16,
    /// IEEE double.
    F64,
    /// 64-bit integer.
    I64,
    /// Packed pair of halves.
    V2F16,
    /// Packed pair of bfloat16.
    V2Bf16,
}

/// What a vector compare opcode tests ([`Opcode::compare`]): generated with the opcode tables,
/// so executing a compare needs no look at its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Compare {
    /// The type both sources are read as (for a class test: the tested value's type; source 1
    /// is then a 32-bit class mask).
    pub ty: CmpType,
    /// The predicate, or [`CmpPred::Class`].
    pub pred: CmpPred,
    /// `v_cmpx*`: the result is written to EXEC as well.
    pub writes_exec: bool,
}

/// What a timing model needs of an opcode beyond its encoding class ([`Opcode::timing`]):
/// generated with the opcode tables (matrix passes from LLVM's gfx950 scheduling model), so a
/// model never looks at a mnemonic.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TimingFacts {
    /// Matrix instructions: passes of 4 clocks in LLVM's gfx950 scheduling model (with FP4 or
    /// FP6 operands for the f8f6f4 opcodes); 0 for every other opcode.
    pub passes: u8,
    /// Matrix instructions: passes when A or B is FP8 or BF8 (the f8f6f4 opcodes take twice as
    /// many; the others the same as `passes`).
    pub fp8_passes: u8,
    /// DS instructions: bytes one lane moves (both accesses of a `read2`/`write2`); 0 otherwise.
    pub lane_bytes: u8,
    /// The rate the VALU runs the opcode at.
    pub rate: ValuRate,
    /// Implicit reads and operand directions, by the `TimingFacts::*` bits below.
    pub(crate) flags: u8,
}

impl TimingFacts {
    /// An opcode with nothing to add to its encoding class.
    pub const NONE: TimingFacts = TimingFacts {
        passes: 0,
        fp8_passes: 0,
        lane_bytes: 0,
        rate: ValuRate::Full,
        flags: 0,
    };
    const READS_SCC: u8 = 1;
    const READS_VCC: u8 = 2;
    const READS_EXEC: u8 = 4;
    const SDST_IS_SOURCE: u8 = 8;
    const SDATA_IS_SOURCE: u8 = 16;
    const DS_WRITE: u8 = 32;
    const LOADS_TO_LDS: u8 = 64;

    /// Reads SCC without naming it (`s_cselect`, `s_addc`, `s_cbranch_scc*`, ...).
    pub const fn reads_scc(self) -> bool {
        self.flags & Self::READS_SCC != 0
    }

    /// Reads VCC without naming it (`s_cbranch_vcc*`).
    pub const fn reads_vcc(self) -> bool {
        self.flags & Self::READS_VCC != 0
    }

    /// Reads EXEC without naming it (`s_cbranch_exec*`).
    pub const fn reads_exec(self) -> bool {
        self.flags & Self::READS_EXEC != 0
    }

    /// The `sdst` operand is a source (`s_cmpk_*` compare it with the immediate).
    pub const fn sdst_is_source(self) -> bool {
        self.flags & Self::SDST_IS_SOURCE != 0
    }

    /// The `sdata` operand is a source (scalar memory stores).
    pub const fn sdata_is_source(self) -> bool {
        self.flags & Self::SDATA_IS_SOURCE != 0
    }

    /// A DS write (`ds_write*`).
    pub const fn ds_write(self) -> bool {
        self.flags & Self::DS_WRITE != 0
    }

    /// A vector-memory load whose data goes to LDS by its opcode (`global_load_lds_*`; a MUBUF
    /// load does so by its `lds` bit).
    pub const fn loads_to_lds(self) -> bool {
        self.flags & Self::LOADS_TO_LDS != 0
    }
}

/// The rate the VALU runs an opcode at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ValuRate {
    /// Full rate.
    Full,
    /// A transcendental (`v_exp`, `v_log`, `v_rcp`, `v_rsq`, `v_sqrt`, `v_sin`, `v_cos`): LLVM
    /// schedules them as quarter rate.
    Transcendental,
    /// A double-precision operation.
    Double,
}

/// The type a vector compare reads its sources as.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CmpType {
    /// IEEE half.
    F16,
    /// IEEE single.
    F32,
    /// IEEE double.
    F64,
    /// Signed 16-bit.
    I16,
    /// Signed 32-bit.
    I32,
    /// Signed 64-bit.
    I64,
    /// Unsigned 16-bit.
    U16,
    /// Unsigned 32-bit.
    U32,
    /// Unsigned 64-bit.
    U64,
}

impl CmpType {
    /// Width of one source operand in bits.
    pub const fn bits(self) -> u32 {
        match self {
            CmpType::F16 | CmpType::I16 | CmpType::U16 => 16,
            CmpType::F32 | CmpType::I32 | CmpType::U32 => 32,
            CmpType::F64 | CmpType::I64 | CmpType::U64 => 64,
        }
    }
}

/// A vector compare predicate, spelled as in the mnemonic. Floating-point compares use the
/// first sixteen (the `n*` forms and `u` are true for unordered operands, the others false);
/// integer compares use `F`, `Lt`, `Eq`, `Le`, `Gt`, `Ne`, `Ge` and `T`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CmpPred {
    /// Always false.
    F,
    /// Less than.
    Lt,
    /// Equal.
    Eq,
    /// Less or equal.
    Le,
    /// Greater than.
    Gt,
    /// Less or greater (ordered and not equal).
    Lg,
    /// Greater or equal.
    Ge,
    /// Ordered (neither operand NaN).
    O,
    /// Unordered (an operand NaN).
    U,
    /// Not greater or equal.
    Nge,
    /// Not less or greater.
    Nlg,
    /// Not greater than.
    Ngt,
    /// Not less or equal.
    Nle,
    /// Not equal (unordered or different).
    Neq,
    /// Not less than.
    Nlt,
    /// Always true (floating point).
    Tru,
    /// Not equal (integer).
    Ne,
    /// Always true (integer).
    T,
    /// `v_cmp_class_*`: source 0's IEEE class (signalling NaN, quiet NaN, -inf, -normal,
    /// -denormal, -0, +0, +denormal, +normal, +inf: bits 0 to 9) is in source 1's mask.
    Class,
}

/// Register file named by a vector register field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum File {
    /// Architectural VGPRs.
    V,
    /// Accumulation registers.
    A,
}

/// Kinds of value a source field may hold, as a bit set (learned from LLVM per operand).
pub(crate) mod allow {
    pub const SGPR: u16 = 1;
    pub const VCC: u16 = 1 << 1;
    pub const M0: u16 = 1 << 2;
    pub const EXEC: u16 = 1 << 3;
    pub const INT: u16 = 1 << 4;
    pub const FLT: u16 = 1 << 5;
    pub const LIT: u16 = 1 << 6;
    pub const CONST: u16 = 1 << 7;
    pub const SCC: u16 = 1 << 8;
    pub const LDS: u16 = 1 << 9;
    pub const TTMP: u16 = 1 << 10;
    pub const VGPR: u16 = 1 << 11;
    pub const FLAT_XNACK: u16 = 1 << 12;
    pub const NULL: u16 = 1 << 13;
    /// A VGPR tuple of this operand may start at an odd register.
    pub const ODD_V: u16 = 1 << 14;
    /// An AGPR tuple of this operand may start at an odd register.
    pub const ODD_A: u16 = 1 << 15;
}

/// One printed operand of an opcode.
#[derive(Clone, Copy, Debug)]
pub(crate) struct OperandDesc {
    pub role: Role,
    pub enc: Enc,
    /// Field position: dword index, low bit, width in bits.
    pub word: u8,
    pub lo: u8,
    pub bits: u8,
    /// Register count (dwords) in the base form.
    pub width: u8,
    pub file: File,
    pub ty: ValueType,
    pub allow: u16,
}

/// What a modifier field means for one opcode (learned from how LLVM prints it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Meaning {
    /// LLVM accepts and drops the field; so does the decoder.
    Ignored,
    /// `|src N|`.
    Abs(u8),
    /// `-src N` (or `neg(..)` around constants).
    Neg(u8),
    /// `sext(src N)` (SDWA integer sources).
    Sext(u8),
    /// Entry of `neg_lo:[..]` for source N.
    NegLo(u8),
    /// Entry of `neg_hi:[..]` for source N.
    NegHi(u8),
    /// `op_sel` bit N (3 = destination).
    OpSel(u8),
    /// `op_sel_hi` bit N.
    OpSelHi(u8),
    /// `clamp`.
    Clamp,
    /// Output modifier `mul:2`, `mul:4`, `div:2`.
    Omod,
    /// Bits of `bitop3:` starting at this bit.
    Bitop3(u8),
    /// `fi:1` of the VOP3 permlane swaps.
    Fi,
    /// `bound_ctrl:1`.
    BoundCtrl,
    /// MFMA `cbsz:` (A-matrix format for f8f6f4).
    Cbsz,
    /// MFMA `abid:`.
    Abid,
    /// MFMA `blgp:` (B-matrix format for f8f6f4).
    Blgp,
    /// f64 MFMA negation bits, printed as `neg:[..]`.
    BlgpNeg,
    /// Moves the listed operands (bit per [`Role`]) to the accumulation registers.
    Acc(u32),
    /// SMEM `glc`.
    Glc,
    /// Cache policy `sc0`.
    Sc0,
    /// Cache policy `sc1`.
    Sc1,
    /// Non-temporal `nt`.
    Nt,
    /// Load to LDS (MUBUF `lds`).
    Lds,
    /// Buffer address includes the offset VGPR.
    Offen,
    /// Buffer address includes the index VGPR.
    Idxen,
    /// Scratch address includes a VGPR (SVE).
    Sve,
    /// SDWA destination select.
    DstSel,
    /// SDWA destination unused-bits policy.
    DstUnused,
    /// SDWA source-0 select.
    Src0Sel,
    /// SDWA source-1 select.
    Src1Sel,
    /// SDWA source 0 is a scalar code.
    S0,
    /// SDWA source 1 is a scalar code.
    S1,
    /// SDWA compare writes the `sdst` field instead of `vcc`.
    Sd,
    /// SMEM offset is an immediate.
    SmemImm,
    /// SMEM has an SGPR offset in `soffset`.
    SmemSoe,
    /// MTBUF data format.
    Dfmt,
    /// MTBUF number format.
    Nfmt,
}

/// A modifier field of one opcode.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ModDesc {
    pub word: u8,
    pub lo: u8,
    pub bits: u8,
    /// Bit v set when value v is valid (0xFFFF for "any value" of wider fields, 1 for "zero").
    pub valid: u16,
    /// The same when the instruction's `acc` bit is set (memory ops with AGPR data).
    pub valid_acc: u16,
    pub meaning: Meaning,
}

/// Modifiers printed after the operands, in the order LLVM prints them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Trail {
    Offset,
    Offset0,
    Offset1,
    Swizzle,
    SmemOffset,
    Offen,
    Idxen,
    Sc0,
    Sc1,
    Nt,
    Lds,
    Glc,
    Clamp,
    Omod,
    OpSel,
    OpSelHi,
    NegLo,
    NegHi,
    BlgpNeg,
    Cbsz,
    Abid,
    Blgp,
    DstSel,
    DstUnused,
    Src0Sel,
    Src1Sel,
    DppCtrl,
    RowMask,
    BankMask,
    BoundCtrl,
    Fi,
    Format,
    Bitop3,
}

/// Which bracketed list an [`ArrayDesc`] prints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ArrayKind {
    OpSel,
    OpSelHi,
    NegLo,
    NegHi,
    BlgpNeg,
}

/// A bracketed modifier list (`op_sel:[0,1,0]`): which bit of the decoded field each entry shows,
/// and the value of an entry LLVM treats as default (the list is omitted when all are default).
#[derive(Clone, Copy, Debug)]
pub(crate) struct ArrayDesc {
    pub kind: ArrayKind,
    pub entries: &'static [u8],
    pub default: u8,
}

/// One opcode in one encoding.
#[derive(Clone, Copy, Debug)]
pub(crate) struct OpDesc {
    pub opcode: Opcode,
    pub mnemonic: &'static str,
    pub encoding: Encoding,
    /// Size of the encoding without a literal, in dwords.
    pub dwords: u8,
    pub operands: &'static [OperandDesc],
    pub mods: &'static [ModDesc],
    pub trailing: &'static [Trail],
    pub arrays: &'static [ArrayDesc],
    /// Entry to use when the `sc0` bit is set (atomics that return the old value), or `NONE`.
    pub alt_sc0: u16,
    /// Entry to use when the `lds` bit is set (MUBUF loads to LDS), or `NONE`.
    pub alt_lds: u16,
    /// Register count of src0/src1 by `cbsz`/`blgp` (f8f6f4 MFMAs), or all zero.
    pub width_a: [u8; 8],
    pub width_b: [u8; 8],
}

/// "No entry" in the opcode maps and `alt_*` links.
pub(crate) const NONE: u16 = u16::MAX;

#[cfg(test)]
mod tests {
    use super::*;

    /// Every matrix opcode of the tables has LLVM's pass count (a timing model never guesses
    /// one), the f8f6f4 ones twice as many with FP8 operands, and the other facts say what the
    /// names say.
    #[test]
    fn timing_facts_cover_every_matrix_opcode() {
        let matrix = super::super::tables::DESCS.iter().filter(|d| {
            matches!(d.encoding, Encoding::Mai | Encoding::MaiScaled)
                && !matches!(
                    d.opcode,
                    Opcode::V_ACCVGPR_READ_B32 | Opcode::V_ACCVGPR_WRITE_B32
                )
        });
        let mut n = 0;
        for d in matrix {
            let t = d.opcode.timing();
            assert!((1..=16).contains(&t.passes), "{}", d.mnemonic);
            let f8f6f4 = d.opcode.name().ends_with("_f8f6f4");
            assert_eq!(t.fp8_passes, t.passes * if f8f6f4 { 2 } else { 1 });
            n += 1;
        }
        assert!(n > 60, "{n} matrix encodings");
        let t = Opcode::V_MFMA_SCALE_F32_16X16X128_F8F6F4.timing();
        assert_eq!((t.passes, t.fp8_passes), (4, 8));
        assert_eq!(Opcode::V_MFMA_F32_32X32X2_F32.timing().passes, 16);
        assert_eq!(Opcode::V_ADD_F32.timing(), TimingFacts::NONE);
        assert_eq!(Opcode::V_EXP_F32.timing().rate, ValuRate::Transcendental);
        assert_eq!(Opcode::V_SQRT_F64.timing().rate, ValuRate::Transcendental);
        assert_eq!(Opcode::V_ADD_F64.timing().rate, ValuRate::Double);
        assert_eq!(Opcode::DS_READ_B128.timing().lane_bytes, 16);
        assert_eq!(Opcode::DS_READ_B64_TR_B8.timing().lane_bytes, 8);
        assert_eq!(Opcode::DS_READ_U8.timing().lane_bytes, 1);
        let w = Opcode::DS_WRITE2_B64.timing();
        assert!(w.ds_write() && w.lane_bytes == 16);
        assert!(Opcode::S_CSELECT_B32.timing().reads_scc());
        assert!(Opcode::S_CBRANCH_SCC1.timing().reads_scc());
        assert!(Opcode::S_CBRANCH_VCCZ.timing().reads_vcc());
        assert!(Opcode::S_CBRANCH_EXECZ.timing().reads_exec());
        assert!(Opcode::S_CMPK_EQ_I32.timing().sdst_is_source());
        assert!(Opcode::S_STORE_DWORD.timing().sdata_is_source());
        assert!(!Opcode::S_LOAD_DWORD.timing().sdata_is_source());
        assert!(Opcode::GLOBAL_LOAD_LDS_DWORDX4.timing().loads_to_lds());
    }

    /// The generated facts cover exactly the `v_cmp*` opcodes and say what their names say.
    #[test]
    fn compare_facts_match_the_mnemonics() {
        for &op in Opcode::ALL {
            assert_eq!(
                op.name().starts_with("v_cmp"),
                op.compare().is_some(),
                "{}",
                op.name()
            );
        }
        let c = |ty, pred, writes_exec| {
            Some(Compare {
                ty,
                pred,
                writes_exec,
            })
        };
        assert_eq!(
            Opcode::V_CMPX_NGT_F16.compare(),
            c(CmpType::F16, CmpPred::Ngt, true)
        );
        assert_eq!(
            Opcode::V_CMP_NE_U64.compare(),
            c(CmpType::U64, CmpPred::Ne, false)
        );
        assert_eq!(
            Opcode::V_CMP_CLASS_F64.compare(),
            c(CmpType::F64, CmpPred::Class, false)
        );
        assert_eq!(Opcode::V_CMP_T_I16.compare().map(|c| c.ty.bits()), Some(16));
        assert_eq!(Opcode::V_ADD_F32.compare(), None);
    }
}

//! Machine code -> [`Inst`].
//!
//! The encoding family is recognised from the fixed high bits of the first dword (ISA manual's
//! format table); the opcode field then selects a table entry learned from LLVM, which drives the
//! rest: which fields are operands, which modifier values are valid and what they mean.

use thiserror::Error;

use super::desc::{
    ArrayKind, Enc, Encoding, File, ImmKind, Meaning, ModDesc, NONE, OpDesc, OperandDesc,
    ROLE_COUNT, Role, allow,
};
use super::inst::{Dpp, DstUnused, Inst, MemFlags, Mfma, Mods, Sdwa, SdwaSel};
use super::operand::{Operand, SpecialReg};
use super::tables::{self, DESCS};

/// Why bytes could not be decoded. Every variant names where and what was found.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum DecodeError {
    /// The instruction runs past the end of the buffer.
    #[error("truncated instruction at {pc:#x}: needs {need} bytes, {have} available")]
    Truncated {
        /// Address of the instruction.
        pc: u64,
        /// Bytes the instruction needs.
        need: usize,
        /// Bytes available.
        have: usize,
    },
    /// The high bits match no gfx950 encoding family.
    #[error("no gfx950 encoding has the high bits of word {word:#010x} at {pc:#x}")]
    UnknownEncoding {
        /// Address of the instruction.
        pc: u64,
        /// The first dword.
        word: u32,
    },
    /// The family is known but its opcode field names no gfx950 instruction.
    #[error("unknown {format} opcode {opcode:#x} in word {word:#010x} at {pc:#x}")]
    UnknownOpcode {
        /// Address of the instruction.
        pc: u64,
        /// Encoding family (`VOP3`, `DS`, ...).
        format: &'static str,
        /// Value of the opcode field.
        opcode: u32,
        /// The first dword.
        word: u32,
    },
    /// A modifier or reserved field holds a value the instruction does not accept.
    #[error(
        "{mnemonic} at {pc:#x}: field {field} (dword {dword} bits {lo}..) = {value:#x} is invalid; words {words:08x?}"
    )]
    InvalidField {
        /// Address of the instruction.
        pc: u64,
        /// The instruction as far as it was recognised.
        mnemonic: &'static str,
        /// What the field is.
        field: &'static str,
        /// Dword index of the field.
        dword: u8,
        /// Lowest bit of the field.
        lo: u8,
        /// The value found.
        value: u32,
        /// The instruction's dwords.
        words: Vec<u32>,
    },
    /// An operand field names a register or constant the operand does not accept.
    #[error("{mnemonic} at {pc:#x}: {role:?} field value {value:#x} is not a valid operand")]
    InvalidOperand {
        /// Address of the instruction.
        pc: u64,
        /// The instruction.
        mnemonic: &'static str,
        /// Which operand.
        role: Role,
        /// The field value.
        value: u32,
    },
}

fn word(bytes: &[u8], i: usize, pc: u64) -> Result<u32, DecodeError> {
    let at = i * 4;
    match bytes.get(at..at + 4) {
        Some(b) => Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        None => Err(DecodeError::Truncated {
            pc,
            need: at + 4,
            have: bytes.len(),
        }),
    }
}

fn field(w: &[u32; 5], dword: u8, lo: u8, bits: u8) -> u32 {
    let v = w[dword as usize] >> lo;
    if bits >= 32 {
        v
    } else {
        v & ((1u32 << bits) - 1)
    }
}

/// Decode the instruction at the start of `bytes`, which sits at address `pc`.
pub fn decode(bytes: &[u8], pc: u64) -> Result<Inst, DecodeError> {
    let w0 = word(bytes, 0, pc)?;
    let unknown = |format: &'static str, opcode: u32| DecodeError::UnknownOpcode {
        pc,
        format,
        opcode,
        word: w0,
    };
    let lookup = |map: &[u16], op: u32, format: &'static str| -> Result<u16, DecodeError> {
        match map.get(op as usize) {
            Some(&i) if i != NONE => Ok(i),
            _ => Err(unknown(format, op)),
        }
    };
    let idx = if w0 >> 31 == 0 {
        // VOP1/VOP2/VOPC: src0 0xF9 and 0xFA announce an SDWA or DPP dword.
        let (op, name, base, sdwa, dpp): (u32, _, &[u16], &[u16], &[u16]) = match w0 >> 25 {
            0x3E => (
                (w0 >> 17) & 0xFF,
                "VOPC",
                &tables::MAP_VOPC,
                &tables::MAP_VOPC_SDWA,
                &[],
            ),
            0x3F => (
                (w0 >> 9) & 0xFF,
                "VOP1",
                &tables::MAP_VOP1,
                &tables::MAP_VOP1_SDWA,
                &tables::MAP_VOP1_DPP,
            ),
            _ => (
                (w0 >> 25) & 0x3F,
                "VOP2",
                &tables::MAP_VOP2,
                &tables::MAP_VOP2_SDWA,
                &tables::MAP_VOP2_DPP,
            ),
        };
        let ext = match w0 & 0x1FF {
            0xF9 => sdwa.get(op as usize).copied(),
            0xFA => dpp.get(op as usize).copied(),
            _ => None,
        };
        match ext {
            Some(i) if i != NONE => i,
            _ => lookup(base, op, name)?,
        }
    } else if w0 >> 30 == 0b10 {
        if w0 >> 28 == 0xB {
            match (w0 >> 23) & 0x1F {
                0x1D => lookup(&tables::MAP_SOP1, (w0 >> 8) & 0xFF, "SOP1")?,
                0x1E => lookup(&tables::MAP_SOPC, (w0 >> 16) & 0x7F, "SOPC")?,
                0x1F => lookup(&tables::MAP_SOPP, (w0 >> 16) & 0x7F, "SOPP")?,
                op => lookup(&tables::MAP_SOPK, op, "SOPK")?,
            }
        } else {
            lookup(&tables::MAP_SOP2, (w0 >> 23) & 0x7F, "SOP2")?
        }
    } else {
        match w0 >> 26 {
            0x30 => lookup(&tables::MAP_SMEM, (w0 >> 18) & 0xFF, "SMEM")?,
            0x34 => {
                let op = (w0 >> 16) & 0x3FF;
                if op < 0x380 {
                    lookup(&tables::MAP_VOP3, op, "VOP3")?
                } else {
                    let op = op & 0x7F;
                    if let Some(inst) = try_scaled_mfma(bytes, pc, op) {
                        return Ok(inst);
                    }
                    match tables::MAP_MAI[op as usize] {
                        NONE => lookup(&tables::MAP_VOP3P, op, "VOP3P")?,
                        i => i,
                    }
                }
            }
            0x36 => lookup(&tables::MAP_DS, (w0 >> 17) & 0xFF, "DS")?,
            0x37 => {
                let op = (w0 >> 18) & 0x7F;
                match (w0 >> 14) & 3 {
                    0 => lookup(&tables::MAP_FLAT, op, "FLAT")?,
                    1 => lookup(&tables::MAP_SCRATCH, op, "SCRATCH")?,
                    2 => lookup(&tables::MAP_GLOBAL, op, "GLOBAL")?,
                    _ => return Err(unknown("FLAT (segment 3)", op)),
                }
            }
            0x38 => lookup(&tables::MAP_MUBUF, (w0 >> 18) & 0x7F, "MUBUF")?,
            0x3A => lookup(&tables::MAP_MTBUF, (w0 >> 15) & 0xF, "MTBUF")?,
            _ => return Err(DecodeError::UnknownEncoding { pc, word: w0 }),
        }
    };
    decode_with(idx, bytes, pc)
}

/// `v_mfma_ld_scale_b32` followed by an f8f6f4 MFMA with `abid:1` is one 128-bit scaled MFMA,
/// as LLVM decodes it; otherwise the prefix stands alone.
fn try_scaled_mfma(bytes: &[u8], pc: u64, op: u32) -> Option<Inst> {
    if op != 0x2C || bytes.len() < 16 {
        return None;
    }
    let w2 = word(bytes, 2, pc).ok()?;
    if w2 >> 23 != 0x1A7 {
        return None;
    }
    match tables::MAP_MAI_SCALE[((w2 >> 16) & 0x7F) as usize] {
        NONE => None,
        idx => decode_with(idx, bytes, pc).ok(),
    }
}

/// Decoding state that modifier fields set and operand decoding reads.
#[derive(Default)]
struct Ctx {
    /// Roles moved to the accumulation registers by `acc` bits.
    acc: u32,
    s0: bool,
    s1: bool,
    sd: bool,
}

fn field_name(m: &ModDesc) -> &'static str {
    match m.meaning {
        Meaning::Ignored => "reserved",
        Meaning::Abs(_) => "abs",
        Meaning::Neg(_) | Meaning::NegLo(_) => "neg",
        Meaning::Sext(_) => "sext",
        Meaning::NegHi(_) => "neg_hi",
        Meaning::OpSel(_) => "op_sel",
        Meaning::OpSelHi(_) => "op_sel_hi",
        Meaning::Clamp => "clamp",
        Meaning::Omod => "omod",
        Meaning::Bitop3(_) => "bitop3",
        Meaning::Fi => "fi",
        Meaning::BoundCtrl => "bound_ctrl",
        Meaning::Cbsz => "cbsz",
        Meaning::Abid => "abid",
        Meaning::Blgp | Meaning::BlgpNeg => "blgp",
        Meaning::Acc(_) => "acc",
        Meaning::Glc => "glc",
        Meaning::Sc0 => "sc0",
        Meaning::Sc1 => "sc1",
        Meaning::Nt => "nt",
        Meaning::Lds => "lds",
        Meaning::Offen => "offen",
        Meaning::Idxen => "idxen",
        Meaning::Sve => "sve",
        Meaning::DstSel => "dst_sel",
        Meaning::DstUnused => "dst_unused",
        Meaning::Src0Sel => "src0_sel",
        Meaning::Src1Sel => "src1_sel",
        Meaning::S0 => "s0",
        Meaning::S1 => "s1",
        Meaning::Sd => "sd",
        Meaning::SmemImm => "imm",
        Meaning::SmemSoe => "soe",
        Meaning::Dfmt => "dfmt",
        Meaning::Nfmt => "nfmt",
    }
}

fn sel(v: u32) -> SdwaSel {
    // The tables only admit values 0..=6.
    SdwaSel::from_bits(v).unwrap_or_default()
}

fn apply(inst: &mut Inst, ctx: &mut Ctx, m: &ModDesc, v: u32) {
    let bit = |i: u8| ((v & 1) << i) as u8;
    match m.meaning {
        Meaning::Ignored => {}
        Meaning::Abs(i) => inst.mods.abs |= bit(i),
        Meaning::Neg(i) | Meaning::NegLo(i) => inst.mods.neg |= bit(i),
        Meaning::Sext(i) => inst.mods.sext |= bit(i),
        Meaning::NegHi(i) => inst.mods.neg_hi |= bit(i),
        Meaning::OpSel(i) => inst.mods.op_sel |= bit(i),
        Meaning::OpSelHi(i) => inst.mods.op_sel_hi |= bit(i),
        Meaning::Clamp => inst.mods.clamp = v != 0,
        Meaning::Omod => inst.mods.omod = v as u8,
        Meaning::Bitop3(shift) => inst.mods.bitop3 |= (v << shift) as u8,
        Meaning::Fi => inst.mods.fi = v != 0,
        Meaning::BoundCtrl => {
            if inst.encoding.is_dpp() {
                inst.dpp.bound_ctrl = v != 0;
            } else {
                inst.mods.bound_ctrl = v != 0;
            }
        }
        Meaning::Cbsz => inst.mfma.cbsz = v as u8,
        Meaning::Abid => inst.mfma.abid = v as u8,
        Meaning::Blgp | Meaning::BlgpNeg => inst.mfma.blgp = v as u8,
        Meaning::Acc(roles) => {
            if v != 0 {
                ctx.acc |= roles;
                if roles & (1 << Role::Vdst as u32) != 0
                    && matches!(inst.encoding, Encoding::Mai | Encoding::MaiScaled)
                {
                    inst.mfma.acc_cd = true;
                }
            }
        }
        Meaning::Glc => inst.mem.glc = v != 0,
        Meaning::Sc0 => inst.mem.sc0 = v != 0,
        Meaning::Sc1 => inst.mem.sc1 = v != 0,
        Meaning::Nt => inst.mem.nt = v != 0,
        Meaning::Lds => inst.mem.lds = v != 0,
        Meaning::Offen => inst.mem.offen = v != 0,
        Meaning::Idxen => inst.mem.idxen = v != 0,
        Meaning::Sve => inst.mem.sve = v != 0,
        Meaning::DstSel => inst.sdwa.dst_sel = sel(v),
        Meaning::DstUnused => {
            inst.sdwa.dst_unused = match v {
                1 => DstUnused::Sext,
                2 => DstUnused::Preserve,
                _ => DstUnused::Pad,
            }
        }
        Meaning::Src0Sel => inst.sdwa.src0_sel = sel(v),
        Meaning::Src1Sel => inst.sdwa.src1_sel = sel(v),
        Meaning::S0 => ctx.s0 = v != 0,
        Meaning::S1 => ctx.s1 = v != 0,
        Meaning::Sd => ctx.sd = v != 0,
        Meaning::SmemImm => inst.mem.smem_imm = v != 0,
        Meaning::SmemSoe => inst.mem.smem_soe = v != 0,
        Meaning::Dfmt => inst.mem.dfmt = v as u8,
        Meaning::Nfmt => inst.mem.nfmt = v as u8,
    }
}

fn sext(v: u32, bits: u32) -> i32 {
    ((v << (32 - bits)) as i32) >> (32 - bits)
}

/// Decode `bytes` as table entry `idx`.
fn decode_with(idx: u16, bytes: &[u8], pc: u64) -> Result<Inst, DecodeError> {
    let mut d: &'static OpDesc = &DESCS[idx as usize];
    let mut idx = idx;
    let n = d.dwords as usize;
    let mut w = [0u32; 5];
    for (i, slot) in w.iter_mut().enumerate().take(n) {
        *slot = word(bytes, i, pc)?;
    }
    let mut inst = Inst {
        op: d.opcode,
        encoding: d.encoding,
        size: (n * 4) as u8,
        operands: [Operand::None; ROLE_COUNT],
        mods: Mods::default(),
        sdwa: Sdwa::default(),
        dpp: Dpp::default(),
        mfma: Mfma::default(),
        mem: MemFlags::default(),
        branch_target: None,
        desc: idx,
    };
    let mut ctx = Ctx::default();
    apply_mods(&mut inst, &mut ctx, d, &w, n, pc)?;
    // Returning atomics and loads to LDS are their own instruction forms in LLVM, with their own
    // operands and field rules.
    let alt = if inst.mem.sc0 && d.alt_sc0 != NONE {
        d.alt_sc0
    } else if inst.mem.lds && d.alt_lds != NONE {
        d.alt_lds
    } else {
        NONE
    };
    if alt != NONE {
        idx = alt;
        d = &DESCS[idx as usize];
        inst.desc = idx;
        inst.op = d.opcode;
        inst.mods = Mods::default();
        inst.mem = MemFlags::default();
        ctx = Ctx::default();
        apply_mods(&mut inst, &mut ctx, d, &w, n, pc)?;
    }
    fixed_fields(&mut inst, &w);

    let needs_literal = d.operands.iter().any(|o| match o.enc {
        Enc::Literal | Enc::LiteralImm32 => true,
        Enc::Src9 | Enc::Ssrc8 => field(&w, o.word, o.lo, o.bits) == 255,
        _ => false,
    });
    if needs_literal {
        w[n] = word(bytes, n, pc)?;
        inst.size += 4;
    }
    for o in d.operands {
        let op = decode_operand(&inst, d, o, &w, &ctx, pc)?;
        inst.operands[o.role as usize] = op;
    }
    if let Some(imm) = d
        .operands
        .iter()
        .find(|o| o.enc == Enc::Imm(ImmKind::Branch))
    {
        let simm = field(&w, imm.word, imm.lo, imm.bits) as u16 as i16 as i64;
        let next = pc.wrapping_add(inst.size as u64);
        inst.branch_target = Some(next.wrapping_add((simm * 4) as u64));
    }
    Ok(inst)
}

/// Check every modifier field of `d` and record what it says in `inst`/`ctx`.
fn apply_mods(
    inst: &mut Inst,
    ctx: &mut Ctx,
    d: &'static OpDesc,
    w: &[u32; 5],
    n: usize,
    pc: u64,
) -> Result<(), DecodeError> {
    let acc = d
        .mods
        .iter()
        .any(|m| matches!(m.meaning, Meaning::Acc(_)) && field(w, m.word, m.lo, m.bits) != 0);
    for m in d.mods {
        let v = field(w, m.word, m.lo, m.bits);
        let valid = if acc { m.valid_acc } else { m.valid };
        let ok = if m.bits <= 4 {
            (valid >> v) & 1 == 1
        } else {
            valid == 0xFFFF || v == 0
        };
        if !ok {
            return Err(DecodeError::InvalidField {
                pc,
                mnemonic: d.mnemonic,
                field: field_name(m),
                dword: m.word,
                lo: m.lo,
                value: v,
                words: w[..n].to_vec(),
            });
        }
        apply(inst, ctx, m, v);
    }
    Ok(())
}

/// Fields every instruction of a family has at fixed positions.
fn fixed_fields(inst: &mut Inst, w: &[u32; 5]) {
    match inst.encoding {
        Encoding::Ds => {
            inst.mem.offset0 = (w[0] & 0xFF) as u8;
            inst.mem.offset1 = ((w[0] >> 8) & 0xFF) as u8;
            inst.mem.offset = (w[0] & 0xFFFF) as i32;
        }
        Encoding::Mubuf | Encoding::Mtbuf => inst.mem.offset = (w[0] & 0xFFF) as i32,
        Encoding::Flat => inst.mem.offset = (w[0] & 0x1FFF) as i32,
        Encoding::Global | Encoding::Scratch => inst.mem.offset = sext(w[0] & 0x1FFF, 13),
        Encoding::Smem => inst.mem.offset = sext(w[1] & 0x1F_FFFF, 21),
        Encoding::Vop1Dpp | Encoding::Vop2Dpp => {
            inst.dpp.ctrl = ((w[1] >> 8) & 0x1FF) as u16;
            inst.dpp.bank_mask = ((w[1] >> 24) & 0xF) as u8;
            inst.dpp.row_mask = (w[1] >> 28) as u8;
        }
        _ => {}
    }
}

/// Whether scalar source code `code` is admitted by an operand's learned `allow` set.
fn scalar_allowed(code: u32, allowed: u16) -> bool {
    let kind = match code {
        0..=101 => allow::SGPR,
        102..=105 => allow::FLAT_XNACK,
        125 => allow::NULL,
        106 | 107 => allow::VCC,
        108..=123 => allow::TTMP,
        124 => allow::M0,
        126 | 127 => allow::EXEC,
        128..=208 => allow::INT,
        240..=248 => allow::FLT,
        230 | 231 | 235..=239 => allow::CONST,
        251..=253 => allow::SCC,
        254 => allow::LDS,
        255 => allow::LIT,
        _ => return false,
    };
    allowed & kind != 0
}

fn vector(file: File, reg: u32, count: u8, allowed: u16) -> Option<Operand> {
    // gfx90a and later need 64-bit and wider vector tuples to start at an even register; LLVM
    // does not check a few operands (recorded in the tables).
    let odd_ok = match file {
        File::V => allowed & allow::ODD_V != 0,
        File::A => allowed & allow::ODD_A != 0,
    };
    // Tuples may run past v255: LLVM's register file goes to v1023 (gfx1250), and it prints
    // them (the executor rejects such registers).
    if count >= 2 && !reg.is_multiple_of(2) && !odd_ok {
        return None;
    }
    if file == File::A && reg + count as u32 > 256 {
        // There are only 256 AGPRs.
        return None;
    }
    let reg = reg as u8;
    Some(match file {
        File::V => Operand::Vgpr { reg, count },
        File::A => Operand::Agpr { reg, count },
    })
}

fn decode_operand(
    inst: &Inst,
    d: &OpDesc,
    o: &OperandDesc,
    w: &[u32; 5],
    ctx: &Ctx,
    pc: u64,
) -> Result<Operand, DecodeError> {
    let v = field(w, o.word, o.lo, o.bits);
    let bad = || DecodeError::InvalidOperand {
        pc,
        mnemonic: d.mnemonic,
        role: o.role,
        value: v,
    };
    let file = if ctx.acc & (1 << o.role as u32) != 0 {
        File::A
    } else {
        o.file
    };
    let mut count = o.width;
    match o.role {
        Role::Src0 if d.width_a[0] != 0 => count = d.width_a[inst.mfma.cbsz as usize & 7],
        Role::Src1 if d.width_b[0] != 0 => count = d.width_b[inst.mfma.blgp as usize & 7],
        _ => {}
    }
    let scalar = |code: u32| -> Result<Operand, DecodeError> {
        if !scalar_allowed(code, o.allow) {
            return Err(bad());
        }
        if code == 255 {
            return Ok(Operand::Literal(w[d.dwords as usize]));
        }
        Operand::scalar_src(code, count).ok_or_else(bad)
    };
    let op = match o.enc {
        Enc::Src9 => {
            if v >= 256 {
                if o.allow & allow::VGPR == 0 {
                    return Err(bad());
                }
                vector(file, v - 256, count, o.allow).ok_or_else(bad)?
            } else {
                scalar(v)?
            }
        }
        Enc::Ssrc8 => scalar(v)?,
        Enc::Sreg => {
            if o.allow != 0 && !scalar_allowed(v, o.allow) {
                return Err(bad());
            }
            // 8-bit destination fields (v_cmp*_e64) decode like sources above 127.
            if v < 128 {
                Operand::scalar_dst(v, count).ok_or_else(bad)?
            } else if v == 255 {
                return Err(bad());
            } else {
                Operand::scalar_src(v, count).ok_or_else(bad)?
            }
        }
        Enc::Vreg => {
            // MUBUF/MTBUF address VGPRs: one per enabled component of offen/idxen.
            if o.role == Role::Vaddr && matches!(inst.encoding, Encoding::Mubuf | Encoding::Mtbuf) {
                count = inst.mem.offen as u8 + inst.mem.idxen as u8;
                if count == 0 {
                    return Ok(Operand::None);
                }
            }
            if o.role == Role::Vaddr && inst.encoding == Encoding::Global {
                // With a scalar base the VGPR holds a 32-bit offset, else a 64-bit address.
                let saddr = (w[1] >> 16) & 0x7F;
                count = if saddr == 0x7F { 2 } else { 1 };
            }
            if o.role == Role::Vaddr && inst.encoding == Encoding::Scratch && !inst.mem.sve {
                return Ok(Operand::None);
            }
            vector(file, v, count, o.allow).ok_or_else(bad)?
        }
        Enc::Sbase | Enc::Srsrc => {
            let code = if o.enc == Enc::Sbase { v * 2 } else { v * 4 };
            if o.allow != 0 && !scalar_allowed(code, o.allow) {
                return Err(bad());
            }
            Operand::scalar_src(code, count).ok_or_else(bad)?
        }
        Enc::Saddr => {
            if v == 0x7F {
                Operand::None
            } else {
                if o.allow != 0 && !scalar_allowed(v, o.allow) {
                    return Err(bad());
                }
                Operand::scalar_src(v, count).ok_or_else(bad)?
            }
        }
        Enc::SdwaSrc => {
            let scalar_src = match o.role {
                Role::Src0 => ctx.s0,
                Role::Src1 => ctx.s1,
                _ => false,
            };
            if scalar_src {
                if v == 255 {
                    return Err(bad());
                }
                Operand::scalar_src(v, count).ok_or_else(bad)?
            } else {
                vector(file, v, count, o.allow).ok_or_else(bad)?
            }
        }
        Enc::SdwaSdst => {
            if ctx.sd {
                Operand::scalar_dst(v, 2).ok_or_else(bad)?
            } else {
                Operand::Special {
                    reg: SpecialReg::VccLo,
                    count: 2,
                }
            }
        }
        Enc::Imm(ImmKind::SmemOffset) => smem_offset(inst, w).ok_or_else(bad)?,
        Enc::Imm(_) => Operand::Imm(v),
        Enc::Literal | Enc::LiteralImm32 => Operand::Literal(w[d.dwords as usize]),
        Enc::Vcc => Operand::Special {
            reg: SpecialReg::VccLo,
            count: 2,
        },
    };
    Ok(op)
}

/// The SMEM offset operand: an SGPR from `soffset` (SOE), an immediate byte offset, or an SGPR
/// named by the offset field itself.
fn smem_offset(inst: &Inst, w: &[u32; 5]) -> Option<Operand> {
    if inst.mem.smem_soe {
        Operand::scalar_src(w[1] >> 25, 1)
    } else if inst.mem.smem_imm {
        Some(Operand::Imm(w[1] & 0x1F_FFFF))
    } else {
        Operand::scalar_src(w[1] & 0x7F, 1)
    }
}

/// Whether an array modifier kind is present in `d`.
pub(crate) fn has_array(d: &OpDesc, kind: ArrayKind) -> bool {
    d.arrays.iter().any(|a| a.kind == kind)
}

/// Decode a whole code region that starts at address `base`. Stops at the first error.
pub fn decode_all(code: &[u8], base: u64) -> Result<Vec<(u64, Inst)>, DecodeError> {
    let mut out = Vec::new();
    let mut off = 0usize;
    while off < code.len() {
        let pc = base.wrapping_add(off as u64);
        let inst = decode(&code[off..], pc)?;
        off += inst.size as usize;
        out.push((pc, inst));
    }
    Ok(out)
}

/// Decode a code region the way a disassembler walks it: an undecodable dword is reported and
/// skipped, and decoding resumes at the next dword.
pub fn decode_lenient(code: &[u8], base: u64) -> Vec<(u64, Result<Inst, DecodeError>)> {
    let mut out = Vec::new();
    let mut off = 0usize;
    while off < code.len() {
        let pc = base.wrapping_add(off as u64);
        let r = decode(&code[off..], pc);
        off += match &r {
            Ok(inst) => inst.size as usize,
            Err(_) => 4.min(code.len() - off),
        };
        out.push((pc, r));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::isa::{InlineFloat, Opcode, ValueType};
    use proptest::prelude::*;

    fn words(ws: &[u32]) -> Vec<u8> {
        ws.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    fn dec(ws: &[u32]) -> Inst {
        decode(&words(ws), 0x1000).unwrap_or_else(|e| panic!("{ws:08x?}: {e}"))
    }

    #[test]
    fn the_notes_scaled_mfma_example() {
        // gfx950-notes §4: v_mfma_scale_f32_16x16x128_f8f6f4 v[0:3], v[4:11], v[12:19],
        // v[20:23], v24, v25 = 00 00 ac d3 18 33 02 00 | 00 08 ad d3 04 19 52 04.
        let bytes = [
            0x00, 0x00, 0xac, 0xd3, 0x18, 0x33, 0x02, 0x00, 0x00, 0x08, 0xad, 0xd3, 0x04, 0x19,
            0x52, 0x04,
        ];
        let i = decode(&bytes, 0).unwrap();
        assert_eq!(i.op, Opcode::V_MFMA_SCALE_F32_16X16X128_F8F6F4);
        assert_eq!(i.encoding, Encoding::MaiScaled);
        assert_eq!(i.size, 16);
        assert_eq!(i.dst(), Operand::Vgpr { reg: 0, count: 4 });
        assert_eq!(i.src(0), Operand::Vgpr { reg: 4, count: 8 });
        assert_eq!(i.src(1), Operand::Vgpr { reg: 12, count: 8 });
        assert_eq!(i.src(2), Operand::Vgpr { reg: 20, count: 4 });
        assert_eq!(i.operand(Role::ScaleA), Operand::Vgpr { reg: 24, count: 1 });
        assert_eq!(i.operand(Role::ScaleB), Operand::Vgpr { reg: 25, count: 1 });
        // abid:1 only marks the fusion; LLVM (and we) do not report it.
        assert_eq!((i.mfma.cbsz, i.mfma.blgp, i.mfma.abid), (0, 0, 0));
        // op_sel_hi of both scales is 0 here (LLVM prints op_sel_hi:[0,0,0]).
        assert_eq!((i.mods.op_sel, i.mods.op_sel_hi), (0, 0));
        assert_eq!(
            i.to_string(),
            "v_mfma_scale_f32_16x16x128_f8f6f4 v[0:3], v[4:11], v[12:19], v[20:23], v24, v25 op_sel_hi:[0,0,0]"
        );
    }

    #[test]
    fn f8f6f4_operand_widths_follow_cbsz_and_blgp() {
        // cbsz=4 (FP4 A: 4 registers), blgp=2 (FP6 B: 6 registers).
        let i = dec(&[0xD3AC_0000, 0x0002_3318, 0xD3AD_0C00, 0x4452_1904]);
        assert_eq!((i.mfma.cbsz, i.mfma.blgp), (4, 2));
        assert_eq!(i.src(0).count(), 4);
        assert_eq!(i.src(1).count(), 6);
    }

    #[test]
    fn one_opcode_whatever_the_encoding() {
        // v_add_f32 as VOP2, VOP3, SDWA and DPP.
        let e32 = dec(&[0x0202_0501]);
        let e64 = dec(&[0xD101_0001, 0x0002_0501]);
        let sdwa = dec(&[0x0202_04F9, 0x0606_0601]);
        let dpp = dec(&[0x0202_04FA, 0xFF00_E401]);
        for i in [&e32, &e64, &sdwa, &dpp] {
            assert_eq!(i.op, Opcode::V_ADD_F32, "{i}");
            assert_eq!(i.dst(), Operand::Vgpr { reg: 1, count: 1 });
        }
        assert_eq!(
            [e32.encoding, e64.encoding, sdwa.encoding, dpp.encoding],
            [
                Encoding::Vop2,
                Encoding::Vop3,
                Encoding::Vop2Sdwa,
                Encoding::Vop2Dpp
            ]
        );
    }

    #[test]
    fn implicit_vcc_takes_the_e64_role() {
        // v_addc_co_u32_e32 v1, vcc, v2, v3, vcc: carry out and carry in in Sdst and Src2.
        let i = dec(&[0x3802_0702]);
        let vcc = Operand::Special {
            reg: SpecialReg::VccLo,
            count: 2,
        };
        assert_eq!(i.op, Opcode::V_ADDC_CO_U32);
        assert_eq!((i.sdst(), i.src(2)), (vcc, vcc));
        let e64 = dec(&[0xD11C_0601, 0x0012_0702]);
        assert_eq!(e64.sdst(), Operand::Sgpr { reg: 6, count: 2 });
        assert_eq!(e64.src(2), Operand::Sgpr { reg: 4, count: 2 });
        // v_cmp_eq_u32_e32 vcc, 0, v1: the mask goes where the e64 form's sdst field is.
        let c = dec(&[0x7D94_0280]);
        assert_eq!(c.dst(), vcc);
        assert_eq!(c.src(0), Operand::InlineInt(0));
    }

    #[test]
    fn constants_expand_by_operand_type() {
        // v_add_f16_e32 v1, 1.0, v2 and v_add_f64 v[2:3], 1.0, v[4:5].
        let h = dec(&[0x3E02_04F2]);
        assert_eq!(h.src(0), Operand::InlineFloat(InlineFloat::One));
        assert_eq!(h.value_type(Role::Src0), ValueType::F16);
        assert_eq!(
            h.src(0).constant_bits(h.value_type(Role::Src0)),
            Some(0x3C00)
        );
        let d = dec(&[0xD280_0002, 0x0002_08F2]);
        assert_eq!(d.value_type(Role::Src0), ValueType::F64);
        assert_eq!(
            d.src(0).constant_bits(ValueType::F64),
            Some(0x3FF0_0000_0000_0000)
        );
        // v_mov_b32_e32 v0, 0x3ff: a literal dword follows.
        let l = dec(&[0x7E00_02FF, 0x0000_03FF]);
        assert_eq!((l.src(0), l.size), (Operand::Literal(0x3FF), 8));
    }

    #[test]
    fn branch_targets_are_pc_relative_in_dwords() {
        // s_branch 60 at 0x1000: next instruction + 240 bytes.
        assert_eq!(dec(&[0xBF82_003C]).branch_target, Some(0x1000 + 4 + 240));
        // s_cbranch_scc1 -2 (0xFFFE): back to the previous instruction.
        assert_eq!(dec(&[0xBF85_FFFE]).branch_target, Some(0x1000 + 4 - 8));
        assert_eq!(dec(&[0xBF80_0000]).branch_target, None);
    }

    #[test]
    fn memory_fields() {
        // global_load_dwordx4 v[36:39], v[2:3], off offset:-4096
        let g = dec(&[0xDC5C_9000, 0x247F_0002]);
        assert_eq!(g.op, Opcode::GLOBAL_LOAD_DWORDX4);
        assert_eq!(g.mem.offset, -4096);
        assert_eq!(g.operand(Role::Vaddr), Operand::Vgpr { reg: 2, count: 2 });
        assert_eq!(g.operand(Role::Saddr), Operand::None);
        assert_eq!(
            g.to_string(),
            "global_load_dwordx4 v[36:39], v[2:3], off offset:-4096"
        );
        // buffer_load_dword v1, s[8:11], 0 offen lds: the LDS form has no data register.
        let b = dec(&[0xE051_1000, 0x8002_0001]);
        assert!(b.mem.lds && b.mem.offen);
        assert_eq!(b.operand(Role::Vdata), Operand::None);
        assert_eq!(b.operand(Role::Srsrc), Operand::Sgpr { reg: 8, count: 4 });
        assert_eq!(b.operand(Role::Soffset), Operand::InlineInt(0));
    }

    #[test]
    fn unknown_opcodes_name_format_field_and_word() {
        // VOP1 opcode 0x7F does not exist on gfx950.
        let e = decode(&words(&[0x7E00_FF01]), 0x40).unwrap_err();
        assert_eq!(
            e,
            DecodeError::UnknownOpcode {
                pc: 0x40,
                format: "VOP1",
                opcode: 0x7F,
                word: 0x7E00_FF01
            }
        );
        let msg = e.to_string();
        assert!(
            msg.contains("VOP1") && msg.contains("0x7f") && msg.contains("0x7e00ff01"),
            "{msg}"
        );
        // An encoding family gfx950 lacks (MIMG).
        assert!(matches!(
            decode(&words(&[0xF000_0000, 0]), 0),
            Err(DecodeError::UnknownEncoding {
                word: 0xF000_0000,
                ..
            })
        ));
        assert!(matches!(
            decode(&[0x01, 0x02], 0),
            Err(DecodeError::Truncated {
                need: 4,
                have: 2,
                ..
            })
        ));
        // A literal that runs past the end.
        assert!(matches!(
            decode(&words(&[0x7E00_02FF]), 0),
            Err(DecodeError::Truncated { need: 8, .. })
        ));
    }

    #[test]
    fn whole_kernels_decode_in_order() {
        let code = words(&[0xBF80_0000, 0x7E00_02FF, 0x0000_03FF, 0xBF81_0000]);
        let all = decode_all(&code, 0x100).unwrap();
        let pcs: Vec<u64> = all.iter().map(|(pc, _)| *pc).collect();
        assert_eq!(pcs, [0x100, 0x104, 0x10C]);
        assert_eq!(all[2].1.op, Opcode::S_ENDPGM);
        let lenient = decode_lenient(&words(&[0xFFFF_FFFF, 0xBF81_0000]), 0);
        assert!(lenient[0].1.is_err() && lenient[1].1.is_ok());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(20000))]

        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..24)) {
            if let Ok(inst) = decode(&bytes, 0x1234) {
                prop_assert!(inst.size as usize <= bytes.len());
                let _ = inst.to_string();
            }
            for (_, r) in decode_lenient(&bytes, 0) {
                if let Ok(inst) = r {
                    let _ = inst.to_string();
                }
            }
        }

        #[test]
        fn random_words_of_every_family_never_panic(
            hi in 0u32..64, rest in any::<u32>(), more in proptest::collection::vec(any::<u32>(), 4)
        ) {
            let mut ws = vec![hi << 26 | (rest & 0x03FF_FFFF)];
            ws.extend(more);
            if let Ok(inst) = decode(&words(&ws), 0) {
                let _ = inst.to_string();
                let _: Vec<_> = inst.operands().collect();
            }
        }
    }
}

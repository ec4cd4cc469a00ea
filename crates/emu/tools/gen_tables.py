#!/usr/bin/env python3
"""Generate crates/emu/src/isa/tables.rs: the gfx950 opcode tables, learned from LLVM itself.

Nothing here is typed in from a manual. For every encoding family (SOP1, VOP3, DS, ...) the script
enumerates the opcode field, builds probe encodings with distinct register numbers in every operand
field, and asks `llvm-objdump-22 -d --mcpu=gfx950` (see llvmprobe.py) how it prints them. From the
answers it learns, per opcode and encoding:
  * the mnemonic (and thus the encoding-independent `Opcode` variant),
  * which encoding fields are operands, in which printed order, their width in dwords and register file,
  * implicit operands printed as fixed text (`vcc`, `off`),
  * which register/constant/literal kinds each source field accepts and how its constants print
    (the classes of immfmt.py),
  * for every modifier field (abs, neg, clamp, omod, op_sel, cbsz, sc0, ...) which values are valid
    and whether LLVM prints them, and the order of the printed modifiers.

Per opcode it also emits what a timing model needs beyond the encoding class (`Opcode::timing`):
matrix passes from LLVM's gfx950 scheduling model (asked through llvm-mca-22), the bytes a DS lane
moves, the VALU rate, implicit SCC/VCC/EXEC reads and operand directions.

It also writes crates/emu/tests/data/all_forms.s (every learned form, for the encoding test).

Usage:  python3 crates/emu/tools/gen_tables.py            (rewrites tables.rs and all_forms.s)
        python3 crates/emu/tools/gen_tables.py --json F   (also dumps the learned database)
Needs llvm-mc-22, llvm-objdump-22 and llvm-mca-22 on PATH (override with LLVM_MC / LLVM_OBJDUMP /
LLVM_MCA). A run takes about two minutes; PROBE_CACHE=<file> memoises objdump's answers between
runs. The output is deterministic: regenerating with the same LLVM gives identical files.
"""
import itertools
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import immfmt  # noqa: E402
from llvmprobe import objdump_words  # noqa: E402

V = 256  # offset of v0 in a 9-bit source field
LIT = 0x12345678  # literal dword appended to probes that use 0xFF


# ----------------------------------------------------------------------------------------------
# Encoding families
# ----------------------------------------------------------------------------------------------
class F:
    """A bit field: dword index, low bit, width."""

    def __init__(self, w, lo, width):
        self.w, self.lo, self.width = w, lo, width

    def put(self, words, v):
        mask = ((1 << self.width) - 1) << self.lo
        words[self.w] = (words[self.w] & ~mask) | ((v << self.lo) & mask)


class Fam:
    """One encoding family.

    regs: role -> (field, probe value, file) where file is the register file LLVM prints for it
          ('src9', 'ssrc8', 'vgpr8', 'sdst7', 'sbase', 'srsrc', 'saddr', 'smem_soff').
    imms: role -> (field, base value, alternate value) for immediate fields that print as operands.
    mods: name -> (field, base value) modifier fields probed value by value.
    """

    def __init__(self, name, ndw, fixed, opf, ops, regs, imms=None, mods=None, zero=None,
                 tail_words=(), alt_mods=None, alt_imms=None):
        self.name, self.ndw, self.fixed, self.opf, self.ops = name, ndw, fixed, opf, list(ops)
        # Modifier settings to try when looking for a decodable base encoding.
        self.alt_mods = alt_mods or [{}]
        # Immediate settings to try likewise (operand-less SOPP needs a zero immediate).
        self.alt_imms = alt_imms or [{}]
        self.regs, self.imms, self.mods = regs, imms or {}, mods or {}
        self.zero = zero or {}
        self.tail_words = list(tail_words)

    def encode(self, op, regvals, immvals=None, modvals=None, extra=()):
        words = [0] * self.ndw
        for (w, lo, width, v) in self.fixed:
            F(w, lo, width).put(words, v)
        F(*self.opf).put(words, op)
        # Modifiers first: a VOP3B carry-out register overlays VOP3A's abs/op_sel bits.
        for name, (f, base) in self.mods.items():
            f.put(words, (modvals or {}).get(name, base))
        for role, v in regvals.items():
            if v:
                self.regs[role][0].put(words, v)
        for role, (f, base, _alt) in self.imms.items():
            f.put(words, (immvals or {}).get(role, base))
        return words + list(extra) + self.tail_words


SRC0_9, SRC1_9, SRC2_9 = F(1, 0, 9), F(1, 9, 9), F(1, 18, 9)


def vop3_mods():
    return {"clamp": (F(0, 15, 1), 0), "abs0": (F(0, 8, 1), 0), "abs1": (F(0, 9, 1), 0),
            "abs2": (F(0, 10, 1), 0), "opsel0": (F(0, 11, 1), 0), "opsel1": (F(0, 12, 1), 0),
            "opsel2": (F(0, 13, 1), 0), "opsel3": (F(0, 14, 1), 0), "omod": (F(1, 27, 2), 0),
            "neg0": (F(1, 29, 1), 0), "neg1": (F(1, 30, 1), 0), "neg2": (F(1, 31, 1), 0)}


def vop3p_mods():
    return {"clamp": (F(0, 15, 1), 0), "neg_hi0": (F(0, 8, 1), 0), "neg_hi1": (F(0, 9, 1), 0),
            "neg_hi2": (F(0, 10, 1), 0), "opsel0": (F(0, 11, 1), 0), "opsel1": (F(0, 12, 1), 0),
            "opsel2": (F(0, 13, 1), 0), "opsel_hi2": (F(0, 14, 1), 1),
            "opsel_hi0": (F(1, 27, 1), 1), "opsel_hi1": (F(1, 28, 1), 1),
            "neg0": (F(1, 29, 1), 0), "neg1": (F(1, 30, 1), 0), "neg2": (F(1, 31, 1), 0)}


def mai_mods():
    return {"cbsz": (F(0, 8, 3), 0), "abid": (F(0, 11, 4), 0), "acc_cd": (F(0, 15, 1), 0),
            "acc0": (F(1, 27, 1), 0), "acc1": (F(1, 28, 1), 0), "blgp": (F(1, 29, 3), 0)}


def sdwa_mods(vopc, vop1=False):
    m = {"clamp": (F(1, 13, 1), 0), "src0_sel": (F(1, 16, 3), 6), "src0_sext": (F(1, 19, 1), 0),
         "src0_neg": (F(1, 20, 1), 0), "src0_abs": (F(1, 21, 1), 0), "s0": (F(1, 23, 1), 0),
         "src1_sel": (F(1, 24, 3), 0 if vop1 else 6), "src1_sext": (F(1, 27, 1), 0),
         "src1_neg": (F(1, 28, 1), 0), "src1_abs": (F(1, 29, 1), 0), "s1": (F(1, 31, 1), 0)}
    if vopc:
        m["sd"] = (F(1, 15, 1), 0)
    else:
        m.update({"dst_sel": (F(1, 8, 3), 6), "dst_unused": (F(1, 11, 2), 0),
                  "omod": (F(1, 14, 2), 0)})
    return m


def dpp_mods():
    return {"bound_ctrl": (F(1, 19, 1), 0), "src0_neg": (F(1, 20, 1), 0),
            "src0_abs": (F(1, 21, 1), 0), "src1_neg": (F(1, 22, 1), 0),
            "src1_abs": (F(1, 23, 1), 0)}


def families():
    fams = []
    sregs3 = {"sdst": (F(0, 16, 7), 20, "sdst7"), "ssrc0": (F(0, 0, 8), 40, "ssrc8"),
              "ssrc1": (F(0, 8, 8), 60, "ssrc8")}
    fams.append(Fam("SOP2", 1, [(0, 30, 2, 2)], (0, 23, 7), range(0x60), sregs3,
                    tail_words=[LIT]))
    fams.append(Fam("SOPK", 1, [(0, 28, 4, 0xB)], (0, 23, 5), range(0x1D),
                    {"sdst": (F(0, 16, 7), 20, "sdst7")},
                    imms={"simm16": (F(0, 0, 16), 0x1234, 0x0F70)}, tail_words=[LIT]))
    fams.append(Fam("SOP1", 1, [(0, 23, 9, 0x17D)], (0, 8, 8), range(256),
                    {"sdst": sregs3["sdst"], "ssrc0": sregs3["ssrc0"]}, tail_words=[LIT]))
    fams.append(Fam("SOPC", 1, [(0, 23, 9, 0x17E)], (0, 16, 7), range(128),
                    {"ssrc0": sregs3["ssrc0"], "ssrc1": sregs3["ssrc1"]}, tail_words=[LIT]))
    fams.append(Fam("SOPP", 1, [(0, 23, 9, 0x17F)], (0, 16, 7), range(128), {},
                    imms={"simm16": (F(0, 0, 16), 0x1234, 0x0F70)}, tail_words=[LIT],
                    alt_imms=[{}, {"simm16": 0}]))
    fams.append(Fam("SMEM", 2, [(0, 26, 6, 0x30)], (0, 18, 8), range(256),
                    {"sdata": (F(0, 6, 7), 20, "sdst7"), "sbase": (F(0, 0, 6), 20, "sbase")},
                    imms={"offset": (F(1, 0, 21), 0x10, 0x24)},
                    mods={"imm": (F(0, 17, 1), 1), "glc": (F(0, 16, 1), 0),
                          "nv": (F(0, 15, 1), 0), "soe": (F(0, 14, 1), 0),
                          "soffset": (F(1, 25, 7), 0)},
                    alt_mods=[{}, {"imm": 0}]))
    vregs = {"vdst": (F(0, 17, 8), 64, "vgpr8"), "src0": (F(0, 0, 9), V + 128, "src9"),
             "src1": (F(0, 9, 8), 160, "vgpr8")}
    fams.append(Fam("VOP2", 1, [(0, 31, 1, 0)], (0, 25, 6), range(0x3E), vregs,
                    tail_words=[LIT]))
    fams.append(Fam("VOP1", 1, [(0, 25, 7, 0x3F)], (0, 9, 8), range(256),
                    {"vdst": vregs["vdst"], "src0": vregs["src0"]}, tail_words=[LIT]))
    fams.append(Fam("VOPC", 1, [(0, 25, 7, 0x3E)], (0, 17, 8), range(256),
                    {"src0": vregs["src0"], "src1": vregs["src1"]}, tail_words=[LIT]))
    v3regs = {"vdst": (F(0, 0, 8), 64, "vgpr8"), "sdst": (F(0, 8, 7), 48, "sdst7"),
              "src0": (SRC0_9, [V + 128, 8], "src9"), "src1": (SRC1_9, [V + 160, 12], "src9"),
              "src2": (SRC2_9, [V + 192, 16], "src9")}
    fams.append(Fam("VOP3", 2, [(0, 26, 6, 0x34)], (0, 16, 10), range(0x380), v3regs,
                    mods=vop3_mods(), tail_words=[LIT]))
    v3pregs = {k: v for k, v in v3regs.items() if k != "sdst"}
    fams.append(Fam("VOP3P", 2, [(0, 23, 9, 0x1A7)], (0, 16, 7), range(128), v3pregs,
                    mods=vop3p_mods(), tail_words=[LIT]))
    # Matrix ops share VOP3P's opcode space; their modifier fields sit where VOP3P keeps others.
    fams.append(Fam("MAI", 2, [(0, 23, 9, 0x1A7)], (0, 16, 7), range(128), v3pregs,
                    mods=mai_mods(), tail_words=[LIT]))
    sdwa_src1 = {"src1": (F(0, 9, 8), 160, "sdwa_src")}
    dpp_src1 = {"src1": (F(0, 9, 8), 160, "vgpr8")}
    sdwa_common = {"src0": (F(1, 0, 8), 128, "sdwa_src")}
    fams.append(Fam("VOP2_SDWA", 2, [(0, 31, 1, 0), (0, 0, 9, 0xF9)], (0, 25, 6), range(0x3E),
                    dict(vdst=vregs["vdst"], **sdwa_common, **sdwa_src1), mods=sdwa_mods(False)))
    fams.append(Fam("VOP1_SDWA", 2, [(0, 25, 7, 0x3F), (0, 0, 9, 0xF9)], (0, 9, 8), range(256),
                    dict(vdst=vregs["vdst"], **sdwa_common), mods=sdwa_mods(False, True)))
    fams.append(Fam("VOPC_SDWA", 2, [(0, 25, 7, 0x3E), (0, 0, 9, 0xF9)], (0, 17, 8), range(256),
                    dict(sdst=(F(1, 8, 7), 48, "sdst7"), **sdwa_common, **sdwa_src1),
                    mods=sdwa_mods(True)))
    dpp_fixed = [(1, 8, 9, 0x111), (1, 24, 4, 0xF), (1, 28, 4, 0xF)]
    dpp_src0 = {"src0": (F(1, 0, 8), 128, "vgpr8")}
    fams.append(Fam("VOP2_DPP", 2, [(0, 31, 1, 0), (0, 0, 9, 0xFA)] + dpp_fixed, (0, 25, 6),
                    range(0x3E), dict(vdst=vregs["vdst"], **dpp_src0, **dpp_src1),
                    mods=dpp_mods()))
    fams.append(Fam("VOP1_DPP", 2, [(0, 25, 7, 0x3F), (0, 0, 9, 0xFA)] + dpp_fixed, (0, 9, 8),
                    range(256), dict(vdst=vregs["vdst"], **dpp_src0), mods=dpp_mods()))
    fams.append(Fam("VOPC_DPP", 2, [(0, 25, 7, 0x3E), (0, 0, 9, 0xFA)] + dpp_fixed, (0, 17, 8),
                    range(256), dict(**dpp_src0, **dpp_src1), mods=dpp_mods()))
    fams.append(Fam("DS", 2, [(0, 26, 6, 0x36)], (0, 17, 8), range(256),
                    {"vdst": (F(1, 24, 8), 64, "vgpr8"), "addr": (F(1, 0, 8), 128, "vgpr8"),
                     "data0": (F(1, 8, 8), 160, "vgpr8"), "data1": (F(1, 16, 8), 192, "vgpr8")},
                    imms={"offset0": (F(0, 0, 8), 0x1, 0x5), "offset1": (F(0, 8, 8), 0x2, 0x6)},
                    mods={"gds": (F(0, 16, 1), 0), "acc": (F(0, 25, 1), 0)}))
    bufregs = {"vdata": (F(1, 8, 8), 64, "vgpr8"), "vaddr": (F(1, 0, 8), 128, "vgpr8"),
               "srsrc": (F(1, 16, 5), 20, "srsrc"), "soffset": (F(1, 24, 8), 40, "ssrc8")}
    fams.append(Fam("MUBUF", 2, [(0, 26, 6, 0x38)], (0, 18, 7), range(128), bufregs,
                    imms={"offset": (F(0, 0, 12), 0x10, 0x24)},
                    mods={"offen": (F(0, 12, 1), 1), "idxen": (F(0, 13, 1), 0),
                          "sc0": (F(0, 14, 1), 0), "sc1": (F(0, 15, 1), 0),
                          "lds": (F(0, 16, 1), 0), "nt": (F(0, 17, 1), 0),
                          "acc": (F(1, 23, 1), 0)},
                    alt_mods=[{}, {"offen": 0}]))
    fams.append(Fam("MTBUF", 2, [(0, 26, 6, 0x3A)], (0, 15, 4), range(16), bufregs,
                    imms={"offset": (F(0, 0, 12), 0x10, 0x24)},
                    mods={"offen": (F(0, 12, 1), 1), "idxen": (F(0, 13, 1), 0),
                          "sc0": (F(0, 14, 1), 0), "dfmt": (F(0, 19, 4), 1),
                          "nfmt": (F(0, 23, 3), 0), "sc1": (F(1, 21, 1), 0),
                          "nt": (F(1, 22, 1), 0), "acc": (F(1, 23, 1), 0)}))
    for seg, name in [(0, "FLAT"), (1, "SCRATCH"), (2, "GLOBAL")]:
        regs = {"vdst": (F(1, 24, 8), 64, "vgpr8"), "vaddr": (F(1, 0, 8), 128, "vgpr8"),
                "vdata": (F(1, 8, 8), 160, "vgpr8"), "saddr": (F(1, 16, 7), 20, "saddr")}
        mods = {"sc0": (F(0, 16, 1), 0), "nt": (F(0, 17, 1), 0), "sc1": (F(0, 25, 1), 0),
                "acc": (F(1, 23, 1), 0), "lds": (F(0, 13, 1), 0)}
        if seg == 1:
            # Scratch uses bit 13 to say whether vaddr is present (SVE); probe with it set.
            mods["lds"] = (F(0, 13, 1), 1)
        zero = {"saddr": 0 if seg == 0 else 0x7F}
        fams.append(Fam(name, 2, [(0, 26, 6, 0x37), (0, 14, 2, seg)], (0, 18, 7), range(128),
                        regs, imms={"offset": (F(0, 0, 13), 0x10, 0x24)}, mods=mods, zero=zero))
    # The scaled MFMAs: a v_mfma_ld_scale_b32 (VOP3P op 0x2C) prefix carrying the two scale
    # sources, fused with the following f8f6f4 MFMA whose abid field is 1.
    scale_mods = {"opsel0": (F(0, 11, 1), 0), "opsel1": (F(0, 12, 1), 0), "opsel2": (F(0, 13, 1), 0),
                  "opsel_hi2": (F(0, 14, 1), 0), "clamp": (F(0, 15, 1), 0),
                  "neg_hi0": (F(0, 8, 1), 0), "neg_hi1": (F(0, 9, 1), 0), "neg_hi2": (F(0, 10, 1), 0),
                  "opsel_hi0": (F(1, 27, 1), 0), "opsel_hi1": (F(1, 28, 1), 0),
                  "neg0": (F(1, 29, 1), 0), "neg1": (F(1, 30, 1), 0), "neg2": (F(1, 31, 1), 0),
                  "ld_vdst": (F(0, 0, 8), 0), "ld_src2": (F(1, 18, 9), 0),
                  "cbsz": (F(2, 8, 3), 0), "abid": (F(2, 11, 4), 1), "acc_cd": (F(2, 15, 1), 0),
                  "acc0": (F(3, 27, 1), 0), "acc1": (F(3, 28, 1), 0), "blgp": (F(3, 29, 3), 0)}
    fams.append(Fam("MAI_SCALE", 4, [(0, 23, 9, 0x1A7), (0, 16, 7, 0x2C), (2, 23, 9, 0x1A7)],
                    (2, 16, 7), [0x2D, 0x2E],
                    {"vdst": (F(2, 0, 8), 64, "vgpr8"), "src0": (F(3, 0, 9), V + 128, "src9"),
                     "src1": (F(3, 9, 9), V + 160, "src9"), "src2": (F(3, 18, 9), V + 192, "src9"),
                     "scale0": (F(1, 0, 9), [V + 224, 8], "src9"),
                     "scale1": (F(1, 9, 9), [V + 232, 12], "src9")},
                    mods=scale_mods, tail_words=[LIT]))
    return fams


# ----------------------------------------------------------------------------------------------
# Parsing objdump text
# ----------------------------------------------------------------------------------------------
def split_top(s, sep):
    """Split s at `sep` outside brackets/parentheses."""
    out, depth, cur, i = [], 0, "", 0
    while i < len(s):
        c = s[i]
        if c in "([":
            depth += 1
        elif c in ")]":
            depth -= 1
        if depth == 0 and s.startswith(sep, i):
            out.append(cur)
            cur = ""
            i += len(sep)
            continue
        cur += c
        i += 1
    out.append(cur)
    return out


TRAIL_NAMES = ["offset0", "offset1", "offset", "gds", "offen", "idxen", "sc0", "sc1", "nt", "lds",
               "glc", "clamp", "mul", "div", "op_sel_hi", "op_sel", "neg_lo", "neg_hi", "neg",
               "cbsz", "abid", "blgp", "dst_sel", "dst_unused", "src0_sel", "src1_sel",
               "quad_perm", "row_shl", "row_shr", "row_ror", "wave_shl", "wave_rol", "wave_shr",
               "wave_ror", "row_mirror", "row_half_mirror", "row_bcast", "row_newbcast",
               "row_mask", "bank_mask", "bound_ctrl", "format", "bitop3", "fi"]


def is_trail(tok):
    name = re.split(r"[:\[]", tok)[0]
    return name in TRAIL_NAMES or tok.startswith("/*")


def parse(text):
    """-> (mnemonic, [operand tokens], [trailing modifier tokens])."""
    if text is None:
        return None
    text = re.sub(r"/\*[^*]*\*/", lambda m: " " + m.group(0).replace(" ", "\x00") + " ", text)
    parts = text.split(None, 1)
    mnem = parts[0]
    if len(parts) == 1:
        return mnem, [], []
    rest = parts[1].strip()
    if mnem == "s_waitcnt":
        return mnem, [rest], []
    ops = [o.strip() for o in split_top(rest, ", ")]
    last = split_top(ops[-1], " ")
    last = [x for x in last if x]
    trail = []
    # Operands end where the first trailing modifier starts.
    k = 0
    while k < len(last) and not is_trail(last[k]):
        k += 1
    if k == 0:
        trail = last
        ops = ops[:-1]
    else:
        ops[-1] = " ".join(last[:k])
        trail = last[k:]
    trail = [t.replace("\x00", " ") for t in trail]
    return mnem, ops, trail


REG_RE = re.compile(r"^(v|s|a|ttmp)(\d+)$|^(v|s|a|ttmp)\[(\d+):(\d+)\]$")


def strip_srcmods(tok):
    """Remove -, |..|, neg(..), sext(..) around an operand; returns (core, set of mods)."""
    mods = set()
    changed = True
    while changed:
        changed = False
        for pre, post, name in [("neg(", ")", "neg"), ("sext(", ")", "sext"), ("-", "", "neg"),
                                ("|", "|", "abs")]:
            if tok.startswith(pre) and tok.endswith(post) and len(tok) > len(pre) + len(post):
                tok = tok[len(pre):len(tok) - len(post)] if post else tok[len(pre):]
                mods.add(name)
                changed = True
    return tok, mods


def reg_of(tok):
    """'v[4:7]' -> ('v', 4, 4); None when tok is not a register."""
    m = REG_RE.match(tok)
    if not m:
        return None
    if m.group(1):
        return m.group(1), int(m.group(2)), 1
    lo, hi = int(m.group(4)), int(m.group(5))
    return m.group(3), lo, hi - lo + 1


def clean(text):
    return text is not None and "Invalid" not in text and "/*" not in text.replace(
        "/* row_xmask", "").replace("/* DP ALU", "").replace("/* 64 bit dpp", "")


# ----------------------------------------------------------------------------------------------
# Analysis
# ----------------------------------------------------------------------------------------------
def run(probes):
    return objdump_words(probes)


def reg_number(fam, role, v):
    """The register number a probe value of `role` prints as."""
    f = fam.regs[role][2]
    if f == "src9":
        return v - V if v >= V else v
    if f == "sbase":
        return v * 2
    if f == "srsrc":
        return v * 4
    return v


def analyze_family(fam, log):
    """Find, for every opcode, the probe that LLVM decodes with the most operand fields in use.

    Unused fields must often be zero (DS) and some sources accept only SGPRs (v_readlane), so every
    combination of {zero, VGPR probe, SGPR probe} per field is tried."""
    roles = list(fam.regs)
    options = []
    for r in roles:
        probe = fam.regs[r][1]
        alts = probe if isinstance(probe, list) else [probe]
        options.append([fam.zero.get(r, 0)] + alts)
    probes, keys = [], []
    alts = [(am, im) for im in fam.alt_imms for am in fam.alt_mods]
    for op in fam.ops:
        for ai, (am, im) in enumerate(alts):
            for combo in itertools.product(*options):
                regvals = dict(zip(roles, combo))
                probes.append(fam.encode(op, regvals, immvals=im, modvals=am))
                keys.append((op, regvals, ai))
    res = run(probes)
    best = {}
    for (op, regvals, ai), (text, n) in zip(keys, res):
        if not clean(text):
            continue
        _, ops, _ = parse(text)
        numbers = {reg_number(fam, r, v): r for r, v in regvals.items()
                   if v and v != fam.zero.get(r, 0)}
        matched = set()
        for tok in ops:
            core, _ = strip_srcmods(tok)
            rg = reg_of(core)
            if rg and rg[1] in numbers:
                matched.add(numbers[rg[1]])
        prefer = sum(1 for r in matched if regvals[r] == options[roles.index(r)][1])
        nonzero = sum(1 for r, v in regvals.items() if v != fam.zero.get(r, 0))
        score = (len(matched), -ai, prefer, -nonzero)
        if op not in best or score > best[op][0]:
            best[op] = (score, regvals, text, n, ai)
    entries = {}
    for op, (_score, regvals, text, n, ai) in sorted(best.items()):
        entries[op] = {"op": op, "base_regs": regvals, "text": text, "ndw": n}
        am, im = alts[ai]
        if am:
            entries[op]["probe_mods"] = dict(am)
        if im:
            entries[op]["probe_imms"] = dict(im)
    log("%s: %d opcodes" % (fam.name, len(entries)))
    return entries


def template_of(fam, entry, text=None, regvals=None):
    """Map the printed operands of an entry's base text to fields."""
    text = text or entry["text"]
    regvals = regvals or entry["base_regs"]
    mnem, ops, trail = parse(text)
    numbers = {reg_number(fam, r, v): r for r, v in regvals.items()
               if v and v != fam.zero.get(r, 0)}
    toks = []
    for tok in ops:
        core, smods = strip_srcmods(tok)
        rg = reg_of(core)
        if rg and rg[1] in numbers:
            toks.append({"role": numbers[rg[1]], "file": rg[0], "width": rg[2],
                         "smods": sorted(smods)})
        else:
            toks.append({"fixed": tok})
    return mnem, toks, trail


def probe_variants(fam, entries, variants):
    """variants: list of (label, fn(entry) -> probe words or None). Returns {(op,label): (text,n)}"""
    probes, keys = [], []
    for op, e in entries.items():
        for label, fn in variants:
            w = fn(e)
            if w is not None:
                probes.append(w)
                keys.append((op, label))
    return dict(zip(keys, run(probes)))


def learn_imm_tokens(fam, entries):
    """Find which printed operand is which immediate field (simm16, K literal, ...)."""
    if not fam.imms:
        return
    var = []
    for role, (_f, _base, alt) in fam.imms.items():
        var.append((role, lambda e, role=role, alt=alt: fam.encode(
            e["op"], e["base_regs"], {role: alt}, modvals=e.get("probe_mods"))))
    got = probe_variants(fam, entries, var)
    for op, e in entries.items():
        _, toks, trail = template_of(fam, e)
        for role in fam.imms:
            t2 = got.get((op, role))
            if not t2 or not t2[0]:
                continue
            p2 = parse(t2[0])
            if p2 is None or len(p2[1]) != len(toks):
                continue
            for i, tok in enumerate(p2[1]):
                if "fixed" in toks[i] and toks[i]["fixed"] != tok:
                    toks[i] = {"role": role, "file": "imm", "width": 1}
        e["toks"] = toks


def learn_literal_token(fam, e, toks):
    for t in toks:
        if t.get("fixed") == "0x%x" % LIT:
            t.pop("fixed")
            t.update({"role": "K", "file": "lit", "width": 1})


def learn_literal_kinds(fam, entries):
    """A mandatory literal (fmamk's K, s_setreg_imm32's value) prints either always in hex or
    like a 32-bit immediate (small integers in decimal, float constants by name)."""
    vals = [3, 0x3F800000, 0xFFFFFFFF, 0x41]
    jobs = [(op, i) for op, e in entries.items() for i, t in enumerate(e["toks"])
            if t.get("role") == "K"]
    probes = []
    for op, i in jobs:
        for v in vals:
            w = fam.encode(op, entries[op]["base_regs"], modvals=entries[op].get("probe_mods"))
            probes.append(w[:fam.ndw] + [v])
    res = run(probes)
    for j, (op, i) in enumerate(jobs):
        texts = [r[0] and parse(r[0])[1][i] for r in res[j * len(vals):(j + 1) * len(vals)]]
        hexes = ["0x%x" % v for v in vals]
        imm32 = ["3", "1.0", "-1", "0x41"]
        t = entries[op]["toks"][i]
        if texts == hexes:
            t["lit_kind"] = "hex"
        elif texts == imm32:
            t["lit_kind"] = "imm32"
        else:
            raise SystemExit("unknown literal printing %s %#x: %s" % (fam.name, op, texts))


KIND_VALUES = [("S", 8), ("VCC", 106), ("M0", 124), ("EXEC", 126), ("INT", 0xC1),
               ("FLT", 0xF2), ("LIT", 0xFF), ("CONST", 0xEB), ("SCC", 0xFD),
               ("LDS", 0xFE), ("TTMP", 108), ("FS", 102), ("NULL", 125)]
# Field encodings that hold a scalar code divided by a register-tuple alignment.
CODE_SCALE = {"sbase": 2, "srsrc": 4}


def learn_src_kinds(fam, entries, roles, fieldval):
    """For each source role (a 9- or 8-bit scalar/vector source field), learn what it accepts and
    the printing class of its constants."""
    variants = []
    for role in roles:
        for kname, kv in KIND_VALUES:
            variants.append(((role, kname), kv))
        for i, lit in enumerate(immfmt.PROBE_LITERALS):
            variants.append(((role, "L%d" % i), ("lit", lit)))
        for code in immfmt.PROBE_INLINE:
            variants.append(((role, "I%x" % code), code))
    probes, keys = [], []
    for op, e in entries.items():
        toks = e["toks"]
        present = {t["role"] for t in toks if "role" in t and t["file"] in ("v", "a", "s", "ttmp")}
        for (role, label), kv in variants:
            if role not in present:
                continue
            scale = CODE_SCALE.get(fam.regs[role][2], 1)
            regvals = dict(e["base_regs"])
            extra = []
            if isinstance(kv, tuple):
                if scale != 1:
                    continue
                regvals[role] = fieldval(role, 0xFF)
                extra = [kv[1]]
            else:
                v = kv
                if label == "S":
                    v = 8 + 4 * roles.index(role)
                if v % scale:
                    continue
                if v // scale >= 1 << fam.regs[role][0].width:
                    continue
                regvals[role] = fieldval(role, v // scale)
            words = fam.encode(op, regvals, modvals=e.get("probe_mods"))
            probes.append(words[:fam.ndw] + extra + words[fam.ndw:] if extra else words)
            keys.append((op, role, label))
    res = dict(zip(keys, run(probes)))
    for op, e in entries.items():
        for t in e["toks"]:
            role = t.get("role")
            if role not in roles or t["file"] not in ("v", "a", "s", "ttmp"):
                continue
            if fam.regs[role][2] == "vgpr8" and t["file"] in ("v", "a"):
                continue
            allow = []
            for kname, _ in KIND_VALUES:
                text, n = res.get((op, role, kname), (None, 0))
                # With a K operand the instruction already carries the literal, and src0 shares it.
                has_k = any(x.get("role") == "K" for x in e["toks"])
                want = e["ndw"] + (1 if kname == "LIT" and not has_k else 0)
                if clean(text) and n == want and parse(text)[0] == e["mnemonic"]:
                    allow.append(kname)
            t["allow"] = allow
            if "INT" in allow or "FLT" in allow or "LIT" in allow:
                t["imm"] = classify_imm(fam, e, t, role, res, op)


def operand_text(e, t, text):
    """The printed text of token t's position in `text`."""
    p = parse(text)
    if p is None:
        return None
    idx = e["toks"].index(t)
    if idx >= len(p[1]):
        return None
    return p[1][idx]


def classify_imm(fam, e, t, role, res, op):
    seen = {}
    for i, lit in enumerate(immfmt.PROBE_LITERALS):
        text, _ = res.get((op, role, "L%d" % i), (None, 0))
        if text:
            seen[("L", lit)] = operand_text(e, t, text)
    for code in immfmt.PROBE_INLINE:
        text, _ = res.get((op, role, "I%x" % code), (None, 0))
        if text:
            seen[("I", code)] = operand_text(e, t, text)
    fits = []
    for cls in immfmt.CLASSES:
        ok = True
        for (kind, v), got in seen.items():
            want = immfmt.print_literal(cls, v) if kind == "L" else immfmt.print_inline(cls, v)
            if got != want:
                ok = False
                break
        if ok:
            fits.append(cls)
    if not fits:
        raise SystemExit("no immediate class fits %s op %#x %s: %s" % (
            fam.name, op, role, sorted(seen.items())[:40]))
    return fits[0]


def mod_base(fam, e, name):
    """The value a modifier field has in an entry's base probe."""
    return (e.get("probe_mods") or {}).get(name, fam.mods[name][1])


def mod_values(f):
    if f.width <= 4:
        return range(1 << f.width)
    top = (1 << f.width) - 1
    return [0, 1, top >> 1, top]


def learn_mods(fam, entries, skip=()):
    """Probe every value of every modifier field; record validity and whether it prints."""
    variants = []
    for name, (f, base) in fam.mods.items():
        if name in skip:
            continue
        for v in mod_values(f):
            # SDWA select 7 is reserved, and llvm-objdump-22 crashes printing it.
            if v != base and not (name.endswith("_sel") and v == 7):
                variants.append((name, v))
    for name, (f, base) in fam.mods.items():
        if name in skip:
            continue
        if base not in [v for n, v in variants if n == name]:
            # Entries whose base differs from the family's still need the family base probed.
            variants.append((name, base))
    probes, keys = [], []
    for op, e in entries.items():
        for name, v in variants:
            if v == mod_base(fam, e, name):
                continue
            mv = dict(e.get("probe_mods") or {})
            mv[name] = v
            probes.append(fam.encode(op, e["base_regs"], modvals=mv))
            keys.append((op, name, v))
    res = dict(zip(keys, run(probes)))
    for op, e in entries.items():
        mods = {}
        for name, (f, base) in fam.mods.items():
            if name in skip:
                continue
            base = mod_base(fam, e, name)
            valid = 1 << base
            texts = {base: e["text"]}
            for v in mod_values(f):
                if v == base or (op, name, v) not in res:
                    continue
                text, n = res[(op, name, v)]
                if text is not None and "Invalid" not in text and n == e["ndw"]:
                    valid |= 1 << min(v, 15)
                    texts[v] = text
            if f.width > 4:
                # Wide fields (an unused register field) are either free or must be zero.
                valid = 0xFFFF if valid > 1 else 1
            printed = len(set(texts.values())) > 1
            mods[name] = {"valid": valid, "printed": printed, "texts": texts}
        e["mods"] = mods
    learn_mods_with_acc(fam, entries)


MEMORY = ("DS", "FLAT", "GLOBAL", "SCRATCH", "MUBUF", "MTBUF")


def learn_mods_with_acc(fam, entries):
    """Memory ops: field validity can change when the data registers are AGPRs (acc bit), so
    every other field is probed again with acc set."""
    if fam.name not in MEMORY or "acc" not in fam.mods:
        return
    probes, keys = [], []
    for op, e in entries.items():
        if not (e["mods"]["acc"]["valid"] >> 1) & 1:
            continue
        for name, m in e["mods"].items():
            f = fam.mods[name][0]
            if name == "acc" or f.width > 4:
                continue
            for v in mod_values(f):
                if (m["valid"] >> v) & 1:
                    mv = dict(e.get("probe_mods") or {}, acc=1)
                    mv[name] = v
                    probes.append(fam.encode(op, e["base_regs"], modvals=mv))
                    keys.append((op, name, v))
    for (op, name, v), (text, n) in zip(keys, run(probes)):
        e = entries[op]
        m = e["mods"][name]
        ok = text is not None and "Invalid" not in text and n == e["ndw"]
        m["valid_acc"] = m.get("valid_acc", 0) | ((1 << v) if ok else 0)


# ----------------------------------------------------------------------------------------------
# Family drivers
# ----------------------------------------------------------------------------------------------
def opcode_name(mnem):
    base = re.sub(r"_(e32|e64|sdwa|dpp)$", "", mnem)
    return base.upper()


def learn_reg_imm_tokens(fam, entries):
    """A register field can print as a plain number (s_atc_probe's sdata, s_set_gpr_idx_on's
    mode): find fixed tokens that change when an unused field is set."""
    var = []
    for role in fam.regs:
        probe = fam.regs[role][1]
        probe = probe[0] if isinstance(probe, list) else probe
        var.append((role, lambda e, role=role, probe=probe: None if e["base_regs"][role] else
                    fam.encode(e["op"], dict(e["base_regs"], **{role: probe}),
                               modvals=e.get("probe_mods"))))
    got = probe_variants(fam, entries, var)
    for op, e in entries.items():
        toks = e["toks"]
        for role in fam.regs:
            t2 = got.get((op, role))
            if not t2 or not clean(t2[0]):
                continue
            p2 = parse(t2[0])
            if len(p2[1]) != len(toks):
                continue
            for i, tok in enumerate(p2[1]):
                if "fixed" in toks[i] and toks[i]["fixed"] != tok:
                    toks[i] = {"role": role, "file": "imm", "width": 1}


def src_field_value(fam):
    def fv(role, v):
        return v
    return fv


LAYOUT_FIELDS = ("offen", "imm", "soe", "sd", "s0", "s1", "acc", "acc0", "acc1", "acc_cd")


def learn_trailing(fam, entries):
    """Learn the order in which LLVM prints an entry's modifiers by switching on, one at a time,
    every printed modifier (at its first valid non-default value) while the probe stays valid."""
    state = {}
    for op, e in entries.items():
        cands = []
        arrays_seen = set()
        for name, m in (e.get("mods") or {}).items():
            # One field per bracketed list is enough to show it; more could return it to its
            # default and hide it again.
            kinds = {x.split(":")[1] for x in m.get("meaning", []) if x.startswith("array:")}
            if kinds & arrays_seen:
                continue
            arrays_seen |= kinds
            # Fields that reshape operands rather than add a modifier are left at their base.
            if not m["printed"] or name in LAYOUT_FIELDS:
                continue
            base = mod_base(fam, e, name)
            vals = [v for v in range(16) if (m["valid"] >> v) & 1 and v != base]
            if vals:
                cands.append((name, vals[0]))
        state[op] = {"on": dict(e.get("probe_mods") or {}), "todo": cands}
    order = {op: [] for op in entries}
    while True:
        probes, keys = [], []
        for op, st in state.items():
            if st["todo"]:
                name, v = st["todo"][0]
                mv = dict(st["on"])
                mv[name] = v
                probes.append(fam.encode(op, entries[op]["base_regs"], modvals=mv))
                keys.append((op, name, v, mv))
        if not probes:
            break
        for (op, name, v, mv), (text, _n) in zip(keys, run(probes)):
            st = state[op]
            st["todo"].pop(0)
            if text is not None and "Invalid" not in text:
                st["on"] = mv
                st["text"] = text
    for op, st in state.items():
        e = entries[op]
        text = st.get("text", e["text"])
        e["all_mods_text"] = text
        names = []
        for t in parse(text)[2]:
            n = trail_name(t)
            if n and n not in names:
                names.append(n)
        # Modifiers shown by the base probe but switched back to default by the combined one keep
        # their place relative to their base neighbours.
        prev = None
        for t in e["trail"]:
            n = trail_name(t)
            if not n:
                continue
            if n not in names:
                names.insert(names.index(prev) + 1 if prev in names else 0, n)
            prev = n
        e["trail_order"] = names


def trail_name(tok):
    if tok.startswith("/*"):
        return None
    n = re.split(r"[:\[]", tok)[0]
    if n in ("mul", "div"):
        return "omod"
    if n in ("quad_perm", "row_shl", "row_shr", "row_ror", "wave_shl", "wave_rol", "wave_shr",
             "wave_ror", "row_mirror", "row_half_mirror", "row_bcast", "row_newbcast"):
        return "dpp_ctrl"
    return n


def learn_variants(fam, entries, modname, value):
    """Memory ops whose operand list changes with a bit (atomics return data when sc0 is set;
    MUBUF drops vdata when lds is set): record the alternate template."""
    def full(e):
        # Every field gets its probe value so a destination that appears is recognised.
        rv = dict(e["base_regs"])
        for r, (_f, probe, _k) in fam.regs.items():
            if r in e.get("must_be_zero", []) or (r == "saddr" and fam.name == "FLAT"):
                continue
            if rv[r] == 0 and fam.zero.get(r, 0) == 0:
                rv[r] = probe[0] if isinstance(probe, list) else probe
        return rv
    var = [("v", lambda e: fam.encode(e["op"], full(e),
                                      modvals=dict(e.get("probe_mods") or {}, **{modname: value})))]
    got = probe_variants(fam, entries, var)
    for op, e in entries.items():
        text, _n = got[(op, "v")]
        if not clean(text):
            continue
        regvals = full(e)
        mnem, toks, trail = template_of(fam, e, text, regvals)
        base_by_role = {t.get("role"): t for t in e["toks"] if t.get("role")}
        for t in toks:
            b = base_by_role.get(t.get("role"))
            if b:
                for k in ("allow", "imm", "odd", "imm_kind"):
                    if k in b:
                        t[k] = json.loads(json.dumps(b[k]))
        if [t.get("role") or t.get("fixed") for t in toks] != \
                [t.get("role") or t.get("fixed") for t in e["toks"]]:
            e.setdefault("variants", {})[modname] = {"mnemonic": mnem, "toks": toks,
                                                     "text": text, "regs": regvals}
    # The variant's own modifier validity (an acc bit is invalid when there is no data register).
    pseudo = {}
    for op, e in entries.items():
        v = (e.get("variants") or {}).get(modname)
        if v:
            pseudo[op] = {"op": op, "base_regs": v["regs"], "text": v["text"], "ndw": e["ndw"],
                          "toks": v["toks"], "trail": parse(v["text"])[2],
                          "probe_mods": dict(e.get("probe_mods") or {}, **{modname: value})}
    if pseudo:
        learn_mods(fam, pseudo)
        learn_meanings(fam, pseudo)
        for op, p in pseudo.items():
            entries[op]["variants"][modname]["mods"] = p["mods"]
    # Alignment of the variant's registers (LLVM's register classes differ between the forms).
    jobs = []
    for op, e in entries.items():
        v = (e.get("variants") or {}).get(modname)
        if not v:
            continue
        accs = [n for n in fam.mods if n == "acc"]
        for t in v["toks"]:
            r = t.get("role")
            if t.get("file") not in ("v", "a") or t["width"] < 2:
                continue
            for acc in [None] + accs:
                jobs.append((op, r, acc))
    probes = []
    for op, r, acc in jobs:
        e = entries[op]
        mv = dict(e.get("probe_mods") or {}, **{modname: value})
        if acc:
            mv[acc] = 1
        rv = dict(e["variants"][modname]["regs"])
        rv[r] += 1
        probes.append(fam.encode(op, rv, modvals=mv))
    for (op, r, acc), (text, n) in zip(jobs, run(probes)):
        e = entries[op]
        for t in e["variants"][modname]["toks"]:
            if t.get("role") == r:
                f = t["file"] if acc is None else ("a" if t["file"] == "v" else "v")
                t.setdefault("odd", {})[f] = clean(text) and n == e["ndw"]


def learn_mai_widths(fam, entries):
    """The f8f6f4 MFMAs size their A/B operands by cbsz/blgp (FP8 8 regs, FP6 6, FP4 4)."""
    var = []
    for v in range(8):
        var.append((("cbsz", v), lambda e, v=v: fam.encode(e["op"], e["base_regs"],
                                                           modvals={"cbsz": v})))
        var.append((("blgp", v), lambda e, v=v: fam.encode(e["op"], e["base_regs"],
                                                           modvals={"blgp": v})))
    got = probe_variants(fam, entries, var)
    for op, e in entries.items():
        for field, role in (("cbsz", "src0"), ("blgp", "src1")):
            widths = []
            for v in range(8):
                text, _ = got[(op, (field, v))]
                w = None
                if clean(text):
                    _, toks, _ = template_of(fam, e, text)
                    for t in toks:
                        if t.get("role") == role:
                            w = t["width"]
                widths.append(w)
            base_w = [t["width"] for t in e["toks"] if t.get("role") == role]
            if base_w and any(w is not None and w != base_w[0] for w in widths):
                e.setdefault("width_by", {})[field] = [w or base_w[0] for w in widths]



ARRAY_NAMES = ("op_sel", "op_sel_hi", "neg_lo", "neg_hi", "neg")


def parse_array(tok):
    m = re.match(r"^(\w+):\[([01,]+)\]$", tok)
    if not m:
        return None
    return m.group(1), [int(x) for x in m.group(2).split(",")]


def trail_map(trail):
    out = {}
    for t in trail:
        n = trail_name(t)
        if n:
            out[n] = t
    return out


def classify_meaning(fam, e, name, m):
    """What a modifier field does for this opcode, judged from LLVM's text when it is set."""
    if not m["printed"]:
        return ["ignored"]
    f = fam.mods[name][0]
    base = mod_base(fam, e, name)
    base_text = m["texts"][base]
    vals = [v for v in sorted(m["texts"]) if v != base]
    v = vals[0]
    text = m["texts"][v]
    b_mn, b_ops, b_tr = parse(base_text)
    t_mn, t_ops, t_tr = parse(text)
    out = []
    if len(b_ops) == len(t_ops):
        for i, (a, b) in enumerate(zip(b_ops, t_ops)):
            if a == b:
                continue
            ca, ma = strip_srcmods(a)
            cb, mb = strip_srcmods(b)
            ra, rb = reg_of(ca), reg_of(cb)
            tok = e["toks"][i] if i < len(e["toks"]) else {}
            role = tok.get("role", "?")
            if ra and rb and ra[0] != rb[0] and ra[1] == rb[1]:
                out.append("file:%s" % role)
            elif ra and rb and ra[2] != rb[2]:
                out.append("width:%s" % role)
            elif ca == cb and mb - ma:
                for x in sorted(mb - ma):
                    out.append("%s:%s" % (x, role))
            else:
                out.append("operand:%s" % role)
    else:
        out.append("layout")
    ta, tb = trail_map(b_tr), trail_map(t_tr)
    for n in tb:
        if ta.get(n) == tb[n]:
            continue
        if n in ARRAY_NAMES:
            pa = parse_array(ta[n]) if n in ta else None
            pb = parse_array(tb[n])
            if pb is None:
                out.append("trail:%s" % n)
                continue
            la = pa[1] if pa else None
            idx = [k for k in range(len(pb[1])) if la is None or la[k] != pb[1][k]]
            if la is None:
                # Array appeared: its hidden default is this field's base value.
                idx = [k for k in range(len(pb[1])) if pb[1][k] != base]
            out.append("array:%s:%s:%d" % (n, ",".join(map(str, idx)), len(pb[1])))
        elif n == "bitop3":
            val = int(tb[n].split(":")[1], 0)
            out.append("bitop3:%d" % val)
        else:
            out.append("trail:%s" % n)
    for n in ta:
        if n not in tb:
            out.append("untrail:%s" % n)
    if b_mn != t_mn:
        out.append("mnemonic:%s" % t_mn)
    return out or ["ignored"]


def learn_meanings(fam, entries):
    for e in entries.values():
        for name, m in (e.get("mods") or {}).items():
            m["meaning"] = classify_meaning(fam, e, name, m)


IMM_PROBE = [0, 1, 3, 0x40, 0x41, 0x7F, 0x1234, 0x8000, 0xFFFF, 0x0F70, 0x3F7F]


def imm_kind_of(texts):
    """Classify how an immediate field prints, from {value: operand text}."""
    vals = {v: t for v, t in texts.items() if t is not None}
    joined = " ".join(vals.values())
    for key, kind in (("vmcnt(", "waitcnt"), ("sendmsg(", "sendmsg"), ("hwreg(", "hwreg"),
                      ("gpr_idx(", "gpr_idx")):
        if key in joined:
            return kind
    models = {
        "hex": lambda v: "0x%x" % v,
        "imm32": lambda v: str(v) if v <= 64 else "0x%x" % v,
        "dec": lambda v: str(v),
    }
    for kind, fn in models.items():
        if all(t == fn(v) for v, t in vals.items()):
            return kind
    return None


def learn_imm_kinds(fam, entries):
    """SOPP/SOPK/SMEM/SOPC immediates: learn how each prints (hex, decimal, waitcnt, ...)."""
    jobs = []
    for op, e in entries.items():
        for i, t in enumerate(e["toks"]):
            if t.get("file") == "imm":
                jobs.append((op, i, t["role"]))
    if fam.name == "SOPP":
        # Operand-less SOPP ops (s_barrier) print nothing; find whether a non-zero imm is allowed.
        for op, e in entries.items():
            if not e["toks"]:
                jobs.append((op, None, "simm16"))
    probes, keys = [], []
    for op, i, role in jobs:
        e = entries[op]
        for v in IMM_PROBE:
            if role in fam.imms:
                w = fam.encode(op, e["base_regs"], {role: v}, modvals=e.get("probe_mods"))
            else:
                w = fam.encode(op, dict(e["base_regs"], **{role: v & ((1 << fam.regs[role][0].width) - 1)}),
                               modvals=e.get("probe_mods"))
            probes.append(w)
            keys.append((op, i, role, v))
    res = dict(zip(keys, run(probes)))
    for op, i, role in jobs:
        e = entries[op]
        texts, valid = {}, 0
        width = fam.imms[role][0].width if role in fam.imms else fam.regs[role][0].width
        for v in IMM_PROBE:
            if v >> width:
                continue
            text, _ = res[(op, i, role, v)]
            if text is None or "Invalid" in text:
                continue
            valid += 1
            p = parse(text)
            if i is None:
                texts[v] = " ".join(p[1]) if p[1] else ""
            elif len(p[1]) > i:
                texts[v] = p[1][i]
            elif not p[1] or (role == "simm16" and len(p[1]) == i):
                texts[v] = ""
        if i is None:
            e["imm_must_be_zero"] = valid <= 1
            continue
        t = e["toks"][i]
        if all(texts.get(v) == "" for v in texts if v == 0) and any(texts.get(v) == "" for v in texts):
            # s_endpgm prints its immediate only when it is not zero.
            rest = {v: x for v, x in texts.items() if v != 0}
            kind = imm_kind_of(rest)
            t["imm_kind"] = (kind + "_nz") if kind else None
        else:
            t["imm_kind"] = imm_kind_of(texts)
        if t["imm_kind"] is None:
            raise SystemExit("unknown immediate kind %s %#x %s: %s" % (fam.name, op, role, texts))


def learn_mtbuf_formats(fam, entries):
    """tbuffer format names: probe every dfmt/nfmt pair once."""
    e = entries[0]
    probes, keys = [], []
    for d in range(16):
        for n in range(8):
            mv = dict(e.get("probe_mods") or {})
            mv.update({"dfmt": d, "nfmt": n})
            probes.append(fam.encode(0, e["base_regs"], modvals=mv))
            keys.append((d, n))
    table = {}
    for (d, n), (text, _) in zip(keys, run(probes)):
        fmt = ""
        if text:
            for t in parse(text)[2]:
                if t.startswith("format:"):
                    fmt = t
        table[(d, n)] = fmt
    return table


def learn_unused_fields(fam, entries):
    """A field the opcode does not use is either ignored by LLVM or must be zero (DS)."""
    var = []
    for role, (f, probe, _file) in fam.regs.items():
        p = probe[0] if isinstance(probe, list) else probe
        var.append((("r", role), lambda e, role=role, p=p: fam.encode(
            e["op"], dict(e["base_regs"], **{role: p}), modvals=e.get("probe_mods"))))
    for role, (f, base, alt) in fam.imms.items():
        var.append((("i", role), lambda e, role=role, alt=alt: fam.encode(
            e["op"], e["base_regs"], {role: alt}, modvals=e.get("probe_mods"))))
    got = probe_variants(fam, entries, var)

    def overlaps_mod(f):
        # A register field laid over modifier bits (VOP3B sdst over abs/op_sel) is covered by
        # the modifier analysis.
        return any(mf.w == f.w and mf.lo < f.lo + f.width and f.lo < mf.lo + mf.width
                   for mf, _b in fam.mods.values())
    for op, e in entries.items():
        present = {t.get("role") for t in e["toks"]}
        mbz = []
        for kind, table in (("r", fam.regs), ("i", fam.imms)):
            for role in table:
                if role in present or (kind == "r" and e["base_regs"].get(role) not in (0, fam.zero.get(role, 0))):
                    continue
                if kind == "r" and fam.zero.get(role, 0) != 0:
                    continue
                if overlaps_mod(table[role][0]):
                    continue
                text, n = got[(op, (kind, role))]
                if not (text is not None and "Invalid" not in text and n == e["ndw"]):
                    mbz.append(role)
        e["must_be_zero"] = mbz


def learn_alignment(fam, entries):
    """Whether a register tuple of this operand may start at an odd register: gfx90a-class VGPR
    tuples must be even, but some operands (DS/FLAT AGPR data, v_cndmask's mask) are not
    checked by LLVM."""
    wide = {"MUBUF": {"offen": 1, "idxen": 1}, "MTBUF": {"offen": 1, "idxen": 1}}
    jobs = []
    for op, e in entries.items():
        for t in e["toks"]:
            role = t.get("role")
            widened = role == "vaddr" and (fam.name in wide or fam.name == "GLOBAL")
            if role not in fam.regs or t.get("file") not in ("v", "a"):
                continue
            if t["width"] < 2 and not widened:
                continue
            if fam.regs[role][2] not in ("src9", "vgpr8", "sdwa_src"):
                continue
            bv = e["base_regs"].get(role)
            if not bv:
                continue
            accs = [n for n, m in (e.get("mods") or {}).items()
                    if any(x == "file:" + role for x in m.get("meaning", []))]
            jobs.append((op, role, None, bv + 1))
            if accs:
                jobs.append((op, role, accs[0], bv + 1))
    probes = []
    for op, role, acc, v in jobs:
        e = entries[op]
        mv = dict(e.get("probe_mods") or {})
        rv = dict(e["base_regs"], **{role: v})
        if acc:
            mv[acc] = 1
        if role == "vaddr" and fam.name in wide:
            mv.update(wide[fam.name])
        if role == "vaddr" and fam.name == "GLOBAL":
            rv["saddr"] = 0x7F
        probes.append(fam.encode(op, rv, modvals=mv))
    for (op, role, acc, v), (text, n) in zip(jobs, run(probes)):
        e = entries[op]
        ok = clean(text) and n == e["ndw"]
        for t in e["toks"]:
            if t.get("role") == role:
                native = t["file"]
                f = native if acc is None else ("a" if native == "v" else "v")
                t.setdefault("odd", {})[f] = ok


SRC_ROLES = {"SOP2": ["ssrc0", "ssrc1", "sdst"], "SOPC": ["ssrc0", "ssrc1"],
             "SOP1": ["ssrc0", "sdst"], "SOPK": ["sdst"], "SMEM": ["sdata", "sbase"],
             "VOP2": ["src0"], "VOP1": ["src0", "vdst"], "VOPC": ["src0"],
             "VOP3": ["src0", "src1", "src2", "vdst", "sdst"], "VOP3P": ["src0", "src1", "src2"],
             "GLOBAL": ["saddr"], "SCRATCH": ["saddr"],
             "MAI": ["src0", "src1", "src2"], "MAI_SCALE": ["src0", "src1", "src2", "scale0", "scale1"],
             "MUBUF": ["soffset", "srsrc"], "MTBUF": ["soffset", "srsrc"]}


def analyze(log):
    db = {}
    for fam in families():
        entries = analyze_family(fam, log)
        if fam.name == "MAI":
            entries = {op: e for op, e in entries.items() if "ld_scale" not in e["text"] and (
                "mfma" in e["text"] or "accvgpr" in e["text"] or "smfmac" in e["text"])}
        elif fam.name == "VOP3P":
            entries = {op: e for op, e in entries.items() if "ld_scale" in e["text"] or not (
                "mfma" in e["text"] or "accvgpr" in e["text"] or "smfmac" in e["text"])}
        elif fam.name == "MAI_SCALE":
            entries = {op: e for op, e in entries.items() if e["ndw"] == 4}
        if fam.name.endswith("_SDWA") or fam.name.endswith("_DPP"):
            suffix = "_sdwa" if fam.name.endswith("_SDWA") else "_dpp"
            entries = {op: e for op, e in entries.items()
                       if e["ndw"] == 2 and e["text"].split()[0].endswith(suffix)}
        if fam.name == "VOP3P":
            # Packed ops print op_sel_hi unless all its bits are set, so probe with them set.
            for e in entries.values():
                if "ld_scale" in e["text"]:
                    continue
                e["probe_mods"] = {"opsel_hi0": 1, "opsel_hi1": 1, "opsel_hi2": 1}
                e["text"] = run([fam.encode(e["op"], e["base_regs"],
                                            modvals=e["probe_mods"])])[0][0]
        for e in entries.values():
            mnem, toks, trail = template_of(fam, e)
            e["mnemonic"], e["toks"], e["trail"] = mnem, toks, trail
        learn_imm_tokens(fam, entries)
        learn_reg_imm_tokens(fam, entries)
        for e in entries.values():
            learn_literal_token(fam, e, e["toks"])
        learn_literal_kinds(fam, entries)
        if fam.name in SRC_ROLES:
            learn_src_kinds(fam, entries, SRC_ROLES[fam.name], src_field_value(fam))
        learn_mods(fam, entries)
        learn_meanings(fam, entries)
        learn_alignment(fam, entries)
        learn_trailing(fam, entries)
        learn_imm_kinds(fam, entries)
        learn_unused_fields(fam, entries)
        if fam.name in ("MUBUF", "FLAT", "GLOBAL", "SCRATCH", "MTBUF"):
            learn_variants(fam, entries, "sc0", 1)
        if fam.name == "MUBUF":
            learn_variants(fam, entries, "lds", 1)
        if fam.name in ("MAI", "MAI_SCALE"):
            learn_mai_widths(fam, entries)
        if fam.name == "MTBUF":
            fam.formats = learn_mtbuf_formats(fam, entries)
        log("  %s analysed" % fam.name)
        db[fam.name] = (fam, entries)
    return db



# ----------------------------------------------------------------------------------------------
# Rust emission
# ----------------------------------------------------------------------------------------------
ENCODING = {"SOP2": "Sop2", "SOPK": "Sopk", "SOP1": "Sop1", "SOPC": "Sopc", "SOPP": "Sopp",
            "SMEM": "Smem", "VOP2": "Vop2", "VOP1": "Vop1", "VOPC": "Vopc", "VOP3": "Vop3",
            "VOP3P": "Vop3p", "MAI": "Mai", "MAI_SCALE": "MaiScaled", "VOP2_SDWA": "Vop2Sdwa",
            "VOP1_SDWA": "Vop1Sdwa", "VOPC_SDWA": "VopcSdwa", "VOP2_DPP": "Vop2Dpp",
            "VOP1_DPP": "Vop1Dpp", "VOPC_DPP": None, "DS": "Ds", "MUBUF": "Mubuf", "MTBUF": "Mtbuf",
            "FLAT": "Flat", "SCRATCH": "Scratch", "GLOBAL": "Global"}
ROLE = {"vdst": "Vdst", "sdst": "Sdst", "src0": "Src0", "src1": "Src1", "src2": "Src2",
        "ssrc0": "Src0", "ssrc1": "Src1", "scale0": "ScaleA", "scale1": "ScaleB", "K": "K",
        "simm16": "Simm16", "sdata": "Sdata", "sbase": "Sbase", "offset": "Offset",
        "addr": "Addr", "data0": "Data0", "data1": "Data1", "vaddr": "Vaddr", "vdata": "Vdata",
        "srsrc": "Srsrc", "soffset": "Soffset", "saddr": "Saddr"}
ROLE_ORDER = ["Vdst", "Sdst", "Src0", "Src1", "Src2", "ScaleA", "ScaleB", "K", "Simm16", "Sdata",
              "Sbase", "Offset", "Addr", "Data0", "Data1", "Vaddr", "Vdata", "Srsrc", "Soffset",
              "Saddr"]
VALUE_TYPE = {None: "None", "b32": "B32", "i16": "I16", "f16": "F16", "bf16": "Bf16",
              "f64": "F64", "i64": "I64", "v2f16": "V2F16", "v2bf16": "V2Bf16"}
ALLOW_BITS = {"S": 1, "VCC": 2, "M0": 4, "EXEC": 8, "INT": 16, "FLT": 32, "LIT": 64,
              "CONST": 128, "SCC": 256, "LDS": 512, "TTMP": 1024, "V": 2048, "FS": 4096,
              "NULL": 8192, "ODD_V": 16384, "ODD_A": 32768}
IMM_KIND = {"hex": "Hex", "imm32": "Imm32", "dec": "Dec", "dec_nz": "DecNz",
            "waitcnt": "Waitcnt", "sendmsg": "Sendmsg", "hwreg": "Hwreg", "gpr_idx": "GprIdx"}
TRAIL = {"offset": "Offset", "offset0": "Offset0", "offset1": "Offset1", "offen": "Offen",
         "idxen": "Idxen", "sc0": "Sc0", "sc1": "Sc1", "nt": "Nt", "lds": "Lds", "glc": "Glc",
         "clamp": "Clamp", "omod": "Omod", "op_sel": "OpSel", "op_sel_hi": "OpSelHi",
         "neg_lo": "NegLo", "neg_hi": "NegHi", "neg": "BlgpNeg", "cbsz": "Cbsz", "abid": "Abid",
         "blgp": "Blgp", "dst_sel": "DstSel", "dst_unused": "DstUnused", "src0_sel": "Src0Sel",
         "src1_sel": "Src1Sel", "dpp_ctrl": "DppCtrl", "row_mask": "RowMask",
         "bank_mask": "BankMask", "bound_ctrl": "BoundCtrl", "fi": "Fi", "format": "Format",
         "bitop3": "Bitop3"}
ARRAY = {"op_sel": "OpSel", "op_sel_hi": "OpSelHi", "neg_lo": "NegLo", "neg_hi": "NegHi",
         "neg": "BlgpNeg"}


def field_index(name):
    m = re.search(r"(\d)$", name)
    return int(m.group(1)) if m else 0


def rust_meaning(fam, name, meaning):
    """Map the classifier's description of a modifier field to a `Meaning`."""
    ms = set(meaning)
    k = field_index(name)
    if ms == {"ignored"}:
        return "Meaning::Ignored"
    files = sorted(x.split(":")[1] for x in ms if x.startswith("file:"))
    if files and fam.name in ("DS", "FLAT", "GLOBAL", "SCRATCH", "MUBUF", "MTBUF"):
        # One acc bit moves all data registers, including the returned value of an atomic
        # form that only exists when sc0 is set.
        files = ["vdst", "vdata", "data0", "data1"]
    if files:
        mask = " | ".join("1 << Role::%s as u32" % ROLE[r] for r in files)
        return "Meaning::Acc(%s)" % mask
    for x in ms:
        if x.startswith("abs:"):
            return "Meaning::Abs(%d)" % int(x[-1])
        if x.startswith("neg:src"):
            return "Meaning::Neg(%d)" % int(x[-1])
        if x.startswith("sext:"):
            return "Meaning::Sext(%d)" % int(x[-1])
        if x.startswith("bitop3:"):
            return "Meaning::Bitop3(%d)" % (int(x.split(":")[1]).bit_length() - 1)
        if x.startswith("array:"):
            kind = x.split(":")[1]
            if kind == "op_sel":
                return "Meaning::OpSel(%d)" % k
            if kind == "op_sel_hi":
                return "Meaning::OpSelHi(%d)" % k
            if kind == "neg_lo":
                return "Meaning::NegLo(%d)" % k
            if kind == "neg_hi":
                return "Meaning::NegHi(%d)" % k
            if kind == "neg":
                return "Meaning::BlgpNeg"
    simple = {"trail:clamp": "Clamp", "trail:omod": "Omod", "trail:fi": "Fi",
              "trail:bound_ctrl": "BoundCtrl", "trail:cbsz": "Cbsz", "trail:abid": "Abid",
              "trail:blgp": "Blgp", "trail:glc": "Glc", "trail:sc0": "Sc0", "trail:sc1": "Sc1",
              "trail:nt": "Nt", "trail:lds": "Lds", "trail:idxen": "Idxen",
              "trail:dst_sel": "DstSel", "trail:dst_unused": "DstUnused",
              "trail:src0_sel": "Src0Sel", "trail:src1_sel": "Src1Sel"}
    for x in ms:
        if x in simple:
            return "Meaning::" + simple[x]
        if x.startswith("untrail:") and "trail:" + x[len("untrail:"):] in simple:
            return "Meaning::" + simple["trail:" + x[len("untrail:"):]]
    by_name = {"offen": "Offen", "s0": "S0", "s1": "S1", "sd": "Sd", "imm": "SmemImm",
               "soe": "SmemSoe", "dfmt": "Dfmt", "nfmt": "Nfmt"}
    if name in by_name:
        return "Meaning::" + by_name[name]
    if fam.name == "SCRATCH" and name == "lds":
        return "Meaning::Sve"
    raise SystemExit("unmapped meaning %s %s %s" % (fam.name, name, meaning))


def implicit_roles(db):
    """The `vcc` printed by _e32/SDWA/DPP forms stands for the operand the _e64 form encodes:
    align the two operand lists to find which."""
    e64 = {}
    for op, e in db["VOP3"][1].items():
        e64[opcode_name(e["mnemonic"])] = e
    for famname in ("VOP1", "VOP2", "VOPC", "VOP1_SDWA", "VOP2_SDWA", "VOPC_SDWA", "VOP1_DPP",
                    "VOP2_DPP"):
        for op, e in db[famname][1].items():
            ref = e64.get(opcode_name(e["mnemonic"]))
            for i, t in enumerate(e["toks"]):
                if t.get("fixed") != "vcc":
                    continue
                role = None
                if ref and len(ref["toks"]) == len(e["toks"]):
                    role = ref["toks"][i].get("role")
                if role is None:
                    role = "vdst" if i == 0 else ("sdst" if i == 1 else "src2")
                t["implicit"] = role
            if famname.endswith("_SDWA") or famname.endswith("_DPP"):
                # SDWA scalar sources print constants like the e32/e64 form's sources do.
                base = famname.split("_")[0]
                e32 = {opcode_name(x["mnemonic"]): x for x in db[base][1].values()}
                for t in e["toks"]:
                    src = None
                    if t.get("role") == "src0":
                        src = e32.get(opcode_name(e["mnemonic"]))
                    elif t.get("role") == "src1":
                        src = ref
                    if src:
                        for u in src["toks"]:
                            if u.get("role") == t["role"] and u.get("imm"):
                                t["imm"] = u["imm"]


def emit_operand(fam, e, t):
    if "fixed" in t:
        if t["fixed"] != "vcc":
            raise SystemExit("unexpected fixed token %r in %s" % (t["fixed"], e["text"]))
        role = ROLE[t["implicit"]]
        if fam.name == "VOPC_SDWA":
            f = fam.regs["sdst"][0]
            return (role, "Enc::SdwaSdst", f.w, f.lo, f.width, 2, "V", "None", 0)
        return (role, "Enc::Vcc", 0, 0, 0, 2, "V", "None", 0)
    role = t["role"]
    if t["file"] == "imm":
        f = fam.imms[role][0] if role in fam.imms else fam.regs[role][0]
        kind = t.get("imm_kind")
        if fam.name == "SMEM" and role == "offset":
            kind_s = "SmemOffset"
        elif kind == "dec":
            if fam.name not in ("SOPP", "SOPK"):
                raise SystemExit("decimal immediate outside SOPP/SOPK: " + e["text"])
            kind_s = "Branch"
        else:
            kind_s = IMM_KIND[kind]
        return (ROLE[role], "Enc::Imm(ImmKind::%s)" % kind_s, f.w, f.lo, f.width, 1, "V", "None", 0)
    if t["file"] == "lit":
        enc = "Enc::LiteralImm32" if t.get("lit_kind") == "imm32" else "Enc::Literal"
        return (ROLE[role], enc, 0, 0, 0, 1, "V", "None", 0)
    f, probe, kind = fam.regs[role]
    enc = {"src9": "Src9", "ssrc8": "Ssrc8", "sdst7": "Sreg", "vgpr8": "Vreg", "sbase": "Sbase",
           "srsrc": "Srsrc", "saddr": "Saddr", "sdwa_src": "SdwaSrc"}[kind]
    if enc == "Vreg" and t["file"] in ("s", "ttmp"):
        enc = "Sreg"
    allow = sum(ALLOW_BITS[a] for a in t.get("allow", []))
    if enc == "Src9":
        first = probe[0] if isinstance(probe, list) else probe
        if e["base_regs"].get(role) == first:
            allow |= ALLOW_BITS["V"]
    odd = t.get("odd", {})
    if odd.get("v"):
        allow |= ALLOW_BITS["ODD_V"]
    if odd.get("a"):
        allow |= ALLOW_BITS["ODD_A"]
    ty = VALUE_TYPE[t.get("imm")]
    file = "A" if t["file"] == "a" else "V"
    return (ROLE[role], "Enc::" + enc, f.w, f.lo, f.width, t["width"], file, ty, allow)


def emit_trailing(fam, e):
    order = []
    names = list(e.get("trail_order") or [])
    base_trail = [trail_name(t) for t in e["trail"]]
    # Modifiers LLVM prints for this opcode, whether or not the combined probe showed them.
    wanted = set(names) | {n for n in base_trail if n}
    for name, m in (e.get("mods") or {}).items():
        for x in m.get("meaning", []):
            if x.startswith("trail:"):
                wanted.add(x.split(":")[1])
            if x.startswith("array:"):
                wanted.add(x.split(":")[1])
            if x.startswith("bitop3:"):
                wanted.add("bitop3")
    for n in names + [n for n in base_trail if n]:
        if n not in order:
            order.append(n)
    for n in sorted(wanted - set(order)):
        order.append(n)
    if fam.name.endswith("_DPP"):
        # 64-bit DPP prints a comment instead of the control, so probes do not always show it.
        for n in ("dpp_ctrl", "row_mask", "bank_mask"):
            if n in order:
                order.remove(n)
        order = ["dpp_ctrl", "row_mask", "bank_mask"] + order
    out = []
    swizzle = "swizzle(" in e["text"]
    for n in order:
        if n == "offset" and fam.name == "SMEM":
            out.append("SmemOffset")
        elif n == "offset" and swizzle:
            out.append("Swizzle")
        elif n == "format" and fam.name != "MTBUF":
            continue
        else:
            if n not in TRAIL:
                raise SystemExit("unknown trailing modifier %r in %s" % (n, e["text"]))
            out.append(TRAIL[n])
    if fam.name == "SMEM" and any("SmemSoe" in rust_meaning(fam, k, m["meaning"])
                                  for k, m in e["mods"].items() if k == "soe" and m["printed"]):
        # `soffset offset:imm` is printed right after the operands, before glc.
        if "SmemOffset" in out:
            out.remove("SmemOffset")
        out.insert(0, "SmemOffset")
    if fam.name == "MUBUF" or fam.name == "MTBUF":
        if "Offen" not in out:
            out.insert(0 if fam.name == "MUBUF" else out.index("Format") + 1, "Offen")
    return out


def emit_arrays(fam, e):
    arrays = {}
    for name, m in (e.get("mods") or {}).items():
        for x in m.get("meaning", []):
            if not x.startswith("array:"):
                continue
            _, kind, idx, ln = x.split(":")
            if not idx:
                continue
            ln = int(ln)
            ent = arrays.setdefault(kind, [None] * ln)
            bit = field_index(name)
            for i in map(int, idx.split(",")):
                if kind == "neg":
                    ent[i] = i
                else:
                    ent[i] = bit
    out = []
    for kind, ent in arrays.items():
        if kind == "neg":
            ent = list(range(len(ent)))
        base_names = [trail_name(t) for t in e["trail"]]
        fieldname = {"op_sel": "opsel0", "op_sel_hi": "opsel_hi0", "neg_lo": "neg0",
                     "neg_hi": "neg_hi0", "neg": "blgp"}[kind]
        base = mod_base(fam, e, fieldname) if fieldname in fam.mods else 0
        default = base if kind not in base_names else 1 - base
        if any(x is None for x in ent):
            # An entry no field sets: LLVM shows the default there.
            ent = [x if x is not None else 255 for x in ent]
        out.append((ARRAY[kind], ent, default))
    return out


def rust_str(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


class Interner:
    """Shares identical operand/modifier/trailing lists between table entries."""

    def __init__(self, prefix, ty):
        self.prefix, self.ty, self.items = prefix, ty, {}

    def get(self, elems):
        key = tuple(elems)
        if key not in self.items:
            self.items[key] = "%s%d" % (self.prefix, len(self.items))
        return "&" + self.items[key]

    def emit(self):
        out = []
        for key, name in self.items.items():
            out.append("static %s: [%s; %d] = [%s];\n" % (name, self.ty, len(key), ", ".join(key)))
        return "".join(out)


INTERN = {}


def interner(kind):
    if kind not in INTERN:
        INTERN[kind] = Interner({"ops": "O", "mods": "M", "trail": "T", "arr": "A"}[kind],
                                {"ops": "OperandDesc", "mods": "ModDesc", "trail": "Trail",
                                 "arr": "ArrayDesc"}[kind])
    return INTERN[kind]


def emit_desc(fam, e, toks, mnemonic, alt_sc0="NONE", alt_lds="NONE"):
    ops = []
    for t in toks:
        role, enc, w, lo, bits, width, file, ty, allow = emit_operand(fam, e, t)
        ops.append("od(Role::%s, %s, %d, %d, %d, %d, File::%s, ValueType::%s, %d)"
                   % (role, enc, w, lo, bits, width, file, ty, allow))
    mods = []
    for name, m in (e.get("mods") or {}).items():
        f = fam.mods[name][0]
        meaning = rust_meaning(fam, name, m["meaning"])
        valid = m["valid"] if f.width <= 4 else (0xFFFF if m["valid"] == 0xFFFF else 1)
        valid_acc = m.get("valid_acc", valid)
        if name == "acc":
            valid_acc = valid
        mods.append("md(%d, %d, %d, %#x, %#x, %s)" % (f.w, f.lo, f.width, valid, valid_acc, meaning))
    for role in e.get("must_be_zero", []):
        f = fam.regs[role][0] if role in fam.regs else fam.imms[role][0]
        mods.append("md(%d, %d, %d, 0x1, 0x1, Meaning::Ignored)" % (f.w, f.lo, f.width))
    trailing = ["Trail::" + t for t in emit_trailing(fam, e)]
    arrays = ["ArrayDesc { kind: ArrayKind::%s, entries: &[%s], default: %d }"
              % (k, ", ".join(map(str, ent)), d) for k, ent, d in emit_arrays(fam, e)]
    wa = (e.get("width_by") or {}).get("cbsz")
    wb = (e.get("width_by") or {}).get("blgp")
    wa = "[%s]" % ", ".join(map(str, wa)) if wa else "W0"
    wb = "[%s]" % ", ".join(map(str, wb)) if wb else "W0"
    dwords = {"MAI_SCALE": 4}.get(fam.name, fam.ndw)
    return ("    d(Opcode::%s, %s, Encoding::%s, %d, %s, %s, %s, %s, %s, %s, %s, %s),\n"
            % (opcode_name(mnemonic), rust_str(mnemonic), ENCODING[fam.name], dwords,
               interner("ops").get(ops), interner("mods").get(mods),
               interner("trail").get(trailing), interner("arr").get(arrays), alt_sc0, alt_lds,
               wa, wb))


MAP_SIZE = {"SOP2": 128, "SOPK": 32, "SOP1": 256, "SOPC": 128, "SOPP": 128, "SMEM": 256,
            "VOP2": 64, "VOP1": 256, "VOPC": 256, "VOP3": 1024, "VOP3P": 128, "MAI": 128,
            "MAI_SCALE": 128, "VOP2_SDWA": 64, "VOP1_SDWA": 256, "VOPC_SDWA": 256,
            "VOP2_DPP": 64, "VOP1_DPP": 256, "DS": 256, "MUBUF": 128, "MTBUF": 16,
            "FLAT": 128, "SCRATCH": 128, "GLOBAL": 128}


def learn_sendmsg():
    probes = [[0xBF900000 | v] for v in range(1024)]
    return [parse(t)[1][0] if t else None for t, _ in run(probes)]


def learn_hwreg_names():
    names = []
    for i, (t, _) in enumerate(run([[0xB8800000 | (31 << 11) | i] for i in range(64)])):
        # s_getreg_b32 s0, hwreg(ID) with offset 0 and width 32 prints just the id or its name.
        arg = parse(t)[1][1]
        inner = arg[len("hwreg("):-1]
        names.append(None if re.match(r"^\d+$", inner) else inner)
    return names


# Vector compare predicates in opcode order (the low 4 bits of the VOPC opcode): floating point,
# then integer. Rust variants of `CmpPred` are these names capitalised.
FLOAT_PREDICATES = ["f", "lt", "eq", "le", "gt", "lg", "ge", "o", "u", "nge", "nlg", "ngt", "nle",
                    "neq", "nlt", "tru"]
INT_PREDICATES = ["f", "lt", "eq", "le", "gt", "ne", "ge", "t"]
CMP_TYPES = ["f16", "f32", "f64", "i16", "i32", "i64", "u16", "u32", "u64"]


def compare_facts(name):
    """(type, predicate, writes EXEC) of a vector compare opcode name (`V_CMPX_LT_F32`), or None
    for any other opcode. The executor reads these from the table so that it never looks at a
    name while running; an unknown `v_cmp*` spelling stops generation rather than being skipped."""
    m = re.fullmatch(r"v_cmp(x?)_([a-z]+)_([a-z0-9]+)", name.lower())
    if not m:
        return None
    x, pred, ty = m.groups()
    preds = FLOAT_PREDICATES if ty.startswith("f") else INT_PREDICATES
    if ty not in CMP_TYPES or (pred != "class" and pred not in preds) or (
            pred == "class" and not ty.startswith("f")):
        raise SystemExit("unrecognised vector compare %s" % name)
    return ty, pred, x == "x"


def emit_compares(opcodes):
    """`Opcode::compare`: the compare facts of every VOPC/VOP3 compare, cmpx and class opcode."""
    out = ["impl Opcode {\n"
           "    /// What a vector compare (`v_cmp*`, `v_cmpx*`, `v_cmp*_class_*`) tests, derived from\n"
           "    /// its mnemonic when the tables were generated; `None` for every other opcode.\n"
           "    pub const fn compare(self) -> Option<Compare> {\n"
           "        const fn c(ty: CmpType, pred: CmpPred, writes_exec: bool) -> Option<Compare> {\n"
           "            Some(Compare { ty, pred, writes_exec })\n"
           "        }\n"
           "        match self {\n"]
    n = 0
    for o in opcodes:
        f = compare_facts(o)
        if f is None:
            continue
        ty, pred, x = f
        out.append("            Opcode::%s => c(CmpType::%s, CmpPred::%s, %s),\n"
                   % (o, ty.capitalize(), pred.capitalize(), "true" if x else "false"))
        n += 1
    if n == 0:
        raise SystemExit("no vector compares found")
    out.append("            _ => None,\n        }\n    }\n}\n\n")
    return "".join(out)


# What a timing model needs of each opcode beyond its encoding class, so that it never looks at a
# mnemonic while it runs. Matrix passes are LLVM's: llvm-mca-22 reports each MFMA's reciprocal
# throughput in passes from the gfx950 scheduling model (SISchedule.td). One fact llvm-mca cannot
# show is declared here: SISchedule.td's WriteMFMAScale_16X16X128_F8F6F4 and _32X32X64_F8F6F4
# select twice the passes when either matrix format is FP8 or BF8 (a SchedVariant on the
# instruction's cbsz/blgp, which "isn't reflected in MCA", as the file says).
F8F6F4_FP8_PASS_FACTOR = 2
# VALU ops LLVM schedules as transcendentals (WriteTrans32: quarter rate).
TRANSCENDENTAL_PREFIXES = ("v_exp_", "v_log_", "v_rcp_", "v_rsq_", "v_sqrt_", "v_sin_", "v_cos_")
# Scalar ops that read SCC without naming it as an operand.
READS_SCC_PREFIXES = ("s_cbranch_scc", "s_cselect", "s_addc", "s_subb", "s_cmov")
# Flag bits of `TimingFacts` (desc.rs spells the same values).
T_READS_SCC, T_READS_VCC, T_READS_EXEC = 1, 2, 4
T_SDST_IS_SOURCE, T_SDATA_IS_SOURCE, T_DS_WRITE, T_LOADS_TO_LDS = 8, 16, 32, 64


def ds_lane_bytes(m):
    """Bytes one lane of DS instruction `m` moves (both accesses of read2/write2)."""
    if "b128" in m:
        base = 16
    elif "b96" in m:
        base = 12
    elif any(s in m for s in ("b64", "u64", "i64", "f64")):
        base = 8
    elif any(s in m for s in ("u16", "i16", "b16")):
        base = 2
    elif any(s in m for s in ("u8", "i8", "b8")):
        base = 1
    else:
        base = 4
    # The tr forms name the element size after the access size (`ds_read_b64_tr_b8`).
    if "_tr_" in m:
        base = 12 if "b96" in m else 8
    return 2 * base if ("read2" in m or "write2" in m) else base


def learn_mfma_passes(texts):
    """Passes of each matrix opcode (name -> int) from llvm-mca-22's gfx950 model, given one
    assembly line per opcode; an opcode llvm-mca gives no whole number of passes for stops
    generation (a model must never guess a matrix instruction's time)."""
    import subprocess
    import tempfile
    names = sorted(texts)
    with tempfile.TemporaryDirectory() as td:
        src = os.path.join(td, "mfma.s")
        with open(src, "w") as f:
            f.write("\n".join(texts[n] for n in names) + "\n")
        r = subprocess.run([os.environ.get("LLVM_MCA", "llvm-mca-22"), "-mtriple=amdgcn",
                            "-mcpu=gfx950", "--instruction-info", "--iterations=1",
                            "--resource-pressure=false", src], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit("llvm-mca-22 failed: " + r.stderr)
    rows = []
    in_info = False
    for line in r.stdout.splitlines():
        if line.startswith("[1]") and "Instructions:" in line:
            in_info = True
            continue
        if in_info:
            parts = line.split()
            if len(parts) < 4:
                break
            rows.append((float(parts[2]), line))
    if len(rows) != len(names):
        raise SystemExit("llvm-mca-22 reported %d of %d matrix opcodes" % (len(rows), len(names)))
    passes = {}
    for n, (rthroughput, line) in zip(names, rows):
        if rthroughput != int(rthroughput) or not 1 <= rthroughput <= 64 or n.lower() not in line:
            raise SystemExit("llvm-mca-22: no pass count for %s: %s" % (n, line))
        passes[n] = int(rthroughput)
    return passes


def timing_facts(name, fams, passes):
    """(passes, fp8 passes, lane bytes, VALU rate, flags) of opcode `name` learned in families
    `fams`, or None when it has nothing beyond its encoding class."""
    m = name.lower()
    p = passes.get(name, 0)
    p8 = p * F8F6F4_FP8_PASS_FACTOR if m.endswith("_f8f6f4") else p
    lane = ds_lane_bytes(m) if "DS" in fams else 0
    if m.startswith(TRANSCENDENTAL_PREFIXES):
        rate = "Transcendental"
    elif "_f64" in m:
        rate = "Double"
    else:
        rate = "Full"
    flags = 0
    if m.startswith(READS_SCC_PREFIXES):
        flags |= T_READS_SCC
    if m.startswith("s_cbranch_vcc"):
        flags |= T_READS_VCC
    if m.startswith("s_cbranch_exec"):
        flags |= T_READS_EXEC
    if m.startswith("s_cmpk"):
        flags |= T_SDST_IS_SOURCE
    if "SMEM" in fams and "store" in m:
        flags |= T_SDATA_IS_SOURCE
    if "DS" in fams and m.startswith("ds_write"):
        flags |= T_DS_WRITE
    if "load_lds" in m:
        flags |= T_LOADS_TO_LDS
    if (p, p8, lane, rate, flags) == (0, 0, 0, "Full", 0):
        return None
    return p, p8, lane, rate, flags


def emit_timing(opcodes, fams_of, passes):
    """`Opcode::timing`: the timing facts of every opcode that has any."""
    out = ["impl Opcode {\n"
           "    /// What a timing model needs of the opcode beyond its encoding class, derived when the\n"
           "    /// tables were generated (matrix passes from LLVM's gfx950 scheduling model through\n"
           "    /// llvm-mca-22); [`TimingFacts::NONE`] for opcodes with nothing to add.\n"
           "    pub const fn timing(self) -> TimingFacts {\n"
           "        const fn t(passes: u8, fp8_passes: u8, lane_bytes: u8, rate: ValuRate, flags: u8)\n"
           "            -> TimingFacts {\n"
           "            TimingFacts { passes, fp8_passes, lane_bytes, rate, flags }\n"
           "        }\n"
           "        match self {\n"]
    matrix = 0
    for o in opcodes:
        f = timing_facts(o, fams_of.get(o, set()), passes)
        if f is None:
            continue
        p, p8, lane, rate, flags = f
        matrix += p > 0
        out.append("            Opcode::%s => t(%d, %d, %d, ValuRate::%s, %d),\n"
                   % (o, p, p8, lane, rate, flags))
    if matrix != len(passes):
        raise SystemExit("matrix opcodes without an Opcode variant")
    out.append("            _ => TimingFacts::NONE,\n        }\n    }\n}\n\n")
    return "".join(out)


def emit_rust(db, path):
    implicit_roles(db)
    opcodes = []
    descs = []
    maps = {}
    fams_of = {}
    mfma_texts = {}
    for famname, (fam, entries) in db.items():
        if ENCODING.get(famname) is None:
            continue
        m = ["NONE"] * MAP_SIZE[famname]
        for op, e in sorted(entries.items()):
            idx = len(descs)
            descs.append(None)
            alts = {}
            for var, key in (("sc0", "alt_sc0"), ("lds", "alt_lds")):
                v = (e.get("variants") or {}).get(var)
                if v:
                    alts[key] = str(len(descs))
                    ve = dict(e, mods=v.get("mods", e.get("mods")))
                    descs.append(emit_desc(fam, ve, v["toks"], v["mnemonic"]))
            descs[idx] = emit_desc(fam, e, e["toks"], e["mnemonic"], **alts)
            m[op] = str(idx)
            name = opcode_name(e["mnemonic"])
            if name not in opcodes:
                opcodes.append(name)
            fams_of.setdefault(name, set()).add(famname)
            if famname in ("MAI", "MAI_SCALE") and not name.startswith("V_ACCVGPR_"):
                mfma_texts.setdefault(name, e["text"])
        maps[famname] = m
    out = []
    out.append("// @generated by crates/emu/tools/gen_tables.py from llvm-objdump-22 --mcpu=gfx950.\n"
               "// Do not edit: regenerate with `python3 crates/emu/tools/gen_tables.py` (needs\n"
               "// llvm-mc-22, llvm-objdump-22 and llvm-mca-22), then `cargo fmt`.\n"
               "//! Opcode tables of gfx950, learned from LLVM's disassembler (see tools/gen_tables.py).\n\n"
               "#![allow(clippy::all)]\n\n"
               "use super::desc::*;\n\n"
               "const W0: [u8; 8] = [0; 8];\n\n"
               "#[allow(clippy::too_many_arguments)]\n"
               "const fn d(opcode: Opcode, mnemonic: &'static str, encoding: Encoding, dwords: u8,\n"
               "    operands: &'static [OperandDesc], mods: &'static [ModDesc], trailing: &'static [Trail],\n"
               "    arrays: &'static [ArrayDesc], alt_sc0: u16, alt_lds: u16, width_a: [u8; 8],\n"
               "    width_b: [u8; 8]) -> OpDesc {\n"
               "    OpDesc { opcode, mnemonic, encoding, dwords, operands, mods, trailing, arrays, alt_sc0,\n"
               "        alt_lds, width_a, width_b }\n}\n\n"
               "#[allow(clippy::too_many_arguments)]\n"
               "const fn od(role: Role, enc: Enc, word: u8, lo: u8, bits: u8, width: u8, file: File,\n"
               "    ty: ValueType, allow: u16) -> OperandDesc {\n"
               "    OperandDesc { role, enc, word, lo, bits, width, file, ty, allow }\n}\n\n"
               "const fn md(word: u8, lo: u8, bits: u8, valid: u16, valid_acc: u16, meaning: Meaning)\n"
               "    -> ModDesc {\n"
               "    ModDesc { word, lo, bits, valid, valid_acc, meaning }\n}\n\n")
    out.append("/// Every gfx950 operation, named as the ISA spells its mnemonic. The encoding\n"
               "/// (`_e32`, `_e64`, `_sdwa`, `_dpp`) is not part of the name: see [`Encoding`].\n"
               "#[allow(non_camel_case_types)]\n#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]\n"
               "#[repr(u16)]\npub enum Opcode {\n")
    for o in opcodes:
        out.append("    /// `%s`\n    %s,\n" % (o.lower(), o))
    out.append("}\n\n")
    out.append("impl Opcode {\n    /// The mnemonic without encoding suffix (`v_add_f32`).\n"
               "    pub fn name(self) -> &'static str {\n        OPCODE_NAMES[self as usize]\n    }\n\n"
               "    /// Every opcode, in table order.\n    pub const ALL: &'static [Opcode] = &[\n")
    for o in opcodes:
        out.append("        Opcode::%s,\n" % o)
    out.append("    ];\n}\n\n")
    out.append(emit_compares(opcodes))
    out.append(emit_timing(opcodes, fams_of, learn_mfma_passes(mfma_texts)))
    out.append("static OPCODE_NAMES: [&str; %d] = [\n" % len(opcodes))
    for o in opcodes:
        out.append("    %s,\n" % rust_str(o.lower()))
    out.append("];\n\n")
    out.append("pub(crate) static DESCS: [OpDesc; %d] = [\n" % len(descs))
    out.extend(descs)
    out.append("];\n\n")
    for kind in ("ops", "mods", "trail", "arr"):
        out.append(interner(kind).emit())
        out.append("\n")
    for famname, m in maps.items():
        out.append("pub(crate) static MAP_%s: [u16; %d] = [%s];\n\n" % (famname, len(m), ", ".join(m)))
    fmts = db["MTBUF"][0].formats
    out.append("/// `format:[...]` text of MTBUF by `dfmt * 8 + nfmt` (empty: the default format).\n")
    out.append("pub(crate) static MTBUF_FORMATS: [&str; 128] = [\n")
    for d in range(16):
        for n in range(8):
            out.append("    %s,\n" % rust_str(fmts[(d, n)]))
    out.append("];\n\n")
    msgs = learn_sendmsg()
    out.append("/// Operand text of `s_sendmsg` for immediates below 1024 (larger ones print in decimal).\n")
    out.append("pub(crate) static SENDMSG: [&str; 1024] = [\n")
    for t in msgs:
        out.append("    %s,\n" % rust_str(t or ""))
    out.append("];\n\n")
    names = learn_hwreg_names()
    out.append("/// Symbolic names of hardware registers (`hwreg(HW_REG_MODE)`), by id.\n")
    out.append("pub(crate) static HWREG_NAMES: [Option<&str>; 64] = [\n")
    for n in names:
        out.append("    %s,\n" % ("Some(%s)" % rust_str(n) if n else "None"))
    out.append("];\n")
    with open(path, "w") as f:
        f.write("".join(out))
    return len(opcodes), len(descs)


def emit_corpus(db, path):
    """Write every learned form as assembly (base, variants, all modifiers on) for the encoding
    test; lines llvm-mc-22 cannot assemble back are left out."""
    import subprocess
    import tempfile
    lines = []
    for famname, (fam, entries) in db.items():
        for op, e in sorted(entries.items()):
            texts = [e["text"], e.get("all_mods_text")]
            for v in (e.get("variants") or {}).values():
                texts.append(v["text"])
            for t in texts:
                if t and "/*" not in t and t not in lines:
                    lines.append(t)
    ok = []
    with tempfile.TemporaryDirectory() as td:
        src = os.path.join(td, "c.s")
        with open(src, "w") as f:
            f.write("\n".join(lines) + "\n")
        r = subprocess.run([os.environ.get("LLVM_MC", "llvm-mc-22"), "-arch=amdgcn", "-mcpu=gfx950",
                            "-show-encoding", src], capture_output=True, text=True)
        bad = {int(m.group(1)) for m in re.finditer(r":(\d+):\d+: error", r.stderr)}
        ok = [l for i, l in enumerate(lines, 1) if i not in bad]
    with open(path, "w") as f:
        f.write("// @generated by crates/emu/tools/gen_tables.py: every gfx950 instruction form the\n"
                "// decoder knows, as llvm-objdump-22 printed it while the tables were learned. The\n"
                "// encoding test assembles this file with llvm-mc-22 -show-encoding and checks that our\n"
                "// decoder prints llvm-mc's canonical text for every encoding.\n")
        f.write("\n".join(ok) + "\n")
    return len(ok), len(lines)


def main():
    out_json = None
    if "--json" in sys.argv:
        out_json = sys.argv[sys.argv.index("--json") + 1]
    log = lambda s: print(s, file=sys.stderr)  # noqa: E731
    db = analyze(log)
    here = os.path.dirname(os.path.abspath(__file__))
    out = os.path.join(here, "..", "src", "isa", "tables.rs")
    nops, ndescs = emit_rust(db, out)
    log("wrote %s: %d opcodes, %d encodings" % (os.path.normpath(out), nops, ndescs))
    corpus = os.path.join(here, "..", "tests", "data", "all_forms.s")
    n, total = emit_corpus(db, corpus)
    log("wrote %s: %d of %d forms assemble" % (os.path.normpath(corpus), n, total))
    import llvmprobe
    llvmprobe.save_cache()
    for c in llvmprobe.CRASHES:
        log("llvm-objdump crashed on: " + " ".join("%08x" % w for w in c))
    if out_json:
        with open(out_json, "w") as f:
            json.dump({k: {str(op): {kk: vv for kk, vv in e.items()} for op, e in v[1].items()}
                       for k, v in db.items()}, f, indent=1, default=str)


if __name__ == "__main__":
    main()

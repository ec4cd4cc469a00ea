"""A model of how llvm-objdump-22 prints inline constants and literals for each operand type.

The generator classifies every source operand of every instruction by comparing LLVM's output on a
fixed set of probe values with the prediction of each class below; a source matching no class stops
the generator. The Rust printer (crates/emu/src/isa/print.rs) implements the same classes.
"""
import struct

INLINE_F32 = {0xF0: 0x3F000000, 0xF1: 0xBF000000, 0xF2: 0x3F800000, 0xF3: 0xBF800000,
              0xF4: 0x40000000, 0xF5: 0xC0000000, 0xF6: 0x40800000, 0xF7: 0xC0800000}
FLOAT_NAMES = {0xF0: "0.5", 0xF1: "-0.5", 0xF2: "1.0", 0xF3: "-1.0", 0xF4: "2.0", 0xF5: "-2.0",
               0xF6: "4.0", 0xF7: "-4.0"}
F16_BITS = {0xF0: 0x3800, 0xF1: 0xB800, 0xF2: 0x3C00, 0xF3: 0xBC00, 0xF4: 0x4000, 0xF5: 0xC000,
            0xF6: 0x4400, 0xF7: 0xC400, 0xF8: 0x3118}
BF16_BITS = {0xF0: 0x3F00, 0xF1: 0xBF00, 0xF2: 0x3F80, 0xF3: 0xBF80, 0xF4: 0x4000, 0xF5: 0xC000,
             0xF6: 0x4080, 0xF7: 0xC080, 0xF8: 0x3E22}
F32_INV2PI = 0x3E22F983
F64_HI = {0xF0: 0x3FE00000, 0xF1: 0xBFE00000, 0xF2: 0x3FF00000, 0xF3: 0xBFF00000,
          0xF4: 0x40000000, 0xF5: 0xC0000000, 0xF6: 0x40100000, 0xF7: 0xC0100000}
F64_INV2PI = 0x3FC45F306DC9C882

CLASSES = ["b32", "i16", "f16", "bf16", "f64", "i64", "v2f16", "v2bf16"]


def _inline_int(code):
    if 0x80 <= code <= 0xC0:
        return code - 0x80
    if 0xC1 <= code <= 0xD0:
        return 0xC0 - code
    return None


def _is_int_inline(v):
    return -16 <= v <= 64


def _s32(v):
    return v - (1 << 32) if v & 0x80000000 else v


def _s16(v):
    v &= 0xFFFF
    return v - (1 << 16) if v & 0x8000 else v


def inlinable32(v):
    return _is_int_inline(_s32(v)) or v in INLINE_F32.values() or v == F32_INV2PI


def inlinable_f16(v16):
    return _is_int_inline(_s16(v16)) or v16 in F16_BITS.values()


def inlinable_bf16(v16):
    return _is_int_inline(_s16(v16)) or v16 in BF16_BITS.values()


def print_inline(cls, code):
    """Text LLVM prints for inline constant `code` (0x80..0xF8) in an operand of class cls."""
    i = _inline_int(code)
    if i is not None:
        return str(i)
    if code == 0xF8:
        if cls in ("f64", "i64"):
            return "0.15915494309189532"
        if cls == "i16":
            return "0x3118"
        return "0.15915494"
    if cls == "i16":
        return "0x%x" % F16_BITS[code]
    return FLOAT_NAMES[code]


def print_literal(cls, v):
    """Text LLVM prints for a 32-bit literal v in an operand of class cls."""
    lo = v & 0xFFFF
    if cls == "b32":
        return "lit(0x%x)" % v if inlinable32(v) else "0x%x" % v
    if cls == "i16":
        return "lit(0x%x)" % v if inlinable32(v) else "0x%x" % lo
    if cls == "f16":
        return "lit(0x%x)" % v if inlinable_f16(lo) else "0x%x" % lo
    if cls == "bf16":
        return "lit(0x%x)" % v if inlinable_bf16(lo) else "0x%x" % v
    if cls == "f64":
        if v == 0:
            return "0"
        for code, hi in F64_HI.items():
            if v == hi:
                return FLOAT_NAMES[code]
        return "0x%x" % v
    if cls == "i64":
        return "lit(0x%x)" % v if v <= 64 else "0x%x" % v
    if cls == "v2f16":
        lit = _is_int_inline(_s32(v)) or (v <= 0xFFFF and v in F16_BITS.values())
        return "lit(0x%x)" % v if lit else "0x%x" % v
    if cls == "v2bf16":
        lit = _is_int_inline(_s32(v)) or (v <= 0xFFFF and v in BF16_BITS.values())
        return "lit(0x%x)" % v if lit else "0x%x" % v
    raise ValueError(cls)


PROBE_LITERALS = [0x12345678, 0x3F800000, 0x5, 0x3C00, 0x3E22F983, 0xFFFFFFFF, 0x3118, 0xFFFFFFF0,
                  0x40000000, 0x3FC45F30, 0xBC00, 0x3F80, 0x8000, 0x10000, 0x3C003C00, 0x41, 0x3E22,
                  0x3FF00000, 0x0, 0x40, 0xBFF00000, 0x3FE00000, 0xC0100000, 0x4400, 0xFFFF,
                  0x3F000000, 0xFFFFFFC0]
PROBE_INLINE = [0x80, 0xC0, 0xC1, 0xD0, 0xF0, 0xF1, 0xF2, 0xF3, 0xF4, 0xF5, 0xF6, 0xF7, 0xF8]

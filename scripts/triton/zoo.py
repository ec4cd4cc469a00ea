"""The foreign kernel zoo: assorted Triton kernels compiled for gfx950, with inputs and expected
outputs, so the emulator is checked on much more of the ISA than the MXFP4 GEMMs exercise.

Usage: python zoo.py OUT_DIR [CASE ...]   (no CASE: all of them)
Writes OUT_DIR/<case>/{kernel.hsaco, kernel.s, in_*.bin, want_*.bin, case.json} and, once every
case is written, OUT_DIR/cases.json (the list of cases; readers treat its absence as an
incomplete zoo). Inputs are seeded and expected outputs come from pure-Python references (no
numpy: it is not in the venv), so the zoo is reproducible.

case.json: {"kernel", "grid" (workgroups), "block", "dynamic_lds" (Triton's shared memory),
"features", "args": [...], "known_failure"?}. Each argument, in order, is one of
  {"in": file}
  {"out": {"file": expected_file, "bytes": n, "dtype": d, "rtol": r, "atol": a}}
  {"i32": v} | {"i64": v} | {"f32": v} | {"null": true}
An output matches when every element satisfies |got - want| <= atol + rtol * |want| (NaN
matches NaN); rtol = atol = 0 means bit-identical. Outputs are allocated zeroed. "known_failure"
is text the emulator's failure on that case contains (an emulator bug the zoo revealed; the test
insists the case keeps failing that way until the emulator is fixed and the entry removed).
"""
import json
import math
import os
import random
import shutil
import struct
import sys
import time
import warnings
from fractions import Fraction

warnings.filterwarnings("ignore")

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402
from triton.language.extra.hip import libdevice  # noqa: E402

# Emulator bugs the zoo revealed: case -> text its failure contains (see the docstring).
KNOWN_FAILURES = {}

U = 2.0 ** -24  # f32 unit roundoff


# ---------------------------------------------------------------- number formats

def f32(x):
    """x rounded to f32 (RNE). For one +, -, *, / or sqrt of f32 operands computed in double,
    this double rounding is innocuous (53 >= 2 * 24 + 2), so it is the correctly rounded f32."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


def f16_bits(x):
    try:
        return struct.unpack("<H", struct.pack("<e", x))[0]
    except OverflowError:
        return 0x7C00 if x > 0 else 0xFC00


def f16_val(h):
    return struct.unpack("<e", struct.pack("<H", h))[0]


def f16_round(q):
    """The f16 nearest the exact rational q (ties to even), as bits; finite results only."""
    h = f16_bits(float(q))  # within one code of the answer
    near = [c for c in (h, (h + 1) & 0xFFFF, (h - 1) & 0xFFFF) if math.isfinite(f16_val(c))]
    return min(near, key=lambda c: (abs(Fraction(f16_val(c)) - q), c & 1))


def bf16_bits(x):
    """Round-to-nearest-even f32 -> bf16 of f32(x)."""
    b = struct.unpack("<I", struct.pack("<f", x))[0]
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) & 0xFFFF


def bf16_val(h):
    return struct.unpack("<f", struct.pack("<I", h << 16))[0]


def minifloat_val(c, ebits, mbits, bias, ieee):
    """Value of an 8-bit float code. ieee: inf/NaN at the top exponent (e5m2); otherwise only
    S.1111.111 is NaN (e4m3fn)."""
    s = -1.0 if c & 0x80 else 1.0
    e = (c >> mbits) & ((1 << ebits) - 1)
    m = c & ((1 << mbits) - 1)
    top = (1 << ebits) - 1
    if ieee and e == top:
        return s * math.inf if m == 0 else math.nan
    if not ieee and e == top and m == (1 << mbits) - 1:
        return math.nan
    if e == 0:
        return s * m / (1 << mbits) * 2.0 ** (1 - bias)
    return s * (1 + m / (1 << mbits)) * 2.0 ** (e - bias)


def e4m3_val(c):
    return minifloat_val(c, 4, 3, 7, False)


def e5m2_val(c):
    return minifloat_val(c, 5, 2, 15, True)


def minifloat_encode(v, val_fn):
    """Nearest finite code (ties to even mantissa, saturating): the converts' RNE + saturation."""
    best = None
    for c in range(256):
        cv = val_fn(c)
        if math.isnan(cv) or math.isinf(cv):
            continue
        key = (abs(cv - v), c & 1, (c >> 7) != (v < 0))
        if best is None or key < best[0]:
            best = (key, c, cv)
    return best[1], best[2]


FP4 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def fp4_val(c):
    v = FP4[c & 7]
    return -v if c & 8 else v


def wrap32(v):
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v >= 1 << 31 else v


def wrap64(v):
    v &= (1 << 64) - 1
    return v - (1 << 64) if v >= 1 << 63 else v


def cdiv(a, b):
    """C (truncating) division, Triton's // on signed integers."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def cmod(a, b):
    return a - cdiv(a, b) * b


FMT = {"f32": "f", "f64": "d", "f16": "e", "i8": "b", "u8": "B", "i16": "h", "u16": "H",
       "i32": "i", "u32": "I", "i64": "q", "u64": "Q"}


# ---------------------------------------------------------------- case plumbing

class Case:
    def __init__(self, out_dir, name, features):
        self.name = name
        self.features = features
        self.dir = os.path.join(out_dir, name)
        if os.path.isdir(self.dir):
            shutil.rmtree(self.dir)
        os.makedirs(self.dir)
        self.shared = None
        self.kernel = None

    def compile(self, fn, sig, consts, warps, div=(), **options):
        # Pointers 16-byte aligned (and the listed integers multiples of 16), so Triton emits
        # vector loads as it would for real tensors.
        attrs = {(i,): [["tt.divisibility", 16]] for i in div}
        src = ASTSource(fn=fn, signature=sig, constexprs=consts, attrs=attrs)
        opts = {"num_warps": warps, "num_stages": 2}
        opts.update(options)
        k = triton.compile(src, target=GPUTarget("hip", "gfx950", 64), options=opts)
        with open(os.path.join(self.dir, "kernel.hsaco"), "wb") as f:
            f.write(k.asm["hsaco"])
        with open(os.path.join(self.dir, "kernel.s"), "w") as f:
            f.write(k.asm["amdgcn"])
        self.shared = k.metadata.shared
        self.kernel = k.metadata.name
        self.warps = warps

    def _write(self, fname, dtype, vals):
        with open(os.path.join(self.dir, fname), "wb") as f:
            if dtype == "bf16":  # vals are bit patterns
                f.write(struct.pack("<%dH" % len(vals), *vals))
            else:
                f.write(struct.pack("<%d%s" % (len(vals), FMT[dtype]), *vals))
        return fname

    def inp(self, name, dtype, vals):
        return {"in": self._write("in_%s.bin" % name, dtype, vals)}

    def out(self, name, dtype, vals, rtol=0.0, atol=0.0):
        fname = self._write("want_%s.bin" % name, dtype, vals)
        size = os.path.getsize(os.path.join(self.dir, fname))
        return {"out": {"file": fname, "bytes": size, "dtype": dtype,
                        "rtol": rtol, "atol": atol}}

    def finish(self, grid, args):
        grid = list(grid) + [1] * (3 - len(grid))
        # Triton appends its global and profile scratch pointers; these kernels use neither.
        args = args + [{"null": True}, {"null": True}]
        spec = {"kernel": self.kernel, "grid": grid, "block": [64 * self.warps, 1, 1],
                "dynamic_lds": self.shared, "features": self.features, "args": args,
                "triton_version": triton.__version__}
        if self.name in KNOWN_FAILURES:
            spec["known_failure"] = KNOWN_FAILURES[self.name]
        with open(os.path.join(self.dir, "case.json"), "w") as f:
            json.dump(spec, f, indent=1)


CASES = []


def case(fn):
    CASES.append(fn)
    return fn


# ---------------------------------------------------------------- reductions

@triton.jit
def softmax_kernel(x_ptr, y_ptr, N, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * N + offs, mask=offs < N, other=-float("inf"))
    m = tl.max(x, 0)
    e = tl.exp(x - m)
    s = tl.sum(e, 0)
    tl.store(y_ptr + row * N + offs, e / s, mask=offs < N)


@case
def softmax(out_dir, rng):
    c = Case(out_dir, "softmax",
             "masked buffer loads, DPP max/sum row reductions, cross-wave reduction in LDS, "
             "v_exp_f32, IEEE f32 division (div_scale/fmas/fixup)")
    R, N = 8, 200
    c.compile(softmax_kernel, {"x_ptr": "*fp32", "y_ptr": "*fp32", "N": "i32",
                               "BLOCK": "constexpr"}, {"BLOCK": 256}, 4)
    x = [f32(rng.uniform(-5, 5)) for _ in range(R * N)]
    want = []
    for r in range(R):
        row = x[r * N:(r + 1) * N]
        m = max(row)
        e = [math.exp(v - m) for v in row]
        s = math.fsum(e)
        want += [v / s for v in e]
    # x - max is in [-10, 0]: rounding exp's argument (x * log2 e) costs <= 14.4 * 2^-24
    # relative, v_exp_f32 1 ulp, the tree sum ~10 levels of 2^-24, the division 0.5 ulp.
    c.finish([R], [c.inp("x", "f32", x), c.out("y", "f32", want, rtol=2e-6, atol=1e-9),
                   {"i32": N}])


@triton.jit
def layernorm_kernel(x_ptr, y_ptr, N, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < N
    x = tl.load(x_ptr + row * N + offs, mask=mask, other=0.0)
    mean = tl.sum(x, 0) / N
    xc = tl.where(mask, x - mean, 0.0)
    var = tl.sum(xc * xc, 0) / N
    tl.store(y_ptr + row * N + offs, xc * tl.rsqrt(var + eps), mask=mask)


@case
def layernorm(out_dir, rng):
    c = Case(out_dir, "layernorm",
             "f32 scalar argument, two-wave reductions through LDS, v_rsq_f32, v_pk_add_f32, "
             "int->float convert, v_readlane")
    R, N = 4, 300
    c.compile(layernorm_kernel, {"x_ptr": "*fp32", "y_ptr": "*fp32", "N": "i32", "eps": "fp32",
                                 "BLOCK": "constexpr"}, {"BLOCK": 512}, 2)
    x = [f32(rng.uniform(-3, 7)) for _ in range(R * N)]
    eps = f32(1e-5)
    want = []
    for r in range(R):
        row = x[r * N:(r + 1) * N]
        mean = math.fsum(row) / N
        var = math.fsum((v - mean) ** 2 for v in row) / N
        want += [(v - mean) / math.sqrt(var + eps) for v in row]
    # Outputs are O(1): atol covers the f32 mean's absolute error showing up in x - mean,
    # rtol v_rsq_f32 (1 ulp) and the variance's summation error.
    c.finish([R], [c.inp("x", "f32", x), c.out("y", "f32", want, rtol=1e-5, atol=1e-6),
                   {"i32": N}, {"f32": eps}])


@triton.jit
def scan_kernel(x_ptr, i_ptr, y_ptr, j_ptr, am_ptr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * BLOCK + offs)
    i = tl.load(i_ptr + row * BLOCK + offs)
    tl.store(y_ptr + row * BLOCK + offs, tl.cumsum(x, 0))
    tl.store(j_ptr + row * BLOCK + offs, tl.cumsum(i, 0))
    tl.store(am_ptr + row * 2, tl.argmax(x, 0))
    tl.store(am_ptr + row * 2 + 1, tl.argmin(i, 0))


@case
def scan_argmax(out_dir, rng):
    c = Case(out_dir, "scan_argmax",
             "cumsum (DPP row shifts, v_permlane16/32_swap, LDS carries), argmax/argmin "
             "(index-carrying reductions, first index on ties)")
    R, B = 3, 512
    c.compile(scan_kernel, {"x_ptr": "*fp32", "i_ptr": "*i32", "y_ptr": "*fp32", "j_ptr": "*i32",
                            "am_ptr": "*i32", "BLOCK": "constexpr"}, {"BLOCK": B}, 4)
    # Multiples of 1/8 up to 125: partial sums stay below 2^16, exact in f32 in any order.
    x = [rng.randint(-1000, 1000) / 8 for _ in range(R * B)]
    iv = [rng.randint(-10 ** 6, 10 ** 6) for _ in range(R * B)]
    wy, wj, wa = [], [], []
    for r in range(R):
        sx = si = 0
        for k in range(B):
            sx += x[r * B + k]
            si += iv[r * B + k]
            wy.append(sx)
            wj.append(si)
        row, irow = x[r * B:(r + 1) * B], iv[r * B:(r + 1) * B]
        wa += [row.index(max(row)), irow.index(min(irow))]
    c.finish([R], [c.inp("x", "f32", x), c.inp("i", "i32", iv), c.out("cumsum_f32", "f32", wy),
                   c.out("cumsum_i32", "i32", wj), c.out("argmax_argmin", "i32", wa)])


@triton.jit
def sort_kernel(x_ptr, i_ptr, y_ptr, j_ptr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = row * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.sort(tl.load(x_ptr + offs), 0))
    tl.store(j_ptr + offs, tl.sort(tl.load(i_ptr + offs), 0, descending=True))


@case
def sort(out_dir, rng):
    c = Case(out_dir, "sort",
             "bitonic sort: cross-lane exchanges by DPP (v_mov/v_xor_b32_dpp), "
             "v_permlane16/32_swap and LDS (ds_write/read_b64), compare-and-select on f32/i32")
    R, B = 2, 256
    c.compile(sort_kernel, {"x_ptr": "*fp32", "i_ptr": "*i32", "y_ptr": "*fp32", "j_ptr": "*i32",
                            "BLOCK": "constexpr"}, {"BLOCK": B}, 2)
    x = [f32(rng.uniform(-100, 100)) for _ in range(R * B)]
    iv = [rng.randint(-2 ** 31, 2 ** 31 - 1) for _ in range(R * B)]
    wy, wj = [], []
    for r in range(R):
        wy += sorted(x[r * B:(r + 1) * B])
        wj += sorted(iv[r * B:(r + 1) * B], reverse=True)
    c.finish([R], [c.inp("x", "f32", x), c.inp("i", "i32", iv), c.out("sorted_f32", "f32", wy),
                   c.out("sorted_i32_desc", "i32", wj)])


# ---------------------------------------------------------------- atomics

@triton.jit
def atomics_kernel(i_ptr, out_ptr, f_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    v = tl.load(i_ptr + offs, mask=mask, other=0)
    tl.atomic_add(out_ptr + (v & 15), 1, mask=mask)
    tl.atomic_max(out_ptr + 16 + (v & 3), v, mask=mask)
    tl.atomic_min(out_ptr + 20 + (v & 3), -v, mask=mask)
    tl.atomic_or(out_ptr + 24 + (v & 3), v >> 4, mask=mask)
    tl.atomic_xor(out_ptr + 28 + (v & 3), v, mask=mask)
    tl.atomic_add(f_ptr + (v & 3), (v & 255).to(tl.float32), mask=mask)


@case
def atomics(out_dir, rng):
    c = Case(out_dir, "atomics",
             "histogram and reductions by global atomics: add (wave-aggregated with "
             "mbcnt/bcnt), smax, smin, or, xor on i32, add on f32; masked tail")
    n, BLOCK = 3000, 512
    c.compile(atomics_kernel, {"i_ptr": "*i32", "out_ptr": "*i32", "f_ptr": "*fp32", "n": "i32",
                               "BLOCK": "constexpr"}, {"BLOCK": BLOCK}, 4)
    iv = [rng.randint(0, 1 << 20) for _ in range(n)]
    want = [sum(1 for v in iv if v & 15 == b) for b in range(16)]
    want += [max([0] + [v for v in iv if v & 3 == b]) for b in range(4)]
    want += [min([0] + [-v for v in iv if v & 3 == b]) for b in range(4)]
    orv, xorv = [0] * 4, [0] * 4
    for v in iv:
        orv[v & 3] |= v >> 4
        xorv[v & 3] ^= v
    want += orv + xorv
    # Integer-valued f32 sums stay below 2^24, so every order of the atomic adds is exact.
    fsum = [float(sum(v & 255 for v in iv if v & 3 == b)) for b in range(4)]
    c.finish([(n + BLOCK - 1) // BLOCK],
             [c.inp("i", "i32", iv), c.out("i32_atomics", "i32", want),
              c.out("f32_atomic_add", "f32", fsum), {"i32": n}])


@triton.jit
def atomics_wide_kernel(i_ptr, i64_ptr, f64_ptr, f16_ptr, bf16_ptr, fmx_ptr, cas_ptr, old_ptr,
                        hist_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    v = tl.load(i_ptr + offs, mask=mask, other=0)
    tl.atomic_add(i64_ptr + (v & 3), v.to(tl.int64) << 20, mask=mask)
    tl.atomic_add(f64_ptr + (v & 3), (v & 1023).to(tl.float64), mask=mask)
    tl.atomic_add(f16_ptr + (v & 7), (v & 1).to(tl.float16), mask=mask)
    tl.atomic_add(bf16_ptr + (v & 15), (v & 1).to(tl.bfloat16), mask=mask)
    f = (v - 500000).to(tl.float32) * 0.25
    tl.atomic_max(fmx_ptr + (v & 3), f, mask=mask)
    tl.atomic_min(fmx_ptr + 4 + (v & 3), f, mask=mask)
    # Every lane owns its address, so the returned old values are deterministic. The CAS is
    # unmasked: the buffer covers the whole grid and the tail lanes swap 0 for 0.
    old = tl.atomic_cas(cas_ptr + offs, tl.zeros_like(v), v, sem="relaxed")
    old2 = tl.atomic_xchg(cas_ptr + offs, v + 1, mask=mask)
    tl.store(old_ptr + offs, old + old2 * 3, mask=mask)
    tl.atomic_add(hist_ptr + tl.arange(0, 64), tl.histogram(v & 63, 64, mask=mask))


@case
def atomics_wide(out_dir, rng):
    c = Case(out_dir, "atomics_wide",
             "64-bit atomics (buffer_atomic_add_x2, buffer_atomic_add_f64), packed f16/bf16 "
             "atomic adds (global_atomic_pk_add_f16/bf16), f32 max/min as signed/unsigned "
             "integer atomics, returning global_atomic_cmpswap/swap, LDS atomics (ds_add_u32) "
             "of tl.histogram")
    n, BLOCK = 3000, 512
    grid = (n + BLOCK - 1) // BLOCK
    sig = {"i_ptr": "*i32", "i64_ptr": "*i64", "f64_ptr": "*fp64", "f16_ptr": "*fp16",
           "bf16_ptr": "*bf16", "fmx_ptr": "*fp32", "cas_ptr": "*i32", "old_ptr": "*i32",
           "hist_ptr": "*i32", "n": "i32", "BLOCK": "constexpr"}
    c.compile(atomics_wide_kernel, sig, {"BLOCK": BLOCK}, 4)
    iv = [rng.randint(0, 1 << 20) for _ in range(n)]

    def per(buckets, f):
        return [f([v for v in iv if v % buckets == b]) for b in range(buckets)]

    # All sums are integers the format holds exactly (f16 below 2048, bf16 below 256), so the
    # order of the atomic adds does not matter.
    fvals = [(v - 500000) * 0.25 for v in iv]
    want_cas = [v + 1 for v in iv] + [0] * (grid * BLOCK - n)
    c.finish([grid],
             [c.inp("i", "i32", iv),
              c.out("i64_add", "i64", per(4, lambda vs: sum(v << 20 for v in vs))),
              c.out("f64_add", "f64", per(4, lambda vs: float(sum(v & 1023 for v in vs)))),
              c.out("f16_add", "f16", per(8, lambda vs: float(sum(v & 1 for v in vs)))),
              c.out("bf16_add", "bf16", per(16, lambda vs: bf16_bits(sum(v & 1 for v in vs)))),
              c.out("f32_max_min", "f32",
                    [max([0.0] + [f for v, f in zip(iv, fvals) if v & 3 == b]) for b in range(4)]
                    + [min([0.0] + [f for v, f in zip(iv, fvals) if v & 3 == b])
                       for b in range(4)]),
              c.out("cas_xchg_memory", "i32", want_cas),
              c.out("cas_xchg_returned", "i32", [3 * v for v in iv]),
              c.out("histogram", "i32", per(64, len)), {"i32": n}])


# ---------------------------------------------------------------- elementwise

@triton.jit
def math_kernel(x_ptr, i_ptr, y_ptr, z_ptr, j_ptr, h_ptr, b_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=1.0)
    i = tl.load(i_ptr + offs, mask=mask, other=1)
    y = tl.sqrt(tl.abs(x)) + tl.exp2(x * 0.25) * tl.log2(tl.abs(x) + 1.0)
    z = (tl.sin(x) + tl.cos(x * 0.5) + tl.math.erf(x * 0.2) + tl.math.div_rn(x, 3.0)
         + tl.floor(x * 1.7))
    j = ((i * 7) >> 3) ^ (i // 5) + (i % 9) + tl.minimum(i, 1000) - tl.maximum(i, -1000)
    tl.store(y_ptr + offs, y, mask=mask)
    tl.store(z_ptr + offs, z, mask=mask)
    tl.store(j_ptr + offs, j, mask=mask)
    tl.store(h_ptr + offs, (x * 1000.0).to(tl.float16), mask=mask)
    tl.store(b_ptr + offs, (x * 1.0e-3).to(tl.bfloat16), mask=mask)


@case
def elementwise_math(out_dir, rng):
    c = Case(out_dir, "elementwise_math",
             "f32 sqrt/exp2/log2 (v_sqrt/v_exp/v_log with denormal scaling), libdevice "
             "sin/cos/erf (range reduction, v_ldexp, v_cmp_class), div_rn, floor, i32 div/mod "
             "by constants (v_mul_hi_i32), shifts/min/max, f16 stores (v_fma_mixlo_f16) and "
             "bf16 stores (v_cvt_pk_bf16_f32), divergent branches")
    n = 1000
    sig = {"x_ptr": "*fp32", "i_ptr": "*i32", "y_ptr": "*fp32", "z_ptr": "*fp32",
           "j_ptr": "*i32", "h_ptr": "*fp16", "b_ptr": "*bf16", "n": "i32",
           "BLOCK": "constexpr"}
    c.compile(math_kernel, sig, {"BLOCK": 256}, 4)
    x = [f32(rng.uniform(-20, 20)) for _ in range(n)]
    x[0], x[1], x[2] = f32(1e-40), -0.0, 100.0  # f32 denormal, -0, f16 overflow after * 1000
    # LLVM fuses (x * 1000).to(f16) into v_fma_mixlo_f16, which may round once where the
    # program rounds twice (f32, then f16): the data must not tell the two apart.
    for v in x:
        if 0 < abs(v * 1000) < 65504:
            assert f16_bits(f32(v * 1000.0)) == f16_round(Fraction(v) * 1000), v
    iv = [rng.randint(-100000, 100000) for _ in range(n)]
    # Constants are f32 in the kernel: scale by their f32 values, one rounding per operation.
    k17, k02, k1e3 = f32(1.7), f32(0.2), f32(1e-3)
    want_y = [math.sqrt(abs(v)) + 2 ** f32(v * 0.25) * math.log2(abs(v) + 1.0) for v in x]
    want_z = [math.sin(v) + math.cos(f32(v * 0.5)) + math.erf(f32(v * k02)) + f32(v / 3.0)
              + math.floor(f32(v * k17)) for v in x]
    want_j = [wrap32((wrap32(v * 7) >> 3)
                     ^ (cdiv(v, 5) + cmod(v, 9) + min(v, 1000) - max(v, -1000))) for v in iv]
    want_h = [f16_val(f16_bits(f32(v * 1000.0))) for v in x]
    want_b = [bf16_bits(f32(v * k1e3)) for v in x]
    # y: sqrt, exp2, log2 are 1-ulp hardware ops plus the f32 roundings of |x| + 1, the
    # product and the sum: a few 2^-24 relative. z: libdevice sin/cos/erf are within 2 ulp, but
    # z sums terms of mixed sign (floor is up to 34), so its error is absolute: a few ulp of 34.
    c.finish([(n + 255) // 256],
             [c.inp("x", "f32", x), c.inp("i", "i32", iv),
              c.out("y", "f32", want_y, rtol=1e-5, atol=1e-6),
              c.out("z", "f32", want_z, rtol=1e-5, atol=2e-6),
              c.out("j", "i32", want_j), c.out("h", "f16", want_h), c.out("b", "bf16", want_b),
              {"i32": n}])


@triton.jit
def half_kernel(h_ptr, g_ptr, b_ptr, c_ptr, u_ptr, hm_ptr, ha_ptr, hx_ptr, hi_ptr, bm_ptr, ba_ptr,
                uo_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    h = tl.load(h_ptr + offs, mask=mask)
    g = tl.load(g_ptr + offs, mask=mask)
    b = tl.load(b_ptr + offs, mask=mask)
    c = tl.load(c_ptr + offs, mask=mask)
    u = tl.load(u_ptr + offs, mask=mask)
    tl.store(hm_ptr + offs, h * g, mask=mask)
    tl.store(ha_ptr + offs, h + g, mask=mask)
    tl.store(hx_ptr + offs, tl.maximum(h, g), mask=mask)
    tl.store(hi_ptr + offs, h.to(tl.int16), mask=mask)
    tl.store(bm_ptr + offs, b * c, mask=mask)
    tl.store(ba_ptr + offs, b + c, mask=mask)
    tl.store(uo_ptr + offs, (u.to(tl.float16) * h).to(tl.float32) + u.to(tl.float32), mask=mask)


@case
def half_math(out_dir, rng):
    c = Case(out_dir, "half_math",
             "f16/bf16 vector loads and stores, packed math (v_pk_mul/add/max_f16, "
             "v_pk_mul/add_f32), bf16 arithmetic in f32 rounded back by integer ops, SDWA "
             "converts (f16<->f32, f16->i16, u16->f16, v_cvt_f32_ubyte0..3), v_perm_b32")
    n = 1008  # a multiple of 16 (declared so: vector loads) that leaves a masked tail
    sig = {"h_ptr": "*fp16", "g_ptr": "*fp16", "b_ptr": "*bf16", "c_ptr": "*bf16", "u_ptr": "*u8",
           "hm_ptr": "*fp16", "ha_ptr": "*fp16", "hx_ptr": "*fp16", "hi_ptr": "*i16",
           "bm_ptr": "*bf16", "ba_ptr": "*bf16", "uo_ptr": "*fp32", "n": "i32",
           "BLOCK": "constexpr"}
    # Separate multiplies and adds only: no contraction, so each result is one rounding.
    c.compile(half_kernel, sig, {"BLOCK": 512}, 2, div=tuple(range(13)), enable_fp_fusion=False)

    def rand_f16():
        # Any finite f16, denormals included, |x| < 1000 so h.to(int16) is defined.
        while True:
            v = f16_val(rng.randrange(0x10000))
            if math.isfinite(v) and abs(v) < 1000:
                return v

    def rand_bf16():
        return bf16_bits(rng.choice([1, -1]) * 2.0 ** rng.uniform(-30, 30))

    h = [rand_f16() for _ in range(n)]
    # max(-0, +0) may return either zero, so a pair of zeros gets the same sign.
    g = [x if x == y == 0 else y for x, y in zip(h, (rand_f16() for _ in range(n)))]
    b = [rand_bf16() for _ in range(n)]
    cc = [rand_bf16() for _ in range(n)]
    u = [rng.randrange(256) for _ in range(n)]
    # Products of two f16 or two bf16, and sums of two f16, are exact in double, so each
    # reference rounds once, as the hardware does (directly, or through f32, which is
    # innocuous: 24 >= 2 * 11 + 2). A bf16 sum rounds to double, f32, then bf16: each step
    # innocuous (53 >= 2 * 24 + 2, 24 >= 2 * 8 + 2), like the kernel's f32 add and convert.
    want_hm = [f16_val(f16_bits(x * y)) for x, y in zip(h, g)]
    want_ha = [f16_val(f16_bits(x + y)) for x, y in zip(h, g)]
    want_hx = [max(x, y) for x, y in zip(h, g)]
    want_hi = [int(x) for x in h]
    want_bm = [bf16_bits(bf16_val(x) * bf16_val(y)) for x, y in zip(b, cc)]
    want_ba = [bf16_bits(bf16_val(x) + bf16_val(y)) for x, y in zip(b, cc)]
    want_uo = [f32(f16_val(f16_bits(x * y)) + x) for x, y in zip(u, h)]
    c.finish([(n + 511) // 512],
             [c.inp("h", "f16", h), c.inp("g", "f16", g), c.inp("b", "bf16", b),
              c.inp("c", "bf16", cc), c.inp("u", "u8", u),
              c.out("f16_mul", "f16", want_hm), c.out("f16_add", "f16", want_ha),
              c.out("f16_max", "f16", want_hx), c.out("f16_to_i16", "i16", want_hi),
              c.out("bf16_mul", "bf16", want_bm), c.out("bf16_add", "bf16", want_ba),
              c.out("u8_f16_mixed", "f32", want_uo), {"i32": n}])


@triton.jit
def integer_kernel(a_ptr, b_ptr, p_ptr, q_ptr, r_ptr, s_ptr, x_ptr, y_ptr, hi_ptr, uq_ptr,
                   bits_ptr, h_ptr, g_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    a = tl.load(a_ptr + offs, mask=mask, other=1)
    b = tl.load(b_ptr + offs, mask=mask, other=1)
    x = tl.load(x_ptr + offs, mask=mask, other=1)
    y = tl.load(y_ptr + offs, mask=mask, other=1)
    h = tl.load(h_ptr + offs, mask=mask, other=0)
    tl.store(p_ptr + offs, a * b, mask=mask)
    tl.store(q_ptr + offs, a // b, mask=mask)
    tl.store(r_ptr + offs, a % b, mask=mask)
    tl.store(s_ptr + offs, ((a >> 7) ^ (b << 3)) + tl.maximum(a, b), mask=mask)
    tl.store(hi_ptr + offs, tl.umulhi(x, y), mask=mask)
    tl.store(uq_ptr + offs, (x // y) * 3 + x % y, mask=mask)
    xi = x.to(tl.int32, bitcast=True)
    yi = y.to(tl.int32, bitcast=True)
    tl.store(bits_ptr + offs, libdevice.popc(xi) + libdevice.clz(yi) * 64, mask=mask)
    tl.store(g_ptr + offs, (h * h + (h >> 2)).to(tl.int8), mask=mask)


@case
def integer_math(out_dir, rng):
    c = Case(out_dir, "integer_math",
             "64-bit integer multiply (v_mad_u64_u32, v_mul_hi), carry chains (v_addc/v_subb), "
             "the i64 division expansion, 64-bit shifts/compares, u32 division by a variable "
             "(v_rcp_iflag_f32 + corrections), umulhi, popcount (v_bcnt), clz (v_ffbh), i16 "
             "arithmetic truncated to i8 (short loads, byte stores)")
    n = 500
    sig = {"a_ptr": "*i64", "b_ptr": "*i64", "p_ptr": "*i64", "q_ptr": "*i64", "r_ptr": "*i64",
           "s_ptr": "*i64", "x_ptr": "*u32", "y_ptr": "*u32", "hi_ptr": "*u32", "uq_ptr": "*u32",
           "bits_ptr": "*i32", "h_ptr": "*i16", "g_ptr": "*i8", "n": "i32",
           "BLOCK": "constexpr"}
    c.compile(integer_kernel, sig, {"BLOCK": 256}, 4)

    def rand_i64():
        bits = rng.choice([8, 20, 31, 33, 47, 62, 63])
        return rng.randint(-(1 << bits), (1 << bits) - 1) or 1

    a = [rand_i64() for _ in range(n)]
    b = [rand_i64() for _ in range(n)]
    a[0], b[0] = -(1 << 63), 1  # INT64_MIN / 1
    x = [rng.randrange(1 << rng.choice([8, 16, 32])) for _ in range(n)]
    y = [rng.randrange(1, 1 << rng.choice([4, 12, 32])) for _ in range(n)]
    h = [rng.randint(-(1 << 15), (1 << 15) - 1) for _ in range(n)]

    def wrap(v, bits):
        v &= (1 << bits) - 1
        return v - (1 << bits) if v >= 1 << (bits - 1) else v

    want_p = [wrap64(p * q) for p, q in zip(a, b)]
    want_q = [wrap64(cdiv(p, q)) for p, q in zip(a, b)]
    want_r = [cmod(p, q) for p, q in zip(a, b)]
    want_s = [wrap64(((p >> 7) ^ wrap64(q << 3)) + max(p, q)) for p, q in zip(a, b)]
    want_hi = [(p * q) >> 32 for p, q in zip(x, y)]
    want_uq = [((p // q) * 3 + p % q) & 0xFFFFFFFF for p, q in zip(x, y)]
    want_bits = [bin(p).count("1") + (32 - q.bit_length()) * 64 for p, q in zip(x, y)]
    want_g = [wrap(wrap(v * v, 16) + (v >> 2), 8) for v in h]
    c.finish([(n + 255) // 256],
             [c.inp("a", "i64", a), c.inp("b", "i64", b), c.out("mul", "i64", want_p),
              c.out("div", "i64", want_q), c.out("mod", "i64", want_r),
              c.out("shift_xor_max", "i64", want_s), c.inp("x", "u32", x),
              c.inp("y", "u32", y), c.out("umulhi", "u32", want_hi),
              c.out("udiv_mod", "u32", want_uq), c.out("popc_clz", "i32", want_bits),
              c.inp("h", "i16", h), c.out("i16_to_i8", "i8", want_g), {"i32": n}])


@triton.jit
def f64_kernel(a_ptr, b_ptr, c_ptr, s_ptr, p_ptr, q_ptr, r_ptr, f_ptr, h_ptr, n,
               BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    a = tl.load(a_ptr + offs, mask=mask, other=1.0)
    b = tl.load(b_ptr + offs, mask=mask, other=1.0)
    c = tl.load(c_ptr + offs, mask=mask, other=1.0)
    tl.store(s_ptr + offs, a + b, mask=mask)
    tl.store(p_ptr + offs, a * b, mask=mask)
    tl.store(q_ptr + offs, a / b, mask=mask)
    tl.store(r_ptr + offs, tl.sqrt(tl.abs(a)), mask=mask)
    tl.store(f_ptr + offs, tl.fma(a, b, c), mask=mask)
    tl.store(h_ptr + offs, a.to(tl.float32), mask=mask)


def fraction_to_float(q):
    # int / int true division is correctly rounded in CPython.
    return q.numerator / q.denominator


@case
def f64_math(out_dir, rng):
    c = Case(out_dir, "f64_math",
             "f64 add/mul/fma (v_add_f64, v_mul_f64, v_fma_f64), correctly rounded division "
             "(v_div_scale/fmas/fixup_f64, v_rcp_f64) and square root (v_rsq_f64, denormal "
             "scaling, v_cmp_class_f64), f64->f32 convert, 64-bit vector loads/stores")
    n = 500
    sig = {"a_ptr": "*fp64", "b_ptr": "*fp64", "c_ptr": "*fp64", "s_ptr": "*fp64",
           "p_ptr": "*fp64", "q_ptr": "*fp64", "r_ptr": "*fp64", "f_ptr": "*fp64",
           "h_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}
    c.compile(f64_kernel, sig, {"BLOCK": 256}, 4, enable_fp_fusion=False)

    def rand_f64():
        return rng.choice([1, -1]) * rng.uniform(1, 2) * 2.0 ** rng.randint(-60, 60)

    a = [rand_f64() for _ in range(n)]
    b = [rand_f64() for _ in range(n)]
    cc = [rand_f64() for _ in range(n)]
    a[1], a[2], a[3] = 5e-324, -0.0, 2.0 ** -1030  # denormals and -0 through sqrt
    want_f = [fraction_to_float(Fraction(x) * Fraction(y) + Fraction(z))
              for x, y, z in zip(a, b, cc)]
    # Python's +, *, / and math.sqrt on doubles are correctly rounded, as is the kernel: exact.
    c.finish([(n + 255) // 256],
             [c.inp("a", "f64", a), c.inp("b", "f64", b), c.inp("c", "f64", cc),
              c.out("add", "f64", [x + y for x, y in zip(a, b)]),
              c.out("mul", "f64", [x * y for x, y in zip(a, b)]),
              c.out("div", "f64", [x / y for x, y in zip(a, b)]),
              c.out("sqrt", "f64", [math.sqrt(abs(x)) for x in a]),
              c.out("fma", "f64", want_f),
              c.out("to_f32", "f32", [f32(x) for x in a]),
              {"i32": n}])


@triton.jit
def fp8_convert_kernel(x_ptr, f8_ptr, b8_ptr, back_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    f8 = x.to(tl.float8e4nv)
    b8 = x.to(tl.float8e5)
    tl.store(f8_ptr + offs, f8, mask=m)
    tl.store(b8_ptr + offs, b8, mask=m)
    tl.store(back_ptr + offs, f8.to(tl.float32) + b8.to(tl.float32), mask=m)


@case
def fp8_convert(out_dir, rng):
    c = Case(out_dir, "fp8_convert",
             "f32 -> e4m3/e5m2 with RNE and saturation and back (v_cvt_scalef32_pk_fp8_f32, "
             "_bf8_f32, _f32_fp8, _f32_bf8; s_setreg of MODE.fp16_ovfl for saturation), "
             "byte stores")
    n = 300
    c.compile(fp8_convert_kernel, {"x_ptr": "*fp32", "f8_ptr": "*fp8e4nv", "b8_ptr": "*fp8e5",
                                   "back_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"},
              {"BLOCK": 256}, 4)
    x = [f32(rng.choice([1, -1]) * 2.0 ** rng.uniform(-12, 9)) for _ in range(n)]
    # Zero, exact ties (1 + 1/16, 1 + 3/16 round to even) and e4m3 saturation (beyond 448).
    x[0], x[1], x[2], x[3], x[4] = 0.0, 1.0625, 1.1875, 500.0, -1000.0
    wf = [minifloat_encode(v, e4m3_val) for v in x]
    wb = [minifloat_encode(v, e5m2_val) for v in x]
    c.finish([(n + 255) // 256],
             [c.inp("x", "f32", x), c.out("e4m3", "u8", [code for code, _ in wf]),
              c.out("e5m2", "u8", [code for code, _ in wb]),
              c.out("back", "f32", [p + q for (_, p), (_, q) in zip(wf, wb)]), {"i32": n}])


@triton.jit
def grid3_kernel(out_ptr, X: tl.constexpr):
    x = tl.program_id(0)
    y = tl.program_id(1)
    z = tl.program_id(2)
    nx = tl.num_programs(0)
    ny = tl.num_programs(1)
    offs = tl.arange(0, X)
    idx = ((z * ny + y) * nx + x) * X + offs
    tl.store(out_ptr + idx, x * 1000000 + y * 10000 + z * 100 + offs)


@case
def grid3(out_dir, rng):
    c = Case(out_dir, "grid3",
             "3-D grid: workgroup ids x/y/z in SGPRs, grid size from the hidden block-count "
             "kernel arguments")
    G = (3, 4, 5)
    c.compile(grid3_kernel, {"out_ptr": "*i32", "X": "constexpr"}, {"X": 64}, 1)
    want = [x * 1000000 + y * 10000 + z * 100 + o
            for z in range(G[2]) for y in range(G[1]) for x in range(G[0]) for o in range(64)]
    c.finish(G, [c.out("ids", "i32", want)])


@triton.jit
def transpose_kernel(x_ptr, y_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
    om = tl.program_id(0) * BM + tl.arange(0, BM)
    on = tl.program_id(1) * BN + tl.arange(0, BN)
    mask = (om[:, None] < M) & (on[None, :] < N)
    t = tl.load(x_ptr + om[:, None] * N + on[None, :], mask=mask)
    tl.store(y_ptr + on[:, None] * M + om[None, :], tl.trans(t), mask=tl.trans(mask))


@case
def transpose(out_dir, rng):
    c = Case(out_dir, "transpose",
             "bf16 tile transpose: layout conversion through LDS (ds_write/ds_read of 16-bit "
             "lanes), 2-D masks on ragged edges")
    M, N, BM, BN = 100, 72, 64, 32
    c.compile(transpose_kernel, {"x_ptr": "*bf16", "y_ptr": "*bf16", "M": "i32", "N": "i32",
                                 "BM": "constexpr", "BN": "constexpr"},
              {"BM": BM, "BN": BN}, 4, div=(0, 1))
    x = [rng.randrange(0x10000) for _ in range(M * N)]
    want = [x[i * N + j] for j in range(N) for i in range(M)]
    c.finish([(M + BM - 1) // BM, (N + BN - 1) // BN],
             [c.inp("x", "bf16", x), c.out("y", "bf16", want), {"i32": M}, {"i32": N}])


# ---------------------------------------------------------------- GEMMs

@triton.jit
def gemm_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr,
                BK: tl.constexpr, ACC: tl.constexpr):
    # A [M, K] row-major, B [K, N] row-major, C [M, N] row-major.
    pm = tl.program_id(0)
    pn = tl.program_id(1)
    om = pm * BM + tl.arange(0, BM)
    on = pn * BN + tl.arange(0, BN)
    ok = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=ACC)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + om[:, None] * K + (k + ok)[None, :])
        b = tl.load(b_ptr + (k + ok)[:, None] * N + on[None, :])
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + om[:, None] * N + on[None, :], acc)


def matmul(av, bv, M, N, K):
    """Exact products summed with fsum (correctly rounded), and per-element sum of |products|."""
    cols = [bv[j::N] for j in range(N)]
    want, mags = [], []
    for i in range(M):
        row = av[i * K:(i + 1) * K]
        for col in cols:
            prods = [p * q for p, q in zip(row, col)]
            want.append(math.fsum(prods))
            mags.append(math.fsum(abs(p) for p in prods))
    return want, mags


def lowest_bit(values):
    """The exponent of the lowest set bit over all nonzero values (each a multiple of 2^that)."""
    low = None
    for x in values:
        if x:
            n, d = x.as_integer_ratio()
            e = -(d.bit_length() - 1) if d > 1 else (n & -n).bit_length() - 1
            low = e if low is None else min(low, e)
    return low or 0


def gemm_tolerance(av, bv, mags, K):
    """(rtol, atol) of a float GEMM's f32 result. Zero when provably exact: every partial sum,
    in any order, is a multiple of the products' lowest bit no larger than max sum |products|,
    so exact in f32 if that ratio is below 2^24. Otherwise any order of f32 additions of K exact
    products errs by at most (K-1)u * sum |products| (Higham; rounded up to K u), plus the f32
    rounding of the stored reference (rtol u)."""
    granule = 2.0 ** (lowest_bit(av) + lowest_bit(bv))
    if max(mags) / granule < 2 ** 24:
        return 0.0, 0.0
    return U, K * U * max(mags)


GEMM_TYPES = {
    # dtype: (Triton pointer type, input file dtype, accumulator)
    "bf16": ("*bf16", "bf16", tl.float32),
    "f16": ("*fp16", "f16", tl.float32),
    "e4m3": ("*fp8e4nv", "u8", tl.float32),
    "e5m2": ("*fp8e5", "u8", tl.float32),
    "i8": ("*i8", "i8", tl.int32),
    "f32": ("*fp32", "f32", tl.float32),
}


def gemm_inputs(dt, count, rng):
    """(file values, numeric values) of `count` random elements of `dt`."""
    if dt == "bf16":
        # Multiples of 2^-7 in (-2, 2): full 8-bit significands, and with K <= 256 every partial
        # sum is a multiple of 2^-14 below 2^10, so exact in f32 in any order.
        bits = [bf16_bits(rng.randint(-255, 255) / 128) for _ in range(count)]
        return bits, [bf16_val(h) for h in bits]
    if dt == "f16":
        vals = [f16_val(f16_bits(rng.uniform(-2, 2))) for _ in range(count)]
        return vals, vals
    if dt in ("e4m3", "e5m2"):
        val = e4m3_val if dt == "e4m3" else e5m2_val
        # Every finite code below 8 in magnitude, denormals included.
        codes = [c for c in range(256) if math.isfinite(val(c)) and abs(val(c)) < 8]
        picked = [rng.choice(codes) for _ in range(count)]
        return picked, [val(c) for c in picked]
    if dt == "i8":
        vals = [rng.randint(-128, 127) for _ in range(count)]
        return vals, vals
    vals = [f32(rng.uniform(-2, 2)) for _ in range(count)]
    return vals, vals


def gemm_case(name, dta, dtb, BM, BN, BK, warps, nonkdim, K, features):
    def build(out_dir, rng):
        c = Case(out_dir, name, features)
        M = N = 64
        ta, fa, acc = GEMM_TYPES[dta]
        tb, fb, _ = GEMM_TYPES[dtb]
        sig = {"a_ptr": ta, "b_ptr": tb, "c_ptr": "*i32" if acc == tl.int32 else "*fp32",
               "M": "i32", "N": "i32", "K": "i32", "BM": "constexpr", "BN": "constexpr",
               "BK": "constexpr", "ACC": "constexpr"}
        c.compile(gemm_kernel, sig, {"BM": BM, "BN": BN, "BK": BK, "ACC": acc}, warps,
                  div=(0, 1, 2, 3, 4, 5), matrix_instr_nonkdim=nonkdim)
        a_file, av = gemm_inputs(dta, M * K, rng)
        b_file, bv = gemm_inputs(dtb, K * N, rng)
        want, mags = matmul(av, bv, M, N, K)
        if acc == tl.int32:
            out = c.out("c", "i32", [int(v) for v in want])
        else:
            rtol, atol = gemm_tolerance(av, bv, mags, K)
            out = c.out("c", "f32", want, rtol=rtol, atol=atol)
        c.finish([M // BM, N // BN], [c.inp("a", fa, a_file), c.inp("b", fb, b_file), out,
                                      {"i32": M}, {"i32": N}, {"i32": K}])
    build.__name__ = name
    return case(build)


gemm_case("gemm_bf16_mfma32", "bf16", "bf16", 64, 64, 64, 4, 32, 256,
          "bf16 tl.dot: v_mfma_f32_32x32x16_bf16, global_load_lds_dwordx4 (direct-to-LDS), "
          "ds_read_b64_tr_b16 transposing LDS reads, K loop with s_barrier")
gemm_case("gemm_bf16_mfma16", "bf16", "bf16", 32, 32, 64, 4, 16, 256,
          "bf16 tl.dot: v_mfma_f32_16x16x32_bf16")
gemm_case("gemm_f16", "f16", "f16", 32, 32, 64, 2, 0, 256,
          "f16 tl.dot: v_mfma_f32_32x32x16_f16, ds_bpermute_b32")
gemm_case("gemm_e4m3", "e4m3", "e4m3", 64, 64, 128, 4, 0, 256,
          "fp8 e4m3 tl.dot: v_mfma_f32_32x32x64_f8f6f4 (unscaled, cbsz/blgp = fp8), "
          "ds_read_b64_tr_b8, fp8 denormals")
gemm_case("gemm_e4m3_e5m2", "e4m3", "e5m2", 32, 32, 128, 4, 16, 256,
          "mixed fp8 tl.dot (A e4m3, B e5m2): f8f6f4 MFMA with different A/B formats, 16x16")
gemm_case("gemm_i8", "i8", "i8", 32, 32, 64, 4, 0, 256,
          "int8 tl.dot with i32 accumulator: v_mfma_i32_32x32x32_i8, global_load_lds_dword")
gemm_case("gemm_f32", "f32", "f32", 32, 32, 32, 4, 0, 64,
          "fp32 tl.dot (IEEE, no xf32): v_mfma_f32_32x32x2_f32, global_load_lds_dword(x4), "
          "ds_read2_b32/ds_read2st64_b32")


gemm_case("gemm_f16_mfma16", "f16", "f16", 32, 32, 64, 4, 16, 256,
          "f16 tl.dot: v_mfma_f32_16x16x32_f16")
gemm_case("gemm_i8_mfma16", "i8", "i8", 32, 32, 128, 4, 16, 256,
          "int8 tl.dot: v_mfma_i32_16x16x64_i8")


@triton.jit
def gemm_masked_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr,
                       BK: tl.constexpr, SPLIT_K: tl.constexpr):
    # Masked on every edge; program_id(2) takes every SPLIT_K-th K tile and, when K is split,
    # the partial tiles meet in C through f32 atomic adds.
    pm = tl.program_id(0)
    pn = tl.program_id(1)
    ps = tl.program_id(2)
    om = pm * BM + tl.arange(0, BM)
    on = pn * BN + tl.arange(0, BN)
    ok = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(ps * BK, K, BK * SPLIT_K):
        a = tl.load(a_ptr + om[:, None] * K + (k + ok)[None, :],
                    mask=(om[:, None] < M) & ((k + ok)[None, :] < K), other=0.0)
        b = tl.load(b_ptr + (k + ok)[:, None] * N + on[None, :],
                    mask=((k + ok)[:, None] < K) & (on[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
    cmask = (om[:, None] < M) & (on[None, :] < N)
    if SPLIT_K == 1:
        tl.store(c_ptr + om[:, None] * N + on[None, :], acc, mask=cmask)
    else:
        tl.atomic_add(c_ptr + om[:, None] * N + on[None, :], acc, mask=cmask)


def gemm_masked_case(name, M, N, K, BM, BN, BK, split_k, features):
    def build(out_dir, rng):
        c = Case(out_dir, name, features)
        sig = {"a_ptr": "*bf16", "b_ptr": "*bf16", "c_ptr": "*fp32", "M": "i32", "N": "i32",
               "K": "i32", "BM": "constexpr", "BN": "constexpr", "BK": "constexpr",
               "SPLIT_K": "constexpr"}
        c.compile(gemm_masked_kernel, sig, {"BM": BM, "BN": BN, "BK": BK, "SPLIT_K": split_k},
                  4, div=(0, 1, 2))
        a_file, av = gemm_inputs("bf16", M * K, rng)
        b_file, bv = gemm_inputs("bf16", K * N, rng)
        want, mags = matmul(av, bv, M, N, K)
        # bf16 inputs as in gemm_inputs: every partial sum (and so every order of the split-K
        # atomic adds) is exact in f32.
        assert gemm_tolerance(av, bv, mags, K) == (0.0, 0.0)
        c.finish([(M + BM - 1) // BM, (N + BN - 1) // BN, split_k],
                 [c.inp("a", "bf16", a_file), c.inp("b", "bf16", b_file),
                  c.out("c", "f32", want), {"i32": M}, {"i32": N}, {"i32": K}])
    build.__name__ = name
    return case(build)


gemm_masked_case("gemm_bf16_ragged", 50, 70, 100, 32, 32, 32, 1,
                 "bf16 tl.dot with M, N, K off the tile grid: masked 16-bit loads with zero "
                 "fill staged through LDS (ds_write_b16), masked stores on every edge")
gemm_masked_case("gemm_bf16_splitk", 64, 64, 256, 32, 32, 32, 4,
                 "split-K bf16 tl.dot on a 3-D grid: global_atomic_add_f32 of whole MFMA tiles "
                 "into C, buffer_wbl2/buffer_inv release/acquire")


@triton.jit
def mx_gemm_kernel(a_ptr, b_ptr, sa_ptr, sb_ptr, c_ptr, M, N, K, BM: tl.constexpr,
                   BN: tl.constexpr, BK: tl.constexpr, AF: tl.constexpr, BF: tl.constexpr,
                   A_DIV: tl.constexpr, B_DIV: tl.constexpr, B_K_PACK: tl.constexpr):
    # A [M, K / A_DIV] row-major (A_DIV = 2: two FP4 per byte along K). B row-major, either
    # [K / B_DIV, N] (packed along K when FP4) or, with B_K_PACK false, FP4 [K, N / 2] packed
    # along N. Scales [M, K/32] and [N, K/32] E8M0, C [M, N] f32. mxfp4_gemm.py has B
    # K-contiguous [N, K/2] and a bf16 C instead.
    pm = tl.program_id(0)
    pn = tl.program_id(1)
    om = pm * BM + tl.arange(0, BM)
    on = pn * BN + tl.arange(0, BN)
    oka = tl.arange(0, BK // A_DIV)
    oks = tl.arange(0, BK // 32)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + om[:, None] * (K // A_DIV) + (k // A_DIV + oka)[None, :])
        if B_K_PACK:
            okb = tl.arange(0, BK // B_DIV)
            b = tl.load(b_ptr + (k // B_DIV + okb)[:, None] * N + on[None, :])
        else:
            ok = tl.arange(0, BK)
            onp = pn * (BN // 2) + tl.arange(0, BN // 2)
            b = tl.load(b_ptr + (k + ok)[:, None] * (N // 2) + onp[None, :])
        sa = tl.load(sa_ptr + om[:, None] * (K // 32) + (k // 32 + oks)[None, :])
        sb = tl.load(sb_ptr + on[:, None] * (K // 32) + (k // 32 + oks)[None, :])
        acc = tl.dot_scaled(a, sa, AF, b, sb, BF, acc, rhs_k_pack=B_K_PACK)
    tl.store(c_ptr + om[:, None] * N + on[None, :], acc)


def mx_operand(fmt, count, rng):
    """(bytes, per-element values) of `count` elements: FP4 codes (two per byte, low nibble
    first) or FP8 codes of multiples of 1/8 below 8 (coarse enough for exact sums)."""
    if fmt == "e2m1":
        data = [rng.randrange(256) for _ in range(count // 2)]
        return data, [fp4_val(data[i // 2] >> (4 * (i % 2))) for i in range(count)]
    val = e4m3_val if fmt == "e4m3" else e5m2_val
    codes = [c for c in range(256) if math.isfinite(val(c)) and abs(val(c)) < 8
             and (val(c) * 8).is_integer()]
    picked = [rng.choice(codes) for _ in range(count)]
    return picked, [val(c) for c in picked]


def mx_case(name, af, bf, b_k_pack, BM, BN, BK, warps, nonkdim, features):
    def build(out_dir, rng):
        c = Case(out_dir, name, features)
        M, N, K = 64, 64, 256
        a_div, b_div = (2 if f == "e2m1" else 1 for f in (af, bf))
        sig = {"a_ptr": "*u8", "b_ptr": "*u8", "sa_ptr": "*u8", "sb_ptr": "*u8",
               "c_ptr": "*fp32", "M": "i32", "N": "i32", "K": "i32", "BM": "constexpr",
               "BN": "constexpr", "BK": "constexpr", "AF": "constexpr", "BF": "constexpr",
               "A_DIV": "constexpr", "B_DIV": "constexpr", "B_K_PACK": "constexpr"}
        c.compile(mx_gemm_kernel, sig,
                  {"BM": BM, "BN": BN, "BK": BK, "AF": af, "BF": bf, "A_DIV": a_div,
                   "B_DIV": b_div, "B_K_PACK": b_k_pack},
                  warps, div=(0, 1, 2, 3, 4, 5, 6, 7), matrix_instr_nonkdim=nonkdim)
        a, a_vals = mx_operand(af, M * K, rng)  # element (i, k) at i * K + k
        if b_k_pack:
            # Element (k, j) of [K, N]; FP4 bytes hold K pairs: byte (k // 2) * N + j.
            if bf == "e2m1":
                b = [rng.randrange(256) for _ in range(K // 2 * N)]
                b_vals = [fp4_val(b[(k // 2) * N + j] >> (4 * (k % 2)))
                          for k in range(K) for j in range(N)]
            else:
                b, b_vals = mx_operand(bf, K * N, rng)
        else:
            # FP4 bytes hold N pairs: element (k, j) in byte k * N / 2 + j // 2.
            b, b_vals = mx_operand(bf, K * N, rng)
        # Scales 2^-1..2^2 (2^0..2^1 with FP8, whose values are finer): a different scale per
        # 32-block, yet every partial sum stays exact in f32 (checked by gemm_tolerance), so a
        # misapplied scale or a lost product shows as a mismatch, however small. Extreme
        # scales are foreign_triton.rs's (mxfp4_gemm.py, scales 2^-7..2^4, bf16 C).
        lo, hi = (127, 128) if "e2m1" not in (af, bf) else (126, 129)
        sa = [rng.randint(lo, hi) for _ in range(M * K // 32)]
        sb = [rng.randint(lo, hi) for _ in range(N * K // 32)]
        # Scaled values: exact in double, so matmul applies.
        av = [a_vals[i * K + k] * 2.0 ** (sa[i * K // 32 + k // 32] - 127)
              for i in range(M) for k in range(K)]
        bv = [b_vals[k * N + j] * 2.0 ** (sb[j * K // 32 + k // 32] - 127)
              for k in range(K) for j in range(N)]
        want, mags = matmul(av, bv, M, N, K)
        assert gemm_tolerance(av, bv, mags, K) == (0.0, 0.0), name
        c.finish([M // BM, N // BN],
                 [c.inp("a", "u8", a), c.inp("b", "u8", b), c.inp("sa", "u8", sa),
                  c.inp("sb", "u8", sb), c.out("c", "f32", want),
                  {"i32": M}, {"i32": N}, {"i32": K}])
    build.__name__ = name
    return case(build)


mx_case("mxfp4_kn_mfma32", "e2m1", "e2m1", True, 32, 32, 128, 4, 0,
        "tl.dot_scaled e2m1, B [K/2, N] (N-contiguous, packed along K): "
        "v_mfma_scale_f32_32x32x64_f8f6f4, global_load_ubyte scales, ds_read_b64_tr_b8")
mx_case("mxfp4_kn_1wave", "e2m1", "e2m1", True, 16, 16, 256, 1, 0,
        "tl.dot_scaled e2m1 in one wave: Triton decomposes to v_cvt_scalef32_pk_bf16_fp4 + "
        "v_mfma_f32_16x16x32_bf16, SDWA and 16-bit ops, v_perm_b32, ds_write_b8")
mx_case("mxfp4_np_mfma32", "e2m1", "e2m1", False, 32, 32, 128, 4, 0,
        "tl.dot_scaled e2m1, B [K, N/2] packed along N: ds_read_b64_tr_b4 (4-bit transposing "
        "LDS reads), v_mfma_scale_f32_32x32x64_f8f6f4")
mx_case("mxfp4_np_mfma16", "e2m1", "e2m1", False, 64, 64, 256, 4, 16,
        "tl.dot_scaled e2m1, B packed along N: ds_read_b64_tr_b4, "
        "v_mfma_scale_f32_16x16x128_f8f6f4, scales through LDS (ds_write_b8/ds_read_u8)")
mx_case("mxfp8_mfma32", "e4m3", "e4m3", True, 32, 32, 128, 4, 32,
        "tl.dot_scaled e4m3 x e4m3 (MXFP8): scaled f8f6f4 MFMA with FP8 formats, 32x32x64")
mx_case("mx_e5m2_e4m3_mfma16", "e5m2", "e4m3", True, 32, 32, 128, 4, 16,
        "tl.dot_scaled e5m2 x e4m3: A and B formats differ (cbsz != blgp), 16x16x128")
mx_case("mx_e4m3_e2m1", "e4m3", "e2m1", True, 32, 32, 128, 4, 0,
        "tl.dot_scaled e4m3 x e2m1: FP8 A with FP4 B in one scaled MFMA")


# ---------------------------------------------------------------- driver

def main():
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    out_dir = sys.argv[1]
    only = set(sys.argv[2:])
    os.makedirs(out_dir, exist_ok=True)
    manifest = os.path.join(out_dir, "cases.json")
    if os.path.exists(manifest):
        os.remove(manifest)
    if not only:
        # Cases since removed or renamed must not linger.
        known = {build.__name__ for build in CASES}
        for entry in os.listdir(out_dir):
            d = os.path.join(out_dir, entry)
            if entry not in known and os.path.exists(os.path.join(d, "case.json")):
                shutil.rmtree(d)
    names = []
    t_all = time.perf_counter()
    for build in CASES:
        if only and build.__name__ not in only:
            continue
        t0 = time.perf_counter()
        # Each case has its own seed, so adding or removing a case leaves the others unchanged.
        build(out_dir, random.Random(build.__name__))
        names.append(build.__name__)
        print(f"{build.__name__} {time.perf_counter() - t0:.2f}s")
    with open(manifest, "w") as f:
        json.dump({"cases": names, "triton_version": triton.__version__}, f, indent=1)
    print(f"{len(names)} cases in {time.perf_counter() - t_all:.1f}s")


if __name__ == "__main__":
    main()

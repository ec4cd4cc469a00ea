"""A foreign FP8 paged decode attention: Triton's own kernel, compiled for gfx950, with inputs
and the expected output from a pure-Python reference (no numpy in the venv), so the emulator's
lane map of ds_read_b64_tr_b8 is checked by a compiler that is not ours.

Usage: python attention.py OUT_DIR   (writes OUT_DIR/<case>/{kernel.hsaco, kernel.s, in_*.bin,
want_*.bin, case.json} in the kernel zoo's format, see zoo.py, then OUT_DIR/cases.json)

The kernel is a flash-decoding loop over tiles of BN keys of a paged FP8 E4M3 cache: S = Q K^T
(`tl.dot` of FP8 operands), online softmax in base 2, P scaled by 256 and cast to FP8, then
`tl.dot(P, V)` with V loaded as [keys, depth] rows: the B operand of that MFMA has K = keys
and its rows contiguous in depth, which Triton reads from LDS with ds_read_b64_tr_b8.

The inputs make every quantization point exact, so the reference can demand f32 agreement:
queries have three +-1 entries per row and keys entries in {-1, 0, 1}, so scores are integers
in [-3, 3]; exp2 of integer differences are powers of two in [2^-6, 1], and P * 256 is an FP8
normal number whatever the order of operations. What is left is f32 rounding of sums (rtol
2^-20). A transposition that hands a lane the wrong keys or depths moves outputs by whole
values of V.
"""
import json
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from zoo import Case, e4m3_val, minifloat_encode  # noqa: E402


@triton.jit
def paged_decode_fp8_kernel(q_ptr, k_ptr, v_ptr, table_ptr, lens_ptr, out_ptr, table_stride,
                            Q_HEADS: tl.constexpr, KV_HEADS: tl.constexpr,
                            GROUP: tl.constexpr, D: tl.constexpr, PAGE: tl.constexpr,
                            BN: tl.constexpr):
    b = tl.program_id(0)
    h = tl.program_id(1)
    n_keys = tl.load(lens_ptr + b)
    og = tl.arange(0, GROUP)
    od = tl.arange(0, D)
    rows = b * Q_HEADS + h * GROUP + og
    q = tl.load(q_ptr + rows[:, None] * D + od[None, :])
    m = tl.full((GROUP,), float("-inf"), tl.float32)
    l = tl.zeros((GROUP,), tl.float32)
    acc = tl.zeros((GROUP, D), tl.float32)
    for start in range(0, n_keys, BN):
        on = start + tl.arange(0, BN)
        live = on < n_keys
        page = tl.load(table_ptr + b * table_stride + on // PAGE, mask=live, other=0)
        crow = (page * PAGE + on % PAGE) * KV_HEADS + h
        k = tl.load(k_ptr + crow[:, None] * D + od[None, :], mask=live[:, None], other=0.0)
        s = tl.dot(q, tl.trans(k))
        s = tl.where(live[None, :], s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 1))
        alpha = tl.exp2(m - m_new)
        p = tl.exp2(s - m_new[:, None])
        l = l * alpha + tl.sum(p, 1)
        v = tl.load(v_ptr + crow[:, None] * D + od[None, :], mask=live[:, None], other=0.0)
        p8 = (p * 256.0).to(tl.float8e4nv)
        acc = acc * alpha[:, None] + tl.dot(p8, v)
        m = m_new
    out = acc / (l * 256.0)[:, None]
    tl.store(out_ptr + rows[:, None] * D + od[None, :], out)


CODES = {}


def e4m3(x):
    """The E4M3 code of x, which must be exact (the few values used are looked up once)."""
    if x not in CODES:
        code, val = minifloat_encode(x, e4m3_val)
        assert val == x, x
        CODES[x] = code
    return CODES[x]


V_VALUES = [-3.0, -2.0, -1.5, -1.0, -0.5, 0.0, 0.5, 1.0, 1.5, 2.0, 3.0]


def build(out_dir, name, rng, batch, kv_heads, d, page, bn, lens):
    group = 16
    q_heads = kv_heads * group
    c = Case(out_dir, name,
             "FP8 paged decode attention: tl.dot of e4m3 Q K^T and P V "
             "(ds_read_b64_tr_b8 for V), exp2 online softmax, block-table gathers")
    sig = {"q_ptr": "*fp8e4nv", "k_ptr": "*fp8e4nv", "v_ptr": "*fp8e4nv", "table_ptr": "*i32",
           "lens_ptr": "*i32", "out_ptr": "*fp32", "table_stride": "i32",
           "Q_HEADS": "constexpr", "KV_HEADS": "constexpr", "GROUP": "constexpr",
           "D": "constexpr", "PAGE": "constexpr", "BN": "constexpr"}
    c.compile(paged_decode_fp8_kernel, sig,
              {"Q_HEADS": q_heads, "KV_HEADS": kv_heads, "GROUP": group, "D": d, "PAGE": page,
               "BN": bn}, 4, div=(0, 1, 2, 3, 4, 5))
    per_seq = (max(lens) + page - 1) // page
    pages = 2 * batch * per_seq + 1
    perm = list(range(pages))
    rng.shuffle(perm)
    table = perm[:batch * per_seq]
    rows = pages * page
    # Q: three +-1 per row; K in {-1, 0, 1}; V from V_VALUES.
    q = []
    for _ in range(batch * q_heads):
        row = [0.0] * d
        for j in rng.sample(range(d), 3):
            row[j] = rng.choice([-1.0, 1.0])
        q += row
    k = [rng.choice([-1.0, 0.0, 0.0, 1.0]) for _ in range(rows * kv_heads * d)]
    v = [rng.choice(V_VALUES) for _ in range(rows * kv_heads * d)]
    want = []
    for b in range(batch):
        n = lens[b]
        crows = [table[b * per_seq + pos // page] * page + pos % page for pos in range(n)]
        for hq in range(q_heads):
            h = hq // group
            qrow = q[(b * q_heads + hq) * d:(b * q_heads + hq + 1) * d]
            m, l, acc = float("-inf"), 0.0, [0.0] * d
            for start in range(0, n, bn):
                keys = crows[start:start + bn]
                s = []
                for r in keys:
                    base = (r * kv_heads + h) * d
                    s.append(sum(qrow[j] * k[base + j] for j in range(d)))
                m_new = max(m, max(s))
                alpha = 2.0 ** (m - m_new) if m != float("-inf") else 0.0
                p = [2.0 ** (x - m_new) for x in s]
                l = l * alpha + sum(p)
                acc = [a * alpha for a in acc]
                for r, pv in zip(keys, p):
                    p8 = pv * 256.0  # a power of two in [4, 256]: exact in FP8
                    base = (r * kv_heads + h) * d
                    for j in range(d):
                        acc[j] += p8 * v[base + j]
                m = m_new
            want += [a / (l * 256.0) for a in acc]
    args = [c.inp("q", "u8", [e4m3(x) for x in q]),
            c.inp("k", "u8", [e4m3(x) for x in k]),
            c.inp("v", "u8", [e4m3(x) for x in v]),
            c.inp("table", "i32", table),
            c.inp("lens", "i32", lens),
            # f32 sums of values that are multiples of 2^-7 below 2^17, one division.
            c.out("out", "f32", want, rtol=2.0 ** -20, atol=1e-9),
            {"i32": per_seq}]
    c.finish([batch, kv_heads], args)
    return name


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    manifest = os.path.join(out_dir, "cases.json")
    if os.path.exists(manifest):
        os.remove(manifest)
    names = []
    t_all = time.perf_counter()
    for name, batch, kv_heads, d, page, bn, lens in [
        ("paged_decode_fp8_d64", 3, 2, 64, 16, 64, [1, 100, 333]),
        ("paged_decode_fp8_d128", 2, 1, 128, 32, 64, [70, 200]),
    ]:
        t0 = time.perf_counter()
        names.append(build(out_dir, name, random.Random(name), batch, kv_heads, d, page, bn,
                           lens))
        print(f"{name} {time.perf_counter() - t0:.2f}s")
    with open(manifest, "w") as f:
        json.dump({"cases": names, "triton_version": triton.__version__}, f, indent=1)
    print(f"{len(names)} cases in {time.perf_counter() - t_all:.1f}s")


if __name__ == "__main__":
    main()

"""Compile MXFP4 GEMM kernels for gfx950 with Triton's tl.dot_scaled (no GPU needed).

These are the foreign, independently compiled code objects the emulator is checked against.
Usage: python mxfp4_gemm.py [--repeat N] OUT_DIR [CONFIG ...]
       CONFIG is BMxBNxBK:warps:nonkdim (nonkdim 16 or 32 picks the MFMA shape, 0 lets Triton
       choose). No CONFIG: the default set. --repeat compiles each config N times with Triton's
       cache bypassed and records every time (for compile-latency comparisons).
Writes OUT_DIR/<config>/kernel.hsaco, kernel.s and meta.json (kernel name, args, LDS bytes,
compile seconds).
"""
import json
import os
import sys
import time
import warnings

os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
warnings.filterwarnings("ignore")

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402


@triton.jit
def mxfp4_gemm(a_ptr, b_ptr, sa_ptr, sb_ptr, c_ptr, M, N, K,
               stride_am, stride_bn, stride_sam, stride_sbn, stride_cm,
               BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    # A [M, K/2] u8 row-major, B [N, K/2] u8 row-major (both K-packed, low nibble = lower K),
    # scales [M, K/32] and [N, K/32] E8M0, C [M, N] bf16 row-major. Rows of A past M are masked.
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BM + tl.arange(0, BM)
    offs_n = pid_n * BN + tl.arange(0, BN)
    offs_kb = tl.arange(0, BK // 2)
    offs_ks = tl.arange(0, BK // 32)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + offs_m[:, None] * stride_am + (k // 2 + offs_kb)[None, :],
                    mask=offs_m[:, None] < M, other=0)
        b = tl.load(b_ptr + offs_n[None, :] * stride_bn + (k // 2 + offs_kb)[:, None])
        sa = tl.load(sa_ptr + offs_m[:, None] * stride_sam + (k // 32 + offs_ks)[None, :],
                     mask=offs_m[:, None] < M, other=0)
        sb = tl.load(sb_ptr + offs_n[:, None] * stride_sbn + (k // 32 + offs_ks)[None, :])
        acc = tl.dot_scaled(a, sa, "e2m1", b, sb, "e2m1", acc)
    tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :], acc.to(tl.bfloat16),
             mask=offs_m[:, None] < M)


SIGNATURE = {
    "a_ptr": "*u8", "b_ptr": "*u8", "sa_ptr": "*u8", "sb_ptr": "*u8", "c_ptr": "*bf16",
    "M": "i32", "N": "i32", "K": "i32",
    "stride_am": "i32", "stride_bn": "i32", "stride_sam": "i32", "stride_sbn": "i32",
    "stride_cm": "i32", "BM": "constexpr", "BN": "constexpr", "BK": "constexpr",
}
# Pointers 16-byte aligned and strides multiples of 16, so Triton emits vector loads.
DIVISIBLE = [0, 1, 2, 3, 4, 9, 12]

DEFAULT_CONFIGS = [
    "64x64x256:4:16",    # 16x16x128 scaled MFMA
    "32x64x512:2:16",    # 16x16x128, two waves, deep K tile
    "128x128x256:4:32",  # 32x32x64 scaled MFMA
    "256x256x256:8:0",   # large tile for the emulation-speed benchmark
    "16x32x256:1:16",    # one wave: Triton decomposes to bf16 MFMAs with FP4 converts
]


def compile_config(cfg, out_dir, repeat=1):
    tile, warps, nonkdim = cfg.split(":")
    bm, bn, bk = (int(x) for x in tile.split("x"))
    attrs = {(i,): [["tt.divisibility", 16]] for i in DIVISIBLE}
    src = ASTSource(fn=mxfp4_gemm, signature=SIGNATURE,
                    constexprs={"BM": bm, "BN": bn, "BK": bk}, attrs=attrs)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        kernel = triton.compile(src, target=GPUTarget("hip", "gfx950", 64),
                                options={"num_warps": int(warps), "num_stages": 2,
                                         "matrix_instr_nonkdim": int(nonkdim)})
        times.append(time.perf_counter() - t0)
    seconds = times[0]
    name = f"bm{bm}_bn{bn}_bk{bk}_w{warps}_nk{nonkdim}"
    d = os.path.join(out_dir, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "kernel.hsaco"), "wb") as f:
        f.write(kernel.asm["hsaco"])
    with open(os.path.join(d, "kernel.s"), "w") as f:
        f.write(kernel.asm["amdgcn"])
    meta = {
        "config": cfg, "bm": bm, "bn": bn, "bk": bk, "num_warps": int(warps),
        "matrix_instr_nonkdim": int(nonkdim), "kernel": kernel.metadata.name,
        "lds_bytes": kernel.metadata.shared, "block_threads": 64 * int(warps),
        "triton_version": triton.__version__, "compile_seconds": seconds,
        "compile_seconds_all": times,
        "args": list(k for k, v in SIGNATURE.items() if v != "constexpr"),
    }
    with open(os.path.join(d, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    return name, seconds


def main():
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    args = sys.argv[1:]
    repeat = 1
    if args[:1] == ["--repeat"]:
        repeat = int(args[1])
        args = args[2:]
        # Recompile every time: no cache hits from earlier runs or repeats.
        os.environ["TRITON_ALWAYS_COMPILE"] = "1"
    if not args:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    out_dir = args[0]
    configs = args[1:] or DEFAULT_CONFIGS
    for cfg in configs:
        name, seconds = compile_config(cfg, out_dir, repeat)
        print(f"{name} {seconds:.3f}s")


if __name__ == "__main__":
    main()

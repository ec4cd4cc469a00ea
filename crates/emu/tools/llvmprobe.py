"""Ask LLVM's AMDGPU disassembler (llvm-objdump-22, the project's ground truth) about raw encodings.

Probes are batched: every probe is placed at its own 64-byte slot of a .text section (padded with
`s_nop 0`), the section is assembled with llvm-mc-22 into an object and disassembled with
llvm-objdump-22. A slot's first line tells whether objdump decoded the probe, its text and how many
dwords it consumed (literal dwords included), so probes never bleed into each other.
"""
import os
import re
import subprocess
import tempfile

MCPU = "gfx950"
LLVM_MC = os.environ.get("LLVM_MC", "llvm-mc-22")
LLVM_OBJDUMP = os.environ.get("LLVM_OBJDUMP", "llvm-objdump-22")
SLOT_DWORDS = 16
S_NOP0 = 0xBF800000
LINE_RE = re.compile(r"^\t(.*?)\s*// ([0-9A-F]{12}): ((?:[0-9A-F]{8} ?)+)(.*)$")


CRASHES = []


def objdump_words(words_by_slot, chunk=20000):
    """Disassemble probes; returns [(text or None, consumed_dwords)] in slot order.

    llvm-objdump-22 crashes on a few encodings; the batch is then split until the crashing probes
    are isolated, and those are reported as undecodable (and remembered in CRASHES)."""
    cache = _cache()
    todo = [p for p in dict.fromkeys(tuple(p) for p in words_by_slot) if p not in cache]
    for start in range(0, len(todo), chunk):
        part = todo[start:start + chunk]
        for p, r in zip(part, _run_split([list(x) for x in part])):
            cache[p] = r
    return [cache[tuple(p)] for p in words_by_slot]


_CACHE = None


def _cache():
    """An optional on-disk memo of probe results (env PROBE_CACHE=path) to speed up iterating on
    the generator; objdump answers never change for a given LLVM build."""
    global _CACHE
    if _CACHE is None:
        _CACHE = {}
        path = os.environ.get("PROBE_CACHE")
        if path and os.path.exists(path):
            import pickle
            with open(path, "rb") as f:
                _CACHE = pickle.load(f)
    return _CACHE


def save_cache():
    path = os.environ.get("PROBE_CACHE")
    if path and _CACHE is not None:
        import pickle
        with open(path, "wb") as f:
            pickle.dump(_CACHE, f)


def _run_split(probes):
    try:
        return _run(probes)
    except subprocess.CalledProcessError:
        if len(probes) == 1:
            CRASHES.append(list(probes[0]))
            return [(None, 1)]
        mid = len(probes) // 2
        return _run_split(probes[:mid]) + _run_split(probes[mid:])


def _run(probes):
    with tempfile.TemporaryDirectory() as td:
        src = os.path.join(td, "p.s")
        obj = os.path.join(td, "p.o")
        with open(src, "w") as f:
            f.write(".text\n")
            for p in probes:
                if len(p) > SLOT_DWORDS - 1:
                    raise ValueError("probe too long")
                words = list(p) + [S_NOP0] * (SLOT_DWORDS - len(p))
                f.write(".long " + ",".join("0x%08x" % (w & 0xFFFFFFFF) for w in words) + "\n")
        subprocess.run([LLVM_MC, "-triple=amdgcn-amd-amdhsa", "-mcpu=" + MCPU, "-filetype=obj",
                        src, "-o", obj], check=True)
        r = subprocess.run([LLVM_OBJDUMP, "-d", "--mcpu=" + MCPU, obj],
                           check=True, capture_output=True, text=True)
    by_addr = {}
    for line in r.stdout.split("\n"):
        m = LINE_RE.match(line)
        if not m:
            continue
        addr = int(m.group(2), 16)
        by_addr[addr] = (m.group(1), len(m.group(3).split()))
    res = []
    for i in range(len(probes)):
        text, n = by_addr.get(i * SLOT_DWORDS * 4, (None, 0))
        if text is None or text.startswith(".long"):
            res.append((None, 1))
        else:
            res.append((text, n))
    return res


if __name__ == "__main__":
    import sys
    ps = [[int(x, 16) for x in a.split(":")] for a in sys.argv[1:]]
    for p, (t, n) in zip(ps, objdump_words(ps)):
        print(" ".join("%08x" % d for d in p), "=>", t, n)

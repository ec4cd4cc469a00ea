//! Cross-lane data movement of the DS unit that does not touch LDS memory the ordinary way:
//! the MFMA transpose loads, `ds_swizzle_b32`, `ds_permute_b32` and `ds_bpermute_b32`.

// Lane loops index several parallel per-lane arrays at once; an index reads clearer than
// zipped iterators there.
#![allow(clippy::needless_range_loop)]

/// Element width of a `ds_read_*_tr_*` instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransposeKind {
    /// `ds_read_b64_tr_b4`: 16 four-bit elements per lane.
    B4,
    /// `ds_read_b96_tr_b6`: 16 six-bit elements per lane (96 bits).
    B6,
    /// `ds_read_b64_tr_b8`: 8 bytes per lane.
    B8,
    /// `ds_read_b64_tr_b16`: 4 halfwords per lane.
    B16,
}

impl TransposeKind {
    /// Bits of one element.
    pub const fn elem_bits(self) -> u32 {
        match self {
            TransposeKind::B4 => 4,
            TransposeKind::B6 => 6,
            TransposeKind::B8 => 8,
            TransposeKind::B16 => 16,
        }
    }
    /// Bytes each lane reads from LDS (and dwords written: bytes / 4).
    pub const fn bytes(self) -> usize {
        match self {
            TransposeKind::B6 => 12,
            _ => 8,
        }
    }
    /// Elements per lane.
    pub const fn elems(self) -> usize {
        self.bytes() * 8 / self.elem_bits() as usize
    }
}

fn get_bits(data: &[u8], pos: usize, bits: u32) -> u32 {
    let mut v = 0u32;
    for b in 0..bits as usize {
        let p = pos + b;
        v |= (((data[p / 8] >> (p % 8)) & 1) as u32) << b;
    }
    v
}

fn set_bits(data: &mut [u8], pos: usize, bits: u32, v: u32) {
    for b in 0..bits as usize {
        let p = pos + b;
        data[p / 8] = (data[p / 8] & !(1 << (p % 8))) | ((((v >> b) & 1) as u8) << (p % 8));
    }
}

/// The cross-lane shuffle of the MFMA transpose loads. `rows[l]` holds the bytes lane `l`
/// read from its own LDS address; the result holds what each lane receives.
///
/// Model (CDNA4 ISA 11.4: each lane reads `N` bits holding consecutive M (or N) values of one
/// K index, and after the transpose each lane holds consecutive K values of one row): within
/// each group of 16 lanes, with `E` elements per lane, source lane `s` holds rows
/// `E * (s % (16 / E)) .. + E` of K index `s / (16 / E)`, and destination lane `l` receives
/// element `n` = (row `l`, K index `n`). For `tr_b16` this is: destination lane `l`
/// halfword `n` comes from source lane `(l & !15) + ((l >> 2) & 3) + 4 n`, halfword `l & 3`,
/// which matches AMD's hardware-checked reference (rocjitsu's CDNA4-to-CDNA3 translation
/// test `LargeStaticLdsReadB64TrB16`, ROCm/rocm-systems PR 10175). The 8-bit case gives the
/// "two interleaved 8x8 byte transposes per 16 lanes" that Modular's CDNA4 documentation
/// describes; the 4- and 6-bit cases are a plain 16x16 transpose. Only `tr_b16` has been
/// checked against hardware-validated data here.
pub fn transpose(kind: TransposeKind, rows: &[[u8; 12]; 64]) -> [[u8; 12]; 64] {
    let e = kind.elems();
    let bits = kind.elem_bits();
    let lanes_per_k = 16 / e.min(16);
    let mut out = [[0u8; 12]; 64];
    for group in 0..4 {
        for s in 0..16 {
            let k = s / lanes_per_k;
            for h in 0..e {
                let row = e * (s % lanes_per_k) + h;
                let v = get_bits(&rows[16 * group + s], h * bits as usize, bits);
                set_bits(&mut out[16 * group + row], k * bits as usize, bits, v);
            }
        }
    }
    out
}

/// `ds_swizzle_b32` source lane for destination `lane` under the 16-bit `offset`, or `None`
/// for the offset ranges this emulator does not implement (offsets >= 0xC000: the rotate and
/// FFT modes).
///
/// Quad mode (`offset[15] = 1`): within each group of 4 lanes, lane `i` reads lane
/// `offset[2i+1:2i]` of its group. Bit-mask mode (`offset[15] = 0`): within each group of 32
/// lanes, lane `j` reads `((j & and) | or) ^ xor` with `and = offset[4:0]`,
/// `or = offset[9:5]`, `xor = offset[14:10]`.
pub fn swizzle_source(offset: u16, lane: usize) -> Option<usize> {
    if offset >= 0xc000 {
        return None;
    }
    if offset & 0x8000 != 0 {
        let i = lane % 4;
        Some((lane & !3) | ((offset as usize >> (2 * i)) & 3))
    } else {
        let and = offset as usize & 0x1f;
        let or = (offset as usize >> 5) & 0x1f;
        let xor = (offset as usize >> 10) & 0x1f;
        Some((lane & 0x20) | (((lane & 0x1f & and) | or) ^ xor))
    }
}

/// `ds_bpermute_b32` ("backward" permute: each active lane pulls): lane `i` receives
/// `data[src]` with `src = ((addr[i] + offset) / 4) mod 64` if lane `src` is active, else 0.
/// Inactive destination lanes are not written (the caller masks with EXEC).
pub fn bpermute(addr: &[u32; 64], offset: u32, data: &[u32; 64], exec: u64) -> [u32; 64] {
    let mut out = [0u32; 64];
    for (i, o) in out.iter_mut().enumerate() {
        let src = (addr[i].wrapping_add(offset) / 4 % 64) as usize;
        if exec >> src & 1 != 0 {
            *o = data[src];
        }
    }
    out
}

/// `ds_permute_b32` ("forward" permute: each active lane pushes): active lane `i` sends
/// `data[i]` to lane `((addr[i] + offset) / 4) mod 64`; when several lanes target the same
/// lane the highest-numbered one wins; lanes nobody targets receive 0.
pub fn permute(addr: &[u32; 64], offset: u32, data: &[u32; 64], exec: u64) -> [u32; 64] {
    let mut out = [0u32; 64];
    for i in 0..64 {
        if exec >> i & 1 != 0 {
            out[(addr[i].wrapping_add(offset) / 4 % 64) as usize] = data[i];
        }
    }
    out
}

/// LDS banks on gfx950: 64 of 4 bytes.
pub const LDS_BANKS: u64 = 64;

/// Lanes served together in one LDS pass for a per-lane access of `bytes`: 256 bytes a clock, so
/// 64 lanes of 4 bytes, 32 of 8 (lanes 0-31, then 32-63), or 16 of 16 (for 16-byte reads the
/// groups are lanes {0-3, 12-15, 20-27} and {4-11, 16-19, 28-31}, then the same 32 higher).
pub fn lds_phases(bytes: u32) -> &'static [u64] {
    const ALL: [u64; 1] = [u64::MAX];
    const HALVES: [u64; 2] = [0xffff_ffff, 0xffff_ffff << 32];
    // Bits of the 16-lane groups of a 16-byte access.
    const A: u64 = 0x0000_000f | 0x0000_f000 | 0x0ff0_0000;
    const B: u64 = 0x0000_0ff0 | 0x000f_0000 | 0xf000_0000;
    const QUARTERS: [u64; 4] = [A, B, A << 32, B << 32];
    match bytes {
        0..=4 => &ALL,
        5..=8 => &HALVES,
        _ => &QUARTERS,
    }
}

/// Clocks a wave's LDS access loses to bank conflicts: in each pass (see [`lds_phases`]) the
/// bank holding the most distinct dwords serializes the pass; lanes reading the same dword
/// share it (a broadcast). `addr(l)` is lane `l`'s byte address; inactive lanes do not count.
pub fn lds_conflict_cycles(addr: impl Fn(usize) -> u64, exec: u64, bytes: u32) -> u64 {
    let dwords = u64::from(bytes.div_ceil(4).max(1));
    let mut lost = 0;
    for &phase in lds_phases(bytes) {
        let lanes = phase & exec;
        if lanes == 0 {
            continue;
        }
        // A pass moves at most 256 bytes, so at most 64 dwords (12-byte reads: 48). The
        // timing model asks this of every LDS access, so it avoids maps and, for the common
        // conflict-free pass (one row per bank, or one dword broadcast), sorting: a bank's
        // row is recorded the first time the bank is seen.
        let mut list = [0u64; 64];
        let mut n = 0;
        let mut seen = 0u64;
        let mut row = [0u64; LDS_BANKS as usize];
        let mut clean = true;
        let mut rest = lanes;
        while rest != 0 {
            let l = rest.trailing_zeros() as usize;
            rest &= rest - 1;
            let first = addr(l) / 4;
            for d in first..first + dwords {
                if n < list.len() {
                    list[n] = d;
                    n += 1;
                }
                let (bank, r) = ((d % LDS_BANKS) as usize, d / LDS_BANKS);
                if seen >> bank & 1 == 0 {
                    seen |= 1 << bank;
                    row[bank] = r;
                } else if row[bank] != r {
                    clean = false;
                }
            }
        }
        if clean {
            continue;
        }
        let list = &mut list[..n];
        list.sort_unstable();
        let mut per_bank = [0u32; LDS_BANKS as usize];
        let mut prev = None;
        for &d in list.iter() {
            if prev != Some(d) {
                per_bank[(d % LDS_BANKS) as usize] += 1;
                prev = Some(d);
            }
        }
        let worst = per_bank.iter().copied().max().unwrap_or(1).max(1);
        lost += u64::from(worst - 1);
    }
    lost
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows_with(f: impl Fn(usize, usize) -> u8) -> [[u8; 12]; 64] {
        let mut r = [[0u8; 12]; 64];
        for (l, row) in r.iter_mut().enumerate() {
            for (b, byte) in row.iter_mut().enumerate() {
                *byte = f(l, b);
            }
        }
        r
    }

    /// Conflict cycles by the definition, with a map: per pass, the most distinct dwords any
    /// bank holds, less one.
    fn conflicts_by_definition(addr: &[u64; 64], exec: u64, bytes: u32) -> u64 {
        let mut lost = 0;
        for &phase in lds_phases(bytes) {
            let mut banks: std::collections::HashMap<u64, std::collections::HashSet<u64>> =
                Default::default();
            for l in (0..64).filter(|l| (phase & exec) >> l & 1 != 0) {
                let first = addr[l] / 4;
                for d in first..first + u64::from(bytes.div_ceil(4)) {
                    banks.entry(d % LDS_BANKS).or_default().insert(d);
                }
            }
            let worst = banks.values().map(|s| s.len() as u64).max().unwrap_or(1);
            lost += worst.max(1) - 1;
        }
        lost
    }

    #[test]
    fn conflict_cycles_of_structured_patterns_match_the_definition() {
        let execs = [
            u64::MAX,
            0x0000_ffff_0000_ffff,
            0x5555_5555_5555_5555,
            1 << 17,
        ];
        for bytes in [4u32, 8, 12, 16] {
            for exec in execs {
                for stride in [4u64, 8, 16, 128, 256, 260] {
                    let strided: [u64; 64] = std::array::from_fn(|l| l as u64 * stride);
                    // XOR-swizzled 16-byte chunks of 256-byte rows.
                    let swizzled: [u64; 64] = std::array::from_fn(|l| {
                        let (row, chunk) = (l as u64 / 16, l as u64 % 16);
                        row * stride * 16 + ((chunk ^ row) * 16)
                    });
                    let broadcast: [u64; 64] = std::array::from_fn(|l| (l as u64 % 3) * stride);
                    for addr in [strided, swizzled, broadcast] {
                        assert_eq!(
                            lds_conflict_cycles(|l| addr[l], exec, bytes),
                            conflicts_by_definition(&addr, exec, bytes),
                            "bytes {bytes} exec {exec:#x} stride {stride} {addr:?}"
                        );
                    }
                }
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn conflict_cycles_of_random_patterns_match_the_definition(
            bytes in proptest::sample::select(vec![4u32, 8, 12, 16]),
            exec in proptest::num::u64::ANY,
            span in proptest::sample::select(vec![16u64, 256, 4096]),
            words in proptest::collection::vec(0u64..4096, 64),
        ) {
            let addr: [u64; 64] = std::array::from_fn(|l| (words[l] % span) & !3);
            proptest::prop_assert_eq!(
                lds_conflict_cycles(|l| addr[l], exec, bytes),
                conflicts_by_definition(&addr, exec, bytes)
            );
        }
    }

    /// The hardware-checked tr_b16 map, written directly from AMD's reference test.
    #[test]
    fn tr_b16_matches_reference_map() {
        // Halfword h of source lane s is (s << 8) | h.
        let rows = rows_with(|l, b| if b % 2 == 0 { (b / 2) as u8 } else { l as u8 });
        let out = transpose(TransposeKind::B16, &rows);
        for lane in 0..64 {
            let halfword = lane & 3;
            let base = (lane & 0x30) + ((lane & 0x0c) >> 2);
            for n in 0..4 {
                let src = base + 4 * n;
                let got = u16::from_le_bytes([out[lane][2 * n], out[lane][2 * n + 1]]);
                assert_eq!(
                    got,
                    ((src as u16) << 8) | halfword as u16,
                    "lane {lane} n {n}"
                );
            }
        }
    }

    #[test]
    fn tr_b8_is_two_interleaved_8x8_transposes() {
        let rows = rows_with(|l, b| if b < 8 { ((l % 16) * 8 + b) as u8 } else { 0 });
        let out = transpose(TransposeKind::B8, &rows);
        // Destination lane 3 (row 3) byte n = K index n comes from source lane 2n (even
        // lanes hold rows 0-7), byte 3.
        for n in 0..8 {
            assert_eq!(out[3][n], (2 * n * 8 + 3) as u8);
            // Row 11 comes from odd source lane 2n+1, byte 3.
            assert_eq!(out[16 + 11][n], ((2 * n + 1) * 8 + 3) as u8);
        }
    }

    #[test]
    fn tr_b4_and_b6_are_16x16_transposes() {
        // Element h of source lane s = (s + 3 h) mod 16 for b4.
        let mut rows = [[0u8; 12]; 64];
        for (s, row) in rows.iter_mut().enumerate() {
            for h in 0..16 {
                set_bits(row, 4 * h, 4, ((s + 3 * h) % 16) as u32);
            }
        }
        let out = transpose(TransposeKind::B4, &rows);
        for l in 0..64 {
            for n in 0..16 {
                // dest (l, n) = source (n + group base, l % 16)
                let src = (l & !15) + n;
                assert_eq!(
                    get_bits(&out[l], 4 * n, 4),
                    ((src + 3 * (l % 16)) % 16) as u32
                );
            }
        }
        let mut rows6 = [[0u8; 12]; 64];
        for (s, row) in rows6.iter_mut().enumerate() {
            for h in 0..16 {
                set_bits(row, 6 * h, 6, ((s * 16 + h) % 64) as u32);
            }
        }
        let out6 = transpose(TransposeKind::B6, &rows6);
        assert_eq!(get_bits(&out6[5], 6 * 9, 6), ((9 * 16 + 5) % 64) as u32);
        assert_eq!(
            get_bits(&out6[16 + 15], 6 * 15, 6),
            (((16 + 15) * 16 + 15) % 64) as u32
        );
    }

    #[test]
    fn swizzle_modes() {
        // Quad mode 0x80e4 = identity (0,1,2,3); 0x801b reverses each quad.
        assert_eq!(swizzle_source(0x80e4, 6), Some(6));
        assert_eq!(swizzle_source(0x801b, 4), Some(7));
        assert_eq!(swizzle_source(0x801b, 7), Some(4));
        // Bit-mask: and=0x1f, xor=1 swaps neighbours: offset = 1<<10 | 0x1f.
        assert_eq!(swizzle_source(0x041f, 2), Some(3));
        assert_eq!(swizzle_source(0x041f, 35), Some(34));
        // Broadcast lane 5 of each 32: and=0, or=5.
        assert_eq!(swizzle_source(5 << 5, 20), Some(5));
        assert_eq!(swizzle_source(5 << 5, 40), Some(37));
        assert_eq!(swizzle_source(0xc000, 0), None);
    }

    #[test]
    fn permutes_respect_exec() {
        let mut addr = [0u32; 64];
        let mut data = [0u32; 64];
        for i in 0..64 {
            addr[i] = (((i + 1) % 64) * 4) as u32;
            data[i] = 100 + i as u32;
        }
        // bpermute: lane i reads lane i+1; lane 2 is inactive so lane 1 reads 0.
        let exec = !(1u64 << 2);
        let b = bpermute(&addr, 0, &data, exec);
        assert_eq!(b[0], 101);
        assert_eq!(b[1], 0);
        assert_eq!(b[63], 100);
        // permute: lane i writes lane i+1; inactive lane 2 writes nothing, so lane 3 gets 0.
        let p = permute(&addr, 0, &data, exec);
        assert_eq!(p[1], 100);
        assert_eq!(p[3], 0);
        // Collision: every lane targets lane 0: the highest active lane wins.
        let p = permute(&[0; 64], 0, &data, u64::MAX >> 1);
        assert_eq!(p[0], 162);
    }

    #[test]
    fn bank_conflicts_follow_the_pass_rules() {
        let all = u64::MAX;
        // Consecutive dwords, and one dword broadcast to every lane: no conflict.
        assert_eq!(lds_conflict_cycles(|l| 4 * l as u64, all, 4), 0);
        assert_eq!(lds_conflict_cycles(|_| 128, all, 4), 0);
        // A 256-byte stride puts every lane's dword in bank 0: 64 dwords in one pass.
        assert_eq!(lds_conflict_cycles(|l| 256 * l as u64, all, 4), 63);
        // Lanes l and l + 32 share a dword (a broadcast); the 32 dwords alternate banks 0 and
        // 32: 16-way. Two halves on distinct dwords of the same banks: 2-way.
        assert_eq!(lds_conflict_cycles(|l| 128 * (l % 32) as u64, all, 4), 15);
        assert_eq!(
            lds_conflict_cycles(|l| 4 * (l % 32) as u64 + 256 * (l / 32) as u64, all, 4),
            1
        );
        // 16-byte reads of consecutive chunks: each pass covers 256 bytes, conflict-free.
        assert_eq!(lds_conflict_cycles(|l| 16 * l as u64, all, 16), 0);
        // 16-byte reads of rows 256 bytes apart: every lane of a pass on banks 0-3, 16-way.
        assert_eq!(lds_conflict_cycles(|l| 256 * l as u64, all, 16), 4 * 15);
        // 2-way and 4-way patterns: rows 128 and 64 bytes apart... within a 16-lane pass,
        // 16 rows of 128 bytes land on two bank groups (8 dwords each), 64 bytes on four.
        assert_eq!(lds_conflict_cycles(|l| 128 * l as u64, all, 16), 4 * 7);
        assert_eq!(lds_conflict_cycles(|l| 64 * l as u64, all, 16), 4 * 3);
        // 8-byte reads: two passes of 32 lanes.
        assert_eq!(lds_conflict_cycles(|l| 8 * l as u64, all, 8), 0);
        assert_eq!(lds_conflict_cycles(|l| 512 * l as u64, all, 8), 2 * 31);
        // Inactive lanes are free.
        assert_eq!(lds_conflict_cycles(|l| 256 * l as u64, 1, 4), 0);
        // The 16-byte pass groups are the documented lane sets.
        let groups = lds_phases(16);
        assert_eq!(groups.iter().fold(0, |a, g| a | g), u64::MAX);
        assert_eq!(groups.iter().map(|g| g.count_ones()).sum::<u32>(), 64);
        assert!(groups.iter().all(|g| g.count_ones() == 16));
    }
}

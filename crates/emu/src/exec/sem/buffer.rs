//! Buffer resources (V#) and MUBUF address calculation with the gfx950 range-check rules.
//!
//! Sources for the rules, since they differ between documents:
//! * Addressing (CDNA3/CDNA4 ISA "buffer addressing"): `ADDR = base + soffset + index * stride
//!   + voffset + inst_offset`, with `index` from `vaddr` when `idxen` (plus the lane id when
//!   the resource has `add_tid_enable`) and `voffset` from `vaddr` (or `vaddr + 1` when both
//!   `idxen` and `offen`) when `offen`. `voffset + inst_offset` is formed in 32 bits.
//! * Range checking: for a raw access (no `idxen`, or `stride == 0`) an element is in range
//!   when `voffset + inst_offset + soffset + (its end) <= num_records`, checked per dword for
//!   `dwordx2/x3/x4`; with `idxen` and `stride != 0` the check is `index < num_records` for
//!   the whole access; `add_tid_enable` without `idxen` is not checked. SOFFSET *does* count.
//!   This is what AMD's rocjitsu emulator implements after matching gfx950 hardware
//!   (ROCm/rocm-systems PR 10928, "SOFFSET and the instruction offset count toward the
//!   bounds check ... checked per dword for dwordx{2,3,4}; format ops, atomics ... all or
//!   nothing"), what gem5's Vega model does (it compares against `num_records - soffset`), and
//!   what the CDNA5 ISA's range-checking section states. LLVM's AMDGPU DMA documentation says
//!   the SGPR offset is *excluded* from bounds checking; we follow the hardware-validated
//!   sources and note the disagreement here.
//! * Out of range: loads return 0, stores and atomics are dropped; `buffer_load ... lds`
//!   writes zeros to LDS for out-of-range lanes (same PR).
//! * `swizzle_enable` selects an interleaved (scratch-style) layout that is not implemented:
//!   such a resource is rejected with an error naming the bit instead of a wrong answer.

/// A decoded 128-bit buffer resource descriptor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BufferResource {
    /// Base address, bits 47:0.
    pub base: u64,
    /// Record stride in bytes, bits 61:48.
    pub stride: u32,
    /// `cache_swizzle`, bit 62 (only changes cache bank mapping: no functional effect).
    pub cache_swizzle: bool,
    /// `swizzle_en`, bit 63.
    pub swizzle_en: bool,
    /// `num_records`, bits 95:64: bytes for raw access, records for indexed access.
    pub num_records: u32,
    /// `dst_sel_{x,y,z,w}`, bits 107:96 (formatted loads only).
    pub dst_sel: u16,
    /// `num_format`, bits 110:108 (formatted access only).
    pub num_format: u8,
    /// `data_format`, bits 114:111; also extends the stride for `add_tid` raw access.
    pub data_format: u8,
    /// `add_tid_enable`, bit 119.
    pub add_tid: bool,
    /// `type`, bits 127:126.
    pub ty: u8,
}

/// A resource feature the emulator does not implement.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BufferError {
    /// The descriptor asks for swizzled addressing.
    #[error(
        "buffer resource {words:08x?} sets swizzle_en (V# bit 63): swizzled buffer addressing is not implemented"
    )]
    Swizzled {
        /// The raw descriptor.
        words: [u32; 4],
    },
}

impl BufferResource {
    /// Decodes the four SGPR words of a V#.
    pub fn from_words(w: [u32; 4]) -> BufferResource {
        BufferResource {
            base: (w[0] as u64) | (((w[1] & 0xffff) as u64) << 32),
            stride: (w[1] >> 16) & 0x3fff,
            cache_swizzle: (w[1] >> 30) & 1 != 0,
            swizzle_en: (w[1] >> 31) & 1 != 0,
            num_records: w[2],
            dst_sel: (w[3] & 0xfff) as u16,
            num_format: ((w[3] >> 12) & 7) as u8,
            data_format: ((w[3] >> 15) & 0xf) as u8,
            add_tid: (w[3] >> 23) & 1 != 0,
            ty: (w[3] >> 30) as u8,
        }
    }

    /// Rejects resources whose addressing mode is not implemented.
    pub fn check_supported(&self, words: [u32; 4]) -> Result<(), BufferError> {
        if self.swizzle_en {
            return Err(BufferError::Swizzled { words });
        }
        Ok(())
    }
}

/// The per-instruction part of a MUBUF access.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BufferAccess {
    /// `offen`: a VGPR supplies a byte offset.
    pub offen: bool,
    /// `idxen`: a VGPR supplies a record index.
    pub idxen: bool,
    /// The 12-bit instruction offset.
    pub inst_offset: u32,
    /// Value of the `soffset` operand (SGPR, M0 or inline constant).
    pub soffset: u32,
    /// Bytes per element: 1, 2 or 4 (a dword for `dwordxN`).
    pub elem_size: u32,
    /// Elements accessed per lane (N of `dwordxN`, else 1).
    pub num_elems: u32,
    /// Whether elements are range-checked one by one (plain `dwordx2/x3/x4` loads and
    /// stores) or all-or-nothing (formatted access, atomics).
    pub per_element: bool,
    /// Whether the opcode is a formatted (`*_format_*`) access, which does not get the
    /// `data_format` stride extension under `add_tid`.
    pub format_op: bool,
}

/// Where one lane's access goes and how much of it is in range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaneAccess {
    /// Address of the first byte of element 0.
    pub addr: u64,
    /// Leading elements that are in range (`0..=num_elems`); the rest read 0 / are dropped.
    pub elems_in_range: u32,
}

/// Computes lane `lane`'s address and range check. `index` and `voffset` are the lane's
/// VGPR values (pass 0 for whichever of `idxen`/`offen` is clear).
pub fn lane_access(
    r: &BufferResource,
    a: &BufferAccess,
    index: u32,
    voffset: u32,
    lane: u32,
) -> LaneAccess {
    let add_lane = r.add_tid && !a.idxen;
    let index = if a.idxen { index } else { 0 } + if add_lane { lane } else { 0 };
    let voffset = if a.offen { voffset } else { 0 };
    // With add_tid the stride is 18 bits: data_format supplies bits 17:14 (raw ops only).
    let stride = if add_lane && !a.format_op {
        ((r.data_format as u32) << 14) | r.stride
    } else {
        r.stride
    };
    let offset_part = voffset.wrapping_add(a.inst_offset);
    let total = index as u64 * stride as u64 + offset_part as u64 + a.soffset as u64;
    let addr = r.base.wrapping_add(total);
    let elems_in_range = if add_lane {
        a.num_elems
    } else if a.idxen && r.stride != 0 {
        if index < r.num_records {
            a.num_elems
        } else {
            0
        }
    } else {
        let byte_offset = offset_part as u64 + a.soffset as u64;
        let fit = if byte_offset >= r.num_records as u64 {
            0
        } else {
            ((r.num_records as u64 - byte_offset) / a.elem_size as u64).min(a.num_elems as u64)
                as u32
        };
        if a.per_element || fit == a.num_elems {
            fit
        } else {
            0
        }
    };
    LaneAccess {
        addr,
        elems_in_range,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(base: u64, num_records: u32) -> BufferResource {
        BufferResource::from_words([base as u32, (base >> 32) as u32, num_records, 0x0002_0000])
    }

    fn dwords(n: u32) -> BufferAccess {
        BufferAccess {
            offen: true,
            idxen: false,
            inst_offset: 0,
            soffset: 0,
            elem_size: 4,
            num_elems: n,
            per_element: true,
            format_op: false,
        }
    }

    #[test]
    fn decodes_every_field() {
        // base 0x1234_5678_9abc, stride 0x3fff, cache_swizzle, num_records 77,
        // dst_sel 0xfac, num_format 5, data_format 0xb, add_tid, type 2.
        let w1 = 0x1234 | (0x3fff << 16) | (1 << 30);
        let w3 = 0xfac | (5 << 12) | (0xb << 15) | (1 << 23) | (2 << 30);
        let r = BufferResource::from_words([0x5678_9abc, w1, 77, w3]);
        assert_eq!(r.base, 0x1234_5678_9abc);
        assert_eq!(r.stride, 0x3fff);
        assert!(r.cache_swizzle && !r.swizzle_en);
        assert_eq!(r.num_records, 77);
        assert_eq!((r.dst_sel, r.num_format, r.data_format), (0xfac, 5, 0xb));
        assert!(r.add_tid);
        assert_eq!(r.ty, 2);
    }

    #[test]
    fn raw_dword_range_check_at_the_boundary() {
        let r = raw(0x1000, 16);
        let a = dwords(1);
        assert_eq!(
            lane_access(&r, &a, 0, 12, 0),
            LaneAccess {
                addr: 0x100c,
                elems_in_range: 1
            }
        );
        assert_eq!(lane_access(&r, &a, 0, 16, 0).elems_in_range, 0);
        // A dword starting 2 bytes before the end does not fit: out of range.
        assert_eq!(lane_access(&r, &a, 0, 14, 0).elems_in_range, 0);
        // A byte there does.
        let b = BufferAccess { elem_size: 1, ..a };
        assert_eq!(lane_access(&r, &b, 0, 15, 0).elems_in_range, 1);
    }

    #[test]
    fn dwordx4_is_checked_per_dword() {
        let r = raw(0, 24);
        let a = dwords(4);
        // Offset 8: dwords at 8, 12, 16, 20 all end by 24.
        assert_eq!(lane_access(&r, &a, 0, 8, 0).elems_in_range, 4);
        // Offset 16: only the first two fit.
        assert_eq!(lane_access(&r, &a, 0, 16, 0).elems_in_range, 2);
        // All-or-nothing accesses (atomics, formatted) drop the whole lane instead.
        let atomic = BufferAccess {
            per_element: false,
            ..a
        };
        assert_eq!(lane_access(&r, &atomic, 0, 16, 0).elems_in_range, 0);
        assert_eq!(lane_access(&r, &atomic, 0, 8, 0).elems_in_range, 4);
    }

    #[test]
    fn soffset_and_inst_offset_count() {
        let r = raw(0x2000, 64);
        let a = BufferAccess {
            inst_offset: 16,
            soffset: 40,
            ..dwords(1)
        };
        let l = lane_access(&r, &a, 0, 4, 0);
        assert_eq!(l.addr, 0x2000 + 60);
        assert_eq!(l.elems_in_range, 1);
        let l = lane_access(&r, &a, 0, 8, 0);
        assert_eq!(l.elems_in_range, 0, "soffset pushes offset 64 out of range");
    }

    #[test]
    fn voffset_plus_inst_offset_wraps_in_32_bits() {
        let r = raw(0x4000, 0x100);
        let a = BufferAccess {
            inst_offset: 8,
            ..dwords(1)
        };
        let l = lane_access(&r, &a, 0, 0xffff_fffc, 0);
        // -4 + 8 = 4 (mod 2^32): in range and addressed at base + 4.
        assert_eq!(
            l,
            LaneAccess {
                addr: 0x4004,
                elems_in_range: 1
            }
        );
    }

    #[test]
    fn offen_clear_ignores_voffset() {
        let r = raw(0x4000, 0x100);
        let a = BufferAccess {
            offen: false,
            inst_offset: 4,
            ..dwords(1)
        };
        assert_eq!(lane_access(&r, &a, 0, 0x1234, 0).addr, 0x4004);
    }

    #[test]
    fn structured_index_check() {
        // stride 16, 3 records.
        let r = BufferResource::from_words([0x1000, 16 << 16, 3, 0]);
        let a = BufferAccess {
            idxen: true,
            offen: true,
            ..dwords(4)
        };
        let l = lane_access(&r, &a, 2, 4, 0);
        assert_eq!(
            l,
            LaneAccess {
                addr: 0x1000 + 32 + 4,
                elems_in_range: 4
            }
        );
        assert_eq!(lane_access(&r, &a, 3, 0, 0).elems_in_range, 0);
        // The offset is not range-checked on a strided indexed access.
        assert_eq!(lane_access(&r, &a, 0, 1000, 0).elems_in_range, 4);
        // idxen with stride 0 falls back to the byte check on the offset.
        let r0 = BufferResource::from_words([0x1000, 0, 8, 0]);
        assert_eq!(lane_access(&r0, &a, 5, 4, 0).elems_in_range, 1);
    }

    #[test]
    fn offen_only_on_strided_buffer_uses_byte_check() {
        let r = BufferResource::from_words([0x1000, 16 << 16, 32, 0]);
        let a = dwords(1);
        assert_eq!(lane_access(&r, &a, 0, 28, 0).elems_in_range, 1);
        assert_eq!(lane_access(&r, &a, 0, 32, 0).elems_in_range, 0);
    }

    #[test]
    fn add_tid_adds_lane_times_extended_stride_unchecked() {
        // stride 4 with data_format 1 -> 18-bit stride (1 << 14) | 4.
        let r = BufferResource::from_words([0x1000, 4 << 16, 0, (1 << 15) | (1 << 23)]);
        let a = dwords(1);
        let l = lane_access(&r, &a, 0, 0, 3);
        assert_eq!(
            l,
            LaneAccess {
                addr: 0x1000 + 3 * ((1 << 14) | 4),
                elems_in_range: 1
            }
        );
        let fmt = BufferAccess {
            format_op: true,
            ..a
        };
        assert_eq!(lane_access(&r, &fmt, 0, 0, 3).addr, 0x1000 + 12);
    }

    #[test]
    fn unbound_descriptor_is_all_out_of_range() {
        let r = BufferResource::from_words([0; 4]);
        assert_eq!(lane_access(&r, &dwords(2), 0, 0, 0).elems_in_range, 0);
    }

    #[test]
    fn swizzle_is_rejected_naming_the_bit() {
        let w = [0x1000, 1 << 31, 16, 0];
        let r = BufferResource::from_words(w);
        let e = r.check_supported(w).unwrap_err();
        assert!(e.to_string().contains("swizzle_en (V# bit 63)"));
        let w = [0x1000, 0, 16, 0];
        assert!(BufferResource::from_words(w).check_supported(w).is_ok());
    }
}

//! The f4gemm kernels' argument block, grid and buffers for a GEMM problem.
//!
//! The block is 384 bytes: 24 fields, each in its own 16-byte slot ([`Field`], in slot order).
//! What the kernels read (their `s_load`s from the kernarg segment, identical in all 35 code
//! objects; checked on the emulator by `tests/foreign_aiter.rs`):
//!
//! * pointers D, C, A, B, ScaleA, ScaleB; `alpha`, `beta` (f32);
//! * `strideC0`: the row stride of **D** in bf16 elements (the kernels never read `strideD0`;
//!   this writer puts the same value in both);
//! * `strideA0`, `strideB0`: row strides of A and B in FP4 *elements* (the kernels halve them
//!   into bytes), i.e. `K` for packed operands;
//! * `strideScaleA0`, `strideScaleB0`: bytes per scale row of the padded, preshuffled scales,
//!   `K/32` rounded up to 8;
//! * `Mdim`, `Ndim`, `Kdim`; `log2_k_split` (read only by the split-K kernels).
//!
//! The `*1` strides are never read; this writer puts 1 (unit inner stride) in them.
//!
//! Buffer loads are bounded by `rows x row stride` (A: M rows, B: N rows, A's scales: M rounded
//! up to 32 rows, B's scales: N rows), so rows past M read as zero and a ragged M is masked.
//! Two limits follow for N (both found on the emulator, then in the disassembly):
//!
//! * N must be a multiple of 32 ([`N_MULTIPLE`]), not just of B's 16-row preshuffle group: the
//!   scales are laid out in 32-row tiles whose two 16-row halves interleave, so with N = 32t + 16
//!   the bound of N rows cuts off half of the last tile's bytes, and the last 16 columns of D
//!   come out wrong.
//! * A ragged last N tile (N not a multiple of `tile_n`) is masked in 32-column steps by 30 of
//!   the 34 BpreShuffle kernels. The 256x256, 128x512, 192x256 and 224x256 kernels never
//!   compare a column with N: their ragged tile stores its columns past N (zeros: B's rows past
//!   N read as zero) into the start of the next row of a packed D, racing the workgroup that owns
//!   those columns ([`F4GemmKernel::masks_ragged_n`], [`GemmLaunch::stores_past_n`]). A D row
//!   stride of at least N rounded up to `tile_n` ([`GemmProblem::with_d_row_stride`]) gives the
//!   stray columns a place of their own.

use crate::error::ProblemError;
use crate::kernel::F4GemmKernel;

/// Bytes of the kernel-argument block.
pub const KERNARG_BYTES: usize = 384;
/// Bytes of one field's slot.
const SLOT_BYTES: usize = 16;
/// Work-items per workgroup (four wave64s), as AITER launches the kernels.
pub const BLOCK: [u32; 3] = [256, 1, 1];
/// K elements per main-loop step. K (and each split-K slice) is a multiple of it: AITER rounds
/// the slice up to it, and the scale layout pads K/32 to 8 = 256/32.
pub const K_STEP: u32 = 256;
/// N must be a multiple of this: B's scales come in 32-row tiles and the kernels bound their
/// reads by N rows (see the module docs); it is also the kernels' column-masking step.
pub const N_MULTIPLE: u32 = 32;
/// Scale rows are padded to a multiple of this (AITER's `e8m0_shuffle`).
pub const SCALE_ROW_PAD: u32 = 256;
/// Scale columns (K/32) are padded to a multiple of this (AITER's `e8m0_shuffle`).
pub const SCALE_COL_PAD: u32 = 8;
/// Largest log2 split-K accepted (AITER's heuristic tries splits of 2 to 16).
pub const MAX_LOG2_K_SPLIT: u32 = 8;
/// The scalar value of `alpha` (D = alpha * A * B^T + beta * C); AITER's `gemm_a4w4` passes 1.
pub const ALPHA: f32 = 1.0;
/// The scalar value of `beta`; AITER's `gemm_a4w4` passes 0 (and C = null).
pub const BETA: f32 = 0.0;

/// One field of the kernel-argument block, in slot order; the names are the code objects'
/// metadata names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[allow(missing_docs)]
pub enum Field {
    D,
    C,
    A,
    B,
    Alpha,
    Beta,
    StrideD0,
    StrideD1,
    StrideC0,
    StrideC1,
    StrideA0,
    StrideA1,
    StrideB0,
    StrideB1,
    M,
    N,
    K,
    ScaleA,
    ScaleB,
    StrideScaleA0,
    StrideScaleA1,
    StrideScaleB0,
    StrideScaleB1,
    Log2KSplit,
}

impl Field {
    /// Every field, in slot order.
    pub const ALL: [Field; 24] = [
        Field::D,
        Field::C,
        Field::A,
        Field::B,
        Field::Alpha,
        Field::Beta,
        Field::StrideD0,
        Field::StrideD1,
        Field::StrideC0,
        Field::StrideC1,
        Field::StrideA0,
        Field::StrideA1,
        Field::StrideB0,
        Field::StrideB1,
        Field::M,
        Field::N,
        Field::K,
        Field::ScaleA,
        Field::ScaleB,
        Field::StrideScaleA0,
        Field::StrideScaleA1,
        Field::StrideScaleB0,
        Field::StrideScaleB1,
        Field::Log2KSplit,
    ];

    /// Byte offset in the block.
    pub fn offset(self) -> usize {
        self as usize * SLOT_BYTES
    }

    /// Whether the field is a device pointer.
    pub fn is_pointer(self) -> bool {
        matches!(
            self,
            Field::D | Field::C | Field::A | Field::B | Field::ScaleA | Field::ScaleB
        )
    }

    /// Bytes of the value (the rest of the slot is padding).
    pub fn size(self) -> usize {
        if self.is_pointer() { 8 } else { 4 }
    }

    /// The argument's name in the code objects' metadata.
    pub fn metadata_name(self) -> &'static str {
        match self {
            Field::D => "D",
            Field::C => "C",
            Field::A => "A",
            Field::B => "B",
            Field::Alpha => "alpha",
            Field::Beta => "beta",
            Field::StrideD0 => "strideD0",
            Field::StrideD1 => "strideD1",
            Field::StrideC0 => "strideC0",
            Field::StrideC1 => "strideC1",
            Field::StrideA0 => "strideA0",
            Field::StrideA1 => "strideA1",
            Field::StrideB0 => "strideB0",
            Field::StrideB1 => "strideB1",
            Field::M => "Mdim",
            Field::N => "Ndim",
            Field::K => "Kdim",
            Field::ScaleA => "ScaleA",
            Field::ScaleB => "ScaleB",
            Field::StrideScaleA0 => "strideScaleA0",
            Field::StrideScaleA1 => "strideScaleA1",
            Field::StrideScaleB0 => "strideScaleB0",
            Field::StrideScaleB1 => "strideScaleB1",
            Field::Log2KSplit => "log2_k_split",
        }
    }
}

/// A GEMM problem `D[M, N] = A[M, K] * B[N, K]^T` as the f4gemm kernels take it: D's row stride
/// and the log2 split-K ride along. Every size the kernels address is checked to fit their
/// 32-bit offsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GemmProblem {
    m: u32,
    n: u32,
    k: u32,
    ldd: u32,
    log2_k_split: u32,
}

fn fits_u32(what: &'static str, value: u64) -> Result<u64, ProblemError> {
    if value > u32::MAX as u64 {
        return Err(ProblemError::TooLarge {
            what,
            value,
            limit: u32::MAX as u64,
        });
    }
    Ok(value)
}

fn multiple(
    what: &'static str,
    value: u32,
    of: u32,
    why: &'static str,
) -> Result<(), ProblemError> {
    if !value.is_multiple_of(of) {
        return Err(ProblemError::NotMultiple {
            what,
            value: value as u64,
            multiple: of as u64,
            why,
        });
    }
    Ok(())
}

/// `v` rounded up to a multiple of `to`, in 64 bits.
fn round_up(v: u32, to: u32) -> u64 {
    (v as u64).div_ceil(to as u64) * to as u64
}

impl GemmProblem {
    /// An `m x n x k` problem with D packed (row stride N) and no split-K. N must be a multiple
    /// of [`N_MULTIPLE`] and K of [`K_STEP`].
    pub fn new(m: u32, n: u32, k: u32) -> Result<Self, ProblemError> {
        for (what, v) in [("M", m), ("N", n), ("K", k)] {
            if v == 0 {
                return Err(ProblemError::Zero { what });
            }
        }
        multiple(
            "N",
            n,
            N_MULTIPLE,
            "the kernels bound B's 32-row scale tiles by N rows",
        )?;
        multiple(
            "K",
            k,
            K_STEP,
            "the kernels step K by 256 and the scale layout pads K/32 to 8",
        )?;
        let p = GemmProblem {
            m,
            n,
            k,
            ldd: n,
            log2_k_split: 0,
        };
        p.check_sizes()?;
        Ok(p)
    }

    fn check_sizes(&self) -> Result<(), ProblemError> {
        let (m, n, k) = (self.m as u64, self.n as u64, self.k as u64);
        fits_u32("M * K / 2 (bytes of A)", m * k / 2)?;
        fits_u32("N * K / 2 (bytes of B)", n * k / 2)?;
        fits_u32("M * ldd * 2 (bytes of D)", m * self.ldd as u64 * 2)?;
        fits_u32("padded scale bytes of A", self.scale_bytes(self.m))?;
        fits_u32("padded scale bytes of B", self.scale_bytes(self.n))?;
        Ok(())
    }

    /// The same problem with D rows `ldd` bf16 elements apart (at least N, a multiple of 8 so
    /// rows start 16-byte aligned for the kernels' 16-byte stores).
    pub fn with_d_row_stride(self, ldd: u32) -> Result<Self, ProblemError> {
        if ldd < self.n {
            return Err(ProblemError::StrideTooSmall { ldd, n: self.n });
        }
        multiple(
            "the D row stride",
            ldd,
            8,
            "rows must start 16-byte aligned",
        )?;
        let p = GemmProblem { ldd, ..self };
        p.check_sizes()?;
        Ok(p)
    }

    /// The same problem split over `2^log2_k_split` K slices (AITER's `log2_k_split`); K must
    /// be a multiple of the split.
    pub fn with_log2_k_split(self, log2_k_split: u32) -> Result<Self, ProblemError> {
        let bad = |why| ProblemError::BadSplit {
            log2_k_split,
            k: self.k,
            why,
        };
        if log2_k_split > MAX_LOG2_K_SPLIT {
            return Err(bad("at most 8"));
        }
        if !self.k.is_multiple_of(1 << log2_k_split) {
            return Err(bad("K must be a multiple of the split"));
        }
        Ok(GemmProblem {
            log2_k_split,
            ..self
        })
    }

    /// M.
    pub fn m(&self) -> u32 {
        self.m
    }

    /// N.
    pub fn n(&self) -> u32 {
        self.n
    }

    /// K.
    pub fn k(&self) -> u32 {
        self.k
    }

    /// D's row stride in bf16 elements.
    pub fn d_row_stride(&self) -> u32 {
        self.ldd
    }

    /// log2 of the requested split-K.
    pub fn log2_k_split(&self) -> u32 {
        self.log2_k_split
    }

    /// Scale rows after padding: `rows` rounded up to [`SCALE_ROW_PAD`].
    pub fn scale_rows(rows: u32) -> u64 {
        round_up(rows, SCALE_ROW_PAD)
    }

    /// Scale columns (bytes per scale row) after padding: K/32 rounded up to [`SCALE_COL_PAD`].
    pub fn scale_cols(&self) -> u32 {
        // K is a multiple of 256, so K/32 already is a multiple of 8; the rounding states the rule.
        round_up(self.k / 32, SCALE_COL_PAD) as u32
    }

    fn scale_bytes(&self, rows: u32) -> u64 {
        Self::scale_rows(rows) * self.scale_cols() as u64
    }
}

/// Device addresses of the buffers a launch uses; C stays null (beta is 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GemmPointers {
    /// D, bf16 `[M, ldd]`.
    pub d: u64,
    /// A, packed FP4 `[M, K/2]` row-major.
    pub a: u64,
    /// B, packed FP4 `[N, K/2]` preshuffled.
    pub b: u64,
    /// A's E8M0 scales, padded and preshuffled.
    pub scale_a: u64,
    /// B's E8M0 scales, padded and preshuffled.
    pub scale_b: u64,
}

impl GemmPointers {
    /// The address for a pointer field (0 for C and for non-pointer fields).
    pub fn get(&self, field: Field) -> u64 {
        match field {
            Field::D => self.d,
            Field::A => self.a,
            Field::B => self.b,
            Field::ScaleA => self.scale_a,
            Field::ScaleB => self.scale_b,
            _ => 0,
        }
    }
}

/// One device buffer of a launch: which pointer field holds it and its size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BufferSpec {
    field: Field,
    bytes: u64,
}

impl BufferSpec {
    /// The pointer field.
    pub fn field(&self) -> Field {
        self.field
    }

    /// Its size in bytes.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

/// A problem bound to a kernel: the grid, the buffers and the argument block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GemmLaunch {
    kernel: F4GemmKernel,
    problem: GemmProblem,
}

impl GemmLaunch {
    /// Binds `problem` to `kernel`; split-K needs a kernel that supports it.
    pub fn new(kernel: &F4GemmKernel, problem: GemmProblem) -> Result<Self, ProblemError> {
        if problem.log2_k_split > 0 && !kernel.supports_split_k() {
            return Err(ProblemError::SplitUnsupported {
                kernel: kernel.tile_label(),
                log2_k_split: problem.log2_k_split,
            });
        }
        let launch = GemmLaunch {
            kernel: kernel.clone(),
            problem,
        };
        // Each grid dimension in work-items must fit the dispatch packet's 32 bits.
        for g in launch.grid_u64() {
            fits_u32("grid work-items", g * BLOCK[0] as u64)?;
        }
        Ok(launch)
    }

    /// The kernel.
    pub fn kernel(&self) -> &F4GemmKernel {
        &self.kernel
    }

    /// The problem.
    pub fn problem(&self) -> &GemmProblem {
        &self.problem
    }

    /// K elements per split-K slice as AITER computes it: `K / 2^log2` rounded up to
    /// [`K_STEP`] (K itself without split-K).
    pub fn k_per_split(&self) -> u32 {
        let p = &self.problem;
        round_up(p.k >> p.log2_k_split, K_STEP) as u32
    }

    /// Workgroups along z: the K slices (1 for a kernel without split-K).
    pub fn k_splits(&self) -> u32 {
        self.problem.k.div_ceil(self.k_per_split())
    }

    fn grid_u64(&self) -> [u64; 3] {
        let p = &self.problem;
        [
            (p.n as u64).div_ceil(self.kernel.tile_n() as u64),
            (p.m as u64).div_ceil(self.kernel.tile_m() as u64),
            self.k_splits() as u64,
        ]
    }

    /// Workgroups per dimension: `(ceil(N / tile_n), ceil(M / tile_m), k_splits)`.
    pub fn grid(&self) -> [u32; 3] {
        // Checked to fit in `new`.
        self.grid_u64().map(|g| g as u32)
    }

    /// Work-items per workgroup.
    pub fn block(&self) -> [u32; 3] {
        BLOCK
    }

    /// Workgroups in the grid.
    pub fn workgroups(&self) -> u64 {
        self.grid_u64().iter().product()
    }

    /// Whether the kernel stores columns past N into D's next row: a ragged last N tile on a
    /// kernel that does not mask it ([`F4GemmKernel::masks_ragged_n`]) with a D row stride
    /// smaller than N rounded up to `tile_n`. Such a launch races (AITER itself makes them).
    pub fn stores_past_n(&self) -> bool {
        let p = &self.problem;
        !self.kernel.masks_ragged_n() && (p.ldd as u64) < round_up(p.n, self.kernel.tile_n())
    }

    /// Whether D must be zeroed before the launch: split slices add into it with atomics.
    pub fn needs_zeroed_d(&self) -> bool {
        self.k_splits() > 1
    }

    /// The buffers the launch reads and writes, in field order (D, A, B, ScaleA, ScaleB).
    pub fn buffers(&self) -> Vec<BufferSpec> {
        let p = &self.problem;
        let (m, n, k) = (p.m as u64, p.n as u64, p.k as u64);
        [
            (Field::D, m * p.ldd as u64 * 2),
            (Field::A, m * k / 2),
            (Field::B, n * k / 2),
            (Field::ScaleA, p.scale_bytes(p.m)),
            (Field::ScaleB, p.scale_bytes(p.n)),
        ]
        .map(|(field, bytes)| BufferSpec { field, bytes })
        .to_vec()
    }

    /// The argument block with the buffers at `ptrs`.
    pub fn kernargs(&self, ptrs: &GemmPointers) -> [u8; KERNARG_BYTES] {
        let p = &self.problem;
        let mut block = [0u8; KERNARG_BYTES];
        for field in Field::ALL {
            let at = field.offset();
            if field.is_pointer() {
                block[at..at + 8].copy_from_slice(&ptrs.get(field).to_le_bytes());
                continue;
            }
            let value: u32 = match field {
                Field::Alpha => ALPHA.to_bits(),
                Field::Beta => BETA.to_bits(),
                Field::StrideD0 | Field::StrideC0 => p.ldd,
                Field::StrideA0 | Field::StrideB0 => p.k,
                Field::StrideScaleA0 | Field::StrideScaleB0 => p.scale_cols(),
                Field::StrideD1
                | Field::StrideC1
                | Field::StrideA1
                | Field::StrideB1
                | Field::StrideScaleA1
                | Field::StrideScaleB1 => 1,
                Field::M => p.m,
                Field::N => p.n,
                Field::K => p.k,
                Field::Log2KSplit => p.log2_k_split,
                Field::D | Field::C | Field::A | Field::B | Field::ScaleA | Field::ScaleB => 0,
            };
            block[at..at + 4].copy_from_slice(&value.to_le_bytes());
        }
        block
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::tests::kernel;

    fn u32_at(block: &[u8], f: Field) -> u32 {
        u32::from_le_bytes(block[f.offset()..f.offset() + 4].try_into().unwrap())
    }

    fn u64_at(block: &[u8], f: Field) -> u64 {
        u64::from_le_bytes(block[f.offset()..f.offset() + 8].try_into().unwrap())
    }

    #[test]
    fn fields_fill_the_block_in_16_byte_slots() {
        assert_eq!(Field::ALL.len() * SLOT_BYTES, KERNARG_BYTES);
        for (i, f) in Field::ALL.iter().enumerate() {
            assert_eq!(f.offset(), 16 * i);
        }
        // The offsets AITER's KernelArgs struct gives.
        assert_eq!(Field::Alpha.offset(), 64);
        assert_eq!(Field::StrideD0.offset(), 96);
        assert_eq!(Field::StrideB1.offset(), 208);
        assert_eq!(Field::M.offset(), 224);
        assert_eq!(Field::K.offset(), 256);
        assert_eq!(Field::ScaleA.offset(), 272);
        assert_eq!(Field::StrideScaleA0.offset(), 304);
        assert_eq!(Field::Log2KSplit.offset(), 368);
    }

    #[test]
    fn block_holds_problem_and_pointers() {
        let k = kernel(256, 256, true);
        let p = GemmProblem::new(300, 544, 768)
            .unwrap()
            .with_d_row_stride(768)
            .unwrap()
            .with_log2_k_split(1)
            .unwrap();
        let l = GemmLaunch::new(&k, p).unwrap();
        let ptrs = GemmPointers {
            d: 0x1000,
            a: 0x2000,
            b: 0x3000,
            scale_a: 0x4000,
            scale_b: 0x5000,
        };
        let b = l.kernargs(&ptrs);
        assert_eq!(u64_at(&b, Field::D), 0x1000);
        assert_eq!(u64_at(&b, Field::C), 0);
        assert_eq!(u64_at(&b, Field::ScaleB), 0x5000);
        assert_eq!(f32::from_bits(u32_at(&b, Field::Alpha)), 1.0);
        assert_eq!(f32::from_bits(u32_at(&b, Field::Beta)), 0.0);
        assert_eq!(u32_at(&b, Field::StrideC0), 768);
        assert_eq!(u32_at(&b, Field::StrideD0), 768);
        assert_eq!(u32_at(&b, Field::StrideA0), 768);
        assert_eq!(u32_at(&b, Field::StrideB0), 768);
        assert_eq!(u32_at(&b, Field::StrideScaleA0), 24);
        assert_eq!(u32_at(&b, Field::StrideScaleB0), 24);
        assert_eq!(u32_at(&b, Field::M), 300);
        assert_eq!(u32_at(&b, Field::N), 544);
        assert_eq!(u32_at(&b, Field::K), 768);
        assert_eq!(u32_at(&b, Field::Log2KSplit), 1);
        // 768 / 2 = 384 rounds up to 512: two slices, 512 + 256.
        assert_eq!(l.k_per_split(), 512);
        assert_eq!(l.grid(), [3, 2, 2]);
        assert!(l.needs_zeroed_d());
        // 544 rounds up to 768: the padded stride leaves the stray columns room.
        assert!(!l.stores_past_n());
        let packed = GemmLaunch::new(&k, GemmProblem::new(300, 544, 768).unwrap()).unwrap();
        assert!(packed.stores_past_n());
        let masked = GemmLaunch::new(&kernel(128, 256, false), *packed.problem()).unwrap();
        assert!(!masked.stores_past_n());
        let whole = GemmLaunch::new(&k, GemmProblem::new(300, 512, 768).unwrap()).unwrap();
        assert!(!whole.stores_past_n());
        let sizes: Vec<_> = l.buffers().iter().map(|b| (b.field(), b.bytes())).collect();
        assert_eq!(
            sizes,
            [
                (Field::D, 300 * 768 * 2),
                (Field::A, 300 * 384),
                (Field::B, 544 * 384),
                (Field::ScaleA, 512 * 24),
                (Field::ScaleB, 768 * 24),
            ]
        );
    }

    #[test]
    fn split_k_follows_aiter() {
        let k = kernel(128, 512, true);
        for (kk, log2, per, splits) in [
            (1024, 0, 1024, 1),
            (1024, 2, 256, 4),
            (1024, 3, 256, 4),
            (2048, 3, 256, 8),
            (768, 1, 512, 2),
        ] {
            let p = GemmProblem::new(16, 512, kk)
                .unwrap()
                .with_log2_k_split(log2)
                .unwrap();
            let l = GemmLaunch::new(&k, p).unwrap();
            assert_eq!(
                (l.k_per_split(), l.k_splits()),
                (per, splits),
                "{kk} {log2}"
            );
        }
    }

    #[test]
    fn refuses_what_the_kernels_cannot_run() {
        use ProblemError::*;
        assert_eq!(GemmProblem::new(0, 16, 256), Err(Zero { what: "M" }));
        assert!(matches!(
            GemmProblem::new(1, 24, 256),
            Err(NotMultiple { what: "N", .. })
        ));
        assert!(matches!(
            GemmProblem::new(1, 48, 256),
            Err(NotMultiple { what: "N", .. })
        ));
        assert!(matches!(
            GemmProblem::new(1, 32, 384),
            Err(NotMultiple { what: "K", .. })
        ));
        assert!(matches!(
            GemmProblem::new(u32::MAX, 32, 256),
            Err(TooLarge { .. })
        ));
        assert!(matches!(
            GemmProblem::new(1, 64, 1 << 28),
            Err(TooLarge { .. })
        ));
        let p = GemmProblem::new(1, 32, 256).unwrap();
        assert_eq!(
            p.with_d_row_stride(16),
            Err(StrideTooSmall { ldd: 16, n: 32 })
        );
        assert!(matches!(p.with_d_row_stride(36), Err(NotMultiple { .. })));
        assert!(matches!(p.with_log2_k_split(9), Err(BadSplit { .. })));
        let split = p.with_log2_k_split(1).unwrap();
        assert!(matches!(
            GemmLaunch::new(&kernel(32, 128, false), split),
            Err(SplitUnsupported { .. })
        ));
        let l = GemmLaunch::new(&kernel(32, 128, false), p).unwrap();
        assert_eq!(l.grid(), [1, 1, 1]);
        assert!(!l.needs_zeroed_d());
    }
}

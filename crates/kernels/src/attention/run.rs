//! Running the attention kernels on a device: input checks, buffers, launches.

use half::bf16;
use tilegen_device::{
    ArgValue, Buffer, Device, DevicePtr, LaunchConfig, LaunchReport, RuntimeError,
};
use tilegen_mx::attention::{AttentionError, AttentionInputs, AttentionShape};

use super::spec::{AttentionKernels, AttentionSpec};

impl AttentionSpec {
    /// Checks that a problem of shape `s` fits this spec and the kernel's index ranges, from the
    /// shape alone, so it can run before any input is made: head counts and page size as built,
    /// every buffer the kernel addresses with 32-bit offsets below 2^31 bytes, and the grid and
    /// the scalar arguments (batch, table stride, cache rows) within their 32-bit fields.
    pub fn check_shape(&self, s: &AttentionShape) -> Result<(), AttentionLaunchError> {
        s.validate()?;
        let v = self.values();
        let want = (
            v.q_heads as usize,
            v.kv_heads as usize,
            v.head_dim as usize,
            v.page_size as usize,
        );
        let have = (s.q_heads, s.kv_heads, s.head_dim, s.page_size);
        if want != have {
            return Err(AttentionLaunchError::Mismatch(format!(
                "(q_heads, kv_heads, head_dim, page_size) = {have:?}, the kernel was built for {want:?}"
            )));
        }
        let (batch, d) = (s.batch as u64, s.head_dim as u64);
        let parts = self.partials() as u64;
        let size = |what: &'static str, factors: &[u64]| {
            tilegen_host::product(what, factors)
                .map_err(|source| AttentionLaunchError::Overflow { what, source })
        };
        for (what, value, unit) in [
            (
                "K or V cache",
                size("K or V cache", &[s.cache_rows as u64, s.kv_heads as u64, d])?,
                "bytes",
            ),
            (
                "queries",
                size("queries", &[batch, s.q_heads as u64, d, 2])?,
                "bytes",
            ),
            (
                "partial outputs",
                size("partial outputs", &[batch, s.q_heads as u64, parts, d, 4])?,
                "bytes",
            ),
            (
                "block table",
                size("block table", &[batch, s.table_stride as u64, 4])?,
                "bytes",
            ),
            // The grid's x: one workgroup per (sequence, KV head), and per query row in the
            // reduce pass; the kernel takes batch, stride and rows as i32.
            (
                "reduce grid",
                size("reduce grid", &[batch, s.q_heads as u64])?,
                "workgroups",
            ),
            ("cache", s.cache_rows as u64, "rows"),
            ("block table's stride", s.table_stride as u64, "entries"),
        ] {
            // Offsets are non-negative i32; a lane masked off points at the buffer's end, whose
            // sum with a uniform offset inside the buffer stays below 2^32.
            if value > i32::MAX as u64 {
                return Err(AttentionLaunchError::TooLarge { what, value, unit });
            }
        }
        Ok(())
    }
}

/// Why an attention problem could not run.
#[derive(Debug, thiserror::Error)]
pub enum AttentionLaunchError {
    /// The inputs do not fit the kernels' spec.
    #[error("the inputs do not match the kernel: {0}")]
    Mismatch(String),
    /// The inputs break a rule of their own (lengths, indices).
    #[error(transparent)]
    Inputs(#[from] AttentionError),
    /// A size does not fit the kernel's 32-bit offsets or fields.
    #[error(
        "the {what} is {value} {unit}, more than the 2^31 - 1 the kernel's signed 32-bit offsets and arguments allow"
    )]
    TooLarge {
        /// The buffer or argument.
        what: &'static str,
        /// Its size.
        value: u64,
        /// What `value` counts (bytes, rows, workgroups).
        unit: &'static str,
    },
    /// A size overflows 64 bits.
    #[error("the size of the {what} overflows")]
    Overflow {
        /// The buffer.
        what: &'static str,
        /// The checked product's error.
        #[source]
        source: tilegen_host::SizeError,
    },
    /// The device failed.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
}

/// Device buffers of one attention launch.
#[derive(Debug, Clone, Copy)]
pub struct AttentionBuffers {
    /// `[batch, q_heads, head_dim]` bf16 output.
    pub out: DevicePtr,
    /// `[batch, q_heads, head_dim]` bf16 queries.
    pub q: DevicePtr,
    /// FP8 K cache.
    pub k_cache: DevicePtr,
    /// FP8 V cache.
    pub v_cache: DevicePtr,
    /// i32 block table.
    pub block_table: DevicePtr,
    /// i32 context lengths.
    pub context_lens: DevicePtr,
    /// f32 K scales per KV head.
    pub k_scales: DevicePtr,
    /// f32 V scales per KV head.
    pub v_scales: DevicePtr,
    /// f32 partial outputs (with a reduce pass).
    pub part_o: Option<DevicePtr>,
    /// f32 partial max and sum (with a reduce pass).
    pub part_ml: Option<DevicePtr>,
    /// Counters of the partials written per (sequence, KV head), a u32 at the start of each
    /// 128-byte line, zero before the launch (with a fused reduce; the kernel leaves them
    /// zero).
    pub counters: Option<DevicePtr>,
}

/// What a run returns.
#[derive(Debug, Clone)]
pub struct AttentionOutput {
    /// `[batch, q_heads, head_dim]`.
    pub out: Vec<bf16>,
    /// The main kernel's launch report.
    pub main: LaunchReport,
    /// The reduce kernel's launch report (with `split_kv > 1`).
    pub reduce: Option<LaunchReport>,
}

fn bytes_of<T: Copy>(v: &[T], f: impl Fn(T) -> [u8; 4]) -> Vec<u8> {
    v.iter().flat_map(|&x| f(x)).collect()
}

impl AttentionKernels {
    /// Checks that `inputs` fit this spec and the kernel's index ranges, before anything is
    /// allocated: shapes, lengths, every page a context uses inside the cache.
    pub fn check_inputs(&self, inputs: &AttentionInputs<'_>) -> Result<(), AttentionLaunchError> {
        self.spec.check_shape(&inputs.shape)?;
        // The reference's own checks: lengths, every used page inside the cache.
        tilegen_mx::attention::check_inputs(inputs)?;
        Ok(())
    }

    /// The main kernel's launch shape for `batch` sequences.
    pub fn launch_config(&self, batch: usize) -> LaunchConfig {
        LaunchConfig {
            grid: [
                (batch * self.spec.values().kv_heads as usize) as u32,
                self.spec.values().split_kv,
                1,
            ],
            block: [self.spec.threads(), 1, 1],
            dynamic_lds: 0,
        }
    }

    /// The reduce kernel's launch shape: one wave per query row.
    pub fn reduce_config(&self, batch: usize) -> LaunchConfig {
        LaunchConfig {
            grid: [(batch * self.spec.values().q_heads as usize) as u32, 1, 1],
            block: [64, 1, 1],
            dynamic_lds: 0,
        }
    }

    /// The main kernel's arguments.
    pub fn main_args(&self, b: &AttentionBuffers, shape: &AttentionShape) -> Vec<ArgValue> {
        let opt = |p: Option<DevicePtr>| p.map_or(ArgValue::Null, ArgValue::Ptr);
        vec![
            ArgValue::Ptr(b.out),
            ArgValue::Ptr(b.q),
            ArgValue::Ptr(b.k_cache),
            ArgValue::Ptr(b.v_cache),
            ArgValue::Ptr(b.block_table),
            ArgValue::Ptr(b.context_lens),
            ArgValue::Ptr(b.k_scales),
            ArgValue::Ptr(b.v_scales),
            opt(b.part_o),
            opt(b.part_ml),
            ArgValue::I32(shape.batch as i32),
            ArgValue::I32(shape.table_stride as i32),
            ArgValue::I32(shape.cache_rows as i32),
            opt(b.counters),
        ]
    }

    /// The reduce kernel's arguments (`None` without a reduce kernel or partial buffers).
    pub fn reduce_args(
        &self,
        b: &AttentionBuffers,
        shape: &AttentionShape,
    ) -> Option<Vec<ArgValue>> {
        self.reduce()?;
        Some(vec![
            ArgValue::Ptr(b.out),
            ArgValue::Ptr(b.part_o?),
            ArgValue::Ptr(b.part_ml?),
            ArgValue::Ptr(b.v_scales),
            ArgValue::I32((shape.batch * shape.q_heads) as i32),
        ])
    }

    /// Bytes of each buffer for `shape`, in [`AttentionBuffers`] order (partials 0 when the
    /// keys are not split over workgroups, counters 0 without a fused reduce; the counters
    /// must be zero before the first launch).
    pub fn buffer_bytes(&self, shape: &AttentionShape) -> [u64; 11] {
        let rows = (shape.batch * shape.q_heads) as u64;
        let d = shape.head_dim as u64;
        let cache = shape.cache_rows as u64 * shape.kv_heads as u64 * d;
        let parts = u64::from(self.spec.partials());
        let reduce = self.spec.writes_partials();
        [
            rows * d * 2,
            rows * d * 2,
            cache,
            cache,
            shape.batch as u64 * shape.table_stride as u64 * 4,
            shape.batch as u64 * 4,
            shape.kv_heads as u64 * 4,
            shape.kv_heads as u64 * 4,
            if reduce { rows * parts * d * 4 } else { 0 },
            if reduce { rows * parts * 8 } else { 0 },
            if self.spec.merges_in_main() {
                shape.batch as u64 * shape.kv_heads as u64 * super::kernel::COUNTER_BYTES as u64
            } else {
                0
            },
        ]
    }

    /// Loads both kernels, copies `inputs` to the device, runs the main kernel and (with
    /// `split_kv > 1`) the reduce kernel, and copies the output back. Buffers are freed on
    /// every path.
    pub fn run(
        &self,
        dev: &dyn Device,
        inputs: &AttentionInputs<'_>,
    ) -> Result<AttentionOutput, AttentionLaunchError> {
        self.check_inputs(inputs)?;
        let s = inputs.shape;
        let sizes = self.buffer_bytes(&s);
        let module = dev.load(self.main().code_object())?;
        let q_bytes: Vec<u8> = inputs
            .q
            .iter()
            .flat_map(|x| x.to_bits().to_le_bytes())
            .collect();
        let q = Buffer::upload(dev, &q_bytes)?;
        let kc = Buffer::upload(dev, inputs.k_cache)?;
        let vc = Buffer::upload(dev, inputs.v_cache)?;
        let table = Buffer::upload(dev, &bytes_of(inputs.block_table, i32::to_le_bytes))?;
        let lens = Buffer::upload(dev, &bytes_of(inputs.context_lens, i32::to_le_bytes))?;
        let ks = Buffer::upload(dev, &bytes_of(inputs.k_scales, f32::to_le_bytes))?;
        let vs = Buffer::upload(dev, &bytes_of(inputs.v_scales, f32::to_le_bytes))?;
        let out = Buffer::new(dev, sizes[0])?;
        let sized = |bytes: u64| (bytes > 0).then(|| Buffer::new(dev, bytes)).transpose();
        let (part_o, part_ml, counters) = (sized(sizes[8])?, sized(sizes[9])?, sized(sizes[10])?);
        let bufs = AttentionBuffers {
            out: out.ptr(),
            q: q.ptr(),
            k_cache: kc.ptr(),
            v_cache: vc.ptr(),
            block_table: table.ptr(),
            context_lens: lens.ptr(),
            k_scales: ks.ptr(),
            v_scales: vs.ptr(),
            part_o: part_o.as_ref().map(Buffer::ptr),
            part_ml: part_ml.as_ref().map(Buffer::ptr),
            counters: counters.as_ref().map(Buffer::ptr),
        };
        let main = tilegen_device::launch(
            dev,
            &module,
            self.main().name(),
            &self.launch_config(s.batch),
            &self.main_args(&bufs, &s),
        )?;
        let reduce = match (self.reduce(), self.reduce_args(&bufs, &s)) {
            (Some(r), Some(args)) => {
                let module = dev.load(r.code_object())?;
                Some(tilegen_device::launch(
                    dev,
                    &module,
                    r.name(),
                    &self.reduce_config(s.batch),
                    &args,
                )?)
            }
            _ => None,
        };
        let raw = out.to_vec()?;
        let out = raw
            .chunks_exact(2)
            .map(|c| bf16::from_bits(u16::from_le_bytes([c[0], c[1]])))
            .collect();
        Ok(AttentionOutput { out, main, reduce })
    }
}

//! Running a compiled GEMM on a device: host-side input preparation (the preshuffles the
//! variant expects), launch geometry, and the argument list.

use tilegen_device::{
    ArgValue, Buffer, Device, DevicePtr, LaunchConfig, LaunchReport, Module, RuntimeError,
};
use tilegen_mx::{Comparison, ElementDiff, MX_BLOCK, MxError, MxMatrix, Reference, Shuffler};

use super::kernel::CompiledKernel;
use super::spec::{KernelSpec, OutDtype, Variant};

/// Why a GEMM could not run.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// The problem breaks a kernel rule.
    #[error("problem {m}x{n}x{k}: {rule}")]
    Shape {
        /// M.
        m: usize,
        /// N.
        n: usize,
        /// K.
        k: usize,
        /// The rule.
        rule: String,
    },
    /// Inputs laid out for another variant.
    #[error("the inputs are laid out for the {inputs} variant but the kernel is {kernel}")]
    InputsFor {
        /// The inputs' variant.
        inputs: Variant,
        /// The kernel's.
        kernel: Variant,
    },
    /// Preparing inputs failed.
    #[error("preparing inputs: {0}")]
    Inputs(#[from] MxError),
    /// The device failed.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// A split-K workspace smaller than the launch needs.
    #[error("the split-K workspace is {given} bytes; this launch needs {needed}")]
    Workspace {
        /// Bytes the launch needs ([`CompiledKernel::workspace_bytes`]).
        needed: u64,
        /// Bytes given.
        given: u64,
    },
}

/// A GEMM's inputs in the byte layouts one kernel variant reads; made by
/// [`CompiledKernel::prepare_inputs`], so they always match the kernel they run on.
#[derive(Debug, Clone)]
pub struct GemmInputs {
    variant: Variant,
    m: usize,
    n: usize,
    k: usize,
    a: Vec<u8>,
    b: Vec<u8>,
    sfa: Vec<u8>,
    sfb: Vec<u8>,
}

impl GemmInputs {
    /// M, N and K.
    pub fn shape(&self) -> (usize, usize, usize) {
        (self.m, self.n, self.k)
    }

    /// The variant whose layouts these are.
    pub fn variant(&self) -> Variant {
        self.variant
    }

    /// A, `[M, K/2]` row-major.
    pub fn a(&self) -> &[u8] {
        &self.a
    }

    /// B: `[N, K/2]` row-major (LDS variant) or the Shuffler's 5D layout (preb).
    pub fn b(&self) -> &[u8] {
        &self.b
    }

    /// A scales: `[M, K/32]` row-major, or the 4D layout over `scale_padded_mn(M)` rows (preb).
    pub fn sfa(&self) -> &[u8] {
        &self.sfa
    }

    /// B scales, likewise over N.
    pub fn sfb(&self) -> &[u8] {
        &self.sfb
    }
}

/// C as a kernel wrote it: `[M, N]` row-major in the kernel's output type.
#[derive(Debug, Clone, PartialEq)]
pub struct GemmOutput {
    m: usize,
    n: usize,
    dtype: OutDtype,
    bytes: Vec<u8>,
    /// Rounding adds into each element: split-K slices adding bf16 (0: rounded once).
    rounded_adds: u32,
}

impl GemmOutput {
    /// M and N.
    pub fn shape(&self) -> (usize, usize) {
        (self.m, self.n)
    }

    /// The element type.
    pub fn dtype(&self) -> OutDtype {
        self.dtype
    }

    /// The raw little-endian bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Every element widened to f32 (exact for bf16).
    pub fn to_f32(&self) -> Vec<f32> {
        match self.dtype {
            OutDtype::Bf16 => self
                .bytes
                .chunks_exact(2)
                .map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32())
                .collect(),
            OutDtype::F32 => self
                .bytes
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
        }
    }

    /// Compares with the reference product, with the rounding of the output type. A bf16 C
    /// that split-K slices added into is held to their bound: each of `S` slices rounds its
    /// partial to bf16 and its add into C rounds again, every value at most the sum of the
    /// element's term magnitudes, so the error is at most `S` bf16 ulps of that sum (plus
    /// the f32 accumulation bound).
    pub fn compare(&self, reference: &Reference) -> Result<Comparison, MxError> {
        if self.dtype == OutDtype::Bf16 && self.rounded_adds > 1 {
            return self.compare_rounded_adds(reference);
        }
        match self.dtype {
            OutDtype::Bf16 => {
                let got: Vec<half::bf16> = self
                    .bytes
                    .chunks_exact(2)
                    .map(|b| half::bf16::from_le_bytes([b[0], b[1]]))
                    .collect();
                reference.compare_bf16(&got)
            }
            OutDtype::F32 => reference.compare_f32(&self.to_f32()),
        }
    }
}

/// Checks `m x n x k` against what every GEMM kernel supports: M >= 1, N a multiple of 16, K a
/// multiple of 256, and buffers within the 32-bit range of a buffer resource.
pub fn check_problem(m: usize, n: usize, k: usize, out_bytes: usize) -> Result<(), LaunchError> {
    let fail = |rule: String| Err(LaunchError::Shape { m, n, k, rule });
    if m == 0 {
        return fail("M must be at least 1".into());
    }
    if n == 0 || !n.is_multiple_of(16) {
        return fail(format!("N = {n} must be a positive multiple of 16"));
    }
    if k == 0 || !k.is_multiple_of(256) {
        return fail(format!("K = {k} must be a positive multiple of 256"));
    }
    let limit = u32::MAX as u128;
    let (m, n, k) = (m as u128, n as u128, k as u128);
    for (what, bytes) in [
        ("A", m * k / 2),
        ("B", n * k / 2),
        ("C", m * n * out_bytes as u128),
        ("scales", (m.max(n) + 31) * k / MX_BLOCK as u128),
    ] {
        if bytes > limit {
            return fail(format!(
                "{what} is {bytes} bytes; a buffer resource addresses at most 2^32 - 1"
            ));
        }
    }
    Ok(())
}

impl GemmOutput {
    fn compare_rounded_adds(&self, reference: &Reference) -> Result<Comparison, MxError> {
        let got = self.to_f32();
        let (c, abs_sum) = (reference.c(), reference.abs_sum());
        if got.len() != c.len() {
            return Err(MxError::ShapeMismatch {
                rows: reference.rows(),
                cols: reference.cols(),
                actual: got.len(),
            });
        }
        let per_block = reference.k_blocks() as f64 * f64::from(f32::EPSILON);
        let adds = f64::from(self.rounded_adds);
        let mut cmp = Comparison {
            elements: got.len(),
            mismatches: 0,
            worst: None,
        };
        let mut worst_ratio = -1.0;
        for (i, (&g, (&w, &s))) in got.iter().zip(c.iter().zip(abs_sum)).enumerate() {
            // The magnitude sum is itself an f32 sum: 1% above it covers its rounding.
            let mag = f64::from(s) * 1.01;
            let d = ElementDiff {
                row: i / reference.cols(),
                col: i % reference.cols(),
                got: g,
                want: w,
                bound: per_block * f64::from(s) + adds * bf16_spacing(mag),
            };
            if !d.agrees() {
                cmp.mismatches += 1;
            }
            if d.ratio() > worst_ratio {
                worst_ratio = d.ratio();
                cmp.worst = Some(d);
            }
        }
        Ok(cmp)
    }
}

/// The spacing of bf16 values at magnitude `x` (8 significant bits; the subnormal spacing
/// below the normal range).
fn bf16_spacing(x: f64) -> f64 {
    if x < 2f64.powi(-126) {
        return 2f64.powi(-133);
    }
    2f64.powi(x.log2().floor() as i32 - 7)
}

impl KernelSpec {
    /// Checks `m x n x k` against this kernel: [`check_problem`] with its output type, and with
    /// split-K a K that divides into `split_k` slices of whole `bk_elems` tiles.
    pub fn check_problem(&self, m: usize, n: usize, k: usize) -> Result<(), LaunchError> {
        check_problem(m, n, k, self.out_dtype.bytes() as usize)?;
        if self.reduces_split_k() {
            // Each workspace plane is addressed by its own buffer resource.
            check_problem(m, n, k, 4).map_err(|_| LaunchError::Shape {
                m,
                n,
                k,
                rule: format!(
                    "a split-K workspace plane is {} bytes; a buffer resource addresses at most \
                     2^32 - 1",
                    m as u128 * n as u128 * 4
                ),
            })?;
        }
        let slice = self.split_k() as usize * self.bk_elems as usize;
        if self.split_k() > 1 && !k.is_multiple_of(slice) {
            return Err(LaunchError::Shape {
                m,
                n,
                k,
                rule: format!(
                    "K must be a multiple of split_k x bk_elems = {} x {} = {slice} (each K \
                     slice runs whole tiles)",
                    self.split_k(),
                    self.bk_elems
                ),
            });
        }
        Ok(())
    }
}

impl GemmInputs {
    /// Lays out `a` (`[M, K]`) and `b` (`[N, K]`) for `variant`: as they are for the LDS
    /// variant, preshuffled (B and both scale tensors) for preb.
    fn new(variant: Variant, a: &MxMatrix, b: &MxMatrix) -> Result<Self, LaunchError> {
        let (m, n, k) = (a.rows(), b.rows(), a.k());
        if b.k() != k {
            return Err(LaunchError::Shape {
                m,
                n,
                k,
                rule: format!("A has K = {k} but B has K = {}", b.k()),
            });
        }
        check_problem(m, n, k, 4)?;
        let (a_bytes, b_bytes, sfa, sfb) = match variant {
            Variant::Lds => (
                a.data().to_vec(),
                b.data().to_vec(),
                a.scales().to_vec(),
                b.scales().to_vec(),
            ),
            Variant::Preb => {
                let s = Shuffler::new(1)?;
                let mut bp = vec![0u8; n * k / 2];
                s.preshuffle_b_5d(n, k / 2, b.data(), &mut bp)?;
                let mut sa = vec![0u8; s.scale_len(m, k / MX_BLOCK)?];
                s.preshuffle_scale_4d(m, k / MX_BLOCK, a.scales(), &mut sa)?;
                let mut sb = vec![0u8; s.scale_len(n, k / MX_BLOCK)?];
                s.preshuffle_scale_4d(n, k / MX_BLOCK, b.scales(), &mut sb)?;
                (a.data().to_vec(), bp, sa, sb)
            }
        };
        Ok(GemmInputs {
            variant,
            m,
            n,
            k,
            a: a_bytes,
            b: b_bytes,
            sfa,
            sfb,
        })
    }
}

/// Device buffers of one GEMM.
#[derive(Debug, Clone, Copy)]
pub struct GemmBuffers {
    /// C.
    pub c: DevicePtr,
    /// A.
    pub a: DevicePtr,
    /// B.
    pub b: DevicePtr,
    /// A scales.
    pub sfa: DevicePtr,
    /// B scales.
    pub sfb: DevicePtr,
}

/// Bytes of each buffer of one GEMM, in the layouts the kernel's variant reads (what
/// [`CompiledKernel::prepare_inputs`] makes for the shape).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GemmBufferSizes {
    /// C.
    pub c: u64,
    /// A.
    pub a: u64,
    /// B.
    pub b: u64,
    /// A scales (padded as the variant pads them).
    pub sfa: u64,
    /// B scales.
    pub sfb: u64,
}

impl CompiledKernel {
    /// The buffer sizes of an `m x n x k` problem (checked against the kernel's rules).
    pub fn buffer_sizes(
        &self,
        m: usize,
        n: usize,
        k: usize,
    ) -> Result<GemmBufferSizes, LaunchError> {
        self.spec.check_problem(m, n, k)?;
        let (sfa, sfb) = match self.spec.variant() {
            Variant::Lds => (m * k / MX_BLOCK, n * k / MX_BLOCK),
            Variant::Preb => {
                let s = Shuffler::new(1)?;
                (s.scale_len(m, k / MX_BLOCK)?, s.scale_len(n, k / MX_BLOCK)?)
            }
        };
        Ok(GemmBufferSizes {
            c: self.c_bytes(m, n) as u64,
            a: (m * k / 2) as u64,
            b: (n * k / 2) as u64,
            sfa: sfa as u64,
            sfb: sfb as u64,
        })
    }

    /// The kernel's explicit arguments for buffers `bufs` and an `m x n x k` problem, in its
    /// signature's order.
    pub fn arguments(&self, bufs: &GemmBuffers, m: usize, n: usize, k: usize) -> [ArgValue; 8] {
        [
            ArgValue::Ptr(bufs.c),
            ArgValue::Ptr(bufs.a),
            ArgValue::Ptr(bufs.b),
            ArgValue::Ptr(bufs.sfa),
            ArgValue::Ptr(bufs.sfb),
            ArgValue::I32(m as i32),
            ArgValue::I32(n as i32),
            ArgValue::I32(k as i32),
        ]
    }

    /// Workgroups for an `m x n` output: `(ceil(N / BN), ceil(M / BM), split_k)`.
    pub fn grid(&self, m: usize, n: usize) -> [u32; 3] {
        [
            n.div_ceil(self.spec.bn as usize) as u32,
            m.div_ceil(self.spec.bm as usize) as u32,
            self.spec.split_k(),
        ]
    }

    /// Whether the kernel adds into C instead of storing it (split-K with atomics), so C must
    /// hold zeros when it starts.
    pub fn accumulates_into_c(&self) -> bool {
        self.spec.split_k_atomic()
    }

    /// The split-K reduction kernel of this code object, run after the GEMM (see
    /// [`KernelSpec::split_k`]), if the launch has one.
    pub fn reduce_name(&self) -> Option<String> {
        self.spec.reduces_split_k().then(|| self.spec.reduce_name())
    }

    /// Bytes of the f32 workspace an `m x n` launch needs (0 without the split-K reduction).
    pub fn workspace_bytes(&self, m: usize, n: usize) -> u64 {
        self.spec.workspace_bytes(m, n)
    }

    /// The GEMM kernel's arguments when the split-K reduction runs: its C is the workspace
    /// (the slices' f32 planes), the other buffers `bufs`'.
    pub fn partial_arguments(
        &self,
        bufs: &GemmBuffers,
        workspace: DevicePtr,
        m: usize,
        n: usize,
        k: usize,
    ) -> [ArgValue; 8] {
        let gemm = GemmBuffers {
            c: workspace,
            ..*bufs
        };
        self.arguments(&gemm, m, n, k)
    }

    /// The split-K reduction's arguments, `(c, workspace, m, n)`.
    pub fn reduce_arguments(
        &self,
        c: DevicePtr,
        workspace: DevicePtr,
        m: usize,
        n: usize,
    ) -> [ArgValue; 4] {
        [
            ArgValue::Ptr(c),
            ArgValue::Ptr(workspace),
            ArgValue::I32(m as i32),
            ArgValue::I32(n as i32),
        ]
    }

    /// The split-K reduction's launch shape for an `m x n` output.
    pub fn reduce_launch_config(&self, m: usize, n: usize) -> LaunchConfig {
        LaunchConfig {
            grid: super::reduce::grid(m, n),
            block: [super::reduce::REDUCE_THREADS, 1, 1],
            dynamic_lds: 0,
        }
    }

    /// The launch shape for an `m x n` output.
    pub fn launch_config(&self, m: usize, n: usize) -> LaunchConfig {
        LaunchConfig {
            grid: self.grid(m, n),
            block: [self.spec.threads(), 1, 1],
            dynamic_lds: 0,
        }
    }

    /// Bytes of C for an `m x n` output.
    pub fn c_bytes(&self, m: usize, n: usize) -> usize {
        m * n * self.spec.out_dtype.bytes() as usize
    }

    /// Lays out `a` (`[M, K]`) and `b` (`[N, K]`) the way this kernel reads them.
    pub fn prepare_inputs(&self, a: &MxMatrix, b: &MxMatrix) -> Result<GemmInputs, LaunchError> {
        GemmInputs::new(self.spec.variant(), a, b)
    }

    /// Loads the code object on `device`.
    pub fn load(&self, device: &dyn Device) -> Result<Module, LaunchError> {
        Ok(device.load(self.code_object())?)
    }

    /// Launches on buffers already on the device. A split-K kernel with atomics adds into C,
    /// so C is zeroed first (a host copy of zeros: the device API has no fill). A split-K
    /// kernel without them writes its slices' partials to a workspace allocated for the launch
    /// (every element is written, so it is not zeroed), then the reduction sums them into C;
    /// the workspace is freed on every path ([`CompiledKernel::launch_with_workspace`] takes
    /// the caller's instead). The report's wall time is both kernels'; its instruction counts
    /// are the GEMM's.
    pub fn launch(
        &self,
        device: &dyn Device,
        module: &Module,
        bufs: &GemmBuffers,
        m: usize,
        n: usize,
        k: usize,
    ) -> Result<LaunchReport, LaunchError> {
        self.spec.check_problem(m, n, k)?;
        let bytes = self.workspace_bytes(m, n);
        if bytes == 0 {
            return self.launch_with_workspace(device, module, bufs, DevicePtr(0), 0, m, n, k);
        }
        let workspace = Buffer::new(device, bytes)?;
        let report =
            self.launch_with_workspace(device, module, bufs, workspace.ptr(), bytes, m, n, k)?;
        workspace.free()?;
        Ok(report)
    }

    /// [`CompiledKernel::launch`] with a split-K workspace the caller owns, `workspace_len`
    /// bytes at `workspace` (at least [`CompiledKernel::workspace_bytes`]; unused, and may be
    /// empty, when the launch has no split-K reduction), so that repeated launches allocate
    /// nothing. Its contents need not be zero and are overwritten.
    #[allow(clippy::too_many_arguments)]
    pub fn launch_with_workspace(
        &self,
        device: &dyn Device,
        module: &Module,
        bufs: &GemmBuffers,
        workspace: DevicePtr,
        workspace_len: u64,
        m: usize,
        n: usize,
        k: usize,
    ) -> Result<LaunchReport, LaunchError> {
        self.spec.check_problem(m, n, k)?;
        if self.accumulates_into_c() {
            device.copy_to_device(bufs.c, &vec![0u8; self.c_bytes(m, n)])?;
        }
        let Some(reduce) = self.reduce_name() else {
            let args = self.arguments(bufs, m, n, k);
            return Ok(tilegen_device::launch(
                device,
                module,
                self.name(),
                &self.launch_config(m, n),
                &args,
            )?);
        };
        let needed = self.workspace_bytes(m, n);
        if workspace_len < needed {
            return Err(LaunchError::Workspace {
                needed,
                given: workspace_len,
            });
        }
        let gemm = tilegen_device::launch(
            device,
            module,
            self.name(),
            &self.launch_config(m, n),
            &self.partial_arguments(bufs, workspace, m, n, k),
        )?;
        let sum = tilegen_device::launch(
            device,
            module,
            &reduce,
            &self.reduce_launch_config(m, n),
            &self.reduce_arguments(bufs.c, workspace, m, n),
        )?;
        Ok(LaunchReport {
            wall: gemm.wall + sum.wall,
            stats: gemm.stats,
        })
    }

    /// Loads the code object, copies `inputs` to the device, runs, copies C back; the module
    /// is unloaded and the buffers freed on every path. To run a kernel many times, load it
    /// once with [`CompiledKernel::load`] and call [`CompiledKernel::run_loaded`].
    pub fn run(
        &self,
        device: &dyn Device,
        inputs: &GemmInputs,
    ) -> Result<(GemmOutput, LaunchReport), LaunchError> {
        self.check_inputs(inputs)?;
        let module = self.load(device)?;
        self.run_loaded(device, &module, inputs)
    }

    /// [`CompiledKernel::run`] with a module [`CompiledKernel::load`] made: buffers are
    /// allocated for the run and freed on every path, errors included.
    pub fn run_loaded(
        &self,
        device: &dyn Device,
        module: &Module,
        inputs: &GemmInputs,
    ) -> Result<(GemmOutput, LaunchReport), LaunchError> {
        self.check_inputs(inputs)?;
        let c_len = self.c_bytes(inputs.m, inputs.n);
        let c = Buffer::new(device, c_len as u64)?;
        let a = Buffer::upload(device, &inputs.a)?;
        let b = Buffer::upload(device, &inputs.b)?;
        let sfa = Buffer::upload(device, &inputs.sfa)?;
        let sfb = Buffer::upload(device, &inputs.sfb)?;
        let bufs = GemmBuffers {
            c: c.ptr(),
            a: a.ptr(),
            b: b.ptr(),
            sfa: sfa.ptr(),
            sfb: sfb.ptr(),
        };
        let report = self.launch(device, module, &bufs, inputs.m, inputs.n, inputs.k)?;
        let bytes = c.to_vec()?;
        for buffer in [c, a, b, sfa, sfb] {
            buffer.free()?;
        }
        let c = GemmOutput {
            m: inputs.m,
            n: inputs.n,
            dtype: self.spec.out_dtype,
            bytes,
            // Atomics round at every add; the reduction rounds once.
            rounded_adds: if self.accumulates_into_c() {
                self.spec.split_k()
            } else {
                0
            },
        };
        Ok((c, report))
    }

    fn check_inputs(&self, inputs: &GemmInputs) -> Result<(), LaunchError> {
        if inputs.variant != self.spec.variant() {
            return Err(LaunchError::InputsFor {
                inputs: inputs.variant,
                kernel: self.spec.variant(),
            });
        }
        Ok(())
    }
}

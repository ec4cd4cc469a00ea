//! Running a compiled GEMM on a device: host-side input preparation (the preshuffles the
//! variant expects), launch geometry, and the argument list.

use tilegen_mx::{Comparison, MxError, MxMatrix, Reference, Shuffler};
use tilegen_runtime::{
    ArgValue, Device, DevicePtr, LaunchConfig, LaunchReport, Module, RuntimeError,
};

use crate::compiled::CompiledKernel;
use crate::spec::{OutDtype, Variant};

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

    /// Compares with the reference product, with the rounding of the output type.
    pub fn compare(&self, reference: &Reference) -> Result<Comparison, MxError> {
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
        ("scales", (m.max(n) + 31) * k / 32),
    ] {
        if bytes > limit {
            return fail(format!(
                "{what} is {bytes} bytes; a buffer resource addresses at most 2^32 - 1"
            ));
        }
    }
    Ok(())
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
                let mut sa = vec![0u8; s.scale_len(m, k / 32)?];
                s.preshuffle_scale_4d(m, k / 32, a.scales(), &mut sa)?;
                let mut sb = vec![0u8; s.scale_len(n, k / 32)?];
                s.preshuffle_scale_4d(n, k / 32, b.scales(), &mut sb)?;
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

impl CompiledKernel {
    /// Workgroups for an `m x n` output: `(ceil(N / BN), ceil(M / BM), 1)`.
    pub fn grid(&self, m: usize, n: usize) -> [u32; 3] {
        [
            n.div_ceil(self.spec.bn as usize) as u32,
            m.div_ceil(self.spec.bm as usize) as u32,
            1,
        ]
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
        GemmInputs::new(self.spec.variant, a, b)
    }

    /// Loads the code object on `device`.
    pub fn load(&self, device: &dyn Device) -> Result<Module, LaunchError> {
        Ok(device.load(self.code_object())?)
    }

    /// Launches on buffers already on the device.
    pub fn launch(
        &self,
        device: &dyn Device,
        module: &Module,
        bufs: &GemmBuffers,
        m: usize,
        n: usize,
        k: usize,
    ) -> Result<LaunchReport, LaunchError> {
        check_problem(m, n, k, self.spec.out_dtype.bytes() as usize)?;
        let args = [
            ArgValue::Ptr(bufs.c),
            ArgValue::Ptr(bufs.a),
            ArgValue::Ptr(bufs.b),
            ArgValue::Ptr(bufs.sfa),
            ArgValue::Ptr(bufs.sfb),
            ArgValue::I32(m as i32),
            ArgValue::I32(n as i32),
            ArgValue::I32(k as i32),
        ];
        Ok(tilegen_runtime::launch(
            device,
            module,
            self.name(),
            &self.launch_config(m, n),
            &args,
        )?)
    }

    /// Copies `inputs` to the device, runs, copies C back and frees the buffers.
    pub fn run(
        &self,
        device: &dyn Device,
        inputs: &GemmInputs,
    ) -> Result<(GemmOutput, LaunchReport), LaunchError> {
        if inputs.variant != self.spec.variant {
            return Err(LaunchError::InputsFor {
                inputs: inputs.variant,
                kernel: self.spec.variant,
            });
        }
        let module = self.load(device)?;
        let c_len = self.c_bytes(inputs.m, inputs.n);
        let mut owned = Vec::new();
        let mut upload = |bytes: &[u8], len: usize| -> Result<DevicePtr, LaunchError> {
            let p = device.alloc(len.max(1) as u64)?;
            owned.push(p);
            device.copy_to_device(p, bytes)?;
            Ok(p)
        };
        let bufs = GemmBuffers {
            c: upload(&[], c_len)?,
            a: upload(&inputs.a, inputs.a.len())?,
            b: upload(&inputs.b, inputs.b.len())?,
            sfa: upload(&inputs.sfa, inputs.sfa.len())?,
            sfb: upload(&inputs.sfb, inputs.sfb.len())?,
        };
        let result = self
            .launch(device, &module, &bufs, inputs.m, inputs.n, inputs.k)
            .and_then(|report| {
                let mut bytes = vec![0u8; c_len];
                device.copy_from_device(bufs.c, &mut bytes)?;
                let c = GemmOutput {
                    m: inputs.m,
                    n: inputs.n,
                    dtype: self.spec.out_dtype,
                    bytes,
                };
                Ok((c, report))
            });
        for p in owned {
            device.free(p)?;
        }
        result
    }
}

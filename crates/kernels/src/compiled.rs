//! The one compile path every kernel family takes (declare, emit the body, compile in process,
//! read the resources back) and the one compiled-kernel type they all hold. A family wraps it
//! with what it was built from: the GEMM's [`CompiledKernel`](crate::CompiledKernel) adds its
//! spec, a MoE layer's kernels their stage.

use serde::Serialize;
use tilegen_arch::{CuLimits, WorkgroupNeeds};
use tilegen_dsl::{CompileOptions, Context, Kernel, KernelAttrs, Signature, Timings};

/// Why a validated kernel could not be compiled: a bug in the generator (or the toolchain),
/// reported with the cause rather than aborted on.
#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    /// Emitting the body, LLVM or the linker failed.
    #[error("compiling kernel {kernel} failed")]
    Compile {
        /// The kernel's symbol.
        kernel: String,
        /// Why.
        #[source]
        source: tilegen_dsl::DslError,
    },
    /// The code object the compiler produced does not describe the kernel.
    #[error("reading the resources of kernel {kernel} from its code object failed")]
    Report {
        /// The kernel's symbol.
        kernel: String,
        /// Why.
        #[source]
        source: ReportError,
    },
}

/// Why a [`ResourceReport`] could not be read from a code object.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// Not a usable code object.
    #[error(transparent)]
    CodeObject(#[from] tilegen_codeobj::CodeObjectError),
    /// The code object lacks the kernel.
    #[error("the code object has no kernel {0}")]
    NoKernel(String),
}

/// Resources of a compiled kernel, read back from its code object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ResourceReport {
    /// Architectural VGPRs per lane.
    pub vgpr_count: u32,
    /// AGPRs per lane.
    pub agpr_count: u32,
    /// SGPRs per wave.
    pub sgpr_count: u32,
    /// VGPRs spilled to scratch.
    pub vgpr_spill_count: u32,
    /// SGPRs spilled.
    pub sgpr_spill_count: u32,
    /// Static LDS bytes per workgroup.
    pub lds_bytes: u32,
    /// Scratch bytes per lane.
    pub private_bytes: u32,
    /// Kernel argument bytes.
    pub kernarg_bytes: u32,
    /// Work-items per workgroup.
    pub workgroup_size: u32,
    /// Waves per SIMD the register and LDS use allow (gfx950: 8 at most).
    pub occupancy: u32,
    /// Bytes of machine code.
    pub code_bytes: u32,
    /// The kernarg layout: every argument (explicit and hidden) in offset order.
    pub kernargs: Vec<Kernarg>,
}

/// One kernel argument as the code object lays it out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Kernarg {
    /// Source name (hidden arguments have none).
    pub name: Option<String>,
    /// Byte offset in the kernarg segment.
    pub offset: u32,
    /// Size in bytes.
    pub size: u32,
    /// `.value_kind` (`global_buffer`, `by_value`, `hidden_*`).
    pub kind: String,
}

/// One kernel compiled to a loadable gfx950 code object, with what compiling it produced. Every
/// kernel family holds these. Read-only: what it holds was produced together and stays together.
#[derive(Debug, Clone)]
pub struct BuiltKernel {
    name: String,
    code_object: Vec<u8>,
    asm: String,
    ir: String,
    report: ResourceReport,
    timings: Timings,
    diagnostics: Vec<String>,
}

impl BuiltKernel {
    /// Kernel symbol name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The code object (`.hsaco`).
    pub fn code_object(&self) -> &[u8] {
        &self.code_object
    }

    /// LLVM's assembly listing (empty when built without it).
    pub fn asm(&self) -> &str {
        &self.asm
    }

    /// LLVM IR before optimisation (empty when built without it).
    pub fn ir(&self) -> &str {
        &self.ir
    }

    /// Resources read back from the code object, the kernarg layout included.
    pub fn report(&self) -> &ResourceReport {
        &self.report
    }

    /// Compile stage times (zero for a kernel read from a code object).
    pub fn timings(&self) -> &Timings {
        &self.timings
    }

    /// Warnings LLVM reported while compiling (e.g. an occupancy target it could not meet).
    pub fn diagnostics(&self) -> &[String] {
        &self.diagnostics
    }

    /// Kernel `name` of a code object compiled earlier (a kernel pack's, a compile cache's): the
    /// report is read back; the listing and IR are empty and the timings zero.
    pub(crate) fn from_code_object(
        name: String,
        code_object: Vec<u8>,
    ) -> Result<Self, ReportError> {
        let report = ResourceReport::read(&code_object, &name)?;
        Ok(BuiltKernel {
            name,
            code_object,
            asm: String::new(),
            ir: String::new(),
            report,
            timings: Timings::default(),
            diagnostics: Vec::new(),
        })
    }
}

/// Declares kernel `name` with `signature`, emits its body with `body`, compiles it in process
/// and reads its resources back: the path every kernel family takes.
pub(crate) fn compile_kernel(
    name: &str,
    signature: &Signature,
    attrs: KernelAttrs,
    options: CompileOptions,
    body: impl FnOnce(&Kernel<'_>) -> tilegen_dsl::Result<()>,
) -> Result<BuiltKernel, CompileError> {
    let ctx = Context::create();
    let compile_err = |source| CompileError::Compile {
        kernel: name.to_string(),
        source,
    };
    let k = Kernel::new(&ctx, name, signature, attrs).map_err(compile_err)?;
    body(&k).and_then(|()| k.finish()).map_err(compile_err)?;
    let out = tilegen_dsl::compile(&k, options).map_err(compile_err)?;
    let report =
        ResourceReport::read(&out.code_object, name).map_err(|source| CompileError::Report {
            kernel: name.to_string(),
            source,
        })?;
    Ok(BuiltKernel {
        name: name.to_string(),
        code_object: out.code_object,
        asm: out.asm.unwrap_or_default(),
        ir: out.ir.unwrap_or_default(),
        report,
        timings: out.timings,
        diagnostics: out.diagnostics,
    })
}

impl ResourceReport {
    /// Reads the report of kernel `name` from a code object.
    pub fn read(code_object: &[u8], name: &str) -> Result<Self, ReportError> {
        let co = tilegen_codeobj::CodeObject::parse(code_object)?;
        let k = co
            .kernel(name)
            .ok_or_else(|| ReportError::NoKernel(name.to_string()))?;
        let (m, d) = (&k.meta, &k.descriptor);
        Ok(ResourceReport {
            vgpr_count: m.vgpr_count,
            agpr_count: m.agpr_count,
            sgpr_count: m.sgpr_count,
            vgpr_spill_count: m.vgpr_spill_count,
            sgpr_spill_count: m.sgpr_spill_count,
            lds_bytes: d.group_segment_fixed_size,
            private_bytes: d.private_segment_fixed_size,
            kernarg_bytes: m.kernarg_segment_size,
            workgroup_size: m.max_flat_workgroup_size,
            occupancy: occupancy(
                d.allocated_vgprs(),
                d.granulated_sgpr_count(),
                d.group_segment_fixed_size,
                m.max_flat_workgroup_size,
            ),
            code_bytes: k.code_size as u32,
            kernargs: m
                .args
                .iter()
                .map(|a| Kernarg {
                    name: a.name.clone(),
                    offset: a.offset,
                    size: a.size,
                    kind: a.value_kind.to_string(),
                })
                .collect(),
        })
    }
}

/// Waves per SIMD a full gfx950 CU holds of a kernel: tilegen-arch's occupancy rule over
/// the descriptor's registers and LDS, the workgroup's waves spread over the SIMDs. A
/// workgroup of more than one wave is taken to use barriers (every tilegen kernel does; on
/// gfx950 the wave slots bind first anyway). 0: a workgroup does not fit.
pub fn occupancy(
    allocated_vgprs: u32,
    granulated_sgprs: u32,
    lds_bytes: u32,
    workgroup_size: u32,
) -> u32 {
    let limits = CuLimits::GFX950;
    limits
        .occupancy(&WorkgroupNeeds {
            work_items: u64::from(workgroup_size),
            vgprs: allocated_vgprs,
            granulated_sgprs,
            lds_bytes: u64::from(lds_bytes),
            barrier: true,
        })
        .resident_waves_per_simd(&limits)
}

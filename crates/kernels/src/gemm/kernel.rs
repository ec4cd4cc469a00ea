//! Building a [`KernelSpec`] into a [`CompiledKernel`]: the GEMM's wrapper of the shared
//! [`BuiltKernel`] with the spec it was built from.

use tilegen_dsl::{CompileOptions, KernelAttrs};

use super::spec::{KernelSpec, SpecError};
use super::{common, lds, preb, reduce};
use crate::compiled::{BuiltKernel, CompileError, ResourceReport, compile_kernel};

/// Why [`KernelSpec::build`] gave no kernel.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The spec breaks a rule; nothing was generated.
    #[error(transparent)]
    Spec(#[from] SpecError),
    /// Compiling the validated spec failed (a generator bug, reported with its cause).
    #[error(transparent)]
    Compile(#[from] CompileError),
}

/// A GEMM spec compiled to a loadable gfx950 code object: the [`BuiltKernel`] (its name,
/// code object, listing, IR, report, timings and diagnostics, read through `Deref`) and the spec
/// with its cache key.
#[derive(Debug, Clone)]
pub struct CompiledKernel {
    pub(crate) spec: KernelSpec,
    cache_key: String,
    kernel: BuiltKernel,
}

impl std::ops::Deref for CompiledKernel {
    type Target = BuiltKernel;
    fn deref(&self) -> &BuiltKernel {
        &self.kernel
    }
}

impl CompiledKernel {
    /// The spec it was built from.
    pub fn spec(&self) -> &KernelSpec {
        &self.spec
    }

    /// Stable cache key of the spec.
    pub fn cache_key(&self) -> &str {
        &self.cache_key
    }

    /// The compiled kernel itself.
    pub fn kernel(&self) -> &BuiltKernel {
        &self.kernel
    }

    /// A kernel compiled earlier (a kernel pack's, a compile cache's): `code_object` must hold
    /// the kernel `spec` names, and its split-K reduction when it has one. The spec is
    /// validated and the report read back; the listing and IR are empty and the timings zero.
    /// Nothing is compiled.
    pub fn from_code_object(spec: KernelSpec, code_object: Vec<u8>) -> Result<Self, BuildError> {
        spec.validate()?;
        if spec.reduces_split_k() {
            let kernel = spec.reduce_name();
            ResourceReport::read(&code_object, &kernel)
                .map_err(|source| CompileError::Report { kernel, source })?;
        }
        let name = spec.kernel_name();
        let kernel =
            BuiltKernel::from_code_object(name.clone(), code_object).map_err(|source| {
                CompileError::Report {
                    kernel: name,
                    source,
                }
            })?;
        Ok(CompiledKernel {
            cache_key: spec.cache_key(),
            spec,
            kernel,
        })
    }
}

impl KernelSpec {
    /// Validates the spec and compiles it, in process. Every rule is checked before LLVM runs.
    pub fn build(&self) -> Result<CompiledKernel, BuildError> {
        self.build_with(CompileOptions {
            emit_asm: true,
            emit_ir: true,
            code_object_v5: false,
        })
    }

    /// [`KernelSpec::build`] with explicit outputs (skip the listing and IR for the fastest
    /// build).
    pub fn build_with(&self, options: CompileOptions) -> Result<CompiledKernel, BuildError> {
        self.validate()?;
        let attrs = KernelAttrs {
            workgroup_size: self.threads(),
            waves_per_eu: self.waves_per_eu,
        };
        let kernel = compile_kernel(
            &self.kernel_name(),
            &common::params(),
            attrs,
            options,
            |k| {
                if self.acc_agprs {
                    // Validation caps the accumulators at a lane's AGPRs.
                    k.allow_agprs(self.accumulator_dwords().try_into().unwrap_or(u32::MAX))?;
                }
                match self {
                    KernelSpec::Preb(p) => preb::build(k, p)?,
                    KernelSpec::Lds(l) => lds::build(k, l)?,
                }
                if self.reduces_split_k() {
                    let attrs = KernelAttrs {
                        workgroup_size: reduce::REDUCE_THREADS,
                        waves_per_eu: None,
                    };
                    let r = k.sibling(&self.reduce_name(), &reduce::signature().0, attrs)?;
                    reduce::build(&r, self.split_k(), self.out_dtype)?;
                    r.finish()?;
                    k.link(r)?;
                }
                Ok(())
            },
        )?;
        Ok(CompiledKernel {
            spec: self.clone(),
            cache_key: self.cache_key(),
            kernel,
        })
    }
}

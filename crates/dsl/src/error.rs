//! Errors of the kernel builder.

/// What went wrong while building or compiling a kernel.
#[derive(Debug, thiserror::Error)]
pub enum DslError {
    /// LLVM's IR builder refused an operation (a builder bug, reported rather than unwrapped).
    #[error("IR builder: {0}")]
    Builder(String),
    /// An LDS allocation past gfx950's per-workgroup budget.
    #[error(
        "LDS budget exceeded: allocating {requested} bytes for `{name}` on top of {used} bytes passes the {limit}-byte limit"
    )]
    LdsBudget {
        /// The allocation.
        name: String,
        /// Its size.
        requested: u32,
        /// Bytes already allocated.
        used: u32,
        /// The budget.
        limit: u32,
    },
    /// A parameter or argument that does not exist or has another kind.
    #[error("kernel has no {kind} parameter named `{name}`")]
    NoSuchParam {
        /// The name.
        name: String,
        /// The expected kind.
        kind: &'static str,
    },
    /// An operand that breaks an instruction's rule (checked before LLVM sees it).
    #[error("{op}: {rule}")]
    Operand {
        /// The operation.
        op: &'static str,
        /// The rule.
        rule: String,
    },
    /// An intrinsic outside the known-lowerable set, or one LLVM does not know.
    #[error("intrinsic {0} is not available for gfx950")]
    Intrinsic(String),
    /// The module failed LLVM's verifier.
    #[error("IR verification failed: {0}")]
    Verify(String),
    /// LLVM's optimiser or code generator failed.
    #[error("LLVM {stage} failed: {message}")]
    Llvm {
        /// The stage.
        stage: &'static str,
        /// LLVM's message.
        message: String,
    },
    /// Linking or reading back the code object failed.
    #[error("code object: {0}")]
    CodeObject(String),
}

impl From<inkwell::builder::BuilderError> for DslError {
    fn from(e: inkwell::builder::BuilderError) -> Self {
        DslError::Builder(e.to_string())
    }
}

/// Result alias of the builder.
pub type Result<T> = std::result::Result<T, DslError>;

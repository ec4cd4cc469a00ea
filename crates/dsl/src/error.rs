//! Errors of the kernel builder.

/// What went wrong while building or compiling a kernel.
#[derive(Debug, thiserror::Error)]
pub enum DslError {
    /// LLVM's IR builder refused an operation (a builder bug, reported rather than unwrapped).
    #[error("IR builder: {0}")]
    Builder(#[from] inkwell::builder::BuilderError),
    /// A layout operation failed: a view, tile or partition that does not fit its layout.
    #[error(transparent)]
    Layout(#[from] tilegen_layout::LayoutError),
    /// A swizzle the index type cannot apply.
    #[error(transparent)]
    Swizzle(#[from] tilegen_layout::SwizzleError),
    /// An invariant of this crate broke (an intrinsic that returned nothing, a value of an
    /// unexpected LLVM type): a bug here, reported rather than panicked on.
    #[error("internal: {0}")]
    Internal(String),
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
    /// A parameter handle that does not belong to this kernel's signature.
    #[error("parameter {index} ({kind}) is not in the signature of kernel `{kernel}`")]
    NoSuchParam {
        /// The kernel.
        kernel: String,
        /// The handle's position.
        index: u32,
        /// The handle's kind.
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
    /// Linking the object into a code object failed.
    #[error("linking the code object: {0}")]
    Link(#[from] tilegen_codeobj::link::LinkError),
}

/// Result alias of the builder.
pub type Result<T> = std::result::Result<T, DslError>;

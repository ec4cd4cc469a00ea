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
    /// An invariant of a kernel's own plan broke (a copy that is not whole loads, values a
    /// layout puts elsewhere than the plan expects): a bug in the kernel, reported rather than
    /// panicked on.
    #[error("internal: {0}")]
    Internal(String),
    /// An intrinsic that returns a value returned nothing.
    #[error("intrinsic {0} returned nothing")]
    NoResult(String),
    /// The IR builder is not positioned in a basic block (a loop or branch needs one).
    #[error("the IR builder is not positioned in a block")]
    NoInsertBlock,
    /// The LLVM function lacks a parameter its signature declares.
    #[error("kernel `{kernel}` has no LLVM parameter {index}")]
    MissingParam {
        /// The kernel.
        kernel: String,
        /// The parameter's position.
        index: u32,
    },
    /// LLVM refused an alignment.
    #[error("alignment {align} of {what}")]
    Alignment {
        /// What was aligned.
        what: &'static str,
        /// The alignment, bytes.
        align: u32,
        /// LLVM's reason.
        #[source]
        source: inkwell::values::InstructionValueError,
    },
    /// An LLVM value of a type [`crate::Ty`] does not describe.
    #[error("a value of LLVM type {0} has no Ty")]
    UntypedValue(String),
    /// A coordinate with other than the modes a kernel expects.
    #[error("{what} has {found} modes, expected {expected}")]
    Modes {
        /// The coordinate.
        what: &'static str,
        /// The modes expected.
        expected: usize,
        /// The modes it has (1 for a leaf).
        found: usize,
    },
    /// A value a kernel needs at compile time that its layout gives only at run time.
    #[error("{0} is not known at compile time")]
    NotStatic(&'static str),
    /// Something a kernel needs was not produced (an empty list, an entry short).
    #[error("{0} is missing")]
    Missing(String),
    /// A kernel's own planning refused (a tile geometry, a copy plan).
    #[error("{what}")]
    Plan {
        /// What was being planned.
        what: &'static str,
        /// Why it was refused.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A size a kernel's code handles only in whole units (a stage of scale blocks read as
    /// dwords, a cache copy issued as whole loads), named with the unit.
    #[error("{what} ({value}) is not a multiple of {multiple}")]
    NotMultiple {
        /// What was sized.
        what: &'static str,
        /// Its size.
        value: i64,
        /// The unit it must be whole of.
        multiple: i64,
    },
    /// A size a kernel's code handles only at one value (a gathered operand that stages whole
    /// tiles), named with that value.
    #[error("{what} of {found}: the kernel handles only {expected}")]
    Unsupported {
        /// What was sized.
        what: &'static str,
        /// The one value handled.
        expected: i64,
        /// The value asked for.
        found: i64,
    },
    /// An LDS buffer whose size does not fit in 32 bits (far past any LDS budget).
    #[error("LDS buffer `{name}` of {bytes} bytes does not fit in 32 bits")]
    LdsSize {
        /// The buffer.
        name: String,
        /// Its size.
        bytes: u64,
    },
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

// Errors cross threads (parallel compiles) and into `anyhow` in the binary.
const _: () = {
    const fn send_sync<T: Send + Sync + 'static>() {}
    send_sync::<DslError>();
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_name_their_limit() {
        let e = DslError::NotMultiple {
            what: "a stage's scale blocks",
            value: 6,
            multiple: 4,
        };
        assert_eq!(
            e.to_string(),
            "a stage's scale blocks (6) is not a multiple of 4"
        );
        let e = DslError::Unsupported {
            what: "a gathered A stage",
            expected: 4096,
            found: 2048,
        };
        assert_eq!(
            e.to_string(),
            "a gathered A stage of 2048: the kernel handles only 4096"
        );
    }
}

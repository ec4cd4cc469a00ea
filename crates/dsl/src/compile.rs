//! Compile a finished kernel: verify, O3, gfx950 codegen, and in-process linking into a loadable
//! HSA code object.

use std::cell::RefCell;
use std::time::{Duration, Instant};

use inkwell::module::FlagBehavior;
use inkwell::passes::PassBuilderOptions;
use inkwell::targets::{FileType, TargetMachine};

use crate::error::{DslError, Result};
use crate::kernel::Kernel;
use crate::target;
use tilegen_codeobj::link;

/// What to produce besides the code object.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CompileOptions {
    /// Also produce LLVM's assembly listing (costs a second codegen).
    pub emit_asm: bool,
    /// Also keep the IR text (before optimisation).
    pub emit_ir: bool,
    /// Code object version 5 instead of LLVM 22's default 6.
    pub code_object_v5: bool,
}

/// Time spent in each stage.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Timings {
    /// Verifier.
    pub verify: Duration,
    /// The O3 pipeline.
    pub optimize: Duration,
    /// Instruction selection to object.
    pub codegen: Duration,
    /// In-process link.
    pub link: Duration,
}

impl Timings {
    /// Sum of the stages.
    pub fn total(&self) -> Duration {
        self.verify + self.optimize + self.codegen + self.link
    }
}

/// A compiled kernel.
#[derive(Debug, Clone)]
pub struct Compiled {
    /// Loadable code object (`.hsaco`): an ELF shared object.
    pub code_object: Vec<u8>,
    /// The relocatable object LLVM produced, before linking.
    pub object: Vec<u8>,
    /// IR before optimisation, if asked for.
    pub ir: Option<String>,
    /// Assembly listing, if asked for.
    pub asm: Option<String>,
    /// Per-stage times.
    pub timings: Timings,
    /// Warnings and remarks LLVM reported (e.g. an occupancy target it could not meet).
    pub diagnostics: Vec<String>,
}

thread_local! {
    // Creating a target machine costs about as much as compiling a small kernel; one per thread
    // is reused (LLVM target machines are not shareable across threads).
    static MACHINE: RefCell<Option<TargetMachine>> = const { RefCell::new(None) };
}

pub(crate) fn with_machine<R>(f: impl FnOnce(&TargetMachine) -> Result<R>) -> Result<R> {
    MACHINE.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            *slot = Some(target::target_machine()?);
        }
        f(slot.as_ref().expect("just initialised"))
    })
}

fn with_diagnostics(message: String, kernel: &Kernel<'_>) -> String {
    let d = kernel.take_diagnostics();
    if d.is_empty() {
        message
    } else {
        format!("{message} ({})", d.join("; "))
    }
}

/// Compiles `kernel` (its body must be finished) to a code object, in this process.
pub fn compile(kernel: &Kernel<'_>, options: CompileOptions) -> Result<Compiled> {
    let module = kernel.module();
    let mut timings = Timings::default();
    let t = Instant::now();
    module
        .verify()
        .map_err(|e| DslError::Verify(e.to_string()))?;
    timings.verify = t.elapsed();
    let ir = options
        .emit_ir
        .then(|| module.print_to_string().to_string());
    let version = if options.code_object_v5 { 500 } else { 600 };
    let flag = kernel.context().i32_type().const_int(version, false);
    module.add_basic_value_flag("amdhsa_code_object_version", FlagBehavior::Error, flag);
    with_machine(|tm| {
        module.set_data_layout(&tm.get_target_data().get_data_layout());
        let t = Instant::now();
        module
            .run_passes("default<O3>", tm, PassBuilderOptions::create())
            .map_err(|e| DslError::Llvm {
                stage: "O3 pipeline",
                message: e.to_string(),
            })?;
        timings.optimize = t.elapsed();
        // Codegen mutates the module, so the listing comes from a copy.
        let asm = if options.emit_asm {
            // Verbose listings carry LLVM's loop annotations, which the static reports read.
            tm.set_asm_verbosity(true);
            let copy = module.clone();
            let buf = tm
                .write_to_memory_buffer(&copy, FileType::Assembly)
                .map_err(|e| DslError::Llvm {
                    stage: "assembly",
                    message: e.to_string(),
                })?;
            Some(String::from_utf8_lossy(buf.as_slice()).into_owned())
        } else {
            None
        };
        let t = Instant::now();
        let obj = tm
            .write_to_memory_buffer(module, FileType::Object)
            .map_err(|e| DslError::Llvm {
                stage: "codegen",
                message: with_diagnostics(e.to_string(), kernel),
            })?;
        timings.codegen = t.elapsed();
        // An error LLVM reports but recovers from (a register class it could not allocate)
        // leaves an object that computes garbage: it is a failed build.
        let diagnostics = kernel.take_diagnostics();
        let errors: Vec<&str> = diagnostics
            .iter()
            .filter(|d| d.starts_with("error: "))
            .map(String::as_str)
            .collect();
        if !errors.is_empty() {
            return Err(DslError::Llvm {
                stage: "codegen",
                message: errors.join("; "),
            });
        }
        let object = obj.as_slice().to_vec();
        let t = Instant::now();
        let code_object = link::link(&object)?;
        timings.link = t.elapsed();
        Ok(Compiled {
            code_object,
            object,
            ir: ir.clone(),
            asm,
            timings,
            diagnostics,
        })
    })
}

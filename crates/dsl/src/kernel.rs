//! The kernel under construction: its signature, ids, variables and structured control flow.

use std::cell::{Cell, RefCell};

use inkwell::attributes::{Attribute, AttributeLoc};
use inkwell::basic_block::BasicBlock;
use inkwell::builder::Builder;
use inkwell::context::Context;
use inkwell::intrinsics::Intrinsic;
use inkwell::llvm_sys;
use inkwell::module::Module;
use inkwell::types::BasicTypeEnum;
use inkwell::values::{BasicMetadataValueEnum, BasicValueEnum, FunctionValue, PointerValue};
use inkwell::{AddressSpace, IntPredicate};

use crate::error::{DslError, Result};
use crate::int::Int;
use crate::target::{self, addrspace};
use crate::value::{Cond, Ty, Value};

/// What a parameter holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum ParamKind {
    GlobalPtr,
    I32,
}

impl ParamKind {
    fn name(self) -> &'static str {
        match self {
            ParamKind::GlobalPtr => "global pointer",
            ParamKind::I32 => "i32",
        }
    }
}

/// A kernel's parameter list, declared before the kernel is built. Each declaration returns a
/// typed handle that [`Kernel::ptr_arg`] / [`Kernel::i32_arg`] turn into the argument's value.
/// A handle is its parameter's position and kind: one used with a kernel of another signature
/// is refused only where that position has another kind or does not exist.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Signature {
    params: Vec<(String, ParamKind)>,
}

/// Handle of a global-pointer parameter (see [`Signature::global_ptr`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PtrParam(u32);

/// Handle of an `i32` parameter (see [`Signature::i32`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct I32Param(u32);

impl Signature {
    /// No parameters.
    pub fn new() -> Self {
        Signature::default()
    }

    fn push(&mut self, name: &str, kind: ParamKind) -> u32 {
        self.params.push((name.to_string(), kind));
        (self.params.len() - 1) as u32
    }

    /// Appends a pointer to global memory named `name`.
    pub fn global_ptr(&mut self, name: &str) -> PtrParam {
        PtrParam(self.push(name, ParamKind::GlobalPtr))
    }

    /// Appends a 32-bit integer passed by value named `name`.
    pub fn i32(&mut self, name: &str) -> I32Param {
        I32Param(self.push(name, ParamKind::I32))
    }

    /// Number of parameters.
    pub fn len(&self) -> usize {
        self.params.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.params.is_empty()
    }
}

/// A global-pointer argument: the base a [`crate::Buffer`] is made over.
#[derive(Debug, Clone, Copy)]
pub struct Ptr<'ctx>(pub(crate) PointerValue<'ctx>);

/// Launch-shape facts the compiler can exploit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelAttrs {
    /// Exact work-items per workgroup (the kernel is only ever launched with this many).
    pub workgroup_size: u32,
    /// Minimum waves per SIMD to aim for (bounds register use), if any.
    pub waves_per_eu: Option<u32>,
}

/// A kernel being built. Every method takes `&self`: values borrow the kernel, and the few
/// pieces of mutable state (LDS budget, names) use cells.
pub struct Kernel<'ctx> {
    pub(crate) ctx: &'ctx Context,
    pub(crate) module: Module<'ctx>,
    pub(crate) builder: Builder<'ctx>,
    pub(crate) func: FunctionValue<'ctx>,
    entry: BasicBlock<'ctx>,
    signature: Signature,
    name: String,
    pub(crate) lds_used: Cell<u32>,
    pub(crate) lds_allocs: RefCell<Vec<(String, u32)>>,
    counter: Cell<u32>,
    /// LLVM's diagnostics for this kernel (registered with the context; see `Diagnostics`).
    diagnostics: Box<Diagnostics>,
}

/// Messages LLVM reports through the context's diagnostic handler (warnings such as an
/// occupancy target that cannot be met). Without a handler LLVM prints them to stderr, which a
/// library must not do; with one they reach the caller in [`crate::Compiled::diagnostics`].
#[derive(Default)]
pub(crate) struct Diagnostics(RefCell<Vec<String>>);

extern "C" fn collect_diagnostic(
    info: llvm_sys::prelude::LLVMDiagnosticInfoRef,
    sink: *mut std::ffi::c_void,
) {
    use llvm_sys::LLVMDiagnosticSeverity::*;
    // SAFETY: `sink` is the `Diagnostics` the kernel registered, alive until the kernel drops
    // (when the handler is removed); `info` is valid for the duration of this call.
    unsafe {
        let sink = &*(sink as *const Diagnostics);
        let text = llvm_sys::core::LLVMGetDiagInfoDescription(info);
        let msg = std::ffi::CStr::from_ptr(text)
            .to_string_lossy()
            .into_owned();
        llvm_sys::core::LLVMDisposeMessage(text);
        // Remarks and notes (vectorizer misses, instruction counts) are not problems.
        let severity = match llvm_sys::core::LLVMGetDiagInfoSeverity(info) {
            LLVMDSError => "error",
            LLVMDSWarning => "warning",
            LLVMDSRemark | LLVMDSNote => return,
        };
        let msg = msg.trim_start_matches("<unknown>:0:0: ");
        let line = format!("{severity}: {msg}");
        if let Ok(mut v) = sink.0.try_borrow_mut()
            && !v.contains(&line)
        {
            v.push(line);
        }
    }
}

impl<'ctx> Kernel<'ctx> {
    /// Starts a kernel `name(signature...)` for gfx950.
    pub fn new(
        ctx: &'ctx Context,
        name: &str,
        signature: &Signature,
        attrs: KernelAttrs,
    ) -> Result<Self> {
        if attrs.workgroup_size == 0 || attrs.workgroup_size > target::MAX_WORKGROUP_SIZE {
            return Err(DslError::Operand {
                op: "kernel",
                rule: format!(
                    "workgroup size {} must be in 1..={}",
                    attrs.workgroup_size,
                    target::MAX_WORKGROUP_SIZE
                ),
            });
        }
        let module = ctx.create_module(name);
        module.set_triple(&target::llvm_triple());
        // The data layout must be set before building: it puts allocas in the private address
        // space (5), as the AMDGPU backend requires.
        crate::compile::with_machine(|tm| {
            module.set_data_layout(&tm.get_target_data().get_data_layout());
            Ok(())
        })?;
        let global_ptr = ctx.ptr_type(AddressSpace::from(addrspace::GLOBAL));
        let arg_types: Vec<_> = signature
            .params
            .iter()
            .map(|(_, kind)| match kind {
                ParamKind::GlobalPtr => global_ptr.into(),
                ParamKind::I32 => ctx.i32_type().into(),
            })
            .collect();
        let func = module.add_function(name, ctx.void_type().fn_type(&arg_types, false), None);
        func.set_call_conventions(target::AMDGPU_KERNEL_CC);
        let str_attr = |k: &str, v: &str| ctx.create_string_attribute(k, v);
        let wg = attrs.workgroup_size.to_string();
        func.add_attribute(
            AttributeLoc::Function,
            str_attr("amdgpu-flat-work-group-size", &format!("{wg},{wg}")),
        );
        func.add_attribute(
            AttributeLoc::Function,
            str_attr("uniform-work-group-size", "true"),
        );
        if let Some(w) = attrs.waves_per_eu {
            // The occupancy request alone is a hint the attributor may widen; the register cap it
            // implies (the 512-entry unified file shared by `w` waves) is what binds allocation.
            let regs = (target::MAX_UNIFIED_VGPRS / w.max(1)) / 8 * 8;
            func.add_attribute(
                AttributeLoc::Function,
                str_attr("amdgpu-waves-per-eu", &format!("{w},{w}")),
            );
            func.add_attribute(
                AttributeLoc::Function,
                str_attr(
                    "amdgpu-num-vgpr",
                    &regs.min(target::MAX_ARCH_VGPRS).to_string(),
                ),
            );
        }
        // The leading arguments are preloaded into SGPRs (`inreg`): gfx950 writes them at wave
        // start, where otherwise each is a scalar load that LLVM places beside its first use,
        // so a kernel's prologue paid several scalar-memory latencies one after another.
        // gfx950 has 16 user SGPRs; the kernarg segment pointer takes 2, and a dispatch or
        // queue pointer may take 2 more: the arguments preloaded fill at most 12.
        let mut preload_dwords = 0;
        for (i, (_, kind)) in signature.params.iter().enumerate() {
            let dwords = match kind {
                ParamKind::GlobalPtr => 2,
                ParamKind::I32 => 1,
            };
            // A pointer starts at an even dword of the kernarg segment.
            let start = if dwords == 2 {
                preload_dwords + preload_dwords % 2
            } else {
                preload_dwords
            };
            if start + dwords > target::MAX_PRELOAD_KERNARG_DWORDS {
                break;
            }
            preload_dwords = start + dwords;
            func.add_attribute(AttributeLoc::Param(i as u32), enum_attr(ctx, "inreg", 0));
        }
        for (i, (name, kind)) in signature.params.iter().enumerate() {
            let arg = func
                .get_nth_param(i as u32)
                .ok_or_else(|| DslError::MissingParam {
                    kernel: name.to_string(),
                    index: i as u32,
                })?;
            arg.set_name(name);
            if *kind == ParamKind::GlobalPtr {
                // Buffers of one launch never alias; this lets loads be reordered freely.
                func.add_attribute(AttributeLoc::Param(i as u32), enum_attr(ctx, "noalias", 0));
            }
        }
        let diagnostics = Box::<Diagnostics>::default();
        register_diagnostics(ctx, &diagnostics);
        let builder = ctx.create_builder();
        let entry = ctx.append_basic_block(func, "entry");
        builder.position_at_end(entry);
        Ok(Kernel {
            ctx,
            module,
            builder,
            func,
            entry,
            signature: signature.clone(),
            name: name.to_string(),
            lds_used: Cell::new(0),
            lds_allocs: RefCell::new(Vec::new()),
            counter: Cell::new(0),
            diagnostics,
        })
    }

    /// Diagnostics LLVM reported so far (drained).
    pub(crate) fn take_diagnostics(&self) -> Vec<String> {
        self.diagnostics.0.borrow_mut().drain(..).collect()
    }

    /// The kernel's symbol name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The LLVM context.
    pub(crate) fn context(&self) -> &'ctx Context {
        self.ctx
    }

    /// The module (compile it with [`crate::compile`]).
    pub(crate) fn module(&self) -> &Module<'ctx> {
        &self.module
    }

    /// The signature the kernel was declared with.
    pub fn signature(&self) -> &Signature {
        &self.signature
    }

    /// A fresh value name with `prefix`, so the IR stays readable.
    pub(crate) fn fresh(&self, prefix: &str) -> String {
        let n = self.counter.get();
        self.counter.set(n + 1);
        format!("{prefix}{n}")
    }

    fn param(&self, index: u32, kind: ParamKind) -> Result<BasicValueEnum<'ctx>> {
        let declared = self.signature.params.get(index as usize);
        match (declared, self.func.get_nth_param(index)) {
            (Some((_, k)), Some(v)) if *k == kind => Ok(v),
            _ => Err(DslError::NoSuchParam {
                kernel: self.name.clone(),
                index,
                kind: kind.name(),
            }),
        }
    }

    /// The value of a global-pointer parameter.
    pub fn ptr_arg(&self, p: PtrParam) -> Result<Ptr<'ctx>> {
        Ok(Ptr(self
            .param(p.0, ParamKind::GlobalPtr)?
            .into_pointer_value()))
    }

    /// The value of an `i32` parameter.
    pub fn i32_arg(&self, p: I32Param) -> Result<Int<'_, 'ctx>> {
        Ok(Int::new(
            self,
            self.param(p.0, ParamKind::I32)?.into_int_value(),
        ))
    }

    /// An i32 constant.
    pub fn i32(&self, v: i64) -> Int<'_, 'ctx> {
        Int::new(self, self.ctx.i32_type().const_int(v as u64, true))
    }

    /// Calls an intrinsic by name with the given overload types. Only the names listed in
    /// [`crate::intrinsics::KNOWN`] are accepted: the verifier accepts intrinsics the gfx950
    /// selector cannot lower, and such a failure aborts the whole process.
    pub(crate) fn call_intrinsic(
        &self,
        name: &str,
        overloads: &[BasicTypeEnum<'ctx>],
        args: &[BasicMetadataValueEnum<'ctx>],
    ) -> Result<Option<BasicValueEnum<'ctx>>> {
        if !crate::intrinsics::KNOWN.contains(&name) {
            return Err(DslError::Intrinsic(name.to_string()));
        }
        let intrinsic =
            Intrinsic::find(name).ok_or_else(|| DslError::Intrinsic(name.to_string()))?;
        let decl = intrinsic
            .get_declaration(&self.module, overloads)
            .ok_or_else(|| DslError::Intrinsic(format!("{name} with overloads {overloads:?}")))?;
        let call = self.builder.build_call(decl, args, "")?;
        Ok(call.try_as_basic_value().basic())
    }

    /// [`Self::call_intrinsic`] of an intrinsic that returns a value.
    pub(crate) fn call_intrinsic_value(
        &self,
        name: &str,
        overloads: &[BasicTypeEnum<'ctx>],
        args: &[BasicMetadataValueEnum<'ctx>],
    ) -> Result<BasicValueEnum<'ctx>> {
        self.call_intrinsic(name, overloads, args)?
            .ok_or_else(|| DslError::NoResult(name.to_string()))
    }

    fn id_call(&self, name: &str) -> Result<Int<'_, 'ctx>> {
        let v = self.call_intrinsic_value(name, &[], &[])?;
        Ok(Int::new(self, v.into_int_value()))
    }

    /// Work-item id within the workgroup (x).
    pub fn thread_id(&self) -> Result<Int<'_, 'ctx>> {
        self.id_call("llvm.amdgcn.workitem.id.x")
    }

    /// Workgroup id (x).
    pub fn block_id_x(&self) -> Result<Int<'_, 'ctx>> {
        self.id_call("llvm.amdgcn.workgroup.id.x")
    }

    /// Workgroup id (y).
    pub fn block_id_y(&self) -> Result<Int<'_, 'ctx>> {
        self.id_call("llvm.amdgcn.workgroup.id.y")
    }

    /// Lets the register allocator hold MFMA accumulators in AGPRs (`amdgpu-agpr-alloc`
    /// = `min_agprs`). Without it LLVM's attributor, seeing no AGPR use, pins the AGPR
    /// budget to zero, MFMAs take the VGPR form, and past 256 registers a wave spills; with
    /// it MFMAs write `a[...]` and a wave at one per SIMD has 256 VGPRs besides.
    pub fn allow_agprs(&self, min_agprs: u32) -> Result<()> {
        if min_agprs > target::MAX_ARCH_VGPRS {
            return Err(DslError::Operand {
                op: "allow_agprs",
                rule: format!(
                    "{min_agprs} AGPRs: a lane has at most {}",
                    target::MAX_ARCH_VGPRS
                ),
            });
        }
        let attr = self
            .ctx
            .create_string_attribute("amdgpu-agpr-alloc", &min_agprs.to_string());
        self.func.add_attribute(AttributeLoc::Function, attr);
        Ok(())
    }

    /// Workgroup id (z).
    pub fn block_id_z(&self) -> Result<Int<'_, 'ctx>> {
        self.id_call("llvm.amdgcn.workgroup.id.z")
    }

    /// Makes a value wave-uniform (an SGPR) by reading lane 0; the caller asserts it is uniform.
    pub fn readfirstlane(&self, v: Int<'_, 'ctx>) -> Result<Int<'_, 'ctx>> {
        let r = self.call_intrinsic_value(
            "llvm.amdgcn.readfirstlane.i32",
            &[self.ctx.i32_type().into()],
            &[v.value().into()],
        )?;
        Ok(Int::new(self, r.into_int_value()))
    }

    /// A mutable variable initialised to `init` (its type is `init`'s). Variables live in
    /// allocas that LLVM's SROA promotes to registers; they are how loops carry state.
    pub fn var(&self, init: Value<'ctx>) -> Result<Var<'ctx>> {
        let ty = init.ty().llvm(self);
        let here = self.builder.get_insert_block();
        // Allocas belong at the top of the entry block, or SROA will not promote them.
        match self.entry.get_first_instruction() {
            Some(first) => self.builder.position_before(&first),
            None => self.builder.position_at_end(self.entry),
        }
        let ptr = self.builder.build_alloca(ty, &self.fresh("var"))?;
        if let Some(bb) = here {
            self.builder.position_at_end(bb);
        }
        self.builder.build_store(ptr, init.v)?;
        Ok(Var { ptr, ty: init.ty() })
    }

    /// Reads a variable.
    pub fn get(&self, var: &Var<'ctx>) -> Result<Value<'ctx>> {
        Value::new(self.builder.build_load(var.ty.llvm(self), var.ptr, "")?)
    }

    /// Writes a variable; `v` must have the variable's type.
    pub fn set(&self, var: &Var<'ctx>, v: Value<'ctx>) -> Result<()> {
        if v.ty() != var.ty {
            return Err(DslError::Operand {
                op: "set",
                rule: format!("a {:?} into a {:?} variable", v.ty(), var.ty),
            });
        }
        self.builder.build_store(var.ptr, v.v)?;
        Ok(())
    }

    /// `for (i = start; i < end; i += step) body(i)`, as a structured loop. `step` must be
    /// positive. When `start < end` is not known, the loop is guarded.
    pub fn for_range<'k>(
        &'k self,
        start: Int<'k, 'ctx>,
        end: Int<'k, 'ctx>,
        step: i64,
        mut body: impl FnMut(Int<'k, 'ctx>) -> Result<()>,
    ) -> Result<()> {
        if step <= 0 {
            return Err(DslError::Operand {
                op: "for_range",
                rule: format!("step {step} must be positive"),
            });
        }
        let i32t = self.ctx.i32_type();
        let pre = self
            .builder
            .get_insert_block()
            .ok_or(DslError::NoInsertBlock)?;
        let header = self.ctx.append_basic_block(self.func, &self.fresh("loop"));
        let exit = self
            .ctx
            .append_basic_block(self.func, &self.fresh("loop_exit"));
        let enter =
            self.builder
                .build_int_compare(IntPredicate::SLT, start.value(), end.value(), "")?;
        self.builder.build_conditional_branch(enter, header, exit)?;
        self.builder.position_at_end(header);
        let phi = self.builder.build_phi(i32t, &self.fresh("i"))?;
        phi.add_incoming(&[(&start.value(), pre)]);
        let i = Int::new(self, phi.as_basic_value().into_int_value());
        body(i)?;
        let next =
            self.builder
                .build_int_nsw_add(i.value(), i32t.const_int(step as u64, false), "")?;
        let latch = self
            .builder
            .get_insert_block()
            .ok_or(DslError::NoInsertBlock)?;
        phi.add_incoming(&[(&next, latch)]);
        let again = self
            .builder
            .build_int_compare(IntPredicate::SLT, next, end.value(), "")?;
        self.builder.build_conditional_branch(again, header, exit)?;
        self.builder.position_at_end(exit);
        Ok(())
    }

    /// `if cond { then() }`.
    pub fn if_then(
        &self,
        cond: impl Into<Cond<'ctx>>,
        then: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        let body = self.ctx.append_basic_block(self.func, &self.fresh("then"));
        let join = self.ctx.append_basic_block(self.func, &self.fresh("endif"));
        self.builder
            .build_conditional_branch(cond.into().0, body, join)?;
        self.builder.position_at_end(body);
        then()?;
        self.builder.build_unconditional_branch(join)?;
        self.builder.position_at_end(join);
        Ok(())
    }

    /// Ends the work-item here unless `cond` holds: with a `cond` the same across the
    /// workgroup (its block id against a count, say), a workgroup with nothing to do leaves
    /// before any memory access after this point. Waves a workgroup-varying `cond` ends must
    /// not be waited for by a barrier after it.
    pub fn exit_unless(&self, cond: impl Into<Cond<'ctx>>) -> Result<()> {
        let exit = self.ctx.append_basic_block(self.func, &self.fresh("exit"));
        let go = self.ctx.append_basic_block(self.func, &self.fresh("go"));
        self.builder
            .build_conditional_branch(cond.into().0, go, exit)?;
        self.builder.position_at_end(exit);
        self.builder.build_return(None)?;
        self.builder.position_at_end(go);
        Ok(())
    }

    /// Finishes the body with `ret void`.
    pub fn finish(&self) -> Result<()> {
        self.builder.build_return(None)?;
        Ok(())
    }
}

/// Sends the context's LLVM diagnostics to `sink`.
fn register_diagnostics(ctx: &Context, sink: &Diagnostics) {
    // SAFETY: the handler's context pointer is the kernel's boxed `Diagnostics`, which lives as
    // long as the kernel; `Drop` removes the handler before the box is freed.
    unsafe {
        llvm_sys::core::LLVMContextSetDiagnosticHandler(
            ctx.raw(),
            Some(collect_diagnostic),
            sink as *const Diagnostics as *mut std::ffi::c_void,
        );
    }
}

impl<'ctx> Kernel<'ctx> {
    /// Starts another kernel in this kernel's context, to be [`Kernel::link`]ed into it once
    /// finished.
    pub fn sibling(
        &self,
        name: &str,
        signature: &Signature,
        attrs: KernelAttrs,
    ) -> Result<Kernel<'ctx>> {
        Kernel::new(self.ctx, name, signature, attrs)
    }

    /// Links `other`, a finished kernel declared in the same context, into this kernel's
    /// module, so that one code object holds both: a kernel and the small kernel that
    /// completes its work (a split-K reduction) are loaded, shipped and verified together.
    /// Their LDS allocations must not share names.
    pub fn link(&self, other: Kernel<'ctx>) -> Result<()> {
        if !std::ptr::eq(self.ctx, other.ctx) {
            return Err(DslError::Operand {
                op: "link",
                rule: format!(
                    "kernel `{}` was declared in another context than `{}`",
                    other.name, self.name
                ),
            });
        }
        let module = other.module.clone();
        // A context has one diagnostic handler: `other`'s is removed when it drops, so this
        // kernel's is registered again.
        drop(other);
        register_diagnostics(self.ctx, &self.diagnostics);
        self.module
            .link_in_module(module)
            .map_err(|e| DslError::Llvm {
                stage: "linking modules",
                message: e.to_string(),
            })
    }
}

impl Drop for Kernel<'_> {
    fn drop(&mut self) {
        // SAFETY: unregisters the handler whose context pointer is about to be freed.
        unsafe {
            llvm_sys::core::LLVMContextSetDiagnosticHandler(
                self.ctx.raw(),
                None,
                std::ptr::null_mut(),
            )
        };
    }
}

fn enum_attr(ctx: &Context, name: &str, val: u64) -> Attribute {
    ctx.create_enum_attribute(Attribute::get_named_enum_kind_id(name), val)
}

/// A mutable variable (see [`Kernel::var`]).
#[derive(Debug, Clone, Copy)]
pub struct Var<'ctx> {
    ptr: PointerValue<'ctx>,
    ty: Ty,
}

impl Var<'_> {
    /// The type of its values.
    pub fn ty(&self) -> Ty {
        self.ty
    }
}

/// An empty one-wave kernel `k` without arguments, for the builder's unit tests.
#[cfg(test)]
pub(crate) fn test_kernel(ctx: &Context) -> Kernel<'_> {
    let attrs = KernelAttrs {
        workgroup_size: 64,
        waves_per_eu: None,
    };
    Kernel::new(ctx, "k", &Signature::new(), attrs).unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_known_intrinsics_are_emitted() {
        let ctx = Context::create();
        let k = test_kernel(&ctx);
        // Accepted by LLVM's verifier on gfx950 but not selectable: it must never reach codegen.
        let e = k
            .call_intrinsic("llvm.amdgcn.s.sleep.var", &[], &[])
            .unwrap_err();
        assert!(
            matches!(e, DslError::Intrinsic(ref n) if n == "llvm.amdgcn.s.sleep.var"),
            "{e}"
        );
        assert!(
            k.call_intrinsic("llvm.amdgcn.workitem.id.x", &[], &[])
                .is_ok()
        );
    }

    /// A sibling linked into a kernel compiles into the same code object, both callable by
    /// name; a kernel of another context is refused.
    #[test]
    fn linked_kernels_share_a_code_object() {
        let ctx = Context::create();
        let k = test_kernel(&ctx);
        let attrs = KernelAttrs {
            workgroup_size: 128,
            waves_per_eu: None,
        };
        let other = k.sibling("k_second", &Signature::new(), attrs).unwrap();
        other.finish().unwrap();
        k.link(other).unwrap();
        k.finish().unwrap();
        let out = crate::compile(&k, crate::CompileOptions::default()).unwrap();
        let co = tilegen_codeobj::CodeObject::parse(&out.code_object).unwrap();
        assert!(co.kernel("k").is_some() && co.kernel("k_second").is_some());

        let (ctx2, ctx3) = (Context::create(), Context::create());
        let (a, b) = (test_kernel(&ctx2), test_kernel(&ctx3));
        let e = a.link(b).unwrap_err();
        assert!(matches!(e, DslError::Operand { op: "link", .. }), "{e}");
    }
}

//! Memory: buffer resources and raw buffer access, direct buffer-to-LDS loads, LDS allocations
//! and access (incl. transposing reads), and workgroup barriers.

use inkwell::AddressSpace;
use inkwell::AtomicOrdering;
use inkwell::llvm_sys;
use inkwell::module::Linkage;
use inkwell::values::{AsValueRef, BasicValue, BasicValueEnum, IntValue, PointerValue};

use crate::error::{DslError, Result};
use crate::int::Int;
use crate::kernel::{Kernel, Ptr};
use crate::target::{self, addrspace};
use crate::value::{Elem, Ty, Value};

/// Cache policy of a buffer access, as gfx950's `sc0`/`sc1`/`nt` bits (CDNA3/4 memory model:
/// `sc0`/`sc1` set the coherence scope, `nt` marks streaming data).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize,
)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum CachePolicy {
    /// Cache at every level (no bits).
    #[default]
    Always,
    /// Agent scope (`sc1`): bypass the CU's vector L1, keep in L2.
    Global,
    /// Non-temporal (`nt`): streamed once, do not keep.
    Streaming,
    /// System scope (`sc0 sc1`): every access goes to memory.
    Volatile,
}

impl CachePolicy {
    /// The `aux` operand of the `llvm.amdgcn.raw.ptr.buffer.*` intrinsics (LLVM's CPol bits:
    /// SC0 = 1, NT = 2, SC1 = 16).
    pub fn aux_bits(self) -> u64 {
        match self {
            CachePolicy::Always => 0,
            CachePolicy::Global => 16,
            CachePolicy::Streaming => 2,
            CachePolicy::Volatile => 17,
        }
    }

    /// The flags as the disassembler prints them.
    pub fn asm_flags(self) -> &'static str {
        match self {
            CachePolicy::Always => "",
            CachePolicy::Global => "sc1",
            CachePolicy::Streaming => "nt",
            CachePolicy::Volatile => "sc0 sc1",
        }
    }
}

/// Word 3 of a raw buffer resource: 32-bit data format, float number format. GFX9-family
/// hardware treats an INVALID data format as an unusable buffer, so raw buffers still name one.
pub const RAW_BUFFER_FLAGS: u64 = 0x0002_7000;

/// A buffer resource (V#) over a global allocation: accesses at or past `num_records` bytes
/// read 0 and drop writes, which is how kernels mask tails without branches.
#[derive(Debug, Clone, Copy)]
pub struct Buffer<'ctx> {
    rsrc: PointerValue<'ctx>,
    records: IntValue<'ctx>,
    /// Default cache policy of this buffer's accesses.
    pub policy: CachePolicy,
}

impl<'ctx> Buffer<'ctx> {
    /// Its size in bytes (`num_records`): an offset at or past it is out of range.
    pub fn records<'k>(&self, k: &'k Kernel<'ctx>) -> Int<'k, 'ctx> {
        Int::from_value(k, self.records)
    }
}

/// An LDS allocation.
#[derive(Debug, Clone, Copy)]
pub struct Lds<'ctx> {
    ptr: PointerValue<'ctx>,
    /// Size in bytes.
    pub bytes: u32,
    /// Alignment in bytes.
    pub align: u32,
}

impl<'ctx> Kernel<'ctx> {
    /// A raw buffer resource of `num_records` bytes over `base`.
    pub fn buffer(
        &self,
        base: Ptr<'ctx>,
        num_records: Int<'_, 'ctx>,
        policy: CachePolicy,
    ) -> Result<Buffer<'ctx>> {
        let base = base.0;
        let i64t = self.ctx.i64_type();
        let n = self
            .builder
            .build_int_z_extend(num_records.value(), i64t, "")?;
        let rsrc_t = self
            .ctx
            .ptr_type(AddressSpace::from(addrspace::BUFFER_RSRC));
        let r = self.call_intrinsic_value(
            "llvm.amdgcn.make.buffer.rsrc",
            &[rsrc_t.into(), base.get_type().into()],
            &[
                base.into(),
                self.ctx.i16_type().const_zero().into(),
                n.into(),
                self.ctx
                    .i32_type()
                    .const_int(RAW_BUFFER_FLAGS, false)
                    .into(),
            ],
        )?;
        Ok(Buffer {
            rsrc: r.into_pointer_value(),
            records: num_records.value(),
            policy,
        })
    }

    /// `base + index * stride` bytes, in 64-bit arithmetic (`index` and `stride` are
    /// non-negative `i32`s): the start of group `index` of a grouped allocation whose groups
    /// are `stride` bytes apart, for a buffer resource over that group alone, so a tensor
    /// past 2^31 bytes is still addressed with 32-bit offsets.
    pub fn ptr_offset(
        &self,
        base: Ptr<'ctx>,
        index: Int<'_, 'ctx>,
        stride: Int<'_, 'ctx>,
    ) -> Result<Ptr<'ctx>> {
        let i64t = self.ctx.i64_type();
        let i = self.builder.build_int_z_extend(index.value(), i64t, "")?;
        let s = self.builder.build_int_z_extend(stride.value(), i64t, "")?;
        let bytes = self.builder.build_int_nuw_mul(i, s, "")?;
        // SAFETY: a byte GEP inside the caller's allocation (the group exists); an offset past
        // it is an out-of-range access at run time, not host UB.
        let p = unsafe {
            self.builder
                .build_in_bounds_gep(self.ctx.i8_type(), base.0, &[bytes], "")?
        };
        Ok(Ptr(p))
    }

    fn dword_type(&self, dwords: u32) -> Result<Ty> {
        if !(1..=4).contains(&dwords) {
            return Err(DslError::Operand {
                op: "buffer access",
                rule: format!("{dwords} dwords: a buffer access moves 1 to 4 dwords"),
            });
        }
        Ok(Ty::dwords(dwords))
    }

    /// `buffer_load_dword[xN]`: `dwords` dwords at byte `voffset + soffset` (per lane
    /// `voffset`, wave-uniform `soffset`). Returns `i32` or `<N x i32>`.
    pub fn buffer_load(
        &self,
        buf: &Buffer<'ctx>,
        voffset: Int<'_, 'ctx>,
        soffset: Int<'_, 'ctx>,
        dwords: u32,
    ) -> Result<Value<'ctx>> {
        self.buffer_load_with(buf, voffset, soffset, dwords, buf.policy)
    }

    /// [`Kernel::buffer_load`] with an explicit cache policy.
    pub fn buffer_load_with(
        &self,
        buf: &Buffer<'ctx>,
        voffset: Int<'_, 'ctx>,
        soffset: Int<'_, 'ctx>,
        dwords: u32,
        policy: CachePolicy,
    ) -> Result<Value<'ctx>> {
        let (voffset, soffset) = self.fold_offsets(voffset, soffset);
        self.raw_buffer_load(buf, voffset, soffset, dwords, policy)
    }

    /// [`Kernel::buffer_load`] with the offsets exactly as given. A view's lane offsets are
    /// loop-invariant, so a constant moved into them is hoisted with them (one VGPR per
    /// constant) instead of reaching the instruction's immediate: views keep it uniform.
    pub(crate) fn raw_buffer_load(
        &self,
        buf: &Buffer<'ctx>,
        voffset: Int<'_, 'ctx>,
        soffset: Int<'_, 'ctx>,
        dwords: u32,
        policy: CachePolicy,
    ) -> Result<Value<'ctx>> {
        let ty = self.dword_type(dwords)?.llvm(self);
        let aux = self.ctx.i32_type().const_int(policy.aux_bits(), false);
        self.call_intrinsic_value(
            "llvm.amdgcn.raw.ptr.buffer.load",
            &[ty],
            &[
                buf.rsrc.into(),
                voffset.value().into(),
                soffset.value().into(),
                aux.into(),
            ],
        )
        .and_then(Value::new)
    }

    /// `buffer_store_*`: stores `value` (1 to 4 dwords) at byte `voffset + soffset`.
    pub fn buffer_store(
        &self,
        buf: &Buffer<'ctx>,
        value: Value<'ctx>,
        voffset: Int<'_, 'ctx>,
        soffset: Int<'_, 'ctx>,
    ) -> Result<()> {
        let (voffset, soffset) = self.fold_offsets(voffset, soffset);
        self.raw_buffer_store(buf, value, voffset, soffset)
    }

    /// [`Kernel::buffer_store`] with the offsets exactly as given (see
    /// [`Kernel::raw_buffer_load`]).
    pub(crate) fn raw_buffer_store(
        &self,
        buf: &Buffer<'ctx>,
        value: Value<'ctx>,
        voffset: Int<'_, 'ctx>,
        soffset: Int<'_, 'ctx>,
    ) -> Result<()> {
        let bytes = value.ty().bytes();
        let sub_dword = value.ty().lanes == 1 && matches!(value.ty().elem, Elem::I8 | Elem::I16);
        if !bytes.is_multiple_of(4) && !sub_dword {
            return Err(DslError::Operand {
                op: "buffer_store",
                rule: format!(
                    "{:?}: a buffer store moves whole dwords, or one i8 or i16",
                    value.ty()
                ),
            });
        }
        // `buffer_store_byte` / `_short` for one i8 / i16, whole dwords otherwise.
        let value = if sub_dword {
            value.v
        } else {
            self.bitcast(value, self.dword_type(bytes / 4)?)?.v
        };
        let aux = self.ctx.i32_type().const_int(buf.policy.aux_bits(), false);
        self.call_intrinsic(
            "llvm.amdgcn.raw.ptr.buffer.store",
            &[value.get_type()],
            &[
                value.into(),
                buf.rsrc.into(),
                voffset.value().into(),
                soffset.value().into(),
                aux.into(),
            ],
        )?;
        Ok(())
    }

    /// `buffer_atomic_add_f32` / `buffer_atomic_pk_add_bf16`: adds `value` (an `f32`, or two
    /// bf16 as `<2 x bf16>`) to memory at byte `voffset + soffset`, returning nothing. Out of
    /// range offsets drop the add, as they drop stores.
    pub fn buffer_atomic_fadd(
        &self,
        buf: &Buffer<'ctx>,
        value: Value<'ctx>,
        voffset: Int<'_, 'ctx>,
        soffset: Int<'_, 'ctx>,
    ) -> Result<()> {
        if value.ty() != Ty::F32 && value.ty() != Ty::vector(Elem::Bf16, 2) {
            return Err(DslError::Operand {
                op: "buffer_atomic_fadd",
                rule: format!("adds an f32 or <2 x bf16>, not {:?}", value.ty()),
            });
        }
        let (voffset, soffset) = self.fold_offsets(voffset, soffset);
        let aux = self.ctx.i32_type().const_int(buf.policy.aux_bits(), false);
        self.call_intrinsic(
            "llvm.amdgcn.raw.ptr.buffer.atomic.fadd",
            &[value.v.get_type()],
            &[
                value.v.into(),
                buf.rsrc.into(),
                voffset.value().into(),
                soffset.value().into(),
                aux.into(),
            ],
        )?;
        Ok(())
    }

    /// Moves the constant part of a uniform offset into the per-lane one, where the instruction
    /// selector folds it into the 12-bit immediate; otherwise each distinct constant costs an
    /// SGPR and an `s_add`.
    fn fold_offsets<'k>(
        &self,
        voffset: Int<'k, 'ctx>,
        soffset: Int<'k, 'ctx>,
    ) -> (Int<'k, 'ctx>, Int<'k, 'ctx>) {
        let (base, c) = soffset.split_constant();
        if c == 0 {
            return (voffset, soffset);
        }
        (voffset + c, base)
    }

    /// `buffer_load_dword* ... lds`: each lane loads `bytes` (1, 2, 4, 12 or 16) from the buffer
    /// at `voffset + soffset`, and the wave writes them to LDS at
    /// `lds + lds_offset + lane * bytes` without touching VGPRs. `lds_offset` must be
    /// wave-uniform (it becomes M0).
    pub fn buffer_load_to_lds(
        &self,
        buf: &Buffer<'ctx>,
        lds: &Lds<'ctx>,
        lds_offset: Int<'_, 'ctx>,
        voffset: Int<'_, 'ctx>,
        soffset: Int<'_, 'ctx>,
        bytes: u32,
    ) -> Result<()> {
        if !matches!(bytes, 1 | 2 | 4 | 12 | 16) {
            return Err(DslError::Operand {
                op: "buffer_load_to_lds",
                rule: format!("{bytes} bytes per lane: gfx950 moves 1, 2, 4, 12 or 16"),
            });
        }
        let i32t = self.ctx.i32_type();
        let aux = i32t.const_int(buf.policy.aux_bits(), false);
        let dst = self.lds_ptr(lds, lds_offset)?;
        self.call_intrinsic(
            "llvm.amdgcn.raw.ptr.buffer.load.lds",
            &[],
            &[
                buf.rsrc.into(),
                dst.into(),
                i32t.const_int(bytes as u64, false).into(),
                voffset.value().into(),
                soffset.value().into(),
                i32t.const_zero().into(),
                aux.into(),
            ],
        )?;
        Ok(())
    }

    /// A static LDS allocation of `bytes` bytes aligned to `align`, counted against gfx950's
    /// 160 KB budget.
    pub fn lds_alloc(&self, name: &str, bytes: u32, align: u32) -> Result<Lds<'ctx>> {
        let used = self.lds_used.get();
        let start = used.div_ceil(align.max(1)) * align.max(1);
        if start as u64 + bytes as u64 > target::LDS_BYTES as u64 {
            return Err(DslError::LdsBudget {
                name: name.to_string(),
                requested: bytes,
                used,
                limit: target::LDS_BYTES,
            });
        }
        self.lds_used.set(start + bytes);
        self.lds_allocs.borrow_mut().push((name.to_string(), bytes));
        let ty = self.ctx.i8_type().array_type(bytes);
        let g = self
            .module
            .add_global(ty, Some(AddressSpace::from(addrspace::LDS)), name);
        g.set_linkage(Linkage::Internal);
        g.set_initializer(&ty.get_poison());
        g.set_alignment(align);
        Ok(Lds {
            ptr: g.as_pointer_value(),
            bytes,
            align,
        })
    }

    /// LDS bytes allocated so far.
    pub fn lds_bytes(&self) -> u32 {
        self.lds_used.get()
    }

    fn lds_ptr(&self, lds: &Lds<'ctx>, offset: Int<'_, 'ctx>) -> Result<PointerValue<'ctx>> {
        // SAFETY: a byte GEP within the allocation; out-of-range offsets are an LDS fault at run
        // time, not host UB.
        Ok(unsafe {
            self.builder
                .build_in_bounds_gep(self.ctx.i8_type(), lds.ptr, &[offset.value()], "")?
        })
    }

    /// Loads `ty` from LDS at byte `offset` with alignment `align`.
    pub fn lds_load(
        &self,
        lds: &Lds<'ctx>,
        offset: Int<'_, 'ctx>,
        ty: Ty,
        align: u32,
    ) -> Result<Value<'ctx>> {
        let p = self.lds_ptr(lds, offset)?;
        let v = self.builder.build_load(ty.llvm(self), p, "")?;
        set_alignment(v, align);
        Value::new(v)
    }

    /// Stores `value` to LDS at byte `offset` with alignment `align`.
    pub fn lds_store(
        &self,
        lds: &Lds<'ctx>,
        offset: Int<'_, 'ctx>,
        value: Value<'ctx>,
        align: u32,
    ) -> Result<()> {
        let p = self.lds_ptr(lds, offset)?;
        let st = self.builder.build_store(p, value.v)?;
        st.set_alignment(align)
            .map_err(|source| DslError::Alignment {
                what: "an LDS store",
                align,
                source,
            })?;
        Ok(())
    }

    /// `ds_add_rtn_u32`: adds `value` to the dword at byte `offset` of `lds` and returns the
    /// value it held before (the lanes of a wave, and the waves of a workgroup, in an order
    /// the hardware chooses).
    pub fn lds_atomic_add<'k>(
        &'k self,
        lds: &Lds<'ctx>,
        offset: Int<'k, 'ctx>,
        value: Int<'k, 'ctx>,
    ) -> Result<Int<'k, 'ctx>> {
        let p = self.lds_ptr(lds, offset)?;
        let old = self.builder.build_atomicrmw(
            inkwell::AtomicRMWBinOp::Add,
            p,
            value.value(),
            AtomicOrdering::Monotonic,
        )?;
        Ok(Int::from_value(self, old))
    }

    /// `ds_read_b64_tr_b{4,8,16}` (`bits` 4, 8 or 16): an 8-byte read per lane, transposed
    /// within each 16-lane group. Returns `<2 x i32>`.
    pub fn lds_load_tr_b64(
        &self,
        lds: &Lds<'ctx>,
        offset: Int<'_, 'ctx>,
        bits: u32,
    ) -> Result<Value<'ctx>> {
        let (name, ty) = match bits {
            4 => ("llvm.amdgcn.ds.read.tr4.b64", Ty::dwords(2)),
            8 => ("llvm.amdgcn.ds.read.tr8.b64", Ty::dwords(2)),
            16 => ("llvm.amdgcn.ds.read.tr16.b64", Ty::vector(Elem::I16, 4)),
            _ => {
                return Err(DslError::Operand {
                    op: "lds_load_tr_b64",
                    rule: format!("element width {bits}: ds_read_b64_tr_b* takes 4, 8 or 16"),
                });
            }
        };
        let p = self.lds_ptr(lds, offset)?;
        let v = self.call_intrinsic_value(name, &[ty.llvm(self)], &[p.into()])?;
        self.bitcast(Value::new(v)?, Ty::dwords(2))
    }

    /// A workgroup barrier that also orders LDS and global accesses: `s_barrier` alone does not
    /// make earlier LDS writes visible, so it is wrapped in workgroup-scope release/acquire
    /// fences.
    pub fn barrier(&self) -> Result<()> {
        self.fence(AtomicOrdering::Release)?;
        self.call_intrinsic("llvm.amdgcn.s.barrier", &[], &[])?;
        self.fence(AtomicOrdering::Acquire)
    }

    /// A workgroup barrier that orders LDS only: its fences carry the `amdgpu-as` = `local`
    /// memory-model relaxation, so the compiler waits for outstanding LDS operations but leaves
    /// vector-memory loads into registers in flight across it. Data written to LDS by
    /// `buffer_load ... lds` is *not* covered: wait for those loads explicitly before.
    pub fn barrier_lds_only(&self) -> Result<()> {
        let local = Some(self.lds_only_mmra());
        self.fence_with(AtomicOrdering::Release, local)?;
        self.call_intrinsic("llvm.amdgcn.s.barrier", &[], &[])?;
        self.fence_with(AtomicOrdering::Acquire, local)
    }

    fn lds_only_mmra(&self) -> inkwell::values::MetadataValue<'ctx> {
        let tag = [
            self.ctx.metadata_string("amdgpu-as").into(),
            self.ctx.metadata_string("local").into(),
        ];
        self.ctx.metadata_node(&tag)
    }

    fn fence(&self, ordering: AtomicOrdering) -> Result<()> {
        self.fence_with(ordering, None)
    }

    /// A release fence at agent scope: the work-item's earlier global writes are visible to
    /// any workgroup of the device (whichever XCD's L2 holds them) that acquires after an
    /// atomic it orders before ([`Kernel::acquire_agent`]).
    pub fn release_agent(&self) -> Result<()> {
        self.scoped_fence(AtomicOrdering::Release, b"agent", None)
    }

    /// An acquire fence at agent scope: global reads after it see what workgroups released
    /// at agent scope before the atomic this work-item read ([`Kernel::release_agent`]).
    pub fn acquire_agent(&self) -> Result<()> {
        self.scoped_fence(AtomicOrdering::Acquire, b"agent", None)
    }

    /// Atomically adds `value` to the `u32` at byte `offset` of the global allocation `base`
    /// (monotonic, agent scope: every XCD's workgroups see one order of the adds) and returns
    /// the value it held before.
    pub fn global_atomic_add<'k>(
        &'k self,
        base: Ptr<'ctx>,
        offset: Int<'k, 'ctx>,
        value: Int<'k, 'ctx>,
    ) -> Result<Int<'k, 'ctx>> {
        let p = self.ptr_offset(base, offset, self.i32(1))?.0;
        let scope = b"agent";
        // SAFETY: plain LLVM C API calls on this kernel's live context and builder, with
        // operands built in it (inkwell builds only system-scope atomics).
        let old = unsafe {
            let id = llvm_sys::core::LLVMGetSyncScopeID(
                self.ctx.raw(),
                scope.as_ptr().cast(),
                scope.len(),
            );
            llvm_sys::core::LLVMBuildAtomicRMWSyncScope(
                self.builder.as_mut_ptr(),
                llvm_sys::LLVMAtomicRMWBinOp::LLVMAtomicRMWBinOpAdd,
                p.as_value_ref(),
                value.value().as_value_ref(),
                llvm_sys::LLVMAtomicOrdering::LLVMAtomicOrderingMonotonic,
                id,
            )
        };
        // SAFETY: the atomicrmw of an i32 just built is an i32 value of this context.
        let old = unsafe { IntValue::new(old) };
        Ok(Int::from_value(self, old))
    }

    fn fence_with(
        &self,
        ordering: AtomicOrdering,
        mmra: Option<inkwell::values::MetadataValue<'ctx>>,
    ) -> Result<()> {
        self.scoped_fence(ordering, b"workgroup", mmra)
    }

    fn scoped_fence(
        &self,
        ordering: AtomicOrdering,
        scope: &[u8],
        mmra: Option<inkwell::values::MetadataValue<'ctx>>,
    ) -> Result<()> {
        // inkwell builds only system-scope fences; other scopes need the C API.
        // SAFETY: plain LLVM C API calls on this kernel's live context and builder.
        unsafe {
            let ctx = self.ctx.raw();
            let id = llvm_sys::core::LLVMGetSyncScopeID(ctx, scope.as_ptr().cast(), scope.len());
            let ord = match ordering {
                AtomicOrdering::Release => llvm_sys::LLVMAtomicOrdering::LLVMAtomicOrderingRelease,
                _ => llvm_sys::LLVMAtomicOrdering::LLVMAtomicOrderingAcquire,
            };
            let fence = llvm_sys::core::LLVMBuildFenceSyncScope(
                self.builder.as_mut_ptr(),
                ord,
                id,
                c"".as_ptr(),
            );
            if let Some(md) = mmra {
                let kind = b"mmra";
                let kind_id = llvm_sys::core::LLVMGetMDKindIDInContext(
                    ctx,
                    kind.as_ptr().cast(),
                    kind.len() as u32,
                );
                llvm_sys::core::LLVMSetMetadata(fence, kind_id, md.as_value_ref());
            }
        }
        Ok(())
    }
}

fn set_alignment(v: BasicValueEnum<'_>, align: u32) {
    if let Some(inst) = v.as_instruction_value() {
        // SAFETY: `inst` is a load just built by this builder.
        unsafe { llvm_sys::core::LLVMSetAlignment(inst.as_value_ref(), align) };
    }
}

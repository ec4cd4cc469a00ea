//! The intrinsics the builder may call: each is known to lower on gfx950 with LLVM 22. An
//! intrinsic the verifier accepts but the instruction selector cannot lower ends in a process
//! abort inside LLVM, so nothing outside this list is ever emitted.

/// Intrinsic names (without overload suffixes) the builder emits.
pub const KNOWN: &[&str] = &[
    "llvm.amdgcn.workitem.id.x",
    "llvm.amdgcn.workgroup.id.x",
    "llvm.amdgcn.workgroup.id.y",
    "llvm.amdgcn.workgroup.id.z",
    "llvm.amdgcn.readfirstlane.i32",
    "llvm.amdgcn.make.buffer.rsrc",
    "llvm.amdgcn.raw.ptr.buffer.load",
    "llvm.amdgcn.raw.ptr.buffer.store",
    "llvm.amdgcn.raw.ptr.buffer.atomic.fadd",
    "llvm.amdgcn.raw.ptr.buffer.load.lds",
    "llvm.amdgcn.ds.read.tr4.b64",
    "llvm.amdgcn.ds.read.tr8.b64",
    "llvm.amdgcn.ds.read.tr16.b64",
    "llvm.amdgcn.s.barrier",
    "llvm.amdgcn.s.setprio",
    "llvm.amdgcn.s.waitcnt",
    "llvm.amdgcn.sched.barrier",
    "llvm.amdgcn.sched.group.barrier",
    "llvm.amdgcn.mfma.scale.f32.16x16x128.f8f6f4",
    "llvm.amdgcn.mfma.scale.f32.32x32x64.f8f6f4",
    "llvm.amdgcn.mfma.f32.16x16x32.bf16",
    "llvm.amdgcn.mfma.f32.32x32x16.bf16",
    "llvm.amdgcn.ds.bpermute",
    "llvm.amdgcn.cvt.pk.fp8.f32",
    "llvm.maxnum",
    "llvm.exp2",
    "llvm.amdgcn.exp2",
    "llvm.amdgcn.rcp",
    "llvm.fabs",
];

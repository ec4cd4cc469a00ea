//! The in-process linker against `ld.lld-22`: both link the same LLVM object; the loadable
//! contents (code, descriptors, metadata note, dynamic symbols) must agree.

use std::process::Command;

use tilegen_dsl::{
    CachePolicy, CompileOptions, Context, Elem, Kernel, KernelAttrs, MfmaOperand, MfmaShape,
    MxFormat, Signature, Ty, compile,
};

fn sample_kernel(ctx: &Context) -> tilegen_dsl::Compiled {
    let mut sig = Signature::new();
    let (pa, pb, pc, pn) = (
        sig.global_ptr("a"),
        sig.global_ptr("b"),
        sig.global_ptr("c"),
        sig.i32("n"),
    );
    let k = Kernel::new(
        ctx,
        "sample",
        &sig,
        KernelAttrs {
            workgroup_size: 64,
            waves_per_eu: None,
        },
    )
    .unwrap();
    let n = k.i32_arg(pn).unwrap();
    let bytes = n * 16;
    let a = k
        .buffer(k.ptr_arg(pa).unwrap(), bytes, CachePolicy::Always)
        .unwrap();
    let b = k
        .buffer(k.ptr_arg(pb).unwrap(), bytes, CachePolicy::Streaming)
        .unwrap();
    let c = k
        .buffer(k.ptr_arg(pc).unwrap(), bytes, CachePolicy::Always)
        .unwrap();
    let lds = k.lds_alloc("a_tile", 1024, 16).unwrap();
    let tid = k.thread_id().unwrap();
    let off = tid * 16;
    let zero = k.i32(0);
    k.buffer_load_to_lds(&a, &lds, zero, off, zero, 16).unwrap();
    k.barrier().unwrap();
    let av = k.lds_load(&lds, off, Ty::dwords(4), 16).unwrap();
    let bv = k.buffer_load(&b, off, zero, 4).unwrap();
    let scale = k
        .buffer_load(&b, tid * 4, k.i32(1024), 1)
        .unwrap()
        .int(&k)
        .unwrap();
    let acc = k.zero(Ty::vector(Elem::F32, 4));
    let r = k
        .mfma_scale(
            MfmaShape::M16N16K128,
            MfmaOperand {
                data: bv,
                format: MxFormat::Fp4,
                scale,
                scale_byte: 1,
            },
            MfmaOperand {
                data: av,
                format: MxFormat::Fp4,
                scale,
                scale_byte: 2,
            },
            acc,
        )
        .unwrap();
    k.buffer_store(&c, r, off, zero).unwrap();
    k.finish().unwrap();
    compile(
        &k,
        CompileOptions {
            emit_asm: true,
            emit_ir: true,
            code_object_v5: false,
        },
    )
    .unwrap()
}

fn readelf(args: &[&str], path: &std::path::Path) -> String {
    let out = Command::new("llvm-readelf-22")
        .args(args)
        .arg(path)
        .output()
        .expect("llvm-readelf-22 (run cargo xtask setup)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn in_process_link_matches_lld() {
    let ctx = Context::create();
    let compiled = sample_kernel(&ctx);
    let dir = tempfile::tempdir().unwrap();
    let obj = dir.path().join("k.o");
    let ours = dir.path().join("ours.hsaco");
    let lld = dir.path().join("lld.hsaco");
    std::fs::write(&obj, &compiled.object).unwrap();
    std::fs::write(&ours, &compiled.code_object).unwrap();
    let st = Command::new("ld.lld-22")
        .arg("-shared")
        .arg(&obj)
        .arg("-o")
        .arg(&lld)
        .status()
        .expect("ld.lld-22");
    assert!(st.success());
    // Same segments, dynamic table, notes (metadata), dynamic symbols and loaded contents.
    for args in [
        &["-l", "--dynamic"][..],
        &["--notes"][..],
        &["--dyn-symbols"][..],
        &["-x", ".text"][..],
        &["-x", ".rodata"][..],
        &["-x", ".hash", "-x", ".gnu.hash", "-x", ".dynstr"][..],
    ] {
        // Non-allocated sections (symbol tables, lld's .comment) are not part of what loads.
        let loaded = |s: String, p: &std::path::Path| {
            s.replace(p.to_str().unwrap(), "F")
                .lines()
                .filter(|l| !l.trim_start().starts_with("None"))
                .collect::<Vec<_>>()
                .join("\n")
        };
        let a = loaded(readelf(args, &ours), &ours);
        let b = loaded(readelf(args, &lld), &lld);
        assert_eq!(a, b, "llvm-readelf {args:?} differs");
    }
    let asm = compiled.asm.unwrap();
    assert!(asm.contains("v_mfma_scale_f32_16x16x128_f8f6f4"), "{asm}");
    assert!(asm.contains("offen lds"), "{asm}");
}

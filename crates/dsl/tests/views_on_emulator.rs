//! Device views computed by the layout algebra, checked by running them on the emulator, and
//! refusals that keep LLVM from seeing what it cannot lower.

use inkwell::context::Context;
use tilegen_dsl::{
    CachePolicy, CompileOptions, DslError, Kernel, KernelAttrs, Param, Storage, TileTensor, compile,
};
use tilegen_layout::{Coord, Idx, Layout};
use tilegen_runtime::{ArgValue, Device, EmuDevice, LaunchConfig, launch};

fn static_layout<'k, 'ctx>(l: &Layout) -> Layout<tilegen_dsl::Int<'k, 'ctx>> {
    Layout::new(
        l.shape()
            .map(&mut |v| Idx::Static(v.static_value().unwrap())),
        l.stride()
            .map(&mut |v| Idx::Static(v.static_value().unwrap())),
    )
    .unwrap()
}

#[test]
fn tile_vectorize_distribute_give_the_mfma_lane_mapping() {
    let ctx = Context::create();
    let k = Kernel::new(
        &ctx,
        "views",
        &[Param::GlobalPtr("out".into())],
        KernelAttrs {
            workgroup_size: 64,
            waves_per_eu: None,
        },
    )
    .unwrap();
    let lane = k.thread_id().unwrap();
    let lds = k.lds_alloc("tile", 32 * 256, 16).unwrap();
    // A row-major [32, 256]-byte LDS tile; the [16, 64] sub-tile at (1, 2); 16-byte vectors;
    // lanes distributed column-major over [16, 4]: lane l owns row l % 16, vector l / 16.
    let view = TileTensor::new(
        &k,
        Storage::Lds(lds),
        static_layout(&Layout::row_major((32, 256))),
    );
    let frag = view
        .tile(
            &[16, 64],
            &[
                Idx::Static(1),
                k.block_id_x().unwrap().idx().add(&Idx::Static(2)),
            ],
        )
        .unwrap()
        .vectorize(&[1, 16])
        .unwrap()
        .distribute(&Layout::col_major((16, 4)), lane)
        .unwrap();
    assert_eq!(frag.elem_bytes(), 16);
    let (base, lane_off) = frag.offsets(&Coord::from((0, 0))).unwrap();
    let out = k
        .buffer(k.ptr_param("out").unwrap(), k.i32(256), CachePolicy::Always)
        .unwrap();
    k.buffer_store(&out, (base + lane_off).value().into(), lane * 4, k.i32(0))
        .unwrap();
    // Register views: static coordinates only; memory-only operations refused.
    let f32t = ctx.f32_type();
    let vars = (0..4)
        .map(|_| k.var(f32t, f32t.const_zero().into()).unwrap())
        .collect();
    let regs = TileTensor::registers(&k, vars, static_layout(&Layout::row_major((2, 2))));
    assert!(regs.load(&Coord::from((1, 1))).is_ok());
    assert!(matches!(
        regs.load(&Coord::from((lane.idx(), Idx::Static(0)))),
        Err(DslError::Operand { .. })
    ));
    assert!(regs.vectorize(&[1, 2]).is_err());
    assert!(regs.offsets(&Coord::from((0, 0))).is_err());
    assert!(regs.distribute(&Layout::col_major((2, 2)), lane).is_err());
    k.finish().unwrap();
    let built = compile(&k, CompileOptions::default()).unwrap();

    let dev = EmuDevice::new();
    let module = dev.load(&built.code_object).unwrap();
    let buf = dev.alloc(256).unwrap();
    let config = LaunchConfig {
        grid: [1, 1, 1],
        block: [64, 1, 1],
        dynamic_lds: 0,
    };
    launch(&dev, &module, "views", &config, &[ArgValue::Ptr(buf)]).unwrap();
    let mut got = vec![0u8; 256];
    dev.copy_from_device(buf, &mut got).unwrap();
    for l in 0..64u32 {
        let v = u32::from_le_bytes(got[4 * l as usize..4 * l as usize + 4].try_into().unwrap());
        let want = 16 * 256 + 2 * 64 + (l % 16) * 256 + (l / 16) * 16;
        assert_eq!(v, want, "lane {l}");
    }
}

#[test]
fn unknown_intrinsics_and_bad_operands_are_errors_not_aborts() {
    let ctx = Context::create();
    let k = Kernel::new(
        &ctx,
        "bad",
        &[],
        KernelAttrs {
            workgroup_size: 64,
            waves_per_eu: None,
        },
    )
    .unwrap();
    assert!(matches!(k.setprio(4), Err(DslError::Operand { .. })));
    let lds = k.lds_alloc("a", 1024, 16).unwrap();
    assert!(matches!(
        k.lds_load_tr_b64(&lds, k.i32(0), 6),
        Err(DslError::Operand { .. })
    ));
    assert!(matches!(
        k.lds_alloc("huge", 200 * 1024, 16),
        Err(DslError::LdsBudget { .. })
    ));
    assert!(matches!(
        Kernel::new(
            &ctx,
            "wide",
            &[],
            KernelAttrs {
                workgroup_size: 2048,
                waves_per_eu: None
            }
        ),
        Err(DslError::Operand { .. })
    ));
    assert!(matches!(
        k.ptr_param("missing"),
        Err(DslError::NoSuchParam { .. })
    ));
}

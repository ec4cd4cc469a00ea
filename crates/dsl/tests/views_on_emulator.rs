//! Device views computed by the layout algebra, checked by running them on the emulator, and
//! refusals that keep LLVM from seeing what it cannot lower.

use tilegen_dsl::{
    CachePolicy, CompileOptions, Context, DslError, Elem, Kernel, KernelAttrs, Signature, Storage,
    TileTensor, Ty, compile, dev_layout,
};
use tilegen_layout::{Coord, Idx, Layout};
use tilegen_runtime::{ArgValue, Device, EmuDevice, LaunchConfig, launch};

fn static_layout<'k, 'ctx>(l: &Layout) -> Layout<tilegen_dsl::Int<'k, 'ctx>> {
    dev_layout(l).unwrap()
}

fn attrs() -> KernelAttrs {
    KernelAttrs {
        workgroup_size: 64,
        waves_per_eu: None,
    }
}

/// Runs kernel `name` of `built` with one 64-lane wave and an output buffer of `bytes`.
fn run_one(built: &tilegen_dsl::Compiled, name: &str, bytes: usize) -> Vec<u8> {
    run_on(built, name, vec![0; bytes])
}

/// Runs kernel `name` of `built` with one 64-lane wave on a buffer that starts as `data`;
/// returns what the buffer holds after.
fn run_on(built: &tilegen_dsl::Compiled, name: &str, data: Vec<u8>) -> Vec<u8> {
    let dev = EmuDevice::new();
    let module = dev.load(&built.code_object).unwrap();
    let buf = dev.alloc(data.len() as u64).unwrap();
    dev.copy_to_device(buf, &data).unwrap();
    let config = LaunchConfig {
        grid: [1, 1, 1],
        block: [64, 1, 1],
        dynamic_lds: 0,
    };
    launch(&dev, &module, name, &config, &[ArgValue::Ptr(buf)]).unwrap();
    let mut got = data;
    dev.copy_from_device(buf, &mut got).unwrap();
    got
}

fn words(bytes: &[u8]) -> Vec<u32> {
    bytes
        .chunks(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

#[test]
fn tile_vectorize_distribute_give_the_mfma_lane_mapping() {
    let ctx = Context::create();
    let mut sig = Signature::new();
    let out_param = sig.global_ptr("out");
    let k = Kernel::new(&ctx, "views", &sig, attrs()).unwrap();
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
        .buffer(
            k.ptr_arg(out_param).unwrap(),
            k.i32(256),
            CachePolicy::Always,
        )
        .unwrap();
    k.buffer_store(&out, (base + lane_off).into(), lane * 4, k.i32(0))
        .unwrap();
    // Register views: static coordinates only; memory-only operations refused.
    let vars = (0..4).map(|_| k.var(k.zero(Ty::F32)).unwrap()).collect();
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
    let got = words(&run_one(&built, "views", 256));
    for l in 0..64u32 {
        let want = 16 * 256 + 2 * 64 + (l % 16) * 256 + (l / 16) * 16;
        assert_eq!(got[l as usize], want, "lane {l}");
    }
}

/// A packed FP4 view: tiles and partitions count in elements, offsets come out in bytes. The
/// partition's lane offsets are those of `distribute` over 16-byte vectors (the same MFMA
/// operand mapping, here from a TV layout), and a run-time tile coordinate along the packed
/// mode is refused where it would land inside a byte.
#[test]
fn packed_partition_counts_elements_and_offsets_bytes() {
    let ctx = Context::create();
    let mut sig = Signature::new();
    let out_param = sig.global_ptr("out");
    let k = Kernel::new(&ctx, "packed", &sig, attrs()).unwrap();
    let lane = k.thread_id().unwrap();
    let lds = k.lds_alloc("tile", 32 * 256, 16).unwrap();
    // [32, 512] FP4 elements = [32, 256] bytes; the [16, 128]-element tile at (1, 2).
    let view = TileTensor::packed(
        &k,
        Storage::Lds(lds),
        static_layout(&Layout::row_major((32, 512))),
        4,
    )
    .unwrap();
    let tile = view
        .tile(&[16, 128], &[Idx::Static(1), Idx::Static(2)])
        .unwrap();
    // Lane l holds row l % 16 and 32 consecutive elements from 32 (l / 16): (lane, value) ->
    // row + 16 * k.
    let tv = Layout::new(((16, 4), 32), ((1, 16 * 32), 16)).unwrap();
    let frag = tile.partition(&tv, [16, 128], lane).unwrap();
    assert_eq!(frag.layout().rank(), 3);
    let (base, lane_off) = frag.offsets(&Coord::from((0, 0, 0))).unwrap();
    // A value of the fragment is 16 bytes: one vector.
    let v = frag.vectorize(&[32, 1, 1]).unwrap();
    assert_eq!(v.elem_bytes(), 16);
    // Half a byte into a packed mode: refused.
    assert!(matches!(
        frag.offsets(&Coord::from((1, 0, 0))),
        Err(DslError::Operand { .. })
    ));
    assert!(matches!(
        view.tile(&[16, 1], &[Idx::Static(0), lane.idx()]),
        Err(DslError::Operand { .. })
    ));
    let out = k
        .buffer(
            k.ptr_arg(out_param).unwrap(),
            k.i32(256),
            CachePolicy::Always,
        )
        .unwrap();
    k.buffer_store(&out, (base + lane_off).into(), lane * 4, k.i32(0))
        .unwrap();
    k.finish().unwrap();
    let built = compile(&k, CompileOptions::default()).unwrap();
    let got = words(&run_one(&built, "packed", 256));
    for l in 0..64u32 {
        let want = 16 * 256 + 2 * 64 + (l % 16) * 256 + (l / 16) * 16;
        assert_eq!(got[l as usize], want, "lane {l}");
    }
}

/// Whole-value operations: slices, splits, concatenation, conversions and bitcasts, checked by
/// what lands in memory.
#[test]
fn value_operations_on_the_emulator() {
    let ctx = Context::create();
    let mut sig = Signature::new();
    let out_param = sig.global_ptr("out");
    let k = Kernel::new(&ctx, "values", &sig, attrs()).unwrap();
    let lane = k.thread_id().unwrap();
    let out = k
        .buffer(
            k.ptr_arg(out_param).unwrap(),
            k.i32(64 * 32),
            CachePolicy::Always,
        )
        .unwrap();
    // <4 x i32> (lane, 1, 2, 3) -> reversed halves via split and concat.
    let parts: Vec<_> = [lane, k.i32(1), k.i32(2), k.i32(3)]
        .into_iter()
        .map(Into::into)
        .collect();
    let v = k.concat(&parts).unwrap();
    assert_eq!(v.ty(), Ty::dwords(4));
    let halves = k.split(v, 2).unwrap();
    let swapped = k.concat(&[halves[1], halves[0]]).unwrap();
    k.buffer_store(&out, swapped, lane * 32, k.i32(0)).unwrap();
    // f32 3.0 -> bf16 (0x4040), twice, as one dword.
    let three = k.bitcast(k.i32(0x4040_0000).into(), Ty::F32).unwrap();
    let pair = k.concat(&[three, three]).unwrap();
    let bf = k.convert(pair, Elem::Bf16).unwrap();
    k.buffer_store(&out, bf, lane * 32 + 16, k.i32(0)).unwrap();
    // Byte 2 of 0x00ab_0000 widened to an i32.
    let bytes = k
        .bitcast(k.i32(0x00ab_0000).into(), Ty::vector(Elem::I8, 4))
        .unwrap();
    let b2 = k.convert(k.slice(bytes, 2, 1).unwrap(), Elem::I32).unwrap();
    k.buffer_store(&out, b2, lane * 32 + 20, k.i32(0)).unwrap();
    // Refusals: sizes that do not match.
    assert!(k.bitcast(swapped, Ty::I32).is_err());
    assert!(k.split(swapped, 3).is_err());
    assert!(k.slice(swapped, 3, 2).is_err());
    assert!(k.convert(swapped, Elem::I8).is_err());
    k.finish().unwrap();
    let built = compile(&k, CompileOptions::default()).unwrap();
    let got = words(&run_one(&built, "values", 64 * 32));
    for l in 0..64usize {
        let w = &got[8 * l..8 * l + 6];
        assert_eq!(w, [2, 3, l as u32, 1, 0x4040_4040, 0xab], "lane {l}");
    }
}

/// Runs a one-wave kernel whose lane `l` reads `x, y = inputs[l]` as f32 and stores the values
/// `body(kernel, lane, x, (x, y))` returns one after another from the start of its 16 bytes;
/// returns each lane's four words as f32.
fn per_lane_f32<'ctx>(
    ctx: &'ctx Context,
    name: &str,
    inputs: &[(f32, f32)],
    body: impl FnOnce(
        &Kernel<'ctx>,
        tilegen_dsl::Int<'_, 'ctx>,
        tilegen_dsl::Value<'ctx>,
        tilegen_dsl::Value<'ctx>,
    ) -> Vec<tilegen_dsl::Value<'ctx>>,
) -> Vec<[f32; 4]> {
    assert!(inputs.len() <= 64);
    let mut sig = Signature::new();
    let out_param = sig.global_ptr("out");
    let k = Kernel::new(ctx, name, &sig, attrs()).unwrap();
    let lane = k.thread_id().unwrap();
    let out = k
        .buffer(
            k.ptr_arg(out_param).unwrap(),
            k.i32(64 * 16),
            CachePolicy::Always,
        )
        .unwrap();
    let xy = k
        .bitcast(
            k.buffer_load(&out, lane * 16, k.i32(0), 2).unwrap(),
            Ty::vector(Elem::F32, 2),
        )
        .unwrap();
    let x = k.slice(xy, 0, 1).unwrap();
    let mut at = 0;
    for v in body(&k, lane, x, xy) {
        let bytes = v.ty().bytes() as i64;
        k.buffer_store(&out, v, lane * 16 + at, k.i32(0)).unwrap();
        at += bytes;
    }
    assert!(at <= 16, "a lane stores at most 16 bytes");
    k.finish().unwrap();
    let built = compile(&k, CompileOptions::default()).unwrap();
    let mut input: Vec<u8> = inputs
        .iter()
        .flat_map(|&(x, y)| [x, y, 0.0, 0.0])
        .flat_map(f32::to_le_bytes)
        .collect();
    input.resize(64 * 16, 0);
    let got: Vec<f32> = words(&run_on(&built, name, input))
        .into_iter()
        .map(f32::from_bits)
        .collect();
    got.chunks(4).map(|c| [c[0], c[1], c[2], c[3]]).collect()
}

/// `exp2` keeps results below 2^-126 as subnormals; `exp2_ftz` flushes them to zero and
/// agrees elsewhere, on scalars and vectors alike.
#[test]
fn exp2_and_its_flushing_form_on_the_emulator() {
    let ctx = Context::create();
    // Lane l: x = 3 - 2.5 l (from 3 down to -154.5, across the subnormal range (-149, -126)),
    // y = x - 0.25.
    let inputs: Vec<(f32, f32)> = (0..64)
        .map(|l| {
            let x = 3.0 - 2.5 * l as f32;
            (x, x - 0.25)
        })
        .collect();
    let lanes = per_lane_f32(&ctx, "exps", &inputs, |k, lane, x, xy| {
        assert!(k.exp2_ftz(lane.into()).is_err());
        vec![
            k.exp2(x).unwrap(),
            k.exp2_ftz(x).unwrap(),
            k.exp2_ftz(xy).unwrap(),
        ]
    });
    let got: Vec<f32> = lanes.concat();
    let close = |got: f32, want: f64| {
        if want == 0.0 {
            got == 0.0
        } else {
            ((got as f64 - want) / want).abs() < 1e-6
        }
    };
    let mut subnormals = 0;
    for l in 0..64usize {
        let x = 3.0 - 2.5 * l as f64;
        let w = &got[4 * l..4 * l + 4];
        let exact = x.exp2();
        let flushed = |x: f64| if x < -126.0 { 0.0 } else { x.exp2() };
        if x < -126.0 && x > -149.0 {
            subnormals += 1;
            assert!(
                w[0] > 0.0 && !w[0].is_normal(),
                "lane {l}: exp2({x}) = {}",
                w[0]
            );
        } else {
            assert!(
                close(w[0], (exact as f32) as f64),
                "lane {l}: exp2({x}) = {}",
                w[0]
            );
        }
        assert!(
            close(w[1], flushed(x)),
            "lane {l}: exp2_ftz({x}) = {}",
            w[1]
        );
        assert!(
            close(w[2], flushed(x)),
            "lane {l}: vector exp2_ftz({x}) = {}",
            w[2]
        );
        let y = x - 0.25;
        assert!(
            close(w[3], flushed(y)),
            "lane {l}: vector exp2_ftz({y}) = {}",
            w[3]
        );
    }
    assert!(subnormals > 5, "the inputs must cross the subnormal range");
}

/// `rcp_approx` is the hardware reciprocal: within one ulp of `1 / x` on normal inputs and
/// results, 0 for infinities, and per element on vectors.
#[test]
fn reciprocal_on_the_emulator() {
    let ctx = Context::create();
    // Lane l: x from 1 to about 1e30 and its negative partner, the last lane infinity.
    let value = |l: usize| -> (f32, f32) {
        if l == 63 {
            (f32::INFINITY, f32::NEG_INFINITY)
        } else {
            let x = 1.37f32.powi(l as i32 * 3) * 1.001;
            (x, -x / 3.0)
        }
    };
    let inputs: Vec<(f32, f32)> = (0..64).map(value).collect();
    let lanes = per_lane_f32(&ctx, "rcps", &inputs, |k, lane, x, xy| {
        assert!(k.rcp_approx(lane.into()).is_err());
        vec![k.rcp_approx(x).unwrap(), k.rcp_approx(xy).unwrap()]
    });
    let got: Vec<f32> = lanes.concat();
    let within_ulp = |got: f32, x: f32| {
        let want = 1.0 / x as f64;
        if want == 0.0 {
            return got == 0.0;
        }
        let ulp = f32::EPSILON as f64 * (want as f32).abs() as f64;
        (got as f64 - want).abs() <= ulp
    };
    for l in 0..64usize {
        let (x, y) = value(l);
        let w = &got[4 * l..4 * l + 3];
        assert!(within_ulp(w[0], x), "lane {l}: rcp({x}) = {}", w[0]);
        assert!(within_ulp(w[1], x), "lane {l}: vector rcp({x}) = {}", w[1]);
        assert!(within_ulp(w[2], y), "lane {l}: vector rcp({y}) = {}", w[2]);
    }
}

#[test]
fn unknown_intrinsics_and_bad_operands_are_errors_not_aborts() {
    let ctx = Context::create();
    let k = Kernel::new(&ctx, "bad", &Signature::new(), attrs()).unwrap();
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
            &Signature::new(),
            KernelAttrs {
                workgroup_size: 2048,
                waves_per_eu: None
            }
        ),
        Err(DslError::Operand { .. })
    ));
    // A handle of another kernel's signature: a typed error, not a wrong argument.
    let mut other = Signature::new();
    let _ = other.i32("n");
    let p = other.global_ptr("p");
    assert!(matches!(k.ptr_arg(p), Err(DslError::NoSuchParam { .. })));
}

/// `lds_atomic_add` hands each lane of a counter's 16 a distinct previous value and leaves the
/// sum; `exit_unless` ends the wave before its stores when the kernel argument says so.
#[test]
fn lds_atomic_add_and_early_exit_on_the_emulator() {
    let ctx = Context::create();
    let mut sig = Signature::new();
    let out_param = sig.global_ptr("out");
    let go_param = sig.i32("go");
    let k = Kernel::new(&ctx, "atomics", &sig, attrs()).unwrap();
    let lane = k.thread_id().unwrap();
    let counters = k.lds_alloc("counters", 16, 4).unwrap();
    k.if_then(lane.lt(&k.i32(4)), || {
        k.lds_store(&counters, lane * 4, lane.into(), 4)
    })
    .unwrap();
    k.barrier().unwrap();
    let go = k.i32_arg(go_param).unwrap();
    k.exit_unless(k.i32(0).lt(&go)).unwrap();
    // Counter c starts at c (written by lanes 0..4) and lanes c, c + 4, .. add 2 each.
    let old = k
        .lds_atomic_add(&counters, (lane % 4) * 4, k.i32(2))
        .unwrap();
    k.barrier().unwrap();
    let total = k.lds_load(&counters, (lane % 4) * 4, Ty::I32, 4).unwrap();
    let out = k
        .buffer(
            k.ptr_arg(out_param).unwrap(),
            k.i32(64 * 8),
            CachePolicy::Always,
        )
        .unwrap();
    k.buffer_store(&out, old.into(), lane * 8, k.i32(0))
        .unwrap();
    k.buffer_store(&out, total, lane * 8 + 4, k.i32(0)).unwrap();
    k.finish().unwrap();
    let built = compile(&k, CompileOptions::default()).unwrap();
    let run = |go: i32| {
        let dev = EmuDevice::new();
        let module = dev.load(&built.code_object).unwrap();
        let buf = dev.alloc(64 * 8).unwrap();
        dev.copy_to_device(buf, &[0xff; 64 * 8]).unwrap();
        let config = LaunchConfig {
            grid: [1, 1, 1],
            block: [64, 1, 1],
            dynamic_lds: 0,
        };
        launch(
            &dev,
            &module,
            "atomics",
            &config,
            &[ArgValue::Ptr(buf), ArgValue::I32(go)],
        )
        .unwrap();
        let mut got = vec![0; 64 * 8];
        dev.copy_from_device(buf, &mut got).unwrap();
        words(&got)
    };
    let got = run(1);
    for c in 0..4u32 {
        let mut olds: Vec<u32> = (0..16).map(|i| got[2 * (c + 4 * i) as usize]).collect();
        olds.sort_unstable();
        let want: Vec<u32> = (0..16).map(|i| c + 2 * i).collect();
        assert_eq!(olds, want, "counter {c}");
        for i in 0..16 {
            assert_eq!(got[2 * (c + 4 * i) as usize + 1], c + 32, "counter {c}");
        }
    }
    assert!(
        run(0).iter().all(|&w| w == u32::MAX),
        "exited before storing"
    );
}

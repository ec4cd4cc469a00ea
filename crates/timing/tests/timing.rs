//! The timing model on kernels assembled with llvm-mc-22 and linked with ld.lld-22: MFMA
//! throughput, dependent VALU latency, LDS bank conflicts, memory latency behind
//! `s_waitcnt vmcnt(0)`, monotonic properties, the sampled method against a full
//! simulation, the time budget of a full-size launch, and the trace.

use std::time::Instant;

use tilegen_codeobj::CodeObject;
use tilegen_emu::exec::{DeviceMemory, Program};
use tilegen_testkit::llvm::{kernel_object, scratch};
use tilegen_timing::{
    self as timing, CrossXcd, Method, Params, Prediction, Reason, TimingLaunch, TimingOptions,
    TraceOptions,
};

/// Assembles `body` as kernel `name` (kernarg pointer in s[0:1], workgroup ids x, y in s2, s3,
/// `lds` bytes of static LDS) and loads it.
fn kernel(name: &str, body: &str, lds: u32) -> (DeviceMemory, Program) {
    let bytes = kernel_object(&scratch(&format!("timing-{name}")), name, body, lds);
    let co = CodeObject::parse(&bytes).expect("parse code object");
    let mut mem = DeviceMemory::new();
    let prog = Program::load(&mut mem, &co, name).expect("load kernel");
    (mem, prog)
}

fn predict_with(
    mem: &mut DeviceMemory,
    prog: &Program,
    grid: [u32; 3],
    block: [u32; 3],
    kernarg: &[u8],
    dynamic_lds: u32,
    opts: &TimingOptions,
) -> Prediction {
    let launch = TimingLaunch {
        grid,
        block,
        dynamic_lds,
        kernarg,
    };
    timing::predict(mem, prog, &launch, &Params::mi355x(), opts).expect("predict")
}

fn predict(
    mem: &mut DeviceMemory,
    prog: &Program,
    grid: [u32; 3],
    block: [u32; 3],
    kernarg: &[u8],
) -> Prediction {
    predict_with(
        mem,
        prog,
        grid,
        block,
        kernarg,
        0,
        &TimingOptions::default(),
    )
}

/// A loop of `iters` iterations of 16 independent scaled 16x16x128 MFMAs (A/B format `fmt`:
/// 4 = FP4, 0 = FP8), with the loop counter updated in the matrix core's shadow.
fn mfma_loop(iters: u32, fmt: u32) -> String {
    let b = if fmt == 4 { "v[80:83]" } else { "v[80:87]" };
    let a = if fmt == 4 { "v[64:67]" } else { "v[64:71]" };
    let mut s = format!("\ts_mov_b32 s10, {iters}\n.Lloop:\n");
    for i in 0..16 {
        s += &format!(
            "\tv_mfma_scale_f32_16x16x128_f8f6f4 v[{}:{}], {a}, {b}, v[{}:{}], v96, v97 cbsz:{fmt} blgp:{fmt}\n",
            4 * i,
            4 * i + 3,
            4 * i,
            4 * i + 3
        );
        if i == 13 {
            s += "\ts_sub_u32 s10, s10, 1\n";
        }
        if i == 14 {
            s += "\ts_cmp_lg_u32 s10, 0\n";
        }
    }
    s += "\ts_cbranch_scc1 .Lloop\n";
    s
}

fn cycles_per_mfma(fmt: u32) -> f64 {
    let (mut m1, p1) = kernel(&format!("mfma{fmt}_a"), &mfma_loop(64, fmt), 0);
    let (mut m2, p2) = kernel(&format!("mfma{fmt}_b"), &mfma_loop(128, fmt), 0);
    let a = predict(&mut m1, &p1, [1, 1, 1], [64, 1, 1], &[0; 16]);
    let b = predict(&mut m2, &p2, [1, 1, 1], [64, 1, 1], &[0; 16]);
    (b.cycles - a.cycles) as f64 / (64.0 * 16.0)
}

#[test]
fn independent_scaled_mfmas_take_passes_times_four_cycles() {
    let t = Instant::now();
    let fp4 = cycles_per_mfma(4);
    let fp8 = cycles_per_mfma(0);
    eprintln!(
        "16x16x128 FP4: {fp4:.2} cycles per MFMA, FP8: {fp8:.2} ({:.2} s)",
        t.elapsed().as_secs_f64()
    );
    assert!((fp4 - 16.0).abs() <= 0.02 * 16.0, "FP4: {fp4}");
    assert!((fp8 - 32.0).abs() <= 0.02 * 32.0, "FP8: {fp8}");
}

/// `n` dependent `v_fma_f32` per iteration.
fn valu_chain(iters: u32) -> String {
    let mut s = format!("\ts_mov_b32 s10, {iters}\n.Lloop:\n");
    for i in 0..32 {
        s += "\tv_fma_f32 v1, v1, v2, v3\n";
        if i == 10 {
            s += "\ts_sub_u32 s10, s10, 1\n\ts_cmp_lg_u32 s10, 0\n";
        }
    }
    s += "\ts_cbranch_scc1 .Lloop\n";
    s
}

#[test]
fn a_dependent_valu_chain_costs_the_dependent_latency_per_step() {
    let (mut m1, p1) = kernel("chain_a", &valu_chain(32), 0);
    let (mut m2, p2) = kernel("chain_b", &valu_chain(64), 0);
    let a = predict(&mut m1, &p1, [1, 1, 1], [64, 1, 1], &[0; 16]);
    let b = predict(&mut m2, &p2, [1, 1, 1], [64, 1, 1], &[0; 16]);
    let per = (b.cycles - a.cycles) as f64 / (32.0 * 32.0);
    let want = Params::mi355x().valu.dependent_latency_cycles.get();
    eprintln!("dependent v_fma_f32: {per:.2} cycles per step (model {want})");
    // One branch redirect per 32 steps is included.
    assert!((per - want).abs() <= 0.05 * want, "{per}");
    let dep = b
        .stalls
        .iter()
        .map(|s| s.cycles[Reason::Dependency])
        .sum::<u64>();
    assert!(
        dep > b.cycles / 3,
        "stalls are dependencies: {:?}",
        b.stalls
    );
}

/// `iters` times a `v_cmpx` (a VALU write of EXEC) followed by an independent MFMA.
fn exec_then_mfma(iters: u32) -> String {
    let mut s = format!("\ts_mov_b32 s10, {iters}\n.Lloop:\n");
    s += "\tv_cmpx_le_u32_e32 vcc, 0, v0\n";
    s += "\tv_mfma_f32_16x16x16_f16 v[8:11], v[4:5], v[6:7], v[8:11]\n";
    s += "\ts_sub_u32 s10, s10, 1\n\ts_cmp_lg_u32 s10, 0\n\ts_cbranch_scc1 .Lloop\n";
    s
}

#[test]
fn a_valu_exec_write_holds_back_the_next_mfma() {
    let (mut mem, prog) = kernel("exec_mfma", &exec_then_mfma(64), 0);
    let launch = TimingLaunch {
        grid: [1, 1, 1],
        block: [64, 1, 1],
        dynamic_lds: 0,
        kernarg: &[0; 16],
    };
    let mut with = |wait_states: f64| {
        let mut p = Params::mi355x();
        p.valu.exec_write_then_mfma_wait_states.value = wait_states;
        let opts = TimingOptions::default();
        timing::predict(&mut mem, &prog, &launch, &p, &opts).expect("predict")
    };
    let (off, on) = (with(0.0), with(4.0));
    let documented = Params::mi355x().valu.exec_write_then_mfma_wait_states.get();
    assert_eq!(
        documented, 4.0,
        "GCNHazardRecognizer's VALUWritesExecWaitStates"
    );
    // With no wait states the MFMA issues in the slot after the v_cmpx; with 4 it waits 4
    // more slots of 4 clocks, every iteration.
    let per = (on.cycles - off.cycles) as f64 / 64.0;
    eprintln!("v_cmpx then MFMA: {per:.2} more cycles per iteration with 4 wait states");
    assert!((per - 16.0).abs() < 0.5, "{per}");
    let dep = |p: &Prediction| {
        p.stalls
            .iter()
            .map(|s| s.cycles[Reason::Dependency])
            .sum::<u64>()
    };
    assert!(dep(&on) > dep(&off));
}

/// 16 waves each issue `iters` x 32 `ds_read_b32` with lane addresses `lane << shift`.
fn lds_reads(iters: u32, shift: u32) -> String {
    let mut s = format!("\tv_lshlrev_b32 v1, {shift}, v0\n\ts_mov_b32 s10, {iters}\n.Lloop:\n");
    for i in 0..32 {
        s += &format!("\tds_read_b32 v{}, v1\n", 2 + i % 16);
        if i == 10 {
            s += "\ts_sub_u32 s10, s10, 1\n\ts_cmp_lg_u32 s10, 0\n";
        }
    }
    s += "\ts_cbranch_scc1 .Lloop\n\ts_waitcnt lgkmcnt(0)\n";
    s
}

#[test]
fn lds_bank_conflicts_cost_two_and_four_times_the_conflict_free_pattern() {
    let per_read = |shift: u32| {
        let (mut m1, p1) = kernel(&format!("lds{shift}_a"), &lds_reads(8, shift), 16384);
        let (mut m2, p2) = kernel(&format!("lds{shift}_b"), &lds_reads(16, shift), 16384);
        let a = predict(&mut m1, &p1, [1, 1, 1], [1024, 1, 1], &[0; 16]);
        let b = predict(&mut m2, &p2, [1, 1, 1], [1024, 1, 1], &[0; 16]);
        (b.cycles - a.cycles) as f64 / (16.0 * 32.0 * 8.0)
    };
    let free = per_read(2);
    let two = per_read(3);
    let four = per_read(4);
    eprintln!(
        "ds_read_b32 cycles per wave-read: conflict-free {free:.3}, 2-way {two:.3}, 4-way {four:.3}"
    );
    assert!((two / free - 2.0).abs() < 0.1, "2-way: {}", two / free);
    assert!((four / free - 4.0).abs() < 0.2, "4-way: {}", four / free);
}

/// 16 waves each run `iters` iterations of 8 `ds_read_b128`, plus (`dma`) one
/// `buffer_load_dwordx4 ... lds` of 1 KB from the buffer at kernarg 0 into LDS.
fn lds_reads_with_dma(iters: u32, dma: bool) -> String {
    let mut s = String::from(
        "\ts_load_dwordx2 s[8:9], s[0:1], 0x0\n\ts_mov_b32 s10, -1\n\ts_mov_b32 s11, 0x20000\n\tv_lshlrev_b32 v1, 4, v0\n\tv_and_b32 v1, 0x3ff, v1\n\ts_mov_b32 m0, 0x4000\n\ts_waitcnt lgkmcnt(0)\n",
    );
    s += &format!("\ts_mov_b32 s12, {iters}\n.Lloop:\n");
    if dma {
        s += "\tbuffer_load_dwordx4 v1, s[8:11], 0 offen lds\n";
    }
    for i in 0..8 {
        s += &format!("\tds_read_b128 v[{}:{}], v1\n", 4 + 4 * i, 7 + 4 * i);
    }
    s += "\ts_sub_u32 s12, s12, 1\n\ts_cmp_lg_u32 s12, 0\n\ts_cbranch_scc1 .Lloop\n\ts_waitcnt vmcnt(0) lgkmcnt(0)\n";
    s
}

#[test]
fn lds_dma_loads_take_the_lds_port_for_the_bytes_they_write() {
    let per_iteration = |dma: bool| {
        let run = |iters: u32| {
            let name = format!("ldsdma{}_{iters}", u8::from(dma));
            let (mut m, prog) = kernel(&name, &lds_reads_with_dma(iters, dma), 32768);
            let buf = m.alloc(1024).unwrap();
            let mut karg = buf.to_le_bytes().to_vec();
            karg.resize(16, 0);
            predict(&mut m, &prog, [1, 1, 1], [1024, 1, 1], &karg)
        };
        let (a, b) = (run(8), run(24));
        (b.cycles - a.cycles) as f64 / 16.0
    };
    let reads = per_iteration(false);
    let with_dma = per_iteration(true);
    // Per iteration and port (two SIMDs, 8 waves): 64 ds_read_b128 of 1 KB, and with the
    // DMA 8 writes of 1 KB at the port's write bandwidth.
    let p = Params::mi355x();
    let read = 8.0 * 8.0 * 1024.0 / p.lds.port_bytes_per_cycle.get();
    let write = 8.0 * 1024.0 / p.lds.write_bytes_per_cycle.get();
    eprintln!(
        "cycles per iteration: reads {reads:.0} (port model {read:.0}), with LDS-DMA {with_dma:.0} (model {:.0})",
        read + write
    );
    assert!(
        (reads - read).abs() < 0.1 * read,
        "reads: {reads} vs {read}"
    );
    assert!(
        (with_dma - (read + write)).abs() < 0.1 * (read + write),
        "with DMA: {with_dma} vs {}",
        read + write
    );
}

/// One global load of the buffer at kernarg 0 (`loads` times, each waited for).
fn load_wait(loads: u32) -> String {
    let mut s = String::from(
        "\ts_load_dwordx2 s[4:5], s[0:1], 0x0\n\tv_mov_b32 v1, 0\n\ts_waitcnt lgkmcnt(0)\n",
    );
    for _ in 0..loads {
        s += "\tglobal_load_dword v2, v1, s[4:5]\n\ts_waitcnt vmcnt(0)\n";
    }
    s
}

#[test]
fn waitcnt_vmcnt_after_a_global_load_adds_the_memory_latency() {
    let p = Params::mi355x();
    let run = |loads: u32| {
        let (mut m, prog) = kernel(&format!("load{loads}"), &load_wait(loads), 0);
        let buf = m.alloc(4096).unwrap();
        let mut karg = buf.to_le_bytes().to_vec();
        karg.resize(16, 0);
        predict(&mut m, &prog, [1, 1, 1], [64, 1, 1], &karg)
    };
    let none = run(0);
    let one = run(1);
    let two = run(2);
    let miss = (one.cycles - none.cycles) as f64;
    let hit = (two.cycles - one.cycles) as f64;
    let clock = one.clock_ghz;
    let v = &p.vmem;
    let want_miss =
        v.l2_hit_latency_cycles.get() + (v.mall_latency_ns.get() + v.hbm_latency_ns.get()) * clock;
    let want_hit = v.l1_hit_latency_cycles.get();
    eprintln!("cold load {miss} cycles (model {want_miss:.0}), L1 hit {hit} (model {want_hit})");
    assert!(
        (miss - want_miss).abs() < 0.05 * want_miss + 16.0,
        "{miss} vs {want_miss}"
    );
    assert!(
        (hit - want_hit).abs() < 0.05 * want_hit + 16.0,
        "{hit} vs {want_hit}"
    );
    let vm = one
        .stalls
        .iter()
        .map(|s| s.cycles[Reason::WaitcntVm])
        .sum::<u64>();
    assert!(
        vm as f64 >= 0.9 * want_miss,
        "waitcnt vm stalls: {:?}",
        one.stalls
    );
}

#[test]
fn more_iterations_are_never_faster_and_a_grid_of_256_takes_as_long_as_one() {
    let mut last = 0;
    for iters in [1, 2, 5, 16, 17, 40] {
        let (mut m, p) = kernel(&format!("mono{iters}"), &mfma_loop(iters, 4), 0);
        let r = predict(&mut m, &p, [1, 1, 1], [64, 1, 1], &[0; 16]);
        assert!(
            r.cycles >= last,
            "{iters} iterations: {} < {last}",
            r.cycles
        );
        last = r.cycles;
    }
    let (mut m, p) = kernel("grid", &mfma_loop(32, 4), 0);
    let one = predict(&mut m, &p, [1, 1, 1], [64, 1, 1], &[0; 16]);
    let many = predict(&mut m, &p, [256, 1, 1], [64, 1, 1], &[0; 16]);
    eprintln!("grid 1: {:.2} us, grid 256: {:.2} us", one.us, many.us);
    assert!(
        (many.us / one.us - 1.0).abs() < 0.02,
        "{} vs {}",
        one.us,
        many.us
    );
    assert_eq!(many.workgroups_total, 256);
    assert_eq!(many.rounds, 1);
    // The breakdown of the one-workgroup grid describes the CU that ran it, not the idle
    // CUs simulated beside it: its one wave's SIMD mostly issues MFMAs.
    let simd0 = &one.stalls[0].cycles;
    assert!(
        simd0[Reason::Idle] * 4 < simd0.total(),
        "SIMD 0 of a one-workgroup grid: {simd0:?}"
    );
    assert!(
        one.method_detail.contains("1 workgroup of XCD 0"),
        "{}",
        one.method_detail
    );
}

/// A GEMM-shaped kernel: per iteration each workgroup loads a 4 KB tile of A (row block
/// `wg_y`) and of B (column block `wg_x`), stages them through LDS between barriers and
/// runs 8 scaled FP4 MFMAs per wave. Kernargs: A, B pointers; `iters` is immediate.
fn mini_gemm(iters: u32) -> String {
    let mut s = format!(
        "\ts_load_dwordx4 s[4:7], s[0:1], 0x0\n\tv_lshlrev_b32 v1, 4, v0\n\ts_mov_b32 s8, {iters}\n\ts_waitcnt lgkmcnt(0)\n\
         \ts_mul_i32 s9, s3, s8\n\ts_lshl_b32 s9, s9, 12\n\ts_mul_i32 s10, s2, s8\n\ts_lshl_b32 s10, s10, 12\n\
         \ts_add_u32 s4, s4, s9\n\ts_addc_u32 s5, s5, 0\n\ts_add_u32 s6, s6, s10\n\ts_addc_u32 s7, s7, 0\n.Lloop:\n\
         \tglobal_load_dwordx4 v[64:67], v1, s[4:5]\n\tglobal_load_dwordx4 v[68:71], v1, s[6:7]\n\
         \ts_add_u32 s4, s4, 0x1000\n\ts_addc_u32 s5, s5, 0\n\ts_add_u32 s6, s6, 0x1000\n\ts_addc_u32 s7, s7, 0\n\
         \ts_waitcnt vmcnt(0)\n\tds_write_b128 v1, v[64:67]\n\tds_write_b128 v1, v[68:71] offset:4096\n\
         \ts_waitcnt lgkmcnt(0)\n\ts_barrier\n\tds_read_b128 v[80:83], v1\n\tds_read_b128 v[84:87], v1 offset:4096\n\
         \ts_waitcnt lgkmcnt(0)\n"
    );
    for i in 0..8 {
        s += &format!(
            "\tv_mfma_scale_f32_16x16x128_f8f6f4 v[{}:{}], v[80:83], v[84:87], v[{}:{}], v96, v97 cbsz:4 blgp:4\n",
            4 * i,
            4 * i + 3,
            4 * i,
            4 * i + 3
        );
    }
    s += "\ts_barrier\n\ts_sub_u32 s8, s8, 1\n\ts_cmp_lg_u32 s8, 0\n\ts_cbranch_scc1 .Lloop\n";
    s
}

fn gemm_launch(
    name: &str,
    grid: [u32; 2],
    iters: u32,
    dynamic_lds: u32,
    opts: &TimingOptions,
) -> (Prediction, f64) {
    let (mut m, p) = kernel(name, &mini_gemm(iters), 8192);
    let a = m.alloc_lazy(grid[1] as u64 * iters as u64 * 4096).unwrap();
    let b = m.alloc_lazy(grid[0] as u64 * iters as u64 * 4096).unwrap();
    let mut karg = a.to_le_bytes().to_vec();
    karg.extend(b.to_le_bytes());
    let (cpu, wall) = (cpu_seconds(), Instant::now());
    let r = predict_with(
        &mut m,
        &p,
        [grid[0], grid[1], 1],
        [256, 1, 1],
        &karg,
        dynamic_lds,
        opts,
    );
    let cpu = cpu_seconds().map(|c| c - cpu.unwrap_or(0.0));
    eprintln!(
        "  predict: {cpu:.2?} s CPU, {:.2} s wall",
        wall.elapsed().as_secs_f64()
    );
    (r, cpu.unwrap_or_else(|| wall.elapsed().as_secs_f64()))
}

/// CPU time of the calling thread (Linux `/proc/thread-self/stat`, 10 ms ticks), so the
/// budget test measures the model rather than the load of a shared machine.
fn cpu_seconds() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/thread-self/stat").ok()?;
    // After the parenthesised command come state (field 3) ... utime (14), stime (15).
    let f: Vec<&str> = s[s.rfind(')')? + 2..].split_whitespace().collect();
    let ticks = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some(ticks as f64 / 100.0)
}

#[test]
fn sampled_rounds_stay_close_to_a_full_simulation() {
    // 72 KB of dynamic LDS: 2 workgroups per CU (64 per XCD), so 1024 workgroups take 2 full
    // rounds per XCD and 1,280 workgroups 3 rounds, the last one partial (32 of 64).
    for (grid, iters) in [([32u32, 32u32], 12u32), ([40, 32], 12), ([16, 16], 24)] {
        let full_opts = TimingOptions {
            method: Method::Full,
            ..TimingOptions::default()
        };
        let (full, tf) = gemm_launch("gemm_full", grid, iters, 73728, &full_opts);
        let (sampled, ts) = gemm_launch(
            "gemm_sampled",
            grid,
            iters,
            73728,
            &TimingOptions::default(),
        );
        let (ignoring, _) = gemm_launch(
            "gemm_ignoring",
            grid,
            iters,
            73728,
            &TimingOptions {
                cross_xcd: CrossXcd::Ignore,
                ..TimingOptions::default()
            },
        );
        eprintln!(
            "  without the census: {:.2} us ({:+.1}%), HBM {:.0} GB/s; with it {:.0} GB/s (own share {:?}); full {:.0} GB/s",
            ignoring.us,
            100.0 * (ignoring.us / full.us - 1.0),
            ignoring.hbm_gbs,
            sampled.hbm_gbs,
            sampled.hbm_own_share,
            full.hbm_gbs
        );
        let err = sampled.us / full.us - 1.0;
        eprintln!(
            "grid {grid:?} x {iters}: full {:.2} us ({tf:.2} s CPU, {} wgs), sampled {:.2} us ({ts:.2} s CPU, {} wgs, {} rounds): error {:+.1}%\n  {}",
            full.us,
            full.workgroups_simulated,
            sampled.us,
            sampled.workgroups_simulated,
            sampled.rounds,
            100.0 * err,
            sampled.method_detail
        );
        assert_eq!(full.workgroups_simulated, (grid[0] * grid[1]) as u64);
        assert!(err.abs() < 0.15, "sampling error {:+.1}%", 100.0 * err);
        // Every XCD loads the A rows of XCD 0's workgroups: the census finds that the MALL
        // serves most of them, as the full simulation's one MALL does. (Later rounds
        // re-read B from the MALL in the full simulation, which the sample still counts as
        // HBM traffic: only the one-round grid matches closely.)
        let off = |p: &Prediction| (p.hbm_gbs / full.hbm_gbs - 1.0).abs();
        assert!(
            off(&sampled) < off(&ignoring) / 2.0,
            "HBM: full {:.0}, census {:.0}, none {:.0} GB/s",
            full.hbm_gbs,
            sampled.hbm_gbs,
            ignoring.hbm_gbs
        );
        if sampled.rounds == 1 {
            assert!(
                off(&sampled) < 0.25,
                "HBM {:.0} vs {:.0} GB/s",
                sampled.hbm_gbs,
                full.hbm_gbs
            );
        }
        assert!(sampled.hbm_own_share.is_some_and(|s| s < 0.5));
        assert_eq!(ignoring.hbm_own_share, None);
    }
}

/// A full-size launch is sampled, not simulated whole. Its CPU time is printed, not asserted:
/// the machines tests run on are shared, so the cost against its 2 s budget is reported by
/// `aiter-calibrate` (every row's CPU seconds, and the rows over the budget).
#[test]
fn a_full_size_gemm_launch_is_sampled() {
    // M x N = 32768 x 8192 in 256 x 256 tiles, K = 28672 in 112 steps of 256.
    let (r, secs) = gemm_launch("gemm_big", [32, 128], 112, 0, &TimingOptions::default());
    eprintln!(
        "32768x8192x28672-shaped launch: {:.1} us predicted, {} of {} workgroups simulated, {secs:.2} s of CPU; {}; bound {:?}, mfma busy {:.2}, HBM {:.0} GB/s",
        r.us,
        r.workgroups_simulated,
        r.workgroups_total,
        r.method_detail,
        r.bound,
        r.mfma_busy,
        r.hbm_gbs
    );
    assert_eq!(r.workgroups_total, 4096);
    assert!(
        r.workgroups_simulated < r.workgroups_total / 8,
        "{}",
        r.method_detail
    );
    let json = serde_json::to_string(&r).unwrap();
    assert!(
        json.contains("\"bound\"") && json.contains("\"stalls\""),
        "{json}"
    );
}

#[test]
fn a_trace_shows_waves_stalls_and_barriers() {
    let (mut m, p) = kernel("traced", &mini_gemm(4), 8192);
    let a = m.alloc_lazy(4 * 4096).unwrap();
    let b = m.alloc_lazy(4 * 4096).unwrap();
    let mut karg = a.to_le_bytes().to_vec();
    karg.extend(b.to_le_bytes());
    let opts = TimingOptions {
        trace: Some(TraceOptions { cycles: 20_000 }),
        ..TimingOptions::default()
    };
    let r = predict_with(&mut m, &p, [1, 1, 1], [256, 1, 1], &karg, 0, &opts);
    let trace = r.trace.as_ref().expect("a trace");
    let mut out = Vec::new();
    timing::write_trace(trace, &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    for part in [
        "\"traceEvents\"",
        "v_mfma_scale_f32_16x16x128_f8f6f4",
        "stall: waitcnt vmcnt",
        "stall: barrier",
        "barrier release",
        "\"ph\":\"X\"",
        "matrix core 0",
    ] {
        assert!(text.contains(part), "trace lacks {part}");
    }
}

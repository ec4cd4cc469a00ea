//! Human-readable reports shared by commands.

use tilegen::kernels::CompiledKernel;
use tilegen::kernels::asm::LoopStats;

pub fn print_report(k: &CompiledKernel) {
    let r = &k.report();
    let lp = LoopStats::from_asm(k.asm());
    println!("kernel {}", k.name());
    println!("  cache key {}", k.cache_key());
    println!(
        "  registers: {} VGPR, {} AGPR, {} SGPR; spills: {} VGPR, {} SGPR; scratch {} B",
        r.vgpr_count,
        r.agpr_count,
        r.sgpr_count,
        r.vgpr_spill_count,
        r.sgpr_spill_count,
        r.private_bytes
    );
    println!(
        "  LDS {} B, {} work-items, occupancy {} waves/SIMD, {} B of code, kernargs {} B",
        r.lds_bytes, r.workgroup_size, r.occupancy, r.code_bytes, r.kernarg_bytes
    );
    // Built without a listing (`tilegen build` without --asm, a pack's kernel): no loop stats.
    if !k.asm().is_empty() {
        println!(
            "  main loop: {} instructions, {} MFMAs{}",
            lp.instructions,
            lp.mfmas,
            if lp.found_loop {
                ""
            } else {
                " (no loop: whole kernel)"
            }
        );
    }
    for d in k.diagnostics() {
        println!("  LLVM {d}");
    }
    let t = &k.timings();
    println!(
        "  compiled in {:.1} ms (verify {:.1}, O3 {:.1}, codegen {:.1}, link {:.2})",
        t.total().as_secs_f64() * 1e3,
        t.verify.as_secs_f64() * 1e3,
        t.optimize.as_secs_f64() * 1e3,
        t.codegen.as_secs_f64() * 1e3,
        t.link.as_secs_f64() * 1e3
    );
}

//! Grids whose workgroups do unequal work, assembled with llvm-mc-22 and linked with
//! ld.lld-22: the sampled method ([`Method::Rounds`], which classes the workgroups by a
//! functional survey) against a full simulation ([`Method::Full`]) and against the sampled
//! method that assumes every round does the first round's work (`classes: false`,
//! `warm_rounds: false`); and a uniform grid,
//! whose prediction the survey leaves byte for byte as it was.

use std::time::Instant;

use tilegen_codeobj::CodeObject;
use tilegen_emu::exec::{DeviceMemory, Program};
use tilegen_testkit::llvm::{kernel_object, scratch};
use tilegen_timing::{self as timing, Method, Params, Prediction, TimingLaunch, TimingOptions};

/// Assembles `body` as kernel `name` (kernarg pointer in s[0:1], workgroup ids x, y in s2,
/// s3; 128 VGPRs, so 4 workgroups of 4 waves per CU) and loads it.
fn kernel(name: &str, body: &str) -> (DeviceMemory, Program) {
    let bytes = kernel_object(&scratch(&format!("classes-{name}")), name, body, 0);
    let co = CodeObject::parse(&bytes).expect("parse code object");
    let mut mem = DeviceMemory::new();
    let prog = Program::load(&mut mem, &co, name).expect("load kernel");
    (mem, prog)
}

/// The loop of a working workgroup, `s8` times: two 4 KB loads from s[4:5] (advancing 8 KB a
/// step), waited for, then a chain of 16 FMAs per wave on what they brought.
fn work_loop() -> String {
    let mut s = String::from(
        ".Lloop:\n\tglobal_load_dwordx4 v[4:7], v1, s[4:5]\n\tglobal_load_dwordx4 v[8:11], v1, s[4:5] offset:4095\n\
         \ts_add_u32 s4, s4, 0x2000\n\ts_addc_u32 s5, s5, 0\n\ts_waitcnt vmcnt(0)\n",
    );
    for i in 0..16 {
        s += &format!(
            "\tv_fma_f32 v{}, v{}, v{}, v{}\n",
            16 + i % 8,
            4 + i % 8,
            8 + i % 4,
            16 + i % 8
        );
    }
    s += "\ts_sub_u32 s8, s8, 1\n\ts_cmp_lg_u32 s8, 0\n\ts_cbranch_scc1 .Lloop\n";
    s
}

/// The prologue every kernel starts with: s[4:5] the buffer, s6, s7 the second argument,
/// v1 the work-item's 16-byte offset.
const PROLOGUE: &str =
    "\ts_load_dwordx4 s[4:7], s[0:1], 0x0\n\tv_lshlrev_b32 v1, 4, v0\n\ts_waitcnt lgkmcnt(0)\n";

/// Workgroups with x >= the second argument end at once; the others run `iters` steps over
/// their own 8 KB-a-step region.
fn early_exit(iters: u32) -> String {
    format!(
        "{PROLOGUE}\ts_cmp_ge_u32 s2, s6\n\ts_cbranch_scc1 .Ldone\n\ts_mov_b32 s8, {iters}\n\
         \ts_mul_i32 s9, s2, {}\n\ts_add_u32 s4, s4, s9\n\ts_addc_u32 s5, s5, 0\n{}.Ldone:\n",
        iters * 8192,
        work_loop()
    )
}

/// Workgroups of rows y < `rows` run `heavy` steps, the others `light`, over the region of
/// their column x.
fn skewed(rows: u32, heavy: u32, light: u32) -> String {
    format!(
        "{PROLOGUE}\ts_mov_b32 s8, {light}\n\ts_cmp_lt_u32 s3, {rows}\n\ts_cselect_b32 s8, {heavy}, s8\n\
         \ts_mul_i32 s9, s2, {}\n\ts_add_u32 s4, s4, s9\n\ts_addc_u32 s5, s5, 0\n{}",
        heavy * 8192,
        work_loop()
    )
}

/// Routed tokens: the second argument points at a count of valid rows; block row y holds
/// rows 32y.. and ends at once when they are past the count; the others run `iters` steps
/// over A rows of their block (y) and B columns of their tile (x), 4 KB each a step.
fn routed(iters: u32) -> String {
    format!(
        "{PROLOGUE}\ts_load_dword s10, s[6:7], 0x0\n\ts_waitcnt lgkmcnt(0)\n\ts_lshl_b32 s11, s3, 5\n\
         \ts_cmp_ge_u32 s11, s10\n\ts_cbranch_scc1 .Ldone\n\ts_mov_b32 s8, {iters}\n\
         \ts_mul_i32 s9, s2, {}\n\ts_add_u32 s4, s4, s9\n\ts_addc_u32 s5, s5, 0\n{}.Ldone:\n",
        iters * 8192,
        work_loop()
    )
}

/// CPU time of the calling thread (Linux `/proc/thread-self/stat`, 10 ms ticks).
fn cpu_seconds() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/thread-self/stat").ok()?;
    let f: Vec<&str> = s[s.rfind(')')? + 2..].split_whitespace().collect();
    let ticks = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some(ticks as f64 / 100.0)
}

/// The three predictions of one launch: full, sampled by classes, sampled as uniform rounds.
struct Three {
    full: Prediction,
    classed: Prediction,
    uniform: Prediction,
    /// CPU seconds of the classed prediction.
    cpu: f64,
}

impl Three {
    /// Kernel `name` of `body` with a lazy buffer of `buffer` bytes and `second` as its
    /// arguments.
    fn of(name: &str, body: &str, grid: [u32; 2], buffer: u64, second: u64) -> Three {
        let (mut m, prog) = kernel(name, body);
        let a = m.alloc_lazy(buffer).expect("buffer");
        let mut karg = a.to_le_bytes().to_vec();
        karg.extend(second.to_le_bytes());
        Three::run(&mut m, &prog, name, grid, &karg)
    }

    fn run(m: &mut DeviceMemory, prog: &Program, name: &str, grid: [u32; 2], karg: &[u8]) -> Three {
        let mut run = |opts: &TimingOptions| {
            let launch = TimingLaunch {
                grid: [grid[0], grid[1], 1],
                block: [256, 1, 1],
                dynamic_lds: 0,
                kernarg: karg,
            };
            let (cpu, wall) = (cpu_seconds(), Instant::now());
            let p = timing::predict(m, prog, &launch, &Params::mi355x(), opts).expect("predict");
            let secs = match (cpu, cpu_seconds()) {
                (Some(a), Some(b)) => b - a,
                _ => wall.elapsed().as_secs_f64(),
            };
            (p, secs)
        };
        let (full, _) = run(&TimingOptions {
            method: Method::Full,
            ..TimingOptions::default()
        });
        let (classed, cpu) = run(&TimingOptions::default());
        let (uniform, _) = run(&TimingOptions {
            classes: false,
            warm_rounds: false,
            ..TimingOptions::default()
        });
        let t = Three {
            full,
            classed,
            uniform,
            cpu,
        };
        eprintln!(
            "{name} grid {grid:?}: full {:.2} us; classed {:.2} us ({:+.1}%, {:.2} s CPU); uniform rounds {:.2} us ({:+.1}%)\n  {}",
            t.full.us,
            t.classed.us,
            100.0 * t.error(&t.classed),
            t.cpu,
            t.uniform.us,
            100.0 * t.error(&t.uniform),
            t.classed.method_detail
        );
        t
    }

    fn error(&self, p: &Prediction) -> f64 {
        p.us / self.full.us - 1.0
    }
}

/// Within this of the full simulation.
const TOLERANCE: f64 = 0.15;

#[test]
fn early_exits_past_a_bound_are_classed_apart() {
    // 4096 workgroups, 4 rounds per XCD; the first 1000 work, the rest end at once.
    let t = Three::of("early", &early_exit(16), [4096, 1], 4096 * 16 * 8192, 1000);
    assert!(
        t.classed.method_detail.contains("2 classes"),
        "{}",
        t.classed.method_detail
    );
    assert!(t.error(&t.classed).abs() < TOLERANCE);
    assert!(t.error(&t.uniform) > 2.0 * TOLERANCE);
}

/// [`early_exit`] whose working workgroups all read the same `iters` steps: the first round
/// brings them from HBM, later rounds find them in L2.
fn early_exit_shared(iters: u32) -> String {
    format!(
        "{PROLOGUE}\ts_cmp_ge_u32 s2, s6\n\ts_cbranch_scc1 .Ldone\n\ts_mov_b32 s8, {iters}\n{}.Ldone:\n",
        work_loop()
    )
}

#[test]
fn early_exits_after_rounds_of_work_take_the_warm_rounds() {
    // 8192 workgroups, 16 rounds per XCD; the first 4000 work (about 4 rounds of each XCD's
    // slots) on the same 128 KB, the rest end at once. The working class's first round
    // brings the data from HBM, its later rounds find it in L2: timed from its first round
    // alone, every round took the cold one's time (+113% against the full simulation).
    let t = Three::of(
        "early_warm",
        &early_exit_shared(16),
        [8192, 1],
        16 * 8192,
        4000,
    );
    assert!(
        t.classed.method_detail.contains("2 classes"),
        "{}",
        t.classed.method_detail
    );
    assert!(t.error(&t.classed).abs() < TOLERANCE);
}

#[test]
fn a_persistent_skew_is_list_scheduled() {
    // 64 x 64 workgroups; the first two rows run 8 times as many steps.
    let t = Three::of("skewed", &skewed(2, 32, 4), [64, 64], 64 * 32 * 8192, 0);
    assert!(
        t.classed.method_detail.contains("2 classes"),
        "{}",
        t.classed.method_detail
    );
    assert!(t.error(&t.classed).abs() < TOLERANCE);
    assert!(t.error(&t.uniform) > 2.0 * TOLERANCE);
}

#[test]
fn all_tokens_on_one_block_row() {
    // 16 tiles x 256 blocks of 32 rows; the count (32) leaves one row of 16 workgroups.
    let (mut m, prog) = kernel("routed", &routed(64));
    let a = m.alloc_lazy(16 * 64 * 8192).expect("buffer");
    let count = m.alloc(4).expect("count");
    m.write(count, &32u32.to_le_bytes()).expect("write count");
    let mut karg = a.to_le_bytes().to_vec();
    karg.extend(count.to_le_bytes());
    let t = Three::run(&mut m, &prog, "routed", [16, 256], &karg);
    assert!(t.error(&t.classed).abs() < TOLERANCE);
    assert!(t.error(&t.uniform) > 2.0 * TOLERANCE);
}

/// A prediction with and without the survey, and the CPU seconds of each.
fn with_and_without(name: &str, grid: u32, iters: u32) -> ((Prediction, f64), (Prediction, f64)) {
    let (mut m, prog) = kernel(name, &early_exit(iters));
    let a = m
        .alloc_lazy(grid as u64 * iters as u64 * 8192)
        .expect("buffer");
    let mut karg = a.to_le_bytes().to_vec();
    karg.extend(u64::from(grid).to_le_bytes());
    let mut run = |classes: bool| {
        let launch = TimingLaunch {
            grid: [grid, 1, 1],
            block: [256, 1, 1],
            dynamic_lds: 0,
            kernarg: &karg,
        };
        let opts = TimingOptions {
            classes,
            ..TimingOptions::default()
        };
        let (cpu, wall) = (cpu_seconds(), Instant::now());
        let p = timing::predict(&mut m, &prog, &launch, &Params::mi355x(), &opts).expect("predict");
        let secs = match (cpu, cpu_seconds()) {
            (Some(a), Some(b)) => b - a,
            _ => wall.elapsed().as_secs_f64(),
        };
        (p, secs)
    };
    (run(true), run(false))
}

#[test]
fn a_uniform_grid_is_one_class_and_predicted_as_before() {
    // Every workgroup works (the bound is the grid): a small grid the survey runs to the end,
    // and a large one (4096 workgroups of 112 steps, past the survey's budget) it cuts short.
    for (name, grid, iters) in [("uniform_small", 1024, 16), ("uniform_large", 4096, 112)] {
        let ((with, cpu_with), (without, cpu_without)) = with_and_without(name, grid, iters);
        eprintln!(
            "{name}: {:.2} us; {cpu_with:.2} s CPU with the survey, {cpu_without:.2} s without\n  {}",
            with.us, with.method_detail
        );
        assert_eq!(
            serde_json::to_string(&with).expect("json"),
            serde_json::to_string(&without).expect("json")
        );
    }
}

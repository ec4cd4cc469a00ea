//! The foreign kernel zoo: assorted kernels Triton (a compiler independent of this project)
//! built for gfx950 (reductions, scans, a sort, atomics, integer/f16/bf16/f64/transcendental
//! math, FP8 conversions, a 3-D grid, GEMMs in bf16, f16, f32, int8, FP8 and MX formats) run on
//! the emulator through the runtime, and every output must match zoo.py's pure-Python reference
//! within the case's tolerance. See `scripts/triton/zoo.py` for the cases and why each
//! tolerance is what it is.

use std::collections::BTreeSet;
use std::time::Instant;

use tilegen::runtime::{ArgValue, Device, DevicePtr, EmuDevice, LaunchConfig, launch};
use tilegen_testkit::{ZooArg, ZooCase, ZooDtype, ZooOut};

/// Mismatching elements listed per output.
const SHOWN: usize = 5;

/// Instructions the zoo exists to check, beyond the MXFP4 GEMMs of `foreign_triton.rs`: if a
/// change to zoo.py (or to Triton) stops them from running, the test says so.
const MUST_EXECUTE: &[&str] = &[
    // Every MFMA input type and shape Triton picks on gfx950.
    "v_mfma_f32_32x32x16_bf16",
    "v_mfma_f32_16x16x32_bf16",
    "v_mfma_f32_32x32x16_f16",
    "v_mfma_f32_16x16x32_f16",
    "v_mfma_f32_32x32x64_f8f6f4",
    "v_mfma_f32_16x16x128_f8f6f4",
    "v_mfma_i32_32x32x32_i8",
    "v_mfma_i32_16x16x64_i8",
    "v_mfma_f32_32x32x2_f32",
    "v_mfma_scale_f32_32x32x64_f8f6f4",
    "v_mfma_scale_f32_16x16x128_f8f6f4",
    // Transposing LDS reads, direct-to-LDS loads, LDS atomics.
    "ds_read_b64_tr_b4",
    "ds_read_b64_tr_b8",
    "ds_read_b64_tr_b16",
    "global_load_lds_dwordx4",
    "ds_add_u32",
    // Global atomics.
    "global_atomic_add_f32",
    "global_atomic_pk_add_bf16",
    "global_atomic_cmpswap",
    "buffer_atomic_add_f64",
    // Cross-lane.
    "v_mov_b32_dpp",
    "v_permlane32_swap_b32_e32",
    "ds_bpermute_b32",
    // Conversions and math.
    "v_cvt_scalef32_pk_fp8_f32",
    "v_cvt_scalef32_pk_bf8_f32",
    "v_cvt_scalef32_pk_bf16_fp4",
    "v_cvt_pk_bf16_f32",
    "v_pk_mul_f16",
    "v_exp_f32_e32",
    "v_log_f32_e32",
    "v_div_scale_f64",
    "v_rsq_f64_e32",
    "v_mad_u64_u32",
    "v_bcnt_u32_b32",
];

#[test]
fn zoo_kernels_match_their_references() {
    let Some(cases) = tilegen_testkit::zoo_cases() else {
        return;
    };
    let dev = EmuDevice::new();
    let mut problems = Vec::new();
    let mut executed = BTreeSet::new();
    for case in &cases {
        let start = Instant::now();
        let outcome = run_case(&dev, case, &mut executed);
        if outcome.as_ref().is_err_and(|e| e.starts_with("launch:")) {
            // No statistics from a faulting launch: count what its listing holds instead, so a
            // known fault does not read as lost coverage.
            executed.extend(listed_mnemonics(case));
        }
        let verdict = match (&outcome, &case.known_failure) {
            (Ok(()), None) => "ok".to_string(),
            (Err(e), None) => {
                problems.push(format!("{}: {e}", case.name));
                "FAILED".to_string()
            }
            (Err(e), Some(known)) if e.contains(known.as_str()) => {
                "known failure (emulator bug), unchanged".to_string()
            }
            (Err(e), Some(known)) => {
                problems.push(format!(
                    "{}: fails differently from its known failure {known:?}: {e}",
                    case.name
                ));
                "FAILED differently".to_string()
            }
            (Ok(()), Some(known)) => {
                problems.push(format!(
                    "{}: passes although marked as a known failure ({known:?}): the emulator \
                     was fixed, so drop the case from KNOWN_FAILURES in scripts/triton/zoo.py",
                    case.name
                ));
                "passes, but marked as a known failure".to_string()
            }
        };
        eprintln!("{:<20} {:>7.1?}  {verdict}", case.name, start.elapsed());
    }
    eprintln!("{} distinct instructions executed", executed.len());
    let missing: Vec<_> = MUST_EXECUTE
        .iter()
        .filter(|m| !executed.contains(**m))
        .collect();
    if !missing.is_empty() {
        problems.push(format!(
            "the zoo no longer executes {missing:?}: its coverage shrank"
        ));
    }
    assert!(
        problems.is_empty(),
        "{} of {} zoo cases went wrong:\n\n{}",
        problems.len(),
        cases.len(),
        problems.join("\n\n")
    );
}

/// Runs one case; the error describes the fault or every mismatching output.
/// Adds the mnemonics the emulator executed to `executed`.
fn run_case(
    dev: &EmuDevice,
    case: &ZooCase,
    executed: &mut BTreeSet<String>,
) -> Result<(), String> {
    let code = std::fs::read(&case.hsaco).map_err(|e| format!("{}: {e}", case.hsaco.display()))?;
    let module = dev.load(&code).map_err(|e| format!("load: {e}"))?;
    let mut buffers: Vec<DevicePtr> = Vec::new();
    let result = (|| {
        let mut args = Vec::with_capacity(case.args.len());
        let mut outs: Vec<(usize, DevicePtr, &ZooOut)> = Vec::new();
        for (i, arg) in case.args.iter().enumerate() {
            args.push(match arg {
                ZooArg::In(file) => {
                    let bytes =
                        std::fs::read(file).map_err(|e| format!("{}: {e}", file.display()))?;
                    let p = alloc(dev, &mut buffers, bytes.len())?;
                    dev.copy_to_device(p, &bytes).map_err(|e| e.to_string())?;
                    ArgValue::Ptr(p)
                }
                ZooArg::Out(out) => {
                    let p = alloc(dev, &mut buffers, out.bytes)?;
                    outs.push((i, p, out));
                    ArgValue::Ptr(p)
                }
                ZooArg::I32(v) => ArgValue::I32(*v),
                ZooArg::I64(v) => ArgValue::I64(*v),
                ZooArg::F32(v) => ArgValue::F32(*v),
                ZooArg::Null => ArgValue::Null,
            });
        }
        let config = LaunchConfig {
            grid: case.grid,
            block: case.block,
            dynamic_lds: case.dynamic_lds,
        };
        let report = launch(dev, &module, &case.kernel, &config, &args)
            .map_err(|e| format!("launch: {e}"))?;
        if let Some(stats) = &report.stats {
            executed.extend(stats.by_opcode().map(|(op, _)| op.to_string()));
        }
        let mut mismatches = Vec::new();
        for (i, p, out) in outs {
            let mut got = vec![0u8; out.bytes];
            dev.copy_from_device(p, &mut got)
                .map_err(|e| e.to_string())?;
            let want = std::fs::read(&out.expected)
                .map_err(|e| format!("{}: {e}", out.expected.display()))?;
            if let Some(m) = compare(&got, &want, out) {
                let file = out
                    .expected
                    .file_name()
                    .unwrap_or_default()
                    .to_string_lossy();
                mismatches.push(format!("argument {i} ({file}): {m}"));
            }
        }
        if mismatches.is_empty() {
            Ok(())
        } else {
            Err(mismatches.join("\n  "))
        }
    })();
    for p in buffers {
        dev.free(p).map_err(|e| e.to_string())?;
    }
    result
}

/// The instruction mnemonics in a case's `kernel.s`.
fn listed_mnemonics(case: &ZooCase) -> BTreeSet<String> {
    let asm = std::fs::read_to_string(&case.asm).unwrap_or_default();
    asm.lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|w| {
            ["v_", "s_", "ds_", "global_", "buffer_"]
                .iter()
                .any(|p| w.starts_with(p))
        })
        .map(str::to_string)
        .collect()
}

fn alloc(dev: &EmuDevice, buffers: &mut Vec<DevicePtr>, bytes: usize) -> Result<DevicePtr, String> {
    let p = dev.alloc(bytes.max(1) as u64).map_err(|e| e.to_string())?;
    buffers.push(p);
    Ok(p)
}

/// One decoded element: its value (exactly, for integers up to 64 bits) and raw bits.
#[derive(Clone, Copy)]
struct Elem {
    value: f64,
    int: i128,
    bits: u64,
}

fn decode(dtype: ZooDtype, b: &[u8]) -> Elem {
    let raw = b.iter().rev().fold(0u64, |acc, &x| acc << 8 | x as u64);
    let (value, int) = match dtype {
        ZooDtype::F32 => (f32::from_bits(raw as u32) as f64, 0),
        ZooDtype::F64 => (f64::from_bits(raw), 0),
        ZooDtype::F16 => (half::f16::from_bits(raw as u16).to_f64(), 0),
        ZooDtype::Bf16 => (half::bf16::from_bits(raw as u16).to_f64(), 0),
        ZooDtype::I8 => int(raw as u8 as i8 as i128),
        ZooDtype::I16 => int(raw as u16 as i16 as i128),
        ZooDtype::I32 => int(raw as u32 as i32 as i128),
        ZooDtype::I64 => int(raw as i64 as i128),
        ZooDtype::U8 | ZooDtype::U16 | ZooDtype::U32 | ZooDtype::U64 => int(raw as i128),
    };
    Elem {
        value,
        int,
        bits: raw,
    }
}

fn int(v: i128) -> (f64, i128) {
    (v as f64, v)
}

fn matches(g: Elem, w: Elem, out: &ZooOut) -> bool {
    if !out.dtype.is_float() {
        return g.int == w.int
            || (!out.exact()
                && ((g.int - w.int).abs() as f64) <= out.atol + out.rtol * w.value.abs());
    }
    if g.value.is_nan() || w.value.is_nan() {
        return g.value.is_nan() && w.value.is_nan();
    }
    if out.exact() {
        return g.bits == w.bits;
    }
    if g.value.is_infinite() || w.value.is_infinite() {
        return g.value == w.value;
    }
    (g.value - w.value).abs() <= out.atol + out.rtol * w.value.abs()
}

/// `None` when every element matches, else a summary: counts and the first mismatches.
fn compare(got: &[u8], want: &[u8], out: &ZooOut) -> Option<String> {
    if want.len() != out.bytes {
        return Some(format!(
            "expected file holds {} bytes, case.json says {}",
            want.len(),
            out.bytes
        ));
    }
    let size = out.dtype.size();
    let mut bad = Vec::new();
    let mut count = 0;
    let mut worst = 0f64;
    for (i, (g, w)) in got
        .chunks_exact(size)
        .zip(want.chunks_exact(size))
        .enumerate()
    {
        let (g, w) = (decode(out.dtype, g), decode(out.dtype, w));
        if matches(g, w, out) {
            continue;
        }
        count += 1;
        worst = worst.max((g.value - w.value).abs());
        if bad.len() < SHOWN {
            bad.push(if out.dtype.is_float() {
                format!(
                    "[{i}] got {:e} ({:#x}) want {:e} ({:#x})",
                    g.value, g.bits, w.value, w.bits
                )
            } else {
                format!("[{i}] got {} want {}", g.int, w.int)
            });
        }
    }
    (count > 0).then(|| {
        format!(
            "{count} of {} {:?} elements differ (rtol {:e}, atol {:e}, worst |error| {worst:e}); \
             first: {}",
            want.len() / size,
            out.dtype,
            out.rtol,
            out.atol,
            bad.join(", ")
        )
    })
}

//! `tilegen emu run` / `tilegen emu disasm`: any gfx950 code object on the emulator.
//!
//! `emu run` works within the emulator's limits (device memory, workgroups and work-items per
//! launch, instructions per wave; `--max-memory`, `--max-workgroups`, `--max-work-items`,
//! `--instruction-budget` raise them): everything that can be refused is refused before the
//! emulation starts, output files included. A long emulation shows its progress on a
//! terminal and stops cleanly on Ctrl-C.

use std::io::Write;
use std::path::PathBuf;
use std::str::FromStr;

use anyhow::{Context, Result, anyhow, bail};
use clap::{Args, Subcommand};
use tilegen::codeobj::{CodeObject, Kernel};
use tilegen::emu::exec::limits::{
    DEFAULT_MAX_WORK_ITEMS, DEFAULT_MAX_WORKGROUPS, DEFAULT_WAVE_INSTRUCTION_BUDGET,
    default_max_memory,
};
use tilegen::runtime::{ArgValue, Device, DeviceChoice, DevicePtr, LaunchConfig, Limits, launch};
use tilegen_output::Output;

use crate::session::{Session, limit_text};

#[derive(Subcommand)]
pub enum EmuCommand {
    /// Run a kernel of a code object on the emulator.
    Run(RunArgs),
    /// Disassemble a code object (the syntax of llvm-objdump-22 --mcpu=gfx950).
    Disasm(DisasmArgs),
    /// Predict how long a kernel launch takes on an MI355X (the cycle-level timing model,
    /// running the kernel's real code).
    Time(TimeArgs),
}

/// The launch `emu run` and `emu time` take: a kernel of a code object, its grid, block and
/// arguments.
#[derive(Args)]
pub struct LaunchArgs {
    /// The code object (.hsaco).
    code_object: PathBuf,
    /// Kernel name (optional when the code object has one kernel).
    #[arg(long)]
    kernel: Option<String>,
    /// Workgroups per dimension, as HIP's gridDim: X[,Y[,Z]].
    #[arg(long, value_parser = parse_dim3)]
    grid: [u32; 3],
    /// Work-items per workgroup: X[,Y[,Z]].
    #[arg(long, value_parser = parse_dim3)]
    block: [u32; 3],
    /// LDS bytes on top of the kernel's static LDS.
    #[arg(long, default_value_t = 0)]
    dynamic_lds: u32,
    /// Explicit arguments in the metadata's order: in:FILE, out:FILE:BYTES, inout:FILE,
    /// zero:BYTES (a zeroed buffer; the timing model takes no host memory for it until it is
    /// written), i32:N, i64:N, f32:X, null. `emu time` writes no outputs: the model runs only a
    /// sample of the workgroups.
    #[arg(long = "arg", value_parser = Arg::from_str)]
    args: Vec<Arg>,
}

impl LaunchArgs {
    fn config(&self) -> LaunchConfig {
        LaunchConfig {
            grid: self.grid,
            block: self.block,
            dynamic_lds: self.dynamic_lds,
        }
    }
}

#[derive(Args)]
pub struct TimeArgs {
    #[command(flatten)]
    launch: LaunchArgs,
    #[command(flatten)]
    model: crate::timing::ModelArgs,
    /// Print the prediction as JSON (`us`, `mfma_busy`, `hbm_gbs`, `bound`, stalls, ...).
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct RunArgs {
    #[command(flatten)]
    launch: LaunchArgs,
    /// Print instructions executed by class and the run's wall time.
    #[arg(long)]
    stats: bool,
    /// Print the run summary as JSON.
    #[arg(long)]
    json: bool,
    /// Device memory limit: buffers, the code-object image and the scratch and registers of
    /// the waves in flight. Bytes, or with a suffix K, M, G or T (powers of 1024). Default:
    /// half of the memory available to the process (physical memory, cgroup limit or
    /// `ulimit -v`, whichever is smallest).
    #[arg(long, value_parser = parse_bytes, value_name = "BYTES")]
    max_memory: Option<u64>,
    /// Most workgroups one launch may have.
    #[arg(long, default_value_t = DEFAULT_MAX_WORKGROUPS, value_name = "N")]
    max_workgroups: u64,
    /// Most work-items one launch may have.
    #[arg(long, default_value_t = DEFAULT_MAX_WORK_ITEMS, value_name = "N")]
    max_work_items: u64,
    /// Instructions one wave may execute before it is stopped as an endless loop.
    #[arg(long, default_value_t = DEFAULT_WAVE_INSTRUCTION_BUDGET, value_name = "N")]
    instruction_budget: u64,
    /// Where the kernel runs: emu (the emulator, within the limits above), auto (a gfx950 GPU
    /// through the HSA runtime if there is one, else the emulator) or hsa[:N].
    #[arg(long, default_value = "emu", value_name = "auto|emu|hsa[:N]")]
    device: DeviceChoice,
    /// Also predict the launch's MI355X time with the timing model.
    #[arg(long)]
    timing: bool,
    #[command(flatten)]
    model: crate::timing::ModelArgs,
}

#[derive(Args)]
pub struct DisasmArgs {
    /// The code object (.hsaco).
    code_object: PathBuf,
    /// Only this kernel.
    #[arg(long)]
    kernel: Option<String>,
}

/// One `--arg`.
#[derive(Debug, Clone)]
pub enum Arg {
    In(PathBuf),
    Out(PathBuf, u64),
    InOut(PathBuf),
    I32(i32),
    I64(i64),
    F32(f32),
    Null,
    Zero(u64),
}

impl FromStr for Arg {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (kind, rest) = s.split_once(':').unwrap_or((s, ""));
        let num = |what: &str| format!("--arg {s}: {what}");
        Ok(match kind {
            "in" if !rest.is_empty() => Arg::In(rest.into()),
            "inout" if !rest.is_empty() => Arg::InOut(rest.into()),
            "out" => {
                let (file, bytes) = rest
                    .rsplit_once(':')
                    .ok_or_else(|| num("out takes FILE:BYTES"))?;
                Arg::Out(
                    file.into(),
                    bytes.parse().map_err(|_| num("BYTES must be an integer"))?,
                )
            }
            "i32" => Arg::I32(rest.parse().map_err(|_| num("not a 32-bit integer"))?),
            "i64" => Arg::I64(rest.parse().map_err(|_| num("not a 64-bit integer"))?),
            "f32" => Arg::F32(rest.parse().map_err(|_| num("not a float"))?),
            "null" if rest.is_empty() => Arg::Null,
            "zero" => match parse_bytes(rest)? {
                0 => return Err(num("a buffer needs at least one byte")),
                n => Arg::Zero(n),
            },
            _ => {
                return Err(num(
                    "expected in:FILE, out:FILE:BYTES, inout:FILE, zero:BYTES, i32:N, i64:N, f32:X or null",
                ));
            }
        })
    }
}

/// A byte count: digits with an optional K, M, G or T suffix (powers of 1024; `KiB`, `KB` and
/// lower case are accepted too).
fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(digits);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{s}: expected a byte count such as 8G, 512M or 1048576"))?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return Err(format!("{s}: unknown unit `{unit}` (use K, M, G or T)")),
    };
    n.checked_mul(1 << shift)
        .ok_or_else(|| format!("{s}: more than 2^64 bytes"))
}

fn parse_dim3(s: &str) -> Result<[u32; 3], String> {
    let parts: Vec<&str> = s.split(',').collect();
    if parts.is_empty() || parts.len() > 3 {
        return Err(format!("{s}: expected X[,Y[,Z]]"));
    }
    let mut d = [1u32; 3];
    for (i, p) in parts.iter().enumerate() {
        d[i] = p
            .trim()
            .parse()
            .map_err(|_| format!("{s}: `{p}` is not a non-negative integer"))?;
    }
    Ok(d)
}

pub fn run(cmd: EmuCommand) -> Result<()> {
    match cmd {
        EmuCommand::Run(a) => run_kernel(a),
        EmuCommand::Disasm(a) => disasm(a),
        EmuCommand::Time(a) => time(a),
    }
}

fn pick<'a>(co: &'a CodeObject, name: Option<&str>) -> Result<&'a Kernel> {
    let names = || {
        co.kernels
            .iter()
            .map(|k| k.name())
            .collect::<Vec<_>>()
            .join(", ")
    };
    match name {
        Some(n) => co
            .kernel(n)
            .ok_or_else(|| anyhow!("no kernel `{n}` in the code object (it has: {})", names())),
        None if co.kernels.len() == 1 => Ok(&co.kernels[0]),
        None => bail!(
            "the code object has {} kernels ({}): choose one with --kernel",
            co.kernels.len(),
            names()
        ),
    }
}

/// Checks that `bytes` of device memory for `what` fit under the limit before anything is
/// read or allocated.
fn check_fits(what: &str, bytes: u64, limit: u64) -> Result<()> {
    if bytes > limit {
        bail!(
            "{what} needs {bytes} bytes of device memory, over the limit of {limit} bytes; raise the limit with --max-memory BYTES"
        );
    }
    Ok(())
}

fn file_len(f: &PathBuf) -> Result<u64> {
    Ok(std::fs::metadata(f)
        .with_context(|| format!("reading {}", f.display()))?
        .len())
}

fn run_kernel(a: RunArgs) -> Result<()> {
    let limits = Limits {
        max_memory: a.max_memory.unwrap_or_else(default_max_memory),
        max_workgroups: a.max_workgroups,
        max_work_items: a.max_work_items,
        wave_instruction_budget: a.instruction_budget,
    };
    let l = &a.launch;
    // Refused before anything is read: a grid over the limits, buffers and inputs that cannot
    // fit in device memory, outputs that cannot be written.
    limits
        .check_grid(l.grid, l.block)
        .map_err(|e| anyhow!("{}", limit_text(&e)))?;
    let mut planned = file_len(&l.code_object)?;
    check_fits(
        &format!("the code object {}", l.code_object.display()),
        planned,
        limits.max_memory,
    )?;
    let mut checked_outputs = Vec::new();
    for arg in &l.args {
        let (what, bytes) = match arg {
            Arg::In(f) | Arg::InOut(f) => (format!("--arg {}", f.display()), file_len(f)?),
            Arg::Out(f, n) => (format!("--arg out:{}:{n}", f.display()), *n),
            Arg::Zero(n) => (format!("--arg zero:{n}"), *n),
            _ => continue,
        };
        check_fits(&what, bytes, limits.max_memory)?;
        planned = planned.saturating_add(bytes);
        check_fits(
            "the code object and the --arg buffers together",
            planned,
            limits.max_memory,
        )?;
        if let Arg::Out(f, _) | Arg::InOut(f) = arg {
            checked_outputs.push(Output::check(f)?);
        }
    }
    // The model's flags mean something only with --timing; its trace file is checked now.
    let trace_out = if a.timing {
        Some(a.model.check()?)
    } else {
        a.model.refuse_without("--timing")?;
        None
    };
    let bytes = std::fs::read(&l.code_object)
        .with_context(|| format!("reading {}", l.code_object.display()))?;
    let session = Session::open(a.device, limits, a.json)?;
    let dev = session.device();
    let module = dev
        .load(&bytes)
        .map_err(|e| session.error(e))
        .with_context(|| format!("loading {}", l.code_object.display()))?;
    drop(bytes);
    let kernel = pick(module.code_object(), l.kernel.as_deref())?
        .name()
        .to_string();
    let mut values = Vec::new();
    // Buffers to write back after the run: (device pointer, bytes, file).
    let mut outputs: Vec<(DevicePtr, u64, Output)> = Vec::new();
    let mut checked_outputs = checked_outputs.into_iter();
    for arg in &l.args {
        let value = match arg {
            Arg::In(f) | Arg::InOut(f) => {
                let data = std::fs::read(f).with_context(|| format!("reading {}", f.display()))?;
                let p = dev
                    .alloc(data.len().max(1) as u64)
                    .map_err(|e| session.error(e))?;
                dev.copy_to_device(p, &data)?;
                if let Arg::InOut(_) = arg
                    && let Some(out) = checked_outputs.next()
                {
                    outputs.push((p, data.len() as u64, out));
                }
                ArgValue::Ptr(p)
            }
            Arg::Out(_, n) => {
                let p = dev.alloc((*n).max(1)).map_err(|e| session.error(e))?;
                if let Some(out) = checked_outputs.next() {
                    outputs.push((p, *n, out));
                }
                ArgValue::Ptr(p)
            }
            Arg::Zero(n) => {
                let p = dev.alloc(*n).map_err(|e| session.error(e))?;
                // Devices need not hand out zeroed memory: clear it, a few MiB at a time.
                let chunk = vec![0u8; (*n).min(8 << 20) as usize];
                let mut at = 0u64;
                while at < *n {
                    let len = (*n - at).min(chunk.len() as u64);
                    dev.copy_to_device(DevicePtr(p.0 + at), &chunk[..len as usize])?;
                    at += len;
                }
                ArgValue::Ptr(p)
            }
            Arg::I32(v) => ArgValue::I32(*v),
            Arg::I64(v) => ArgValue::I64(*v),
            Arg::F32(v) => ArgValue::F32(*v),
            Arg::Null => ArgValue::Null,
        };
        values.push(value);
    }
    let config = l.config();
    tilegen_output::check_interrupted()?;
    let report = session
        .launch(|dev| launch(dev, &module, &kernel, &config, &values))
        .map_err(|e| session.error(e))
        .with_context(|| format!("running {kernel}"))?;
    for (p, n, out) in &outputs {
        write_back(dev, *p, *n, out)?;
    }
    let prediction = match trace_out {
        Some(trace_out) => Some(predict_args(l, &kernel, &a.model, trace_out)?),
        None => None,
    };
    let stats = report.stats.clone().unwrap_or_default();
    if a.json {
        let v = serde_json::json!({
            "kernel": kernel,
            "grid": l.grid,
            "block": l.block,
            "wall_seconds": report.wall.as_secs_f64(),
            "stats": report.stats,
            "outputs": outputs.iter().map(|(_, n, o)| serde_json::json!({"file": o.path(), "bytes": n})).collect::<Vec<_>>(),
            "timing": prediction,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!(
        "ran {kernel} on a {:?} grid of {:?} work-items",
        l.grid, l.block
    );
    for (_, n, o) in &outputs {
        println!("  wrote {} ({n} bytes)", o.path().display());
    }
    if a.stats {
        let total = stats.wave_instructions();
        let secs = report.wall.as_secs_f64();
        println!(
            "  {total} wave-instructions in {:.3} s ({:.1} M/s), {} MFMAs, {} workgroups, {} waves",
            secs,
            total as f64 / secs.max(1e-9) / 1e6,
            stats.mfma(),
            stats.workgroups(),
            stats.waves()
        );
        for (class, count) in stats.by_class() {
            if count > 0 {
                println!("    {class:<12} {count}");
            }
        }
    }
    if let Some(p) = &prediction {
        crate::timing::describe(p, &mut std::io::stdout())?;
    }
    Ok(())
}

/// The model's view of the `--arg`s: inputs as their bytes, outputs and zero buffers as lazily
/// zeroed memory.
fn predict_args(
    launch: &LaunchArgs,
    kernel: &str,
    model: &crate::timing::ModelArgs,
    trace_out: Option<Output>,
) -> Result<tilegen::timing::Prediction> {
    use crate::timing::TimedArg;
    let timed = launch
        .args
        .iter()
        .map(|a| {
            Ok(match a {
                Arg::In(f) | Arg::InOut(f) => TimedArg::Bytes(crate::timing::read_input(f)?),
                Arg::Out(_, n) | Arg::Zero(n) => TimedArg::Zero((*n).max(1)),
                Arg::I32(v) => TimedArg::Value(ArgValue::I32(*v)),
                Arg::I64(v) => TimedArg::Value(ArgValue::I64(*v)),
                Arg::F32(v) => TimedArg::Value(ArgValue::F32(*v)),
                Arg::Null => TimedArg::Value(ArgValue::Null),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let code_object = &launch.code_object;
    let bytes =
        std::fs::read(code_object).with_context(|| format!("reading {}", code_object.display()))?;
    let config = launch.config();
    crate::timing::predict(&bytes, kernel, &config, model, trace_out, |memory| {
        crate::timing::materialize(memory, &timed)
    })
}

/// `tilegen emu time`.
fn time(a: TimeArgs) -> Result<()> {
    let trace_out = a.model.check()?;
    let l = &a.launch;
    let bytes = std::fs::read(&l.code_object)
        .with_context(|| format!("reading {}", l.code_object.display()))?;
    let co = CodeObject::parse(&bytes)
        .with_context(|| format!("reading {}", l.code_object.display()))?;
    let kernel = pick(&co, l.kernel.as_deref())?.name().to_string();
    let p = predict_args(l, &kernel, &a.model, trace_out)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&p)?);
    } else {
        println!(
            "{kernel} on a {:?} grid of {:?} work-items",
            l.grid, l.block
        );
        crate::timing::describe(&p, &mut std::io::stdout())?;
        if let Some(t) = &a.model.trace {
            println!("wrote the trace {}", t.display());
        }
    }
    Ok(())
}

/// Copies `n` bytes of device memory at `p` into `out`, a few MiB at a time (no second
/// full-size host copy), atomically replacing the file.
fn write_back(dev: &dyn Device, p: DevicePtr, n: u64, out: &Output) -> Result<()> {
    const CHUNK: u64 = 4 << 20;
    let mut file = out.create()?;
    let mut buf = vec![0u8; CHUNK.min(n) as usize];
    let mut off = 0u64;
    while off < n {
        tilegen_output::check_interrupted()?;
        let len = CHUNK.min(n - off) as usize;
        dev.copy_from_device(DevicePtr(p.0 + off), &mut buf[..len])?;
        file.write_all(&buf[..len])
            .with_context(|| format!("writing {}", out.path().display()))?;
        off += len as u64;
    }
    file.commit()?;
    Ok(())
}

fn disasm(a: DisasmArgs) -> Result<()> {
    let bytes = std::fs::read(&a.code_object)
        .with_context(|| format!("reading {}", a.code_object.display()))?;
    let co = CodeObject::parse(&bytes)
        .with_context(|| format!("parsing {}", a.code_object.display()))?;
    let kernels: Vec<&Kernel> = match &a.kernel {
        Some(_) => vec![pick(&co, a.kernel.as_deref())?],
        None => co.kernels.iter().collect(),
    };
    let (text_addr, text) = &co.text;
    for k in kernels {
        // Entry and size come from the file: checked, and the slice taken with `get`.
        let start = k
            .entry
            .checked_sub(*text_addr)
            .and_then(|s| usize::try_from(s).ok())
            .filter(|&s| s <= text.len())
            .ok_or_else(|| anyhow!("kernel {} starts outside .text", k.name()))?;
        let len = if k.code_size > 0 {
            usize::try_from(k.code_size).unwrap_or(usize::MAX)
        } else {
            text.len() - start
        };
        let code = start
            .checked_add(len)
            .and_then(|end| text.get(start..end))
            .ok_or_else(|| anyhow!("kernel {} runs past .text", k.name()))?;
        println!("{:016x} <{}>:", k.entry, k.name());
        for (pc, inst) in tilegen::emu::isa::decode_lenient(code, k.entry) {
            let off = pc.wrapping_sub(k.entry) as usize;
            match inst {
                Ok(i) => {
                    let words: Vec<String> = code
                        .get(off..off + i.size as usize)
                        .unwrap_or_default()
                        .chunks_exact(4)
                        .map(|w| format!("{:08X}", u32::from_le_bytes([w[0], w[1], w[2], w[3]])))
                        .collect();
                    // The layout of llvm-objdump's listing, branch-target annotation included.
                    let target = i
                        .branch_target
                        .map(|t| format!(" <{}+0x{:x}>", k.name(), t.wrapping_sub(k.entry)))
                        .unwrap_or_default();
                    println!(
                        "\t{:<59}// {:012X}: {}{target}",
                        i.to_string(),
                        pc,
                        words.join(" ")
                    );
                }
                Err(e) => println!("\t; {e}"),
            }
        }
        println!();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_counts_take_binary_suffixes() {
        assert_eq!(parse_bytes("1048576"), Ok(1 << 20));
        assert_eq!(parse_bytes("8G"), Ok(8 << 30));
        assert_eq!(parse_bytes("512M"), Ok(512 << 20));
        assert_eq!(parse_bytes("64k"), Ok(64 << 10));
        assert_eq!(parse_bytes("2TiB"), Ok(2 << 40));
        assert_eq!(parse_bytes("3 GB"), Ok(3 << 30));
        assert!(parse_bytes("").is_err());
        assert!(parse_bytes("G").is_err());
        assert!(parse_bytes("10X").is_err());
        assert!(parse_bytes("-1").is_err());
        assert!(parse_bytes("99999999999T").is_err());
    }
}

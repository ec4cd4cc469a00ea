//! `tilegen emu run` / `tilegen emu disasm`: any gfx950 code object on the emulator.

use std::path::PathBuf;
use std::str::FromStr;

use anyhow::{Context, Result, anyhow, bail};
use clap::{Args, Subcommand};
use tilegen::codeobj::{CodeObject, Kernel};
use tilegen::runtime::{ArgValue, Device, DevicePtr, EmuDevice, LaunchConfig, launch};

#[derive(Subcommand)]
pub enum EmuCommand {
    /// Run a kernel of a code object on the emulator.
    Run(RunArgs),
    /// Disassemble a code object (the syntax of llvm-objdump-22 --mcpu=gfx950).
    Disasm(DisasmArgs),
}

#[derive(Args)]
pub struct RunArgs {
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
    /// Explicit arguments in the metadata's order: in:FILE, out:FILE:BYTES, inout:FILE, i32:N,
    /// i64:N, f32:X, null.
    #[arg(long = "arg", value_parser = Arg::from_str)]
    args: Vec<Arg>,
    /// Print instructions executed by class and the run's wall time.
    #[arg(long)]
    stats: bool,
    /// Print the run summary as JSON.
    #[arg(long)]
    json: bool,
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
            _ => {
                return Err(num(
                    "expected in:FILE, out:FILE:BYTES, inout:FILE, i32:N, i64:N, f32:X or null",
                ));
            }
        })
    }
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

fn run_kernel(a: RunArgs) -> Result<()> {
    let bytes = std::fs::read(&a.code_object)
        .with_context(|| format!("reading {}", a.code_object.display()))?;
    let dev = EmuDevice::new();
    let module = dev
        .load(&bytes)
        .with_context(|| format!("loading {}", a.code_object.display()))?;
    let kernel = pick(&module.code_object, a.kernel.as_deref())?
        .name()
        .to_string();
    let mut values = Vec::new();
    // Buffers to write back after the run: (device pointer, bytes, file).
    let mut outputs: Vec<(DevicePtr, usize, PathBuf)> = Vec::new();
    for arg in &a.args {
        let value = match arg {
            Arg::In(f) | Arg::InOut(f) => {
                let data = std::fs::read(f).with_context(|| format!("reading {}", f.display()))?;
                let p = dev.alloc(data.len().max(1) as u64)?;
                dev.copy_to_device(p, &data)?;
                if let Arg::InOut(_) = arg {
                    outputs.push((p, data.len(), f.clone()));
                }
                ArgValue::Ptr(p)
            }
            Arg::Out(f, n) => {
                let p = dev.alloc((*n).max(1))?;
                outputs.push((p, *n as usize, f.clone()));
                ArgValue::Ptr(p)
            }
            Arg::I32(v) => ArgValue::I32(*v),
            Arg::I64(v) => ArgValue::I64(*v),
            Arg::F32(v) => ArgValue::F32(*v),
            Arg::Null => ArgValue::Null,
        };
        values.push(value);
    }
    let config = LaunchConfig {
        grid: a.grid,
        block: a.block,
        dynamic_lds: a.dynamic_lds,
    };
    let report = launch(&dev, &module, &kernel, &config, &values)?;
    for (p, n, f) in &outputs {
        let mut buf = vec![0u8; *n];
        dev.copy_from_device(*p, &mut buf)?;
        std::fs::write(f, &buf).with_context(|| format!("writing {}", f.display()))?;
    }
    let stats = report.stats.clone().unwrap_or_default();
    if a.json {
        let v = serde_json::json!({
            "kernel": kernel,
            "grid": a.grid,
            "block": a.block,
            "wall_seconds": report.wall.as_secs_f64(),
            "stats": stats,
            "outputs": outputs.iter().map(|(_, n, f)| serde_json::json!({"file": f, "bytes": n})).collect::<Vec<_>>(),
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!(
        "ran {kernel} on a {:?} grid of {:?} work-items",
        a.grid, a.block
    );
    for (_, n, f) in &outputs {
        println!("  wrote {} ({n} bytes)", f.display());
    }
    if a.stats {
        let total = stats["wave_instructions"].as_u64().unwrap_or(0);
        let secs = report.wall.as_secs_f64();
        println!(
            "  {total} wave-instructions in {:.3} s ({:.1} M/s), {} MFMAs, {} workgroups, {} waves",
            secs,
            total as f64 / secs.max(1e-9) / 1e6,
            stats["mfma"],
            stats["workgroups"],
            stats["waves"]
        );
        if let Some(classes) = stats["by_class"].as_object() {
            for (class, count) in classes {
                if count.as_u64().unwrap_or(0) > 0 {
                    println!("    {class:<12} {count}");
                }
            }
        }
    }
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
        let start = k
            .entry
            .checked_sub(*text_addr)
            .ok_or_else(|| anyhow!("kernel {} starts before .text", k.name()))?
            as usize;
        let len = if k.code_size > 0 {
            k.code_size as usize
        } else {
            text.len() - start
        };
        let code = text
            .get(start..start + len)
            .ok_or_else(|| anyhow!("kernel {} runs past .text", k.name()))?;
        println!("{:016x} <{}>:", k.entry, k.name());
        for (pc, inst) in tilegen::emu::isa::decode_lenient(code, k.entry) {
            let off = (pc - k.entry) as usize;
            match inst {
                Ok(i) => {
                    let words: Vec<String> = code[off..off + i.size as usize]
                        .chunks(4)
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

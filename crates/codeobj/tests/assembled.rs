//! The reader on code objects assembled and linked here by LLVM (llvm-mc-22, ld.lld-22), as code
//! object v5 and v6, checked field by field against LLVM's own views of the same file:
//! `llvm-objdump-22 --disassemble-symbols=<k>.kd` (the descriptor as `.amdhsa_*` directives),
//! `llvm-readelf-22 --notes` (metadata), `--symbols`, `-l` (segments) and `-S` (sections).
//! Malformed and foreign files must give named errors and never panic.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use proptest::prelude::*;
use tilegen_codeobj::{CodeObject, CodeObjectError, CodeObjectVersion, Kernel, SymbolKind};

fn tool(name: &str, env: &str) -> String {
    let t = std::env::var(env).unwrap_or_else(|_| name.to_string());
    let ok = Command::new(&t)
        .arg("--version")
        .output()
        .map(|o| o.status.success());
    assert!(
        matches!(ok, Ok(true)),
        "{t} is not runnable: install LLVM 22 (run `cargo xtask setup`)"
    );
    t
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().expect("spawn LLVM tool");
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tilegen-codeobj-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Assemble `tests/data/two_kernels.s` for `mcpu` and code object `version`, then link it.
fn build(dir: &Path, mcpu: &str, version: u32, link: bool) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/two_kernels.s");
    let obj = dir.join(format!("{mcpu}-v{version}.o"));
    let mut text = std::fs::read_to_string(&src).unwrap();
    if mcpu != "gfx950" {
        // The target directive must name the processor being assembled for.
        text = text.replace("gfx950", mcpu).replace(
            "v_mfma_f32_16x16x32_bf16 a[0:3], v[4:7], v[8:11], a[0:3]",
            "s_nop 0",
        );
    }
    let src = dir.join(format!("{mcpu}.s"));
    std::fs::write(&src, text).unwrap();
    run(Command::new(tool("llvm-mc-22", "LLVM_MC"))
        .args([
            "-triple=amdgcn-amd-amdhsa",
            &format!("-mcpu={mcpu}"),
            "-filetype=obj",
        ])
        .arg(format!("--amdhsa-code-object-version={version}"))
        .arg(&src)
        .arg("-o")
        .arg(&obj));
    if !link {
        return obj;
    }
    let out = dir.join(format!("{mcpu}-v{version}.hsaco"));
    run(Command::new(tool("ld.lld-22", "LLD"))
        .arg("-shared")
        .arg(&obj)
        .arg("-o")
        .arg(&out));
    out
}

/// `.amdhsa_<key> <value>` directives llvm-objdump prints for a kernel descriptor.
fn kd_directives(path: &Path, kernel: &str) -> BTreeMap<String, u64> {
    let out = run(Command::new(tool("llvm-objdump-22", "LLVM_OBJDUMP"))
        .args(["-D", "--mcpu=gfx950"])
        .arg(format!("--disassemble-symbols={kernel}.kd"))
        .arg(path));
    out.lines()
        .filter_map(|l| {
            let l = l.trim().strip_prefix(".amdhsa_")?;
            let (k, v) = l.split_once(' ')?;
            Some((k.to_string(), v.trim().parse().ok()?))
        })
        .collect()
}

fn check_descriptor(path: &Path, k: &Kernel) {
    let want = kd_directives(path, k.name());
    assert!(
        want.len() > 30,
        "{}: objdump printed {} directives",
        k.name(),
        want.len()
    );
    let d = &k.descriptor;
    let (r1, r2, r3) = (d.rsrc1(), d.rsrc2(), d.rsrc3());
    let ours: BTreeMap<&str, u64> = [
        (
            "group_segment_fixed_size",
            d.group_segment_fixed_size as u64,
        ),
        (
            "private_segment_fixed_size",
            d.private_segment_fixed_size as u64,
        ),
        ("kernarg_size", d.kernarg_size as u64),
        ("accum_offset", d.accum_offset() as u64),
        ("tg_split", r3.tg_split as u64),
        ("next_free_vgpr", d.allocated_vgprs() as u64),
        ("next_free_sgpr", d.allocated_sgprs() as u64),
        ("reserve_vcc", 0),
        ("reserve_xnack_mask", 0),
        ("float_round_mode_32", r1.float_round_mode_32 as u64),
        ("float_round_mode_16_64", r1.float_round_mode_16_64 as u64),
        ("float_denorm_mode_32", r1.float_denorm_mode_32 as u64),
        ("float_denorm_mode_16_64", r1.float_denorm_mode_16_64 as u64),
        ("dx10_clamp", r1.enable_dx10_clamp as u64),
        ("ieee_mode", r1.enable_ieee_mode as u64),
        ("fp16_overflow", r1.fp16_overflow as u64),
        ("enable_private_segment", r2.enable_private_segment as u64),
        (
            "system_sgpr_workgroup_id_x",
            r2.enable_sgpr_workgroup_id_x as u64,
        ),
        (
            "system_sgpr_workgroup_id_y",
            r2.enable_sgpr_workgroup_id_y as u64,
        ),
        (
            "system_sgpr_workgroup_id_z",
            r2.enable_sgpr_workgroup_id_z as u64,
        ),
        (
            "system_sgpr_workgroup_info",
            r2.enable_sgpr_workgroup_info as u64,
        ),
        ("system_vgpr_workitem_id", r2.enable_vgpr_workitem_id as u64),
        (
            "exception_fp_ieee_invalid_op",
            (r2.exception_enables & 1) as u64,
        ),
        (
            "exception_fp_denorm_src",
            (r2.exception_enables >> 1 & 1) as u64,
        ),
        (
            "exception_fp_ieee_div_zero",
            (r2.exception_enables >> 2 & 1) as u64,
        ),
        (
            "exception_fp_ieee_overflow",
            (r2.exception_enables >> 3 & 1) as u64,
        ),
        (
            "exception_fp_ieee_underflow",
            (r2.exception_enables >> 4 & 1) as u64,
        ),
        (
            "exception_fp_ieee_inexact",
            (r2.exception_enables >> 5 & 1) as u64,
        ),
        (
            "exception_int_div_zero",
            (r2.exception_enables >> 6 & 1) as u64,
        ),
        (
            "user_sgpr_dispatch_ptr",
            d.enable_sgpr_dispatch_ptr() as u64,
        ),
        ("user_sgpr_queue_ptr", d.enable_sgpr_queue_ptr() as u64),
        (
            "user_sgpr_kernarg_segment_ptr",
            d.enable_sgpr_kernarg_segment_ptr() as u64,
        ),
        ("user_sgpr_dispatch_id", d.enable_sgpr_dispatch_id() as u64),
        (
            "user_sgpr_private_segment_size",
            d.enable_sgpr_private_segment_size() as u64,
        ),
        ("uses_dynamic_stack", d.uses_dynamic_stack() as u64),
        (
            "user_sgpr_kernarg_preload_length",
            d.kernarg_preload_length() as u64,
        ),
        (
            "user_sgpr_kernarg_preload_offset",
            d.kernarg_preload_offset() as u64,
        ),
    ]
    .into_iter()
    .collect();
    for (key, v) in &want {
        let Some(o) = ours.get(key.as_str()) else {
            panic!(
                "{}: objdump shows .amdhsa_{key} {v}, which the reader does not decode",
                k.name()
            );
        };
        assert_eq!(o, v, "{}: .amdhsa_{key}", k.name());
    }
    // The user SGPR count covers the enabled pointers plus preloaded kernargs.
    assert_eq!(
        r2.user_sgpr_count,
        d.enabled_user_sgprs() + d.kernarg_preload_length(),
        "{}: USER_SGPR_COUNT",
        k.name()
    );
}

/// A small reader for the YAML llvm-readelf prints for the metadata note: nested maps and
/// lists of scalars, by indentation.
#[derive(Debug, Clone, PartialEq)]
enum Yaml {
    Scalar(String),
    List(Vec<Yaml>),
    Map(BTreeMap<String, Yaml>),
}

fn parse_yaml(lines: &[(usize, String)], at: &mut usize, indent: usize) -> Yaml {
    if *at < lines.len() && lines[*at].1.starts_with("- ") && lines[*at].0 == indent {
        let mut items = Vec::new();
        while *at < lines.len() && lines[*at].0 == indent && lines[*at].1.starts_with("- ") {
            let (ind, rest) = lines[*at].clone();
            let rest = rest[2..].to_string();
            if rest.contains(": ") || rest.ends_with(':') {
                // A map item: its first key is on the dash line.
                let mut sub = vec![(ind + 2, rest)];
                let mut j = *at + 1;
                while j < lines.len() && lines[j].0 > ind {
                    sub.push(lines[j].clone());
                    j += 1;
                }
                let mut k = 0;
                items.push(parse_yaml(&sub, &mut k, ind + 2));
                *at = j;
            } else {
                items.push(Yaml::Scalar(rest.trim().to_string()));
                *at += 1;
            }
        }
        return Yaml::List(items);
    }
    let mut map = BTreeMap::new();
    while *at < lines.len() && lines[*at].0 == indent {
        let line = lines[*at].1.clone();
        let (k, v) = line.split_once(':').unwrap_or((&line, ""));
        *at += 1;
        let v = v.trim();
        let value = if v.is_empty() {
            let child = lines.get(*at).map_or(indent, |l| l.0);
            if child >= indent && *at < lines.len() {
                parse_yaml(lines, at, child)
            } else {
                Yaml::List(Vec::new())
            }
        } else if v == "[]" {
            Yaml::List(Vec::new())
        } else {
            Yaml::Scalar(v.trim_matches('\'').to_string())
        };
        map.insert(k.trim().to_string(), value);
    }
    Yaml::Map(map)
}

fn readelf_metadata(path: &Path) -> Yaml {
    let out = run(Command::new(tool("llvm-readelf-22", "LLVM_READELF"))
        .arg("--notes")
        .arg(path));
    let body: Vec<(usize, String)> = out
        .lines()
        .skip_while(|l| l.trim() != "---")
        .skip(1)
        .take_while(|l| l.trim() != "...")
        .filter(|l| !l.trim().is_empty())
        .map(|l| (l.len() - l.trim_start().len(), l.trim().to_string()))
        .collect();
    let mut at = 0;
    parse_yaml(&body, &mut at, 0)
}

fn yaml_get<'a>(y: &'a Yaml, key: &str) -> &'a Yaml {
    match y {
        Yaml::Map(m) => m.get(key).unwrap_or_else(|| panic!("no {key} in {y:?}")),
        _ => panic!("{key}: not a map"),
    }
}

fn scalar(y: &Yaml) -> String {
    match y {
        Yaml::Scalar(s) => s.clone(),
        other => panic!("not a scalar: {other:?}"),
    }
}

fn msgpack_text(v: &rmpv::Value) -> String {
    match v {
        rmpv::Value::String(s) => s.as_str().unwrap_or("").to_string(),
        other => other.to_string(),
    }
}

fn check_metadata(path: &Path, co: &CodeObject) {
    let y = readelf_metadata(path);
    let Yaml::List(kernels) = yaml_get(&y, "amdhsa.kernels") else {
        panic!("kernels")
    };
    assert_eq!(kernels.len(), co.kernels.len());
    for (yk, k) in kernels.iter().zip(&co.kernels) {
        let m = &k.meta;
        let Yaml::Map(ym) = yk else {
            panic!("kernel entry")
        };
        for (key, val) in ym {
            let ours = match key.as_str() {
                ".name" => m.name.clone(),
                ".symbol" => m.symbol.clone(),
                ".group_segment_fixed_size" => m.group_segment_fixed_size.to_string(),
                ".private_segment_fixed_size" => m.private_segment_fixed_size.to_string(),
                ".kernarg_segment_size" => m.kernarg_segment_size.to_string(),
                ".kernarg_segment_align" => m.kernarg_segment_align.to_string(),
                ".wavefront_size" => m.wavefront_size.to_string(),
                ".sgpr_count" => m.sgpr_count.to_string(),
                ".vgpr_count" => m.vgpr_count.to_string(),
                ".agpr_count" => m.agpr_count.to_string(),
                ".sgpr_spill_count" => m.sgpr_spill_count.to_string(),
                ".vgpr_spill_count" => m.vgpr_spill_count.to_string(),
                ".max_flat_workgroup_size" => m.max_flat_workgroup_size.to_string(),
                ".uses_dynamic_stack" => m.uses_dynamic_stack.to_string(),
                ".args" => {
                    let Yaml::List(args) = val else {
                        panic!(".args")
                    };
                    assert_eq!(args.len(), m.args.len(), "{}: argument count", m.name);
                    for (ya, a) in args.iter().zip(&m.args) {
                        let Yaml::Map(am) = ya else { panic!("arg") };
                        for (ak, av) in am {
                            let ours = match ak.as_str() {
                                ".name" => a.name.clone().unwrap_or_default(),
                                ".offset" => a.offset.to_string(),
                                ".size" => a.size.to_string(),
                                ".value_kind" => a.value_kind.to_string(),
                                ".address_space" => a.address_space.clone().unwrap_or_default(),
                                ".value_type" => a.value_type.clone().unwrap_or_default(),
                                other => {
                                    a.extra.get(other).map(msgpack_text).unwrap_or_else(|| {
                                        panic!("{}: argument key {other} not kept", m.name)
                                    })
                                }
                            };
                            assert_eq!(ours, scalar(av), "{}: argument {ak}", m.name);
                        }
                    }
                    continue;
                }
                other => m
                    .extra
                    .get(other)
                    .map(msgpack_text)
                    .unwrap_or_else(|| panic!("{}: key {other} not kept", m.name)),
            };
            assert_eq!(ours, scalar(val), "{}: {key}", m.name);
        }
    }
}

fn check_symbols_sections_segments(path: &Path, co: &CodeObject) {
    let readelf = tool("llvm-readelf-22", "LLVM_READELF");
    // Symbols (.symtab): Num: Value Size Type Bind Vis Ndx Name
    let out = run(Command::new(&readelf).arg("--symbols").arg(path));
    let mut in_symtab = false;
    let mut seen = 0;
    for line in out.lines() {
        if line.contains("Symbol table '.symtab'") {
            in_symtab = true;
            continue;
        }
        let f: Vec<&str> = line.split_whitespace().collect();
        let numbered = f
            .first()
            .is_some_and(|n| n.trim_end_matches(':').parse::<u32>().is_ok());
        if !in_symtab || f.len() < 8 || !numbered || f[6] == "UND" {
            continue;
        }
        let (value, size, ty, name) = (
            u64::from_str_radix(f[1], 16).unwrap(),
            f[2].parse::<u64>().unwrap(),
            f[3],
            f[7],
        );
        let s = co
            .symbols
            .iter()
            .find(|s| s.name == name)
            .unwrap_or_else(|| panic!("symbol {name} missing"));
        assert_eq!((s.address, s.size), (value, size), "symbol {name}");
        let kind = match ty {
            "FUNC" => SymbolKind::Function,
            "OBJECT" => SymbolKind::Object,
            _ => SymbolKind::Other,
        };
        assert_eq!(s.kind, kind, "symbol {name}");
        seen += 1;
    }
    assert!(seen >= 4, "only {seen} symbols compared");
    // Program headers: LOAD Offset VirtAddr PhysAddr FileSiz MemSiz Flg Align
    let out = run(Command::new(&readelf).arg("-l").arg(path));
    let loads: Vec<(u64, u64, u64)> = out
        .lines()
        .filter(|l| l.trim_start().starts_with("LOAD"))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let h = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap();
            (h(f[2]), h(f[4]), h(f[5]))
        })
        .collect();
    let ours: Vec<(u64, u64, u64)> = co
        .segments
        .iter()
        .map(|s| (s.vaddr, s.file_bytes.len() as u64, s.mem_size))
        .collect();
    assert_eq!(ours, loads, "PT_LOAD segments");
    // .text: [Nr] Name Type Address Off Size ...
    let out = run(Command::new(&readelf).arg("-S").arg(path));
    let text = out.lines().find(|l| l.contains(" .text ")).expect(".text");
    let f: Vec<&str> = text.split_whitespace().collect();
    let i = f.iter().position(|x| *x == ".text").unwrap();
    let addr = u64::from_str_radix(f[i + 2], 16).unwrap();
    let size = u64::from_str_radix(f[i + 4], 16).unwrap();
    assert_eq!((co.text.0, co.text.1.len() as u64), (addr, size), ".text");
    // Each kernel's entry is its function symbol, inside .text.
    for k in &co.kernels {
        let f = co.symbols.iter().find(|s| s.name == k.name()).unwrap();
        assert_eq!(
            (k.entry, k.code_size),
            (f.address, f.size),
            "{} entry",
            k.name()
        );
        let kd = co.symbols.iter().find(|s| s.name == k.meta.symbol).unwrap();
        assert_eq!(k.descriptor_address, kd.address);
    }
}

#[test]
fn v5_and_v6_code_objects_match_llvms_view() {
    let dir = scratch("assembled");
    for (version, want) in [(5, CodeObjectVersion::V5), (6, CodeObjectVersion::V6)] {
        let path = build(&dir, "gfx950", version, true);
        let co = CodeObject::parse(&std::fs::read(&path).unwrap())
            .unwrap_or_else(|e| panic!("v{version}: {e}"));
        assert_eq!(co.version, want);
        assert_eq!(co.e_flags & 0xff, 0x4f);
        assert_eq!(co.kernels.len(), 2);
        for k in &co.kernels {
            check_descriptor(&path, k);
        }
        check_metadata(&path, &co);
        check_symbols_sections_segments(&path, &co);
        // The loadable image holds the descriptors where the symbols say.
        let first = co.kernel("first").unwrap();
        let bytes = co.read(first.descriptor_address, 64).unwrap();
        assert_eq!(bytes, first.descriptor.to_bytes());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn foreign_and_malformed_objects_are_named_errors() {
    let dir = scratch("errors");
    let good = std::fs::read(build(&dir, "gfx950", 6, true)).unwrap();
    // Another processor, assembled by LLVM for it.
    let gfx942 = std::fs::read(build(&dir, "gfx942", 6, true)).unwrap();
    assert_eq!(
        CodeObject::parse(&gfx942).unwrap_err(),
        CodeObjectError::WrongProcessor {
            mach: 0x4c,
            name: "gfx942"
        }
    );
    // Code object v4 (EI_ABIVERSION 2) is not read.
    let v4 = std::fs::read(build(&dir, "gfx950", 4, true)).unwrap();
    assert_eq!(
        CodeObject::parse(&v4).unwrap_err(),
        CodeObjectError::Version(2)
    );
    // An unlinked relocatable object.
    let obj = std::fs::read(build(&dir, "gfx950", 6, false)).unwrap();
    assert_eq!(
        CodeObject::parse(&obj).unwrap_err(),
        CodeObjectError::NotSharedObject { found: 1 }
    );
    // Header fields, one at a time.
    let patched = |at: usize, v: u8| {
        let mut b = good.clone();
        b[at] = v;
        CodeObject::parse(&b).unwrap_err()
    };
    assert_eq!(
        patched(0, 0x7e),
        CodeObjectError::NotElf {
            found: [0x7e, b'E', b'L', b'F']
        }
    );
    assert_eq!(patched(4, 1), CodeObjectError::NotElf64 { found: 1 });
    assert_eq!(patched(5, 2), CodeObjectError::NotLittleEndian { found: 2 });
    assert_eq!(patched(7, 0), CodeObjectError::WrongOsAbi { found: 0 });
    assert_eq!(patched(18, 62), CodeObjectError::WrongMachine { found: 62 });
    assert!(CodeObject::parse(&good).is_ok());
    let _ = std::fs::remove_dir_all(&dir);
}

fn good_object() -> Vec<u8> {
    static GOOD: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    GOOD.get_or_init(|| {
        let dir = scratch("fuzz");
        let b = std::fs::read(build(&dir, "gfx950", 6, true)).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        b
    })
    .clone()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Corrupting any bytes of a valid code object gives an error or a (different) code object,
    /// never a panic.
    #[test]
    fn corrupted_code_objects_never_panic(
        edits in proptest::collection::vec((any::<u32>(), any::<u8>()), 1..8),
        cut in proptest::option::of(any::<u32>()),
    ) {
        let mut b = good_object();
        for (at, v) in edits {
            let i = at as usize % b.len();
            b[i] = v;
        }
        if let Some(c) = cut {
            b.truncate(c as usize % b.len());
        }
        let _ = CodeObject::parse(&b);
    }

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = CodeObject::parse(&bytes);
    }
}

//! `tilegen emu run` and `tilegen emu disasm` given damaged and hostile code objects: every case
//! runs the binary under a memory cap and a deadline and must end in exit status 0 or 1 (success,
//! a clean error, or a reported kernel fault), never a signal, a panic or a timeout.
//!
//! The code objects are real: one of ours (`tilegen build`) and a Triton GEMM of the foreign
//! corpus. From each, a seeded generator makes mutants: truncations, and byte flips and extreme
//! field values in the ELF header, the program headers, the section headers, the kernel
//! descriptor, the metadata note (msgpack) and the machine code. Named tests pin down the
//! reproducers of the hostile-input run: a huge private segment, a huge `p_vaddr`, a 1 TiB
//! output buffer, a 65536 x 65536 grid, an endless `s_branch -1` loop and a 16777215-workgroup
//! grid.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use tilegen::codeobj::CodeObject;
use tilegen_testkit::{Ending, Outcome, run_capped};

const BIN: &str = env!("CARGO_BIN_EXE_tilegen");
/// Address-space cap of every child: the emulator's default memory limit becomes half of it.
const CAP: u64 = 2 << 30;
/// Deadline of every child; no case comes near it (the slowest take well under a second).
const DEADLINE: Duration = Duration::from_secs(60);

/// A code object to mutate, with the file ranges worth aiming at and a command line that runs
/// it (inputs written beside it).
struct Base {
    name: &'static str,
    bytes: Vec<u8>,
    /// `emu run` arguments after the code object path.
    run_args: Vec<String>,
    elf: Layout,
}

/// File ranges of a code object.
#[derive(Debug, Clone)]
struct Layout {
    phdrs: (usize, usize),
    shdrs: (usize, usize),
    descriptor: usize,
    note: (usize, usize),
    text: (usize, usize),
    /// File offsets of the `p_vaddr` fields of the PT_LOAD headers.
    load_vaddrs: Vec<usize>,
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

impl Layout {
    /// Reads the tables of a well-formed ELF64 code object.
    fn of(b: &[u8]) -> Layout {
        let phoff = u64_at(b, 32) as usize;
        let shoff = u64_at(b, 40) as usize;
        let (phnum, shnum, shstrndx) = (
            u16_at(b, 56) as usize,
            u16_at(b, 60) as usize,
            u16_at(b, 62) as usize,
        );
        let sh = |i: usize| shoff + 64 * i;
        let strtab = u64_at(b, sh(shstrndx) + 24) as usize;
        let name_of = |i: usize| {
            let at = strtab + u32_at(b, sh(i)) as usize;
            let end = at + b[at..].iter().position(|&c| c == 0).unwrap();
            String::from_utf8_lossy(&b[at..end]).into_owned()
        };
        let range = |i: usize| {
            let off = u64_at(b, sh(i) + 24) as usize;
            (off, off + u64_at(b, sh(i) + 32) as usize)
        };
        let find = |want: &str| {
            (0..shnum)
                .find(|&i| name_of(i) == want)
                .map(range)
                .unwrap_or_else(|| panic!("no {want}"))
        };
        let loads: Vec<(usize, u64, u64, u64)> = (0..phnum)
            .map(|i| phoff + 56 * i)
            .filter(|&p| u32_at(b, p) == 1)
            .map(|p| (p, u64_at(b, p + 8), u64_at(b, p + 16), u64_at(b, p + 32)))
            .collect();
        let co = CodeObject::parse(b).expect("the base code object parses");
        let kd = co.kernels[0].descriptor_address;
        let descriptor = loads
            .iter()
            .find(|&&(_, _, vaddr, filesz)| kd >= vaddr && kd + 64 <= vaddr + filesz)
            .map(|&(_, off, vaddr, _)| (off + kd - vaddr) as usize)
            .expect("descriptor in a PT_LOAD");
        Layout {
            phdrs: (phoff, phoff + 56 * phnum),
            shdrs: (shoff, shoff + 64 * shnum),
            descriptor,
            note: find(".note"),
            text: find(".text"),
            load_vaddrs: loads.iter().map(|&(p, ..)| p + 16).collect(),
        }
    }
}

/// splitmix64: a small seeded generator, so every run makes the same mutants.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn within(&mut self, (start, end): (usize, usize)) -> usize {
        start + self.below(end - start)
    }
    /// A value that stresses size and offset arithmetic.
    fn extreme(&mut self) -> u64 {
        const V: [u64; 12] = [
            0,
            1,
            0x7f,
            0xffff,
            0xffff_fff0,
            0xffff_ffff,
            1 << 32,
            1 << 40,
            280_000_000_000_000,
            i64::MAX as u64,
            u64::MAX - 63,
            u64::MAX,
        ];
        if self.below(3) == 0 {
            self.next()
        } else {
            V[self.below(V.len())]
        }
    }
}

/// Overwrites `width` bytes at `at` (clipped to the file) with the low bytes of `v`.
fn put(b: &mut [u8], at: usize, width: usize, v: u64) {
    for (i, byte) in v.to_le_bytes()[..width].iter().enumerate() {
        if let Some(slot) = b.get_mut(at + i) {
            *slot = *byte;
        }
    }
}

/// One mutant: what was done, and the bytes.
struct Mutant {
    what: String,
    bytes: Vec<u8>,
}

/// The seeded mutants of one base code object.
fn mutants(base: &Base, seed: u64) -> Vec<Mutant> {
    let b = &base.bytes;
    let l = &base.elf;
    let mut rng = Rng(seed);
    let mut out = Vec::new();
    let mut add = |what: String, bytes: Vec<u8>| out.push(Mutant { what, bytes });
    // Truncations: at every table boundary and at random offsets.
    let mut cuts = vec![0, 1, 4, 16, 52, 63, 64, 65, b.len() - 1];
    for (s, e) in [l.phdrs, l.shdrs, l.note, l.text] {
        cuts.extend([s, s + 1, (s + e) / 2, e - 1, e]);
    }
    cuts.extend([l.descriptor, l.descriptor + 32, l.descriptor + 63]);
    for _ in 0..6 {
        cuts.push(rng.below(b.len()));
    }
    for cut in cuts {
        add(
            format!("truncated to {cut} bytes"),
            b[..cut.min(b.len())].to_vec(),
        );
    }
    // The ELF header: its size and offset fields at extremes, and random byte flips.
    const HEADER_FIELDS: [(usize, usize); 9] = [
        (32, 8),
        (40, 8),
        (48, 4),
        (52, 2),
        (54, 2),
        (56, 2),
        (58, 2),
        (60, 2),
        (62, 2),
    ];
    for i in 0..20 {
        let mut m = b.clone();
        let what = if i % 2 == 0 {
            let (at, width) = HEADER_FIELDS[rng.below(HEADER_FIELDS.len())];
            let v = rng.extreme();
            put(&mut m, at, width, v);
            format!("ELF header field at {at} = {v:#x}")
        } else {
            let at = rng.below(64);
            m[at] ^= 1 << rng.below(8);
            format!("ELF header bit flip at {at}")
        };
        add(what, m);
    }
    // Program headers: type, offset, vaddr, filesz, memsz at extremes; byte flips.
    const PH_FIELDS: [(usize, usize); 6] = [(0, 4), (8, 8), (16, 8), (32, 8), (40, 8), (48, 8)];
    for i in 0..27 {
        let mut m = b.clone();
        let what = if i % 3 != 2 {
            let ph = l.phdrs.0 + 56 * rng.below((l.phdrs.1 - l.phdrs.0) / 56);
            let (at, width) = PH_FIELDS[rng.below(PH_FIELDS.len())];
            let v = rng.extreme();
            put(&mut m, ph + at, width, v);
            format!("program header field at {} = {v:#x}", ph + at)
        } else {
            let at = rng.within(l.phdrs);
            m[at] = rng.next() as u8;
            format!("program header byte {at} = {:#x}", m[at])
        };
        add(what, m);
    }
    // Section headers: name, type, address, offset, size, link, entsize; byte flips.
    const SH_FIELDS: [(usize, usize); 7] =
        [(0, 4), (4, 4), (16, 8), (24, 8), (32, 8), (40, 4), (56, 8)];
    for i in 0..27 {
        let mut m = b.clone();
        let what = if i % 3 != 2 {
            let sh = l.shdrs.0 + 64 * rng.below((l.shdrs.1 - l.shdrs.0) / 64);
            let (at, width) = SH_FIELDS[rng.below(SH_FIELDS.len())];
            let v = rng.extreme();
            put(&mut m, sh + at, width, v);
            format!("section header field at {} = {v:#x}", sh + at)
        } else {
            let at = rng.within(l.shdrs);
            m[at] = rng.next() as u8;
            format!("section header byte {at} = {:#x}", m[at])
        };
        add(what, m);
    }
    // The kernel descriptor: LDS, scratch and kernarg sizes, entry offset, rsrc registers,
    // properties and preload fields at extremes; random bytes.
    const KD_FIELDS: [(usize, usize); 9] = [
        (0, 4),
        (4, 4),
        (8, 4),
        (16, 8),
        (44, 4),
        (48, 4),
        (52, 4),
        (56, 2),
        (58, 2),
    ];
    for i in 0..28 {
        let mut m = b.clone();
        let what = if i % 4 != 3 {
            let (at, width) = KD_FIELDS[rng.below(KD_FIELDS.len())];
            let v = rng.extreme();
            put(&mut m, l.descriptor + at, width, v);
            format!("descriptor field at {at} = {v:#x}")
        } else {
            let at = l.descriptor + rng.below(64);
            m[at] = rng.next() as u8;
            format!("descriptor byte {} = {:#x}", at - l.descriptor, m[at])
        };
        add(what, m);
    }
    // The metadata note: note header sizes, msgpack markers claiming huge containers, bytes.
    for i in 0..28 {
        let mut m = b.clone();
        let what = match i % 4 {
            0 => {
                let at = l.note.0 + 4 * rng.below(3);
                let v = rng.extreme();
                put(&mut m, at, 4, v);
                format!("note header word at {at} = {v:#x}")
            }
            1 => {
                // array32 / map32 / str32 / bin32 with a length of 2^32 - 1.
                let at = rng.within((l.note.0 + 12, l.note.1.saturating_sub(5)));
                let marker = [0xdd, 0xdf, 0xdb, 0xc6][rng.below(4)];
                m[at] = marker;
                put(&mut m, at + 1, 4, u32::MAX as u64);
                format!("msgpack marker {marker:#x} with length 2^32-1 at {at}")
            }
            _ => {
                let at = rng.within(l.note);
                m[at] = rng.next() as u8;
                format!("note byte {at} = {:#x}", m[at])
            }
        };
        add(what, m);
    }
    // Machine code: random dwords and bit flips (these execute).
    for i in 0..28 {
        let mut m = b.clone();
        let dwords = (l.text.1 - l.text.0) / 4;
        let at = l.text.0 + 4 * rng.below(dwords);
        let what = if i % 2 == 0 {
            let v = rng.next() as u32;
            put(&mut m, at, 4, v as u64);
            format!(".text dword at {at} = {v:#010x}")
        } else {
            let bit = rng.below(32);
            let v = u32_at(&m, at) ^ (1 << bit);
            put(&mut m, at, 4, v as u64);
            format!(".text bit {bit} flipped at {at}")
        };
        add(what, m);
    }
    // Anywhere.
    for _ in 0..10 {
        let mut m = b.clone();
        let n = 1 + rng.below(8);
        for _ in 0..n {
            let at = rng.below(m.len());
            m[at] = rng.next() as u8;
        }
        add(format!("{n} random bytes anywhere"), m);
    }
    out
}

fn tilegen(args: &[String]) -> Outcome {
    run_capped(Path::new(BIN), args, &[], CAP, DEADLINE).expect("spawning tilegen")
}

/// Our kernel and its inputs, built once per test process.
fn ours() -> &'static Base {
    static BASE: OnceLock<Base> = OnceLock::new();
    BASE.get_or_init(|| {
        let dir = scratch_dir().join("ours");
        std::fs::create_dir_all(&dir).unwrap();
        let hsaco = dir.join("k.hsaco");
        let out = Command::new(BIN)
            .args(["build", "-o"])
            .arg(&hsaco)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let bytes = std::fs::read(&hsaco).unwrap();
        // The default spec: C, A, B, A scales, B scales, M, N, K; a 64x128x512 problem (one
        // workgroup of two waves), inputs generously sized.
        let (m, n, k) = (64usize, 128usize, 512usize);
        let mut run_args = args(&["--grid", "1", "--block", "128"]);
        run_args.extend(args(&[
            "--arg",
            &format!("out:{}:{}", dir.join("c.bin").display(), m * n * 2),
        ]));
        for (name, len) in [
            ("a", m * k / 2),
            ("b", n * k / 2),
            ("sa", 4096),
            ("sb", 4096),
        ] {
            let f = dir.join(format!("{name}.bin"));
            std::fs::write(&f, noise(len, name.len() as u64)).unwrap();
            run_args.extend(args(&["--arg", &format!("in:{}", f.display())]));
        }
        for v in [m, n, k] {
            run_args.extend(args(&["--arg", &format!("i32:{v}")]));
        }
        Base {
            name: "ours",
            elf: Layout::of(&bytes),
            bytes,
            run_args,
        }
    })
}

/// The 64x64 Triton MXFP4 GEMM of the corpus, if the corpus is available.
fn triton() -> Option<&'static Base> {
    static BASE: OnceLock<Option<Base>> = OnceLock::new();
    BASE.get_or_init(|| {
        let corpus = tilegen_testkit::foreign_kernels()?;
        let fk = corpus
            .iter()
            .find(|k| k.name().starts_with("bm64_bn64"))
            .expect("the 64x64 Triton kernel");
        let bytes = std::fs::read(&fk.hsaco).unwrap();
        let co = CodeObject::parse(&bytes).unwrap();
        let explicit = co.kernels[0].meta.explicit_args().count();
        let dir = scratch_dir().join("triton");
        std::fs::create_dir_all(&dir).unwrap();
        let (m, n, k) = (64usize, 64usize, 256usize);
        let call = fk.gemm_launch(m, n, k);
        let dim = |d: [u32; 3]| format!("{},{},{}", d[0], d[1], d[2]);
        let mut run_args = args(&[
            "--grid",
            &dim(call.grid),
            "--block",
            &dim(call.block),
            "--dynamic-lds",
            &call.dynamic_lds.to_string(),
        ]);
        let mut kargs = Vec::new();
        for (name, len) in [
            ("a", m * k / 2),
            ("b", n * k / 2),
            ("sa", m * k / 32),
            ("sb", n * k / 32),
        ] {
            let f = dir.join(format!("{name}.bin"));
            std::fs::write(&f, noise(len, name.len() as u64 + 7)).unwrap();
            kargs.push(format!("in:{}", f.display()));
        }
        kargs.push(format!("out:{}:{}", dir.join("c.bin").display(), m * n * 2));
        kargs.extend(call.scalars.iter().map(|v| format!("i32:{v}")));
        kargs.resize(explicit, "null".into());
        for a in kargs {
            run_args.extend(["--arg".to_string(), a]);
        }
        Some(Base {
            name: "triton",
            elf: Layout::of(&bytes),
            bytes,
            run_args,
        })
    })
    .as_ref()
}

fn args(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| s.to_string()).collect()
}

/// Deterministic input bytes (valid FP4 and scale encodings are all byte values).
fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut r = Rng(seed);
    (0..len).map(|_| r.next() as u8).collect()
}

/// A directory for this test process's files (kept for the process's lifetime).
fn scratch_dir() -> PathBuf {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| tempfile::tempdir().unwrap())
        .path()
        .to_path_buf()
}

/// Writes `bytes` as a code object file named `name`.
fn code_object(name: &str, bytes: &[u8]) -> PathBuf {
    let p = scratch_dir().join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

fn run_cmd(base: &Base, hsaco: &Path, extra: &[&str]) -> Vec<String> {
    let mut a = args(&["emu", "run"]);
    a.push(hsaco.display().to_string());
    a.extend(base.run_args.iter().cloned());
    a.extend(args(extra));
    a
}

/// How a case ended, for the tally.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Success,
    CleanError,
    Fault,
}

/// Exit status 0, or 1 with an `error:` line; anything else (a signal, a timeout, a panic's
/// status 101, clap's 2) is a failure described in the `Err`.
fn judge(what: &str, o: &Outcome) -> Result<Verdict, String> {
    let bad = |why: &str| {
        Err(format!(
            "{what}: {why} ({:?} after {:.1} s)\n{}",
            o.ending,
            o.elapsed.as_secs_f64(),
            o.stderr.chars().take(2000).collect::<String>()
        ))
    };
    if o.stderr.contains("panicked") {
        return bad("panicked");
    }
    match o.ending {
        Ending::Success => Ok(Verdict::Success),
        Ending::Exit(1) if o.stderr.contains("kernel fault") => Ok(Verdict::Fault),
        Ending::Exit(1) if o.stderr.starts_with("error:") || o.stderr.contains("\nerror:") => {
            Ok(Verdict::CleanError)
        }
        Ending::Exit(1) => bad("exit status 1 without an error message"),
        Ending::Exit(_) => bad("unexpected exit status"),
        Ending::Signal(_) => bad("killed by a signal"),
        Ending::Timeout => bad("timed out"),
    }
}

#[test]
fn mutated_code_objects_end_cleanly() {
    let t = Instant::now();
    let mut bases = vec![ours()];
    bases.extend(triton());
    // The unmutated code objects run and disassemble.
    for base in &bases {
        let p = code_object(&format!("{}-clean.hsaco", base.name), &base.bytes);
        let o = tilegen(&run_cmd(base, &p, &[]));
        assert_eq!(judge(base.name, &o), Ok(Verdict::Success), "{}", o.stderr);
    }
    // `TILEGEN_HOSTILE_SEED=N` explores other mutants than the fixed default set.
    let seed = std::env::var("TILEGEN_HOSTILE_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x5eed_0000u64);
    let mut cases = Vec::new();
    for (i, base) in bases.iter().enumerate() {
        for m in mutants(base, seed.wrapping_add(i as u64)) {
            cases.push((*base, m));
        }
    }
    let next = AtomicUsize::new(0);
    let tally = Mutex::new([0usize; 3]);
    let failures = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some((base, m)) = cases.get(i) else {
                        break;
                    };
                    let p = code_object(&format!("{}-{i}.hsaco", base.name), &m.bytes);
                    // A small instruction budget: the real kernels need a few thousand per
                    // wave, and mutated loops should not spin for long.
                    let run = run_cmd(base, &p, &["--instruction-budget", "200000"]);
                    let disasm = args(&["emu", "disasm", &p.display().to_string()]);
                    for cmd in [run, disasm] {
                        let o = tilegen(&cmd);
                        let what = format!("{} case {i} ({}), `{}`", base.name, m.what, cmd[1]);
                        match judge(&what, &o) {
                            Ok(v) => tally.lock().unwrap()[v as usize] += 1,
                            Err(e) => failures.lock().unwrap().push(e),
                        }
                    }
                    let _ = std::fs::remove_file(&p);
                }
            });
        }
    });
    let [ok, clean, faults] = *tally.lock().unwrap();
    let failures = failures.into_inner().unwrap();
    eprintln!(
        "hostile code objects: {} mutants of {} code object(s), {} runs: {ok} successes, {clean} clean errors, {faults} kernel faults, {} failures, in {:.1} s",
        cases.len(),
        bases.len(),
        2 * cases.len(),
        failures.len(),
        t.elapsed().as_secs_f64()
    );
    assert!(cases.len() >= 200, "{} cases", cases.len());
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Exit status 1 with `needles` in the message, within `secs`.
fn refused(o: &Outcome, needles: &[&str], secs: f64) {
    assert_eq!(o.ending, Ending::Exit(1), "{o:?}");
    for n in needles {
        assert!(o.stderr.contains(n), "expected `{n}` in: {}", o.stderr);
    }
    assert!(o.elapsed.as_secs_f64() < secs, "{o:?}");
}

#[test]
fn a_huge_private_segment_is_refused_before_allocation() {
    let base = ours();
    let mut b = base.bytes.clone();
    put(&mut b, base.elf.descriptor + 4, 4, 0xffff_fff0);
    let p = code_object("scratch.hsaco", &b);
    let o = tilegen(&run_cmd(base, &p, &[]));
    refused(&o, &["scratch", "4294967280", "--max-memory"], 10.0);
}

#[test]
fn a_huge_p_vaddr_is_refused_before_allocation() {
    let base = ours();
    let mut b = base.bytes.clone();
    let last = *base.elf.load_vaddrs.last().unwrap();
    put(&mut b, last, 8, 280_000_000_000_000);
    let p = code_object("vaddr.hsaco", &b);
    let o = tilegen(&run_cmd(base, &p, &[]));
    refused(&o, &["code object image", "--max-memory"], 10.0);
}

#[test]
fn a_one_tib_output_buffer_is_refused_before_allocation() {
    let base = ours();
    let p = code_object("tib.hsaco", &base.bytes);
    let mut cmd = run_cmd(base, &p, &[]);
    let out = cmd.iter().position(|a| a.starts_with("out:")).unwrap();
    cmd[out] = format!(
        "out:{}:1099511627776",
        scratch_dir().join("c.bin").display()
    );
    let o = tilegen(&cmd);
    refused(&o, &["1099511627776", "--max-memory"], 10.0);
    // With a limit that allows it, the refusal moves to the host, still cleanly.
    cmd.extend(args(&["--max-memory", "2T"]));
    let o = tilegen(&cmd);
    assert!(judge("1 TiB with --max-memory 2T", &o).is_ok(), "{o:?}");
}

#[test]
fn a_65536_by_65536_grid_is_refused() {
    let base = ours();
    let p = code_object("grid.hsaco", &base.bytes);
    let mut cmd = run_cmd(base, &p, &[]);
    let g = cmd.iter().position(|a| a == "--grid").unwrap();
    cmd[g + 1] = "65536,65536".into();
    let o = tilegen(&cmd);
    refused(&o, &["4294967296 workgroups", "--max-workgroups"], 10.0);
}

#[test]
fn an_endless_loop_stops_within_seconds_naming_wave_and_pc() {
    let base = ours();
    let mut b = base.bytes.clone();
    let (start, end) = base.elf.text;
    let mut replaced = 0;
    for at in (start..end).step_by(4) {
        if u32_at(&b, at) == 0xbf81_0000 {
            put(&mut b, at, 4, 0xbf82_ffff);
            replaced += 1;
        }
    }
    assert!(replaced > 0, "no s_endpgm in .text");
    let p = code_object("loop.hsaco", &b);
    let o = tilegen(&run_cmd(base, &p, &[]));
    refused(
        &o,
        &[
            "kernel fault",
            "wave ",
            "pc 0x",
            "s_branch",
            "budget of 10000000 instructions",
            "--instruction-budget",
        ],
        10.0,
    );
}

#[test]
fn a_16777215_workgroup_grid_is_refused_by_default_and_interruptible() {
    let base = ours();
    let p = code_object("big.hsaco", &base.bytes);
    let mut cmd = run_cmd(base, &p, &[]);
    let g = cmd.iter().position(|a| a == "--grid").unwrap();
    cmd[g + 1] = "16777215".into();
    let o = tilegen(&cmd);
    refused(&o, &["16777215 workgroups", "--max-workgroups"], 10.0);
    // Raised, it runs (about an hour here) until Ctrl-C stops it, cleanly and at once.
    cmd.extend(args(&[
        "--max-workgroups",
        "16777215",
        "--max-work-items",
        "4294967295",
    ]));
    let mut child = Command::new(BIN)
        .args(&cmd)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(1));
    let sent = Instant::now();
    // SAFETY: signalling our own child by its id.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if sent.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            panic!("still running 20 s after SIGINT");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let stopped = sent.elapsed();
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert_eq!(status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("interrupted"), "{stderr}");
    assert!(stderr.contains("of 16777215 workgroups"), "{stderr}");
    assert!(stopped < Duration::from_secs(5), "{stopped:?}");
}

#[test]
fn a_missing_output_directory_is_reported_before_running() {
    let base = ours();
    let mut b = base.bytes.clone();
    // An endless kernel: had it run first, the error would be a fault.
    let (start, end) = base.elf.text;
    for at in (start..end).step_by(4) {
        if u32_at(&b, at) == 0xbf81_0000 {
            put(&mut b, at, 4, 0xbf82_ffff);
        }
    }
    let p = code_object("nodir.hsaco", &b);
    let mut cmd = run_cmd(base, &p, &[]);
    let out = cmd.iter().position(|a| a.starts_with("out:")).unwrap();
    cmd[out] = "out:/nonexistent-tilegen-dir/c.bin:16384".into();
    let o = tilegen(&cmd);
    refused(&o, &["/nonexistent-tilegen-dir"], 10.0);
    assert!(!o.stderr.contains("kernel fault"), "{}", o.stderr);
}

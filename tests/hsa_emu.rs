//! tilegen's `HsaDevice` end to end through a real HSA library: `libtilegen_hsa_emu.so`, the
//! HSA C API over the emulator, loaded the way `$TILEGEN_HSA_LIB` loads it. A third of the
//! GEMM matrix of `crates/kernels/tests/emulated.rs` gives results bit-identical to
//! `EmuDevice`; two queues carry concurrent dispatches; a faulting kernel is reported with the
//! emulator's fault; a kernel that never ends is reported by the timeout; a packet with a bad
//! kernel object, a bad queue, an unknown symbol and freed memory are refused with HSA's
//! statuses.

mod hsa_common;

use std::ffi::c_void;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use rayon::prelude::*;
use tilegen::kernels::{CachePolicy, GemmBuffers, MfmaShape, OutDtype};
use tilegen::mx::MxMatrix;
use tilegen::runtime::hsa::sys::{self, Api};
use tilegen::runtime::{
    ArgValue, Buffer, Device, DevicePtr, EmuDevice, HsaDevice, HsaOptions, RuntimeError, kernargs,
};
use tilegen::{CompiledKernel, KernelSpec};

use hsa_common::emulated_hsa;

fn hsa_device(timeout: Duration) -> HsaDevice {
    HsaDevice::open_with(HsaOptions::new().library(emulated_hsa()).timeout(timeout))
        .expect("opening the emulated gfx950 through HSA")
}

fn inputs(
    k: &CompiledKernel,
    m: usize,
    n: usize,
    kd: usize,
    seed: u64,
) -> tilegen::kernels::GemmInputs {
    let a = MxMatrix::random(m, kd, seed).unwrap();
    let b = MxMatrix::random(n, kd, seed ^ 0xb).unwrap();
    k.prepare_inputs(&a, &b).unwrap()
}

/// Every third spec of the emulated matrix: each tile shape of both variants, each flag on in
/// some spec, both output types; every spec on all four M and both (N, K) pairs.
fn a_third_of_the_matrix() -> Vec<KernelSpec> {
    let mut specs = Vec::new();
    let shapes = [(64, 128, 512, 64), (128, 128, 256, 32), (16, 64, 256, 16)];
    for (i, (bm, bn, bk, wn)) in shapes.into_iter().enumerate() {
        let base = KernelSpec::new().bm(bm).bn(bn).bk_elems(bk).wn(wn);
        for (j, spec) in base.preb_flag_variants(3).into_iter().enumerate() {
            if j % 3 == i {
                specs.push(spec.into());
            }
        }
    }
    specs.push(KernelSpec::new().out_dtype(OutDtype::F32).into());
    specs.push(
        KernelSpec::new()
            .b_prefetch(true)
            .b_cache_policy(CachePolicy::Streaming)
            .into(),
    );
    for (i, (bm, bn, bk, wm, wn, mma)) in [
        (128, 128, 128, 64, 64, MfmaShape::M16N16K128),
        (64, 64, 256, 32, 32, MfmaShape::M32N32K64),
        (32, 64, 512, 32, 32, MfmaShape::M16N16K128),
    ]
    .into_iter()
    .enumerate()
    {
        specs.push(
            KernelSpec::lds()
                .bm(bm)
                .bn(bn)
                .bk_elems(bk)
                .wm(wm)
                .wn(wn)
                .mma(mma)
                .dram_to_lds(i == 1)
                .into(),
        );
    }
    specs.push(KernelSpec::new().bk_elems(768).dram_to_lds(true).into());
    specs.push(KernelSpec::lds().bk_elems(384).into());
    specs
}

#[test]
fn a_third_of_the_gemm_matrix_is_bit_identical_to_the_emulator() {
    let t = Instant::now();
    let hsa = hsa_device(Duration::from_secs(300));
    let specs = a_third_of_the_matrix();
    let runs = std::sync::atomic::AtomicUsize::new(0);
    let failures: Vec<String> = specs
        .par_iter()
        .flat_map(|spec| {
            let k = match spec.build() {
                Ok(k) => k,
                Err(e) => return vec![format!("{}: {e}", spec.kernel_name())],
            };
            let emu = EmuDevice::new();
            let (on_emu, on_hsa) = (k.load(&emu).unwrap(), k.load(&hsa).unwrap());
            let mut errs = Vec::new();
            for (i, m) in [1, 17, 64, 200].into_iter().enumerate() {
                for (j, (n, kd)) in [(2 * spec.bn as usize + 16, 768), (64, 7168)]
                    .into_iter()
                    .enumerate()
                {
                    let x = inputs(&k, m, n, kd, (i * 2 + j) as u64);
                    let want = k.run_loaded(&emu, &on_emu, &x);
                    let got = k.run_loaded(&hsa, &on_hsa, &x);
                    runs.fetch_add(1, Ordering::Relaxed);
                    match (want, got) {
                        (Ok((w, _)), Ok((g, report))) => {
                            if w.bytes() != g.bytes() {
                                errs.push(format!("{} {m}x{n}x{kd}: C differs", k.name()));
                            }
                            assert!(report.stats.is_none(), "HSA reports no instruction counts");
                        }
                        (w, g) => errs.push(format!(
                            "{} {m}x{n}x{kd}: emulator {:?}, HSA {:?}",
                            k.name(),
                            w.err().map(|e| e.to_string()),
                            g.err().map(|e| e.to_string())
                        )),
                    }
                }
            }
            errs
        })
        .collect();
    assert!(
        failures.is_empty(),
        "{} failure(s):\n{}",
        failures.len(),
        failures.join("\n")
    );
    eprintln!(
        "{} specs, {} GEMMs on both devices in {:.1} s",
        specs.len(),
        runs.into_inner(),
        t.elapsed().as_secs_f64()
    );
}

/// A GEMM dispatched without waiting: its signal and the buffers that must outlive it.
struct Pending<'d> {
    signal: tilegen::runtime::Signal,
    c: Buffer<'d>,
    _operands: [Buffer<'d>; 4],
    want: Vec<u8>,
}

fn submit<'d>(
    dev: &'d dyn Device,
    module: &tilegen::runtime::Module,
    k: &CompiledKernel,
    seed: u64,
) -> Pending<'d> {
    let (m, n, kd) = (17 + seed as usize, 144, 512);
    let x = inputs(k, m, n, kd, seed);
    let want = {
        let emu = EmuDevice::new();
        k.run(&emu, &x).unwrap().0.bytes().to_vec()
    };
    let c = Buffer::new(dev, k.c_bytes(m, n) as u64).unwrap();
    let ops = [x.a(), x.b(), x.sfa(), x.sfb()].map(|b| Buffer::upload(dev, b).unwrap());
    let bufs = GemmBuffers {
        c: c.ptr(),
        a: ops[0].ptr(),
        b: ops[1].ptr(),
        sfa: ops[2].ptr(),
        sfb: ops[3].ptr(),
    };
    let config = k.launch_config(m, n);
    let args = [
        ArgValue::Ptr(bufs.c),
        ArgValue::Ptr(bufs.a),
        ArgValue::Ptr(bufs.b),
        ArgValue::Ptr(bufs.sfa),
        ArgValue::Ptr(bufs.sfb),
        ArgValue::I32(m as i32),
        ArgValue::I32(n as i32),
        ArgValue::I32(kd as i32),
    ];
    let segment = kernargs::build(module.kernel(k.name()).unwrap(), &config, &args).unwrap();
    let signal = dev.dispatch(module, k.name(), &config, &segment).unwrap();
    Pending {
        signal,
        c,
        _operands: ops,
        want,
    }
}

#[test]
fn two_queues_carry_concurrent_dispatches() {
    let k = KernelSpec::new().build().unwrap();
    // Two devices on one runtime: two queues, each with its own packet processor.
    let devices = [
        hsa_device(Duration::from_secs(120)),
        hsa_device(Duration::from_secs(120)),
    ];
    std::thread::scope(|s| {
        for (d, dev) in devices.iter().enumerate() {
            let k = &k;
            s.spawn(move || {
                let module = k.load(dev).unwrap();
                // Four dispatches in flight on each queue before the first wait.
                let pending: Vec<Pending> = (0..4)
                    .map(|i| submit(dev, &module, k, (d * 4 + i) as u64))
                    .collect();
                for (i, p) in pending.into_iter().enumerate() {
                    dev.wait(p.signal).unwrap();
                    assert_eq!(p.c.to_vec().unwrap(), p.want, "queue {d} dispatch {i}");
                }
            });
        }
    });
}

#[test]
fn a_faulting_kernel_is_reported_with_the_emulators_fault() {
    let k = KernelSpec::new().build().unwrap();
    let dev = hsa_device(Duration::from_secs(60));
    let module = k.load(&dev).unwrap();
    let x = inputs(&k, 17, 144, 512, 1);
    let c = Buffer::new(&dev, k.c_bytes(17, 144) as u64).unwrap();
    let ops = [x.a(), x.b(), x.sfa(), x.sfb()].map(|b| Buffer::upload(&dev, b).unwrap());
    // A points nowhere: the buffer loads from it fault.
    let bad = 0x7e00_0000_0000u64;
    let bufs = GemmBuffers {
        c: c.ptr(),
        a: DevicePtr(bad),
        b: ops[1].ptr(),
        sfa: ops[2].ptr(),
        sfb: ops[3].ptr(),
    };
    let e = k.launch(&dev, &module, &bufs, 17, 144, 512).unwrap_err();
    let tilegen::kernels::LaunchError::Runtime(RuntimeError::Fault(f)) = &e else {
        panic!("not a fault: {e}");
    };
    assert_eq!(f.kernel(), k.name());
    for needle in [
        "workgroup (",
        "wave ",
        "pc 0x",
        "buffer_load",
        "status 0x29",
    ] {
        assert!(f.message().contains(needle), "{needle:?} missing from: {f}");
    }
    let address = f.fault_address().expect("the memory fault's address");
    assert!((bad..bad + (1 << 20)).contains(&address), "{address:#x}");
    let hsa_error = f
        .cause()
        .and_then(|c| c.downcast_ref::<tilegen::runtime::HsaError>());
    assert_eq!(
        hsa_error.and_then(|h| h.status()),
        Some(sys::STATUS_ERROR_MEMORY_APERTURE_VIOLATION)
    );
    // The queue is replaced: the next launch runs.
    let (got, _) = k.run_loaded(&dev, &module, &x).unwrap();
    let (want, _) = k.run(&EmuDevice::new(), &x).unwrap();
    assert_eq!(got.bytes(), want.bytes());
}

/// The GEMM's code object with every `s_endpgm` made `s_branch -1`: it never ends.
fn never_ending(k: &CompiledKernel) -> Vec<u8> {
    let mut bytes = k.code_object().to_vec();
    let co = tilegen::codeobj::CodeObject::parse(&bytes).unwrap();
    let text = &co.text.1;
    let at = bytes
        .windows(text.len())
        .position(|w| w == text.as_slice())
        .expect(".text in the file");
    let mut replaced = 0;
    for i in (at..at + text.len()).step_by(4) {
        if bytes[i..i + 4] == 0xbf81_0000u32.to_le_bytes() {
            bytes[i..i + 4].copy_from_slice(&0xbf82_ffffu32.to_le_bytes());
            replaced += 1;
        }
    }
    assert!(replaced > 0, "no s_endpgm");
    bytes
}

const CHILD: &str = "TILEGEN_TEST_NEVER_ENDING_CHILD";

/// Runs in a child process (the emulated runtime then has no instruction budget, so the loop
/// really never ends): the wait gives up after the timeout and says the kernel may be hung;
/// the device destroys the queue (stopping the kernel) and goes on working.
#[test]
fn never_ending_kernel_child() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let k = KernelSpec::new().build().unwrap();
    let dev = hsa_device(Duration::from_millis(1500));
    let module = dev.load(&never_ending(&k)).unwrap();
    let x = inputs(&k, 17, 144, 512, 2);
    let t = Instant::now();
    let e = k.run_loaded(&dev, &module, &x).unwrap_err();
    let waited = t.elapsed();
    assert!(
        matches!(&e, tilegen::kernels::LaunchError::Runtime(RuntimeError::Timeout { kernel, .. }) if kernel == k.name()),
        "{e}"
    );
    assert!(e.to_string().contains("hung"), "{e}");
    assert!(waited < Duration::from_secs(10), "{waited:?}");
    let fine = k.load(&dev).unwrap();
    let (got, _) = k.run_loaded(&dev, &fine, &x).unwrap();
    let (want, _) = k.run(&EmuDevice::new(), &x).unwrap();
    assert_eq!(got.bytes(), want.bytes());
    println!("timed out after {waited:?}");
}

#[test]
fn a_kernel_that_never_ends_is_reported_by_the_timeout() {
    let lib = emulated_hsa();
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "never_ending_kernel_child", "--nocapture"])
        .env(CHILD, "1")
        .env("TILEGEN_HSA_EMU_INSTRUCTION_BUDGET", "0")
        .env(sys::LIBRARY_ENV, lib)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("timed out after") && text.contains("1 passed"),
        "{}\n{}",
        text,
        String::from_utf8_lossy(&out.stderr)
    );
}

static QUEUE_ERROR: AtomicU32 = AtomicU32::new(0);

unsafe extern "C" fn record_queue_error(status: u32, _queue: *mut sys::Queue, _data: *mut c_void) {
    QUEUE_ERROR.store(status, Ordering::SeqCst);
}

/// Raw HSA calls: what HsaDevice would never do, the runtime must refuse.
#[test]
fn misuse_is_refused_with_hsas_statuses() {
    let api = Api::load(emulated_hsa()).unwrap();
    let text = |s: u32| api.status_text(s);
    // SAFETY (every call below): arguments as hsa.h prescribes, or deliberately wrong ones the
    // runtime must refuse (it checks handles and pointers it owns).
    unsafe {
        assert_eq!((api.hsa_init)(), 0);
        let gpu = tilegen::runtime::hsa::agents(api.path())
            .unwrap()
            .into_iter()
            .find(|a| a.is_gpu())
            .unwrap();
        // A packet whose kernel object is no kernel: the queue reports it.
        let mut q: *mut sys::Queue = std::ptr::null_mut();
        assert_eq!(
            (api.hsa_queue_create)(
                gpu.handle,
                64,
                sys::QUEUE_TYPE_MULTI,
                Some(record_queue_error),
                std::ptr::null_mut(),
                u32::MAX,
                u32::MAX,
                &mut q
            ),
            0
        );
        let mut done = sys::Signal::default();
        assert_eq!(
            (api.hsa_signal_create)(1, 0, std::ptr::null(), &mut done),
            0
        );
        let index = (api.hsa_queue_add_write_index_scacq_screl)(q, 1);
        let slot = (*q)
            .base_address
            .cast::<sys::KernelDispatchPacket>()
            .add((index % (*q).size as u64) as usize);
        let mut p = sys::KernelDispatchPacket {
            workgroup_size_x: 64,
            workgroup_size_y: 1,
            workgroup_size_z: 1,
            grid_size_x: 64,
            grid_size_y: 1,
            grid_size_z: 1,
            kernel_object: 0xdead_beef,
            completion_signal: done,
            ..Default::default()
        };
        p.header = sys::PACKET_TYPE_INVALID;
        slot.write(p);
        let header = sys::PACKET_TYPE_KERNEL_DISPATCH as u32 | 1 << 16;
        (*(slot as *const AtomicU32)).store(header, Ordering::Release);
        (api.hsa_signal_store_screlease)((*q).doorbell_signal, index as i64);
        let t = Instant::now();
        while QUEUE_ERROR.load(Ordering::SeqCst) == 0 && t.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(5));
        }
        let status = QUEUE_ERROR.load(Ordering::SeqCst);
        assert_eq!(
            status,
            sys::STATUS_ERROR_INVALID_PACKET_FORMAT,
            "{}",
            text(status)
        );
        assert!(
            text(status).contains("kernel_object 0xdeadbeef"),
            "{}",
            text(status)
        );
        assert_eq!((api.hsa_signal_load_scacquire)(done), 1, "never completed");

        // A pointer that is no queue.
        let bogus = 0x1234usize as *mut sys::Queue;
        assert_eq!(
            (api.hsa_queue_destroy)(bogus),
            sys::STATUS_ERROR_INVALID_QUEUE
        );
        assert_eq!((api.hsa_queue_destroy)(q), 0);
        assert_eq!((api.hsa_queue_destroy)(q), sys::STATUS_ERROR_INVALID_QUEUE);

        // An unknown symbol.
        let k = KernelSpec::new().build().unwrap();
        let co = k.code_object();
        let mut reader = sys::CodeObjectReader::default();
        assert_eq!(
            (api.hsa_code_object_reader_create_from_memory)(
                co.as_ptr().cast(),
                co.len(),
                &mut reader
            ),
            0
        );
        let mut exe = sys::Executable::default();
        assert_eq!(
            (api.hsa_executable_create_alt)(0, 0, std::ptr::null(), &mut exe),
            0
        );
        assert_eq!(
            (api.hsa_executable_load_agent_code_object)(
                exe,
                gpu.handle,
                reader,
                std::ptr::null(),
                std::ptr::null_mut()
            ),
            0
        );
        assert_eq!((api.hsa_executable_freeze)(exe, std::ptr::null()), 0);
        let mut symbol = sys::ExecutableSymbol::default();
        let status = (api.hsa_executable_get_symbol_by_name)(
            exe,
            c"no_such_kernel.kd".as_ptr(),
            &gpu.handle,
            &mut symbol,
        );
        assert_eq!(status, sys::STATUS_ERROR_INVALID_SYMBOL_NAME);
        assert!(
            text(status).contains(&format!("{}.kd", k.name())),
            "{}",
            text(status)
        );
        assert_eq!(
            (api.hsa_executable_freeze)(exe, std::ptr::null()),
            sys::STATUS_ERROR_FROZEN_EXECUTABLE
        );
        assert_eq!((api.hsa_executable_destroy)(exe), 0);
        assert_eq!(
            (api.hsa_executable_destroy)(exe),
            sys::STATUS_ERROR_INVALID_EXECUTABLE
        );
        assert_eq!((api.hsa_code_object_reader_destroy)(reader), 0);

        // Freed memory.
        let pool = gpu.pools[0].handle;
        let mut ptr = std::ptr::null_mut();
        assert_eq!(
            (api.hsa_amd_memory_pool_allocate)(pool, 4096, 0, &mut ptr),
            0
        );
        let data = [7u8; 64];
        assert_eq!((api.hsa_memory_copy)(ptr, data.as_ptr().cast(), 64), 0);
        assert_eq!((api.hsa_amd_memory_pool_free)(ptr), 0);
        let status = (api.hsa_memory_copy)(ptr, data.as_ptr().cast(), 64);
        assert_eq!(status, sys::STATUS_ERROR_INVALID_ARGUMENT);
        assert!(text(status).contains("not allocated"), "{}", text(status));
        let status = (api.hsa_amd_memory_pool_free)(ptr);
        assert_eq!(status, sys::STATUS_ERROR_INVALID_ARGUMENT);
        assert!(text(status).contains("freed already"), "{}", text(status));
        assert_eq!(
            (api.hsa_amd_memory_pool_allocate)(pool, 0, 0, &mut ptr),
            sys::STATUS_ERROR_INVALID_ALLOCATION
        );

        // Signals.
        assert_eq!((api.hsa_signal_destroy)(done), 0);
        assert_eq!(
            (api.hsa_signal_destroy)(done),
            sys::STATUS_ERROR_INVALID_SIGNAL
        );
        assert_eq!((api.hsa_shut_down)(), 0);
    }
}

#[test]
fn every_symbol_hsa_device_needs_is_exported() {
    let api = Api::load(emulated_hsa()).unwrap();
    assert_eq!(api.path(), emulated_hsa());
    assert_eq!(sys::SYMBOLS.len(), 32);
}

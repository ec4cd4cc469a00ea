//! Device measurements as AITER's tuned table: the rates AITER writes are the ones this crate
//! computes (on every row of the wheel's table), the wheel's rows written back read back the
//! same, and a split-K launch timed on a device (the emulator here) is checked against the
//! reference after the repeats that added into its output.

use tilegen_aiter::calibrate::device::{DeviceTimer, TimingSettings};
use tilegen_aiter::{
    GemmLaunch, GemmProblem, MeasuredRow, TableRow, aiter_rates, read_tuned, write_tuned,
};
use tilegen_runtime::EmuDevice;

mod aiter_corpus;
use aiter_corpus::corpus;

#[test]
fn aiters_rates_and_rows_are_reproduced() {
    let Some(corpus) = corpus() else { return };
    let table = corpus.tuned_table().unwrap();
    let mut measured = Vec::new();
    for r in &table {
        // The tuner rounds the rates of the time it rounded; a value at a rounding tie may
        // land on either side.
        let (tflops, bw) = aiter_rates(r.m(), r.n(), r.k(), r.us());
        assert!(
            (tflops - r.tflops()).abs() <= 0.0100001
                && (bw - r.bandwidth_gbps()).abs() <= 0.0100001,
            "line {}: {tflops} TFLOP/s, {bw} GB/s; the table says {} and {}",
            r.line(),
            r.tflops(),
            r.bandwidth_gbps()
        );
        measured.push(
            TableRow::measured(MeasuredRow {
                cu_num: r.cu_num(),
                m: r.m(),
                n: r.n(),
                k: r.k(),
                kernel_id: r.kernel_id(),
                log2_k_split: r.log2_k_split(),
                us: r.us(),
                kernel_name: r.kernel_name().to_string(),
                err_ratio: r.err_ratio(),
            })
            .unwrap(),
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("again.csv");
    write_tuned(&path, &measured).unwrap();
    let back = read_tuned(&path).unwrap();
    assert_eq!(back.len(), table.len());
    for (a, b) in table.iter().zip(&back) {
        assert_eq!(
            (
                a.cu_num(),
                a.m(),
                a.n(),
                a.k(),
                a.kernel_id(),
                a.log2_k_split()
            ),
            (
                b.cu_num(),
                b.m(),
                b.n(),
                b.k(),
                b.kernel_id(),
                b.log2_k_split()
            )
        );
        assert_eq!(
            (a.us(), a.kernel_name(), a.line()),
            (b.us(), b.kernel_name(), b.line())
        );
        assert!(
            (a.err_ratio() - b.err_ratio()).abs() <= 5e-5,
            "line {}",
            a.line()
        );
    }
}

#[test]
fn a_split_k_launch_is_checked_after_its_repeats() {
    let Some(corpus) = corpus() else { return };
    let kernel = corpus
        .kernels()
        .iter()
        .find(|k| k.tile_label() == "128x512")
        .unwrap();
    let device = EmuDevice::new();
    let mut timer = DeviceTimer::new(&device, TimingSettings::new(1, 2).unwrap());
    // A ragged M, unsplit: the kernel sums in f32 and rounds once, inside AITER's tolerance.
    let problem = GemmProblem::new(40, 512, 1024).unwrap();
    let whole = timer
        .time_launch(&GemmLaunch::new(kernel, problem).unwrap())
        .unwrap();
    assert_eq!(whole.times_us().len(), 2);
    assert!(whole.times_us().iter().all(|&us| us > 0.0));
    // Every one of 8 sampled rows of the 40 and 256 of the 512 columns.
    assert_eq!((whole.checked(), whole.mismatches()), (8 * 256, 0));
    // Four K slices of 256 that add into D with bf16 atomics: each add rounds the running sum
    // to bf16, which puts some elements (where the slices cancel) outside the 1% tolerance,
    // about 5%. Three launches into a D never zeroed would put nearly all of them outside.
    let launch = GemmLaunch::new(kernel, problem.with_log2_k_split(2).unwrap()).unwrap();
    assert_eq!(launch.grid(), [1, 1, 4]);
    let split = timer.time_launch(&launch).unwrap();
    println!(
        "split-K 4: {} of {} checked elements outside AITER's tolerance",
        split.mismatches(),
        split.checked()
    );
    assert!(
        split.err_ratio() < 0.1,
        "{} of {}: D was not zeroed before the checked launch",
        split.mismatches(),
        split.checked()
    );
}

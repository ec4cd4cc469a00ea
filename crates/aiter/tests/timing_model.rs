//! The cycle-level timing model as the calibration harness runs it, on a handful of rows of
//! the calibration split: structural facts only (it finishes within its budget, more K is
//! never faster, the largest shapes are bound by the matrix cores). How close it comes to the
//! measured times is reported by `cargo xtask calibrate`, not asserted here.

use tilegen_aiter::calibrate::{CalibrationRow, Set, TimingModel, calibration_rows};
use tilegen_timing::{Bound, Params};

mod aiter_corpus;
use aiter_corpus::corpus;

/// CPU seconds of one core the model may take per row.
const BUDGET_SECONDS: f64 = 2.0;

/// The calibration row of `tile` at `m x n x k`.
fn row<'a>(rows: &'a [CalibrationRow], tile: &str, m: u32, n: u32, k: u32) -> &'a CalibrationRow {
    let r = rows
        .iter()
        .find(|r| {
            let t = r.row();
            r.kernel().tile_label() == tile && (t.m(), t.n(), t.k()) == (m, n, k)
        })
        .unwrap_or_else(|| panic!("no {tile} row at {m}x{n}x{k}"));
    assert_eq!(r.set(), Set::Calibration, "{tile} {m}x{n}x{k}");
    r
}

#[test]
fn the_model_is_monotonic_in_k_within_budget_and_mfma_bound_at_the_largest_shapes() {
    let Some(corpus) = corpus() else { return };
    let rows = calibration_rows(&corpus).unwrap();
    let model = TimingModel::new(Params::mi355x());
    let run = |r: &CalibrationRow| {
        let (p, cpu) = model.run(r.row(), r.kernel()).unwrap();
        let t = r.row();
        eprintln!(
            "{:>5}x{:<5}x{:<5} on {:<7}: {:8.2} us (measured {:8.2}), bound {:?}, mfma busy {:.2}, {cpu:.2} s CPU",
            t.m(),
            t.n(),
            t.k(),
            r.kernel().tile_label(),
            p.us,
            t.us(),
            p.bound,
            p.mfma_busy
        );
        assert!(p.us.is_finite() && p.us > p.launch_us, "{p:?}");
        assert!(
            cpu < BUDGET_SECONDS,
            "{}x{}x{} on {} took {cpu:.2} s of CPU",
            t.m(),
            t.n(),
            t.k(),
            r.kernel().tile_label()
        );
        p
    };
    // More K is never faster: a decode-sized and a mid-sized shape, short to long K loops
    // (the longest are timed by extrapolating two shorter simulations).
    for (tile, m, n, ks) in [
        ("32x128", 1, 8192, &[1024, 2048, 3584, 28672][..]),
        (
            "160x256",
            1152,
            8192,
            &[1024, 2048, 3584, 7168, 8192, 28672][..],
        ),
    ] {
        let mut last = 0.0;
        for &k in ks {
            let us = run(row(&rows, tile, m, n, k)).us;
            assert!(
                us >= last,
                "{tile} {m}x{n}: K = {k} takes {us} us, less than {last}"
            );
            last = us;
        }
    }
    // The largest shapes of the two large-tile kernels keep the matrix cores busy.
    for (tile, m, n, k) in [
        ("128x512", 32768, 10240, 8192),
        ("160x256", 3200, 16384, 26624),
    ] {
        let p = run(row(&rows, tile, m, n, k));
        assert_eq!(p.bound, Bound::Mfma, "{tile} {m}x{n}x{k}: {p:?}");
    }
}

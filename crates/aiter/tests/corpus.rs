//! The extracted AITER corpus as this crate reads it: every code object carries the argument
//! layout the kernargs module writes, every MI355X asm row of the tuned table names an indexed
//! kernel and is a launch the kernels can run, and the fixed split is what its docs say.

use tilegen_aiter::KERNARG_BYTES;
use tilegen_aiter::calibrate::{
    CALIBRATION_TILES, Evaluation, Predictor, Roofline, Set, calibration_rows, describe_row,
};

mod aiter_corpus;
use aiter_corpus::corpus;

#[test]
fn every_kernel_has_the_argument_layout() {
    let Some(corpus) = corpus() else { return };
    assert_eq!(corpus.kernels().len(), 35);
    assert_eq!(corpus.bpreshuffle_kernels().count(), 34);
    let split: Vec<String> = corpus
        .kernels()
        .iter()
        .filter(|k| k.supports_split_k())
        .map(|k| k.tile_label())
        .collect();
    assert_eq!(split, ["256x256", "128x512"]);
    for k in corpus.kernels() {
        let image = k.load().unwrap_or_else(|e| panic!("{}: {e}", k.name()));
        // All of a CU's LDS: one workgroup per CU.
        assert_eq!(image.lds_bytes(), 160 * 1024, "{}", k.name());
        assert!(k.name().ends_with(&k.tile_label()), "{}", k.name());
    }
    assert_eq!(KERNARG_BYTES, 384);
}

#[test]
fn the_table_rows_are_launches_and_the_split_is_fixed() {
    let Some(corpus) = corpus() else { return };
    let rows = calibration_rows(&corpus).unwrap();
    assert_eq!(rows.len(), 796);
    let calibration = rows.iter().filter(|r| r.set() == Set::Calibration).count();
    assert_eq!((calibration, rows.len() - calibration), (211, 585));
    for r in &rows {
        let tile = (r.kernel().tile_m(), r.kernel().tile_n());
        assert_eq!(
            r.set() == Set::Calibration,
            CALIBRATION_TILES.contains(&tile)
        );
        let d = describe_row(r.row(), r.kernel())
            .unwrap_or_else(|e| panic!("table line {}: {e}", r.row().line()));
        assert_eq!(d.kernargs_unbound().len(), KERNARG_BYTES);
        assert!(d.grid().iter().all(|&g| g > 0));
    }
    // Every calibration kernel has rows.
    for (tm, tn) in CALIBRATION_TILES {
        assert!(
            rows.iter()
                .any(|r| (r.kernel().tile_m(), r.kernel().tile_n()) == (tm, tn)),
            "no rows for the calibration kernel {tm}x{tn}"
        );
    }
    assert!(!corpus.untuned_shapes().unwrap().is_empty());
}

#[test]
fn the_roofline_fits_and_predicts_every_row() {
    let Some(corpus) = corpus() else { return };
    let rows = calibration_rows(&corpus).unwrap();
    let roofline = Roofline::fit(&rows).unwrap();
    let eval = Evaluation::run(&rows, &[&roofline as &dyn Predictor]);
    for i in 0..rows.len() {
        let us = eval.prediction(0, i).unwrap().as_ref().unwrap();
        assert!(us.is_finite() && *us > 0.0);
    }
    let held = eval.stats(0, Set::HeldOut, &tilegen_aiter::calibrate::Group::All);
    assert_eq!((held.rows(), held.failed()), (585, 0));
    assert!(held.median().is_finite());
}

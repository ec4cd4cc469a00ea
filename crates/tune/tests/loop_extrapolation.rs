//! The tuner's model evaluations time long K loops from two short runs: against a simulation
//! of every K step, on kernels of both families with and without the prefetching pipeline,
//! the extrapolated time stays within 2%, and its cost does not grow with K.

use std::time::Instant;

use tilegen_kernels::{KernelSpec, MfmaShape, Variant};
use tilegen_timing::TimingOptions;
use tilegen_tune::Shape;
use tilegen_tune::eval::{ModelEvaluator, compile};

#[test]
fn extrapolated_k_loops_agree_with_every_step_simulated() {
    let specs: Vec<KernelSpec> = vec![
        KernelSpec::preb().into(),
        KernelSpec::preb().b_prefetch(true).into(),
        KernelSpec::lds().into(),
        KernelSpec::lds().mma(MfmaShape::M32N32K64).into(),
    ];
    let options = TimingOptions {
        max_cus: Some(2),
        ..TimingOptions::default()
    };
    let sampled = ModelEvaluator {
        options: options.clone(),
        ..ModelEvaluator::default()
    };
    let every_step = ModelEvaluator {
        options,
        extrapolation: None,
        ..ModelEvaluator::default()
    };
    for spec in specs {
        let kernel = compile(&spec).unwrap();
        assert!(matches!(spec.variant(), Variant::Preb | Variant::Lds));
        // 40 K tiles: past the two short runs (4 and 16 steps) together.
        let shape = Shape {
            m: 64,
            n: 512,
            k: 40 * spec.bk_elems,
        };
        let t0 = Instant::now();
        let x = sampled.predict(&kernel, &shape).unwrap();
        let tx = t0.elapsed();
        let t1 = Instant::now();
        let full = every_step.predict(&kernel, &shape).unwrap();
        let tf = t1.elapsed();
        let err = (x.us - full.us) / full.us;
        println!(
            "{} K={}: extrapolated {:.2} us ({tx:.2?}), every step {:.2} us ({tf:.2?}): {:+.2}%",
            kernel.name(),
            shape.k,
            x.us,
            full.us,
            100.0 * err
        );
        assert!(
            x.method_detail.contains("40 loop steps extrapolated"),
            "{}",
            x.method_detail
        );
        assert!(err.abs() < 0.02, "{}: {:+.2}%", kernel.name(), 100.0 * err);
    }

    // K = 2^19 on a few hundred workgroups costs two short runs, not 1,024 steps.
    let kernel = compile(&KernelSpec::preb().into()).unwrap();
    let shape = Shape {
        m: 256,
        n: 7168,
        k: 1 << 19,
    };
    let t = Instant::now();
    let p = ModelEvaluator::default().predict(&kernel, &shape).unwrap();
    println!(
        "{} {}x{}x{}: {:.1} us predicted in {:.2?} ({})",
        kernel.name(),
        shape.m,
        shape.n,
        shape.k,
        p.us,
        t.elapsed(),
        p.method_detail
    );
    assert!(p.method_detail.starts_with("1024 loop steps extrapolated"));
}

//! Preshuffle throughput against a plain `copy_from_slice` of the same bytes.
//!
//! `cargo bench -p tilegen-mx --bench preshuffle` (add `-- --quick`, or set
//! `PRESHUFFLE_QUICK=1`, for a short run). Sizes are gpt-oss-like: one expert's B, N = 8192,
//! K = 7168 (3584 packed bytes), about 29 MB. GB/s counts each byte once.

use std::hint::black_box;
use std::time::{Duration, Instant};

use tilegen_mx::Shuffler;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort_unstable();
    v[v.len() / 2]
}

fn time(reps: usize, mut f: impl FnMut()) -> Duration {
    f(); // warm-up: page faults, rayon pool start-up
    median(
        (0..reps)
            .map(|_| {
                let t = Instant::now();
                f();
                t.elapsed()
            })
            .collect(),
    )
}

fn main() {
    // `cargo test --all-targets` runs benches without `--bench`: keep that pass short.
    let quick = !std::env::args().any(|a| a == "--bench")
        || std::env::args().any(|a| a == "--quick")
        || std::env::var_os("PRESHUFFLE_QUICK").is_some_and(|v| v != "0");
    let reps = if quick { 3 } else { 21 };
    let (e, n, k_bytes) = (1usize, 8192usize, 3584usize);
    let shuffler = Shuffler::new(e).expect("e >= 1");
    let len = shuffler.b_len(n, k_bytes).expect("size fits");
    // A cheap deterministic pattern: the bench measures data movement, not the data.
    let src: Vec<u8> = (0..len)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[3])
        .collect();
    let mut dst = vec![0u8; len];
    let mut back = vec![0u8; len];

    let t_copy = time(reps, || {
        dst.copy_from_slice(black_box(&src));
        black_box(&dst);
    });
    let t_shuffle = time(reps, || {
        shuffler
            .preshuffle_b_5d(n, k_bytes, black_box(&src), &mut dst)
            .expect("valid sizes");
        black_box(&dst);
    });
    let t_unshuffle = time(reps, || {
        shuffler
            .unshuffle_b_5d(n, k_bytes, black_box(&dst), &mut back)
            .expect("valid sizes");
        black_box(&back);
    });
    assert!(back == src, "unshuffle(preshuffle(src)) != src");

    let gbs = |t: Duration| len as f64 / t.as_secs_f64() / 1e9;
    println!(
        "preshuffle_b_5d E={e} N={n} K_BYTES={k_bytes} ({:.1} MB), median of {reps}, {} rayon threads",
        len as f64 / 1e6,
        rayon::current_num_threads()
    );
    println!(
        "  copy_from_slice  {:>8.3} ms  {:>6.2} GB/s",
        t_copy.as_secs_f64() * 1e3,
        gbs(t_copy)
    );
    println!(
        "  preshuffle_b_5d  {:>8.3} ms  {:>6.2} GB/s  ({:.2}x copy)",
        t_shuffle.as_secs_f64() * 1e3,
        gbs(t_shuffle),
        t_copy.as_secs_f64() / t_shuffle.as_secs_f64()
    );
    println!(
        "  unshuffle_b_5d   {:>8.3} ms  {:>6.2} GB/s  ({:.2}x copy)",
        t_unshuffle.as_secs_f64() * 1e3,
        gbs(t_unshuffle),
        t_copy.as_secs_f64() / t_unshuffle.as_secs_f64()
    );
}

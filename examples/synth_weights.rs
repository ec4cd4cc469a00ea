//! Writes a safetensors file of random MXFP4 weights shaped like a gpt-oss MoE layer (pairs of
//! `<name>_blocks` [E, N, K/32, 16] and `<name>_scales` [E, N, K/32], K = 2880 so the
//! preshuffle has to pad K), plus a non-MX tensor that must pass through unchanged.
//!
//! `cargo run --release --example synth_weights -- OUT.safetensors [EXPERTS]`

use std::collections::HashMap;

use safetensors::tensor::{Dtype, TensorView};
use tilegen::mx::MxMatrix;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let out = args
        .next()
        .ok_or("usage: synth_weights OUT.safetensors [EXPERTS]")?;
    let experts: usize = args.next().map(|s| s.parse()).transpose()?.unwrap_or(4);
    let hidden = 2880;
    let mut owned: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
    for (name, n) in [
        ("block.0.mlp.mlp1_weight", 2 * hidden),
        ("block.0.mlp.mlp2_weight", hidden),
    ] {
        let (mut blocks, mut scales) = (Vec::new(), Vec::new());
        for e in 0..experts {
            let m = MxMatrix::random(n, hidden, (e as u64) << 8 | n as u64)?;
            blocks.extend_from_slice(m.data());
            scales.extend_from_slice(m.scales());
        }
        let kb = hidden / 32;
        owned.push((format!("{name}_blocks"), vec![experts, n, kb, 16], blocks));
        owned.push((format!("{name}_scales"), vec![experts, n, kb], scales));
    }
    let bias: Vec<u8> = (0..hidden)
        .flat_map(|i| (i as f32 * 0.5).to_le_bytes())
        .collect();
    let views: Vec<(String, TensorView<'_>)> = owned
        .iter()
        .map(|(n, s, b)| Ok((n.clone(), TensorView::new(Dtype::U8, s.clone(), b)?)))
        .chain(std::iter::once(Ok((
            "block.0.mlp.mlp2_bias".to_string(),
            TensorView::new(Dtype::F32, vec![hidden], &bias)?,
        ))))
        .collect::<Result<_, safetensors::SafeTensorError>>()?;
    let meta = HashMap::from([("format".to_string(), "pt".to_string())]);
    safetensors::serialize_to_file(views, Some(meta), std::path::Path::new(&out))?;
    let bytes = std::fs::metadata(&out)?.len();
    println!(
        "wrote {out}: {experts} experts x (mlp1 N={} + mlp2 N={hidden}) x K={hidden}, {:.1} MB",
        2 * hidden,
        bytes as f64 / 1e6
    );
    Ok(())
}

//! One MoE layer of a preshuffled safetensors file, read one expert at a time.
//!
//! gpt-oss stores a layer's experts as grouped MXFP4 pairs: `<prefix>gate_up_proj`
//! (`mlp1_weight` in OpenAI's own layout), `[E, 2 I, H/32, 16]` with gate and up rows
//! interleaved, and `<prefix>down_proj` (`mlp2_weight`), `[E, H, I/32, 16]`, each with its
//! `_blocks` and `_scales`; and bf16 biases `<prefix>gate_up_proj_bias` (`mlp1_bias`) `[E, 2 I]`
//! and `<prefix>down_proj_bias` (`mlp2_bias`) `[E, H]`. After [`Plan::preshuffle`](super::Plan)
//! each expert's group is one contiguous slice of each tensor, in the layout the grouped
//! preshuffled-B kernels read.
//!
//! [`MoeWeightFile::open`] maps the file and checks, before any weight is read, its header, its
//! `tilegen.preshuffle` record against its tensors (as an unshuffle checks them) and the layer's
//! tensors against each other. [`MoeWeightFile::expert`] then reads one expert: a layer whose
//! experts do not all fit in memory is used one expert at a time.

use std::ops::Range;
use std::path::Path;

use half::bf16;
use safetensors::tensor::Dtype;

use super::{Input, METADATA_KEY, WeightsError, checked_pairs, parse_record, zeroed};
use crate::MxMatrix;
use crate::error::MxError;
use crate::moe::{ExpertBias, ExpertWeights, MoeShape};
use crate::quant::MX_BLOCK;
use crate::shuffle::Shuffler;

/// Stems of a layer's gate/up pair (gpt-oss on Hugging Face, OpenAI's own checkpoints).
const GATE_UP_STEMS: [&str; 2] = ["gate_up_proj", "mlp1_weight"];
/// Stems of a layer's down pair.
const DOWN_STEMS: [&str; 2] = ["down_proj", "mlp2_weight"];

/// Bytes of one expert's group in each grouped buffer the preshuffled-B kernels read, at the
/// layer's padded sizes: gate/up blocks, their scales, down blocks, their scales.
pub fn expert_group_bytes(shape: &MoeShape) -> Result<[usize; 4], MxError> {
    let s = Shuffler::new(1)?;
    let (hp, ip) = (shape.hidden_padded(), shape.inter_padded());
    Ok([
        s.b_len(shape.gate_up_rows(), hp / 2)?,
        s.scale_len(shape.gate_up_rows(), hp / MX_BLOCK)?,
        s.b_len(shape.hidden, ip / 2)?,
        s.scale_len(shape.hidden, ip / MX_BLOCK)?,
    ])
}

/// One expert as read from the file.
#[derive(Debug, Clone, PartialEq)]
pub struct FileExpert {
    /// Gate/up blocks as the kernels read them, `[2 * inter_padded, hidden_padded]`: the file's
    /// rows followed by zero rows (whole 16-row tiles, so appending is padding in this layout).
    pub gate_up: Vec<u8>,
    /// Their scales, padded alike with zero bytes.
    pub gate_up_scales: Vec<u8>,
    /// Down blocks as the kernels read them, `[hidden, inter_padded]`.
    pub down: Vec<u8>,
    /// Their scales.
    pub down_scales: Vec<u8>,
    /// The same weights unshuffled, with the biases when asked for: what the reference reads.
    pub weights: ExpertWeights,
}

/// A preshuffled safetensors file's MoE layer, checked and mapped; experts are read on demand.
#[derive(Debug)]
pub struct MoeWeightFile {
    input: Input,
    prefix: String,
    /// Experts, hidden and intermediate sizes; top-k 1 (routing is not the file's).
    shape: MoeShape,
    /// Names of the gate/up blocks, their scales, the down blocks, their scales.
    names: [String; 4],
    /// Their bytes in the map.
    ranges: [Range<usize>; 4],
    /// Names and bytes of the gate/up and down biases, if the file has them.
    bias: Option<[(String, Range<usize>); 2]>,
}

impl MoeWeightFile {
    /// Opens `path` and checks its MoE layer: the one layer it holds, or the one whose tensor
    /// names start with `layer`. Reads the header only.
    pub fn open(path: &Path, layer: Option<&str>) -> Result<MoeWeightFile, WeightsError> {
        let input = Input::open(path)?;
        let parsed = input.parse()?;
        let json = parsed
            .metadata
            .as_ref()
            .and_then(|m| m.iter().find(|(k, _)| k == METADATA_KEY))
            .map(|(_, v)| v.as_str())
            .ok_or_else(|| WeightsError::NotPreshuffled {
                path: path.to_path_buf(),
            })?;
        let record = parse_record(json)?;
        let tensors = &parsed.tensors;
        let pairs = checked_pairs(&record, tensors)?;
        let stem = |p: &super::CheckedPair<'_>, stems: &[&str]| {
            stems
                .iter()
                .find_map(|s| p.pair.stem.strip_suffix(s).map(str::to_string))
        };
        // A layer: a prefix with both pairs.
        let mut layers = Vec::new();
        for up in &pairs {
            let Some(prefix) = stem(up, &GATE_UP_STEMS) else {
                continue;
            };
            if layer.is_some_and(|l| l != prefix) {
                continue;
            }
            if let Some(down) = pairs
                .iter()
                .find(|d| stem(d, &DOWN_STEMS).as_deref() == Some(prefix.as_str()))
            {
                layers.push((prefix, up, down));
            }
        }
        let (prefix, up, down) = match layers.len() {
            1 => layers.remove(0),
            0 => {
                return Err(WeightsError::NoMoeLayer {
                    path: path.to_path_buf(),
                    prefix: layer.map(str::to_string),
                });
            }
            _ => {
                return Err(WeightsError::SeveralMoeLayers {
                    path: path.to_path_buf(),
                    prefixes: layers.into_iter().map(|l| l.0).collect(),
                });
            }
        };
        for p in [up, down] {
            if !p.plan.dims.grouped {
                return Err(WeightsError::BadShape {
                    tensor: p.pair.blocks.clone(),
                    shape: p.blocks.shape.clone(),
                    rule: "a layer's experts are grouped: [E, N, K/32, 16]".into(),
                });
            }
        }
        let (u, d) = (up.plan.dims, down.plan.dims);
        if u.e != d.e || u.n != 2 * d.k || u.k != d.n {
            return Err(WeightsError::MoeLayerMismatch {
                prefix,
                reason: format!(
                    "gate/up is {} x {} x K {} and down {} x {} x K {}: not one layer's pair (gate/up rows must be 2 x the down's K, its K the down's rows)",
                    u.e, u.n, u.k, d.e, d.n, d.k
                ),
            });
        }
        let shape = MoeShape {
            experts: u.e,
            topk: 1,
            hidden: d.n,
            inter: d.k,
        };
        shape.validate().map_err(|source| WeightsError::MoeLayer {
            path: path.to_path_buf(),
            source,
        })?;
        for (p, want) in [(up, shape.hidden_padded()), (down, shape.inter_padded())] {
            if p.plan.k_padded != want {
                return Err(WeightsError::MoeLayerMismatch {
                    prefix,
                    reason: format!(
                        "{} pads K = {} to {}; the layer needs {want} (preshuffle with --pad-k)",
                        p.pair.blocks, p.plan.dims.k, p.plan.k_padded
                    ),
                });
            }
        }
        let names = [
            up.pair.blocks.clone(),
            up.pair.scales.clone(),
            down.pair.blocks.clone(),
            down.pair.scales.clone(),
        ];
        let ranges = [
            up.blocks.src.clone(),
            up.scales.src.clone(),
            down.blocks.src.clone(),
            down.scales.src.clone(),
        ];
        // Each expert's slice must fit its padded group: the file's rows are the layer's,
        // padded K is the layer's, so it is the group less the padded rows.
        let groups = expert_group_bytes(&shape).map_err(|source| WeightsError::Shuffle {
            tensor: names[0].clone(),
            source,
        })?;
        for ((name, range), group) in names.iter().zip(&ranges).zip(groups) {
            if range.len() % shape.experts != 0 || range.len() / shape.experts > group {
                return Err(WeightsError::MoeLayerMismatch {
                    prefix,
                    reason: format!(
                        "{name} holds {} bytes: not {} experts of at most {group} bytes",
                        range.len(),
                        shape.experts
                    ),
                });
            }
        }
        // The biases, copied unchanged by the preshuffle: `gate_up_proj_bias`, `mlp1_bias`.
        let bias_name = |stem: &str| match stem.strip_suffix("_weight") {
            Some(s) => format!("{s}_bias"),
            None => format!("{stem}_bias"),
        };
        let want = [
            (bias_name(&up.pair.stem), 2 * shape.inter),
            (bias_name(&down.pair.stem), shape.hidden),
        ];
        let bias = match want.each_ref().map(|(n, _)| tensors.get(n)) {
            [None, None] => None,
            [Some(g), Some(d)] => {
                let mut found = [(String::new(), 0..0), (String::new(), 0..0)];
                for ((slot, t), (name, n)) in found.iter_mut().zip([g, d]).zip(&want) {
                    if t.dtype != Dtype::BF16 || t.shape != [shape.experts, *n] {
                        return Err(WeightsError::BadBias {
                            tensor: name.clone(),
                            dtype: t.dtype.to_string(),
                            shape: t.shape.clone(),
                            want: [shape.experts, *n],
                        });
                    }
                    *slot = (name.clone(), t.src.clone());
                }
                Some(found)
            }
            [g, _] => {
                let (present, missing) = if g.is_some() {
                    (&want[0].0, &want[1].0)
                } else {
                    (&want[1].0, &want[0].0)
                };
                return Err(WeightsError::UnpairedBias {
                    path: path.to_path_buf(),
                    present: present.clone(),
                    missing: missing.clone(),
                });
            }
        };
        Ok(MoeWeightFile {
            input,
            prefix,
            shape,
            names,
            ranges,
            bias,
        })
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.input.path
    }

    /// The layer's tensor name prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The layer's sizes, with `topk` experts per token (the file does not say how the layer
    /// routes).
    pub fn shape(&self, topk: usize) -> MoeShape {
        MoeShape { topk, ..self.shape }
    }

    /// Whether the layer has expert biases.
    pub fn has_bias(&self) -> bool {
        self.bias.is_some()
    }

    /// Reads expert `expert`: its groups as the kernels read them and its weights unshuffled,
    /// with its biases if `bias`.
    pub fn expert(&self, expert: usize, bias: bool) -> Result<FileExpert, WeightsError> {
        let shape = &self.shape;
        if expert >= shape.experts {
            return Err(WeightsError::ExpertOutOfRange {
                expert,
                experts: shape.experts,
            });
        }
        let map = &self.input.map[..];
        // Expert `expert`'s slice of a grouped tensor.
        let slice = |range: &Range<usize>| {
            let per = range.len() / shape.experts;
            let start = range.start + per * expert;
            &map[start..start + per]
        };
        let shuffle = |i: usize| {
            let tensor = self.names[i].clone();
            move |source| WeightsError::Shuffle { tensor, source }
        };
        let groups = expert_group_bytes(shape).map_err(shuffle(0))?;
        let mut read = [const { Vec::new() }; 4];
        for (i, (out, group)) in read.iter_mut().zip(groups).enumerate() {
            let src = slice(&self.ranges[i]);
            *out = zeroed(&self.names[i], group)?;
            out[..src.len()].copy_from_slice(src);
        }
        let [gate_up, gate_up_scales, down, down_scales] = read;
        let bias = match (bias, &self.bias) {
            (false, _) => None,
            (true, None) => {
                return Err(WeightsError::NoBias {
                    path: self.path().to_path_buf(),
                });
            }
            (true, Some([(_, g), (_, d)])) => {
                let values = |range| -> Vec<bf16> {
                    slice(range)
                        .chunks_exact(2)
                        .map(|b| bf16::from_le_bytes([b[0], b[1]]))
                        .collect()
                };
                let b =
                    ExpertBias::from_logical(shape, &values(g), &values(d)).map_err(|source| {
                        WeightsError::MoeLayer {
                            path: self.path().to_path_buf(),
                            source,
                        }
                    })?;
                Some(b)
            }
        };
        let s = Shuffler::new(1).map_err(shuffle(0))?;
        let (hp, ip, rows) = (
            shape.hidden_padded(),
            shape.inter_padded(),
            shape.gate_up_rows(),
        );
        let unshuffled = |i: usize, blocks: &[u8], scales: &[u8], rows: usize, k: usize| {
            let mut data = zeroed(&self.names[i], rows * k / 2)?;
            let mut sc = zeroed(&self.names[i + 1], rows * k / MX_BLOCK)?;
            s.unshuffle_b_5d(rows, k / 2, blocks, &mut data)
                .map_err(shuffle(i))?;
            s.unshuffle_scale_4d(rows, k / MX_BLOCK, scales, &mut sc)
                .map_err(shuffle(i + 1))?;
            MxMatrix::from_parts(rows, k, data, sc).map_err(shuffle(i))
        };
        let weights = ExpertWeights {
            gate_up: unshuffled(0, &gate_up, &gate_up_scales, rows, hp)?,
            down: unshuffled(2, &down, &down_scales, shape.hidden, ip)?,
            bias,
        };
        Ok(FileExpert {
            gate_up,
            gate_up_scales,
            down,
            down_scales,
            weights,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::path::PathBuf;

    use safetensors::tensor::TensorView;

    use super::*;
    use crate::weights::{PreshuffleOptions, preshuffle_file};

    /// A tensor to write: name, dtype, shape, bytes.
    type Spec = (String, Dtype, Vec<usize>, Vec<u8>);

    fn write(path: &Path, tensors: &[Spec]) {
        let views: Vec<(String, TensorView<'_>)> = tensors
            .iter()
            .map(|(n, d, s, b)| (n.clone(), TensorView::new(*d, s.clone(), b).unwrap()))
            .collect();
        safetensors::serialize_to_file(views, Some(HashMap::new()), path).unwrap();
    }

    /// A gpt-oss-layout layer of `experts` experts, hidden 96 and intermediate 64 (both
    /// padded to 256), named `prefix`; its logical weights per expert; bf16 biases with `bias`.
    fn layer(prefix: &str, experts: usize, bias: bool) -> (Vec<Spec>, Vec<[MxMatrix; 2]>) {
        let (hidden, inter) = (96, 64);
        let mut tensors = Vec::new();
        let mut logical = vec![Vec::new(); experts];
        for (stem, n, k) in [
            ("gate_up_proj", 2 * inter, hidden),
            ("down_proj", hidden, inter),
        ] {
            let (mut blocks, mut scales) = (Vec::new(), Vec::new());
            for (e, l) in logical.iter_mut().enumerate() {
                let m = MxMatrix::random(n, k, (e * 7 + n) as u64).unwrap();
                blocks.extend_from_slice(m.data());
                scales.extend_from_slice(m.scales());
                l.push(m);
            }
            let name = format!("{prefix}{stem}");
            tensors.push((
                format!("{name}_blocks"),
                Dtype::U8,
                vec![experts, n, k / 32, 16],
                blocks,
            ));
            tensors.push((
                format!("{name}_scales"),
                Dtype::U8,
                vec![experts, n, k / 32],
                scales,
            ));
            if bias {
                let values = (0..experts * n)
                    .flat_map(|i| bf16::from_f32(i as f32 / 64.0).to_le_bytes())
                    .collect();
                tensors.push((
                    format!("{name}_bias"),
                    Dtype::BF16,
                    vec![experts, n],
                    values,
                ));
            }
        }
        let logical = logical
            .into_iter()
            .map(|mut l| {
                let down = l.pop().unwrap();
                [l.pop().unwrap(), down]
            })
            .collect();
        (tensors, logical)
    }

    /// `tensors` written raw and preshuffled in `dir`: (raw, preshuffled).
    fn files(dir: &Path, tensors: &[Spec]) -> (PathBuf, PathBuf) {
        let (raw, pre) = (dir.join("raw.safetensors"), dir.join("pre.safetensors"));
        write(&raw, tensors);
        preshuffle_file(&raw, &pre, PreshuffleOptions::default(), &|_| {}).unwrap();
        (raw, pre)
    }

    #[test]
    fn experts_read_back_as_written() {
        let dir = tempfile::tempdir().unwrap();
        let (tensors, logical) = layer("model.layers.0.mlp.experts.", 3, true);
        let (_, pre) = files(dir.path(), &tensors);
        let f = MoeWeightFile::open(&pre, None).unwrap();
        assert_eq!(f.prefix(), "model.layers.0.mlp.experts.");
        assert!(f.has_bias());
        let shape = f.shape(2);
        assert_eq!(
            (shape.experts, shape.topk, shape.hidden, shape.inter),
            (3, 2, 96, 64)
        );
        for (e, [gate_up, down]) in logical.iter().enumerate() {
            let x = f.expert(e, true).unwrap();
            // The same values (padding is zero; its scale bytes differ: the preshuffle pads
            // them with 0, `pad_mx` with 1.0).
            let want = ExpertWeights::from_logical(&shape, gate_up, down).unwrap();
            for (got, want) in [
                (&x.weights.gate_up, &want.gate_up),
                (&x.weights.down, &want.down),
            ] {
                assert_eq!((got.rows(), got.k()), (want.rows(), want.k()));
                assert!(got.dequantize() == want.dequantize(), "expert {e}");
            }
            let b = x.weights.bias.as_ref().unwrap();
            assert_eq!(b.gate_up.len(), shape.gate_up_rows());
            assert_eq!(b.gate_up[1], bf16::from_f32((e * 128 + 1) as f32 / 64.0));
            assert_eq!(b.down[0], bf16::from_f32((e * 96) as f32 / 64.0));
            assert_eq!(
                [
                    x.gate_up.len(),
                    x.gate_up_scales.len(),
                    x.down.len(),
                    x.down_scales.len()
                ],
                expert_group_bytes(&shape).unwrap()
            );
            assert!(f.expert(e, false).unwrap().weights.bias.is_none());
        }
        assert!(matches!(
            f.expert(3, false),
            Err(WeightsError::ExpertOutOfRange {
                expert: 3,
                experts: 3
            })
        ));
    }

    #[test]
    fn files_without_one_checked_layer_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        // Not preshuffled.
        let (tensors, _) = layer("a.", 2, false);
        let (raw, pre) = files(dir.path(), &tensors);
        assert!(matches!(
            MoeWeightFile::open(&raw, None),
            Err(WeightsError::NotPreshuffled { .. })
        ));
        // No biases to read.
        let f = MoeWeightFile::open(&pre, None).unwrap();
        assert!(!f.has_bias());
        assert!(matches!(
            f.expert(0, true),
            Err(WeightsError::NoBias { .. })
        ));
        // Two layers: one must be named.
        let (mut two, _) = layer("a.", 2, false);
        two.extend(layer("b.", 2, false).0);
        let (_, pre) = files(dir.path(), &two);
        match MoeWeightFile::open(&pre, None) {
            Err(WeightsError::SeveralMoeLayers { prefixes, .. }) => {
                assert_eq!(prefixes, ["a.", "b."])
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            MoeWeightFile::open(&pre, Some("b.")).unwrap().prefix(),
            "b."
        );
        assert!(matches!(
            MoeWeightFile::open(&pre, Some("c.")),
            Err(WeightsError::NoMoeLayer { prefix: Some(p), .. }) if p == "c."
        ));
        // One bias without the other.
        let (mut one, _) = layer("a.", 2, true);
        one.retain(|t| t.0 != "a.down_proj_bias");
        let (_, pre) = files(dir.path(), &one);
        assert!(matches!(
            MoeWeightFile::open(&pre, None),
            Err(WeightsError::UnpairedBias { missing, .. }) if missing == "a.down_proj_bias"
        ));
        // Pairs that are not one layer's: down's K is not half the gate/up rows.
        let (mut odd, _) = layer("a.", 2, false);
        for t in odd.iter_mut().filter(|t| t.0.starts_with("a.down_proj")) {
            t.0 = t.0.replace("a.down_proj", "x.unused");
        }
        let m = MxMatrix::random(96, 96, 1).unwrap();
        let twice = |b: &[u8]| [b, b].concat();
        odd.push((
            "a.down_proj_blocks".into(),
            Dtype::U8,
            vec![2, 96, 3, 16],
            twice(m.data()),
        ));
        odd.push((
            "a.down_proj_scales".into(),
            Dtype::U8,
            vec![2, 96, 3],
            twice(m.scales()),
        ));
        let (_, pre) = files(dir.path(), &odd);
        assert!(matches!(
            MoeWeightFile::open(&pre, None),
            Err(WeightsError::MoeLayerMismatch { .. })
        ));
        // Not a file.
        assert!(matches!(
            MoeWeightFile::open(dir.path(), None),
            Err(WeightsError::NotAFile { .. })
        ));
    }
}

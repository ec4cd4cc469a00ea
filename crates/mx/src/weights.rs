//! Offline preshuffle of MXFP4 model weights stored as safetensors.
//!
//! Models ship MXFP4 weights as tensor pairs `<name>_blocks` (U8, `[E, N, K/32, 16]` or
//! `[N, K/32, 16]`: 16 bytes = 32 FP4 values per block) and `<name>_scales` (U8 E8M0,
//! `[E, N, K/32]` or `[N, K/32]`), the layout gpt-oss uses. A preshuffled-B kernel reads B in the
//! [`Shuffler`] 5D layout and the scales in its 4D layout; this module rewrites a whole file into
//! those layouts (and back), copying every other tensor byte for byte.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use safetensors::SafeTensors;
use safetensors::tensor::{Dtype, TensorView, View};
use serde::{Deserialize, Serialize};

use crate::error::MxError;
use crate::shuffle::Shuffler;

/// The `__metadata__` key recording what a preshuffle did.
pub const METADATA_KEY: &str = "tilegen.preshuffle";
/// Layout name of preshuffled blocks.
pub const B_LAYOUT: &str = "b_5d_grouped";
/// Layout name of preshuffled scales.
pub const SCALE_LAYOUT: &str = "scale_4d_grouped";
/// K must be a multiple of this for the Shuffler (K_BYTES % 64 and K_SCALES % 8).
pub const K_ALIGN: usize = 256;

/// Errors of the weight preshuffle; each names the file or tensor and the rule broken.
#[derive(Debug, thiserror::Error)]
pub enum WeightsError {
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The input is not a readable safetensors file.
    #[error("{path} is not a valid safetensors file: {reason}")]
    NotSafetensors {
        /// The file.
        path: PathBuf,
        /// What the parser reported.
        reason: String,
    },
    /// Writing the output failed.
    #[error("writing {path}: {reason}")]
    Write {
        /// The file.
        path: PathBuf,
        /// What the writer reported.
        reason: String,
    },
    /// The output would overwrite the input.
    #[error("refusing to overwrite the input file {path}")]
    SameFile {
        /// The file.
        path: PathBuf,
    },
    /// Preshuffling a file that already is.
    #[error("{path} is already preshuffled (its metadata has `{METADATA_KEY}`)")]
    AlreadyPreshuffled {
        /// The file.
        path: PathBuf,
    },
    /// Unshuffling a file that is not preshuffled.
    #[error("{path} was not preshuffled by tilegen (no `{METADATA_KEY}` metadata)")]
    NotPreshuffled {
        /// The file.
        path: PathBuf,
    },
    /// The preshuffle metadata does not describe the file's tensors.
    #[error("bad `{METADATA_KEY}` metadata: {reason}")]
    BadMetadata {
        /// What is wrong.
        reason: String,
    },
    /// An MX tensor that is not U8.
    #[error("tensor {tensor} has dtype {dtype}, but MXFP4 blocks and scales must be U8")]
    WrongDtype {
        /// The tensor.
        tensor: String,
        /// Its dtype.
        dtype: String,
    },
    /// `<name>_blocks` without `<name>_scales`.
    #[error("tensor {blocks} has no matching {blocks_stem}_scales tensor")]
    MissingScales {
        /// The blocks tensor.
        blocks: String,
        /// Its stem.
        blocks_stem: String,
    },
    /// A U8 `<name>_scales` without `<name>_blocks`.
    #[error("tensor {scales} has no matching {stem}_blocks tensor")]
    MissingBlocks {
        /// The scales tensor.
        scales: String,
        /// Its stem.
        stem: String,
    },
    /// A tensor whose shape breaks the MXFP4 pair rules.
    #[error("tensor {tensor} has shape {shape:?}: {rule}")]
    BadShape {
        /// The tensor.
        tensor: String,
        /// Its shape.
        shape: Vec<usize>,
        /// The rule.
        rule: String,
    },
    /// K not a multiple of 256 and padding disabled.
    #[error(
        "tensor {tensor}: K = {k} is not a multiple of {K_ALIGN}; enable K padding (--pad-k) to pad it with zero blocks"
    )]
    KNotAligned {
        /// The tensor.
        tensor: String,
        /// Its K.
        k: usize,
    },
    /// The Shuffler rejected a size.
    #[error("tensor {tensor}: {source}")]
    Shuffle {
        /// The tensor.
        tensor: String,
        /// The cause.
        source: MxError,
    },
}

/// What the preshuffle recorded about one tensor, stored in the output's metadata.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TensorRecord {
    /// Layout name ([`B_LAYOUT`] or [`SCALE_LAYOUT`]).
    pub layout: String,
    /// Shape before the preshuffle.
    pub original_shape: Vec<usize>,
    /// Logical K (FP4 elements) before padding.
    pub k: usize,
    /// K after padding to a multiple of [`K_ALIGN`].
    pub k_padded: usize,
}

/// The `tilegen.preshuffle` metadata value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreshuffleRecord {
    /// Format version of this record.
    pub version: u32,
    /// Per-tensor records, by tensor name.
    pub tensors: BTreeMap<String, TensorRecord>,
}

/// One `<name>_blocks` / `<name>_scales` pair.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PairSummary {
    /// The common stem.
    pub stem: String,
    /// Groups (experts); 1 for a 2-D weight.
    pub experts: usize,
    /// Output rows (N).
    pub n: usize,
    /// Logical K before padding.
    pub k: usize,
    /// K after padding.
    pub k_padded: usize,
}

/// What a preshuffle or unshuffle did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Summary {
    /// MXFP4 pairs rewritten.
    pub pairs: Vec<PairSummary>,
    /// Tensors copied unchanged.
    pub copied: Vec<String>,
    /// Bytes of tensor data read.
    pub bytes_in: u64,
    /// Bytes of tensor data written.
    pub bytes_out: u64,
}

/// Options of [`preshuffle_file`].
#[derive(Debug, Clone, Copy)]
pub struct PreshuffleOptions {
    /// Pad K with zero blocks and zero scales to a multiple of [`K_ALIGN`] (else such K is an
    /// error).
    pub pad_k: bool,
}

impl Default for PreshuffleOptions {
    fn default() -> Self {
        PreshuffleOptions { pad_k: true }
    }
}

/// Total tensor bytes a run will write, so a caller can size a progress bar before starting.
pub fn planned_bytes(input: &Path) -> Result<u64, WeightsError> {
    let file = Input::open(input)?;
    let st = file.parse()?;
    Ok(st.iter().map(|(_, v)| v.data().len() as u64).sum())
}

/// Preshuffle every MXFP4 pair of `input` into `output`.
///
/// The output is written to a temporary file beside it and renamed, so a failure never leaves a
/// half-written file. `progress` receives the number of tensor bytes finished so far.
pub fn preshuffle_file(
    input: &Path,
    output: &Path,
    options: PreshuffleOptions,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<Summary, WeightsError> {
    check_distinct(input, output)?;
    let file = Input::open(input)?;
    let st = file.parse()?;
    let mut metadata = file.metadata()?;
    if metadata.contains_key(METADATA_KEY) {
        return Err(WeightsError::AlreadyPreshuffled {
            path: input.to_path_buf(),
        });
    }
    let tensors: BTreeMap<String, TensorView<'_>> =
        st.iter().map(|(n, v)| (n.to_string(), v)).collect();
    let pairs = find_pairs(&tensors)?;
    let mut record = PreshuffleRecord {
        version: 1,
        tensors: BTreeMap::new(),
    };
    let mut summary = Summary {
        pairs: Vec::new(),
        copied: Vec::new(),
        bytes_in: 0,
        bytes_out: 0,
    };
    let mut outputs: Vec<(String, OutTensor<'_>)> = Vec::new();
    let done = AtomicU64::new(0);
    for pair in &pairs {
        let dims = pair_dims(pair, &tensors)?;
        let k_padded = if dims.k % K_ALIGN == 0 {
            dims.k
        } else if options.pad_k {
            dims.k.div_ceil(K_ALIGN) * K_ALIGN
        } else {
            return Err(WeightsError::KNotAligned {
                tensor: pair.blocks.clone(),
                k: dims.k,
            });
        };
        let shuffler = Shuffler::new(dims.e).map_err(|source| WeightsError::Shuffle {
            tensor: pair.blocks.clone(),
            source,
        })?;
        // Validate sizes now, so errors surface before the output file is created.
        let mn_pad = Shuffler::scale_padded_mn(dims.n)
            .and_then(|p| {
                shuffler.b_5d_grouped_layout(dims.n, k_padded / 2)?;
                shuffler.scale_4d_grouped_layout(p, k_padded / 32)?;
                Ok(p)
            })
            .map_err(|source| WeightsError::Shuffle {
                tensor: pair.blocks.clone(),
                source,
            })?;
        let blocks = &tensors[&pair.blocks];
        let scales = &tensors[&pair.scales];
        let mut blocks_shape = blocks.shape().to_vec();
        let r = blocks_shape.len();
        blocks_shape[r - 2] = k_padded / 32;
        let mut scales_shape = scales.shape().to_vec();
        let r = scales_shape.len();
        scales_shape[r - 2] = mn_pad;
        scales_shape[r - 1] = k_padded / 32;
        for (name, view, layout) in [
            (&pair.blocks, blocks, B_LAYOUT),
            (&pair.scales, scales, SCALE_LAYOUT),
        ] {
            record.tensors.insert(
                name.clone(),
                TensorRecord {
                    layout: layout.to_string(),
                    original_shape: view.shape().to_vec(),
                    k: dims.k,
                    k_padded,
                },
            );
        }
        let job = |kind| Job {
            kind,
            shuffler,
            dims,
            k_padded,
        };
        outputs.push((
            pair.blocks.clone(),
            OutTensor::computed(blocks, blocks_shape, job(JobKind::PreshuffleBlocks)),
        ));
        outputs.push((
            pair.scales.clone(),
            OutTensor::computed(scales, scales_shape, job(JobKind::PreshuffleScales)),
        ));
        summary.pairs.push(PairSummary {
            stem: pair.stem.clone(),
            experts: dims.e,
            n: dims.n,
            k: dims.k,
            k_padded,
        });
    }
    for (name, view) in &tensors {
        if !record.tensors.contains_key(name) {
            summary.copied.push(name.clone());
            outputs.push((name.clone(), OutTensor::copy(view)));
        }
    }
    let json = serde_json::to_string(&record).map_err(|e| WeightsError::BadMetadata {
        reason: e.to_string(),
    })?;
    metadata.insert(METADATA_KEY.to_string(), json);
    write(outputs, metadata, output, &done, progress, &mut summary)?;
    Ok(summary)
}

/// Undo [`preshuffle_file`]: restore the original layouts, shapes and K of every recorded pair.
pub fn unshuffle_file(
    input: &Path,
    output: &Path,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<Summary, WeightsError> {
    check_distinct(input, output)?;
    let file = Input::open(input)?;
    let st = file.parse()?;
    let mut metadata = file.metadata()?;
    let Some(json) = metadata.remove(METADATA_KEY) else {
        return Err(WeightsError::NotPreshuffled {
            path: input.to_path_buf(),
        });
    };
    let record: PreshuffleRecord =
        serde_json::from_str(&json).map_err(|e| WeightsError::BadMetadata {
            reason: e.to_string(),
        })?;
    let tensors: BTreeMap<String, TensorView<'_>> =
        st.iter().map(|(n, v)| (n.to_string(), v)).collect();
    let mut summary = Summary {
        pairs: Vec::new(),
        copied: Vec::new(),
        bytes_in: 0,
        bytes_out: 0,
    };
    let mut outputs = Vec::new();
    for (name, rec) in &record.tensors {
        let view = tensors.get(name).ok_or_else(|| WeightsError::BadMetadata {
            reason: format!("records tensor {name}, which the file does not have"),
        })?;
        let orig = &rec.original_shape;
        if rec.k == 0 || rec.k % 32 != 0 || rec.k_padded % K_ALIGN != 0 || rec.k > rec.k_padded {
            return Err(WeightsError::BadMetadata {
                reason: format!(
                    "tensor {name}: k = {} and k_padded = {} (k must be a positive multiple of 32, k_padded a multiple of {K_ALIGN} and at least k)",
                    rec.k, rec.k_padded
                ),
            });
        }
        let kind = match rec.layout.as_str() {
            B_LAYOUT if orig.len() == 3 || orig.len() == 4 => JobKind::UnshuffleBlocks,
            SCALE_LAYOUT if orig.len() == 2 || orig.len() == 3 => JobKind::UnshuffleScales,
            other => {
                return Err(WeightsError::BadMetadata {
                    reason: format!("tensor {name}: layout {other} with original shape {orig:?}"),
                });
            }
        };
        let (e, n) = match kind {
            JobKind::UnshuffleBlocks if orig.len() == 4 => (orig[0], orig[1]),
            JobKind::UnshuffleScales if orig.len() == 3 => (orig[0], orig[1]),
            _ => (1, orig[0]),
        };
        let dims = PairDims { e, n, k: rec.k };
        let mn_pad = Shuffler::scale_padded_mn(n).map_err(|source| WeightsError::Shuffle {
            tensor: name.clone(),
            source,
        })?;
        let rows = match kind {
            JobKind::UnshuffleBlocks => n,
            _ => mn_pad,
        };
        let width = match kind {
            JobKind::UnshuffleBlocks => rec.k_padded / 2,
            _ => rec.k_padded / 32,
        };
        // The record is user data: a product that overflows cannot describe this file.
        let expected = e
            .checked_mul(rows)
            .and_then(|v| v.checked_mul(width))
            .unwrap_or(usize::MAX);
        if view.data().len() != expected || view.dtype() != Dtype::U8 {
            return Err(WeightsError::BadMetadata {
                reason: format!(
                    "tensor {name} holds {} bytes of {:?}; its record implies {expected} U8 bytes",
                    view.data().len(),
                    view.dtype()
                ),
            });
        }
        let shuffler = Shuffler::new(e).map_err(|source| WeightsError::Shuffle {
            tensor: name.clone(),
            source,
        })?;
        let job = Job {
            kind,
            shuffler,
            dims,
            k_padded: rec.k_padded,
        };
        outputs.push((name.clone(), OutTensor::computed(view, orig.clone(), job)));
        if kind == JobKind::UnshuffleBlocks {
            let stem = name.strip_suffix("_blocks").unwrap_or(name).to_string();
            summary.pairs.push(PairSummary {
                stem,
                experts: e,
                n,
                k: rec.k,
                k_padded: rec.k_padded,
            });
        }
    }
    for (name, view) in &tensors {
        if !record.tensors.contains_key(name) {
            summary.copied.push(name.clone());
            outputs.push((name.clone(), OutTensor::copy(view)));
        }
    }
    let done = AtomicU64::new(0);
    write(outputs, metadata, output, &done, progress, &mut summary)?;
    Ok(summary)
}

fn write(
    outputs: Vec<(String, OutTensor<'_>)>,
    metadata: HashMap<String, String>,
    output: &Path,
    done: &AtomicU64,
    progress: &(dyn Fn(u64) + Sync),
    summary: &mut Summary,
) -> Result<(), WeightsError> {
    summary.bytes_in = outputs.iter().map(|(_, t)| t.src.data().len() as u64).sum();
    summary.bytes_out = outputs.iter().map(|(_, t)| t.data_len() as u64).sum();
    let failure = std::sync::Mutex::new(None);
    let views: Vec<(String, Tracked<'_, '_>)> = outputs
        .into_iter()
        .map(|(name, tensor)| {
            (
                name,
                Tracked {
                    tensor,
                    done,
                    progress,
                    failure: &failure,
                },
            )
        })
        .collect();
    let result = safetensors::serialize_to_file(views, Some(metadata), output);
    if let Some(e) = failure.lock().map(|mut f| f.take()).unwrap_or(None) {
        // The writer already saw an empty tensor; its temporary file is discarded by the
        // failed persist, or by us here if it went through.
        let _ = std::fs::remove_file(output);
        return Err(e);
    }
    result.map_err(|e| WeightsError::Write {
        path: output.to_path_buf(),
        reason: e.to_string(),
    })
}

/// The input file, memory-mapped: weight files are gigabytes and are read once, in order.
struct Input {
    path: PathBuf,
    map: memmap2::Mmap,
}

impl Input {
    fn open(path: &Path) -> Result<Self, WeightsError> {
        let io = |source| WeightsError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = File::open(path).map_err(io)?;
        // SAFETY: the map is read-only and lives as long as this struct; a concurrent writer
        // truncating the file is outside what this tool supports (as with any mmap reader).
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
        Ok(Input {
            path: path.to_path_buf(),
            map,
        })
    }

    fn parse(&self) -> Result<SafeTensors<'_>, WeightsError> {
        SafeTensors::deserialize(&self.map).map_err(|e| WeightsError::NotSafetensors {
            path: self.path.clone(),
            reason: e.to_string(),
        })
    }

    fn metadata(&self) -> Result<HashMap<String, String>, WeightsError> {
        let (_, meta) =
            SafeTensors::read_metadata(&self.map).map_err(|e| WeightsError::NotSafetensors {
                path: self.path.clone(),
                reason: e.to_string(),
            })?;
        Ok(meta.metadata().clone().unwrap_or_default())
    }
}

fn check_distinct(input: &Path, output: &Path) -> Result<(), WeightsError> {
    use std::os::unix::fs::MetadataExt;
    let meta_in = std::fs::metadata(input).map_err(|source| WeightsError::Io {
        path: input.to_path_buf(),
        source,
    })?;
    if let Ok(meta_out) = std::fs::metadata(output)
        && meta_in.dev() == meta_out.dev()
        && meta_in.ino() == meta_out.ino()
    {
        return Err(WeightsError::SameFile {
            path: output.to_path_buf(),
        });
    }
    Ok(())
}

struct Pair {
    stem: String,
    blocks: String,
    scales: String,
}

fn find_pairs(tensors: &BTreeMap<String, TensorView<'_>>) -> Result<Vec<Pair>, WeightsError> {
    let mut pairs = Vec::new();
    for (name, view) in tensors {
        if let Some(stem) = name.strip_suffix("_blocks") {
            let scales = format!("{stem}_scales");
            if !tensors.contains_key(&scales) {
                return Err(WeightsError::MissingScales {
                    blocks: name.clone(),
                    blocks_stem: stem.to_string(),
                });
            }
            pairs.push(Pair {
                stem: stem.to_string(),
                blocks: name.clone(),
                scales,
            });
        } else if let Some(stem) = name.strip_suffix("_scales")
            && view.dtype() == Dtype::U8
            && !tensors.contains_key(&format!("{stem}_blocks"))
        {
            return Err(WeightsError::MissingBlocks {
                scales: name.clone(),
                stem: stem.to_string(),
            });
        }
    }
    Ok(pairs)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PairDims {
    e: usize,
    n: usize,
    k: usize,
}

fn pair_dims(
    pair: &Pair,
    tensors: &BTreeMap<String, TensorView<'_>>,
) -> Result<PairDims, WeightsError> {
    let blocks = &tensors[&pair.blocks];
    let scales = &tensors[&pair.scales];
    for (name, view) in [(&pair.blocks, blocks), (&pair.scales, scales)] {
        if view.dtype() != Dtype::U8 {
            return Err(WeightsError::WrongDtype {
                tensor: name.clone(),
                dtype: format!("{:?}", view.dtype()),
            });
        }
    }
    let bs = blocks.shape();
    let bad = |rule: &str| WeightsError::BadShape {
        tensor: pair.blocks.clone(),
        shape: bs.to_vec(),
        rule: rule.to_string(),
    };
    let (e, n, kb) = match *bs {
        [e, n, kb, 16] => (e, n, kb),
        [n, kb, 16] => (1, n, kb),
        _ => {
            return Err(bad(
                "blocks must be [E, N, K/32, 16] or [N, K/32, 16] (16 bytes = 32 FP4 values)",
            ));
        }
    };
    if e == 0 || n == 0 || kb == 0 {
        return Err(bad("every dimension must be non-zero"));
    }
    let expected: Vec<usize> = if bs.len() == 4 {
        vec![e, n, kb]
    } else {
        vec![n, kb]
    };
    if scales.shape() != expected.as_slice() {
        return Err(WeightsError::BadShape {
            tensor: pair.scales.clone(),
            shape: scales.shape().to_vec(),
            rule: format!(
                "{} has shape {bs:?}, so its scales must be {expected:?}",
                pair.blocks
            ),
        });
    }
    Ok(PairDims { e, n, k: kb * 32 })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum JobKind {
    PreshuffleBlocks,
    PreshuffleScales,
    UnshuffleBlocks,
    UnshuffleScales,
}

/// The work to produce one output tensor, done lazily when the writer asks for its bytes so that
/// only one tensor's buffers are alive at a time.
#[derive(Clone, Copy)]
struct Job {
    kind: JobKind,
    shuffler: Shuffler,
    dims: PairDims,
    k_padded: usize,
}

impl Job {
    fn run(&self, src: &[u8]) -> Result<Vec<u8>, MxError> {
        let PairDims { e, n, k } = self.dims;
        let kp = self.k_padded;
        let s = &self.shuffler;
        let mn_pad = Shuffler::scale_padded_mn(n)?;
        match self.kind {
            JobKind::PreshuffleBlocks => {
                let padded = pad_rows(src, e * n, k / 2, kp / 2);
                let mut dst = vec![0u8; e * n * kp / 2];
                s.preshuffle_b_5d(n, kp / 2, &padded, &mut dst)?;
                Ok(dst)
            }
            JobKind::PreshuffleScales => {
                let padded = pad_rows(src, e * n, k / 32, kp / 32);
                let mut dst = vec![0u8; e * mn_pad * kp / 32];
                s.preshuffle_scale_4d(n, kp / 32, &padded, &mut dst)?;
                Ok(dst)
            }
            JobKind::UnshuffleBlocks => {
                let mut full = vec![0u8; e * n * kp / 2];
                s.unshuffle_b_5d(n, kp / 2, src, &mut full)?;
                Ok(crop_rows(&full, e * n, kp / 2, k / 2))
            }
            JobKind::UnshuffleScales => {
                let mut full = vec![0u8; e * n * kp / 32];
                s.unshuffle_scale_4d(n, kp / 32, src, &mut full)?;
                Ok(crop_rows(&full, e * n, kp / 32, k / 32))
            }
        }
    }
}

/// Rows of `width` bytes widened to `padded` with zeros (zero FP4 data, zero E8M0 scale bytes).
fn pad_rows<'a>(src: &'a [u8], rows: usize, width: usize, padded: usize) -> Cow<'a, [u8]> {
    if width == padded {
        return Cow::Borrowed(src);
    }
    let mut out = vec![0u8; rows * padded];
    for (d, s) in out.chunks_exact_mut(padded).zip(src.chunks_exact(width)) {
        d[..width].copy_from_slice(s);
    }
    Cow::Owned(out)
}

fn crop_rows(src: &[u8], rows: usize, padded: usize, width: usize) -> Vec<u8> {
    if width == padded {
        return src.to_vec();
    }
    let mut out = Vec::with_capacity(rows * width);
    for s in src.chunks_exact(padded) {
        out.extend_from_slice(&s[..width]);
    }
    out
}

struct OutTensor<'data> {
    src: TensorView<'data>,
    shape: Vec<usize>,
    job: Option<Job>,
}

impl<'data> OutTensor<'data> {
    fn copy(view: &TensorView<'data>) -> Self {
        OutTensor {
            src: view.clone(),
            shape: view.shape().to_vec(),
            job: None,
        }
    }

    fn computed(view: &TensorView<'data>, shape: Vec<usize>, job: Job) -> Self {
        OutTensor {
            src: view.clone(),
            shape,
            job: Some(job),
        }
    }

    fn data_len(&self) -> usize {
        match self.job {
            None => self.src.data().len(),
            Some(_) => self.shape.iter().product::<usize>(),
        }
    }
}

/// An output tensor that reports progress and records the first failure (the writer's `View`
/// cannot return errors).
struct Tracked<'a, 'data> {
    tensor: OutTensor<'data>,
    done: &'a AtomicU64,
    progress: &'a (dyn Fn(u64) + Sync),
    failure: &'a std::sync::Mutex<Option<WeightsError>>,
}

impl View for Tracked<'_, '_> {
    fn dtype(&self) -> Dtype {
        self.tensor.src.dtype()
    }

    fn shape(&self) -> &[usize] {
        &self.tensor.shape
    }

    fn data(&self) -> Cow<'_, [u8]> {
        let bytes: Cow<'_, [u8]> = match &self.tensor.job {
            None => Cow::Borrowed(self.tensor.src.data()),
            Some(job) => match job.run(self.tensor.src.data()) {
                Ok(v) => Cow::Owned(v),
                Err(source) => {
                    if let Ok(mut f) = self.failure.lock() {
                        f.get_or_insert(WeightsError::Shuffle {
                            tensor: format!("{:?}", job.kind),
                            source,
                        });
                    }
                    // Keep the promised length so the writer stays consistent; the file is
                    // removed afterwards.
                    Cow::Owned(vec![0u8; self.data_len()])
                }
            },
        };
        let total = self.done.fetch_add(bytes.len() as u64, Ordering::Relaxed) + bytes.len() as u64;
        (self.progress)(total);
        bytes
    }

    fn data_len(&self) -> usize {
        self.tensor.data_len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use safetensors::tensor::TensorView;

    fn write(
        path: &Path,
        tensors: &[(&str, Dtype, Vec<usize>, Vec<u8>)],
        meta: Option<HashMap<String, String>>,
    ) {
        let views: Vec<(String, TensorView<'_>)> = tensors
            .iter()
            .map(|(n, d, s, b)| (n.to_string(), TensorView::new(*d, s.clone(), b).unwrap()))
            .collect();
        safetensors::serialize_to_file(views, meta, path).unwrap();
    }

    fn bytes(n: usize, seed: u8) -> Vec<u8> {
        (0..n)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect()
    }

    /// gpt-oss-like file: an expert MoE weight (K needs padding), a 2-D weight and a bias.
    fn sample(dir: &Path) -> PathBuf {
        let p = dir.join("in.safetensors");
        let (e, n, kb) = (2, 32, 3); // K = 96: pads to 256
        write(
            &p,
            &[
                (
                    "mlp.w1_blocks",
                    Dtype::U8,
                    vec![e, n, kb, 16],
                    bytes(e * n * kb * 16, 1),
                ),
                (
                    "mlp.w1_scales",
                    Dtype::U8,
                    vec![e, n, kb],
                    bytes(e * n * kb, 2),
                ),
                (
                    "attn.w_blocks",
                    Dtype::U8,
                    vec![48, 8, 16],
                    bytes(48 * 8 * 16, 3),
                ),
                ("attn.w_scales", Dtype::U8, vec![48, 8], bytes(48 * 8, 4)),
                ("bias", Dtype::F32, vec![5], bytes(20, 5)),
            ],
            Some(HashMap::from([("format".to_string(), "pt".to_string())])),
        );
        p
    }

    /// Tensors by name: dtype, shape, bytes.
    type Tensors = HashMap<String, (Dtype, Vec<usize>, Vec<u8>)>;

    fn read(path: &Path) -> (Tensors, HashMap<String, String>) {
        let data = std::fs::read(path).unwrap();
        let st = SafeTensors::deserialize(&data).unwrap();
        let t = st
            .iter()
            .map(|(n, v)| {
                (
                    n.to_string(),
                    (v.dtype(), v.shape().to_vec(), v.data().to_vec()),
                )
            })
            .collect();
        let (_, meta) = SafeTensors::read_metadata(&data).unwrap();
        (t, meta.metadata().clone().unwrap_or_default())
    }

    #[test]
    fn preshuffle_then_unshuffle_is_exact() {
        let dir = tempfile::tempdir().unwrap();
        let input = sample(dir.path());
        let pre = dir.path().join("pre.safetensors");
        let back = dir.path().join("back.safetensors");
        let s = preshuffle_file(&input, &pre, PreshuffleOptions::default(), &|_| {}).unwrap();
        assert_eq!(s.pairs.len(), 2);
        assert_eq!(s.copied, vec!["bias".to_string()]);
        let w1 = s.pairs.iter().find(|p| p.stem == "mlp.w1").unwrap();
        assert_eq!((w1.experts, w1.n, w1.k, w1.k_padded), (2, 32, 96, 256));
        let (t, meta) = read(&pre);
        assert_eq!(meta["format"], "pt");
        let record: PreshuffleRecord = serde_json::from_str(&meta[METADATA_KEY]).unwrap();
        assert_eq!(
            record.tensors["mlp.w1_blocks"].original_shape,
            vec![2, 32, 3, 16]
        );
        assert_eq!(record.tensors["attn.w_scales"].layout, SCALE_LAYOUT);
        // Blocks keep their shape with padded K; scales become [E, padded N, K/32].
        assert_eq!(t["mlp.w1_blocks"].1, vec![2, 32, 8, 16]);
        assert_eq!(t["mlp.w1_scales"].1, vec![2, 32, 8]);
        assert_eq!(t["attn.w_scales"].1, vec![64, 8]);
        assert_eq!(t["bias"].2, bytes(20, 5));
        // The preshuffled bytes are the Shuffler's, applied to the zero-padded rows.
        let (_, _, orig) = read(&input).0["mlp.w1_blocks"].clone();
        let padded = pad_rows(&orig, 64, 48, 128);
        let mut want = vec![0u8; 2 * 32 * 128];
        Shuffler::new(2)
            .unwrap()
            .preshuffle_b_5d(32, 128, &padded, &mut want)
            .unwrap();
        assert_eq!(t["mlp.w1_blocks"].2, want);
        let u = unshuffle_file(&pre, &back, &|_| {}).unwrap();
        assert_eq!(u.pairs.len(), 2);
        let (a, ma) = read(&input);
        let (b, mb) = read(&back);
        assert_eq!(a, b);
        assert_eq!(ma, mb);
    }

    #[test]
    fn bad_inputs_are_named_errors() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let out = d.join("out.safetensors");
        let pre = |p: &Path, pad_k| preshuffle_file(p, &out, PreshuffleOptions { pad_k }, &|_| {});
        let garbage = d.join("garbage");
        std::fs::write(&garbage, b"definitely not safetensors").unwrap();
        assert!(matches!(
            pre(&garbage, true),
            Err(WeightsError::NotSafetensors { .. })
        ));
        let good = sample(d);
        let mut cut = std::fs::read(&good).unwrap();
        cut.truncate(cut.len() - 7);
        let truncated = d.join("truncated");
        std::fs::write(&truncated, cut).unwrap();
        assert!(matches!(
            pre(&truncated, true),
            Err(WeightsError::NotSafetensors { .. })
        ));
        let case = |name: &str, tensors: &[(&str, Dtype, Vec<usize>, Vec<u8>)]| {
            let p = d.join(name);
            write(&p, tensors, None);
            p
        };
        let p = case(
            "dtype",
            &[
                (
                    "w_blocks",
                    Dtype::F32,
                    vec![16, 8, 4],
                    bytes(16 * 8 * 16, 0),
                ),
                ("w_scales", Dtype::U8, vec![16, 8], bytes(128, 0)),
            ],
        );
        assert!(matches!(
            pre(&p, true),
            Err(WeightsError::WrongDtype { .. })
        ));
        let p = case(
            "noscales",
            &[(
                "w_blocks",
                Dtype::U8,
                vec![16, 8, 16],
                bytes(16 * 8 * 16, 0),
            )],
        );
        assert!(matches!(
            pre(&p, true),
            Err(WeightsError::MissingScales { .. })
        ));
        let p = case(
            "noblocks",
            &[("w_scales", Dtype::U8, vec![16, 8], bytes(128, 0))],
        );
        assert!(matches!(
            pre(&p, true),
            Err(WeightsError::MissingBlocks { .. })
        ));
        let p = case(
            "disagree",
            &[
                (
                    "w_blocks",
                    Dtype::U8,
                    vec![16, 8, 16],
                    bytes(16 * 8 * 16, 0),
                ),
                ("w_scales", Dtype::U8, vec![16, 4], bytes(64, 0)),
            ],
        );
        assert!(matches!(pre(&p, true), Err(WeightsError::BadShape { .. })));
        let p = case(
            "last16",
            &[
                ("w_blocks", Dtype::U8, vec![16, 8, 8], bytes(16 * 8 * 8, 0)),
                ("w_scales", Dtype::U8, vec![16, 8], bytes(128, 0)),
            ],
        );
        assert!(matches!(pre(&p, true), Err(WeightsError::BadShape { .. })));
        let p = case(
            "n20",
            &[
                (
                    "w_blocks",
                    Dtype::U8,
                    vec![20, 8, 16],
                    bytes(20 * 8 * 16, 0),
                ),
                ("w_scales", Dtype::U8, vec![20, 8], bytes(160, 0)),
            ],
        );
        assert!(matches!(pre(&p, true), Err(WeightsError::Shuffle { .. })));
        let p = case(
            "k96",
            &[
                (
                    "w_blocks",
                    Dtype::U8,
                    vec![16, 3, 16],
                    bytes(16 * 3 * 16, 0),
                ),
                ("w_scales", Dtype::U8, vec![16, 3], bytes(48, 0)),
            ],
        );
        assert!(matches!(
            pre(&p, false),
            Err(WeightsError::KNotAligned { k: 96, .. })
        ));
        assert!(!out.exists(), "a failed run must not leave an output");
        assert!(matches!(
            preshuffle_file(&good, &good, PreshuffleOptions::default(), &|_| {}),
            Err(WeightsError::SameFile { .. })
        ));
        pre(&good, true).unwrap();
        assert!(matches!(
            preshuffle_file(
                &out,
                &d.join("again"),
                PreshuffleOptions::default(),
                &|_| {}
            ),
            Err(WeightsError::AlreadyPreshuffled { .. })
        ));
        assert!(matches!(
            unshuffle_file(&good, &d.join("x"), &|_| {}),
            Err(WeightsError::NotPreshuffled { .. })
        ));
    }
}

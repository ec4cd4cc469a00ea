//! Offline preshuffle of MXFP4 model weights stored as safetensors.
//!
//! Models ship MXFP4 weights as tensor pairs `<name>_blocks` (U8, `[E, N, K/32, 16]` or
//! `[N, K/32, 16]`: 16 bytes = 32 FP4 values per block) and `<name>_scales` (U8 E8M0,
//! `[E, N, K/32]` or `[N, K/32]`), the layout gpt-oss uses. A preshuffled-B kernel reads B in the
//! [`Shuffler`] 5D layout and the scales in its 4D layout; this module rewrites a whole file into
//! those layouts (and back), copying every other tensor byte for byte.
//!
//! A run is planned before anything is written: [`Plan::preshuffle`] and [`Plan::unshuffle`]
//! check the output path, parse the input's header, and check every pair, shape and dtype, the
//! `tilegen.preshuffle` record and every rearrangement the write will run. Only then does
//! [`Plan::write`] stream the file into a `tilegen_output` temporary file and rename it over the
//! output, so a refused input or an interrupted write leaves an existing output as it was and no
//! temporary file behind.
//!
//! Outputs are laid out as the safetensors crate lays out files (tensors sorted by descending
//! dtype alignment, then by name; the header padded with spaces to 8 bytes) and keep the order
//! of the input's `__metadata__` entries, so preshuffle then unshuffle gives back a file the
//! crate wrote byte for byte.
//!
//! [`MoeWeightFile`] reads one MoE layer of a preshuffled file one expert at a time, for runs
//! on the layer's real weights.

mod moe_layer;

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, HashSet, TryReserveError};
use std::fmt;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::ops::Range;
use std::path::{Path, PathBuf};

use safetensors::tensor::{Dtype, Metadata, TensorInfo};
use safetensors::{SafeTensorError, SafeTensors};
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};
use tilegen_output::{Output, OutputError};

use crate::error::MxError;
use crate::moe::MoeRefError;
use crate::shuffle::Shuffler;

pub use moe_layer::{FileExpert, MoeWeightFile, expert_group_bytes};

/// The `__metadata__` key recording what a preshuffle did.
pub const METADATA_KEY: &str = "tilegen.preshuffle";
/// Layout name of preshuffled blocks.
pub const B_LAYOUT: &str = "b_5d_grouped";
/// Layout name of preshuffled scales.
pub const SCALE_LAYOUT: &str = "scale_4d_grouped";
/// K must be a multiple of this for the Shuffler (K_BYTES % 64 and K_SCALES % 8).
pub const K_ALIGN: usize = 256;
/// The [`PreshuffleRecord`] version this module writes.
pub const RECORD_VERSION: u32 = 2;
/// Record versions [`Plan::unshuffle`] reads: 1 lacks
/// [`original_has_metadata`](PreshuffleRecord::original_has_metadata) (its files always had
/// metadata after an unshuffle).
pub const KNOWN_RECORD_VERSIONS: [u32; 2] = [1, 2];

/// The safetensors crate refuses headers larger than this on read and write (its own constant is
/// private); an output must stay readable.
const MAX_HEADER_BYTES: usize = 100_000_000;
/// Bytes written between two looks at the interrupt flag: a signal ends a multi-gigabyte write
/// within milliseconds, and a check per 8 MiB costs nothing.
const WRITE_CHUNK: usize = 8 << 20;
const METADATA_FIELD: &str = "__metadata__";

/// Errors of the weight preshuffle; each names the file or tensor and the rule broken.
#[derive(Debug, thiserror::Error)]
pub enum WeightsError {
    /// Reading the input failed.
    #[error("reading {path}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The input is a directory, device, pipe or socket.
    #[error("{path} is not a regular file")]
    NotAFile {
        /// The path.
        path: PathBuf,
    },
    /// The input is not a readable safetensors file.
    #[error("{path} is not a valid safetensors file")]
    NotSafetensors {
        /// The file.
        path: PathBuf,
        /// What the parser reported.
        source: SafeTensorError,
    },
    /// The header parses, but a key appears twice, so readers may disagree on what it says.
    #[error("{path} is not a valid safetensors file: its header is ambiguous")]
    AmbiguousHeader {
        /// The file.
        path: PathBuf,
        /// Which key, and where.
        source: serde_json::Error,
    },
    /// The output path cannot be written (found before any work), or writing it failed.
    #[error("cannot write the output")]
    Output {
        /// The cause, naming the path.
        source: OutputError,
    },
    /// Writing the output's bytes failed; the output was left as it was.
    #[error("writing {path}")]
    Write {
        /// The output.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A signal stopped the write; the output was left as it was.
    #[error("stopped before {path} was complete; it was left as it was")]
    Interrupted {
        /// The output.
        path: PathBuf,
        /// [`OutputError::Interrupted`].
        source: OutputError,
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
    /// The `tilegen.preshuffle` value is not a record this version reads.
    #[error("the `{METADATA_KEY}` metadata is not a valid preshuffle record")]
    BadRecord {
        /// What the JSON parser reported.
        source: serde_json::Error,
    },
    /// A record of a format version this build does not know.
    #[error(
        "the `{METADATA_KEY}` record has version {version}; this tilegen reads versions {KNOWN_RECORD_VERSIONS:?}"
    )]
    UnknownRecordVersion {
        /// The version found.
        version: u32,
    },
    /// The record disagrees with the file's tensors or with itself.
    #[error("the `{METADATA_KEY}` record disagrees with tensor {tensor}: {reason}")]
    RecordMismatch {
        /// The tensor.
        tensor: String,
        /// The disagreement.
        reason: String,
    },
    /// The record says the original had no `__metadata__`, yet the file has other entries.
    #[error(
        "the `{METADATA_KEY}` record says the original file had no `__metadata__`, but this file has {entries} other metadata entries"
    )]
    MetadataMismatch {
        /// Entries besides the record.
        entries: usize,
    },
    /// The record describes a pair that a preshuffle would have refused.
    #[error("the `{METADATA_KEY}` record of {tensor} describes a pair tilegen cannot preshuffle")]
    ImpossibleRecord {
        /// The tensor.
        tensor: String,
        /// The rule the recorded pair breaks.
        source: Box<WeightsError>,
    },
    /// An MXFP4-looking tensor of a preshuffled file that its record does not list.
    #[error(
        "tensor {tensor} looks like MXFP4 data, but the `{METADATA_KEY}` record does not list it, so whether it is preshuffled is unknown"
    )]
    Unrecorded {
        /// The tensor.
        tensor: String,
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
    #[error("tensor {tensor}")]
    Shuffle {
        /// The tensor.
        tensor: String,
        /// The cause.
        source: MxError,
    },
    /// A buffer for one tensor could not be allocated.
    #[error("tensor {tensor}: cannot allocate {bytes} bytes")]
    OutOfMemory {
        /// The tensor.
        tensor: String,
        /// The size asked for.
        bytes: usize,
        /// The allocator's answer.
        source: TryReserveError,
    },
    /// The output's header would exceed what safetensors readers accept.
    #[error("the output header would be {bytes} bytes; safetensors allows {MAX_HEADER_BYTES}")]
    HeaderTooLarge {
        /// Its size.
        bytes: usize,
    },
    /// A preshuffled file without the MoE layer asked for.
    #[error(
        "{} has no MoE layer{} (pairs <prefix>gate_up_proj or mlp1_weight, and <prefix>down_proj or mlp2_weight, as _blocks and _scales)",
        path.display(),
        prefix.as_ref().map(|p| format!(" with prefix {p:?}")).unwrap_or_default()
    )]
    NoMoeLayer {
        /// The file.
        path: PathBuf,
        /// The prefix asked for, if one was.
        prefix: Option<String>,
    },
    /// A file holding several MoE layers, none named.
    #[error("{} has {} MoE layers; pick one by its prefix with --layer (one of {prefixes:?})", path.display(), prefixes.len())]
    SeveralMoeLayers {
        /// The file.
        path: PathBuf,
        /// The layers' tensor name prefixes.
        prefixes: Vec<String>,
    },
    /// A layer's gate/up and down pairs that do not make one layer.
    #[error("the MoE layer {prefix:?}: {reason}")]
    MoeLayerMismatch {
        /// The layer's prefix.
        prefix: String,
        /// What disagrees, with the sizes.
        reason: String,
    },
    /// A layer whose sizes an MoE layer cannot have.
    #[error("the MoE layer in {path}")]
    MoeLayer {
        /// The file.
        path: PathBuf,
        /// The rule broken.
        source: MoeRefError,
    },
    /// An expert bias tensor of the wrong dtype or shape.
    #[error("tensor {tensor} is {dtype} {shape:?}; an expert bias is BF16 {want:?}")]
    BadBias {
        /// The tensor.
        tensor: String,
        /// Its dtype.
        dtype: String,
        /// Its shape.
        shape: Vec<usize>,
        /// The shape the layer gives it.
        want: [usize; 2],
    },
    /// One of a layer's two bias tensors without the other.
    #[error("{path} has {present} but not {missing}: a layer's biases come in pairs")]
    UnpairedBias {
        /// The file.
        path: PathBuf,
        /// The bias present.
        present: String,
        /// The bias missing.
        missing: String,
    },
    /// Biases asked of a layer that has none.
    #[error(
        "{path} has no expert biases (<prefix>gate_up_proj_bias or mlp1_bias, and <prefix>down_proj_bias or mlp2_bias)"
    )]
    NoBias {
        /// The file.
        path: PathBuf,
    },
    /// An expert the layer does not have.
    #[error("expert {expert} is not below the layer's {experts} experts")]
    ExpertOutOfRange {
        /// The expert asked for.
        expert: usize,
        /// The layer's experts.
        experts: usize,
    },
    /// The header built for the output does not describe the planned tensors (a bug: the plan
    /// is refused rather than written).
    #[error("the output header does not read back as planned: {reason}")]
    InconsistentHeader {
        /// The difference.
        reason: String,
        /// The parser's error, when it refused the header outright.
        source: Option<SafeTensorError>,
    },
}

/// What the preshuffle recorded about one tensor, stored in the output's metadata.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
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
#[serde(deny_unknown_fields)]
pub struct PreshuffleRecord {
    /// Format version of this record ([`RECORD_VERSION`] when written).
    pub version: u32,
    /// Whether the original file had a `__metadata__` entry (version 2 on), so an unshuffle
    /// restores its absence too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub original_has_metadata: Option<bool>,
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

/// What a preshuffle or unshuffle does.
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

/// Options of [`Plan::preshuffle`].
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

/// Preshuffle every MXFP4 pair of `input` into `output`: [`Plan::preshuffle`] then
/// [`Plan::write`].
pub fn preshuffle_file(
    input: &Path,
    output: &Path,
    options: PreshuffleOptions,
    progress: &dyn Fn(u64),
) -> Result<Summary, WeightsError> {
    Plan::preshuffle(input, output, options)?.write(progress)
}

/// Undo [`preshuffle_file`]: [`Plan::unshuffle`] then [`Plan::write`].
pub fn unshuffle_file(
    input: &Path,
    output: &Path,
    progress: &dyn Fn(u64),
) -> Result<Summary, WeightsError> {
    Plan::unshuffle(input, output)?.write(progress)
}

/// A checked run, ready to write: everything that can be known about the input and the output
/// before writing has been checked.
#[derive(Debug)]
pub struct Plan {
    input: Input,
    output: Output,
    /// The length prefix and the padded JSON header.
    header: Vec<u8>,
    /// In file order.
    tensors: Vec<OutTensor>,
    summary: Summary,
}

impl Plan {
    /// Plans the preshuffle of every MXFP4 pair of `input` into `output`.
    pub fn preshuffle(
        input: &Path,
        output: &Path,
        options: PreshuffleOptions,
    ) -> Result<Plan, WeightsError> {
        let (output, input, parsed) = open(input, output)?;
        let metadata = parsed.metadata.as_deref().unwrap_or_default();
        if metadata.iter().any(|(k, _)| k == METADATA_KEY) {
            return Err(WeightsError::AlreadyPreshuffled {
                path: input.path.clone(),
            });
        }
        let tensors = &parsed.tensors;
        let mut record = PreshuffleRecord {
            version: RECORD_VERSION,
            original_has_metadata: Some(parsed.metadata.is_some()),
            tensors: BTreeMap::new(),
        };
        let mut outputs = Vec::new();
        let mut pairs = Vec::new();
        for pair in find_pairs(tensors)? {
            let (blocks, scales) = (&tensors[&pair.blocks], &tensors[&pair.scales]);
            let dims = pair_dims(&pair, blocks, scales)?;
            let k_padded = padded_k(&pair.blocks, dims.k, options.pad_k)?;
            let shapes = PairShapes::new(&pair, dims, k_padded)?;
            for (name, tensor, layout, shape, kind) in [
                (
                    &pair.blocks,
                    blocks,
                    B_LAYOUT,
                    &shapes.blocks,
                    JobKind::PreshuffleBlocks,
                ),
                (
                    &pair.scales,
                    scales,
                    SCALE_LAYOUT,
                    &shapes.scales,
                    JobKind::PreshuffleScales,
                ),
            ] {
                record.tensors.insert(
                    name.clone(),
                    TensorRecord {
                        layout: layout.to_string(),
                        original_shape: tensor.shape.clone(),
                        k: dims.k,
                        k_padded,
                    },
                );
                let job = Job {
                    kind,
                    shuffler: shapes.shuffler,
                    dims,
                    k_padded,
                };
                outputs.push(OutTensor::computed(name, tensor, shape.clone(), job)?);
            }
            pairs.push(PairSummary {
                stem: pair.stem,
                experts: dims.e,
                n: dims.n,
                k: dims.k,
                k_padded,
            });
        }
        let json =
            serde_json::to_string(&record).map_err(|source| WeightsError::BadRecord { source })?;
        let mut metadata = metadata.to_vec();
        metadata.push((METADATA_KEY.to_string(), json));
        Plan::new(input, output, tensors, outputs, pairs, Some(metadata))
    }

    /// Plans undoing [`Plan::preshuffle`]: restore the original layouts, shapes and K of every
    /// recorded pair, after checking the record against the tensors.
    pub fn unshuffle(input: &Path, output: &Path) -> Result<Plan, WeightsError> {
        let (output, input, parsed) = open(input, output)?;
        let not_preshuffled = || WeightsError::NotPreshuffled {
            path: input.path.clone(),
        };
        let mut metadata = parsed.metadata.clone().ok_or_else(not_preshuffled)?;
        let at = metadata
            .iter()
            .position(|(k, _)| k == METADATA_KEY)
            .ok_or_else(not_preshuffled)?;
        let (_, json) = metadata.remove(at);
        let record = parse_record(&json)?;
        let metadata = match record.original_has_metadata {
            Some(false) if !metadata.is_empty() => {
                return Err(WeightsError::MetadataMismatch {
                    entries: metadata.len(),
                });
            }
            Some(false) => None,
            _ => Some(metadata),
        };
        let tensors = &parsed.tensors;
        let mut outputs = Vec::new();
        let mut pairs = Vec::new();
        for c in checked_pairs(&record, tensors)? {
            for (name, tensor, rec, kind) in [
                (
                    &c.pair.blocks,
                    c.blocks,
                    c.records[0],
                    JobKind::UnshuffleBlocks,
                ),
                (
                    &c.pair.scales,
                    c.scales,
                    c.records[1],
                    JobKind::UnshuffleScales,
                ),
            ] {
                let job = Job {
                    kind,
                    shuffler: c.plan.shapes.shuffler,
                    dims: c.plan.dims,
                    k_padded: c.plan.k_padded,
                };
                outputs.push(OutTensor::computed(
                    name,
                    tensor,
                    rec.original_shape.clone(),
                    job,
                )?);
            }
            pairs.push(PairSummary {
                stem: c.pair.stem,
                experts: c.plan.dims.e,
                n: c.plan.dims.n,
                k: c.plan.dims.k,
                k_padded: c.plan.k_padded,
            });
        }
        Plan::new(input, output, tensors, outputs, pairs, metadata)
    }

    /// Adds copies of the tensors not in `outputs`, lays out the file and builds its header.
    fn new(
        input: Input,
        output: Output,
        tensors: &BTreeMap<String, Tensor>,
        mut outputs: Vec<OutTensor>,
        pairs: Vec<PairSummary>,
        metadata: Option<Vec<(String, String)>>,
    ) -> Result<Plan, WeightsError> {
        let rewritten: HashSet<&str> = outputs.iter().map(|t| t.name.as_str()).collect();
        let copied: Vec<String> = tensors
            .keys()
            .filter(|name| !rewritten.contains(name.as_str()))
            .cloned()
            .collect();
        outputs.extend(
            copied
                .iter()
                .map(|name| OutTensor::copy(name, &tensors[name])),
        );
        // The safetensors crate's order: descending dtype (alignment), then name.
        outputs.sort_by(|a, b| b.dtype.cmp(&a.dtype).then_with(|| a.name.cmp(&b.name)));
        let header = build_header(&outputs, metadata)?;
        let summary = Summary {
            pairs,
            copied,
            bytes_in: outputs.iter().map(|t| t.src.len() as u64).sum(),
            bytes_out: outputs.iter().map(|t| t.len as u64).sum(),
        };
        Ok(Plan {
            input,
            output,
            header,
            tensors: outputs,
            summary,
        })
    }

    /// Tensor bytes the write will produce (for a progress bar).
    pub fn bytes_out(&self) -> u64 {
        self.summary.bytes_out
    }

    /// What the write will do.
    pub fn summary(&self) -> &Summary {
        &self.summary
    }

    /// Writes the output: into a temporary file beside it, renamed over it once complete and
    /// synced. `progress` receives the number of tensor bytes written so far. A failure or a
    /// signal (SIGINT, SIGTERM, SIGHUP) leaves an existing output as it was.
    pub fn write(self, progress: &dyn Fn(u64)) -> Result<Summary, WeightsError> {
        // This loop polls the flag, so the interrupt handler may let it stop cleanly.
        let _ = tilegen_output::interrupt_flag();
        let path = self.output.path().to_path_buf();
        let interrupted = |source| WeightsError::Interrupted {
            path: path.clone(),
            source,
        };
        let write_err = |source| WeightsError::Write {
            path: path.clone(),
            source,
        };
        let output_err = |source| match source {
            OutputError::Interrupted => interrupted(source),
            source => WeightsError::Output { source },
        };
        let mut file = self.output.create().map_err(output_err)?;
        {
            let mut w = BufWriter::with_capacity(1 << 20, &mut file);
            w.write_all(&self.header).map_err(write_err)?;
            let mut done = 0u64;
            for t in &self.tensors {
                tilegen_output::check_interrupted().map_err(interrupted)?;
                let src = &self.input.map[t.src.clone()];
                let bytes = match &t.job {
                    None => Cow::Borrowed(src),
                    Some(job) => Cow::Owned(job.run(&t.name, src)?),
                };
                if bytes.len() != t.len {
                    return Err(WeightsError::InconsistentHeader {
                        reason: format!(
                            "tensor {} came out {} bytes long, the header says {}",
                            t.name,
                            bytes.len(),
                            t.len
                        ),
                        source: None,
                    });
                }
                for chunk in bytes.chunks(WRITE_CHUNK) {
                    tilegen_output::check_interrupted().map_err(interrupted)?;
                    w.write_all(chunk).map_err(write_err)?;
                    done += chunk.len() as u64;
                    progress(done);
                }
            }
            w.flush().map_err(write_err)?;
        }
        let expected = self.header.len() as u64 + self.summary.bytes_out;
        let written = file.file().metadata().map_err(write_err)?.len();
        if written != expected {
            return Err(WeightsError::InconsistentHeader {
                reason: format!("{written} bytes written, {expected} planned"),
                source: None,
            });
        }
        // Sync here, not only in commit: a signal during a long sync is still seen before the
        // rename, and commit's own sync then has nothing left to do.
        file.file().sync_all().map_err(write_err)?;
        tilegen_output::check_interrupted().map_err(interrupted)?;
        file.commit().map_err(output_err)?;
        Ok(self.summary)
    }
}

/// The checks every run starts with, in order: the output is not the input; the output path is
/// usable (before the input's bulk is touched); the input parses.
fn open(input: &Path, output: &Path) -> Result<(Output, Input, Parsed), WeightsError> {
    check_distinct(input, output)?;
    let output = Output::check(output).map_err(|source| WeightsError::Output { source })?;
    let input = Input::open(input)?;
    let parsed = input.parse()?;
    Ok((output, input, parsed))
}

fn parse_record(json: &str) -> Result<PreshuffleRecord, WeightsError> {
    let bad = |source| WeightsError::BadRecord { source };
    // serde_json keeps the last of two equal keys; a record listing a tensor twice is refused.
    serde_json::from_str::<UniqueKeys>(json).map_err(bad)?;
    let record: PreshuffleRecord = serde_json::from_str(json).map_err(bad)?;
    match (record.version, record.original_has_metadata) {
        (1, None) | (2, Some(_)) => Ok(record),
        (1 | 2, _) => Err(bad(de::Error::custom(format!(
            "a version {} record {} `original_has_metadata`",
            record.version,
            if record.version == 1 {
                "cannot have"
            } else {
                "must have"
            }
        )))),
        (version, _) => Err(WeightsError::UnknownRecordVersion { version }),
    }
}

/// The pairs a record lists, each checked to be complete and named as its layout says.
fn record_pairs(record: &PreshuffleRecord) -> Result<Vec<Pair>, WeightsError> {
    let mut pairs = Vec::new();
    for (name, rec) in &record.tensors {
        let mismatch = |reason: String| WeightsError::RecordMismatch {
            tensor: name.clone(),
            reason,
        };
        let (suffix, partner_suffix, partner_layout) = match rec.layout.as_str() {
            B_LAYOUT => ("_blocks", "_scales", SCALE_LAYOUT),
            SCALE_LAYOUT => ("_scales", "_blocks", B_LAYOUT),
            other => {
                return Err(mismatch(format!(
                    "unknown layout {other:?} (known: {B_LAYOUT}, {SCALE_LAYOUT})"
                )));
            }
        };
        let Some(stem) = name.strip_suffix(suffix) else {
            return Err(mismatch(format!(
                "layout {} is for {suffix} tensors",
                rec.layout
            )));
        };
        let partner = format!("{stem}{partner_suffix}");
        match record.tensors.get(&partner) {
            Some(p) if p.layout == partner_layout => {}
            Some(p) => {
                return Err(mismatch(format!(
                    "its partner {partner} is recorded with layout {}, not {partner_layout}",
                    p.layout
                )));
            }
            None => {
                return Err(mismatch(format!(
                    "the record lists it but not its partner {partner}"
                )));
            }
        }
        if rec.layout == B_LAYOUT {
            pairs.push(Pair {
                stem: stem.to_string(),
                blocks: name.clone(),
                scales: partner,
            });
        }
    }
    Ok(pairs)
}

/// A pair of a preshuffled file, checked against its record and against the file's tensors.
struct CheckedPair<'t> {
    pair: Pair,
    /// The records of the blocks and of the scales.
    records: [&'t TensorRecord; 2],
    plan: RecordedPair,
    blocks: &'t Tensor,
    scales: &'t Tensor,
}

/// Every pair `record` lists, each checked as a preshuffle would have made it (the record's
/// shapes are a pair the preshuffle accepts) and against `tensors` (present, U8, shaped as the
/// preshuffle shapes them); and no MXFP4-looking tensor left out of the record.
fn checked_pairs<'t>(
    record: &'t PreshuffleRecord,
    tensors: &'t BTreeMap<String, Tensor>,
) -> Result<Vec<CheckedPair<'t>>, WeightsError> {
    let mut checked = Vec::new();
    for pair in record_pairs(record)? {
        let records = [&record.tensors[&pair.blocks], &record.tensors[&pair.scales]];
        let plan = recorded_pair(&pair, records[0], records[1])?;
        let find = |name: &String, rec: &TensorRecord, want: &Vec<usize>| {
            let mismatch = |reason: String| WeightsError::RecordMismatch {
                tensor: name.clone(),
                reason,
            };
            let tensor = tensors
                .get(name)
                .ok_or_else(|| mismatch("the file has no such tensor".into()))?;
            if tensor.dtype != Dtype::U8 {
                return Err(mismatch(format!(
                    "the tensor has dtype {}; preshuffled MXFP4 tensors are U8",
                    tensor.dtype
                )));
            }
            if &tensor.shape != want {
                return Err(mismatch(format!(
                    "the tensor has shape {:?}, but the preshuffle of a {:?} tensor with K = {} padded to {} has shape {want:?}",
                    tensor.shape, rec.original_shape, plan.dims.k, plan.k_padded
                )));
            }
            Ok(tensor)
        };
        let blocks = find(&pair.blocks, records[0], &plan.shapes.blocks)?;
        let scales = find(&pair.scales, records[1], &plan.shapes.scales)?;
        checked.push(CheckedPair {
            pair,
            records,
            plan,
            blocks,
            scales,
        });
    }
    // A preshuffle rewrites every pair and refuses a lone `_blocks` or U8 `_scales`, so any
    // such tensor left unrecorded means the record was edited: its layout is a guess.
    for (name, tensor) in tensors {
        if !record.tensors.contains_key(name)
            && (name.ends_with("_blocks")
                || (name.ends_with("_scales") && tensor.dtype == Dtype::U8))
        {
            return Err(WeightsError::Unrecorded {
                tensor: name.clone(),
            });
        }
    }
    Ok(checked)
}

/// What a recorded pair must look like once preshuffled.
struct RecordedPair {
    dims: PairDims,
    k_padded: usize,
    shapes: PairShapes,
}

/// Checks a recorded pair as [`Plan::preshuffle`] checked the original: the recorded shapes
/// must be a pair the preshuffle accepts, and K and padded K what it would have chosen.
fn recorded_pair(
    pair: &Pair,
    b_rec: &TensorRecord,
    s_rec: &TensorRecord,
) -> Result<RecordedPair, WeightsError> {
    let impossible = |source: WeightsError| WeightsError::ImpossibleRecord {
        tensor: pair.blocks.clone(),
        source: Box::new(source),
    };
    let as_tensor = |rec: &TensorRecord| Tensor {
        dtype: Dtype::U8,
        shape: rec.original_shape.clone(),
        src: 0..0,
    };
    let dims = pair_dims(pair, &as_tensor(b_rec), &as_tensor(s_rec)).map_err(impossible)?;
    let k_padded = padded_k(&pair.blocks, dims.k, true).map_err(impossible)?;
    for (name, rec) in [(&pair.blocks, b_rec), (&pair.scales, s_rec)] {
        if rec.k != dims.k || rec.k_padded != k_padded {
            return Err(WeightsError::RecordMismatch {
                tensor: name.clone(),
                reason: format!(
                    "it records k = {} and k_padded = {}, but the recorded shapes give K = {} padded to {k_padded}",
                    rec.k, rec.k_padded, dims.k
                ),
            });
        }
    }
    let shapes = PairShapes::new(pair, dims, k_padded).map_err(impossible)?;
    Ok(RecordedPair {
        dims,
        k_padded,
        shapes,
    })
}

/// K padded as the preshuffle pads it: to the next multiple of [`K_ALIGN`].
fn padded_k(blocks: &str, k: usize, pad: bool) -> Result<usize, WeightsError> {
    if k.is_multiple_of(K_ALIGN) {
        return Ok(k);
    }
    if !pad {
        return Err(WeightsError::KNotAligned {
            tensor: blocks.to_string(),
            k,
        });
    }
    k.checked_next_multiple_of(K_ALIGN)
        .ok_or_else(|| WeightsError::Shuffle {
            tensor: blocks.to_string(),
            source: MxError::SizeOverflow {
                what: "K padded",
                detail: format!("{k} rounded up to a multiple of {K_ALIGN}"),
            },
        })
}

/// The preshuffled shapes of a pair, after the Shuffler has accepted its sizes.
struct PairShapes {
    shuffler: Shuffler,
    blocks: Vec<usize>,
    scales: Vec<usize>,
}

impl PairShapes {
    fn new(pair: &Pair, dims: PairDims, k_padded: usize) -> Result<PairShapes, WeightsError> {
        let shuffle = |source| WeightsError::Shuffle {
            tensor: pair.blocks.clone(),
            source,
        };
        let shuffler = Shuffler::new(dims.e).map_err(shuffle)?;
        let mn_pad = Shuffler::scale_padded_mn(dims.n).map_err(shuffle)?;
        shuffler
            .b_5d_grouped_layout(dims.n, k_padded / 2)
            .map_err(shuffle)?;
        shuffler
            .scale_4d_grouped_layout(mn_pad, k_padded / 32)
            .map_err(shuffle)?;
        // Blocks keep their shape with padded K; scales become [E, padded N, padded K/32].
        let lead: &[usize] = if dims.grouped { &[dims.e] } else { &[] };
        let blocks = [lead, &[dims.n, k_padded / 32, 16]].concat();
        let scales = [lead, &[mn_pad, k_padded / 32]].concat();
        Ok(PairShapes {
            shuffler,
            blocks,
            scales,
        })
    }
}

/// The input file, memory-mapped: weight files are gigabytes and are read once, in order.
struct Input {
    path: PathBuf,
    map: memmap2::Mmap,
}

impl fmt::Debug for Input {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Input")
            .field("path", &self.path)
            .field("len", &self.map.len())
            .finish()
    }
}

/// One tensor of the input: its dtype, shape and bytes in the map.
#[derive(Debug, Clone)]
struct Tensor {
    dtype: Dtype,
    shape: Vec<usize>,
    src: Range<usize>,
}

/// What the header says, checked: tensors by name, and `__metadata__` in file order.
struct Parsed {
    tensors: BTreeMap<String, Tensor>,
    metadata: Option<Vec<(String, String)>>,
}

impl Input {
    fn open(path: &Path) -> Result<Self, WeightsError> {
        let io = |source| WeightsError::Io {
            path: path.to_path_buf(),
            source,
        };
        // Opening a FIFO would block, and mapping a device is not reading a file.
        if !std::fs::metadata(path).map_err(io)?.is_file() {
            return Err(WeightsError::NotAFile {
                path: path.to_path_buf(),
            });
        }
        let file = File::open(path).map_err(io)?;
        // SAFETY: the map is read-only and lives as long as this struct; a concurrent writer
        // truncating the file is outside what this tool supports (as with any mmap reader).
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
        Ok(Input {
            path: path.to_path_buf(),
            map,
        })
    }

    fn parse(&self) -> Result<Parsed, WeightsError> {
        let (n, metadata) = SafeTensors::read_metadata(&self.map).map_err(|source| {
            WeightsError::NotSafetensors {
                path: self.path.clone(),
                source,
            }
        })?;
        // read_metadata checked that 8 + n + data covers the file exactly.
        let json = &self.map[8..8 + n];
        let ambiguous = |source| WeightsError::AmbiguousHeader {
            path: self.path.clone(),
            source,
        };
        serde_json::from_slice::<UniqueKeys>(json).map_err(ambiguous)?;
        let scan: HeaderScan = serde_json::from_slice(json).map_err(ambiguous)?;
        let data_start = 8 + n;
        let tensors = metadata
            .tensors()
            .into_iter()
            .map(|(name, info)| {
                let (start, end) = info.data_offsets;
                let tensor = Tensor {
                    dtype: info.dtype,
                    shape: info.shape.clone(),
                    src: data_start + start..data_start + end,
                };
                (name, tensor)
            })
            .collect();
        Ok(Parsed {
            tensors,
            metadata: scan.metadata,
        })
    }
}

fn check_distinct(input: &Path, output: &Path) -> Result<(), WeightsError> {
    use std::os::unix::fs::MetadataExt;
    let meta_in = std::fs::metadata(input).map_err(|source| WeightsError::Io {
        path: input.to_path_buf(),
        source,
    })?;
    // Follows symlinks: a link to the input is the input.
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

/// Builds the length prefix and header of a file holding `outputs` in this order, and checks
/// that the safetensors crate reads it back as exactly that.
///
/// The header is not written by `serialize_to_file`: that function makes its own temporary file,
/// outside `tilegen_output`'s cleanup on failure and on signals, and writes `__metadata__` in
/// hash order, which loses the input's order. It is built from the crate's own `TensorInfo`
/// and checked with its `Metadata`, in the layout the crate writes.
fn build_header(
    outputs: &[OutTensor],
    metadata: Option<Vec<(String, String)>>,
) -> Result<Vec<u8>, WeightsError> {
    let inconsistent = |reason: String, source| WeightsError::InconsistentHeader { reason, source };
    let mut infos = Vec::with_capacity(outputs.len());
    let mut offset = 0usize;
    for t in outputs {
        let end = offset
            .checked_add(t.len)
            .ok_or_else(|| WeightsError::Shuffle {
                tensor: t.name.clone(),
                source: MxError::SizeOverflow {
                    what: "output file size",
                    detail: format!("{offset} + {}", t.len),
                },
            })?;
        let info = TensorInfo {
            dtype: t.dtype,
            shape: t.shape.clone(),
            data_offsets: (offset, end),
        };
        infos.push((t.name.clone(), info));
        offset = end;
    }
    let metadata_map: Option<HashMap<String, String>> =
        metadata.as_ref().map(|m| m.iter().cloned().collect());
    // The crate's own validation: contiguous offsets, each range the size of its shape.
    let planned = Metadata::new(metadata_map.clone(), infos.clone()).map_err(|e| {
        inconsistent(
            "the safetensors crate refuses the planned tensors".into(),
            Some(e),
        )
    })?;
    let header = HeaderOut {
        metadata: metadata.as_deref(),
        tensors: &infos,
    };
    let mut json = serde_json::to_vec(&header)
        .map_err(|e| inconsistent(format!("serialising the header: {e}"), None))?;
    // Padded with spaces to 8 bytes, as the crate pads.
    json.resize(json.len().next_multiple_of(8), b' ');
    if json.len() > MAX_HEADER_BYTES {
        return Err(WeightsError::HeaderTooLarge { bytes: json.len() });
    }
    // Read back as `SafeTensors::read_metadata` reads it.
    let text = std::str::from_utf8(&json)
        .map_err(|e| inconsistent(format!("the header is not UTF-8: {e}"), None))?;
    let back: Metadata = serde_json::from_str(text)
        .map_err(|e| inconsistent(format!("the header does not parse: {e}"), None))?;
    let scan: HeaderScan = serde_json::from_str(text)
        .map_err(|e| inconsistent(format!("the header does not parse: {e}"), None))?;
    // Names are compared one by one: tensors of zero bytes share an offset, so the order
    // `Metadata` reports among them is its hash order.
    if back.tensors().len() != infos.len()
        || back.data_len() != planned.data_len()
        || back.metadata() != &metadata_map
        || scan.metadata != metadata
    {
        return Err(inconsistent(
            "the names, order or metadata differ".into(),
            None,
        ));
    }
    for (name, info) in &infos {
        match back.info(name) {
            Some(b)
                if b.dtype == info.dtype
                    && b.shape == info.shape
                    && b.data_offsets == info.data_offsets => {}
            _ => return Err(inconsistent(format!("tensor {name} differs"), None)),
        }
    }
    let mut bytes = Vec::with_capacity(8 + json.len());
    bytes.extend_from_slice(&(json.len() as u64).to_le_bytes());
    bytes.extend_from_slice(&json);
    Ok(bytes)
}

/// The header as the crate's `Metadata` serialises it, with `__metadata__` first and in the
/// given order rather than hash order.
struct HeaderOut<'a> {
    metadata: Option<&'a [(String, String)]>,
    tensors: &'a [(String, TensorInfo)],
}

impl Serialize for HeaderOut<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(
            self.tensors.len() + usize::from(self.metadata.is_some()),
        ))?;
        if let Some(metadata) = self.metadata {
            map.serialize_entry(METADATA_FIELD, &Entries(metadata))?;
        }
        for (name, info) in self.tensors {
            map.serialize_entry(name, info)?;
        }
        map.end()
    }
}

struct Entries<'a>(&'a [(String, String)]);

impl Serialize for Entries<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (k, v) in self.0 {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

/// The header's `__metadata__` entries in file order (the crate keeps them in a `HashMap`).
struct HeaderScan {
    metadata: Option<Vec<(String, String)>>,
}

impl<'de> Deserialize<'de> for HeaderScan {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Top;
        impl<'de> Visitor<'de> for Top {
            type Value = HeaderScan;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a safetensors header object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<HeaderScan, A::Error> {
                let mut metadata = None;
                while let Some(key) = map.next_key::<String>()? {
                    if key == METADATA_FIELD {
                        metadata = map.next_value::<Option<OrderedStrings>>()?.map(|m| m.0);
                    } else {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
                Ok(HeaderScan { metadata })
            }
        }
        deserializer.deserialize_map(Top)
    }
}

/// A JSON object of strings, in order.
struct OrderedStrings(Vec<(String, String)>);

impl<'de> Deserialize<'de> for OrderedStrings {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = OrderedStrings;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object of strings")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<OrderedStrings, A::Error> {
                let mut entries = Vec::new();
                while let Some(entry) = map.next_entry::<String, String>()? {
                    entries.push(entry);
                }
                Ok(OrderedStrings(entries))
            }
        }
        deserializer.deserialize_map(V)
    }
}

/// Any JSON value, refused if an object in it names a key twice (serde_json would keep the
/// last silently, and another reader might keep the first).
struct UniqueKeys;

impl<'de> Deserialize<'de> for UniqueKeys {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(UniqueKeys)
    }
}

impl<'de> DeserializeSeed<'de> for UniqueKeys {
    type Value = UniqueKeys;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(UniqueKeys)
    }
}

impl<'de> Visitor<'de> for UniqueKeys {
    type Value = UniqueKeys;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("JSON")
    }
    fn visit_bool<E>(self, _: bool) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }
    fn visit_i64<E>(self, _: i64) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }
    fn visit_u64<E>(self, _: u64) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }
    fn visit_f64<E>(self, _: f64) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }
    fn visit_str<E>(self, _: &str) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }
    fn visit_unit<E>(self) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }
    fn visit_none<E>(self) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<UniqueKeys, A::Error> {
        while seq.next_element_seed(UniqueKeys)?.is_some() {}
        Ok(UniqueKeys)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<UniqueKeys, A::Error> {
        let mut seen = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            map.next_value_seed(UniqueKeys)?;
            if !seen.insert(key.clone()) {
                return Err(de::Error::custom(format!("the key {key:?} appears twice")));
            }
        }
        Ok(UniqueKeys)
    }
}

struct Pair {
    stem: String,
    blocks: String,
    scales: String,
}

fn find_pairs(tensors: &BTreeMap<String, Tensor>) -> Result<Vec<Pair>, WeightsError> {
    let mut pairs = Vec::new();
    for (name, tensor) in tensors {
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
            && tensor.dtype == Dtype::U8
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
    /// `[E, N, K/32, 16]` rather than `[N, K/32, 16]`.
    grouped: bool,
}

fn pair_dims(pair: &Pair, blocks: &Tensor, scales: &Tensor) -> Result<PairDims, WeightsError> {
    for (name, t) in [(&pair.blocks, blocks), (&pair.scales, scales)] {
        if t.dtype != Dtype::U8 {
            return Err(WeightsError::WrongDtype {
                tensor: name.clone(),
                dtype: t.dtype.to_string(),
            });
        }
    }
    let bs = blocks.shape.as_slice();
    let bad = |rule: &str| WeightsError::BadShape {
        tensor: pair.blocks.clone(),
        shape: bs.to_vec(),
        rule: rule.to_string(),
    };
    let (e, n, kb, grouped) = match *bs {
        [e, n, kb, 16] => (e, n, kb, true),
        [n, kb, 16] => (1, n, kb, false),
        _ => {
            return Err(bad(
                "blocks must be [E, N, K/32, 16] or [N, K/32, 16] (16 bytes = 32 FP4 values)",
            ));
        }
    };
    if e == 0 || n == 0 || kb == 0 {
        return Err(bad("every dimension must be non-zero"));
    }
    let k = kb
        .checked_mul(32)
        .ok_or_else(|| bad("K = K/32 * 32 overflows"))?;
    let expected = &bs[..bs.len() - 1];
    if scales.shape != expected {
        return Err(WeightsError::BadShape {
            tensor: pair.scales.clone(),
            shape: scales.shape.clone(),
            rule: format!(
                "{} has shape {bs:?}, so its scales must be {expected:?}",
                pair.blocks
            ),
        });
    }
    Ok(PairDims { e, n, k, grouped })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum JobKind {
    PreshuffleBlocks,
    PreshuffleScales,
    UnshuffleBlocks,
    UnshuffleScales,
}

/// The work to produce one output tensor, done when the writer reaches it so that only one
/// tensor's buffers are alive at a time.
#[derive(Debug, Clone, Copy)]
struct Job {
    kind: JobKind,
    shuffler: Shuffler,
    dims: PairDims,
    k_padded: usize,
}

impl Job {
    /// Every size check [`Job::run`] will meet, against a source of `src_len` bytes; the
    /// output's length.
    fn check(&self, src_len: usize) -> Result<usize, MxError> {
        let PairDims { n, k, .. } = self.dims;
        let (kp, s) = (self.k_padded, &self.shuffler);
        let mn_pad = Shuffler::scale_padded_mn(n)?;
        // Row-major [E, rows, cols] sizes; `b_len` is that product, checked.
        let rows = |cols| s.b_len(n, cols);
        let (src, out) = match self.kind {
            JobKind::PreshuffleBlocks | JobKind::UnshuffleBlocks => {
                s.b_5d_grouped_layout(n, kp / 2)?;
                (rows(k / 2)?, rows(kp / 2)?)
            }
            JobKind::PreshuffleScales | JobKind::UnshuffleScales => {
                s.scale_4d_grouped_layout(mn_pad, kp / 32)?;
                (rows(k / 32)?, s.scale_len(n, kp / 32)?)
            }
        };
        let (src, out) = match self.kind {
            JobKind::PreshuffleBlocks | JobKind::PreshuffleScales => (src, out),
            JobKind::UnshuffleBlocks | JobKind::UnshuffleScales => (out, src),
        };
        if src != src_len {
            return Err(MxError::LengthMismatch {
                what: "source tensor",
                expected: src,
                actual: src_len,
            });
        }
        Ok(out)
    }

    fn run(&self, tensor: &str, src: &[u8]) -> Result<Vec<u8>, WeightsError> {
        let shuffle = |source| WeightsError::Shuffle {
            tensor: tensor.to_string(),
            source,
        };
        let out_len = self.check(src.len()).map_err(shuffle)?;
        let PairDims { e, n, k, .. } = self.dims;
        let kp = self.k_padded;
        let s = &self.shuffler;
        match self.kind {
            JobKind::PreshuffleBlocks => {
                let padded = pad_rows(tensor, src, e * n, k / 2, kp / 2)?;
                let mut dst = zeroed(tensor, out_len)?;
                s.preshuffle_b_5d(n, kp / 2, &padded, &mut dst)
                    .map_err(shuffle)?;
                Ok(dst)
            }
            JobKind::PreshuffleScales => {
                let padded = pad_rows(tensor, src, e * n, k / 32, kp / 32)?;
                let mut dst = zeroed(tensor, out_len)?;
                s.preshuffle_scale_4d(n, kp / 32, &padded, &mut dst)
                    .map_err(shuffle)?;
                Ok(dst)
            }
            JobKind::UnshuffleBlocks => {
                let mut full = zeroed(tensor, e * n * (kp / 2))?;
                s.unshuffle_b_5d(n, kp / 2, src, &mut full)
                    .map_err(shuffle)?;
                crop_rows(tensor, full, e * n, kp / 2, k / 2)
            }
            JobKind::UnshuffleScales => {
                let mut full = zeroed(tensor, e * n * (kp / 32))?;
                s.unshuffle_scale_4d(n, kp / 32, src, &mut full)
                    .map_err(shuffle)?;
                crop_rows(tensor, full, e * n, kp / 32, k / 32)
            }
        }
    }
}

/// A zeroed buffer, or an error naming the tensor: a weight tensor can be gigabytes, and
/// running out of memory must not abort the process with a temporary file left behind.
fn zeroed(tensor: &str, len: usize) -> Result<Vec<u8>, WeightsError> {
    let mut v = Vec::new();
    v.try_reserve_exact(len)
        .map_err(|source| WeightsError::OutOfMemory {
            tensor: tensor.to_string(),
            bytes: len,
            source,
        })?;
    v.resize(len, 0);
    Ok(v)
}

/// Rows of `width` bytes widened to `padded` with zeros (zero FP4 data, zero E8M0 scale bytes).
fn pad_rows<'a>(
    tensor: &str,
    src: &'a [u8],
    rows: usize,
    width: usize,
    padded: usize,
) -> Result<Cow<'a, [u8]>, WeightsError> {
    if width == padded {
        return Ok(Cow::Borrowed(src));
    }
    let mut out = zeroed(tensor, rows * padded)?;
    for (d, s) in out.chunks_exact_mut(padded).zip(src.chunks_exact(width)) {
        d[..width].copy_from_slice(s);
    }
    Ok(Cow::Owned(out))
}

fn crop_rows(
    tensor: &str,
    src: Vec<u8>,
    rows: usize,
    padded: usize,
    width: usize,
) -> Result<Vec<u8>, WeightsError> {
    if width == padded {
        return Ok(src);
    }
    let mut out = zeroed(tensor, rows * width)?;
    for (d, s) in out.chunks_exact_mut(width).zip(src.chunks_exact(padded)) {
        d.copy_from_slice(&s[..width]);
    }
    Ok(out)
}

/// One tensor of the output.
#[derive(Debug)]
struct OutTensor {
    name: String,
    dtype: Dtype,
    shape: Vec<usize>,
    /// Its source bytes in the input map.
    src: Range<usize>,
    /// Bytes it will have.
    len: usize,
    /// None: copied as it is.
    job: Option<Job>,
}

impl OutTensor {
    fn copy(name: &str, t: &Tensor) -> Self {
        OutTensor {
            name: name.to_string(),
            dtype: t.dtype,
            shape: t.shape.clone(),
            src: t.src.clone(),
            len: t.src.len(),
            job: None,
        }
    }

    /// A rewritten tensor, its job checked against the source now rather than mid-write.
    fn computed(name: &str, t: &Tensor, shape: Vec<usize>, job: Job) -> Result<Self, WeightsError> {
        let len = job
            .check(t.src.len())
            .map_err(|source| WeightsError::Shuffle {
                tensor: name.to_string(),
                source,
            })?;
        Ok(OutTensor {
            name: name.to_string(),
            dtype: t.dtype,
            shape,
            src: t.src.clone(),
            len,
            job: Some(job),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::Xoshiro256PlusPlus;
    use rand::{RngExt, SeedableRng};
    use safetensors::tensor::TensorView;

    /// A tensor to write: name, dtype, shape, bytes.
    type Spec = (String, Dtype, Vec<usize>, Vec<u8>);

    fn spec(name: &str, dtype: Dtype, shape: &[usize], data: Vec<u8>) -> Spec {
        (name.to_string(), dtype, shape.to_vec(), data)
    }

    /// The file the safetensors crate writes for these tensors.
    fn serialize(tensors: &[Spec], meta: Option<HashMap<String, String>>) -> Vec<u8> {
        let views: Vec<(String, TensorView<'_>)> = tensors
            .iter()
            .map(|(n, d, s, b)| (n.clone(), TensorView::new(*d, s.clone(), b).unwrap()))
            .collect();
        safetensors::serialize(views, meta).unwrap()
    }

    fn write(path: &Path, tensors: &[Spec], meta: Option<HashMap<String, String>>) {
        std::fs::write(path, serialize(tensors, meta)).unwrap();
    }

    fn bytes(n: usize, seed: u8) -> Vec<u8> {
        (0..n)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect()
    }

    fn meta(entries: &[(&str, &str)]) -> Option<HashMap<String, String>> {
        Some(
            entries
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    /// gpt-oss-like file: an expert MoE weight (K needs padding), a 2-D weight and a bias.
    fn sample(dir: &Path) -> PathBuf {
        let p = dir.join("in.safetensors");
        let (e, n, kb) = (2, 32, 3); // K = 96: pads to 256
        write(
            &p,
            &[
                spec(
                    "mlp.w1_blocks",
                    Dtype::U8,
                    &[e, n, kb, 16],
                    bytes(e * n * kb * 16, 1),
                ),
                spec(
                    "mlp.w1_scales",
                    Dtype::U8,
                    &[e, n, kb],
                    bytes(e * n * kb, 2),
                ),
                spec(
                    "attn.w_blocks",
                    Dtype::U8,
                    &[48, 8, 16],
                    bytes(48 * 8 * 16, 3),
                ),
                spec("attn.w_scales", Dtype::U8, &[48, 8], bytes(48 * 8, 4)),
                spec("bias", Dtype::F32, &[5], bytes(20, 5)),
            ],
            meta(&[("format", "pt")]),
        );
        p
    }

    /// Tensors by name: dtype, shape, bytes.
    type Tensors = HashMap<String, (Dtype, Vec<usize>, Vec<u8>)>;

    fn read(path: &Path) -> (Tensors, Option<HashMap<String, String>>) {
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
        (t, meta.metadata().clone())
    }

    fn leftovers(dir: &Path) -> Vec<String> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with('.'))
            .collect()
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
        let meta = meta.unwrap();
        assert_eq!(meta["format"], "pt");
        let record: PreshuffleRecord = serde_json::from_str(&meta[METADATA_KEY]).unwrap();
        assert_eq!(record.version, RECORD_VERSION);
        assert_eq!(record.original_has_metadata, Some(true));
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
        let padded = pad_rows("t", &orig, 64, 48, 128).unwrap();
        let mut want = vec![0u8; 2 * 32 * 128];
        Shuffler::new(2)
            .unwrap()
            .preshuffle_b_5d(32, 128, &padded, &mut want)
            .unwrap();
        assert_eq!(t["mlp.w1_blocks"].2, want);
        let u = unshuffle_file(&pre, &back, &|_| {}).unwrap();
        assert_eq!(u.pairs.len(), 2);
        assert_eq!(
            std::fs::read(&input).unwrap(),
            std::fs::read(&back).unwrap()
        );
        assert!(leftovers(dir.path()).is_empty());
    }

    /// Random files as the safetensors crate writes them, with and without `__metadata__`
    /// (several entries: the crate writes them in hash order, which the round trip keeps).
    #[test]
    fn random_files_round_trip_byte_exact() {
        let dir = tempfile::tempdir().unwrap();
        let (input, pre, back) = (
            dir.path().join("in"),
            dir.path().join("pre"),
            dir.path().join("back"),
        );
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(0x5afe);
        let others = [
            Dtype::F32,
            Dtype::BF16,
            Dtype::I64,
            Dtype::U8,
            Dtype::F16,
            Dtype::I8,
        ];
        let (mut with_meta, mut without, mut compared) = (0, 0, 0);
        for case in 0..48 {
            let mut tensors = Vec::new();
            for p in 0..rng.random_range(0..4usize) {
                let e = rng.random_range(1..4usize);
                let n = 16 * rng.random_range(1..4usize);
                let kb = rng.random_range(1..12usize);
                let mut data = vec![0u8; e * n * kb * 16];
                rng.fill(&mut data[..]);
                let grouped = rng.random_bool(0.5);
                let (bs, ss): (Vec<usize>, Vec<usize>) = if grouped {
                    (vec![e, n, kb, 16], vec![e, n, kb])
                } else {
                    (vec![e * n, kb, 16], vec![e * n, kb])
                };
                let mut sc = vec![0u8; e * n * kb];
                rng.fill(&mut sc[..]);
                tensors.push(spec(&format!("layer{p}.w_blocks"), Dtype::U8, &bs, data));
                tensors.push(spec(&format!("layer{p}.w_scales"), Dtype::U8, &ss, sc));
            }
            for o in 0..rng.random_range(0..4usize) {
                let dtype = others[rng.random_range(0..others.len())];
                let len = rng.random_range(0..9usize);
                let mut data = vec![0u8; len * dtype.bitsize() / 8];
                rng.fill(&mut data[..]);
                // A non-U8 `_scales` without blocks is an ordinary tensor.
                let name = if dtype != Dtype::U8 && o == 0 {
                    format!("norm{case}_scales")
                } else {
                    format!("t{o}")
                };
                tensors.push(spec(&name, dtype, &[len], data));
            }
            if tensors.is_empty() {
                // safetensors 0.8 writes an unreadable header for no tensors and an empty
                // `__metadata__` (its map length hint counts neither).
                tensors.push(spec("one", Dtype::F32, &[1], vec![0; 4]));
            }
            let metadata = match rng.random_range(0..4) {
                0 => None,
                1 => meta(&[]),
                2 => meta(&[("format", "pt")]),
                _ => meta(&[("format", "pt"), ("a", "1"), ("b \"q\"", "ü\n"), ("z", "")]),
            };
            if metadata.is_some() {
                with_meta += 1;
            } else {
                without += 1;
            }
            let single_entry = metadata.as_ref().is_none_or(|m| m.is_empty());
            let original = serialize(&tensors, metadata);
            std::fs::write(&input, &original).unwrap();
            let s = preshuffle_file(&input, &pre, PreshuffleOptions::default(), &|_| {}).unwrap();
            if single_entry {
                // The output's metadata is the record alone, so the crate's own writer (hash
                // order aside) gives the same bytes for the same tensors: the layout is its.
                let (t, m) = read(&pre);
                let specs: Vec<Spec> = t.into_iter().map(|(n, (d, s, b))| (n, d, s, b)).collect();
                assert_eq!(std::fs::read(&pre).unwrap(), serialize(&specs, m));
                compared += 1;
            }
            unshuffle_file(&pre, &back, &|_| {}).unwrap();
            assert_eq!(
                std::fs::read(&back).unwrap(),
                original,
                "case {case}: {s:?}"
            );
        }
        assert!(
            with_meta > 10 && without > 5 && compared > 10,
            "{with_meta} {without} {compared}"
        );
        assert!(leftovers(dir.path()).is_empty());
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
        assert!(matches!(pre(d, true), Err(WeightsError::NotAFile { .. })));
        let case = |name: &str, tensors: &[Spec]| {
            let p = d.join(name);
            write(&p, tensors, None);
            p
        };
        let p = case(
            "dtype",
            &[
                spec("w_blocks", Dtype::F32, &[16, 8, 4], bytes(16 * 8 * 16, 0)),
                spec("w_scales", Dtype::U8, &[16, 8], bytes(128, 0)),
            ],
        );
        assert!(matches!(
            pre(&p, true),
            Err(WeightsError::WrongDtype { .. })
        ));
        let p = case(
            "noscales",
            &[spec(
                "w_blocks",
                Dtype::U8,
                &[16, 8, 16],
                bytes(16 * 8 * 16, 0),
            )],
        );
        assert!(matches!(
            pre(&p, true),
            Err(WeightsError::MissingScales { .. })
        ));
        let p = case(
            "noblocks",
            &[spec("w_scales", Dtype::U8, &[16, 8], bytes(128, 0))],
        );
        assert!(matches!(
            pre(&p, true),
            Err(WeightsError::MissingBlocks { .. })
        ));
        let p = case(
            "disagree",
            &[
                spec("w_blocks", Dtype::U8, &[16, 8, 16], bytes(16 * 8 * 16, 0)),
                spec("w_scales", Dtype::U8, &[16, 4], bytes(64, 0)),
            ],
        );
        assert!(matches!(pre(&p, true), Err(WeightsError::BadShape { .. })));
        let p = case(
            "last16",
            &[
                spec("w_blocks", Dtype::U8, &[16, 8, 8], bytes(16 * 8 * 8, 0)),
                spec("w_scales", Dtype::U8, &[16, 8], bytes(128, 0)),
            ],
        );
        assert!(matches!(pre(&p, true), Err(WeightsError::BadShape { .. })));
        let p = case(
            "n20",
            &[
                spec("w_blocks", Dtype::U8, &[20, 8, 16], bytes(20 * 8 * 16, 0)),
                spec("w_scales", Dtype::U8, &[20, 8], bytes(160, 0)),
            ],
        );
        match pre(&p, true) {
            Err(WeightsError::Shuffle { tensor, .. }) => assert_eq!(tensor, "w_blocks"),
            other => panic!("{other:?}"),
        }
        let p = case(
            "k96",
            &[
                spec("w_blocks", Dtype::U8, &[16, 3, 16], bytes(16 * 3 * 16, 0)),
                spec("w_scales", Dtype::U8, &[16, 3], bytes(48, 0)),
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
        assert!(matches!(
            preshuffle_file(
                &good,
                &d.join("no/such/dir"),
                PreshuffleOptions::default(),
                &|_| {}
            ),
            Err(WeightsError::Output { .. })
        ));
        assert!(leftovers(d).is_empty());
    }

    #[test]
    fn ambiguous_headers_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let input = dir.path().join("in");
        let file = |json: &str, data: &[u8]| {
            let mut f = (json.len() as u64).to_le_bytes().to_vec();
            f.extend_from_slice(json.as_bytes());
            f.extend_from_slice(data);
            std::fs::write(&input, f).unwrap();
        };
        let t = r#""t":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}"#;
        // The same tensor twice: serde_json keeps the last, and the file still validates.
        file(&format!("{{{t},{t}}}"), &[1, 2]);
        let e = preshuffle_file(&input, &out, PreshuffleOptions::default(), &|_| {}).unwrap_err();
        assert!(matches!(e, WeightsError::AmbiguousHeader { .. }), "{e:?}");
        file(
            &format!(r#"{{"__metadata__":{{"a":"1","a":"2"}},{t}}}"#),
            &[1, 2],
        );
        let e = preshuffle_file(&input, &out, PreshuffleOptions::default(), &|_| {}).unwrap_err();
        assert!(matches!(e, WeightsError::AmbiguousHeader { .. }), "{e:?}");
        // Not ambiguous: accepted, and the header is rewritten in the crate's layout.
        file(&format!(r#"{{"__metadata__":null,{t}}}"#), &[1, 2]);
        preshuffle_file(&input, &out, PreshuffleOptions::default(), &|_| {}).unwrap();
        let record = read(&out).1.unwrap().remove(METADATA_KEY).unwrap();
        assert!(
            record.contains("\"original_has_metadata\":false"),
            "{record}"
        );
    }

    /// A preshuffled file whose record and tensors are then edited.
    struct Forge {
        dir: tempfile::TempDir,
        tensors: Vec<Spec>,
        meta: HashMap<String, String>,
    }

    impl Forge {
        fn new() -> Forge {
            let dir = tempfile::tempdir().unwrap();
            let input = sample(dir.path());
            let pre = dir.path().join("pre");
            preshuffle_file(&input, &pre, PreshuffleOptions::default(), &|_| {}).unwrap();
            let (t, m) = read(&pre);
            let tensors = t.into_iter().map(|(n, (d, s, b))| (n, d, s, b)).collect();
            Forge {
                dir,
                tensors,
                meta: m.unwrap(),
            }
        }

        fn record(&self) -> serde_json::Value {
            serde_json::from_str(&self.meta[METADATA_KEY]).unwrap()
        }

        fn set_record(&mut self, v: serde_json::Value) {
            self.meta.insert(METADATA_KEY.into(), v.to_string());
        }

        /// Unshuffles the forged file onto an existing output, which must survive a refusal.
        fn unshuffle(&self) -> Result<Summary, WeightsError> {
            let input = self.dir.path().join("forged");
            write(&input, &self.tensors, Some(self.meta.clone()));
            let out = self.dir.path().join("out");
            std::fs::write(&out, b"precious").unwrap();
            let r = unshuffle_file(&input, &out, &|_| {});
            if r.is_err() {
                assert_eq!(std::fs::read(&out).unwrap(), b"precious");
            }
            assert!(leftovers(self.dir.path()).is_empty());
            r
        }
    }

    type Edit = Box<dyn Fn(&mut Forge)>;

    #[test]
    fn forged_records_are_refused() {
        // Untouched: accepted.
        Forge::new().unshuffle().unwrap();
        let cases: Vec<(&str, Edit)> = vec![
            (
                "version 99",
                Box::new(|f| {
                    let mut r = f.record();
                    r["version"] = 99.into();
                    f.set_record(r);
                }),
            ),
            (
                "one tensor of a pair",
                Box::new(|f| {
                    let mut r = f.record();
                    r["tensors"]
                        .as_object_mut()
                        .unwrap()
                        .remove("attn.w_scales");
                    f.set_record(r);
                }),
            ),
            (
                "pair missing from the record",
                Box::new(|f| {
                    let mut r = f.record();
                    let t = r["tensors"].as_object_mut().unwrap();
                    t.remove("attn.w_scales");
                    t.remove("attn.w_blocks");
                    f.set_record(r);
                }),
            ),
            (
                "disagreeing N",
                Box::new(|f| {
                    let mut r = f.record();
                    r["tensors"]["mlp.w1_scales"]["original_shape"] = serde_json::json!([2, 16, 3]);
                    f.set_record(r);
                }),
            ),
            (
                "disagreeing K",
                Box::new(|f| {
                    let mut r = f.record();
                    r["tensors"]["mlp.w1_blocks"]["k"] = 64.into();
                    f.set_record(r);
                }),
            ),
            (
                "over-padded K",
                Box::new(|f| {
                    let mut r = f.record();
                    for t in ["mlp.w1_blocks", "mlp.w1_scales"] {
                        r["tensors"][t]["k_padded"] = 512.into();
                    }
                    f.set_record(r);
                }),
            ),
            (
                "N = 8 (the Shuffler needs 16)",
                Box::new(|f| {
                    let mut r = f.record();
                    r["tensors"]["attn.w_blocks"]["original_shape"] = serde_json::json!([8, 8, 16]);
                    r["tensors"]["attn.w_scales"]["original_shape"] = serde_json::json!([8, 8]);
                    f.set_record(r);
                }),
            ),
            (
                "absent pair",
                Box::new(|f| {
                    let mut r = f.record();
                    r["tensors"]["ghost_blocks"] = r["tensors"]["attn.w_blocks"].clone();
                    r["tensors"]["ghost_scales"] = r["tensors"]["attn.w_scales"].clone();
                    f.set_record(r);
                }),
            ),
            (
                "record for a copied tensor",
                Box::new(|f| {
                    let mut r = f.record();
                    r["tensors"]["bias"] = r["tensors"]["attn.w_blocks"].clone();
                    f.set_record(r);
                }),
            ),
            (
                "tensor of the record missing",
                Box::new(|f| {
                    f.tensors.retain(|t| t.0 != "attn.w_scales");
                }),
            ),
            (
                "shape edited",
                Box::new(|f| {
                    let t = f
                        .tensors
                        .iter_mut()
                        .find(|t| t.0 == "attn.w_scales")
                        .unwrap();
                    t.2 = vec![32, 16];
                }),
            ),
            (
                "dtype edited",
                Box::new(|f| {
                    let t = f
                        .tensors
                        .iter_mut()
                        .find(|t| t.0 == "attn.w_scales")
                        .unwrap();
                    t.1 = Dtype::I8;
                }),
            ),
            (
                "layout swapped",
                Box::new(|f| {
                    let mut r = f.record();
                    r["tensors"]["attn.w_scales"]["layout"] = B_LAYOUT.into();
                    f.set_record(r);
                }),
            ),
            (
                "unknown field",
                Box::new(|f| {
                    let mut r = f.record();
                    r["extra"] = 1.into();
                    f.set_record(r);
                }),
            ),
            (
                "invalid JSON",
                Box::new(|f| {
                    f.meta
                        .insert(METADATA_KEY.into(), "{\"version\": 2,".into());
                }),
            ),
            (
                "duplicate key",
                Box::new(|f| {
                    let r = f.meta[METADATA_KEY].replacen("{", "{\"version\":2,", 1);
                    f.meta.insert(METADATA_KEY.into(), r);
                }),
            ),
            (
                "no metadata, yet metadata",
                Box::new(|f| {
                    let mut r = f.record();
                    r["original_has_metadata"] = false.into();
                    f.set_record(r);
                }),
            ),
            (
                "version 2 without original_has_metadata",
                Box::new(|f| {
                    let mut r = f.record();
                    r.as_object_mut().unwrap().remove("original_has_metadata");
                    f.set_record(r);
                }),
            ),
        ];
        for (what, edit) in cases {
            let mut f = Forge::new();
            edit(&mut f);
            let e = f.unshuffle().expect_err(what);
            let text = format!("{e}");
            eprintln!("{what}: {text}");
            match what {
                "version 99" => assert!(matches!(
                    e,
                    WeightsError::UnknownRecordVersion { version: 99 }
                )),
                "one tensor of a pair" => assert!(text.contains("attn.w_blocks"), "{text}"),
                "pair missing from the record" => {
                    assert!(matches!(e, WeightsError::Unrecorded { .. }), "{e:?}")
                }
                "N = 8 (the Shuffler needs 16)" => {
                    assert!(matches!(e, WeightsError::ImpossibleRecord { .. }), "{e:?}");
                    assert!(!text.contains("Unshuffle"), "{text}");
                }
                "absent pair" => assert!(
                    text.contains("ghost_blocks: the file has no such tensor"),
                    "{text}"
                ),
                "no metadata, yet metadata" => {
                    assert!(
                        matches!(e, WeightsError::MetadataMismatch { entries: 1 }),
                        "{e:?}"
                    )
                }
                "invalid JSON" | "duplicate key" | "unknown field" => {
                    assert!(matches!(e, WeightsError::BadRecord { .. }), "{e:?}")
                }
                _ => {}
            }
        }
    }

    #[test]
    fn version_1_records_are_read() {
        let mut f = Forge::new();
        let mut r = f.record();
        r["version"] = 1.into();
        r.as_object_mut().unwrap().remove("original_has_metadata");
        f.set_record(r);
        f.unshuffle().unwrap();
    }

    #[test]
    fn jobs_check_what_they_run() {
        let dims = PairDims {
            e: 2,
            n: 32,
            k: 96,
            grouped: true,
        };
        let job = |kind| Job {
            kind,
            shuffler: Shuffler::new(2).unwrap(),
            dims,
            k_padded: 256,
        };
        assert_eq!(
            job(JobKind::PreshuffleBlocks).check(2 * 32 * 48),
            Ok(2 * 32 * 128)
        );
        assert_eq!(
            job(JobKind::PreshuffleScales).check(2 * 32 * 3),
            Ok(2 * 32 * 8)
        );
        assert_eq!(
            job(JobKind::UnshuffleBlocks).check(2 * 32 * 128),
            Ok(2 * 32 * 48)
        );
        assert_eq!(
            job(JobKind::UnshuffleScales).check(2 * 32 * 8),
            Ok(2 * 32 * 3)
        );
        assert!(job(JobKind::UnshuffleBlocks).check(7).is_err());
        // A wrong length is an error naming the tensor, before any buffer is allocated.
        let e = job(JobKind::UnshuffleScales)
            .run("x_scales", &[0; 5])
            .unwrap_err();
        assert!(e.to_string().contains("x_scales"), "{e}");
    }
}

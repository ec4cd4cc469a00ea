//! The `amdhsa.kernels` entries of the `NT_AMDGPU_METADATA` note (msgpack).

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use rmpv::Value;
use serde::Serialize;

use crate::error::CodeObjectError;

/// What a kernel argument is (the metadata's `.value_kind`): an explicit argument the caller
/// passes, or a hidden one the runtime fills.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ValueKind {
    /// An argument passed by value (integers, floats, structs).
    ByValue,
    /// A pointer to global memory.
    GlobalBuffer,
    /// A pointer to dynamically allocated LDS.
    DynamicSharedPointer,
    /// An image handle.
    Image,
    /// A sampler handle.
    Sampler,
    /// A pipe.
    Pipe,
    /// A device-side enqueue queue.
    Queue,
    /// `hidden_block_count_{x,y,z}`: workgroups in the grid, per dimension (0, 1, 2).
    HiddenBlockCount(usize),
    /// `hidden_group_size_{x,y,z}`: work-items per workgroup, per dimension.
    HiddenGroupSize(usize),
    /// `hidden_remainder_{x,y,z}`: work-items of the last, partial workgroup.
    HiddenRemainder(usize),
    /// `hidden_global_offset_{x,y,z}`.
    HiddenGlobalOffset(usize),
    /// `hidden_grid_dims`: 1, 2 or 3.
    HiddenGridDims,
    /// `hidden_dynamic_lds_size`: LDS bytes added at launch.
    HiddenDynamicLdsSize,
    /// Another hidden argument (pointers to runtime objects: queue, heap, hostcall, printf,
    /// multigrid sync, completion action, private and shared bases; `hidden_none`), by name.
    Hidden(String),
    /// A kind this crate does not know, by name: metadata of other compilers and newer code
    /// object versions stays readable.
    Other(String),
}

impl ValueKind {
    /// Whether the runtime, not the caller, fills the argument.
    pub fn is_hidden(&self) -> bool {
        matches!(
            self,
            ValueKind::HiddenBlockCount(_)
                | ValueKind::HiddenGroupSize(_)
                | ValueKind::HiddenRemainder(_)
                | ValueKind::HiddenGlobalOffset(_)
                | ValueKind::HiddenGridDims
                | ValueKind::HiddenDynamicLdsSize
                | ValueKind::Hidden(_)
        )
    }
}

const XYZ: [&str; 3] = ["x", "y", "z"];

impl FromStr for ValueKind {
    // Every name is a kind: unknown ones become `Hidden` or `Other`.
    type Err = std::convert::Infallible;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let axis = |prefix: &str| {
            s.strip_prefix(prefix)
                .and_then(|a| XYZ.iter().position(|x| *x == a))
        };
        Ok(match s {
            "by_value" => ValueKind::ByValue,
            "global_buffer" => ValueKind::GlobalBuffer,
            "dynamic_shared_pointer" => ValueKind::DynamicSharedPointer,
            "image" => ValueKind::Image,
            "sampler" => ValueKind::Sampler,
            "pipe" => ValueKind::Pipe,
            "queue" => ValueKind::Queue,
            "hidden_grid_dims" => ValueKind::HiddenGridDims,
            "hidden_dynamic_lds_size" => ValueKind::HiddenDynamicLdsSize,
            _ => {
                if let Some(d) = axis("hidden_block_count_") {
                    ValueKind::HiddenBlockCount(d)
                } else if let Some(d) = axis("hidden_group_size_") {
                    ValueKind::HiddenGroupSize(d)
                } else if let Some(d) = axis("hidden_remainder_") {
                    ValueKind::HiddenRemainder(d)
                } else if let Some(d) = axis("hidden_global_offset_") {
                    ValueKind::HiddenGlobalOffset(d)
                } else if s.starts_with("hidden_") {
                    ValueKind::Hidden(s.to_string())
                } else {
                    ValueKind::Other(s.to_string())
                }
            }
        })
    }
}

impl fmt::Display for ValueKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let axis = |d: &usize| XYZ.get(*d).copied().unwrap_or("?");
        match self {
            ValueKind::ByValue => f.write_str("by_value"),
            ValueKind::GlobalBuffer => f.write_str("global_buffer"),
            ValueKind::DynamicSharedPointer => f.write_str("dynamic_shared_pointer"),
            ValueKind::Image => f.write_str("image"),
            ValueKind::Sampler => f.write_str("sampler"),
            ValueKind::Pipe => f.write_str("pipe"),
            ValueKind::Queue => f.write_str("queue"),
            ValueKind::HiddenBlockCount(d) => write!(f, "hidden_block_count_{}", axis(d)),
            ValueKind::HiddenGroupSize(d) => write!(f, "hidden_group_size_{}", axis(d)),
            ValueKind::HiddenRemainder(d) => write!(f, "hidden_remainder_{}", axis(d)),
            ValueKind::HiddenGlobalOffset(d) => write!(f, "hidden_global_offset_{}", axis(d)),
            ValueKind::HiddenGridDims => f.write_str("hidden_grid_dims"),
            ValueKind::HiddenDynamicLdsSize => f.write_str("hidden_dynamic_lds_size"),
            ValueKind::Hidden(s) | ValueKind::Other(s) => f.write_str(s),
        }
    }
}

impl Serialize for ValueKind {
    /// As the metadata spells it.
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// One kernel argument.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KernelArg {
    /// Source name, when the compiler kept it.
    pub name: Option<String>,
    /// Byte offset in the kernarg segment.
    pub offset: u32,
    /// Size in bytes.
    pub size: u32,
    /// `.value_kind`: `global_buffer`, `by_value`, `hidden_block_count_x`, ...
    pub value_kind: ValueKind,
    /// `.address_space` of pointers (`global`, ...).
    pub address_space: Option<String>,
    /// `.value_type`, when present (older metadata).
    pub value_type: Option<String>,
    /// Every other key (`.type_name`, `.access`, `.is_const`, ...), as msgpack values.
    #[serde(skip)]
    pub extra: BTreeMap<String, Value>,
}

impl KernelArg {
    /// Hidden arguments are filled by the runtime, not the caller.
    pub fn is_hidden(&self) -> bool {
        self.value_kind.is_hidden()
    }
}

/// A kernel's metadata.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KernelMeta {
    /// `.name`.
    pub name: String,
    /// `.symbol` (the descriptor, `<name>.kd`).
    pub symbol: String,
    /// `.args`, in kernarg order.
    pub args: Vec<KernelArg>,
    /// `.group_segment_fixed_size`.
    pub group_segment_fixed_size: u32,
    /// `.private_segment_fixed_size`.
    pub private_segment_fixed_size: u32,
    /// `.kernarg_segment_size`.
    pub kernarg_segment_size: u32,
    /// `.kernarg_segment_align`.
    pub kernarg_segment_align: u32,
    /// `.wavefront_size`.
    pub wavefront_size: u32,
    /// `.sgpr_count`.
    pub sgpr_count: u32,
    /// `.vgpr_count`.
    pub vgpr_count: u32,
    /// `.agpr_count`.
    pub agpr_count: u32,
    /// `.sgpr_spill_count`.
    pub sgpr_spill_count: u32,
    /// `.vgpr_spill_count`.
    pub vgpr_spill_count: u32,
    /// `.max_flat_workgroup_size`.
    pub max_flat_workgroup_size: u32,
    /// `.uses_dynamic_stack`.
    pub uses_dynamic_stack: bool,
    /// Every other key, as msgpack values.
    #[serde(skip)]
    pub extra: BTreeMap<String, Value>,
}

fn as_map(v: &Value, what: &str) -> Result<Vec<(String, Value)>, CodeObjectError> {
    let Value::Map(entries) = v else {
        return Err(CodeObjectError::Metadata(format!("{what} is not a map")));
    };
    entries
        .iter()
        .map(|(k, v)| match k.as_str() {
            Some(k) => Ok((k.to_string(), v.clone())),
            None => Err(CodeObjectError::Metadata(format!(
                "{what} has a non-string key {k}"
            ))),
        })
        .collect()
}

fn uint(v: &Value, key: &str) -> Result<u32, CodeObjectError> {
    v.as_u64()
        .and_then(|x| u32::try_from(x).ok())
        .ok_or_else(|| {
            CodeObjectError::Metadata(format!("{key} = {v} is not a 32-bit unsigned integer"))
        })
}

fn string(v: &Value, key: &str) -> Result<String, CodeObjectError> {
    v.as_str()
        .map(str::to_string)
        .ok_or_else(|| CodeObjectError::Metadata(format!("{key} = {v} is not a string")))
}

fn parse_arg(v: &Value) -> Result<KernelArg, CodeObjectError> {
    let mut arg = KernelArg {
        name: None,
        offset: 0,
        size: 0,
        value_kind: ValueKind::Other(String::new()),
        address_space: None,
        value_type: None,
        extra: BTreeMap::new(),
    };
    let (mut has_offset, mut has_size, mut has_kind) = (false, false, false);
    for (k, v) in as_map(v, ".args entry")? {
        match k.as_str() {
            ".name" => arg.name = Some(string(&v, &k)?),
            ".offset" => (arg.offset, has_offset) = (uint(&v, &k)?, true),
            ".size" => (arg.size, has_size) = (uint(&v, &k)?, true),
            ".value_kind" => {
                let name = string(&v, &k)?;
                // An empty name is no kind: refused below as missing.
                has_kind = !name.is_empty();
                let Ok(kind) = name.parse();
                arg.value_kind = kind;
            }
            ".address_space" => arg.address_space = Some(string(&v, &k)?),
            ".value_type" => arg.value_type = Some(string(&v, &k)?),
            _ => {
                arg.extra.insert(k, v);
            }
        }
    }
    if !has_offset || !has_size || !has_kind {
        return Err(CodeObjectError::Metadata(
            "an argument lacks .offset, .size or .value_kind".into(),
        ));
    }
    Ok(arg)
}

impl KernelMeta {
    pub(crate) fn parse(v: &Value) -> Result<Self, CodeObjectError> {
        let mut m = KernelMeta {
            name: String::new(),
            symbol: String::new(),
            args: Vec::new(),
            group_segment_fixed_size: 0,
            private_segment_fixed_size: 0,
            kernarg_segment_size: 0,
            kernarg_segment_align: 0,
            wavefront_size: 0,
            sgpr_count: 0,
            vgpr_count: 0,
            agpr_count: 0,
            sgpr_spill_count: 0,
            vgpr_spill_count: 0,
            max_flat_workgroup_size: 0,
            uses_dynamic_stack: false,
            extra: BTreeMap::new(),
        };
        for (k, v) in as_map(v, "amdhsa.kernels entry")? {
            match k.as_str() {
                ".name" => m.name = string(&v, &k)?,
                ".symbol" => m.symbol = string(&v, &k)?,
                ".args" => {
                    let Value::Array(items) = &v else {
                        return Err(CodeObjectError::Metadata(".args is not an array".into()));
                    };
                    m.args = items.iter().map(parse_arg).collect::<Result<_, _>>()?;
                }
                ".group_segment_fixed_size" => m.group_segment_fixed_size = uint(&v, &k)?,
                ".private_segment_fixed_size" => m.private_segment_fixed_size = uint(&v, &k)?,
                ".kernarg_segment_size" => m.kernarg_segment_size = uint(&v, &k)?,
                ".kernarg_segment_align" => m.kernarg_segment_align = uint(&v, &k)?,
                ".wavefront_size" => m.wavefront_size = uint(&v, &k)?,
                ".sgpr_count" => m.sgpr_count = uint(&v, &k)?,
                ".vgpr_count" => m.vgpr_count = uint(&v, &k)?,
                ".agpr_count" => m.agpr_count = uint(&v, &k)?,
                ".sgpr_spill_count" => m.sgpr_spill_count = uint(&v, &k)?,
                ".vgpr_spill_count" => m.vgpr_spill_count = uint(&v, &k)?,
                ".max_flat_workgroup_size" => m.max_flat_workgroup_size = uint(&v, &k)?,
                ".uses_dynamic_stack" => m.uses_dynamic_stack = v.as_bool().unwrap_or(false),
                _ => {
                    m.extra.insert(k, v);
                }
            }
        }
        if m.name.is_empty() || m.symbol.is_empty() {
            return Err(CodeObjectError::Metadata(
                "a kernel entry lacks .name or .symbol".into(),
            ));
        }
        Ok(m)
    }

    /// The arguments a caller supplies (not hidden), in order.
    pub fn explicit_args(&self) -> impl Iterator<Item = &KernelArg> {
        self.args.iter().filter(|a| !a.is_hidden())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn value_kinds_round_trip() {
        for name in [
            "by_value",
            "global_buffer",
            "hidden_block_count_y",
            "hidden_group_size_z",
            "hidden_remainder_x",
            "hidden_global_offset_z",
            "hidden_grid_dims",
            "hidden_dynamic_lds_size",
            "hidden_queue_ptr",
            "something_new",
        ] {
            let k: ValueKind = name.parse().unwrap();
            assert_eq!(k.to_string(), name);
            assert_eq!(k.is_hidden(), name.starts_with("hidden_"), "{name}");
        }
        assert_eq!(
            "hidden_block_count_y".parse::<ValueKind>().unwrap(),
            ValueKind::HiddenBlockCount(1)
        );
    }
}

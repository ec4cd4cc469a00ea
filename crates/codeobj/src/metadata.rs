//! The `amdhsa.kernels` entries of the `NT_AMDGPU_METADATA` note (msgpack).

use std::collections::BTreeMap;

use rmpv::Value;
use serde::Serialize;

use crate::error::CodeObjectError;

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
    pub value_kind: String,
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
        self.value_kind.starts_with("hidden_")
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
        value_kind: String::new(),
        address_space: None,
        value_type: None,
        extra: BTreeMap::new(),
    };
    let (mut has_offset, mut has_size) = (false, false);
    for (k, v) in as_map(v, ".args entry")? {
        match k.as_str() {
            ".name" => arg.name = Some(string(&v, &k)?),
            ".offset" => (arg.offset, has_offset) = (uint(&v, &k)?, true),
            ".size" => (arg.size, has_size) = (uint(&v, &k)?, true),
            ".value_kind" => arg.value_kind = string(&v, &k)?,
            ".address_space" => arg.address_space = Some(string(&v, &k)?),
            ".value_type" => arg.value_type = Some(string(&v, &k)?),
            _ => {
                arg.extra.insert(k, v);
            }
        }
    }
    if !has_offset || !has_size || arg.value_kind.is_empty() {
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

//! Building a kernarg segment from a kernel's metadata, as the HSA runtime does.

use serde::Serialize;
use tilegen_codeobj::{Kernel, KernelArg, ValueKind};

use crate::{DevicePtr, LaunchConfig, RuntimeError};

/// One explicit kernel argument.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum ArgValue {
    /// A device pointer.
    Ptr(DevicePtr),
    /// A null pointer.
    Null,
    /// A 32-bit integer.
    I32(i32),
    /// A 64-bit integer.
    I64(i64),
    /// A 32-bit float.
    F32(f32),
    /// Raw bytes of the argument's exact size (structs).
    Bytes(Vec<u8>),
}

impl ArgValue {
    /// The bytes for a slot of `size` bytes; a by-value argument is matched by its size, not the
    /// metadata's `value_type` (hand-written kernels declare pads and floats as integers).
    fn bytes(&self, size: u32) -> Option<Vec<u8>> {
        let b = match self {
            ArgValue::Ptr(p) => p.0.to_le_bytes().to_vec(),
            ArgValue::Null => vec![0; 8],
            ArgValue::I32(v) => v.to_le_bytes().to_vec(),
            ArgValue::I64(v) => v.to_le_bytes().to_vec(),
            ArgValue::F32(v) => v.to_le_bytes().to_vec(),
            ArgValue::Bytes(b) => b.clone(),
        };
        (b.len() == size as usize).then_some(b)
    }

    fn describe(&self) -> String {
        match self {
            ArgValue::Ptr(p) => format!("pointer {:#x}", p.0),
            ArgValue::Null => "null".into(),
            ArgValue::I32(v) => format!("i32 {v}"),
            ArgValue::I64(v) => format!("i64 {v}"),
            ArgValue::F32(v) => format!("f32 {v}"),
            ArgValue::Bytes(b) => format!("{} bytes", b.len()),
        }
    }
}

/// Largest kernarg segment [`build`] makes: 64 KiB. HIP caps kernel arguments at 4 KiB; a
/// code object whose metadata or descriptor claims more is damaged, and is refused before the
/// segment is allocated.
pub const MAX_KERNARG_BYTES: u64 = 64 * 1024;

/// The kernarg segment for `kernel` launched with `config`: explicit arguments from `args` in
/// metadata order, hidden arguments filled as the HSA runtime fills them (grid in workgroups,
/// workgroup size, remainders, dimensions, dynamic LDS size; pointers the emulator has no
/// object for are null), everything else zero.
pub fn build(
    kernel: &Kernel,
    config: &LaunchConfig,
    args: &[ArgValue],
) -> Result<Vec<u8>, RuntimeError> {
    let meta = &kernel.meta;
    let err = |problem: String| RuntimeError::Arguments {
        kernel: meta.name.clone(),
        problem,
    };
    // Sizes come from the code object: summed in 64 bits, and capped before allocating.
    let size = (meta.kernarg_segment_size as u64)
        .max(kernel.descriptor.kernarg_size as u64)
        .max(
            meta.args
                .iter()
                .map(|a| a.offset as u64 + a.size as u64)
                .max()
                .unwrap_or(0),
        );
    if size > MAX_KERNARG_BYTES {
        return Err(err(format!(
            "the code object declares a {size}-byte kernarg segment (metadata, descriptor or argument offsets); at most {MAX_KERNARG_BYTES} bytes are supported"
        )));
    }
    // Compilers merge kernarg loads into wide scalar loads (s_load_dwordx8/x16) that may read
    // past the declared size; the HSA runtime's kernarg pool always has memory there. Pad the
    // same way: to 64 bytes, plus one widest scalar load.
    let mut seg = vec![0u8; (size as usize).div_ceil(64) * 64 + 64];
    let explicit: Vec<&KernelArg> = meta.explicit_args().collect();
    if explicit.len() != args.len() {
        return Err(err(format!(
            "takes {} explicit argument(s) ({}), got {}",
            explicit.len(),
            explicit
                .iter()
                .map(|a| describe_slot(a))
                .collect::<Vec<_>>()
                .join(", "),
            args.len()
        )));
    }
    // Every argument ends within `size` (checked above), so the slice is in range.
    let mut put = |a: &KernelArg, bytes: &[u8]| {
        let at = a.offset as usize;
        if let Some(dst) = seg.get_mut(at..at + bytes.len()) {
            dst.copy_from_slice(bytes);
        }
    };
    for (i, (slot, value)) in explicit.iter().zip(args).enumerate() {
        if slot.value_kind == ValueKind::GlobalBuffer
            && !matches!(value, ArgValue::Ptr(_) | ArgValue::Null)
        {
            return Err(err(format!(
                "argument {i} ({}) is a pointer, got {}",
                describe_slot(slot),
                value.describe()
            )));
        }
        let bytes = value.bytes(slot.size).ok_or_else(|| {
            err(format!(
                "argument {i} ({}) is {} bytes, got {}",
                describe_slot(slot),
                slot.size,
                value.describe()
            ))
        })?;
        put(slot, &bytes);
    }
    for a in meta.args.iter().filter(|a| a.is_hidden()) {
        let v: u64 = match a.value_kind {
            ValueKind::HiddenBlockCount(d) => config.grid[d] as u64,
            ValueKind::HiddenGroupSize(d) => config.block[d] as u64,
            // The grid is a whole number of workgroups, so no workgroup is partial.
            ValueKind::HiddenRemainder(_) => 0,
            ValueKind::HiddenGridDims => config.dimensions() as u64,
            ValueKind::HiddenDynamicLdsSize => config.dynamic_lds as u64,
            // Global offsets are zero; queue, heap, hostcall, printf and multigrid pointers
            // are null (no such runtime objects exist for these launches); unknown kinds are
            // zeroed, as the HSA runtime does.
            _ => 0,
        };
        let bytes = v.to_le_bytes();
        let n = (a.size as usize).min(8);
        put(a, &bytes[..n]);
    }
    Ok(seg)
}

fn describe_slot(a: &KernelArg) -> String {
    let name = a.name.as_deref().unwrap_or("?");
    format!("{name}: {} {}B @{}", a.value_kind, a.size, a.offset)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use tilegen_codeobj::{KernelDescriptor, KernelMeta};

    use super::*;

    fn kernel(segment: u32, arg_offset: u32) -> Kernel {
        let meta = KernelMeta {
            name: "k".into(),
            symbol: "k.kd".into(),
            args: vec![KernelArg {
                name: Some("x".into()),
                offset: arg_offset,
                size: 4,
                value_kind: ValueKind::ByValue,
                address_space: None,
                value_type: None,
                extra: BTreeMap::new(),
            }],
            group_segment_fixed_size: 0,
            private_segment_fixed_size: 0,
            kernarg_segment_size: segment,
            kernarg_segment_align: 8,
            wavefront_size: 64,
            sgpr_count: 0,
            vgpr_count: 0,
            agpr_count: 0,
            sgpr_spill_count: 0,
            vgpr_spill_count: 0,
            max_flat_workgroup_size: 256,
            uses_dynamic_stack: false,
            extra: BTreeMap::new(),
        };
        Kernel {
            meta,
            descriptor_address: 0,
            descriptor: KernelDescriptor::parse(&[0; 64]),
            entry: 0,
            code_size: 0,
        }
    }

    const CONFIG: LaunchConfig = LaunchConfig {
        grid: [1, 1, 1],
        block: [64, 1, 1],
        dynamic_lds: 0,
    };

    #[test]
    fn arguments_land_at_their_offsets() {
        let seg = build(&kernel(8, 4), &CONFIG, &[ArgValue::I32(7)]).unwrap();
        assert_eq!(&seg[4..8], &7i32.to_le_bytes());
        assert_eq!(seg.len(), 128);
    }

    /// Sizes from a damaged code object are summed without overflow and refused before the
    /// segment is allocated.
    #[test]
    fn damaged_kernarg_sizes_are_refused() {
        for (segment, offset) in [(u32::MAX, 0), (8, u32::MAX), (8, u32::MAX - 2)] {
            let e = build(&kernel(segment, offset), &CONFIG, &[ArgValue::I32(7)]).unwrap_err();
            assert!(
                matches!(&e, RuntimeError::Arguments { problem, .. } if problem.contains("kernarg segment")),
                "{e}"
            );
        }
    }
}

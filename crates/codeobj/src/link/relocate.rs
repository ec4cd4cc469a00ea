//! Relocation: each PC-relative field of the copied sections gets `S + A - P` at the final
//! addresses.

use super::LinkError;
use super::layout::Layout;
use super::plan::{Field, Plan};

/// The final contents of each of [`Plan::sections`] (same indices), relocated.
#[derive(Debug)]
pub(super) struct Relocated(pub Vec<Vec<u8>>);

/// Applies `plan`'s relocations at `layout`'s addresses, in the input's order.
pub(super) fn apply(plan: &Plan, layout: &Layout) -> Result<Relocated, LinkError> {
    let mut contents: Vec<Vec<u8>> = plan.sections.iter().map(|s| s.data.clone()).collect();
    for r in &plan.relocations {
        let symbol = &plan.symbols[r.symbol];
        let (_, s) = layout.symbol(symbol);
        let p = layout.sections[layout.output_of[r.section]].addr + r.offset;
        let v = (s as i64).wrapping_add(r.addend).wrapping_sub(p as i64);
        let bytes = match r.field {
            Some(Field::Rel64) => v.to_le_bytes().to_vec(),
            Some(Field::Rel32) => i32::try_from(v)
                .map_err(|_| LinkError::Overflow(symbol.name.clone()))?
                .to_le_bytes()
                .to_vec(),
            Some(Field::Rel32Lo) => (v as u64 as u32).to_le_bytes().to_vec(),
            Some(Field::Rel32Hi) => ((v as u64 >> 32) as u32).to_le_bytes().to_vec(),
            None => {
                return Err(LinkError::Relocation {
                    r_type: r.r_type,
                    symbol: symbol.name.clone(),
                });
            }
        };
        let data = &mut contents[r.section];
        let field = usize::try_from(r.offset)
            .ok()
            .and_then(|at| Some(at..at.checked_add(bytes.len())?))
            .filter(|f| f.end <= data.len())
            .ok_or_else(|| LinkError::OutOfSection {
                section: plan.sections[r.section].name.clone(),
                offset: r.offset,
            })?;
        data[field].copy_from_slice(&bytes);
    }
    Ok(Relocated(contents))
}

//! What every kernel family builds its tiles from: the gfx950 MFMA atoms and their lane
//! layouts ([`atom`]), a wave's grid of block-scaled MMAs ([`mma`]), LDS-to-register fragment
//! loads ([`loader`]), staging tiles into LDS ([`stage`]), preshuffled scale fragments and the
//! XCD-aware workgroup order.

pub mod atom;
pub mod loader;
pub mod mma;
pub(crate) mod scales;
pub mod stage;
pub(crate) mod xcd;

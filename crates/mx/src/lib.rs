//! OCP MX formats and the host side of tilegen's MXFP4 GEMMs.
//!
//! * Element and scale formats: FP4 E2M1 ([`decode_e2m1`], [`encode_e2m1`], packing), E8M0
//!   scales ([`decode_e8m0`]), FP8 E4M3FN / E5M2 ([`Fp8Format`]).
//! * MXFP4 quantisation per OCP MX v1.0: [`MxMatrix`].
//! * The CPU reference GEMM every kernel test is checked against, and the comparison that
//!   allows exactly the f32 accumulation-order freedom: [`reference_gemm`], [`Reference`].
//! * The CDNA4 preshuffle layouts of B and of the scales: [`Shuffler`], built on
//!   `tilegen_layout` and copied with [`copy_layout`].
//! * Offline preshuffle of MXFP4 model weights in safetensors files: [`weights`].
//! * The CPU reference of a grouped MXFP4 mixture-of-experts layer and its bounds: [`moe`].
#![deny(missing_docs)]

pub mod attention;
mod copy;
mod e8m0;
mod error;
mod fp4;
mod fp8;
pub mod moe;
mod quant;
mod reference;
mod shuffle;
pub mod weights;

pub use copy::{copy_layout, copy_with_plan};
pub use e8m0::{
    E8M0_BIAS, E8M0_MAX_EXP, E8M0_MIN_EXP, E8M0_NAN, E8M0_ONE, decode_e8m0, e8m0_exponent,
    e8m0_from_exponent,
};
pub use error::MxError;
pub use fp4::{E2M1_MAX, decode_e2m1, encode_e2m1, pack_e2m1, packed_code, unpack_e2m1};
pub use fp8::{Fp8Format, Fp8Overflow, decode_e4m3fn, decode_e5m2, encode_e4m3fn, encode_e5m2};
pub use quant::{
    E2M1_EMAX, MX_BLOCK, MX_BLOCK_BYTES, MxMatrix, RANDOM_SCALE_SPREAD, block_scale, quantize_block,
};
pub use reference::{Comparison, ElementDiff, Reference, gemm_bf16, gemm_f32, reference_gemm};
pub use shuffle::Shuffler;

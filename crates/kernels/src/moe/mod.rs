//! Grouped MXFP4 mixture-of-experts: token routing, the sorted layout the grouped kernels
//! read, and the layer's kernels.
//!
//! ```no_run
//! use tilegen_kernels::moe::{Activation, MoeSpec};
//! let layer = MoeSpec::new(Activation::Swiglu).block_m(16).build()?;
//! for k in layer.kernels() {
//!     println!("{}: {} VGPRs", k.name(), k.report().vgpr_count);
//! }
//! # Ok::<(), tilegen_kernels::moe::MoeError>(())
//! ```

mod gather;
mod layer;
pub mod routing;
mod sort;
mod spec;
mod stages;
mod template;

pub use layer::{
    DeviceWeights, MoeBuffers, MoeError, MoeInputError, MoeKernel, MoeLaunch, MoeLayer, MoePlan,
    MoeRun, PreshuffledExpert, expert_bias_bytes,
};
pub use routing::{Routing, RoutingError, Scoring, SortedBlocks, route};
pub use sort::{FUSED_SORT_PAIRS, MAX_SORT_EXPERTS, NO_EXPERT, max_blocks};
#[cfg(feature = "clap")]
pub use spec::MoeTileKnobs;
pub use spec::{Activation, Combine, MoeShape, MoeSpec, MoeSpecError, Stage};
// One expert's group in each grouped buffer, sized where the weight files are read, so a
// file's experts and a layer's buffers agree.
pub use template::{MoeModel, MoeRouter, MoeSpace, MoeTemplate, MoeTemplatePlan};
pub use tilegen_mx::weights::expert_group_bytes;

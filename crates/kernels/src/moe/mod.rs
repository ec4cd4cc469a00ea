//! Grouped MXFP4 mixture-of-experts: token routing and the sorted layout the grouped kernels
//! read.

pub mod routing;

pub use routing::{Routing, RoutingError, Scoring, SortedBlocks, route};

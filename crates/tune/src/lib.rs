//! tilegen-tune: autotuning sweeps and ahead-of-time kernel packs.
//!
//! - [`Template`]: a model's GEMM shapes and the configuration space to search
//!   (`templates/*.toml`), refused with file, line and rule when malformed.
//! - [`space::enumerate`]: the space's valid specs; invalid combinations are pruned by
//!   `KernelSpec::validate` before LLVM sees them, and counted by rule.
//! - [`sweep::run`]: ranks every (spec, shape) pair by the MI355X timing model or by timed
//!   launches on a device, in worker processes ([`worker`]) so a compile that aborts or a launch
//!   that faults is recorded as failed and the sweep goes on; sharded, resumable.
//! - [`Db`]: the tuning database (SQLite; many processes may append, sweeps sharing one claim
//!   their work; another application's file is refused before anything is written), merge,
//!   CSV.
//! - [`report`]: the best configuration per shape as a table and an SVG chart.
//! - [`slurm`]: a job-array script per shard and a merge job after it.
//! - [`pack`]: kernel packs: the winners compiled ahead of time with a manifest and checksums;
//!   [`Pack::open`] verifies one and [`Pack::kernel_for`] dispatches a shape to its kernel.
#![deny(missing_docs)]

pub mod db;
pub mod eval;
pub mod pack;
pub mod report;
pub mod slurm;
pub mod space;
pub mod sweep;
pub mod template;
pub mod worker;

pub use pack::{Pack, PackError, PackKernel};

pub use db::{Db, DbError, DeviceName, Row, Status};
pub use eval::{By, Detail};

pub use sweep::{Plan, Shard, Summary, SweepOptions, Target, llvm_version, tilegen_version};
pub use template::{Shape, Space, Template, TemplateError};

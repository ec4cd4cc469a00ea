//! Evaluating one compiled spec on one shape: by the MI355X timing model, or by timed launches
//! on a device.

use std::time::Instant;

use serde::{Deserialize, Serialize};
use tilegen_codeobj::CodeObject;
use tilegen_dsl::CompileOptions;
use tilegen_emu::exec::{DeviceMemory, Program};
use tilegen_kernels::{BuildError, CompiledKernel, GemmBuffers, KernelSpec};
use tilegen_runtime::{ArgValue, Device, DevicePtr, RuntimeError};
use tilegen_timing::{self as timing, LoopExtrapolation, Params, TimingLaunch, TimingOptions};

use crate::template::Shape;

/// How results are ranked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum By {
    /// The MI355X timing model (no GPU needed).
    Model,
    /// Timed launches on a device (warm-up, repeats, median).
    Device,
}

impl By {
    /// `model` or `device`, as the database's `source` column says.
    pub fn as_str(self) -> &'static str {
        match self {
            By::Model => "model",
            By::Device => "device",
        }
    }
}

impl std::fmt::Display for By {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why an evaluation failed (the sweep records the message and goes on).
#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    /// The spec did not compile.
    #[error("compiling the spec")]
    Build(#[from] BuildError),
    /// The compiled code object could not be read back.
    #[error("reading the code object")]
    CodeObject(#[from] tilegen_codeobj::CodeObjectError),
    /// The kernel could not be prepared for the timing model.
    #[error("loading the kernel into the timing model")]
    Load(#[from] tilegen_emu::exec::LoadError),
    /// A buffer could not be allocated.
    #[error("allocating a {bytes}-byte buffer")]
    Alloc {
        /// Size.
        bytes: u64,
        /// Why.
        #[source]
        source: tilegen_emu::exec::AllocError,
    },
    /// The launch was refused or faulted on the device (or its kernargs could not be built).
    #[error("launching on the device")]
    Runtime(#[from] RuntimeError),
    /// Launching the GEMM failed.
    #[error("launching the GEMM")]
    Launch(#[from] tilegen_kernels::LaunchError),
    /// The timing model refused or faulted.
    #[error("predicting the time")]
    Timing(#[from] tilegen_timing::TimingError),
    /// The kernel is missing from its own code object.
    #[error("the code object has no kernel {0}")]
    NoKernel(String),
}

/// One evaluation's outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Measurement {
    /// Time of one launch, µs (the model's prediction, or the median of the repeats).
    pub us: f64,
    /// Timed launches (1 for the model).
    pub repeats: u32,
    /// Relative spread of the repeats: (max - min) / median (0 for the model).
    pub spread: f64,
    /// Source-specific detail: the model's bound, MFMA busy fraction, HBM GB/s, method.
    pub detail: Detail,
}

/// What an evaluation records beside its time: a row's `detail` column, as a JSON object.
/// The shape tells the variant apart (no tag), as the stored text always did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged, deny_unknown_fields)]
pub enum Detail {
    /// The timing model's prediction.
    Model(ModelDetail),
    /// Timed launches on a device.
    Device(DeviceDetail),
    /// Nothing: a failed evaluation (`{}`).
    Empty {},
}

// The fields of the detail objects are declared in the order of their names: the stored
// text was written from a JSON map, which sorts its keys, and stays byte for byte the same.

/// The timing model's summary of one prediction.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelDetail {
    /// What bounds the kernel.
    pub bound: timing::Bound,
    /// Kernel cycles (all rounds).
    pub cycles: u64,
    /// Achieved HBM bandwidth, GB/s.
    #[serde(deserialize_with = "nan_for_null")]
    pub hbm_gbs: f64,
    /// How the time was computed.
    pub method: timing::Method,
    /// Fraction of SIMD time the matrix cores are busy, GPU-wide.
    #[serde(deserialize_with = "nan_for_null")]
    pub mfma_busy: f64,
    /// Occupancy.
    #[serde(serialize_with = "sorted_keys")]
    pub occupancy: timing::Occupancy,
    /// Rounds of resident workgroups on the busiest XCD.
    pub rounds: u64,
}

impl From<&timing::Prediction> for ModelDetail {
    fn from(p: &timing::Prediction) -> Self {
        ModelDetail {
            bound: p.bound,
            cycles: p.cycles,
            hbm_gbs: p.hbm_gbs,
            method: p.method,
            mfma_busy: p.mfma_busy,
            occupancy: p.occupancy.clone(),
            rounds: p.rounds,
        }
    }
}

/// Timed launches on a device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceDetail {
    /// The device's name.
    pub device: String,
    /// Every timed launch, µs, shortest first.
    pub times_us: Vec<f64>,
}

/// JSON writes a number that is not finite as `null`; it reads back as NaN.
fn nan_for_null<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

/// Writes `value` through a JSON map, whose keys come out sorted: a timing type's own fields
/// are in its declaration order, but the stored text has always had them sorted.
fn sorted_keys<T: Serialize, S: serde::Serializer>(value: &T, s: S) -> Result<S::Ok, S::Error> {
    serde_json::to_value(value)
        .map_err(serde::ser::Error::custom)?
        .serialize(s)
}

/// Compiles `spec` for a sweep: code object only (no listing, no IR).
pub fn compile(spec: &KernelSpec) -> Result<CompiledKernel, BuildError> {
    spec.build_with(CompileOptions {
        emit_asm: false,
        emit_ir: false,
        code_object_v5: false,
    })
}

/// Byte sizes of C, A, B, A scales, B scales of `kernel` on `shape` (the kernel's layouts).
fn sizes(kernel: &CompiledKernel, shape: &Shape) -> Result<[u64; 5], EvalError> {
    let s = kernel.buffer_sizes(shape.m as usize, shape.n as usize, shape.k as usize)?;
    Ok([s.c, s.a, s.b, s.sfa, s.sfb])
}

/// Byte sizes of what the GEMM kernel itself writes (C, or the split-K workspace when the
/// reduction writes C), A, B, A scales, B scales.
fn gemm_sizes(kernel: &CompiledKernel, shape: &Shape) -> Result<[u64; 5], EvalError> {
    let mut s = sizes(kernel, shape)?;
    if kernel.reduce_name().is_some() {
        s[0] = kernel.workspace_bytes(shape.m as usize, shape.n as usize);
    }
    Ok(s)
}

fn gemm_args(kernel: &CompiledKernel, b: &GemmBuffers, shape: &Shape) -> [ArgValue; 8] {
    kernel.arguments(b, shape.m as usize, shape.n as usize, shape.k as usize)
}

/// Ranks by the MI355X timing model: full-size lazily zeroed buffers, the kernel's own
/// kernargs and launch grid.
#[derive(Debug, Clone)]
pub struct ModelEvaluator {
    /// The machine's parameters.
    pub params: Params,
    /// How the prediction is computed (sampled rounds by default).
    pub options: TimingOptions,
    /// Long K loops timed from two short runs (the default), so a prediction's cost does not
    /// grow with K; `None` simulates every K step.
    pub extrapolation: Option<LoopExtrapolation>,
}

impl Default for ModelEvaluator {
    fn default() -> Self {
        ModelEvaluator {
            params: Params::default(),
            options: TimingOptions::default(),
            extrapolation: Some(LoopExtrapolation::default()),
        }
    }
}

impl ModelEvaluator {
    /// CUs of the modelled GPU.
    pub fn cus(&self) -> u32 {
        tilegen_arch::COMPUTE_UNITS
    }

    /// Predicts `kernel`'s launch on `shape`: the time is every kernel's of the launch (the
    /// GEMM's, and the split-K reduction's when it has one, each with its launch overhead);
    /// the detail describes the GEMM kernel.
    pub fn measure(
        &self,
        kernel: &CompiledKernel,
        shape: &Shape,
    ) -> Result<Measurement, EvalError> {
        let launch = self.predict_launch(kernel, shape)?;
        Ok(Measurement {
            us: launch.iter().map(|p| p.us).sum(),
            repeats: 1,
            spread: 0.0,
            detail: Detail::Model(ModelDetail::from(&launch[0])),
        })
    }

    /// The model's prediction of every kernel `kernel`'s launch runs on `shape`, in launch
    /// order: the GEMM ([`ModelEvaluator::predict`]), then the split-K reduction
    /// ([`ModelEvaluator::predict_reduce`]) when it has one. Never empty.
    pub fn predict_launch(
        &self,
        kernel: &CompiledKernel,
        shape: &Shape,
    ) -> Result<Vec<timing::Prediction>, EvalError> {
        let mut launch = vec![self.predict(kernel, shape)?];
        if let Some(reduce) = self.predict_reduce(kernel, shape)? {
            launch.push(reduce);
        }
        Ok(launch)
    }

    /// The model's prediction of the split-K reduction of `kernel` on `shape` (on a lazily
    /// zeroed workspace: the model sees the planes' reads, not what wrote them), or `None`
    /// when the launch has none.
    pub fn predict_reduce(
        &self,
        kernel: &CompiledKernel,
        shape: &Shape,
    ) -> Result<Option<timing::Prediction>, EvalError> {
        let Some(name) = kernel.reduce_name() else {
            return Ok(None);
        };
        let (m, n) = (shape.m as usize, shape.n as usize);
        let co = CodeObject::parse(kernel.code_object())?;
        let kd = co
            .kernel(&name)
            .ok_or_else(|| EvalError::NoKernel(name.clone()))?;
        let mut mem = DeviceMemory::new();
        let prog = Program::load(&mut mem, &co, &name)?;
        let mut alloc = |bytes: u64| {
            mem.alloc_lazy(bytes.max(1))
                .map(DevicePtr)
                .map_err(|source| EvalError::Alloc { bytes, source })
        };
        let c = alloc(sizes(kernel, shape)?[0])?;
        let workspace = alloc(kernel.workspace_bytes(m, n))?;
        let config = kernel.reduce_launch_config(m, n);
        let kernarg = tilegen_runtime::kernargs::build(
            kd,
            &config,
            &kernel.reduce_arguments(c, workspace, m, n),
        )?;
        let launch = TimingLaunch {
            grid: config.grid,
            block: config.block,
            dynamic_lds: config.dynamic_lds,
            kernarg: &kernarg,
        };
        Ok(Some(timing::predict(
            &mut mem,
            &prog,
            &launch,
            &self.params,
            &self.options,
        )?))
    }

    /// The model's whole prediction of `kernel`'s GEMM kernel on `shape` (stalls, and the
    /// trace when the options ask for one); a split-K reduction that follows it is
    /// [`ModelEvaluator::predict_reduce`]'s.
    pub fn predict(
        &self,
        kernel: &CompiledKernel,
        shape: &Shape,
    ) -> Result<timing::Prediction, EvalError> {
        let sizes = gemm_sizes(kernel, shape)?;
        let co = CodeObject::parse(kernel.code_object())?;
        let kd = co
            .kernel(kernel.name())
            .ok_or_else(|| EvalError::NoKernel(kernel.name().to_string()))?;
        let mut mem = DeviceMemory::new();
        let prog = Program::load(&mut mem, &co, kernel.name())?;
        let mut ptrs = [DevicePtr(0); 5];
        for (p, &bytes) in ptrs.iter_mut().zip(&sizes) {
            let addr = mem
                .alloc_lazy(bytes.max(1))
                .map_err(|source| EvalError::Alloc { bytes, source })?;
            *p = DevicePtr(addr);
        }
        let bufs = GemmBuffers {
            c: ptrs[0],
            a: ptrs[1],
            b: ptrs[2],
            sfa: ptrs[3],
            sfb: ptrs[4],
        };
        let config = kernel.launch_config(shape.m as usize, shape.n as usize);
        let kernarg =
            tilegen_runtime::kernargs::build(kd, &config, &gemm_args(kernel, &bufs, shape))?;
        let launch = TimingLaunch {
            grid: config.grid,
            block: config.block,
            dynamic_lds: config.dynamic_lds,
            kernarg: &kernarg,
        };
        // One step of the main loop is a K tile of every split; a K of whole steps is
        // extrapolated (a K with a tail tile is simulated whole).
        let spec = kernel.spec();
        let step = u64::from(spec.bk_elems) * u64::from(spec.split_k());
        let steps = if u64::from(shape.k).is_multiple_of(step) {
            u32::try_from(u64::from(shape.k) / step).unwrap_or(0)
        } else {
            0
        };
        let kernarg_for = |s: u32| {
            let at_k = Shape {
                k: (u64::from(s) * step) as u32,
                ..*shape
            };
            Ok::<_, EvalError>(tilegen_runtime::kernargs::build(
                kd,
                &config,
                &gemm_args(kernel, &bufs, &at_k),
            )?)
        };
        timing::predict_loop(
            &mut mem,
            &prog,
            &launch,
            steps,
            &kernarg_for,
            &self.params,
            &self.options,
            self.extrapolation,
        )
    }
}

/// Ranks by timed launches on a device: zeroed full-size buffers, `warmup` untimed launches,
/// then `repeats` timed ones; the median is the time and the relative range the spread.
pub struct DeviceEvaluator {
    /// The device.
    pub device: Box<dyn Device>,
    /// Untimed launches first.
    pub warmup: u32,
    /// Timed launches.
    pub repeats: u32,
}

impl DeviceEvaluator {
    /// Measures `kernel` on `shape`.
    pub fn measure(
        &self,
        kernel: &CompiledKernel,
        shape: &Shape,
    ) -> Result<Measurement, EvalError> {
        let sizes = sizes(kernel, shape)?;
        let dev = self.device.as_ref();
        let module = kernel.load(dev)?;
        let mut owned = Vec::new();
        let result = (|| {
            for &bytes in &sizes {
                owned.push(dev.alloc(bytes.max(1))?);
            }
            let bufs = GemmBuffers {
                c: owned[0],
                a: owned[1],
                b: owned[2],
                sfa: owned[3],
                sfb: owned[4],
            };
            let (m, n, k) = (shape.m as usize, shape.n as usize, shape.k as usize);
            // The split-K workspace is allocated once, outside the timed launches.
            let ws_len = kernel.workspace_bytes(m, n);
            owned.push(dev.alloc(ws_len.max(1))?);
            let ws = owned[5];
            let launch = || kernel.launch_with_workspace(dev, &module, &bufs, ws, ws_len, m, n, k);
            for _ in 0..self.warmup {
                launch()?;
            }
            let mut times = Vec::new();
            for _ in 0..self.repeats.max(1) {
                let t = Instant::now();
                let r = launch()?;
                // A device that reports its own kernel time is trusted over the host clock.
                let wall = if r.wall.is_zero() {
                    t.elapsed()
                } else {
                    r.wall
                };
                times.push(wall.as_secs_f64() * 1e6);
            }
            Ok::<_, EvalError>(times)
        })();
        for p in owned {
            dev.free(p)?;
        }
        let mut times = result?;
        times.sort_by(f64::total_cmp);
        let median = times[times.len() / 2];
        let spread = if median > 0.0 {
            (times[times.len() - 1] - times[0]) / median
        } else {
            0.0
        };
        Ok(Measurement {
            us: median,
            repeats: times.len() as u32,
            spread,
            detail: Detail::Device(DeviceDetail {
                device: dev.name(),
                times_us: times,
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A split-K launch with the f32 workspace is timed as its two kernels; one with atomics,
    /// or without a split, as one.
    #[test]
    fn split_k_reduction_is_timed_with_the_gemm() {
        let model = ModelEvaluator {
            options: TimingOptions {
                max_cus: Some(2),
                ..TimingOptions::default()
            },
            ..ModelEvaluator::default()
        };
        let shape = Shape {
            m: 4,
            n: 256,
            k: 1024,
        };
        let tile = || KernelSpec::preb().bm(16).bk_elems(256);
        let exact = compile(&tile().split_k(4).into()).unwrap();
        let launch = model.predict_launch(&exact, &shape).unwrap();
        assert_eq!(launch.len(), 2);
        assert!(launch.iter().all(|p| p.us > 0.0));
        let m = model.measure(&exact, &shape).unwrap();
        assert_eq!(m.us, launch[0].us + launch[1].us);
        for single in [tile().split_k(4).split_k_atomic(true), tile()] {
            let kernel = compile(&single.into()).unwrap();
            assert_eq!(model.predict_launch(&kernel, &shape).unwrap().len(), 1);
            assert!(model.predict_reduce(&kernel, &shape).unwrap().is_none());
        }
    }

    /// The detail a row stores is the text the untyped JSON map wrote: the same keys in the
    /// same order, the same numbers, `null` for a number that is not finite.
    #[test]
    fn details_are_stored_as_the_json_maps_wrote_them() {
        let model = ModelEvaluator {
            options: TimingOptions {
                max_cus: Some(2),
                ..TimingOptions::default()
            },
            ..ModelEvaluator::default()
        };
        let kernel = compile(&KernelSpec::preb().into()).unwrap();
        let shape = Shape {
            m: 16,
            n: 256,
            k: 512,
        };
        let mut p = model.predict(&kernel, &shape).unwrap();
        for hbm_gbs in [p.hbm_gbs, f64::NAN] {
            p.hbm_gbs = hbm_gbs;
            let untyped = serde_json::json!({
                "bound": p.bound,
                "mfma_busy": p.mfma_busy,
                "hbm_gbs": p.hbm_gbs,
                "cycles": p.cycles,
                "rounds": p.rounds,
                "occupancy": p.occupancy,
                "method": p.method,
            });
            let detail = Detail::Model(ModelDetail::from(&p));
            let text = serde_json::to_string(&detail).unwrap();
            assert_eq!(text, untyped.to_string());
            let back: Detail = serde_json::from_str(&text).unwrap();
            assert_eq!(serde_json::to_string(&back).unwrap(), text);
        }

        let times = vec![1.5, 2.0, 1e-7];
        let untyped = serde_json::json!({ "device": "gfx950 emulator", "times_us": times });
        let detail = Detail::Device(DeviceDetail {
            device: "gfx950 emulator".into(),
            times_us: times,
        });
        let text = serde_json::to_string(&detail).unwrap();
        assert_eq!(text, untyped.to_string());
        assert_eq!(serde_json::from_str::<Detail>(&text).unwrap(), detail);

        assert_eq!(serde_json::to_string(&Detail::Empty {}).unwrap(), "{}");
        assert_eq!(
            serde_json::from_str::<Detail>("{}").unwrap(),
            Detail::Empty {}
        );
        // A row as stored reads back and writes the same text; an occupancy with a key the
        // timing model does not have is refused.
        let stored = r#"{"bound":"memory_latency","cycles":1000,"hbm_gbs":null,"method":"rounds","mfma_busy":0.5,"occupancy":{"lds_bytes":0,"limiter":"vgprs","sgprs":32,"vgprs":128,"waves_per_simd":2,"waves_per_workgroup":4,"workgroups_per_cu":2},"rounds":3}"#;
        let back: Detail = serde_json::from_str(stored).unwrap();
        assert!(matches!(&back, Detail::Model(d) if d.occupancy.limiter == timing::Limiter::Vgprs));
        assert_eq!(serde_json::to_string(&back).unwrap(), stored);
        let extra = stored.replace(r#""vgprs":128,"#, r#""vgprs":128,"x":1,"#);
        assert!(serde_json::from_str::<Detail>(&extra).is_err(), "{extra}");

        for other in [
            r#"{"x":1}"#,
            r#"{"device":"d","times_us":[1.0],"x":1}"#,
            "[]",
            "3",
        ] {
            assert!(serde_json::from_str::<Detail>(other).is_err(), "{other}");
        }
    }
}

//! The MI355X facts the model relies on, each with its source, and how to add a hardware
//! effect to the model.
//!
//! Parameter sources in `params.toml` cite the sections below as "tilegen-timing docs,
//! *Section*" (this file, `crates/timing/src/docs.rs`). The facts of the machine's size and
//! per-CU limits, which are no timing parameters, live in `tilegen_arch` with their sources
//! (Occupancy and dispatch below restates them for the reader); the model reads them there. A fact marked *derived, unconfirmed*
//! is an inference from published numbers that no document states. One pass is 4 clocks of a
//! SIMD (LLVM's unit for matrix instructions).
//!
//! # Issue and pipes
//! - A CU has 4 SIMDs; the sequencer serves one SIMD per clock, round robin. Per SIMD and
//!   issue slot it issues at most one instruction per wave and one per category (VALU/MFMA,
//!   VMEM, SALU/SMEM, LDS, branch/message): up to 5 instructions per CU per clock. Two SIMDs
//!   share one LDS port. (ROCm/rocprofiler-compute `docs/conceptual/pipeline-descriptions.rst`)
//! - A wave64 VALU instruction takes 4 clocks on the 16-lane SIMD; a dependent `v_fma_f32`
//!   chain was measured at about 8 clocks per step on CDNA-class parts; transcendentals run at
//!   quarter rate (LLVM `SISchedule.td`, `WriteTrans32`).
//! - MFMA passes come from LLVM's gfx950 scheduling model (`SISchedule.td`): the scaled
//!   16x16x128 f8f6f4 instruction takes 4 passes with FP4/FP6 operands and 8 with FP8, the
//!   32x32x64 one 8 and 16; the emulator's opcode tables carry each matrix opcode's passes
//!   ([`Opcode::timing`](tilegen_emu::isa::Opcode::timing)).
//! - Hazards (LLVM `GCNHazardRecognizer.cpp`, `checkMAIHazards90A` and neighbours):
//!   back-to-back MFMAs on the same accumulator need no wait states; an MFMA result read as
//!   SrcA/B of another MFMA or by the VALU needs passes + 3 wait states (+1 on gfx950); a VALU
//!   write of a VGPR then an MFMA reading it 2; a VALU write of EXEC then any MFMA 4; a
//!   write-after-read on SrcC 3, 7 or 15 by size (not modelled).
//! - `s_setprio` raises a wave's issue priority within its SIMD; `s_sleep` parks a wave about
//!   64 clocks per unit (AMD CDNA3/CDNA4 ISA guides).
//!
//! # LDS
//! - 160 KB per CU in 64 banks of 4 bytes: one conflict-free pass moves 256 bytes. Reads
//!   move 256 B/clock per CU (128 per port of a SIMD pair), writes about 128 B/clock per CU
//!   (64 per port) on CDNA4.
//! - A dependent `ds_read_b32` chain takes about 69 clocks per access; four independent
//!   streams about 28 each.
//! - A bank conflict within a phase serializes the phase (the emulator counts the extra
//!   passes: `ds_read_b128` in 4 phases of 16 lanes, `ds_read_b64` in 2).
//! - LDS-DMA loads (`buffer_load ... lds`, `global_load_lds_dwordx4`) count on vmcnt only.
//!
//! (chipsandcheese's CDNA3 and CDNA4 articles; AMD's ROCm blog "LDS bank conflicts")
//!
//! # Memory
//! - The vL1D is 32 KB per CU with 128-byte lines and moves 128 B/clock per CU; the L2 is 4 MB
//!   per XCD in 16 channels of 128 B/clock; the MALL (Infinity Cache) is 256 MB; HBM3E peaks
//!   at 8.0 TB/s. (chipsandcheese's CDNA4 article; AMD's CDNA4 white paper)
//! - Latencies on MI300X: an L2 hit about 81-85 ns, the MALL about 218 ns, HBM about 341-353
//!   ns idle and about 650 ns loaded (chipsandcheese's MI300X article). vmcnt counts to 63,
//!   lgkmcnt to 15 (CDNA3/CDNA4 ISA guides).
//! - Measured bandwidth: MI350X HBM read 6.91 TB/s (86% of peak), copy 5.6 TB/s; MI355X bf16
//!   copy 5.30 TB/s (ROCm/rocm-systems pull requests 3837 and 8480).
//!
//! # Occupancy and dispatch
//! The facts of this section are `tilegen_arch`'s constants, which [`CuLimits::GFX950`](crate::CuLimits::GFX950)
//! gathers for the occupancy; the sources are there.
//! - Up to 8 waves per SIMD; one unified file of 512 registers per lane allocated in granules
//!   of 8: waves per SIMD = min(8, 512 / align8(align4(VGPRs) + AGPRs)); 800 SGPRs per SIMD in
//!   granules of 16, 6 more per wave for VCC, flat scratch and XNACK. LDS is 160 KB per CU,
//!   allocated in 1,280-byte granules; a workgroup has at most 1,024 work-items; at most 16
//!   workgroups with barriers and 32 in all are resident per CU.
//! - 256 CUs in 8 XCDs of 32; workgroup `i` of a dispatch goes to XCD `i mod 8`.
//!
//! # Clocks and published results
//! - The engine clock peaks at 2.4 GHz. Under sustained MFMA load it sags: AMD's Gluon GEMM
//!   tutorial (ROCm blog "gluon-gemm-tutorial") reports an MXFP4 GEMM at 5,255 TFLOP/s with
//!   92.4% MFMA busy and an FP16 GEMM at 1,489 TFLOP/s with 98.8% busy, which implies roughly
//!   1.4-1.6 GHz (*derived, unconfirmed*). The model's sustained clock is calibrated instead.
//! - Pure MFMA loops on MI350X reach 78-91% of peak; AITER's assembly MXFP4 GEMM runs at
//!   5,096 TFLOP/s at 8192^3 and FlyDSL's 4-wave MXFP4 GEMM at 5,033.
//! - AITER's own kernels were timed on MI355X: the amd-aiter wheel's
//!   `aiter/configs/a4w4_blockscale_tuned_gemm.csv` (rows with `cu_num` 256, column `us`),
//!   which `tilegen-aiter` uses to calibrate the model.
//!
//! # Adding a hardware effect
//! An effect is a rule of the machine the model does not follow yet: a hazard, a queue, a
//! rate. Adding one touches these places, in this order:
//!
//! 1. **The fact.** Find the document that states it (LLVM's scheduling model or hazard
//!    recognizer, AMD's ISA guide, a published measurement) and add it to the facts above
//!    if it is not there, with its source. A fact of the machine's size or of what a CU holds
//!    is no timing parameter: it goes into `tilegen_arch` (`crates/arch/src/lib.rs`), and the
//!    model reads it from there (step 2 does not apply).
//! 2. **The parameter.** An entry `{ value, source }` in `params.toml` whose source cites
//!    that document (or this module's section), the field in its typed table
//!    (`params.rs`), and its bound in `BOUNDS` there, the one home of the bounds: reading,
//!    validation and the bound tests then cover it. Default it to the documented value and
//!    measure the calibration impact with `aiter-calibrate` before and after, or, if the
//!    effect cannot be checked against measurements, to a value that leaves it off.
//! 3. **What the instruction is.** If the effect depends on the instruction (what it reads
//!    or writes, its shape, its format), take that from the decoded instruction or from a
//!    generated column of the emulator's opcode tables (add the column to
//!    `crates/emu/tools/gen_tables.py` and regenerate), never from the mnemonic, and keep it
//!    in `InstInfo` (`inst.rs`), which is computed once per program.
//! 4. **The unit.** The unit that serves the instruction (`units.rs`) reads the parameter
//!    in its constructor and applies it in `Unit::ready` (when a SIMD may hand it the next
//!    instruction) or `Unit::book` (what the wave waits for: register ready times, counter
//!    completions, its next issue). A condition on the wave's own state goes into
//!    `WaveTiming::own_ready` (`cu.rs`).
//! 5. **The stall reason.** If the waits it causes must be told apart in reports, add a
//!    [`Reason`](crate::Reason) with its `name()` and `trace_label()` and put it in
//!    `Reason::ALL`; the per-SIMD arrays, the JSON report, the trace and the command line
//!    follow. Usually an existing reason fits.
//! 6. **The tests.** A test of the unit, and an end-to-end test in `tests/timing.rs` on an
//!    assembled kernel that shows the effect at its default and at 0.
//!
//! The walk-through once: LLVM's `checkMAIHazards90A` makes an MFMA wait 4 wait states
//! after a VALU instruction that writes EXEC (see Issue and pipes). (1) The fact was there.
//! (2) `valu.exec_write_then_mfma_wait_states` already stood in `params.toml` with that
//! source, in `ValuParams` and in `BOUNDS`, but nothing read it. (3) Whether a VALU
//! instruction writes EXEC comes from its operands (an explicit `exec` destination) and the
//! generated compare column (`Compare::writes_exec`, the `v_cmpx` forms):
//! `InstInfo::writes_exec`. (4) The VALU unit books such an instruction with the cycle an
//! MFMA may follow (`Booking::exec_for_mfma`), the wave keeps it, and `own_ready` holds an
//! MFMA back until then. (5) The wait is a dependency like the VALU-write-then-MFMA-read
//! one: `Reason::Dependency`. (6) `a_valu_exec_write_holds_back_the_next_mfma` in
//! `tests/timing.rs`. No AITER kernel writes EXEC from the VALU, so the calibration rows
//! predict the same.

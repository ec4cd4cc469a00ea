//! A kernel ready to run: its code object image in device memory and its instructions decoded
//! once, indexed by address.

use std::sync::Arc;

use tilegen_codeobj::{CodeObject, Kernel};

use super::fault::FaultKind;
use super::memory::{AllocError, DeviceMemory, MemFault};
use super::setup::KernelSetup;
use crate::isa::{self, Inst};

/// Why a kernel could not be prepared.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The code object has no kernel of that name.
    #[error("the code object has no kernel `{0}`")]
    NoSuchKernel(String),
    /// Device memory for the image could not be allocated.
    #[error("allocating the code object image: {0}")]
    Alloc(#[from] AllocError),
    /// Copying the image failed.
    #[error("copying the code object image: {0}")]
    Copy(#[from] MemFault),
    /// `.text` does not lie inside the loaded image.
    #[error(
        ".text [{start:#x}, {start:#x} + {len}) is not inside the loaded image of {image} bytes"
    )]
    TextOutsideImage {
        /// Address of `.text` (relative to the image).
        start: u64,
        /// Its length.
        len: u64,
        /// Size of the image.
        image: u64,
    },
    /// The kernel's entry point is not inside `.text`.
    #[error("the entry {entry:#x} of kernel `{kernel}` is outside .text [{start:#x}, {end:#x})")]
    EntryOutsideText {
        /// The kernel.
        kernel: String,
        /// Entry address (relative to the image).
        entry: u64,
        /// Start of `.text`.
        start: u64,
        /// End of `.text`.
        end: u64,
    },
}

const NO_INST: u32 = u32::MAX;

/// A loaded kernel. The kernels of one code object share its image and its decoded `.text`.
#[derive(Debug)]
pub struct Program {
    name: String,
    setup: KernelSetup,
    image_base: u64,
    entry: u64,
    code: Arc<Code>,
}

/// `.text`, decoded once.
#[derive(Debug)]
struct Code {
    text_start: u64,
    /// Decoded instructions (or the decoder's complaint) in address order.
    decoded: Vec<Result<Inst, String>>,
    /// For every dword of `.text`: index into `decoded` of the instruction starting there.
    index: Vec<u32>,
}

impl Code {
    fn decode(text_start: u64, text: &[u8]) -> Code {
        let mut decoded = Vec::new();
        let mut index = vec![NO_INST; text.len().div_ceil(4)];
        for (pc, r) in isa::decode_lenient(text, text_start) {
            index[(pc.wrapping_sub(text_start) / 4) as usize] = decoded.len() as u32;
            decoded.push(r.map_err(|e| e.to_string()));
        }
        Code {
            text_start,
            decoded,
            index,
        }
    }
}

impl Program {
    /// Loads kernel `name` of `co` into `mem` (the whole loadable image is copied, so
    /// PC-relative data references work) and decodes its `.text`.
    pub fn load(mem: &mut DeviceMemory, co: &CodeObject, name: &str) -> Result<Program, LoadError> {
        let kernel = co
            .kernel(name)
            .ok_or_else(|| LoadError::NoSuchKernel(name.to_string()))?;
        Self::load_kernels(mem, co, std::slice::from_ref(kernel)).map(|mut v| v.remove(0))
    }

    /// Loads every kernel of `co` into `mem`, in metadata order: one image and one decoding of
    /// `.text` shared by all of them.
    pub fn load_all(mem: &mut DeviceMemory, co: &CodeObject) -> Result<Vec<Program>, LoadError> {
        Self::load_kernels(mem, co, &co.kernels)
    }

    fn load_kernels(
        mem: &mut DeviceMemory,
        co: &CodeObject,
        kernels: &[Kernel],
    ) -> Result<Vec<Program>, LoadError> {
        // The image spans `max(vaddr + mem_size)` of the program headers, whatever a file
        // claims: the allocation is checked against the device memory limit before any host
        // memory is taken.
        let size = co.image_size().max(4);
        let (text_addr, text) = (co.text.0, &co.text.1);
        let text_end = text_addr.checked_add(text.len() as u64);
        let end = match text_end {
            Some(e) if e <= size => e,
            _ => {
                return Err(LoadError::TextOutsideImage {
                    start: text_addr,
                    len: text.len() as u64,
                    image: size,
                });
            }
        };
        if let Some(k) = kernels
            .iter()
            .find(|k| k.entry < text_addr || k.entry >= end)
        {
            return Err(LoadError::EntryOutsideText {
                kernel: k.name().to_string(),
                entry: k.entry,
                start: text_addr,
                end,
            });
        }
        let base = mem.alloc(size)?;
        for seg in &co.segments {
            // A segment whose file bytes run past the image is reported by the write's
            // range check (the address is clamped so the sum cannot wrap).
            let at = base.saturating_add(seg.vaddr);
            if let Err(e) = mem.write(at, &seg.file_bytes) {
                let _ = mem.free(base);
                return Err(e.into());
            }
        }
        // Both fit: text_end <= size and base + size is a live allocation.
        let code = Arc::new(Code::decode(base + text_addr, text));
        Ok(kernels
            .iter()
            .map(|k| Program {
                name: k.name().to_string(),
                setup: KernelSetup::from_kernel_descriptor(&k.descriptor),
                image_base: base,
                entry: base + k.entry,
                code: code.clone(),
            })
            .collect())
    }

    /// Loads raw machine code as a kernel whose entry is the first byte (for tests and tools
    /// that assemble code without a code object).
    pub fn load_code(
        mem: &mut DeviceMemory,
        name: &str,
        code: &[u8],
        setup: KernelSetup,
    ) -> Result<Program, LoadError> {
        let base = mem.alloc(code.len().max(4) as u64)?;
        mem.write(base, code)?;
        Ok(Program {
            name: name.to_string(),
            setup,
            image_base: base,
            entry: base,
            code: Arc::new(Code::decode(base, code)),
        })
    }

    /// Kernel name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The descriptor-derived setup.
    pub fn setup(&self) -> &KernelSetup {
        &self.setup
    }

    /// Device address of the kernel's first instruction.
    pub fn entry(&self) -> u64 {
        self.entry
    }

    /// Device address where the code object image starts.
    pub fn image_base(&self) -> u64 {
        self.image_base
    }

    /// Number of decoded instructions (valid or not).
    pub fn instruction_count(&self) -> usize {
        self.code.decoded.len()
    }

    /// The instruction at `pc`.
    pub fn at(&self, pc: u64) -> Result<&Inst, FaultKind> {
        self.slot(pc).map(|(_, inst)| inst)
    }

    /// The instruction at `pc` with its index among the decoded instructions (`0 ..
    /// instruction_count()`), which per-instruction counters use.
    pub fn slot(&self, pc: u64) -> Result<(usize, &Inst), FaultKind> {
        let bad = || FaultKind::BadJump { target: pc };
        let off = pc.checked_sub(self.code.text_start).ok_or_else(bad)?;
        if off % 4 != 0 {
            return Err(bad());
        }
        let slot = *self.code.index.get((off / 4) as usize).ok_or_else(bad)?;
        if slot == NO_INST {
            return Err(bad());
        }
        match &self.code.decoded[slot as usize] {
            Ok(inst) => Ok((slot as usize, inst)),
            Err(e) => Err(FaultKind::Illegal(e.clone())),
        }
    }

    /// The decoded instruction with index `slot`, if it decoded.
    pub fn at_slot(&self, slot: usize) -> Option<&Inst> {
        self.code.decoded.get(slot)?.as_ref().ok()
    }

    /// Disassembly of the instruction at `pc` for fault reports ("" when there is none).
    pub fn disassemble(&self, pc: u64) -> String {
        match self.at(pc) {
            Ok(inst) => inst.to_string(),
            Err(_) => String::new(),
        }
    }
}

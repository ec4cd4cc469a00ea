//! gfx950 instruction-set front end: machine code to [`Inst`], and [`Inst`] to the text
//! `llvm-objdump-22 -d --mcpu=gfx950` prints.
//!
//! The opcode tables (`tables.rs`) are generated from LLVM itself by `tools/gen_tables.py`; the
//! decoder and printer are generic over them.
//!
//! An [`Inst`] carries one [`Opcode`] per operation whatever its [`Encoding`], its operands by
//! [`Role`] (implicit `vcc` filled in), and its modifier and memory fields. An executor matches
//! on the opcode:
//!
//! ```
//! use tilegen_emu::isa::{Encoding, Opcode, Operand, Role, ValueType, decode};
//!
//! // v_add_f32_e32 v1, 1.0, v2
//! let inst = decode(&[0xf2, 0x04, 0x02, 0x02], 0x1000).unwrap();
//! assert_eq!(inst.to_string(), "v_add_f32_e32 v1, 1.0, v2");
//! match inst.op {
//!     Opcode::V_ADD_F32 => {
//!         assert_eq!(inst.encoding, Encoding::Vop2);
//!         assert_eq!(inst.dst(), Operand::Vgpr { reg: 1, count: 1 });
//!         let bits = inst.src(0).constant_bits(inst.value_type(Role::Src0));
//!         assert_eq!(bits, Some(0x3F80_0000));
//!         assert_eq!(inst.value_type(Role::Src0), ValueType::B32);
//!         assert!(!inst.mods.clamp && inst.mods.neg == 0);
//!     }
//!     _ => unreachable!(),
//! }
//! ```

mod decode;
mod desc;
mod inst;
mod operand;
mod print;
mod special;
#[rustfmt::skip]
mod tables;

pub use decode::{DecodeError, decode, decode_all, decode_lenient};
pub use desc::{
    CmpPred, CmpType, Compare, Encoding, ROLE_COUNT, Role, TimingFacts, ValuRate, ValueType,
};
pub use inst::{Dpp, DppCtrl, DstUnused, Inst, MemFlags, Mfma, Mods, Sdwa, SdwaSel};
pub use operand::{ConstReg, InlineFloat, Operand, SpecialReg};
pub use tables::Opcode;

// Scalar ALU, scalar memory and program control: every SOP encoding, SMEM addressing forms,
// branches (forward and backward, to labels), waits, messages and hardware registers.
	.amdgcn_target "amdgcn-amd-amdhsa--gfx950"
	.text
	.globl	salu_kernel
	.p2align	8
	.type	salu_kernel,@function
salu_kernel:
	s_load_dwordx2 s[0:1], s[4:5], 0x0
	s_load_dwordx4 s[8:11], s[4:5], 0x10
	s_load_dwordx8 s[16:23], s[4:5], 0x20 glc
	s_load_dword s24, s[4:5], s25
	s_load_dword s26, s[4:5], s27 offset:0x8
	s_buffer_load_dwordx2 s[28:29], s[8:11], 0x4
	s_load_dwordx16 s[32:47], s[0:1], -0x10
	s_waitcnt lgkmcnt(0)
	s_waitcnt vmcnt(3) lgkmcnt(1)
	s_waitcnt vmcnt(63) expcnt(7) lgkmcnt(15)
	s_mov_b32 s2, 0x12345678
	s_mov_b32 s3, -1
	s_mov_b32 s48, 1.0
	s_mov_b32 s49, lit(0x40000000)
	s_mov_b64 s[50:51], 0
	s_mov_b64 s[52:53], exec
	s_mov_b64 s[54:55], 0.15915494309189532
	s_movk_i32 s56, 0x1234
	s_add_u32 s2, s2, s3
	s_addc_u32 s3, s3, 0
	s_sub_i32 s57, s57, 64
	s_mul_i32 s58, s2, 0x3c
	s_mul_hi_u32 s59, s2, s3
	s_lshl_b32 s60, s2, 4
	s_lshl_b64 s[60:61], s[60:61], 2
	s_lshr_b32 s62, s2, s3
	s_ashr_i32 s63, s2, 31
	s_and_b32 s64, s2, 0xff
	s_or_b64 s[64:65], s[64:65], vcc
	s_xor_b64 s[66:67], exec, -1
	s_andn2_b64 exec, exec, s[66:67]
	s_bfe_u32 s68, s2, 0x80008
	s_bfe_i32 s69, s2, 0x100004
	s_lshl1_add_u32 s70, s2, s3
	s_lshl2_add_u32 s70, s2, s3
	s_lshl3_add_u32 s70, s2, s3
	s_lshl4_add_u32 s70, s2, s3
	s_pack_ll_b32_b16 s71, s2, s3
	s_min_i32 s72, s2, -16
	s_max_u32 s72, s72, 0x7fffffff
	s_cselect_b32 s73, s2, s3
	s_cselect_b64 s[74:75], s[0:1], 0
	s_not_b32 s76, s2
	s_brev_b32 s77, s2
	s_bcnt1_i32_b64 s78, exec
	s_ff1_i32_b32 s79, s2
	s_flbit_i32_b32 s79, s2
	s_sext_i32_i16 s80, s2
	s_abs_i32 s81, s3
	s_and_saveexec_b64 s[82:83], vcc
	s_or_saveexec_b64 s[84:85], s[82:83]
	s_andn2_saveexec_b64 s[84:85], s[82:83]
	s_cmp_eq_u32 s2, 0
	s_cmp_lg_u32 s2, s3
	s_cmp_lt_i32 s2, 0x100
	s_cmp_eq_u64 s[0:1], 0
	s_bitcmp1_b32 s2, 3
	s_cmpk_lt_i32 s2, 0x40
	s_addk_i32 s2, 0xfff0
	s_mulk_i32 s2, 0x3
	s_getpc_b64 s[86:87]
	s_add_u32 s86, s86, 0x100
	s_addc_u32 s87, s87, 0
	s_setprio 3
	s_sleep 1
	s_nop 7
	s_barrier
	s_getreg_b32 s88, hwreg(HW_REG_MODE, 0, 4)
	s_setreg_b32 hwreg(HW_REG_MODE), s88
	s_setreg_imm32_b32 hwreg(HW_REG_MODE, 4, 4), 0x3
	s_sendmsg sendmsg(MSG_INTERRUPT)
	s_icache_inv
	s_dcache_inv
	s_memtime s[90:91]
	s_set_gpr_idx_on s2, gpr_idx(SRC0,DST)
	s_set_gpr_idx_off
.Lloop:
	s_add_u32 s2, s2, -1
	s_cmp_lg_u32 s2, 0
	s_cbranch_scc1 .Lloop
	s_cbranch_scc0 .Ldone
	s_cbranch_vccz .Ldone
	s_cbranch_vccnz .Ldone
	s_cbranch_execz .Ldone
	s_cbranch_execnz .Lloop
	s_branch .Ldone
	s_nop 0
.Ldone:
	s_store_dword s2, s[0:1], 0x4 glc
	s_dcache_wb
	s_trap 2
	s_endpgm
.Lsalu_end:
	.size	salu_kernel, .Lsalu_end-salu_kernel

	.rodata
	.p2align	6
	.amdhsa_kernel salu_kernel
		.amdhsa_user_sgpr_dispatch_ptr 1
		.amdhsa_user_sgpr_kernarg_segment_ptr 1
		.amdhsa_system_sgpr_workgroup_id_x 1
		.amdhsa_system_sgpr_workgroup_id_y 1
		.amdhsa_next_free_vgpr 8
		.amdhsa_next_free_sgpr 92
		.amdhsa_accum_offset 4
	.end_amdhsa_kernel

	.amdgpu_metadata
---
amdhsa.kernels:
  - .args:
      - .address_space:  global
        .name:           out
        .offset:         0
        .size:           8
        .value_kind:     global_buffer
      - .name:           n
        .offset:         8
        .size:           4
        .value_kind:     by_value
    .group_segment_fixed_size: 0
    .kernarg_segment_align: 8
    .kernarg_segment_size: 16
    .max_flat_workgroup_size: 64
    .name:           salu_kernel
    .private_segment_fixed_size: 0
    .sgpr_count:     96
    .sgpr_spill_count: 0
    .symbol:         salu_kernel.kd
    .uses_dynamic_stack: false
    .vgpr_count:     8
    .vgpr_spill_count: 0
    .agpr_count:     0
    .wavefront_size: 64
amdhsa.target:   amdgcn-amd-amdhsa--gfx950
amdhsa.version:
  - 1
  - 2
...
	.end_amdgpu_metadata

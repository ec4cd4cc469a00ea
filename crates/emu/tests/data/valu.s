// Vector ALU: VOP1/VOP2/VOPC in 32-bit and VOP3 (_e64) forms, VOP3 and VOP3P only ops, the
// int/f32/f16/bf16/f64 families, gfx950 conversions (FP4/FP8 scaled converts, bf16 packs),
// lane permutes, constants and literals of every type, source/output modifiers, SDWA and DPP.
	.amdgcn_target "amdgcn-amd-amdhsa--gfx950"
	.text
	.globl	valu_kernel
	.p2align	8
	.type	valu_kernel,@function
valu_kernel:
	v_mov_b32_e32 v1, v0
	v_mov_b32_e32 v2, 0x3ff
	v_mov_b32_e32 v3, s2
	v_mov_b32_e32 v4, -4.0
	v_mov_b32_e32 v5, 0.15915494
	v_mov_b32_e64 v6, 64
	v_mov_b64_e32 v[8:9], s[2:3]
	v_mov_b64_e32 v[10:11], 1.0
	v_readfirstlane_b32 s4, v1
	v_readlane_b32 s5, v1, 7
	v_writelane_b32 v7, s5, 63
	v_and_b32_e32 v1, 0x3ff, v0
	v_lshrrev_b32_e32 v12, 6, v0
	v_lshlrev_b32_e32 v13, 2, v1
	v_ashrrev_i32_e32 v14, 31, v13
	v_lshlrev_b64 v[16:17], 3, v[8:9]
	v_lshrrev_b64 v[18:19], v1, v[8:9]
	v_lshl_add_u64 v[20:21], v[8:9], 2, s[2:3]
	v_lshl_add_u64 v[22:23], v[20:21], 0, v[8:9]
	v_add_u32_e32 v24, s3, v1
	v_sub_u32_e32 v25, 16, v1
	v_add_co_u32_e32 v26, vcc, v20, v22
	v_addc_co_u32_e32 v27, vcc, v21, v23, vcc
	v_add_co_u32_e64 v26, s[6:7], v20, v22
	v_addc_co_u32_e64 v27, s[6:7], v21, v23, s[6:7]
	v_mul_lo_u32 v28, v1, s3
	v_mul_hi_u32 v29, v1, s6
	v_mad_u64_u32 v[30:31], s[6:7], v1, v2, v[8:9]
	v_mad_u32_u24 v32, v1, 48, v2
	v_add3_u32 v33, v1, v2, v3
	v_xad_u32 v34, v1, v2, v3
	v_lshl_or_b32 v35, v1, 4, v2
	v_and_or_b32 v36, v1, s7, v2
	v_or3_b32 v37, v1, v2, v3
	v_bfe_u32 v38, v1, 8, 4
	v_bfi_b32 v39, s7, v1, v2
	v_alignbit_b32 v40, v1, v2, 16
	v_perm_b32 v41, v1, v2, s6
	v_perm_b32 v42, v1, v2, s4
	v_bitop3_b32 v43, v1, v2, v3 bitop3:0xc8
	v_bitop3_b16 v43, v1, v2, v3 bitop3:0x96 op_sel:[1,0,0,0]
	v_cndmask_b32_e32 v44, 0, v1, vcc
	v_cndmask_b32_e64 v45, v1, v2, s[6:7]
	v_cndmask_b32_e64 v45, -v1, |v2|, s[6:7]
	v_min_u32_e32 v46, 0x100, v1
	v_max_i32_e32 v47, -16, v1
	v_mbcnt_lo_u32_b32 v48, -1, 0
	v_mbcnt_hi_u32_b32 v48, -1, v48
	v_bcnt_u32_b32 v49, v1, 0
	v_ffbh_u32_e32 v50, v1
	v_bfrev_b32_e32 v51, v1
	v_not_b32_e32 v52, v1
	v_cmp_eq_u32_e32 vcc, 0, v1
	v_cmp_gt_i32_e64 s[8:9], s3, v1
	v_cmp_ne_u32_e64 s[10:11], v1, v2
	v_cmp_lt_u64_e32 vcc, v[8:9], v[20:21]
	v_cmpx_eq_u32_e32 vcc, v1, v2
	v_cmpx_le_i32_e64 s[12:13], v1, v2
	v_cmp_class_f32_e64 s[14:15], v53, 3
	v_cmp_u_f32_e32 vcc, v53, v53
	v_cmp_nlt_f64_e64 s[8:9], |v[8:9]|, -v[20:21]
	v_cmp_eq_u16_e64 s[8:9], v1, 0
	// f32
	v_add_f32_e32 v53, 1.0, v1
	v_add_f32_e64 v54, -v1, |v2| clamp
	v_mul_f32_e64 v55, v1, v2 mul:2
	v_fma_f32 v56, v1, v2, -v3 div:2
	v_fmac_f32_e32 v56, v1, v2
	v_fmamk_f32 v57, v1, 0x40490fdb, v2
	v_fmaak_f32 v58, v1, v2, 0x3f000000
	v_mul_legacy_f32 v59, v1, v2
	v_max3_f32 v60, v1, v2, 0
	v_med3_f32 v61, v1, 0, 1.0
	v_rcp_f32_e32 v62, v1
	v_rsq_f32_e32 v62, v1
	v_exp_f32_e32 v63, v1
	v_log_f32_e32 v63, v1
	v_sqrt_f32_e32 v64, v1
	v_sin_f32_e32 v64, v1
	v_floor_f32_e32 v65, v1
	v_fract_f32_e32 v65, v1
	v_ldexp_f32 v66, v1, -2
	v_frexp_mant_f32_e32 v67, v1
	v_cvt_f32_i32_e32 v68, v1
	v_cvt_u32_f32_e32 v69, v1
	v_cvt_i32_f32_e64 v70, |v1|
	v_div_scale_f32 v71, vcc, v1, v2, v1
	v_div_fmas_f32 v72, v71, v2, v3
	v_div_fixup_f32 v73, v72, v2, v1
	v_pk_fma_f32 v[74:75], v[8:9], v[20:21], v[22:23]
	v_pk_mul_f32 v[76:77], v[8:9], s[2:3] op_sel_hi:[1,0]
	v_pk_add_f32 v[78:79], v[8:9], v[20:21] neg_lo:[1,0] neg_hi:[1,0]
	v_pk_mov_b32 v[80:81], v[8:9], v[20:21] op_sel:[1,0]
	// f16 / bf16
	v_add_f16_e32 v82, 1.0, v1
	v_fma_f16 v83, v1, v2, v3 op_sel:[0,1,0,1]
	v_fma_mix_f32 v84, v1, v2, v3 op_sel_hi:[1,1,0]
	v_fma_mixlo_f16 v85, v1, v2, v3 op_sel:[1,0,0] op_sel_hi:[1,1,1] clamp
	v_cvt_f16_f32_e32 v86, v1
	v_cvt_f32_f16_e64 v87, |v1|
	v_cvt_pkrtz_f16_f32 v88, v1, v2
	v_cvt_pk_f16_f32 v88, v1, v2
	v_cvt_pk_bf16_f32 v89, v1, v2
	v_cvt_pk_bf16_f32 v89, -v1, v2 clamp
	v_cvt_f32_bf16_e32 v90, v1
	v_cvt_f32_bf16_sdwa v90, v1 dst_sel:DWORD dst_unused:UNUSED_PAD src0_sel:WORD_1
	v_pk_add_f16 v91, v1, v2
	v_pk_fma_f16 v92, v1, v2, v3 op_sel:[1,0,0] op_sel_hi:[0,1,1]
	v_pk_mul_f16 v93, v1, 1.0
	v_pk_max_f16 v94, v1, v2 neg_lo:[0,1]
	v_pk_add_u16 v95, v1, 2
	v_pk_lshlrev_b16 v96, 1, v1 op_sel_hi:[0,1]
	v_pk_mad_i16 v97, v1, v2, v3
	v_dot2_f32_f16 v98, v1, v2, v98
	v_dot2_f32_bf16 v99, v1, v2, v99
	v_dot2c_f32_bf16_e32 v99, v1, v2
	v_dot4_i32_i8 v100, v1, v2, v100
	v_max_u16_e32 v101, v1, v2
	v_lshlrev_b16_e32 v102, 8, v1
	v_mad_u32_u16 v103, v1, v2, v3 op_sel:[1,1,0,0]
	v_sat_pk_u8_i16_e32 v104, v1
	v_cvt_pk_u8_f32 v105, v1, 1, v105
	// f64
	v_add_f64 v[106:107], v[8:9], -v[20:21]
	v_mul_f64 v[108:109], v[8:9], 2.0
	v_fma_f64 v[110:111], v[8:9], v[20:21], v[22:23]
	v_fmac_f64_e32 v[110:111], v[8:9], v[20:21]
	v_max_f64 v[112:113], v[8:9], v[8:9]
	v_ldexp_f64 v[114:115], v[8:9], v1
	v_rcp_f64_e32 v[116:117], v[8:9]
	v_sqrt_f64_e32 v[118:119], v[8:9]
	v_cvt_f64_f32_e32 v[120:121], v1
	v_cvt_f32_f64_e32 v122, v[8:9]
	v_cvt_f64_i32_e32 v[124:125], v1
	v_div_scale_f64 v[126:127], s[8:9], v[8:9], v[20:21], v[8:9]
	v_add_f64 v[126:127], v[8:9], 0x40000000
	v_trig_preop_f64 v[128:129], v[8:9], v1
	// gfx950 conversions: FP8/BF8/FP4 with scales
	v_cvt_scalef32_pk_f32_fp4 v[130:131], v1, v2
	v_cvt_scalef32_pk_f32_fp4 v[130:131], v1, v2 op_sel:[0,1,0]
	v_cvt_scalef32_pk_bf16_fp4 v132, v1, v2
	v_cvt_scalef32_pk_bf16_fp4 v132, v1, v2 op_sel:[1,1,0]
	v_cvt_scalef32_pk_f16_fp4 v133, v1, 1.0
	v_cvt_scalef32_pk_fp4_f32 v134, v1, v2, v3
	v_cvt_scalef32_pk_fp4_bf16 v135, v1, v2
	v_cvt_scalef32_sr_pk_fp4_f32 v136, v[8:9], v2, v3
	v_cvt_scalef32_pk_f32_fp8 v[138:139], v1, v2
	v_cvt_scalef32_f32_fp8 v140, v1, v2 op_sel:[1,0,0]
	v_cvt_scalef32_pk_bf16_fp8 v141, v1, v2
	v_cvt_scalef32_pk_fp8_f32 v142, v1, v2, v3
	v_cvt_scalef32_pk_fp8_bf16 v143, v1, v2
	v_cvt_scalef32_sr_fp8_f32 v144, v1, v2, v3
	v_cvt_scalef32_pk_bf16_bf8 v145, v1, v2
	v_cvt_pk_fp8_f32 v146, v1, v2
	v_cvt_pk_f32_fp8_e32 v[148:149], v1
	v_cvt_f32_fp8_e32 v150, v1
	v_cvt_f32_fp8_sdwa v150, v1 src0_sel:BYTE_3
	v_cvt_sr_bf16_f32 v151, v1, v2
	v_cvt_scalef32_pk32_f32_fp6 v[160:191], v[8:13], v2
	v_cvt_scalef32_2xpk16_fp6_f32 v[192:197], v[160:175], v[176:191], v2
	// lane movement
	v_permlane32_swap_b32_e32 v1, v2
	v_permlane16_swap_b32_e32 v1, v2
	v_permlane32_swap_b32_e64 v1, v2 bound_ctrl:1 fi:1
	v_mov_b32_dpp v3, v1 quad_perm:[1,0,3,2] row_mask:0xf bank_mask:0xf
	v_mov_b32_dpp v3, v1 row_shr:1 row_mask:0xf bank_mask:0xf bound_ctrl:1
	v_add_u32_dpp v4, v1, v2 row_bcast:15 row_mask:0xa bank_mask:0xf
	v_add_f32_dpp v4, -v1, |v2| row_newbcast:3 row_mask:0xf bank_mask:0x3
	v_max_f32_dpp v5, v1, v2 wave_shr:1 row_mask:0xf bank_mask:0xf
	v_mov_b64_dpp v[8:9], v[20:21] row_newbcast:1 row_mask:0xf bank_mask:0xf
	// SDWA
	v_or_b32_sdwa v6, v1, v2 dst_sel:WORD_1 dst_unused:UNUSED_PRESERVE src0_sel:BYTE_0 src1_sel:DWORD
	v_add_u32_sdwa v6, v1, v2 dst_sel:DWORD dst_unused:UNUSED_PAD src0_sel:BYTE_1 src1_sel:BYTE_2
	v_mul_f32_sdwa v6, -v1, |v2| clamp dst_sel:WORD_0 dst_unused:UNUSED_SEXT src0_sel:WORD_1 src1_sel:WORD_0
	v_lshlrev_b16_sdwa v6, v1, sext(v2) dst_sel:BYTE_1 dst_unused:UNUSED_PAD src0_sel:DWORD src1_sel:BYTE_0
	v_max_u16_sdwa v6, s1, v2 dst_sel:WORD_1 dst_unused:UNUSED_PAD src0_sel:WORD_0 src1_sel:WORD_0
	v_cmp_eq_u16_sdwa s[8:9], v1, v2 src0_sel:BYTE_0 src1_sel:BYTE_1
	v_cmp_gt_f32_sdwa vcc, v1, 0 src0_sel:WORD_1 src1_sel:DWORD
	v_cvt_f32_f16_sdwa v7, v1 dst_sel:DWORD dst_unused:UNUSED_PAD src0_sel:WORD_1
	v_accvgpr_write_b32 a0, v1
	v_accvgpr_write_b32 a1, 0
	v_accvgpr_read_b32 v2, a0
	v_accvgpr_mov_b32 a2, a1
	v_nop
	s_endpgm
.Lvalu_end:
	.size	valu_kernel, .Lvalu_end-valu_kernel

	.rodata
	.p2align	6
	.amdhsa_kernel valu_kernel
		.amdhsa_user_sgpr_kernarg_segment_ptr 1
		.amdhsa_system_vgpr_workitem_id 2
		.amdhsa_next_free_vgpr 256
		.amdhsa_next_free_sgpr 16
		.amdhsa_accum_offset 200
		.amdhsa_float_denorm_mode_32 0
		.amdhsa_ieee_mode 0
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
    .group_segment_fixed_size: 0
    .kernarg_segment_align: 8
    .kernarg_segment_size: 8
    .max_flat_workgroup_size: 1024
    .name:           valu_kernel
    .private_segment_fixed_size: 0
    .sgpr_count:     18
    .symbol:         valu_kernel.kd
    .vgpr_count:     256
    .agpr_count:     3
    .wavefront_size: 64
amdhsa.target:   amdgcn-amd-amdhsa--gfx950
amdhsa.version:
  - 1
  - 2
...
	.end_amdgpu_metadata

// Two kernels in one code object, with descriptors that set most fields and metadata that uses
// most keys, so the reader can be checked field by field against LLVM's own tools.
	.amdgcn_target "amdgcn-amd-amdhsa--gfx950"
	.text
	.globl	first
	.p2align	8
	.type	first,@function
first:
	s_load_dwordx2 s[0:1], s[4:5], 0x0
	s_waitcnt lgkmcnt(0)
.Lfirst_loop:
	v_add_u32_e32 v1, 1, v1
	s_cbranch_scc1 .Lfirst_loop
	s_endpgm
.Lfirst_end:
	.size	first, .Lfirst_end-first

	.globl	second
	.p2align	8
	.type	second,@function
second:
	v_mfma_f32_16x16x32_bf16 a[0:3], v[4:7], v[8:11], a[0:3]
	s_nop 7
	s_endpgm
.Lsecond_end:
	.size	second, .Lsecond_end-second

	.rodata
	.p2align	6
	.amdhsa_kernel first
		.amdhsa_group_segment_fixed_size 1024
		.amdhsa_private_segment_fixed_size 16
		.amdhsa_kernarg_size 24
		.amdhsa_user_sgpr_dispatch_ptr 1
		.amdhsa_user_sgpr_queue_ptr 1
		.amdhsa_user_sgpr_kernarg_segment_ptr 1
		.amdhsa_user_sgpr_dispatch_id 1
		.amdhsa_user_sgpr_private_segment_size 1
		.amdhsa_enable_private_segment 1
		.amdhsa_system_sgpr_workgroup_id_x 1
		.amdhsa_system_sgpr_workgroup_id_y 1
		.amdhsa_system_sgpr_workgroup_id_z 1
		.amdhsa_system_sgpr_workgroup_info 1
		.amdhsa_system_vgpr_workitem_id 1
		.amdhsa_next_free_vgpr 40
		.amdhsa_next_free_sgpr 40
		.amdhsa_reserve_vcc 0
		.amdhsa_accum_offset 32
		.amdhsa_float_round_mode_32 1
		.amdhsa_float_round_mode_16_64 2
		.amdhsa_float_denorm_mode_32 0
		.amdhsa_float_denorm_mode_16_64 3
		.amdhsa_dx10_clamp 0
		.amdhsa_ieee_mode 1
		.amdhsa_fp16_overflow 1
		.amdhsa_tg_split 1
		.amdhsa_exception_fp_ieee_invalid_op 1
		.amdhsa_exception_fp_ieee_div_zero 1
		.amdhsa_exception_int_div_zero 1
		.amdhsa_uses_dynamic_stack 1
	.end_amdhsa_kernel
	.p2align	6
	.amdhsa_kernel second
		.amdhsa_user_sgpr_kernarg_segment_ptr 1
		.amdhsa_next_free_vgpr 128
		.amdhsa_next_free_sgpr 16
		.amdhsa_reserve_vcc 0
		.amdhsa_accum_offset 64
		.amdhsa_user_sgpr_kernarg_preload_length 2
		.amdhsa_user_sgpr_kernarg_preload_offset 0
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
        .type_name:      'float*'
        .access:         write_only
      - .name:           n
        .offset:         8
        .size:           4
        .value_kind:     by_value
        .type_name:      int
      - .offset:         16
        .size:           8
        .value_kind:     hidden_global_offset_x
    .group_segment_fixed_size: 1024
    .kernarg_segment_align: 8
    .kernarg_segment_size: 24
    .max_flat_workgroup_size: 128
    .name:           first
    .private_segment_fixed_size: 16
    .sgpr_count:     42
    .sgpr_spill_count: 2
    .symbol:         first.kd
    .uses_dynamic_stack: true
    .vgpr_count:     40
    .vgpr_spill_count: 1
    .agpr_count:     0
    .wavefront_size: 64
    .language:       OpenCL C
  - .args:
      - .address_space:  global
        .name:           a
        .offset:         0
        .size:           8
        .value_kind:     global_buffer
    .group_segment_fixed_size: 0
    .kernarg_segment_align: 8
    .kernarg_segment_size: 8
    .max_flat_workgroup_size: 64
    .name:           second
    .private_segment_fixed_size: 0
    .sgpr_count:     18
    .sgpr_spill_count: 0
    .symbol:         second.kd
    .uses_dynamic_stack: false
    .vgpr_count:     64
    .vgpr_spill_count: 0
    .agpr_count:     4
    .wavefront_size: 64
amdhsa.target:   amdgcn-amd-amdhsa--gfx950
amdhsa.version:
  - 1
  - 2
...
	.end_amdgpu_metadata

// Kernel `scale` for gfx950: out[i] = 2 * in[i] + 1 for work-item i of 64-item workgroups.
// Arguments: in (s[4:5]) and out (s[6:7]), loaded from the kernarg segment (s[0:1]);
// workgroup id x in s2. The metadata is code object v5's; the harness makes the v4 object
// from it by assembling with --amdhsa-code-object-version=4 and metadata version 1.1.
	.amdgcn_target "amdgcn-amd-amdhsa--gfx950"
	.text
	.globl scale
	.p2align 8
	.type scale,@function
scale:
	s_load_dwordx4 s[4:7], s[0:1], 0x0
	v_and_b32_e32 v1, 0x3ff, v0
	s_lshl_b32 s8, s2, 6
	v_add_u32_e32 v1, s8, v1
	v_lshlrev_b32_e32 v2, 2, v1
	s_waitcnt lgkmcnt(0)
	global_load_dword v3, v2, s[4:5]
	s_waitcnt vmcnt(0)
	v_lshlrev_b32_e32 v3, 1, v3
	v_add_u32_e32 v3, 1, v3
	global_store_dword v2, v3, s[6:7]
	s_waitcnt vmcnt(0)
	s_endpgm
.Lend_scale:
	.size scale, .Lend_scale-scale
	.rodata
	.p2align 6
	.amdhsa_kernel scale
		.amdhsa_user_sgpr_kernarg_segment_ptr 1
		.amdhsa_system_sgpr_workgroup_id_x 1
		.amdhsa_next_free_vgpr 8
		.amdhsa_next_free_sgpr 16
		.amdhsa_accum_offset 8
	.end_amdhsa_kernel
	.amdgpu_metadata
---
amdhsa.kernels:
  - .args:
      - .offset: 0
        .size: 8
        .value_kind: global_buffer
        .address_space: global
      - .offset: 8
        .size: 8
        .value_kind: global_buffer
        .address_space: global
    .group_segment_fixed_size: 0
    .kernarg_segment_align: 8
    .kernarg_segment_size: 16
    .max_flat_workgroup_size: 1024
    .name: scale
    .private_segment_fixed_size: 0
    .sgpr_count: 16
    .symbol: scale.kd
    .vgpr_count: 8
    .wavefront_size: 64
amdhsa.target: amdgcn-amd-amdhsa--gfx950
amdhsa.version: [ 1, 2 ]
...
	.end_amdgpu_metadata

// Memory: LDS (DS) including the gfx950 transposing reads and ds_read_addtid, buffer (MUBUF and
// MTBUF) including loads to LDS and returning atomics, and the flat encodings (FLAT, GLOBAL,
// SCRATCH) including global_load_lds_*, scalar bases, AGPR data and cache-policy bits.
	.amdgcn_target "amdgcn-amd-amdhsa--gfx950"
	.text
	.globl	memory_kernel
	.p2align	8
	.type	memory_kernel,@function
memory_kernel:
	s_mov_b32 m0, -1
	ds_write_b32 v1, v2
	ds_write_b32 v1, v2 offset:65532
	ds_write_b64 v1, v[2:3] offset:8
	ds_write_b128 v1, v[4:7] offset:16
	ds_write_b8 v1, v2 offset:3
	ds_write_b16 v1, v2
	ds_write2_b32 v1, v2, v3 offset0:4 offset1:8
	ds_write2st64_b64 v1, v[2:3], v[4:5] offset1:1
	ds_read_b32 v8, v1
	ds_read_b64 v[8:9], v1 offset:64
	ds_read_b128 v[8:11], v1 offset:1024
	ds_read_u8 v12, v1 offset:5
	ds_read_i16 v12, v1
	ds_read2_b32 v[12:13], v1 offset1:32
	ds_read2_b64 v[12:15], v1 offset0:2 offset1:9
	ds_read_b64_tr_b4 v[16:17], v1
	ds_read_b64_tr_b8 v[16:17], v1 offset:256
	ds_read_b64_tr_b16 v[18:19], v1 offset:512
	ds_read_b96_tr_b6 v[20:22], v1 offset:768
	ds_read_addtid_b32 v23 offset:64
	ds_write_addtid_b32 v23 offset:128
	ds_add_u32 v1, v2
	ds_add_rtn_u32 v24, v1, v2 offset:4
	ds_cmpst_rtn_b32 v24, v1, v2, v3
	ds_max_rtn_f32 v24, v1, v2
	ds_pk_add_f16 v1, v2
	ds_bpermute_b32 v25, v1, v2
	ds_permute_b32 v25, v1, v2 offset:4
	ds_swizzle_b32 v26, v1 offset:swizzle(QUAD_PERM,1,0,3,2)
	ds_swizzle_b32 v26, v1 offset:swizzle(SWAP,16)
	ds_swizzle_b32 v26, v1 offset:swizzle(BITMASK_PERM,"01pip")
	ds_read_b32 a8, v1
	ds_write_b64 v1, a[2:3]
	s_waitcnt lgkmcnt(0)
	buffer_load_dword v27, v1, s[8:11], 0 offen
	buffer_load_dwordx2 v[28:29], v1, s[8:11], s4 offen offset:16
	buffer_load_dwordx4 v[28:31], off, s[8:11], 0 offset:4095 sc0 sc1 nt
	buffer_load_dword v32, v[2:3], s[8:11], 0 idxen offen
	buffer_load_dword v32, v2, s[8:11], 0 idxen
	buffer_load_ubyte v33, v1, s[8:11], 0 offen
	buffer_load_sshort v33, v1, s[8:11], 0 offen
	buffer_load_short_d16_hi v33, v1, s[8:11], 0 offen
	buffer_load_dword v1, s[8:11], 0 offen lds
	buffer_load_dword off, s[8:11], s4 offset:64 lds
	buffer_load_dwordx4 v1, s[8:11], 0 offen lds
	buffer_store_dword v2, v1, s[8:11], 0 offen
	buffer_store_dwordx4 v[4:7], v1, s[8:11], 0 offen offset:256 nt
	buffer_store_byte v2, v1, s[8:11], 0 offen
	buffer_store_dword a2, v1, s[8:11], 0 offen
	buffer_atomic_add v2, v1, s[8:11], 0 offen
	buffer_atomic_add v2, v1, s[8:11], 0 offen sc0
	buffer_atomic_cmpswap_x2 v[4:7], v1, s[8:11], 0 offen sc0
	buffer_atomic_pk_add_bf16 v2, v1, s[8:11], 0 offen
	buffer_wbl2 sc1
	buffer_inv sc1
	tbuffer_load_format_xyzw v[28:31], v1, s[8:11], 0 format:[BUF_DATA_FORMAT_32_32_32_32,BUF_NUM_FORMAT_FLOAT] offen
	tbuffer_store_format_x v2, v1, s[8:11], 0 format:[BUF_NUM_FORMAT_UINT] offen offset:8
	s_waitcnt vmcnt(0)
	global_load_dword v34, v[2:3], off
	global_load_dwordx4 v[36:39], v[2:3], off offset:-4096
	global_load_dwordx2 v[40:41], v1, s[0:1] offset:4095 sc0
	global_load_ubyte v42, v1, s[0:1] nt sc1
	global_load_short_d16_hi v42, v1, s[0:1]
	global_load_dwordx4 a[8:11], v1, s[0:1] offset:16
	global_store_dword v[2:3], v34, off
	global_store_dwordx4 v1, v[36:39], s[0:1] offset:64
	global_store_dwordx2 v1, a[8:9], s[0:1]
	global_load_lds_dword v[2:3], off
	global_load_lds_dword v1, s[0:1] offset:16
	global_load_lds_dwordx4 v1, s[0:1] offset:512
	global_load_lds_dwordx3 v[2:3], off sc0
	global_load_lds_ubyte v1, s[0:1]
	global_atomic_add v1, v2, s[0:1]
	global_atomic_add v43, v1, v2, s[0:1] sc0
	global_atomic_cmpswap_x2 v[44:45], v[2:3], v[4:7], off sc0
	global_atomic_add_f32 v1, v2, s[0:1] offset:-8
	global_atomic_pk_add_bf16 v[2:3], v2, off
	global_atomic_add_f64 v[2:3], v[4:5], off
	flat_load_dword v46, v[2:3]
	flat_load_dwordx2 v[46:47], v[2:3] offset:8
	flat_store_dword v[2:3], v46 offset:4095
	flat_atomic_swap v48, v[2:3], v1 sc0
	flat_atomic_add_f32 v[2:3], v1
	scratch_store_dword off, v2, s5
	scratch_store_dwordx4 v1, v[4:7], off offset:16
	scratch_load_dword v49, off, s5 offset:-16
	scratch_load_dwordx2 v[50:51], v1, off
	scratch_load_dword v49, v1, s5 offset:4
	scratch_load_lds_dword v1, off
	scratch_load_lds_ushort off, s5 offset:8
	s_waitcnt vmcnt(0) lgkmcnt(0)
	s_endpgm
.Lmemory_end:
	.size	memory_kernel, .Lmemory_end-memory_kernel

	.rodata
	.p2align	6
	.amdhsa_kernel memory_kernel
		.amdhsa_user_sgpr_kernarg_segment_ptr 1
		.amdhsa_enable_private_segment 1
		.amdhsa_private_segment_fixed_size 64
		.amdhsa_group_segment_fixed_size 65536
		.amdhsa_next_free_vgpr 64
		.amdhsa_next_free_sgpr 16
		.amdhsa_accum_offset 52
		.amdhsa_user_sgpr_kernarg_preload_length 2
		.amdhsa_user_sgpr_kernarg_preload_offset 0
	.end_amdhsa_kernel

	.amdgpu_metadata
---
amdhsa.kernels:
  - .args:
      - .address_space:  global
        .name:           buf
        .offset:         0
        .size:           8
        .value_kind:     global_buffer
        .type_name:      'float*'
        .access:         read_write
      - .offset:         8
        .size:           4
        .value_kind:     hidden_block_count_x
    .group_segment_fixed_size: 65536
    .kernarg_segment_align: 8
    .kernarg_segment_size: 16
    .max_flat_workgroup_size: 512
    .name:           memory_kernel
    .private_segment_fixed_size: 64
    .sgpr_count:     20
    .sgpr_spill_count: 1
    .symbol:         memory_kernel.kd
    .uses_dynamic_stack: true
    .vgpr_count:     52
    .vgpr_spill_count: 3
    .agpr_count:     12
    .wavefront_size: 64
amdhsa.target:   amdgcn-amd-amdhsa--gfx950
amdhsa.version:
  - 1
  - 2
...
	.end_amdgpu_metadata

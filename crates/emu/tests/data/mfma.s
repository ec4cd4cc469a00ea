// Matrix instructions: the 128-bit scaled f8f6f4 MFMAs (a v_mfma_ld_scale_b32 prefix fused with
// the MFMA), unscaled f8f6f4, bf16, f16, i8, fp8/bf8, f32 and f64 MFMAs, sparse SMFMACs, and
// the accumulation-register moves, with C/D in VGPRs and in AGPRs.
	.amdgcn_target "amdgcn-amd-amdhsa--gfx950"
	.text
	.globl	mfma_kernel
	.p2align	8
	.type	mfma_kernel,@function
mfma_kernel:
	v_mfma_scale_f32_16x16x128_f8f6f4 v[0:3], v[4:11], v[12:19], v[20:23], v24, v25
	v_mfma_scale_f32_16x16x128_f8f6f4 v[0:3], v[4:7], v[12:15], v[0:3], v24, v25 op_sel_hi:[0,0,0] cbsz:4 blgp:4
	v_mfma_scale_f32_16x16x128_f8f6f4 a[0:3], v[4:11], v[12:19], a[0:3], v24, v25 op_sel:[1,0,0] op_sel_hi:[0,1,0] cbsz:0 blgp:1
	v_mfma_scale_f32_16x16x128_f8f6f4 v[0:3], v[4:9], v[12:17], 0, v24, v25 cbsz:2 blgp:3
	v_mfma_scale_f32_32x32x64_f8f6f4 v[32:47], v[4:11], v[12:19], v[32:47], v24, v25
	v_mfma_scale_f32_32x32x64_f8f6f4 a[32:47], v[4:7], v[12:15], a[32:47], v26, v27 op_sel_hi:[0,0,0] cbsz:4 blgp:4
	v_mfma_f32_16x16x128_f8f6f4 v[0:3], v[4:11], v[12:19], v[20:23]
	v_mfma_f32_16x16x128_f8f6f4 v[0:3], v[4:7], v[12:15], v[0:3] cbsz:4 blgp:4
	v_mfma_f32_32x32x64_f8f6f4 a[32:47], v[4:11], v[12:17], a[32:47] blgp:2
	v_mfma_ld_scale_b32 v24, v25
	v_mfma_f32_16x16x32_bf16 v[0:3], v[4:7], v[12:15], v[0:3]
	v_mfma_f32_32x32x16_bf16 a[32:47], v[4:7], v[12:15], a[32:47]
	v_mfma_f32_16x16x32_f16 v[0:3], v[4:7], v[12:15], 0
	v_mfma_f32_32x32x16_f16 v[32:47], v[4:7], v[12:15], v[32:47] cbsz:1 abid:1 blgp:2
	v_mfma_i32_16x16x64_i8 v[0:3], v[4:7], v[12:15], v[0:3]
	v_mfma_i32_32x32x32_i8 a[32:47], v[4:7], v[12:15], a[32:47]
	v_mfma_f32_16x16x32_fp8_fp8 v[0:3], v[4:5], v[12:13], v[0:3]
	v_mfma_f32_16x16x32_bf8_fp8 v[0:3], v[4:5], v[12:13], v[0:3]
	v_mfma_f32_32x32x16_fp8_bf8 a[32:47], v[4:5], v[12:13], a[32:47]
	v_mfma_f32_16x16x16_bf16 v[0:3], v[4:5], v[12:13], v[0:3]
	v_mfma_f32_32x32x8_f16 v[32:47], v[4:5], v[12:13], v[32:47]
	v_mfma_f32_16x16x4_f32 v[0:3], v4, v12, v[0:3]
	v_mfma_f32_32x32x2_f32 a[32:47], v4, v12, a[32:47]
	v_mfma_f32_32x32x1_2b_f32 v[64:95], v4, v12, v[64:95]
	v_mfma_f64_16x16x4_f64 v[48:55], v[4:5], v[12:13], v[48:55] neg:[1,0,0]
	v_mfma_f64_4x4x4_4b_f64 v[56:57], v[4:5], v[12:13], 0
	v_smfmac_f32_16x16x64_bf16 v[0:3], v[4:7], v[12:19], v20
	v_smfmac_f32_32x32x32_f16 a[32:47], v[4:7], v[12:19], v20 cbsz:1 abid:2
	v_smfmac_i32_16x16x128_i8 v[0:3], v[4:7], v[12:19], v20
	v_smfmac_f32_16x16x128_fp8_fp8 v[0:3], v[4:7], v[12:19], v20
	v_accvgpr_write_b32 a4, v1
	v_accvgpr_write_b32 a5, 64
	v_accvgpr_read_b32 v1, a4
	v_accvgpr_mov_b32 a6, a5
	s_nop 7
	s_endpgm
.Lmfma_end:
	.size	mfma_kernel, .Lmfma_end-mfma_kernel

	.rodata
	.p2align	6
	.amdhsa_kernel mfma_kernel
		.amdhsa_user_sgpr_kernarg_segment_ptr 1
		.amdhsa_next_free_vgpr 192
		.amdhsa_next_free_sgpr 8
		.amdhsa_accum_offset 96
	.end_amdhsa_kernel

	.amdgpu_metadata
---
amdhsa.kernels:
  - .args:           []
    .group_segment_fixed_size: 0
    .kernarg_segment_align: 4
    .kernarg_segment_size: 0
    .max_flat_workgroup_size: 256
    .name:           mfma_kernel
    .private_segment_fixed_size: 0
    .sgpr_count:     12
    .symbol:         mfma_kernel.kd
    .vgpr_count:     192
    .agpr_count:     96
    .wavefront_size: 64
amdhsa.target:   amdgcn-amd-amdhsa--gfx950
amdhsa.version:
  - 1
  - 2
...
	.end_amdgpu_metadata

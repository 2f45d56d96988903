/*
 * Tensor-core helpers shared by the attention kernels (attn_sparse.cu,
 * attn_indexer.cu) and the tiled fp8 linear (linear_mma.cu); compute_80 PTX
 * (mma.sync m16n8k16, ldmatrix; no SM90-only forms).
 */
#ifndef DSV4_KERNELS_MMA_CUH
#define DSV4_KERNELS_MMA_CUH

/* bf16 pair (lo, hi) from two f32, round to nearest even (finite values as
 * dsv4i_f32_to_bf16; a NaN stays a NaN) */
__device__ __forceinline__ unsigned int pack_bf16(float lo, float hi) {
  unsigned int r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

/* c += A·B for one m16n8k16 tile: A row-major bf16 (a0..a3), B column-major
 * bf16 (b0, b1), fp32 accumulators c[4] (the PTX ISA's fragment layouts). */
__device__ __forceinline__ void mma_bf16(float c[4], unsigned int a0, unsigned int a1,
                                         unsigned int a2, unsigned int a3, unsigned int b0,
                                         unsigned int b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* c += A·B for one m16n8k16 tile with fp16 operands (same layouts as mma_bf16). */
__device__ __forceinline__ void mma_f16(float c[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                        uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* Four 8x8 b16 matrices from shared memory (lane l gives row l % 8 of matrix l / 8). */
__device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], const void *p) {
  const unsigned a = (unsigned)__cvta_generic_to_shared(p);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

#endif /* DSV4_KERNELS_MMA_CUH */

/*
 * bf16 tensor-core helpers shared by the attention kernels (attn_sparse.cu,
 * attn_indexer.cu); compute_80 PTX (mma.sync m16n8k16, no SM90-only forms).
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

#endif /* DSV4_KERNELS_MMA_CUH */

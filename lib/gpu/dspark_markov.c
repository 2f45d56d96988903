/* Launcher of the fused DSpark Markov step (kernels/dspark.cu). */
#include "gpu/dspark.h"

#define MK_ROWS 256     /* the kernel's vocabulary rows per block (= its block size) */
#define MK_PART 32      /* bytes of one (sequence, block) partial */
#define MK_MAX_RANK 512 /* the kernel's shared embedding rows */

dsv4_status dsv4i_gpu_dspark_select(const dsv4i_kreg *kr, dsv4i_gpu_dspark_kernels *out) {
  out->kr = kr;
  return dsv4i_kreg_select(kr, DSV4I_KOP_DSPARK_MARKOV, DSV4I_KFMT_BF16, DSV4I_KSHAPE_ANY,
                           &out->markov);
}

static int32_t chunks_of(int32_t vocab) { return (vocab + MK_ROWS - 1) / MK_ROWS; }

/* partials [n][chunks], then the next embeddings bf16 [n][R] at a 256-byte boundary */
static size_t part_bytes(int32_t n, int32_t vocab) {
  return ((size_t)MK_PART * (size_t)n * (size_t)chunks_of(vocab) + 255) / 256 * 256;
}

size_t dsv4i_gpu_dspark_markov_scratch(int32_t n, int32_t vocab, int32_t rank) {
  if (n < 1 || vocab < 1 || rank < 1) return 256;
  return part_bytes(n, vocab) + ((size_t)n * (size_t)rank * 2 + 255) / 256 * 256;
}

dsv4_status dsv4i_gpu_dspark_markov(const dsv4i_gpu_dspark_kernels *k, dsv4i_custream stream,
                                    const dsv4i_gpu_markov_args *a, int32_t step) {
  if (a->n < 0 || a->block < 1 || step < 0 || step >= a->block || a->vocab < 1 ||
      a->rank < 8 || a->rank % 8 != 0 || a->rank > MK_MAX_RANK)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "dspark markov: n %d, block %d, step %d, vocab %d, "
                       "rank %d (a multiple of 8 up to %d)", (int)a->n, (int)a->block,
                       (int)step, (int)a->vocab, (int)a->rank, MK_MAX_RANK);
  if (dsv4i_kernel_desc_get(k->markov)->block != MK_ROWS)
    return dsv4i_error(DSV4_ERR_INTERNAL, "dspark markov: table block size is not %d", MK_ROWS);
  if (a->n == 0) return DSV4_OK;
  int n = a->n, chunks = chunks_of(a->vocab);
  int B = a->block, kk = step, V = a->vocab, R = a->rank;
  dsv4i_cuptr toks = a->toks, logits = a->logits, embed = a->embed, head = a->head;
  dsv4i_cuptr temp = a->temp, seed = a->seed, counter = a->counter, nv = a->n_valid;
  dsv4i_cuptr part = a->part, e = a->part + part_bytes(a->n, a->vocab), ticket = a->ticket;
  void *params[] = {&n,     &chunks, &B,    &kk,      &V,  &R,    &toks,  &logits, &embed,
                    &head,  &temp,   &seed, &counter, &nv, &part, &e,     &ticket};
  return dsv4i_kreg_launch(k->kr, k->markov, (uint32_t)chunks, 0, stream, params);
}

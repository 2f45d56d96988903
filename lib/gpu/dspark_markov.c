/* Launcher of the DSpark Markov step (kernels/dspark.cu). */
#include "gpu/dspark.h"

dsv4_status dsv4i_gpu_dspark_select(const dsv4i_kreg *kr, dsv4i_gpu_dspark_kernels *out) {
  out->kr = kr;
  return dsv4i_kreg_select(kr, DSV4I_KOP_DSPARK_MARKOV, DSV4I_KFMT_BF16, DSV4I_KSHAPE_ANY,
                           &out->markov);
}

int32_t dsv4i_gpu_dspark_markov_chunks(int32_t vocab) {
  const int32_t block = 256; /* the kernel's table block size */
  return (vocab + block - 1) / block;
}

dsv4_status dsv4i_gpu_dspark_markov(const dsv4i_gpu_dspark_kernels *k, dsv4i_custream stream,
                                    const dsv4i_gpu_markov_args *a, int32_t step) {
  if (a->n < 0 || a->block < 1 || step < 0 || step >= a->block || a->vocab < 1 ||
      a->rank < 8 || a->rank % 8 != 0 || a->rank > 1024)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "dspark markov: n %d, block %d, step %d, vocab %d, "
                       "rank %d (a multiple of 8 up to 1024)", (int)a->n, (int)a->block,
                       (int)step, (int)a->vocab, (int)a->rank);
  if (dsv4i_kernel_desc_get(k->markov)->block != 256)
    return dsv4i_error(DSV4_ERR_INTERNAL, "dspark markov: table block size is not 256");
  if (a->n == 0) return DSV4_OK;
  int chunks = dsv4i_gpu_dspark_markov_chunks(a->vocab);
  if ((int64_t)chunks * a->n > INT32_MAX)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "dspark markov: %d sequences", (int)a->n);
  int B = a->block, kk = step, V = a->vocab, R = a->rank;
  dsv4i_cuptr toks = a->toks, logits = a->logits, embed = a->embed, head = a->head;
  dsv4i_cuptr temp = a->temp, seed = a->seed, counter = a->counter;
  dsv4i_cuptr pv = a->part, pi = a->part + (dsv4i_cuptr)a->n * (dsv4i_cuptr)chunks * 4u;
  dsv4i_cuptr ticket = a->ticket;
  void *params[] = {&chunks, &B, &kk, &V, &R, &toks, &logits, &embed, &head, &temp, &seed,
                    &counter, &pv, &pi, &ticket};
  return dsv4i_kreg_launch(k->kr, k->markov, (uint32_t)(chunks * a->n), 0, stream, params);
}

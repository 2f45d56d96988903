/*
 * dsv4-gpu-attn-bench: time of the device attention and DSpark kernels
 * (lib/gpu/attn.h, lib/gpu/dspark.h) at the release dimensions, on random
 * records, for a few batch sizes and context lengths. Prints, per case, the
 * mean time of one call and the bytes of KV records the call must read,
 * as a rate: the figure to hold against the device's memory bandwidth.
 *
 *   dsv4-gpu-attn-bench [device]        (exit 77 without a GPU)
 *
 * Internal-API tool (not installed); results in bench/RESULTS.md.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpu/attn.h"
#include "gpu/dspark.h"

static const dsv4i_cu *cu;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int check(dsv4_status s, const char *what) {
  if (s == DSV4_OK) return 0;
  fprintf(stderr, "%s: %s: %s\n", what, dsv4_status_string(s), dsv4i_error_message());
  exit(1);
}

/* device buffer of random bytes (records with random codes: timing only) */
static dsv4i_cuptr rand_buf(size_t bytes, uint32_t mask) {
  dsv4i_cuptr p = 0;
  if (cu->MemAlloc(&p, bytes) != DSV4I_CUDA_SUCCESS) {
    fprintf(stderr, "cuMemAlloc(%zu) failed\n", bytes);
    exit(1);
  }
  uint32_t *h = malloc(bytes + 4);
  if (!h) exit(1);
  uint32_t x = 2463534242u;
  for (size_t i = 0; i < bytes / 4 + 1; i++) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    h[i] = x & mask;
  }
  if (cu->MemcpyHtoD(p, h, bytes) != DSV4I_CUDA_SUCCESS) exit(1);
  free(h);
  return p;
}
static dsv4i_cuptr host_buf(const void *h, size_t bytes) {
  dsv4i_cuptr p = 0;
  if (cu->MemAlloc(&p, bytes) != DSV4I_CUDA_SUCCESS || cu->MemcpyHtoD(p, h, bytes)) exit(1);
  return p;
}

/* one contiguous table per kind: sequence s owns pages [s·ld, (s+1)·ld) */
static dsv4i_gpu_kvtab table(int32_t n_seq, int64_t n_rec, int32_t rec_bytes, int32_t ring) {
  const size_t page_bytes = 64 * 1024;
  const int32_t rpp = (int32_t)(page_bytes / (size_t)rec_bytes);
  const int32_t ld = (int32_t)(((ring ? ring : n_rec) + rpp - 1) / rpp);
  int32_t *pages = malloc((size_t)n_seq * (size_t)ld * sizeof *pages);
  if (!pages) exit(1);
  for (int64_t i = 0; i < (int64_t)n_seq * ld; i++) pages[i] = (int32_t)i;
  /* codes in [0, 0x3F3F3F3F]: finite E4M3 / E2M1 values and sane scales */
  dsv4i_gpu_kvtab t = {rand_buf((size_t)n_seq * ld * page_bytes, 0x3F3F3F3Fu),
                       host_buf(pages, (size_t)n_seq * ld * sizeof *pages), page_bytes, ld, rpp,
                       rec_bytes, ring};
  free(pages);
  return t;
}

static dsv4i_cuptr tokens(int32_t n, int32_t pos) {
  dsv4i_gpu_attn_tok *t = calloc((size_t)n, sizeof *t);
  if (!t) exit(1);
  for (int32_t i = 0; i < n; i++) {
    t[i].seq = i;
    t[i].pos = t[i].first = t[i].last = pos;
    t[i].row0 = i;
  }
  dsv4i_cuptr p = host_buf(t, (size_t)n * sizeof *t);
  free(t);
  return p;
}

#define TIME(label, bytes, call)                                                           \
  do {                                                                                     \
    call;                                                                                  \
    cu->CtxSynchronize();                                                                  \
    const int reps = 20;                                                                   \
    const double t0 = now_s();                                                             \
    for (int r_ = 0; r_ < reps; r_++) call;                                                \
    if (cu->CtxSynchronize() != DSV4I_CUDA_SUCCESS) exit(1);                               \
    const double us = (now_s() - t0) / reps * 1e6;                                         \
    printf("%-44s %9.1f us  %8.1f GB/s of records\n", label, us, (double)(bytes) / us * 1e-3); \
  } while (0)

int main(int argc, char **argv) {
  const int32_t device = argc > 1 ? atoi(argv[1]) : 0;
  dsv4i_cuda_device dev;
  dsv4_status s = dsv4i_cuda_device_open(device, &dev);
  if (s == DSV4_ERR_NO_DEVICE || s == DSV4_ERR_UNSUPPORTED) {
    printf("skip: %s\n", dsv4i_error_message());
    return 77;
  }
  check(s, "device");
  cu = dev.cu;
  dsv4i_kreg kr;
  check(dsv4i_kreg_load(&dev, &kr), "kernels");
  dsv4i_gpu_attn_kernels k;
  dsv4i_gpu_dspark_kernels dk;
  check(dsv4i_gpu_attn_select(&kr, &k), "select");
  check(dsv4i_gpu_dspark_select(&kr, &dk), "select");
  printf("# %s sm_%d, %d SMs; release dims: 64 heads x 512, window 128, top-512, "
         "32 index heads x 128, vocab 129280\n", dev.name, (int)dev.sm, (int)dev.n_sm);
  const int32_t H = 64, hd = 512, win = 128, topk = 512, maxb = 64;
  const int64_t ctx = 65536;
  char label[128];

  /* decode sparse attention: 128 window + 512 compressed rows per token */
  dsv4i_gpu_kvtab tw = table(maxb, 0, 528, win + 6), tc = table(maxb, ctx / 2, 288, 0);
  int32_t *sel = malloc((size_t)maxb * topk * sizeof *sel);
  if (!sel) return 1;
  for (int32_t i = 0; i < maxb; i++) /* ascending per row */
    for (int32_t j = 0; j < topk; j++) sel[i * topk + j] = j * (int32_t)(ctx / 2 / topk);
  const dsv4i_cuptr d_sel = host_buf(sel, (size_t)maxb * topk * sizeof *sel);
  const dsv4i_cuptr q = rand_buf((size_t)maxb * H * hd * 2, 0x3F003F00u);
  const dsv4i_cuptr kvw = rand_buf((size_t)maxb * hd * 2, 0x3F003F00u);
  const dsv4i_cuptr o = rand_buf((size_t)maxb * H * hd * 2, 0);
  float sink[64] = {0};
  const dsv4i_cuptr d_sink = host_buf(sink, sizeof sink);
  const size_t ws_bytes = dsv4i_gpu_attn_sparse_ws(H, hd, win, topk, maxb);
  const dsv4i_cuptr ws = rand_buf(ws_bytes, 0);
  for (int32_t b = 1; b <= maxb; b *= 8) {
    dsv4i_gpu_sparse_args a = {.win = tw, .comp = tc, .tok = tokens(b, (int32_t)ctx - 1), .n = b,
                               .n_heads = H, .head_dim = hd, .window = win, .q = q, .kvw = kvw,
                               .sel = d_sel, .sel_ld = topk, .scale = 0.04419417f,
                               .sink = d_sink, .o = o, .ws = ws, .ws_bytes = ws_bytes};
    snprintf(label, sizeof label, "sparse attention decode, batch %d", (int)b);
    TIME(label, (double)b * (127 * 528 + 512 * 288), check(dsv4i_gpu_attn_sparse(&k, NULL, &a), label));
  }

  /* indexer at a 64K-key context (ratio 1): scores, then top-512 */
  dsv4i_gpu_kvtab tk = table(8, ctx, 68, 0);
  const dsv4i_cuptr iq = rand_buf((size_t)8 * 32 * 128 * 2, 0x3F003F00u);
  const dsv4i_cuptr iw = rand_buf((size_t)8 * 32 * 2, 0x3F003F00u);
  const dsv4i_cuptr scores = rand_buf((size_t)8 * ctx * 4, 0);
  const dsv4i_cuptr out = rand_buf((size_t)8 * topk * 4, 0);
  const size_t tws = dsv4i_gpu_attn_topk_ws_bytes(8, ctx, topk);
  const dsv4i_cuptr tkw = rand_buf(tws, 0);
  for (int32_t b = 1; b <= 8; b *= 8) {
    const dsv4i_cuptr tok = tokens(b, (int32_t)ctx - 1);
    dsv4i_gpu_index_args ia = {.idxk = tk, .tok = tok, .n = b, .n_heads = 32, .head_dim = 128,
                               .ratio = 1, .wscale = 1.0f / 64, .q = iq, .w = iw,
                               .scores = scores, .score_ld = ctx};
    snprintf(label, sizeof label, "index scores, 64K keys, batch %d", (int)b);
    TIME(label, (double)b * ctx * 68, check(dsv4i_gpu_attn_index_scores(&k, NULL, &ia), label));
    snprintf(label, sizeof label, "top-512 of 64K scores, batch %d", (int)b);
    TIME(label, (double)b * ctx * 4,
         check(dsv4i_gpu_attn_topk(&k, NULL, tok, b, 1, scores, ctx, topk, out, topk, tkw, tws), label));
    snprintf(label, sizeof label, "top-512 of 64K scores, batch %d, one block per token", (int)b);
    TIME(label, (double)b * ctx * 4,
         check(dsv4i_gpu_attn_topk(&k, NULL, tok, b, 1, scores, ctx, topk, out, topk, 0, 0), label));
  }

  /* DSpark Markov step: vocab 129280, rank 256 */
  const int32_t V = 129280, R = 256, B = 5;
  const dsv4i_cuptr embed = rand_buf((size_t)V * R * 2, 0x3C003C00u);
  const dsv4i_cuptr head = rand_buf((size_t)V * R * 2, 0x3C003C00u);
  const dsv4i_cuptr logits = rand_buf((size_t)8 * B * V * 4, 0x3F7F0000u);
  int32_t toks[8 * 6] = {0};
  float temp[8] = {0, 0.8f, 0, 0.8f, 0, 0.8f, 0, 0.8f};
  uint64_t seeds[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  uint32_t zeros[8] = {0};
  int32_t n_valid[8] = {V, V, V, V, V, V, V, V};
  for (int32_t b = 1; b <= 8; b *= 8) {
    dsv4i_gpu_markov_args ma = {.n = b, .block = B, .vocab = V, .rank = R,
                                .toks = host_buf(toks, sizeof toks), .logits = logits,
                                .embed = embed, .head = head, .temp = host_buf(temp, sizeof temp),
                                .seed = host_buf(seeds, sizeof seeds),
                                .counter = host_buf(seeds, sizeof seeds),
                                .n_valid = host_buf(n_valid, sizeof n_valid),
                                .part = rand_buf(dsv4i_gpu_dspark_markov_scratch(8, V, R), 0),
                                .ticket = host_buf(zeros, sizeof zeros)};
    snprintf(label, sizeof label, "markov step (bias + sample), batch %d", (int)b);
    TIME(label, (double)V * R * 2, check(dsv4i_gpu_dspark_markov(&dk, NULL, &ma, 0), label));
  }
  free(sel);
  dsv4i_kreg_unload(&kr);
  dsv4i_cuda_device_close(&dev);
  return 0;
}

/*
 * A stand-in cuBLASLt (libcublasLt.so.13) for the host-path test of
 * dsv4-roofline: descriptors and layouts are checked as cuBLASLt checks
 * them (leading dimension at least the rows, no empty matrix), one
 * algorithm is always found, nothing is computed. Test-only; never installed.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define INVALID_VALUE 7 /* CUBLAS_STATUS_INVALID_VALUE */

typedef struct {
  uint64_t data[8];
  size_t workspace_size;
  int state;
  float waves;
  int reserved[4];
} stub_heuristic;

static char handle;

size_t cublasLtGetVersion(void);
int cublasLtCreate(void **h);
int cublasLtDestroy(void *h);
int cublasLtMatmulDescCreate(void **d, int compute, int scale);
int cublasLtMatmulDescDestroy(void *d);
int cublasLtMatmulDescSetAttribute(void *d, int attr, const void *buf, size_t size);
int cublasLtMatrixLayoutCreate(void **l, int type, uint64_t rows, uint64_t cols, int64_t ld);
int cublasLtMatrixLayoutDestroy(void *l);
int cublasLtMatmulPreferenceCreate(void **p);
int cublasLtMatmulPreferenceDestroy(void *p);
int cublasLtMatmulPreferenceSetAttribute(void *p, int attr, const void *buf, size_t size);
int cublasLtMatmulAlgoGetHeuristic(void *h, void *d, void *a, void *b, void *c, void *dd, void *p,
                                   int requested, stub_heuristic *res, int *returned);
int cublasLtMatmul(void *h, void *d, const void *alpha, const void *a, void *la, const void *b,
                   void *lb, const void *beta, const void *c, void *lc, void *dd, void *ld,
                   const void *algo, void *ws, size_t ws_size, void *stream);

size_t cublasLtGetVersion(void) { return 130000; }
int cublasLtCreate(void **h) { *h = &handle; return 0; }
int cublasLtDestroy(void *h) { (void)h; return 0; }
int cublasLtMatmulDescCreate(void **d, int compute, int scale) {
  (void)compute, (void)scale;
  *d = &handle;
  return 0;
}
int cublasLtMatmulDescDestroy(void *d) { (void)d; return 0; }
int cublasLtMatmulDescSetAttribute(void *d, int attr, const void *buf, size_t size) {
  (void)d, (void)attr, (void)buf, (void)size;
  return 0;
}
int cublasLtMatrixLayoutCreate(void **l, int type, uint64_t rows, uint64_t cols, int64_t ld) {
  (void)type;
  if (!rows || !cols || ld < (int64_t)rows) return INVALID_VALUE;
  *l = &handle;
  return 0;
}
int cublasLtMatrixLayoutDestroy(void *l) { (void)l; return 0; }
int cublasLtMatmulPreferenceCreate(void **p) { *p = &handle; return 0; }
int cublasLtMatmulPreferenceDestroy(void *p) { (void)p; return 0; }
int cublasLtMatmulPreferenceSetAttribute(void *p, int attr, const void *buf, size_t size) {
  (void)p, (void)attr, (void)buf, (void)size;
  return 0;
}
int cublasLtMatmulAlgoGetHeuristic(void *h, void *d, void *a, void *b, void *c, void *dd, void *p,
                                   int requested, stub_heuristic *res, int *returned) {
  (void)h, (void)d, (void)a, (void)b, (void)c, (void)dd, (void)p, (void)requested;
  memset(res, 0, sizeof *res);
  *returned = 1;
  return 0;
}
int cublasLtMatmul(void *h, void *d, const void *alpha, const void *a, void *la, const void *b,
                   void *lb, const void *beta, const void *c, void *lc, void *dd, void *ld,
                   const void *algo, void *ws, size_t ws_size, void *stream) {
  (void)h, (void)d, (void)alpha, (void)a, (void)la, (void)b, (void)lb, (void)beta, (void)c;
  (void)lc, (void)dd, (void)ld, (void)algo, (void)ws, (void)ws_size, (void)stream;
  return 0;
}

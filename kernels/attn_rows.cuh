/*
 * Index rows of the sparse attention (spec §5.4 step 4, DSpark blocks §6.1)
 * on the device, shared by kernels/attn_sparse.cu (the CPU-order split pass)
 * and kernels/attn_sparse_tiled.cu (the default decode kernel): where entry
 * e of a token's row lives, the E4M3 decode, the launch-local flags' acquire
 * load and the cp.async forms (compute_80 PTX). Device code only.
 */
#ifndef DSV4_KERNELS_ATTN_ROWS_CUH
#define DSV4_KERNELS_ATTN_ROWS_CUH

#include "kvrec.cuh"

namespace {

enum { E_NONE = 0, E_WIN = 1, E_ROW = 2, E_COMP = 3 };

/* Where entry e of token t's index row lives: its kind, its address (a ring
 * or compressed record, or this call's QDQ'd row in kvw) and, for a call
 * row, its offset from the sequence's first call row (*rk, else 0). A token
 * with layout −B is a DSpark draft-block query: the stage ring's slots
 * 0 .. min(window, anchor + 1) − 1 in slot order, then the B rows of its
 * block (lib/cpu/attn_dspark.c). */
__device__ __forceinline__ void resolve_entry(const dsv4i_gpu_kvtab &win,
                                              const dsv4i_gpu_kvtab &comp,
                                              const dsv4i_gpu_attn_tok &tk, int e, int window,
                                              int hd, const unsigned short *kvw,
                                              const int *sel_row, int sel_ld,
                                              unsigned long long *ptr, int *kind, int *rk) {
  *kind = E_NONE;
  *ptr = 0;
  *rk = 0;
  if (tk.layout < 0) { /* DSpark block of −layout tokens at anchor + 1 .. (spec §6.1) */
    const int anchor = tk.first - 1, nr = anchor + 1 < window ? anchor + 1 : window;
    if (e < nr) { /* ring slot e in slot order: the newest position <= anchor in it */
      *kind = E_WIN;
      *ptr = (unsigned long long)dsv4_kv_rec(win, tk.seq, anchor - ((anchor - e) % window));
    } else if (e < nr - tk.layout) { /* the block's own rows, never stored */
      *kind = E_ROW;
      *rk = e - nr;
      *ptr = (unsigned long long)(kvw + (long long)(tk.row0 + (e - nr)) * hd);
    }
    return;
  }
  const int W = tk.layout == 0 ? window : tk.layout;
  if (e < W) {
    long long p;
    if (tk.layout == 0) {
      p = (long long)tk.pos - window + 1 + e;
    } else {
      const long long lo = tk.pos - window + 1 > 0 ? tk.pos - window + 1 : 0;
      p = lo + e <= tk.pos ? lo + e : -1;
    }
    if (p < 0) return;
    if (p >= tk.first) {
      *kind = E_ROW;
      *rk = (int)(p - tk.first);
      *ptr = (unsigned long long)(kvw + (long long)(tk.row0 + (p - tk.first)) * hd);
    } else {
      *kind = E_WIN;
      *ptr = (unsigned long long)dsv4_kv_rec(win, tk.seq, p);
    }
  } else if (e - W < sel_ld) {
    const int j = sel_row[e - W];
    if (j < 0) return;
    *kind = E_COMP;
    *ptr = (unsigned long long)dsv4_kv_rec(comp, tk.seq, j);
  }
}

/* Where entry e of a token's row lives, without the page lookup (so that a
 * thread can have the page-table loads of several entries in flight): kind;
 * for E_WIN the position (ring record position mod ring), for E_COMP the
 * compressed record index; for E_ROW the call-row offset. The same rows as
 * resolve_entry. Positions and record indices are below 2^31. */
struct entry_loc {
  int kind, idx;
};

__device__ __forceinline__ entry_loc locate_entry(const dsv4i_gpu_attn_tok &tk, int e, int window,
                                                  const int *sel_row, int sel_ld) {
  entry_loc L = {E_NONE, 0};
  if (tk.layout < 0) {
    const int anchor = tk.first - 1, nr = anchor + 1 < window ? anchor + 1 : window;
    if (e < nr) {
      L.kind = E_WIN;
      L.idx = anchor - (int)((unsigned)(anchor - e) % (unsigned)window);
    } else if (e < nr - tk.layout) {
      L.kind = E_ROW;
      L.idx = e - nr;
    }
    return L;
  }
  const int W = tk.layout == 0 ? window : tk.layout;
  if (e < W) {
    int p;
    if (tk.layout == 0) {
      p = tk.pos - window + 1 + e;
    } else {
      const int lo = tk.pos - window + 1 > 0 ? tk.pos - window + 1 : 0;
      p = lo + e <= tk.pos ? lo + e : -1;
    }
    if (p < 0) return L;
    L.kind = p >= tk.first ? E_ROW : E_WIN;
    L.idx = p >= tk.first ? p - tk.first : p;
  } else if (e - W < sel_ld) {
    const int j = sel_row[e - W];
    if (j >= 0) {
      L.kind = E_COMP;
      L.idx = j;
    }
  }
  return L;
}

/* The window table or the compressed one, picked field by field (a select
 * of the by-value kernel parameters themselves would copy both to the stack). */
__device__ __forceinline__ dsv4i_gpu_kvtab pick_tab(const dsv4i_gpu_kvtab &a,
                                                    const dsv4i_gpu_kvtab &b, bool use_b) {
  dsv4i_gpu_kvtab t;
  t.pool = use_b ? b.pool : a.pool;
  t.pages = use_b ? b.pages : a.pages;
  t.page_bytes = use_b ? b.page_bytes : a.page_bytes;
  t.ld = use_b ? b.ld : a.ld;
  t.rpp = use_b ? b.rpp : a.rpp;
  t.rec_bytes = use_b ? b.rec_bytes : a.rec_bytes;
  t.ring = use_b ? b.ring : a.ring;
  return t;
}

/* The page-table slot of record idx (>= 0) of sequence row seq, and the
 * record's address once its page id is known (32-bit index arithmetic). */
__device__ __forceinline__ const int *rec_page_slot(const dsv4i_gpu_kvtab &t, int seq, int idx,
                                                    unsigned int *r) {
  *r = t.ring ? (unsigned int)idx % (unsigned int)t.ring : (unsigned int)idx;
  return (const int *)t.pages + (long long)seq * t.ld + *r / (unsigned int)t.rpp;
}
__device__ __forceinline__ const unsigned char *rec_at(const dsv4i_gpu_kvtab &t, int page,
                                                       unsigned int r) {
  return (const unsigned char *)t.pool + (unsigned long long)page * t.page_bytes +
         (unsigned long long)(r % (unsigned int)t.rpp) * (unsigned int)t.rec_bytes;
}

/* N 32-bit words from p (4-byte aligned: records of head_dim a multiple of
 * 128), in 16-byte loads where p allows (the 528 / 288 B records of the
 * release dims always do; the tiny model's 132 / 72 B ones not always). */
template <int N>
__device__ __forceinline__ void load_words(const unsigned char *p, unsigned int *w) {
  if (((unsigned long long)p & 15u) == 0) {
    #pragma unroll
    for (int j = 0; j < N / 4; j++) {
      const uint4 v = ((const uint4 *)p)[j];
      w[4 * j] = v.x; w[4 * j + 1] = v.y; w[4 * j + 2] = v.z; w[4 * j + 3] = v.w;
    }
  } else {
    #pragma unroll
    for (int j = 0; j < N; j++) w[j] = ((const unsigned int *)p)[j];
  }
}

/* E4M3 byte -> f32 (dsv4i_e4m3_to_f32 without the uint8_t round trip) */
__device__ __forceinline__ float e4m3f(unsigned int b) {
  const unsigned int mag = b & 0x7Fu;
  const float v = __fmul_rn(__uint_as_float(((b & 0x80u) << 24) | (mag << 20)), 0x1p120f);
  return mag == 0x7Fu ? __uint_as_float(((b & 0x80u) << 24) | 0x7FC00000u) : v;
}

__device__ __forceinline__ unsigned int ld_acquire(const unsigned int *p) {
  unsigned int v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

/* cp.async (sm_80): 16 bytes (src and dst 16-byte aligned) or 4 bytes */
__device__ __forceinline__ void cp_async16(void *dst, const void *src) {
  const unsigned int d = (unsigned int)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async4(void *dst, const void *src) {
  const unsigned int d = (unsigned int)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(d), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async8(void *dst, const void *src) {
  const unsigned int d = (unsigned int)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8;" ::"r"(d), "l"(src) : "memory");
}
/* n bytes (a multiple of 16; src 4-byte aligned, dst 16-byte aligned) */
__device__ __forceinline__ void cp_async_bytes(void *dst, const unsigned char *src, int n) {
  if (((unsigned long long)src & 15u) == 0) {
    for (int i = 0; i < n; i += 16) cp_async16((unsigned char *)dst + i, src + i);
  } else {
    for (int i = 0; i < n; i += 4) cp_async4((unsigned char *)dst + i, src + i);
  }
}
/* n bytes (a multiple of 16; src and dst 8-byte aligned: fp8_ds_mla records) */
__device__ __forceinline__ void cp_async_bytes8(void *dst, const unsigned char *src, int n) {
  if (((unsigned long long)src & 15u) == 0) {
    for (int i = 0; i < n; i += 16) cp_async16((unsigned char *)dst + i, src + i);
  } else {
    for (int i = 0; i < n; i += 8) cp_async8((unsigned char *)dst + i, src + i);
  }
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }

}  // namespace

#endif /* DSV4_KERNELS_ATTN_ROWS_CUH */

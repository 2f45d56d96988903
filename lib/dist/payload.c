/*
 * Stage-to-stage payload: layout, write, check, match (payload.h).
 */
#include <inttypes.h>
#include <string.h>

#include "dist/payload.h"

/* off += n * size rounded up to 8; 0 on overflow (offsets are never 0 past the header) */
static uint64_t section(uint64_t *off, int64_t n, uint64_t size) {
  uint64_t at = *off;
  uint64_t bytes;
  if (n < 0 || !dsv4i_mul_overflow_u64((uint64_t)n, size, &bytes) || bytes > (UINT64_C(1) << 60))
    return 0;
  bytes = (bytes + 7) & ~UINT64_C(7);
  *off = at + bytes;
  return at;
}

uint64_t dsv4i_payload_layout(dsv4i_payload_hdr *h) {
  if (h->n_tok < 1 || h->n_out < 0 || h->n_out > h->n_tok || h->hc < 1 || h->dim < 1 ||
      h->n_engram < 0)
    return 0;
  uint64_t off = (sizeof *h + 7) & ~UINT64_C(7);
  int64_t nt = h->n_tok;
  uint64_t hd;
  if (!dsv4i_mul_overflow_u64((uint64_t)nt * (uint64_t)h->hc, (uint64_t)h->dim, &hd)) return 0;
  if (!(h->off_h = section(&off, (int64_t)hd, 2))) return 0;
  if (!(h->off_pre = section(&off, nt * h->hc, 4))) return 0;
  if (!(h->off_tokens = section(&off, nt, 4))) return 0;
  if (!(h->off_pos = section(&off, nt, 8))) return 0;
  if (!(h->off_seq = section(&off, nt, 8))) return 0;
  if (!(h->off_slot = section(&off, nt, 4))) return 0;
  if (!(h->off_layout = section(&off, nt, 4))) return 0;
  if (!(h->off_image = section(&off, nt, 1))) return 0;
  if (!(h->off_out = section(&off, h->n_out, 4))) return 0;
  if (!(h->off_engram = section(&off, nt * h->n_engram, 8))) return 0;
  h->hdr_bytes = (uint32_t)sizeof *h;
  h->total_bytes = off;
  return off;
}

uint64_t dsv4i_payload_bytes(int32_t n_tok, int32_t n_out, int32_t hc, int32_t dim,
                             int32_t n_engram) {
  dsv4i_payload_hdr h;
  memset(&h, 0, sizeof h);
  h.n_tok = n_tok;
  h.n_out = n_out;
  h.hc = hc;
  h.dim = dim;
  h.n_engram = n_engram;
  return dsv4i_payload_layout(&h);
}

dsv4_status dsv4i_payload_write(void *buf, size_t cap, const dsv4i_payload_meta *m,
                                dsv4i_payload_hdr *out_hdr) {
  dsv4i_payload_hdr h;
  memset(&h, 0, sizeof h);
  h.magic = DSV4I_PAYLOAD_MAGIC;
  h.version = DSV4I_PAYLOAD_VERSION;
  h.step = m->step;
  h.from_stage = m->from_stage;
  h.to_stage = m->to_stage;
  h.first_layer = m->first_layer;
  h.n_tok = m->n_tok;
  h.n_out = m->n_out;
  h.hc = m->hc;
  h.dim = m->dim;
  h.n_engram = m->n_engram;
  uint64_t total = dsv4i_payload_layout(&h);
  if (!total)
    return dsv4i_error(DSV4_ERR_INVALID_ARG,
                       "stage payload: invalid shape (n_tok %d, n_out %d, hc %d, dim %d, "
                       "Engram columns %d)",
                       (int)m->n_tok, (int)m->n_out, (int)m->hc, (int)m->dim, (int)m->n_engram);
  if (total > cap)
    return dsv4i_error(DSV4_ERR_INVALID_ARG,
                       "stage payload: %" PRIu64 " bytes do not fit the %zu-byte buffer", total,
                       cap);
  if (!m->tokens || !m->pos || !m->seq || !m->slot || !m->layout || (m->n_out && !m->out) ||
      (m->n_engram && !m->engram))
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "stage payload: a metadata section is NULL");
  uint8_t *b = buf;
  size_t nt = (size_t)m->n_tok;
  memcpy(b, &h, sizeof h);
  memcpy(b + h.off_tokens, m->tokens, nt * 4);
  memcpy(b + h.off_pos, m->pos, nt * 8);
  memcpy(b + h.off_seq, m->seq, nt * 8);
  memcpy(b + h.off_slot, m->slot, nt * 4);
  memcpy(b + h.off_layout, m->layout, nt * 4);
  if (m->image) memcpy(b + h.off_image, m->image, nt);
  else memset(b + h.off_image, 0, nt);
  if (m->n_out) memcpy(b + h.off_out, m->out, (size_t)m->n_out * 4);
  if (m->n_engram) memcpy(b + h.off_engram, m->engram, nt * (size_t)m->n_engram * 8);
  if (out_hdr) *out_hdr = h;
  return DSV4_OK;
}

size_t dsv4i_payload_write_failure(void *buf, size_t cap, const dsv4i_payload_meta *m,
                                   dsv4_status status) {
  dsv4i_payload_hdr h;
  if (cap < sizeof h) return 0;
  memset(&h, 0, sizeof h);
  h.magic = DSV4I_PAYLOAD_MAGIC;
  h.version = DSV4I_PAYLOAD_VERSION;
  h.hdr_bytes = (uint32_t)sizeof h;
  h.status = status ? status : DSV4_ERR_INTERNAL;
  h.total_bytes = sizeof h;
  h.step = m->step;
  h.from_stage = m->from_stage;
  h.to_stage = m->to_stage;
  h.first_layer = m->first_layer;
  memcpy(buf, &h, sizeof h);
  return sizeof h;
}

#define MISMATCH(field, got, want)                                                          \
  dsv4i_error(DSV4_ERR_RANK_MISMATCH,                                                       \
              "stage payload from stage %d: %s is %lld, this rank (stage %d) expects %lld", \
              (int)ex->from_stage, field, (long long)(got), (int)ex->to_stage,              \
              (long long)(want))

dsv4_status dsv4i_payload_check(const void *buf, size_t len, const dsv4i_payload_meta *ex,
                                dsv4i_payload_view *v) {
  memset(v, 0, sizeof *v);
  dsv4i_payload_hdr h;
  if (len < 16) return MISMATCH("the message size", len, (long long)sizeof h);
  memcpy(&h, buf, 16); /* magic, version, header size: readable in every version */
  if (h.magic != DSV4I_PAYLOAD_MAGIC)
    return dsv4i_error(DSV4_ERR_RANK_MISMATCH,
                       "stage payload from stage %d: magic 0x%08x, expected 0x%08x (not a "
                       "libdsv4 stage payload, or another byte order)",
                       (int)ex->from_stage, (unsigned)h.magic, (unsigned)DSV4I_PAYLOAD_MAGIC);
  if (h.version != DSV4I_PAYLOAD_VERSION)
    return dsv4i_error(DSV4_ERR_RANK_MISMATCH,
                       "stage payload from stage %d: version %u, this rank speaks version %u "
                       "(the ranks run different libdsv4 builds)",
                       (int)ex->from_stage, (unsigned)h.version, (unsigned)DSV4I_PAYLOAD_VERSION);
  if (h.hdr_bytes != sizeof h) return MISMATCH("the header size", h.hdr_bytes, sizeof h);
  if (len < sizeof h) return MISMATCH("the message size", len, (long long)sizeof h);
  memcpy(&h, buf, sizeof h);
  if (h.status != DSV4_OK && h.step == ex->step && len == sizeof h)
    return dsv4i_error(DSV4_ERR_RANK_FAILED,
                       "stage %d failed step %llu (%s; its ranks report the message) and sent "
                       "nothing to compute on",
                       (int)h.from_stage, (unsigned long long)h.step,
                       dsv4_status_string(h.status));
  if (h.status != DSV4_OK) return MISMATCH("the failure notice's size or step", len, sizeof h);
  if (h.step != ex->step) return MISMATCH("the step serial", h.step, ex->step);
  if (h.from_stage != ex->from_stage) return MISMATCH("the sending stage", h.from_stage, ex->from_stage);
  if (h.to_stage != ex->to_stage) return MISMATCH("the receiving stage", h.to_stage, ex->to_stage);
  if (h.first_layer != ex->first_layer)
    return MISMATCH("the receiver's first layer", h.first_layer, ex->first_layer);
  if (h.hc != ex->hc) return MISMATCH("hc", h.hc, ex->hc);
  if (h.dim != ex->dim) return MISMATCH("dim", h.dim, ex->dim);
  if (h.n_engram != ex->n_engram) return MISMATCH("Engram columns", h.n_engram, ex->n_engram);
  if (h.n_tok != ex->n_tok) return MISMATCH("the token count", h.n_tok, ex->n_tok);
  if (h.n_out != ex->n_out) return MISMATCH("the output row count", h.n_out, ex->n_out);
  dsv4i_payload_hdr want = h;
  uint64_t total = dsv4i_payload_layout(&want);
  if (!total) return MISMATCH("the shape (n_tok)", h.n_tok, ex->n_tok);
  if (h.total_bytes != total) return MISMATCH("the total size", h.total_bytes, total);
  if (len != total) return MISMATCH("the received size", len, total);
  if (memcmp(&want, &h, sizeof h) != 0)
    return dsv4i_error(DSV4_ERR_RANK_MISMATCH,
                       "stage payload from stage %d: section offsets differ from version %u's "
                       "layout",
                       (int)ex->from_stage, (unsigned)DSV4I_PAYLOAD_VERSION);
  const uint8_t *b = buf;
  v->hdr = (const dsv4i_payload_hdr *)buf;
  v->h = (const uint16_t *)(const void *)(b + h.off_h);
  v->pre = (const float *)(const void *)(b + h.off_pre);
  v->tokens = (const int32_t *)(const void *)(b + h.off_tokens);
  v->pos = (const int64_t *)(const void *)(b + h.off_pos);
  v->seq = (const int64_t *)(const void *)(b + h.off_seq);
  v->slot = (const int32_t *)(const void *)(b + h.off_slot);
  v->layout = (const int32_t *)(const void *)(b + h.off_layout);
  v->image = b + h.off_image;
  v->out = (const int32_t *)(const void *)(b + h.off_out);
  v->engram = h.n_engram ? (const int64_t *)(const void *)(b + h.off_engram) : NULL;
  return DSV4_OK;
}

#define DIFF(field, i, got, want)                                                             \
  dsv4i_error(DSV4_ERR_RANK_MISMATCH,                                                         \
              "stage payload from stage %d, step %llu: %s of token %d is %lld, this rank has " \
              "%lld (the ranks were given different inputs)",                                 \
              (int)h->from_stage, (unsigned long long)h->step, field, (int)(i),               \
              (long long)(got), (long long)(want))

dsv4_status dsv4i_payload_match(const dsv4i_payload_view *v, const dsv4i_payload_meta *own) {
  const dsv4i_payload_hdr *h = v->hdr;
  for (int32_t i = 0; i < own->n_tok; i++) {
    if (v->tokens[i] != own->tokens[i]) return DIFF("the token id", i, v->tokens[i], own->tokens[i]);
    if (v->pos[i] != own->pos[i]) return DIFF("the position", i, v->pos[i], own->pos[i]);
    if (v->seq[i] != own->seq[i]) return DIFF("the sequence id", i, v->seq[i], own->seq[i]);
    if (v->slot[i] != own->slot[i]) return DIFF("the cache slot", i, v->slot[i], own->slot[i]);
    if (v->layout[i] != own->layout[i]) return DIFF("the layout", i, v->layout[i], own->layout[i]);
    int32_t img = own->image ? own->image[i] != 0 : 0;
    if ((v->image[i] != 0) != img) return DIFF("the image flag", i, v->image[i], img);
    for (int32_t c = 0; c < own->n_engram; c++) {
      int64_t a = v->engram[(size_t)i * own->n_engram + c];
      int64_t b = own->engram[(size_t)i * own->n_engram + c];
      if (a != b) return DIFF("an Engram row id", i, a, b);
    }
  }
  for (int32_t r = 0; r < own->n_out; r++)
    if (v->out[r] != own->out[r]) return DIFF("the output row index", r, v->out[r], own->out[r]);
  return DSV4_OK;
}

/* The KV cache layout (kv_layout.h). */
#include <string.h>

#include "backend/backend.h"
#include "backend/kv_layout.h"

void dsv4i_kv_part_layers(const dsv4i_config *cfg, const dsv4i_model_part *part,
                          int32_t *first, int32_t *last) {
  *first = 0;
  *last = cfg->n_total_layers;
  if (!part || part->last_layer <= 0) return;
  *first = part->first_layer;
  *last = part->last_layer >= cfg->n_layers ? cfg->n_total_layers : part->last_layer;
}

dsv4_status dsv4i_kv_layout_init(const dsv4i_config *cfg, int32_t spare, size_t page_bytes,
                                 int64_t max_positions, dsv4i_kv_layout *out) {
  return dsv4i_kv_layout_init_part(cfg, NULL, DSV4I_KV_NATIVE, spare, page_bytes, max_positions,
                                   out);
}

size_t dsv4i_kv_page_bytes(const dsv4i_config *c) {
  int64_t r = (int64_t)c->head_dim * 8; /* the compressor state record */
  const int64_t kinds[] = {DSV4I_KVREC_WINDOW, DSV4I_KVREC_WINDOW_DS_MLA, DSV4I_KVREC_COMPRESSED,
                           DSV4I_KVREC_INDEX_KEY};
  for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
    const int64_t w = dsv4i_kv_record_bytes(c, (int32_t)kinds[k]);
    if (w > r) r = w;
  }
  const int64_t p = 16 * r < 4096 ? 4096 : 16 * r;
  return (size_t)((p + 63) / 64 * 64);
}

dsv4_status dsv4i_kv_layout_init_part(const dsv4i_config *cfg, const dsv4i_model_part *part,
                                      int32_t kv_format, int32_t spare, size_t page_bytes,
                                      int64_t max_positions, dsv4i_kv_layout *out) {
  if (!out || !cfg) return dsv4i_error(DSV4_ERR_INVALID_ARG, "kv_layout_init: NULL");
  memset(out, 0, sizeof *out);
  int32_t first, last;
  dsv4i_kv_part_layers(cfg, part, &first, &last);
  if (first < 0 || first >= last || last > cfg->n_total_layers)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "kv_layout_init: layers %d..%d outside the "
                       "model's %d", (int)first, (int)last - 1, (int)cfg->n_total_layers);
  const int32_t hd = cfg->head_dim, ihd = cfg->index_head_dim;
  if (hd <= 0 || hd % 32 || cfg->window_size <= 0 || cfg->n_total_layers <= 0 ||
      cfg->n_total_layers > DSV4I_MAX_LIST || (cfg->n_kv_sources > 0 && (ihd <= 0 || ihd % 32)) ||
      max_positions < 1)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "kv_layout_init: head_dim %d, index_head_dim %d, "
                       "window %d, layers %d, positions %lld", (int)hd, (int)ihd,
                       (int)cfg->window_size, (int)cfg->n_total_layers, (long long)max_positions);
  if (kv_format != DSV4I_KV_NATIVE && (kv_format != DSV4I_KV_FP8_DS_MLA || cfg->rope_head_dim < 0 ||
                                       cfg->rope_head_dim >= hd || cfg->rope_head_dim % 2))
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "kv_layout_init: window format %d (0 native, "
                       "1 fp8_ds_mla) for head_dim %d, rope dims %d", (int)kv_format, (int)hd,
                       (int)cfg->rope_head_dim);
  if (spare <= 0) spare = cfg->dspark_block_size + 1 > 2 ? cfg->dspark_block_size + 1 : 2;
  out->n_layers = cfg->n_total_layers;
  out->first_layer = first;
  out->last_layer = last;
  out->head_dim = hd;
  out->rope_dim = cfg->rope_head_dim;
  out->window_format = kv_format;
  out->index_head_dim = ihd;
  out->window = cfg->window_size;
  out->spare = spare;
  out->ring_slots = cfg->window_size + spare;
  out->page_bytes = page_bytes;
  out->max_positions = max_positions;
  out->rec_bytes[DSV4I_KV_WINDOW] =
      (int32_t)dsv4i_kv_record_bytes(cfg, dsv4i_kv_window_kind(kv_format));
  out->rec_bytes[DSV4I_KV_COMP] = (int32_t)dsv4i_kv_record_bytes(cfg, DSV4I_KVREC_COMPRESSED);
  out->rec_bytes[DSV4I_KV_IDXK] =
      ihd > 0 ? (int32_t)dsv4i_kv_record_bytes(cfg, DSV4I_KVREC_INDEX_KEY) : 1;
  out->rec_bytes[DSV4I_KV_CSTATE] = 2 * hd * (int32_t)sizeof(float);
  for (int k = 0; k < DSV4I_KV_KINDS; k++) {
    if (page_bytes < (size_t)out->rec_bytes[k] || page_bytes % 64)
      return dsv4i_error(DSV4_ERR_INVALID_ARG, "kv_layout_init: %zu-byte pages cannot hold a "
                         "%d-byte record (kind %d)", page_bytes, (int)out->rec_bytes[k], k);
    out->rec_per_page[k] = (int32_t)(page_bytes / (size_t)out->rec_bytes[k]);
  }
  for (int32_t l = 0; l < cfg->n_total_layers; l++) {
    const dsv4i_layer_role *r = &cfg->layers[l];
    if (!(r->roles & DSV4_ROLE_KV_SOURCE) || r->compress_ratio <= 0) continue;
    out->ratio[l] = r->compress_ratio;
    out->has_idxk[l] = (r->roles & DSV4_ROLE_INDEX_OWN_KEYS) != 0;
    out->state_slots[l] = r->compress_ratio > 1 ? r->compress_ratio + spare : 0;
  }
  /* the row: tables kind-major, layer-minor */
  int64_t ld = 0;
  for (int k = 0; k < DSV4I_KV_KINDS; k++)
    for (int32_t l = 0; l < out->n_layers; l++) {
      const int64_t cap = dsv4i_kv_table_pages(out, k, l, max_positions);
      if (ld + cap > INT32_MAX)
        return dsv4i_error(DSV4_ERR_INVALID_ARG, "kv_layout_init: %lld positions need a page "
                           "row over 2^31 entries", (long long)max_positions);
      out->off[k][l] = (int32_t)ld;
      out->cap[k][l] = (int32_t)cap;
      ld += cap;
    }
  out->ld = (int32_t)ld;
  return DSV4_OK;
}

int64_t dsv4i_kv_table_pages(const dsv4i_kv_layout *lay, int32_t kind, int32_t l, int64_t n) {
  if (l < lay->first_layer || l >= lay->last_layer) return 0; /* another stage's layer */
  int64_t r = 0;
  switch (kind) {
  case DSV4I_KV_WINDOW:
    r = n > 0 ? lay->ring_slots : 0;
    break;
  case DSV4I_KV_CSTATE:
    r = n > 0 ? lay->state_slots[l] : 0;
    break;
  case DSV4I_KV_COMP:
    r = lay->ratio[l] > 0 ? n / lay->ratio[l] : 0;
    break;
  case DSV4I_KV_IDXK:
    r = lay->ratio[l] > 0 && lay->has_idxk[l] ? n / lay->ratio[l] : 0;
    break;
  default:
    return 0;
  }
  return (r + lay->rec_per_page[kind] - 1) / lay->rec_per_page[kind];
}

int64_t dsv4i_kv_pages_for(const dsv4i_kv_layout *lay, int32_t kind, int64_t n_pos) {
  if (!lay || kind < 0 || kind >= DSV4I_KV_KINDS || n_pos < 0) return 0;
  int64_t sum = 0;
  for (int32_t l = 0; l < lay->n_layers; l++) sum += dsv4i_kv_table_pages(lay, kind, l, n_pos);
  return sum;
}

dsv4_status dsv4i_kv_format_init(const dsv4i_config *cfg, const dsv4i_model_part *part,
                                 int32_t kv_format, size_t page_bytes, int64_t max_positions,
                                 dsv4i_cache_format *f, dsv4i_kv_layout *lay) {
  memset(f, 0, sizeof *f);
  dsv4_status s =
      dsv4i_kv_layout_init_part(cfg, part, kv_format, 0, page_bytes, max_positions, lay);
  if (s) return s;
  f->page_bytes = (int64_t)lay->page_bytes;
  for (int32_t k = 0; k < DSV4I_KV_KINDS; k++) {
    f->seq_pages += dsv4i_kv_pages_for(lay, k, max_positions);
    if (k == DSV4I_KV_WINDOW || k == DSV4I_KV_CSTATE) f->ring_pages += dsv4i_kv_pages_for(lay, k, 1);
  }
  for (int32_t L = lay->first_layer; L < lay->last_layer; L++) /* the part's layers */
    if (lay->ratio[L] > 0)
      f->bytes_per_pos += (lay->rec_bytes[DSV4I_KV_COMP] +
                           (lay->has_idxk[L] ? lay->rec_bytes[DSV4I_KV_IDXK] : 0)) / lay->ratio[L];
  return DSV4_OK;
}

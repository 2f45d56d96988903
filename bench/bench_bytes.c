/* dsv4-bench: model facts and the bytes-touched model of a decode step. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

void bytes_model_build(const dsv4_model *model, bytes_model *b) {
  memset(b, 0, sizeof *b);
  dsv4_model_info mi;
  if (dsv4_model_get_info(model, &mi, sizeof mi)) die("dsv4_model_get_info failed");
  b->n_layers = mi.n_layers;
  b->n_mtp = mi.n_mtp_layers;
  b->n_experts = mi.n_routed_experts;
  b->top_k = mi.n_experts_per_tok;
  b->window = mi.sliding_window;
  b->head_dim = mi.head_dim;
  b->hidden = mi.hidden_size;
  b->payload = mi.payload_bytes;
  b->n_tensors = mi.n_tensors;
  /* the library's facts (dsv4_model_info): indexer, Engram, DSpark, KV record sizes */
  b->index_head_dim = mi.index_head_dim;
  b->index_topk = mi.index_topk;
  b->engram_rows_per_token = mi.engram_cols;
  b->mtp_experts = mi.dspark_n_routed_experts;
  b->mtp_top_k = mi.dspark_n_experts_per_tok;
  b->win_rec = mi.window_record_bytes;
  b->comp_rec = mi.compressed_record_bytes;
  b->idxk_rec = mi.index_key_record_bytes;
  b->cstate_rec = mi.compressor_state_record_bytes;

  b->layer = xcalloc((size_t)b->n_layers, sizeof *b->layer);
  for (int32_t l = 0; l < b->n_layers; l++) {
    dsv4_layer_info li;
    if (dsv4_model_get_layer(model, l, &li, sizeof li)) die("dsv4_model_get_layer %d failed", l);
    b->layer[l].ratio = li.compress_ratio;
    b->layer[l].roles = (int32_t)li.roles;
    b->layer[l].kv_source = li.kv_source;
    b->layer[l].index_key_source = li.index_key_source;
  }
  /* bytes by role (the weight table's keys in dsv4_tensor_info): no tensor name is read */
  int64_t mtp_expert_total = 0, *expert_total = xcalloc((size_t)b->n_layers, sizeof(int64_t));
  for (int64_t i = 0; i < mi.n_tensors; i++) {
    dsv4_tensor_info t;
    if (dsv4_model_get_tensor(model, i, &t, sizeof t)) die("dsv4_model_get_tensor failed");
    if (t.struct_size < sizeof t || !t.role) die("dsv4_tensor_info without the weight role");
    const char *r = t.role;
    const int expert = t.expert >= 0, wo_a = !strcmp(r, "ATTN_WO_A");
    const int32_t l = t.layer;
    if (!strcmp(r, "HEAD")) b->head += t.is_scale ? 0 : t.nbytes;
    else if (!strcmp(r, "NORM")) b->final_norm += t.is_scale ? 0 : t.nbytes;
    else if (!strcmp(r, "EMBED")) b->embed_row += t.shape[0] && !t.is_scale ? t.nbytes / t.shape[0] : 0;
    else if (l >= 0 && l < b->n_layers) {
      layer_bytes *lb = &b->layer[l];
      if (expert) expert_total[l] += t.nbytes;
      else if (!strcmp(r, "ENGRAM_EMBED")) lb->engram_row += t.shape[0] ? t.nbytes / t.shape[0] : 0;
      else if (!strcmp(r, "GATE_BIAS_VL")) continue; /* vision routing only */
      else if (wo_a && t.is_scale) b->wo_a_fp8 += t.nbytes;
      else if (wo_a) {
        b->wo_a_fp8 += t.nbytes;
        b->wo_a_bf16 += 2 * t.nbytes; /* one e4m3 byte -> one bf16 value */
        lb->dense += 2 * t.nbytes;
      } else lb->dense += t.nbytes;
    } else if (l >= b->n_layers) { /* a DSpark stage */
      if (expert) mtp_expert_total += t.nbytes;
      else if (!strcmp(r, "GATE_BIAS_VL") || (wo_a && t.is_scale)) continue;
      else if (wo_a) b->mtp_dense += 2 * t.nbytes;
      else b->mtp_dense += t.nbytes;
    }
  }
  for (int32_t l = 0; l < b->n_layers; l++)
    b->layer[l].expert = b->n_experts ? expert_total[l] / b->n_experts : 0;
  if (b->n_mtp && b->mtp_experts) b->mtp_expert = mtp_expert_total / ((int64_t)b->n_mtp * b->mtp_experts);
  free(expert_total);
}

/* Expected distinct experts hit by t tokens routed top-k of e, uniform and
 * independent routing: e (1 - (1 - k/e)^t). */
static double distinct_experts(int32_t e, int32_t k, double t) {
  if (e <= 0 || k <= 0 || t <= 0) return 0;
  return (double)e * (1.0 - pow(1.0 - (double)k / (double)e, t));
}

/* Weight bytes one backbone forward over t tokens (a decode step of t
 * sequences) reads: per layer dense + distinct experts x expert bytes +
 * Engram rows; embed rows; final norm + head (once per step, whatever t). */
double weight_bytes_step(const bytes_model *b, double t) {
  double s = (double)b->head + (double)b->final_norm + t * (double)b->embed_row;
  for (int32_t l = 0; l < b->n_layers; l++) {
    const layer_bytes *lb = &b->layer[l];
    s += (double)lb->dense;
    s += distinct_experts(b->n_experts, b->top_k, t) * (double)lb->expert;
    s += t * (double)b->engram_rows_per_token * (double)lb->engram_row;
  }
  return s;
}

/* Weight bytes one DSpark draft over t block tokens reads: every mtp.*
 * tensor but the routed experts (main_proj, attention, shared experts,
 * Markov and confidence heads; wo_a as bf16), the distinct routed experts
 * of each stage, the shared head and t embed rows. */
double draft_weight_bytes(const bytes_model *b, double t) {
  return (double)b->mtp_dense +
         (double)b->n_mtp * distinct_experts(b->mtp_experts, b->mtp_top_k, t) * (double)b->mtp_expert +
         (double)b->head + t * (double)b->embed_row;
}

/* Cache bytes a decode step reads for one sequence whose new token sits at
 * position len - 1 (len positions visible): every layer's window ring; at each
 * index source the index keys of every compressed group of its key layer; at
 * each layer with ratio > 0 the top-k compressed records of its KV source;
 * the ratio > 1 compressor rings. Candidate masking is not modelled. */
double kv_bytes_seq(const bytes_model *b, int64_t len) {
  double s = 0;
  const int64_t win = len < b->window ? len : b->window;
  for (int32_t l = 0; l < b->n_layers; l++) {
    const layer_bytes *lb = &b->layer[l];
    s += (double)win * (double)b->win_rec;
    if (lb->ratio <= 0) continue;
    const int32_t src = lb->kv_source;
    const int32_t r = src >= 0 && src < b->n_layers && b->layer[src].ratio > 0 ? b->layer[src].ratio : 1;
    const int64_t groups = len / r;
    s += (double)(groups < b->index_topk ? groups : b->index_topk) * (double)b->comp_rec;
    if (lb->roles & DSV4_ROLE_INDEX_SOURCE) {
      const int32_t ks = lb->index_key_source >= 0 ? lb->index_key_source : src;
      const int32_t kr = ks >= 0 && ks < b->n_layers && b->layer[ks].ratio > 0 ? b->layer[ks].ratio : r;
      s += (double)(len / kr) * (double)b->idxk_rec;
    }
    if ((lb->roles & DSV4_ROLE_KV_SOURCE) && lb->ratio > 1) s += (double)lb->ratio * (double)b->cstate_rec;
  }
  return s;
}

json_t *bytes_model_json(const bytes_model *b) {
  json_t *o = json_object();
  int64_t dense = 0, expert = 0;
  for (int32_t l = 0; l < b->n_layers; l++) {
    dense += b->layer[l].dense;
    expert += b->layer[l].expert;
  }
  json_object_set_new(o, "method", json_string(
      "weights: per backbone layer every tensor of the layer except routed experts, Engram tables "
      "and the vision gate bias (roles EXPERT_*, ENGRAM_EMBED, GATE_BIAS_VL; ATTN_WO_A counted "
      "as its bf16 copy: 2 B per element), plus E(1-(1-k/E)^T) "
      "routed experts (T tokens in the step, uniform independent routing) and T x rows_per_token "
      "Engram rows; plus the head, the final norm and T embed rows. KV: per sequence, window "
      "records min(len, window) per layer, top-k compressed records of the KV source per layer "
      "with ratio > 0, all index keys per index source, ratio-2 compressor rings (spec 5.8 "
      "record sizes). Byte sizes and roles from dsv4_model_get_tensor (the weight table)."));
  json_object_set_new(o, "layer_dense_bytes", json_integer(dense));
  json_object_set_new(o, "expert_bytes_per_layer", json_integer(b->n_layers ? expert / b->n_layers : 0));
  json_object_set_new(o, "experts", json_integer(b->n_experts));
  json_object_set_new(o, "top_k", json_integer(b->top_k));
  json_object_set_new(o, "head_bytes", json_integer(b->head + b->final_norm));
  json_object_set_new(o, "embed_row_bytes", json_integer(b->embed_row));
  json_object_set_new(o, "engram_rows_per_token", json_integer(b->engram_rows_per_token));
  json_object_set_new(o, "wo_a_checkpoint_bytes", json_integer(b->wo_a_fp8));
  json_object_set_new(o, "wo_a_bf16_bytes", json_integer(b->wo_a_bf16));
  json_object_set_new(o, "mtp_dense_bytes", json_integer(b->mtp_dense));
  json_object_set_new(o, "mtp_expert_bytes", json_integer(b->mtp_expert));
  json_object_set_new(o, "weight_bytes_step_t1", json_integer((json_int_t)llround(weight_bytes_step(b, 1))));
  json_object_set_new(o, "window_record_bytes", json_integer(b->win_rec));
  json_object_set_new(o, "compressed_record_bytes", json_integer(b->comp_rec));
  json_object_set_new(o, "index_key_record_bytes", json_integer(b->idxk_rec));
  json_object_set_new(o, "index_topk", json_integer(b->index_topk));
  return o;
}


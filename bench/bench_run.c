/* dsv4-bench: one run (C sequences through prefill and decode) and its report. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

typedef struct seq_state {
  uint64_t hash;    /* FNV-1a 64 of the generated token ids */
  int64_t id;
  int64_t produced; /* generated tokens so far (first from prefill) */
  int64_t length;   /* positions the sequence holds */
  int32_t next;     /* token to feed next */
  int64_t ttft_ns, done_ns;
} seq_state;

static void fnv_token(uint64_t *h, int32_t tok) {
  const uint32_t u = (uint32_t)tok;
  for (int i = 0; i < 4; i++) *h = (*h ^ ((u >> (8 * i)) & 0xFF)) * 0x100000001B3ull;
}

void fail_engine(bench *b, const char *what, dsv4_status s) {
  die("%s: %s: %s", what, dsv4_status_string(s), dsv4_last_error());
}

/* Every rank's busy fraction over the decode phase: the time it ran its layers (stage_ns)
 * over the time in decode calls; gathered from every rank (collective: every rank's
 * run_one calls it at the same point), [rank] in rank order. */
static json_t *stage_busy_json(bench *b) {
  dsv4_engine_timings t;
  dsv4_status s = dsv4_engine_get_timings(b->eng, &t, sizeof t);
  if (s) fail_engine(b, "dsv4_engine_get_timings", s);
  const double mine = t.decode_ns > 0 ? (double)t.stage_ns / (double)t.decode_ns : 0.0;
  double *all = calloc((size_t)b->mpi->world, sizeof *all);
  if (!all) die("out of memory");
  tool_mpi_allgather_f64(b->mpi, mine, all);
  json_t *a = json_array();
  for (int i = 0; i < b->mpi->world; i++) json_array_append_new(a, json_real(all[i]));
  free(all);
  return a;
}

static json_t *timings_json(bench *b) {
  dsv4_engine_timings t;
  dsv4_status s = dsv4_engine_get_timings(b->eng, &t, sizeof t);
  if (s) fail_engine(b, "dsv4_engine_get_timings", s);
  json_t *o = json_object();
  json_object_set_new(o, "prefill_calls", json_integer(t.prefill_calls));
  json_object_set_new(o, "prefill_tokens", json_integer(t.prefill_tokens));
  json_object_set_new(o, "prefill_ns", json_integer(t.prefill_ns));
  json_object_set_new(o, "decode_steps", json_integer(t.decode_steps));
  json_object_set_new(o, "decode_tokens", json_integer(t.decode_tokens));
  json_object_set_new(o, "decode_ns", json_integer(t.decode_ns));
  json_object_set_new(o, "draft_calls", json_integer(t.draft_calls));
  json_object_set_new(o, "draft_ns", json_integer(t.draft_ns));
  json_object_set_new(o, "verify_calls", json_integer(t.verify_calls));
  json_object_set_new(o, "verify_tokens", json_integer(t.verify_tokens));
  json_object_set_new(o, "verify_ns", json_integer(t.verify_ns));
  json_object_set_new(o, "stage_ns", json_integer(t.stage_ns));
  json_object_set_new(o, "op_timings", json_boolean(t.op_timings));
  if (t.op_timings) {
    json_t *ops = json_object();
    json_object_set_new(ops, "embed_ns", json_integer(t.embed_op_ns));
    json_object_set_new(ops, "engram_ns", json_integer(t.engram_op_ns));
    json_object_set_new(ops, "block_ns", json_integer(t.block_op_ns));
    json_object_set_new(ops, "head_ns", json_integer(t.head_op_ns));
    json_object_set_new(ops, "sample_ns", json_integer(t.sample_op_ns));
    json_object_set_new(ops, "read_ns", json_integer(t.read_op_ns));
    json_object_set_new(ops, "host_ns", json_integer(t.host_op_ns));
    json_object_set_new(ops, "dspark_ns", json_integer(t.dspark_op_ns));
    json_object_set_new(o, "ops", ops);
    json_t *layers = json_array();
    for (int32_t l = 0; l < b->mi.n_layers; l++) {
      int64_t ns = 0;
      if ((s = dsv4_engine_get_layer_time(b->eng, l, &ns))) fail_engine(b, "dsv4_engine_get_layer_time", s);
      json_array_append_new(layers, json_integer(ns));
    }
    json_object_set_new(o, "layer_ns", layers);
  }
  return o;
}

/* Run C sequences through prefill and decode. With `record` NULL it is the
 * warm-up (steps decode steps, nothing kept). */
json_t *run_one(bench *b, const mode *md, int32_t C, int64_t out_len, int rep, int record) {
  const opts *o = &b->o;
  const int32_t kmax = md->max_tokens_per_step;
  seq_state *sq = xcalloc((size_t)C, sizeof *sq);
  int64_t *ids = xcalloc((size_t)C, sizeof *ids), *remaining = xcalloc((size_t)C, sizeof *remaining);
  int32_t *in = xcalloc((size_t)C, sizeof *in), *map = xcalloc((size_t)C, sizeof *map);
  step_out so = {xcalloc((size_t)C * (size_t)kmax, sizeof(int32_t)), xcalloc((size_t)C, sizeof(int32_t)),
                 xcalloc((size_t)C, sizeof(int32_t)), xcalloc((size_t)C, sizeof(int32_t)), 0, 0, 0};
  int64_t *pos_verified = xcalloc((size_t)kmax, sizeof(int64_t)), *pos_accepted = xcalloc((size_t)kmax, sizeof(int64_t));
  int64_t drafts_verified = 0, drafts_accepted = 0;
  dvec itl = {0}, ttft = {0}, prefill = {0}, step_wall = {0}, step_eng = {0}, e2e = {0};
  dvec draft_ms = {0}, verify_ms = {0};
  double floor_bytes = 0, weight_b = 0, kv_b = 0, eng_step_ns_sum = 0, accepted = 0;
  int64_t steps = 0, seq_steps = 0, decode_tokens = 0;
  long maj0, min0, maj1, min1;
  double cpu0, cpu1;
  dsv4_status s;

  dsv4_engine_reset_timings(b->eng);
  rusage_now(&maj0, &min0, &cpu0);
  const int64_t t0 = now_ns();
  for (int32_t i = 0; i < C; i++)
    if ((s = dsv4_engine_seq_create(b->eng, &sq[i].id))) fail_engine(b, "dsv4_engine_seq_create", s);
  /* prefill: every sequence arrived at t0; one prefill call each, in order */
  for (int32_t i = 0; i < C; i++) {
    const int32_t *p = b->pr.ids[i % b->pr.n];
    b->sp.seeds = NULL;
    b->sp.seed = o->seed + (uint64_t)i;
    if ((s = dsv4_engine_prefill(b->eng, sq[i].id, p, b->pr.len, &b->sp, NULL, &sq[i].next)))
      fail_engine(b, "dsv4_engine_prefill", s);
    const int64_t t = now_ns();
    dsv4_engine_timings et;
    if ((s = dsv4_engine_get_timings(b->eng, &et, sizeof et))) fail_engine(b, "dsv4_engine_get_timings", s);
    sq[i].ttft_ns = t - t0;
    sq[i].hash = 0xCBF29CE484222325ull;
    fnv_token(&sq[i].hash, sq[i].next);
    sq[i].produced = 1;
    sq[i].length = b->pr.len;
    dvec_push(&ttft, (double)(t - t0) * 1e-6);
    dvec_push(&prefill, (double)et.last_prefill_ns * 1e-6);
    if (out_len == 1) sq[i].done_ns = t - t0;
  }
  /* the engine's timings of the prefill phase, then of the decode phase alone */
  json_t *t_prefill = record ? timings_json(b) : NULL;
  dsv4_engine_reset_timings(b->eng);
  /* decode: one step over every unfinished sequence */
  const int64_t td0 = now_ns();
  for (;;) {
    int32_t n = 0;
    for (int32_t i = 0; i < C; i++) {
      if (sq[i].produced >= out_len) continue;
      map[n] = i;
      ids[n] = sq[i].id;
      in[n] = sq[i].next;
      remaining[n] = out_len - sq[i].produced;
      b->seeds[n] = o->seed + (uint64_t)i;
      n++;
    }
    if (!n) break;
    if (!record && steps >= o->warmup) break;
    b->sp.seeds = b->seeds;
    const int64_t ts = now_ns();
    s = md->step(b, n, ids, in, remaining, &so);
    const int64_t te = now_ns();
    if (s) fail_engine(b, md->dspark ? "DSpark draft/verify" : "dsv4_engine_decode", s);
    /* floor of this step, from the lengths before it: plain, n tokens through
     * the backbone; DSpark, n x B block tokens through the draft head (plus
     * its window rings), then sum(1 + nd) tokens through the backbone */
    double kvs = 0, wb;
    if (md->dspark) {
      double tv = 0;
      for (int32_t j = 0; j < n; j++) {
        const int64_t len = sq[map[j]].length;
        tv += 1 + so.nd[j];
        kvs += kv_bytes_seq(&b->bm, len + 1 + so.nd[j]);
        kvs += (double)b->bm.n_mtp * (double)(len + 1 < b->bm.window ? len + 1 : b->bm.window) * (double)b->bm.win_rec;
      }
      wb = draft_weight_bytes(&b->bm, (double)n * b->block) + weight_bytes_step(&b->bm, tv);
      dvec_push(&draft_ms, (double)so.draft_ns * 1e-6);
      dvec_push(&verify_ms, (double)so.verify_ns * 1e-6);
    } else {
      for (int32_t j = 0; j < n; j++) kvs += kv_bytes_seq(&b->bm, sq[map[j]].length + 1);
      wb = weight_bytes_step(&b->bm, (double)n);
    }
    const double dt_ms = (double)(te - ts) * 1e-6;
    dvec_push(&step_wall, dt_ms);
    dvec_push(&step_eng, (double)so.step_ns * 1e-6);
    eng_step_ns_sum += (double)so.step_ns;
    weight_b += wb;
    kv_b += kvs;
    floor_bytes += wb + kvs;
    steps++;
    for (int32_t j = 0; j < n; j++) {
      seq_state *q = &sq[map[j]];
      const int32_t emitted = so.k[j] < 1 ? 1 : so.k[j] > kmax ? kmax : so.k[j];
      /* tokens past OUTPUT_LEN are not counted (a DSpark step may overshoot) */
      const int32_t kk = emitted > out_len - q->produced ? (int32_t)(out_len - q->produced) : emitted;
      /* token-attributed ITL: the step's wall time is shared by the tokens it
       * emitted for this sequence; each counts as one sample of dt / emitted */
      for (int32_t r = 0; r < kk; r++) {
        dvec_push(&itl, dt_ms / emitted);
        fnv_token(&q->hash, so.out[(size_t)j * (size_t)kmax + (size_t)r]);
      }
      q->produced += kk;
      q->length += emitted;
      q->next = so.out[(size_t)j * (size_t)kmax + (size_t)(emitted - 1)];
      decode_tokens += kk;
      accepted += emitted;
      /* position p (0-based) is reached when proposals 0..p-1 were accepted */
      for (int32_t p = 0; p < so.nd[j] && p <= so.acc[j] && p < kmax; p++) {
        pos_verified[p]++;
        pos_accepted[p] += p < so.acc[j];
      }
      drafts_verified += so.nd[j];
      drafts_accepted += so.acc[j];
      seq_steps++;
      if (q->produced >= out_len) q->done_ns = te - t0;
    }
  }
  const int64_t tend = now_ns();
  rusage_now(&maj1, &min1, &cpu1);
  for (int32_t i = 0; i < C; i++) {
    if ((s = dsv4_engine_seq_free(b->eng, sq[i].id))) fail_engine(b, "dsv4_engine_seq_free", s);
    dvec_push(&e2e, (double)sq[i].done_ns * 1e-6);
  }
  json_t *r = NULL;
  if (record) {
    const double wall_s = (double)(tend - t0) * 1e-9, dec_s = (double)(tend - td0) * 1e-9;
    const double out_tokens = (double)C * (double)out_len;
    r = json_object();
    json_object_set_new(r, "dspark", json_boolean(md->dspark));
    json_object_set_new(r, "mode", json_string(md->name));
    json_object_set_new(r, "concurrency", json_integer(C));
    json_object_set_new(r, "repeat", json_integer(rep));
    json_object_set_new(r, "prompt_tokens", json_integer(b->pr.len));
    json_object_set_new(r, "output_tokens_per_seq", json_integer(out_len));
    json_object_set_new(r, "output_tokens", json_integer((json_int_t)out_tokens));
    json_object_set_new(r, "decode_steps", json_integer(steps));
    json_object_set_new(r, "wall_s", json_real(wall_s));
    json_object_set_new(r, "decode_wall_s", json_real(dec_s));
    json_object_set_new(r, "output_tok_s", json_real(out_tokens / wall_s));
    json_object_set_new(r, "decode_tok_s", num_or_null(dec_s > 0 ? (double)decode_tokens / dec_s : NAN));
    json_object_set_new(r, "acceptance_length", num_or_null(seq_steps ? accepted / (double)seq_steps : NAN));
    json_object_set_new(r, "ttft_ms", stats_json(&ttft));
    json_object_set_new(r, "prefill_ms", stats_json(&prefill));
    json_object_set_new(r, "itl_ms", stats_json(&itl));
    json_object_set_new(r, "e2e_ms", stats_json(&e2e));
    json_object_set_new(r, "step_wall_ms", stats_json(&step_wall));
    json_object_set_new(r, "step_engine_ms", stats_json(&step_eng));
    json_object_set_new(r, "step_time_source", json_string(md->dspark ? "engine last_draft_ns + last_verify_ns"
                                                                       : "engine last_decode_ns"));
    if (md->dspark) {
      json_t *d = json_object();
      json_object_set_new(d, "block", json_integer(b->block));
      json_object_set_new(d, "policy", json_string(o->min_survival >= 0 ? "min_survival" : "fixed"));
      json_object_set_new(d, "draft_len", json_integer(o->draft_len > 0 && o->draft_len < b->block ? o->draft_len : b->block));
      json_object_set_new(d, "min_survival", num_or_null(o->min_survival >= 0 ? o->min_survival : NAN));
      json_object_set_new(d, "drafts_verified", json_integer(drafts_verified));
      json_object_set_new(d, "drafts_accepted", json_integer(drafts_accepted));
      json_object_set_new(d, "accept_rate", num_or_null(drafts_verified ? (double)drafts_accepted / (double)drafts_verified : NAN));
      json_t *pa = json_array();
      for (int32_t p = 0; p < b->block; p++)
        json_array_append_new(pa, num_or_null(pos_verified[p] ? (double)pos_accepted[p] / (double)pos_verified[p] : NAN));
      json_object_set_new(d, "accept_rate_by_position", pa); /* P(p accepted | 1..p-1 accepted) */
      json_object_set_new(d, "draft_ms", stats_json(&draft_ms));
      json_object_set_new(d, "verify_ms", stats_json(&verify_ms));
      json_object_set_new(r, "dspark_stats", d);
    }
    json_t *et = json_object();
    json_object_set_new(et, "prefill", t_prefill);
    json_object_set_new(et, "decode", timings_json(b));
    json_object_set_new(r, "engine_timings", et);
    json_object_set_new(r, "stage_busy", stage_busy_json(b));
    json_t *rf = json_object();
    json_object_set_new(rf, "weight_bytes_per_step", num_or_null(steps ? weight_b / (double)steps : NAN));
    json_object_set_new(rf, "kv_bytes_per_step", num_or_null(steps ? kv_b / (double)steps : NAN));
    json_object_set_new(rf, "copy_gbs", num_or_null(b->copy_gbs > 0 ? b->copy_gbs : NAN));
    const double floor_ms = b->copy_gbs > 0 && steps ? floor_bytes / (b->copy_gbs * 1e9) * 1e3 / (double)steps : NAN;
    const double eng_ms = steps ? eng_step_ns_sum * 1e-6 / (double)steps : NAN;
    json_object_set_new(rf, "floor_ms_per_step", num_or_null(floor_ms));
    json_object_set_new(rf, "engine_ms_per_step", num_or_null(eng_ms));
    json_object_set_new(rf, "step_over_floor", num_or_null(eng_ms / floor_ms));
    json_object_set_new(rf, "effective_gbs",
                        num_or_null(eng_step_ns_sum > 0 ? floor_bytes / eng_step_ns_sum : NAN));
    json_object_set_new(rf, "fraction_of_copy_bw", num_or_null(floor_ms / eng_ms));
    json_object_set_new(r, "roofline", rf);
    json_t *pf = json_object();
    json_object_set_new(pf, "major", json_integer(maj1 - maj0));
    json_object_set_new(pf, "minor", json_integer(min1 - min0));
    json_object_set_new(r, "page_faults", pf);
    json_t *hs = json_array();
    for (int32_t i = 0; i < C; i++) {
      char hx[24];
      snprintf(hx, sizeof hx, "%016llx", (unsigned long long)sq[i].hash);
      json_array_append_new(hs, json_string(hx));
    }
    json_object_set_new(r, "output_fnv1a64", hs);
    json_object_set_new(r, "loadavg_1min_end", num_or_null(loadavg1()));
    /* CPU seconds of this process / (wall x engine threads): well below 1 when
     * other processes took the cores (spin-waiting threads count as busy) */
    json_object_set_new(r, "cpu_s", json_real(cpu1 - cpu0));
    json_object_set_new(r, "cpu_share", num_or_null((cpu1 - cpu0) / (wall_s * (b->ei.n_threads > 0 ? b->ei.n_threads : 1))));
  }
  free(itl.v);
  free(ttft.v);
  free(prefill.v);
  free(step_wall.v);
  free(step_eng.v);
  free(e2e.v);
  free(draft_ms.v);
  free(verify_ms.v);
  free(sq);
  free(ids);
  free(remaining);
  free(in);
  free(map);
  free(so.out);
  free(so.k);
  free(so.nd);
  free(so.acc);
  free(pos_verified);
  free(pos_accepted);
  return r;
}


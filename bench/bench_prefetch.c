/* dsv4-bench: page-cache prefetch: read the byte ranges of the tensors decode
 * touches (safetensors headers parsed here: 8-byte little-endian header
 * length, JSON header, data area). */
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "bench.h"

/* Names of the tensors decode reads whole, chosen by role (dsv4_tensor_info): not the
 * vision tower, not the DSpark stages unless drafting, not wo_a (used as the bf16 copy
 * made at load), not the vision routing bias, not embed (a row per token). The names are
 * only keys of the shard headers. */
static json_t *touched_by_decode(const dsv4_model *model, int with_mtp) {
  dsv4_model_info mi;
  if (dsv4_model_get_info(model, &mi, sizeof mi)) die("dsv4_model_get_info failed");
  json_t *set = json_object();
  for (int64_t i = 0; i < mi.n_tensors; i++) {
    dsv4_tensor_info t;
    if (dsv4_model_get_tensor(model, i, &t, sizeof t) || !t.role) die("dsv4_model_get_tensor failed");
    const char *r = t.role;
    if (!strcmp(r, "VISION") || (t.layer >= mi.n_layers && !with_mtp) || !strcmp(r, "ATTN_WO_A") ||
        !strcmp(r, "GATE_BIAS_VL") || !strcmp(r, "EMBED"))
      continue;
    json_object_set_new(set, t.name, json_true());
  }
  return set;
}

static int64_t prefetch_shard(const char *path, const json_t *names, char *buf, size_t buf_len) {
  FILE *f = fopen(path, "rb");
  if (!f) return -1;
  unsigned char h8[8];
  int64_t total = 0;
  if (fread(h8, 1, 8, f) != 8) goto done;
  uint64_t hl = 0;
  for (int i = 7; i >= 0; i--) hl = hl << 8 | h8[i];
  if (hl > (1u << 30)) goto done;
  char *hdr = xcalloc((size_t)hl + 1, 1);
  if (fread(hdr, 1, (size_t)hl, f) != hl) {
    free(hdr);
    goto done;
  }
  json_error_t jerr;
  json_t *j = json_loadb(hdr, (size_t)hl, 0, &jerr);
  free(hdr);
  if (!j) goto done;
  const char *key;
  json_t *val;
  json_object_foreach(j, key, val) {
    json_t *offs = json_object_get(val, "data_offsets");
    if (!json_is_array(offs) || !json_object_get(names, key)) continue;
    int64_t a = (int64_t)json_integer_value(json_array_get(offs, 0));
    const int64_t e = (int64_t)json_integer_value(json_array_get(offs, 1));
    if (fseeko(f, (off_t)(8 + (int64_t)hl + a), SEEK_SET)) continue;
    while (a < e) {
      const size_t want = (size_t)(e - a) < buf_len ? (size_t)(e - a) : buf_len;
      const size_t got = fread(buf, 1, want, f);
      if (!got) break;
      a += (int64_t)got;
      total += (int64_t)got;
    }
  }
  json_decref(j);
done:
  fclose(f);
  return total;
}

int64_t prefetch_weights(const char *dir, const dsv4_model *model, int with_mtp) {
  char path[4096];
  json_t *want = touched_by_decode(model, with_mtp);
  const size_t buf_len = 8u << 20;
  char *buf = xcalloc(buf_len, 1);
  int64_t total = 0;
  snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
  json_t *idx = json_load_file(path, 0, NULL);
  if (idx) {
    json_t *wm = json_object_get(idx, "weight_map"), *files = json_object();
    const char *k;
    json_t *v;
    json_object_foreach(wm, k, v) if (json_is_string(v)) json_object_set(files, json_string_value(v), json_true());
    json_object_foreach(files, k, v) {
      snprintf(path, sizeof path, "%s/%s", dir, k);
      const int64_t n = prefetch_shard(path, want, buf, buf_len);
      if (n > 0) total += n;
    }
    json_decref(files);
    json_decref(idx);
  } else {
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    total = prefetch_shard(path, want, buf, buf_len);
  }
  free(buf);
  json_decref(want);
  return total;
}


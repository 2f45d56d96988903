/*
 * dsv4-server: OpenAI-compatible HTTP server for a libdsv4 model.
 *
 *   dsv4-server -m DIR [--host 127.0.0.1] [--port 8000] [options]
 *
 * Endpoints: POST /v1/chat/completions, POST /v1/completions (both with
 * "stream": true for SSE), GET /v1/models, GET /health. Binds to loopback
 * unless --host says otherwise. docs/serving.md, "Server".
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "srv.h"

static void usage(FILE *f) {
  fputs("usage: dsv4-server -m DIR [options]\n"
        "  -m, --model DIR        checkpoint directory (required)\n"
        "  --host ADDR            IPv4 address to bind (default 127.0.0.1: loopback only)\n"
        "  --port N               TCP port (default 8000)\n"
        "  --name NAME            model name in responses (default: the directory's name)\n"
        "  --max-sequences N      engine sequences, i.e. requests decoding at once (default 8)\n"
        "  --max-context N        positions per sequence (default 4096)\n"
        "  --threads N            engine threads (default 0 = one per core)\n"
        "  --max-queue N          requests queued or running; more get 429 (default 64)\n"
        "  --max-connections N    open HTTP connections (default 128)\n"
        "  --max-body BYTES       request body limit; larger gets 413 (default 1048576)\n"
        "  --max-tokens N         default max_tokens of chat requests (default 256)\n"
        "  --prefill-chunk N      prompt tokens per scheduler chunk (default 256)\n"
        "  --prefix-cache N       finished sequences kept so that a follow-up turn prefills only\n"
        "                         its new tokens (default 0; at most --max-sequences)\n"
        "  --kv-format F          window KV records: native (default, the reference's MXFP8)\n"
        "                         or fp8_ds_mla (V4's 584 B record; logits differ:\n"
        "                         docs/attention.md \"KV formats\")\n",
        f);
}

static int parse(int argc, char **argv, srv_opts *o) {
  o->host = "127.0.0.1";
  o->port = 8000;
  o->max_sequences = 8;
  o->max_context = 4096;
  o->max_queue = 64;
  o->max_connections = 128;
  o->max_body = 1 << 20;
  o->max_tokens_default = 256;
  o->prefill_chunk = 256;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    long long x = v ? strtoll(v, NULL, 10) : 0;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      exit(0);
    }
    if (!v) {
      fprintf(stderr, "dsv4-server: %s needs a value\n", a);
      return 2;
    }
    if (!strcmp(a, "-m") || !strcmp(a, "--model")) o->model_dir = v;
    else if (!strcmp(a, "--host")) o->host = v;
    else if (!strcmp(a, "--name")) o->model_name = v;
    else if (!strcmp(a, "--port") && x > 0 && x < 65536) o->port = (int)x;
    else if (!strcmp(a, "--max-sequences") && x > 0 && x < 65536) o->max_sequences = (int)x;
    else if (!strcmp(a, "--max-context") && x > 1) o->max_context = x;
    else if (!strcmp(a, "--threads") && x >= 0 && x <= 1024) o->n_threads = (int)x;
    else if (!strcmp(a, "--max-queue") && x > 0 && x < 1000000) o->max_queue = (int)x;
    else if (!strcmp(a, "--max-connections") && x > 0 && x < 100000) o->max_connections = (int)x;
    else if (!strcmp(a, "--max-body") && x > 0) o->max_body = (size_t)x;
    else if (!strcmp(a, "--max-tokens") && x > 0 && x < 1000000000) o->max_tokens_default = (int)x;
    else if (!strcmp(a, "--prefill-chunk") && x > 0 && x < 1000000) o->prefill_chunk = (int)x;
    else if (!strcmp(a, "--prefix-cache") && x >= 0 && x < 65536) o->prefix_cache = (int)x;
    else if (!strcmp(a, "--kv-format") && !strcmp(v, "native")) o->kv_format = DSV4_KV_FORMAT_NATIVE;
    else if (!strcmp(a, "--kv-format") && !strcmp(v, "fp8_ds_mla"))
      o->kv_format = DSV4_KV_FORMAT_FP8_DS_MLA;
    else {
      fprintf(stderr, "dsv4-server: bad option or value: %s %s\n", a, v);
      usage(stderr);
      return 2;
    }
    i++;
  }
  if (!o->model_dir) {
    usage(stderr);
    return 2;
  }
  return 0;
}

int main(int argc, char **argv) {
  static srv s;
  int rc = parse(argc, argv, &s.o);
  if (rc) return rc;
  const char *name = s.o.model_name;
  if (!name) {
    const char *d = s.o.model_dir;
    size_t n = strlen(d);
    while (n > 1 && d[n - 1] == '/') n--;
    size_t b = n;
    while (b > 0 && d[b - 1] != '/') b--;
    snprintf(s.model_name, sizeof s.model_name, "%.*s", (int)(n - b), d + b);
  } else {
    snprintf(s.model_name, sizeof s.model_name, "%s", name);
  }
  if (srv_engine_start(&s)) return 1;
  rc = srv_http_run(&s);
  srv_engine_stop(&s);
  return rc;
}

/* Engram hashing (spec §5.2): primes, multipliers, compressed token map,
 * normaliser and per-token row ids, against the real V4.1 numbers of the
 * spec and the fixtures' goldens (engram.* and b.engram_hash_ids). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"
#include "io/safetensors.h"
#include "io/tokenizer.h"
#include "model/config.h"
#include "model/engram_hash.h"

/* ---- primality -------------------------------------------------------------- */

static void is_prime_matches_sieve_and_known_values(void **state) {
  (void)state;
  enum { N = 200000 };
  static unsigned char composite[N];
  composite[0] = composite[1] = 1;
  for (uint32_t i = 2; i * i < N; i++)
    if (!composite[i])
      for (uint32_t j = i * i; j < N; j += i) composite[j] = 1;
  for (uint64_t n = 0; n < N; n++)
    if (dsv4i_is_prime_u64(n) != !composite[n]) fail_msg("is_prime(%" PRIu64 ") wrong", n);
  /* large primes and strong pseudoprimes to small base sets */
  const uint64_t primes[] = {4294967291u, 4294967311ull, 2305843009213693951ull /* 2^61-1 */,
                             4611686018427387847ull /* 2^62-57 */,
                             9223372036854775783ull /* 2^63-25 */,
                             18446744073709551557ull /* 2^64-59 */, 16000057, 16000889};
  const uint64_t composites[] = {3215031751ull,  /* spsp(2,3,5,7) */
                                 4759123141ull,  /* spsp(2,7,61) */
                                 3825123056546413051ull, /* spsp to bases 2..23 */
                                 1122004669633ull,
                                 4611686018427387903ull, /* 2^62-1 */
                                 18446744073709551615ull, 16000001ull * 3, 65521ull * 65537ull};
  for (size_t i = 0; i < DSV4I_ARRAY_LEN(primes); i++) assert_true(dsv4i_is_prime_u64(primes[i]));
  for (size_t i = 0; i < DSV4I_ARRAY_LEN(composites); i++)
    if (dsv4i_is_prime_u64(composites[i])) fail_msg("%" PRIu64 " is composite", composites[i]);
}

/* ---- real V4.1 numbers (spec §2.1, §5.2 b, c) ------------------------------ */

static void real_config_primes(void **state) {
  (void)state;
  int64_t p[2][24];
  assert_int_equal(dsv4i_engram_primes(16000000, 2, 4, 8, &p[0][0]), DSV4_OK);
  int64_t sum[2] = {0, 0};
  for (int l = 0; l < 2; l++)
    for (int c = 0; c < 24; c++) {
      sum[l] += p[l][c];
      assert_true(dsv4i_is_prime_u64((uint64_t)p[l][c]));
      assert_true(p[l][c] > 16000000 - 1);
      if (c % 8) assert_true(p[l][c] > p[l][c - 1]); /* increasing within an order */
      for (int l2 = 0; l2 <= l; l2++) /* one seen-set: all 48 distinct */
        for (int c2 = 0; c2 < (l2 == l ? c : 24); c2++) assert_true(p[l2][c2] != p[l][c]);
    }
  assert_true(sum[0] == 384006168);
  assert_true(sum[1] == 384016682);
  assert_true(p[0][0] == 16000057 && p[0][1] == 16000079 && p[0][2] == 16000081);
  assert_true(p[0][23] == 16000463);
  assert_true(p[1][0] == 16000477);
  assert_true(p[1][23] == 16000889);
  /* order 3 restarts the search: its first head takes the first prime no
   * earlier bucket took, which is above every prime of order 2 here */
  assert_true(p[0][8] > p[0][7]);
}

static void real_config_multipliers_match_spec(void **state) {
  (void)state;
  const int64_t want1[4] = {76632096046245, 4839876093313, 35959672319349, 73987337458391};
  const int64_t want14[4] = {67716810739261, 51510806800915, 30921347202721, 82619226485591};
  int64_t m[4];
  assert_int_equal(dsv4i_engram_multipliers(1, 4, 99092, m), DSV4_OK);
  assert_memory_equal(m, want1, sizeof m);
  assert_int_equal(dsv4i_engram_multipliers(14, 4, 99092, m), DSV4_OK);
  assert_memory_equal(m, want14, sizeof m);
  /* the no-overflow argument: (V - 1) * m < INT64_MAX for every m < 2*bound */
  const int64_t bound = (INT64_MAX / 99092) / 2;
  assert_true(bound == 46539438283891);
  assert_true((uint64_t)(2 * bound - 1) <= (uint64_t)INT64_MAX / 99091);
}

/* A config holding only the Engram fields, like the real V4.1 one. */
static void real_engram_config(dsv4i_config *c) {
  memset(c, 0, sizeof *c);
  c->n_engram = 2;
  c->engram_layers[0] = 1;
  c->engram_layers[1] = 14;
  c->engram_num_embeddings[0] = 384006168;
  c->engram_num_embeddings[1] = 384016682;
  c->engram_max_ngram = 4;
  c->engram_vocab_size = 16000000;
  c->engram_n_heads = 8;
  c->engram_head_dim = 256;
  c->engram_pad_id = 2;
  c->engram_compressed_vocab_size = 99092;
}

static void real_config_tables_from_map(void **state) {
  (void)state;
  dsv4i_config cfg;
  real_engram_config(&cfg);
  enum { V = 129280 };
  int32_t *map = malloc(V * sizeof *map);
  assert_non_null(map);
  for (int32_t i = 0; i < V; i++) map[i] = i < 99092 ? i : (int32_t)((i * 7) % 99092);
  map[2] = 5;
  dsv4i_engram_tables *t = NULL;
  assert_int_equal(dsv4i_engram_tables_create_from_map(&cfg, map, V, &t), DSV4_OK);
  assert_int_equal(t->n_layers, 2);
  assert_int_equal(t->n_cols, 24);
  assert_int_equal(t->pad, 5);
  assert_true(t->rows[0] == 384006168 && t->rows[1] == 384016682);
  assert_true(t->offsets[0] == 0 && t->offsets[1] == 16000057);
  assert_true(t->offsets[24 + 23] + t->primes[24 + 23] == 384016682);
  assert_true(t->multipliers[0] == 76632096046245 && t->multipliers[7] == 82619226485591);
  /* row ids stay inside each layer's table, also at the extreme ids */
  dsv4i_engram_history *h = NULL;
  assert_int_equal(dsv4i_engram_history_create(t, &h), DSV4_OK);
  const int32_t toks[] = {99091, 99091, 99091, 99091, 0, 1, 129279, 7, 99090};
  assert_int_equal(dsv4i_engram_history_append(h, toks, NULL, DSV4I_ARRAY_LEN(toks)), DSV4_OK);
  int64_t ids[DSV4I_ARRAY_LEN(toks)][2][24];
  assert_int_equal(dsv4i_engram_history_row_ids(h, 0, DSV4I_ARRAY_LEN(toks), -1, &ids[0][0][0]),
                   DSV4_OK);
  for (size_t p = 0; p < DSV4I_ARRAY_LEN(toks); p++)
    for (int l = 0; l < 2; l++)
      for (int c = 0; c < 24; c++) {
        assert_true(ids[p][l][c] >= t->offsets[l * 24 + c]);
        assert_true(ids[p][l][c] < t->offsets[l * 24 + c] + t->primes[l * 24 + c]);
      }
  dsv4i_engram_history_free(h);
  dsv4i_engram_tables_free(t);
  free(map);
}

/* ---- normaliser ------------------------------------------------------------ */

/* Inputs and the reference chain's outputs (the tokenizers 0.23.3
 * normalizers.Sequence of spec §5.2 a, run in Python when this test was
 * written), as UTF-8 bytes: Turkish dotted I, Greek sigma, whitespace runs,
 * U+2028, U+E000, NUL, compatibility forms (ligatures, fullwidth, circled,
 * squared, mathematical letters), Hangul, combining sequences, marks of
 * categories Mn/Mc/Me, emoji with modifiers and ZWJ. Characters whose
 * Unicode version differs between utf8proc and the reference are left out
 * (see engram_tokenmap.c). */
static const struct {
  const char *in;
  size_t len;
  const char *out;
  size_t out_len;
} norm_cases[] = {
  {"\xc4\xb0\x73\x74\x61\x6e\x62\x75\x6c", 9, "\x69\x73\x74\x61\x6e\x62\x75\x6c", 8},
  {"\xce\x91\xce\xa3", 4, "\xce\xb1\xcf\x83", 4},
  {"\xce\x9f\xce\x94\xce\x9f\xce\xa3\x20\xce\x9f\xce\x94\xce\x9f\xce\xa3", 17,
   "\xce\xbf\xce\xb4\xce\xbf\xcf\x83\x20\xce\xbf\xce\xb4\xce\xbf\xcf\x83", 17},
  {"\x20", 1, "\x20", 1},
  {"\x20\x20", 2, "\x20", 1},
  {"\x09\x0a", 2, "\x20", 1},
  {"\x20\x61\x20", 3, "\x61", 1},
  {"\x20\x20\x48\x65\x6c\x6c\x6f\x20\x09\x20\x57\x6f\x72\x6c\x64\x20\x0d\x0a", 18,
   "\x68\x65\x6c\x6c\x6f\x20\x77\x6f\x72\x6c\x64", 11},
  {"\x65\xcc\x81", 3, "\x65", 1},
  {"\xe1\x84\x80\xe1\x85\xa1\xe1\x86\xa8", 9, "\xe1\x84\x80\xe1\x85\xa1\xe1\x86\xa8", 9},
  {"\xef\xac\x81", 3, "\x66\x69", 2},
  {"\xc7\x84", 2, "\x64\x7a", 2},
  {"\xe2\x80\xa8", 3, "", 0},
  {"\x61\xe2\x80\xa8", 4, "\x61", 1},
  {"\xee\x80\x80", 3, "\x20", 1},
  {"\x61\xee\x80\x80", 4, "\x61\x20", 2},
  {"\x20\xee\x80\x80\x20", 5, "\x20", 1},
  {"\x00", 1, "\x00", 1},
  {"\x61\x00\x62", 3, "\x61\x00\x62", 3},
  {"\xc2\xa0", 2, "\x20", 1},
  {"\xe3\x80\x80\x78\xe3\x80\x80", 7, "\x78", 1},
  {"\x78\xe2\x80\x8b", 4, "\x78\xe2\x80\x8b", 4},
  {"\xe2\x85\xab", 3, "\x78\x69\x69", 3},
  {"\xe3\x8d\xbf", 3, "\xe6\xa0\xaa\xe5\xbc\x8f\xe4\xbc\x9a\xe7\xa4\xbe", 12},
  {"\xef\xbd\xb6\xef\xbe\x9e", 6, "\xe3\x82\xab", 3},
  {"\xef\xbe\x9e", 3, "", 0},
  {"\xcd\x85", 2, "", 0},
  {"\xce\x90", 2, "\xce\xb9", 2},
  {"\xe1\xba\x9e", 3, "\xc3\x9f", 2},
  {"\xc3\x85", 2, "\x61", 1},
  {"\xe2\x84\xab", 3, "\x61", 1},
  {"\xe0\xbd\xb3", 3, "", 0},
  {"\xe0\xbd\xb7", 3, "", 0},
  {"\xcd\x84", 2, "", 0},
  {"\xe0\xa5\x98", 3, "\xe0\xa4\x95", 3},
  {"\xc2\xbd", 2, "\x31\xe2\x81\x84\x32", 5},
  {"\xe2\x91\xb4", 3, "\x28\x31\x29", 3},
  {"\xf0\x9d\x94\x84\xf0\x9d\x94\x85", 8, "\x61\x62", 2},
  {"\xf0\x9d\x90\x80", 4, "\x61", 1},
  {"\xcf\x93", 2, "\xcf\x85", 2},
  {"\xc3\x9f", 2, "\xc3\x9f", 2},
  {"\xc5\x89", 2, "\xca\xbc\x6e", 3},
  {"\xc5\x89", 2, "\xca\xbc\x6e", 3},
  {"\x4b", 1, "\x6b", 1},
  {"\xc7\x85", 2, "\x64\x7a", 2},
  {"\xe1\xbe\xbc", 3, "\xce\xb1", 2},
  {"\xe1\xbe\x88", 3, "\xce\xb1", 2},
  {"\x0b", 1, "", 0},
  {"\x0c", 1, "", 0},
  {"\x20\x0b\x20", 3, "", 0},
  {"\xc2\x85", 2, "", 0},
  {"\xe1\x9a\x80", 3, "", 0},
  {"\x61\x62\x63\xcc\x80\xcc\x96\x64\x65\x66", 10, "\x61\x62\x63\x64\x65\x66", 6},
  {"\xd6\xb0\xd6\xb1", 4, "", 0},
  {"\xe0\xb8\xb3", 3, "\xe0\xb8\xb2", 3},
  {"\xe0\xba\xb3", 3, "\xe0\xba\xb2", 3},
  {"\xef\xb7\xba", 3,
   "\xd8\xb5\xd9\x84\xd9\x89\x20\xd8\xa7\xd9\x84\xd9\x84\xd9\x87\x20\xd8\xb9\xd9\x84"
   "\xd9\x8a\xd9\x87\x20\xd9\x88\xd8\xb3\xd9\x84\xd9\x85", 33},
  {"\xef\xac\xac", 3, "\xd7\xa9", 2},
  {"\xed\x95\x9c\xea\xb5\xad\xec\x96\xb4", 9,
   "\xe1\x84\x92\xe1\x85\xa1\xe1\x86\xab\xe1\x84\x80\xe1\x85\xae\xe1\x86\xa8\xe1\x84"
   "\x8b\xe1\x85\xa5", 24},
  {"\xe3\x84\xb1", 3, "\xe1\x84\x80", 3},
  {"\xc2\xa8", 2, "\x20", 1},
  {"\xcb\x9c", 2, "\x20", 1},
  {"\xcc\x83", 2, "", 0},
  {"\x20\xcc\x83", 3, "\x20", 1},
  {"\x20\xcc\x81", 3, "\x20", 1},
  {"\xef\xbc\xa1\xef\xbc\xa2", 6, "\x61\x62", 2},
  {"\xe1\xba\x9b\xcc\xa3", 5, "\x73", 1},
  {"\xc4\xb0\xcc\x87", 4, "\x69", 1},
  {"\xe2\x84\xa6", 3, "\xcf\x89", 2},
  {"\xce\xa9", 2, "\xcf\x89", 2},
  {"\xe1\xb4\xac", 3, "\x61", 1},
  {"\xe2\x85\xa0", 3, "\x69", 1},
  {"\xe2\x92\xb6", 3, "\x61", 1},
  {"\xe1\xbc\x93\x30", 4, "\xce\xb5\x30", 3},
  {"\xf0\x9f\x84\xb0", 4, "\x61", 1},
  {"\xf0\x9f\x87\xa6\xf0\x9f\x87\xa8", 8, "\xf0\x9f\x87\xa6\xf0\x9f\x87\xa8", 8},
  {"\xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd", 8, "\xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd", 8},
  {"\xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x91\xa7", 18,
   "\xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x91\xa7", 18},
  {"\xe2\x80\x8d", 3, "\xe2\x80\x8d", 3},
  {"\xef\xb8\x8f", 3, "", 0},
  {"\x61\xef\xb8\x8f\x62", 5, "\x61\x62", 2},
  {"\xcd\x85\xce\x91", 4, "\xce\xb1", 2},
  {"\xce\x99\xcc\x88\xcc\x81", 6, "\xce\xb9", 2},
  {"\xf0\x9e\xa4\x80", 4, "\xf0\x9e\xa4\xa2", 4},
  {"\xe1\x82\xa0", 3, "\xe2\xb4\x80", 3},
  {"\xe1\x8e\xa0", 3, "\xea\xad\xb0", 3},
  {"\xea\xad\xb0", 3, "\xea\xad\xb0", 3},
  {"\xe1\xb2\x90", 3, "\xe1\x83\x90", 3},
  {"\xe2\xb0\xaf", 3, "\xe2\xb1\x9f", 3},
  {"\xf0\x96\xb9\x80", 4, "\xf0\x96\xb9\xa0", 4},
};

static void normaliser_matches_reference_chain(void **state) {
  (void)state;
  for (size_t i = 0; i < DSV4I_ARRAY_LEN(norm_cases); i++) {
    dsv4i_str o = {0};
    assert_int_equal(dsv4i_engram_normalize(norm_cases[i].in, norm_cases[i].len, &o), DSV4_OK);
    size_t want = norm_cases[i].out_len;
    if (o.len != want || (want && memcmp(o.buf, norm_cases[i].out, want) != 0))
      fail_msg("normaliser case %zu: got %zu bytes, want %zu", i, o.len, want);
    dsv4i_str_free(&o);
  }
}

static void normaliser_rules(void **state) {
  (void)state;
  static const struct {
    const char *in;
    size_t len;
    const char *out;
    size_t out_len;
  } c[] = {
    {" ", 1, " ", 1},                          /* lone space survives Strip */
    {"\t\r\n ", 4, " ", 1},                    /* a run collapses to it */
    {"  a  b  ", 8, "a b", 3},                 /* collapse, then strip */
    {"\xee\x80\x80", 3, " ", 1},               /* U+E000 in the token becomes a space */
    {"x\xee\x80\x80", 4, "x ", 2},             /* ... even when not alone */
    {"\xe2\x80\xa8", 3, "", 0},                /* U+2028 strips away: caller keys by text */
    {"A\x00" "B", 3, "a\x00" "b", 3},          /* NUL is kept */
    {"\xc3\x89T\xc3\x89", 5, "ete", 3},        /* accents stripped */
    {"\xe0\xa4\x95\xe0\xa4\x83", 6, "\xe0\xa4\x95", 3}, /* Mc (visarga) stripped too */
    {"\xce\x91\xce\xa3", 4, "\xce\xb1\xcf\x83", 4},     /* no final-sigma rule */
    {"\xef\xac\x81", 3, "fi", 2},              /* NFKC ligature */
  };
  for (size_t i = 0; i < DSV4I_ARRAY_LEN(c); i++) {
    dsv4i_str o = {0};
    assert_int_equal(dsv4i_engram_normalize(c[i].in, c[i].len, &o), DSV4_OK);
    assert_int_equal(o.len, c[i].out_len);
    if (c[i].out_len) assert_memory_equal(o.buf, c[i].out, c[i].out_len);
    dsv4i_str_free(&o);
  }
  dsv4i_str o = {0};
  assert_int_equal(dsv4i_engram_normalize("\xff", 1, &o), DSV4_ERR_INVALID_UTF8);
  dsv4i_str_free(&o);
}

/* ---- fixtures ---------------------------------------------------------------- */

typedef struct fx {
  const char *name;
  dsv4i_config cfg;
  dsv4i_st_file golden;
  int64_t *token_map, *primes, *offsets, *mult, pad, *input_ids, *hash_ids;
  size_t n_tokens, n_input;
} fx;

static int64_t *golden_i64(const dsv4i_st_file *f, const char *name, size_t *n) {
  const dsv4i_st_tensor *t = dsv4i_st_find(f, name);
  if (!t) fail_msg("golden tensor %s absent", name);
  assert_int_equal(t->dtype, DSV4_DTYPE_I64);
  int64_t *v = malloc(t->nbytes ? t->nbytes : 1);
  assert_non_null(v);
  memcpy(v, dsv4i_st_data(f, t), t->nbytes); /* data may be unaligned */
  if (n) *n = t->nbytes / 8;
  return v;
}

static int fx_setup(void **state, const char *name) {
  fx *f = calloc(1, sizeof *f);
  f->name = name;
  *state = f;
  return 0;
}
static int fx_setup_a(void **state) { return fx_setup(state, "tiny-v41-a"); }
static int fx_setup_e2e(void **state) { return fx_setup(state, "tiny-v41-e2e-a"); }

/* Loads lazily inside the test so a missing fixture folder is a skip. */
static void fx_load(fx *f) {
  if (f->token_map) return;
  char rel[256];
  snprintf(rel, sizeof rel, "%s/config.json", f->name);
  const char *p = tu_fixture_or_skip(rel);
  assert_int_equal(dsv4i_config_load(p, &f->cfg), DSV4_OK);
  snprintf(rel, sizeof rel, "%s/golden.safetensors", f->name);
  p = tu_fixture_or_skip(rel);
  assert_int_equal(dsv4i_st_open(p, &f->golden), DSV4_OK);
  f->token_map = golden_i64(&f->golden, "engram.token_map", &f->n_tokens);
  f->primes = golden_i64(&f->golden, "engram.primes", NULL);
  f->offsets = golden_i64(&f->golden, "engram.offsets", NULL);
  f->mult = golden_i64(&f->golden, "engram.multipliers", NULL);
  int64_t *pad = golden_i64(&f->golden, "engram.pad_compressed_id", NULL);
  f->pad = pad[0];
  free(pad);
  f->input_ids = golden_i64(&f->golden, "b.input_ids", &f->n_input);
  size_t n_hash;
  f->hash_ids = golden_i64(&f->golden, "b.engram_hash_ids", &n_hash);
  assert_true(n_hash == f->n_input * 2 * 12);
}

static int fx_teardown(void **state) {
  fx *f = *state;
  free(f->token_map);
  free(f->primes);
  free(f->offsets);
  free(f->mult);
  free(f->input_ids);
  free(f->hash_ids);
  dsv4i_st_close(&f->golden);
  free(f);
  return 0;
}

static dsv4i_engram_tables *fx_tables_from_golden_map(fx *f) {
  int32_t *map = malloc(f->n_tokens * sizeof *map);
  assert_non_null(map);
  for (size_t i = 0; i < f->n_tokens; i++) map[i] = (int32_t)f->token_map[i];
  dsv4i_engram_tables *t = NULL;
  assert_int_equal(dsv4i_engram_tables_create_from_map(&f->cfg, map, (int32_t)f->n_tokens, &t),
                   DSV4_OK);
  free(map);
  return t;
}

static void fx_tables_equal_goldens(void **state) {
  fx *f = *state;
  fx_load(f);
  dsv4i_engram_tables *t = fx_tables_from_golden_map(f);
  assert_int_equal(t->n_layers, 2);
  assert_int_equal(t->n_cols, 12);
  assert_int_equal(t->compressed_vocab, 543);
  assert_true(t->pad == f->pad);
  assert_memory_equal(t->primes, f->primes, 2 * 12 * sizeof(int64_t));
  assert_memory_equal(t->offsets, f->offsets, 2 * 12 * sizeof(int64_t));
  assert_memory_equal(t->multipliers, f->mult, 2 * 4 * sizeof(int64_t));
  assert_true(t->rows[0] == 1524 && t->rows[1] == 2304);
  /* make_tiny.json's engram_primes: 101..157 then 163..227, i.e. the primes
   * above 100 in order */
  int64_t want = 100;
  for (int i = 0; i < 24; i++) {
    do want++;
    while (!dsv4i_is_prime_u64((uint64_t)want));
    assert_true(t->primes[i] == want);
  }
  dsv4i_engram_tables_free(t);
}

static void fx_token_map_from_tokenizer(void **state) {
  fx *f = *state;
  fx_load(f);
  char rel[256];
  snprintf(rel, sizeof rel, "%s", f->name);
  const char *dir = tu_fixture_or_skip(rel);
  dsv4i_tokenizer *tok = NULL;
  assert_int_equal(dsv4i_tokenizer_load(dir, &tok), DSV4_OK);
  int32_t *map = NULL, n = 0, classes = 0;
  assert_int_equal(dsv4i_engram_token_map_build(tok, &map, &n, &classes), DSV4_OK);
  assert_int_equal(n, (int32_t)f->n_tokens);
  assert_int_equal(classes, 543);
  for (int32_t i = 0; i < n; i++)
    if (map[i] != f->token_map[i])
      fail_msg("token %d: class %d, golden %" PRId64, i, map[i], f->token_map[i]);
  free(map);
  /* the full build from config + tokenizer */
  dsv4i_engram_tables *t = NULL;
  assert_int_equal(dsv4i_engram_tables_create(&f->cfg, tok, &t), DSV4_OK);
  assert_true(t->pad == f->pad);
  assert_memory_equal(t->primes, f->primes, 2 * 12 * sizeof(int64_t));
  assert_memory_equal(t->multipliers, f->mult, 2 * 4 * sizeof(int64_t));
  dsv4i_engram_tables_free(t);
  /* a config whose compressed vocab disagrees: DSV4_ERR_TOKENIZER, both numbers */
  dsv4i_config bad = f->cfg;
  bad.engram_compressed_vocab_size = 544;
  assert_int_equal(dsv4i_engram_tables_create(&bad, tok, &t), DSV4_ERR_TOKENIZER);
  assert_null(t);
  assert_non_null(strstr(dsv4i_error_message(), "543"));
  assert_non_null(strstr(dsv4i_error_message(), "544"));
  dsv4i_tokenizer_free(tok);
}

static void fx_history_append(dsv4i_engram_history *h, const fx *f, size_t from, size_t to) {
  int32_t ids[128];
  assert_true(to - from <= 128);
  for (size_t i = from; i < to; i++) ids[i - from] = (int32_t)f->input_ids[i];
  assert_int_equal(dsv4i_engram_history_append(h, ids, NULL, to - from), DSV4_OK);
}

static void fx_row_ids_equal_golden(void **state) {
  fx *f = *state;
  fx_load(f);
  dsv4i_engram_tables *t = fx_tables_from_golden_map(f);
  const size_t L = f->n_input, per = 2 * 12;
  int64_t *got = malloc(L * per * sizeof *got);
  assert_non_null(got);
  const size_t chunks[] = {1, 3, 7, L};
  for (size_t ci = 0; ci < DSV4I_ARRAY_LEN(chunks); ci++) {
    dsv4i_engram_history *h = NULL;
    assert_int_equal(dsv4i_engram_history_create(t, &h), DSV4_OK);
    memset(got, 0xff, L * per * sizeof *got);
    for (size_t p0 = 0; p0 < L; p0 += chunks[ci]) {
      size_t p1 = p0 + chunks[ci] < L ? p0 + chunks[ci] : L;
      fx_history_append(h, f, p0, p1);
      assert_int_equal(
          dsv4i_engram_history_row_ids(h, (int64_t)p0, (int64_t)p1, -1, got + p0 * per), DSV4_OK);
    }
    for (size_t i = 0; i < L * per; i++)
      if (got[i] != f->hash_ids[i])
        fail_msg("chunk %zu: position %zu layer %zu col %zu: %" PRId64 " != golden %" PRId64,
                 chunks[ci], i / per, i % per / 12, i % 12, got[i], f->hash_ids[i]);
    /* one layer slot at a time, and the whole prompt again from the history */
    int64_t one[12];
    for (int32_t s = 0; s < 2; s++)
      for (size_t p = 0; p < L; p++) {
        assert_int_equal(dsv4i_engram_history_row_ids(h, (int64_t)p, (int64_t)p + 1, s, one),
                         DSV4_OK);
        assert_memory_equal(one, f->hash_ids + p * per + (size_t)s * 12, sizeof one);
      }
    dsv4i_engram_history_free(h);
  }
  free(got);
  dsv4i_engram_tables_free(t);
}

/* Speculative rollback: append wrong tokens, truncate, append the right ones;
 * fork keeps an independent copy. */
static void fx_truncate_and_fork(void **state) {
  fx *f = *state;
  fx_load(f);
  dsv4i_engram_tables *t = fx_tables_from_golden_map(f);
  const size_t L = f->n_input, per = 2 * 12;
  int64_t *got = malloc(L * per * sizeof *got);
  assert_non_null(got);
  dsv4i_engram_history *h = NULL, *fork = NULL;
  assert_int_equal(dsv4i_engram_history_create(t, &h), DSV4_OK);
  fx_history_append(h, f, 0, 40);
  assert_int_equal(dsv4i_engram_history_fork(h, &fork), DSV4_OK);
  const int32_t junk[5] = {5, 600, 7, 8, 9};
  const uint8_t img[5] = {0, 1, 0, 0, 1};
  assert_int_equal(dsv4i_engram_history_append(h, junk, img, 5), DSV4_OK);
  assert_int_equal(dsv4i_engram_history_len(h), 45);
  assert_int_equal(dsv4i_engram_history_truncate(h, 37), DSV4_OK);
  assert_int_equal(dsv4i_engram_history_len(h), 37);
  fx_history_append(h, f, 37, L);
  assert_int_equal(dsv4i_engram_history_row_ids(h, 0, (int64_t)L, -1, got), DSV4_OK);
  assert_memory_equal(got, f->hash_ids, L * per * sizeof *got);
  /* the fork never saw the junk */
  assert_int_equal(dsv4i_engram_history_len(fork), 40);
  fx_history_append(fork, f, 40, L);
  memset(got, 0, L * per * sizeof *got);
  assert_int_equal(dsv4i_engram_history_row_ids(fork, 30, (int64_t)L, -1, got), DSV4_OK);
  assert_memory_equal(got, f->hash_ids + 30 * per, (L - 30) * per * sizeof *got);
  /* truncate to 0 and start over */
  assert_int_equal(dsv4i_engram_history_truncate(fork, 0), DSV4_OK);
  fx_history_append(fork, f, 0, 10);
  assert_int_equal(dsv4i_engram_history_row_ids(fork, 0, 10, -1, got), DSV4_OK);
  assert_memory_equal(got, f->hash_ids, 10 * per * sizeof *got);
  dsv4i_engram_history_free(fork);
  dsv4i_engram_history_free(h);
  free(got);
  dsv4i_engram_tables_free(t);
}

/* Image positions against a direct transcription of the reference's
 * vectorised NgramHashState (per shift: blocked |= p < shift | src == DEAD). */
static void fx_dead_positions_match_reference_formula(void **state) {
  fx *f = *state;
  fx_load(f);
  dsv4i_engram_tables *t = fx_tables_from_golden_map(f);
  enum { T = 300 };
  int32_t tok[T];
  uint8_t img[T];
  int64_t src[T];
  uint64_t x = 12345;
  for (int i = 0; i < T; i++) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    tok[i] = (int32_t)((x >> 33) % 640);
    img[i] = ((x >> 20) % 5) == 0 || (i >= 100 && i < 120); /* scattered + one span */
    src[i] = img[i] ? -1 : f->token_map[tok[i]];
  }
  dsv4i_engram_history *h = NULL;
  assert_int_equal(dsv4i_engram_history_create(t, &h), DSV4_OK);
  assert_int_equal(dsv4i_engram_history_reserve(h, T), DSV4_OK);
  assert_int_equal(dsv4i_engram_history_append(h, tok, img, 150), DSV4_OK);
  assert_int_equal(dsv4i_engram_history_append(h, tok + 150, img + 150, T - 150), DSV4_OK);
  static int64_t got[T][2][12];
  assert_int_equal(dsv4i_engram_history_row_ids(h, 0, T, -1, &got[0][0][0]), DSV4_OK);
  for (int p = 0; p < T; p++) {
    int64_t toks[4];
    int blocked = 0;
    for (int s = 0; s < 4; s++) {
      int64_t v = src[p - s < 0 ? 0 : p - s];
      blocked = blocked || p < s || v == -1;
      toks[s] = blocked ? f->pad : v;
    }
    for (int l = 0; l < 2; l++) {
      int64_t r = toks[0] * f->mult[l * 4];
      for (int s = 1; s < 4; s++) {
        r ^= toks[s] * f->mult[l * 4 + s];
        for (int k = 0; k < 4; k++) {
          int c = (s - 1) * 4 + k;
          assert_true(got[p][l][c] == r % f->primes[l * 12 + c] + f->offsets[l * 12 + c]);
        }
      }
    }
  }
  dsv4i_engram_history_free(h);
  dsv4i_engram_tables_free(t);
}

static void fx_bad_inputs_are_statuses(void **state) {
  fx *f = *state;
  fx_load(f);
  int32_t *map = malloc(f->n_tokens * sizeof *map);
  assert_non_null(map);
  for (size_t i = 0; i < f->n_tokens; i++) map[i] = (int32_t)f->token_map[i];
  dsv4i_engram_tables *t = NULL;
  dsv4i_config bad = f->cfg;
  bad.engram_compressed_vocab_size = 600; /* map has 543 classes */
  assert_int_equal(dsv4i_engram_tables_create_from_map(&bad, map, (int32_t)f->n_tokens, &t),
                   DSV4_ERR_CONFIG_VALUE);
  assert_null(t);
  assert_non_null(strstr(dsv4i_error_message(), "543"));
  assert_non_null(strstr(dsv4i_error_message(), "600"));
  bad = f->cfg;
  bad.engram_num_embeddings[1] = 2305;
  assert_int_equal(dsv4i_engram_tables_create_from_map(&bad, map, (int32_t)f->n_tokens, &t),
                   DSV4_ERR_CONFIG_VALUE);
  assert_non_null(strstr(dsv4i_error_message(), "2304"));
  assert_non_null(strstr(dsv4i_error_message(), "2305"));
  bad = f->cfg;
  bad.engram_pad_id = 640;
  assert_int_equal(dsv4i_engram_tables_create_from_map(&bad, map, (int32_t)f->n_tokens, &t),
                   DSV4_ERR_CONFIG_VALUE);
  bad = f->cfg;
  bad.engram_max_ngram = 1;
  assert_int_equal(dsv4i_engram_tables_create_from_map(&bad, map, (int32_t)f->n_tokens, &t),
                   DSV4_ERR_CONFIG_VALUE);
  bad = f->cfg;
  bad.n_engram = 0;
  assert_int_equal(dsv4i_engram_tables_create_from_map(&bad, map, (int32_t)f->n_tokens, &t),
                   DSV4_ERR_INVALID_ARG);
  map[7] = 543;
  assert_int_equal(dsv4i_engram_tables_create_from_map(&f->cfg, map, (int32_t)f->n_tokens, &t),
                   DSV4_ERR_CONFIG_VALUE);
  free(map);

  t = fx_tables_from_golden_map(f);
  dsv4i_engram_history *h = NULL;
  assert_int_equal(dsv4i_engram_history_create(t, &h), DSV4_OK);
  const int32_t ok[3] = {0, 5, 639}, badtok[3] = {1, 640, 2}, neg[1] = {-1};
  assert_int_equal(dsv4i_engram_history_append(h, ok, NULL, 3), DSV4_OK);
  assert_int_equal(dsv4i_engram_history_append(h, badtok, NULL, 3), DSV4_ERR_INVALID_TOKEN);
  assert_int_equal(dsv4i_engram_history_append(h, neg, NULL, 1), DSV4_ERR_INVALID_TOKEN);
  assert_int_equal(dsv4i_engram_history_len(h), 3); /* no state change */
  const uint8_t img[1] = {1};
  assert_int_equal(dsv4i_engram_history_append(h, neg, img, 1), DSV4_OK); /* image: id unused */
  int64_t out[24];
  assert_int_equal(dsv4i_engram_history_row_ids(h, 3, 5, -1, out), DSV4_ERR_INVALID_ARG);
  assert_int_equal(dsv4i_engram_history_row_ids(h, 2, 1, -1, out), DSV4_ERR_INVALID_ARG);
  assert_int_equal(dsv4i_engram_history_row_ids(h, -1, 1, -1, out), DSV4_ERR_INVALID_ARG);
  assert_int_equal(dsv4i_engram_history_row_ids(h, 0, 1, 2, out), DSV4_ERR_INVALID_ARG);
  assert_int_equal(dsv4i_engram_history_row_ids(h, 4, 4, -1, NULL), DSV4_OK); /* empty range */
  assert_int_equal(dsv4i_engram_history_truncate(h, 5), DSV4_ERR_INVALID_ARG);
  assert_int_equal(dsv4i_engram_history_truncate(h, -1), DSV4_ERR_INVALID_ARG);
  assert_int_equal(dsv4i_engram_history_len(h), 4);
  dsv4i_engram_history_free(h);
  dsv4i_engram_history_free(NULL);
  dsv4i_engram_tables_free(t);
  dsv4i_engram_tables_free(NULL);
}

int tu_run_suite(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(is_prime_matches_sieve_and_known_values),
    cmocka_unit_test(real_config_primes),
    cmocka_unit_test(real_config_multipliers_match_spec),
    cmocka_unit_test(real_config_tables_from_map),
    cmocka_unit_test(normaliser_matches_reference_chain),
    cmocka_unit_test(normaliser_rules),
/* one case per fixture, named test/fixture */
#define FX_TEST(fn, setup, fxname) {#fn "/" fxname, fn, setup, fx_teardown, NULL}
#define FX_TESTS(setup, fxname)                                                      \
    FX_TEST(fx_tables_equal_goldens, setup, fxname),                                 \
    FX_TEST(fx_token_map_from_tokenizer, setup, fxname),                             \
    FX_TEST(fx_row_ids_equal_golden, setup, fxname),                                 \
    FX_TEST(fx_truncate_and_fork, setup, fxname),                                    \
    FX_TEST(fx_dead_positions_match_reference_formula, setup, fxname),               \
    FX_TEST(fx_bad_inputs_are_statuses, setup, fxname)
    FX_TESTS(fx_setup_a, "tiny-v41-a"),
    FX_TESTS(fx_setup_e2e, "tiny-v41-e2e-a"),
  };
  return cmocka_run_group_tests_name("engram_hash", tests, NULL, NULL);
}

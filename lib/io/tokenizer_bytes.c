/* Byte-level alphabet (GPT-2 bytes_to_unicode) and UTF-8 helpers for the
 * tokenizer. See tokenizer_internal.h. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "io/tokenizer_internal.h"

/* GPT-2's rule: the printable bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF stand
 * for themselves; every other byte b, in increasing order, gets 256 + n where
 * n counts the non-printable bytes before it. */
static int is_printable_byte(unsigned b) {
  return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

static uint32_t g_b2c[256];
static int16_t g_c2b[512];
static pthread_once_t g_alpha_once = PTHREAD_ONCE_INIT;

static void alphabet_init(void) {
  uint32_t n = 0;
  for (unsigned i = 0; i < 512; i++) g_c2b[i] = -1;
  for (unsigned b = 0; b < 256; b++) {
    g_b2c[b] = is_printable_byte(b) ? b : 256 + n++;
    g_c2b[g_b2c[b]] = (int16_t)b;
  }
}

uint32_t dsv4i_tk_byte_to_cp(uint8_t b) {
  pthread_once(&g_alpha_once, alphabet_init);
  return g_b2c[b];
}

int dsv4i_tk_cp_to_byte(uint32_t cp) {
  pthread_once(&g_alpha_once, alphabet_init);
  return cp < 512 ? g_c2b[cp] : -1;
}

size_t dsv4i_tk_utf8_put(uint32_t cp, char *o) {
  if (cp < 0x80) {
    o[0] = (char)cp;
    return 1;
  }
  if (cp < 0x800) {
    o[0] = (char)(0xC0 | (cp >> 6));
    o[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    o[0] = (char)(0xE0 | (cp >> 12));
    o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[2] = (char)(0x80 | (cp & 0x3F));
    return 3;
  }
  o[0] = (char)(0xF0 | (cp >> 18));
  o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
  o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
  o[3] = (char)(0x80 | (cp & 0x3F));
  return 4;
}

/* Length of the valid sequence announced by lead byte b, and the allowed
 * range of its second byte (Unicode Table 3-7); 0 for a byte that cannot
 * start a sequence. */
static int seq_info(uint8_t b, uint8_t *lo, uint8_t *hi) {
  *lo = 0x80;
  *hi = 0xBF;
  if (b < 0x80) return 1;
  if (b >= 0xC2 && b <= 0xDF) return 2;
  if (b == 0xE0) { *lo = 0xA0; return 3; }
  if (b == 0xED) { *hi = 0x9F; return 3; }
  if (b >= 0xE1 && b <= 0xEF) return 3;
  if (b == 0xF0) { *lo = 0x90; return 4; }
  if (b == 0xF4) { *hi = 0x8F; return 4; }
  if (b >= 0xF1 && b <= 0xF3) return 4;
  return 0;
}

/* Length of the valid sequence at s (1..4), or -k when only the first k
 * bytes (k >= 1) form a valid prefix: the maximal invalid subpart. *trunc is
 * set when the prefix stopped at the end of the input. */
static int seq_at(const uint8_t *s, size_t len, int *trunc) {
  uint8_t lo, hi;
  int n = seq_info(s[0], &lo, &hi);
  *trunc = 0;
  if (n == 0) return -1;
  for (int k = 1; k < n; k++) {
    if ((size_t)k >= len) {
      *trunc = 1;
      return -k;
    }
    uint8_t c = s[k];
    uint8_t l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (c < l || c > h) return -k;
  }
  return n;
}

size_t dsv4i_tk_utf8_check(const char *str, size_t len, const char **what) {
  const uint8_t *s = (const uint8_t *)str;
  size_t i = 0;
  *what = NULL;
  while (i < len) {
    if (s[i] == 0) {
      *what = "NUL byte";
      return i;
    }
    if (s[i] < 0x80) {
      i++;
      continue;
    }
    int trunc;
    int n = seq_at(s + i, len - i, &trunc);
    if (n < 0) {
      uint8_t b = s[i];
      if (trunc) *what = "truncated sequence at the end of the text";
      else if (b >= 0x80 && b <= 0xBF) *what = "unexpected continuation byte";
      else if (b == 0xC0 || b == 0xC1 || (b == 0xE0 && len - i > 1 && s[i + 1] < 0xA0) ||
               (b == 0xF0 && len - i > 1 && s[i + 1] < 0x90))
        *what = "overlong encoding";
      else if (b == 0xED && len - i > 1 && s[i + 1] >= 0xA0) *what = "UTF-16 surrogate";
      else if (b >= 0xF8) *what = "a byte that never appears in UTF-8 (0xF8..0xFF)";
      else if (b >= 0xF5 || (b == 0xF4 && len - i > 1 && s[i + 1] >= 0x90))
        *what = "code point above U+10FFFF";
      else *what = "invalid or truncated sequence";
      return i;
    }
    i += (size_t)n;
  }
  return len;
}

uint32_t dsv4i_tk_utf8_get(const char *str, size_t len, size_t *n) {
  const uint8_t *s = (const uint8_t *)str;
  uint8_t b = s[0];
  if (b < 0x80 || len < 2) {
    *n = 1;
    return b;
  }
  if (b < 0xE0) {
    *n = 2;
    return ((uint32_t)(b & 0x1F) << 6) | (s[1] & 0x3F);
  }
  if (b < 0xF0 || len < 4) {
    *n = 3;
    return ((uint32_t)(b & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
  }
  *n = 4;
  return ((uint32_t)(b & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) |
         ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
}

size_t dsv4i_tk_utf8_lossy_append(const char *str, size_t len, int hold_tail, dsv4i_str *out) {
  if (len == 0) return 0; /* str may be NULL (nothing decoded): no pointer arithmetic on it */
  static const char repl[3] = {(char)0xEF, (char)0xBF, (char)0xBD};
  const uint8_t *s = (const uint8_t *)str;
  size_t i = 0, run = 0; /* run: start of the pending valid stretch */
  while (i < len) {
    if (s[i] < 0x80) {
      i++;
      continue;
    }
    int trunc;
    int n = seq_at(s + i, len - i, &trunc);
    if (n > 0) {
      i += (size_t)n;
      continue;
    }
    dsv4i_str_append(out, s + run, i - run);
    if (trunc && hold_tail) return i;
    dsv4i_str_append(out, repl, sizeof repl);
    i += (size_t)(-n);
    run = i;
  }
  dsv4i_str_append(out, s + run, i - run);
  return len;
}

/* File helpers; see gen_files.h. */
#include "gen_files.h"

#include <dirent.h>
#include <errno.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int gen_exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

dsv4_status gen_remove_matching(const char *dir, const char *pattern) {
  DIR *d = opendir(dir);
  if (!d && errno == ENOENT) return DSV4_OK;
  if (!d) return dsv4i_error(DSV4_ERR_IO, "cannot list %s: %s", dir, strerror(errno));
  dsv4_status s = DSV4_OK;
  struct dirent *e;
  while (s == DSV4_OK && (e = readdir(d)) != NULL) {
    if (fnmatch(pattern, e->d_name, 0) != 0) continue;
    char *p = dsv4i_path_join(dir, e->d_name);
    struct stat st;
    if (!p) s = DSV4_ERR_OUT_OF_MEMORY;
    else if (lstat(p, &st) == 0 && S_ISREG(st.st_mode) && unlink(p) != 0)
      s = dsv4i_error(DSV4_ERR_IO, "cannot remove %s: %s", p, strerror(errno));
    free(p);
  }
  closedir(d);
  return s;
}

dsv4_status gen_mkdirs(const char *path) {
  char *p = dsv4i_strdup(path, "path");
  if (!p) return DSV4_ERR_OUT_OF_MEMORY;
  dsv4_status s = DSV4_OK;
  for (char *c = p + 1;; c++) {
    if (*c != '/' && *c != '\0') continue;
    char keep = *c;
    *c = '\0';
    if (mkdir(p, 0777) != 0 && errno != EEXIST)
      s = dsv4i_error(DSV4_ERR_IO, "cannot create directory %s: %s", p, strerror(errno));
    *c = keep;
    if (s || keep == '\0') break;
  }
  free(p);
  return s;
}

dsv4_status gen_write_file(const char *dir, const char *name, const void *data, size_t len) {
  char *path = dsv4i_path_join(dir, name);
  if (!path) return DSV4_ERR_OUT_OF_MEMORY;
  dsv4_status s = DSV4_OK;
  FILE *f = fopen(path, "wb");
  if (!f) {
    s = dsv4i_error(DSV4_ERR_IO, "cannot create %s: %s", path, strerror(errno));
  } else {
    int bad = fwrite(data, 1, len, f) != len;
    bad |= fclose(f) != 0;
    if (bad) s = dsv4i_error(DSV4_ERR_IO, "cannot write %s: %s", path, strerror(errno));
  }
  free(path);
  return s;
}

dsv4_status gen_copy_file(const char *src_dir, const char *dst_dir, const char *name) {
  char *src = dsv4i_path_join(src_dir, name), *dst = dsv4i_path_join(dst_dir, name);
  dsv4_status s = DSV4_OK;
  FILE *in = NULL, *out = NULL;
  if (!src || !dst) {
    s = DSV4_ERR_OUT_OF_MEMORY;
    goto done;
  }
  if (!(in = fopen(src, "rb"))) {
    s = dsv4i_error(errno == ENOENT ? DSV4_ERR_NOT_FOUND : DSV4_ERR_IO, "cannot open %s: %s", src,
                    strerror(errno));
    goto done;
  }
  if (!(out = fopen(dst, "wb"))) {
    s = dsv4i_error(DSV4_ERR_IO, "cannot create %s: %s", dst, strerror(errno));
    goto done;
  }
  char buf[1 << 16];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, in)) > 0)
    if (fwrite(buf, 1, n, out) != n) break;
  if (ferror(in) || ferror(out)) s = dsv4i_error(DSV4_ERR_IO, "cannot copy %s to %s", src, dst);
done:
  if (in) fclose(in);
  if (out && fclose(out) != 0 && !s) s = dsv4i_error(DSV4_ERR_IO, "cannot write %s", dst);
  free(src);
  free(dst);
  return s;
}

/* Small file helpers of the generator: directories, whole files, copies. */
#ifndef DSV4_GEN_FILES_H
#define DSV4_GEN_FILES_H

#include <stddef.h>

#include "base/base.h"

/** mkdir -p (mode 0777 & umask). DSV4_ERR_IO with the path on failure. */
dsv4_status gen_mkdirs(const char *path);
/** Create/truncate dir/name and write len bytes. */
dsv4_status gen_write_file(const char *dir, const char *name, const void *data, size_t len);
/** Copy src_dir/name to dst_dir/name; missing source: DSV4_ERR_NOT_FOUND. */
dsv4_status gen_copy_file(const char *src_dir, const char *dst_dir, const char *name);
/**
 * Remove the regular files of dir whose names match the fnmatch(3) pattern
 * (stale shards of an earlier run). A missing dir is not an error.
 */
dsv4_status gen_remove_matching(const char *dir, const char *pattern);
/** 1 if path exists (any type). */
int gen_exists(const char *path);

#endif /* DSV4_GEN_FILES_H */

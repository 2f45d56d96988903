/*
 * safetensors shards (mmap, validated header) and checkpoint directories
 * (model.safetensors.index.json + shards), spec §4.1. Also a streaming
 * writer used by the checkpoint generator and the tests.
 */
#ifndef DSV4I_SAFETENSORS_H
#define DSV4I_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

#define DSV4I_MAX_DIMS 8

/** Bytes per element of a DSV4_DTYPE_* (0 for unknown). */
size_t dsv4i_dtype_size(int32_t dtype);
/** safetensors dtype string ("BF16", ...) -> DSV4_DTYPE_*; 0 if unknown. */
int32_t dsv4i_dtype_from_string(const char *s);
/** DSV4_DTYPE_* -> safetensors dtype string; "?" if unknown. */
const char *dsv4i_dtype_name(int32_t dtype);

typedef struct dsv4i_st_tensor {
  char *name;
  int32_t dtype;            /* DSV4_DTYPE_* */
  int32_t ndim;
  int64_t shape[DSV4I_MAX_DIMS];
  uint64_t offset;          /* absolute byte offset in the file */
  uint64_t nbytes;
} dsv4i_st_tensor;

typedef struct dsv4i_st_file {
  char *path;
  const uint8_t *map;       /* read-only mapping of the whole file (NULL if size 0) */
  uint64_t size;
  uint64_t data_start;      /* 8 + header length */
  dsv4i_st_tensor *tensors; /* in header order */
  size_t n_tensors;
  char *metadata_json;      /* "__metadata__" re-serialised, or NULL */
} dsv4i_st_file;

/**
 * Map and validate one shard: header length inside the file, header a JSON
 * object of {dtype, shape, data_offsets}, known dtypes, offsets inside the
 * data area and non-overlapping, nbytes == prod(shape) * dtype size, unique
 * names. Statuses: DSV4_ERR_IO/NOT_FOUND, DSV4_ERR_ST_*, DSV4_ERR_JSON
 * (header JSON does not parse), DSV4_ERR_OUT_OF_MEMORY. Message names the
 * file and the tensor. On failure *out is zeroed and nothing is held.
 */
dsv4_status dsv4i_st_open(const char *path, dsv4i_st_file *out);
void dsv4i_st_close(dsv4i_st_file *f);
static inline const void *dsv4i_st_data(const dsv4i_st_file *f, const dsv4i_st_tensor *t) {
  return f->map + t->offset;
}
/** Linear search by name (shard-local); NULL if absent. */
const dsv4i_st_tensor *dsv4i_st_find(const dsv4i_st_file *f, const char *name);

/* ---- checkpoint directory ---------------------------------------------- */

typedef struct dsv4i_ckpt_entry {
  const char *name;            /* borrowed from the shard's tensor */
  int32_t shard;
  const dsv4i_st_tensor *t;
} dsv4i_ckpt_entry;

typedef struct dsv4i_checkpoint {
  char *dir;
  dsv4i_st_file *shards;
  int32_t n_shards;
  dsv4i_ckpt_entry *entries;   /* sorted by name (strcmp) */
  size_t n_entries;
  uint64_t payload_bytes;      /* sum of nbytes */
} dsv4i_checkpoint;

/**
 * Open a checkpoint directory: model.safetensors.index.json (weight_map;
 * every shard it names must exist; every entry must name a tensor that is in
 * that shard; every shard tensor must be in the index) or, without an index,
 * a single model.safetensors. Names are unique across shards. Statuses:
 * those of dsv4i_st_open plus DSV4_ERR_INDEX, DSV4_ERR_MISSING_SHARD,
 * DSV4_ERR_INDEX_MISMATCH, DSV4_ERR_ST_DUPLICATE, DSV4_ERR_NOT_FOUND.
 */
dsv4_status dsv4i_checkpoint_open(const char *dir, dsv4i_checkpoint *out);
void dsv4i_checkpoint_close(dsv4i_checkpoint *c);
/** Binary search by name; NULL if absent. */
const dsv4i_ckpt_entry *dsv4i_checkpoint_find(const dsv4i_checkpoint *c, const char *name);
static inline const void *dsv4i_checkpoint_data(const dsv4i_checkpoint *c, const dsv4i_ckpt_entry *e) {
  return dsv4i_st_data(&c->shards[e->shard], e->t);
}

/* ---- streaming writer ----------------------------------------------------
 * Declare every tensor first (the header needs all offsets), then write the
 * payloads in declaration order, in as many pieces as convenient. */
typedef struct dsv4i_st_writer dsv4i_st_writer;

dsv4_status dsv4i_st_writer_create(const char *path, dsv4i_st_writer **out);
dsv4_status dsv4i_st_writer_declare(dsv4i_st_writer *w, const char *name, int32_t dtype,
                                    int32_t ndim, const int64_t *shape);
/** Writes the header; after it only dsv4i_st_writer_write. */
dsv4_status dsv4i_st_writer_begin_data(dsv4i_st_writer *w);
dsv4_status dsv4i_st_writer_write(dsv4i_st_writer *w, const void *data, size_t n);
/** Checks that exactly the declared bytes were written, closes the file, frees w. */
dsv4_status dsv4i_st_writer_finish(dsv4i_st_writer *w);
/** Abandon (removes nothing); frees w. NULL ok. */
void dsv4i_st_writer_abort(dsv4i_st_writer *w);

#endif /* DSV4I_SAFETENSORS_H */

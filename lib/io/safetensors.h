/*
 * safetensors shards (mmap, validated header) and checkpoint directories
 * (model.safetensors.index.json + shards), spec §4.1. Also a streaming
 * writer used by the checkpoint generator and the tests.
 *
 * Shard layout: u64 little-endian N | N bytes of JSON header | data area.
 * The data area is every byte after the header; data_offsets are relative to
 * it. The reader maps the whole file read-only and validates the header only:
 * it never reads the data area (real shards are ~100 GB).
 *
 * Validation rules, one status each (the message names the file and, where
 * there is one, the tensor):
 *   file shorter than 8 bytes (size 0 included)             DSV4_ERR_ST_TRUNCATED
 *   N past the end of the file, or N > 100,000,000 (the
 *   official reader's limit)                                DSV4_ERR_ST_HEADER
 *   header text does not parse                              DSV4_ERR_JSON
 *   a key twice in one JSON object (tensor names)           DSV4_ERR_ST_DUPLICATE
 *   header not an object; an entry not an object, without
 *   dtype/shape/data_offsets, or with wrong JSON types
 *   (dtype not a string, shape/data_offsets not arrays of
 *   integers); __metadata__ not an object of strings        DSV4_ERR_ST_HEADER
 *   dtype string unknown                                    DSV4_ERR_ST_DTYPE
 *   more than DSV4I_MAX_DIMS dimensions                     DSV4_ERR_UNSUPPORTED
 *   data_offsets not two values, a negative value,
 *   begin > end, or end past the data area                  DSV4_ERR_ST_OFFSETS
 *   a negative dimension, or end - begin != prod(shape) x
 *   dtype size (also when the product overflows)            DSV4_ERR_ST_SIZE
 *   two byte ranges overlap (sorted by begin, end)          DSV4_ERR_ST_OVERLAP
 *   a gap in the data area, or bytes after the last range  DSV4_ERR_ST_OFFSETS
 * A data area shorter than the largest end offset (a truncated download) is
 * DSV4_ERR_ST_OFFSETS ("end past the data area"): DSV4_ERR_ST_TRUNCATED is
 * only the file too short to hold the header length. Sorted by (begin, end),
 * the ranges must tile the data area exactly, as in the reference reader: a
 * range starting before the previous one ends is DSV4_ERR_ST_OVERLAP, a gap
 * (before the first range, between two, or bytes after the last) is
 * DSV4_ERR_ST_OFFSETS naming the gap. Tensors need not be aligned to their
 * element size; unknown keys in an entry are ignored; "__metadata__": null
 * reads as absent (all as the reference reader does). Refused on purpose
 * although the reference reads them: safetensors dtypes no model tensor uses
 * (U8, BOOL, F4, ...: DSV4_ERR_ST_DTYPE, "the model never uses"), more than
 * DSV4I_MAX_DIMS dimensions, and a repeated key (the reference keeps the last
 * one silently). tests/data/safetensors-reference holds vectors with the
 * reference's verdicts. Checks run in the order above per entry, entries in
 * header order, then the coverage; the first violation is reported.
 */
#ifndef DSV4I_SAFETENSORS_H
#define DSV4I_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

#define DSV4I_MAX_DIMS 8

/** Bytes per element of a DSV4_DTYPE_* (0 for unknown). Thread-safe. */
size_t dsv4i_dtype_size(int32_t dtype);
/** safetensors dtype string ("BF16", ...) -> DSV4_DTYPE_*; 0 if unknown or NULL. */
int32_t dsv4i_dtype_from_string(const char *s);
/** DSV4_DTYPE_* -> safetensors dtype string; "?" if unknown. Static string. */
const char *dsv4i_dtype_name(int32_t dtype);

typedef struct dsv4i_st_tensor {
  char *name;               /* owned by the dsv4i_st_file (one block with the table) */
  int32_t dtype;            /* DSV4_DTYPE_* */
  int32_t ndim;
  int64_t shape[DSV4I_MAX_DIMS];
  uint64_t offset;          /* absolute byte offset in the file */
  uint64_t nbytes;
} dsv4i_st_tensor;

typedef struct dsv4i_st_file {
  char *path;
  const uint8_t *map;       /* read-only mapping of the whole file (NULL if not mapped) */
  uint64_t size;
  uint64_t data_start;      /* 8 + header length */
  dsv4i_st_tensor *tensors; /* in header order */
  size_t n_tensors;
  char *metadata_json;      /* "__metadata__" re-serialised (compact), or NULL */
  int borrowed;             /* map is the caller's buffer (dsv4i_st_parse): not unmapped */
} dsv4i_st_file;

/**
 * Map and validate one shard (rules at the top of this file). The fd is
 * closed once the file is mapped (MAP_PRIVATE, PROT_READ).
 * @param path [in] the file; kept (copied) in out->path and used in messages.
 * @param out  [out] zeroed first; filled on success. Close with dsv4i_st_close.
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG (NULL); DSV4_ERR_NOT_FOUND (no such
 *         file); DSV4_ERR_IO (open/stat/mmap failed, not a regular file);
 *         DSV4_ERR_ST_*, DSV4_ERR_JSON, DSV4_ERR_UNSUPPORTED (see the rules);
 *         DSV4_ERR_OUT_OF_MEMORY. On failure *out is zeroed and nothing is held.
 */
dsv4_status dsv4i_st_open(const char *path, dsv4i_st_file *out);
/**
 * The same validation on a shard already in memory (buf, size bytes; borrowed,
 * must outlive *out). `name` stands for the path in messages. Statuses of
 * dsv4i_st_open minus the file ones. The fuzz target's entry.
 */
dsv4_status dsv4i_st_parse(const char *name, const uint8_t *buf, size_t size, dsv4i_st_file *out);
/** Unmap and free; leaves *f zeroed. A zeroed or NULL f is a no-op. */
void dsv4i_st_close(dsv4i_st_file *f);
/** Pointer to a tensor's bytes inside the mapping (pages load on first touch). */
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
  void *copy;                  /* owned aligned copy when the mapped bytes are not
                                  aligned to the element size; else NULL */
} dsv4i_ckpt_entry;

typedef struct dsv4i_checkpoint {
  char *dir;
  dsv4i_st_file *shards;       /* indexed mode: sorted by shard file name */
  int32_t n_shards;
  dsv4i_ckpt_entry *entries;   /* sorted by name (strcmp) */
  size_t n_entries;
  uint64_t payload_bytes;      /* sum of nbytes */
  size_t n_realigned;          /* entries with a copy */
  uint64_t realigned_bytes;    /* bytes of those copies (64-byte rounded) */
} dsv4i_checkpoint;

/**
 * Open a checkpoint directory. With model.safetensors.index.json: its
 * {"metadata":{"total_size":N}, "weight_map":{tensor: shard}} is parsed
 * (metadata and total_size optional; total_size an integer, an integral
 * JSON real such as 24.0 is accepted), every shard it
 * names is opened (shard files it does not name are ignored), every entry
 * must name a tensor that is in that shard, every tensor of those shards must
 * be in the index, and total_size must equal the summed payload bytes.
 * Without an index, a single model.safetensors. Names are unique across shards.
 * Tensors not aligned to their element size in the file are copied once
 * into aligned memory (n_realigned, realigned_bytes); the rest stay mapped.
 *
 * @param dir [in] the directory; copied into out->dir.
 * @param out [out] zeroed first; filled on success. Close with dsv4i_checkpoint_close.
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG (NULL);
 *         DSV4_ERR_NOT_FOUND (dir absent, or neither the index nor model.safetensors);
 *         DSV4_ERR_IO (dir not a directory, stat/read failure);
 *         DSV4_ERR_JSON (index does not parse);
 *         DSV4_ERR_INDEX (index not an object, no weight_map object or an empty one,
 *           a non-string shard, a shard name that is empty or contains '/' or "..",
 *           metadata not an object, total_size not a non-negative integer,
 *           a key repeated in one object);
 *         DSV4_ERR_MISSING_SHARD (a named shard file does not exist);
 *         DSV4_ERR_INDEX_MISMATCH (an entry's tensor is not in its shard, a shard
 *           tensor is not in the index, total_size differs from the payload bytes);
 *         DSV4_ERR_ST_DUPLICATE (a tensor in two shards);
 *         every status of dsv4i_st_open for a shard; DSV4_ERR_OUT_OF_MEMORY.
 *         On failure *out is zeroed and nothing is held or mapped.
 */
dsv4_status dsv4i_checkpoint_open(const char *dir, dsv4i_checkpoint *out);
/**
 * The index checks that need no shard, on the text of an index (len bytes;
 * `name` stands for the path in messages): JSON, structure, metadata, shard
 * names. DSV4_OK or the index statuses of dsv4i_checkpoint_open. The fuzz
 * target's entry.
 */
dsv4_status dsv4i_index_check_text(const char *name, const char *buf, size_t len);
/** Close every shard and free; leaves *c zeroed. A zeroed or NULL c is a no-op. */
void dsv4i_checkpoint_close(dsv4i_checkpoint *c);
/** Binary search by name; NULL if absent. */
const dsv4i_ckpt_entry *dsv4i_checkpoint_find(const dsv4i_checkpoint *c, const char *name);
/** Pointer to an entry's bytes: its aligned copy, else inside its shard's mapping. */
static inline const void *dsv4i_checkpoint_data(const dsv4i_checkpoint *c, const dsv4i_ckpt_entry *e) {
  if (e->copy) return e->copy;
  return dsv4i_st_data(&c->shards[e->shard], e->t);
}

/* ---- streaming writer ----------------------------------------------------
 * Declare every tensor first (the header needs all offsets), then write the
 * payloads in declaration order, in as many pieces as convenient (pieces may
 * span tensors). Payload bytes go straight to the file descriptor: nothing
 * is buffered, so multi-GB files cost no memory. The header lists the
 * tensors in declaration order with contiguous data_offsets from 0 and is
 * padded with spaces so the data area starts at a multiple of 8 (as the
 * official writer does); offsets are not aligned further.
 * Errors from a failed write(2) are sticky: every later call returns
 * DSV4_ERR_IO. Misuse (wrong phase, bad arguments) changes nothing. */
typedef struct dsv4i_st_writer dsv4i_st_writer;

/**
 * Create (truncate) the file at path.
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG (NULL); DSV4_ERR_IO (open failed);
 *         DSV4_ERR_OUT_OF_MEMORY. *out is NULL on failure.
 */
dsv4_status dsv4i_st_writer_create(const char *path, dsv4i_st_writer **out);
/**
 * Declare the next tensor (before dsv4i_st_writer_begin_data).
 * @param name  non-empty UTF-8, not "__metadata__"; copied.
 * @param ndim  0..DSV4I_MAX_DIMS; shape[ndim] dims >= 0 (shape may be NULL if ndim is 0).
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG (wrong phase, bad name, dtype, ndim or
 *         dim, byte size overflows); DSV4_ERR_OUT_OF_MEMORY. Nothing changes on failure.
 */
dsv4_status dsv4i_st_writer_declare(dsv4i_st_writer *w, const char *name, int32_t dtype,
                                    int32_t ndim, const int64_t *shape);
/**
 * Add a "__metadata__" string entry (e.g. "format" -> "pt"), before
 * dsv4i_st_writer_begin_data; a repeated key replaces the value.
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG (wrong phase, NULL, not UTF-8);
 *         DSV4_ERR_OUT_OF_MEMORY.
 */
dsv4_status dsv4i_st_writer_set_metadata(dsv4i_st_writer *w, const char *key, const char *value);
/**
 * Write the header; after it only dsv4i_st_writer_write and _finish.
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG (called twice); DSV4_ERR_ST_DUPLICATE
 *         (a name declared twice; nothing written); DSV4_ERR_IO (sticky);
 *         DSV4_ERR_OUT_OF_MEMORY.
 */
dsv4_status dsv4i_st_writer_begin_data(dsv4i_st_writer *w);
/**
 * Append n payload bytes (the next bytes in declaration order).
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG (before begin_data, data NULL with n > 0);
 *         DSV4_ERR_ST_SIZE (more than the declared total; nothing written);
 *         DSV4_ERR_IO (write failed; sticky).
 */
dsv4_status dsv4i_st_writer_write(dsv4i_st_writer *w, const void *data, size_t n);
/**
 * Write the header if begin_data was not called, check that exactly the
 * declared bytes were written, close the file and free w (always, whatever
 * the status). On failure the partial file is left in place.
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG (w NULL); DSV4_ERR_ST_SIZE (fewer bytes
 *         than declared; the message names the first incomplete tensor);
 *         DSV4_ERR_IO (an earlier write or close failed); those of begin_data.
 */
dsv4_status dsv4i_st_writer_finish(dsv4i_st_writer *w);
/** Abandon: close the file (left in place, possibly partial) and free w. NULL ok. */
void dsv4i_st_writer_abort(dsv4i_st_writer *w);

#endif /* DSV4I_SAFETENSORS_H */

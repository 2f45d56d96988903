/*
 * Exported entry points that need no handle: statuses, errors, version,
 * build info, memory, logging, backend probe. Argument checks and error
 * capture only; the work is done in the library's parts.
 */
#include <stdlib.h>

#include "base/base.h"
#include "dsv4/dsv4.h"
#include "gpu/cuda.h"

#ifndef DSV4_BUILD_CUDA
#define DSV4_BUILD_CUDA "none"
#endif

void dsv4i_log_set_global(dsv4_log_fn fn, void *user_data, int32_t max_level);

DSV4_API const char *dsv4_status_string(dsv4_status status) {
  switch (status) {
  case DSV4_OK: return "DSV4_OK: success";
  case DSV4_KV_FULL: return "DSV4_KV_FULL: the KV cache pools cannot hold the step (nothing changed)";
  case DSV4_ABORTED: return "DSV4_ABORTED: stopped by a callback";
  case DSV4_ERR_INVALID_ARG: return "DSV4_ERR_INVALID_ARG: invalid argument";
  case DSV4_ERR_OUT_OF_MEMORY: return "DSV4_ERR_OUT_OF_MEMORY: out of host memory";
  case DSV4_ERR_UNSUPPORTED: return "DSV4_ERR_UNSUPPORTED: not supported by this build or device";
  case DSV4_ERR_INTERNAL: return "DSV4_ERR_INTERNAL: internal error (a libdsv4 bug)";
  case DSV4_ERR_PARAMS_SIZE: return "DSV4_ERR_PARAMS_SIZE: params struct_size too small";
  case DSV4_ERR_IO: return "DSV4_ERR_IO: file read, stat or mmap failed";
  case DSV4_ERR_NOT_FOUND: return "DSV4_ERR_NOT_FOUND: required file not found";
  case DSV4_ERR_JSON: return "DSV4_ERR_JSON: JSON does not parse";
  case DSV4_ERR_ST_HEADER: return "DSV4_ERR_ST_HEADER: safetensors header malformed";
  case DSV4_ERR_ST_TRUNCATED: return "DSV4_ERR_ST_TRUNCATED: safetensors file truncated";
  case DSV4_ERR_ST_DTYPE: return "DSV4_ERR_ST_DTYPE: unknown safetensors dtype";
  case DSV4_ERR_ST_OFFSETS: return "DSV4_ERR_ST_OFFSETS: tensor data_offsets malformed, outside the data area, or leaving a gap";
  case DSV4_ERR_ST_OVERLAP: return "DSV4_ERR_ST_OVERLAP: tensor byte ranges overlap";
  case DSV4_ERR_ST_SIZE: return "DSV4_ERR_ST_SIZE: tensor byte size differs from its shape and dtype";
  case DSV4_ERR_ST_DUPLICATE: return "DSV4_ERR_ST_DUPLICATE: duplicate tensor name";
  case DSV4_ERR_INDEX: return "DSV4_ERR_INDEX: model.safetensors.index.json malformed";
  case DSV4_ERR_MISSING_SHARD: return "DSV4_ERR_MISSING_SHARD: a shard named by the index is missing";
  case DSV4_ERR_INDEX_MISMATCH: return "DSV4_ERR_INDEX_MISMATCH: index and shards disagree";
  case DSV4_ERR_CONFIG_KEY: return "DSV4_ERR_CONFIG_KEY: config key missing or of the wrong type";
  case DSV4_ERR_CONFIG_VALUE: return "DSV4_ERR_CONFIG_VALUE: config value out of range or inconsistent";
  case DSV4_ERR_WEIGHTS: return "DSV4_ERR_WEIGHTS: checkpoint tensors differ from the model contract";
  case DSV4_ERR_TOKENIZER: return "DSV4_ERR_TOKENIZER: tokenizer.json unusable";
  case DSV4_ERR_INVALID_UTF8: return "DSV4_ERR_INVALID_UTF8: text is not valid UTF-8";
  case DSV4_ERR_UNKNOWN_SEQUENCE: return "DSV4_ERR_UNKNOWN_SEQUENCE: no such sequence";
  case DSV4_ERR_CONTEXT_OVERFLOW: return "DSV4_ERR_CONTEXT_OVERFLOW: maximum context exceeded";
  case DSV4_ERR_INVALID_TOKEN: return "DSV4_ERR_INVALID_TOKEN: token id outside the vocabulary";
  case DSV4_ERR_DOES_NOT_FIT: return "DSV4_ERR_DOES_NOT_FIT: the memory plan cannot hold the request";
  case DSV4_ERR_NOT_FINITE: return "DSV4_ERR_NOT_FINITE: the logits are not finite (NaN or +inf): no token can be drawn";
  case DSV4_ERR_NO_DEVICE: return "DSV4_ERR_NO_DEVICE: no usable NVIDIA driver or GPU";
  case DSV4_ERR_DEVICE: return "DSV4_ERR_DEVICE: a device library call failed";
  case DSV4_ERR_DEVICE_LOST: return "DSV4_ERR_DEVICE_LOST: GPU context lost; free the handle";
  case DSV4_ERR_RANK_MISMATCH: return "DSV4_ERR_RANK_MISMATCH: the ranks of a distributed engine disagree";
  case DSV4_ERR_RANK_FAILED: return "DSV4_ERR_RANK_FAILED: another rank failed or did not answer in time";
  default: return "unknown status";
  }
}

DSV4_API const char *dsv4_last_error(void) { return dsv4i_error_message(); }

DSV4_API uint32_t dsv4_version(void) { return DSV4_VERSION_NUMBER; }

DSV4_API const char *dsv4_version_string(void) { return DSV4_VERSION_STRING; }

DSV4_API const char *dsv4_build_info(void) {
  return "libdsv4 " DSV4_VERSION_STRING
#if defined(__clang__)
         "; compiler clang " __clang_version__
#elif defined(__GNUC__)
         "; compiler gcc " __VERSION__
#endif
         "; cuda ptx " DSV4_BUILD_CUDA
#ifdef _OPENMP
         "; openmp yes"
#else
         "; openmp no"
#endif
#ifdef DSV4_HAVE_MPI
         "; mpi yes"
#else
         "; mpi no"
#endif
         "; nccl run-time (dlopen)";
}

DSV4_API void dsv4_free(void *ptr) { free(ptr); }

DSV4_API void dsv4_log_set(dsv4_log_fn fn, void *user_data, int32_t max_level) {
  dsv4i_log_set_global(fn, user_data, max_level);
}

DSV4_API dsv4_status dsv4_backend_probe(int32_t backend, int32_t device) {
  dsv4i_error_clear();
  switch (backend) {
  case DSV4_BACKEND_CPU: return DSV4_OK;
  case DSV4_BACKEND_CUDA:
    if (device < 0) return dsv4i_error(DSV4_ERR_INVALID_ARG, "device %d is negative", (int)device);
    return dsv4i_cuda_probe(device);
  default:
    return dsv4i_error(DSV4_ERR_INVALID_ARG,
                       "unknown backend %d (DSV4_BACKEND_CPU = 1, DSV4_BACKEND_CUDA = 2)", (int)backend);
  }
}

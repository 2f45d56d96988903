/*
 * Helpers shared by the exported engine entry points (api_engine.c and
 * api_spec.c): error capture into the engine's slot, sampling params.
 */
#ifndef DSV4I_API_ENGINE_H
#define DSV4I_API_ENGINE_H

#include <stddef.h>

#include "dsv4/dsv4.h"
#include "engine/engine.h"

/** Oldest accepted dsv4_sampling_params: the 0.1 struct through its last field. */
#define DSV4I_SAMPLING_PARAMS_MIN (offsetof(dsv4_sampling_params, seeds) + sizeof(void *))

/** Copy this thread's message into e's last-error slot when s is an error; returns s. */
dsv4_status dsv4i_api_on_engine(const dsv4_engine *e, dsv4_status s);

/**
 * Public sampling params -> internal form (NULL = greedy). DSV4_ERR_PARAMS_SIZE
 * (struct_size too small), DSV4_ERR_INVALID_ARG (NaN temperature); `fn` names
 * the caller in messages.
 */
dsv4_status dsv4i_api_sampling(const dsv4_sampling_params *sp, dsv4i_sampling *out,
                               const char *fn);

/* Fill a public params struct: check struct_size against [min, UINT32_MAX],
 * zero it, copy the defaults `def` (ours bytes) up to struct_size, stamp the size.
 * fn names the public call in the message. */
dsv4_status dsv4i_api_params_init(void *dst, size_t struct_size, size_t min, const void *def,
                                  size_t ours, const char *fn);

#endif /* DSV4I_API_ENGINE_H */

/*
 * Small formatting helpers shared by the example tools (dsv4-inspect,
 * dsv4-plan). Public API only: the tools link libdsv4 like any user.
 */
#ifndef DSV4_TOOL_UTIL_H
#define DSV4_TOOL_UTIL_H

#include <stddef.h>
#include <stdint.h>

/** v with thousands separators ("1,234,567"; INT64_MAX as "unbounded") into buf; returns buf. */
const char *tool_grouped(int64_t v, char *buf, size_t cap);

/** Human name of a DSV4_COMP_* component ("routed experts", ...); "?" if unknown. */
const char *tool_component_name(int32_t c);

#endif

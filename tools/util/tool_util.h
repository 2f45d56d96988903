/*
 * Helpers shared by the tools (dsv4-generate, dsv4-inspect, dsv4-plan,
 * dsv4-bench): formatting, --version, the installed data. Public API only:
 * the tools link libdsv4 like any user.
 *
 * Exit status of every tool: 0 success, 1 the work failed (a libdsv4 call
 * or a file; the message is on stderr), 2 bad usage (unknown option, bad
 * value); dsv4-plan adds 3: the plan does not fit.
 */
#ifndef DSV4_TOOL_UTIL_H
#define DSV4_TOOL_UTIL_H

#include <stddef.h>
#include <stdint.h>

/** v with thousands separators ("1,234,567"; INT64_MAX as "unbounded") into buf; returns buf. */
const char *tool_grouped(int64_t v, char *buf, size_t cap);

/** Human name of a DSV4_COMP_* component ("routed experts", ...); "?" if unknown. */
const char *tool_component_name(int32_t c);

/** Exit statuses shared by the tools (see above). */
enum { TOOL_EXIT_OK = 0, TOOL_EXIT_FAILED = 1, TOOL_EXIT_USAGE = 2 };

/** Print "TOOL (libdsv4) VERSION" and the library's version and build line to stdout. */
void tool_print_version(const char *tool);

/**
 * Path of a file or folder installed under <datadir>/dsv4 (e.g. "plot.gp",
 * "models/dsv4-tiny") into buf: next to the running program's installed
 * prefix, else `tree` (the build tree's copy, NULL for none), else the
 * configured install prefix. Returns buf, or NULL when none exists.
 */
const char *tool_data_path(const char *rel, const char *tree, char *buf, size_t cap);

/** The default model folder (tool_data_path of "models/dsv4-tiny"), or NULL. */
const char *tool_default_model(char *buf, size_t cap);

#endif

#!/bin/bash
# API reference gate: Doxygen over dsv4.h, dsv4.hpp and docs/api-guide.md
# (docs/Doxyfile) must give zero warnings: every public declaration, struct
# field, enum value and macro documented, every parameter of a documented
# function named. HTML in build/docs/api/html. Time: about 10 s.
set -euo pipefail
mkdir -p build/docs/api
out=$(timeout 120 doxygen docs/Doxyfile 2>&1)
n=$(printf '%s\n' "$out" | grep -c 'warning:' || true)
printf '%s\n' "$out"
echo "doxygen: $n warnings ($(printf '%s\n' "$out" | grep -c 'is not documented' || true) undocumented declarations)"
[ "$n" -eq 0 ]

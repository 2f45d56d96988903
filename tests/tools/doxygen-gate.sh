#!/bin/sh
# API reference gate: Doxygen over dsv4.h, dsv4.hpp and docs/api-guide.md
# (docs/Doxyfile) gives zero warnings: every public declaration, struct field,
# enum value and macro documented, every parameter of a documented function
# named, no malformed markup. HTML into OUT_DIR/html.
# usage: doxygen-gate.sh SOURCE_ROOT OUT_DIR
set -eu
src=$1 out=$2
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$src"
log=$( (cat docs/Doxyfile; echo "OUTPUT_DIRECTORY = $out") | doxygen - 2>&1)
n=$(printf '%s\n' "$log" | grep -c 'warning:' || true)
u=$(printf '%s\n' "$log" | grep -c 'is not documented' || true)
[ -z "$log" ] || printf '%s\n' "$log"
echo "doxygen: $n warnings ($u undocumented declarations); HTML in $out/html"
[ "$n" -eq 0 ]

#!/bin/sh
# SM80 resources of every embedded PTX module, without a GPU:
# `ptxas -arch=sm_80 -v` prints registers, spills and shared memory per
# kernel. Fails when ptxas rejects a module or a kernel spills to local
# memory. Usage: ptxas-check.sh PTXAS FILE.ptx...
set -eu
ptxas=$1; shift
status=0
for f in "$@"; do
  out=$("$ptxas" -arch=sm_80 -v -o /dev/null "$f" 2>&1) || { echo "$out"; echo "FAIL: ptxas $f"; exit 1; }
  echo "== $(basename "$f")"
  echo "$out" | grep -E "Compiling entry|Used|spill" | sed 's/^ptxas info *: //'
  if echo "$out" | grep -E "[1-9][0-9]* bytes spill (stores|loads)" >/dev/null; then
    echo "FAIL: $(basename "$f") spills registers"
    status=1
  fi
done
exit $status

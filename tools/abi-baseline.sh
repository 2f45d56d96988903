#!/bin/sh
# Write the ABI baseline of a release (run at the release commit; commit the
# file): the library built with debug info, described by abidw with the types
# of the public headers only. CI compares every later build against it
# (.ci/steps/60-abi.sh, tests/tools/abi-check.sh).
# usage: tools/abi-baseline.sh [BUILD_DIR]     -> abi/libdsv4-<version>.abi
set -eu
cd "$(dirname "$0")/.."
b=${1:-build-abi}
[ -f "$b/build.ninja" ] || meson setup "$b" -Dbuildtype=debugoptimized -Dtests=false \
  -Dexamples=false -Dbench=false -Dtools=false -Dcuda=disabled -Dmpi=disabled >/dev/null
ninja -C "$b" >/dev/null
so=$(ls "$b"/lib/libdsv4.so.*.*.*)
v=${so##*libdsv4.so.}
abidw --headers-dir include/dsv4 --drop-private-types --no-show-locs --no-corpus-path \
  --out-file "abi/libdsv4-$v.abi" "$so"
echo "abi/libdsv4-$v.abi"

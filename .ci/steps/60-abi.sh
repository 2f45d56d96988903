#!/bin/bash
# ABI gate: the library built with debug info against the committed baseline of
# the last release (abi/libdsv4-0.1.0.abi) with abidiff; fails on an
# incompatible change (tests/tools/abi-check.sh says which), passes additions.
# Time: about 1.5 min on 2 cores (one library build).
set -euo pipefail
[ -f build-abi/build.ninja ] || meson setup build-abi -Dbuildtype=debugoptimized -Dtests=false \
  -Dexamples=false -Dbench=false -Dtools=false -Dcuda=disabled -Dmpi=disabled
timeout 600 ninja -C build-abi
base=$(ls abi/libdsv4-*.abi | sort -V | tail -n 1)
sh tests/tools/abi-check.sh build-abi/lib/libdsv4.so.0 "$base"

#!/bin/bash
# ABI gate: the library built with debug info against the committed baseline of
# the last release (abi/libdsv4-0.1.0.abi) with abidiff; fails on an
# incompatible change (tests/tools/abi-check.sh says which), passes additions.
# Time: about 2 min on 2 cores (one library build with debug info); 7 min measured on a
# clean clone on the shared, loaded 2-core machine. The four steps 30-60 together: 12.5 min
# there, under 10 min on an idle 2-core machine.
set -euo pipefail
[ -f build-abi/build.ninja ] || meson setup build-abi -Dbuildtype=debugoptimized -Dtests=false \
  -Dexamples=false -Dbench=false -Dtools=false -Dcuda=disabled -Dmpi=disabled
timeout 600 ninja -C build-abi
base=$(ls abi/libdsv4-*.abi | sort -V | tail -n 1)
sh tests/tools/abi-check.sh build-abi/lib/libdsv4.so.0 "$base"

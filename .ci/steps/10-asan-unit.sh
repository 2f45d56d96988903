#!/bin/bash
# ASan + UBSan build of the library and the unit suite (leaks fail the run).
set -euo pipefail
[ -f build-asan/build.ninja ] || meson setup build-asan -Db_sanitize=address,undefined \
  -Db_lundef=false -Dbuildtype=debugoptimized -Dcuda=disabled
ninja -C build-asan
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  meson test -C build-asan --suite unit --print-errorlogs

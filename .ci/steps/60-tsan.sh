#!/bin/bash
# ThreadSanitizer (clang): tests/unit/test_threads.c - several engines from
# several threads, one engine handed between threads, tokenizers per thread -
# must give zero reports. OpenMP: clang's libomp with its Archer tool
# (OMP_TOOL_LIBRARIES, Debian libomp-14-dev) tells TSan about the runtime's
# barriers and locks, and ignore_noninstrumented_modules=1 (what Archer asks
# for) ignores libomp's own uninstrumented accesses: tests/tsan.supp holds no
# suppression. Time on 2 cores: build ~5 min, run ~20 s.
set -euo pipefail
[ -f build-tsan/build.ninja ] || CC=clang meson setup build-tsan -Db_sanitize=thread \
  -Db_lundef=false -Dbuildtype=debugoptimized -Dcuda=disabled -Dexamples=false >/dev/null
ninja -C build-tsan tests/test_threads
archer=$(ls /usr/lib/llvm-*/lib/libarcher.so | tail -1)
OMP_TOOL_LIBRARIES=$archer TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 ignore_noninstrumented_modules=1 suppressions=$PWD/tests/tsan.supp" \
  meson test -C build-tsan threads --print-errorlogs --no-rebuild -v

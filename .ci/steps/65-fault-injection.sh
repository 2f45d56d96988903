#!/bin/bash
# Allocation-failure injection (tests/unit/test_fault_injection.c): a build
# where the N-th allocation fails, under ASan + LSan + UBSan; every N of
# model load (30 allocations), tokenizer load (44), engine create (801),
# prefill (437), decode (365), draft (101) and verify (383) on the tiny e2e
# fixture must give DSV4_ERR_OUT_OF_MEMORY, leak nothing and leave the
# engine usable. Time on 2 cores: build ~3 min (75 s CPU), run 206-225 s CPU
# (~4 min alone; 10 min wall on the shared development machine at load
# 9-15); meson's timeout for the test is 20 min.
set -euo pipefail
[ -f build-fault/build.ninja ] || meson setup build-fault -Dfault_injection=true \
  -Db_sanitize=address,undefined -Db_lundef=false -Dbuildtype=debugoptimized \
  -Dcuda=disabled -Dexamples=false >/dev/null
ninja -C build-fault tests/test_fault_injection
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  meson test -C build-fault --suite fault --print-errorlogs --no-rebuild -v

#!/bin/bash
# libFuzzer smoke: clang build of the fuzz targets (ASan + UBSan, libFuzzer
# coverage), each run for 20 s on a scratch copy of its committed corpus
# (tests/fuzz/corpus/NAME). A crash, leak, timeout or UBSan report fails.
# Time on 2 cores: build ~5 min, runs 8 x 20 s: ~8 min in all.
set -euo pipefail
[ -f build-fuzz/build.ninja ] || CC=clang meson setup build-fuzz -Dfuzz=true \
  -Db_sanitize=address,undefined -Db_lundef=false -Dbuildtype=debugoptimized \
  -Dcuda=disabled -Dopenmp=disabled -Dexamples=false >/dev/null
targets="safetensors index config tokenizer_json tokenizer_encode chat_parse chat_render server_request"
ninja -C build-fuzz $(for t in $targets; do echo tests/fuzz/fuzz_$t; done)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
for t in $targets; do
  mkdir -p "$scratch/$t"
  cp tests/fuzz/corpus/$t/* "$scratch/$t/"
  echo "== fuzz_$t (20 s)"
  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ASAN_OPTIONS=detect_leaks=1 \
    build-fuzz/tests/fuzz/fuzz_$t -max_total_time=20 -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$scratch/" "$scratch/$t" 2>&1 | tail -12
done

#!/bin/sh
# Long libFuzzer runs of several targets side by side (docs/reliability.md,
# "Runs"), for a many-core machine or for the background of a shared one.
#
#   tools/fuzz-long.sh [-b BINDIR] [-c EXTRA_CORPUS] "NAME:WORKERS ..." SECONDS OUTDIR
#   tools/fuzz-long.sh -B DIR     copy the targets of build-fuzz and the shared
#                                 libraries they need beyond glibc into DIR and
#                                 DIR/lib, to run on a machine without clang
#
# NAME is a target of tests/fuzz (fuzz_NAME in BINDIR, default
# build-fuzz/tests/fuzz; BINDIR/lib is put on LD_LIBRARY_PATH when present),
# WORKERS the libFuzzer processes it gets (-jobs = -workers: each runs for
# SECONDS, all sharing one corpus). The corpus starts from
# tests/fuzz/corpus/NAME plus EXTRA_CORPUS/NAME when given. Run from the
# source root (or set DSV4_SOURCE_ROOT): the targets read their tokenizers
# from it.
#
# OUTDIR gets summary.txt (per target: executions summed over the workers
# from libFuzzer's stat::number_of_executed_units, workers, new corpus units,
# findings; then each finding's input in base64 and its report lines),
# logs/NAME/fuzz-N.log (each cut to its last 60 lines),
# corpus-NAME.tar.gz (the corpus after the run) and artifacts/ (crash-,
# leak-, timeout-, oom- files: the findings). Exit status 1 when any target
# had a finding or a worker that did not report its final stats.
#
# ASan: malloc_context_size=5 (five frames of allocation stack in reports
# instead of 30: unwinding them on every malloc was the largest cost of the
# JSON targets) and quarantine_size_mb=16 (freed memory stays poisoned
# until 16 MB more is freed, instead of 256 MB: every input allocates far
# less, so a use after free within one input is still caught, and the page
# faults of cycling 256 MB went away). Everything else as in CI.
set -eu
bin=build-fuzz/tests/fuzz
extra=
while getopts b:c:B: o; do
  case $o in
    b) bin=$OPTARG ;;
    c) extra=$OPTARG ;;
    B) mkdir -p "$OPTARG/lib"
       for t in "$bin"/fuzz_*; do [ -f "$t" ] && [ -x "$t" ] && cp "$t" "$OPTARG/"; done
       ldd "$OPTARG"/fuzz_* | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
         grep -Ev '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*)\.so' | xargs -r -I{} cp -L {} "$OPTARG/lib/"
       git rev-parse HEAD > "$OPTARG/COMMIT" 2>/dev/null || true
       ls -l "$OPTARG" "$OPTARG/lib"
       exit 0 ;;
    *) exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ $# -eq 3 ] || { sed -n '2,/^set/p' "$0" | sed '$d' >&2; exit 2; }
specs=$1 secs=$2 out=$3
src=${DSV4_SOURCE_ROOT:-$PWD}
export DSV4_SOURCE_ROOT="$src"
bin=$(cd "$bin" && pwd)
[ -d "$bin/lib" ] && export LD_LIBRARY_PATH="$bin/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export ASAN_OPTIONS=detect_leaks=1:malloc_context_size=5:quarantine_size_mb=16
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
mkdir -p "$out/artifacts" "$out/logs"
out=$(cd "$out" && pwd)

pids=
for spec in $specs; do
  name=${spec%%:*} workers=${spec#*:}
  [ -x "$bin/fuzz_$name" ] || { echo "fuzz-long: no $bin/fuzz_$name" >&2; exit 2; }
  corpus=$out/corpus/$name
  mkdir -p "$corpus" "$out/logs/$name"
  cp "$src/tests/fuzz/corpus/$name/"* "$corpus/"
  [ -n "$extra" ] && [ -d "$extra/$name" ] && cp "$extra/$name/"* "$corpus/" 2>/dev/null || true
  ls "$corpus" | wc -l > "$out/logs/$name/seed-units"
  (cd "$out/logs/$name" && "$bin/fuzz_$name" -jobs="$workers" -workers="$workers" \
     -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
     -artifact_prefix="$out/artifacts/$name-" "$corpus" > driver.log 2>&1) &
  pids="$pids $!"
done
for p in $pids; do wait "$p" || true; done

status=0
{
  printf '%-18s %14s %8s %10s %9s\n' target executions workers new-units findings
  for spec in $specs; do
    name=${spec%%:*} workers=${spec#*:}
    d=$out/logs/$name
    execs=$(cat "$d"/fuzz-*.log 2>/dev/null | sed -n 's/^stat::number_of_executed_units: *//p' |
            awk '{s += $1} END {print s + 0}')
    reported=$(cat "$d"/fuzz-*.log 2>/dev/null | grep -c '^stat::number_of_executed_units' || true)
    units=$(( $(ls "$out/corpus/$name" | wc -l) - $(cat "$d/seed-units") ))
    found=$(ls "$out/artifacts" | grep -c "^$name-" || true)
    printf '%-18s %14s %8s %10s %9s\n' "$name" "$execs" "$reported/$workers" "$units" "$found"
    [ "$found" -eq 0 ] && [ "$reported" -eq "$workers" ] || status=1
    for l in "$d"/fuzz-*.log; do
      [ -f "$l" ] && tail -n 60 "$l" > "$l.tail" && mv "$l.tail" "$l"
    done
    tar -C "$out/corpus" -czf "$out/corpus-$name.tar.gz" "$name"
  done
  echo "seconds per worker: $secs; ASAN_OPTIONS=$ASAN_OPTIONS"
} > "$out/summary.txt"
rm -rf "$out/corpus"
# Each finding goes to the output too (its input in base64 when it is at most 4 KiB, and the
# report lines of the logs): a device run may bring back few of the files under OUTDIR.
for a in "$out"/artifacts/*; do
  [ -f "$a" ] || continue
  name=$(basename "$a")
  echo "finding $name ($(wc -c < "$a") bytes)"
  [ "$(wc -c < "$a")" -le 4096 ] && echo "input (base64): $(base64 -w0 "$a")"
  grep -h -m 8 -E 'ERROR: |runtime error|SUMMARY: |Test unit written|out-of-memory|timeout after' \
    "$out/logs/${name%%-*}"/*.log 2>/dev/null || true
done >> "$out/summary.txt"
cat "$out/summary.txt"
exit $status

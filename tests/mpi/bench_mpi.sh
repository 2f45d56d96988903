#!/bin/sh
# dsv4-bench under mpirun (suite mpi): on a fixture, PP2 and TP2 x PP2 runs
# (C = 1, 2; DSpark off and on) produce the same outputs as one process (the
# report's output_fnv1a64 of every run), rank 0 writes the report and it
# records the topology.
#   bench_mpi.sh MPIRUN DSV4_BENCH FIXTURE_DIR PYTHON
set -u
MPIRUN=$1 BENCH=$2 FX=$3 PY=$4
[ -d "$FX" ] || { echo "fixture $FX missing: skipped"; exit 77; }
OUT=$(mktemp -d) || exit 1
trap 'rm -rf "$OUT"' EXIT
MPI="$MPIRUN --allow-run-as-root --oversubscribe" # Open MPI's root switch; ranks > cores
ARGS="-m $FX -c 1,2 -p 16 -n 8 --dspark both --no-bw --warmup 0 --threads 1 --quiet"
fail=0
"$BENCH" $ARGS --json "$OUT/one.json" || { echo "FAIL one process"; exit 1; }
for topo in "1 2" "2 2"; do
  set -- $topo
  name=tp$1-pp$2
  if ! $MPI -np $(($1 * $2)) "$BENCH" $ARGS --tp $1 --pp $2 --json "$OUT/$name.json" \
      > "$OUT/$name.out" 2>&1; then
    echo "FAIL $name: exit status"; cat "$OUT/$name.out"; fail=1; continue
  fi
  "$PY" - "$OUT/one.json" "$OUT/$name.json" $1 $2 <<'PYEOF' || fail=1
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
tp, pp = int(sys.argv[3]), int(sys.argv[4])
ha = [(r["dspark"], r["concurrency"], r["output_fnv1a64"]) for r in a["runs"]]
hb = [(r["dspark"], r["concurrency"], r["output_fnv1a64"]) for r in b["runs"]]
ok = ha == hb and len(ha) == 4 and b["engine"]["tp"] == tp and b["engine"]["pp"] == pp
print(("ok  " if ok else "FAIL") + f" TP {tp} x PP {pp}: runs {hb} (one process {ha}), "
      f"engine tp {b['engine']['tp']} pp {b['engine']['pp']}")
sys.exit(0 if ok else 1)
PYEOF
done
exit $fail

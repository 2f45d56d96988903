#!/bin/sh
# dsv4-generate under mpirun (suite mpi): on a fixture, the text and the token
# ids that PP2 (two stages), TP2 (one stage, two TP ranks) and TP2 x PP2 print
# equal one process's, greedy and with DSpark speculative decoding; rank 0
# prints, the other ranks print nothing on stdout; a topology that does not
# match the job is refused with exit status 2 on every rank.
#   generate_mpi.sh MPIRUN DSV4_GENERATE FIXTURE_DIR
set -u
MPIRUN=$1 GEN=$2 FX=$3
[ -d "$FX" ] || { echo "fixture $FX missing: skipped"; exit 77; }
OUT=$(mktemp -d) || exit 1
trap 'rm -rf "$OUT"' EXIT
# as root, Open MPI needs its documented switch --allow-run-as-root; --oversubscribe:
# ranks may outnumber cores
MPI="$MPIRUN --allow-run-as-root --oversubscribe"
PROMPT="The quick brown fox jumps over the lazy dog"
COMMON="-m $FX -p \"$PROMPT\" -n 20 --threads 1 --quiet"
fail=0
run() { # name, command...
  name=$1
  shift
  if ! eval "$@" > "$OUT/$name" 2> "$OUT/$name.err"; then
    echo "FAIL $name: exit status $?"; cat "$OUT/$name.err"; fail=1
  fi
}
for mode in ids text spec; do
  case $mode in
    ids) extra=--ids ;;
    text) extra= ;;
    spec) extra="--ids --speculative" ;;
  esac
  run one-$mode "$GEN" $COMMON $extra
  for topo in "1 2" "2 1" "2 2"; do
    set -- $topo
    name=tp$1-pp$2-$mode
    run "$name" $MPI -np $(($1 * $2)) "$GEN" $COMMON $extra --tp $1 --pp $2
    if cmp -s "$OUT/one-$mode" "$OUT/$name"; then
      echo "ok   $name: $(head -c 100 "$OUT/$name")"
    else
      echo "FAIL $name: output differs from one process"
      echo "  one process: $(cat "$OUT/one-$mode")"
      echo "  mpirun:      $(cat "$OUT/$name")"
      fail=1
    fi
  done
done
# the greedy ids must not be empty (a run that printed nothing would match nothing)
[ "$(wc -w < "$OUT/one-ids")" -eq 20 ] || { echo "FAIL: one process printed $(cat "$OUT/one-ids")"; fail=1; }
# PP from the environment (DSV4_PP) instead of the options
run env-pp $MPI -np 2 -x DSV4_PP=2 "$GEN" $COMMON --ids
cmp -s "$OUT/one-ids" "$OUT/env-pp" && echo "ok   DSV4_PP=2 from the environment" ||
  { echo "FAIL DSV4_PP=2: $(cat "$OUT/env-pp")"; fail=1; }
# 3 ranks cannot be TP 2 x PP 2: refused on every rank, exit status 2
eval $MPI -np 3 "$GEN" $COMMON --tp 2 --pp 2 > "$OUT/bad" 2> "$OUT/bad.err"
rc=$?
if [ $rc -ne 0 ] && grep -q "TP 2 x PP 2 needs 4 ranks, the job has 3" "$OUT/bad.err"; then
  echo "ok   3 ranks for TP 2 x PP 2 refused (mpirun exit status $rc)"
else
  echo "FAIL 3 ranks for TP 2 x PP 2: exit status $rc"; cat "$OUT/bad.err"; fail=1
fi
exit $fail

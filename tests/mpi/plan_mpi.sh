#!/bin/sh
# dsv4-plan --engine under mpirun (suite mpi): every rank plans its own part and rank 0
# prints them all. On a fixture, TP 2 x PP 2 (CPU backend, and CUDA where the build has
# it: its format needs no device): four rank lines; the TP ranks of a stage plan the same
# bytes; the stages' KV pages per sequence add up to one process's; a job whose size is
# not TP x PP is refused with exit status 2.
#   plan_mpi.sh MPIRUN DSV4_PLAN FIXTURE_DIR
set -u
MPIRUN=$1 PLAN=$2 FX=$3
[ -d "$FX" ] || { echo "fixture $FX missing: skipped"; exit 77; }
# as root, Open MPI needs its documented switch --allow-run-as-root; --oversubscribe:
# ranks may outnumber cores
MPI="$MPIRUN --allow-run-as-root --oversubscribe"
ARGS="--engine --model $FX --max-sequences 4 --max-context 4096"
fail=0
per_seq() { sed -n 's/.*[ (]\([0-9][0-9]*\) \(pages \)\{0,1\}per sequence.*/\1/p'; }
for backend in cpu cuda; do
  one=$("$PLAN" $ARGS --backend $backend 2>&1)
  if [ $? -ne 0 ]; then
    if [ $backend = cuda ]; then echo "cuda: $one (no CUDA format in this build: skipped)"; continue; fi
    echo "FAIL one process: $one"; fail=1; continue
  fi
  p1=$(printf '%s\n' "$one" | per_seq)
  out=$($MPI -np 4 "$PLAN" $ARGS --backend $backend --tp 2 --pp 2 2>&1)
  rc=$?
  printf '%s\n' "$out" | grep -E "^(engine|  rank)"
  [ $rc -eq 0 ] || { echo "FAIL $backend TP 2 x PP 2: exit status $rc"; printf '%s\n' "$out"; fail=1; continue; }
  [ "$(printf '%s\n' "$out" | grep -c '^  rank')" -eq 4 ] || { echo "FAIL $backend: not 4 rank lines"; fail=1; }
  body() { printf '%s\n' "$out" | grep "^  rank $1 " | sed 's/^  rank [0-9]* ([^)]*)//'; }
  [ "$(body 0)" = "$(body 1)" ] && [ "$(body 2)" = "$(body 3)" ] ||
    { echo "FAIL $backend: the TP ranks of a stage plan different bytes"; fail=1; }
  s0=$(body 0 | per_seq) s1=$(body 2 | per_seq)
  [ -n "$p1" ] && [ -n "$s0" ] && [ -n "$s1" ] && [ $((s0 + s1)) -eq "$p1" ] ||
    { echo "FAIL $backend: pages per sequence $s0 + $s1, one process $p1"; fail=1; }
  echo "$backend: one process $p1 pages per sequence = stage 0 $s0 + stage 1 $s1"
done
$MPI -np 3 "$PLAN" $ARGS --tp 2 --pp 2 > /dev/null 2>&1
rc=$?
[ $rc -eq 2 ] || { echo "FAIL 3 ranks for TP 2 x PP 2: exit status $rc, expected 2"; fail=1; }
[ $fail -eq 0 ] && echo "dsv4-plan --engine under mpirun: OK"
exit $fail

#!/bin/sh
# dsv4-generate --backend cuda|auto (README "Backends"). With a usable GPU,
# --backend cuda generates (exit 0, the summary names the cuda backend);
# without one it fails at engine creation with the library's message naming
# the backend (exit 1). --backend auto (the default) then runs and its summary
# names the backend it picked: cuda exactly when cuda ran.
# usage: generate-backend-cuda.sh DSV4_GENERATE MODEL_DIR
gen=$1
model=$2
out=$("$gen" -m "$model" -p lamp -n 2 --ids --threads 1 --backend cuda 2>&1)
rc=$?
case $rc in
0) want=cuda
   echo "$out" | grep -q "backend: cuda" || { echo "exit 0 without the cuda backend:"; echo "$out"; exit 1; } ;;
1) want=cpu
   echo "$out" | grep -q "backend cuda" || { echo "exit 1 without naming the backend:"; echo "$out"; exit 1; } ;;
*) echo "--backend cuda: exit $rc:"; echo "$out"; exit 1 ;;
esac
out=$("$gen" -m "$model" -p lamp -n 2 --ids --threads 1 2>&1) || { echo "--backend auto failed:"; echo "$out"; exit 1; }
echo "$out" | grep -q "backend: $want" || { echo "--backend auto did not pick $want:"; echo "$out"; exit 1; }
echo "--backend cuda: exit $rc; --backend auto picked $want"

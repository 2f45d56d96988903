#!/bin/sh
# dsv4-generate --speculative: greedy ids equal plain decoding's for draft
# lengths 1, 3, 5 and the confidence policy (0); the summary reports acceptance.
# usage: generate-speculative.sh DSV4_GENERATE MODEL_DIR
set -u
x=$1 m=$2
g() { "$x" -m "$m" -p "lamp lamp lamp" --ids -n 48 --threads 1 "$@"; }
a=$(g --quiet) || { echo "plain decoding failed"; exit 1; }
for d in 1 3 5 0; do
  b=$(g --quiet --speculative --draft $d) || { echo "--draft $d failed"; exit 1; }
  [ "$a" = "$b" ] || { echo "--draft $d: [$b] != [$a]"; exit 1; }
done
e=$(g --speculative 2>&1 >/dev/null) || { echo "--speculative failed"; exit 1; }
echo "$e" | grep "mean acceptance length" || { echo "no acceptance summary in: $e"; exit 1; }
echo "$e" | grep -q "acceptance per draft position (accepted / verified): 1: " ||
  { echo "no per-position acceptance in: $e"; exit 1; }

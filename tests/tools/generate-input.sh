#!/bin/sh
# dsv4-generate's other inputs: -f FILE and -f - (stdin) give exactly what -p
# gives; --chat answers one line per user line (stdin) and exits 0 at the end
# of input; -p with -f, and a missing file, are usage errors (exit 2).
# usage: generate-input.sh DSV4_GENERATE MODEL_DIR
set -u
gen=$1 model=$2
tmp=$(mktemp -d "${TMPDIR:-/tmp}/dsv4-geninput.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
prompt="Every evening the old lamplighter"
printf '%s' "$prompt" >"$tmp/prompt.txt"
want=$("$gen" -m "$model" -p "$prompt" -n 16 --quiet) || { echo "-p failed"; exit 1; }
got=$("$gen" -m "$model" -f "$tmp/prompt.txt" -n 16 --quiet) || { echo "-f failed"; exit 1; }
[ "$got" = "$want" ] || { echo "-f gave [$got], -p gave [$want]"; exit 1; }
got=$(printf '%s' "$prompt" | "$gen" -m "$model" -f - -n 16 --quiet) || { echo "-f - failed"; exit 1; }
[ "$got" = "$want" ] || { echo "-f - gave [$got], -p gave [$want]"; exit 1; }
printf 'Hello there\n\nAnd a second turn\n' | "$gen" -m "$model" --chat -n 6 --quiet >"$tmp/chat.txt" \
  || { echo "--chat failed"; exit 1; }
[ "$(wc -l <"$tmp/chat.txt")" -eq 2 ] || { echo "--chat: expected 2 answers:"; cat "$tmp/chat.txt"; exit 1; }
"$gen" -m "$model" -f "$tmp/prompt.txt" -p x >/dev/null 2>&1
[ $? -eq 2 ] || { echo "-f with -p: expected exit 2"; exit 1; }
"$gen" -m "$model" -f "$tmp/missing.txt" >/dev/null 2>&1
[ $? -eq 2 ] || { echo "missing -f file: expected exit 2"; exit 1; }
echo "dsv4-generate -f / --chat: ok"

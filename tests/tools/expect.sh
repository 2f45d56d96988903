#!/bin/sh
# Run a command and check its exit status and output.
# usage: expect.sh [--status N] [--out TEXT]... [--err TEXT]... [--need PATH] -- CMD [ARG]...
#   --status N   expected exit status (default 0)
#   --out TEXT   stdout contains TEXT (fixed string); repeatable
#   --err TEXT   stderr contains TEXT (fixed string); repeatable
#   --need PATH  exit 77 (skip) when PATH does not exist (e.g. the fixtures folder)
set -u
want=0 outs='' errs='' nl='
'
while [ $# -gt 0 ]; do
  case $1 in
    --status) want=$2; shift 2 ;;
    --out) outs="$outs$2$nl"; shift 2 ;;
    --err) errs="$errs$2$nl"; shift 2 ;;
    --need) if [ ! -e "$2" ]; then echo "SKIP: $2 absent"; exit 77; fi; shift 2 ;;
    --) shift; break ;;
    *) echo "expect.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
tmp=$(mktemp -d "${TMPDIR:-/tmp}/dsv4-expect.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
"$@" >"$tmp/out" 2>"$tmp/err"
got=$?
fail=0
if [ "$got" -ne "$want" ]; then echo "exit status $got, expected $want: $*"; fail=1; fi
check() {  # FILE NAME PATTERNS
  printf '%s' "$3" | while IFS= read -r p; do
    [ -z "$p" ] && continue
    grep -qF -- "$p" "$1" || { echo "$2 lacks: $p"; exit 1; }
  done
}
check "$tmp/out" stdout "$outs" || fail=1
check "$tmp/err" stderr "$errs" || fail=1
if [ $fail -ne 0 ]; then
  echo "--- stdout:"; cat "$tmp/out"; echo "--- stderr:"; cat "$tmp/err"
fi
exit $fail

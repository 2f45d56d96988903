#!/bin/sh
# ABI gate: compare a libdsv4.so built with debug info against the committed
# baseline of the last release (abi/libdsv4-*.abi, written by abidw) with
# abidiff (Debian abigail-tools). Only the types of the public headers count
# (opaque handles and internal types are filtered out).
# Fails on an incompatible change: abidiff's INCOMPATIBLE bit (a removed or
# re-versioned symbol), or in the report a changed parameter or return type, a
# deleted or moved struct member (an offset changed), a deleted function or
# variable. Passes additions: new functions, fields appended to size-prefixed
# structs.
# usage: abi-check.sh LIBDSV4_SO BASELINE_ABI
set -u
so=$1 base=$2
report=$(abidiff --no-show-locs "$base" "$so")
rc=$?
echo "$report"
if [ $((rc & 3)) -ne 0 ]; then echo "abi-check: abidiff failed (status $rc)"; exit 1; fi
if [ $((rc & 8)) -ne 0 ]; then echo "abi-check: INCOMPATIBLE change (status $rc)"; exit 1; fi
bad=$(printf '%s\n' "$report" | grep -E 'data member deletion|offset changed|parameter [0-9]+ of type .* changed to|parameter (deletion|insertion)|return type changed|type of .* changed|[1-9][0-9]* Removed' || true)
if [ -n "$bad" ]; then
  echo "abi-check: incompatible changes against $base:"
  printf '%s\n' "$bad"
  exit 1
fi
echo "abi-check: compatible with $(basename "$base") (abidiff status $rc)"

#!/bin/sh
# The dynamic symbols libdsv4.so defines must be exactly those in the map.
# usage: check-exports.sh LIBDSV4_SO MAP
set -eu
so=$1 map=$2
exported=$(nm -D --defined-only "$so" | awk '$2 ~ /^[TDBRVWi]$/ {print $3}' | sed 's/@.*//' | grep -v '^DSV4_' | sort -u)
mapped=$(sed 's,/\*.*\*/,,' "$map" | grep -o '^[[:space:]]*dsv4_[A-Za-z0-9_]*;' | tr -d ' \t;' | sort -u)
extra=$(printf '%s\n' "$exported" | comm -23 - "$(printf '%s\n' "$mapped" > "${TMPDIR:-/tmp}/dsv4-map.$$"; echo "${TMPDIR:-/tmp}/dsv4-map.$$")")
missing=$(printf '%s\n' "$mapped" | comm -13 "$(printf '%s\n' "$exported" > "${TMPDIR:-/tmp}/dsv4-exp.$$"; echo "${TMPDIR:-/tmp}/dsv4-exp.$$")" -)
rm -f "${TMPDIR:-/tmp}/dsv4-map.$$" "${TMPDIR:-/tmp}/dsv4-exp.$$"
status=0
if [ -n "$extra" ]; then echo "exported but not in $map:"; echo "$extra"; status=1; fi
if [ -n "$missing" ]; then echo "in $map but not exported:"; echo "$missing"; status=1; fi
[ $status -eq 0 ] && echo "exports match the map: $(printf '%s\n' "$exported" | wc -l) symbols"
exit $status

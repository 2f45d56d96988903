#!/bin/sh
# DSV4_NODISCARD works: a program that ignores a dsv4_status does not compile
# with -Werror (C as C99 and C2x, C++ as C++11 and C++17), one that checks it does.
# usage: nodiscard-check.sh INCLUDE_DIR GENERATED_INCLUDE_DIR CC [CXX]
set -u
inc=$1 gen=$2 cc=$3 cxx=${4:-}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/dsv4-nodiscard.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
body() {  # $1: how the status is used
  printf '#include "dsv4/dsv4.h"\nint main(void) {\n  dsv4_model_params p;\n  %s\n  return 0;\n}\n' "$1"
}
body 'dsv4_model_params_init(&p, sizeof p);' > "$tmp/ignored.c"
body 'if (dsv4_model_params_init(&p, sizeof p) != DSV4_OK) return 1;' > "$tmp/checked.c"
fail=0
try() {  # compiler std file lang
  "$1" -x "$4" -std="$2" -Werror -I"$inc" -I"$gen" -c -o "$tmp/o" "$3" 2>"$tmp/err"
}
for std in c99 c2x; do
  try "$cc" $std "$tmp/ignored.c" c && { echo "$std: an ignored status compiles"; fail=1; }
  try "$cc" $std "$tmp/checked.c" c || { echo "$std: a checked status does not compile:"; cat "$tmp/err"; fail=1; }
done
if [ -n "$cxx" ]; then
  for std in c++11 c++17; do
    try "$cxx" $std "$tmp/ignored.c" c++ && { echo "$std: an ignored status compiles"; fail=1; }
    try "$cxx" $std "$tmp/checked.c" c++ || { echo "$std: a checked status does not compile:"; cat "$tmp/err"; fail=1; }
  done
fi
[ $fail -eq 0 ] && echo "ignoring a dsv4_status is a compile error with -Werror"
exit $fail

#!/bin/sh
# The README's C and C++ snippets compile as written (warnings are errors: no
# ignored status) and run on the default model. Each is put in a main() that
# defines `dir` (argv[1]) and `text`.
# usage: readme-snippets.sh README MODEL_DIR INCLUDE_DIR GENERATED_INCLUDE_DIR LIBDIR CC [CXX]
set -eu
readme=$1 model=$2 inc=$3 gen=$4 libdir=$5 cc=$6 cxx=${7:-}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/dsv4-readme.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
snippet() {  # LANG: the first fenced block of that language
  awk -v lang="$1" '$0 == "```" lang {on = 1; next} on && $0 == "```" {exit} on' "$readme"
}
wrap() {  # LANG HEADERS
  snippet "$1" > "$tmp/body"
  grep '^#include' "$tmp/body" || true
  printf '%s\n' "$2"
  printf 'int main(int argc, char **argv) {\n  const char *dir = argc > 1 ? argv[1] : ".";\n'
  printf '  const char *text = "Every evening the old lamplighter";\n  (void)text;\n'
  grep -v '^#include' "$tmp/body"
  printf '  return 0;\n}\n'
}
wrap c '#include <stdio.h>
#include <string.h>' > "$tmp/snippet.c"
[ -s "$tmp/body" ] || { echo "no C snippet in $readme"; exit 1; }
grep -q bos_token_id "$tmp/body" || { echo "the C snippet does not start the input with BOS"; exit 1; }
"$cc" -std=c99 -Wall -Wextra -Werror -I"$inc" -I"$gen" -o "$tmp/c" "$tmp/snippet.c" -L"$libdir" -ldsv4
LD_LIBRARY_PATH="$libdir" "$tmp/c" "$model"
echo "C snippet: compiles with -Werror and runs"
if [ -n "$cxx" ]; then
  wrap cpp '#include <string>
#include <vector>' > "$tmp/snippet.cpp"
  [ -s "$tmp/body" ] || { echo "no C++ snippet in $readme"; exit 1; }
  "$cxx" -std=c++17 -Wall -Wextra -pedantic -Werror -I"$inc" -I"$gen" -o "$tmp/cpp" "$tmp/snippet.cpp" \
    -L"$libdir" -ldsv4
  LD_LIBRARY_PATH="$libdir" "$tmp/cpp" "$model"
  echo "C++ snippet: compiles with -Werror and runs"
fi

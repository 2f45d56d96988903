#!/bin/sh
# The bad-input catalogue (docs/bad-inputs.md) from the tests themselves: run
# the suites that feed bad input with DSV4_CATALOGUE set (each such check
# records case, status and message: tu_catalogue), then format the records.
# usage: bad-input-catalogue.sh SOURCE_ROOT BUILD_ROOT [--write]
#   without --write: exit 1 when docs/bad-inputs.md differs (it drifted:
#   re-run with --write and commit). Needs the fixtures (exit 77 without).
set -eu
src=$1 build=$2 mode=${3:-check}
[ -d "${DSV4_FIXTURES:-}" ] || { echo "SKIP: fixtures absent"; exit 77; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/dsv4-catalogue.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
export DSV4_CATALOGUE="$tmp/records.tsv" DSV4_SOAK_CALLS=400 DSV4_SOAK_SEED=1
for t in safetensors checkpoint config model_api tokenizer engine_guard api_soak; do
  "$build/tests/test_$t" >"$tmp/$t.log" 2>&1 || { cat "$tmp/$t.log"; echo "test_$t failed"; exit 1; }
done
python3 "$src/tests/tools/format-catalogue.py" "$tmp/records.tsv" "$DSV4_FIXTURES" "$src" >"$tmp/bad-inputs.md"
if [ "$mode" = --write ]; then
  cp "$tmp/bad-inputs.md" "$src/docs/bad-inputs.md"
  echo "wrote $src/docs/bad-inputs.md"
elif ! diff -u "$src/docs/bad-inputs.md" "$tmp/bad-inputs.md"; then
  echo "docs/bad-inputs.md is out of date: run tests/tools/bad-input-catalogue.sh $src $build --write"
  exit 1
fi

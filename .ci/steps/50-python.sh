#!/bin/bash
# The Python package: pip-installed from the checkout into a fresh virtual
# environment (numpy from Debian), then its tests (default model, fixtures,
# struct layouts against the C compiler) and the README's Python example, run
# outside the checkout so the installed copy is the one imported.
# Time: about 40 s on 2 cores (41 s measured under load before the serving tests).
set -euo pipefail
root=$PWD
venv=$root/build-python/venv
rm -rf "$root/build-python"
# Debian's interpreter (quickstart installs python3-numpy and python3-venv for it)
/usr/bin/python3 -m venv --system-site-packages "$venv"
"$venv/bin/pip" install --quiet --no-build-isolation --no-deps "$root/python"
export DSV4_LIBRARY=$root/build/lib/libdsv4.so.0 DSV4_MODEL=$root/build/models/dsv4-tiny
export DSV4_SOURCE_ROOT=$root DSV4_BUILD_ROOT=$root/build
export DSV4_FIXTURES=${DSV4_FIXTURES:-$root/../shared/fixtures}
cd /tmp
"$venv/bin/python" -c 'import dsv4, sys; sys.exit(0 if "/venv/" in dsv4.__file__ else 1)'
timeout 300 "$venv/bin/python" -m unittest discover -s "$root/python/tests" -v
out=$(timeout 60 "$venv/bin/python" "$root/examples/python/generate.py")
echo "example: [$out]"
grep -qxF -- "$out" "$root/README.md"
# the serving example: its four completions as README shows them, then a chat message
out=$(timeout 120 "$venv/bin/python" "$root/examples/python/serve.py")
printf '%s\n' "$out"
printf '%s\n' "$out" | head -n 4 > "$root/build-python/serve-out.txt"
grep -A6 -F -- 'the example'"'"'s four completions print' "$root/README.md" | sed -n '4,7p' |
  diff - "$root/build-python/serve-out.txt"
printf '%s\n' "$out" | sed -n 5p |
  "$venv/bin/python" -c 'import json, sys; m = json.load(sys.stdin); sys.exit(m["role"] != "assistant")'

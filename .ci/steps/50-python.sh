#!/bin/bash
# The Python package: pip-installed from the checkout into a fresh virtual
# environment (numpy from Debian), then its tests (default model, fixtures,
# struct layouts against the C compiler) and the README's Python example, run
# outside the checkout so the installed copy is the one imported.
# Time: about 30 s on 2 cores (41 s measured under load).
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

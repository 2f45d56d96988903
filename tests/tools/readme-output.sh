#!/bin/sh
# A program's stdout is one whole line of the README (the examples print the
# main job's output that the README shows).
# usage: readme-output.sh README CMD [ARG]...
set -u
readme=$1
shift
out=$("$@") || { echo "failed: $*"; exit 1; }
echo "got: [$out]"
grep -qxF -- "$out" "$readme"

#!/bin/sh
# README command (1)'s main job prints exactly the output the README shows.
# usage: readme-main-job.sh SOURCE_ROOT BUILD_ROOT
set -u
src=$1 build=$2
out=$(sh "$src/tools/main-job.sh" "$build" 2>/dev/null) || { echo "main-job.sh failed"; exit 1; }
echo "got: [$out]"
grep -qxF -- "$out" "$src/README.md"

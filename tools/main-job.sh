#!/bin/sh
# The main job on the embedded default model (built into BUILD/models/):
# greedy generation from the README prompt, which continues the sentence
# planted in that model (tools/gen, make_tiny.json).
# usage: main-job.sh BUILD_DIR
set -eu
b=${1:-build}
exec "$b/examples/dsv4-generate" -m "$b/models/dsv4-tiny" -p "Every evening the old lamplighter"

#!/bin/sh
# The main job on the embedded default model (built into BUILD/models/).
# usage: main-job.sh BUILD_DIR
set -eu
b=${1:-build}
exec "$b/examples/dsv4-inspect" "$b/models/dsv4-tiny"

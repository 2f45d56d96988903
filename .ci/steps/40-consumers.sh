#!/bin/bash
# Consumers built the ways users build them (tests/tools/consumer-builds.sh):
# install with default_library=both into a prefix that is then moved; the
# installed tools (rpath, --version, default model, plot.gp); pkg-config shared
# and --static; CMake find_package shared and static; Meson subproject.
# Time: about 3 min on 2 cores (two library builds: the install and the subproject);
# 4.6 min measured on a clean clone on the shared, loaded 2-core machine.
set -euo pipefail
timeout 900 sh tests/tools/consumer-builds.sh . build-consumers

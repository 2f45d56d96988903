#!/bin/sh
# README command (1): install what the build needs (Debian, as root), build
# everything, and run the main job on the embedded default model.
# Re-running it is cheap: installed packages and the build dir are reused.
set -eu
cd "$(dirname "$0")/.."

# One package a line (keeps concurrent additions from conflicting).
pkgs="
abigail-tools
build-essential
clang
cmake
curl
doxygen
gnuplot-nox
libclang-rt-14-dev
libcmocka-dev
libjansson-dev
libmicrohttpd-dev
libomp-dev
libopenmpi-dev
libpcre2-dev
libutf8proc-dev
meson
ninja-build
openmpi-bin
pkg-config
python3
python3-numpy
python3-venv
valgrind
"
if command -v apt-get >/dev/null 2>&1; then
  missing=$(for p in $pkgs; do dpkg -s "$p" >/dev/null 2>&1 || echo "$p"; done)
  if [ -n "$missing" ]; then
    if [ "$(id -u)" = 0 ]; then
      apt-get update -qq
      # shellcheck disable=SC2086
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing
    else
      echo "quickstart: missing packages (run as root to install):" $missing >&2
      exit 1
    fi
  fi
fi

[ -f build/build.ninja ] || meson setup build
ninja -C build
exec sh tools/main-job.sh build

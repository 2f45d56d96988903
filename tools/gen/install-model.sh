#!/bin/sh
# meson install step: copy the generated default model folder (a build output
# that is not a single Meson target) to <prefix>/<REL_DEST>, DESTDIR honoured.
# usage: install-model.sh MODEL_DIR REL_DEST
set -eu
dest=${MESON_INSTALL_DESTDIR_PREFIX:?run by meson install}/$2
mkdir -p "$dest"
cp -R "$1" "$dest/"

#!/bin/sh
# Install the build into a scratch DESTDIR, then build and run a consumer
# that knows the library only through pkg-config.
# usage: pkgconfig-consumer.sh BUILD_ROOT CONSUMER_C
set -eu
build=$1 src=$2
dest=$(mktemp -d "${TMPDIR:-/tmp}/dsv4-destdir.XXXXXX")
trap 'rm -rf "$dest"' EXIT
meson install -C "$build" --destdir "$dest" --no-rebuild --quiet >/dev/null
pcdir=$(dirname "$(find "$dest" -name dsv4.pc | head -n 1)")
[ -f "$pcdir/dsv4.pc" ] || { echo "dsv4.pc was not installed"; exit 1; }
export PKG_CONFIG_PATH="$pcdir"
# a fresh build's dsv4.pc is relocatable (prefix from ${pcfiledir}); a build
# directory configured before that option needs the sysroot
grep -q pcfiledir "$pcdir/dsv4.pc" || export PKG_CONFIG_SYSROOT_DIR="$dest"
static=
[ -n "$(find "$dest" -name 'libdsv4.so*' | head -n 1)" ] || static=--static   # default_library=static
flags=$(pkg-config $static --cflags --libs dsv4)
echo "pkg-config $static --cflags --libs dsv4: $flags"
${CC:-cc} -std=c99 -o "$dest/consumer" "$src" $flags
libdir=$(pkg-config --variable=libdir dsv4)
LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$dest/consumer"

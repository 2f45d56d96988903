#!/bin/sh
# The ways a user builds against libdsv4, each from scratch:
#   install (default_library=both) into a prefix, then move the prefix (nothing
#   may depend on where it was installed): the installed tools run without
#   LD_LIBRARY_PATH (rpath), find the default model and plot.gp, print --version;
#   consumers: pkg-config shared, pkg-config --static (no libdsv4.so in the
#   prefix), CMake find_package shared and static (with the C++ example on the
#   installed dsv4.hpp, -Wall -Wextra -pedantic -Werror), Meson subproject (builds the
#   library only: no tools, bench or tests).
# Every consumer generates from the installed default model; all must agree.
# usage: consumer-builds.sh SOURCE_ROOT WORK_DIR
set -eu
src=$(cd "$1" && pwd)
work=$2
rm -rf "$work"
mkdir -p "$work"
work=$(cd "$work" && pwd)
cons=$src/tests/consumers
say() { echo "consumer-builds: $*"; }

say "install (default_library=both)"
meson setup "$work/build" "$src" --prefix="$work/inst" -Ddefault_library=both -Dtests=false \
  -Dexamples=true -Dbench=true -Dtools=true -Dcuda=disabled -Dmpi=disabled >/dev/null
ninja -C "$work/build" >/dev/null
meson install -C "$work/build" --quiet >/dev/null
mv "$work/inst" "$work/prefix"   # relocated: the build's prefix no longer exists
prefix=$work/prefix
pc=$(find "$prefix" -name dsv4.pc)
libdir=$(dirname "$(dirname "$pc")")
model=$prefix/share/dsv4/models/dsv4-tiny
[ -f "$model/config.json" ] || { say "default model not installed"; exit 1; }
[ -f "$prefix/share/dsv4/plot.gp" ] || { say "plot.gp not installed"; exit 1; }
[ -f "$libdir/libdsv4.a" ] && [ -f "$libdir/libdsv4.so" ] || { say "need both libraries"; exit 1; }

say "installed tools (rpath, --version, default model, plot script)"
env -u LD_LIBRARY_PATH sh -c '
  set -eu
  for t in dsv4-generate dsv4-inspect dsv4-plan dsv4-bench; do
    "$1/bin/$t" --version | grep -q "^$t (libdsv4) " || { echo "$t --version"; exit 1; }
  done
  "$1/bin/dsv4-inspect" >/dev/null
  "$1/bin/dsv4-generate" --quiet -n 8 -p "Every evening the old lamplighter" > "$2/tool.txt"
  "$1/bin/dsv4-bench" -c 1,2 -p 8 -n 2 --warmup 0 --bw-bytes 1048576 --bw-repeats 1 --quiet --json "$2/bench.json" \
    --plot "$2/bench.png"
  test -s "$2/bench.png"
  "$1/bin/dsv4-generate" --bad-option 2>/dev/null && exit 1
  test $? -eq 2 || { echo "bad usage: exit status $? (want 2)"; exit 1; }
' sh "$prefix" "$work"

run() {  # NAME EXE: run the consumer on the model, keep its output
  LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$2" "$model" > "$work/$1.txt"
  say "$1: $(tail -n 1 "$work/$1.txt")"
}
uses_so() { readelf -d "$1" | grep -q 'NEEDED.*libdsv4\.so'; }

say "pkg-config, shared"
export PKG_CONFIG_PATH="$(dirname "$pc")"
# shellcheck disable=SC2046
${CC:-cc} -std=c99 -Wall -Werror -o "$work/pc-shared" "$cons/consumer.c" $(pkg-config --cflags --libs dsv4)
uses_so "$work/pc-shared" || { say "pc-shared does not use libdsv4.so"; exit 1; }
run pc-shared "$work/pc-shared"

say "pkg-config --static (a copy of the prefix without libdsv4.so)"
cp -a "$prefix" "$work/prefix-static"
rm -f "$work/prefix-static/${libdir#"$prefix"/}"/libdsv4.so*
export PKG_CONFIG_PATH="$work/prefix-static/${pc#"$prefix"/}"
PKG_CONFIG_PATH=$(dirname "$PKG_CONFIG_PATH")
# shellcheck disable=SC2046
${CC:-cc} -std=c99 -Wall -Werror -o "$work/pc-static" "$cons/consumer.c" $(pkg-config --static --cflags --libs dsv4)
uses_so "$work/pc-static" && { say "pc-static links libdsv4.so"; exit 1; }
run pc-static "$work/pc-static"
unset PKG_CONFIG_PATH

for kind in shared static; do
  say "CMake find_package, $kind"
  flag=OFF
  [ $kind = static ] && flag=ON
  cmake -S "$cons" -B "$work/cmake-$kind" -DCMAKE_PREFIX_PATH="$prefix" -DDSV4_USE_STATIC_LIBS=$flag \
    -DCMAKE_C_FLAGS="-Wall -Werror" >/dev/null
  cmake --build "$work/cmake-$kind" >/dev/null
  if [ $kind = shared ]; then uses_so "$work/cmake-$kind/consumer" || exit 1
  else uses_so "$work/cmake-$kind/consumer" && exit 1; fi
  run cmake-$kind "$work/cmake-$kind/consumer"
  # the C++ example on the installed wrapper prints the README's main-job line
  out=$(LD_LIBRARY_PATH="$libdir" "$work/cmake-$kind/consumer_cpp" "$model")
  say "cmake-$kind C++ example: [$out]"
  grep -qxF -- "$out" "$src/README.md"
done

say "Meson subproject"
mkdir -p "$work/subproj/subprojects"
cp "$cons/meson.build" "$cons/consumer.c" "$work/subproj/"
ln -s "$src" "$work/subproj/subprojects/dsv4"
meson setup "$work/subproj/build" "$work/subproj" -Ddsv4:cuda=disabled -Ddsv4:mpi=disabled >/dev/null
targets=$(meson introspect --targets "$work/subproj/build" | python3 -c \
  'import json, sys; print(" ".join(t["name"] for t in json.load(sys.stdin)))')
for t in dsv4-generate dsv4-inspect dsv4-plan dsv4-bench dsv4-gen-checkpoint; do
  case " $targets " in *" $t "*) say "the subproject builds $t"; exit 1 ;; esac
done
ninja -C "$work/subproj/build" >/dev/null
run subproject "$work/subproj/build/consumer"

for c in pc-static cmake-shared cmake-static subproject; do
  cmp "$work/pc-shared.txt" "$work/$c.txt" || { say "$c differs from pc-shared"; exit 1; }
done
grep -q "Every evening the old lamplighter" "$work/pc-shared.txt"
say "all consumers agree"

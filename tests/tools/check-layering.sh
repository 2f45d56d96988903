#!/bin/sh
# Layering of the backends (docs/architecture.md): lib/cpu and lib/gpu include only
# backend/, model/, base/ and their own folder (never engine/, io/, api/, dist/), and no
# library or bench code outside lib/model spells or formats a checkpoint tensor name
# (weights are asked for by role: model/weights.h, dsv4_tensor_info.role).
# usage: check-layering.sh SOURCE_ROOT
set -u
root=${1:?usage: check-layering.sh SOURCE_ROOT}
fail=0
for part in cpu gpu; do
  bad=$(grep -rnE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$root/lib/$part" \
        --include='*.c' --include='*.h' --include='*.cu' --include='*.cuh' |
        grep -vE "#[[:space:]]*include[[:space:]]*\"(backend|model|base|$part)/" |
        grep -vE '#[[:space:]]*include[[:space:]]*"dsv4/')
  if [ -n "$bad" ]; then
    echo "lib/$part includes outside backend/, model/, base/, $part/:"; echo "$bad"; fail=1
  fi
done
# tensor names: "layers.N." / "mtp.S." prefixes, "*.weight" / "*.scale" suffixes, "experts.E"
names=$(grep -rnE '"[^"]*(layers\.|mtp\.|experts\.|\.weight\b|\.scale\b|_weight")[^"]*"' "$root/lib" "$root/bench" \
        --include='*.c' --include='*.h' --include='*.cu' --include='*.cuh' |
        grep -v "^$root/lib/model/")
if [ -n "$names" ]; then
  echo "tensor names spelled outside lib/model (lib/, bench/):"; echo "$names"; fail=1
fi
[ $fail -eq 0 ] && echo "layering ok: lib/cpu, lib/gpu include only backend/, model/, base/; no tensor names in lib/ or bench/ outside lib/model"
exit $fail

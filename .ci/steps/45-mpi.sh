#!/bin/bash
# Suite mpi (tests/mpi): the distributed engine's tests under Debian's Open MPI,
# several ranks on this machine (mpirun --oversubscribe --allow-run-as-root,
# from tests/mpi/meson.build). About 90 s today on 2 cores (the engine
# at TP 1 x PP 2, TP 2 x PP 1 and TP 2 x PP 2 against one process, memory per rank, a TP
# rank failing inside a layer; dsv4-generate, dsv4-bench and dsv4-plan --engine under
# mpirun); bounded to 20 minutes.
set -euo pipefail
command -v mpirun >/dev/null || { echo "mpirun missing (tools/quickstart.sh installs openmpi-bin)" >&2; exit 1; }
tests=$(meson test -C build --setup mpi --suite mpi --list 2>/dev/null || true)
if ! grep -q 'libdsv4:mpi / ' <<<"$tests"; then
  echo "build/ has no mpi tests: MPI was not found when it was configured" >&2
  exit 1
fi
timeout 1200 meson test -C build --setup mpi --suite mpi --print-errorlogs

#!/bin/bash
# API reference gate (tests/tools/doxygen-gate.sh): Doxygen over the public
# headers and the API guide must give zero warnings, so every public
# declaration is documented. HTML in build/docs/api/html. Time: about 10 s.
set -euo pipefail
timeout 120 sh tests/tools/doxygen-gate.sh . build/docs/api

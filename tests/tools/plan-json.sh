#!/bin/sh
# dsv4-plan --json parses, the default plan fits and the KV cache costs 890 B per token.
# usage: plan-json.sh DSV4_PLAN PYTHON
set -eu
"$1" --json | "$2" -c 'import json, sys
d = json.load(sys.stdin)
assert d["fits"] and d["kv"]["bytes_per_token"] == 890, d'

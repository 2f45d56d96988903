#!/bin/bash
# dsv4-server on the default model, on loopback, driven by the `openai` Python
# client (PyPI, installed in a venv here) and curl: chat and completions,
# streaming and not, a tool-call round trip, concurrent clients, a client
# leaving mid-stream, prefix reuse, per-token logprobs, malformed and oversized
# requests, 429 when full, and greedy output equal to dsv4-generate's. Bounded: 480 s for the checks
# (about 2 min on the 2-core CI machine, plus the pip install).
set -euo pipefail
cd "$(dirname "$0")/../.."
work=$(mktemp -d)
server_pid=
cleanup() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

python3 -m venv "$work/venv"
"$work/venv/bin/pip" install -q openai

model=build/models/dsv4-tiny
prompt="Every evening the old lamplighter"
build/examples/dsv4-generate -m "$model" -p "$prompt" -n 32 2>/dev/null >"$work/greedy.txt"

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
build/examples/dsv4-server -m "$model" --port "$port" --threads 2 --max-queue 6 --prefix-cache 2 2>"$work/server.log" &
server_pid=$!
url=http://127.0.0.1:$port
for _ in $(seq 1 100); do
  curl -sf "$url/health" >/dev/null && break
  kill -0 "$server_pid" || { cat "$work/server.log"; exit 1; }
  sleep 0.2
done

# curl: the raw protocol
curl -sf "$url/v1/models" | grep -q '"id":"dsv4-tiny"'
curl -sf "$url/v1/completions" -d "{\"prompt\": \"$prompt\", \"max_tokens\": 32, \"temperature\": 0}" \
  | python3 -c 'import json, sys; t = json.load(sys.stdin)["choices"][0]["text"]; w = open(sys.argv[1]).read().rstrip("\n"); assert t == w, (t, w)' "$work/greedy.txt"
curl -sfN "$url/v1/chat/completions" \
  -d '{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "stream": true}' >"$work/sse.txt"
tail -n 2 "$work/sse.txt" | grep -q '^data: \[DONE\]$'
test "$(curl -s -o /dev/null -w '%{http_code}' "$url/v1/chat/completions" -d '{"messages": [')" = 400
test "$(head -c 2000000 /dev/zero | tr '\0' x | curl -s -o /dev/null -w '%{http_code}' --data-binary @- "$url/v1/completions")" = 413
echo "curl checks passed"

# the openai client
timeout 480 "$work/venv/bin/python" tests/server/check_server.py "$url" dsv4-tiny "$work/greedy.txt"
kill -0 "$server_pid" # still up
kill -INT "$server_pid"
wait "$server_pid"
server_pid=
grep -q "stopping" "$work/server.log"

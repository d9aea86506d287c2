#!/usr/bin/env bash
# Instructions per request in the proxy, counted by callgrind (repeatable on a noisy machine,
# unlike requests/s). Starts one master and the release proxy (N=1, single-threaded) under
# valgrind, drives it with redis-benchmark, and prints the total and per-request counts.
# Usage: benches/callgrind.sh [PIPELINE=16] [REQUESTS=100000]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
pipeline=${1:-16}
requests=${2:-100000}
scripts/deps.sh dev
command -v valgrind >/dev/null || { echo "needs valgrind (apt-get install valgrind)" >&2; exit 1; }
cargo build --release -q --bin redlock-proxy
tmp="$(mktemp -d)"
read -r master proxy <<<"$(python3 -c '
import socket
a, b = socket.socket(), socket.socket()
a.bind(("127.0.0.1", 0)); b.bind(("127.0.0.1", 0))
print(a.getsockname()[1], b.getsockname()[1])')"
redis-server --port "$master" --bind 127.0.0.1 --save '' --appendonly no --dir "$tmp" >/dev/null &
mpid=$!
valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.out" target/release/redlock-proxy \
  --listen "127.0.0.1:$proxy" --backends "127.0.0.1:$master" --set threads=1 --set quarantine=false \
  >"$tmp/proxy.log" 2>&1 &
vpid=$!
trap 'kill $mpid $vpid 2>/dev/null || true; rm -rf "$tmp"' EXIT
for _ in $(seq 200); do redis-cli -p "$proxy" ping >/dev/null 2>&1 && break; sleep 0.1; done
redis-benchmark -p "$proxy" -c 50 -n "$requests" -r 100000000 -P "$pipeline" -q \
  SET lock:__rand_int__ tok NX PX 30000 2>/dev/null | tr '\r' '\n' | tail -1
kill -INT "$vpid"; wait "$vpid" 2>/dev/null || true
total=$(callgrind_annotate "$tmp/cg.out" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
echo "instructions: $total total, $((total / requests)) per request (start-up included)"

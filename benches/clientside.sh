#!/usr/bin/env bash
# Client-side Redlock versus the proxy, in one run on the same masters.
# Starts N masters on free ports and the release proxy in front of them, then runs
# benches/clientside.js (node-redlock, ioredis) and benches/clientside.py (redis-py).
# Env: BENCH_MASTERS (default 5), BENCH_SECONDS (default 5), BENCH_CONCURRENCY (default 50),
# BENCH_NO_BUILD=1 (use the existing target/release binary).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
scripts/deps.sh test
[ "${BENCH_NO_BUILD:-0}" = 1 ] || cargo build --release -q --bin redlock-proxy
n=${BENCH_MASTERS:-5}
. benches/lib.sh
read -r -a ports <<<"$(free_ports $((n + 1)))"
proxy_port=${ports[n]}
start_masters "${ports[@]:0:n}"
# Fresh empty masters: restart quarantine would keep them out of the quorum for max_ttl_ms first.
target/release/redlock-proxy --listen "127.0.0.1:$proxy_port" --backends "$backends" \
  --set quarantine=false >"$tmp/proxy.log" 2>&1 &
pids+=($!)
wait_ping "$proxy_port"
{
  node benches/clientside.js "$proxy_port" "${BENCH_SECONDS:-5}" "${BENCH_CONCURRENCY:-50}" "${ports[@]:0:n}"
  tests/clients/.venv/bin/python benches/clientside.py "$proxy_port" "${BENCH_SECONDS:-5}" \
    "${BENCH_CONCURRENCY:-50}" "${ports[@]:0:n}"
} | python3 -c '
import json, sys
rows = [json.loads(l) for l in sys.stdin if l.strip()]
base = {}
print("%-52s %10s %15s" % ("mode", "cycles/s", "vs client-side"))
for r in rows:
    lib = "py" if r["mode"].startswith("redis-py") else "node"
    base.setdefault(lib, r["cycles_per_s"] or 1)
    print("%-52s %10d %14.2fx" % (r["mode"], r["cycles_per_s"], r["cycles_per_s"] / base[lib]))'

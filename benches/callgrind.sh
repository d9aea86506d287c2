#!/usr/bin/env bash
# Instructions per request, counted by callgrind (repeatable on a noisy machine, unlike req/s).
# Starts N masters and the release proxy (single-threaded) under valgrind, drives it with
# redis-benchmark `SET lock:<rand> tok NX PX 30000`, and prints the total and per-request counts.
# With N=1 it then counts twemproxy (nutcracker, its whole process under callgrind) in front of
# the same master with the same load, and prints both figures in one run.
# Usage: benches/callgrind.sh [-n MASTERS=1] [-P PIPELINE=16] [-r REQUESTS=100000] [-t proxy|twem|both]
# The callgrind files are kept in target/callgrind/ for `callgrind_annotate --inclusive=yes --tree=caller`.
# Under valgrind the proxy runs ~50x slower (p50 ~200 ms at -P16), so with the default 50 ms
# node timeout about half of the requests would time out and take the refusal + roll-back path
# (and at N=5 the 1 s stall timeout marks masters down); the proxy therefore runs with
# node_timeout_ms=10000 (BENCH_NODE_TIMEOUT_MS) and stall_timeout_ms=60000, and the script prints
# how many requests were granted (INFO locks_granted), so the count is that of the grant path.
# Env: BENCH_PROXY_BIN (default target/release/redlock-proxy; BENCH_NO_BUILD=1 skips the build),
# BENCH_PROXY_ARGS (extra arguments for the proxy, e.g. "--set lease_keys=[\"other:*\"]").
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
masters=1 pipeline=16 requests=100000 which=both
while getopts "n:P:r:t:" o; do
  case "$o" in
    n) masters=$OPTARG ;;
    P) pipeline=$OPTARG ;;
    r) requests=$OPTARG ;;
    t) which=$OPTARG ;;
    *) sed -n 7p "$0" >&2; exit 2 ;;
  esac
done
# Old positional form: callgrind.sh PIPELINE REQUESTS.
shift $((OPTIND - 1))
pipeline=${1:-$pipeline}
requests=${2:-$requests}
scripts/deps.sh dev
command -v valgrind >/dev/null || { echo "needs valgrind (apt-get install valgrind)" >&2; exit 1; }
nut=$(command -v nutcracker || echo /usr/sbin/nutcracker)
if [ "$which" != proxy ] && [ "$masters" = 1 ] && [ ! -x "$nut" ]; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nutcracker >/dev/null 2>&1 ||
    { apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nutcracker >/dev/null; }
fi
[ "${BENCH_NO_BUILD:-0}" = 1 ] || cargo build --release -q --bin redlock-proxy
out="$root/target/callgrind"
mkdir -p "$out"
. benches/lib.sh
read -r -a ports <<<"$(free_ports $((masters + 2)))"
start_masters "${ports[@]:0:masters}"

# count NAME PORT CMD...: run CMD under callgrind, load it, print instructions per request.
count() {
  local name=$1 port=$2 file="$out/$1-n$masters-P$pipeline.out" vpid total rps
  shift 2
  for p in "${ports[@]:0:masters}"; do redis-cli -p "$p" flushall >/dev/null; done
  valgrind --tool=callgrind --callgrind-out-file="$file" "$@" >"$tmp/$name.log" 2>&1 &
  vpid=$!
  pids+=($vpid)
  PING_TRIES=300 wait_ping "$port"  # valgrind starts slowly: up to 30 s
  rps=$(redis-benchmark -p "$port" -c 50 -n "$requests" -r 100000000 -P "$pipeline" -q \
    SET lock:__rand_int__ tok NX PX 30000 2>/dev/null | tr '\r' '\n' | grep 'requests per second' | tail -1)
  # Grants as the proxy counts them (keys on the masters may have expired on a long run).
  granted=$(redis-cli -p "$port" info redlock 2>/dev/null | tr -d '\r' | awk -F: '/^locks_granted:/ {print $2}' || true)
  kill -INT "$vpid"
  wait "$vpid" 2>/dev/null || true
  total=$(callgrind_annotate "$file" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
  if [ -z "$granted" ]; then
    granted=$(redis-cli -p "${ports[0]}" dbsize)
  fi
  printf '%-10s N=%s -P%-3s %12s instructions, %6s per request (start-up included; %s of %s granted; under valgrind: %s)\n' \
    "$name" "$masters" "$pipeline" "$total" "$((total / requests))" "$granted" "$requests" "${rps:-no rate}"
}

if [ "$which" != twem ]; then
  count proxy "${ports[masters]}" "${BENCH_PROXY_BIN:-target/release/redlock-proxy}" \
    --listen "127.0.0.1:${ports[masters]}" --backends "$backends" --set threads=1 \
    --set quarantine=false --set node_timeout_ms="${BENCH_NODE_TIMEOUT_MS:-10000}" \
    --set stall_timeout_ms=60000 ${BENCH_PROXY_ARGS:-}
fi
if [ "$which" != proxy ]; then
  if [ "$masters" != 1 ]; then
    echo "twemproxy  N=$masters: not counted (twemproxy shards, it does not fan out; compare at N=1)"
  else
    cat >"$tmp/nut.yml" <<EOF
bench:
  listen: 127.0.0.1:${ports[masters + 1]}
  hash: fnv1a_64
  distribution: ketama
  redis: true
  preconnect: true
  auto_eject_hosts: false
  server_connections: 1
  timeout: 30000
  servers:
   - 127.0.0.1:${ports[0]}:1
EOF
    # -s 0 would be refused; give the stats server a loopback address on a kernel-chosen port.
    sport=$(free_ports 1)
    count twemproxy "${ports[masters + 1]}" "$nut" -c "$tmp/nut.yml" -o "$tmp/nut.out" -s "$sport" -a 127.0.0.1
  fi
fi
echo "callgrind files: $out/"

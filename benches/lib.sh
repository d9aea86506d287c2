# Shared by the bench scripts (sourced, not run): a temporary directory and process list cleaned
# up on exit, free loopback ports, masters started empty, waiting for a server to answer PING.
# After sourcing: $tmp is the directory, pids the processes to stop.

tmp="$(mktemp -d)"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT INT TERM

# free_ports N: N distinct free TCP ports on 127.0.0.1, chosen by the kernel, on one line.
free_ports() {
  python3 -c '
import socket, sys
ss = [socket.socket() for _ in range(int(sys.argv[1]))]
[s.bind(("127.0.0.1", 0)) for s in ss]
print(" ".join(str(s.getsockname()[1]) for s in ss))' "$1"
}

# wait_ping PORT...: wait (up to PING_TRIES × 0.1 s each, default 10 s) until each port answers
# PING.
wait_ping() {
  local p
  for p in "$@"; do
    for _ in $(seq "${PING_TRIES:-100}"); do redis-cli -p "$p" ping >/dev/null 2>&1 && break; sleep 0.1; done
  done
}

# start_masters PORT... [-- EXTRA redis-server ARGS]: empty, persistence-free masters on the
# ports, waited for; sets $backends to their comma-separated addresses.
start_masters() {
  local ports=() extra=() p
  while [ $# -gt 0 ] && [ "$1" != -- ]; do ports+=("$1"); shift; done
  [ $# -gt 0 ] && shift && extra=("$@")
  backends=""
  for p in "${ports[@]}"; do
    redis-server --port "$p" --bind 127.0.0.1 --save '' --appendonly no --dir "$tmp" \
      "${extra[@]}" >"$tmp/master-$p.log" 2>&1 &
    pids+=($!)
    backends+="${backends:+,}127.0.0.1:$p"
  done
  wait_ping "${ports[@]}"
}

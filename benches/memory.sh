#!/usr/bin/env bash
# RSS per idle client connection, redlock-proxy and twemproxy in one run, and a 10,000-connection
# check of the proxy with default settings.
# Each target gets CONNS connections that each send one PING and read +PONG, then stay idle;
# KB/connection = (VmRSS after - VmRSS before) / CONNS.
# Usage: benches/memory.sh   Env: BENCH_CONNS (default 5000), BENCH_BIG (default 10000),
#                                 BENCH_NO_BUILD=1 (use the existing target/release binary),
#                                 BENCH_PROXY_ARGS (extra proxy flags, e.g. "--set threads=1"),
#                                 BENCH_PROXY_BIN (default target/release/redlock-proxy).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
conns=${BENCH_CONNS:-5000}
big=${BENCH_BIG:-10000}
scripts/deps.sh dev
nut=$(command -v nutcracker || echo /usr/sbin/nutcracker)
if [ ! -x "$nut" ]; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nutcracker >/dev/null 2>&1 ||
    { apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nutcracker >/dev/null; }
fi
[ "${BENCH_NO_BUILD:-0}" = 1 ] || cargo build --release -q --bin redlock-proxy
# The client side holds up to $big sockets. The RSS figures are taken with the raised limit for
# both targets; the 10,000-connection check runs a second proxy started with the default soft
# limit (1024; the hard limit stays as it is), since the proxy is meant to raise its own soft limit.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || ulimit -n 65536 || true
. benches/lib.sh
read -r master proxy twem stats proxy2 <<<"$(free_ports 5)"
start_masters "$master"
"${BENCH_PROXY_BIN:-target/release/redlock-proxy}" --listen "127.0.0.1:$proxy" --backends "127.0.0.1:$master" \
  --set quarantine=false ${BENCH_PROXY_ARGS:-} >"$tmp/proxy.log" 2>&1 &
ppid=$!
pids+=($ppid)
# A second proxy for the 10,000-connection check, started with the default soft limit (1024).
(ulimit -Sn 1024 && exec "${BENCH_PROXY_BIN:-target/release/redlock-proxy}" --listen "127.0.0.1:$proxy2" \
  --backends "127.0.0.1:$master" --set quarantine=false) >"$tmp/proxy2.log" 2>&1 &
ppid2=$!
pids+=($ppid2)
cat >"$tmp/nut.yml" <<EOF
bench:
  listen: 127.0.0.1:$twem
  redis: true
  preconnect: true
  server_connections: 1
  servers:
   - 127.0.0.1:$master:1
EOF
"$nut" -c "$tmp/nut.yml" -o "$tmp/nut.log" -s "$stats" -a 127.0.0.1 &
tpid=$!
pids+=($tpid)
wait_ping "$proxy" "$twem" "$proxy2"

# hold NAME PID PORT COUNT: open COUNT connections, PING each, report the RSS growth.
hold() {
  python3 - "$@" <<'PY'
import resource, socket, sys, time
name, pid, port, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
def rss_kb():
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
time.sleep(0.5)
before = rss_kb()
socks, failed, streak = [], 0, 0
for i in range(count):
    if streak >= 20:  # the target stopped accepting: count the rest as failed, do not wait on each
        failed += count - i
        break
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=2)
        s.sendall(b"*1\r\n$4\r\nPING\r\n")
        reply = b""
        while not reply.endswith(b"\r\n"):
            chunk = s.recv(64)
            if not chunk:
                break
            reply += chunk
        if reply != b"+PONG\r\n":
            failed += 1
            streak += 1
            s.close()
            continue
        socks.append(s)
        streak = 0
    except OSError:
        failed += 1
        streak += 1
time.sleep(1.0)
after = rss_kb()
ok = len(socks)
per = (after - before) / ok if ok else float("nan")
print(f"{name:<10} {ok:>6} idle connections ({failed} failed): RSS {before} KB -> {after} KB, "
      f"{per:.2f} KB/connection")
for s in socks:
    s.close()
PY
}
echo "RSS per idle connection, $conns connections each doing one PING (load: $(cut -d' ' -f1-3 /proc/loadavg))"
hold redlock-proxy "$ppid" "$proxy" "$conns"
hold twemproxy "$tpid" "$twem" "$conns"
sleep 1
echo "$big connections to the proxy started with the default open-files soft limit (1024):"
hold redlock-proxy "$ppid2" "$proxy2" "$big"

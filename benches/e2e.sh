#!/usr/bin/env bash
# End-to-end throughput benchmark for redlock-proxy.
#
# Compares, with redis-benchmark issuing `SET lock:<rand> tok NX PX 30000`:
#   direct     - one redis-server master, no proxy
#   proxy-n1   - redlock-proxy in front of 1 master
#   proxy-n5   - redlock-proxy in front of 5 masters (quorum 3)
#   proxy-n1-lease - proxy-n1 with leases on for keys the benchmark does not use
#                (`lease_keys = ["other:*"]`, opt-in through BENCH_TARGETS): what leases cost a
#                client that does not use them
#   proxy-n1-t2, proxy-n5-t2 - the same with `--set threads=2` (opt-in through BENCH_TARGETS,
#                to compare with the default thread count within one interleaved run; the
#                default is one worker per two cores, so a single-threaded runtime on 2 cores)
#   twemproxy  - nutcracker in front of 1 master
# at pipeline depth P=1 and P=16, and prints a table of req/s, ratios, latency and the CPU
# time each proxy spent per request (user + system, from /proc/<pid>/stat around each run:
# steadier than req/s on a shared machine; written as markdown to target/bench-e2e.md too).
# With twemproxy among the targets it also prints each target's ratio to twemproxy paired by
# round (the median of the per-round ratios, their range and how many rounds were ahead).
#
# Environment:
#   BENCH_REQUESTS_P1    requests for P=1  (default 200000)
#   BENCH_REQUESTS_P16   requests for P=16 (default 1000000)
#   BENCH_QUICK=1        smoke run: 20000 requests each (explicit
#                        BENCH_REQUESTS_* still win)
#   BENCH_ROUNDS         interleaved rounds; each figure is the median (default 5, quick 3)
#   BENCH_CYCLES=0       skip the lock+unlock cycle benchmark (benches/clientside.sh at
#                        N=3 and N=5: redis-py and node-redlock, through the proxy vs
#                        Redlock done client-side against the same masters)
#   BENCH_CYCLE_SECONDS  seconds per cycle-benchmark mode (default 10, quick 3)
#   BENCH_CLIENTS        redis-benchmark connections (default 50)
#   BENCH_PROXY_ARGS     extra arguments for the proxy (e.g. "--set threads=2")
#   BENCH_TARGETS        space/comma separated subset of
#                        "direct proxy-n1 proxy-n5 twemproxy" (default: all) plus
#                        proxy-n1-t2 proxy-n5-t2 proxy-n1-lease
#   BENCH_NO_BUILD=1     skip `cargo build --release` (use existing binary)
#   BENCH_STARTUP_TIMEOUT seconds to wait for a target to answer PING (default 20)
#   BENCH_RUN_TIMEOUT    seconds before one redis-benchmark run is aborted (default 900)
#   BENCH_KEEP_TMP=1     keep the temp dir (logs, configs) after exit
#
# Everything listens on 127.0.0.1 on kernel-chosen free ports; every process
# started here is stopped on exit (including errors and Ctrl-C).
set -Eeuo pipefail

# ---------------------------------------------------------------- settings
SCRIPT_DIR=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd -- "$SCRIPT_DIR/.." && pwd)
if [[ ! -f "$REPO_ROOT/Cargo.toml" ]]; then
    echo "e2e: cannot find Cargo.toml in $REPO_ROOT" >&2
    exit 1
fi
cd "$REPO_ROOT"
TARGET_DIR=${CARGO_TARGET_DIR:-$REPO_ROOT/target}
PROXY_BIN="$TARGET_DIR/release/redlock-proxy"
REPORT_MD="$TARGET_DIR/bench-e2e.md"

if [[ "${BENCH_QUICK:-0}" == "1" ]]; then
    N_P1=${BENCH_REQUESTS_P1:-20000}
    N_P16=${BENCH_REQUESTS_P16:-50000}
    ROUNDS=${BENCH_ROUNDS:-3}
    CYCLE_SECONDS=${BENCH_CYCLE_SECONDS:-3}
else
    ROUNDS=${BENCH_ROUNDS:-5}
    CYCLE_SECONDS=${BENCH_CYCLE_SECONDS:-10}
    N_P1=${BENCH_REQUESTS_P1:-200000}
    N_P16=${BENCH_REQUESTS_P16:-1000000}
fi
CLIENTS=${BENCH_CLIENTS:-50}
STARTUP_TIMEOUT=${BENCH_STARTUP_TIMEOUT:-20}
RUN_TIMEOUT=${BENCH_RUN_TIMEOUT:-900}
ALL_TARGETS=(direct proxy-n1 proxy-n5 twemproxy)
TARGETS_SPEC=${BENCH_TARGETS:-${ALL_TARGETS[*]}}
read -r -a TARGETS <<<"${TARGETS_SPEC//,/ }"
((${#TARGETS[@]})) || { echo "e2e: BENCH_TARGETS is empty" >&2; exit 1; }
N_MASTERS=5
BENCH_CMD=(SET 'lock:__rand_int__' tok NX PX 30000)

for v in N_P1 N_P16 ROUNDS CYCLE_SECONDS CLIENTS STARTUP_TIMEOUT RUN_TIMEOUT; do
    if ! [[ "${!v}" =~ ^[1-9][0-9]*$ ]]; then
        echo "e2e: $v must be a positive integer, got '${!v}'" >&2
        exit 1
    fi
done
for t in "${TARGETS[@]}"; do
    case "$t" in
        direct | proxy-n1 | proxy-n5 | proxy-n1-t2 | proxy-n5-t2 | proxy-n1-lease | twemproxy) ;;
        *)
            echo "e2e: unknown target '$t' (known: ${ALL_TARGETS[*]})" >&2
            exit 1
            ;;
    esac
done

log() { printf '[e2e %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() {
    log "ERROR: $*"
    exit 1
}

# ------------------------------------------------------------- cleanup
TMP_DIR=$(mktemp -d "${TMPDIR:-/tmp}/redlock-e2e.XXXXXX")
PIDS=()      # every background process we started
FAILED=1     # cleared just before a successful exit

cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    local pid
    for pid in "${PIDS[@]}"; do
        kill -TERM "$pid" 2>/dev/null || true
    done
    # Give them up to ~5 s to go away, then SIGKILL the stragglers.
    local i alive
    for ((i = 0; i < 50; i++)); do
        alive=0
        for pid in "${PIDS[@]}"; do
            if kill -0 "$pid" 2>/dev/null; then alive=1; fi
        done
        ((alive)) || break
        sleep 0.1
    done
    for pid in "${PIDS[@]}"; do
        kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    if ((FAILED)) || [[ "${BENCH_KEEP_TMP:-0}" == "1" ]]; then
        echo "[e2e] logs and configs kept in $TMP_DIR" >&2
    else
        rm -rf -- "$TMP_DIR"
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ------------------------------------------------------------ packages
SUDO=()
if [[ $(id -u) -ne 0 ]] && command -v sudo >/dev/null 2>&1; then
    SUDO=(sudo)
fi

# nutcracker lives in /usr/sbin, which is not on a non-root user's PATH on Debian.
find_cmd() {
    local name=$1 d
    if command -v "$name" >/dev/null 2>&1; then
        command -v "$name"
        return 0
    fi
    for d in /usr/sbin /sbin /usr/local/sbin; do
        if [[ -x "$d/$name" ]]; then
            echo "$d/$name"
            return 0
        fi
    done
    return 1
}

apt_install() {
    command -v apt-get >/dev/null 2>&1 || die "missing packages ($*) and no apt-get to install them"
    log "installing: $*"
    if ! "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >"$TMP_DIR/apt.log" 2>&1; then
        log "apt-get install failed; running apt-get update and retrying"
        "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q >>"$TMP_DIR/apt.log" 2>&1 ||
            die "apt-get update failed (see $TMP_DIR/apt.log)"
        "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >>"$TMP_DIR/apt.log" 2>&1 ||
            die "apt-get install $* failed (see $TMP_DIR/apt.log)"
    fi
}

ensure_tools() {
    local -A pkg_for=(
        [redis-server]=redis-server
        [redis-cli]=redis-tools
        [redis-benchmark]=redis-tools
        [nutcracker]=nutcracker
        [python3]=python3
        [timeout]=coreutils
    )
    local need=() cmd p
    for cmd in "${!pkg_for[@]}"; do
        if [[ "$cmd" == nutcracker ]] && ! want_target twemproxy; then continue; fi
        if ! find_cmd "$cmd" >/dev/null; then
            p=${pkg_for[$cmd]}
            [[ " ${need[*]} " == *" $p "* ]] || need+=("$p")
        fi
    done
    if ((${#need[@]})); then apt_install "${need[@]}"; fi
    REDIS_SERVER=$(find_cmd redis-server) || die "redis-server not found"
    REDIS_CLI=$(find_cmd redis-cli) || die "redis-cli not found"
    REDIS_BENCHMARK=$(find_cmd redis-benchmark) || die "redis-benchmark not found"
    if want_target twemproxy; then
        NUTCRACKER=$(find_cmd nutcracker) || die "nutcracker not found"
    fi
}

want_target() {
    local t
    for t in "${TARGETS[@]}"; do [[ "$t" == "$1" ]] && return 0; done
    return 1
}

# --------------------------------------------------------------- helpers
# Print N distinct free TCP ports on 127.0.0.1, chosen by the kernel. All
# sockets are held open together so the ports are distinct; the window
# between closing them and our servers binding them is tiny, and every
# server start is verified (process alive + answers PING) anyway.
free_ports() {
    python3 - "$1" <<'PY'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
for s in socks:
    s.close()
PY
}

rcli() { # rcli PORT ARGS...   (bounded, never hangs)
    local port=$1
    shift
    timeout 5 "$REDIS_CLI" -h 127.0.0.1 -p "$port" "$@"
}

# wait_ready NAME PID PORT LOGFILE: bounded wait until PORT answers PING.
wait_ready() {
    local name=$1 pid=$2 port=$3 logf=$4 deadline reply
    deadline=$((SECONDS + STARTUP_TIMEOUT))
    while :; do
        if ! kill -0 "$pid" 2>/dev/null; then
            tail -n 20 "$logf" >&2 || true
            die "$name (pid $pid) exited during startup; log: $logf"
        fi
        reply=$(timeout 2 "$REDIS_CLI" -h 127.0.0.1 -p "$port" ping 2>/dev/null || true)
        [[ "$reply" == PONG ]] && return 0
        if ((SECONDS >= deadline)); then
            tail -n 20 "$logf" >&2 || true
            die "$name did not answer PING on 127.0.0.1:$port within ${STARTUP_TIMEOUT}s; log: $logf"
        fi
        sleep 0.1
    done
}

# start_bg NAME LOGFILE CMD...: start CMD in the background, record its pid.
LAST_PID=
start_bg() {
    local name=$1 logf=$2
    shift 2
    log "starting $name:$(printf ' %q' "$@")"
    "$@" >"$logf" 2>&1 </dev/null &
    LAST_PID=$!
    PIDS+=("$LAST_PID")
}

stop_pid() {
    local pid=$1 i
    kill -TERM "$pid" 2>/dev/null || return 0
    for ((i = 0; i < 50; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}

flush_masters() {
    local p out
    for p in "${MASTER_PORTS[@]}"; do
        out=$(rcli "$p" FLUSHALL) || die "FLUSHALL on master :$p failed"
        [[ "$out" == OK ]] || die "FLUSHALL on master :$p replied '$out'"
    done
}

dbsize() { rcli "$1" DBSIZE; }

# Correctness smoke test through a target before benchmarking it:
# first SET NX must reply OK, the second (same key) must reply nil.
check_lock_semantics() {
    local name=$1 port=$2 key first second
    key="lock:e2e-check-$$-$RANDOM"
    first=$(rcli "$port" SET "$key" tok NX PX 30000) || die "$name: SET NX failed"
    second=$(rcli "$port" SET "$key" tok2 NX PX 30000) || die "$name: second SET NX failed"
    [[ "$first" == OK ]] || die "$name: first SET NX replied '$first' (expected OK)"
    [[ -z "$second" ]] || die "$name: second SET NX replied '$second' (expected nil)"
}

# Parse requests/s out of redis-benchmark --csv output. redis-benchmark >= 6.2
# prints a header ("test","rps","avg_latency_ms",...) and one row per test, the
# test name being the whole custom command line ("SET lock:__rand_int__ tok NX
# PX 30000") in quotes; older versions print just "name","rps". Progress lines
# may be \r-separated, so split on \r as well.
parse_rps() {
    python3 - "$1" <<'PY'
import csv, io, sys
text = open(sys.argv[1], encoding="utf-8", errors="replace").read().replace("\r", "\n")
col, c50, c99, rps, p50, p99 = 1, None, None, None, "-", "-"
for row in csv.reader(io.StringIO(text)):
    if not row:
        continue
    if row[0] == "test" and "rps" in row:
        col = row.index("rps")
        c50 = row.index("p50_latency_ms") if "p50_latency_ms" in row else None
        c99 = row.index("p99_latency_ms") if "p99_latency_ms" in row else None
        continue
    if len(row) > col:
        try:
            rps = float(row[col])
            if c50 is not None and c99 is not None and len(row) > max(c50, c99):
                p50, p99 = row[c50], row[c99]
        except ValueError:
            pass
if rps is None:
    sys.exit(1)
print("%.2f %s %s" % (rps, p50, p99))
PY
}

# run_bench NAME PORT PIPELINE REQUESTS -> sets BENCH_RPS.
# redis-benchmark runs in the background and is waited for, so a TERM/INT to
# this script is handled at once (cleanup kills the benchmark too).
BENCH_RPS= BENCH_P50= BENCH_P99=
run_bench() {
    local name=$1 port=$2 pipeline=$3 n=$4 out err nerr bpid brc=0
    out="$TMP_DIR/bench-$name-P$pipeline.csv"
    err="$TMP_DIR/bench-$name-P$pipeline.err"
    log "redis-benchmark $name P=$pipeline n=$n c=$CLIENTS"
    # timeout: redis-benchmark has no I/O timeout of its own (e.g. its
    # startup CONFIG GET blocks forever if a target swallows the command).
    timeout --kill-after=10 "$RUN_TIMEOUT" "$REDIS_BENCHMARK" -h 127.0.0.1 -p "$port" -c "$CLIENTS" -n "$n" -r 100000000 \
        -P "$pipeline" --csv "${BENCH_CMD[@]}" >"$out" 2>"$err" </dev/null &
    bpid=$!
    PIDS+=("$bpid")
    wait "$bpid" || brc=$?
    if ((brc == 124)); then
        die "redis-benchmark against $name (P=$pipeline) timed out after ${RUN_TIMEOUT}s"
    elif ((brc != 0)); then
        cat "$out" "$err" >&2 || true
        die "redis-benchmark against $name (P=$pipeline) failed (exit $brc)"
    fi
    # "WARNING: Could not fetch server CONFIG" is expected behind proxies
    # (twemproxy/redlock-proxy don't implement CONFIG); real errors are not.
    nerr=$(grep -c -i -E '^(Error|ERR)' "$err" || true)
    if ((nerr > 0)); then
        head -n 5 "$err" >&2
        die "redis-benchmark against $name (P=$pipeline) reported $nerr server error line(s)"
    fi
    local parsed
    parsed=$(parse_rps "$out") || {
        cat "$out" >&2
        die "could not parse requests/s from redis-benchmark output ($out)"
    }
    read -r BENCH_RPS BENCH_P50 BENCH_P99 <<<"$parsed"
    log "  $name P=$pipeline: $BENCH_RPS req/s, p50 $BENCH_P50 ms, p99 $BENCH_P99 ms"
}

# ------------------------------------------------------------------ main
ensure_tools
command -v python3 >/dev/null 2>&1 || die "python3 not found"

if want_target proxy-n1 || want_target proxy-n5 || want_target proxy-n1-t2 || want_target proxy-n5-t2 || want_target proxy-n1-lease; then
    if [[ "${BENCH_NO_BUILD:-0}" != "1" ]]; then
        command -v cargo >/dev/null 2>&1 || die "cargo not found (install Rust, or set BENCH_NO_BUILD=1 with a prebuilt binary)"
        log "cargo build --release"
        cargo build --release --bin redlock-proxy >&2 || die "cargo build --release failed"
    fi
    [[ -x "$PROXY_BIN" ]] || die "proxy binary not found at $PROXY_BIN"
    "$PROXY_BIN" --help >/dev/null 2>&1 || die "$PROXY_BIN --help failed"
fi

# 5 masters + proxy-n1 + proxy-n5 + nutcracker + nutcracker stats port + the two -t2 proxies
# + the leases proxy.
read -r -a PORTS <<<"$(free_ports $((N_MASTERS + 7)))"
((${#PORTS[@]} == N_MASTERS + 7)) || die "could not allocate free ports"
MASTER_PORTS=("${PORTS[@]:0:N_MASTERS}")
PORT_PROXY_N1=${PORTS[N_MASTERS]}
PORT_PROXY_N5=${PORTS[N_MASTERS + 1]}
PORT_TWEM=${PORTS[N_MASTERS + 2]}
PORT_TWEM_STATS=${PORTS[N_MASTERS + 3]}
PORT_PROXY_N1_T2=${PORTS[N_MASTERS + 4]}
PORT_PROXY_N5_T2=${PORTS[N_MASTERS + 5]}
PORT_PROXY_N1_LEASE=${PORTS[N_MASTERS + 6]}

MASTER_PIDS=()
for i in "${!MASTER_PORTS[@]}"; do
    p=${MASTER_PORTS[i]}
    mkdir -p "$TMP_DIR/redis-$p"
    start_bg "master$((i + 1))" "$TMP_DIR/redis-$p.log" \
        "$REDIS_SERVER" --port "$p" --bind 127.0.0.1 --daemonize no \
        --save '' --appendonly no --dir "$TMP_DIR/redis-$p" --logfile '' \
        --protected-mode yes --maxclients 10000
    MASTER_PIDS+=("$LAST_PID")
done
for i in "${!MASTER_PORTS[@]}"; do
    wait_ready "master$((i + 1))" "${MASTER_PIDS[i]}" "${MASTER_PORTS[i]}" "$TMP_DIR/redis-${MASTER_PORTS[i]}.log"
done
log "masters up on ports ${MASTER_PORTS[*]}"

# Start one target; sets TARGET_PORT and TARGET_PID.
start_target() {
    local t=$1 backends i
    case "$t" in
        direct)
            TARGET_PORT=${MASTER_PORTS[0]}
            TARGET_PID=
            ;;
        proxy-n1 | proxy-n5 | proxy-n1-t2 | proxy-n5-t2 | proxy-n1-lease)
            local extra=
            [[ "$t" == *-t2 ]] && extra="--set threads=2"
            [[ "$t" == *-lease ]] && extra="--set lease_keys=[\"other:*\"]"
            if [[ "$t" == proxy-n1* ]]; then
                TARGET_PORT=$PORT_PROXY_N1
                [[ "$t" == *-t2 ]] && TARGET_PORT=$PORT_PROXY_N1_T2
                [[ "$t" == *-lease ]] && TARGET_PORT=$PORT_PROXY_N1_LEASE
                backends="127.0.0.1:${MASTER_PORTS[0]}"
            else
                TARGET_PORT=$PORT_PROXY_N5
                [[ "$t" == *-t2 ]] && TARGET_PORT=$PORT_PROXY_N5_T2
                backends=
                for i in "${!MASTER_PORTS[@]}"; do
                    backends+="${backends:+,}127.0.0.1:${MASTER_PORTS[i]}"
                done
            fi
            # The masters were started empty a moment ago: restart quarantine would keep them
            # out of the quorum for max_ttl_ms first, so it is off for the benchmark.
            start_bg "$t" "$TMP_DIR/$t.log" \
                "$PROXY_BIN" --listen "127.0.0.1:$TARGET_PORT" --backends "$backends" \
                --set quarantine=false ${BENCH_PROXY_ARGS:-} $extra
            TARGET_PID=$LAST_PID
            wait_ready "$t" "$TARGET_PID" "$TARGET_PORT" "$TMP_DIR/$t.log"
            ;;
        twemproxy)
            TARGET_PORT=$PORT_TWEM
            local conf="$TMP_DIR/nutcracker.yml"
            cat >"$conf" <<EOF
bench:
  listen: 127.0.0.1:$PORT_TWEM
  hash: fnv1a_64
  distribution: ketama
  redis: true
  preconnect: true
  auto_eject_hosts: false
  server_connections: 1
  timeout: 30000
  backlog: 1024
  client_connections: 0
  servers:
   - 127.0.0.1:${MASTER_PORTS[0]}:1
EOF
            "$NUTCRACKER" --test-conf -c "$conf" >"$TMP_DIR/nutcracker-test.log" 2>&1 || {
                cat "$TMP_DIR/nutcracker-test.log" >&2
                die "nutcracker rejected $conf"
            }
            # -o: log file (default /var/log/nutcracker/...); -s/-a: the stats
            # server otherwise binds 0.0.0.0:22222, a fixed port.
            start_bg twemproxy "$TMP_DIR/twemproxy.log" \
                "$NUTCRACKER" -c "$conf" -o "$TMP_DIR/nutcracker.log" -v 4 \
                -s "$PORT_TWEM_STATS" -a 127.0.0.1
            TARGET_PID=$LAST_PID
            wait_ready twemproxy "$TARGET_PID" "$TARGET_PORT" "$TMP_DIR/nutcracker.log"
            ;;
    esac
}

# All targets are started once and stay up; every round runs each target in turn
# (round-robin, reversed every other round), so a slow spell on the shared machine hits
# every target alike. The figure per target is the median over the rounds.
declare -A TPORT TPID
for t in "${TARGETS[@]}"; do
    flush_masters
    start_target "$t"
    check_lock_semantics "$t" "$TARGET_PORT"
    TPORT[$t]=$TARGET_PORT
    TPID[$t]=$TARGET_PID
done
declare -A ALL1 ALL16 P50_1 P99_1 P50_16 P99_16 RPS1 RPS16 CPU_1 CPU_16
CLK_TCK=$(getconf CLK_TCK)
# cpu_ticks PID: user + system clock ticks of every thread of PID so far (empty without a PID).
cpu_ticks() {
    if [[ -n "${1:-}" ]]; then
        awk '{ print $14 + $15 }' "/proc/$1/stat"
    fi
}
for ((round = 1; round <= ROUNDS; round++)); do
    log "round $round of $ROUNDS"
    # Every other round runs the targets in reverse order, so none is always the one that
    # follows a given other (its leftovers: freed memory, a warm or cold cache).
    ORDER=("${TARGETS[@]}")
    if ((round % 2 == 0)); then
        ORDER=()
        for ((i = ${#TARGETS[@]} - 1; i >= 0; i--)); do ORDER+=("${TARGETS[i]}"); done
    fi
    for t in "${ORDER[@]}"; do
        for pl in 1 16; do
            flush_masters
            if ((pl == 1)); then n=$N_P1; else n=$N_P16; fi
            cpu0=$(cpu_ticks "${TPID[$t]}")
            run_bench "$t" "${TPORT[$t]}" "$pl" "$n"
            cpu1=$(cpu_ticks "${TPID[$t]}")
            # CPU µs per request (clock ticks of 1/CLK_TCK s); "-" for direct (no proxy).
            if [[ -n "$cpu0" && -n "$cpu1" ]]; then
                cpu=$(awk -v d=$((cpu1 - cpu0)) -v hz="$CLK_TCK" -v n="$n" 'BEGIN { printf "%.2f", d / hz * 1e6 / n }')
                if ((pl == 1)); then CPU_1[$t]+="$cpu "; else CPU_16[$t]+="$cpu "; fi
            fi
            if ((pl == 1)); then
                ALL1[$t]+="$BENCH_RPS "
                P50_1[$t]+="$BENCH_P50 "
                P99_1[$t]+="$BENCH_P99 "
            else
                ALL16[$t]+="$BENCH_RPS "
                P50_16[$t]+="$BENCH_P50 "
                P99_16[$t]+="$BENCH_P99 "
            fi
            keys=$(dbsize "${MASTER_PORTS[0]}")
            ((keys > 0)) || die "$t: master1 holds no keys after the P=$pl run; target did not write"
            if [[ "$t" == proxy-n5* ]]; then
                for p in "${MASTER_PORTS[@]:1}"; do
                    k=$(dbsize "$p")
                    ((k > 0)) || log "WARNING: proxy-n5 left master :$p empty"
                done
            fi
            if [[ -n "${TPID[$t]}" ]]; then
                kill -0 "${TPID[$t]}" 2>/dev/null || die "$t died during the benchmark (log in $TMP_DIR)"
            fi
        done
    done
done
median() { tr ' ' '\n' <<<"$1" | grep . | sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
for t in "${TARGETS[@]}"; do
    RPS1[$t]=$(median "${ALL1[$t]}")
    RPS16[$t]=$(median "${ALL16[$t]}")
    P50_1[$t]=$(median "${P50_1[$t]}")
    P99_1[$t]=$(median "${P99_1[$t]}")
    P50_16[$t]=$(median "${P50_16[$t]}")
    P99_16[$t]=$(median "${P99_16[$t]}")
    [[ -z "${CPU_1[$t]:-}" ]] || CPU_1[$t]=$(median "${CPU_1[$t]}")
    [[ -z "${CPU_16[$t]:-}" ]] || CPU_16[$t]=$(median "${CPU_16[$t]}")
    [[ -z "${TPID[$t]}" ]] || stop_pid "${TPID[$t]}"
done

# ---------------------------------------------------------------- report
ratio() { # ratio A B -> "A/B" formatted, or "-" if not available
    if [[ -z "${1:-}" || -z "${2:-}" ]]; then
        echo "-"
        return
    fi
    awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2fx", a / b; else print "-" }'
}
fmt_int() { awk -v x="$1" 'BEGIN { printf "%.0f", x }'; }
# paired A B -> "median (min–max, k of n ahead)" of the per-round ratios A[i]/B[i], where A and
# B list one req/s per round in round order. Both targets of a round ran within seconds of each
# other, so each ratio cancels most of the machine's slow and fast spells; "-" without B.
paired() {
    if [[ -z "${1:-}" || -z "${2:-}" ]]; then
        echo "-"
        return
    fi
    paste -d' ' <(tr ' ' '\n' <<<"$1" | grep .) <(tr ' ' '\n' <<<"$2" | grep .) |
        awk '$2 > 0 { print $1 / $2 }' | sort -g |
        awk '{ v[NR] = $1; if ($1 >= 1) ahead++ }
             END {
                 if (NR == 0) { print "-"; exit }
                 m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
                 printf "%.2fx (%.2f-%.2f, %d of %d ahead)\n", m, v[1], v[NR], ahead, NR
             }'
}

HEADERS=("target" "P=1 req/s" "P=16 req/s" "P=1 vs twem" "P=16 vs twem" "P=1 vs direct" "P=16 vs direct" "P=1 p50/p99 ms" "P=1 p50/p99 vs twem" "P=16 p50/p99 ms" "CPU µs/req P=1/16" "CPU vs twem P=1/16")
ROWS=()
for t in "${TARGETS[@]}"; do
    ROWS+=("$t|$(fmt_int "${RPS1[$t]}")|$(fmt_int "${RPS16[$t]}")|$(ratio "${RPS1[$t]}" "${RPS1[twemproxy]:-}")|$(ratio "${RPS16[$t]}" "${RPS16[twemproxy]:-}")|$(ratio "${RPS1[$t]}" "${RPS1[direct]:-}")|$(ratio "${RPS16[$t]}" "${RPS16[direct]:-}")|${P50_1[$t]}/${P99_1[$t]}|$(ratio "${P50_1[$t]}" "${P50_1[twemproxy]:-}")/$(ratio "${P99_1[$t]}" "${P99_1[twemproxy]:-}")|${P50_16[$t]}/${P99_16[$t]}|${CPU_1[$t]:--}/${CPU_16[$t]:--}|$(ratio "${CPU_1[$t]:-}" "${CPU_1[twemproxy]:-}")/$(ratio "${CPU_16[$t]:-}" "${CPU_16[twemproxy]:-}")")
done

# The same comparison paired by round: each round's req/s over twemproxy's in that round.
PAIRED=()
if want_target twemproxy; then
    for t in "${TARGETS[@]}"; do
        [[ "$t" != twemproxy ]] || continue
        PAIRED+=("$t|$(paired "${ALL1[$t]}" "${ALL1[twemproxy]}")|$(paired "${ALL16[$t]}" "${ALL16[twemproxy]}")")
    done
fi
PAIRED_HEADERS=("target" "P=1 vs twem, per round" "P=16 vs twem, per round")

TABLE_FMT='%-11s %10s %10s %11s %12s %13s %14s %15s %20s %15s %18s %19s\n'
echo
echo "median of $ROUNDS interleaved rounds; latency = redis-benchmark p50/p99 (ms); c=$CLIENTS"
# shellcheck disable=SC2059  # the format string is ours
printf "$TABLE_FMT" "${HEADERS[@]}"
for r in "${ROWS[@]}"; do
    IFS='|' read -r -a f <<<"$r"
    # shellcheck disable=SC2059
    printf "$TABLE_FMT" "${f[@]}"
done
if ((${#PAIRED[@]} > 0)); then
    echo
    echo "per-round ratios against twemproxy: median (lowest-highest, rounds at or above 1.0)"
    for r in "$(IFS='|'; echo "${PAIRED_HEADERS[*]}")" "${PAIRED[@]}"; do
        IFS='|' read -r -a f <<<"$r"
        printf '%-11s %-36s %-36s\n' "${f[@]}"
    done
fi
echo

md_row() { # md_row "a|b|c" -> "| a | b | c |"
    local out="| ${1//|/ | } |"
    echo "$out"
}
mkdir -p "$(dirname -- "$REPORT_MD")"
{
    echo "# redlock-proxy end-to-end benchmark"
    echo
    echo "- date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
    echo "- commit: $(git -C "$REPO_ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
    echo "- host: $(nproc) cores, $(uname -sr)"
    echo "- $("$REDIS_SERVER" --version | cut -d' ' -f1-3)"
    if want_target twemproxy; then
        echo "- $("$NUTCRACKER" --version 2>&1 | head -n1)"
    fi
    echo "- command: \`redis-benchmark -c $CLIENTS -n <N> -r 100000000 -P <P> --csv ${BENCH_CMD[*]}\`"
    echo "- requests: P=1: $N_P1, P=16: $N_P16; median of $ROUNDS interleaved rounds (round-robin over targets, reversed every other round)"
    echo "- load: $(cut -d' ' -f1-3 /proc/loadavg) (1/5/15 min load average at the end)"
    echo "- targets: direct = 1 redis master; proxy-n1 / proxy-n5 = redlock-proxy over 1 / 5 masters; twemproxy = nutcracker over 1 master (server_connections: 1)"
    echo
    md_row "$(IFS='|'; echo "${HEADERS[*]}")"
    md_row "$(IFS='|'; sep=("${HEADERS[@]/*/---}"); echo "${sep[*]}")"
    for r in "${ROWS[@]}"; do
        md_row "$r"
    done
    if ((${#PAIRED[@]} > 0)); then
        echo
        echo "Per-round ratios against twemproxy (each round's req/s over twemproxy's in the same round): median (lowest-highest, rounds at or above 1.0)."
        echo
        md_row "$(IFS='|'; echo "${PAIRED_HEADERS[*]}")"
        md_row "---|---|---"
        for r in "${PAIRED[@]}"; do
            md_row "$r"
        done
    fi
} >"$REPORT_MD"
log "markdown report written to $REPORT_MD"

# Lock+unlock cycles at N=3 and N=5: the libraries doing Redlock themselves against the
# masters versus the same libraries through the proxy (benches/clientside.sh starts its own).
if [[ "${BENCH_CYCLES:-1}" != "0" ]]; then
    for nm in 3 5; do
        echo
        echo "lock+unlock cycles, N=$nm masters, $CYCLE_SECONDS s per mode, concurrency $CLIENTS"
        BENCH_MASTERS=$nm BENCH_SECONDS=$CYCLE_SECONDS BENCH_CONCURRENCY=$CLIENTS BENCH_NO_BUILD=1 \
            "$SCRIPT_DIR/clientside.sh" | tee -a "$REPORT_MD" || die "cycle benchmark at N=$nm failed"
    done
fi

FAILED=0

#!/usr/bin/env bash
# Connection scale: CONNS concurrent clients (default 10,000), each doing CYCLES lock/unlock
# cycles (`SET lock:scale:<i> <token> NX PX 10000`, then the compare-and-delete `EVAL`) through
# the proxy in front of N masters (default 3), all connections open at once.
# The proxy runs with default settings and the default open-files soft limit (1024), so it has
# to raise its own limit to serve them. Prints connections served, cycles, errors (any reply
# other than OK / 1, or a lost connection; a refused acquisition is retried like a library
# would, and counted), p50/p99/max cycle latency (retries included), and the proxy's RSS.
# Usage: benches/scale.sh   Env: BENCH_CONNS (10000), BENCH_CYCLES (3), BENCH_MASTERS (3),
#                                BENCH_NO_BUILD=1 (use the existing target/release binary),
#                                BENCH_PROXY_ARGS (extra proxy flags, e.g. "--set threads=1").
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
conns=${BENCH_CONNS:-10000}
cycles=${BENCH_CYCLES:-3}
masters=${BENCH_MASTERS:-3}
scripts/deps.sh dev
[ "${BENCH_NO_BUILD:-0}" = 1 ] || cargo build --release -q --bin redlock-proxy
# The client side holds $conns sockets itself.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || ulimit -n 65536 || true
. benches/lib.sh
read -r -a ports <<<"$(free_ports $((masters + 1)))"
start_masters "${ports[@]:0:masters}" -- --maxclients 20000
proxy=${ports[masters]}
(ulimit -Sn 1024 && exec target/release/redlock-proxy --listen "127.0.0.1:$proxy" \
  --backends "$backends" --set quarantine=false ${BENCH_PROXY_ARGS:-}) >"$tmp/proxy.log" 2>&1 &
ppid=$!
pids+=($ppid)
wait_ping "$proxy"

echo "$conns clients x $cycles lock/unlock cycles through the proxy, N=$masters" \
  "(load: $(cut -d' ' -f1-3 /proc/loadavg))"
python3 - "$proxy" "$conns" "$cycles" "$ppid" <<'PY'
import asyncio, os, random, sys, time
port, conns, cycles, pid = (int(a) for a in sys.argv[1:5])
UNLOCK = b"if redis.call('get',KEYS[1]) == ARGV[1] then return redis.call('del',KEYS[1]) else return 0 end"

def cmd(*parts):
    out = [b"*%d\r\n" % len(parts)]
    for p in parts:
        out.append(b"$%d\r\n%s\r\n" % (len(p), p))
    return b"".join(out)

def cpu_s(p):
    f = open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")

def rss_kb():
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])

async def client(i, opened, go, lat, errors, refusals):
    try:
        r, w = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 30)
    except (OSError, asyncio.TimeoutError) as e:
        errors.append(f"connect: {type(e).__name__} {getattr(e, 'errno', '')}")
        opened.release()
        return
    opened.release()
    await go.wait()
    key, tok = b"lock:scale:%d" % i, os.urandom(8).hex().encode()
    try:
        for _ in range(cycles):
            t0 = time.monotonic()
            while True:
                w.write(cmd(b"SET", key, tok, b"NX", b"PX", b"10000"))
                await w.drain()
                got = await asyncio.wait_for(r.readline(), 30)
                if got != b"$-1\r\n":
                    break
                # Refused (masters slower than node_timeout_ms under the herd): retry, as a
                # lock library would.
                refusals[0] += 1
                await asyncio.sleep(random.uniform(0.01, 0.05))
            if got != b"+OK\r\n":
                errors.append(got[:60])
                continue
            w.write(cmd(b"EVAL", UNLOCK, b"1", key, tok))
            await w.drain()
            got = await asyncio.wait_for(r.readline(), 30)
            if got != b":1\r\n":
                errors.append(got[:60])
                continue
            lat.append(time.monotonic() - t0)
    except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError) as e:
        errors.append(type(e).__name__)
    finally:
        w.close()

async def main():
    opened, go, lat, errors, refusals = asyncio.Semaphore(0), asyncio.Event(), [], [], [0]
    before = rss_kb()
    tasks = [asyncio.create_task(client(i, opened, go, lat, errors, refusals)) for i in range(conns)]
    for _ in range(conns):
        await opened.acquire()
    held = rss_kb()
    t0, p0, c0 = time.monotonic(), cpu_s(pid), cpu_s(os.getpid())
    go.set()
    await asyncio.gather(*tasks)
    took = time.monotonic() - t0
    proxy_cpu, client_cpu = cpu_s(pid) - p0, cpu_s(os.getpid()) - c0
    lat.sort()
    pct = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] * 1000 if lat else float("nan")
    print(f"cycles done {len(lat)} of {conns * cycles} in {took:.1f} s ({len(lat) / took:.0f}/s), "
          f"errors {len(errors)}{' ' + repr(sorted(set(errors))[:5]) if errors else ''}, "
          f"acquisitions refused and retried {refusals[0]}")
    print(f"CPU during the cycles: proxy {proxy_cpu:.1f} s, this client {client_cpu:.1f} s")
    print(f"cycle latency p50 {pct(0.5):.1f} ms, p99 {pct(0.99):.1f} ms, max {pct(1.0):.1f} ms")
    print(f"proxy RSS {before} KB idle -> {held} KB with {conns} connections open "
          f"({(held - before) / conns:.2f} KB/connection) -> {rss_kb()} KB after the cycles")
    sys.exit(1 if errors or len(lat) != conns * cycles else 0)

asyncio.run(main())
PY

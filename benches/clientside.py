"""Lock+unlock cycles with redis-py: through redlock-proxy versus Redlock done client-side.

Usage: clientside.py PROXY_PORT SECONDS CONCURRENCY MASTER_PORT...
Prints one JSON line per mode: {"mode", "cycles_per_s"}; a cycle is acquire + release of a
random key. redis-py has no Redlock of its own, so the client-side mode is the algorithm as the
Redlock page describes it, on redis-py connections: SET NX PX on every master in turn, success
when a majority said OK within the validity time, then the compare-and-delete script on every
master. Through the proxy, redis-py's own `Lock` (unmodified) does the cycle against one address.
Run by benches/clientside.sh, which installs redis-py and starts the servers.
"""

import json
import sys
import threading
import time
import uuid

import redis

UNLOCK = (
    'if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) '
    "else return 0 end"
)


def measure(seconds, concurrency, make_cycle):
    """Runs `concurrency` threads doing cycles for `seconds`; returns cycles per second."""
    until = time.monotonic() + seconds
    counts = [0] * concurrency
    errors = []

    def worker(w):
        cycle = make_cycle()
        n = 0
        try:
            while time.monotonic() < until:
                cycle(f"bench:py:{w}:{n % 100000}")
                n += 1
                counts[w] += 1
        except Exception as e:  # reported, the run fails
            errors.append(repr(e))

    start = time.monotonic()
    threads = [threading.Thread(target=worker, args=(w,)) for w in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise SystemExit(f"cycle failed: {errors[0]}")
    return sum(counts) / (time.monotonic() - start)


def client_side(master_ports):
    """One Redlock cycle per call over the worker's own connections to every master."""
    masters = [redis.Redis(port=p) for p in master_ports]
    unlock = [m.register_script(UNLOCK) for m in masters]
    quorum = len(masters) // 2 + 1
    ttl = 10000

    def cycle(key):
        token = uuid.uuid4().hex
        start = time.monotonic()
        ok = 0
        for m in masters:
            try:
                if m.set(key, token, nx=True, px=ttl):
                    ok += 1
            except redis.RedisError:
                pass
        elapsed_ms = (time.monotonic() - start) * 1000
        acquired = ok >= quorum and elapsed_ms < ttl - ttl * 0.01 - 2
        for u in unlock:
            u(keys=[key], args=[token])
        if not acquired:
            raise RuntimeError("not acquired")

    return cycle


def through_proxy(proxy_port):
    """redis-py's own Lock (unmodified) against the proxy's single address."""
    r = redis.Redis(port=proxy_port)

    def cycle(key):
        lock = r.lock(key, timeout=10)
        if not lock.acquire(blocking=False):
            raise RuntimeError("not acquired")
        lock.release()

    return cycle


def main():
    proxy_port, seconds, concurrency, *master_ports = map(int, sys.argv[1:])
    n = len(master_ports)
    for mode, make in [
        (f"redis-py, client-side Redlock, {n} masters", lambda: client_side(master_ports)),
        ("redis-py Lock through the proxy", lambda: through_proxy(proxy_port)),
    ]:
        rate = measure(seconds, concurrency, make)
        print(json.dumps({"mode": mode, "cycles_per_s": round(rate)}), flush=True)


if __name__ == "__main__":
    main()

"""Leases (issue 26) seen by real Python clients through redlock-proxy: driven by tests/leases.rs.

Every time printed is the wall clock in ms since 1970 (the test compares it with its own wall
clock: one machine, one clock). Each scenario prints one line per observation and exits 0; a
failed precondition raises, and the exit status tells the test.

    leases.py hold PORT KEY TTL_MS
        redis-py `Lock(KEY, timeout=TTL_MS/1000)` acquires without blocking, prints
        `acquired TOKEN`, then sleeps (at most 60 s) until the test kills it with SIGKILL.
    leases.py contend PORT KEY TTL_MS UNTIL_MS
        A contender: until the wall clock reaches UNTIL_MS, tries a non-blocking redis-py `Lock`
        acquire every 20-40 ms; a grant is held 30 ms and released. Prints `grant START END` per
        grant (START when the OK was read, END when the release was sent), `done N` last.
    leases.py listen PORT COUNT WAIT_S
        redis-py pub/sub (RESP2) subscribed to `redlock-proxy:lease-lost`: prints `subscribed`,
        then `message CHANNEL DATA AT` per message, until COUNT messages or WAIT_S seconds.
    leases.py lost PORT KEY TTL_MS WAIT_S
        A RESP3 holder (`protocol=3`) with a push handler on its one connection: acquires KEY
        with redis-py `Lock`, prints `acquired`, then PINGs every 50 ms (redis-py reads a push
        that comes before a reply and hands it to the handler) until a push arrives or WAIT_S
        seconds; prints `push TYPE CHANNEL DATA AT` per push and `pongs N` last.
    leases.py redis-py PORT OTHER_PORT TTL_MS HOLD_MS
        redis-py `Lock(timeout=TTL_MS/1000)` acquired through PORT and held HOLD_MS while another
        client's `Lock` tries to take it through OTHER_PORT every 200 ms; then `release()`.
        Prints one JSON line: {"owned_throughout", "taken_by_other", "release"}.
    leases.py redisson PORT OTHER_PORT TTL_MS HOLD_MS
        The same with Redisson's RLock (tests/clients/redisson.py), leaseTime TTL_MS and no
        watchdog; the holder checks `isHeldByCurrentThread()`. Prints one JSON line:
        {"held_throughout", "taken_by_other", "unlock"}.
"""

import json
import random
import sys
import time

import redis
from redis.exceptions import LockError

from redisson import RLock

CHANNEL = "redlock-proxy:lease-lost"


def now_ms():
    return int(time.time() * 1000)


def say(line):
    print(line, flush=True)


def hold(port, key, ttl_ms):
    r = redis.Redis(port=port, protocol=2)
    lock = r.lock(key, timeout=ttl_ms / 1000)
    if not lock.acquire(blocking=False):
        raise SystemExit(f"could not acquire {key}")
    say(f"acquired {lock.local.token.decode()}")
    time.sleep(60)


def contend(port, key, ttl_ms, until_ms):
    r = redis.Redis(port=port, protocol=2)
    grants = 0
    while now_ms() < until_ms:
        lock = r.lock(key, timeout=ttl_ms / 1000)
        if lock.acquire(blocking=False):
            start = now_ms()
            time.sleep(0.03)
            end = now_ms()
            grants += 1
            say(f"grant {start} {end}")
            try:
                lock.release()
            except LockError:
                pass
        time.sleep(random.uniform(0.02, 0.04))
    say(f"done {grants}")


def listen(port, count, wait_s):
    r = redis.Redis(port=port, protocol=2)
    p = r.pubsub()
    p.subscribe(CHANNEL)
    deadline = time.monotonic() + wait_s
    got = 0
    while time.monotonic() < deadline and got < count:
        m = p.get_message(timeout=0.1)
        if m is None:
            continue
        if m["type"] == "subscribe":
            say("subscribed")
        elif m["type"] == "message":
            got += 1
            say(f"message {m['channel'].decode()} {m['data'].decode()} {now_ms()}")
    p.close()


def lost(port, key, ttl_ms, wait_s):
    r = redis.Redis(port=port, protocol=3, single_connection_client=True)
    pushes = []

    def on_push(response):
        pushes.append((response, now_ms()))
        return response

    # The one connection this client has: redis-py hands every push it reads there (other than
    # invalidations and maintenance notices) to this handler.
    r.connection._parser.set_pubsub_push_handler(on_push)
    lock = r.lock(key, timeout=ttl_ms / 1000)
    if not lock.acquire(blocking=False):
        raise SystemExit(f"could not acquire {key}")
    say("acquired")
    deadline = time.monotonic() + wait_s
    pongs = 0
    def lost_told():
        return any(len(p) > 1 and p[1] == b"redlock-proxy:lease-lost" for p, _ in pushes)

    # A renewal-failed notice comes first; the loss follows within the lock's validity.
    while time.monotonic() < deadline and not lost_told():
        if r.ping():
            pongs += 1
        time.sleep(0.05)
    for response, at in pushes:
        words = [w.decode() if isinstance(w, bytes) else str(w) for w in response]
        say(f"push {' '.join(words)} {at}")
    say(f"pongs {pongs}")


def redis_py(port, other_port, ttl_ms, hold_ms):
    name = "lease:py"
    a = redis.Redis(port=port).lock(name, timeout=ttl_ms / 1000, thread_local=False)
    other = redis.Redis(port=other_port)
    if not a.acquire(blocking=False):
        raise SystemExit("first acquire failed")
    owned_throughout, taken = True, 0
    end = time.monotonic() + hold_ms / 1000
    while time.monotonic() < end:
        time.sleep(0.2)
        owned_throughout &= a.owned()
        if other.lock(name, timeout=ttl_ms / 1000).acquire(blocking=False):
            taken += 1
    try:
        a.release()
        release = "ok"
    except LockError as e:
        release = type(e).__name__
    say(json.dumps({"owned_throughout": owned_throughout, "taken_by_other": taken, "release": release}))


def redisson(port, other_port, ttl_ms, hold_ms):
    name = "lease:rs"
    a = RLock(redis.Redis(port=port), name, lease_ms=ttl_ms)
    other = RLock(redis.Redis(port=other_port), name, lease_ms=ttl_ms)
    if not a.lock(wait_s=0, watchdog=False):
        raise SystemExit("first lock failed")
    held_throughout, taken = True, 0
    end = time.monotonic() + hold_ms / 1000
    while time.monotonic() < end:
        time.sleep(0.2)
        held_throughout &= bool(a.is_held_by_current_thread())
        if other.try_acquire() is None:
            taken += 1
    say(json.dumps({"held_throughout": held_throughout, "taken_by_other": taken, "unlock": a.unlock()}))


def main():
    scenario, args = sys.argv[1], sys.argv[2:]
    if scenario == "hold":
        hold(int(args[0]), args[1], int(args[2]))
    elif scenario == "contend":
        contend(int(args[0]), args[1], int(args[2]), int(args[3]))
    elif scenario == "listen":
        listen(int(args[0]), int(args[1]), float(args[2]))
    elif scenario == "lost":
        lost(int(args[0]), args[1], int(args[2]), float(args[3]))
    elif scenario == "redis-py":
        redis_py(int(args[0]), int(args[1]), int(args[2]), int(args[3]))
    elif scenario == "redisson":
        redisson(int(args[0]), int(args[1]), int(args[2]), int(args[3]))
    else:
        raise SystemExit(f"unknown scenario {scenario}")


if __name__ == "__main__":
    main()

"""redis-py's Lock, unmodified, against redlock-proxy (driven by tests/libraries.rs).

Usage:
  redis_py.py api PROXY_PORT MASTER_PORT...
  redis_py.py contention PROXY_PORT COUNTER_PORT lock|nolock

Every check raises AssertionError with a message; the exit status tells the test the outcome.
"""

import json
import sys
import threading
import time

import redis
from redis.exceptions import LockError, LockNotOwnedError, ResponseError


def pttls(masters, key):
    """PTTL of `key` on each master, read directly (bypassing the proxy)."""
    return [m.pttl(key) for m in masters]


def majority_pttl(masters, key):
    """The TTL a majority of masters hold at least (the quorum-th largest)."""
    values = sorted(pttls(masters, key), reverse=True)
    return values[len(masters) // 2]


def api(proxy_port, master_ports):
    masters = [redis.Redis(port=p) for p in master_ports]
    # redis-py 8 speaks RESP3 by default (HELLO 3); check RESP2 as well.
    for protocol in (3, 2):
        r = redis.Redis(port=proxy_port, protocol=protocol)
        name = f"py:lock:{protocol}"

        # Non-blocking acquire, contention, owned() and locked().
        # thread_local=False: another thread releases it below.
        a = r.lock(name, timeout=5, blocking=False, thread_local=False)
        b = r.lock(name, timeout=5, blocking=False)
        assert a.acquire(), "first non-blocking acquire"
        assert not b.acquire(), "second non-blocking acquire must fail"
        assert a.locked() and b.locked(), "locked() sees the lock"
        assert a.owned() and not b.owned(), "owned() tells holder from waiter"

        # Blocking acquire that gives up.
        t0 = time.monotonic()
        assert not b.acquire(blocking=True, blocking_timeout=0.3), "blocking acquire gives up"
        assert time.monotonic() - t0 >= 0.2, "it waited"

        # Extend, adding to the TTL (the default) and replacing it; reacquire.
        assert 4000 < majority_pttl(masters, name) <= 5000
        assert a.extend(3) is True
        ttl = majority_pttl(masters, name)
        assert 7000 < ttl <= 8000, f"extend(3) adds to the TTL: {ttl}"
        assert a.extend(1, replace_ttl=True) is True
        ttl = majority_pttl(masters, name)
        assert 0 < ttl <= 1000, f"extend(1, replace_ttl=True) replaces it: {ttl}"
        assert a.reacquire() is True
        ttl = majority_pttl(masters, name)
        assert 4000 < ttl <= 5000, f"reacquire() resets the TTL: {ttl}"
        try:
            b.extend(1)
            raise AssertionError("extending a lock we do not hold must fail")
        except LockError:
            pass

        # A blocking acquire that succeeds once the holder releases.
        def release_later():
            time.sleep(0.3)
            a.release()

        t = threading.Thread(target=release_later)
        t.start()
        assert b.acquire(blocking=True, blocking_timeout=5, sleep=0.02), "blocking acquire"
        t.join()
        assert b.owned() and not a.owned()
        b.release()
        assert not b.locked(), "released"

        # Releasing (or extending) an expired lock raises the library's own error.
        c = r.lock(name + ":short", timeout=0.2)
        assert c.acquire()
        time.sleep(0.35)
        try:
            c.extend(1)
            raise AssertionError("extend of an expired lock must raise")
        except LockNotOwnedError:
            pass
        try:
            c.release()
            raise AssertionError("release of an expired lock must raise")
        except LockNotOwnedError:
            pass

        # The context manager.
        with r.lock(name + ":ctx", timeout=5) as held:
            assert held.owned()
        assert not r.lock(name + ":ctx").locked()

        # A token that is not UTF-8 passes through untouched.
        raw = bytes([0xFF, 0x00, 0xFE, 0x80, 0x0A])
        d = r.lock(name + ":bin", timeout=5)
        assert d.acquire(token=raw)
        assert d.owned()
        held = sum(m.get(name + ":bin") == raw for m in masters)
        assert held > len(masters) // 2, f"raw token on {held} masters"
        d.release()

        # Lock(timeout=None) sends SET NX without a TTL: refused, never a lock that cannot expire.
        try:
            r.lock(name + ":forever").acquire(blocking=False)
            raise AssertionError("a lock without TTL must be refused")
        except ResponseError as e:
            assert "expir" in str(e), str(e)
        assert all(m.get(name + ":forever") is None for m in masters)
    print("ok")


def contention(proxy_port, counter_port, use_lock):
    workers, rounds, resources = 8, 12, 2
    counter = redis.Redis(port=counter_port)
    for res in range(resources):
        counter.delete(f"py:count:{res}")
    errors = []

    def work(w):
        try:
            r = redis.Redis(port=proxy_port)
            own = redis.Redis(port=counter_port)
            for i in range(rounds):
                res = (w + i) % resources
                lock = r.lock(f"py:res:{res}", timeout=5, sleep=0.005, blocking_timeout=25)
                if use_lock:
                    assert lock.acquire(), "acquire timed out"
                value = int(own.get(f"py:count:{res}") or 0)
                time.sleep(0.003)
                own.set(f"py:count:{res}", value + 1)
                if use_lock:
                    lock.release()
        except Exception as e:  # reported to the test, which fails
            errors.append(repr(e))

    threads = [threading.Thread(target=work, args=(w,)) for w in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    got = sum(int(counter.get(f"py:count:{res}") or 0) for res in range(resources))
    print(json.dumps({"expected": workers * rounds, "got": got, "errors": errors}))


def worker(argv):
    """The worker CLI contract of tests/libraries.rs: one process, --iterations critical sections
    of read-sleep-write on count:<resource>, under `Lock` unless --no-lock; `done N` last."""
    import argparse

    p = argparse.ArgumentParser()
    for name in ("--redis", "--counter", "--resource"):
        p.add_argument(name, required=True)
    p.add_argument("--iterations", type=int, required=True)
    p.add_argument("--hold-ms", type=int, default=2)
    p.add_argument("--no-lock", action="store_true")
    a = p.parse_args(argv)
    host, port = a.redis.split(":")
    chost, cport = a.counter.split(":")
    r = redis.Redis(host=host, port=int(port))
    own = redis.Redis(host=chost, port=int(cport))
    key = f"count:{a.resource}"
    tokens, successes = [], 0
    for _ in range(a.iterations):
        lock = r.lock(a.resource, timeout=2, sleep=0.005, blocking_timeout=60)
        if not a.no_lock:
            assert lock.acquire(), "acquire timed out"
            tokens.append(lock.local.token.decode())
        value = int(own.get(key) or 0)
        time.sleep(a.hold_ms / 1000)
        own.set(key, value + 1)
        successes += 1
        if not a.no_lock:
            lock.release()
    print("tokens " + ",".join(tokens))
    print(f"done {successes}")


def main():
    scenario = sys.argv[1]
    if scenario == "worker":
        worker(sys.argv[2:])
    elif scenario == "api":
        api(int(sys.argv[2]), [int(p) for p in sys.argv[3:]])
    elif scenario == "contention":
        contention(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "lock")
    else:
        raise SystemExit(f"unknown scenario {scenario}")


if __name__ == "__main__":
    main()

"""python-redis-lock 4.0 (PyPI, unmodified) through redlock-proxy, driven by tests/libraries.rs.

    python python_redis_lock.py api PROXY_PORT MASTER_PORT...
        Its whole API: blocking and non-blocking acquire, a waiter woken by the release's
        signal list (BLPOP), `with`, extend, reset, release errors; checks each master too.
    python python_redis_lock.py --redis HOST:PORT --counter HOST:PORT --resource NAME \
            --iterations N --hold-ms MS [--no-lock]
        A contention worker (the CLI contract of tests/libraries.rs `run_workers`): loops
        {with Lock: GET counter; sleep; SET counter+1} and prints `done <successes>` last.
"""
import os
import sys
import threading
import time

import redis
import redis_lock

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lockworker import check, run  # noqa: E402


def api(proxy_port, master_ports):
    r = redis.StrictRedis(port=proxy_port)
    masters = [redis.StrictRedis(port=p) for p in master_ports]

    a = redis_lock.Lock(r, "res", expire=10)
    b = redis_lock.Lock(r, "res", expire=10)
    check(a.acquire(blocking=False), "first acquire")
    check(not b.acquire(blocking=False), "second holder refused")
    check(a.locked() and b.locked(), "locked() by EXISTS")
    check(a.get_owner_id() == a.id, "owner id by GET")
    check(all(m.get("lock:res") == a.id.encode() for m in masters), "key on every master")

    # A blocking waiter sleeps in BLPOP on the signal list and is woken by the release: well
    # before its BLPOP timeout (the 10 s expire) runs out.
    woken = {}

    def wait():
        began = time.monotonic()
        woken["ok"] = b.acquire(timeout=9)
        woken["after"] = time.monotonic() - began

    t = threading.Thread(target=wait)
    t.start()
    time.sleep(0.5)
    a.release()
    t.join(20)
    check(woken.get("ok") is True, f"waiter acquired after release: {woken}")
    check(woken["after"] < 5, f"waiter woken by the signal, not its timeout: {woken}")
    check(b.get_owner_id() == b.id, "waiter now owns it")

    # Releasing a lock one does not hold: NotAcquired, as on one Redis.
    try:
        a.release()
        check(False, "release of a lock not held must fail")
    except redis_lock.NotAcquired:
        pass

    # Extend (EXPIRE in seconds) by the owner; refused for anyone else.
    b.extend(expire=30)
    check(25000 < r.pttl("lock:res") <= 30000, f"extended TTL {r.pttl('lock:res')}")
    check(all(25000 < m.pttl("lock:res") <= 30000 for m in masters), "extended on every master")
    try:
        a.extend(expire=30)
        check(False, "extend by a non-owner must fail")
    except redis_lock.NotAcquired:
        pass

    # reset(): deletes whoever holds it and signals waiters.
    b.reset()
    check(not a.locked(), "reset deleted the lock")
    check(all(m.exists("lock:res") == 0 for m in masters), "reset on every master")
    check(all(0 < m.pttl("lock-signal:res") <= 1000 for m in masters), "signal with its TTL")

    # The `with` form, and release leaves the signal on every master.
    with redis_lock.Lock(r, "res2", expire=5):
        check(r.exists("lock:res2") == 1, "held inside with")
    check(r.exists("lock:res2") == 0, "released after with")
    check(all(m.llen("lock-signal:res2") == 1 for m in masters), "one signal element per master")

    # A timed-out blocking acquire answers False, as on one Redis.
    c = redis_lock.Lock(r, "res3", expire=5)
    d = redis_lock.Lock(r, "res3", expire=5)
    check(c.acquire(), "c acquires")
    check(d.acquire(timeout=1) is False, "d times out")
    c.release()
    print("ok")


def worker(args):
    r = redis.StrictRedis(host=args.redis[0], port=int(args.redis[1]), socket_timeout=30)
    counter = redis.StrictRedis(host=args.counter[0], port=int(args.counter[1]))
    key = f"count:{args.resource}"
    done = 0
    for _ in range(args.iterations):
        lock = redis_lock.Lock(r, args.resource, expire=5)
        if not args.no_lock:
            # Waits in BLPOP on the signal list; a wait that times out tries again.
            while not lock.acquire(timeout=5):
                pass
        try:
            n = int(counter.get(key) or 0)
            time.sleep(args.hold_ms / 1000)
            counter.set(key, n + 1)
            done += 1
        finally:
            if not args.no_lock:
                try:
                    lock.release()
                except redis_lock.NotAcquired:
                    # Expired while held (a stall): the update may have raced another holder.
                    print("expired while held", file=sys.stderr)
    print(f"done {done}")


def main():
    run(worker, {"api": api})


if __name__ == "__main__":
    main()

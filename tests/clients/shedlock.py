"""ShedLock's Redis provider (`RedisLockProvider` over Spring Data Redis / Lettuce, ShedLock 6),
its wire behaviour reproduced on redis-py.

ShedLock is a Java library, and no Maven repository is reached here, so this driver is our own
code sending exactly what the provider sends (InternalRedisLockProvider):
- key `job-lock:<env>:<name>` (env `default`), value `ADDED:<ISO instant>@<host name>:<uuid>`;
- lock: `SET key value PX lockAtMostFor NX` (Lettuce's option order); no lock when nil;
- unlock: when lock-at-least-for has passed, `DEL key`; otherwise `SET key value PX <the rest of
  lock-at-least-for> XX`, so nobody else runs the task before then;
- extend: `SET key value PX <new lockAtMostFor> XX`, a new lock object; the old one is spent;
- with `safeUpdate` (Jedis / Lettuce providers): the unlock's `DEL` and the `SET … XX` become
  its delLuaScript / updLuaScript (tests/clients/lua/shedlock_*.lua, byte for byte, by EVALSHA
  then EVAL), which act only while the key still holds the lock's value.
Connections open as redis-py's do (`HELLO 3`, `CLIENT SETINFO`), much as Lettuce's (`HELLO 3`).
A lock that is not free is skipped (ShedLock runs a scheduled task at most once at a time); the
worker below tries again, as the next scheduled run would.

    python shedlock.py api PROXY_PORT MASTER_PORT...
    python shedlock.py --redis ... [--safe-update] [--at-least-ms MS]    a contention worker
"""
import datetime
import os
import socket
import sys
import time
import uuid

import redis

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lockworker import Checks, check, connect, critical_section, evalsha, lua, on_majority, run  # noqa: E402

script = lua("shedlock")

DEL_SCRIPT = script("delLuaScript")
UPD_SCRIPT = script("updLuaScript")


def now_ms():
    return time.time() * 1000


class RedisLockProvider:
    def __init__(self, r, environment="default", key_prefix="job-lock", safe_update=False):
        self.r = r
        self.environment = environment
        self.prefix = key_prefix
        self.safe_update = safe_update

    def lock(self, name, at_most_ms, at_least_ms=0):
        """Optional<SimpleLock>: the lock, or None when someone holds it."""
        key = f"{self.prefix}:{self.environment}:{name}"
        instant = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds")
        value = f"ADDED:{instant.replace('+00:00', 'Z')}@{socket.gethostname()}:{uuid.uuid4()}"
        began = now_ms()
        if self.r.execute_command("SET", key, value, "PX", int(at_most_ms), "NX") is None:
            return None
        return SimpleLock(self, key, value, began + at_most_ms, began + at_least_ms)

    def _set_expiration(self, lock, ms):
        if self.safe_update:
            return evalsha(self.r, UPD_SCRIPT, [lock.key], [lock.value, str(int(ms))]) == 1
        return self.r.execute_command("SET", lock.key, lock.value, "PX", int(ms), "XX") is not None

    def _delete(self, lock):
        if self.safe_update:
            evalsha(self.r, DEL_SCRIPT, [lock.key], [lock.value])
        else:
            self.r.execute_command("DEL", lock.key)


class SimpleLock:
    def __init__(self, provider, key, value, at_most_until, at_least_until):
        self.p = provider
        self.key = key
        self.value = value
        self.at_most_until = at_most_until
        self.at_least_until = at_least_until
        self.valid = True

    def unlock(self):
        """AbstractSimpleLock.unlock: once; DEL, or SET XX PX for the rest of lock-at-least-for."""
        check(self.valid, "a lock is unlocked once (IllegalStateException)")
        self.valid = False
        keep = int(self.at_least_until - now_ms())
        if keep <= 0:
            self.p._delete(self)
        else:
            self.p._set_expiration(self, keep)

    def extend(self, at_most_ms, at_least_ms=0):
        """Optional<SimpleLock>: the extended lock (this one is then spent), or None."""
        check(self.valid, "extend of a lock already unlocked or extended")
        began = now_ms()
        if not self.p._set_expiration(self, at_most_ms):
            return None
        self.valid = False
        return SimpleLock(self.p, self.key, self.value, began + at_most_ms, began + at_least_ms)


def api(proxy_port, master_ports):
    r = redis.Redis(port=proxy_port)
    masters = [redis.Redis(port=p) for p in master_ports]
    for safe in (False, True):
        p = RedisLockProvider(r, safe_update=safe)
        other = RedisLockProvider(r, safe_update=safe)
        name = f"task-{int(safe)}"
        key = f"job-lock:default:{name}"

        # lock / skipped while held / unlock by DEL / free again.
        a = p.lock(name, at_most_ms=10000)
        check(a is not None, "lock")
        on_majority(masters, lambda m: m.get(key) == a.value.encode(), "the lock's value")
        check(other.lock(name, 10000) is None, "a second lock is skipped while held")
        a.unlock()
        on_majority(masters, lambda m: m.exists(key) == 0, "unlocked by DEL")
        b = other.lock(name, 10000)
        check(b is not None, "free once unlocked")
        b.unlock()

        # lock-at-least-for: the unlock keeps the key for the rest of it (SET XX PX), so nobody
        # runs the task before then; after it, the lock is free.
        a = p.lock(name, at_most_ms=10000, at_least_ms=1500)
        began = time.monotonic()
        a.unlock()
        on_majority(masters, lambda m: 0 < m.pttl(key) <= 1500, "kept for the rest of lock-at-least-for")
        on_majority(masters, lambda m: m.get(key) == a.value.encode(), "same value kept")
        check(other.lock(name, 10000) is None, "skipped during lock-at-least-for")
        while (b := other.lock(name, 10000)) is None:
            time.sleep(0.05)
        held = time.monotonic() - began
        check(1.2 < held < 10, f"free after lock-at-least-for: {held:.2f} s")
        b.unlock()

        # extend: SET XX PX with the new lock-at-most-for; the extended lock unlocks as usual.
        a = p.lock(name, at_most_ms=1000)
        e = a.extend(at_most_ms=8000)
        check(e is not None, "extend")
        on_majority(masters, lambda m: 7000 < m.pttl(key) <= 8000, "extended TTL")
        time.sleep(1.2)
        check(other.lock(name, 10000) is None, "held past the first lock-at-most-for")
        e.unlock()
        on_majority(masters, lambda m: m.exists(key) == 0, "the extended lock unlocked")

        # A lock held past lock-at-most-for expires; its extend then fails (XX: no key).
        a = p.lock(name, at_most_ms=400)
        time.sleep(0.6)
        check(a.extend(at_most_ms=5000) is None, "extend of an expired lock")
        on_majority(masters, lambda m: m.exists(key) == 0, "not recreated by SET XX")
        b = other.lock(name, 10000)
        check(b is not None, "taken once expired")
        if safe:
            # safeUpdate: a late unlock of the expired lock leaves the new holder's lock alone.
            a.valid = True
            a.unlock()
            on_majority(masters, lambda m: m.get(key) == b.value.encode(), "safe unlock kept the new holder")
        b.unlock()
    print("ok")


def worker(args):
    r = connect(args.redis)
    counter = connect(args.counter)
    key = f"count:{args.resource}"
    provider = RedisLockProvider(r, safe_update=args.safe_update)
    checks = Checks()
    done = 0
    while done < args.iterations:
        lock = None
        if not args.no_lock:
            try:
                # Every other run keeps the lock for at least `--at-least-ms` (SET XX PX unlock).
                at_least = args.at_least_ms if done % 2 else 0
                lock = provider.lock(args.resource, at_most_ms=5000, at_least_ms=at_least)
            except redis.exceptions.RedisError:
                pass
            if lock is None:
                time.sleep(0.005)  # skipped: the next scheduled run tries again
                continue
        critical_section(counter, key, args.hold_ms)
        done += 1
        if lock is not None:
            if done % 3 == 0:
                lock = lock.extend(at_most_ms=5000, at_least_ms=lock.at_least_until - now_ms())
                checks("extend", lock is not None)
            if lock is not None:
                lock.unlock()
    checks.print()
    print(f"done {done}")


def main():
    def options(p):
        p.add_argument("--safe-update", action="store_true")
        p.add_argument("--at-least-ms", type=int, default=15)

    run(worker, {"api": api}, options)


if __name__ == "__main__":
    main()

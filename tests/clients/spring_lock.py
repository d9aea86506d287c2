"""Spring Integration's `RedisLockRegistry` (7.0), its wire behaviour reproduced on redis-py.

Spring Integration is a Java library, and no Maven repository is reached here, so this driver is
our own code sending exactly what the registry sends through Spring Data Redis:
- every script by EVALSHA, then EVAL on NOSCRIPT (tests/clients/lua/spring_*.lua, byte for byte);
- obtain: OBTAIN_LOCK_SCRIPT, KEYS = [`<registryKey>:<path>`], ARGV = [clientId, expireAfter ms]
  (one random clientId per registry; Lua true/false arrive as 1/nil);
- unlock: the spin lock's UNLINK_UNLOCK_SCRIPT (ARGV = [clientId]); the pub/sub lock's, which also
  publishes the lock key to `<registryKey>-channel:<lockKey>` (ARGV = [clientId, channel]); a
  false answer is the library's ConcurrentModificationException ("released in the store due to
  expiration");
- renewal: RENEW_SCRIPT (ARGV = [clientId, ttl ms]) every expireAfter/3 while held, when a renewal
  scheduler is set, and by `renewLock(path[, ttl])`;
- the spin lock retries every `idleBetweenTries`; the pub/sub lock's waiters listen on one
  PSUBSCRIBE `<registryKey>-channel:*` per registry, try again on the lock's message, or after
  their wait (expireAfter for `lock()`);
- locks are re-entrant per thread (a local ReentrantLock; only the last unlock reaches Redis) and
  cached per path; `expireUnusedOlderThan(age)` evicts cached locks not held in this process and
  locked at least `age` ms ago, and an evicted lock refuses to lock again.
Connections open as redis-py's do (`HELLO 3`, `CLIENT SETINFO`), much as Lettuce's (`HELLO 3`).

    python spring_lock.py api PROXY_PORT MASTER_PORT...        spin lock, renewal, expiry
    python spring_lock.py pubsub PROXY_PORT MASTER_PORT...     the pub/sub lock's wake-up
    python spring_lock.py --redis ... [--pubsub]               a contention worker (lockworker.py)
"""
import os
import sys
import threading
import time
import uuid

import redis

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lockworker import Checks, check, connect, critical_section, evalsha, lua, on_majority, run  # noqa: E402

script = lua("spring")

OBTAIN = script("OBTAIN_LOCK_SCRIPT")
RENEW = script("RENEW_SCRIPT")
SPIN_UNLOCK = script("spin_UNLINK_UNLOCK_SCRIPT")
PUBSUB_UNLOCK = script("pubsub_UNLINK_UNLOCK_SCRIPT")


class ConcurrentModification(Exception):
    """The library's ConcurrentModificationException: the lock expired while held."""


class IllegalState(Exception):
    """The library's IllegalStateException."""


class RedisLockRegistry:
    def __init__(self, r, registry_key, expire_after_ms=60000, pubsub=False, renew=False, idle_ms=100):
        self.r = r
        self.registry_key = registry_key
        self.expire_after = expire_after_ms
        self.pubsub = pubsub
        self.renew = renew
        self.idle = idle_ms / 1000
        self.client_id = str(uuid.uuid4())
        self.channel_key = f"{registry_key}-channel"
        self.locks = {}
        self.guard = threading.Lock()
        self.listener = None
        self.waiting = {}  # lock key -> threading.Event (the registry's notifyMap)

    def obtain(self, path):
        with self.guard:
            return self.locks.setdefault(path, RedisLock(self, path))

    def expire_unused_older_than(self, age_ms):
        now = time.time() * 1000
        with self.guard:
            for path in [p for p, lock in self.locks.items()
                         if now - lock.locked_at >= age_ms and not lock.acquired_in_this_process()]:
                del self.locks[path]

    def renew_lock(self, path, ttl_ms=None):
        if not self.obtain(path).renew_once(ttl_ms or self.expire_after):
            raise IllegalState(f"Could not renew mutex at {path}")

    def _listen(self):
        """The RedisMessageListenerContainer: one PSUBSCRIBE for the registry, started by the
        first waiter; a message (the lock key) completes that key's future."""
        with self.guard:
            if self.listener is not None:
                return
            ps = self.r.pubsub()
            ps.psubscribe(self.channel_key + ":*")
            self.listener = ps

        def run():
            while True:
                try:
                    m = ps.get_message(timeout=1.0)
                except Exception:
                    return
                if m and m["type"] == "pmessage":
                    ev = self.waiting.get(m["data"].decode())
                    if ev is not None:
                        ev.set()

        threading.Thread(target=run, daemon=True).start()
        # The container answers once subscribed: wait for the confirmation's effect.
        time.sleep(0.05)


class RedisLock:
    def __init__(self, registry, path):
        self.reg = registry
        self.path = path
        self.key = f"{registry.registry_key}:{path}"
        self.local = threading.RLock()
        self.holds = 0  # the local lock's hold count (by the thread holding it)
        self.locked_at = time.time() * 1000
        self.renewal = None

    def acquired_in_this_process(self):
        return self.holds > 0

    def _obtain(self, ttl):
        return evalsha(self.reg.r, OBTAIN, [self.key], [self.reg.client_id, ttl]) == 1

    def _try_redis(self, wait_ms, ttl):
        with self.reg.guard:
            if self.reg.locks.get(self.path) is not self:
                raise IllegalState(f"The lock '{self.path}' was evicted from the exhausted cache.")
        got = self._pubsub_lock(wait_ms, ttl) if self.reg.pubsub else self._spin(wait_ms, ttl)
        if got:
            self.locked_at = time.time() * 1000
            if self.reg.renew:
                self.renewal = self._schedule_renewal(ttl)
        return got

    def _spin(self, wait_ms, ttl):
        if wait_ms == -1:
            while not self._obtain(ttl):
                time.sleep(self.reg.idle)
            return True
        end = time.time() * 1000 + wait_ms
        while True:
            got = self._obtain(ttl)
            if got or time.time() * 1000 >= end:
                return got
            time.sleep(self.reg.idle)

    def _pubsub_lock(self, wait_ms, ttl):
        end = time.time() * 1000 + wait_ms
        if self._obtain(ttl):
            return True
        self.reg._listen()
        while wait_ms == -1 or end >= time.time() * 1000:
            ev = self.reg.waiting.setdefault(self.key, threading.Event())
            try:
                if self._obtain(ttl):  # the double check after subscribing
                    return True
                ev.wait((wait_ms if wait_ms >= 0 else self.reg.expire_after) / 1000)
                if self._obtain(ttl):
                    return True
            finally:
                self.reg.waiting.pop(self.key, None)
        return False

    def _schedule_renewal(self, ttl):
        stop = threading.Event()

        def run():
            while not stop.wait(ttl / 3000):
                if not self.renew_once(ttl):
                    return

        threading.Thread(target=run, daemon=True).start()
        return stop

    def renew_once(self, ttl):
        ok = evalsha(self.reg.r, RENEW, [self.key], [self.reg.client_id, ttl]) == 1
        if not ok:
            self._stop_renewal()
        return ok

    def _stop_renewal(self):
        if self.renewal is not None:
            self.renewal.set()
            self.renewal = None

    def lock(self, ttl=None):
        """lock(): waits as long as it takes (errors from Redis end it, as the library's
        CannotAcquireLockException does)."""
        self.local.acquire()
        try:
            while not self._try_redis(-1, ttl or self.reg.expire_after):
                pass
        except BaseException:
            self.local.release()
            raise
        self.holds += 1

    def try_lock(self, wait_ms, ttl=None):
        local = self.local.acquire(timeout=wait_ms / 1000) if wait_ms > 0 else self.local.acquire(False)
        if not local:
            return False
        try:  # re-entry asks Redis again too (the obtain script refreshes the TTL), as Spring does
            got = self._try_redis(wait_ms, ttl or self.reg.expire_after)
        except BaseException:
            self.local.release()
            raise
        if not got:
            self.local.release()
            return False
        self.holds += 1
        return True

    def unlock(self):
        if self.holds == 0 or not self.local._is_owned():
            raise IllegalState(f"You do not own lock at {self.key}")
        try:
            if self.holds > 1:
                return
            if self.reg.pubsub:
                channel = f"{self.reg.channel_key}:{self.key}"
                res = evalsha(self.reg.r, PUBSUB_UNLOCK, [self.key], [self.reg.client_id, channel])
            else:
                res = evalsha(self.reg.r, SPIN_UNLOCK, [self.key], [self.reg.client_id])
            if res != 1:
                self._stop_renewal()
                raise ConcurrentModification("Lock was released in the store due to expiration.")
            self._stop_renewal()
        finally:
            self.holds -= 1
            self.local.release()


def api(proxy_port, master_ports):
    r = redis.Redis(port=proxy_port)
    masters = [redis.Redis(port=p) for p in master_ports]
    a = RedisLockRegistry(r, "reg", expire_after_ms=10000, idle_ms=20)
    b = RedisLockRegistry(r, "reg", expire_after_ms=10000, idle_ms=20)

    # Spin lock: re-entrant in a registry, refused to another registry, released by the last
    # unlock only.
    la = a.obtain("job")
    la.lock()
    check(la.try_lock(0), "re-entry")
    on_majority(masters, lambda m: m.get("reg:job") == a.client_id.encode(), "held by a")
    check(not b.obtain("job").try_lock(0), "another registry is refused")
    check(not b.obtain("job").try_lock(150), "another registry is refused after waiting")
    la.unlock()
    on_majority(masters, lambda m: m.exists("reg:job") == 1, "still held after one unlock")
    la.unlock()
    on_majority(masters, lambda m: m.exists("reg:job") == 0, "released")
    lb = b.obtain("job")
    check(lb.try_lock(0), "the other registry takes it once released")
    lb.unlock()

    # A waiter in the spin loop gets the lock once the holder releases it.
    la.lock()
    got = {}

    def spin():
        lock = b.obtain("job")
        got["ok"] = lock.try_lock(5000)
        lock.unlock()  # a Spring lock belongs to the thread that took it

    t = threading.Thread(target=spin)
    t.start()
    time.sleep(0.3)
    la.unlock()
    t.join(10)
    check(got.get("ok") is True, "the spinning waiter took the lock")

    # A lock held past its expiry: another registry takes it, and the first one's unlock is
    # the library's ConcurrentModificationException (the script answered false).
    short = RedisLockRegistry(r, "reg", expire_after_ms=600, idle_ms=20)
    ls = short.obtain("exp")
    ls.lock()
    time.sleep(0.9)
    lb = b.obtain("exp")
    check(lb.try_lock(0), "taken once expired")
    try:
        ls.unlock()
        check(False, "unlock of an expired lock must fail")
    except ConcurrentModification:
        pass
    on_majority(masters, lambda m: m.get("reg:exp") == b.client_id.encode(), "the new holder kept it")
    lb.unlock()

    # Renewal: expireAfter 1.5 s renewed every 0.5 s keeps the lock for 4 s.
    renewing = RedisLockRegistry(r, "reg", expire_after_ms=1500, renew=True, idle_ms=20)
    lr = renewing.obtain("renewed")
    lr.lock()
    time.sleep(4)
    check(not b.obtain("renewed").try_lock(0), "still held past its expiry")
    on_majority(masters, lambda m: 0 < m.pttl("reg:renewed") <= 1500, "renewed TTL")
    lr.unlock()  # answers true: it was never lost
    on_majority(masters, lambda m: m.exists("reg:renewed") == 0, "released after renewal")

    # renewLock(path, ttl): the RENEW_SCRIPT by hand; refused for a lock not held.
    la = a.obtain("manual")
    la.lock(ttl=2000)
    a.renew_lock("manual", 8000)
    on_majority(masters, lambda m: 7000 < m.pttl("reg:manual") <= 8000, "renewLock's TTL")
    try:
        b.renew_lock("manual", 8000)
        check(False, "renewLock of another's lock must fail")
    except IllegalState:
        pass
    la.unlock()

    # expireUnusedOlderThan: unused locks leave the cache, a held one stays (and stays held);
    # an evicted lock object refuses to lock; obtain() gives a fresh one that works.
    held, idle = a.obtain("held"), a.obtain("idle")
    held.lock()
    idle.lock()
    idle.unlock()
    a.expire_unused_older_than(0)
    check("held" in a.locks and "idle" not in a.locks, f"cache after expiry: {list(a.locks)}")
    on_majority(masters, lambda m: m.get("reg:held") == a.client_id.encode(), "held lock untouched")
    try:
        idle.try_lock(0)
        check(False, "an evicted lock must refuse to lock")
    except IllegalState:
        pass
    fresh = a.obtain("idle")
    check(fresh is not idle and fresh.try_lock(0), "a fresh lock after eviction")
    fresh.unlock()
    held.unlock()
    print("ok")


def pubsub(proxy_port, master_ports):
    """The pub/sub lock: a waiter is woken by the unlock's message (one per release), not by its
    wait running out."""
    r = redis.Redis(port=proxy_port)
    masters = [redis.Redis(port=p) for p in master_ports]
    a = RedisLockRegistry(r, "ps", expire_after_ms=20000, pubsub=True)
    b = RedisLockRegistry(r, "ps", expire_after_ms=20000, pubsub=True)
    listener = r.pubsub()
    listener.psubscribe("ps-channel:*")
    listener.get_message(timeout=1)  # the psubscribe confirmation
    la = a.obtain("job")
    la.lock()
    got = {}

    def wait():
        lb = b.obtain("job")
        lb.lock()  # waits up to expireAfter (20 s) per round unless woken
        got["at"] = time.monotonic()
        lb.unlock()

    t = threading.Thread(target=wait)
    t.start()
    time.sleep(0.5)
    released = time.monotonic()
    la.unlock()
    t.join(25)
    check("at" in got, "the waiter took the lock")
    # Its wait is expireAfter (20 s): well before that, only the unlock's message woke it.
    check(got["at"] - released < 10, f"woken by the message: {got['at'] - released:.2f} s")
    on_majority(masters, lambda m: m.exists("ps:job") == 0, "released")
    messages = []
    end = time.monotonic() + 1
    while time.monotonic() < end:
        m = listener.get_message(timeout=0.2)
        if m and m["type"] == "pmessage":
            messages.append((m["channel"], m["data"]))
    check(messages == [(b"ps-channel:ps:job", b"ps:job")] * 2,
          f"one message per release (a's and b's): {messages}")
    print("ok")


def worker(args):
    r = connect(args.redis)
    counter = connect(args.counter)
    key = f"count:{args.resource}"
    registry = RedisLockRegistry(r, "spring", expire_after_ms=5000, pubsub=args.pubsub, idle_ms=10)
    done = [0, 0]
    checks = Checks()

    def loop(i):
        lock = registry.obtain(args.resource)
        for _ in range(args.iterations // 2 + (i < args.iterations % 2)):
            while not args.no_lock:
                try:
                    lock.lock()
                    break
                except redis.exceptions.RedisError:
                    time.sleep(0.05)  # the library throws; the application tries again
            critical_section(counter, key, args.hold_ms)
            done[i] += 1
            if not args.no_lock:
                try:
                    lock.unlock()
                    checks("unlock", True)
                except ConcurrentModification:
                    checks("unlock", False)
                except redis.exceptions.RedisError as e:
                    print(f"unlock failed: {e}", file=sys.stderr)
                    checks("unlock", False)

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    checks.print()
    print(f"done {sum(done)}")


def main():
    run(worker, {"api": api, "pubsub": pubsub}, lambda p: p.add_argument("--pubsub", action="store_true"))


if __name__ == "__main__":
    main()

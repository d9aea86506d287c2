"""Redisson's RLock protocol, byte for byte, through redlock-proxy: driven by tests/libraries.rs.

Redisson is a Java library; this driver sends exactly what its RLock sends (the scripts in
tests/clients/lua/redisson_*.lua, EVALSHA first and EVAL on NOSCRIPT, the same KEYS and ARGV),
with its lock names (`<uuid>:<threadId>`), its waiters subscribed to
`redisson_lock__channel:{name}`, its watchdog, its unlock latch and its HEXISTS / HGET reads.

    python redisson.py api PROXY_PORT MASTER_PORT...
        Re-entrancy and hold counts, a waiter woken once by the release, watchdog renewal past
        the TTL, forceUnlock, a dead holder's lock expiring, retried unlocks; checks each master.
    python redisson.py --redis HOST:PORT --counter HOST:PORT --resource NAME \
            --iterations N --hold-ms MS [--no-lock]
        A contention worker (the CLI contract of tests/libraries.rs `run_n`): two threads, each
        looping {lock(); GET counter; sleep; SET counter+1; unlock()}; prints `done N` last.
"""
import os
import sys
import threading
import time
import uuid

import redis

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lockworker import check, evalsha, lua, run  # noqa: E402

script = lua("redisson")
LOCK = script("lock")
UNLOCK = script("unlock")
RENEW = script("renew")
FORCE = script("forceUnlock")
CHUNK = script("LockTask_chunk")
FENCED = script("fenced_lockAndGetToken")
UNLOCK_MESSAGE = 0


class RLock:
    """One Redisson client's RLock on `name` (one UUID per client, one field per thread)."""

    def __init__(self, r, name, client_id=None, lease_ms=30000, chunk=False, fenced=False):
        self.r = r
        self.chunk = chunk
        # RFencedLock: lockAndGetToken, the token counted in redisson_lock_token:{name}.
        self.fenced = fenced
        self.token_name = f"redisson_lock_token:{{{name}}}"
        self.token = None
        self.name = name
        self.id = client_id or str(uuid.uuid4())
        self.lease_ms = lease_ms
        self.channel = f"redisson_lock__channel:{{{name}}}"
        self.watchdogs = {}

    def field(self):
        return f"{self.id}:{threading.get_ident()}"

    def try_acquire(self, lease_ms=None):
        ttl = lease_ms or self.lease_ms
        if self.fenced:
            res = evalsha(self.r, FENCED, [self.name, self.token_name], [ttl, self.field()])
            if res[0] == -1:
                self.token = res[1]
                return None
            return res[0]
        return evalsha(self.r, LOCK, [self.name], [ttl, self.field()])

    def _watchdog(self, field):
        """Renews every third of the lease while the lock is held, with the single-lock renewal
        script (before 3.44) or the multi-lock `LockTask` chunk (3.44 and later, here with this
        one lock); stops when the renewal answers 0 or the lock is released."""
        stop = threading.Event()

        def run():
            while not stop.wait(self.lease_ms / 3000):
                try:
                    if self.chunk:
                        res = evalsha(self.r, CHUNK, [self.name], [self.lease_ms, field])
                        if res != [1]:
                            return
                    elif evalsha(self.r, RENEW, [self.name], [self.lease_ms, field]) != 1:
                        return
                except redis.exceptions.RedisError:
                    pass

        threading.Thread(target=run, daemon=True).start()
        return stop

    def lock(self, wait_s=None, watchdog=True, lease_ms=None):
        """tryLock(wait) / lock(): try; else subscribe and wait for the release message (or the
        PTTL the script answered), then try again. True when acquired."""
        deadline = None if wait_s is None else time.monotonic() + wait_s
        pubsub = None
        try:
            while True:
                try:
                    ttl = self.try_acquire(lease_ms)
                except redis.exceptions.RedisError:
                    ttl = 50  # Redisson retries a failed command after its retry interval.
                if ttl is None:
                    field = self.field()
                    if watchdog and field not in self.watchdogs:
                        self.watchdogs[field] = self._watchdog(field)
                    return True
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                if pubsub is None:
                    pubsub = self.r.pubsub()
                    pubsub.subscribe(self.channel)
                    continue  # Redisson tries once more after subscribing.
                wait = ttl / 1000 if ttl >= 0 else 1.0
                if left is not None:
                    wait = min(wait, left)
                end = time.monotonic() + wait
                while time.monotonic() < end:
                    m = pubsub.get_message(timeout=max(0.0, end - time.monotonic()))
                    if m and m["type"] == "message":
                        break
        finally:
            if pubsub is not None:
                pubsub.close()

    def unlock(self):
        """unlock(): one latch per request; a failed attempt is retried with the same latch.
        Answers the script's reply: None (not held), 0 (still held), 1 (released)."""
        request = uuid.uuid4().hex
        latch = f"redisson_unlock_latch:{{{self.name}}}:{request}"
        field = self.field()
        for attempt in range(20):
            try:
                res = evalsha(
                    self.r,
                    UNLOCK,
                    [self.name, self.channel, latch],
                    [UNLOCK_MESSAGE, self.lease_ms, field, "publish", 5000],
                )
                break
            except redis.exceptions.RedisError:
                time.sleep(0.05)
        else:
            raise RuntimeError("unlock failed 20 times")
        if res == 1 or res is None:
            stop = self.watchdogs.pop(field, None)
            if stop:
                stop.set()
        return res

    def force_unlock(self):
        return evalsha(self.r, FORCE, [self.name, self.channel], [UNLOCK_MESSAGE, "publish"])

    def is_held_by_current_thread(self):
        return self.r.hexists(self.name, self.field())

    def hold_count(self):
        v = self.r.hget(self.name, self.field())
        return int(v) if v is not None else 0


def api(proxy_port, master_ports):
    r = redis.Redis(port=proxy_port)
    masters = [redis.Redis(port=p) for p in master_ports]
    quorum = len(masters) // 2 + 1

    def on_majority(pred, what):
        n = sum(1 for m in masters if pred(m))
        check(n >= quorum, f"{what} on {n} of {len(masters)} masters")

    # Re-entrancy: lock twice, hold count 2 (HGET), unlock twice.
    a = RLock(r, "res", lease_ms=10000)
    b = RLock(r, "res", lease_ms=10000)
    check(a.lock(wait_s=0), "a locks")
    check(a.lock(wait_s=0), "a re-enters")
    check(a.hold_count() == 2, f"hold count 2, got {a.hold_count()}")
    check(a.is_held_by_current_thread(), "HEXISTS by the holder")
    check(not b.is_held_by_current_thread(), "HEXISTS by another")
    on_majority(lambda m: m.hget("res", a.field()) == b"2", "count 2")
    ttl = b.try_acquire()
    check(isinstance(ttl, int) and 9000 < ttl <= 10000, f"another gets the PTTL: {ttl}")
    check(a.unlock() == 0, "first unlock answers 0 (still held)")
    check(a.hold_count() == 1, "hold count 1")
    check(isinstance(b.try_acquire(), int), "still held after one unlock")
    check(a.unlock() == 1, "second unlock answers 1 (released)")
    check(r.exists("res") == 0, "released")
    on_majority(lambda m: m.exists("res") == 0, "lock gone")
    check(a.unlock() is None, "unlock of a lock not held answers nil")

    # A retried unlock (same latch key) answers what the first did and changes nothing.
    check(a.lock(wait_s=0, watchdog=False), "a locks again")
    latch = "redisson_unlock_latch:{res}:fixed"
    args = [UNLOCK_MESSAGE, 10000, a.field(), "publish", 5000]
    first = evalsha(r, UNLOCK, ["res", a.channel, latch], args)
    again = evalsha(r, UNLOCK, ["res", a.channel, latch], args)
    check(first == 1 and again == 1, f"retried unlock: {first}, {again}")
    try:
        evalsha(r, UNLOCK, ["res", a.channel, "l2"], [0, 10000, a.field(), "del", 5000])
        check(False, "a publish command other than publish/spublish must be refused")
    except redis.exceptions.ResponseError as e:
        check("PUBLISH" in str(e), f"refusal names PUBLISH: {e}")

    # A waiter subscribed to the channel is woken once, and quickly, by the release.
    messages = []
    listener = r.pubsub()
    listener.subscribe(a.channel)
    listener.get_message(timeout=1)  # the subscribe confirmation
    check(a.lock(wait_s=0, watchdog=False), "a holds")
    woken = {}
    may_release = threading.Event()

    def wait():
        began = time.monotonic()
        woken["ok"] = b.lock(wait_s=9, watchdog=False)
        woken["after"] = time.monotonic() - began
        woken["at"] = time.monotonic()
        may_release.wait(10)
        woken["unlock"] = b.unlock()

    t = threading.Thread(target=wait)
    t.start()
    time.sleep(0.5)
    released = time.monotonic()
    check(a.unlock() == 1, "a releases")
    end = time.monotonic() + 1
    while time.monotonic() < end:
        m = listener.get_message(timeout=0.2)
        if m and m["type"] == "message":
            messages.append(m["data"])
    may_release.set()
    t.join(20)
    check(woken.get("ok") is True, f"waiter acquired: {woken}")
    gap = woken["at"] - released
    check(woken["after"] < 2 and gap < 1, f"waiter woken by the message, not its TTL: {gap:.3f} s")
    check(messages == [b"0"], f"one release message per release: {messages}")
    check(woken["unlock"] == 1, "b releases")
    listener.close()

    # Sharded pub/sub (Redisson with `spublish`): a waiter in SSUBSCRIBE gets the release once.
    sh = RLock(r, "shard", lease_ms=10000)
    check(sh.lock(wait_s=0, watchdog=False), "shard lock")
    shard = r.pubsub()
    shard.ssubscribe(sh.channel)
    shard.get_sharded_message(timeout=1)  # the ssubscribe confirmation
    latch = "redisson_unlock_latch:{shard}:s1"
    res = evalsha(r, UNLOCK, ["shard", sh.channel, latch], [0, 10000, sh.field(), "SPUBLISH", 5000])
    check(res == 1, f"unlock by spublish: {res}")
    got = []
    end = time.monotonic() + 1
    while time.monotonic() < end:
        m = shard.get_sharded_message(timeout=0.2)
        if m and m["type"] == "smessage":
            got.append(m["data"])
    check(got == [b"0"], f"one sharded release message: {got}")
    shard.close()

    # Watchdog: a lease of 1.5 s renewed every 0.5 s keeps the lock for 4 s, with either
    # renewal script.
    for chunk in [False, True]:
        w = RLock(r, "dog", lease_ms=1500, chunk=chunk)
        check(w.lock(wait_s=0), "w locks with the watchdog")
        time.sleep(4)
        check(w.is_held_by_current_thread(), f"still held past the lease (chunk {chunk})")
        check(isinstance(RLock(r, "dog").try_acquire(), int), "others still refused")
        on_majority(lambda m: 0 < m.pttl("dog") <= 1500, "renewed TTL")
        check(w.unlock() == 1, "w releases")
        check(r.exists("dog") == 0, "gone after unlock")
    # The chunk renews each lock by its own field: held ones 1, others' and missing ones 0.
    x = RLock(r, "x1", lease_ms=10000)
    check(x.lock(wait_s=0, watchdog=False), "x1 locked")
    check(RLock(r, "x2").lock(wait_s=0, watchdog=False), "x2 locked by another")
    res = evalsha(r, CHUNK, ["x1", "x2", "x3"], [20000, x.field(), x.field(), x.field()])
    check(res == [1, 0, 0], f"chunk answers per lock: {res}")
    on_majority(lambda m: 10000 < m.pttl("x1") <= 20000, "x1 renewed")
    on_majority(lambda m: m.pttl("x2") <= 30000, "x2 untouched")

    # forceUnlock deletes whoever holds it and wakes waiters; again answers 0.
    f = RLock(r, "force", lease_ms=10000)
    check(f.lock(wait_s=0, watchdog=False), "f locks")
    waiter = RLock(r, "force", lease_ms=10000)
    got = {}
    t = threading.Thread(target=lambda: got.update(ok=waiter.lock(wait_s=5, watchdog=False)))
    t.start()
    time.sleep(0.5)
    check(RLock(r, "force").force_unlock() == 1, "forceUnlock answers 1")
    t.join(10)
    check(got.get("ok") is True, "waiter took it after forceUnlock")
    check(waiter.force_unlock() == 1 and waiter.force_unlock() == 0, "forceUnlock again: 0")

    # A dead holder (no watchdog, no unlock): its lock expires, and a waiter gets it after
    # about the PTTL the refusal answered.
    dead = RLock(r, "dead", lease_ms=1000)
    check(dead.lock(wait_s=0, watchdog=False), "the holder locks, then dies")
    began = time.monotonic()
    heir = RLock(r, "dead", lease_ms=5000)
    check(heir.lock(wait_s=5, watchdog=False), "the heir gets the dead holder's lock")
    took = time.monotonic() - began
    check(0.8 < took < 2.5, f"after the lease ran out: {took:.2f} s")
    check(heir.unlock() == 1, "heir releases")

    # RFencedLock: every grant (re-entry too) a larger token, which getToken() (GET) reads.
    fl = RLock(r, "fenced", lease_ms=10000, fenced=True)
    tokens = []
    for _ in range(3):
        check(fl.lock(wait_s=0, watchdog=False), "fenced lock")
        tokens.append(fl.token)
        check(int(r.get(fl.token_name)) == fl.token, "getToken() is the latest token")
    check(fl.unlock() == 0 and fl.unlock() == 0 and fl.unlock() == 1, "three unlocks")
    other = RLock(r, "fenced", lease_ms=10000, fenced=True)
    check(other.lock(wait_s=0, watchdog=False), "another takes it")
    tokens.append(other.token)
    check(tokens == sorted(set(tokens)), f"tokens grow: {tokens}")
    check(isinstance(fl.try_acquire(), int), "refused while held: the PTTL")
    check(other.unlock() == 1, "released")
    print("ok")


def worker(args):
    r = redis.Redis(host=args.redis[0], port=int(args.redis[1]), socket_timeout=30)
    counter = redis.Redis(host=args.counter[0], port=int(args.counter[1]))
    key = f"count:{args.resource}"
    client_id = str(uuid.uuid4())
    done = [0, 0]
    out = threading.Lock()

    def loop(i):
        # One thread renews like Redisson before 3.44, the other like 3.44 and later.
        lock = RLock(
            r, args.resource, client_id=client_id, lease_ms=3000, chunk=i == 1, fenced=args.fenced
        )
        for _ in range(args.iterations // 2 + (i < args.iterations % 2)):
            if not args.no_lock:
                lock.lock()
            try:
                n = int(counter.get(key) or 0)
                time.sleep(args.hold_ms / 1000)
                counter.set(key, n + 1)
                done[i] += 1
                if args.fenced and not args.no_lock:
                    with out:
                        print(f"fence {n} {lock.token}", flush=True)
            finally:
                if not args.no_lock and lock.unlock() is None:
                    print("expired while held", file=sys.stderr)

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(f"done {sum(done)}")


def main():
    def options(p):
        p.add_argument("--fenced", action="store_true", help="RFencedLock: print `fence READ TOKEN`")

    run(worker, {"api": api}, options)


if __name__ == "__main__":
    main()

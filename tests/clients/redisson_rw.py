"""Redisson's RReadWriteLock and RFairLock protocols, byte for byte, through redlock-proxy:
driven by tests/libraries.rs.

Redisson is a Java library; this driver sends exactly what its RedissonReadLock,
RedissonWriteLock, ReadLockTask (the read-lock watchdog, 3.44 and later), LockTask (the write
lock's watchdog) and RedissonFairLock send in Redisson 4.7.0: the scripts in
tests/clients/lua/redisson_rw_*.lua and redisson_fair_*.lua (extracted from its Java string
concatenations unchanged), EVALSHA first and EVAL on NOSCRIPT, the same KEYS and ARGV in the
same order, its names (`<uuid>:<threadId>` fields, `<field>:write` for the write lock,
`{name}:<field>:rwlock_timeout` prefixes, `redisson_lock_queue:{name}`,
`redisson_lock_timeout:{name}`, `redisson_unlock_latch:{name}:<request>`), its waiters
subscribed to `redisson_rwlock:{name}` (read-write) or `redisson_lock__channel:{name}:<field>`
(fair, one channel per waiter), and its fair lock's `acquireFailed` when a wait runs out.

    python redisson_rw.py rw-api PROXY_PORT MASTER_PORT...
    python redisson_rw.py fair-api PROXY_PORT MASTER_PORT...
        Behaviour checks, printing `ok` at the end (see each function).
    python redisson_rw.py fair-order PROXY_PORT WAITERS
        A holder takes the fair lock, WAITERS threads queue one after another and print
        `queued`; after a line on stdin the holder unlocks; prints the order they got it:
        `order 0 1 2 ...`.
    python redisson_rw.py --mode rw|fair --redis HOST:PORT --counter HOST:PORT \
            --resource NAME --iterations N --hold-ms MS [--no-lock]
        A contention worker (the CLI contract of tests/libraries.rs `run_n`), two threads.
        rw: each thread alternates writer and reader. A writer increments the counter
        (read, sleep, write); a reader reads it twice around its sleep. Both count themselves
        in `writers:`/`readers:` on the counter's Redis on entry (before looking at the other
        count) and out on exit, so of two sections that overlap the later one sees the other:
        `check exclusive GOOD BAD` (a writer alone, a reader with no writer), `check snapshot`
        (the reader's two reads agree), `check readers_together N 0` (readers seen together).
        fair: the threads share the iterations; each takes the fair lock with a wait,
        increments, unlocks; each grant that
        had to queue prints `fair SENT REPLIED GRANTED` (wall-clock us: the queueing call sent
        and answered, the grant). With --unfair, RLock instead (the control of the order).
        Prints `done N` last (writes done).
"""
import argparse
import hashlib
import os
import sys
import threading
import time
import uuid

import redis

HERE = os.path.dirname(os.path.abspath(__file__))


def script(name):
    with open(os.path.join(HERE, "lua", f"redisson_{name}.lua"), "rb") as f:
        return f.read()


READ_LOCK = script("rw_read_lock")
READ_UNLOCK = script("rw_read_unlock")
READ_FORCE = script("rw_read_forceUnlock")
READ_RENEW = script("rw_ReadLockTask_chunk")
READ_RENEW_3X = script("rw_read_renew_3x")  # Redisson before 3.44
READ_UNLOCK_3X = script("rw_read_unlock_3x")  # answers 1, not nil, for a lock already gone
READ_IS_LOCKED = script("rw_read_isLocked")
WRITE_LOCK = script("rw_write_lock")
WRITE_UNLOCK = script("rw_write_unlock")
WRITE_FORCE = script("rw_write_forceUnlock")
LOCK_RENEW = script("LockTask_chunk")
FAIR_LOCK = script("fair_lock")
FAIR_TRY = script("fair_tryLock")
FAIR_UNLOCK = script("fair_unlock")
FAIR_FORCE = script("fair_forceUnlock")
FAIR_FAILED = script("fair_acquireFailed")
RLOCK_LOCK = script("lock")
RLOCK_UNLOCK = script("unlock")
UNLOCK_MESSAGE = 0
READ_UNLOCK_MESSAGE = 1
FAIR_WAIT_MS = 5000  # Redisson's fairLockWaitTimeout


def check(cond, what):
    if not cond:
        print(f"FAILED: {what}", file=sys.stderr)
        sys.exit(1)


def eventually(pred, what, within_s=5):
    """pred() holds within `within_s` (a roll-back runs in the background)."""
    end = time.monotonic() + within_s
    while not pred():
        check(time.monotonic() < end, what)
        time.sleep(0.05)


def evalsha(r, body, keys, args):
    """Redisson's way: EVALSHA, and EVAL when the server answers NOSCRIPT."""
    sha = hashlib.sha1(body).hexdigest()
    try:
        return r.execute_command("EVALSHA", sha, len(keys), *keys, *args)
    except redis.exceptions.NoScriptError:
        return r.execute_command("EVAL", body, len(keys), *keys, *args)


def now_ms():
    return int(time.time() * 1000)


def now_us():
    return int(time.time() * 1_000_000)


def tagged(name):
    """Redisson's prefixName/suffixName: the name in braces unless it has them already."""
    return name if "{" in name else "{" + name + "}"


class Base:
    """What RedissonLock does around its scripts: wait for a message or the answered TTL,
    retry, unlock with a latch, and the watchdog."""

    def __init__(self, r, name, client_id=None, lease_ms=30000, tid=None):
        self.r = r
        self.name = name
        self.id = client_id or str(uuid.uuid4())
        self.lease_ms = lease_ms
        # The Java thread id: this Python thread's, unless the caller names one.
        self.tid = tid
        self.watchdogs = {}
        # Holds per field, as Redisson's renewal entry counts them: the watchdog stops when the
        # thread's last hold is unlocked (whatever the unlock answered).
        self.holds = {}
        self.wait_ms = FAIR_WAIT_MS

    def thread_name(self):
        return f"{self.id}:{self.tid or threading.get_ident()}"

    def channel(self):
        raise NotImplementedError

    def lock(self, wait_s=None, watchdog=True, on_queued=None):
        """tryLock(wait) / lock(): True when acquired."""
        deadline = None if wait_s is None else time.monotonic() + wait_s
        # RFairLock's queue wait: the tryLock wait when there is one, else fairLockWaitTimeout.
        self.wait_ms = int(wait_s * 1000) if wait_s and wait_s > 0 else FAIR_WAIT_MS
        pubsub = None
        queued = None
        try:
            while True:
                sent = now_us()
                try:
                    ttl = self.try_acquire()
                except redis.exceptions.RedisError as e:
                    self.last_error = e
                    ttl = 50  # Redisson retries a failed command after its retry interval.
                if ttl is None:
                    self.holds[self.field()] = self.holds.get(self.field(), 0) + 1
                    if watchdog:
                        self.start_watchdog()
                    self.granted_after = queued
                    return True
                if queued is None:
                    queued = (sent, now_us())
                    if on_queued:
                        on_queued()
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    self.acquire_failed(wait_s)
                    return False
                if pubsub is None:
                    pubsub = self.r.pubsub()
                    pubsub.subscribe(self.channel())
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

    def acquire_failed(self, wait_s):
        pass

    def start_watchdog(self):
        field = self.field()
        if field in self.watchdogs:
            return
        stop = threading.Event()

        def run():
            while not stop.wait(self.lease_ms / 3000):
                try:
                    if not self.renew(field):
                        return
                except redis.exceptions.RedisError:
                    pass

        threading.Thread(target=run, daemon=True).start()
        self.watchdogs[field] = stop

    def stop_watchdog(self):
        stop = self.watchdogs.pop(self.field(), None)
        if stop:
            stop.set()

    def latch(self):
        return f"redisson_unlock_latch:{tagged(self.name)}:{uuid.uuid4().hex}"

    def unlock(self):
        """unlock(): None (not held), 0 (still held), 1 (released); retried with one latch."""
        latch = self.latch()
        for _ in range(20):
            try:
                res = self.unlock_with(latch)
                break
            except redis.exceptions.RedisError:
                time.sleep(0.05)
        else:
            raise RuntimeError("unlock failed 20 times")
        field = self.field()
        self.holds[field] = max(0, self.holds.get(field, 0) - 1)
        if res is None or self.holds[field] == 0:
            self.stop_watchdog()
        return res

    def hold_count(self):
        v = self.r.hget(self.name, self.field())
        return int(v) if v is not None else 0


class ReadLock(Base):
    """RReadWriteLock.readLock(); `old`: its watchdog as before Redisson 3.44."""

    def __init__(self, *args, old=False, **kwargs):
        super().__init__(*args, **kwargs)
        self.old = old

    def field(self):
        return self.thread_name()

    def channel(self):
        return f"redisson_rwlock:{tagged(self.name)}"

    def timeout_prefix(self):
        return f"{tagged(self.name)}:{self.field()}:rwlock_timeout"

    def try_acquire(self, lease_ms=None):
        return evalsha(
            self.r,
            READ_LOCK,
            [self.name, self.timeout_prefix()],
            [lease_ms or self.lease_ms, self.field(), self.field() + ":write"],
        )

    def unlock_with(self, latch):
        prefix = self.timeout_prefix()
        key_prefix = prefix.split(":" + self.field())[0]
        return evalsha(
            self.r,
            READ_UNLOCK,
            [self.name, self.channel(), prefix, key_prefix, latch],
            [UNLOCK_MESSAGE, self.field(), "publish", 5000],
        )

    def renew(self, field):
        """ReadLockTask's chunk, this one lock with this one thread (or renewExpirationAsync
        before 3.44)."""
        key_prefix = tagged(self.name)
        if self.old:
            return evalsha(self.r, READ_RENEW_3X, [self.name, key_prefix], [self.lease_ms, field]) == 1
        res = evalsha(self.r, READ_RENEW, [self.name, key_prefix], [self.lease_ms, 1, field])
        return res == [1]

    def force_unlock(self):
        return evalsha(self.r, READ_FORCE, [self.name, self.channel()], [UNLOCK_MESSAGE, "publish"])

    def is_locked(self):
        return evalsha(self.r, READ_IS_LOCKED, [self.name], []) == 1


class WriteLock(Base):
    """RReadWriteLock.writeLock()."""

    def field(self):
        return self.thread_name() + ":write"

    def channel(self):
        return f"redisson_rwlock:{tagged(self.name)}"

    def try_acquire(self, lease_ms=None):
        return evalsha(self.r, WRITE_LOCK, [self.name], [lease_ms or self.lease_ms, self.field()])

    def unlock_with(self, latch):
        return evalsha(
            self.r,
            WRITE_UNLOCK,
            [self.name, self.channel(), latch],
            [READ_UNLOCK_MESSAGE, self.lease_ms, self.field(), "publish", 5000],
        )

    def renew(self, field):
        """LockTask's chunk (the write lock renews as an RLock), this one lock."""
        return evalsha(self.r, LOCK_RENEW, [self.name], [self.lease_ms, field]) == [1]

    def force_unlock(self):
        return evalsha(
            self.r, WRITE_FORCE, [self.name, self.channel()], [READ_UNLOCK_MESSAGE, "publish"]
        )


class FairLock(Base):
    """RFairLock."""

    def field(self):
        return self.thread_name()

    def queue(self):
        return f"redisson_lock_queue:{tagged(self.name)}"

    def timeouts(self):
        return f"redisson_lock_timeout:{tagged(self.name)}"

    def base_channel(self):
        return f"redisson_lock__channel:{tagged(self.name)}"

    def channel(self):
        return f"{self.base_channel()}:{self.field()}"

    def try_acquire(self, lease_ms=None):
        """tryLockInnerAsync with EVAL_LONG (lock(), tryLock(wait, ...))."""
        return evalsha(
            self.r,
            FAIR_LOCK,
            [self.name, self.queue(), self.timeouts()],
            [lease_ms or self.lease_ms, self.field(), self.wait_ms, now_ms()],
        )

    def try_lock_now(self):
        """tryLock() without a wait (EVAL_NULL_BOOLEAN): None when taken, else 1."""
        return evalsha(
            self.r,
            FAIR_TRY,
            [self.name, self.queue(), self.timeouts()],
            [self.lease_ms, self.field(), now_ms(), FAIR_WAIT_MS],
        )

    def acquire_failed(self, wait_s):
        wait = int(wait_s * 1000) if wait_s and wait_s > 0 else FAIR_WAIT_MS
        evalsha(self.r, FAIR_FAILED, [self.queue(), self.timeouts()], [self.field(), wait])

    def unlock_with(self, latch):
        return evalsha(
            self.r,
            FAIR_UNLOCK,
            [self.name, self.queue(), self.timeouts(), self.base_channel(), latch],
            [UNLOCK_MESSAGE, self.lease_ms, self.field(), now_ms(), "publish", 5000],
        )

    def renew(self, field):
        return evalsha(self.r, LOCK_RENEW, [self.name], [self.lease_ms, field]) == [1]

    def force_unlock(self):
        return evalsha(
            self.r,
            FAIR_FORCE,
            [self.name, self.queue(), self.timeouts(), self.base_channel()],
            [UNLOCK_MESSAGE, now_ms(), "publish"],
        )


class PlainLock(Base):
    """RLock (not fair): the negative control of the fair order."""

    def field(self):
        return self.thread_name()

    def channel(self):
        return f"redisson_lock__channel:{tagged(self.name)}"

    def try_acquire(self, lease_ms=None):
        return evalsha(self.r, RLOCK_LOCK, [self.name], [lease_ms or self.lease_ms, self.field()])

    def unlock_with(self, latch):
        return evalsha(
            self.r,
            RLOCK_UNLOCK,
            [self.name, self.channel(), latch],
            [UNLOCK_MESSAGE, self.lease_ms, self.field(), "publish", 5000],
        )


def rw_api(proxy_port, master_ports):
    r = redis.Redis(port=proxy_port)
    masters = [redis.Redis(port=p) for p in master_ports]
    quorum = len(masters) // 2 + 1

    def on_majority(pred, what):
        n = sum(1 for m in masters if pred(m))
        check(n >= quorum, f"{what} on {n} of {len(masters)} masters")

    # Readers hold together; a writer is refused with the PTTL while they do.
    # Each lock is another Redisson client (its own UUID) on Java thread 1, whatever Python
    # thread calls it.
    r1 = ReadLock(r, "rw", lease_ms=10000, tid=1)
    r2 = ReadLock(r, "rw", lease_ms=10000, tid=1)
    w = WriteLock(r, "rw", lease_ms=10000, tid=1)
    check(r1.lock(wait_s=5, watchdog=False), f"reader 1 locks: {getattr(r1, 'last_error', None)}")
    check(r2.lock(wait_s=5, watchdog=False), "reader 2 locks beside it")
    ttl = w.try_acquire()
    check(isinstance(ttl, int) and 9000 < ttl <= 10000, f"a writer gets the PTTL: {ttl}")
    on_majority(lambda m: m.hget("rw", "mode") == b"read" and m.hlen("rw") == 3, "read mode")
    check(r1.is_locked(), "readLock().isLocked()")
    check(r.hget("rw", "mode") == b"read", "HGET mode (writeLock().isLocked() reads it)")
    # Re-entrant reads: a count per holder, one timeout key per hold.
    check(r1.lock(wait_s=5, watchdog=False), "reader 1 re-enters")
    check(r1.hold_count() == 2, f"reader 1 holds twice: {r1.hold_count()}")
    on_majority(lambda m: m.exists(r1.timeout_prefix() + ":2") == 1, "second hold's timeout key")
    check(r1.unlock() == 0 and r1.unlock() == 0, "reader 1 unlocks twice, reader 2 still holds")
    on_majority(lambda m: m.exists(r1.timeout_prefix() + ":1") == 0, "timeout keys gone")
    check(isinstance(w.try_acquire(), int), "still refused to the writer")
    check(r2.unlock() == 1, "the last reader releases")
    check(r.exists("rw") == 0, "released")
    on_majority(lambda m: m.exists("rw") == 0, "lock gone")
    check(not r1.is_locked(), "readLock().isLocked() once released")
    check(r1.unlock() is None, "unlock of a read lock not held answers nil")
    prefix = r1.timeout_prefix()
    old = evalsha(
        r,
        READ_UNLOCK_3X,
        ["rw", r1.channel(), prefix, tagged("rw"), r1.latch()],
        [UNLOCK_MESSAGE, r1.field(), "publish", 5000],
    )
    check(old == 1, f"the unlock before 4.x answers 1 for a lock already gone: {old}")

    # A writer excludes readers and writers; it re-enters, and may read while it writes.
    check(w.lock(wait_s=5, watchdog=False), "writer locks")
    check(isinstance(r1.try_acquire(), int), "a reader is refused")
    other = WriteLock(r, "rw", lease_ms=10000, tid=1)
    check(isinstance(other.try_acquire(), int), "another writer is refused")
    check(w.lock(wait_s=5, watchdog=False), "writer re-enters")
    check(w.hold_count() == 2, f"write hold count 2: {w.hold_count()}")
    mine = ReadLock(r, "rw", client_id=w.id, lease_ms=10000, tid=1)
    check(mine.lock(wait_s=5, watchdog=False), "the writer's own thread takes the read lock")
    check(w.unlock() == 0, "one write hold less: 0")
    check(w.unlock() == 1, "the write lock released: 1")
    on_majority(lambda m: m.hget("rw", "mode") == b"read", "down to read mode")
    check(r2.lock(wait_s=5, watchdog=False), "now another reader joins")
    check(isinstance(other.try_acquire(), int), "and a writer is refused")
    check(mine.unlock() == 0 and r2.unlock() == 1, "readers release")
    check(w.unlock() is None, "unlock of a write lock not held answers nil")

    # Redisson's read-write lock is not fair (its Javadoc: "order of read and write locking is
    # unspecified"): a writer waiting does not hold back a new reader, on one Redis or here.
    check(r1.lock(wait_s=5, watchdog=False), "a reader holds")
    check(isinstance(w.try_acquire(), int), "a writer is refused (and would wait)")
    check(r2.lock(wait_s=5, watchdog=False), "a new reader still gets in")
    check(r1.unlock() == 0 and r2.unlock() == 1, "readers release")

    # The unlock's publish wakes a waiter at once (not after the 10 s lease).
    # Each round on a lock of its own, so no copy of an earlier round's message can arrive.
    wake = [
        (WriteLock(r, "wake1", lease_ms=10000, tid=1), ReadLock(r, "wake1", lease_ms=10000, tid=1), b"1"),
        (ReadLock(r, "wake2", lease_ms=10000, tid=1), WriteLock(r, "wake2", lease_ms=10000, tid=1), b"0"),
    ]
    for holder, waiter, message in wake:
        listener = r.pubsub()
        listener.subscribe(holder.channel())
        listener.get_message(timeout=1)
        check(holder.lock(wait_s=5, watchdog=False), "holder locks")
        got = {}

        def wait():
            got["ok"] = waiter.lock(wait_s=9, watchdog=False)
            got["at"] = time.monotonic()

        t = threading.Thread(target=wait)
        t.start()
        time.sleep(0.5)
        released = time.monotonic()
        check(holder.unlock() == 1, "holder releases")
        t.join(10)
        check(got.get("ok") is True, f"waiter acquired: {got}")
        # Well before the 10 s lease: the message woke it (generous for a loaded machine).
        check(got["at"] - released < 3, f"woken by the message: {got['at'] - released:.3f} s")
        messages = []
        end = time.monotonic() + 0.5
        while time.monotonic() < end:
            m = listener.get_message(timeout=0.1)
            if m and m["type"] == "message":
                messages.append(m["data"])
        check(messages == [message], f"one release message: {messages}")
        listener.close()
        check(waiter.unlock() == 1, "waiter releases")

    # The watchdogs: a lease of 2.4 s renewed every 0.8 s keeps the lock for 6 s.
    for lock in [
        ReadLock(r, "dog", lease_ms=2400, tid=1),
        ReadLock(r, "dog", lease_ms=2400, tid=1, old=True),
        WriteLock(r, "dog", lease_ms=2400, tid=1),
    ]:
        check(lock.lock(wait_s=5), "locks with the watchdog")
        time.sleep(6)
        check(lock.hold_count() == 1, f"still held past the lease: {type(lock).__name__}")
        on_majority(lambda m: 0 < m.pttl("dog") <= 2400, "renewed TTL")
        check(lock.unlock() == 1, "releases")

    # forceUnlock by mode: a read lock's on a read lock, a write lock's on a write lock.
    check(r1.lock(wait_s=5, watchdog=False), "reader holds")
    check(w.force_unlock() == 0, "the write lock's forceUnlock leaves a read lock: 0")
    check(r1.force_unlock() == 1, "the read lock's forceUnlock: 1")
    check(r.exists("rw") == 0, "forced away")

    # A quorum decides. One master (the last) says the lock is another's; the rest agree it is
    # free: granted. A majority say it is another's: refused with their PTTL, and the grant on
    # the master that said yes is rolled back there.
    masters[-1].hset("split", mapping={"mode": "write", "x:1:write": 1})
    masters[-1].pexpire("split", 20000)
    s = ReadLock(r, "split", lease_ms=10000, tid=1)
    check(s.lock(wait_s=5, watchdog=False), "granted over one disagreeing master")
    check(s.unlock() == 1, "released")
    for m in masters[: quorum]:
        m.hset("split2", mapping={"mode": "write", "x:1:write": 1})
        m.pexpire("split2", 20000)
    s = ReadLock(r, "split2", lease_ms=10000, tid=1)
    ttl = s.try_acquire()
    check(isinstance(ttl, int) and 15000 < ttl <= 20000, f"refused with a majority's PTTL: {ttl}")
    for m in masters[quorum:]:
        eventually(lambda: m.exists("split2") == 0, "the partial grant rolled back")
        eventually(lambda: m.exists(s.timeout_prefix() + ":1") == 0, "its timeout key too")
    for m in masters:
        m.delete("split", "split2")

    # A publish command other than publish/spublish is refused, not run.
    try:
        evalsha(r, WRITE_UNLOCK, ["rw", w.channel(), "l"], [1, 1000, w.field(), "del", 5000])
        check(False, "a publish command other than publish/spublish must be refused")
    except redis.exceptions.ResponseError as e:
        check("PUBLISH" in str(e), f"refusal names PUBLISH: {e}")
    print("ok")


def fair_api(proxy_port, master_ports):
    r = redis.Redis(port=proxy_port)
    masters = [redis.Redis(port=p) for p in master_ports]
    quorum = len(masters) // 2 + 1

    def on_majority(pred, what):
        n = sum(1 for m in masters if pred(m))
        check(n >= quorum, f"{what} on {n} of {len(masters)} masters")

    a = FairLock(r, "fair", lease_ms=10000, tid=1)
    b = FairLock(r, "fair", lease_ms=10000, tid=1)
    check(a.lock(wait_s=5, watchdog=False), "a locks")
    check(a.lock(wait_s=5, watchdog=False) and a.hold_count() == 2, "a re-enters: count 2")
    check(b.try_lock_now() == 1, "tryLock() without a wait is refused: 1")
    ttl = b.try_acquire()
    check(isinstance(ttl, int) and 9000 < ttl <= 10000, f"a waiter gets the PTTL: {ttl}")
    on_majority(lambda m: m.lrange(b.queue(), 0, -1) == [b.field().encode()], "b queued")
    eventually(
        lambda: all(m.lrange(b.queue(), 0, -1) == [b.field().encode()] for m in masters),
        "every master keeps the same queue",
    )
    # A wait that runs out leaves the queue (acquireFailed).
    c = FairLock(r, "fair", lease_ms=10000, tid=1)
    check(c.lock(wait_s=5.3, watchdog=False) is False, "c's wait runs out")
    on_majority(lambda m: c.field().encode() not in m.lrange(c.queue(), 0, -1), "c left the queue")
    check(a.unlock() == 0, "one hold less: 0")
    # b, first in the queue, is told on its own channel when a releases.
    got = {}

    def wait():
        got["ok"] = b.lock(wait_s=9, watchdog=False)
        got["at"] = time.monotonic()

    t = threading.Thread(target=wait)
    t.start()
    time.sleep(0.5)
    released = time.monotonic()
    check(a.unlock() == 1, "a releases: 1")
    t.join(10)
    check(got.get("ok") is True, f"b acquired: {got}")
    check(got["at"] - released < 3, f"b woken by the message: {got['at'] - released:.3f} s")
    on_majority(lambda m: m.llen(b.queue()) == 0, "queue empty")
    check(a.unlock() is None, "unlock of a lock not held answers nil")
    check(b.force_unlock() == 1 and b.force_unlock() == 0, "forceUnlock: 1, then 0")

    # Arrival order: five waiters queue one after another and get the lock in that order.
    order = fair_order(r, "order", 5, lambda: None)
    check(order == list(range(5)), f"waiters served in arrival order: {order}")
    print("ok")


def fair_order(r, name, waiters, between):
    """A holder takes `name`; `waiters` threads queue in turn (each once its predecessor is
    queued); `between()` runs; the holder unlocks. Returns the order the waiters got it."""
    holder = FairLock(r, name, lease_ms=20000)
    check(holder.lock(wait_s=5, watchdog=False), "the holder locks")
    order = []
    guard = threading.Lock()
    threads = []
    for i in range(waiters):
        queued = threading.Event()

        def run(i=i, queued=queued):
            lock = FairLock(r, name, lease_ms=20000)
            ok = lock.lock(wait_s=60, watchdog=False, on_queued=queued.set)
            with guard:
                order.append(i if ok else -1)
            time.sleep(0.05)
            lock.unlock()

        t = threading.Thread(target=run)
        t.start()
        threads.append(t)
        check(queued.wait(10), f"waiter {i} queued")
    between()
    check(holder.unlock() == 1, "the holder releases")
    for t in threads:
        t.join(60)
    return order


def worker(args):
    r = redis.Redis(host=args.redis[0], port=int(args.redis[1]), socket_timeout=30)
    counter = redis.Redis(host=args.counter[0], port=int(args.counter[1]))
    key = f"count:{args.resource}"
    writers, readers = f"writers:{args.resource}", f"readers:{args.resource}"
    client_id = str(uuid.uuid4())
    done = [0, 0]
    stats = {"exclusive": [0, 0], "snapshot": [0, 0], "together": 0}
    out = threading.Lock()

    def note(name, ok):
        with out:
            stats[name][0 if ok else 1] += 1

    def write_section():
        alone = counter.incr(writers) == 1
        alone = counter.get(readers) in (None, b"0") and alone
        n = int(counter.get(key) or 0)
        time.sleep(args.hold_ms / 1000)
        counter.set(key, n + 1)
        counter.decr(writers)
        note("exclusive", alone)

    def read_section():
        together = counter.incr(readers) > 1
        alone = counter.get(writers) in (None, b"0")
        first = counter.get(key)
        time.sleep(args.hold_ms / 1000)
        second = counter.get(key)
        counter.decr(readers)
        note("exclusive", alone)
        note("snapshot", first == second)
        if together:
            with out:
                stats["together"] += 1

    def loop(i):
        if args.mode == "rw":
            rl = ReadLock(r, args.resource, client_id=client_id, lease_ms=3000)
            wl = WriteLock(r, args.resource, client_id=client_id, lease_ms=3000)
        for k in range(args.iterations):
            if args.mode == "fair" and k >= args.iterations // 2 + (i < args.iterations % 2):
                break  # the two threads share the iterations, as redisson.py's do
            if args.mode == "fair":
                kind = PlainLock if args.unfair else FairLock
                lock = kind(r, args.resource, client_id=client_id, lease_ms=3000)
                if not args.no_lock:
                    lock.lock(watchdog=False)
                try:
                    granted = now_us()
                    n = int(counter.get(key) or 0)
                    time.sleep(args.hold_ms / 1000)
                    counter.set(key, n + 1)
                    done[i] += 1
                    if not args.no_lock and lock.granted_after:
                        with out:
                            sent, replied = lock.granted_after
                            print(f"fair {sent} {replied} {granted}", flush=True)
                finally:
                    if not args.no_lock and lock.unlock() is None:
                        print("expired while held", file=sys.stderr)
                continue
            writing = (k + i) % 2 == 0
            lock = wl if writing else rl
            if not args.no_lock:
                lock.lock()
            try:
                if writing:
                    write_section()
                    done[i] += 1
                else:
                    read_section()
            finally:
                if not args.no_lock and lock.unlock() is None:
                    print("expired while held", file=sys.stderr)

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if args.mode == "rw":
        for name in ("exclusive", "snapshot"):
            print(f"check {name} {stats[name][0]} {stats[name][1]}")
        print(f"check readers_together {stats['together']} 0")
    print(f"done {sum(done)}")


def main():
    if len(sys.argv) > 1 and sys.argv[1] in ("rw-api", "fair-api"):
        fn = rw_api if sys.argv[1] == "rw-api" else fair_api
        fn(int(sys.argv[2]), [int(p) for p in sys.argv[3:]])
        return
    if len(sys.argv) > 1 and sys.argv[1] == "fair-order":
        r = redis.Redis(port=int(sys.argv[2]))
        between = lambda: (print("queued", flush=True), sys.stdin.readline())  # noqa: E731
        order = fair_order(r, "order", int(sys.argv[3]), between)
        print("order " + " ".join(str(i) for i in order), flush=True)
        return
    p = argparse.ArgumentParser()
    hostport = lambda s: s.rsplit(":", 1)  # noqa: E731
    p.add_argument("--mode", choices=["rw", "fair"], default="rw")
    p.add_argument("--redis", type=hostport, required=True)
    p.add_argument("--counter", type=hostport, required=True)
    p.add_argument("--resource", required=True)
    p.add_argument("--iterations", type=int, required=True)
    p.add_argument("--hold-ms", type=int, default=2)
    p.add_argument("--no-lock", action="store_true")
    p.add_argument("--unfair", action="store_true", help="fair mode with RLock: the control")
    worker(p.parse_args())


if __name__ == "__main__":
    main()

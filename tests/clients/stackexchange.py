"""StackExchange.Redis's lock API (`LockTake`, `LockExtend`, `LockRelease`, `LockQuery`), its wire
behaviour reproduced on redis-py.

StackExchange.Redis is a .NET library, and no NuGet feed is reached here, so this driver is our
own code sending exactly what the library sends (RedisDatabase.cs, RedisTransaction.cs,
Condition.cs) to a server that reports a version below 8.4 (the proxy reports 7.0.0), after its
connection handshake (ServerEndPoint.cs: HELLO 2, CLIENT SETNAME/SETINFO/ID, CONFIG GET,
SENTINEL MASTERS, INFO, CLUSTER NODES, the tie-breaker GET, the ECHO tracer; SUBSCRIBE to
`__Booksleeve_MasterChanged` on the subscription connection):
- LockTake: `SET key value EX seconds NX` for a whole number of seconds, else `PX ms NX`;
- LockQuery: `GET key`;
- LockExtend / LockRelease: a transaction with the condition "key equals value":
  `WATCH key` and `GET key` pipelined; if the value differs, `UNWATCH` and the answer is false;
  otherwise `MULTI`, `PEXPIRE key ms` (`EXPIRE key s` for whole seconds) or `DEL key`, `EXEC`
  pipelined; the answer is true when `EXEC` ran (not nil);
- the library has no lock scripts. From Redis 8.4 it sends `SET key value IFEQ value PX ms` and
  `DELEX key IFEQ value` instead; `api` checks that the proxy answers both as Redis 8.4 does.

    python stackexchange.py api PROXY_PORT MASTER_PORT...
    python stackexchange.py --redis ...          a contention worker (lockworker.py)
"""
import os
import sys
import threading
import time
import uuid

import redis

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lockworker import Checks, check, critical_section, on_majority, run  # noqa: E402


def expiry(ms):
    """The library's expiry words: seconds when whole, milliseconds otherwise."""
    return ("EX", ms // 1000) if ms % 1000 == 0 else ("PX", ms)


class Database:
    """One multiplexer connection (commands from one caller at a time, pipelined as the library
    pipelines them)."""

    def __init__(self, host, port):
        # RESP2 and nothing sent on connect: the library's own handshake follows.
        self.conn = redis.Connection(
            host=host, port=port, socket_timeout=30, protocol=2, driver_info=None
        )
        self.guard = threading.Lock()
        self.handshake()

    def handshake(self):
        """The interactive connection's handshake (ServerEndPoint.HandshakeAsync and
        AutoConfigureAsync, RESP2, default options), pipelined; the errors of the discovery
        commands (no SENTINEL, no CLUSTER on a standalone server) are expected and ignored, and the
        connection is usable once the tracer (`ECHO <multiplexer id>`) answers."""
        tracer = str(uuid.uuid4())
        commands = [
            ("HELLO", "2"),
            ("CLIENT", "SETNAME", "redlock-tests"),
            ("CLIENT", "SETINFO", "lib-name", "SE.Redis"),
            ("CLIENT", "SETINFO", "lib-ver", "2.9.32"),
            ("CLIENT", "ID"),
            ("CONFIG", "GET", "replica-read-only"),
            ("CONFIG", "GET", "databases"),
            ("SENTINEL", "MASTERS"),
            ("INFO", "replication"),
            ("INFO", "server"),
            ("CLUSTER", "NODES"),
            ("GET", "__Booksleeve_TieBreak"),
            ("ECHO", tracer),
        ]
        replies = self._pipeline(*commands, errors_raise=False)
        check(replies[-1] == tracer.encode(), f"the handshake's tracer: {replies}")
        info = replies[9].decode() if isinstance(replies[9], bytes) else ""
        self.version = next((v.split(":")[1] for v in info.split() if v.startswith("redis_version:")), "")

    def _pipeline(self, *commands, errors_raise=True):
        """Sends the commands in one write and reads every reply (an error reply raised once
        every reply is read, or returned as an exception with `errors_raise=False`)."""
        self.conn.send_packed_command(self.conn.pack_commands(commands))
        replies = []
        for _ in commands:
            try:
                replies.append(self.conn.read_response())
            except redis.exceptions.ResponseError as e:
                replies.append(e)
        for r in replies:
            if isinstance(r, Exception) and errors_raise:
                raise r
        return replies

    def lock_take(self, key, value, ms):
        unit, n = expiry(ms)
        with self.guard:
            return self._pipeline(("SET", key, value, unit, n, "NX"))[0] is not None

    def lock_query(self, key):
        with self.guard:
            return self._pipeline(("GET", key))[0]

    def _conditional(self, key, value, op):
        with self.guard:
            _, seen = self._pipeline(("WATCH", key), ("GET", key))
            if seen != value.encode():
                self._pipeline(("UNWATCH",))
                return False
            ok, queued, done = self._pipeline(("MULTI",), op, ("EXEC",))
            return done is not None

    def lock_extend(self, key, value, ms):
        unit = "EXPIRE" if ms % 1000 == 0 else "PEXPIRE"
        return self._conditional(key, value, (unit, key, ms // 1000 if ms % 1000 == 0 else ms))

    def lock_release(self, key, value):
        return self._conditional(key, value, ("DEL", key))


def api(proxy_port, master_ports):
    db = Database("127.0.0.1", proxy_port)
    other = Database("127.0.0.1", proxy_port)
    masters = [redis.Redis(port=p) for p in master_ports]
    me, them = str(uuid.uuid4()), str(uuid.uuid4())
    major, minor = (int(x) for x in db.version.split(".")[:2])
    check((major, minor) < (8, 4), f"a version that keeps the library on transactions: {db.version}")
    # The subscription connection's handshake ends in SUBSCRIBE __Booksleeve_MasterChanged.
    sub = redis.Connection(port=proxy_port, protocol=2, driver_info=None)
    sub.send_packed_command(sub.pack_commands(
        [("CLIENT", "ID"), ("ECHO", "t"), ("SUBSCRIBE", "__Booksleeve_MasterChanged")]))
    got = [sub.read_response() for _ in range(3)]
    check(got[1] == b"t" and got[2][0] == b"subscribe", f"subscription handshake: {got}")

    # LockTake (PX and EX forms), LockQuery.
    check(db.lock_take("se:a", me, 10500), "take")
    check(not other.lock_take("se:a", them, 10000), "a second take is refused")
    check(db.lock_query("se:a") == me.encode(), "query names the holder")
    on_majority(masters, lambda m: 9000 < m.pttl("se:a") <= 10500, "PX TTL")
    check(db.lock_take("se:b", me, 20000), "take in seconds")
    on_majority(masters, lambda m: 19000 < m.pttl("se:b") <= 20000, "EX TTL")

    # LockExtend: refused to another value (UNWATCH), granted to the holder (PEXPIRE / EXPIRE).
    check(not other.lock_extend("se:a", them, 30000), "extend by another")
    on_majority(masters, lambda m: m.pttl("se:a") <= 10500, "TTL untouched by the refused extend")
    check(db.lock_extend("se:a", me, 30500), "extend")
    on_majority(masters, lambda m: 29000 < m.pttl("se:a") <= 30500, "PEXPIRE TTL")
    check(db.lock_extend("se:b", me, 40000), "extend in seconds")
    on_majority(masters, lambda m: 39000 < m.pttl("se:b") <= 40000, "EXPIRE TTL")

    # LockRelease: refused to another value, granted to the holder; again: false.
    check(not other.lock_release("se:a", them), "release by another")
    check(db.lock_query("se:a") == me.encode(), "still held after another's release")
    check(db.lock_release("se:a", me), "release")
    on_majority(masters, lambda m: m.exists("se:a") == 0, "released")
    check(db.lock_query("se:a") is None, "query after release: nil")
    check(not db.lock_release("se:a", me), "release again")
    check(db.lock_release("se:b", me), "release b")

    # The lock changes hands between WATCH/GET and EXEC: EXEC aborts (nil), nothing deleted.
    check(db.lock_take("se:c", me, 300), "short lock")
    _, seen = db._pipeline(("WATCH", "se:c"), ("GET", "se:c"))
    check(seen == me.encode(), "watched while held")
    time.sleep(0.45)
    check(other.lock_take("se:c", them, 10000), "taken by another once expired")
    ok, queued, done = db._pipeline(("MULTI",), ("DEL", "se:c"), ("EXEC",))
    check(done is None, f"EXEC aborted: {done}")
    on_majority(masters, lambda m: m.get("se:c") == them.encode(), "the new holder's lock kept")
    check(other.lock_release("se:c", them), "the new holder releases")

    # Redis 8.4's forms, which the library sends to a server of 8.4 or later (LockExtend as
    # `SET key value IFEQ value PX ms`, LockRelease as `DELEX key IFEQ value`): the proxy answers
    # them as quorum operations, as Redis 8.4 would.
    r = redis.Redis(port=proxy_port)
    check(db.lock_take("se:d", me, 2000), "taken for the 8.4 forms")
    check(r.execute_command("SET", "se:d", them, "IFEQ", them, "PX", 5000) is None,
          "IFEQ extension by another refused")
    check(r.execute_command("SET", "se:d", me, "IFEQ", me, "PX", 5000) in (b"OK", "OK", True),
          "IFEQ extension by the holder")
    on_majority(masters, lambda m: m.pttl("se:d") > 2500, "extended on a majority")
    check(r.execute_command("DELEX", "se:d", "IFEQ", them) == 0, "DELEX by another refused")
    check(r.execute_command("DELEX", "se:d", "IFEQ", me) == 1, "DELEX by the holder")
    on_majority(masters, lambda m: m.get("se:d") is None, "released on a majority")
    print("ok")


def worker(args):
    db = Database(args.redis[0], int(args.redis[1]))
    counter = redis.Redis(host=args.counter[0], port=int(args.counter[1]))
    key = f"count:{args.resource}"
    token = str(uuid.uuid4())
    checks = Checks()
    done = 0
    for _ in range(args.iterations):
        if not args.no_lock:
            while True:
                try:
                    if db.lock_take(args.resource, token, 5000):
                        break
                except redis.exceptions.RedisError:
                    pass
                time.sleep(0.005)  # the library does not wait; callers loop
        critical_section(counter, key, args.hold_ms)
        done += 1
        if not args.no_lock:
            for name, call in [
                ("query", lambda: db.lock_query(args.resource) == token.encode()),
                ("extend", lambda: db.lock_extend(args.resource, token, 5000)),
                ("release", lambda: db.lock_release(args.resource, token)),
            ]:
                try:
                    checks(name, call())
                except redis.exceptions.RedisError as e:
                    print(f"{name}: {e}", file=sys.stderr)
                    checks(name, False)
    checks.print()
    print(f"done {done}")


def main():
    run(worker, {"api": api})


if __name__ == "__main__":
    main()

"""What the Python drivers of tests/libraries.rs share: the contention worker's command line, its
critical section, the on-a-majority check of the masters behind the proxy, and the
EVALSHA-then-EVAL way of running a script.

The worker contract (tests/libraries.rs `run_n`):
    python DRIVER.py --redis HOST:PORT --counter HOST:PORT --resource NAME \
            --iterations N --hold-ms MS [--no-lock]
Loops {lock; GET count:NAME on the counter; sleep MS; SET it + 1; unlock}, prints `done N` last.
"""
import argparse
import hashlib
import os
import sys
import time

import redis


HERE = os.path.dirname(os.path.abspath(__file__))


def lua(library):
    """The loader of `library`'s scripts: `name` -> tests/clients/lua/<library>_<name>.lua, the
    exact bytes."""

    def load(name):
        with open(os.path.join(HERE, "lua", f"{library}_{name}.lua"), "rb") as f:
            return f.read()

    return load


def run(worker, modes, configure=None):
    """A driver's entry point: `DRIVER MODE PROXY_PORT MASTER_PORT...` runs `modes[MODE]` with the
    ports; anything else is a contention worker, `worker(options)` (`configure` adds the
    driver's own options)."""
    if len(sys.argv) > 1 and sys.argv[1] in modes:
        modes[sys.argv[1]](int(sys.argv[2]), [int(p) for p in sys.argv[3:]])
    else:
        worker(worker_args(configure))


def check(cond, what):
    """Stops the driver with `FAILED: what` unless `cond`."""
    if not cond:
        print(f"FAILED: {what}", file=sys.stderr)
        sys.exit(1)


def on_majority(masters, pred, what):
    """`pred` holds on a majority of the masters behind the proxy."""
    n = sum(1 for m in masters if pred(m))
    check(n > len(masters) // 2, f"{what} on {n} of {len(masters)} masters")


def evalsha(r, body, keys, args):
    """Spring Data Redis's (and most Java clients') way: EVALSHA, and EVAL on NOSCRIPT."""
    sha = hashlib.sha1(body).hexdigest()
    try:
        return r.execute_command("EVALSHA", sha, len(keys), *keys, *args)
    except redis.exceptions.NoScriptError:
        return r.execute_command("EVAL", body, len(keys), *keys, *args)


def worker_args(configure=None):
    """The worker's options; `configure(parser)` may add the driver's own."""
    p = argparse.ArgumentParser()
    hostport = lambda s: s.rsplit(":", 1)  # noqa: E731
    p.add_argument("--redis", type=hostport, required=True)
    p.add_argument("--counter", type=hostport, required=True)
    p.add_argument("--resource", required=True)
    p.add_argument("--iterations", type=int, required=True)
    p.add_argument("--hold-ms", type=int, default=2)
    p.add_argument("--no-lock", action="store_true")
    if configure:
        configure(p)
    return p.parse_args()


def connect(hostport, **kw):
    return redis.Redis(host=hostport[0], port=int(hostport[1]), socket_timeout=30, **kw)


def critical_section(counter, key, hold_ms):
    """Read–sleep–write on the counter: two sections that overlap lose an update."""
    n = int(counter.get(key) or 0)
    time.sleep(hold_ms / 1000)
    counter.set(key, n + 1)


class Checks:
    """`check NAME OK BAD` lines: replies to the library's calls made while it holds the lock,
    which were (OK) or were not (BAD) what the library expects."""

    def __init__(self):
        self.counts = {}

    def __call__(self, name, good):
        ok, bad = self.counts.get(name, (0, 0))
        self.counts[name] = (ok + bool(good), bad + (not good))

    def print(self):
        for name, (ok, bad) in sorted(self.counts.items()):
            print(f"check {name} {ok} {bad}")

// npm `redis-lock` (1.0.0) with node-redis v4, unmodified, against redlock-proxy (driven by
// tests/libraries.rs). Its lock value is `Date.now() + timeout + 1`, so two workers that try in
// the same millisecond write the same value: the lock is only safe where `SET NX` answers nil
// whenever the key exists, whatever its value, as Redis does.
//
// Usage: node redis_lock.js contention PROXY_PORT COUNTER_PORT lock|nolock
// Prints {"expected": E, "got": G, "errors": [...]} on its last line.

"use strict";

const { createClient } = require("redis");
const redisLock = require("redis-lock");

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function client(port) {
  const c = createClient({ socket: { host: "127.0.0.1", port } });
  c.on("error", () => {});
  await c.connect();
  return c;
}

async function contention(proxyPort, counterPort, useLock) {
  const workers = 8;
  const rounds = 15;
  const counter = await client(counterPort);
  await counter.del("rl:count");
  const errors = [];

  async function work() {
    const redis = await client(proxyPort);
    const own = await client(counterPort);
    // A short retry delay, so workers often retry in the same millisecond.
    const lock = redisLock(redis, 5);
    try {
      for (let i = 0; i < rounds; i++) {
        const done = useLock ? await lock("resource", 2000) : async () => {};
        const v = Number((await own.get("rl:count")) || 0);
        await sleep(3);
        await own.set("rl:count", String(v + 1));
        await done();
      }
    } catch (e) {
      errors.push(String(e));
    } finally {
      await redis.quit();
      await own.quit();
    }
  }

  await Promise.all(Array.from({ length: workers }, work));
  const got = Number((await counter.get("rl:count")) || 0);
  await counter.quit();
  console.log(JSON.stringify({ expected: workers * rounds, got, errors }));
}

// The worker CLI contract of tests/libraries.rs: `worker --redis HOST:PORT --counter HOST:PORT
// --resource NAME --iterations N --hold-ms MS [--no-lock]`; prints `done N` last. (Its values
// are timestamps, shared by design: no `tokens` line.)
async function worker(argv) {
  const a = {};
  for (let i = 0; i < argv.length; i++) {
    const name = argv[i].replace(/^--/, "");
    a[name] = name === "no-lock" ? true : argv[++i];
  }
  const redis = await client(Number(a.redis.split(":")[1]));
  const own = await client(Number(a.counter.split(":")[1]));
  const lock = redisLock(redis, 5);
  const key = `count:${a.resource}`;
  let successes = 0;
  for (let i = 0; i < Number(a.iterations); i++) {
    const done = a["no-lock"] ? async () => {} : await lock(a.resource, 2000);
    const v = Number((await own.get(key)) || 0);
    await sleep(Number(a["hold-ms"]));
    await own.set(key, String(v + 1));
    successes++;
    await done();
  }
  console.log(`done ${successes}`);
  await redis.quit();
  await own.quit();
}

const [mode, ...args] = process.argv.slice(2);
if (mode === "worker") {
  worker(args).catch((e) => {
    console.error(e);
    process.exit(1);
  });
} else if (mode === "contention") {
  contention(Number(args[0]), Number(args[1]), args[2] === "lock").catch((e) => {
    console.error(e);
    process.exit(1);
  });
} else {
  console.error("usage: node redis_lock.js contention PROXY_PORT COUNTER_PORT lock|nolock");
  process.exit(2);
}

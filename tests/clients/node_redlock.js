// node-redlock v5 with ioredis, unmodified, against redlock-proxy (driven by tests/libraries.rs).
//
// Usage:
//   node node_redlock.js api PROXY_PORT MASTER_PORT...
//   node node_redlock.js contention PROXY_PORT COUNTER_PORT lock|nolock
//
// The proxy is given to Redlock as its only "server": Redlock's own quorum is then 1 of 1, and
// the proxy does the Redlock work across the real masters. Failed checks throw; the exit
// status tells the test the outcome.

"use strict";

const assert = require("node:assert/strict");
const Redis = require("ioredis");
const { default: Redlock, ExecutionError } = require("redlock");

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function client(port) {
  return new Redis({ port, host: "127.0.0.1", maxRetriesPerRequest: 2 });
}

function redlock(redis, settings) {
  const rl = new Redlock([redis], { retryCount: 0, ...settings });
  // Redlock reports every "against" vote as an event; without a listener Node would throw.
  rl.on("error", () => {});
  return rl;
}

// The TTL a majority of masters hold at least, read directly.
async function majorityPttl(masters, key) {
  const ttls = await Promise.all(masters.map((m) => m.pttl(key)));
  ttls.sort((a, b) => b - a);
  return ttls[Math.floor(masters.length / 2)];
}

async function rejects(promise, what) {
  await assert.rejects(promise, ExecutionError, what);
}

async function api(proxyPort, masterPorts) {
  const redis = client(proxyPort);
  const masters = masterPorts.map(client);
  const rl = redlock(redis);

  // One resource.
  let one = await rl.acquire(["nr:a"], 5000);
  assert.ok(one.expiration > Date.now(), "a fresh lock is valid");
  await rejects(rl.acquire(["nr:a"], 5000), "a held resource cannot be taken");
  const ttl = await majorityPttl(masters, "nr:a");
  assert.ok(ttl > 4000 && ttl <= 5000, `TTL on a majority: ${ttl}`);

  // Several at once, all or nothing.
  let many = await rl.acquire(["nr:b", "nr:c", "nr:d"], 5000);
  await rejects(rl.acquire(["nr:e", "nr:c"], 5000), "overlapping multi-resource lock");
  const e = await rl.acquire(["nr:e"], 5000);
  await e.release();

  // Extend: a new Lock with a fresh TTL on every resource.
  one = await one.extend(8000);
  many = await many.extend(8000);
  for (const key of ["nr:a", "nr:b", "nr:c", "nr:d"]) {
    const t = await majorityPttl(masters, key);
    assert.ok(t > 7000 && t <= 8000, `${key} extended: ${t}`);
  }

  // Release: every resource is free again; a second release has nothing to release.
  await one.release();
  await many.release();
  for (const key of ["nr:a", "nr:b", "nr:c", "nr:d"]) {
    assert.equal(await redis.get(key), null, `${key} released`);
  }
  await rejects(many.release(), "releasing twice finds nothing to release");

  // An expired lock cannot be extended.
  const short = await rl.acquire(["nr:short"], 200);
  await sleep(300);
  await rejects(short.extend(1000), "extend after expiry");

  // using(): the library extends the lock automatically while the routine runs.
  const auto = redlock(redis, { automaticExtensionThreshold: 200 });
  let extendedWhileHeld = false;
  await auto.using(["nr:u"], 600, async (signal) => {
    await sleep(1500);
    assert.equal(signal.aborted, false, `aborted: ${signal.error}`);
    // Well past the first 600 ms, the lock is still held.
    await rejects(rl.acquire(["nr:u"], 1000), "held inside using()");
    extendedWhileHeld = true;
  });
  assert.ok(extendedWhileHeld);
  assert.equal(await redis.get("nr:u"), null, "using() released on exit");

  await redis.quit();
  for (const m of masters) await m.quit();
  console.log("ok");
}

async function contention(proxyPort, counterPort, useLock) {
  const workers = 8;
  const rounds = 12;
  const resources = 2;
  const counter = client(counterPort);
  for (let r = 0; r < resources; r++) await counter.del(`nr:count:${r}`);
  const errors = [];

  async function work(w) {
    const redis = client(proxyPort);
    const own = client(counterPort);
    const rl = redlock(redis, { retryCount: -1, retryDelay: 10, retryJitter: 10 });
    try {
      for (let i = 0; i < rounds; i++) {
        const res = (w + i) % resources;
        const critical = async () => {
          const v = Number((await own.get(`nr:count:${res}`)) || 0);
          await sleep(3);
          await own.set(`nr:count:${res}`, v + 1);
        };
        if (!useLock) {
          await critical();
        } else if (i % 2 === 0) {
          const lock = await rl.acquire([`nr:res:${res}`], 5000);
          await critical();
          await lock.release();
        } else {
          await rl.using([`nr:res:${res}`], 5000, critical);
        }
      }
    } catch (err) {
      errors.push(String(err));
    } finally {
      await redis.quit();
      await own.quit();
    }
  }

  await Promise.all([...Array(workers).keys()].map(work));
  let got = 0;
  for (let r = 0; r < resources; r++) got += Number((await counter.get(`nr:count:${r}`)) || 0);
  await counter.quit();
  console.log(JSON.stringify({ expected: workers * rounds, got, errors }));
}

// The worker CLI contract of tests/libraries.rs: `worker --redis HOST:PORT --counter HOST:PORT
// --resource NAME --iterations N --hold-ms MS [--no-lock]`; prints `tokens ...`, `done N` last.
async function worker(argv) {
  const a = {};
  for (let i = 0; i < argv.length; i++) {
    const name = argv[i].replace(/^--/, "");
    a[name] = name === "no-lock" ? true : argv[++i];
  }
  const addr = (s) => ({ host: s.split(":")[0], port: Number(s.split(":")[1]), maxRetriesPerRequest: 2 });
  const redis = new Redis(addr(a.redis));
  const own = new Redis(addr(a.counter));
  const rl = redlock(redis, { retryCount: -1, retryDelay: 5, retryJitter: 5 });
  const key = `count:${a.resource}`;
  const tokens = [];
  let successes = 0;
  for (let i = 0; i < Number(a.iterations); i++) {
    const lock = a["no-lock"] ? null : await rl.acquire([a.resource], 2000);
    if (lock) tokens.push(lock.value);
    const v = Number((await own.get(key)) || 0);
    await sleep(Number(a["hold-ms"]));
    await own.set(key, v + 1);
    successes++;
    if (lock) await lock.release();
  }
  console.log(`tokens ${tokens.join(",")}`);
  console.log(`done ${successes}`);
  await redis.quit();
  await own.quit();
}

async function main() {
  const [scenario, ...args] = process.argv.slice(2);
  if (scenario === "worker") {
    await worker(args);
  } else if (scenario === "api") {
    await api(Number(args[0]), args.slice(1).map(Number));
  } else if (scenario === "contention") {
    await contention(Number(args[0]), Number(args[1]), args[2] === "lock");
  } else {
    throw new Error(`unknown scenario ${scenario}`);
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});

// Leases (issue 26) seen by node-redlock v5 with ioredis, unmodified: driven by tests/leases.rs.
//
// Usage:
//   node leases.js redlock PORT OTHER_PORT DURATION_MS HOLD_MS
//
// One Redlock instance acquires `lease:nr` through PORT for DURATION_MS and holds it HOLD_MS
// (past its duration: the library's own lock.expiration has passed) without extending it, while
// a second instance, on its own connection through OTHER_PORT, tries to acquire it every 200 ms
// (keeping it when it gets it). Then the first releases. Prints one JSON line:
// {"taken_by_other": N, "release": "ok" | the error's name}.
//
// As in node_redlock.js, the proxy is Redlock's only "server": the proxy does the quorum.

"use strict";

const Redis = require("ioredis");
const { default: Redlock, ExecutionError } = require("redlock");

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function redlock(port) {
  const redis = new Redis({ port, host: "127.0.0.1", maxRetriesPerRequest: 2 });
  const rl = new Redlock([redis], { retryCount: 0 });
  // Redlock reports every "against" vote as an event; without a listener Node would throw.
  rl.on("error", () => {});
  return { redis, rl };
}

async function hold(port, otherPort, duration, holdMs) {
  const a = redlock(port);
  const b = redlock(otherPort);
  const lock = await a.rl.acquire(["lease:nr"], duration);
  let taken = 0;
  const end = Date.now() + holdMs;
  while (Date.now() < end) {
    await sleep(200);
    try {
      await b.rl.acquire(["lease:nr"], duration);
      taken++;
    } catch (err) {
      if (!(err instanceof ExecutionError)) throw err;
    }
  }
  let release = "ok";
  try {
    await lock.release();
  } catch (err) {
    release = err.name || err.constructor.name;
  }
  console.log(JSON.stringify({ taken_by_other: taken, release }));
  await a.redis.quit();
  await b.redis.quit();
}

async function main() {
  const [scenario, ...args] = process.argv.slice(2);
  if (scenario === "redlock") {
    await hold(...args.map(Number));
  } else {
    throw new Error(`unknown scenario ${scenario}`);
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});

// Lock throughput: client-side Redlock (node-redlock talking to N masters itself) against the
// same library, and plain ioredis commands, pointed at redlock-proxy in front of the same masters.
//
// Usage: node benches/clientside.js PROXY_PORT SECONDS CONCURRENCY MASTER_PORT...
// Prints one JSON line per mode: {"mode", "cycles_per_s"}; a cycle is acquire + release of a
// random key. Run by benches/clientside.sh, which installs the packages and starts the servers.

"use strict";

const path = require("node:path");
const modules = path.join(__dirname, "..", "tests", "clients", "node_modules");
const Redis = require(path.join(modules, "ioredis"));
const { default: Redlock } = require(path.join(modules, "redlock"));

const UNLOCK =
  'if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end';

function connect(port) {
  return new Redis({ port, host: "127.0.0.1", enableAutoPipelining: false });
}

async function measure(seconds, concurrency, cycle) {
  const until = Date.now() + seconds * 1000;
  let cycles = 0;
  let n = 0;
  async function worker(w) {
    while (Date.now() < until) {
      await cycle(`bench:${w}:${n++ % 100000}`);
      cycles++;
    }
  }
  const start = Date.now();
  await Promise.all(Array.from({ length: concurrency }, (_, w) => worker(w)));
  return cycles / ((Date.now() - start) / 1000);
}

async function redlockCycle(rl) {
  return async (key) => {
    const lock = await rl.acquire([key], 10000);
    await lock.release();
  };
}

async function main() {
  const [proxyPort, seconds, concurrency, ...masterPorts] = process.argv.slice(2).map(Number);
  const modes = [];

  const masters = masterPorts.map(connect);
  const clientSide = new Redlock(masters, { retryCount: 0 });
  clientSide.on("error", () => {});
  modes.push([`node-redlock, client-side, ${masterPorts.length} masters`, await redlockCycle(clientSide)]);

  const viaProxy = connect(proxyPort);
  const proxied = new Redlock([viaProxy], { retryCount: 0 });
  proxied.on("error", () => {});
  modes.push(["node-redlock through the proxy", await redlockCycle(proxied)]);

  const plain = connect(proxyPort);
  let token = 0;
  modes.push([
    "ioredis SET NX PX + EVAL unlock through the proxy",
    async (key) => {
      const t = `t${token++}`;
      if ((await plain.set(key, t, "PX", 10000, "NX")) !== "OK") throw new Error("not acquired");
      await plain.eval(UNLOCK, 1, key, t);
    },
  ]);

  for (const [mode, cycle] of modes) {
    const rate = await measure(seconds, concurrency, cycle);
    console.log(JSON.stringify({ mode, cycles_per_s: Math.round(rate) }));
  }
  for (const c of [...masters, viaProxy, plain]) c.disconnect();
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});

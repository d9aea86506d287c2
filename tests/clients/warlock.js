// npm `node-redis-warlock` 1.0.2, unmodified, on the node-redis 3 client it is written for
// (installed as `redis3`), driven against redlock-proxy by tests/libraries.rs.
// It sends `SET name:lock <uuid v1, base64> PX ttl NX`, and runs its `parityDel` (unlock) and
// `parityRelock` (touch; every parameter passed as a KEY) scripts with EVALSHA, on NOSCRIPT
// `SCRIPT LOAD` then EVALSHA again (node-redis-script).
//
// Worker CLI contract (tests/libraries.rs):
//   node warlock.js --redis HOST:PORT --counter HOST:PORT --resource NAME
//       --iterations N --hold-ms MS [--no-lock]
// Loops {lock; GET counter; sleep; touch; SET counter+1; unlock}; prints
// `check touch <ok> <bad>`, `check unlock <ok> <bad>` and `done <successes>` last.

"use strict";

const redis = require("redis3");
const { promisify } = require("util");
const Warlock = require("node-redis-warlock");

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function args() {
  const out = {};
  const argv = process.argv.slice(2);
  for (let i = 0; i < argv.length; i++) {
    const name = argv[i].replace(/^--/, "");
    if (name === "no-lock") out[name] = true;
    else out[name] = argv[++i];
  }
  return out;
}

function connect(addr) {
  const [host, port] = addr.split(":");
  const c = redis.createClient({ host, port: Number(port) });
  c.on("error", () => {});
  return c;
}

async function main() {
  const a = args();
  const useLock = !a["no-lock"];
  const proxy = connect(a.redis);
  const counter = connect(a.counter);
  const get = promisify(counter.get).bind(counter);
  const set = promisify(counter.set).bind(counter);
  const warlock = Warlock(proxy);
  // warlock.lock's callback gives (err, unlock, id); the id is what touch needs.
  const lock = (key, ttl) =>
    new Promise((resolve, reject) =>
      warlock.lock(key, ttl, (err, unlock, id) => (err ? reject(err) : resolve({ unlock, id })))
    );
  const ttl = 2000;
  const key = `count:${a.resource}`;
  const checks = { touch: [0, 0], unlock: [0, 0] };
  let successes = 0;
  for (let i = 0; i < Number(a.iterations); i++) {
    let held = null;
    if (useLock) {
      // warlock.optimistic's loop, with the id kept: retry every few ms until granted.
      for (let tries = 0; !held; tries++) {
        const got = await lock(a.resource, ttl);
        if (typeof got.unlock === "function") held = got;
        else if (tries > 5000) throw new Error("unable to obtain lock");
        else await sleep(3 + Math.floor(Math.random() * 5));
      }
    }
    const v = Number((await get(key)) || 0);
    await sleep(Number(a["hold-ms"]));
    if (held) {
      const touched = await warlock.touch(a.resource, held.id, ttl);
      checks.touch[touched === "OK" ? 0 : 1]++;
    }
    await set(key, String(v + 1));
    successes++;
    if (held) {
      const released = await new Promise((resolve, reject) =>
        held.unlock((err, n) => (err ? reject(err) : resolve(n)))
      );
      checks.unlock[released === 1 ? 0 : 1]++;
    }
  }
  for (const [name, [ok, bad]] of Object.entries(checks)) console.log(`check ${name} ${ok} ${bad}`);
  console.log(`done ${successes}`);
  proxy.quit();
  counter.quit();
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});

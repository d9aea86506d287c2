// node-redlock v5 with ioredis over TLS, unmodified, against redlock-proxy's TLS listener
// (driven by tests/operations.rs).
//
// Usage: node tls_clients.js TLS_PORT CA_CERT_FILE

"use strict";

const assert = require("node:assert/strict");
const fs = require("node:fs");
const Redis = require("ioredis");
const { default: Redlock } = require("redlock");

async function main() {
  const [port, ca] = process.argv.slice(2);
  const redis = new Redis({
    port: Number(port),
    host: "127.0.0.1",
    tls: { ca: fs.readFileSync(ca), servername: "localhost" },
    maxRetriesPerRequest: 2,
  });
  const redlock = new Redlock([redis], { retryCount: 0 });
  redlock.on("error", () => {});
  const lock = await redlock.acquire(["lock:node-tls"], 10000);
  await assert.rejects(redlock.acquire(["lock:node-tls"], 10000));
  await lock.release();
  const again = await redlock.acquire(["lock:node-tls"], 10000);
  await again.release();
  await redis.quit();
  console.log("ok");
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});

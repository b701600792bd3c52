// The runnable examples (examples/*.ts, compiled next to the tests), against a live node.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { resolve } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { Cluster } from "./node.js";

const examples = resolve(fileURLToPath(new URL(".", import.meta.url)), "../examples");

test("saga example compensates in order", async () => {
  const cluster = new Cluster();
  try {
    const node = await cluster.start();
    // Exits non-zero (rejecting here, with its output) unless each compensation ran once, in order.
    const { stdout } = await promisify(execFile)(process.execPath, [`${examples}/saga.js`, node.address], {
      timeout: 90_000,
    });
    const lines = stdout.trim().split("\n");
    assert.match(lines.at(-1) ?? "", /^charge DEAD after 3 attempts; saga compensated$/);
    const compensating = lines.filter((l) => l.startsWith("compensating: "));
    assert.equal(compensating.length, 2, stdout);
    assert.match(compensating[0] ?? "", /\/void-authorisation$/);
    assert.match(compensating[1] ?? "", /\/release$/);
  } finally {
    await cluster.stop();
  }
});

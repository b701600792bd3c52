#!/usr/bin/env node
// BullMQ baseline of Rebound's benchmark suite (issue 6).
//
// Measures, against the private Redis that scripts/bench-deps starts:
//   (a) queue.add, one job per call, at a fixed concurrency: throughput, p50/p99 latency;
//   (b) queue.addBulk in batches of 500: throughput;
//   (c) delayed jobs: N jobs due at one time a few seconds ahead, drained by a Worker with a
//       no-op processor (concurrency 100): completed jobs/s from the due time to the last
//       'completed' event, and lateness = processing start - (timestamp + delay);
//   (d) retry with backoff: attempts 2, exponential backoff of 100 ms, first attempt fails.
// and writes one JSON document in the suite's shared shape (see bench/README.md).
//
//   bench/bullmq/run --n 20000 --concurrency 32 --out target/bench/bullmq.json
'use strict';

const fs = require('node:fs');
const path = require('node:path');
const { parseArgs } = require('node:util');
const { Queue, Worker } = require('bullmq');
const IORedis = require('ioredis');

const { values: args } = parseArgs({
  options: {
    n: { type: 'string', default: '20000' },
    concurrency: { type: 'string', default: '32' },
    out: { type: 'string' },
    redis: { type: 'string', default: process.env.BULLMQ_REDIS_URL || 'redis://127.0.0.1:16379' },
    batch: { type: 'string', default: '500' },
    workers: { type: 'string', default: '100' },
    'retry-n': { type: 'string', default: '200' },
    'lead-ms': { type: 'string', default: '3000' },
  },
  strict: true,
});

const N = int('n');
const C = int('concurrency');
const BATCH = int('batch');
const WORKERS = int('workers');
const RETRY_N = int('retry-n');
const LEAD_MS = int('lead-ms');

function int(name) {
  const v = Number.parseInt(args[name], 10);
  if (!Number.isFinite(v) || v <= 0) {
    console.error(`bullmq bench: --${name} must be a positive integer`);
    process.exit(2);
  }
  return v;
}

function log(msg) {
  process.stderr.write(`bullmq bench: ${msg}\n`);
}

const url = new URL(args.redis);
const connection = {
  host: url.hostname,
  port: Number(url.port || 6379),
  maxRetriesPerRequest: null, // required by Workers
};

// Nearest-rank percentile of sorted values; 100 is the maximum.
function pct(sorted, p) {
  if (sorted.length === 0) return null;
  const k = Math.ceil((p / 100) * sorted.length) - 1;
  return sorted[Math.max(0, Math.min(k, sorted.length - 1))];
}

const round = (v) => (v == null || Number.isNaN(v) ? null : Math.round(v * 100) / 100);
const nowMs = () => Number(process.hrtime.bigint()) / 1e6;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// --- server memory: sampled sum of PSS over redis-server and its children ------------------------

function kbField(file, key) {
  try {
    for (const line of fs.readFileSync(file, 'utf8').split('\n')) {
      if (line.startsWith(key)) return Number.parseFloat(line.slice(key.length).trim());
    }
  } catch {
    /* gone */
  }
  return 0;
}

function parentPid(pid) {
  try {
    const s = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    return Number.parseInt(s.slice(s.lastIndexOf(')') + 2).split(' ')[1], 10);
  } catch {
    return -1;
  }
}

class TreeSampler {
  constructor(root) {
    this.root = root;
    this.peakKB = 0;
    this.hwm = new Map();
    this.timer = null;
  }
  sample() {
    const pids = [this.root];
    for (const e of fs.readdirSync('/proc')) {
      const pid = Number(e);
      if (Number.isInteger(pid) && pid !== this.root && parentPid(pid) === this.root) pids.push(pid);
    }
    let pss = 0;
    for (const pid of pids) {
      pss += kbField(`/proc/${pid}/smaps_rollup`, 'Pss:');
      const h = kbField(`/proc/${pid}/status`, 'VmHWM:');
      if (h > 0) this.hwm.set(pid, h);
    }
    if (pss > this.peakKB) this.peakKB = pss;
  }
  start(everyMs) {
    this.sample();
    this.timer = setInterval(() => this.sample(), everyMs);
  }
  stop() {
    clearInterval(this.timer);
    this.sample();
    return { peakKB: this.peakKB, rootHwmKB: this.hwm.get(this.root) || 0 };
  }
}

// --- phases --------------------------------------------------------------------------------------

async function enqueueSingle(queue) {
  const lat = new Float64Array(N);
  let next = 0;
  const t0 = nowMs();
  await Promise.all(
    Array.from({ length: C }, async () => {
      for (;;) {
        const i = next++;
        if (i >= N) return;
        const s = nowMs();
        await queue.add('noop', { seq: i });
        lat[i] = nowMs() - s;
      }
    }),
  );
  const secs = (nowMs() - t0) / 1000;
  lat.sort();
  return { secs, lat };
}

async function addBatches(queue, mk) {
  for (let i = 0; i < N; i += BATCH) {
    const jobs = [];
    for (let j = i; j < Math.min(i + BATCH, N); j++) jobs.push(mk(j));
    await queue.addBulk(jobs);
  }
}

async function main() {
  const wallStart = Date.now();
  const admin = new IORedis({ ...connection, lazyConnect: false });
  const info = await admin.info('server');
  const field = (k) => (info.match(new RegExp(`^${k}:(.*)$`, 'm')) || [])[1]?.trim();
  const redisVersion = field('redis_version');
  const redisPid = Number(field('process_id'));
  const [, appendonly] = await admin.config('GET', 'appendonly');
  const [, appendfsync] = await admin.config('GET', 'appendfsync');
  const [, policy] = await admin.config('GET', 'maxmemory-policy');
  log(`redis ${redisVersion} (pid ${redisPid}), appendonly=${appendonly}, appendfsync=${appendfsync}, maxmemory-policy=${policy}`);

  let sampler = null;
  if (fs.existsSync(`/proc/${redisPid}/status`)) {
    sampler = new TreeSampler(redisPid);
    sampler.start(250);
  } else {
    log('redis-server is not a process of this machine: peak_rss_mb will be null');
  }

  const tag = `${process.pid}`;
  const qEnqueue = new Queue(`bench-enqueue-${tag}`, { connection });
  const qDrain = new Queue(`bench-drain-${tag}`, { connection });
  const qRetry = new Queue(`bench-retry-${tag}`, { connection });
  await Promise.all([qEnqueue.waitUntilReady(), qDrain.waitUntilReady(), qRetry.waitUntilReady()]);

  // (a)
  log(`(a) ${N} queue.add at concurrency ${C}`);
  const a = await enqueueSingle(qEnqueue);
  const single = {
    ops_per_sec: round(N / a.secs),
    p50_ms: round(pct(a.lat, 50)),
    p99_ms: round(pct(a.lat, 99)),
    concurrency: C,
    seconds: round(a.secs),
  };
  log(`(a) ${single.ops_per_sec} ops/s, p50 ${single.p50_ms} ms, p99 ${single.p99_ms} ms`);
  await qEnqueue.obliterate({ force: true });

  // (b)
  log(`(b) ${N} jobs by addBulk in batches of ${BATCH}`);
  let t0 = nowMs();
  await addBatches(qEnqueue, (i) => ({ name: 'noop', data: { seq: i } }));
  const batchSecs = (nowMs() - t0) / 1000;
  const batchRate = N / batchSecs;
  const batch = { ops_per_sec: round(batchRate), batch: BATCH, concurrency: 1, seconds: round(batchSecs) };
  log(`(b) ${batch.ops_per_sec} jobs/s`);
  await qEnqueue.obliterate({ force: true });

  // (c) Every job carries timestamp + delay = due. The worker starts once all jobs are in (well
  // before the due time), so that the adds do not compete with it for this process and Redis.
  const lateness = new Float64Array(N);
  let started = 0;
  let completed = 0;
  let lastCompletion = 0;
  let resolveDrained;
  const drained = new Promise((r) => (resolveDrained = r));
  const due = Date.now() + Math.ceil((N / batchRate) * 2 * 1000) + LEAD_MS;
  log(`(c) ${N} delayed jobs due in ${((due - Date.now()) / 1000).toFixed(1)} s, drained by a Worker of concurrency ${WORKERS}`);
  await addBatches(qDrain, (i) => {
    const ts = Date.now();
    return { name: 'noop', data: { seq: i }, opts: { timestamp: ts, delay: Math.max(0, due - ts) } };
  });
  const drainWorker = new Worker(
    qDrain.name,
    async (job) => {
      const late = Date.now() - (job.timestamp + (job.opts.delay || 0));
      if (started < N) lateness[started] = late;
      started++;
    },
    { connection, concurrency: WORKERS },
  );
  drainWorker.on('completed', () => {
    completed++;
    lastCompletion = Date.now();
    if (completed === N) resolveDrained();
  });
  drainWorker.on('error', (err) => log(`worker error: ${err.message}`));
  await drainWorker.waitUntilReady();
  const insertedBeforeDue = Date.now() < due;
  if (!insertedBeforeDue) log(`(c) warning: the adds finished ${(Date.now() - due) / 1000} s after the due time`);
  const timeoutMs = Math.max(0, due - Date.now()) + 60000 + (N / 200) * 1000;
  let timer;
  const ok = await Promise.race([drained.then(() => true), new Promise((r) => (timer = setTimeout(() => r(false), timeoutMs)))]);
  clearTimeout(timer);
  if (!ok) throw new Error(`(c) only ${completed} of ${N} jobs completed in time`);
  const drainSecs = (lastCompletion - due) / 1000;
  const counts = await qDrain.getJobCounts('completed');
  const drain = {
    acked_per_sec: round(N / drainSecs),
    n: N,
    seconds: round(drainSecs),
    workers: WORKERS,
    inserted_before_due: insertedBeforeDue,
    completed_in_redis: counts.completed,
    clock: "due time to the last 'completed' event (emitted after the job is moved to completed in Redis)",
  };
  const lv = Array.from(lateness.subarray(0, Math.min(started, N))).sort((x, y) => x - y);
  const late = { p50: round(pct(lv, 50)), p99: round(pct(lv, 99)), max: round(pct(lv, 100)), samples: lv.length };
  log(`(c) drained ${N} in ${drainSecs.toFixed(2)} s after due: ${drain.acked_per_sec} jobs/s; lateness p50 ${late.p50} ms, p99 ${late.p99} ms, max ${late.max} ms (ms resolution)`);
  await drainWorker.close();

  // (d)
  log(`(d) ${RETRY_N} jobs that fail their first attempt (attempts 2, exponential backoff 100 ms)`);
  let failed = 0;
  let done = 0;
  let secondAttempt = 0;
  let resolveRetried;
  const retried = new Promise((r) => (resolveRetried = r));
  const retryWorker = new Worker(
    qRetry.name,
    async (job) => {
      if (job.attemptsMade === 0) throw new Error('bench: transient failure on the first attempt');
    },
    { connection, concurrency: WORKERS },
  );
  retryWorker.on('failed', () => failed++);
  retryWorker.on('completed', (job) => {
    done++;
    if (job.attemptsMade >= 1) secondAttempt++;
    if (done === RETRY_N) resolveRetried();
  });
  retryWorker.on('error', (err) => log(`worker error: ${err.message}`));
  await retryWorker.waitUntilReady();
  t0 = nowMs();
  await qRetry.addBulk(
    Array.from({ length: RETRY_N }, (_, i) => ({
      name: 'flaky',
      data: { seq: i },
      opts: { attempts: 2, backoff: { type: 'exponential', delay: 100 } },
    })),
  );
  const retryOkInTime = await Promise.race([retried.then(() => true), new Promise((r) => (timer = setTimeout(() => r(false), 120000)))]);
  clearTimeout(timer);
  const retrySecs = (nowMs() - t0) / 1000;
  const retryOk = retryOkInTime && done === RETRY_N && failed === RETRY_N && secondAttempt === RETRY_N;
  log(`(d) ${secondAttempt}/${RETRY_N} completed after a failed attempt (${failed} failures) in ${retrySecs.toFixed(2)} s: retry_ok=${retryOk}`);
  await retryWorker.close();

  const mem = sampler ? sampler.stop() : null;
  for (const q of [qEnqueue, qDrain, qRetry]) {
    await q.obliterate({ force: true });
    await q.close();
  }
  await admin.quit();

  const result = {
    system: 'bullmq',
    version: `bullmq ${require('bullmq/package.json').version}, ioredis ${require('ioredis/package.json').version}, Redis ${redisVersion}`,
    guarantees:
      `Redis appendonly=${appendonly}, appendfsync=${appendfsync}: an acknowledged add is in the AOF but fsynced only once a second, ` +
      'so an OS crash or power loss can lose about the last second of them; at-least-once execution (a stalled job is moved back to wait and run again)',
    n: N,
    enqueue_single: single,
    enqueue_batch: batch,
    drain,
    lateness_ms: late,
    retry_ok: retryOk,
    retry: {
      n: RETRY_N,
      completed_after_failure: secondAttempt,
      failed_attempts: failed,
      seconds: round(retrySecs),
      backoff: "attempts 2, backoff {type: 'exponential', delay: 100}",
    },
    peak_rss_mb: mem ? round(mem.peakKB / 1024) : null,
    peak_rss_method:
      'peak over the run of the summed PSS (smaps_rollup) of redis-server and its children (AOF rewrite forks), sampled every 250 ms',
    peak_rss_hwm_mb: mem ? round(mem.rootHwmKB / 1024) : null,
    server: `Redis ${redisVersion}`,
    config: {
      worker_concurrency: WORKERS,
      batch: BATCH,
      retry_n: RETRY_N,
      remove_on_complete: false,
      maxmemory_policy: policy,
      node: process.version,
    },
    wall_seconds: round((Date.now() - wallStart) / 1000),
    started_at: new Date(wallStart).toISOString().replace(/\.\d+Z$/, 'Z'),
  };
  const doc = JSON.stringify(result, null, 2);
  process.stdout.write(doc + '\n');
  if (args.out) {
    fs.mkdirSync(path.dirname(path.resolve(args.out)), { recursive: true });
    fs.writeFileSync(args.out, doc + '\n');
    log(`wrote ${args.out} (wall ${result.wall_seconds} s)`);
  }
  if (!retryOk) {
    log('(d) the retry run did not complete every job after one failed attempt');
    process.exitCode = 1;
  }
}

main().catch((err) => {
  log(err && err.stack ? err.stack : String(err));
  process.exit(1);
});

#!/usr/bin/env node
// BullMQ baseline of Rebound's benchmark suite (issue 6).
//
// Measures, against the private Redis that scripts/bench-deps starts:
//   (a) queue.add, one job per call, at a fixed concurrency: throughput, p50/p99 latency;
//   (b) queue.addBulk in batches of 500: throughput;
//   (c) delayed jobs: N jobs due at one time a few seconds ahead, drained by a Worker with a
//       no-op processor (concurrency 100): completed jobs/s from the due time to the last
//       'completed' event, and lateness = processing start - (timestamp + delay);
//   (d) retry with backoff: attempts 2, exponential backoff of 100 ms, first attempt fails;
//   (e) steady: one queue.add per item at --steady-rate items/s for --steady-seconds, each with
//       a delay drawn uniformly from [1 s, 5 s] (PRNG seed 1), worked by a Worker configured as
//       (c)'s: lateness = processing start - the due time in the job's data;
// and the CPU per item of (a), (b), (c) and (e): redis-server (and its children) and this
// process, utime + stime from /proc/PID/stat. It writes one JSON document in the suite's shared
// shape (see bench/README.md).
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
    'steady-rate': { type: 'string', default: '500' },
    'steady-seconds': { type: 'string', default: '30' },
  },
  strict: true,
});

const N = int('n');
const C = int('concurrency');
const BATCH = int('batch');
const WORKERS = int('workers');
const RETRY_N = int('retry-n');
const LEAD_MS = int('lead-ms');
const STEADY_RATE = int('steady-rate');
const STEADY_SECONDS = int('steady-seconds');
const STEADY_DELAY_MS = [1000, 5000];
const STEADY_WAIT_MS = 120000;

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

// The fields of /proc/PID/stat after the command name: [0] is field 3 (state), [1] ppid,
// [11] utime, [12] stime, [13] cutime, [14] cstime (fields 14-17), in clock ticks.
function statFields(pid) {
  try {
    const s = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    return s.slice(s.lastIndexOf(')') + 2).split(' ');
  } catch {
    return null;
  }
}

// root and every live descendant of it, from the ppid of every process in /proc.
function processTree(root) {
  const kids = new Map();
  for (const e of fs.readdirSync('/proc')) {
    const pid = Number(e);
    if (!Number.isInteger(pid) || pid === root) continue;
    const f = statFields(pid);
    if (!f) continue;
    const ppid = Number.parseInt(f[1], 10);
    if (!kids.has(ppid)) kids.set(ppid, []);
    kids.get(ppid).push(pid);
  }
  const pids = [root];
  for (let i = 0; i < pids.length; i++) pids.push(...(kids.get(pids[i]) || []));
  return pids;
}

class TreeSampler {
  constructor(root) {
    this.root = root;
    this.peakKB = 0;
    this.hwm = new Map();
    this.timer = null;
    this.cpuSecs = 0; // this sampler's own CPU, taken out of the client's
  }
  sample() {
    const cpu = process.cpuUsage();
    let pss = 0;
    for (const pid of processTree(this.root)) {
      pss += kbField(`/proc/${pid}/smaps_rollup`, 'Pss:');
      const h = kbField(`/proc/${pid}/status`, 'VmHWM:');
      if (h > 0) this.hwm.set(pid, h);
    }
    if (pss > this.peakKB) this.peakKB = pss;
    const used = process.cpuUsage(cpu);
    this.cpuSecs += (used.user + used.system) / 1e6;
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

// --- CPU per item: utime + stime from /proc/PID/stat, as Rebound's harness (bench costs) -----------

// CPU seconds a process has used, with its waited-for children's (cutime + cstime, so a child
// that exited during a phase still counts). Ticks are 1/100 s (USER_HZ).
function cpuSecs(pid) {
  const f = statFields(pid);
  if (!f) return 0;
  return (Number(f[11]) + Number(f[12]) + Number(f[13]) + Number(f[14])) / 100;
}

// server: redis-server and its live descendants (AOF rewrite forks), or none when it is not a
// process of this machine (then server_cpu_us and total_cpu_us are null); client: this process
// (producer and workers together), less the memory sampler's own CPU.
class CpuMeter {
  constructor(serverPid, sampler) {
    this.serverPid = serverPid;
    this.sampler = sampler;
  }
  read() {
    return {
      server: this.serverPid ? processTree(this.serverPid).reduce((sum, pid) => sum + cpuSecs(pid), 0) : null,
      client: cpuSecs('self') - (this.sampler ? this.sampler.cpuSecs : 0),
    };
  }
  // CPU µs per item of what happened since `before`.
  perItem(before, items) {
    const after = this.read();
    const n = Math.max(1, items);
    const server = after.server == null ? null : ((after.server - before.server) * 1e6) / n;
    const client = ((after.client - before.client) * 1e6) / n;
    return {
      server_cpu_us: round(server),
      client_cpu_us: round(client),
      total_cpu_us: server == null ? null : round(server + client),
    };
  }
}

// Deterministic uniform [0, 1): a Weyl sequence through murmur3's 32-bit finalizer.
function uniform(seed) {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x9e3779b9) >>> 0;
    let z = s;
    z = Math.imul(z ^ (z >>> 16), 0x85ebca6b);
    z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
    return ((z ^ (z >>> 16)) >>> 0) / 2 ** 32;
  };
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

// (e) One queue.add per item, issued on schedule by a pacer that never waits for an add; each
// job asks to run at due = the moment its add is issued + a delay in [1 s, 5 s], given to BullMQ
// as delay = due - Date.now() at the call. The Worker (configured as (c)'s) runs from before the
// first add until every added job has completed, or STEADY_WAIT_MS after the last add is issued.
async function steadyPhase(queue, meter) {
  const total = STEADY_RATE * STEADY_SECONDS;
  const periodMs = 1000 / STEADY_RATE;
  const [minDelay, maxDelay] = STEADY_DELAY_MS;
  const rand = uniform(1);
  const lateness = [];
  let inserted = 0;
  let addErrors = 0;
  let delivered = 0;
  const worker = new Worker(
    queue.name,
    async (job) => {
      lateness.push(Date.now() - job.data.due);
    },
    { connection, concurrency: WORKERS },
  );
  worker.on('completed', () => delivered++);
  worker.on('error', (err) => log(`worker error: ${err.message}`));
  await worker.waitUntilReady();

  const before = meter.read();
  const adds = [];
  const t0 = nowMs();
  for (let i = 0; i < total; i++) {
    const wait = t0 + i * periodMs - nowMs();
    if (wait > 0) await sleep(wait);
    const due = Date.now() + minDelay + Math.floor(rand() * (maxDelay - minDelay + 1));
    adds.push(
      queue.add('noop', { seq: i, due }, { delay: due - Date.now() }).then(
        () => inserted++,
        (err) => {
          if (addErrors++ === 0) log(`(e) add failed: ${err.message}`);
        },
      ),
    );
  }
  const pacedSecs = (nowMs() - t0) / 1000;
  const deadline = nowMs() + STEADY_WAIT_MS;
  await Promise.all(adds);
  while (delivered < inserted && nowMs() < deadline) await sleep(10);
  const cost = meter.perItem(before, inserted);
  const secs = (nowMs() - t0) / 1000;
  await worker.close();

  const lv = lateness.sort((x, y) => x - y);
  return {
    rate_offered: STEADY_RATE,
    seconds: STEADY_SECONDS,
    n: inserted,
    delivered,
    delay_s: [minDelay / 1000, maxDelay / 1000],
    lateness_ms: {
      p50: round(pct(lv, 50)),
      p99: round(pct(lv, 99)),
      max: round(pct(lv, 100)),
      min: round(lv[0]),
      samples: lv.length,
    },
    early: lv.filter((v) => v < 0).length,
    cost_per_item: cost,
    add_errors: addErrors,
    workers: WORKERS,
    paced_seconds: round(pacedSecs),
    total_seconds: round(secs),
    complete: delivered >= inserted && addErrors === 0,
  };
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
  const qSteady = new Queue(`bench-steady-${tag}`, { connection });
  await Promise.all([qEnqueue, qDrain, qRetry, qSteady].map((q) => q.waitUntilReady()));
  const meter = new CpuMeter(sampler ? redisPid : 0, sampler);
  const cost = {};

  // (a)
  log(`(a) ${N} queue.add at concurrency ${C}`);
  let cpu = meter.read();
  const a = await enqueueSingle(qEnqueue);
  cost.enqueue_single = meter.perItem(cpu, N);
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
  cpu = meter.read();
  let t0 = nowMs();
  await addBatches(qEnqueue, (i) => ({ name: 'noop', data: { seq: i } }));
  const batchSecs = (nowMs() - t0) / 1000;
  cost.enqueue_batch = meter.perItem(cpu, N);
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
  // The delivery cycle's CPU: from the due time (or from now, if it has passed) to the last completion.
  const cpuAtDue = sleep(Math.max(0, due - Date.now())).then(() => meter.read());
  const insertedBeforeDue = Date.now() < due;
  if (!insertedBeforeDue) log(`(c) warning: the adds finished ${(Date.now() - due) / 1000} s after the due time`);
  const timeoutMs = Math.max(0, due - Date.now()) + 60000 + (N / 200) * 1000;
  let timer;
  const ok = await Promise.race([drained.then(() => true), new Promise((r) => (timer = setTimeout(() => r(false), timeoutMs)))]);
  clearTimeout(timer);
  if (!ok) throw new Error(`(c) only ${completed} of ${N} jobs completed in time`);
  cost.delivery_cycle = meter.perItem(await cpuAtDue, N);
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

  // (e)
  log(`(e) steady: ${STEADY_RATE} queue.add/s for ${STEADY_SECONDS} s, delays in [1 s, 5 s], Worker of concurrency ${WORKERS}`);
  const steady = await steadyPhase(qSteady, meter);
  cost.steady = steady.cost_per_item;
  const sl = steady.lateness_ms;
  log(`(e) ${steady.delivered}/${steady.n} worked; lateness p50 ${sl.p50} ms, p99 ${sl.p99} ms, max ${sl.max} ms, min ${sl.min} ms, ${steady.early} early (ms resolution)`);
  for (const [phase, c] of Object.entries(cost)) {
    log(`cpu per item, ${phase}: server ${c.server_cpu_us} µs, client ${c.client_cpu_us} µs, total ${c.total_cpu_us} µs`);
  }

  const mem = sampler ? sampler.stop() : null;
  for (const q of [qEnqueue, qDrain, qRetry, qSteady]) {
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
    cost_per_item: cost,
    cost_method:
      'utime + stime (+ cutime + cstime) from /proc/PID/stat, ticks / 100, difference over the phase, x 1e6 / items; ' +
      'server: redis-server (pid from INFO server) and its children; client: this node process (producer and workers), ' +
      "less the memory sampler's own CPU (process.cpuUsage around each sample); delivery_cycle from the due time to the last completion",
    retry_ok: retryOk,
    retry: {
      n: RETRY_N,
      completed_after_failure: secondAttempt,
      failed_attempts: failed,
      seconds: round(retrySecs),
      backoff: "attempts 2, backoff {type: 'exponential', delay: 100}",
    },
    steady,
    peak_rss_mb: mem ? round(mem.peakKB / 1024) : null,
    peak_rss_method:
      'peak over the run of the summed PSS (smaps_rollup) of redis-server and its children (AOF rewrite forks), sampled every 250 ms',
    peak_rss_hwm_mb: mem ? round(mem.rootHwmKB / 1024) : null,
    server: `Redis ${redisVersion}`,
    config: {
      worker_concurrency: WORKERS,
      batch: BATCH,
      retry_n: RETRY_N,
      steady_rate: STEADY_RATE,
      steady_seconds: STEADY_SECONDS,
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
  if (!steady.complete) {
    log(`(e) warning: ${steady.delivered} of ${steady.n} jobs were worked (${steady.add_errors} adds failed)`);
  }
}

main().catch((err) => {
  log(err && err.stack ? err.stack : String(err));
  process.exit(1);
});

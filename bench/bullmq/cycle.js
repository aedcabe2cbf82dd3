#!/usr/bin/env node
// bench/bullmq/cycle.js: BullMQ as a peer in bench/compare — the shape of redstalk-bench's
// `cycle` scenario (add -> process -> complete) on a BullMQ queue, with correctness
// checked while it measures.
//
// Two processes, so that BullMQ's client-side work can be measured on its own:
//   this process  C producer connections (one Queue, so one Redis connection, each),
//                 each awaiting `queue.add` one at a time, like redstalk-bench producers
//                 with pipeline 1; `removeOnComplete: true` on every job;
//   a child       one Worker with `concurrency` W (default C) and a no-op processor
//                 (it only records what arrived), forked from this file.
// Producers may be at most `--backlog` jobs (default 2 x max(C, W), as redstalk-bench)
// ahead of completions, which the child reports over IPC, batched per event-loop turn.
//
// First an unmeasured warm-up (--warmup, default 1 s, same load) while Node compiles its
// hot code. Measured phase: from the first add after it to the last completion; its jobs/s, end-to-end
// latency (add sent -> the processor called, both stamped on CLOCK_MONOTONIC, which
// both processes share) and the add round trip. CPU (user + system, /proc/PID/stat) of
// each --cpu-pid process (the redis-server) and of the worker process over the same
// phase. With --redis-info HOST:PORT (the same Redis), the commands Redis ran over that
// phase (INFO commandstats, read at its start and end on a connection of its own; the
// starting INFO excluded), in total, per job and by name.
//
// Correctness: every job added is processed exactly once and completed; no job arrives
// that this run did not add; each payload arrives intact; no job fails; afterwards the
// queue holds no job in any state (then the queue is obliterated, unmeasured).
//
// Output: the text report, or with --json one object in redstalk-bench's shape.
// Exit status: 0 all good, 1 a correctness failure, 2 an error.
'use strict';

const { execFileSync, fork } = require('node:child_process');
const fs = require('node:fs');
const net = require('node:net');
const { Queue, Worker } = require('bullmq');

const USAGE = `usage: cycle.js --redis HOST:PORT [-c N] [-w N] [-s BYTES] [-t SECS]
  [--backlog N] [--settle-timeout SECS] [--warmup SECS (default 1)] [--cpu-pid PID]...
  [--redis-info HOST:PORT] [--label TEXT] [--json]`;

function parseArgs(argv) {
  const o = {
    redis: null, connections: 1, workers: null, bodySize: 16, duration: 2, backlog: null,
    settleTimeout: 10, warmup: 1, cpuPids: [], redisInfo: null, label: null, json: false,
    role: 'main',
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const next = () => {
      if (i + 1 >= argv.length) fail(`${a} needs a value`);
      return argv[++i];
    };
    const int = (v) => {
      const n = Number(v);
      if (!Number.isInteger(n) || n < 1) fail(`${a} must be a whole number of at least 1`);
      return n;
    };
    switch (a) {
      case '--redis': o.redis = next(); break;
      case '-c': case '--connections': o.connections = int(next()); break;
      case '-w': case '--workers': o.workers = int(next()); break;
      case '-s': case '--body-size': o.bodySize = int(next()); break;
      case '-t': case '--duration': o.duration = Number(next()); break;
      case '--backlog': o.backlog = int(next()); break;
      case '--settle-timeout': o.settleTimeout = Number(next()); break;
      case '--warmup': o.warmup = Number(next()); break;
      case '--cpu-pid': o.cpuPids.push(int(next())); break;
      case '--redis-info': o.redisInfo = next(); break;
      case '--label': o.label = next(); break;
      case '--json': o.json = true; break;
      case '--role-worker': o.role = 'worker'; break;
      case '-h': case '--help': process.stdout.write(USAGE + '\n'); process.exit(0); break;
      default: fail(`unknown argument ${a}`);
    }
  }
  if (!o.redis || !/^[^:]+:\d+$/.test(o.redis)) fail('--redis HOST:PORT is required');
  if (o.redisInfo !== null && !/^[^:]+:\d+$/.test(o.redisInfo)) fail('--redis-info takes HOST:PORT');
  if (!(o.duration > 0)) fail('--duration must be a positive number of seconds');
  if (!(o.warmup >= 0)) fail('--warmup must be a number of seconds, 0 for none');
  o.workers = o.workers || o.connections;
  o.backlog = o.backlog || 2 * Math.max(o.connections, o.workers);
  return o;
}

function fail(msg) {
  process.stderr.write(`bullmq cycle: ${msg}\n${USAGE}\n`);
  process.exit(2);
}

function connection(addr) {
  const [host, port] = addr.split(':');
  // BullMQ requires maxRetriesPerRequest null on blocking connections; a refused
  // connection must fail the run, not retry forever.
  return { host, port: Number(port), maxRetriesPerRequest: null, retryStrategy: () => null };
}

// The payload of job n: `size` bytes derived from n, so a cut, padded or someone
// else's payload is caught.
function payload(n, size) {
  const unit = n.toString(36) + '.';
  return unit.repeat(Math.ceil(size / unit.length)).slice(0, size);
}

// Nanoseconds on CLOCK_MONOTONIC since `t0` (process.hrtime is CLOCK_MONOTONIC on
// Linux, shared by every process, so the child's stamps compare with ours).
function clock(t0) {
  return () => Number(process.hrtime.bigint() - t0);
}

// ---- the worker process -------------------------------------------------------------

async function workerMain(o) {
  const config = await new Promise((resolve) => process.once('message', resolve));
  const now = clock(BigInt(config.t0));
  const seen = new Map(); // n -> times the processor got it
  const latency = [];
  const failures = [];
  let unreported = 0;
  let completed = 0; // jobs completed, warm-up included
  let measured = 0; // jobs completed, warm-up excluded
  let lastNs = 0;
  let flushing = false;
  const flush = () => {
    flushing = false;
    if (unreported > 0) {
      process.send({ type: 'done', count: unreported });
      unreported = 0;
    }
  };
  const worker = new Worker(config.queue, async (job) => {
    const got = now();
    const { n, t, b } = job.data;
    seen.set(n, (seen.get(n) || 0) + 1);
    if (!job.data.w) latency.push(got - t);
    if (b !== payload(n, o.bodySize) && failures.length < 20) {
      failures.push(`job ${job.id} (n=${n}): payload of ${String(b).length} bytes is not the one added`);
    }
  }, { connection: connection(o.redis), concurrency: o.workers });
  worker.on('completed', (job) => {
    completed++;
    if (!job.data.w) {
      measured++;
      lastNs = now();
    }
    unreported++;
    if (!flushing) {
      flushing = true;
      setImmediate(flush);
    }
  });
  worker.on('failed', (job, err) => failures.push(`job ${job && job.id} failed: ${err && err.message}`));
  worker.on('error', (err) => failures.push(`worker error: ${err && err.message}`));
  await worker.waitUntilReady();
  process.send({ type: 'ready' });
  await new Promise((resolve) => process.on('message', (m) => m.type === 'stop' && resolve()));
  await worker.close();
  flush();
  const counts = [];
  for (const [n, times] of seen) counts.push(n, times);
  process.send({
    type: 'report', completed, measured, lastNs, failures, latency: Float64Array.from(latency),
    seen: Float64Array.from(counts),
  }, () => process.disconnect()); // after the report is written: a large one is sent asynchronously
}

// ---- the producer process -----------------------------------------------------------

function cpuTicks(pid) {
  const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  // fields[0] is field 3 (state); utime and stime are fields 14 and 15.
  return Number(fields[11]) + Number(fields[12]);
}

function summary(samples) {
  const v = Float64Array.from(samples).sort();
  const rank = (p) => (v.length ? v[Math.min(Math.max(Math.ceil(p * v.length), 1), v.length) - 1] : 0);
  const ms = (ns) => ns / 1e6;
  const mean = v.length ? v.reduce((a, b) => a + b, 0) / v.length : 0;
  return {
    count: v.length, min_ms: ms(v.length ? v[0] : 0), mean_ms: ms(mean), p50_ms: ms(rank(0.5)),
    p90_ms: ms(rank(0.9)), p99_ms: ms(rank(0.99)), p999_ms: ms(rank(0.999)),
    max_ms: ms(v.length ? v[v.length - 1] : 0),
  };
}

// Calls per command name from `INFO commandstats`, on a fresh connection that sends
// nothing else (no HELLO, no CLIENT SETNAME), so the only command of ours is the INFO.
function commandCalls(addr) {
  const [host, port] = addr.split(':');
  return new Promise((resolve, reject) => {
    const sock = net.connect(Number(port), host);
    let data = Buffer.alloc(0);
    sock.on('connect', () => sock.write('*2\r\n$4\r\nINFO\r\n$12\r\ncommandstats\r\n'));
    sock.on('data', (chunk) => {
      data = Buffer.concat([data, chunk]);
      const eol = data.indexOf('\r\n');
      if (eol < 0) return;
      if (data[0] !== 0x24) { // '$'
        sock.destroy();
        reject(new Error(`INFO commandstats answered ${data.slice(0, eol).toString()}`));
        return;
      }
      const len = Number(data.slice(1, eol).toString());
      if (data.length < eol + 2 + len) return;
      sock.end();
      const calls = {};
      for (const line of data.slice(eol + 2, eol + 2 + len).toString().split('\r\n')) {
        const m = /^cmdstat_([^:]+):calls=(\d+)/.exec(line);
        if (m) calls[m[1]] = Number(m[2]);
      }
      resolve(calls);
    });
    sock.on('error', reject);
  });
}

// What Redis ran between two commandCalls readings, without the first reading's INFO
// (Redis counts a command once it has run, so the second INFO is not in its own reply).
function commandsJson(addr, before, after, ops) {
  const byCommand = {};
  let total = 0;
  for (const [name, n] of Object.entries(after).sort()) {
    const delta = n - (before[name] || 0) - (name === 'info' ? 1 : 0);
    if (delta > 0) {
      byCommand[name] = delta;
      total += delta;
    }
  }
  return { addr, total, per_op: ops > 0 ? total / ops : null, by_command: byCommand };
}

function cpuJson(pids, micros, ops) {
  const total = micros.reduce((a, b) => a + b, 0);
  return { pids, us: micros, total_us: total, us_per_op: ops > 0 ? total / ops : null };
}

async function main(o) {
  const t0 = process.hrtime.bigint();
  const now = clock(t0);
  const ticksPerSec = Number(execFileSync('getconf', ['CLK_TCK']).toString().trim());
  const queueName = `bench-${process.pid}-${Date.now()}-cycle`;
  const failures = [];

  const child = fork(__filename, [...process.argv.slice(2), '--role-worker'],
    { stdio: ['ignore', 2, 2, 'ipc'], serialization: 'advanced' });
  let done = 0; // jobs the worker reported completed
  let waiters = []; // producers held back by the backlog
  const wakeAll = () => { const w = waiters; waiters = []; w.forEach((f) => f()); };
  let childReady = null;
  let childGone = false;
  const ready = new Promise((resolve, reject) => {
    childReady = resolve;
    child.on('exit', () => reject(new Error('the worker process ended before it was ready')));
  });
  ready.catch(() => {}); // observed below; an exit after ready must not go unhandled
  const reported = new Promise((resolve) => {
    child.on('message', (m) => {
      if (m.type === 'ready') childReady();
      else if (m.type === 'done') {
        done += m.count;
        wakeAll();
      } else if (m.type === 'report') resolve(m);
    });
    child.on('exit', () => { childGone = true; wakeAll(); resolve(null); });
  });
  child.send({ t0: t0.toString(), queue: queueName });

  const queues = [];
  for (let i = 0; i < o.connections; i++) {
    const q = new Queue(queueName, { connection: connection(o.redis) });
    q.on('error', (err) => failures.push(`queue error: ${err && err.message}`));
    await q.waitUntilReady();
    queues.push(q);
  }
  await ready;

  let claimed = 0;
  const addRtt = [];
  const jobIds = new Set();
  // Add jobs on every connection for `seconds`, then wait for all to be completed.
  const phase = async (seconds, warm) => {
    const deadline = now() + seconds * 1e9;
    const producer = async (q) => {
      while (now() < deadline) {
        while (claimed - done >= o.backlog && !childGone) await new Promise((resolve) => waiters.push(resolve));
        if (now() >= deadline || childGone) break;
        const n = claimed++;
        const t = now();
        const job = await q.add('j', { n, t, w: warm, b: payload(n, o.bodySize) }, { removeOnComplete: true });
        if (!warm) addRtt.push(now() - t);
        if (jobIds.has(job.id)) failures.push(`add answered job id ${job.id} twice`);
        jobIds.add(job.id);
      }
    };
    await Promise.all(queues.map((q) => producer(q).catch((e) => failures.push(`add failed: ${e.message}`))));
    const giveUp = now() + o.settleTimeout * 1e9;
    while (done < claimed && now() < giveUp && !childGone) {
      await new Promise((resolve) => setTimeout(resolve, 1));
    }
  };
  // Node compiles hot code as it runs: an unmeasured warm-up lets both processes reach
  // their steady state first (redstalk-bench, compiled ahead of time, needs none).
  if (o.warmup > 0) await phase(o.warmup, true);
  const warmJobs = claimed;

  const pids = o.cpuPids;
  const callsBefore = o.redisInfo ? await commandCalls(o.redisInfo) : null;
  const cpuBefore = pids.map(cpuTicks);
  const workerBefore = cpuTicks(child.pid);
  const ownBefore = process.cpuUsage();
  const started = now();
  await phase(o.duration, false);
  const total = claimed;
  const serverUs = pids.map((pid, i) => (cpuTicks(pid) - cpuBefore[i]) * 1e6 / ticksPerSec);
  const workerUs = (cpuTicks(child.pid) - workerBefore) * 1e6 / ticksPerSec;
  const own = process.cpuUsage(ownBefore);
  const callsAfter = o.redisInfo ? await commandCalls(o.redisInfo) : null;

  child.send({ type: 'stop' });
  const report = await reported;
  if (!report) throw new Error('the worker process ended without a report');
  failures.push(...report.failures);

  // Exactly once: n = 0 .. total-1 each processed once, nothing else.
  const times = new Uint32Array(total);
  const strangers = [];
  for (let i = 0; i < report.seen.length; i += 2) {
    const n = report.seen[i];
    if (Number.isInteger(n) && n >= 0 && n < total) times[n] = report.seen[i + 1];
    else strangers.push(n);
  }
  const missing = [];
  const twice = [];
  times.forEach((k, n) => { if (k === 0) missing.push(n); else if (k > 1) twice.push(n); });
  if (missing.length) failures.push(`${missing.length} job(s) added but never processed (n = ${missing.slice(0, 8).join(', ')})`);
  if (twice.length) failures.push(`${twice.length} job(s) processed more than once (n = ${twice.slice(0, 8).join(', ')})`);
  if (strangers.length) failures.push(`${strangers.length} job(s) processed that this run did not add`);
  if (report.completed !== total) failures.push(`${total} jobs added, ${report.completed} completed`);
  if (report.measured !== total - warmJobs) failures.push(`${total - warmJobs} jobs added after the warm-up, ${report.measured} completed`);

  const counts = await queues[0].getJobCounts('waiting', 'active', 'delayed', 'prioritized',
    'completed', 'failed', 'paused', 'waiting-children');
  const left = Object.entries(counts).filter(([, k]) => k !== 0);
  if (left.length) failures.push(`the queue is not empty afterwards: ${left.map(([s, k]) => `${s} ${k}`).join(', ')}`);
  await queues[0].obliterate({ force: true });
  await Promise.all(queues.map((q) => q.close()));

  const elapsedNs = Math.max(report.lastNs - started, 0);
  const ops = report.measured;
  const result = {
    scenario: 'cycle', peer: 'bullmq', label: o.label, addr: o.redis, connections: o.connections,
    workers: o.workers, pipeline: 1, body_size: o.bodySize, tubes: 1, ops, unit: 'jobs',
    elapsed_s: elapsedNs / 1e9, ops_per_sec: elapsedNs > 0 ? ops / (elapsedNs / 1e9) : 0,
    latency_name: 'end-to-end', latency: summary(report.latency),
    other_latencies: { add: summary(addRtt) }, figures: {},
    server_cpu: pids.length ? cpuJson(pids, serverUs, ops) : null,
    client_worker_cpu: cpuJson([child.pid], [workerUs], ops),
    client_producer_cpu: cpuJson([process.pid], [own.user + own.system], ops),
    redis_commands: callsBefore ? commandsJson(o.redisInfo, callsBefore, callsAfter, ops) : null,
    ok: failures.length === 0, failures,
  };
  if (o.json) {
    process.stdout.write(JSON.stringify(result) + '\n');
  } else {
    const l = result.latency;
    process.stdout.write(`cycle [bullmq${o.label ? ' ' + o.label : ''}] on ${o.redis}: connections=${o.connections} ` +
      `worker concurrency=${o.workers} body=${o.bodySize}B\n` +
      `  ${ops} jobs in ${result.elapsed_s.toFixed(3)} s: ${result.ops_per_sec.toFixed(0)} jobs/s\n` +
      `  end-to-end p50 ${l.p50_ms.toFixed(3)} ms  p99 ${l.p99_ms.toFixed(3)} ms  max ${l.max_ms.toFixed(3)} ms\n` +
      (result.server_cpu ? `  server CPU: ${result.server_cpu.us_per_op.toFixed(2)} us per job\n` : '') +
      `  client-side worker CPU: ${result.client_worker_cpu.us_per_op.toFixed(2)} us per job\n` +
      (result.redis_commands ? `  Redis commands: ${result.redis_commands.total} ` +
        `(${(result.redis_commands.per_op || 0).toFixed(2)} per job)\n` : '') +
      `  check: ${failures.length ? 'FAILED\n    - ' + failures.join('\n    - ') : 'OK (every job added was processed exactly once; the queue is empty)'}\n`);
  }
  return failures.length === 0;
}

const opts = parseArgs(process.argv.slice(2));
if (opts.role === 'worker') {
  workerMain(opts).catch((e) => {
    process.stderr.write(`bullmq cycle worker: ${e.stack || e}\n`);
    process.exit(2);
  });
} else {
  main(opts).then((ok) => process.exit(ok ? 0 : 1), (e) => {
    process.stderr.write(`bullmq cycle: error: ${e.stack || e}\n`);
    process.exit(2);
  });
}

// A producer/worker session with fivebeans (npm), used the way its README shows:
// callback-style FiveBeansClient commands (wrapped in promises here) and a
// FiveBeansWorker with job handlers.
//
// Run against any beanstalk server: BEANSTALK_ADDR=host:port node scenario.js
// Exits non-zero on the first behaviour that differs from beanstalkd's.
'use strict';

const assert = require('assert');
const fivebeans = require('fivebeans');

function hostPort(addr) {
    const at = addr.lastIndexOf(':');
    return [addr.slice(0, at), Number(addr.slice(at + 1))];
}
const [HOST, PORT] = hostPort(process.env.BEANSTALK_ADDR || '127.0.0.1:11300');

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const now = () => Number(process.hrtime.bigint()) / 1e9;

// A connected FiveBeansClient.
function connect(host = HOST, port = PORT) {
    return new Promise((resolve, reject) => {
        const client = new fivebeans.client(host, port);
        client.once('connect', () => resolve(client)).once('error', reject).connect();
    });
}

// Calls a FiveBeansClient command; resolves to the callback's results after `err`
// (an array), rejects with an Error whose `code` is the server's error word.
function call(client, command, ...args) {
    const where = (new Error().stack.split('\n')[2] || '').trim();
    return new Promise((resolve, reject) => {
        client[command](...args, (err, ...results) => {
            if (err) {
                const error = new Error(`${command}(${args.map(shortArg).join(', ')}) -> ${err} (${where})`);
                error.code = err;
                reject(error);
            } else {
                resolve(results);
            }
        });
    });
}

function shortArg(arg) {
    if (Buffer.isBuffer(arg) || typeof arg === 'string') {
        return arg.length > 20 ? `<${arg.length} bytes>` : JSON.stringify(arg.toString());
    }
    return String(arg);
}

// The command must fail with exactly this error word.
async function expectError(promise, code, what) {
    let result;
    try {
        result = await promise;
    } catch (err) {
        assert.strictEqual(err.code, code, `${what}: expected ${code}, got ${err.code}`);
        return;
    }
    assert.fail(`${what}: expected ${code}, got success ${JSON.stringify(result)}`);
}

// Checks the listed keys of a parsed stats mapping.
function expectStats(stats, expected, what) {
    assert.ok(stats && typeof stats === 'object', `${what}: not a mapping: ${JSON.stringify(stats)}`);
    for (const [key, value] of Object.entries(expected)) {
        assert.deepStrictEqual(stats[key], value, `${what}: ${key} is ${JSON.stringify(stats[key])}, expected ${JSON.stringify(value)} in ${JSON.stringify(stats)}`);
    }
}

// A loaded machine delays replies (and this process) by seconds: only a wrong answer may
// fail the scenario. Something early is wrong; late is only slow, by up to this much.
const LATE = 5;
// A reserve that must find a job already there waits this long at most (it is answered
// at once; the bound only ends a wrong answer).
const READY = 10;

function expectWaited(waited, lo, hi, what) {
    assert.ok(waited >= lo && waited < hi + LATE, `${what}: waited ${waited.toFixed(3)} s, expected ${lo}..${hi} s (+${LATE} s on a loaded machine)`);
}

// Runs FiveBeansWorker on `tube` until `done(counts)` holds; resolves to the counts.
function runWorker(tube, handlers, done) {
    return new Promise((resolve, reject) => {
        const worker = new fivebeans.worker({
            id: 'compat-worker', host: HOST, port: PORT, handlers, ignoreDefault: true, timeout: 1,
        });
        const counts = { reserved: 0, deleted: 0, buried: 0, released: 0, warnings: [] };
        const step = (key) => () => {
            counts[key] += 1;
            if (!worker.stopped && done(counts)) worker.stop();
        };
        worker.on('job.reserved', () => { counts.reserved += 1; });
        worker.on('job.deleted', step('deleted'));
        worker.on('job.buried', step('buried'));
        worker.on('job.released', step('released'));
        worker.on('warning', (w) => counts.warnings.push(w.message));
        worker.on('error', reject);
        worker.on('close', () => resolve(counts));
        worker.start([tube]);
    });
}

async function main() {
    const producer = await connect();
    const worker = await connect();
    const admin = await connect();

    // use / watch / ignore and the tube lists
    assert.deepStrictEqual(await call(producer, 'use', 'emails'), ['emails']);
    assert.deepStrictEqual(await call(producer, 'list_tube_used'), ['emails']);
    assert.deepStrictEqual(await call(admin, 'list_tube_used'), ['default']);
    assert.deepStrictEqual(await call(worker, 'watch', 'emails'), ['2']);
    assert.deepStrictEqual(await call(worker, 'ignore', 'default'), ['1']);
    assert.deepStrictEqual(await call(worker, 'list_tubes_watched'), [['emails']]);
    await expectError(call(worker, 'ignore', 'emails'), 'NOT_IGNORED', 'ignore of the last watched tube');
    const [tubes] = await call(admin, 'list_tubes');
    assert.deepStrictEqual([...tubes].sort(), ['default', 'emails'], `list-tubes: ${JSON.stringify(tubes)}`);

    // put with priorities; the more urgent job (lower number) is reserved first, and
    // a binary body with CR, LF, NUL and high bytes comes back byte for byte
    const binary = Buffer.from([0x00, 0x62, 0x0d, 0x0a, 0x0d, 0x00, 0x0a, 0xff, 0xfe, 0x0d, 0x0a]);
    const [hello] = await call(producer, 'put', 10, 0, 30, 'hello');
    const [urgent] = await call(producer, 'put', 1, 0, 30, binary);
    assert.ok(Number(urgent) > Number(hello), `job ids ${hello}, ${urgent}`);
    let [id, body] = await call(producer, 'peek_ready');
    assert.ok(id === urgent && body.equals(binary), `peek-ready: ${id} ${body.toString('hex')}`);
    expectStats((await call(admin, 'stats_tube', 'emails'))[0], {
        name: 'emails', 'current-jobs-urgent': 2, 'current-jobs-ready': 2, 'current-jobs-reserved': 0,
        'current-jobs-delayed': 0, 'current-jobs-buried': 0, 'total-jobs': 2, 'current-using': 1,
        'current-watching': 1, 'current-waiting': 0, 'cmd-delete': 0, 'cmd-pause-tube': 0, pause: 0,
        'pause-time-left': 0,
    }, 'stats-tube emails after two puts');
    [id, body] = await call(worker, 'reserve');
    assert.ok(id === urgent && body.equals(binary), `reserve: ${id} ${body.toString('hex')}`);
    const [reserved] = await call(worker, 'stats_job', urgent);
    expectStats(reserved, {
        id: Number(urgent), tube: 'emails', state: 'reserved', pri: 1, delay: 0, ttr: 30, file: 0,
        reserves: 1, timeouts: 0, releases: 0, buries: 0, kicks: 0,
    }, 'stats-job of a reserved job');
    assert.ok(reserved['time-left'] >= 25 && reserved['time-left'] <= 30, `time-left ${reserved['time-left']}`);
    await call(worker, 'destroy', urgent);
    [id, body] = await call(worker, 'reserve_with_timeout', READY);
    assert.ok(id === hello && body.toString() === 'hello', `reserve-with-timeout: ${id} ${body}`);

    // touch: only the holder may touch
    await call(worker, 'touch', hello);
    await expectError(call(admin, 'touch', hello), 'NOT_FOUND', 'touch by another connection');

    // release with a delay: delayed, then reservable again after about a second
    await call(worker, 'release', hello, 20, 1);
    let started = now();
    expectStats((await call(admin, 'stats_tube', 'emails'))[0],
        { 'current-jobs-delayed': 1, 'current-jobs-ready': 0, 'current-jobs-reserved': 0 },
        'stats-tube after release with delay');
    [id] = await call(producer, 'peek_delayed');
    assert.strictEqual(id, hello, 'peek-delayed');
    expectStats((await call(admin, 'stats_job', hello))[0],
        { state: 'delayed', pri: 20, delay: 1, releases: 1, reserves: 1 }, 'stats-job of a released job');
    [id] = await call(worker, 'reserve_with_timeout', READY);
    expectWaited(now() - started, 0.9, 1.5, 'release with delay 1');
    assert.strictEqual(id, hello, 'reserve after the release delay');

    // bury, peek-buried, kick, kick-job
    await call(worker, 'bury', hello, 7);
    [id, body] = await call(producer, 'peek_buried');
    assert.ok(id === hello && body.toString() === 'hello', `peek-buried: ${id} ${body}`);
    expectStats((await call(admin, 'stats_job', hello))[0], { state: 'buried', pri: 7, buries: 1 }, 'stats-job of a buried job');
    expectStats((await call(admin, 'stats_tube', 'emails'))[0], { 'current-jobs-buried': 1 }, 'stats-tube with a buried job');
    await expectError(call(producer, 'peek_ready'), 'NOT_FOUND', 'peek-ready with only a buried job');
    assert.deepStrictEqual(await call(producer, 'kick', 10), ['1'], 'kick of one buried job');
    [id] = await call(producer, 'peek_ready');
    assert.strictEqual(id, hello, 'peek-ready after kick');
    [id] = await call(worker, 'reserve');
    await call(worker, 'bury', hello, 7);
    await call(producer, 'kick_job', hello);
    expectStats((await call(admin, 'stats_job', hello))[0], { state: 'ready', kicks: 2, buries: 2 }, 'stats-job after kick-job');
    await expectError(call(producer, 'kick_job', hello), 'NOT_FOUND', 'kick-job of a ready job');
    const [later] = await call(producer, 'put', 0, 60, 30, 'later');
    await expectError(call(producer, 'peek_buried'), 'NOT_FOUND', 'peek-buried with none buried');
    assert.deepStrictEqual(await call(producer, 'kick', 10), ['1'], 'kick of one delayed job');
    expectStats((await call(admin, 'stats_job', later))[0], { state: 'ready', kicks: 1, delay: 60 }, 'stats-job of a kicked delayed job');
    [id, body] = await call(admin, 'peek', hello);
    assert.ok(id === hello && body.toString() === 'hello', `peek by id: ${id} ${body}`);

    // delete: any connection may delete a ready job; then nothing is left
    await call(admin, 'destroy', later);
    [id] = await call(worker, 'reserve');
    assert.strictEqual(id, hello, 'reserve of the kicked job');
    await call(worker, 'destroy', hello);
    await expectError(call(worker, 'reserve_with_timeout', 0), 'TIMED_OUT', 'reserve-with-timeout 0 on an empty tube');
    await expectError(call(admin, 'peek', hello), 'NOT_FOUND', 'peek of a deleted job');
    await expectError(call(worker, 'destroy', hello), 'NOT_FOUND', 'delete of a deleted job');

    // a worker blocked in reserve gets the job put afterwards
    const waiting = call(worker, 'reserve');
    await sleep(100);
    const [wake] = await call(producer, 'put', 100, 0, 30, 'wake up');
    [id, body] = await waiting;
    assert.ok(id === wake && body.toString() === 'wake up', `blocked reserve: ${id} ${body}`);
    await call(worker, 'destroy', wake);

    // put with a delay of one second
    started = now();
    const [delayed] = await call(producer, 'put', 5, 1, 30, 'in a second');
    [id] = await call(producer, 'peek_delayed');
    assert.strictEqual(id, delayed, 'peek-delayed of a delayed put');
    expectStats((await call(admin, 'stats_job', delayed))[0], { state: 'delayed', delay: 1, pri: 5 }, 'stats-job of a delayed put');
    [id] = await call(worker, 'reserve_with_timeout', READY);
    expectWaited(now() - started, 0.9, 1.5, 'put with delay 1');
    assert.strictEqual(id, delayed, 'reserve of the delayed put');
    await call(worker, 'destroy', delayed);

    // TTR: a one-second job is in its deadline margin at once (DEADLINE_SOON), and
    // returns to ready after its TTR, for another worker to take
    const second = await connect();
    await call(second, 'watch', 'emails');
    const [short] = await call(producer, 'put', 0, 0, 1, 'hurry');
    started = now();
    [id] = await call(worker, 'reserve');
    assert.strictEqual(id, short, 'reserve of the ttr-1 job');
    await expectError(call(worker, 'reserve_with_timeout', READY), 'DEADLINE_SOON', 'reserve while holding a ttr-1 job');
    assert.ok(now() - started < 0.5 + LATE, 'DEADLINE_SOON came late');
    const taken = call(second, 'reserve_with_timeout', READY);
    // The slow worker comes back after its TTR: its touch is refused. (beanstalkd 1.12
    // can miss the TTR tick of an idle connection until that connection sends a
    // command, so the worker sends one before the touch, as in the protocol cases.)
    await sleep(1500);
    await call(worker, 'list_tubes_watched');
    await expectError(call(worker, 'touch', short), 'NOT_FOUND', 'touch of a job whose TTR expired');
    [id] = await taken;
    expectWaited(now() - started, 0.9, 1.5, 'ttr 1 expiry');
    assert.strictEqual(id, short, 'reserve of the timed-out job');
    expectStats((await call(admin, 'stats_job', short))[0], { state: 'reserved', timeouts: 1, reserves: 2, ttr: 1 }, 'stats-job after a timeout');
    await expectError(call(worker, 'destroy', short), 'NOT_FOUND', 'delete by the worker that lost the job');
    await call(second, 'destroy', short);
    second.end();

    // pause-tube: no reserve from the tube until the pause ends
    await call(admin, 'pause_tube', 'emails', 1);
    started = now();
    const [pausedJob] = await call(producer, 'put', 0, 0, 30, 'after the pause');
    const [pausedStats] = await call(admin, 'stats_tube', 'emails');
    expectStats(pausedStats, { pause: 1, 'cmd-pause-tube': 1, 'current-jobs-ready': 1 }, 'stats-tube of a paused tube');
    assert.ok([0, 1].includes(pausedStats['pause-time-left']), `pause-time-left ${pausedStats['pause-time-left']}`);
    [id] = await call(worker, 'reserve_with_timeout', READY);
    expectWaited(now() - started, 0.9, 1.5, 'pause-tube 1');
    assert.strictEqual(id, pausedJob, 'reserve after the pause');
    await call(worker, 'destroy', pausedJob);
    await expectError(call(admin, 'pause_tube', 'no-such-tube', 1), 'NOT_FOUND', 'pause-tube of a missing tube');

    // the largest body the server takes (65535 bytes, every byte value), and one more
    const big = Buffer.alloc(65535, 0);
    for (let i = 0; i < big.length; i++) big[i] = (i * 7) & 0xff;
    const [bigId] = await call(producer, 'put', 0, 0, 30, big);
    [id, body] = await call(worker, 'reserve_with_timeout', READY);
    assert.ok(id === bigId && body.equals(big), `65535-byte body: ${id} ${body.length} bytes`);
    await call(worker, 'destroy', bigId);
    await expectError(call(producer, 'put', 0, 0, 30, Buffer.alloc(65536, 0x0a)), 'JOB_TOO_BIG', 'a 65536-byte put');
    const [afterBig] = await call(producer, 'put', 0, 0, 30, 'still in sync');
    assert.strictEqual(Number(afterBig), Number(bigId) + 1, 'the put after JOB_TOO_BIG takes the next id');
    [id, body] = await call(worker, 'reserve_with_timeout', READY);
    assert.ok(id === afterBig && body.toString() === 'still in sync', `after JOB_TOO_BIG: ${id} ${body}`);
    await call(worker, 'destroy', afterBig);

    // FiveBeansWorker: JSON jobs dispatched to handlers by type; success deletes,
    // 'release' releases with a delay (then succeeds), 'bury' buries, and jobs with an
    // unknown type or a body that is not JSON are buried by the worker itself
    assert.deepStrictEqual(await call(producer, 'use', 'thumbnails'), ['thumbnails']);
    const job = (type, payload) => JSON.stringify({ type, payload });
    const attempts = {};
    const handlers = {
        thumbnail: {
            type: 'thumbnail',
            work(payload, callback) {
                attempts[payload.name] = (attempts[payload.name] || 0) + 1;
                if (payload.name === 'retry' && attempts.retry === 1) callback('release', 1);
                else callback(payload.name === 'broken' ? 'bury' : 'success');
            },
        },
    };
    await call(producer, 'put', 0, 0, 30, job('thumbnail', { name: 'ok' }));
    await call(producer, 'put', 1, 0, 30, job('thumbnail', { name: 'retry' }));
    await call(producer, 'put', 2, 0, 30, job('thumbnail', { name: 'broken' }));
    await call(producer, 'put', 3, 0, 30, job('video', { name: 'unhandled' }));
    const [notJson] = await call(producer, 'put', 4, 0, 30, Buffer.from([0x7b, 0x00, 0x0d, 0x0a]));
    started = now();
    const counts = await runWorker('thumbnails', handlers, (c) => c.deleted === 2 && c.buried === 3);
    assert.ok(counts.deleted === 2 && counts.buried === 3 && counts.released === 1 && counts.reserved === 6,
        `worker counts ${JSON.stringify(counts)}`);
    assert.deepStrictEqual(attempts, { ok: 1, retry: 2, broken: 1 }, 'handler attempts');
    assert.ok(now() - started >= 0.9, 'the released job came back before its delay');
    expectStats((await call(admin, 'stats_tube', 'thumbnails'))[0], {
        'current-jobs-buried': 3, 'current-jobs-ready': 0, 'current-jobs-delayed': 0, 'current-jobs-reserved': 0,
        'total-jobs': 5, 'cmd-delete': 2, 'current-using': 1,
    }, 'stats-tube thumbnails after the worker');
    expectStats((await call(admin, 'stats_job', notJson))[0], { state: 'buried', pri: 1000, buries: 1 }, 'stats-job of the non-JSON job');

    // server stats, parsed: the counters of this whole session
    let stats;
    for (let i = 0; i < 20; i++) {
        [stats] = await call(admin, 'stats');
        if (stats['current-connections'] === 3) break;
        await sleep(50);
    }
    expectStats(stats, {
        'current-connections': 3, 'total-connections': 5, 'current-jobs-buried': 3, 'current-jobs-ready': 0,
        'current-jobs-reserved': 0, 'current-jobs-delayed': 0, 'current-jobs-urgent': 0, 'total-jobs': 14,
        'cmd-put': 15, 'cmd-reserve': 5, 'cmd-delete': 13, 'cmd-bury': 5, 'cmd-kick': 2, 'cmd-touch': 3,
        'cmd-release': 2, 'cmd-pause-tube': 2, 'cmd-stats-job': 8, 'cmd-stats-tube': 5,
        'current-producers': 1, 'current-workers': 1, 'current-waiting': 0,
        'cmd-peek': 2, 'cmd-peek-ready': 3, 'cmd-peek-delayed': 2, 'cmd-peek-buried': 2, 'cmd-use': 2,
        'cmd-watch': 3, 'cmd-ignore': 3, 'cmd-list-tubes': 1, 'cmd-list-tube-used': 2,
        'cmd-list-tubes-watched': 2, 'job-timeouts': 1, 'current-tubes': 3, 'max-job-size': 65535,
    }, 'stats');
    // the worker's last reserve-with-timeout may or may not have timed out once
    // waiting for the released job: 9 here, 6 or 7 by the worker
    assert.ok([15, 16].includes(stats['cmd-reserve-with-timeout']), `stats: cmd-reserve-with-timeout ${stats['cmd-reserve-with-timeout']}`);
    assert.ok(stats.pid > 0 && stats.uptime >= 0, `stats pid ${stats.pid} uptime ${stats.uptime}`);
    const [allTubes] = await call(admin, 'list_tubes');
    assert.deepStrictEqual([...allTubes].sort(), ['default', 'emails', 'thumbnails'], `list-tubes: ${JSON.stringify(allTubes)}`);

    // a second server: with the Redis engine it serves the same queue (a job put on
    // one is reserved on the other); beanstalkd and the memory engine are independent
    if (process.env.BEANSTALK_ADDR2) {
        const other = await connect(...hostPort(process.env.BEANSTALK_ADDR2));
        assert.deepStrictEqual(await call(producer, 'use', 'shared'), ['shared']);
        const [shared] = await call(producer, 'put', 0, 0, 30, 'across servers');
        assert.deepStrictEqual(await call(other, 'watch', 'shared'), ['2']);
        if (['redis', 'leader'].includes(process.env.BEANSTALK_SERVER)) {
            [id, body] = await call(other, 'reserve_with_timeout', READY);
            assert.ok(id === shared && body.toString() === 'across servers', `second server: ${id} ${body}`);
            await call(other, 'destroy', shared);
            await expectError(call(admin, 'peek', shared), 'NOT_FOUND', 'peek of a job deleted on the second server');
        } else {
            await expectError(call(other, 'reserve_with_timeout', 0), 'TIMED_OUT', 'reserve on an independent server');
            await call(admin, 'destroy', shared);
        }
        other.end();
    }

    for (const client of [producer, worker, admin]) client.end();
    console.log('fivebeans scenario: ok');
}

main().then(
    () => process.exit(0),
    (err) => {
        console.error(`fivebeans scenario FAILED: ${err.message}`);
        if (process.env.DEBUG) console.error(err.stack);
        process.exit(1);
    },
);

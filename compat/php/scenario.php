<?php
// A producer/worker session with pheanstalk as Debian ships it (php-pda-pheanstalk,
// pheanstalk 4.0.x, /usr/share/php/Pheanstalk), used the way its README shows.
//
// Run against any beanstalk server: BEANSTALK_ADDR=host:port php scenario.php
// Exits non-zero on the first behaviour that differs from beanstalkd's.

declare(strict_types=1);

require_once '/usr/share/php/Pheanstalk/autoload.php';

use Pheanstalk\Exception\DeadlineSoonException;
use Pheanstalk\Exception\JobNotFoundException;
use Pheanstalk\Exception\JobTooBigException;
use Pheanstalk\Exception\ServerDrainingException;
use Pheanstalk\Exception\ServerException;
use Pheanstalk\Job;
use Pheanstalk\JobId;
use Pheanstalk\Pheanstalk;

final class ScenarioFailure extends \RuntimeException
{
}

function show($v): string
{
    if (is_string($v) && strlen($v) > 80) {
        return sprintf('<%d bytes %s...>', strlen($v), json_encode(substr($v, 0, 40)));
    }
    return is_string($v) ? json_encode($v) : var_export($v, true);
}

function eq($got, $want, string $what): void
{
    if ($got !== $want) {
        throw new ScenarioFailure("$what: expected " . show($want) . ', got ' . show($got));
    }
}

function check(bool $ok, string $what): void
{
    if (!$ok) {
        throw new ScenarioFailure($what);
    }
}

// A loaded machine delays replies (and this process) by seconds: only a wrong answer may
// fail the scenario. Something early is wrong; late is only slow, by up to this much.
const LATE = 5.0;
// A reserve that must find a job already there waits this long at most (it is answered
// at once; the bound only ends a wrong answer).
const READY = 10;

function between(float $got, float $lo, float $hi, string $what): void
{
    if ($got < $lo || $got > $hi + LATE) {
        throw new ScenarioFailure(sprintf('%s: took %.3f s, expected %.2f..%.2f s (+%.0f s on a loaded machine)', $what, $got, $lo, $hi, LATE));
    }
}

/** Runs $f and returns the exception of class $class it throws; fails otherwise. */
function expect_throw(string $class, callable $f, string $what): \Throwable
{
    try {
        $result = $f();
    } catch (\Throwable $e) {
        if ($e instanceof $class) {
            return $e;
        }
        throw new ScenarioFailure("$what: expected $class, got " . get_class($e) . ': ' . $e->getMessage());
    }
    throw new ScenarioFailure("$what: expected $class, got " . show($result));
}

function now(): float
{
    return hrtime(true) / 1e9;
}

/**
 * pheanstalk 4 hands stats values over as the raw YAML text. beanstalkd 1.13 quotes
 * the string values (`tube: "x"`), 1.12 does not; accept both forms.
 */
function unq($v): string
{
    $v = (string) $v;
    if (strlen($v) >= 2 && $v[0] === '"' && substr($v, -1) === '"') {
        return substr($v, 1, -1);
    }
    return $v;
}

function stat_int($stats, string $key, string $what): int
{
    check(isset($stats[$key]), "$what: no '$key' key in " . show($stats->getArrayCopy()));
    check((bool) preg_match('/^\d+$/', (string) $stats[$key]), "$what: '$key' is not an integer: " . show($stats[$key]));
    return (int) $stats[$key];
}

function job_state(Pheanstalk $c, Job $job): array
{
    $s = $c->statsJob($job);
    return [
        'id' => stat_int($s, 'id', 'stats-job'),
        'tube' => unq($s['tube']),
        'state' => unq($s['state']),
        'pri' => stat_int($s, 'pri', 'stats-job'),
        'delay' => stat_int($s, 'delay', 'stats-job'),
        'ttr' => stat_int($s, 'ttr', 'stats-job'),
        'time-left' => stat_int($s, 'time-left', 'stats-job'),
        'reserves' => stat_int($s, 'reserves', 'stats-job'),
        'timeouts' => stat_int($s, 'timeouts', 'stats-job'),
        'releases' => stat_int($s, 'releases', 'stats-job'),
        'buries' => stat_int($s, 'buries', 'stats-job'),
        'kicks' => stat_int($s, 'kicks', 'stats-job'),
    ];
}

function tube_counts(Pheanstalk $c, string $tube): array
{
    $s = $c->statsTube($tube);
    eq(unq($s['name']), $tube, 'stats-tube name');
    $out = [];
    foreach (['current-jobs-urgent', 'current-jobs-ready', 'current-jobs-reserved', 'current-jobs-delayed',
                 'current-jobs-buried', 'total-jobs', 'current-using', 'current-watching', 'current-waiting',
                 'cmd-delete', 'cmd-pause-tube', 'pause', 'pause-time-left'] as $key) {
        $out[$key] = stat_int($s, $key, "stats-tube $tube");
    }
    return $out;
}

function expect_job(?Job $job, int $id, string $data, string $what): Job
{
    check($job !== null, "$what: expected job $id, got no job (TIMED_OUT / NOT_FOUND)");
    eq($job->getId(), $id, "$what: job id");
    eq($job->getData(), $data, "$what: job body");
    return $job;
}

function connect(string $addr): Pheanstalk
{
    [$host, $port] = explode(':', $addr);
    return Pheanstalk::create($host, (int) $port);
}

function main(): void
{
    $addr = getenv('BEANSTALK_ADDR') ?: '127.0.0.1:11300';
    $addr2 = getenv('BEANSTALK_ADDR2') ?: '';
    $server = getenv('BEANSTALK_SERVER') ?: 'beanstalkd';
    $serverPid = (int) (getenv('BEANSTALK_PID') ?: 0);
    $tube = sprintf('php-orders-%d-%s', getmypid(), bin2hex(random_bytes(3)));
    $tube2 = "$tube-audit";

    $producer = connect($addr);
    $worker = connect($addr);
    $other = connect($addr);

    // use / watch / ignore, and what the server says about them
    eq($producer->listTubeUsed(true), 'default', 'list-tube-used on a new connection');
    $producer->useTube($tube);
    eq($producer->listTubeUsed(true), $tube, 'list-tube-used after use');
    eq($worker->listTubesWatched(true), ['default'], 'list-tubes-watched on a new connection');
    $worker->watch($tube)->ignore('default');
    eq($worker->listTubesWatched(true), [$tube], 'list-tubes-watched after watch + ignore');
    $other->watchOnly($tube);
    eq($other->listTubesWatched(true), [$tube], 'list-tubes-watched after watchOnly');
    $tubes = $producer->listTubes();
    check(in_array('default', $tubes, true) && in_array($tube, $tubes, true), 'list-tubes lacks default or ' . $tube . ': ' . show($tubes));
    $e = expect_throw(ServerException::class, fn () => $worker->ignore($tube), 'ignore of the last watched tube');
    check(strpos($e->getMessage(), 'NOT_IGNORED') === 0, 'ignore of the last watched tube: ' . $e->getMessage());
    // the refusal leaves the watch list as it was
    eq($worker->listTubesWatched(true), [$tube], 'list-tubes-watched after NOT_IGNORED');

    // put with priorities: the most urgent job comes first
    $low = $producer->put('order-low', 100, 0, 30);
    $high = $producer->put('order-high', 5, 0, 30);
    check($high->getId() > $low->getId(), 'job ids increase');
    $counts = tube_counts($producer, $tube);
    eq([$counts['current-jobs-ready'], $counts['current-jobs-urgent'], $counts['total-jobs']], [2, 2, 2],
        'stats-tube ready/urgent/total after two puts');
    eq([$counts['current-using'], $counts['current-watching']], [1, 2], 'stats-tube using/watching');
    $job = expect_job($worker->reserve(), $high->getId(), 'order-high', 'reserve');
    $st = job_state($producer, $job);
    eq([$st['state'], $st['tube'], $st['pri'], $st['ttr'], $st['reserves']], ['reserved', $tube, 5, 30, 1],
        'stats-job state/tube/pri/ttr/reserves of a reserved job');
    check($st['time-left'] >= 25 && $st['time-left'] <= 29, 'time-left right after reserving a TTR-30 job: ' . $st['time-left']);
    eq(tube_counts($producer, $tube)['current-jobs-reserved'], 1, 'stats-tube current-jobs-reserved');

    // touch restarts the TTR
    sleep(1);
    $before = job_state($worker, $job)['time-left'];
    check($before >= 20 && $before <= 28, "time-left one second after reserve: $before");
    $worker->touch($job);
    $after = job_state($worker, $job)['time-left'];
    check($after > $before || $after === 29, "time-left after touch: $after ($before before)");
    expect_throw(JobNotFoundException::class, fn () => $other->touch($job), 'touch of a job reserved by another connection');

    // delete; the job is gone everywhere
    $worker->delete($job);
    expect_throw(JobNotFoundException::class, fn () => $producer->peek($job), 'peek of a deleted job');
    expect_throw(ServerException::class, fn () => $producer->statsJob($job), 'stats-job of a deleted job');
    expect_throw(JobNotFoundException::class, fn () => $worker->delete($job), 'second delete');

    // reserve-with-timeout; bury with a new priority; peek-buried; kick
    $job = expect_job($worker->reserveWithTimeout(READY), $low->getId(), 'order-low', 'reserve-with-timeout 1');
    $worker->bury($job, 7);
    expect_job($producer->peekBuried(), $low->getId(), 'order-low', 'peek-buried');
    $st = job_state($producer, $job);
    eq([$st['state'], $st['pri'], $st['buries']], ['buried', 7, 1], 'stats-job after bury');
    eq(tube_counts($producer, $tube)['current-jobs-buried'], 1, 'stats-tube current-jobs-buried');
    eq($producer->peekReady(), null, 'peek-ready with only a buried job');
    eq($worker->reserveWithTimeout(0), null, 'reserve-with-timeout 0 with only a buried job');
    eq($producer->kick(10), 1, 'kick 10 with one buried job');
    expect_job($producer->peekReady(), $low->getId(), 'order-low', 'peek-ready after kick');
    $st = job_state($producer, $job);
    eq([$st['state'], $st['kicks'], $st['pri']], ['ready', 1, 7], 'stats-job after kick');

    // kick-job of one buried job
    $job = expect_job($worker->reserveWithTimeout(READY), $low->getId(), 'order-low', 'reserve after kick');
    $worker->bury($job, 8);
    $producer->kickJob($job);
    $st = job_state($producer, $job);
    eq([$st['state'], $st['kicks'], $st['buries'], $st['reserves'], $st['pri']], ['ready', 2, 2, 2, 8],
        'stats-job after kick-job');
    expect_throw(JobNotFoundException::class, fn () => $producer->kickJob($job), 'kick-job of a ready job');

    // release with a delay: delayed, then reservable again after about a second
    $job = expect_job($worker->reserveWithTimeout(READY), $low->getId(), 'order-low', 'reserve after kick-job');
    $worker->release($job, 50, 1);
    $released = now();
    expect_job($producer->peekDelayed(), $low->getId(), 'order-low', 'peek-delayed after release with delay');
    $st = job_state($producer, $job);
    eq([$st['state'], $st['pri'], $st['delay'], $st['releases']], ['delayed', 50, 1, 1], 'stats-job after release with delay');
    eq(tube_counts($producer, $tube)['current-jobs-delayed'], 1, 'stats-tube current-jobs-delayed');
    eq($worker->reserveWithTimeout(0), null, 'reserve-with-timeout 0 while the only job is delayed');
    $job = expect_job($worker->reserveWithTimeout(READY), $low->getId(), 'order-low', 'reserve of a released job');
    between(now() - $released, 0.9, 1.5, 'release with delay 1, then reserve');
    $worker->release($job, 50, 0);
    expect_job($producer->peekReady(), $low->getId(), 'order-low', 'peek-ready after release without delay');
    $producer->delete($low);   // a ready job can be deleted by any connection
    eq($producer->peekReady(), null, 'peek-ready on an empty tube');

    // put with a delay
    $later = $producer->put('order-later', 10, 1, 30);
    $put = now();
    expect_job($producer->peekDelayed(), $later->getId(), 'order-later', 'peek-delayed after put with delay');
    eq($producer->peekReady(), null, 'peek-ready with only a delayed job');
    eq(job_state($producer, $later)['state'], 'delayed', 'stats-job state of a delayed put');
    $job = expect_job($worker->reserveWithTimeout(READY), $later->getId(), 'order-later', 'reserve of a delayed put');
    between(now() - $put, 0.9, 1.5, 'put with delay 1, then reserve');
    $worker->delete($job);

    // kick also moves a delayed job when nothing is buried
    $parked = $producer->put('order-parked', 10, 60, 30);
    eq($producer->peekBuried(), null, 'peek-buried with nothing buried');
    eq($producer->kick(1), 1, 'kick 1 with one delayed job');
    eq(job_state($producer, $parked)['state'], 'ready', 'stats-job state of a kicked delayed job');
    $producer->delete($parked);
    $parked = $producer->put('order-parked-2', 10, 60, 30);
    $producer->kickJob($parked);
    eq(job_state($producer, $parked)['state'], 'ready', 'stats-job state after kick-job of a delayed job');
    $producer->delete($parked);

    // TTR: DEADLINE_SOON a second before the deadline, then the job goes back to ready
    $short = $producer->put('order-short', 10, 0, 2);
    $job = expect_job($worker->reserveWithTimeout(READY), $short->getId(), 'order-short', 'reserve of a TTR-2 job');
    $reserved = now();
    expect_throw(DeadlineSoonException::class, fn () => $worker->reserveWithTimeout(5), 'reserve-with-timeout while a TTR-2 job nears its deadline');
    between(now() - $reserved, 0.9, 1.5, 'DEADLINE_SOON on a TTR-2 job');
    eq(job_state($producer, $job)['state'], 'reserved', 'DEADLINE_SOON does not release the job');
    // beanstalkd 1.12 can miss the TTR tick of an idle connection until that connection sends a command
    // (conn_timeout drops it from the timer heap when its tick and the deadline fall in the same microsecond):
    // the worker sends one after the deadline, as in the protocol cases and the node scenario.
    usleep((int) (max(0.0, $reserved + 2.2 - now()) * 1e6));
    $worker->listTubesWatched(true);
    $job = expect_job($other->reserveWithTimeout(READY), $short->getId(), 'order-short', 'reserve of a timed-out job by another worker');
    between(now() - $reserved, 1.9, 2.5, 'TTR 2 expiry');
    $st = job_state($producer, $job);
    eq([$st['state'], $st['timeouts'], $st['reserves']], ['reserved', 1, 2], 'stats-job after a TTR timeout');
    expect_throw(JobNotFoundException::class, fn () => $worker->delete($job), 'delete by the worker whose reservation timed out');
    $other->delete($job);

    // pause-tube, resume with 0; a short pause delays reserve
    $paused = $producer->put('order-paused', 10, 0, 30);
    $producer->pauseTube($tube, 60);
    $counts = tube_counts($producer, $tube);
    eq($counts['pause'], 60, 'stats-tube pause');
    check($counts['pause-time-left'] >= 55 && $counts['pause-time-left'] <= 60, 'stats-tube pause-time-left: ' . $counts['pause-time-left']);
    eq($counts['cmd-pause-tube'], 1, 'stats-tube cmd-pause-tube');
    eq($worker->reserveWithTimeout(0), null, 'reserve-with-timeout 0 on a paused tube');
    $producer->resumeTube($tube);
    eq(tube_counts($producer, $tube)['pause'], 0, 'stats-tube pause after resume');
    $start = now();
    $job = expect_job($worker->reserveWithTimeout(0), $paused->getId(), 'order-paused', 'reserve-with-timeout 0 after resume');
    between(now() - $start, 0.0, 0.3, 'reserve after resume');
    $worker->release($job, 10, 0);
    $producer->pauseTube($tube, 1);
    $start = now();
    $job = expect_job($worker->reserveWithTimeout(READY), $paused->getId(), 'order-paused', 'reserve on a tube paused for 1 s');
    between(now() - $start, 0.9, 1.5, 'pause-tube 1, then reserve');
    $worker->delete($job);
    expect_throw(ServerException::class, fn () => $producer->pauseTube("$tube-nobody", 1), 'pause-tube of a missing tube');
    expect_throw(ServerException::class, fn () => $producer->statsTube("$tube-nobody"), 'stats-tube of a missing tube');

    // binary bodies come back byte for byte (CR, LF, CRLF, NUL and every other byte)
    $binary = "\x00head\r\nmiddle\rlone-cr\nlone-lf\r\n\r\n\x00\xff" . implode('', array_map('chr', range(0, 255))) . "\r\n";
    $bin = $producer->put($binary, 10, 0, 30);
    expect_job($producer->peek($bin), $bin->getId(), $binary, 'peek of a binary job');
    expect_job($worker->reserve(), $bin->getId(), $binary, 'reserve of a binary job');
    $worker->delete($bin);
    $crlf = $producer->put("\r\n", 10, 0, 30);
    expect_job($worker->reserve(), $crlf->getId(), "\r\n", 'reserve of a CRLF-only job');
    $worker->delete($crlf);
    $empty = $producer->put('', 10, 0, 30);
    expect_job($worker->reserve(), $empty->getId(), '', 'reserve of an empty job');
    $worker->delete($empty);

    // the largest job the server takes, and one byte more
    $maxBody = str_repeat("\x00\r\nab", 65535 / 5);   // 65535 is divisible by 5
    eq(strlen($maxBody), 65535, 'test body length');
    $big = $producer->put($maxBody, 10, 0, 30);
    expect_job($worker->reserve(), $big->getId(), $maxBody, 'reserve of a 65535-byte job');
    $worker->delete($big);
    $e = expect_throw(JobTooBigException::class, fn () => $producer->put($maxBody . 'x', 10, 0, 30), 'put of a 65536-byte job');
    // the connection stays usable: the server skipped the oversized body
    $after = $producer->put('after-too-big', 10, 0, 30);
    check($after->getId() === $big->getId() + 1, 'JOB_TOO_BIG consumed no job id: ' . $after->getId() . ' after ' . $big->getId());
    expect_job($worker->reserve(), $after->getId(), 'after-too-big', 'reserve after JOB_TOO_BIG');
    $worker->delete($after);

    // several watched tubes
    $worker->watch($tube2);
    eq($worker->listTubesWatched(true), [$tube, $tube2], 'list-tubes-watched with two tubes');
    $audit = $producer->useTube($tube2)->put('audit-1', 10, 0, 30);
    eq($producer->listTubeUsed(true), $tube2, 'list-tube-used after the second use');
    $job = expect_job($worker->reserveWithTimeout(READY), $audit->getId(), 'audit-1', 'reserve from the second watched tube');
    eq(job_state($worker, $job)['tube'], $tube2, 'stats-job tube of a job in the second tube');
    $worker->delete($job);
    $worker->ignore($tube2);
    eq($worker->listTubesWatched(true), [$tube], 'list-tubes-watched after ignoring the second tube');
    $producer->put('audit-2', 10, 0, 30);
    eq($worker->reserveWithTimeout(0), null, 'reserve ignores jobs in an ignored tube');
    eq($other->reserveWithTimeout(0), null, 'reserve ignores jobs in an unwatched tube');
    $audit2 = expect_job($producer->peekReady(), $audit->getId() + 1, 'audit-2', 'peek-ready in the used tube');
    $producer->delete($audit2);

    // server-wide stats
    $stats = $producer->stats();
    foreach (['current-jobs-urgent', 'current-jobs-ready', 'current-jobs-reserved', 'current-jobs-delayed',
                 'current-jobs-buried', 'cmd-put', 'cmd-reserve', 'cmd-reserve-with-timeout', 'cmd-pause-tube',
                 'job-timeouts', 'total-jobs', 'max-job-size', 'current-tubes', 'current-connections',
                 'current-producers', 'current-workers', 'current-waiting', 'total-connections', 'pid', 'uptime',
                 'binlog-max-size'] as $key) {
        stat_int($stats, $key, 'stats');
    }
    foreach (['version', 'rusage-utime', 'rusage-stime', 'draining', 'id', 'hostname'] as $key) {
        check(isset($stats[$key]), "stats: no '$key' key");
    }
    eq((int) $stats['max-job-size'], 65535, 'stats max-job-size');
    eq((int) $stats['current-jobs-ready'], 0, 'stats current-jobs-ready');
    eq((int) $stats['current-connections'], 3, 'stats current-connections');
    eq((int) $stats['job-timeouts'], 1, 'stats job-timeouts');
    eq((int) $stats['cmd-pause-tube'], 4, 'stats cmd-pause-tube (the NOT_FOUND one counts too)');
    eq((int) $stats['total-jobs'], $audit2->getId(), 'stats total-jobs');
    eq(unq($stats['draining']), 'false', 'stats draining');
    check((bool) preg_match('/^[0-9a-f]{16}$/', unq($stats['id'])), 'stats id: ' . $stats['id']);
    if ($serverPid > 0) {
        eq((int) $stats['pid'], $serverPid, 'stats pid');
    }

    // a tube nobody uses, watches or fills disappears
    $producer->useTube('default');
    $worker->watch('default')->ignore($tube);
    $other->watch('default')->ignore($tube);
    $tubes = $producer->listTubes();
    check(!in_array($tube, $tubes, true) && !in_array($tube2, $tubes, true), "unused tubes still listed: " . show($tubes));
    expect_throw(ServerException::class, fn () => $producer->statsTube($tube), 'stats-tube of a vanished tube');

    // a second server: an independent one for beanstalkd and memory, the same queue for redis
    if ($addr2 !== '') {
        $shared = "$tube-shared";
        $there = connect($addr2);
        $there->watch($shared)->ignore('default');
        $mine = $producer->useTube($shared)->put('hand-over', 10, 0, 30);
        if (in_array($server, ['redis', 'leader'], true)) {
            $job = expect_job($there->reserveWithTimeout(READY), $mine->getId(), 'hand-over', 'reserve on the second redstalk of the same Redis');
            eq(job_state($producer, $job)['state'], 'reserved', 'stats-job on the first server of a job reserved on the second');
            $there->delete($job);
            expect_throw(JobNotFoundException::class, fn () => $producer->peek($mine), 'peek on the first server of a job deleted on the second');
        } else {
            eq($there->reserveWithTimeout(0), null, 'reserve on an independent second server');
            $producer->delete($mine);
        }
        $producer->useTube('default');
    }

    // drain mode (SIGUSR1): no new jobs
    if ($serverPid > 0) {
        posix_kill($serverPid, defined('SIGUSR1') ? SIGUSR1 : 10);
        $deadline = now() + LATE;
        while (unq($producer->stats()['draining']) !== 'true' && now() < $deadline) {
            usleep(50000);
        }
        expect_throw(ServerDrainingException::class, fn () => $producer->put('too-late', 10, 0, 30), 'put in drain mode');
        eq(unq($producer->stats()['draining']), 'true', 'stats draining after SIGUSR1');
    }

    echo "pheanstalk scenario: ok\n";
}

try {
    main();
} catch (\Throwable $e) {
    fwrite(STDERR, 'pheanstalk scenario FAILED: ' . $e->getMessage() . "\n");
    if (!($e instanceof ScenarioFailure)) {
        fwrite(STDERR, get_class($e) . "\n" . $e->getTraceAsString() . "\n");
    } else {
        fwrite(STDERR, $e->getTraceAsString() . "\n");
    }
    exit(1);
}

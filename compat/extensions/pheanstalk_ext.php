<?php
// pheanstalk (Debian's php-pda-pheanstalk, 4.0.x) speaking redstalk's protocol
// extensions (docs/EXTENSIONS.md) through its own low-level send: command classes handed
// to Connection::dispatchCommand(), on the Connection a Pheanstalk was made with. It
// raises its exceptions for UNKNOWN_COMMAND and BAD_FORMAT and reads an `OK <n>` reply's
// data; the jobs after `RESERVED_BATCH <k>` are read from the socket a factory keeps.
// The classes and helpers below are what a user writes; the rest checks what they get.
//
// EXT_ADDR: a redstalk with extensions on. EXT_OFF_ADDRS: comma-separated servers that
// must answer list-extensions UNKNOWN_COMMAND (beanstalkd, redstalk --extensions off).

declare(strict_types=1);

require_once '/usr/share/php/Pheanstalk/autoload.php';

use Pheanstalk\Command\AbstractCommand;
use Pheanstalk\Connection;
use Pheanstalk\Contract\ResponseParserInterface;
use Pheanstalk\Contract\SocketFactoryInterface;
use Pheanstalk\Contract\SocketInterface;
use Pheanstalk\Exception\ServerUnknownCommandException;
use Pheanstalk\Job;
use Pheanstalk\JobId;
use Pheanstalk\Pheanstalk;
use Pheanstalk\Response\ArrayResponse;
use Pheanstalk\SocketFactory;
use Pheanstalk\YamlResponseParser;

// --- what a user writes ------------------------------------------------------------
/** Any one-line extension command: its reply's words, after checking the first (one of
 * `$expect`'s, split on `|`). */
final class ExtCommand extends AbstractCommand implements ResponseParserInterface
{
    public function __construct(private string $line, private string $expect, private ?string $body = null) {}
    public function getCommandLine(): string { return $this->line; }
    public function hasData(): bool { return $this->body !== null; }
    public function getData(): string { return (string) $this->body; }
    public function getDataLength(): int { return strlen((string) $this->body); }
    public function parseResponse(string $responseLine, ?string $responseData): ArrayResponse
    {
        $words = explode(' ', $responseLine);
        if (!in_array($words[0], explode('|', $this->expect), true)) {
            throw new RuntimeException("'{$this->line}' answered '$responseLine'");
        }
        return new ArrayResponse($words[0], array_slice($words, 1));
    }
}

/** `list-extensions` answers a YAML list, as `list-tubes` does. */
final class ListExtensionsCommand extends AbstractCommand
{
    public function getCommandLine(): string { return 'list-extensions'; }
    public function getResponseParser(): ResponseParserInterface { return new YamlResponseParser(YamlResponseParser::MODE_LIST); }
}

/** A socket factory that keeps its socket, to read the jobs of a batch. */
final class KeptSocketFactory implements SocketFactoryInterface
{
    public ?SocketInterface $socket = null;
    public function __construct(private SocketFactoryInterface $inner) {}
    public function create(): SocketInterface { return $this->socket = $this->inner->create(); }
}

function extensions(Connection $c): array // none on beanstalkd: probe before a put in ms
{
    try {
        return $c->dispatchCommand(new ListExtensionsCommand())->getArrayCopy();
    } catch (ServerUnknownCommandException $e) {
        return [];
    }
}

function putMs(Connection $c, string $body, int $delayMs, int $pri = 1024, int $ttr = 60): int
{
    $line = sprintf('put %u %ums %u %u', $pri, $delayMs, $ttr, strlen($body));
    return (int) $c->dispatchCommand(new ExtCommand($line, 'INSERTED', $body))[0];
}

/** A put tagged idp:<key>[:<window>] or rpl:<key>[:<window>]: [id, null] for a new job,
 * [id, its state] for the key's existing one (a refused replace throws: CONFLICT). */
function putKey(Connection $c, string $body, string $tag, string $delay = '0', int $pri = 1024, int $ttr = 60): array
{
    $line = sprintf('put %u %s %u %u %s', $pri, $delay, $ttr, strlen($body), $tag);
    $words = $c->dispatchCommand(new ExtCommand($line, 'INSERTED', $body))->getArrayCopy();
    return [(int) $words[0], $words[1] ?? null];
}

/** [id, state] of the key's job in the used tube, or null. */
function findKey(Connection $c, string $key): ?array
{
    $r = $c->dispatchCommand(new ExtCommand("find-key $key", 'FOUND_KEY|NOT_FOUND'));
    return $r->getResponseName() === 'FOUND_KEY' ? [(int) $r[0], $r[1]] : null;
}

/** @return Job[] up to $n ready jobs at once (waiting up to $timeout s for the first). */
function reserveBatch(Connection $c, KeptSocketFactory $f, int $n, int $timeout = 0): array
{
    $k = (int) $c->dispatchCommand(new ExtCommand("reserve-batch $n $timeout", 'RESERVED_BATCH'))[0];
    $jobs = [];
    for ($i = 0; $i < $k; $i++) {
        [, $id, $size] = explode(' ', $f->socket->getLine());
        $jobs[] = new Job((int) $id, $f->socket->read((int) $size));
        $f->socket->read(2); // CRLF
    }
    return $jobs;
}

/** delete-batch, release-batch <pri> <delay>, touch-batch, bury-batch <pri>: [done, missing ids]. */
function batch(Connection $c, string $verb, string $reply, array $ids, string ...$params): array
{
    $words = $c->dispatchCommand(new ExtCommand(implode(' ', [$verb, ...$params, ...$ids]), $reply))->getArrayCopy();
    return [(int) $words[0], array_map('intval', array_slice($words, 2))];
}

// --- the checks ----------------------------------------------------------------------
const TUBE = 'compat-ext-pheanstalk';

function fail(string $what): never
{
    fwrite(STDERR, "pheanstalk extensions: $what\n");
    exit(1);
}
function check(bool $ok, string $what): void
{
    $ok || fail($what);
}
$idsOf = fn (array $jobs) => array_map(fn ($j) => $j->getId(), $jobs);

function connect(string $addr): array
{
    [$host, $port] = explode(':', $addr);
    $p = new Pheanstalk($c = new Connection($f = new KeptSocketFactory(new SocketFactory($host, (int) $port))));
    $p->useTube(TUBE)->watchOnly(TUBE);
    return [$p, $c, $f];
}

foreach (array_filter(explode(',', getenv('EXT_OFF_ADDRS') ?: '')) as $addr) {
    [$p, $c] = connect($addr);
    try {
        $c->dispatchCommand(new ListExtensionsCommand());
        fail("$addr answered list-extensions");
    } catch (ServerUnknownCommandException $e) {
    }
    $p->delete($p->put('the connection still serves'));
}

[$p, $c, $f] = connect(getenv('EXT_ADDR'));
$served = extensions($c);
check(!array_diff(['milliseconds', 'keys', 'batches', 'flush'], $served), 'list-extensions named ' . json_encode($served));

// A delay in milliseconds: not reservable before it ran out (exact), ready soon after.
$start = hrtime(true);
$id = putMs($c, 'soon', 700);
$job = $p->reserveWithTimeout(10);
$waited = (hrtime(true) - $start) / 1e9;
check($job?->getId() === $id && $waited >= 0.7 && $waited <= 5.7, sprintf('the 700ms job came after %.3f s', $waited));
$p->delete($job);

// Keys: a second idp put of the key answers the first job (unchanged), found and
// deleted by key.
[$id, $state] = putKey($c, 'order 7', 'idp:order-7');
check($state === null, "the first idp put answered an existing job ($state)");
check(putKey($c, 'order 7 again', 'idp:order-7') === [$id, 'READY'], 'the second idp put was not deduped to the first job');
check(findKey($c, 'order-7') === [$id, 'READY'] && $p->peek(new JobId($id))->getData() === 'order 7', 'find-key order-7: ' . json_encode(findKey($c, 'order-7')));
$c->dispatchCommand(new ExtCommand('delete-key order-7', 'DELETED'));
check(findKey($c, 'order-7') === null, 'order-7 found after delete-key');

// Batches: 12 jobs, a batch of 10, one delete-batch (a repeated id is missing the
// second time), the other 2 released for a minute in one release-batch, then flushed.
$put = array_map(fn ($i) => $p->put("job $i")->getId(), range(0, 11));
$got = reserveBatch($c, $f, 10, 1);
check($idsOf($got) === array_slice($put, 0, 10) && $got[3]->getData() === 'job 3', 'reserve-batch 10 1 got ' . json_encode($idsOf($got)));
$deleted = batch($c, 'delete-batch', 'DELETED_BATCH', [...$idsOf($got), $put[0]]);
check($deleted === [10, [$put[0]]], 'delete-batch: ' . json_encode($deleted));
$rest = $idsOf(reserveBatch($c, $f, 10, 1));
check($rest === array_slice($put, 10), 'the second reserve-batch got ' . json_encode($rest));
check(batch($c, 'release-batch', 'RELEASED_BATCH', $rest, '0', '60000ms') === [2, []], 'release-batch');
check($p->statsTube(TUBE)['current-jobs-delayed'] === '2', 'the released jobs are not delayed');
check($c->dispatchCommand(new ExtCommand('flush-tube ' . TUBE, 'FLUSHED'))[0] === '2', 'flush-tube did not flush the 2 jobs');
$left = array_filter($p->statsTube(TUBE)->getArrayCopy(), fn ($v, $k) => str_starts_with($k, 'current-jobs-') && $v !== '0', ARRAY_FILTER_USE_BOTH);
check(!$left, 'after flush-tube: ' . json_encode($left));
echo 'pheanstalk extensions: ok (' . implode(', ', $served) . '; ' . getenv('EXT_OFF_ADDRS') . " without)\n";

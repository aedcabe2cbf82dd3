<?php
// pheanstalk (Debian's php-pda-pheanstalk, 4.0.x) over TLS, through its public hook:
// Pheanstalk::createWithFactory() with a SocketFactoryInterface whose sockets are
// tls:// streams. With TLS_TOKEN the factory sends `auth <token>` first and expects
// AUTHENTICATED; with TLS_CERT/TLS_KEY it presents a client certificate instead.
//
// ROLE=producer: puts to `emails` and is refused (FORBIDDEN) anything else;
// ROLE=worker: reserves from `emails` and deletes what it holds.

declare(strict_types=1);

require_once '/usr/share/php/Pheanstalk/autoload.php';

use Pheanstalk\Contract\SocketFactoryInterface;
use Pheanstalk\Contract\SocketInterface;
use Pheanstalk\Pheanstalk;

final class TlsSocket implements SocketInterface
{
    /** @var resource */
    private $stream;

    public function __construct(string $addr, array $ssl, ?string $token)
    {
        $context = stream_context_create(['ssl' => $ssl]);
        $stream = stream_socket_client("tls://$addr", $errno, $error, 10, STREAM_CLIENT_CONNECT, $context);
        if ($stream === false) {
            throw new RuntimeException("TLS to $addr: $error");
        }
        $this->stream = $stream;
        if ($token !== null) {
            $this->write("auth $token\r\n");
            $answer = $this->getLine();
            if ($answer !== 'AUTHENTICATED') {
                throw new RuntimeException("auth answered " . json_encode($answer));
            }
        }
    }

    public function write(string $data): void
    {
        while ($data !== '') {
            $n = fwrite($this->stream, $data);
            if ($n === false || $n === 0) {
                throw new RuntimeException('write failed');
            }
            $data = substr($data, $n);
        }
    }

    public function read(int $length): string
    {
        $out = '';
        while (strlen($out) < $length) {
            $chunk = fread($this->stream, $length - strlen($out));
            if ($chunk === false || ($chunk === '' && feof($this->stream))) {
                throw new RuntimeException('connection closed');
            }
            $out .= $chunk;
        }
        return $out;
    }

    public function getLine(): string
    {
        $line = fgets($this->stream, 8192);
        if ($line === false) {
            throw new RuntimeException('connection closed');
        }
        return rtrim($line);
    }

    public function disconnect(): void
    {
        fclose($this->stream);
    }
}

final class TlsSocketFactory implements SocketFactoryInterface
{
    public function __construct(private string $addr, private array $ssl, private ?string $token)
    {
    }

    public function create(): SocketInterface
    {
        return new TlsSocket($this->addr, $this->ssl, $this->token);
    }
}

function fail(string $what): void
{
    fwrite(STDERR, "pheanstalk over TLS: $what\n");
    exit(1);
}

$ssl = ['cafile' => getenv('TLS_CA'), 'peer_name' => '127.0.0.1', 'verify_peer' => true];
if (getenv('TLS_CERT')) {
    $ssl['local_cert'] = getenv('TLS_CERT');
    $ssl['local_pk'] = getenv('TLS_KEY');
}
$token = getenv('TLS_TOKEN') ?: null;
$p = Pheanstalk::createWithFactory(new TlsSocketFactory(getenv('TLS_ADDR'), $ssl, $token));

$refused = function (callable $f, string $what) {
    try {
        $f();
    } catch (\Exception $e) {
        if (strpos($e->getMessage(), 'FORBIDDEN') !== false) {
            return;
        }
        fail("$what: expected FORBIDDEN, got " . get_class($e) . ': ' . $e->getMessage());
    }
    fail("$what was not refused");
};

switch (getenv('ROLE')) {
    case 'producer':
        $p->useTube('emails');
        foreach (['one', 'two', 'three'] as $body) {
            $p->put($body, 10, 0, 60);
        }
        // pheanstalk raises an unknown reply for these (its `use` takes any reply,
        // `kick` reads one as 0, and `reserve` fails on it: docs/SECURITY.md).
        $refused(fn () => $p->statsTube('billing'), 'stats-tube billing');
        $refused(fn () => $p->stats(), 'stats');
        // Refused, the connection still serves.
        $job = $p->put('four', 10, 0, 60);
        if ($job->getId() <= 0) {
            fail('put after a refusal');
        }
        break;
    case 'worker':
        $p->watch('emails');
        $p->ignore('default');
        $seen = [];
        while (($job = $p->reserveWithTimeout(1)) !== null) {
            $seen[] = $job->getData();
            $p->delete($job);
        }
        if ($seen !== ['one', 'two', 'three', 'four']) {
            fail('reserved ' . json_encode($seen));
        }
        $refused(fn () => $p->stats(), 'stats');
        break;
    default:
        fail('ROLE must be producer or worker');
}
echo "pheanstalk over TLS as " . getenv('ROLE') . ": ok\n";

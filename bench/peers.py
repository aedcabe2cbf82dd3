"""The peers bench/compare (and bench/scale) measure, and how each is started and driven.

A peer is data (`Peer`): which program serves, with which arguments, on which private
redis-server (AOF off or everysec), which scenarios apply, and which redstalk flags it
needs. Adding a redstalk configuration is one entry in PEERS; one whose flags this
redstalk build does not know (`redstalk --help`) is skipped with a note, and so is a
peer whose programs are missing (node for BullMQ).

`Server` starts a peer's processes on free loopback ports (never 6379 or 11300; each
redis-server is private, in a temporary directory, with RDB saves off) and runs one
measurement on it: `redstalk-bench` for the beanstalk servers, `bench/bullmq/cycle.js`
for BullMQ. Every run passes the pids of the peer's server processes (`--cpu-pid`), so
it reports their CPU time during its measured phase, and for a peer on Redis that
Redis' address (`--redis-info`), so it reports the commands Redis ran in that phase.

A peer may be reached over TLS (`tls`): redstalk's own TLS listener with a token (the
token of the built-in admin, or of a role scoped to the bench's tubes), or beanstalkd
behind Debian's stunnel4, the set-up beanstalkd's users run today. The certificates
(a CA of the run's own and a server certificate for 127.0.0.1) are made with openssl.

`baseline_copy` makes a copy of a redstalk peer that runs another redstalk binary (a
build of another commit), named `NAME@base`, so one compare run measures both builds.

Python 3 standard library only.
"""

import json
import os
import re
import shutil
import socket
import subprocess
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
BULLMQ_DIR = os.path.join(HERE, "bullmq")
AVOID_PORTS = {6379, 11300}


class Peer:
    """One configuration under test.

    kind: "beanstalkd", "redstalk" or "bullmq". args: the server's arguments beyond the
    listening address; "{dir}" becomes a fresh data directory, "{redis}" the URL of the
    private redis-server. redis: None, "off" or "everysec" (that Redis' AOF). needs:
    redstalk flags that must appear in `redstalk --help`, else the peer is skipped.
    extra_if_known: (flag, args) pairs added when the flag is known (a mode that is the
    default today and will be named later). cycle_only: only the cycle scenarios apply.
    replica: the private redis-server has a replica (another private redis-server, in
    sync before the peer starts), for --redis-wait-replicas. cluster: instead of one
    redis-server, a Redis Cluster of three primaries (each with the peer's AOF setting);
    "{redis}" becomes its redis+cluster:// URL, and the Redis figures are those of the
    primary owning the namespace's slot. binary: the redstalk program to run instead of
    the one built here (a baseline copy's). tls: None; "token" (redstalk's TLS listener,
    every connection sending the admin token first); "role" (the same with the token of
    a role the roles file scopes to the bench's tubes, so every command passes the
    role check); "stunnel" (the server behind stunnel4)."""

    def __init__(self, name, label, kind, args=(), redis=None, needs=(), extra_if_known=(),
                 cycle_only=False, replica=False, binary=None, cluster=False, tls=None):
        self.name = name
        self.label = label
        self.kind = kind
        self.args = list(args)
        self.redis = redis
        self.needs = list(needs)
        self.extra_if_known = list(extra_if_known)
        self.cycle_only = cycle_only
        self.replica = replica
        self.binary = binary
        self.cluster = cluster
        self.tls = tls


REDIS_ARGS = ["--redis", "{redis}", "--redis-prefix", "bench"]

# The fsync setting of every file-backed peer: beanstalkd's default, named explicitly.
FSYNC_MS = "50"

PEERS = [
    Peer("beanstalkd", "beanstalkd, in memory", "beanstalkd"),
    Peer("beanstalkd-b", "beanstalkd -b (binlog, fsync at most every %s ms: -f %s, its default)"
         % (FSYNC_MS, FSYNC_MS), "beanstalkd", ["-b", "{dir}", "-f", FSYNC_MS]),
    Peer("memory", "redstalk, memory engine", "redstalk"),
    Peer("redis", "redstalk --redis, shared mode (AOF off)", "redstalk", REDIS_ARGS, redis="off",
         extra_if_known=[("--redis-mode", ["--redis-mode", "shared"])]),
    Peer("redis-aof", "redstalk --redis, shared mode (AOF everysec)", "redstalk", REDIS_ARGS,
         redis="everysec", extra_if_known=[("--redis-mode", ["--redis-mode", "shared"])]),
    Peer("leader", "redstalk --redis-mode leader (AOF off)", "redstalk",
         REDIS_ARGS + ["--redis-mode", "leader"], redis="off", needs=["--redis-mode"]),
    Peer("leader-aof", "redstalk --redis-mode leader (AOF everysec)", "redstalk",
         REDIS_ARGS + ["--redis-mode", "leader"], redis="everysec", needs=["--redis-mode"]),
    Peer("redstalk-b", "redstalk -b (write-ahead log, -f %s)" % FSYNC_MS, "redstalk",
         ["-b", "{dir}", "-f", FSYNC_MS], needs=["-b", "-f"]),
    Peer("bullmq", "BullMQ on redis-server (AOF off)", "bullmq", redis="off", cycle_only=True),
    Peer("bullmq-aof", "BullMQ on redis-server (AOF everysec)", "bullmq", redis="everysec",
         cycle_only=True),
]
# The cost of acknowledging only what a replica has (docs/OPERATIONS.md): each Redis
# mode on a Redis with a local replica, without and with --redis-wait-replicas 1.
PEERS[-2:-2] = [
    Peer(name + suffix,
         "%s (AOF everysec, a replica%s)" % (label, ", --redis-wait-replicas 1" if wait else ""),
         "redstalk", REDIS_ARGS + ["--redis-mode", mode] + wait, redis="everysec",
         needs=["--redis-mode"] + (["--redis-wait-replicas"] if wait else []), replica=True)
    for name, label, mode in [("redis-aof", "redstalk --redis, shared mode", "shared"),
                              ("leader-aof", "redstalk --redis-mode leader", "leader")]
    for suffix, wait in [("-r", []), ("-wait", ["--redis-wait-replicas", "1"])]
]
# Each Redis mode on a Redis Cluster of three primaries (issue 23), beside the same
# mode on one redis-server: what routing to the slot's primary costs.
PEERS[-2:-2] = [
    Peer("redis-cluster", "redstalk --redis, shared mode, Redis Cluster of 3 primaries (AOF everysec)",
         "redstalk", REDIS_ARGS + ["--redis-mode", "shared"], redis="everysec", cluster=True,
         needs=["--redis-mode"]),
    Peer("leader-cluster", "redstalk --redis-mode leader, Redis Cluster of 3 primaries (AOF everysec)",
         "redstalk", REDIS_ARGS + ["--redis-mode", "leader"], redis="everysec", cluster=True,
         needs=["--redis-mode"]),
]
# TLS (issue 30): redstalk's TLS listener with a token, unrestricted and under a role;
# beanstalkd behind stunnel4.
PEERS[-2:-2] = [
    Peer("memory-tls", "redstalk, memory engine, TLS listener, auth with the admin token",
         "redstalk", tls="token", needs=["--listen", "--tls-cert"]),
    Peer("memory-tls-role", "redstalk, memory engine, TLS listener, auth with a role's token "
         "(put scoped to bench* tubes: every command checked)",
         "redstalk", tls="role", needs=["--listen", "--tls-cert", "--roles"]),
    Peer("beanstalkd-stunnel", "beanstalkd behind stunnel4 (TLS)", "beanstalkd", tls="stunnel"),
]
PEER_BY_NAME = {p.name: p for p in PEERS}
DEFAULT_PEERS = [p.name for p in PEERS]


BASELINE_SUFFIX = "@base"


def baseline_copy(peer, binary):
    """`peer` (a redstalk configuration) running the redstalk program `binary`."""
    return Peer(peer.name + BASELINE_SUFFIX, peer.label + ", baseline build", peer.kind,
                peer.args, redis=peer.redis, needs=peer.needs, extra_if_known=peer.extra_if_known,
                cycle_only=peer.cycle_only, replica=peer.replica, binary=binary,
                cluster=peer.cluster, tls=peer.tls)


# The token of the TLS peers (a bench's own server: not a secret worth the name).
BENCH_TOKEN = "redstalk-bench-token-0123456789"
ROLE_TOKEN = "redstalk-bench-role-token-0123456789"


def make_certs(tmp):
    """A CA and a server certificate for 127.0.0.1 in `tmp`/tls; the directory."""
    d = os.path.join(tmp, "tls")
    if os.path.exists(os.path.join(d, "server.pem")):
        return d
    os.makedirs(d, exist_ok=True)

    def ssl(*args):
        subprocess.run(["openssl"] + list(args), cwd=d, check=True, capture_output=True)

    ssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=bench ca",
        "-keyout", "ca.key", "-out", "ca.pem")
    with open(os.path.join(d, "server.ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1\n")
    ssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=server", "-keyout", "server.key",
        "-out", "server.csr")
    ssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-days", "2", "-extfile", "server.ext", "-out", "server.pem")
    with open(os.path.join(d, "roles.toml"), "w") as f:
        f.write('[roles.bench]\nput = ["bench*"]\nreserve = ["*"]\nread = ["*"]\nmanage = true\n'
                '[[token]]\nname = "bench"\ntoken = "%s"\nrole = "bench"\n' % ROLE_TOKEN)
    return d


def program(peer, bins):
    """The server program of `peer`: its own binary, else the one in `bins`."""
    return peer.binary or bins[peer.kind]


def help_text(binary):
    """`binary --help`, or "" when it cannot run."""
    try:
        return subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def flag_known(help_text, flag):
    """Whether `flag` (`-b`, `--redis-mode`) is listed in a --help text."""
    return re.search(r"(^|[\s,])%s(?=[\s,=<\[]|$)" % re.escape(flag), help_text, re.M) is not None


def unavailable(peer, bins, redstalk_help):
    """Why `peer` cannot run here (a sentence), or None."""
    if peer.kind == "beanstalkd" and not bins.get("beanstalkd"):
        return "beanstalkd is not on PATH (Debian: apt-get install beanstalkd)"
    if peer.redis and not bins.get("redis-server"):
        return "redis-server is not on PATH (Debian: apt-get install redis-server)"
    if peer.kind == "redstalk":
        unknown = [f for f in peer.needs if not flag_known(redstalk_help, f)]
        if unknown:
            return "this redstalk does not know %s (`redstalk --help`)" % ", ".join(unknown)
    if peer.kind == "bullmq":
        if not bins.get("node") or not bins.get("npm"):
            return "node and npm are not on PATH"
    if peer.tls == "stunnel" and not bins.get("stunnel4"):
        return "stunnel4 is not on PATH (Debian: apt-get install stunnel4)"
    if peer.tls and not shutil.which("openssl"):
        return "openssl is not on PATH (it makes the certificates)"
    return None


def bullmq_ready(bins):
    """Install bench/bullmq's locked packages when node_modules is missing; None when
    ready, else why not."""
    if os.path.isdir(os.path.join(BULLMQ_DIR, "node_modules", "bullmq")):
        return None
    cmd = [bins["npm"], "ci", "--no-audit", "--no-fund", "--loglevel=error"]
    print("installing BullMQ:", " ".join(cmd), "(in bench/bullmq)", flush=True)
    p = subprocess.run(cmd, cwd=BULLMQ_DIR, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        return "npm ci in bench/bullmq failed: %s" % (p.stderr.strip().splitlines() or ["?"])[-1]
    return None


def free_port():
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in AVOID_PORTS:
            return port
    raise RuntimeError("no free port")


def wait_synced(port, proc, what, timeout=15.0):
    """Wait until the replica on `port` reports its link to the primary up."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("the replica of %s exited with %s" % (what, proc.returncode))
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
                s.sendall(b"INFO replication\r\n")
                data = b""
                while b"master_link_status" not in data and len(data) < 65536:
                    chunk = s.recv(4096)
                    if not chunk:
                        break
                    data += chunk
                if b"master_link_status:up" in data:
                    return
        except OSError:
            pass
        time.sleep(0.05)
    raise RuntimeError("the replica of %s did not sync within %.0f s" % (what, timeout))


def redis_call(port, *args, timeout=2.0):
    """One command to the redis-server on `port`; its reply, decoded (enough RESP2 for the
    cluster setup: simple strings, errors, integers, bulk strings)."""
    out = b"*%d\r\n" % len(args)
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(out)
        data = b""
        while b"\r\n" not in data:
            chunk = s.recv(65536)
            if not chunk:
                raise RuntimeError("redis-server on %d closed the connection" % port)
            data += chunk
        head, rest = data.split(b"\r\n", 1)
        kind, body = head[:1], head[1:].decode()
        if kind == b"-":
            raise RuntimeError("redis-server on %d: %s" % (port, body))
        if kind == b":":
            return int(body)
        if kind != b"$":
            return body
        size = int(body)
        while len(rest) < size + 2:
            rest += s.recv(65536)
        return rest[:size].decode()


def key_slot(tag):
    """The Redis Cluster slot of a key with hash tag `tag`: CRC16 (XMODEM) mod 16384."""
    crc = 0
    for byte in tag.encode():
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
            crc &= 0xFFFF
    return crc % 16384


def wait_port(port, proc, what, timeout=15.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("%s exited with %s before listening" % (what, proc.returncode))
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("%s did not listen on port %d within %.0f s" % (what, port, timeout))


class Server:
    """A peer's running processes: `proc` is the server clients talk to (for BullMQ,
    its redis-server), `redis` a private redis-server behind redstalk."""

    def __init__(self, peer, tmp):
        self.peer = PEER_BY_NAME[peer] if isinstance(peer, str) else peer
        self.name = self.peer.name
        self.tmp = tmp
        self.proc = None
        self.redis = None
        self.replica = None
        self.nodes = []  # a cluster's other primaries (processes)
        self.stunnel = None  # the TLS terminator in front of the server (stunnel4)
        self.certs = None  # the TLS peers' certificates (a directory)
        self.redis_port = None
        self.port = None
        self.cmd = None
        self.redis_cmd = None
        self.logs = []

    @property
    def addr(self):
        return "127.0.0.1:%d" % self.port

    def cpu_pids(self):
        """The processes whose CPU time is the server's work."""
        return [p.pid for p in (self.proc, self.redis, self.replica, self.stunnel, *self.nodes)
                if p is not None]

    def runs(self, args):
        """Whether the scenario with these redstalk-bench arguments applies."""
        return not self.peer.cycle_only or args[0] == "cycle"

    def _spawn(self, cmd, log_name):
        log = os.path.join(self.tmp, log_name)
        self.logs.append(log)
        with open(log, "wb") as f:
            return subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)

    def _start_redis(self, bins, replica_of=None, cluster_node=None):
        port = free_port()
        what = "-replica" if replica_of else "-redis" if cluster_node is None else "-node%d" % cluster_node
        rdir = os.path.join(self.tmp, self.name + what + "-data")
        os.makedirs(rdir, exist_ok=True)
        cmd = [bins["redis-server"], "--port", str(port), "--bind", "127.0.0.1",
               "--dir", rdir, "--save", "", "--daemonize", "no", "--logfile", ""]
        if self.peer.redis == "everysec":
            cmd += ["--appendonly", "yes", "--appendfsync", "everysec"]
        else:
            cmd += ["--appendonly", "no"]
        if replica_of:
            cmd += ["--replicaof", "127.0.0.1", str(replica_of)]
        elif cluster_node is not None:
            cmd += ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                    "--cluster-node-timeout", "5000"]
        else:
            self.redis_cmd = cmd
        proc = self._spawn(cmd, self.name + what + ".log")
        wait_port(port, proc, "redis-server for " + self.name)
        if replica_of:
            wait_synced(port, proc, self.name)
        return proc, port

    def _start_cluster(self, bins):
        """Three cluster-enabled primaries, the slots split evenly; `self.redis` and
        `self.redis_port` are the one owning the namespace's slot. The URL."""
        started = [self._start_redis(bins, cluster_node=i) for i in range(3)]
        ports = [port for _, port in started]
        ranges = [(i * 16384 // 3, (i + 1) * 16384 // 3 - 1) for i in range(3)]
        for i, (port, (lo, hi)) in enumerate(zip(ports, ranges)):
            redis_call(port, "CLUSTER", "ADDSLOTSRANGE", lo, hi)
            if i:
                redis_call(port, "CLUSTER", "MEET", "127.0.0.1", ports[0])
        deadline = time.monotonic() + 30
        while not all("cluster_state:ok" in redis_call(p, "CLUSTER", "INFO") for p in ports):
            if time.monotonic() > deadline:
                raise RuntimeError("the cluster for %s did not come up within 30 s" % self.name)
            time.sleep(0.1)
        slot = key_slot(REDIS_ARGS[REDIS_ARGS.index("--redis-prefix") + 1])
        owner = next(i for i, (lo, hi) in enumerate(ranges) if lo <= slot <= hi)
        self.redis, self.redis_port = started[owner]
        self.redis_cmd = list(self.redis.args)
        self.nodes = [proc for i, (proc, _) in enumerate(started) if i != owner]
        return "redis+cluster://" + ",".join("127.0.0.1:%d" % p for p in ports)

    def start(self, bins, redstalk_help=None):
        """Start the peer's processes; `redstalk_help` is the --help text of its redstalk
        (read here when not given), for the flags added only when known."""
        p = self.peer
        if p.kind == "bullmq":
            self.proc, self.port = self._start_redis(bins)
            self.redis_port = self.port
            self.cmd = self.redis_cmd
            self.redis_cmd = None
            return
        url = None
        if p.cluster:
            url = self._start_cluster(bins)
        elif p.redis:
            self.redis, self.redis_port = self._start_redis(bins)
            url = "redis://127.0.0.1:%s/0" % self.redis_port
        if p.replica:
            self.replica, _ = self._start_redis(bins, replica_of=self.redis_port)
        self.port = free_port()
        data = os.path.join(self.tmp, self.name + "-data")
        subst = {"{dir}": data, "{redis}": url}
        if "{dir}" in p.args:
            os.makedirs(data, exist_ok=True)
        args = [subst.get(a, a) for a in p.args]
        if p.extra_if_known and redstalk_help is None:
            redstalk_help = help_text(program(p, bins))
        for flag, more in p.extra_if_known:
            if flag_known(redstalk_help, flag):
                args += more
        if p.tls in ("token", "role"):
            self.certs = make_certs(self.tmp)
            tls_port = free_port()
            args += ["--listen", "127.0.0.1:%d,tls,auth=token" % tls_port,
                     "--tls-cert", os.path.join(self.certs, "server.pem"),
                     "--tls-key", os.path.join(self.certs, "server.key")]
            args += (["--admin-token", BENCH_TOKEN] if p.tls == "token"
                     else ["--roles", os.path.join(self.certs, "roles.toml")])
        self.cmd = [program(p, bins), "-l", "127.0.0.1", "-p", str(self.port)] + args
        self.proc = self._spawn(self.cmd, self.name + ".log")
        wait_port(self.port, self.proc, self.name)
        if p.tls in ("token", "role"):
            self.port = tls_port
        elif p.tls == "stunnel":
            self._start_stunnel(bins)

    def _start_stunnel(self, bins):
        """stunnel4 in front of the server: TLS on a new port, plain to the server's."""
        self.certs = make_certs(self.tmp)
        port = free_port()
        conf = os.path.join(self.tmp, self.name + "-stunnel.conf")
        with open(conf, "w") as f:
            f.write("foreground = yes\npid =\nsyslog = no\ndebug = 3\n"
                    "[beanstalk]\naccept = 127.0.0.1:%d\nconnect = 127.0.0.1:%d\n"
                    "cert = %s\nkey = %s\n"
                    % (port, self.port, os.path.join(self.certs, "server.pem"),
                       os.path.join(self.certs, "server.key")))
        self.stunnel = self._spawn([bins["stunnel4"], conf], self.name + "-stunnel.log")
        wait_port(port, self.stunnel, "stunnel4 for " + self.name)
        self.port = port

    def alive(self):
        return all(p is None or p.poll() is None
                   for p in (self.proc, self.redis, self.replica, self.stunnel, *self.nodes)) \
            and self.proc is not None

    def stop(self):
        for p in (self.stunnel, self.proc, self.redis, self.replica, *self.nodes):
            if p is not None and p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=8)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()

    def log_tail(self):
        out = []
        for log in self.logs:
            try:
                with open(log, "rb") as f:
                    lines = f.read().decode("utf-8", "replace").splitlines()[-15:]
                out.append("%s:\n    %s" % (os.path.basename(log), "\n    ".join(lines)))
            except OSError:
                pass
        return "\n".join(out)

    def command(self, bins, args, duration, extra=(), check_empty=True):
        """The command line of one measurement on this peer."""
        meters = [a for pid in self.cpu_pids() for a in ("--cpu-pid", str(pid))]
        if self.redis_port:
            meters += ["--redis-info", "127.0.0.1:%d" % self.redis_port]
        if self.peer.kind == "bullmq":
            # The cycle scenarios' own options (-c, -s) carry over as they are.
            return ([bins["node"], os.path.join(BULLMQ_DIR, "cycle.js"), "--redis", self.addr]
                    + list(args[1:]) + ["-t", str(duration), "--json", "--label", self.name]
                    + meters + list(extra))
        cmd = [bins["redstalk-bench"]] + list(args) + ["-a", self.addr, "-t", str(duration), "--json",
                                                       "--label", self.name] + meters + list(extra)
        if self.peer.tls:
            cmd += ["--tls-ca", os.path.join(self.certs, "ca.pem")]
        if self.peer.tls in ("token", "role"):
            cmd += ["--auth", BENCH_TOKEN if self.peer.tls == "token" else ROLE_TOKEN]
        if check_empty:
            cmd.append("--check-server-empty")
        return cmd

    def measure(self, bins, args, duration, extra=(), check_empty=True):
        """Run one measurement; returns (json or None, failure text or None, command).
        With `check_empty`, the whole server must be empty at the end (not only the
        run's own tubes)."""
        cmd = self.command(bins, args, duration, extra, check_empty)
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        except subprocess.TimeoutExpired:
            return None, "%s did not finish within 300 s" % os.path.basename(cmd[1 if self.peer.kind == "bullmq" else 0]), cmd
        result = None
        try:
            result = json.loads(p.stdout) if p.stdout.strip() else None
        except json.JSONDecodeError:
            pass
        failure = None
        if p.returncode != 0:
            lines = list(result.get("failures", [])) if result else []
            err = p.stderr.strip()
            if err and not result:
                lines.append(err[-2000:])
            failure = "exit %d: %s" % (p.returncode, "; ".join(lines) or "(no output)")
        if not self.alive():
            failure = (failure + "; " if failure else "") + "the server process died\n" + self.log_tail()
        return result, failure, cmd

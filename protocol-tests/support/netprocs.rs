//! Servers in the hosts of a [`Net`] (support/netfault.rs): a redis-server, a Sentinel
//! set (primary, replica and three sentinels, one per host given), and redstalk
//! instances, each on a fixed port of its host (every host has a port space of its
//! own), killed when dropped.

use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use super::Log;
use super::cluster::claims_slot;
use super::netfault::{Net, NetProc};
use super::sentinel::cli_output;

/// Port every server listens on in its host (each host has a port space of its own).
pub const REDIS_PORT: u16 = 6379;
pub const BEANSTALK_PORT: u16 = 11300;

/// `redis-cli` against `addr`, run in network namespace `ns`.
fn cli_in(ns: &str, addr: SocketAddr, args: &[&str]) -> Option<String> {
    cli_output(
        Command::new("ip")
            .args(["netns", "exec", ns, "redis-cli", "-h"])
            .arg(addr.ip().to_string())
            .args(["-p", &addr.port().to_string()])
            .args(args),
    )
}

/// A redis-server in a host, in a fresh directory removed with it.
pub struct NetRedis {
    pub proc: NetProc,
    pub host: String,
    pub addr: SocketAddr,
    pub dir: std::path::PathBuf,
    ns: String,
}

impl NetRedis {
    /// `redis://` of this server.
    pub fn url(&self) -> String {
        format!("redis://{}/0", self.addr)
    }

    /// One `redis-cli` command, run in the server's host: its output, or `None` when
    /// it failed.
    pub fn cli(&self, args: &[&str]) -> Option<String> {
        cli_in(&self.ns, self.addr, args).map(|s| s.trim_end().to_string())
    }
}

impl Drop for NetRedis {
    fn drop(&mut self) {
        let _ = self.proc.child.kill();
        let _ = self.proc.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Net {
    /// A redis-server in host `host` on [`REDIS_PORT`] with `extra` arguments (no
    /// persistence unless they ask for it), once it answers.
    pub fn redis(&self, host: &str, extra: &[&str]) -> NetRedis {
        self.redis_on(host, REDIS_PORT, extra)
    }

    /// [`Net::redis`] on `port`.
    pub fn redis_on(&self, host: &str, port: u16, extra: &[&str]) -> NetRedis {
        let dir = super::fresh_dir();
        let addr = self.addr(host, port);
        let mut args: Vec<String> = [
            "--port",
            &port.to_string(),
            "--bind",
            &addr.ip().to_string(),
            "--save",
            "",
            "--logfile",
            "redis.log",
            // Clients come from other hosts (namespaces that exist only for the test).
            "--protected-mode",
            "no",
        ]
        .map(String::from)
        .to_vec();
        args.extend(["--dir".to_string(), dir.display().to_string()]);
        if !extra.contains(&"--appendonly") {
            args.extend(["--appendonly".into(), "no".into()]);
        }
        args.extend(extra.iter().map(|s| s.to_string()));
        let program = super::redis::redis_server_path().expect("redis-server");
        let proc = self.spawn(host, program, &args);
        let r = NetRedis {
            proc,
            host: host.to_string(),
            addr,
            dir,
            ns: self.ns(host),
        };
        let start = Instant::now();
        while r.cli(&["PING"]).as_deref() != Some("PONG") {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "redis-server in {host} did not answer:\n{}",
                std::fs::read_to_string(r.dir.join("redis.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        r
    }

    /// redstalk in host `host` on [`BEANSTALK_PORT`] with `args`, once it listens.
    pub fn redstalk(&self, host: &str, args: &[&str]) -> NetProc {
        let addr = self.addr(host, BEANSTALK_PORT);
        let mut all: Vec<String> = vec![
            "-l".into(),
            addr.ip().to_string(),
            "-p".into(),
            BEANSTALK_PORT.to_string(),
        ];
        all.extend(args.iter().map(|s| s.to_string()));
        let p = self.spawn(host, super::redstalk_path(), &all);
        self.wait_listening(host, addr, Duration::from_secs(15), &p.log);
        p
    }

    /// Wait until instance `addr` (reached from host `from`) answers `stats` from a
    /// leader, directly or relayed; the time it took. Panics after `within`, showing
    /// `log`.
    pub fn wait_served(
        &self,
        from: &str,
        addr: SocketAddr,
        within: Duration,
        log: &Log,
    ) -> Duration {
        let start = Instant::now();
        loop {
            if let Ok(s) = self.connect(from, addr, Duration::from_millis(500))
                && let Ok(mut c) = super::client::Client::from_stream(s, "probe")
                && let Ok(r) = c.try_call(b"stats\r\n", Duration::from_millis(1000))
                && r.word() == "OK"
            {
                return start.elapsed();
            }
            assert!(
                start.elapsed() < within,
                "{addr} not served within {within:?}\n{}",
                log.tail()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// The name the sentinels monitor the primary under.
pub const MASTER: &str = "redstalk";
pub const SENTINEL_PORT: u16 = 26379;

/// A primary, its replicas and sentinels in hosts of a net; see [`Net::sentinels`].
pub struct NetSentinels {
    /// `servers[0]` starts as the primary, the others as its replicas.
    pub servers: Vec<NetRedis>,
    sentinels: Vec<(String, NetProc)>,
    net_ns: Vec<String>,
    dir: std::path::PathBuf,
    ips: Vec<std::net::Ipv4Addr>,
}

impl Net {
    /// A primary in host `primary`, a replica in each of `replicas` (in sync), and a
    /// sentinel in each of `sentinel_hosts` (quorum 2, down after 3 s), each knowing the
    /// replicas and the others. `extra` goes to every server.
    pub fn sentinels(
        &self,
        primary: &str,
        replicas: &[&str],
        sentinel_hosts: &[&str],
        extra: &[&str],
    ) -> NetSentinels {
        let p = self.redis(primary, extra);
        let p_ip = p.addr.ip().to_string();
        let port = p.addr.port().to_string();
        let mut args = extra.to_vec();
        args.extend(["--replicaof", &p_ip, &port]);
        let mut servers = vec![p];
        servers.extend(replicas.iter().map(|r| self.redis(r, &args)));
        let dir = super::fresh_dir();
        let mut set = NetSentinels {
            servers,
            sentinels: Vec::new(),
            net_ns: sentinel_hosts.iter().map(|h| self.ns(h)).collect(),
            dir,
            ips: sentinel_hosts.iter().map(|h| self.ip(h)).collect(),
        };
        for i in 1..set.servers.len() {
            set.wait_synced(i, Duration::from_secs(20));
        }
        let knows = format!(
            "slaves={},sentinels={}",
            replicas.len(),
            sentinel_hosts.len()
        );
        for (i, host) in sentinel_hosts.iter().enumerate() {
            let ip = self.ip(host);
            let conf = set.dir.join(format!("sentinel-{i}.conf"));
            std::fs::write(
                &conf,
                format!(
                    "port {SENTINEL_PORT}\nbind {ip}\nprotected-mode no\ndir {dir}\n\
                     logfile {dir}/sentinel-{i}.log\n\
                     sentinel monitor {MASTER} {p_ip} {port} 2\n\
                     sentinel down-after-milliseconds {MASTER} 3000\n\
                     sentinel failover-timeout {MASTER} 3000\n\
                     sentinel parallel-syncs {MASTER} 1\n",
                    dir = set.dir.display(),
                ),
            )
            .expect("write a sentinel's configuration");
            let program = super::redis::redis_server_path().expect("redis-server");
            let proc = self.spawn(
                host,
                program,
                &[conf.display().to_string(), "--sentinel".into()],
            );
            set.sentinels.push((host.to_string(), proc));
        }
        for i in 0..sentinel_hosts.len() {
            let start = Instant::now();
            while !set
                .sentinel_cli(i, &["INFO", "sentinel"])
                .is_some_and(|s| s.contains(&knows))
            {
                assert!(
                    start.elapsed() < Duration::from_secs(30),
                    "sentinel {i} does not know the replica and the others:\n{}",
                    set.diagnostics()
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        set
    }
}

impl NetSentinels {
    /// `redis+sentinel://` naming the three sentinels.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .ips
            .iter()
            .map(|ip| format!("{ip}:{SENTINEL_PORT}"))
            .collect();
        format!("redis+sentinel://{}/{MASTER}", hosts.join(","))
    }

    fn sentinel_cli(&self, i: usize, args: &[&str]) -> Option<String> {
        let addr = SocketAddr::from((self.ips[i], SENTINEL_PORT));
        cli_in(&self.net_ns[i], addr, args)
    }

    /// The address sentinel `i` names as the primary.
    pub fn primary_by(&self, i: usize) -> Option<String> {
        let out = self.sentinel_cli(i, &["SENTINEL", "get-master-addr-by-name", MASTER])?;
        let mut lines = out.lines();
        Some(format!("{}:{}", lines.next()?.trim(), lines.next()?.trim()))
    }

    /// Whether server `i` is a replica with its link to a primary up.
    pub fn is_synced_replica(&self, i: usize) -> bool {
        self.servers[i]
            .cli(&["INFO", "replication"])
            .is_some_and(|s| s.contains("role:slave") && s.contains("master_link_status:up"))
    }

    pub fn wait_synced(&self, i: usize, within: Duration) -> Duration {
        let start = Instant::now();
        while !self.is_synced_replica(i) {
            assert!(
                start.elapsed() < within,
                "server {i} not a synced replica within {within:?}:\n{}",
                self.diagnostics()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        start.elapsed()
    }

    /// Each sentinel's last log lines and each server's role.
    pub fn diagnostics(&self) -> String {
        let mut out = String::new();
        for i in 0..self.sentinels.len() {
            let log = std::fs::read_to_string(self.dir.join(format!("sentinel-{i}.log")))
                .unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            out.push_str(&format!("--- sentinel {i}:\n"));
            for l in &lines[lines.len().saturating_sub(15)..] {
                out.push_str(l);
                out.push('\n');
            }
        }
        for s in &self.servers {
            let role = s.cli(&["ROLE"]).unwrap_or_else(|| "(no answer)".into());
            out.push_str(&format!(
                "--- server in {}: ROLE {}\n",
                s.host,
                role.replace('\n', " ")
            ));
        }
        out
    }
}

impl Drop for NetSentinels {
    fn drop(&mut self) {
        self.sentinels.clear();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A Redis Cluster in hosts of a net; see [`Net::cluster`].
pub struct NetCluster {
    pub nodes: Vec<NetRedis>,
}

impl Net {
    /// A Redis Cluster (node timeout 2 s): a node per `(host, port)` of `nodes` (cluster
    /// bus on port + 10000). The first three are primaries of slots 0-5460, 5461-10922
    /// and 10923-16383; each later node `(host, port, of)` replicates primary `of`.
    pub fn cluster(
        &self,
        primaries: &[(&str, u16)],
        replicas: &[(&str, u16, usize)],
    ) -> NetCluster {
        let node = |host: &str, port: u16| {
            let bus = (port + 10000).to_string();
            let conf = format!("nodes-{port}.conf");
            self.redis_on(
                host,
                port,
                &[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-port",
                    &bus,
                    "--cluster-config-file",
                    &conf,
                    "--cluster-node-timeout",
                    "2000",
                    "--repl-diskless-sync-delay",
                    "0",
                    "--appendonly",
                    "yes",
                    "--appendfsync",
                    "always",
                ],
            )
        };
        let mut nodes: Vec<NetRedis> = primaries.iter().map(|(h, p)| node(h, *p)).collect();
        nodes.extend(replicas.iter().map(|(h, p, _)| node(h, *p)));
        let c = NetCluster { nodes };
        let ranges = [("0", "5460"), ("5461", "10922"), ("10923", "16383")];
        for (i, (from, to)) in ranges.iter().enumerate() {
            c.run(i, &["CLUSTER", "ADDSLOTSRANGE", from, to]);
        }
        let first = c.nodes[0].addr;
        let (ip, port, bus) = (
            first.ip().to_string(),
            first.port().to_string(),
            (first.port() + 10000).to_string(),
        );
        for i in 1..c.nodes.len() {
            c.run(i, &["CLUSTER", "MEET", &ip, &port, &bus]);
        }
        let n = c.nodes.len();
        c.wait("every node knows every node", || {
            (0..n).all(|i| {
                c.nodes[i]
                    .cli(&["CLUSTER", "NODES"])
                    .is_some_and(|s| s.lines().filter(|l| !l.contains("handshake")).count() == n)
            })
        });
        for (k, (_, _, of)) in replicas.iter().enumerate() {
            let id = c.nodes[*of].cli(&["CLUSTER", "MYID"]).unwrap_or_default();
            c.run(primaries.len() + k, &["CLUSTER", "REPLICATE", id.trim()]);
        }
        c.wait("cluster_state:ok everywhere, every replica linked", || {
            (0..n).all(|i| {
                c.nodes[i]
                    .cli(&["CLUSTER", "INFO"])
                    .is_some_and(|s| s.contains("cluster_state:ok"))
            }) && (primaries.len()..n).all(|i| {
                c.nodes[i]
                    .cli(&["INFO", "replication"])
                    .is_some_and(|s| s.contains("master_link_status:up"))
            })
        });
        c
    }
}

impl NetCluster {
    fn run(&self, i: usize, args: &[&str]) {
        let out = self.nodes[i].cli(args);
        assert!(
            out.as_deref().is_some_and(|o| !o.starts_with("ERR")),
            "node {i}: {args:?}: {out:?}"
        );
    }

    fn wait(&self, what: &str, cond: impl Fn() -> bool) {
        let start = Instant::now();
        while !cond() {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "{what}: not within 30 s\n{}",
                self.diagnostics()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `redis+cluster://` naming every node.
    pub fn url(&self) -> String {
        let seeds: Vec<String> = self.nodes.iter().map(|n| n.addr.to_string()).collect();
        format!("redis+cluster://{}", seeds.join(","))
    }

    /// Whether node `i` says it is the primary of `slot`.
    pub fn claims(&self, i: usize, slot: u16) -> bool {
        self.nodes[i]
            .cli(&["CLUSTER", "NODES"])
            .is_some_and(|nodes| claims_slot(&nodes, slot))
    }

    /// Each node's view and log tail.
    pub fn diagnostics(&self) -> String {
        let mut out = String::new();
        for (i, n) in self.nodes.iter().enumerate() {
            let nodes = n
                .cli(&["CLUSTER", "NODES"])
                .unwrap_or_else(|| "(no answer)".into());
            out.push_str(&format!(
                "--- node {i} ({} in {}):\n{nodes}\n",
                n.addr, n.host
            ));
        }
        out
    }
}

/// The Redis Cluster slot of the keys of namespace `prefix` (`{prefix}`).
pub fn slot_of_prefix(prefix: &str) -> u16 {
    redstalk::redis::keys::slot_of(format!("{{{prefix}}}").as_bytes())
}

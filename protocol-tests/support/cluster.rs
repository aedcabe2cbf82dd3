//! A private Redis Cluster for one test: six `redis-server --cluster-enabled yes` on free
//! ports (each with a free cluster bus port, its own directory and `nodes.conf`), three
//! primaries holding slots 0-5460, 5461-10922, 10923-16383 and one replica each, built by
//! plain commands (ADDSLOTSRANGE, MEET, REPLICATE) rather than `redis-cli --cluster
//! create`, which waits seconds for joins and the diskless sync delay
//! (docs/plans/redis-cluster.md, section 11). Killed when dropped. Tests never touch the
//! Redis that may run on 6379.
//!
//! [`Cluster::start_tls`] makes the same cluster listening with TLS only (`--port 0`,
//! `--tls-port`, `--tls-cluster yes`, `--tls-replication yes`, client certificates
//! required): its URL is `rediss+cluster://`, and the harness's own `redis-cli` calls go
//! over TLS with the test's client certificate.
//!
//! Node timeout 2000 ms: with 1 s the loaded CI machine saw false failovers of Sentinel
//! (sentinel.rs); a failover then takes about 3 s.

use std::time::{Duration, Instant};

use super::certs::Certs;
use super::free_port;
use super::redis::RedisServer;
use super::sentinel::cli;

/// How long a node may not answer before the others fail it over.
pub const NODE_TIMEOUT_MS: u64 = 2000;

/// The slot ranges of the three primaries, in node order.
pub const SLOTS: [(u16, u16); 3] = [(0, 5460), (5461, 10922), (10923, 16383)];

/// Six nodes: `nodes[0..3]` start as the primaries of [`SLOTS`], `nodes[3 + i]` as the
/// replica of `nodes[i]`.
pub struct Cluster {
    pub nodes: Vec<RedisServer>,
    /// Each node's cluster bus port.
    pub bus_ports: Vec<u16>,
    /// `redis-cli`'s TLS arguments, for a cluster that listens with TLS only.
    cli_tls: Option<Vec<String>>,
}

/// A cluster node's `CLUSTER INFO` field, or `None` when it does not answer.
pub fn info_field(port: u16, field: &str) -> Option<String> {
    field_of(&cli(port, &["CLUSTER", "INFO"])?, field)
}

/// The value of `field` in `CLUSTER INFO`'s output `info`.
fn field_of(info: &str, field: &str) -> Option<String> {
    info.lines().find_map(|l| {
        l.trim()
            .strip_prefix(&format!("{field}:"))
            .map(str::to_string)
    })
}

/// Poll `cond` every 20 ms until it holds, for at most `within`.
fn wait_until(what: &str, within: Duration, mut cond: impl FnMut() -> bool) -> Result<(), String> {
    let start = Instant::now();
    while !cond() {
        if start.elapsed() > within {
            return Err(format!("{what}: not within {} s", within.as_secs()));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

impl Cluster {
    /// Start and join the six nodes; returns once every node says `cluster_state:ok`
    /// and every replica's link to its primary is up.
    pub fn start() -> Result<Cluster, String> {
        Self::start_nodes(&[], None)
    }

    /// [`Cluster::start`] listening with TLS only, on certificates from `certs`
    /// (the server certificate for the nodes, on every link, and the client one for
    /// `redis-cli`).
    pub fn start_tls(certs: &Certs) -> Result<Cluster, String> {
        let files = [
            ("--tls-cert-file", "server.pem"),
            ("--tls-key-file", "server.key"),
            ("--tls-ca-cert-file", "ca.pem"),
        ];
        let mut node_tls: Vec<String> = files
            .iter()
            .flat_map(|(opt, file)| [opt.to_string(), certs.path(file)])
            .collect();
        node_tls.extend(["--tls-cluster", "yes", "--tls-replication", "yes"].map(String::from));
        let cli_tls = vec![
            "--tls".to_string(),
            "--cacert".into(),
            certs.path("ca.pem"),
            "--cert".into(),
            certs.path("client.pem"),
            "--key".into(),
            certs.path("client.key"),
        ];
        Self::start_nodes(&node_tls, Some(cli_tls))
    }

    fn start_nodes(tls: &[String], cli_tls: Option<Vec<String>>) -> Result<Cluster, String> {
        let mut nodes = Vec::with_capacity(6);
        let mut bus_ports = Vec::with_capacity(6);
        for _ in 0..6 {
            let bus = free_port();
            let bus_arg = bus.to_string();
            let timeout = NODE_TIMEOUT_MS.to_string();
            let mut args = vec![
                "--cluster-enabled",
                "yes",
                "--cluster-port",
                &bus_arg,
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                &timeout,
                "--repl-diskless-sync-delay",
                "0",
                // In the node's directory (`--dir` comes first): its elections and
                // failure reports, for `diagnostics`.
                "--logfile",
                "redis.log",
            ];
            args.extend(tls.iter().map(String::as_str));
            nodes.push(match cli_tls {
                Some(_) => RedisServer::start_tls_only(&args)?,
                None => RedisServer::start_with(&args)?,
            });
            bus_ports.push(bus);
        }
        let cluster = Cluster {
            nodes,
            bus_ports,
            cli_tls,
        };
        cluster.join()?;
        Ok(cluster)
    }

    fn port(&self, i: usize) -> u16 {
        self.nodes[i].port
    }

    /// `redis-cli` against the node on `port` (over TLS on a TLS cluster); its output,
    /// or `None` when it fails.
    pub fn cli_at(&self, port: u16, args: &[&str]) -> Option<String> {
        match &self.cli_tls {
            None => cli(port, args),
            Some(tls) => {
                let mut all: Vec<&str> = tls.iter().map(String::as_str).collect();
                all.extend(args);
                cli(port, &all)
            }
        }
    }

    /// `redis-cli` against node `i`.
    pub fn cli(&self, i: usize, args: &[&str]) -> Option<String> {
        self.cli_at(self.port(i), args)
    }

    /// Node `i`'s `CLUSTER INFO` field, or `None` when it does not answer.
    pub fn info(&self, i: usize, field: &str) -> Option<String> {
        field_of(&self.cli(i, &["CLUSTER", "INFO"])?, field)
    }

    /// A node's id (`CLUSTER MYID`).
    pub fn id(&self, i: usize) -> Result<String, String> {
        self.cli(i, &["CLUSTER", "MYID"])
            .map(|s| s.trim().to_string())
            .ok_or_else(|| format!("node {i}: no CLUSTER MYID"))
    }

    fn run(&self, i: usize, args: &[&str]) -> Result<(), String> {
        match self.cli(i, args) {
            Some(out) if !out.starts_with("ERR") => Ok(()),
            other => Err(format!("node {i}: {args:?}: {other:?}")),
        }
    }

    fn join(&self) -> Result<(), String> {
        // Distinct config epochs before the nodes meet, as `redis-cli --cluster create`
        // gives them: left at 0, the nodes settle their collisions by bumping epochs
        // after meeting, and a primary killed before every node heard its bump left its
        // replica asking with the old epoch, denied by the node that had heard it, for
        // good ("Failover auth denied ... slot 0 epoch (4) > reqEpoch (1)", seen once in
        // the gate).
        for i in 0..6 {
            let epoch = (i + 1).to_string();
            self.run(i, &["CLUSTER", "SET-CONFIG-EPOCH", &epoch])?;
        }
        for (i, (from, to)) in SLOTS.iter().enumerate() {
            let (from, to) = (from.to_string(), to.to_string());
            self.run(i, &["CLUSTER", "ADDSLOTSRANGE", &from, &to])?;
        }
        let (first, first_bus) = (self.port(0).to_string(), self.bus_ports[0].to_string());
        for i in 1..6 {
            self.run(i, &["CLUSTER", "MEET", "127.0.0.1", &first, &first_bus])?;
        }
        let knows_all = |i: usize| {
            self.cli(i, &["CLUSTER", "NODES"])
                .is_some_and(|n| n.lines().filter(|l| !l.contains("handshake")).count() == 6)
        };
        wait_until(
            "every node knows the 6 nodes",
            Duration::from_secs(20),
            || (0..6).all(knows_all),
        )?;
        for i in 0..3 {
            let primary = self.id(i)?;
            self.run(3 + i, &["CLUSTER", "REPLICATE", &primary])?;
        }
        wait_until(
            "cluster_state:ok on every node",
            Duration::from_secs(30),
            || (0..6).all(|i| self.info(i, "cluster_state").as_deref() == Some("ok")),
        )?;
        wait_until("every replica linked", Duration::from_secs(30), || {
            (3..6).all(|i| {
                self.cli(i, &["INFO", "replication"])
                    .is_some_and(|r| r.contains("master_link_status:up"))
            })
        })?;
        wait_until(
            "every node sees the same config epoch of every node",
            Duration::from_secs(30),
            || self.epochs_agree(),
        )
    }

    /// Whether the six nodes' `CLUSTER NODES` give each node the same config epoch (its
    /// seventh field), so a failover's vote finds no stale epoch anywhere.
    fn epochs_agree(&self) -> bool {
        let mut seen: std::collections::HashMap<String, String> = Default::default();
        for i in 0..6 {
            let Some(nodes) = self.cli(i, &["CLUSTER", "NODES"]) else {
                return false;
            };
            for line in nodes.lines() {
                let fields: Vec<&str> = line.split_whitespace().collect();
                let (Some(id), Some(epoch)) = (fields.first(), fields.get(6)) else {
                    return false;
                };
                let first = seen
                    .entry(id.to_string())
                    .or_insert_with(|| epoch.to_string());
                if first != epoch {
                    return false;
                }
            }
        }
        seen.len() == 6
    }

    /// The seeds of a `redis+cluster://` URL: every node's address.
    pub fn seeds(&self) -> String {
        self.nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect::<Vec<_>>()
            .join(",")
    }
}

impl Cluster {
    /// The `redis+cluster://` URL of the whole cluster (every node a seed).
    pub fn url(&self) -> String {
        let scheme = match self.cli_tls {
            Some(_) => "rediss",
            None => "redis",
        };
        format!("{scheme}+cluster://{}", self.seeds())
    }

    /// The node that serves `slot` as its primary, by its own account (`CLUSTER
    /// NODES`, its `myself` line), among the nodes that answer.
    pub fn primary_of(&self, slot: u16) -> Option<usize> {
        (0..self.nodes.len()).find(|&i| {
            self.cli(i, &["CLUSTER", "NODES"])
                .is_some_and(|nodes| claims_slot(&nodes, slot))
        })
    }

    /// The nodes that are primaries now, by their own account.
    pub fn primaries(&self) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&i| {
                self.cli(i, &["ROLE"])
                    .is_some_and(|r| r.lines().next() == Some("master"))
            })
            .collect()
    }

    /// Every key of node `i` (SCAN).
    pub fn keys_of(&self, i: usize) -> Vec<String> {
        self.cli(i, &["--scan"])
            .map(|out| out.lines().map(str::to_string).collect())
            .unwrap_or_default()
    }

    /// How many keys node `i` holds in `slot`.
    pub fn keys_in_slot(&self, i: usize, slot: u16) -> u64 {
        self.cli(i, &["CLUSTER", "COUNTKEYSINSLOT", &slot.to_string()])
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0)
    }

    /// `CLUSTER FAILOVER` on the replica of primary `old` (the one that says so in
    /// `INFO replication`); returns the replica's index once it serves `old`'s slots.
    pub fn manual_failover(&self, old: usize) -> Result<usize, String> {
        let port = format!("master_port:{}", self.port(old));
        let replica = (0..self.nodes.len())
            .find(|&i| {
                i != old
                    && self
                        .cli(i, &["INFO", "replication"])
                        .is_some_and(|r| r.lines().any(|l| l.trim() == port))
            })
            .ok_or("no replica of that primary")?;
        self.run(replica, &["CLUSTER", "FAILOVER"])?;
        wait_until("the replica takes over", Duration::from_secs(30), || {
            self.cli(replica, &["ROLE"])
                .is_some_and(|r| r.lines().next() == Some("master"))
        })?;
        Ok(replica)
    }

    /// Move `slot` from primary `from` to primary `to` as `redis-cli --cluster reshard`
    /// does: IMPORTING on `to`, MIGRATING on `from`, MIGRATE of its keys 100 at a time,
    /// then SETSLOT NODE on both (gossip tells the others). Returns how many keys moved.
    pub fn migrate_slot(&self, slot: u16, from: usize, to: usize) -> Result<usize, String> {
        let (slot_s, from_id, to_id) = (slot.to_string(), self.id(from)?, self.id(to)?);
        self.run(to, &["CLUSTER", "SETSLOT", &slot_s, "IMPORTING", &from_id])?;
        self.run(from, &["CLUSTER", "SETSLOT", &slot_s, "MIGRATING", &to_id])?;
        let to_port = self.port(to).to_string();
        let mut moved = 0;
        loop {
            let keys = self
                .cli(from, &["CLUSTER", "GETKEYSINSLOT", &slot_s, "100"])
                .ok_or("GETKEYSINSLOT")?;
            let keys: Vec<&str> = keys.lines().filter(|k| !k.is_empty()).collect();
            if keys.is_empty() {
                break;
            }
            let mut args = vec!["MIGRATE", "127.0.0.1", &to_port, "", "0", "5000", "KEYS"];
            args.extend(&keys);
            self.run(from, &args)?;
            moved += keys.len();
        }
        self.run(to, &["CLUSTER", "SETSLOT", &slot_s, "NODE", &to_id])?;
        self.run(from, &["CLUSTER", "SETSLOT", &slot_s, "NODE", &to_id])?;
        Ok(moved)
    }

    /// What every node that answers says of the cluster (CLUSTER NODES, replication),
    /// and the last lines of every node's log, for a failure's message (seen in CI once:
    /// a dead primary's replica that never won an election, its cause unknown).
    pub fn diagnostics(&self) -> String {
        let mut out = String::new();
        for (i, n) in self.nodes.iter().enumerate() {
            let nodes = self
                .cli(i, &["CLUSTER", "NODES"])
                .unwrap_or_else(|| "(no answer)".into());
            let repl = self.cli(i, &["INFO", "replication"]).unwrap_or_default();
            let role: Vec<&str> = repl
                .lines()
                .filter(|l| {
                    l.starts_with("role")
                        || l.starts_with("master_link")
                        || l.starts_with("master_port")
                })
                .collect();
            out.push_str(&format!(
                "node {i} (port {}): {role:?}\n{nodes}\nits log, last lines:\n{}\n",
                n.port,
                n.log_tail(12)
            ));
        }
        out
    }

    /// Wait until every node that answers says `cluster_state:ok`.
    pub fn wait_ok(&self, within: Duration) -> Result<Duration, String> {
        let start = Instant::now();
        wait_until("cluster_state:ok", within, || {
            (0..self.nodes.len())
                .filter(|&i| self.nodes[i].pid().is_some())
                .all(|i| self.info(i, "cluster_state").as_deref() == Some("ok"))
        })?;
        Ok(start.elapsed())
    }
}

/// Whether `nodes` (a node's `CLUSTER NODES`) says that node itself (`myself`) is the
/// primary of `slot`.
pub fn claims_slot(nodes: &str, slot: u16) -> bool {
    nodes.lines().any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.len() > 8
            && f[2].contains("myself")
            && f[2].contains("master")
            && f[8..].iter().any(|r| covers(r, slot))
    })
}

/// Whether a `CLUSTER NODES` slot field (`N` or `A-B`; migrations `[..]` aside) holds
/// `slot`.
pub fn covers(range: &str, slot: u16) -> bool {
    let parse = |s: &str| s.parse::<u16>().ok();
    match range.split_once('-') {
        Some((a, b)) => {
            matches!((parse(a), parse(b)), (Some(a), Some(b)) if (a..=b).contains(&slot))
        }
        None => parse(range) == Some(slot),
    }
}

//! The target of a `redis+cluster://` URL: the primary that owns the namespace's hash
//! slot (every key of a namespace is under the tag `{P}`, so one slot, one node).
//!
//! Found anew at every connection: the seeds and the nodes learned from earlier answers
//! are asked `CLUSTER SHARDS` in parallel (each within
//! [`ASK_TIMEOUT`](super::ASK_TIMEOUT), as sentinels are asked); every answer names the
//! online master of the shard holding the slot, and the addresses named are tried most
//! named first (the last MOVED reply's address breaks a tie). A candidate must answer
//! ROLE as a primary and continue the replication history of the primary used before
//! ([`Lineage`]): a primary restarted empty with its nodes.conf, before the cluster
//! failed it over, reclaims its slot with a fresh replication id and is refused. Once a majority of the nodes asked has answered, the
//! others are not waited for. The answer is reused, by every target of the process
//! ([`Views`], shared through `super::Lookups`), for the connections made within
//! [`VIEW_REUSE`] after it (each candidate still proves itself), unless a MOVED reply
//! came since or no candidate proved itself. The primary taken is recorded for
//! `/metrics` (`placement`), and, in leader mode (a target made
//! [`SlotOwner::with_leader_lease`]), its `cluster-node-timeout` is checked against the
//! lease once per primary.
//!
//! Why not redis-rs' `ClusterConnection` (docs/plans/redis-cluster.md, section 4): it
//! re-sends a whole pipeline when any reply is a redirect or after an I/O error, so a
//! script that ran could run twice. Here redis-rs only ever connects to one node, and
//! `connection.rs` decides what may be sent again.
//!
//! Invariant: no URL, password or key in messages (addresses and the prefix only).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::{Client, IntoConnectionInfo, RedisConnectionInfo, RedisResult, TlsCertificates, Value};

use super::lineage::Lineage;
use super::{HostList, Lookups, address, ask_config, client, no_primary};
use crate::redis::keys::slot_of;
use crate::redis::placement::{Placements, Recorded, Topology};
use crate::util::lock;

/// At most this many nodes are remembered beyond the seeds (a cluster's other nodes).
const LEARNED_MAX: usize = 64;

/// How long the nodes' answer is reused for the next connections (each still proves
/// its primary): a start or a reconnection opens several connections at once, and over
/// TLS asking every node is a handshake each (seen: a start on a loaded machine took
/// more than the 1 s a connection may take when every connection asked all six).
const VIEW_REUSE: Duration = Duration::from_secs(2);

type Addr = (String, u16);

/// An address the nodes name as the slot's primary, with the node ids of its shard.
type Candidate = (Addr, Vec<String>);

/// What the nodes of a cluster (its seeds) named for a slot, and when.
#[derive(Debug)]
struct View {
    slot: u16,
    seeds: Vec<Addr>,
    asked: Instant,
    candidates: Vec<Candidate>,
}

/// The views of one process, shared by its targets (`super::Lookups`): the schema step,
/// the store and the lease each have their own connector, and at a start or a failover
/// they all connect within moments. Its lock is never held across an `.await`.
#[derive(Debug, Default)]
pub struct Views(Mutex<Vec<View>>);

impl Views {
    /// The candidates the nodes named for `slot` (asked through `seeds`), if that was
    /// less than [`VIEW_REUSE`] ago.
    fn recent(&self, slot: u16, seeds: &[Addr]) -> Option<Vec<Candidate>> {
        let views = lock(&self.0);
        let view = views.iter().find(|v| v.slot == slot && v.seeds == seeds)?;
        (view.asked.elapsed() < VIEW_REUSE).then(|| view.candidates.clone())
    }

    /// Keep `candidates` (just asked) for `slot` and `seeds`, or forget what was kept
    /// (`None`).
    fn keep(&self, slot: u16, seeds: &[Addr], candidates: Option<Vec<Candidate>>) {
        let mut views = lock(&self.0);
        views.retain(|v| !(v.slot == slot && v.seeds == seeds));
        if let Some(candidates) = candidates {
            views.push(View {
                slot,
                seeds: seeds.to_vec(),
                asked: Instant::now(),
                candidates,
            });
        }
    }
}

/// The primary of one slot of a Redis Cluster, asked for at every connection.
pub struct SlotOwner {
    seeds: Vec<Addr>,
    learned: Mutex<Vec<Addr>>,
    /// The address of the last MOVED reply, if any.
    hint: Mutex<Option<Addr>>,
    /// The node ids of that primary's shard (itself and its replicas).
    shard: Mutex<Vec<String>>,
    prefix: String,
    slot: u16,
    node: RedisConnectionInfo,
    secure: bool,
    certs: Option<TlsCertificates>,
    lineage: Lineage,
    /// In leader mode, the lease: each primary's `cluster-node-timeout` is checked
    /// against it (docs/plans/redis-cluster.md, section 5).
    leader_lease: Option<Duration>,
    /// Where the process's connectors record the primary they use.
    placements: Arc<Placements>,
    /// The process's last answers of the nodes.
    views: Arc<Views>,
}

impl SlotOwner {
    pub(super) fn new(
        hosts: HostList,
        secure: bool,
        certs: Option<TlsCertificates>,
        prefix: &str,
        lookups: &Lookups,
    ) -> SlotOwner {
        SlotOwner {
            node: hosts.node_settings(0),
            seeds: hosts.hosts,
            learned: Mutex::new(Vec::new()),
            hint: Mutex::new(None),
            shard: Mutex::new(Vec::new()),
            prefix: prefix.to_string(),
            slot: slot_of(format!("{{{prefix}}}").as_bytes()),
            secure,
            certs,
            lineage: Lineage::default(),
            leader_lease: None,
            placements: lookups.placements.clone(),
            views: lookups.views.clone(),
        }
    }

    /// Check every primary's `cluster-node-timeout` against the leader `lease`.
    pub(super) fn with_leader_lease(mut self, lease: Duration) -> SlotOwner {
        self.leader_lease = Some(lease);
        self
    }

    /// The slot every key of the namespace hashes to.
    pub fn slot(&self) -> u16 {
        self.slot
    }

    /// Remember the `HOST:PORT` of a MOVED reply.
    pub fn moved_to(&self, addr: &str) {
        if let Some((host, port)) = addr.rsplit_once(':')
            && let Ok(port) = port.parse()
        {
            let host = host.trim_start_matches('[').trim_end_matches(']');
            *lock(&self.hint) = Some((host.to_string(), port));
        }
    }

    fn client_for(&self, (host, port): Addr) -> RedisResult<Client> {
        let info = address(self.secure, host, port)
            .into_connection_info()?
            .set_redis_settings(self.node.clone());
        client(info, self.certs.as_ref())
    }

    /// A client for the slot's primary (see the module's comment).
    pub async fn primary(&self) -> RedisResult<Client> {
        let mut refused = Vec::new();
        if let Some(view) = self.recent_view() {
            if let Some(primary) = self.first_verified(view, &mut refused).await? {
                return Ok(primary);
            }
            self.keep_view(None);
        }
        let (candidates, errors) = self.candidates().await;
        refused.extend(errors);
        self.keep_view(Some(candidates.clone()));
        if let Some(primary) = self.first_verified(candidates, &mut refused).await? {
            return Ok(primary);
        }
        self.keep_view(None);
        Err(no_primary(format!(
            "no node of the cluster serves slot {} (prefix {:?}) as its primary \
             (failover under way?){}",
            self.slot,
            self.prefix,
            if refused.is_empty() {
                String::new()
            } else {
                format!("; {}", refused.join("; "))
            }
        )))
    }

    /// The candidates of the last time the nodes were asked, if that was less than
    /// [`VIEW_REUSE`] ago and no MOVED reply came since.
    fn recent_view(&self) -> Option<Vec<Candidate>> {
        if lock(&self.hint).is_some() {
            return None;
        }
        self.views.recent(self.slot, &self.seeds)
    }

    /// Keep `candidates` (just asked) for the next connections to the slot, or forget
    /// what was kept (`None`: no candidate proved itself).
    fn keep_view(&self, candidates: Option<Vec<Candidate>>) {
        self.views.keep(self.slot, &self.seeds, candidates);
    }

    /// The first of `candidates` that proves itself the slot's primary (ROLE, the
    /// replication history), or `None`; why each other one was refused goes to
    /// `refused`.
    async fn first_verified(
        &self,
        candidates: Vec<Candidate>,
        refused: &mut Vec<String>,
    ) -> RedisResult<Option<Client>> {
        let config = ask_config();
        for (addr, shard) in candidates {
            let primary = self.client_for(addr.clone())?;
            let named = format!("{}:{} the cluster names", addr.0, addr.1);
            self.follow_a_move(&shard, &named);
            let checked = async {
                let mut c = primary
                    .get_multiplexed_async_connection_with_config(&config)
                    .await?;
                self.lineage.verify(&mut c, &named).await?;
                if let Some(lease) = self.leader_lease {
                    let primary = format!("{}:{}", addr.0, addr.1);
                    self.placements
                        .check_node_timeout(&mut c, &primary, lease)
                        .await;
                }
                Ok::<(), redis::RedisError>(())
            };
            match checked.await {
                Ok(()) => {
                    *lock(&self.shard) = shard;
                    self.note_owner(addr);
                    return Ok(Some(primary));
                }
                Err(e) => refused.push(format!("{}:{}: {e}", addr.0, addr.1)),
            }
        }
        Ok(None)
    }

    /// A candidate of another shard than the last primary's (none of its nodes was in
    /// that shard): the slot was moved there with its keys, so that shard's own
    /// replication history starts anew. Within one shard (a failover, a primary
    /// restarted with its nodes.conf) the history must go on.
    fn follow_a_move(&self, shard: &[String], named: &str) {
        let last = lock(&self.shard);
        if !last.is_empty() && !shard.iter().any(|id| last.contains(id)) {
            tracing::warn!(
                slot = self.slot,
                "redis cluster: the slot moved to another shard (the primary {named}); \
                 its replication history starts anew"
            );
            self.lineage.forget();
        }
    }

    /// The addresses the nodes name as the slot's primary, most named first, each
    /// with the node ids of its shard, and what went wrong asking.
    async fn candidates(&self) -> (Vec<Candidate>, Vec<String>) {
        let hint = lock(&self.hint).take();
        let mut asked: Vec<Addr> = self.seeds.clone();
        for a in lock(&self.learned).iter().chain(hint.iter()) {
            if !asked.contains(a) {
                asked.push(a.clone());
            }
        }
        let config = ask_config();
        let asks = asked.iter().map(|addr| {
            let config = config.clone();
            async move {
                let ask = async {
                    let c = self.client_for(addr.clone())?;
                    let mut c = c
                        .get_multiplexed_async_connection_with_config(&config)
                        .await?;
                    redis::cmd("CLUSTER")
                        .arg("SHARDS")
                        .query_async::<Value>(&mut c)
                        .await
                };
                (ask.await, addr)
            }
        });
        // Once a majority of the nodes asked has answered, the rest are not waited for
        // (nor their handshakes paid for, over TLS): a slow node does not hold up the
        // connection, and the most named owner stands.
        let mut pending: futures_util::stream::FuturesUnordered<_> = asks.collect();
        let enough = asked.len() / 2 + 1;
        let mut named: Vec<(Addr, usize, Vec<String>)> = Vec::new();
        let mut errors = Vec::new();
        let mut seen = Vec::new();
        let mut answered = 0;
        while answered < enough
            && let Some((answer, from)) = futures_util::StreamExt::next(&mut pending).await
        {
            match answer {
                Ok(shards) => {
                    answered += 1;
                    let view = Shards::read(&shards, self.slot, self.secure);
                    seen.extend(view.nodes);
                    if let Some(owner) = view.owner {
                        match named.iter_mut().find(|(a, _, _)| *a == owner) {
                            Some((_, n, _)) => *n += 1,
                            None => named.push((owner, 1, view.shard)),
                        }
                    }
                }
                Err(e) => errors.push(format!("{}:{}: {e}", from.0, from.1)),
            }
        }
        self.learn(seen);
        // Most named first; the MOVED reply's address first among equals.
        named.sort_by_key(|(a, n, _)| (std::cmp::Reverse(*n), Some(a) != hint.as_ref()));
        let candidates = named.into_iter().map(|(a, _, shard)| (a, shard)).collect();
        (candidates, errors)
    }

    fn learn(&self, seen: Vec<Addr>) {
        let mut learned = lock(&self.learned);
        for a in seen {
            if !self.seeds.contains(&a) && !learned.contains(&a) && learned.len() < LEARNED_MAX {
                learned.push(a);
            }
        }
    }

    /// Log where the namespace lives: at the process's first connection, and whenever
    /// its primary changes (once per process, whichever connector saw it first).
    fn note_owner(&self, addr: Addr) {
        let primary = format!("{}:{}", addr.0, addr.1);
        let tag = format!("{{{}}}", self.prefix);
        let recorded =
            self.placements
                .record(Topology::Cluster, &self.prefix, Some(self.slot), &primary);
        match recorded {
            Recorded::Same => {}
            Recorded::First => tracing::info!(
                prefix = %self.prefix, %tag, slot = self.slot, %primary,
                "redis cluster: the namespace lives in one slot, on this primary"
            ),
            Recorded::Changed { previous } => tracing::warn!(
                prefix = %self.prefix, %tag, slot = self.slot, %primary, %previous,
                "redis cluster: the namespace's slot has a new primary"
            ),
        }
    }
}

/// What one node's `CLUSTER SHARDS` says: the online master of the shard holding the
/// slot, the node ids of that shard, and every node's address.
#[derive(Debug, Default, PartialEq)]
struct Shards {
    owner: Option<Addr>,
    shard: Vec<String>,
    nodes: Vec<Addr>,
}

impl Shards {
    fn read(reply: &Value, slot: u16, secure: bool) -> Shards {
        let mut out = Shards::default();
        let Value::Array(shards) = reply else {
            return out;
        };
        for shard in shards {
            let holds = match field(shard, "slots") {
                Some(Value::Array(bounds)) => bounds.chunks(2).any(|b| match b {
                    [from, to] => match (int(from), int(to)) {
                        (Some(f), Some(t)) => (f..=t).contains(&i64::from(slot)),
                        _ => false,
                    },
                    _ => false,
                }),
                _ => false,
            };
            let Some(Value::Array(nodes)) = field(shard, "nodes") else {
                continue;
            };
            for node in nodes {
                let Some(addr) = node_addr(node, secure) else {
                    continue;
                };
                let master = text(field(node, "role")).as_deref() == Some("master");
                let online = text(field(node, "health")).as_deref() == Some("online");
                if holds && master && online {
                    out.owner = Some(addr.clone());
                }
                if holds && let Some(id) = text(field(node, "id")) {
                    out.shard.push(id);
                }
                out.nodes.push(addr);
            }
        }
        out
    }
}

/// A node's address: its endpoint (its hostname for TLS when it announces one) and its
/// TLS port for `rediss+cluster://`, else its port.
fn node_addr(node: &Value, secure: bool) -> Option<Addr> {
    let usable = |h: &String| !h.is_empty() && h != "?";
    let hostname = text(field(node, "hostname")).filter(usable);
    let endpoint = text(field(node, "endpoint"))
        .filter(usable)
        .or_else(|| text(field(node, "ip")).filter(usable));
    let host = match (secure, hostname) {
        (true, Some(h)) => h,
        _ => endpoint?,
    };
    let port = match secure {
        true => field(node, "tls-port").and_then(int),
        false => None,
    }
    .or_else(|| field(node, "port").and_then(int))?;
    Some((host, u16::try_from(port).ok()?))
}

/// The value of `name` in a RESP3 map, or a RESP2 array of alternating names and
/// values.
fn field<'v>(v: &'v Value, name: &str) -> Option<&'v Value> {
    match v {
        Value::Map(pairs) => pairs
            .iter()
            .find(|(k, _)| text(Some(k)).as_deref() == Some(name))
            .map(|(_, v)| v),
        Value::Array(items) => items
            .chunks(2)
            .find(|kv| text(kv.first()).as_deref() == Some(name))
            .and_then(|kv| kv.get(1)),
        _ => None,
    }
}

fn text(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        Value::VerbatimString { text, .. } => Some(text.clone()),
        _ => None,
    }
}

fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(i) => Some(*i),
        other => text(Some(other))?.parse().ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    fn node(port: i64, role: &str, health: &str) -> Value {
        Value::Map(vec![
            (bulk("id"), bulk(&format!("id{port}"))),
            (bulk("port"), Value::Int(port)),
            (bulk("ip"), bulk("127.0.0.1")),
            (bulk("endpoint"), bulk("127.0.0.1")),
            (bulk("role"), bulk(role)),
            (bulk("replication-offset"), Value::Int(0)),
            (bulk("health"), bulk(health)),
        ])
    }

    fn shard(from: i64, to: i64, nodes: Vec<Value>) -> Value {
        Value::Map(vec![
            (
                bulk("slots"),
                Value::Array(vec![Value::Int(from), Value::Int(to)]),
            ),
            (bulk("nodes"), Value::Array(nodes)),
        ])
    }

    #[test]
    fn the_slots_online_master_is_the_owner() {
        let reply = Value::Array(vec![
            shard(0, 5460, vec![node(7001, "master", "online")]),
            shard(
                5461,
                16383,
                vec![
                    node(7002, "master", "fail"),
                    node(7005, "master", "online"),
                    node(7003, "replica", "online"),
                ],
            ),
        ]);
        let view = Shards::read(&reply, 10415, false);
        assert_eq!(view.owner, Some(("127.0.0.1".to_string(), 7005)));
        assert_eq!(view.shard, vec!["id7002", "id7005", "id7003"]);
        assert_eq!(view.nodes.len(), 4);
        let view = Shards::read(&reply, 105, false);
        assert_eq!(view.owner, Some(("127.0.0.1".to_string(), 7001)));
        // A RESP2 reply (flat arrays of names and values) reads the same.
        let flat = |v: &Value| match v {
            Value::Map(p) => {
                Value::Array(p.iter().flat_map(|(k, v)| [k.clone(), v.clone()]).collect())
            }
            other => other.clone(),
        };
        let resp2 = Value::Array(vec![Value::Array(vec![
            bulk("slots"),
            Value::Array(vec![Value::Int(0), Value::Int(16383)]),
            bulk("nodes"),
            Value::Array(vec![flat(&node(7009, "master", "online"))]),
        ])]);
        let view = Shards::read(&resp2, 12682, false);
        assert_eq!(view.owner, Some(("127.0.0.1".to_string(), 7009)));
    }

    #[test]
    fn a_moved_address_is_a_hint() {
        let hosts = HostList {
            username: None,
            password: None,
            hosts: vec![("h".into(), 1)],
        };
        let owner = SlotOwner::new(hosts, false, None, "billing", &Lookups::default());
        assert_eq!(owner.slot(), 12682);
        owner.moved_to("10.0.0.7:6380");
        assert_eq!(*lock(&owner.hint), Some(("10.0.0.7".to_string(), 6380)));
        owner.moved_to("garbage");
        assert_eq!(*lock(&owner.hint), Some(("10.0.0.7".to_string(), 6380)));
    }
}

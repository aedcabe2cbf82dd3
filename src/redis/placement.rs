//! Where this process's namespace lives in Redis, as `/metrics` shows it: per prefix,
//! the topology (standalone, Sentinel, Cluster), the slot (a cluster's), the primary in
//! use and how many times that primary changed; and, for leader mode on a Redis
//! Cluster, the check that the slot primary's `cluster-node-timeout` is not shorter
//! than the leader lease (docs/plans/redis-cluster.md, section 5).
//!
//! Invariants:
//! - one record per process ([`Placements`], made with its Redis options and shared by
//!   every connector made from them, `super::target::Lookups`): every connector of a
//!   process (the schema step, the store, the lease) reports the primary it verified
//!   there, so a failover that several connections follow counts once, and the node
//!   timeout is read once per primary; `/metrics` reads the same value, handed to the
//!   HTTP listener where the process is wired;
//! - addresses and prefixes only, never credentials;
//! - no lock is held across an `.await`; nothing here fails a caller: a node timeout
//!   that cannot be read is said once, at WARN, and the start goes on.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use redis::aio::ConnectionLike;

use super::error::Code;
use crate::util::lock;

/// How the namespace's Redis is reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Topology {
    Standalone,
    Sentinel,
    Cluster,
}

impl Topology {
    /// The label value `/metrics` gives it.
    pub fn name(self) -> &'static str {
        match self {
            Topology::Standalone => "standalone",
            Topology::Sentinel => "sentinel",
            Topology::Cluster => "cluster",
        }
    }
}

/// One namespace's place: where its primary is now, and how often it moved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    pub topology: Topology,
    pub prefix: String,
    /// The hash slot of every key of the namespace (a cluster only).
    pub slot: Option<u16>,
    /// `HOST:PORT` of the primary last used.
    pub primary: String,
    /// How many times the primary in use changed since the process started.
    pub changes: u64,
}

/// Where the namespaces of one process live, and which primary's node timeout was
/// read (see the module's header).
#[derive(Debug, Default)]
pub struct Placements {
    places: Mutex<Vec<Placement>>,
    /// The primary whose node timeout was last read (or is being read).
    checked: Mutex<Option<String>>,
    /// A node timeout that could not be read was said already.
    unreadable_said: AtomicBool,
}

/// What [`Placements::record`] found: the process's first primary for the prefix, the one in use
/// already, or another (a change, the previous one named).
#[derive(Debug, PartialEq, Eq)]
pub enum Recorded {
    First,
    Same,
    Changed { previous: String },
}

impl Placements {
    /// The primary `primary` of `prefix` is in use (a connection to it was just verified):
    /// recorded; a primary other than the last one counts as a change. Every connector of
    /// the process reports here, so the caller's log line for a change is said once.
    pub fn record(
        &self,
        topology: Topology,
        prefix: &str,
        slot: Option<u16>,
        primary: &str,
    ) -> Recorded {
        let mut places = lock(&self.places);
        match places.iter_mut().find(|p| p.prefix == prefix) {
            Some(p) if p.primary == primary => Recorded::Same,
            Some(p) => {
                let previous = std::mem::replace(&mut p.primary, primary.to_string());
                p.changes += 1;
                p.topology = topology;
                p.slot = slot;
                Recorded::Changed { previous }
            }
            None => {
                places.push(Placement {
                    topology,
                    prefix: prefix.to_string(),
                    slot,
                    primary: primary.to_string(),
                    changes: 0,
                });
                Recorded::First
            }
        }
    }

    /// Every namespace this process reached, by prefix.
    pub fn all(&self) -> Vec<Placement> {
        let mut places = lock(&self.places).clone();
        places.sort_by(|a, b| a.prefix.cmp(&b.prefix));
        places
    }

    /// Read `cluster-node-timeout` on `conn` (the slot's primary, `primary`) once per
    /// primary, and warn when it is shorter than the leader `lease`. An I/O failure leaves
    /// the check to the next connection.
    pub async fn check_node_timeout<C: ConnectionLike>(
        &self,
        conn: &mut C,
        primary: &str,
        lease: Duration,
    ) {
        {
            let mut checked = lock(&self.checked);
            if checked.as_deref() == Some(primary) {
                return;
            }
            *checked = Some(primary.to_string());
        }
        // A map in RESP3, a flat [name, value] array in RESP2: read as a map either way.
        let reply: redis::RedisResult<std::collections::HashMap<String, String>> =
            redis::cmd("CONFIG")
                .arg("GET")
                .arg("cluster-node-timeout")
                .query_async(conn)
                .await;
        let node_timeout = match reply {
            Ok(map) => map
                .get("cluster-node-timeout")
                .and_then(|t| t.parse::<u64>().ok()),
            // An error reply: CONFIG renamed or forbidden (a managed service, an ACL).
            Err(e) if Code::of(&e).is_some() => None,
            Err(err) => {
                tracing::debug!(%err, "could not read cluster-node-timeout; next connection");
                *lock(&self.checked) = None;
                return;
            }
        };
        match judge(node_timeout, lease) {
            Verdict::Enough => {}
            Verdict::Shorter {
                node_timeout_ms,
                lease_ms,
            } => tracing::warn!(
                %primary, node_timeout_ms, lease_ms,
                "redis cluster: cluster-node-timeout is shorter than the leader lease \
                 (--redis-lease): the cluster can promote a replica and take writes while the \
                 old leader still counts its lease valid (no renewal reaches a slot without a \
                 primary, so only a node timeout at least the lease makes the old leader's \
                 validity end first); two leaders may then hand out the same job. Set \
                 cluster-node-timeout >= --redis-lease on every node, or shorten the lease"
            ),
            Verdict::Unreadable => {
                if !self.unreadable_said.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        %primary, lease_ms = u64::try_from(lease.as_millis()).unwrap_or(u64::MAX),
                        "redis cluster: cannot read cluster-node-timeout on the slot's primary \
                         (CONFIG GET refused: renamed or forbidden, as managed services do); \
                         make sure it is at least the leader lease, or a failover may let two \
                         leaders serve at once"
                    );
                }
            }
        }
    }
}

/// What a node timeout (`None`: unreadable) means for a leader lease.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    Enough,
    Shorter { node_timeout_ms: u64, lease_ms: u64 },
    Unreadable,
}

fn judge(node_timeout_ms: Option<u64>, lease: Duration) -> Verdict {
    let lease_ms = u64::try_from(lease.as_millis()).unwrap_or(u64::MAX);
    match node_timeout_ms {
        None => Verdict::Unreadable,
        Some(t) if t < lease_ms => Verdict::Shorter {
            node_timeout_ms: t,
            lease_ms,
        },
        Some(_) => Verdict::Enough,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_timeout_shorter_than_the_lease_is_a_warning() {
        let lease = Duration::from_millis(5000);
        assert_eq!(judge(Some(15000), lease), Verdict::Enough);
        assert_eq!(judge(Some(5000), lease), Verdict::Enough);
        assert_eq!(
            judge(Some(2000), lease),
            Verdict::Shorter {
                node_timeout_ms: 2000,
                lease_ms: 5000
            }
        );
        assert_eq!(judge(None, lease), Verdict::Unreadable);
    }

    #[test]
    fn a_new_primary_counts_as_a_change() {
        let placements = Placements::default();
        let record =
            |topology, prefix, slot, primary| placements.record(topology, prefix, slot, primary);
        let prefix = "placement-test";
        let first = record(Topology::Cluster, prefix, Some(1), "10.0.0.1:7000");
        assert_eq!(first, Recorded::First);
        let again = record(Topology::Cluster, prefix, Some(1), "10.0.0.1:7000");
        assert_eq!(again, Recorded::Same);
        let mine = || placements.all().into_iter().find(|p| p.prefix == prefix);
        assert_eq!(mine().map(|p| p.changes), Some(0));
        let moved = record(Topology::Cluster, prefix, Some(1), "10.0.0.2:7000");
        assert_eq!(
            moved,
            Recorded::Changed {
                previous: "10.0.0.1:7000".into()
            }
        );
        let p = mine().expect("recorded");
        assert_eq!((p.changes, p.primary.as_str()), (1, "10.0.0.2:7000"));
    }
}

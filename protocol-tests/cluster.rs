//! redstalk on a Redis Cluster (issue 23), against real processes: six private
//! `redis-server --cluster-enabled yes` (support/cluster.rs), never the Redis on 6379.
//!
//! What the tests prove:
//! - `a_six_node_cluster_starts` — the harness: three primaries and three replicas
//!   joined, every node `cluster_state:ok`, every slot served, every replica linked;
//!   the namespaces the plan spreads (`orders`, `redstalk`, `billing`) land on the three
//!   primaries (CLUSTER KEYSLOT agrees with `{P}` tags). Prints the start time.

// A test reports failure by panicking: unwrap and expect are how it says so.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Instant;

use support::cluster::{Cluster, SLOTS, info_field};
use support::redis::redis_server_path;
use support::sentinel::cli;
use support::serial;

#[test]
fn a_six_node_cluster_starts() {
    let _serial = serial();
    if redis_server_path().is_none() {
        assert!(
            !support::oracle_required(),
            "redis-server is required (REDSTALK_REQUIRE_ORACLE=1) but not installed"
        );
        eprintln!("!!! redis-server is not installed: the Redis Cluster tests are SKIPPED.");
        return;
    }
    let t = Instant::now();
    let cluster = Cluster::start().expect("start a 6-node cluster");
    let started = t.elapsed();
    for node in &cluster.nodes {
        assert_eq!(
            info_field(node.port, "cluster_state").as_deref(),
            Some("ok")
        );
        assert_eq!(
            info_field(node.port, "cluster_slots_assigned").as_deref(),
            Some("16384")
        );
        assert_eq!(
            info_field(node.port, "cluster_known_nodes").as_deref(),
            Some("6")
        );
    }
    let port = cluster.nodes[0].port;
    let mut primaries = Vec::new();
    for (prefix, slot) in [("orders", 105), ("redstalk", 10415), ("billing", 12682)] {
        let key = format!("{{{prefix}}}:t:default:ready");
        let got = cli(port, &["CLUSTER", "KEYSLOT", &key]).unwrap();
        assert_eq!(got.trim(), slot.to_string(), "{key}");
        primaries.push(
            SLOTS
                .iter()
                .position(|(a, b)| (*a..=*b).contains(&slot))
                .unwrap(),
        );
    }
    assert_eq!(
        primaries,
        vec![0, 1, 2],
        "the three namespaces share a primary"
    );
    println!(
        "cluster of 6 nodes ({}) ok in {} ms",
        cluster.seeds(),
        started.as_millis()
    );
}

//! Network partitions of a replicated Redis under leader mode, between real processes on
//! hosts of their own (network namespaces, support/netfault.rs), judged by the history
//! checker (support/history.rs) over the whole run: 0 acknowledged puts lost, 0 deletes
//! undone, 0 reserves of a deleted job, 0 jobs held by two clients at once within their
//! TTR. Each test prints its figures (`--nocapture`).
//!
//! - `sentinel_primary_isolated_with_the_leader` — Sentinel (primary on host `p`,
//!   replicas on `r` and `q`, a sentinel on each), leader A on `p` and standby B on `r`,
//!   both with `--redis-wait-replicas 1`; clients of A on `ca` hold each job 15 s
//!   (asking `list-tube-used` meanwhile), clients of B on `cb` put and work. Host `p` is
//!   cut from `r`, `q` and `cb`, not from `ca`: the old primary accepts writes until it
//!   notices, the sentinels promote a replica (which still has one), B takes the lead
//!   there and serves. A must stop leading
//!   before B can: its lease renewals reach no replica, so it steps down within its
//!   lease. Before, A renewed its lease on the isolated old primary and went on leading
//!   next to B: a job held by A's client was reserved again through B, both holds
//!   proven by later replies (double held).
//! - `cluster_primary_isolated_with_the_leader` — the same on a Redis Cluster of seven
//!   nodes: the namespace's slot on a primary on host `p` with A, its two replicas, the
//!   two other primaries and their replicas on host `rest` with B. The majority fails
//!   the slot over to a replica; the isolated primary refuses writes after the node
//!   timeout (2 s) and rejoins as a replica when the cut heals.
//!
//! `REDSTALK_FAULTS_SEED` replays a run's random choices. Needs root, iproute2 and
//! nftables (skipped with a notice otherwise, unless `REDSTALK_REQUIRE_ORACLE=1`).

// A test reports failure by panicking: unwrap and expect are how it says so.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::{Duration, Instant};

use support::netfault::Net;
use support::netprocs::{BEANSTALK_PORT, slot_of_prefix};
use support::workload::{Side, Workload, WorkloadConfig, judge, spread};
use support::{redis_args, serial};

const WITHIN: Duration = Duration::from_secs(60);

fn seed() -> u64 {
    support::rng::seed_from_env()
}

fn wait(
    what: &str,
    within: Duration,
    context: impl Fn() -> String,
    cond: impl Fn() -> bool,
) -> Duration {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < within,
            "{what}: not within {within:?}\n{}",
            context()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    start.elapsed()
}

/// A replicated Redis the leader's primary is cut from: what the runner needs to know
/// of it.
struct Replicated {
    name: &'static str,
    url: String,
    prefix: String,
    /// A's host (with the primary), B's host (with the replicas), and the hosts A's
    /// host is cut from.
    a_host: &'static str,
    b_host: &'static str,
    cut_from: Vec<&'static str>,
    /// The lease key's value on the old primary, and on the new one once a replica was
    /// promoted (`None` before).
    lease_on_old: Box<dyn Fn() -> String>,
    lease_on_new: Box<dyn Fn() -> Option<String>>,
    /// The old primary is back, a replica in sync.
    rejoined: Box<dyn Fn() -> bool>,
    diagnostics: Box<dyn Fn() -> String>,
}

/// Leader A on the primary's host, standby B beside the replicas, `--redis-wait-replicas
/// 1`; clients of A hold jobs 15 s each (asking `list-tube-used` meanwhile), clients of
/// B put and work; A's host is cut from the others but A's clients; the replica is
/// promoted and B leads there for 8 s; then the cut heals and the old primary rejoins.
/// Judges the whole history.
fn isolated_primary(net: &Net, r: Replicated, seed: u64) {
    let mut args = redis_args(&r.url, &r.prefix, "leader");
    args.extend(["--redis-wait-replicas", "1", "--redis-wait-timeout", "500"].map(String::from));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (a_addr, b_addr) = (
        net.addr(r.a_host, BEANSTALK_PORT),
        net.addr(r.b_host, BEANSTALK_PORT),
    );
    let a = net.redstalk(r.a_host, &args);
    net.wait_served("ca", a_addr, WITHIN, &a.log);
    let b = net.redstalk(r.b_host, &args);
    net.wait_served("cb", b_addr, WITHIN, &b.log);
    let logs = || {
        format!(
            "--- A:\n{}\n--- B:\n{}\n{}",
            a.log.tail(),
            b.log.tail(),
            (r.diagnostics)()
        )
    };
    let mut holders = Side::new("ca", net.connector("ca", a_addr), 0, 3);
    holders.hold = Duration::from_secs(15);
    let mut cfg = WorkloadConfig::new(seed);
    cfg.ttr = 30;
    let w = Workload::start(
        &[holders, Side::new("cb", net.connector("cb", b_addr), 2, 2)],
        cfg,
    );
    w.wait_progress(100, WITHIN, logs);
    assert!(
        (r.lease_on_old)().ends_with(&a_addr.to_string()),
        "{}",
        logs()
    );

    let cut_at = Instant::now();
    let cuts: Vec<_> = r.cut_from.iter().map(|h| net.cut(r.a_host, h)).collect();
    let promoted = wait("a replica is promoted", WITHIN, logs, || {
        (r.lease_on_new)().is_some()
    });
    let b_leads = wait("B leads on the promoted replica", WITHIN, logs, || {
        (r.lease_on_new)().is_some_and(|t| t.ends_with(&b_addr.to_string()))
    });
    // A's clients hold jobs meanwhile (15 s each, asking list-tube-used every 250 ms);
    // B's clients work through the jobs Redis holds as ready.
    let (acked, deleted) = (w.acked(), w.deleted());
    std::thread::sleep(Duration::from_secs(8));
    let served_by_b = (w.acked() - acked, w.deleted() - deleted);
    let a_token_on_old = (r.lease_on_old)();
    drop(cuts);
    let healed_at = Instant::now();
    let rejoined = wait("the old primary rejoins as a replica", WITHIN, logs, || {
        (r.rejoined)()
    });
    let resumed = w.wait_progress(50, WITHIN, logs);
    let history = w.stop();
    history.dump(r.name);
    let verdict = judge(&history, &net.connector("cb", b_addr));
    let during = |o: &support::history::Op| o.start >= cut_at && o.start < healed_at;
    let name = r.name;
    println!(
        "{name}: replica promoted {} ms after the cut, B leading on it {} ms after; B then \
         acknowledged {} puts and {} deletes in 8 s; the old primary's lease key at the \
         heal: {a_token_on_old:?}; the old primary a synced replica {} ms after the heal; \
         progress again {} ms after that",
        promoted.as_millis(),
        (promoted + b_leads).as_millis(),
        served_by_b.0,
        served_by_b.1,
        rejoined.as_millis(),
        resumed.as_millis()
    );
    println!(
        "{name}: replies during the cut: {}",
        spread(&history, |o| during(o))
    );
    println!("{name}: {}", verdict.summary());
    verdict.assert_sound(&format!("{name}\n{}", logs()));
}

#[test]
fn sentinel_primary_isolated_with_the_leader() {
    let _serial = serial();
    let seed = seed();
    let Some(net) = Net::new(&["p", "r", "q", "ca", "cb"]) else {
        return;
    };
    // Two replicas: the promoted one still has one, so B can serve during the cut.
    let set = std::rc::Rc::new(net.sentinels(
        "p",
        &["r", "q"],
        &["p", "r", "q"],
        &["--appendonly", "yes", "--appendfsync", "always"],
    ));
    let old_primary = set.servers[0].addr.to_string();
    let (s1, s2, s3, s4) = (set.clone(), set.clone(), set.clone(), set.clone());
    let r = Replicated {
        name: "sentinel, primary isolated with the leader",
        url: set.url(),
        prefix: "p".into(),
        a_host: "p",
        b_host: "r",
        cut_from: vec!["r", "q", "cb"],
        lease_on_old: Box::new(move || {
            s1.servers[0]
                .cli(&["GET", &support::lease::lease_key("p")])
                .unwrap_or_default()
        }),
        lease_on_new: Box::new(move || {
            let now = s2.primary_by(1).filter(|p| *p != old_primary)?;
            let server = s2.servers.iter().find(|s| s.addr.to_string() == now)?;
            Some(
                server
                    .cli(&["GET", &support::lease::lease_key("p")])
                    .unwrap_or_default(),
            )
        }),
        rejoined: Box::new(move || s3.is_synced_replica(0)),
        diagnostics: Box::new(move || s4.diagnostics()),
    };
    isolated_primary(&net, r, seed);
}

#[test]
fn cluster_primary_isolated_with_the_leader() {
    let _serial = serial();
    let seed = seed();
    let Some(net) = Net::new(&["p", "rest", "ca", "cb"]) else {
        return;
    };
    // The namespace's slot on node 0 (host p), with two replicas so that the promoted
    // one still has one; the other primaries and every replica on host rest.
    let prefix = (0..)
        .map(|i| format!("c{i}"))
        .find(|p| slot_of_prefix(p) <= 5460)
        .unwrap();
    let slot = slot_of_prefix(&prefix);
    let cluster = std::rc::Rc::new(net.cluster(
        &[("p", 7000), ("rest", 7001), ("rest", 7002)],
        &[
            ("rest", 7003, 0),
            ("rest", 7004, 0),
            ("rest", 7005, 1),
            ("rest", 7006, 2),
        ],
    ));
    let key = support::lease::lease_key(&prefix);
    let (c1, c2, c3, c4) = (
        cluster.clone(),
        cluster.clone(),
        cluster.clone(),
        cluster.clone(),
    );
    let (k1, k2) = (key.clone(), key);
    let r = Replicated {
        name: "cluster, primary isolated with the leader",
        url: cluster.url(),
        prefix,
        a_host: "p",
        b_host: "rest",
        cut_from: vec!["rest", "cb"],
        lease_on_old: Box::new(move || c1.nodes[0].cli(&["GET", &k1]).unwrap_or_default()),
        lease_on_new: Box::new(move || {
            let i = (1..c2.nodes.len()).find(|&i| c2.claims(i, slot))?;
            Some(c2.nodes[i].cli(&["GET", &k2]).unwrap_or_default())
        }),
        rejoined: Box::new(move || {
            c3.nodes[0]
                .cli(&["INFO", "replication"])
                .is_some_and(|s| s.contains("role:slave") && s.contains("master_link_status:up"))
        }),
        diagnostics: Box::new(move || c4.diagnostics()),
    };
    println!("cluster: prefix {} in slot {slot}", r.prefix);
    isolated_primary(&net, r, seed);
}

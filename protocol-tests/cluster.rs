//! redstalk on a Redis Cluster, against real processes: six private
//! `redis-server --cluster-enabled yes` (support/cluster.rs), never the Redis on 6379.
//!
//! What the tests prove:
//! - `a_six_node_cluster_starts` — the harness: three primaries and three replicas
//!   joined, every node `cluster_state:ok`, every slot served, every replica linked;
//!   the namespaces the plan spreads (`orders`, `redstalk`, `billing`) land on the three
//!   primaries (CLUSTER KEYSLOT agrees with `{P}` tags). Prints the start time.
//! - `two_namespaces_on_two_primaries_each_in_one_slot` — redstalk on
//!   `redis+cluster://`: `orders` (shared mode, two instances) and `billing` (leader
//!   mode) served at once from two primaries; every key of a namespace is on the
//!   primary of its slot and in that slot (SCAN of every primary, COUNTKEYSINSLOT);
//!   the start log names prefix, tag, slot and primary; a put on one shared instance
//!   wakes a reserve blocked on the other (sharded pub/sub). Prints the wake-up times.
//! - `wake_ups_survive_a_manual_failover_of_the_slot` — two shared instances; after a
//!   `CLUSTER FAILOVER` of the slot, Redis ends the shard subscription (an unsolicited
//!   `sunsubscribe`): the subscriber reconnects to the new primary and subscribes
//!   again, and wake-ups stay milliseconds (without it they fall back to the 1 s
//!   sweep: 640-810 ms, seen). `/metrics` names the slot and its primary
//!   (`redstalk_redis_info`) and, after the failover, the new primary, with
//!   `redstalk_redis_primary_changes_total` gone up. Prints both series and the samples.
//! - `tls::a_tls_only_cluster_serves_both_modes_and_follows_its_failovers` — the same
//!   over `rediss+cluster://`, and the node timeout checked against the leader lease
//!   (cluster_tls.rs says what it proves).
//! - `the_protocol_corpus_passes_on_the_cluster_in_{shared,leader}_mode` — every case
//!   of protocol-tests/cases (the `protocol` runner's own player, runner.rs) against
//!   redstalk on the cluster, one fresh namespace per case, so the namespaces spread
//!   over the three primaries. Prints cases run and the time.
//! - `urls_that_do_not_fit_the_cluster_are_refused` — `redis://` at a cluster node,
//!   a database other than 0, a sentinel password with a cluster URL: redstalk exits
//!   at once saying why, never quoting the password.
//! - `too_few_replicas_for_wait_replicas_are_warned_of` — `--redis-wait-replicas 2`
//!   with one replica: both modes warn at start, naming the slot's primary.
//! - `faults::…` — the slot moved and its primary killed, under load; keyed puts through
//!   the kill found by key and deduped afterwards (cluster_faults.rs).

// A test reports failure by panicking: unwrap and expect are how it says so.
#![allow(clippy::unwrap_used, clippy::expect_used)]

// The `protocol` target's case player, reused as it is (its `main` unused here), with
// the support module it loads (one copy).
#[path = "runner.rs"]
#[allow(dead_code)]
mod runner;

use runner::support;

// The same checks on a cluster that listens with TLS only.
#[path = "cluster_tls.rs"]
mod tls;

// The namespace's slot moved, and its primary killed, under load.
#[path = "cluster_faults.rs"]
mod faults;

use std::time::{Duration, Instant};

use support::client::Client;
use support::cluster::{Cluster, SLOTS, info_field};
use support::load::Load;
use support::redis::redis_server_path;
use support::sentinel::{cli, wait_for};
use support::{ServerKind, ServerProc, TEST_LEASE_MS, serial, wait_served};

/// Generous bounds: the machine is two loaded cores.
const SERVED_WITHIN: Duration = Duration::from_secs(30);

/// The cluster, or `None` (the test skipped) when redis-server is not installed.
fn cluster() -> Option<Cluster> {
    if redis_server_path().is_none() {
        assert!(
            !support::oracle_required(),
            "redis-server is required (REDSTALK_REQUIRE_ORACLE=1) but not installed"
        );
        eprintln!("!!! redis-server is not installed: the Redis Cluster tests are SKIPPED.");
        return None;
    }
    Some(Cluster::start().expect("start a 6-node cluster"))
}

/// redstalk in `kind`'s mode on the cluster under `prefix`, served, its log captured.
fn redstalk(cluster: &Cluster, kind: ServerKind, prefix: &str) -> (ServerProc, support::Log) {
    redstalk_with(cluster, kind, prefix, &[])
}

/// [`redstalk`] with `extra` arguments.
fn redstalk_with(
    cluster: &Cluster,
    kind: ServerKind,
    prefix: &str,
    extra: &[&str],
) -> (ServerProc, support::Log) {
    // -V: the start line naming the slot and its primary is at info level.
    let mut args: Vec<String> = vec!["-V".into()];
    args.extend(extra.iter().map(|a| a.to_string()));
    if kind == ServerKind::Leader && !extra.contains(&"--redis-lease") {
        args.extend(["--redis-lease".into(), TEST_LEASE_MS.into()]);
    }
    let mut srv = ServerProc::start_on_redis_as(kind, &cluster.url(), prefix, &args)
        .unwrap_or_else(|e| panic!("start redstalk ({}) on the cluster: {e}", kind.name()));
    let log = srv.capture_stderr();
    wait_served(srv.addr, SERVED_WITHIN, &log);
    (srv, log)
}

/// The slot of the namespace `prefix` (every key is under the tag `{prefix}`).
fn slot(cluster: &Cluster, prefix: &str) -> u16 {
    let key = format!("{{{prefix}}}");
    cluster
        .cli(0, &["CLUSTER", "KEYSLOT", &key])
        .and_then(|s| s.trim().parse().ok())
        .expect("CLUSTER KEYSLOT")
}

#[test]
fn a_six_node_cluster_starts() {
    let _serial = serial();
    let t = Instant::now();
    let Some(cluster) = cluster() else { return };
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

#[test]
fn two_namespaces_on_two_primaries_each_in_one_slot() {
    let _serial = serial();
    let Some(cluster) = cluster() else { return };
    let (orders, billing) = (slot(&cluster, "orders"), slot(&cluster, "billing"));
    let (a, a_log) = redstalk(&cluster, ServerKind::Redis, "orders");
    let (b, _b_log) = redstalk(&cluster, ServerKind::Redis, "orders");
    let (l, l_log) = redstalk(&cluster, ServerKind::Leader, "billing");
    // The start line, once the drain thread has read it (the tail, before the
    // connections of the test push it out).
    let start_line = |log: &support::Log| {
        let since = Instant::now();
        while !log.tail().contains("slot=") && since.elapsed() < SERVED_WITHIN {
            std::thread::sleep(Duration::from_millis(20));
        }
        log.tail()
    };
    let (a_start, l_start) = (start_line(&a_log), start_line(&l_log));
    // Both namespaces at once: puts interleaved, then every job reserved and deleted.
    let (mut ca, mut cl) = (
        Client::connect(a.addr, "orders"),
        Client::connect(l.addr, "billing"),
    );
    let t = Instant::now();
    for i in 0..200u32 {
        ca.put(0, 0, 60, format!("o{i}").as_bytes());
        cl.put(0, 0, 60, format!("b{i}").as_bytes());
    }
    for c in [&mut ca, &mut cl] {
        for _ in 0..150 {
            let (id, _) = c.reserve();
            c.expect(&format!("delete {id}"), "DELETED");
        }
    }
    println!(
        "cluster: 2 namespaces on 2 primaries, 400 puts and 300 reserve+delete in {} ms",
        t.elapsed().as_millis()
    );
    // A put on one shared instance wakes a reserve blocked on the other.
    let mut cb = Client::connect(b.addr, "waiter");
    assert_wakes_up(
        &mut ca,
        &mut cb,
        "wake-up across two shared instances",
        &a_log,
    );
    // Every key of each namespace on its slot's primary, in its slot.
    for (prefix, slot, said) in [("orders", orders, a_start), ("billing", billing, l_start)] {
        let owner = cluster.primary_of(slot).expect("the slot has a primary");
        let tag = format!("{{{prefix}}}");
        let mut on_owner = 0;
        for i in cluster.primaries() {
            let keys = cluster.keys_of(i);
            let stray: Vec<&String> = keys
                .iter()
                .filter(|k| k.contains(prefix) && !k.starts_with(&tag))
                .collect();
            assert!(
                stray.is_empty(),
                "{prefix}: keys outside the tag on node {i}: {stray:?}"
            );
            let mine = keys.iter().filter(|k| k.starts_with(&tag)).count() as u64;
            if i == owner {
                on_owner = mine;
            } else {
                assert_eq!(
                    mine, 0,
                    "{prefix}: keys on node {i}, not the slot's primary"
                );
            }
        }
        assert!(on_owner > 0, "{prefix}: no key on the slot's primary");
        assert_eq!(
            cluster.keys_in_slot(owner, slot),
            on_owner,
            "{prefix}: keys outside slot {slot}"
        );
        let port = cluster.nodes[owner].port.to_string();
        assert!(
            said.contains(&format!("slot={slot}")) && said.contains(&port),
            "{prefix}: the start log does not name slot {slot} and its primary\n{said}"
        );
        println!("cluster: {prefix} in slot {slot} on node {owner} (port {port}): {on_owner} keys");
    }
    drop(b);
}

/// Five times: a reserve blocked on `waiter`'s instance, a put on `putter`'s; most
/// wake-ups must come by the shard channel (well under the 1 s sweep). Prints them.
fn assert_wakes_up(putter: &mut Client, waiter: &mut Client, what: &str, log: &support::Log) {
    waiter.watch_only("wake");
    putter.use_tube("wake");
    let mut wakes = Vec::new();
    for i in 0..5 {
        waiter.send_line("reserve-with-timeout 10");
        std::thread::sleep(Duration::from_millis(200));
        let sent = Instant::now();
        putter.put(0, 0, 60, format!("w{i}").as_bytes());
        let r = waiter
            .try_reply(Duration::from_secs(15))
            .expect("the waiter is woken");
        wakes.push(sent.elapsed());
        assert_eq!(r.word(), "RESERVED", "{}", log.tail());
        waiter.expect(&format!("delete {}", r.id().unwrap()), "DELETED");
    }
    let wake_ms: Vec<u128> = wakes.iter().map(Duration::as_millis).collect();
    println!("cluster: {what} (ms): {wake_ms:?}");
    let fast = wakes.iter().filter(|w| **w < Duration::from_millis(500));
    assert!(
        fast.count() >= 3,
        "{what}: the wake-ups came by the sweep, not by the shard channel: {wake_ms:?}\n{}",
        log.tail()
    );
}

#[test]
fn wake_ups_survive_a_manual_failover_of_the_slot() {
    let _serial = serial();
    let Some(cluster) = cluster() else { return };
    let slot = slot(&cluster, "orders");
    let (a, _a_log) = redstalk(&cluster, ServerKind::Redis, "orders");
    let metrics = format!("127.0.0.1:{}", support::free_port());
    let (b, b_log) = redstalk_with(
        &cluster,
        ServerKind::Redis,
        "orders",
        &["--metrics", &metrics],
    );
    let mut ca = Client::connect(a.addr, "putter");
    let mut cb = Client::connect(b.addr, "waiter");
    assert_wakes_up(&mut ca, &mut cb, "wake-ups before the failover", &b_log);
    let old = cluster.primary_of(slot).expect("the slot has a primary");
    // /metrics names the slot and its primary; no change yet.
    let placed = |node: usize| {
        format!(
            "redstalk_redis_info{{topology=\"cluster\",prefix=\"orders\",slot=\"{slot}\",\
             primary=\"127.0.0.1:{}\"}} 1",
            cluster.nodes[node].port
        )
    };
    let changes = "redstalk_redis_primary_changes_total{prefix=\"orders\"} ";
    let text = scrape(&metrics);
    assert!(text.contains(&placed(old)), "{}", redis_lines(&text));
    assert!(
        text.contains(&format!("{changes}0\n")),
        "{}",
        redis_lines(&text)
    );
    println!(
        "cluster: /metrics before the failover:\n{}",
        redis_lines(&text)
    );
    let t = Instant::now();
    let new = cluster.manual_failover(old).expect("manual failover");
    println!(
        "cluster: manual failover of slot {slot}: node {old} -> node {new} in {} ms",
        t.elapsed().as_millis()
    );
    // Served again by both (their connections follow the slot to the new primary).
    for srv in [&a, &b] {
        let mut probe = Client::connect(srv.addr, "probe");
        wait_for("a put after the failover", SERVED_WITHIN, || {
            probe
                .try_put(0, 0, 60, b"x", Duration::from_secs(5))
                .is_ok_and(|r| r.word() == "INSERTED")
        });
    }
    assert_wakes_up(&mut ca, &mut cb, "wake-ups after a manual failover", &b_log);
    // /metrics follows: the new primary, and the change counted.
    let mut text = String::new();
    wait_for("/metrics names the new primary", SERVED_WITHIN, || {
        text = scrape(&metrics);
        text.contains(&placed(new))
    });
    let counted: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix(changes))
        .and_then(|v| v.trim().parse().ok())
        .expect("the primary changes counter");
    println!(
        "cluster: /metrics after the failover:\n{}",
        redis_lines(&text)
    );
    assert!(counted >= 1, "the change is not counted:\n{text}");
    b_log.wait_for("ended the shard channel's subscription", SERVED_WITHIN);
    let said = b_log.tail();
    let heard: Vec<&str> = said
        .lines()
        .filter(|l| l.contains("role=subscription") || l.contains("shard channel"))
        .collect();
    println!("cluster: the subscriber after the failover: {heard:#?}");
    assert!(
        said.contains("ended the shard channel's subscription"),
        "the subscriber did not hear of the failover:\n{said}"
    );
}

/// `GET /metrics` on the listener at `addr`: the body.
fn scrape(addr: &str) -> String {
    let mut r = ureq::get(&format!("http://{addr}/metrics"))
        .call()
        .unwrap_or_else(|e| panic!("GET /metrics: {e}"));
    r.body_mut().read_to_string().expect("the body of /metrics")
}

/// The `redstalk_redis_*` samples of an exposition.
fn redis_lines(text: &str) -> String {
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("redstalk_redis_"))
        .collect();
    lines.join("\n")
}

fn corpus(kind: ServerKind, prefix: &str) {
    let _serial = serial();
    let Some(cluster) = cluster() else { return };
    let t = Instant::now();
    let (ran, skipped, failed) =
        runner::run_corpus_on_redis(kind.redis_mode().unwrap(), &cluster.url(), prefix, 3);
    println!(
        "cluster: protocol corpus in {} mode: {ran} cases ran, {skipped} skipped (another \
         release, or extensions pending), {} failed, in {} s",
        kind.redis_mode().unwrap(),
        failed.len(),
        t.elapsed().as_secs()
    );
    assert!(ran > 200, "only {ran} cases ran");
    assert!(failed.is_empty(), "{}", failed.join("\n\n"));
}

#[test]
fn the_protocol_corpus_passes_on_the_cluster_in_shared_mode() {
    corpus(ServerKind::Redis, "cs");
}

#[test]
fn the_protocol_corpus_passes_on_the_cluster_in_leader_mode() {
    corpus(ServerKind::Leader, "cl");
}

/// Run redstalk with `args` (a free port); it must exit within 20 s. Its exit code
/// and stderr.
fn refused(args: &[&str]) -> (Option<i32>, String) {
    let port = support::free_port().to_string();
    let mut child = std::process::Command::new(support::redstalk_path())
        .args(["-l", "127.0.0.1", "-p", &port])
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn redstalk");
    let log = support::Log::drain(child.stderr.take().unwrap());
    let status = support::wait_exit(&mut child, Duration::from_secs(20));
    if status.is_none() {
        let _ = child.kill();
        let _ = child.wait();
        panic!("redstalk {args:?} still runs after 20 s: {}", log.tail());
    }
    (
        status.and_then(|s| s.code()),
        log.final_tail(Duration::from_secs(2)),
    )
}

#[test]
fn urls_that_do_not_fit_the_cluster_are_refused() {
    let _serial = serial();
    let Some(cluster) = cluster() else { return };
    let node = format!("redis://127.0.0.1:{}/0", cluster.nodes[0].port);
    let with_db = format!("{}/1", cluster.url());
    let cases: [(&[&str], &str); 3] = [
        (&["--redis", &node], "use redis+cluster://"),
        (&["--redis", &with_db], "only database 0"),
        (
            &[
                "--redis",
                &cluster.url(),
                "--redis-sentinel-password",
                "hunter2",
            ],
            "has no sentinels",
        ),
    ];
    for (args, why) in cases {
        let (code, said) = refused(args);
        assert!(
            code.is_some_and(|c| c != 0),
            "{args:?}: exit {code:?}\n{said}"
        );
        assert!(said.contains(why), "{args:?}: {why:?} not said:\n{said}");
        assert!(!said.contains("hunter2"), "the password is quoted:\n{said}");
        println!(
            "cluster: refused with exit {code:?}: {}",
            said.lines().last().unwrap_or("")
        );
    }
}

#[test]
fn too_few_replicas_for_wait_replicas_are_warned_of() {
    let _serial = serial();
    let Some(cluster) = cluster() else { return };
    for (kind, prefix) in [
        (ServerKind::Redis, "orders"),
        (ServerKind::Leader, "billing"),
    ] {
        let primary = cluster.primary_of(slot(&cluster, prefix)).unwrap();
        let node = format!("127.0.0.1:{}", cluster.nodes[primary].port);
        let mut args = vec!["--redis-wait-replicas".to_string(), "2".to_string()];
        if kind == ServerKind::Leader {
            args.extend(["--redis-lease".into(), TEST_LEASE_MS.into()]);
        }
        let mut srv = ServerProc::start_on_redis_as(kind, &cluster.url(), prefix, &args)
            .unwrap_or_else(|e| panic!("start redstalk: {e}"));
        let log = srv.capture_stderr();
        wait_for("the replica warning", SERVED_WITHIN, || {
            log.tail().contains("fewer replicas connected")
        });
        let said = log.tail();
        let line = said
            .lines()
            .find(|l| l.contains("fewer replicas connected"))
            .unwrap();
        assert!(
            line.contains(&node),
            "the warning does not name {node}: {line}"
        );
        println!("cluster ({} mode): {line}", kind.redis_mode().unwrap());
    }
}

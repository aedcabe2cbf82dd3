//! redstalk on a Redis Cluster that listens with TLS only (`rediss+cluster://`, with
//! `--redis-tls-ca` and a client certificate, which the nodes require): one cluster
//! (support/cluster.rs, `Cluster::start_tls`) for every check, since a start costs
//! seconds. Part of the `cluster` test binary (a module of cluster.rs).
//!
//! What `a_tls_only_cluster_serves_both_modes_and_follows_its_failovers` proves:
//! - shared and leader mode serve put/reserve/delete over TLS, and a sample of the
//!   protocol corpus (every 20th case, fresh namespaces over the three primaries);
//! - a manual `CLUSTER FAILOVER` of the slot of each mode's namespace is followed over
//!   TLS (the nodes announce their TLS port only: `CLUSTER SHARDS` has no `port`);
//! - plan section 5: a leader whose lease (5 s) is longer than the cluster's node
//!   timeout (2 s) warns at start, naming both, and again for the new primary after
//!   the failover; the tests' default lease (1 s) draws no warning; a user whose ACL
//!   forbids CONFIG gets one warning that the node timeout cannot be read, and is
//!   served. Prints the figures.

use super::*;
use support::certs::{Certs, tls_args};

/// What the start-time check says when the node timeout is shorter than the lease.
const SHORTER: &str = "cluster-node-timeout is shorter than the leader lease";
/// What it says when CONFIG GET is refused.
const UNREADABLE: &str = "cannot read cluster-node-timeout";

/// A put, reserve and delete on `srv` in the tube `what`, checked.
fn put_reserve_delete(srv: &ServerProc, what: &str, log: &support::Log) {
    let mut c = Client::connect(srv.addr, what);
    c.use_tube(what);
    c.watch_only(what);
    let id = c.put(0, 0, 60, b"over tls");
    let (got, body) = c.reserve();
    assert_eq!(
        (got, body.as_slice()),
        (id, &b"over tls"[..]),
        "{what}: {}",
        log.tail()
    );
    c.expect(&format!("delete {id}"), "DELETED");
}

/// Wait until `srv` acknowledges a put again (after a failover); the time it took.
fn served_again(srv: &ServerProc, log: &support::Log) -> Duration {
    let mut probe = Client::connect(srv.addr, "probe");
    let t = Instant::now();
    while !probe
        .try_put(0, 0, 60, b"x", Duration::from_secs(5))
        .is_ok_and(|r| r.word() == "INSERTED")
    {
        assert!(
            t.elapsed() < SERVED_WITHIN,
            "not served again after the failover:\n{}",
            log.tail()
        );
        std::thread::sleep(Duration::from_millis(20));
        probe = Client::connect(srv.addr, "probe");
    }
    t.elapsed()
}

/// The first line of `log` containing `needle`, waited for.
fn line_with(log: &support::Log, needle: &str) -> String {
    wait_for(needle, SERVED_WITHIN, || log.text().contains(needle));
    let text = log.text();
    text.lines()
        .rev()
        .find(|l| l.contains(needle))
        .unwrap_or_default()
        .to_string()
}

#[test]
fn a_tls_only_cluster_serves_both_modes_and_follows_its_failovers() {
    let _serial = serial();
    if redis_server_path().is_none() {
        let _ = cluster();
        return;
    }
    let certs = Certs::make();
    let t = Instant::now();
    let cluster = Cluster::start_tls(&certs).expect("start a 6-node TLS cluster");
    println!(
        "tls cluster: 6 nodes, TLS only, ok in {} ms ({})",
        t.elapsed().as_millis(),
        cluster.url()
    );
    assert!(cluster.url().starts_with("rediss+cluster://"));
    let tls = tls_args(&certs, "ca.pem");
    let tls: Vec<&str> = tls.iter().map(String::as_str).collect();
    let (shared, s_log) = redstalk_with(&cluster, ServerKind::Redis, "orders", &tls);
    let (leader, l_log) = redstalk_with(&cluster, ServerKind::Leader, "billing", &tls);
    let mut long: Vec<&str> = tls.clone();
    long.extend(["--redis-lease", "5000"]);
    let (long_leader, long_log) = redstalk_with(&cluster, ServerKind::Leader, "redstalk", &long);
    for (srv, what, log) in [
        (&shared, "shared", &s_log),
        (&leader, "leader", &l_log),
        (&long_leader, "leader-5s", &long_log),
    ] {
        put_reserve_delete(srv, what, log);
    }
    let warned = line_with(&long_log, SHORTER);
    let first_primary = cluster.primary_of(slot(&cluster, "redstalk")).unwrap();
    let port = cluster.nodes[first_primary].port.to_string();
    assert!(
        warned.contains("node_timeout_ms=2000")
            && warned.contains("lease_ms=5000")
            && warned.contains(&port),
        "the warning does not give both figures and the primary: {warned}"
    );
    println!("tls cluster: leader with a 5 s lease, node timeout 2 s: {warned}");

    // A sample of the protocol corpus, both modes, over TLS.
    for mode in ["shared", "leader"] {
        let t = Instant::now();
        let extra: Vec<String> = tls.iter().map(|a| a.to_string()).collect();
        let prefix = format!("tls{}", &mode[..1]);
        let (ran, skipped, failed) =
            runner::run_cases_on_redis(mode, (&cluster.url(), &prefix, &extra), 3, 20);
        println!(
            "tls cluster: protocol cases in {mode} mode (every 20th): {ran} ran, {skipped} \
             skipped, {} failed, in {} s",
            failed.len(),
            t.elapsed().as_secs()
        );
        assert!(ran >= 10, "only {ran} cases ran");
        assert!(failed.is_empty(), "{}", failed.join("\n\n"));
    }

    // The owner of each mode's slot changes (CLUSTER FAILOVER): followed over TLS.
    for (srv, prefix, log) in [
        (&shared, "orders", &s_log),
        (&long_leader, "redstalk", &long_log),
    ] {
        let slot = slot(&cluster, prefix);
        let old = cluster.primary_of(slot).expect("the slot has a primary");
        let t = Instant::now();
        let new = cluster.manual_failover(old).expect("manual failover");
        let promoted = t.elapsed();
        let back = served_again(srv, log);
        put_reserve_delete(srv, prefix, log);
        let moved = line_with(log, "has a new primary");
        let new_port = cluster.nodes[new].port.to_string();
        assert!(moved.contains(&new_port), "{prefix}: {moved}");
        println!(
            "tls cluster: {prefix}: CLUSTER FAILOVER node {old} -> {new} in {} ms; served \
             again {} ms after",
            promoted.as_millis(),
            back.as_millis()
        );
    }
    // Section 5 again for the new primary of the leader with the long lease.
    let new_primary = cluster.primary_of(slot(&cluster, "redstalk")).unwrap();
    let new_port = format!(":{}", cluster.nodes[new_primary].port);
    wait_for("the warning for the new primary", SERVED_WITHIN, || {
        long_log
            .text()
            .lines()
            .any(|l| l.contains(SHORTER) && l.contains(&new_port))
    });

    // CONFIG forbidden by an ACL (as managed services do): said once, served anyway.
    for i in 0..cluster.nodes.len() {
        let set = cluster.cli(
            i,
            &[
                "ACL", "SETUSER", "limited", "on", ">s3cret", "~*", "&*", "+@all", "-config",
            ],
        );
        assert_eq!(set.as_deref().map(str::trim), Some("OK"), "node {i}");
    }
    let limited = cluster
        .url()
        .replacen("cluster://", "cluster://limited:s3cret@", 1);
    let mut args: Vec<String> = tls.iter().map(|a| a.to_string()).collect();
    args.extend(["--redis-lease".into(), TEST_LEASE_MS.into(), "-V".into()]);
    let mut acl = ServerProc::start_on_redis_as(ServerKind::Leader, &limited, "acl", &args)
        .unwrap_or_else(|e| panic!("start redstalk as the limited user: {e}"));
    let acl_log = acl.capture_stderr();
    wait_served(acl.addr, SERVED_WITHIN, &acl_log);
    put_reserve_delete(&acl, "acl", &acl_log);
    let said = line_with(&acl_log, UNREADABLE);
    assert_eq!(acl_log.text().matches(UNREADABLE).count(), 1, "said once");
    assert!(!said.contains("s3cret"), "the password is shown: {said}");
    println!("tls cluster: CONFIG forbidden: {said}");

    // The default test lease (1 s) is within the node timeout: never warned of.
    for (what, log) in [("shared", &s_log), ("leader, 1 s lease", &l_log)] {
        assert!(
            !log.text().contains(SHORTER) && !log.text().contains(UNREADABLE),
            "{what}: warned of the node timeout:\n{}",
            log.tail()
        );
    }
}

//! redstalk on a Redis Cluster under faults, against a load that keeps a ledger of every
//! job (support/load.rs). Part of the `cluster` test binary (a module of cluster.rs).
//!
//! What the tests prove:
//! - `moving_the_slot_under_load_{shared,leader}` — the namespace's slot migrated to
//!   another primary (IMPORTING/MIGRATING, MIGRATE, SETSLOT NODE) under load: calls
//!   the cluster refused (ASK, TRYAGAIN, MOVED) are sent again, the connections follow
//!   the slot to its new shard (whose replication history is its own), nothing is
//!   lost. Prints the migration time and the INTERNAL_ERROR replies meanwhile (0 seen:
//!   16 before MOVED replies, which redis-rs hands up as values, were re-sent).
//! - `killing_the_slots_primary_under_load_{shared,leader}` — kill -9 of the primary of
//!   the namespace's slot under a put/reserve/delete load, `--redis-wait-replicas 1`:
//!   the cluster promotes its replica, the old primary is restarted empty (it rejoins
//!   as a replica), redstalk follows by itself and no acknowledged job is lost or
//!   deleted twice. Keyed puts (docs/EXTENSIONS.md, *Keys*) in a tube no worker
//!   watches, some deleted, made before the kill and by a producer through it and on
//!   the new primary: every key acknowledged is found by key with its id afterwards
//!   (`READY`, or `DELETED` in its window) and a put with it again dedupes to that id,
//!   through a fresh instance (the one that ran through the kill killed -9), so from
//!   what the new primary holds. Prints the time to the promotion and to the
//!   first command acknowledged after it, the audit, and the keyed puts acknowledged,
//!   found, deduped and unanswered (and how many of those were applied).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::*;
use support::keyed::{KeyLedger, keyed_producer};

/// The node that replicates node `primary` (by its own `ROLE`), among those that answer.
fn replica_of(cluster: &Cluster, primary: usize) -> Option<usize> {
    let port = cluster.nodes[primary].port.to_string();
    (0..cluster.nodes.len()).find(|&i| {
        i != primary
            && cli(cluster.nodes[i].port, &["ROLE"]).is_some_and(|r| {
                let mut lines = r.lines();
                lines.next() == Some("slave") && lines.nth(1) == Some(port.as_str())
            })
    })
}

/// A put/reserve/delete load on `srv`, once it runs (jobs acknowledged and deleted).
fn running_load(srv: &ServerProc, log: &support::Log) -> Load {
    let load = Load::for_failover(srv.addr);
    load.wait_until(
        "the load runs",
        SERVED_WITHIN,
        || log.tail(),
        |l| l.acked.len() > 300 && l.deleted.len() > 100,
    );
    load
}

/// Print the load's audit and ledger under `what`, and assert nothing was lost or
/// delivered twice (`context` names the run).
fn report(what: &str, ledger: &support::load::Ledger, audit: &support::load::Audit, context: &str) {
    println!("{what} ({context}): {}", audit.summary());
    println!("{what} ({context}): {}", ledger.counts());
    audit.assert_sound(context);
}

/// kill -9 of the primary of the namespace's slot under load, in `kind`'s mode.
fn failover(kind: ServerKind) {
    let _serial = serial();
    let Some(mut cluster) = cluster() else { return };
    let prefix = format!("failover-{}", kind.name());
    let slot = slot(&cluster, &prefix);
    // A change is acknowledged once the slot's replica has it: the failover loses none.
    let wait = ["--redis-wait-replicas", "1", "--redis-wait-timeout", "500"];
    let (mut srv, log) = redstalk_with(&cluster, kind, &prefix, &wait);
    // Keyed jobs beside the load, in a tube its workers do not watch: some put before,
    // and a producer's until the load has gone on after the failover.
    let mut c = Client::connect(srv.addr, "keys before");
    let keys_before = KeyLedger::put(&mut c, "keys", "b", 100);
    drop(c);
    let halt = Arc::new(AtomicBool::new(false));
    let producer = keyed_producer(srv.addr, "keys", halt.clone());
    let load = running_load(&srv, &log);
    let old = cluster.primary_of(slot).expect("the slot has a primary");
    let acked_at_kill = load.ledger(|l| l.acked.len());
    cluster.nodes[old].kill();
    let killed = Instant::now();
    let promoted_within = Duration::from_secs(60);
    // Seen on the loaded CI machine: every primary marks the dead one FAIL, yet its
    // replica never wins an election (no promotion in 60 s). What is tested here is
    // redstalk after a promotion, so after ten node timeouts the replica is told to take
    // over as an operator would (CLUSTER FAILOVER FORCE), and the run says so.
    let stalled = Duration::from_millis(10 * support::cluster::NODE_TIMEOUT_MS);
    let mut forced = false;
    while cluster.primary_of(slot).is_none_or(|p| p == old) {
        assert!(
            killed.elapsed() < promoted_within,
            "the cluster did not promote the replica within {promoted_within:?}:\n{}",
            cluster.diagnostics()
        );
        if !forced && killed.elapsed() > stalled {
            forced = true;
            let replica = replica_of(&cluster, old).expect("the dead primary had a replica");
            println!(
                "cluster failover ({}): no election within {stalled:?}; CLUSTER FAILOVER FORCE \
                 on node {replica}:\n{}",
                kind.name(),
                cluster.diagnostics()
            );
            cli(
                cluster.nodes[replica].port,
                &["CLUSTER", "FAILOVER", "FORCE"],
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let promoted = killed.elapsed();
    // Back empty with its nodes.conf, as a supervisor restarts it: it rejoins as the new
    // primary's replica, and changes are acknowledged again once it is in sync.
    cluster.nodes[old].spawn().expect("restart the old primary");
    load.wait_until(
        "commands acknowledged on the new primary",
        Duration::from_secs(60),
        || log.tail(),
        |l| l.acked.len() > acked_at_kill + 5,
    );
    let first_ack = killed.elapsed();
    let (ledger, audit) = load.finish(&mut srv, &log);
    halt.store(true, Ordering::Relaxed);
    let keys_around = producer.join().expect("the keyed producer");
    let label = kind.redis_mode().unwrap();
    println!(
        "cluster failover ({label} mode, slot {slot}): primary killed with {acked_at_kill} \
         acknowledged; replica promoted {} ms after the kill; old primary restarted empty; \
         first command acknowledged after it {} ms after the kill (node timeout {} ms, \
         --redis-wait-replicas 1)",
        promoted.as_millis(),
        first_ack.as_millis(),
        support::cluster::NODE_TIMEOUT_MS
    );
    report(
        "cluster failover",
        &ledger,
        &audit,
        &format!("{label} mode, kill -9 of the slot's primary, --redis-wait-replicas 1"),
    );
    assert!(
        keys_around.live.len() + keys_around.deleted.len() > 20,
        "too few keyed puts acknowledged around the kill: {} live, {} deleted, {} unanswered",
        keys_around.live.len(),
        keys_around.deleted.len(),
        keys_around.unknown.len()
    );
    // Audited through a fresh instance, which knows only what the new primary holds (a
    // leader keeps its namespace in memory): the one that ran through the kill is
    // killed -9 (the drop).
    drop(srv);
    let restarted = Instant::now();
    let (srv, _log) = redstalk_with(&cluster, kind, &prefix, &wait);
    let (probe, _) = keys_before.live.first().expect("keys put before the kill");
    let find = format!("use keys\r\nfind-key {probe}\r\n");
    wait_for("the fresh instance answers find-key", SERVED_WITHIN, || {
        Client::try_connect(srv.addr, "probe").is_ok_and(|mut p| {
            let reply = Duration::from_secs(5);
            p.try_call(find.as_bytes(), reply).is_ok()
                && p.try_reply(reply)
                    .is_ok_and(|r| r.word() != "INTERNAL_ERROR")
        })
    });
    println!(
        "cluster failover keys ({label} mode): a fresh instance answers by key {} ms after \
         the old one was killed",
        restarted.elapsed().as_millis()
    );
    let mut c = Client::connect(srv.addr, "keys auditor");
    c.use_tube("keys");
    let what = format!("cluster failover keys ({label} mode");
    keys_before.audit(&mut c, &format!("{what}, put before the kill)"));
    keys_around.audit(&mut c, &format!("{what}, put through the kill)"));
}

/// The namespace's slot moved to another primary under load, in `kind`'s mode.
fn slot_move(kind: ServerKind) {
    let _serial = serial();
    let Some(cluster) = cluster() else { return };
    let prefix = format!("move-{}", kind.name());
    let slot = slot(&cluster, &prefix);
    let (mut srv, log) = redstalk(&cluster, kind, &prefix);
    let load = running_load(&srv, &log);
    let from = cluster.primary_of(slot).expect("the slot has a primary");
    let to = (0..3).find(|&i| i != from).unwrap();
    let errors_before = load.ledger(|l| l.internal_errors);
    let t = Instant::now();
    let keys = cluster
        .migrate_slot(slot, from, to)
        .expect("migrate the slot");
    let moved_in = t.elapsed();
    let acked = load.ledger(|l| l.acked.len());
    load.wait_until(
        "commands acknowledged after the move",
        Duration::from_secs(30),
        || log.tail(),
        |l| l.acked.len() > acked + 5,
    );
    let resumed = t.elapsed();
    let errors = load.ledger(|l| l.internal_errors) - errors_before;
    let (ledger, audit) = load.finish(&mut srv, &log);
    let label = kind.redis_mode().unwrap();
    println!(
        "cluster slot move ({label} mode, slot {slot}, node {from} -> {to}): {keys} keys \
         migrated in {} ms; commands acknowledged again {} ms after the move began; \
         {errors} INTERNAL_ERROR replies meanwhile",
        moved_in.as_millis(),
        resumed.as_millis()
    );
    report(
        "cluster slot move",
        &ledger,
        &audit,
        &format!("{label} mode, the namespace's slot moved"),
    );
    assert_eq!(cluster.primary_of(slot), Some(to));
}

#[test]
fn moving_the_slot_under_load_shared() {
    slot_move(ServerKind::Redis);
}

#[test]
fn moving_the_slot_under_load_leader() {
    slot_move(ServerKind::Leader);
}

#[test]
fn killing_the_slots_primary_under_load_shared() {
    failover(ServerKind::Redis);
}

#[test]
fn killing_the_slots_primary_under_load_leader() {
    failover(ServerKind::Leader);
}

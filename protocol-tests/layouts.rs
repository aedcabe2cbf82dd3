//! Key layouts against real processes (a private redis-server, never the one on
//! 6379): the upgrades from the layouts before this version's (schema 3: a job is one
//! hash `{P}:j:<id>`), and what a version does with a layout later than its own
//! (docs/OPERATIONS.md, *Upgrading across the key layout change*; docs/plans/schema3.md
//! §3; src/redis/schema/).
//!
//! What the tests prove:
//! - `a_namespace_of_schema_2_is_upgraded_in_place_in_both_modes` — a namespace this
//!   version wrote (jobs ready, delayed and buried in three tubes, a paused tube, the id
//!   counter), taken back to schema 2 (`support::namespace::to_schema_2`), with a body
//!   left without its job in a tube the tube list does not name: in each Redis mode,
//!   upgraded at start and served as before (peek, stats-job, stats-tube, reserve
//!   order, the next id); no schema-2 key left (no `:jobs`, `:bodies`, `{P}:index`,
//!   `{P}:leader:commit`), one hash per job, `{P}:schema` = 3, a new `{P}:generation`,
//!   `{P}:leader` holding the lock-out value for good (no expiry); the body without
//!   its job converted, then removed (by the leader's load, or shared mode's sweep).
//!   Prints the start time and the keys before and after.
//! - `an_upgrade_cut_short_resumes` — a schema-2 namespace whose upgrade stopped
//!   midway (lock-out value written, `{P}:schema` = `2>3`, tube alpha's jobs and one of
//!   beta's converted, the rest not, part of the index gone): in each mode the start
//!   resumes the upgrade and serves every job (body, tube, state), nothing lost, and
//!   leaves no schema-2 key.
//! - `a_leader_of_schema_2_holds_the_upgrade_back` — a live lease of the previous
//!   version in `{P}:leader`: shared mode refuses to start, saying why, and nothing of
//!   the namespace changes; leader mode waits (saying so once, not listening, nothing
//!   converted) until the lease lapses, then upgrades and serves (prints how long
//!   after the lapse). The old leader's late batch (the batch script,
//!   `redstalk::redis::fenced_script::SCRIPT`, with its token and schema 2's keys;
//!   the same call is applied on a namespace it still leads) is then refused with
//!   `FENCED` and writes nothing, and `{P}:leader` keeps the lock-out value without
//!   expiry (an old standby sees a holder forever).
//! - `a_live_instance_of_schema_2_refuses_the_upgrade` — a heartbeat of the previous
//!   version not lapsed (`{P}:instances`, score `+inf`): both modes refuse to start,
//!   saying so, and no key of the namespace changes; once the heartbeat has lapsed the
//!   upgrade runs.
//! - `a_namespace_of_the_previous_layout_is_renamed_at_start_and_served` — a
//!   namespace written with schema 1's key names (the namespace above taken back to
//!   schema 2, then renamed): in both Redis modes, a live heartbeat of the previous
//!   version refuses the start and a live lease refuses it in shared mode, while leader
//!   mode waits for it (nothing renamed either way); then renamed and upgraded at start
//!   (shared mode: resuming a renaming cut short) and served as before (peek,
//!   stats-job, stats-tube, reserve, the next id); no schema-1 key left but the
//!   tombstone in the old lease key, no schema-2 key but the lock-out value in
//!   `{P}:leader`, both without expiry; `{P}:schema` = 3. Prints how many keys and how
//!   long the start took.
//! - `a_namespace_of_a_later_layout_is_refused_and_left_as_it_is` — a namespace whose
//!   `{P}:schema` is 4 (a later version's layout) is refused at start in both modes,
//!   with a message saying so, and no key of it changes.
//! - `an_upgrade_renames_the_tubes_of_every_chunk` — 2,500 tubes of schema 1 (three
//!   rename calls of 1,000): none left under the old names, the last one served with
//!   its counters, the id counter kept. Prints the start time.
//! - `a_standby_never_leads_a_namespace_of_a_later_layout` — leader mode: while a
//!   leader serves, the namespace's `{P}:schema` becomes 4 (as a later version's
//!   upgrade leaves it); the leader is killed; the standby takes the lease, reads the
//!   layout, gives the lease up and never contends again (the lease stays free for
//!   several lease periods), logging why once; no tube key or job hash is written by
//!   it. Before, it loaded the namespace as its own layout and served it.
//! - `a_shared_instance_stops_serving_a_namespace_a_later_layout_took_over` — shared
//!   mode: while an instance serves, the namespace's `{P}:schema` becomes 4 and its
//!   generation changes (as a later version's upgrade leaves them); the instance's
//!   connections are closed, it logs why, and every put after that, on an old or a
//!   new connection, fails (never `INSERTED`); no tube key or job hash is written.
//!   Before, it adopted the new generation and served the namespace misread.
//!
//! - `a_start_cut_short_at_the_lock_out_resumes` — the lock-out value in `{P}:leader`
//!   and the layout's mark (`2>3`, or 3 for a fresh namespace) are written in one
//!   script, the mark first: a start whose mark Redis refuses (here: an ACL that lets
//!   the instance write only the lock-out's keys) writes neither, and the next start
//!   upgrades and serves. Before (found 2026-12-06 by this test), the two were written
//!   by two calls, and a start cut short between them left the lock-out value with
//!   `{P}:schema` still 2, which every later start refused as a namespace moved away
//!   by `redstalk-namespace copy`.

// A test reports failure by panicking: unwrap and expect are how it says so.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::net::SocketAddr;
use std::process::{Child, Command};
use std::thread;
use std::time::{Duration, Instant};

use support::client::Client;
use support::namespace::{
    MOVED, assert_served, fill_namespace, keys_starting, redis_conn, to_schema_2,
};
use support::redis::{RedisServer, private_redis};
use support::{
    Log, ServerKind, free_port, redis_args, redstalk_on_as, redstalk_path, serial, spawn_logged,
    wait_child_listening, wait_served,
};

const REPLY: Duration = Duration::from_secs(10);

/// The tombstone the upgrade leaves in a namespace's schema-1 lease key
/// (src/redis/lockout.rs).
const TOMBSTONE: &str = "0|schema2|upgrade-redstalk";

/// A lease token of a leader of the previous version (`epoch|instance|address`).
const OLD_TOKEN: &str = "4|old|127.0.0.1:1";

/// What the start logs once it has upgraded a namespace to schema 3
/// (src/redis/schema/mod.rs).
const UPGRADED: &str = "upgraded the namespace's key layout to schema 3";

/// What a leader-mode start logs while a lease of the previous version holds it back.
const WAITING: &str = "waiting for it to lapse";

/// Jobs as [`fill_namespace`] returns them.
type Jobs = Vec<(u64, &'static str, &'static str, Vec<u8>)>;

fn get(conn: &mut ::redis::Connection, key: &str) -> Option<String> {
    ::redis::cmd("GET").arg(key).query(conn).unwrap()
}

fn pttl(conn: &mut ::redis::Connection, key: &str) -> i64 {
    ::redis::cmd("PTTL").arg(key).query(conn).unwrap()
}

/// Every key whose name starts with `start`, with its serialized value (`DUMP`), in
/// name order: what a start that must change nothing is compared by.
fn dumped(conn: &mut ::redis::Connection, start: &str) -> Vec<(String, Vec<u8>)> {
    keys_starting(conn, start)
        .into_iter()
        .map(|k| {
            let dump: Vec<u8> = ::redis::cmd("DUMP").arg(&k).query(conn).unwrap();
            (k, dump)
        })
        .collect()
}

/// The keys of namespace `p` that only schema 2 has: tubes' `jobs` and `bodies`
/// hashes, the index, leader mode's batch sequence of schema 2.
fn schema_2_keys(conn: &mut ::redis::Connection, p: &str) -> Vec<String> {
    let tag = format!("{{{p}}}");
    keys_starting(conn, &tag)
        .into_iter()
        .filter(|k| {
            (k.starts_with(&format!("{tag}:t:"))
                && (k.ends_with(":jobs") || k.ends_with(":bodies")))
                || *k == format!("{tag}:index")
                || *k == format!("{tag}:leader:commit")
        })
        .collect()
}

/// The job hashes of namespace `p` (`{p}:j:<id>`).
fn job_hashes(conn: &mut ::redis::Connection, p: &str) -> Vec<String> {
    keys_starting(conn, &format!("{{{p}}}:j:"))
}

/// A namespace `p` of schema 2 holding [`fill_namespace`]'s jobs: written by this
/// version in mode `kind`, stopped cleanly, taken back to schema 2. Checks it is in
/// schema 2's form (every job in its tube's hashes, none as a hash of its own).
fn schema_2_namespace(
    redis: &RedisServer,
    conn: &mut ::redis::Connection,
    kind: ServerKind,
    p: &str,
) -> Jobs {
    let (mut srv, _) = redstalk_on_as(kind, redis, p, &[]);
    let mut c = Client::connect(srv.addr, "fill");
    c.timeout = REPLY;
    let jobs = fill_namespace(&mut c);
    drop(c);
    srv.signal("TERM").unwrap();
    assert!(
        srv.wait_exit(Duration::from_secs(30)).is_some(),
        "no clean stop"
    );
    drop(srv);
    assert_eq!(
        job_hashes(conn, p).len(),
        jobs.len(),
        "not one hash per job"
    );
    let converted = to_schema_2(conn, p);
    assert_eq!(converted, jobs.len());
    assert!(job_hashes(conn, p).is_empty());
    let tag = format!("{{{p}}}");
    for (id, tube, _, body) in &jobs {
        let (meta, held, indexed): (Option<Vec<u8>>, Option<Vec<u8>>, Option<String>) =
            ::redis::pipe()
                .cmd("HGET")
                .arg(format!("{tag}:t:{tube}:jobs"))
                .arg(id)
                .cmd("HGET")
                .arg(format!("{tag}:t:{tube}:bodies"))
                .arg(id)
                .cmd("HGET")
                .arg(format!("{tag}:index"))
                .arg(id)
                .query(conn)
                .unwrap();
        assert!(meta.is_some(), "job {id}: no metadata in schema 2's form");
        assert_eq!(held.as_ref(), Some(body), "job {id}: body");
        assert_eq!(indexed.as_deref(), Some(*tube), "job {id}: index");
    }
    jobs
}

/// Checks that namespace `p` is schema 3 and nothing of schema 2 is left in it: no
/// `jobs`/`bodies` hash, no index, no batch sequence of schema 2; a hash per job of
/// `jobs`; `{p}:leader` holds the lock-out value with no expiry.
fn assert_upgraded(conn: &mut ::redis::Connection, p: &str, jobs: &Jobs) {
    let tag = format!("{{{p}}}");
    let left = schema_2_keys(conn, p);
    assert!(left.is_empty(), "keys of schema 2 left: {left:?}");
    assert_eq!(get(conn, &format!("{tag}:schema")).as_deref(), Some("3"));
    let lease = format!("{tag}:leader");
    assert_eq!(
        get(conn, &lease).as_deref(),
        Some(MOVED),
        "the previous version's lease key does not lock it out"
    );
    assert_eq!(pttl(conn, &lease), -1, "the lock-out value expires");
    for (id, tube, _, body) in jobs {
        let (t, b, m): (Option<String>, Option<Vec<u8>>, Option<Vec<u8>>) = ::redis::cmd("HMGET")
            .arg(format!("{tag}:j:{id}"))
            .arg("t")
            .arg("b")
            .arg("m")
            .query(conn)
            .unwrap();
        assert_eq!(t.as_deref(), Some(*tube), "job {id}'s hash: tube");
        assert_eq!(b.as_ref(), Some(body), "job {id}'s hash: body");
        assert!(m.is_some(), "job {id}'s hash: no metadata");
    }
}

/// The line of `log` that says the upgrade is done (with its counts: `tubes=`,
/// `jobs=`, `bodies_without_job=`, `ms=`).
fn upgrade_line(log: &Log) -> String {
    let text = log.text();
    text.lines()
        .find(|l| l.contains(UPGRADED))
        .unwrap_or_else(|| panic!("no upgrade logged\n{}", log.tail()))
        .to_string()
}

/// A redstalk in leader mode on namespace `p`, spawned without waiting for it to
/// listen (a start held back by a lease of the previous version listens only once it
/// has upgraded); killed when dropped.
struct Spawned {
    child: Child,
    log: Log,
    port: u16,
    started: Instant,
}

impl Spawned {
    fn leader(redis: &RedisServer, p: &str) -> Spawned {
        let port = free_port();
        let mut cmd = Command::new(redstalk_path());
        cmd.args(["-l", "127.0.0.1", "-p", &port.to_string()])
            .args(redis_args(&redis.url(), p, "leader"));
        let started = Instant::now();
        let (child, log) = spawn_logged(&mut cmd).unwrap();
        Spawned {
            child,
            log,
            port,
            started,
        }
    }

    fn addr(&self) -> SocketAddr {
        ([127, 0, 0, 1], self.port).into()
    }

    fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_namespace_of_schema_2_is_upgraded_in_place_in_both_modes() {
    let _serial = serial();
    let Some(redis) = private_redis(&[], "key layout tests") else {
        return;
    };
    let mut conn = redis_conn(&redis);
    for kind in [ServerKind::Redis, ServerKind::Leader] {
        let p = format!("v2-{}", kind.name());
        let tag = format!("{{{p}}}");
        let jobs = schema_2_namespace(&redis, &mut conn, kind, &p);
        // A body left without its job (a large put cut short), in a tube the tube list
        // does not name: only the upgrade's SCAN for stray tubes finds it.
        let orphan = format!("{tag}:j:900");
        let _: () = ::redis::cmd("HSET")
            .arg(format!("{tag}:t:ghost:bodies"))
            .arg(900)
            .arg("a body written ahead of a put that failed")
            .query(&mut conn)
            .unwrap();
        if kind == ServerKind::Leader {
            assert!(
                get(&mut conn, &format!("{tag}:leader:commit")).is_some(),
                "no batch sequence of schema 2 to upgrade"
            );
        }
        let generation = get(&mut conn, &format!("{tag}:generation"));
        let before = keys_starting(&mut conn, &tag).len();

        let t = Instant::now();
        let (srv, log) = redstalk_on_as(kind, &redis, &p, &[]);
        let started_ms = t.elapsed().as_millis();
        let mut c = Client::connect(srv.addr, "after");
        c.timeout = REPLY;
        wait_served(srv.addr, REPLY, &log);
        assert_served(&mut c, &jobs, &log);
        log.wait_for(UPGRADED, REPLY);
        assert_eq!(log.text().matches(UPGRADED).count(), 1, "{}", log.tail());
        // Every job converted, and the body without a job kept as one (for the load or
        // the sweep to remove), not dropped on the way.
        let said = upgrade_line(&log);
        assert!(
            said.contains(&format!(" jobs={} ", jobs.len()))
                && said.contains("bodies_without_job=1"),
            "{said}"
        );
        assert_upgraded(&mut conn, &p, &jobs);
        if generation.is_some() {
            assert_ne!(
                get(&mut conn, &format!("{tag}:generation")),
                generation,
                "the upgrade left the generation as it was"
            );
        }
        let after = keys_starting(&mut conn, &tag).len();
        c.watch_only("alpha");
        let (got, body) = c.reserve();
        assert_eq!((got, &body[..]), (jobs[1].0, &b"alpha urgent"[..]));
        c.expect(&format!("release {got} 1 0"), "RELEASED");
        let next = c.put(1, 0, 60, b"new");
        assert_eq!(next, jobs.iter().map(|j| j.0).max().unwrap() + 1);
        assert!(job_hashes(&mut conn, &p).contains(&format!("{tag}:j:{next}")));
        assert!(
            schema_2_keys(&mut conn, &p).is_empty(),
            "a put wrote schema 2"
        );
        // The body without a job was converted (not lost on the way), then removed:
        // by the leader's load, or by shared mode's sweep of bodies written ahead.
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let (exists, ahead): (i64, i64) = ::redis::pipe()
                .cmd("EXISTS")
                .arg(&orphan)
                .cmd("ZCARD")
                .arg(format!("{tag}:ahead"))
                .query(&mut conn)
                .unwrap();
            if exists == 0 && ahead == 0 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the body without a job is still there ({exists} hash, {ahead} noted \
                 ahead)\n{}",
                log.tail()
            );
            thread::sleep(Duration::from_millis(100));
        }
        if kind == ServerKind::Leader {
            let holder = support::lease::lease_token(&mut conn, &p).unwrap();
            assert_eq!(
                support::lease::holder_address(&holder),
                Some(srv.addr.to_string().as_str())
            );
        }
        println!(
            "{} mode: a namespace of schema 2 ({} jobs, {before} keys) upgraded and served \
             {started_ms} ms after the start; {after} keys after (generation {}); the \
             upgrade said: {}",
            kind.redis_mode().unwrap(),
            jobs.len(),
            if generation.is_some() {
                "changed"
            } else {
                "absent before"
            },
            said.split_once("schema 3")
                .map_or("", |(_, counts)| counts.trim()),
        );
    }
}

#[test]
fn an_upgrade_cut_short_resumes() {
    let _serial = serial();
    let Some(redis) = private_redis(&[], "key layout tests") else {
        return;
    };
    let mut conn = redis_conn(&redis);
    for kind in [ServerKind::Redis, ServerKind::Leader] {
        let p = format!("cut-{}", kind.name());
        let tag = format!("{{{p}}}");
        let jobs = schema_2_namespace(&redis, &mut conn, kind, &p);
        // The upgrade had begun: the lock-out value, the layout under upgrade, and some
        // jobs converted, each whole (tube alpha's, and beta's buried one; beta's
        // delayed one and gamma's not). The index had lost alpha's entries.
        let _: () = ::redis::pipe()
            .cmd("SET")
            .arg(format!("{tag}:leader"))
            .arg(MOVED)
            .ignore()
            .cmd("SET")
            .arg(format!("{tag}:schema"))
            .arg("2>3")
            .ignore()
            .query(&mut conn)
            .unwrap();
        let mut converted = Vec::new();
        for (id, tube, state, _) in &jobs {
            if !(*tube == "alpha" || *state == "buried") {
                continue;
            }
            let (jobs_key, bodies_key) = (
                format!("{tag}:t:{tube}:jobs"),
                format!("{tag}:t:{tube}:bodies"),
            );
            let (meta, body): (Vec<u8>, Vec<u8>) = ::redis::pipe()
                .cmd("HGET")
                .arg(&jobs_key)
                .arg(id)
                .cmd("HGET")
                .arg(&bodies_key)
                .arg(id)
                .query(&mut conn)
                .unwrap();
            let mut pipe = ::redis::pipe();
            pipe.atomic()
                .cmd("HSET")
                .arg(format!("{tag}:j:{id}"))
                .arg("t")
                .arg(tube)
                .arg("m")
                .arg(meta)
                .arg("b")
                .arg(body)
                .ignore()
                .cmd("HDEL")
                .arg(&jobs_key)
                .arg(id)
                .ignore()
                .cmd("HDEL")
                .arg(&bodies_key)
                .arg(id)
                .ignore();
            if *tube == "alpha" {
                pipe.cmd("HDEL")
                    .arg(format!("{tag}:index"))
                    .arg(id)
                    .ignore();
            }
            let _: () = pipe.query(&mut conn).unwrap();
            converted.push(*id);
        }
        assert_eq!(converted.len(), 3);
        let left = schema_2_keys(&mut conn, &p);
        assert!(
            left.contains(&format!("{tag}:t:beta:jobs"))
                && !left.contains(&format!("{tag}:t:alpha:jobs")),
            "{left:?}"
        );

        let t = Instant::now();
        let (srv, log) = redstalk_on_as(kind, &redis, &p, &[]);
        let started_ms = t.elapsed().as_millis();
        let mut c = Client::connect(srv.addr, "after");
        c.timeout = REPLY;
        wait_served(srv.addr, REPLY, &log);
        assert_served(&mut c, &jobs, &log);
        log.wait_for(UPGRADED, REPLY);
        // The resumed upgrade converted the rest, only.
        let said = upgrade_line(&log);
        assert!(
            said.contains(&format!(" jobs={} ", jobs.len() - converted.len())),
            "{said}"
        );
        assert_upgraded(&mut conn, &p, &jobs);
        assert_eq!(
            c.stat_u64("current-jobs-ready")
                + c.stat_u64("current-jobs-delayed")
                + c.stat_u64("current-jobs-buried"),
            jobs.len() as u64,
            "{}",
            log.tail()
        );
        let next = c.put(1, 0, 60, b"new");
        assert_eq!(next, jobs.iter().map(|j| j.0).max().unwrap() + 1);
        println!(
            "{} mode: an upgrade cut short ({} of {} jobs converted) resumed; served {started_ms} \
             ms after the start",
            kind.redis_mode().unwrap(),
            converted.len(),
            jobs.len()
        );
    }
}

#[test]
fn a_leader_of_schema_2_holds_the_upgrade_back() {
    let _serial = serial();
    let Some(redis) = private_redis(&[], "key layout tests") else {
        return;
    };
    let mut conn = redis_conn(&redis);
    let p = "held";
    let tag = format!("{{{p}}}");
    let (lease, commit) = (format!("{tag}:leader"), format!("{tag}:leader:commit"));
    let jobs = schema_2_namespace(&redis, &mut conn, ServerKind::Leader, p);
    // The old leader leads: its lease, and its last batch was its 7th.
    let _: () = ::redis::pipe()
        .cmd("SET")
        .arg(&lease)
        .arg(OLD_TOKEN)
        .arg("PX")
        .arg(30_000)
        .ignore()
        .cmd("SET")
        .arg(&commit)
        .arg(format!("{OLD_TOKEN}#7"))
        .ignore()
        .query(&mut conn)
        .unwrap();
    let before = dumped(&mut conn, &tag);

    // Shared mode: refused, nothing changed.
    let refused = support::ServerProc::start_on_redis_as(ServerKind::Redis, &redis.url(), p, &[]);
    let err = refused
        .err()
        .expect("started beside a live leader of schema 2");
    assert!(err.contains("previous version"), "{err}");
    assert_eq!(
        dumped(&mut conn, &tag),
        before,
        "the refused start changed a key"
    );
    println!(
        "shared mode refused: {}",
        err.lines().last().unwrap_or_default()
    );

    // Leader mode: waits for the lease to lapse (3 s from now), then upgrades. `lapse`
    // is taken before the SET is sent, so the lease is surely live before it.
    let lapse = Instant::now() + Duration::from_millis(3_000);
    let _: () = ::redis::cmd("SET")
        .arg(&lease)
        .arg(OLD_TOKEN)
        .arg("PX")
        .arg(3_000)
        .query(&mut conn)
        .unwrap();
    let before = dumped(&mut conn, &tag);
    let mut new = Spawned::leader(&redis, p);
    new.log.wait_for(WAITING, Duration::from_secs(3));
    assert!(Instant::now() < lapse, "the lease lapsed before the check");
    assert!(new.running(), "{}", new.log.tail());
    assert!(!support::is_listening_by(new.child.id(), new.port));
    assert_eq!(
        dumped(&mut conn, &tag),
        before,
        "the waiting start changed a key"
    );
    let (mut seen_upgrading, mut upgraded) = (None, None);
    while upgraded.is_none() {
        assert!(
            Instant::now() < lapse + Duration::from_secs(10),
            "not upgraded 10 s after the lease lapsed\n{}",
            new.log.tail()
        );
        match get(&mut conn, &format!("{tag}:schema")).as_deref() {
            Some("2") => {
                if Instant::now() < lapse {
                    assert_eq!(get(&mut conn, &lease).as_deref(), Some(OLD_TOKEN));
                    assert!(job_hashes(&mut conn, p).is_empty(), "converted while held");
                }
            }
            Some("2>3") => {
                seen_upgrading.get_or_insert_with(Instant::now);
            }
            Some("3") => upgraded = Some(Instant::now()),
            other => panic!("schema {other:?}"),
        }
        thread::sleep(Duration::from_millis(2));
    }
    let upgraded = upgraded.unwrap();
    assert!(upgraded >= lapse, "upgraded while the old lease was live");
    let port = new.port;
    wait_child_listening(&mut new.child, port, REPLY, &new.log);
    let listening = Instant::now();
    wait_served(new.addr(), REPLY, &new.log);
    let served = Instant::now();
    assert_eq!(
        new.log.text().matches(WAITING).count(),
        1,
        "said more than once\n{}",
        new.log.tail()
    );
    let mut c = Client::connect(new.addr(), "after");
    c.timeout = REPLY;
    assert_served(&mut c, &jobs, &new.log);
    assert_upgraded(&mut conn, p, &jobs);
    let next = c.put(1, 0, 60, b"new");
    assert_eq!(next, jobs.iter().map(|j| j.0).max().unwrap() + 1);
    println!(
        "leader mode: held back {} ms by a lease of schema 2; upgraded {} ms after it \
         lapsed{}, listening after {} ms, served after {} ms",
        (lapse - new.started).as_millis(),
        (upgraded - lapse).as_millis(),
        seen_upgrading
            .map(|s| format!(" (2>3 seen {} ms after)", (s - lapse).as_millis()))
            .unwrap_or_default(),
        (listening - lapse).as_millis(),
        (served - lapse).as_millis(),
    );

    // The old leader's batch that lands late: its 8th, after its 7th, writing a job in
    // schema 2's form. First the same call on a namespace it still leads, applied (the
    // call is one the script takes); then on the upgraded one: fenced, nothing written.
    let late = |conn: &mut ::redis::Connection, tag: &str| -> ::redis::RedisResult<i64> {
        ::redis::cmd("EVAL")
            .arg(redstalk::redis::fenced_script::SCRIPT)
            .arg(2)
            .arg(format!("{tag}:leader"))
            .arg(format!("{tag}:leader:commit"))
            .arg(OLD_TOKEN)
            .arg(8)
            .arg(7)
            .arg(4)
            .arg("HSET")
            .arg(format!("{tag}:t:alpha:jobs"))
            .arg(999)
            .arg("late")
            .query(conn)
    };
    let control = "{still-led}";
    let _: () = ::redis::pipe()
        .cmd("SET")
        .arg(format!("{control}:leader"))
        .arg(OLD_TOKEN)
        .ignore()
        .cmd("SET")
        .arg(format!("{control}:leader:commit"))
        .arg(format!("{OLD_TOKEN}#7"))
        .ignore()
        .query(&mut conn)
        .unwrap();
    assert_eq!(late(&mut conn, control).unwrap(), 1);
    let written: Option<String> = ::redis::cmd("HGET")
        .arg(format!("{control}:t:alpha:jobs"))
        .arg(999)
        .query(&mut conn)
        .unwrap();
    assert_eq!(written.as_deref(), Some("late"));
    let before = dumped(&mut conn, &tag);
    let err = late(&mut conn, &tag).expect_err("an old leader's batch applied");
    assert_eq!(err.code(), Some("FENCED"), "{err}");
    assert_eq!(
        dumped(&mut conn, &tag),
        before,
        "the fenced batch wrote a key"
    );
    assert!(schema_2_keys(&mut conn, p).is_empty());
    assert_eq!(get(&mut conn, &lease).as_deref(), Some(MOVED));
    assert_eq!(
        pttl(&mut conn, &lease),
        -1,
        "an old standby could lead once it expires"
    );
    assert_served(&mut c, &jobs, &new.log);
    println!("an old leader's late batch: {err}");
}

#[test]
fn a_live_instance_of_schema_2_refuses_the_upgrade() {
    let _serial = serial();
    let Some(redis) = private_redis(&[], "key layout tests") else {
        return;
    };
    let mut conn = redis_conn(&redis);
    let p = "live-old";
    let tag = format!("{{{p}}}");
    let instances = format!("{tag}:instances");
    let jobs = schema_2_namespace(&redis, &mut conn, ServerKind::Redis, p);
    let _: () = ::redis::cmd("ZADD")
        .arg(&instances)
        .arg("+inf")
        .arg("old")
        .query(&mut conn)
        .unwrap();
    let before = dumped(&mut conn, &tag);
    for kind in [ServerKind::Redis, ServerKind::Leader] {
        let t = Instant::now();
        let refused = support::ServerProc::start_on_redis_as(kind, &redis.url(), p, &[]);
        let err = refused
            .err()
            .expect("started beside a live instance of schema 2");
        assert!(
            err.contains("1 redstalk instance(s) of the previous version"),
            "{err}"
        );
        assert_eq!(
            dumped(&mut conn, &tag),
            before,
            "the refused start changed a key"
        );
        println!(
            "{} mode: refused in {} ms: {}",
            kind.redis_mode().unwrap(),
            t.elapsed().as_millis(),
            err.lines().last().unwrap_or_default()
        );
    }
    // Its heartbeat lapsed (an instance that stopped without a word): upgraded.
    let _: () = ::redis::cmd("ZADD")
        .arg(&instances)
        .arg(1)
        .arg("old")
        .query(&mut conn)
        .unwrap();
    let (srv, log) = redstalk_on_as(ServerKind::Redis, &redis, p, &[]);
    let mut c = Client::connect(srv.addr, "after");
    c.timeout = REPLY;
    assert_served(&mut c, &jobs, &log);
    assert_upgraded(&mut conn, p, &jobs);
}

/// A start whose layout mark Redis refuses (as a Redis that goes away mid-start would):
/// the lock-out written in the same script is not left behind, and the next start
/// resumes. Both the upgrade of a schema-2 namespace and a fresh namespace's first
/// start. A user whose ACL lets it write only the keys of the lock-out (not
/// `{P}:schema`) makes the refusal happen inside that script.
#[test]
fn a_start_cut_short_at_the_lock_out_resumes() {
    let _serial = serial();
    let Some(redis) = private_redis(&[], "key layout tests") else {
        return;
    };
    let mut conn = redis_conn(&redis);
    let jobs = schema_2_namespace(&redis, &mut conn, ServerKind::Redis, "cut-early");
    for p in ["cut-early", "fresh-early"] {
        let tag = format!("{{{p}}}");
        let _: () = ::redis::cmd("ACL")
            .arg("SETUSER")
            .arg(p)
            .arg("on")
            .arg(">pw")
            .arg("resetkeys")
            .arg("%R~*")
            .arg(format!("%RW~{tag}:leader"))
            .arg(format!("%RW~{tag}:instances"))
            .arg("&*")
            .arg("+@all")
            .query(&mut conn)
            .unwrap();
        let url = redis.url().replace("redis://", &format!("redis://{p}:pw@"));
        let err = support::ServerProc::start_on_redis_as(ServerKind::Redis, &url, p, &[])
            .err()
            .expect("started without writing its layout");
        assert!(err.contains("NoPerm"), "{err}");
        assert_eq!(
            get(&mut conn, &format!("{tag}:leader")),
            None,
            "the lock-out was written without the layout's mark"
        );
        let schema = get(&mut conn, &format!("{tag}:schema"));
        let before = (p == "cut-early").then(|| "2".to_string());
        assert_eq!(schema, before, "the layout's mark was written");
        let t = Instant::now();
        let started =
            support::ServerProc::start_on_redis_as(ServerKind::Redis, &redis.url(), p, &[]);
        let mut srv = started.unwrap_or_else(|e| panic!("{p}: the next start: {e}"));
        let log = srv.capture_stderr();
        if p == "cut-early" {
            let mut c = Client::connect(srv.addr, "after");
            c.timeout = REPLY;
            assert_served(&mut c, &jobs, &log);
            assert_upgraded(&mut conn, p, &jobs);
        } else {
            assert_eq!(
                get(&mut conn, &format!("{tag}:schema")).as_deref(),
                Some("3")
            );
        }
        println!(
            "{p}: the next start resumed, served after {} ms",
            t.elapsed().as_millis()
        );
    }
}

/// Rename the namespace `p`'s keys (schema 2, [`to_schema_2`]) to the names of schema 1,
/// as a namespace written by a version of that layout holds them: `{p}:t:T:k` →
/// `{p:t:T}:k`, `{p}:refs:I` → `p:refs:I`, `{p}:x` → `p:x`; no `{p}:schema`, no lease
/// (every instance stopped). How many keys.
fn to_schema_1(conn: &mut ::redis::Connection, p: &str) -> usize {
    let tag = format!("{{{p}}}:");
    let names = keys_starting(conn, &tag);
    for name in &names {
        let rest = &name[tag.len()..];
        if rest == "schema" || rest == "leader" {
            let _: () = ::redis::cmd("DEL").arg(name).query(conn).unwrap();
            continue;
        }
        let old = match rest.strip_prefix("t:") {
            Some(tube_key) => {
                let (tube, key) = tube_key.rsplit_once(':').unwrap();
                format!("{{{p}:t:{tube}}}:{key}")
            }
            None => format!("{p}:{rest}"),
        };
        let _: () = ::redis::cmd("RENAME")
            .arg(name)
            .arg(&old)
            .query(conn)
            .unwrap();
    }
    names.len()
}

#[test]
fn a_namespace_of_the_previous_layout_is_renamed_at_start_and_served() {
    let _serial = serial();
    let Some(redis) = private_redis(&[], "key layout tests") else {
        return;
    };
    let mut conn = redis_conn(&redis);
    for kind in [ServerKind::Redis, ServerKind::Leader] {
        let p = format!("up-{}", kind.name());
        let jobs = schema_2_namespace(&redis, &mut conn, kind, &p);
        let renamed = to_schema_1(&mut conn, &p);
        assert!(keys_starting(&mut conn, &format!("{{{p}}}")).is_empty());
        let legacy = dumped(&mut conn, &format!("{p}:"));
        assert!(!legacy.is_empty());

        // An instance of the previous version leads: shared mode refuses, leader mode
        // waits for its lease to lapse; nothing renamed either way.
        let lease = format!("{p}:leader");
        let _: () = ::redis::cmd("SET")
            .arg(&lease)
            .arg(OLD_TOKEN)
            .arg("PX")
            .arg(60_000)
            .query(&mut conn)
            .unwrap();
        if kind == ServerKind::Redis {
            let refused = support::ServerProc::start_on_redis_as(kind, &redis.url(), &p, &[]);
            let err = refused.err().expect("started beside a live old leader");
            assert!(err.contains("previous version"), "{err}");
        } else {
            let mut waiting = Spawned::leader(&redis, &p);
            waiting.log.wait_for(WAITING, REPLY);
            thread::sleep(Duration::from_millis(500));
            assert!(waiting.running(), "{}", waiting.log.tail());
            assert!(!support::is_listening_by(waiting.child.id(), waiting.port));
        }
        assert!(keys_starting(&mut conn, &format!("{{{p}}}")).is_empty());
        assert_eq!(get(&mut conn, &lease).as_deref(), Some(OLD_TOKEN));
        let _: () = ::redis::cmd("DEL").arg(&lease).query(&mut conn).unwrap();
        assert_eq!(
            dumped(&mut conn, &format!("{p}:")),
            legacy,
            "a schema-1 key changed"
        );
        // One of the previous version serves in shared mode (a heartbeat not lapsed).
        let instances = format!("{p}:instances");
        let _: () = ::redis::cmd("ZADD")
            .arg(&instances)
            .arg("+inf")
            .arg("old")
            .query(&mut conn)
            .unwrap();
        let refused = support::ServerProc::start_on_redis_as(kind, &redis.url(), &p, &[]);
        let err = refused.err().expect("started beside a live old instance");
        assert!(
            err.contains("1 redstalk instance(s) of the previous version"),
            "{err}"
        );
        assert!(keys_starting(&mut conn, &format!("{{{p}}}")).is_empty());
        let _: () = ::redis::cmd("ZREM")
            .arg(&instances)
            .arg("old")
            .query(&mut conn)
            .unwrap();

        // Shared mode: an upgrade cut short (tombstone written, tube alpha and the id
        // counter renamed) resumes. Leader mode: a whole upgrade.
        if kind == ServerKind::Redis {
            let _: () = ::redis::cmd("SET")
                .arg(&lease)
                .arg(TOMBSTONE)
                .query(&mut conn)
                .unwrap();
            for old in keys_starting(&mut conn, &format!("{{{p}:t:alpha}}:")) {
                let key = old.rsplit_once(':').unwrap().1;
                let _: () = ::redis::cmd("RENAME")
                    .arg(&old)
                    .arg(format!("{{{p}}}:t:alpha:{key}"))
                    .query(&mut conn)
                    .unwrap();
            }
            let _: () = ::redis::cmd("RENAME")
                .arg(format!("{p}:ids"))
                .arg(format!("{{{p}}}:ids"))
                .query(&mut conn)
                .unwrap();
        }
        let t = Instant::now();
        let (srv, log) = redstalk_on_as(kind, &redis, &p, &[]);
        let started_ms = t.elapsed().as_millis();
        let mut c = Client::connect(srv.addr, "after");
        c.timeout = REPLY;
        assert_served(&mut c, &jobs, &log);
        c.watch_only("alpha");
        let (got, body) = c.reserve();
        assert_eq!((got, &body[..]), (jobs[1].0, &b"alpha urgent"[..]));
        // The id counter came along: a new job's id follows the old ones.
        let next = c.put(1, 0, 60, b"new");
        assert_eq!(next, jobs.iter().map(|j| j.0).max().unwrap() + 1);

        // Every schema-1 key is gone but the tombstone, every schema-2 key but the
        // lock-out value; the version is set.
        let legacy_ns = keys_starting(&mut conn, &format!("{p}:"));
        assert_eq!(legacy_ns, vec![lease.clone()], "schema-1 keys left");
        assert!(keys_starting(&mut conn, &format!("{{{p}:t:")).is_empty());
        assert_eq!(get(&mut conn, &lease).as_deref(), Some(TOMBSTONE));
        assert_eq!(pttl(&mut conn, &lease), -1, "the tombstone expires");
        assert_upgraded(&mut conn, &p, &jobs);
        log.wait_for("renamed the namespace's keys of schema 1", REPLY);
        log.wait_for(UPGRADED, REPLY);
        println!(
            "{} mode: {renamed} keys of schema 1 ({} jobs, 3 tubes) renamed, upgraded to \
             schema 3 and served {started_ms} ms after the start",
            kind.redis_mode().unwrap(),
            jobs.len()
        );
    }
}

/// A namespace that a later version wrote (its `{P}:schema` says a layout this version
/// does not know) is refused in both modes and left exactly as it was: before this
/// check, a start marked it fresh and served it misread.
#[test]
fn a_namespace_of_a_later_layout_is_refused_and_left_as_it_is() {
    let _serial = serial();
    let Some(redis) = private_redis(&[], "key layout tests") else {
        return;
    };
    let mut conn = redis_conn(&redis);
    for kind in [ServerKind::Redis, ServerKind::Leader] {
        let p = format!("later-{}", kind.name());
        let schema = format!("{{{p}}}:schema");
        let job = format!("{{{p}}}:j:1");
        let _: () = ::redis::cmd("SET")
            .arg(&schema)
            .arg("4")
            .query(&mut conn)
            .unwrap();
        let _: () = ::redis::cmd("HSET")
            .arg(&job)
            .arg("t")
            .arg("default")
            .query(&mut conn)
            .unwrap();
        let refused = support::ServerProc::start_on_redis_as(kind, &redis.url(), &p, &[]);
        let err = refused
            .err()
            .expect("started on a namespace of a later layout");
        assert!(err.contains("newer than this version's (3)"), "{err}");
        assert_eq!(
            keys_starting(&mut conn, &format!("{{{p}}}")),
            vec![job.clone(), schema.clone()],
            "the refused start wrote a key"
        );
        let found: String = ::redis::cmd("GET").arg(&schema).query(&mut conn).unwrap();
        assert_eq!(found, "4", "the layout's version was changed");
        println!(
            "{} mode: a namespace of layout 4 refused: {}",
            kind.redis_mode().unwrap(),
            err.lines().last().unwrap_or_default()
        );
    }
}

/// More tubes than one rename call takes (1,000): every chunk is renamed.
#[test]
fn an_upgrade_renames_the_tubes_of_every_chunk() {
    let _serial = serial();
    let Some(redis) = private_redis(&[], "key layout tests") else {
        return;
    };
    let mut conn = redis_conn(&redis);
    let (p, tubes) = ("up-many", 2500);
    let mut pipe = ::redis::pipe();
    pipe.cmd("SET").arg(format!("{p}:generation")).arg("g1");
    pipe.cmd("SET").arg(format!("{p}:ids")).arg(7);
    for i in 0..tubes {
        let tube = format!("t{i}");
        pipe.cmd("RPUSH").arg(format!("{p}:tubes")).arg(&tube);
        pipe.cmd("HSET")
            .arg(format!("{p}:tubepos"))
            .arg(&tube)
            .arg(i);
        pipe.cmd("HSET")
            .arg(format!("{{{p}:t:{tube}}}:meta"))
            .arg("cmd_pause")
            .arg(1);
    }
    let _: () = pipe.query(&mut conn).unwrap();
    let t = Instant::now();
    let (srv, log) = redstalk_on_as(ServerKind::Redis, &redis, p, &[]);
    let took = t.elapsed();
    assert!(keys_starting(&mut conn, &format!("{{{p}:t:")).is_empty());
    let renamed = keys_starting(&mut conn, &format!("{{{p}}}:t:"));
    assert!(renamed.len() >= tubes, "{} tube keys", renamed.len());
    let mut c = Client::connect(srv.addr, "after");
    c.timeout = REPLY;
    let last = format!("t{}", tubes - 1);
    assert_eq!(
        c.dict_value(&format!("stats-tube {last}"), "cmd-pause-tube"),
        "1"
    );
    assert_eq!(c.put(1, 0, 60, b"x"), 8, "{}", log.tail());
    println!(
        "{tubes} tubes of schema 1 renamed; served {} ms after the start",
        took.as_millis()
    );
}

/// Every tube key and job hash of namespace `p` with its serialized value (`DUMP`), in
/// name order.
fn job_keys_dumped(conn: &mut ::redis::Connection, p: &str) -> Vec<(String, Vec<u8>)> {
    let mut keys = dumped(conn, &format!("{{{p}}}:t:"));
    keys.extend(dumped(conn, &format!("{{{p}}}:j:")));
    keys
}

#[test]
fn a_standby_never_leads_a_namespace_of_a_later_layout() {
    let _serial = serial();
    let Some(redis) = private_redis(&[], "key layout tests") else {
        return;
    };
    let mut conn = redis_conn(&redis);
    let p = "later-takeover";
    let (a, log_a) = redstalk_on_as(ServerKind::Leader, &redis, p, &[]);
    wait_served(a.addr, REPLY, &log_a);
    let (b, log_b) = redstalk_on_as(ServerKind::Leader, &redis, p, &[]);
    let mut c = Client::connect(a.addr, "producer");
    c.timeout = REPLY;
    let id = c.put(1, 0, 60, b"written by the earlier layout's leader");
    drop(c);
    // A later version upgraded the layout while this one stood by.
    let schema = format!("{{{p}}}:schema");
    let _: () = ::redis::cmd("SET")
        .arg(&schema)
        .arg("4")
        .query(&mut conn)
        .unwrap();
    let before = job_keys_dumped(&mut conn, p);
    let killed = Instant::now();
    a.signal("KILL").expect("kill the leader");
    log_b.wait_for("giving it up for good", Duration::from_secs(30));
    let refused_after = killed.elapsed();
    // Several lease periods (1 s in tests): the lease stays free, the standby never
    // took it again.
    thread::sleep(Duration::from_secs(4));
    let holder: Option<String> = ::redis::cmd("GET")
        .arg(format!("{{{p}}}:lease"))
        .query(&mut conn)
        .unwrap();
    assert_eq!(holder, None, "the lease is held\n{}", log_b.tail());
    let text = log_b.text();
    assert_eq!(
        text.matches("giving it up for good").count(),
        1,
        "the standby contended again\n{}",
        log_b.tail()
    );
    assert!(!text.contains("leading: serving"), "{}", log_b.tail());
    let found: String = ::redis::cmd("GET").arg(&schema).query(&mut conn).unwrap();
    assert_eq!(found, "4");
    let after = job_keys_dumped(&mut conn, p);
    assert_eq!(
        after, before,
        "the standby wrote the tubes' or the jobs' keys"
    );
    drop(b);
    println!(
        "a standby found layout 4 at its takeover {} ms after the leader's kill, gave the \
         lease up and never contended again (job {id} untouched)",
        refused_after.as_millis()
    );
}

#[test]
fn a_shared_instance_stops_serving_a_namespace_a_later_layout_took_over() {
    let _serial = serial();
    let Some(redis) = private_redis(&[], "key layout tests") else {
        return;
    };
    let mut conn = redis_conn(&redis);
    let p = "later-shared";
    let (srv, log) = redstalk_on_as(ServerKind::Redis, &redis, p, &[]);
    let mut c = Client::connect(srv.addr, "producer");
    c.timeout = REPLY;
    c.put(1, 0, 60, b"written in the earlier layout");
    // A later version's upgrade: the layout, then a new generation (every call of an
    // instance that joined the old one is refused from then on).
    let _: () = ::redis::cmd("SET")
        .arg(format!("{{{p}}}:schema"))
        .arg("4")
        .query(&mut conn)
        .unwrap();
    let _: () = ::redis::cmd("SET")
        .arg(format!("{{{p}}}:generation"))
        .arg("a-later-generation")
        .query(&mut conn)
        .unwrap();
    let before = job_keys_dumped(&mut conn, p);
    let r = c.try_call(b"put 1 0 60 3\r\nold\r\n", REPLY);
    assert!(
        !matches!(&r, Ok(r) if r.word() == "INSERTED"),
        "a put on the old connection: {r:?}"
    );
    log.wait_for("upgraded this namespace's key layout", REPLY);
    for attempt in 0..3 {
        let mut n = Client::connect(srv.addr, "a new client");
        let r = n.try_call(b"put 1 0 60 3\r\nnew\r\n", REPLY);
        assert!(
            !matches!(&r, Ok(r) if r.word() == "INSERTED"),
            "a put on a new connection (attempt {attempt}): {r:?}\n{}",
            log.tail()
        );
        thread::sleep(Duration::from_millis(300));
    }
    let generation: String = ::redis::cmd("GET")
        .arg(format!("{{{p}}}:generation"))
        .query(&mut conn)
        .unwrap();
    assert_eq!(generation, "a-later-generation");
    assert_eq!(
        job_keys_dumped(&mut conn, p),
        before,
        "the instance wrote tube keys or job hashes"
    );
    assert_eq!(
        log.text()
            .matches("upgraded this namespace's key layout")
            .count(),
        1,
        "said more than once\n{}",
        log.tail()
    );
    println!("a shared-mode instance stopped serving a namespace of layout 4");
}

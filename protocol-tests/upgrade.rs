//! The upgrade from key layout 2 (a job's metadata, body and tube in its tube's `jobs`
//! and `bodies` hashes and the namespace's `index`) to this version's, 3 (a job is one
//! hash `{P}:j:<id>`), against real processes (a private redis-server, never the one on
//! 6379): docs/OPERATIONS.md, *Upgrading across a key layout change*;
//! docs/plans/schema3.md §3; src/redis/schema/v2.rs. (A namespace a schema-2 release
//! wrote, served the same after the upgrade: release_state.rs.)
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
//! - `a_start_cut_short_at_the_lock_out_resumes` — the lock-out value in `{P}:leader`
//!   and the layout's mark (`2>3`, or 3 for a fresh namespace) are written in one
//!   script, the mark first: a start whose mark Redis refuses (here: an ACL that lets
//!   the instance write only the lock-out's keys) writes neither, and the next start
//!   upgrades and serves. Before (found 2026-12-06 by this test), the two were written
//!   by two calls, and a start cut short between them left the lock-out value with
//!   `{P}:schema` still 2, which every later start refused as a namespace moved away
//!   by `redstalk-namespace copy`.
//! - `instances_started_together_all_serve` — four instances started at once on one
//!   namespace (fresh, six times in each mode; of schema 2, once in each): all listen,
//!   the namespace ends at schema 3, upgraded (a start that finds the upgrade under way
//!   joins it). Before (found by compat/run), a start that read the layout before
//!   another start's mark and the old lease key after it refused the namespace as
//!   moved away, and exited.

// A test reports failure by panicking: unwrap and expect are how it says so.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::thread;
use std::time::{Duration, Instant};

use support::client::Client;
use support::layouts::{
    Jobs, OLD_TOKEN, REPLY, Spawned, UPGRADED, WAITING, assert_upgraded, dumped, get, job_hashes,
    pttl, schema_2_keys, schema_2_namespace, upgrade_line,
};
use support::namespace::{MOVED, assert_served, keys_starting, redis_conn};
use support::redis::private_redis;
use support::{ServerKind, redstalk_on_as, serial, wait_child_listening, wait_served};

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

/// Instances started at once on one namespace, a fresh one or one of schema 2, all
/// serve it: a start whose mark finds another's already there reads the layout again
/// (then finds it current, or joins the upgrade). Before (found by compat/run on
/// 2026-12-06, two shared-mode instances started together), a start that read the
/// layout before another start's mark and the old lease key after it took the
/// lock-out value for a namespace moved away by `redstalk-namespace copy`, and exited.
#[test]
fn instances_started_together_all_serve() {
    let _serial = serial();
    let Some(redis) = private_redis(&[], "key layout tests") else {
        return;
    };
    let mut conn = redis_conn(&redis);
    const AT_ONCE: usize = 4;
    let mut namespaces: Vec<(String, ServerKind, Option<Jobs>)> = Vec::new();
    for round in 0..6 {
        for kind in [ServerKind::Redis, ServerKind::Leader] {
            namespaces.push((format!("together-{}-{round}", kind.name()), kind, None));
        }
    }
    for kind in [ServerKind::Redis, ServerKind::Leader] {
        let p = format!("together-v2-{}", kind.name());
        let jobs = schema_2_namespace(&redis, &mut conn, kind, &p);
        namespaces.push((p, kind, Some(jobs)));
    }
    for (p, kind, jobs) in &namespaces {
        let t = Instant::now();
        let mut started: Vec<Spawned> = (0..AT_ONCE)
            .map(|_| Spawned::new(&redis, p, *kind))
            .collect();
        for s in &mut started {
            let port = s.port;
            wait_child_listening(&mut s.child, port, REPLY, &s.log);
        }
        if let Some(jobs) = jobs {
            assert_upgraded(&mut conn, p, jobs);
            let upgrades: usize = started
                .iter()
                .map(|s| s.log.text().matches(UPGRADED).count())
                .sum();
            assert!(upgrades >= 1, "no instance logged the upgrade");
        }
        assert_eq!(
            get(&mut conn, &format!("{{{p}}}:schema")).as_deref(),
            Some("3")
        );
        println!(
            "{p}: {AT_ONCE} instances started at once, all listening after {} ms",
            t.elapsed().as_millis()
        );
    }
}

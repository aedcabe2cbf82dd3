//! Key layouts against real processes (a private redis-server, never the one on
//! 6379): the upgrade from schema 1 (keys without the namespace's hash tag), and what a
//! version does with a layout later than its own (docs/OPERATIONS.md, *Upgrading
//! across a key layout change*; src/redis/schema/). The upgrade from schema 2 is
//! upgrade.rs'.
//!
//! What the tests prove:
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

// A test reports failure by panicking: unwrap and expect are how it says so.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::thread;
use std::time::{Duration, Instant};

use support::client::Client;
use support::layouts::{
    OLD_TOKEN, REPLY, Spawned, TOMBSTONE, UPGRADED, WAITING, assert_upgraded, dumped, get, pttl,
    schema_2_namespace,
};
use support::namespace::{assert_served, keys_starting, redis_conn};
use support::redis::private_redis;
use support::{ServerKind, redstalk_on_as, serial, wait_served};

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

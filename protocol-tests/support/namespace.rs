//! A namespace seen from Redis and filled through the protocol, for the tests that
//! move its keys (the key layout upgrades in layouts.rs, `redstalk-namespace copy`
//! in namespace_copy.rs): a plain redis-rs connection, the keys under a prefix, a
//! namespace with jobs in every resting state, a paused tube and a used id counter, and
//! that namespace taken back to the layout of the version before this one
//! ([`to_schema_2`]).

use std::collections::HashMap;

use super::Log;
use super::client::Client;

pub fn redis_conn(redis: &super::redis::RedisServer) -> ::redis::Connection {
    ::redis::Client::open(redis.url())
        .unwrap()
        .get_connection()
        .unwrap()
}

/// Every key whose name starts with `start`.
pub fn keys_starting(conn: &mut ::redis::Connection, start: &str) -> Vec<String> {
    let pattern = format!("{start}*");
    let (mut cursor, mut found) = (0u64, Vec::new());
    loop {
        let (next, keys): (u64, Vec<String>) = ::redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(&pattern)
            .arg("COUNT")
            .arg(1000)
            .query(conn)
            .unwrap();
        found.extend(keys);
        if next == 0 {
            break;
        }
        cursor = next;
    }
    found.sort();
    found
}

/// The value that locks every version of schema 2 out of a namespace, in its lease
/// key `{P}:leader` (src/redis/lockout.rs, `MOVED`).
pub const MOVED: &str = "0|moved|redstalk-namespace";

/// Take the namespace `p`, as this version leaves it at rest (schema 3: a job is one
/// hash `{p}:j:<id>`, fields `t` tube, `m` metadata, `b` body), back to the layout of
/// the version before (schema 2), as that version would have left it: each job's
/// metadata in its tube's `{p}:t:<tube>:jobs` (id -> meta), its body in
/// `{p}:t:<tube>:bodies` (id -> body), its tube in `{p}:index` (id -> tube); the batch
/// sequence `{p}:lease:commit` renamed `{p}:leader:commit`; no `{p}:lease`, no
/// `{p}:leader` (schema 3's lock-out value; schema 2's lease, absent at rest), no
/// `{p}:ahead`, no `{p}:small` (a mark versions of schema 2 never made); `{p}:schema` = 2. The inverse of src/redis/schema/v2.rs' `CONVERT`
/// (the metadata's format is the same in both). A hash with a body and no metadata (a
/// large body written ahead of its job) is dropped. Every instance must be stopped.
/// How many jobs.
pub fn to_schema_2(conn: &mut ::redis::Connection, p: &str) -> usize {
    let tag = format!("{{{p}}}");
    let start = format!("{tag}:j:");
    let mut jobs = 0;
    for key in keys_starting(conn, &start) {
        let id = &key[start.len()..];
        assert!(id.parse::<u64>().is_ok(), "not a job's key: {key}");
        let fields: HashMap<String, Vec<u8>> =
            ::redis::cmd("HGETALL").arg(&key).query(conn).unwrap();
        let mut pipe = ::redis::pipe();
        if let (Some(tube), Some(meta)) = (fields.get("t"), fields.get("m")) {
            let tube = String::from_utf8(tube.clone()).unwrap();
            pipe.cmd("HSET")
                .arg(format!("{tag}:t:{tube}:jobs"))
                .arg(id)
                .arg(meta)
                .ignore();
            if let Some(body) = fields.get("b") {
                pipe.cmd("HSET")
                    .arg(format!("{tag}:t:{tube}:bodies"))
                    .arg(id)
                    .arg(body)
                    .ignore();
            }
            pipe.cmd("HSET")
                .arg(format!("{tag}:index"))
                .arg(id)
                .arg(&tube)
                .ignore();
            jobs += 1;
        }
        pipe.cmd("DEL").arg(&key).ignore();
        let _: () = pipe.query(conn).unwrap();
    }
    let commit = format!("{tag}:lease:commit");
    let exists: i64 = ::redis::cmd("EXISTS").arg(&commit).query(conn).unwrap();
    if exists == 1 {
        let _: () = ::redis::cmd("RENAME")
            .arg(&commit)
            .arg(format!("{tag}:leader:commit"))
            .query(conn)
            .unwrap();
    }
    let _: () = ::redis::cmd("DEL")
        .arg(format!("{tag}:leader"))
        .arg(format!("{tag}:lease"))
        .arg(format!("{tag}:ahead"))
        .arg(format!("{tag}:small"))
        .query(conn)
        .unwrap();
    let _: () = ::redis::cmd("SET")
        .arg(format!("{tag}:schema"))
        .arg(2)
        .query(conn)
        .unwrap();
    jobs
}

/// Jobs of a namespace in several states over three tubes: (id, tube, state, body).
pub fn fill_namespace(c: &mut Client) -> Vec<(u64, &'static str, &'static str, Vec<u8>)> {
    let mut jobs = Vec::new();
    c.use_tube("alpha");
    for (pri, body) in [(5, "alpha low"), (1, "alpha urgent")] {
        jobs.push((
            c.put(pri, 0, 60, body.as_bytes()),
            "alpha",
            "ready",
            body.into(),
        ));
    }
    c.use_tube("beta");
    jobs.push((
        c.put(1, 3600, 60, b"beta later"),
        "beta",
        "delayed",
        b"beta later".to_vec(),
    ));
    let buried = c.put(1, 0, 60, b"beta buried");
    c.watch_only("beta");
    let (got, _) = c.reserve();
    assert_eq!(got, buried);
    c.expect(&format!("bury {buried} 1"), "BURIED");
    jobs.push((buried, "beta", "buried", b"beta buried".to_vec()));
    c.use_tube("gamma");
    jobs.push((
        c.put(1, 0, 60, b"gamma"),
        "gamma",
        "ready",
        b"gamma".to_vec(),
    ));
    c.expect("pause-tube gamma 3600", "PAUSED");
    jobs
}

/// Every job of [`fill_namespace`] is served as it was put (peek: its body; stats-job:
/// its tube and state) and tube gamma is still paused; `log` is the server's, shown on
/// a failure.
pub fn assert_served(
    c: &mut Client,
    jobs: &[(u64, &'static str, &'static str, Vec<u8>)],
    log: &Log,
) {
    for (id, tube, state, body) in jobs {
        let peeked = c.cmd(&format!("peek {id}"));
        assert_eq!(
            peeked.line,
            format!("FOUND {id} {}", body.len()),
            "{}",
            log.tail()
        );
        assert_eq!(peeked.body.as_deref(), Some(&body[..]));
        let stats = c.dict(&format!("stats-job {id}"));
        let field = |k: &str| stats.iter().find(|(n, _)| n == k).unwrap().1.clone();
        assert_eq!(
            (field("tube"), field("state")),
            (tube.to_string(), state.to_string())
        );
    }
    assert_ne!(c.dict_value("stats-tube gamma", "pause"), "0");
}

//! A namespace seen from Redis and filled through the protocol, for the tests that
//! move its keys (the schema upgrade in redis_connection.rs, `redstalk-namespace copy`
//! in namespace_copy.rs): a plain redis-rs connection, the keys under a prefix, and a
//! namespace with jobs in every resting state, a paused tube and a used id counter.

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

//! What the key layout tests share (`layouts.rs`, `upgrade.rs`): a namespace of schema
//! 2 made from one this version wrote, the checks of an upgraded namespace, reading keys,
//! and a leader-mode start that may be held back before it listens.

use std::net::SocketAddr;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use super::client::Client;
use super::namespace::{MOVED, fill_namespace, keys_starting, to_schema_2};
use super::redis::RedisServer;
use super::{Log, ServerKind, free_port, redis_args, redstalk_on_as, redstalk_path, spawn_logged};

pub const REPLY: Duration = Duration::from_secs(10);

/// The tombstone the upgrade leaves in a namespace's schema-1 lease key
/// (src/redis/lockout.rs).
pub const TOMBSTONE: &str = "0|schema2|upgrade-redstalk";

/// A lease token of a leader of the previous version (`epoch|instance|address`).
pub const OLD_TOKEN: &str = "4|old|127.0.0.1:1";

/// What the start logs once it has upgraded a namespace to schema 3
/// (src/redis/schema/mod.rs).
pub const UPGRADED: &str = "upgraded the namespace's key layout to schema 3";

/// What a leader-mode start logs while a lease of the previous version holds it back.
pub const WAITING: &str = "waiting for it to lapse";

/// Jobs as [`fill_namespace`] returns them.
pub type Jobs = Vec<(u64, &'static str, &'static str, Vec<u8>)>;

pub fn get(conn: &mut ::redis::Connection, key: &str) -> Option<String> {
    ::redis::cmd("GET").arg(key).query(conn).unwrap()
}

pub fn pttl(conn: &mut ::redis::Connection, key: &str) -> i64 {
    ::redis::cmd("PTTL").arg(key).query(conn).unwrap()
}

/// Every key whose name starts with `start`, with its serialized value (`DUMP`), in
/// name order: what a start that must change nothing is compared by.
pub fn dumped(conn: &mut ::redis::Connection, start: &str) -> Vec<(String, Vec<u8>)> {
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
pub fn schema_2_keys(conn: &mut ::redis::Connection, p: &str) -> Vec<String> {
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
pub fn job_hashes(conn: &mut ::redis::Connection, p: &str) -> Vec<String> {
    keys_starting(conn, &format!("{{{p}}}:j:"))
}

/// A namespace `p` of schema 2 holding [`fill_namespace`]'s jobs: written by this
/// version in mode `kind`, stopped cleanly, taken back to schema 2. Checks it is in
/// schema 2's form (every job in its tube's hashes, none as a hash of its own).
pub fn schema_2_namespace(
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
pub fn assert_upgraded(conn: &mut ::redis::Connection, p: &str, jobs: &Jobs) {
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
pub fn upgrade_line(log: &Log) -> String {
    let text = log.text();
    text.lines()
        .find(|l| l.contains(UPGRADED))
        .unwrap_or_else(|| panic!("no upgrade logged\n{}", log.tail()))
        .to_string()
}

/// A redstalk in leader mode on namespace `p`, spawned without waiting for it to
/// listen (a start held back by a lease of the previous version listens only once it
/// has upgraded); killed when dropped.
pub struct Spawned {
    pub child: Child,
    pub log: Log,
    pub port: u16,
    pub started: Instant,
}

impl Spawned {
    pub fn leader(redis: &RedisServer, p: &str) -> Spawned {
        Spawned::new(redis, p, ServerKind::Leader)
    }

    /// An instance of mode `kind` (a Redis mode) on namespace `p`.
    pub fn new(redis: &RedisServer, p: &str, kind: ServerKind) -> Spawned {
        let port = free_port();
        let mode = kind.redis_mode().expect("a Redis mode");
        let mut cmd = Command::new(redstalk_path());
        cmd.args(["-l", "127.0.0.1", "-p", &port.to_string()])
            .args(redis_args(&redis.url(), p, mode));
        let started = Instant::now();
        let (child, log) = spawn_logged(&mut cmd).unwrap();
        Spawned {
            child,
            log,
            port,
            started,
        }
    }

    pub fn addr(&self) -> SocketAddr {
        ([127, 0, 0, 1], self.port).into()
    }

    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

//! What a release leaves at rest, kept as fixtures, served the same by this version: a
//! Redis namespace (`protocol-tests/fixtures/namespace-layout-2.json`: every key of it)
//! and a `-b DIR` log (`protocol-tests/fixtures/binlog-format-1/`: its files), each with
//! what that release answered about it (`answers.json` beside the log). A later key
//! layout's or log format's upgrade is proven by these tests passing unchanged
//! (docs/plans/schema3.md, §3): the fixtures stay as the releases wrote them.
//!
//! - `a_namespace_a_release_wrote_is_served_as_it_served_it` — for each Redis mode
//!   (shared, leader): a private redis-server gets the fixture's keys; redstalk starts
//!   on it; every recorded request (`peek`, `stats-job`, `stats-tube`, `list-tubes`, the
//!   totals of `stats`, `find-key`, the operator API's job JSON, a deleted job's
//!   retained record, a tube's listing) answers what the release answered, fields that
//!   change with time or with the connection aside. Then it goes on serving: reserve
//!   order (priority, then id), a keyed put dedupes to its job and one inside a deleted
//!   job's window answers `DELETED`, the dead letter kicks back to ready, the large
//!   body (2 MiB, past shared mode's bound for bodies kept out of Lua) comes back
//!   intact, and the next put takes the id after the release's last. Prints how long
//!   each start took.
//! - `a_log_a_release_wrote_is_served_as_it_served_it` — the same of a copy of the
//!   `-b` log's directory (a 64 KiB large body: the log has no bound of that kind).
//! - `write_the_fixtures` (ignored: run by hand, by the release that defines a layout
//!   or a log format, with `REDSTALK_WRITE_FIXTURE=namespace` or `=binlog`): fills a
//!   namespace in shared mode, or a log, through the protocol (jobs ready, delayed,
//!   buried, buried by a dead letter rule, keyed, deleted inside a dedupe window and
//!   retained, with a large body and a binary one, a paused tube, a TTR in
//!   milliseconds), records the answers, stops the server cleanly, then dumps the keys
//!   or copies the log. Every duration in it is decades long, so a fixture keeps its
//!   meaning for as long as it is used.
//!
//! Not in the fixtures: a reserved job (a clean stop gives a closing connection's
//! reservations back, so no release leaves one at rest) and schedules (their cursors
//! are not job keys, and a tick that comes due would make the answers depend on the
//! day the test runs). A live job's history is compared where the mode keeps it across
//! a start (shared mode); leader mode and `-b` keep it in the process
//! (docs/RETENTION.md), so there only the retained record's history is compared.

// A test reports failure by panicking: unwrap and expect are how it says so.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use support::client::Client;
use support::namespace::{keys_starting, redis_conn};
use support::redis::private_redis;
use support::{ServerKind, ServerProc, serial, wait_served};

/// The namespace's prefix in the fixture.
const PREFIX: &str = "rel";
/// The namespace the release of key layout 2 wrote.
const NAMESPACE: &str = "fixtures/namespace-layout-2.json";
/// The log directory the release of log format 1 wrote, and its answers' file in it.
const BINLOG: &str = "fixtures/binlog-format-1";
const ANSWERS: &str = "answers.json";
/// The namespace's large body: past the shared mode's large-body bound (1 MiB), which
/// stays out of Lua.
const LARGE: usize = 2 << 20;
/// The log's: the log has no such bound, and the fixture stays small.
const LARGE_IN_LOG: usize = 64 << 10;
/// Decades, in seconds: a delay, a pause and a dedupe window that never end while the
/// fixture is in use.
const FOREVER_SECS: u64 = 2_000_000_000;

/// Fields of `stats-job`, `stats-tube` and the API's JSON that change with time or
/// with the connections: not compared.
const MOVING: &[&str] = &[
    "age",
    "time-left",
    "pause-time-left",
    "current-using",
    "current-watching",
    "current-waiting",
    "addr",
];
/// The totals of `stats` compared: those the namespace holds, not the instance.
const TOTALS: &[&str] = &[
    "current-jobs-urgent",
    "current-jobs-ready",
    "current-jobs-reserved",
    "current-jobs-delayed",
    "current-jobs-buried",
    "total-jobs",
    "current-tubes",
];

/// The flags both the writing release and every reader run with: bodies up to 4 MiB,
/// decades-long dedupe windows and retention, the API on `http`.
fn flags(http: SocketAddr) -> Vec<String> {
    let forever = FOREVER_SECS.to_string();
    [
        "-z",
        "4194304",
        "--key-window-max",
        &forever,
        "--retain",
        &format!("{forever}s"),
        "--retain-bodies",
        "--http",
        &http.to_string(),
    ]
    .map(String::from)
    .to_vec()
}

/// A byte string as JSON: text when it is UTF-8, a run of one byte when it is long and
/// nothing else, hex otherwise.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
enum Blob {
    Text(String),
    Run { byte: u8, n: usize },
    Hex { hex: String },
}

impl Blob {
    fn of(b: &[u8]) -> Blob {
        if b.len() >= 1024 && b.iter().all(|&x| x == b[0]) {
            return Blob::Run {
                byte: b[0],
                n: b.len(),
            };
        }
        match std::str::from_utf8(b) {
            Ok(s) => Blob::Text(s.to_string()),
            Err(_) => Blob::Hex {
                hex: b.iter().map(|x| format!("{x:02x}")).collect(),
            },
        }
    }

    fn bytes(&self) -> Vec<u8> {
        match self {
            Blob::Text(s) => s.as_bytes().to_vec(),
            Blob::Run { byte, n } => vec![*byte; *n],
            Blob::Hex { hex } => (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
                .collect(),
        }
    }
}

/// One key's contents (a zset's scores as Redis prints them, so they are exact).
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "type", content = "value", rename_all = "lowercase")]
enum Contents {
    String(Blob),
    Hash(Vec<(Blob, Blob)>),
    Zset(Vec<(Blob, String)>),
    List(Vec<Blob>),
    Set(Vec<Blob>),
}

#[derive(Debug, Serialize, Deserialize)]
struct Key {
    name: String,
    #[serde(flatten)]
    contents: Contents,
    /// The milliseconds it had left, when it had an expiry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pttl_ms: Option<i64>,
}

/// A beanstalk request and the release's answer to it, made steady ([`steady`]).
#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Asked {
    ask: String,
    line: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    body: Option<Blob>,
}

/// An API path and the release's JSON, made steady ([`steady_json`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Fetched {
    get: String,
    json: Value,
}

/// What a release answered about what it left, and the jobs by role.
#[derive(Debug, Serialize, Deserialize)]
struct Answers {
    written_by: String,
    asked: Vec<Asked>,
    fetched: Vec<Fetched>,
    /// The id the next put takes.
    next_id: u64,
    /// The jobs by role: what the later checks act on.
    roles: Roles,
}

/// A namespace's fixture: its keys and the answers.
#[derive(Debug, Serialize, Deserialize)]
struct Fixture {
    written_by: String,
    prefix: String,
    keys: Vec<Key>,
    asked: Vec<Asked>,
    fetched: Vec<Fetched>,
    next_id: u64,
    roles: Roles,
}

impl Fixture {
    fn answers(self) -> (String, Vec<Key>, Answers) {
        let answers = Answers {
            written_by: self.written_by,
            asked: self.asked,
            fetched: self.fetched,
            next_id: self.next_id,
            roles: self.roles,
        };
        (self.prefix, self.keys, answers)
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct Roles {
    /// Tube `alpha`'s ready jobs in the order reserves take them.
    alpha_order: Vec<u64>,
    large: u64,
    dead_letter: u64,
    /// (key, id) of the live keyed job, and of the deleted one inside its window.
    keyed: (String, u64),
    windowed: (String, u64),
}

fn fixture_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("protocol-tests")
        .join(name)
}

/// The answer to `ask` as the fixture keeps it: a `stats*` answer without its
/// [`MOVING`] fields (`stats` keeps its [`TOTALS`] only) and without the byte count
/// its first line gives, which those fields change.
fn steady(ask: &str, line: String, body: Option<Vec<u8>>) -> Asked {
    let Some(body) = body else {
        return Asked {
            ask: ask.into(),
            line,
            body: None,
        };
    };
    if !ask.starts_with("stats") {
        return Asked {
            ask: ask.into(),
            line,
            body: Some(Blob::of(&body)),
        };
    }
    let text = String::from_utf8(body).unwrap();
    let kept: Vec<&str> = text
        .lines()
        .filter(|l| {
            let key = l.split(':').next().unwrap_or_default();
            if ask == "stats" {
                key == "---" || TOTALS.contains(&key)
            } else {
                !MOVING.contains(&key)
            }
        })
        .collect();
    Asked {
        ask: ask.into(),
        line: line.split(' ').next().unwrap_or_default().into(),
        body: Some(Blob::Text(kept.join("\n"))),
    }
}

fn ask(c: &mut Client, request: &str) -> Asked {
    let r = c.cmd(request);
    steady(request, r.line, r.body)
}

/// `v` without the [`MOVING`] fields, at any depth.
fn steady_json(mut v: Value) -> Value {
    match &mut v {
        Value::Object(m) => {
            m.retain(|k, _| !MOVING.contains(&k.as_str()));
            for x in m.values_mut() {
                *x = steady_json(std::mem::take(x));
            }
        }
        Value::Array(a) => {
            for x in a.iter_mut() {
                *x = steady_json(std::mem::take(x));
            }
        }
        _ => {}
    }
    v
}

/// `f` without a live job's history: leader mode and `-b` keep a live job's history in
/// the process (docs/RETENTION.md, *Where records live*), so after a start each live
/// job's history begins at its next event; a deleted job's record keeps its history in
/// every mode.
fn without_live_history(mut f: Fetched) -> Fetched {
    if let Value::Object(m) = &mut f.json
        && m.get("state").and_then(Value::as_str) != Some("deleted")
    {
        m.remove("history");
        m.remove("history_dropped");
    }
    f
}

fn fetch(http: SocketAddr, path: &str) -> Fetched {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(15)))
        .http_status_as_error(false)
        .build()
        .into();
    let mut r = agent
        .get(&format!("http://{http}/api/v1{path}"))
        .call()
        .unwrap();
    let text = r.body_mut().read_to_string().unwrap();
    let json = serde_json::from_str(&text).unwrap_or(Value::String(text));
    Fetched {
        get: path.into(),
        json: steady_json(json),
    }
}

/// The requests whose answers the fixture keeps: every job, every tube, the totals,
/// the keys; and the API's views of the jobs with more than `stats-job` shows.
fn requests(ids: &[u64], tubes: &[&str], roles: &Roles) -> (Vec<String>, Vec<String>) {
    let mut asks = vec!["list-tubes".to_string(), "stats".to_string()];
    for id in ids {
        asks.push(format!("peek {id}"));
        asks.push(format!("stats-job {id}"));
    }
    for t in tubes {
        asks.push(format!("stats-tube {t}"));
    }
    let mut gets: Vec<String> = [roles.dead_letter, roles.keyed.1, roles.windowed.1]
        .iter()
        .map(|id| format!("/jobs/{id}"))
        .collect();
    gets.push("/tubes/alpha/jobs?state=ready".into());
    gets.push("/tubes/beta/jobs?state=buried".into());
    gets.push("/retained?tube=keys".into());
    (asks, gets)
}

/// The tubes the fixture fills.
const TUBES: &[&str] = &["default", "alpha", "beta", "gamma", "keys", "dead", "large"];

#[test]
#[ignore = "writes a fixture: run by hand with REDSTALK_WRITE_FIXTURE=namespace or =binlog"]
fn write_the_fixtures() {
    let which = std::env::var("REDSTALK_WRITE_FIXTURE").unwrap_or_default();
    let _serial = serial();
    let dir = support::fresh_dir();
    let policies = dir.join("policies.toml");
    std::fs::write(
        &policies,
        "[[policy]]\ntubes = \"dead\"\ndead_letter = { reserves = 1 }\n",
    )
    .unwrap();
    let http: SocketAddr = ([127, 0, 0, 1], support::free_port()).into();
    let mut args = flags(http);
    args.extend(["--policies".into(), policies.display().to_string()]);
    match which.as_str() {
        "namespace" => {
            let redis = private_redis(&[], "the release's namespace").expect("redis-server");
            let srv = ServerProc::start_on_redis_as(ServerKind::Redis, &redis.url(), PREFIX, &args)
                .unwrap();
            let answers = fill_and_stop(srv, http, LARGE);
            let fixture = Fixture {
                written_by: answers.written_by,
                prefix: PREFIX.into(),
                keys: dump(&mut redis_conn(&redis)),
                asked: answers.asked,
                fetched: answers.fetched,
                next_id: answers.next_id,
                roles: answers.roles,
            };
            let text = serde_json::to_string_pretty(&fixture).unwrap();
            std::fs::write(fixture_path(NAMESPACE), text + "\n").unwrap();
            eprintln!("wrote {NAMESPACE} ({} keys)", fixture.keys.len());
        }
        "binlog" => {
            let log_dir = dir.join("log");
            std::fs::create_dir_all(&log_dir).unwrap();
            args.extend(["-b".into(), log_dir.display().to_string()]);
            let srv = ServerProc::start(ServerKind::Memory, &args)
                .unwrap()
                .unwrap();
            let answers = fill_and_stop(srv, http, LARGE_IN_LOG);
            let to = fixture_path(BINLOG);
            let _ = std::fs::remove_dir_all(&to);
            std::fs::create_dir_all(&to).unwrap();
            let copied = copy_files(&log_dir, &to);
            let text = serde_json::to_string_pretty(&answers).unwrap();
            std::fs::write(to.join(ANSWERS), text + "\n").unwrap();
            eprintln!("wrote {BINLOG}: {copied:?} and {ANSWERS}");
        }
        _ => panic!("set REDSTALK_WRITE_FIXTURE=namespace or =binlog to overwrite that fixture"),
    }
}

/// Fill the server `srv` (its API on `http`) through the protocol, its large body
/// `large` bytes; record the answers; stop it cleanly.
fn fill_and_stop(mut srv: ServerProc, http: SocketAddr, large: usize) -> Answers {
    let log = srv.capture_stderr();
    wait_served(srv.addr, Duration::from_secs(20), &log);
    let mut c = Client::connect(srv.addr, "writer");
    let forever = FOREVER_SECS as u32;

    let mut ids = Vec::new();
    c.use_tube("alpha");
    let low = c.put(5, 0, 60, b"alpha low");
    let urgent = c.put(1, 0, 60, b"alpha urgent");
    let second = c.put(1, 0, 60, b"alpha second, binary \0\r\n\xff tail");
    let ms = c.cmd("put 3 0 1500ms 9\r\nalpha ms!");
    let ms = ms
        .id()
        .unwrap_or_else(|| panic!("{} {}", ms.line, log.tail()));
    ids.extend([low, urgent, second, ms]);
    c.use_tube("beta");
    ids.push(c.put(2, forever, 60, b"beta later"));
    let buried = c.put(4, 0, 60, b"beta buried");
    let mut w = worker(srv.addr, "beta");
    assert_eq!(w.reserve().0, buried);
    w.expect(&format!("bury {buried} 7"), "BURIED");
    ids.push(buried);
    c.use_tube("gamma");
    ids.push(c.put(1, 0, 60, b"gamma"));
    c.expect(&format!("pause-tube gamma {forever}"), "PAUSED");
    c.use_tube("dead");
    let dead = c.put(1, 0, 60, b"a dead letter");
    let mut w = worker(srv.addr, "dead");
    assert_eq!(w.reserve().0, dead);
    // The release a dead letter rule turns into a bury answers as a release does.
    w.expect(&format!("release {dead} 1 0"), "RELEASED");
    ids.push(dead);
    c.use_tube("keys");
    let keyed = c.cmd(&format!("put 6 0 60 5 idp:order-1:{FOREVER_SECS}\r\nkeyed"));
    let keyed = keyed.id().unwrap_or_else(|| panic!("{}", keyed.line));
    let gone = c.cmd(&format!("put 6 0 60 4 idp:order-2:{FOREVER_SECS}\r\ngone"));
    let gone = gone.id().unwrap_or_else(|| panic!("{}", gone.line));
    let mut w = worker(srv.addr, "keys");
    w.expect(
        &format!("reserve-job {gone}"),
        &format!("RESERVED {gone} 4"),
    );
    w.expect(&format!("delete {gone}"), "DELETED");
    drop(w);
    ids.push(keyed);
    c.use_tube("large");
    let large = c.put(9, 0, 60, &vec![b'L'; large]);
    ids.push(large);
    c.use_tube("default");
    ids.push(c.put(0, 0, 60, b"default"));

    let roles = Roles {
        alpha_order: vec![urgent, second, ms, low],
        large,
        dead_letter: dead,
        keyed: ("order-1".into(), keyed),
        windowed: ("order-2".into(), gone),
    };
    let (asks, gets) = requests(&ids, TUBES, &roles);
    let mut asked: Vec<Asked> = asks.iter().map(|a| ask(&mut c, a)).collect();
    c.use_tube("keys");
    for key in ["order-1", "order-2"] {
        asked.push(ask(&mut c, &format!("find-key {key}")));
    }
    let fetched: Vec<Fetched> = gets.iter().map(|g| fetch(http, g)).collect();
    let next_id = ids.iter().chain([&gone]).max().unwrap() + 1;
    drop(c);

    srv.signal("TERM").unwrap();
    assert!(
        srv.wait_exit(Duration::from_secs(30)).is_some(),
        "no clean stop\n{}",
        log.tail()
    );
    Answers {
        written_by: version(),
        asked,
        fetched,
        next_id,
        roles,
    }
}

/// Copy the files of `from` into `to`; their names.
fn copy_files(from: &std::path::Path, to: &std::path::Path) -> Vec<String> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_file() {
            let name = entry.file_name().to_string_lossy().into_owned();
            // The lock file is the log's own, made at each start.
            if name != ANSWERS && name != "lock" {
                std::fs::copy(entry.path(), to.join(&name)).unwrap();
                names.push(name);
            }
        }
    }
    names.sort();
    names
}

/// A connection that watches `tube` alone.
fn worker(addr: SocketAddr, tube: &str) -> Client {
    let mut c = Client::connect(addr, tube);
    c.watch_only(tube);
    c
}

/// `redstalk -v`'s line and the commit it was built from (the fixture is written by
/// hand, in a checkout).
fn version() -> String {
    let run = |program: &str, args: &[&str]| {
        let out = std::process::Command::new(program)
            .args(args)
            .output()
            .unwrap();
        let text = [out.stdout, out.stderr].concat();
        String::from_utf8_lossy(&text).trim().to_string()
    };
    format!(
        "{} (commit {})",
        run(env!("CARGO_BIN_EXE_redstalk"), &["-v"]),
        run("git", &["rev-parse", "--short", "HEAD"])
    )
}

/// Every key of the namespace, by name.
fn dump(conn: &mut ::redis::Connection) -> Vec<Key> {
    let q = |c: &str, k: &str| ::redis::cmd(c).arg(k).clone();
    keys_starting(conn, &format!("{{{PREFIX}}}"))
        .into_iter()
        .map(|name| {
            let kind: String = q("TYPE", &name).query(conn).unwrap();
            let contents = match kind.as_str() {
                "string" => {
                    let v: Vec<u8> = q("GET", &name).query(conn).unwrap();
                    Contents::String(Blob::of(&v))
                }
                "hash" => {
                    let v: Vec<(Vec<u8>, Vec<u8>)> = q("HGETALL", &name).query(conn).unwrap();
                    Contents::Hash(v.iter().map(|(f, x)| (Blob::of(f), Blob::of(x))).collect())
                }
                "zset" => {
                    let v: Vec<(Vec<u8>, String)> = ::redis::cmd("ZRANGE")
                        .arg(&name)
                        .arg(0)
                        .arg(-1)
                        .arg("WITHSCORES")
                        .query(conn)
                        .unwrap();
                    Contents::Zset(v.iter().map(|(m, s)| (Blob::of(m), s.clone())).collect())
                }
                "list" => {
                    let v: Vec<Vec<u8>> = ::redis::cmd("LRANGE")
                        .arg(&name)
                        .arg(0)
                        .arg(-1)
                        .query(conn)
                        .unwrap();
                    Contents::List(v.iter().map(|x| Blob::of(x)).collect())
                }
                "set" => {
                    let mut v: Vec<Vec<u8>> = q("SMEMBERS", &name).query(conn).unwrap();
                    v.sort();
                    Contents::Set(v.iter().map(|x| Blob::of(x)).collect())
                }
                other => panic!("{name}: a {other} in the namespace"),
            };
            let pttl: i64 = q("PTTL", &name).query(conn).unwrap();
            Key {
                name,
                contents,
                pttl_ms: (pttl >= 0).then_some(pttl),
            }
        })
        .collect()
}

/// Write the fixture's keys into the Redis of `conn` (which holds none of them).
fn restore(conn: &mut ::redis::Connection, keys: &[Key]) {
    for key in keys {
        let mut cmd;
        match &key.contents {
            Contents::String(v) => {
                cmd = ::redis::cmd("SET");
                cmd.arg(&key.name).arg(v.bytes());
            }
            Contents::Hash(fields) => {
                cmd = ::redis::cmd("HSET");
                cmd.arg(&key.name);
                for (f, v) in fields {
                    cmd.arg(f.bytes()).arg(v.bytes());
                }
            }
            Contents::Zset(members) => {
                cmd = ::redis::cmd("ZADD");
                cmd.arg(&key.name);
                for (m, score) in members {
                    cmd.arg(score).arg(m.bytes());
                }
            }
            Contents::List(items) => {
                cmd = ::redis::cmd("RPUSH");
                cmd.arg(&key.name);
                for x in items {
                    cmd.arg(x.bytes());
                }
            }
            Contents::Set(items) => {
                cmd = ::redis::cmd("SADD");
                cmd.arg(&key.name);
                for x in items {
                    cmd.arg(x.bytes());
                }
            }
        }
        let _: () = cmd.query(conn).unwrap();
        if let Some(ms) = key.pttl_ms {
            let _: () = ::redis::cmd("PEXPIRE")
                .arg(&key.name)
                .arg(ms.max(1))
                .query(conn)
                .unwrap();
        }
    }
}

#[test]
fn a_namespace_a_release_wrote_is_served_as_it_served_it() {
    let _serial = serial();
    let text = std::fs::read_to_string(fixture_path(NAMESPACE)).unwrap();
    let fixture: Fixture = serde_json::from_str(&text).unwrap();
    let (prefix, keys, answers) = fixture.answers();
    eprintln!("namespace written by {}", answers.written_by);
    for kind in [ServerKind::Redis, ServerKind::Leader] {
        let Some(redis) = private_redis(&[], "a release's namespace") else {
            return;
        };
        restore(&mut redis_conn(&redis), &keys);
        let http: SocketAddr = ([127, 0, 0, 1], support::free_port()).into();
        let mut args = flags(http);
        if kind == ServerKind::Leader {
            args.extend(["--redis-lease".into(), support::TEST_LEASE_MS.into()]);
        }
        let started = Instant::now();
        let srv = ServerProc::start_on_redis_as(kind, &redis.url(), &prefix, &args).unwrap();
        // Shared mode keeps a live job's history in Redis; leader mode in its process.
        let live_history = kind == ServerKind::Redis;
        served_as_recorded(srv, http, &answers, live_history, LARGE, started);
        upgraded_in_place(&mut redis_conn(&redis), &prefix);
    }
}

/// The namespace `prefix` holds nothing of the layout the fixture was written in
/// (schema 2) but the tombstone that locks its versions out: every job is a hash of
/// its own (src/redis/schema/v2.rs).
fn upgraded_in_place(conn: &mut ::redis::Connection, prefix: &str) {
    let tag = format!("{{{prefix}}}");
    let names = keys_starting(conn, &tag);
    let schema_2: Vec<&String> = names
        .iter()
        .filter(|k| k.ends_with(":jobs") || k.ends_with(":bodies") || **k == format!("{tag}:index"))
        .collect();
    assert!(schema_2.is_empty(), "keys of schema 2 left: {schema_2:?}");
    let jobs = names
        .iter()
        .filter(|k| k.starts_with(&format!("{tag}:j:")))
        .count();
    assert!(jobs >= 10, "{jobs} job hashes: {names:?}");
    let get = |conn: &mut ::redis::Connection, key: String| -> Option<String> {
        ::redis::cmd("GET").arg(key).query(conn).unwrap()
    };
    assert_eq!(get(conn, format!("{tag}:schema")).as_deref(), Some("3"));
    assert_eq!(
        get(conn, format!("{tag}:leader")).as_deref(),
        Some("0|moved|redstalk-namespace"),
        "the previous version's lease key does not lock it out"
    );
    eprintln!("upgraded in place: {jobs} job hashes, no key of schema 2 left");
}

#[test]
fn a_log_a_release_wrote_is_served_as_it_served_it() {
    let _serial = serial();
    let from = fixture_path(BINLOG);
    let text = std::fs::read_to_string(from.join(ANSWERS)).unwrap();
    let answers: Answers = serde_json::from_str(&text).unwrap();
    eprintln!("log written by {}", answers.written_by);
    let dir = support::fresh_dir();
    let copied = copy_files(&from, &dir);
    assert!(
        copied.iter().any(|n| n.starts_with("binlog.")),
        "no log file in {}: {copied:?}",
        from.display()
    );
    let http: SocketAddr = ([127, 0, 0, 1], support::free_port()).into();
    let mut args = flags(http);
    args.extend(["-b".into(), dir.display().to_string()]);
    let started = Instant::now();
    let srv = ServerProc::start(ServerKind::Memory, &args)
        .unwrap()
        .unwrap();
    served_as_recorded(srv, http, &answers, false, LARGE_IN_LOG, started);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `srv` (its API on `http`, started at `started`) answers every recorded request as
/// the release did (a live job's history compared only when `live_history`: where the
/// mode keeps it across a start), then goes on serving ([`goes_on_serving`]).
fn served_as_recorded(
    mut srv: ServerProc,
    http: SocketAddr,
    answers: &Answers,
    live_history: bool,
    large: usize,
    started: Instant,
) {
    let log = srv.capture_stderr();
    let name = if srv.kind == ServerKind::Memory {
        "binlog"
    } else {
        srv.kind.name()
    };
    wait_served(srv.addr, Duration::from_secs(30), &log);
    eprintln!("{name}: served {:?} after start", started.elapsed());
    let mut c = Client::connect(srv.addr, name);
    for want in &answers.asked {
        if want.ask.starts_with("find-key") {
            c.use_tube("keys");
        }
        let got = ask(&mut c, &want.ask);
        assert_eq!(&got, want, "{name}: {}\n{}", want.ask, log.tail());
    }
    for want in &answers.fetched {
        let got = fetch(http, &want.get);
        let (got, want) = if live_history {
            (got, want.clone())
        } else {
            (
                without_live_history(got),
                without_live_history(want.clone()),
            )
        };
        assert_eq!(got, want, "{name}: GET {}\n{}", want.get, log.tail());
    }
    goes_on_serving(srv.addr, answers, large, &log);
}

/// What the server does next: reserve order, keys, the dead letter, the large body
/// (`large` bytes) and the next id.
fn goes_on_serving(addr: SocketAddr, answers: &Answers, large: usize, log: &support::Log) {
    let r = &answers.roles;
    let mut w = worker(addr, "alpha");
    for id in &r.alpha_order {
        assert_eq!(w.reserve().0, *id, "alpha's order\n{}", log.tail());
    }
    let mut c = Client::connect(addr, "producer");
    c.use_tube("keys");
    let (key, id) = &r.keyed;
    let again = c.cmd(&format!("put 1 0 60 1 idp:{key}\r\nx"));
    assert_eq!(again.line, format!("INSERTED {id} READY"), "{}", log.tail());
    let (key, id) = &r.windowed;
    let again = c.cmd(&format!("put 1 0 60 1 idp:{key}\r\nx"));
    assert_eq!(
        again.line,
        format!("INSERTED {id} DELETED"),
        "{}",
        log.tail()
    );
    c.expect(&format!("kick-job {}", r.dead_letter), "KICKED");
    assert_eq!(worker(addr, "dead").reserve().0, r.dead_letter);
    let (id, body) = worker(addr, "large").reserve();
    assert_eq!((id, body.len()), (r.large, large));
    assert!(body.iter().all(|&b| b == b'L'));
    c.use_tube("fresh");
    assert_eq!(c.put(0, 0, 60, b"next"), answers.next_id, "{}", log.tail());
}

//! redstalkctl (the operator's command-line tool, docs/CLI.md) end to end: the real
//! binary against real beanstalkd and redstalk processes on free ports; every answer is
//! checked through a separate beanstalk connection, `--json` output is parsed, and the
//! documented exit codes are asserted. Every run of the tool is bounded by its own
//! `--timeout`, and live commands by `--count`.
//!
//! What the tests prove:
//! - `protocol_commands_on_{beanstalkd,redstalk}` — put (argument, stdin, a non-UTF-8
//!   body, pri/delay), stats, tubes, job (figures + body, body_base64), kick (a tube's
//!   delayed jobs, one buried job with --job), pause and delete work over the beanstalk
//!   protocol alone, with the same JSON from both servers; a missing job exits 5.
//! - `exit_codes` — cannot connect 8 (protocol and API), usage 2, unsupported 3 for
//!   every API-only command without --api.
//! - `tail_and_top_end_after_count` — `tail --count 2` prints every tube first and then
//!   only the change made between the refreshes (a new tube); `top --count 2` draws two
//!   tables; both exit 0, on beanstalkd and redstalk.
//! - `api_*` — the admin API commands (jobs with paging, job, pri, delay, bury, move,
//!   search, a bulk move with --dry-run, refused without the token, conflict, not
//!   found) against redstalk's API, and `flush` and `key` (a job found and deleted by
//!   its key, a key inside its window, a job's key in `jobs`) over the beanstalk port
//!   and the API (unsupported on beanstalkd), and `policy set/list/remove`, in
//!   `cli/api.rs`.
//!
//! Without beanstalkd the beanstalkd cases are skipped with a notice, unless
//! `REDSTALK_REQUIRE_ORACLE=1`.

// A test reports failure by panicking: unwrap and expect are how it says so.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;
// The admin API commands (skipped while the server has no API).
#[path = "cli/api.rs"]
mod api;

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::client::Client;
use support::{ServerKind, ServerProc};

/// What one run of the tool gave.
pub(crate) struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Out {
    pub(crate) fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "not JSON ({e}): {:?} (stderr {:?})",
                self.stdout, self.stderr
            )
        })
    }

    pub(crate) fn ok(self) -> Out {
        assert_eq!(
            self.code, 0,
            "stdout {:?} stderr {:?}",
            self.stdout, self.stderr
        );
        self
    }
}

fn ctl_cmd(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_redstalkctl"));
    cmd.args(["--timeout", "10"]).args(args);
    // The tests' own environment must not point the tool elsewhere.
    for var in [
        "REDSTALKCTL_SERVER",
        "REDSTALKCTL_API",
        "REDSTALKCTL_TOKEN",
        "REDSTALK_ADMIN_TOKEN",
    ] {
        cmd.env_remove(var);
    }
    cmd
}

/// Run the tool with `args` (and `stdin` as its input).
pub(crate) fn run(args: &[&str], stdin: &[u8]) -> Out {
    let mut child = ctl_cmd(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn redstalkctl");
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    let out = child.wait_with_output().unwrap();
    Out {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The tool against the beanstalk port `addr`.
fn ctl(addr: SocketAddr, args: &[&str]) -> Out {
    let server = addr.to_string();
    let mut all = vec!["--server", server.as_str()];
    all.extend_from_slice(args);
    run(&all, b"")
}

fn start(kind: ServerKind) -> Option<ServerProc> {
    ServerProc::start(kind, &[]).unwrap_or_else(|e| panic!("start {}: {e}", kind.name()))
}

#[test]
fn protocol_commands_on_beanstalkd() {
    if let Some(srv) = start(ServerKind::Beanstalkd) {
        protocol_commands(&srv);
    }
}

#[test]
fn protocol_commands_on_redstalk() {
    protocol_commands(&start(ServerKind::Memory).unwrap());
}

fn protocol_commands(srv: &ServerProc) {
    let a = srv.addr;
    let mut c = Client::connect(a, "checker");
    let put = ctl(a, &["--json", "put", "emails", "hello world", "--pri", "5"]).ok();
    let id1 = put.json()["id"].as_u64().unwrap();
    assert_eq!(put.json()["tube"], "emails");
    let later = ctl(a, &["--json", "put", "emails", "later", "--delay", "100"]).ok();
    let id2 = later.json()["id"].as_u64().unwrap();
    let binary: &[u8] = b"\xff\x00bin\r\nary";
    let server = a.to_string();
    let piped = run(
        &["--server", &server, "--json", "put", "emails", "-"],
        binary,
    )
    .ok();
    let id3 = piped.json()["id"].as_u64().unwrap();
    assert_eq!(
        c.cmd(&format!("peek {id3}")).body.unwrap(),
        binary,
        "stdin body exact"
    );
    assert_eq!(
        c.dict_value(&format!("stats-job {id2}"), "state"),
        "delayed"
    );
    let human = ctl(a, &["put", "emails", "x"]).ok();
    assert!(
        human.stdout.starts_with("inserted job "),
        "{}",
        human.stdout
    );
    let id4: u64 = human.stdout.split(' ').nth(2).unwrap().parse().unwrap();
    c.expect(&format!("delete {id4}"), "DELETED");
    reads(a, &mut c, [id1, id3]);
    changes(a, &mut c, [id1, id2]);
    println!(
        "{}: put, stats, tubes, job, kick, pause, delete: ok",
        srv.kind.name()
    );
}

/// stats, tubes and job after `protocol_commands`' puts: `id1` "hello world" (pri 5),
/// `id2` delayed, `id3` a binary body.
fn reads(a: SocketAddr, c: &mut Client, [id1, id3]: [u64; 2]) {
    // stats and tubes, checked against the server's own figures.
    let stats = ctl(a, &["--json", "stats"]).ok().json();
    assert_eq!(stats["current-jobs-ready"], 2);
    assert_eq!(stats["current-jobs-delayed"], 1);
    assert_eq!(stats["total-jobs"], 4);
    assert!(stats["version"].is_string(), "version stays a string");
    let text = ctl(a, &["stats"]).ok().stdout;
    assert!(
        text.lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["current-jobs-ready", "2"])
    );
    let tubes = ctl(a, &["--json", "tubes"]).ok().json();
    let list = tubes["tubes"].as_array().unwrap();
    let names: Vec<&str> = list.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, c.list("list-tubes"));
    let emails = list.iter().find(|t| t["name"] == "emails").unwrap();
    assert_eq!(
        (
            emails["current-jobs-ready"].as_u64(),
            emails["current-jobs-delayed"].as_u64()
        ),
        (Some(2), Some(1))
    );
    let table = ctl(a, &["tubes"]).ok().stdout;
    assert!(table.starts_with("TUBE "), "{table}");
    let row: Vec<&str> = table
        .lines()
        .find(|l| l.starts_with("emails"))
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(
        &row[..6],
        ["emails", "2", "1", "0", "1", "0"],
        "name ready urgent reserved delayed buried"
    );

    // job: figures and body, text and bytes.
    let job = ctl(a, &["--json", "job", &id1.to_string()]).ok().json();
    assert_eq!(
        (job["id"].as_u64(), job["pri"].as_u64()),
        (Some(id1), Some(5))
    );
    assert_eq!(
        (job["tube"].as_str(), job["state"].as_str()),
        (Some("emails"), Some("ready"))
    );
    assert_eq!(
        (job["body"].as_str(), job["body_size"].as_u64()),
        (Some("hello world"), Some(11))
    );
    assert_eq!(job["body_truncated"], false);
    let job3 = ctl(a, &["--json", "job", &id3.to_string()]).ok().json();
    assert!(job3.get("body").is_none());
    assert_eq!(job3["body_base64"], "/wBiaW4NCmFyeQ==");
    let shown = ctl(a, &["job", &id1.to_string()]).ok().stdout;
    assert!(shown.contains("body (11 bytes):\nhello world"), "{shown}");
    let preview = ctl(a, &["--json", "job", &id1.to_string(), "--preview", "5"])
        .ok()
        .json();
    assert_eq!(
        (
            preview["body"].as_str(),
            preview["body_truncated"].as_bool()
        ),
        (Some("hello"), Some(true))
    );
    let missing = ctl(a, &["job", "987654"]);
    assert_eq!(missing.code, 5, "{}", missing.stderr);
}

/// kick, pause and delete, each checked over the protocol.
fn changes(a: SocketAddr, c: &mut Client, [id1, id2]: [u64; 2]) {
    // kick: a tube's delayed jobs (none buried), then one buried job.
    let kicked = ctl(a, &["--json", "kick", "emails", "10"]).ok().json();
    assert_eq!(kicked["kicked"], 1);
    assert_eq!(c.dict_value(&format!("stats-job {id2}"), "state"), "ready");
    c.watch_only("emails");
    let (reserved, _) = c.reserve();
    assert_eq!(reserved, id1, "pri 5 first");
    c.expect(&format!("bury {id1} 0"), "BURIED");
    ctl(a, &["kick", "--job", &id1.to_string()]).ok();
    assert_eq!(c.dict_value(&format!("stats-job {id1}"), "state"), "ready");
    let not_kickable = ctl(a, &["kick", "--job", &id1.to_string()]);
    assert_eq!(
        not_kickable.code, 5,
        "a ready job: NOT_FOUND as kick-job answers"
    );

    // pause and delete.
    let paused = ctl(a, &["--json", "pause", "emails", "30"]).ok().json();
    assert_eq!(paused["paused"], 30);
    assert_eq!(c.dict_value("stats-tube emails", "pause"), "30");
    ctl(a, &["delete", &id1.to_string()]).ok();
    assert_eq!(c.line(&format!("peek {id1}")), "NOT_FOUND");
    assert_eq!(ctl(a, &["delete", &id1.to_string()]).code, 5);
}

#[test]
fn exit_codes() {
    let srv = start(ServerKind::Memory).unwrap();
    let a = srv.addr;
    let closed = support::ClosedPort::new();
    let nobody = closed.addr;
    let down = ctl(nobody, &["stats"]);
    assert_eq!(down.code, 8, "{}", down.stderr);
    assert!(down.stderr.contains("cannot connect"), "{}", down.stderr);
    let api_down = ctl(a, &["--api", &format!("http://{nobody}"), "jobs", "t"]);
    assert_eq!(api_down.code, 8, "{}", api_down.stderr);
    for usage in [
        vec!["frobnicate"],
        vec!["put", "emails"],
        vec!["job", "not-a-number"],
        vec!["kick"],
        vec!["move", "5"],
        vec!["move", "--from", "a", "--to", "b"],
    ] {
        let out = ctl(a, &usage);
        assert_eq!(out.code, 2, "{usage:?}: {}", out.stderr);
    }
    for api_only in [
        vec!["jobs", "emails"],
        vec!["bury", "1"],
        vec!["move", "1", "other"],
        vec!["move", "--from", "a", "--to", "b", "--limit", "5"],
        vec!["pri", "1", "5"],
        vec!["delay", "1", "5"],
        vec!["search", "needle"],
    ] {
        let out = ctl(a, &api_only);
        assert_eq!(out.code, 3, "{api_only:?}: {}", out.stderr);
        assert!(out.stderr.contains("--api"), "{}", out.stderr);
    }
    assert_eq!(ctl(a, &["--help"]).code, 0);
}

#[test]
fn tail_and_top_end_after_count() {
    for kind in [ServerKind::Beanstalkd, ServerKind::Memory] {
        let Some(srv) = start(kind) else { continue };
        tail_sees_a_new_tube(srv.addr, &[]);
        top_draws_count_tables(srv.addr, &[]);
        println!("{}: tail and top: ok", kind.name());
    }
}

/// `tail --count 2`: the first refresh lists the tubes, then a tube made between the
/// refreshes shows up as added; the tool exits 0 by itself.
pub(crate) fn tail_sees_a_new_tube(addr: SocketAddr, extra: &[&str]) {
    let server = addr.to_string();
    let mut args = vec![
        "--server",
        &server,
        "--json",
        "tail",
        "--count",
        "2",
        "--interval",
        "1.5",
    ];
    args.extend_from_slice(extra);
    let mut child = ctl_cmd(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let _ = tx.send(line.unwrap());
        }
    });
    let first = rx
        .recv_timeout(Duration::from_secs(15))
        .expect("tail's first refresh");
    let started = Instant::now();
    let mut c = Client::connect(addr, "producer");
    c.use_tube("fresh");
    c.put(0, 0, 60, b"x");
    let status = support::wait_exit(&mut child, Duration::from_secs(20))
        .expect("tail exits after --count 2");
    assert!(status.success(), "{status}");
    let mut lines = vec![first];
    while let Ok(l) = rx.recv_timeout(Duration::from_secs(2)) {
        lines.push(l);
    }
    let events: Vec<Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(
        events
            .iter()
            .any(|e| e["event"] == "tube" && e["tube"] == "default"),
        "{lines:?}"
    );
    let added = events
        .iter()
        .find(|e| e["event"] == "added")
        .unwrap_or_else(|| panic!("{lines:?}"));
    assert_eq!(added["tube"], "fresh");
    assert_eq!(added["figures"]["current-jobs-ready"], 1);
    assert!(events.iter().all(|e| e["time"].is_f64()));
    println!(
        "tail: {} events, exited {:?} after the put",
        events.len(),
        started.elapsed()
    );
}

pub(crate) fn top_draws_count_tables(addr: SocketAddr, extra: &[&str]) {
    let server = addr.to_string();
    let mut args = vec![
        "--server",
        server.as_str(),
        "top",
        "--count",
        "2",
        "--interval",
        "0.2",
    ];
    args.extend_from_slice(extra);
    let out = run(&args, b"").ok();
    assert_eq!(out.stdout.matches("TUBE ").count(), 2, "{}", out.stdout);
    assert!(
        out.stdout.lines().any(|l| l.starts_with("fresh ")),
        "{}",
        out.stdout
    );
    args.insert(2, "--json");
    let out = run(&args, b"").ok();
    let frames: Vec<Value> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(frames.len(), 2);
    assert!(
        frames
            .iter()
            .all(|f| f["tubes"].as_array().is_some_and(|t| t.len() >= 2))
    );
}

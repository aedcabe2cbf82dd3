//! The admin API commands of redstalkctl (jobs with paging, job, pri, delay, bury, move,
//! search, put/delete, a bulk move with --dry-run, tail/top with --api, `key` by
//! the protocol and the API, `policy`, `schedule`) against redstalk's API, each change
//! checked over the beanstalk protocol.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::support::client::Client;
use super::support::{self, ServerKind, ServerProc};
use super::{Out, run, tail_sees_a_new_tube, top_draws_count_tables};

const TOKEN: &str = "cli-test-token";

/// redstalk (memory) with its HTTP listener on a free port.
fn start_http(extra: &[&str]) -> (ServerProc, SocketAddr) {
    for _ in 0..5 {
        let http: SocketAddr = ([127, 0, 0, 1], support::free_port()).into();
        let mut args = vec!["--metrics".to_string(), http.to_string()];
        args.extend(extra.iter().map(|s| s.to_string()));
        match ServerProc::start(ServerKind::Memory, &args) {
            Ok(Some(srv)) => {
                let deadline = Instant::now() + Duration::from_secs(10);
                while !support::is_listening(http.port()) {
                    assert!(Instant::now() < deadline, "the HTTP port does not listen");
                    std::thread::sleep(Duration::from_millis(20));
                }
                return (srv, http);
            }
            Ok(None) => unreachable!("redstalk is always there"),
            Err(e) => eprintln!("start redstalk: {e}; retrying"),
        }
    }
    panic!("could not start redstalk with --metrics");
}

/// redstalk (memory) with the admin API and a token.
fn api_server() -> (ServerProc, SocketAddr) {
    start_http(&["--admin-token", TOKEN])
}

/// The tool with `--api` (and the token when `token`).
fn api(srv: &ServerProc, http: SocketAddr, token: bool, args: &[&str]) -> Out {
    let (server, url) = (srv.addr.to_string(), format!("http://{http}"));
    let mut all = vec!["--server", server.as_str(), "--api", url.as_str()];
    if token {
        all.extend(["--token", TOKEN]);
    }
    all.extend_from_slice(args);
    run(&all, b"")
}

fn ids(v: &Value) -> Vec<u64> {
    v["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_u64().unwrap())
        .collect()
}

#[test]
fn api_jobs_pages_and_job_details() {
    let (srv, http) = api_server();
    let mut c = Client::connect(srv.addr, "producer");
    c.use_tube("emails");
    let a = c.put(10, 0, 60, b"ten");
    let b = c.put(5, 0, 60, b"five");
    let d = c.put(10, 0, 60, b"ten again");
    let page1 = api(
        &srv,
        http,
        false,
        &[
            "--json", "jobs", "emails", "--state", "ready", "--limit", "2",
        ],
    )
    .ok()
    .json();
    assert_eq!(ids(&page1), [b, a], "(pri, id) order");
    let cursor = page1["next_cursor"]
        .as_str()
        .expect("a next page")
        .to_string();
    let page2 = api(
        &srv,
        http,
        false,
        &[
            "--json", "jobs", "emails", "--limit", "2", "--cursor", &cursor,
        ],
    )
    .ok()
    .json();
    assert_eq!(ids(&page2), [d]);
    assert!(page2["next_cursor"].is_null());
    let all = api(
        &srv,
        http,
        false,
        &["--json", "jobs", "emails", "--all", "--limit", "1"],
    )
    .ok()
    .json();
    assert_eq!(ids(&all), [b, a, d]);
    let table = api(&srv, http, false, &["jobs", "emails"]).ok().stdout;
    assert_eq!(table.lines().count(), 4, "header and three jobs: {table}");
    let job = api(&srv, http, false, &["--json", "job", &b.to_string()])
        .ok()
        .json();
    assert_eq!(
        (job["body"].as_str(), job["pri"].as_u64()),
        (Some("five"), Some(5))
    );
    assert!(job["holder"].is_null());
    c.watch_only("emails");
    let (held, _) = c.reserve();
    let reserved = api(
        &srv,
        http,
        false,
        &["--json", "jobs", "emails", "--state", "reserved"],
    )
    .ok()
    .json();
    assert_eq!(ids(&reserved), [held]);
    assert!(reserved["jobs"][0]["holder"].is_object(), "{reserved}");
    assert_eq!(api(&srv, http, false, &["job", "987654"]).code, 5);
    let stats = api(&srv, http, false, &["--json", "stats"]).ok().json();
    assert_eq!(stats["current-jobs-reserved"], 1);
    let tubes = api(&srv, http, false, &["--json", "tubes"]).ok().json();
    assert!(
        tubes["tubes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "emails")
    );
}

#[test]
fn api_changes_of_one_job() {
    let (srv, http) = api_server();
    let mut c = Client::connect(srv.addr, "checker");
    c.use_tube("emails");
    let id = c.put(100, 0, 60, b"needle in a job");
    let s = id.to_string();
    let refused = api(&srv, http, false, &["pri", &s, "1"]);
    assert_eq!(refused.code, 4, "no token: {}", refused.stderr);
    let job = api(&srv, http, true, &["--json", "pri", &s, "1"])
        .ok()
        .json();
    assert_eq!(job["pri"], 1);
    assert_eq!(c.dict_value(&format!("stats-job {id}"), "pri"), "1");
    api(&srv, http, true, &["delay", &s, "100"]).ok();
    assert_eq!(c.dict_value(&format!("stats-job {id}"), "state"), "delayed");
    api(&srv, http, true, &["delay", &s, "0"]).ok();
    assert_eq!(c.dict_value(&format!("stats-job {id}"), "state"), "ready");
    api(&srv, http, true, &["bury", &s]).ok();
    assert_eq!(c.dict_value(&format!("stats-job {id}"), "state"), "buried");
    assert_eq!(
        api(&srv, http, true, &["bury", &s]).code,
        6,
        "a buried job: conflict"
    );
    let moved = api(&srv, http, true, &["--json", "move", &s, "other"])
        .ok()
        .json();
    assert_eq!(
        (moved["id"].as_u64(), moved["tube"].as_str()),
        (Some(id), Some("other"))
    );
    assert_eq!(c.dict_value(&format!("stats-job {id}"), "tube"), "other");
    let found = api(&srv, http, false, &["--json", "search", "needle"])
        .ok()
        .json();
    assert_eq!(ids(&found), [id]);
    api(&srv, http, true, &["kick", "--job", &s]).ok();
    c.watch_only("other");
    let (held, _) = c.reserve();
    assert_eq!(held, id);
    assert_eq!(
        api(&srv, http, true, &["move", &s, "emails"]).code,
        6,
        "reserved: conflict"
    );
    assert_eq!(api(&srv, http, true, &["pri", "987654", "1"]).code, 5);
    let put = api(&srv, http, true, &["--json", "put", "emails", "via api"])
        .ok()
        .json();
    let new = put["id"].as_u64().unwrap();
    assert_eq!(c.cmd(&format!("peek {new}")).text(), "via api");
    api(&srv, http, true, &["delete", &new.to_string()]).ok();
    assert_eq!(c.line(&format!("peek {new}")), "NOT_FOUND");
}

#[test]
fn api_bulk_move_and_live_commands() {
    let (srv, http) = api_server();
    let mut c = Client::connect(srv.addr, "producer");
    c.use_tube("src");
    for i in 0..30 {
        c.put(1024, 0, 60, format!("bulk-{i}").as_bytes());
    }
    let args = [
        "--json", "move", "--from", "src", "--to", "dst", "--limit", "100",
    ];
    let mut dry: Vec<&str> = args.to_vec();
    dry.push("--dry-run");
    let counted = api(&srv, http, true, &dry).ok().json();
    assert_eq!(
        (counted["matched"].as_u64(), counted["changed"].as_u64()),
        (Some(30), Some(0))
    );
    assert_eq!(counted["dry_run"], true);
    assert_eq!(
        c.dict_value("stats-tube src", "current-jobs-ready"),
        "30",
        "a dry run moves nothing"
    );
    let moved = api(&srv, http, true, &args).ok().json();
    assert_eq!(
        (moved["matched"].as_u64(), moved["changed"].as_u64()),
        (Some(30), Some(30))
    );
    assert_eq!(c.dict_value("stats-tube dst", "current-jobs-ready"), "30");
    let url = format!("http://{http}");
    tail_sees_a_new_tube(srv.addr, &["--api", &url]);
    top_draws_count_tables(srv.addr, &["--api", &url]);
}

/// `flush` over the beanstalk port (`flush-tube`) and over the API (the flush route):
/// the states named, then the rest; beanstalkd, which has no flush, is unsupported (3).
#[test]
fn flush_over_the_protocol_and_the_api() {
    let (srv, http) = api_server();
    let mut c = Client::connect(srv.addr, "checker");
    c.use_tube("fl");
    for _ in 0..3 {
        c.put(0, 0, 60, b"ready");
    }
    c.put(0, 100, 60, b"later");
    let server = srv.addr.to_string();
    let by_port = run(
        &[
            "--server", &server, "--json", "flush", "fl", "--state", "delayed",
        ],
        b"",
    )
    .ok();
    assert_eq!(by_port.json()["flushed"], 1);
    let by_api = api(&srv, http, true, &["--json", "flush", "fl"]).ok();
    assert_eq!(by_api.json()["flushed"], 3);
    assert_eq!(c.line("peek-ready"), "NOT_FOUND");
    if let Some(b) = ServerProc::start(ServerKind::Beanstalkd, &[]).expect("start beanstalkd") {
        let server = b.addr.to_string();
        assert_eq!(run(&["--server", &server, "flush", "fl"], b"").code, 3);
    }
}

#[test]
fn keys_over_the_protocol_and_the_api() {
    let (srv, http) = api_server();
    let mut c = Client::connect(srv.addr, "checker");
    c.use_tube("ky");
    let timeout = Duration::from_secs(10);
    let mut keyed = Vec::new();
    for k in ["order-1", "order-2"] {
        let put = format!("put 5 0 60 1 idp:{k}:600\r\nx\r\n");
        keyed.push(c.try_call(put.as_bytes(), timeout).unwrap().id().unwrap());
    }
    let server = srv.addr.to_string();
    let by_port = |args: &[&str]| {
        let mut all = vec!["--server", server.as_str()];
        all.extend_from_slice(args);
        run(&all, b"")
    };
    for found in [
        by_port(&["--json", "key", "ky", "order-1"]).ok().json(),
        api(&srv, http, false, &["--json", "key", "ky", "order-1"])
            .ok()
            .json(),
    ] {
        assert_eq!(found["id"], keyed[0], "{found}");
        assert_eq!(
            (found["key"].as_str(), found["state"].as_str()),
            (Some("order-1"), Some("ready"))
        );
    }
    let listed = api(&srv, http, false, &["--json", "jobs", "ky"])
        .ok()
        .json();
    assert_eq!(listed["jobs"][1]["key"], "order-2", "{listed}");
    let table = api(&srv, http, false, &["jobs", "ky"]).ok().stdout;
    assert!(table.lines().next().unwrap().contains("KEY"), "{table}");
    assert!(table.contains("order-2"), "{table}");
    assert_eq!(
        api(&srv, http, false, &["key", "ky", "order-1", "--delete"]).code,
        4
    );
    let deleted = by_port(&["--json", "key", "ky", "order-1", "--delete"])
        .ok()
        .json();
    assert_eq!(deleted["deleted"], keyed[0]);
    let deleted = api(
        &srv,
        http,
        true,
        &["--json", "key", "ky", "order-2", "--delete"],
    )
    .ok()
    .json();
    assert_eq!(deleted["deleted"], keyed[1]);
    assert_eq!(c.line("peek-ready"), "NOT_FOUND");
    // Inside its window the key names the deleted job, on both paths.
    let window = by_port(&["--json", "key", "ky", "order-1"]).ok().json();
    assert_eq!(
        window,
        serde_json::json!({"id": keyed[0], "state": "deleted"})
    );
    let window = api(&srv, http, false, &["--json", "key", "ky", "order-2"])
        .ok()
        .json();
    assert_eq!(
        window,
        serde_json::json!({"id": keyed[1], "state": "deleted"})
    );
    assert_eq!(by_port(&["key", "ky", "order-1", "--delete"]).code, 5);
    assert_eq!(by_port(&["key", "ky", "nothing"]).code, 5);
    assert_eq!(
        api(&srv, http, true, &["key", "ky", "nothing", "--delete"]).code,
        5
    );
    if let Some(b) = ServerProc::start(ServerKind::Beanstalkd, &[]).expect("start beanstalkd") {
        let server = b.addr.to_string();
        assert_eq!(run(&["--server", &server, "key", "ky", "k"], b"").code, 3);
    }
}

#[test]
fn api_policies_set_list_and_remove() {
    let (srv, http) = api_server();
    let out = api(
        &srv,
        http,
        true,
        &["policy", "set", "mail*", "--dead-reserves", "3"],
    );
    assert!(out.ok().stdout.contains("3 reserves"));
    let args = [
        "--json",
        "policy",
        "set",
        "slow",
        "--backoff-base",
        "1000",
        "--backoff-max",
        "8000",
    ];
    let set: Value = serde_json::from_str(&api(&srv, http, true, &args).ok().stdout).unwrap();
    assert_eq!(set["backoff"]["factor"], 2.0, "{set}");
    let list: Value = serde_json::from_str(
        &api(&srv, http, true, &["--json", "policy", "list"])
            .ok()
            .stdout,
    )
    .unwrap();
    let tubes = support::policies::patterns(&list);
    assert_eq!(tubes, ["slow", "mail*"], "{list}");
    let table = api(&srv, http, true, &["policy", "list"]).ok().stdout;
    assert!(table.starts_with("TUBES"), "{table}");
    // Refused without the token (4), a bad rule is the server's 400 (2), a missing
    // one not found (5), no flags a usage error (2), without --api unsupported (3).
    assert_eq!(
        api(&srv, http, false, &["policy", "remove", "slow"]).code,
        4
    );
    let zero = ["policy", "set", "x", "--dead-reserves", "0"];
    assert_eq!(api(&srv, http, true, &zero).code, 2);
    assert_eq!(api(&srv, http, true, &["policy", "set", "x"]).code, 2);
    api(&srv, http, true, &["policy", "remove", "slow"]).ok();
    assert_eq!(api(&srv, http, true, &["policy", "remove", "slow"]).code, 5);
    let server = srv.addr.to_string();
    let no_api = run(&["--server", &server, "policy", "list"], b"");
    assert_eq!(no_api.code, 3, "{}", no_api.stderr);
}

#[test]
fn api_schedules_set_list_show_pause_resume_run_and_remove() {
    let (srv, http) = api_server();
    let set = [
        "--json",
        "schedule",
        "set",
        "nightly",
        "--tube",
        "reports",
        "--cron",
        "0 3 * * *",
        "--tz",
        "Europe/Berlin",
        "--body",
        "build",
        "--key",
        "nightly",
        "--ttr",
        "5m",
        "--missed",
        "once",
        "--paused",
    ];
    let v = api(&srv, http, true, &set).ok().json();
    assert_eq!(
        (
            &v["name"],
            &v["tz"],
            &v["ttr_ms"],
            &v["missed"],
            &v["paused"]
        ),
        (
            &Value::from("nightly"),
            &Value::from("Europe/Berlin"),
            &Value::from(300_000),
            &Value::from("once"),
            &Value::from(true)
        ),
        "{v}"
    );
    let every = [
        "schedule", "set", "beat", "--tube", "beats", "--every", "1h", "--paused",
    ];
    assert!(
        api(&srv, http, true, &every)
            .ok()
            .stdout
            .contains("every 1h")
    );
    let list = api(&srv, http, true, &["--json", "schedule", "list"])
        .ok()
        .json();
    let names: Vec<&str> = list["schedules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["beat", "nightly"], "{list}");
    let table = api(&srv, http, true, &["schedule", "list"]).ok().stdout;
    assert!(table.starts_with("NAME"), "{table}");
    assert!(table.contains("paused"), "{table}");

    let v = api(
        &srv,
        http,
        true,
        &["--json", "schedule", "resume", "nightly"],
    )
    .ok()
    .json();
    assert_eq!(v["next"].as_array().unwrap().len(), 5, "{v}");
    let shown = api(&srv, http, true, &["schedule", "show", "nightly"])
        .ok()
        .stdout;
    assert!(shown.contains("0 3 * * * (Europe/Berlin)"), "{shown}");
    assert!(shown.contains("T03:00:00+0"), "next ticks, local: {shown}");
    let v = api(
        &srv,
        http,
        true,
        &["--json", "schedule", "pause", "nightly"],
    )
    .ok()
    .json();
    assert_eq!(
        (&v["paused"], &v["next"]),
        (&Value::from(true), &Value::Array(vec![]))
    );

    // A run puts the job now; with the key's job waiting, a second run makes none.
    let first = api(&srv, http, true, &["--json", "schedule", "run", "nightly"])
        .ok()
        .json();
    assert_eq!(first["deduped"], false, "{first}");
    let id = first["id"].as_u64().unwrap();
    let again = api(&srv, http, true, &["schedule", "run", "nightly"])
        .ok()
        .stdout;
    assert!(again.contains(&format!("job {id} still waits")), "{again}");
    let mut c = Client::connect(srv.addr, "check");
    c.watch_only("reports");
    let (got, body) = c.reserve_timeout(5).expect("the run's job");
    assert_eq!((got, body.as_slice()), (id, &b"build"[..]));

    // Refused without the token (4); a bad spec is the server's 400 (2); neither
    // --cron nor --every a usage error (2); a bad duration (2); missing: 5; no --api: 3.
    assert_eq!(
        api(&srv, http, false, &["schedule", "pause", "nightly"]).code,
        4
    );
    let bad = ["schedule", "set", "x", "--tube", "t", "--cron", "0 0 * *"];
    assert_eq!(api(&srv, http, true, &bad).code, 2);
    assert_eq!(
        api(&srv, http, true, &["schedule", "set", "x", "--tube", "t"]).code,
        2
    );
    let dur = ["schedule", "set", "x", "--tube", "t", "--every", "5y"];
    assert_eq!(api(&srv, http, true, &dur).code, 2);
    api(&srv, http, true, &["schedule", "remove", "nightly"]).ok();
    assert_eq!(
        api(&srv, http, true, &["schedule", "remove", "nightly"]).code,
        5
    );
    assert_eq!(
        api(&srv, http, true, &["schedule", "show", "nightly"]).code,
        5
    );
    let server = srv.addr.to_string();
    let no_api = run(&["--server", &server, "schedule", "list"], b"");
    assert_eq!(no_api.code, 3, "{}", no_api.stderr);
}

/// Needs the store's schedule cursors (`fire_tick`): a 1 s schedule's jobs and its
/// counts in `schedule show`.
#[test]
fn api_schedule_fires_and_show_counts_them() {
    let (srv, http) = api_server();
    let every = [
        "schedule", "set", "beat", "--tube", "beats", "--every", "1s", "--body", "b",
    ];
    api(&srv, http, true, &every).ok();
    let mut c = Client::connect(srv.addr, "worker");
    c.watch_only("beats");
    for _ in 0..2 {
        let (id, body) = c.reserve_timeout(10).expect("a tick's job");
        assert_eq!(body, b"b");
        c.expect(&format!("delete {id}"), "DELETED");
    }
    let v = api(&srv, http, true, &["--json", "schedule", "show", "beat"])
        .ok()
        .json();
    assert!(v["cursor"]["fired"].as_u64().unwrap() >= 2, "{v}");
    assert!(
        v["last"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["result"] == "made"),
        "{v}"
    );
    let shown = api(&srv, http, true, &["schedule", "show", "beat"])
        .ok()
        .stdout;
    assert!(shown.contains("made"), "{shown}");
}

//! Schedules through the operator API (docs/API.md, *Schedules*; docs/SCHEDULES.md) on
//! a memory-mode server (a part of `admin.rs`, sharing its launcher):
//! - `a_schedule_fires_pauses_resumes_and_goes` — `PUT /schedules/{name}` with
//!   `every_ms: 1000` on tube `ticks`; a beanstalk client watching only `ticks` reserves
//!   each job as it arrives (reserve-with-timeout, generous bounds) and checks its
//!   body; `GET` shows `cursor.fired` at least the jobs seen and `next` ascending and
//!   after the last tick, and `/metrics` as many made; paused, no job comes for 3 s and
//!   `next` is empty; resumed,
//!   jobs come again; `DELETE` answers `removed` and the schedule is 404 after, and no
//!   job comes. Needs the store's cursors (`fire_tick`).
//! - `schedule_changes_are_checked_run_and_refused` — a bad spec, time zone, name or
//!   tube, a body naming another schedule, a 7-field cron and `@reboot` are 400 with
//!   the reason; an unknown schedule is 404 for show, pause, run and delete; `run` puts
//!   one job now (its id answered, the body the schedule's) and, with a key while the
//!   key's job waits, answers that job `deduped`; a change without a token is 401 and
//!   with a token whose role has `api = "read"` 403; `/metrics` counts the schedule
//!   in `redstalk_schedules` and no run as a fire.

use super::*;

const READER: &str = "tok-reader-0123456789";

fn put_schedule(api: &Api, name: &str, doc: Value) -> (u16, Value) {
    let auth = format!("Bearer {TOKEN}");
    let (s, v, _) = api.send(
        "PUT",
        &format!("/schedules/{name}"),
        Some(doc.to_string()),
        &[
            ("authorization", &auth),
            ("content-type", "application/json"),
        ],
    );
    (s, v)
}

fn delete_schedule(api: &Api, name: &str) -> (u16, Value) {
    let auth = format!("Bearer {TOKEN}");
    let (s, v, _) = api.send(
        "DELETE",
        &format!("/schedules/{name}"),
        None,
        &[("authorization", &auth)],
    );
    (s, v)
}

/// Reserve every job the schedule puts within `window`, deleting each; their count.
fn take_jobs(c: &mut Client, window: Duration, body: &[u8]) -> usize {
    let until = Instant::now() + window;
    let mut n = 0;
    while Instant::now() < until {
        let left = until.saturating_duration_since(Instant::now()).as_secs() as u32;
        match c.reserve_timeout(left.max(1)) {
            Some((id, got)) => {
                assert_eq!(got, body, "job {id}'s body");
                c.expect(&format!("delete {id}"), "DELETED");
                n += 1;
            }
            None => break,
        }
    }
    n
}

fn assert_next_ascending(v: &Value, after_ms: u64) {
    let next: Vec<u64> = v["next"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["ms"].as_u64().unwrap())
        .collect();
    assert_eq!(next.len(), 5, "{v}");
    assert!(next.windows(2).all(|w| w[0] < w[1]), "ascending: {next:?}");
    assert!(
        next[0] > after_ms,
        "after the last tick {after_ms}: {next:?}"
    );
    for n in v["next"].as_array().unwrap() {
        assert!(n["utc"].as_str().unwrap().ends_with('Z'), "{n}");
        assert!(!n["local"].as_str().unwrap().is_empty(), "{n}");
    }
}

#[test]
fn a_schedule_fires_pauses_resumes_and_goes() {
    let _serial = serial();
    let home = Home::Memory;
    let (srv, api) = home.launch(&["--admin-token", TOKEN]);
    let mut c = Client::connect(srv.addr, "worker");
    c.watch_only("ticks");

    let (s, v) = put_schedule(
        &api,
        "tick",
        json!({"tube": "ticks", "every_ms": 1000, "body": "tick!"}),
    );
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["name"], "tick");
    assert_eq!(v["every_ms"], 1000);
    assert!(v["changed_ms"].as_u64().unwrap() > 0, "the server's: {v}");

    // Every second a job: at least 3 within 6 s (generous: a loaded machine).
    let seen = take_jobs(&mut c, Duration::from_secs(6), b"tick!");
    assert!(seen >= 3, "jobs in 6 s: {seen}");
    let (s, v) = api.get("/schedules/tick");
    assert_eq!(s, 200, "{v}");
    let cursor = &v["cursor"];
    assert!(
        cursor["fired"].as_u64().unwrap() >= seen as u64,
        "fired {cursor} vs seen {seen}"
    );
    assert!(cursor["last_job"].as_u64().unwrap() > 0, "{cursor}");
    assert_next_ascending(&v, cursor["last_tick_ms"].as_u64().unwrap());
    let last = v["last"].as_array().unwrap();
    assert!(
        last.iter()
            .any(|f| f["result"] == "made" && f["job"].is_u64()),
        "{v}"
    );
    let (s, list) = api.get("/schedules");
    assert_eq!(s, 200);
    assert_eq!(list["schedules"][0]["name"], "tick", "{list}");
    let made = metric(&api, "redstalk_schedule_fires_total{result=\"made\"} ");
    assert!(made >= seen as u64, "made {made} vs seen {seen}");
    assert_eq!(metric(&api, "redstalk_schedules "), 1);
    assert_eq!(list["persisted"], false);

    let (s, v) = api.post("/schedules/tick/pause", json!({}));
    assert_eq!((s, &v["paused"]), (200, &json!(true)), "{v}");
    assert_eq!(v["next"], json!([]), "paused: no next");
    // A tick may have been in flight at the pause: take it, then silence.
    take_jobs(&mut c, Duration::from_millis(1500), b"tick!");
    assert_eq!(c.reserve_timeout(3), None, "no job while paused");

    let (s, v) = api.post("/schedules/tick/resume", json!({}));
    assert_eq!((s, &v["paused"]), (200, &json!(false)), "{v}");
    let again = take_jobs(&mut c, Duration::from_secs(5), b"tick!");
    assert!(again >= 2, "jobs after resume: {again}");

    let (s, v) = api.post("/schedules/tick/run", json!({}));
    assert_eq!(s, 200, "{v}");
    assert!(
        v["id"].as_u64().unwrap() > 0 && v["deduped"] == false,
        "{v}"
    );

    let (s, v) = delete_schedule(&api, "tick");
    assert_eq!((s, &v["removed"]), (200, &json!(true)), "{v}");
    assert_eq!(api.get("/schedules/tick").0, 404);
    // The run's job, a tick in flight at the delete; then nothing.
    take_jobs(&mut c, Duration::from_millis(1500), b"tick!");
    assert_eq!(c.reserve_timeout(3), None, "no job after the delete");
    drop(srv);
}

#[test]
fn schedule_changes_are_checked_run_and_refused() {
    let _serial = serial();
    let dir = fresh_dir();
    let roles = dir.join("roles.toml");
    std::fs::write(
        &roles,
        format!(
            "[roles.reader]\napi = \"read\"\n\n[[token]]\nname = \"reader\"\ntoken = \"{READER}\"\nrole = \"reader\"\n"
        ),
    )
    .unwrap();
    let roles = roles.display().to_string();
    let (srv, api) = Home::Memory.launch(&["--admin-token", TOKEN, "--roles", &roles]);

    for (name, doc, says) in [
        ("bad", json!({"tube": "t", "cron": "61 * * * *"}), "61"),
        (
            "bad",
            json!({"tube": "t", "cron": "0 0 * * *", "tz": "Mars/Olympus"}),
            "Mars/Olympus",
        ),
        ("bad", json!({"tube": "t", "cron": "0 0 1 1 * 2030"}), ""),
        ("bad", json!({"tube": "t", "cron": "@reboot"}), "boot"),
        ("bad", json!({"tube": "t"}), "cron and every_ms"),
        ("bad", json!({"tube": "t", "every_ms": 10}), ""),
        (
            "bad",
            json!({"tube": "t", "every_ms": 1000, "tz": "UTC"}),
            "tz",
        ),
        ("bad", json!({"tube": "a b", "every_ms": 1000}), "tube"),
        (
            "bad",
            json!({"tube": "t", "every_ms": 1000, "name": "other"}),
            "other",
        ),
        (
            "bad",
            json!({"tube": "t", "every_ms": 1000, "colour": 1}),
            "colour",
        ),
        (
            "a%20b",
            json!({"tube": "t", "every_ms": 1000}),
            "schedule name",
        ),
    ] {
        let (s, v) = put_schedule(&api, name, doc.clone());
        assert_eq!(
            (s, v["error"]["code"].as_str()),
            (400, Some("bad_request")),
            "{doc}: {v}"
        );
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(msg.contains(says), "{doc}: {msg:?} says {says:?}");
    }
    assert_eq!(api.get("/schedules").1["schedules"], json!([]), "none kept");

    assert_eq!(api.get("/schedules/nope").0, 404);
    assert_eq!(api.post("/schedules/nope/pause", json!({})).0, 404);
    assert_eq!(api.post("/schedules/nope/resume", json!({})).0, 404);
    assert_eq!(api.post("/schedules/nope/run", json!({})).0, 404);
    assert_eq!(delete_schedule(&api, "nope").0, 404);

    // Paused: only runs put jobs (no store cursor needed).
    let doc = json!({"tube": "runs", "cron": "0 3 * * *", "tz": "Europe/Berlin",
        "body": "<b>run</b>", "key": "nightly", "paused": true});
    let (s, v) = put_schedule(&api, "nightly", doc);
    assert_eq!(s, 200, "{v}");
    assert_eq!(
        (v["tz"].as_str(), v["paused"].as_bool()),
        (Some("Europe/Berlin"), Some(true))
    );
    assert_eq!(v["next"], json!([]));
    let (s, v) = api.post("/schedules/nightly/resume", json!({}));
    assert_eq!(s, 200, "{v}");
    assert_next_ascending(&v, 0);
    let local = v["next"][0]["local"].as_str().unwrap();
    assert!(local.contains("T03:00:00+0"), "3 am in Berlin: {local}");

    let mut c = Client::connect(srv.addr, "worker");
    c.watch_only("runs");
    let (s, first) = api.post("/schedules/nightly/run", json!({}));
    assert_eq!(s, 200, "{first}");
    assert_eq!(first["deduped"], false, "{first}");
    let id = first["id"].as_u64().unwrap();
    let (s, again) = api.post("/schedules/nightly/run", json!({}));
    assert_eq!(s, 200, "{again}");
    assert_eq!(
        (again["id"].as_u64(), again["deduped"].as_bool()),
        (Some(id), Some(true)),
        "the key's job still waits"
    );
    let (got, body) = c.reserve_timeout(5).expect("the run's job");
    assert_eq!((got, body.as_slice()), (id, &b"<b>run</b>"[..]));
    c.expect(&format!("delete {got}"), "DELETED");
    let (s, third) = api.post("/schedules/nightly/run", json!({}));
    assert_eq!(s, 200);
    assert_eq!(third["deduped"], false, "deleted: a new job: {third}");
    assert_ne!(third["id"].as_u64(), Some(id));

    // Access: no token 401, a read-only role 403, reads served.
    let (s, v, _) = api.send("POST", "/schedules/nightly/pause", None, &[]);
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (401, Some("unauthorized")),
        "{v}"
    );
    let reader = format!("Bearer {READER}");
    for (method, path) in [
        ("PUT", "/schedules/other"),
        ("POST", "/schedules/nightly/pause"),
        ("POST", "/schedules/nightly/run"),
        ("DELETE", "/schedules/nightly"),
    ] {
        let body = json!({"tube": "t", "every_ms": 1000}).to_string();
        let (s, v, _) = api.send(
            method,
            path,
            Some(body),
            &[
                ("authorization", &reader),
                ("content-type", "application/json"),
            ],
        );
        assert_eq!(
            (s, v["error"]["code"].as_str()),
            (403, Some("forbidden")),
            "{method} {path}: {v}"
        );
    }
    assert_eq!(
        api.get("/schedules/nightly").1["paused"],
        false,
        "unchanged"
    );

    assert_eq!(metric(&api, "redstalk_schedules "), 1);
    // Runs are not ticks: nothing fired (the schedule's next tick is at 3 am).
    assert_eq!(
        metric(&api, "redstalk_schedule_fires_total{result=\"made\"} "),
        0
    );

    let (s, v) = delete_schedule(&api, "nightly");
    assert_eq!((s, &v["removed"]), (200, &json!(true)));
    assert_eq!(delete_schedule(&api, "nightly").0, 404);
    drop(srv);
}

//! Retention through the operator API, `/metrics` and redstalkctl (docs/API.md,
//! *Retention*; docs/RETENTION.md) on a memory-mode server (a part of `admin.rs`,
//! sharing its launcher):
//! - `a_deleted_jobs_record_and_history` — with `--retain 1h --retain-bodies`: a job
//!   put by one connection, reserved by A, released, reserved by B and deleted by B
//!   through the beanstalk port; while it lives `/jobs/{id}` carries its `history`
//!   (put, reserve by A); after the delete `stats-job` is NOT_FOUND as in beanstalkd
//!   and `/jobs/{id}` answers `"state": "deleted"` with `deleted_at` (RFC 3339), its
//!   figures, its body, and the history put, reserve (A), release (A), reserve (B),
//!   delete (B) in order with those connections; `/jobs/{id}/body` gives the body;
//!   `/retained` lists it newest first with totals, pages with its cursor (2 more
//!   deletes, `limit=2`: every record once, newest first; `after` taken for
//!   `cursor`), filters by tube; `key` without `tube` is 400; an unknown id is 404; `/metrics` has `redstalk_retained_records`; the
//!   CLI's `job ID` (and `job show ID`) prints the record and its timeline,
//!   `retained list` the records.
//! - `keyed_records_are_found_by_key` — a keyed job (`idp:order-77:600`) deleted:
//!   `/retained?tube=&key=` answers its record, and `/tubes/{t}/keys/{k}` the record
//!   (with `deleted_at` and its history) rather than the bare window.
//! - `retention_off_changes_nothing` — without `--retain`: a live job's JSON has no
//!   `history`, a deleted one is 404, `/retained` says `on: false` with no records,
//!   `/metrics` has no retention family.

use super::*;

/// redstalkctl against `api`, with `args`; (exit code, stdout).
fn ctl(api: &Api, args: &[&str]) -> (i32, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_redstalkctl"))
        .args(["--timeout", "10", "--api", &format!("http://{}", api.http)])
        .args(args)
        .env_remove("REDSTALKCTL_API")
        .env_remove("REDSTALKCTL_SERVER")
        .env_remove("REDSTALKCTL_TOKEN")
        .env_remove("REDSTALK_ADMIN_TOKEN")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// The holder's connection id of reserved job `id`.
fn holder(api: &Api, id: u64) -> u64 {
    let (s, v) = api.get(&format!("/jobs/{id}"));
    assert_eq!(s, 200, "{v}");
    v["holder"]["conn"].as_u64().unwrap()
}

/// A history's (event, conn) pairs.
fn events(v: &Value) -> Vec<(String, u64)> {
    v["history"]
        .as_array()
        .unwrap_or_else(|| panic!("no history in {v}"))
        .iter()
        .map(|e| {
            (
                e["event"].as_str().unwrap().to_string(),
                e["conn"].as_u64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn a_deleted_jobs_record_and_history() {
    let _serial = serial();
    let (srv, api) = Home::Memory.launch(&["--retain", "1h", "--retain-bodies"]);
    let mut producer = Client::connect(srv.addr, "producer");
    producer.use_tube("ret");
    let mut a = Client::connect(srv.addr, "worker-a");
    a.watch_only("ret");
    let mut b = Client::connect(srv.addr, "worker-b");
    b.watch_only("ret");

    let body = "the <b>body</b>";
    let id = producer.put(7, 0, 60, body.as_bytes());
    let (got, _) = a.reserve();
    assert_eq!(got, id);
    let conn_a = holder(&api, id);
    // A live job's history while retention is on.
    let (s, live) = api.get(&format!("/jobs/{id}"));
    assert_eq!(s, 200, "{live}");
    assert_eq!(
        events(&live),
        vec![("put".into(), 0), ("reserve".into(), conn_a)],
        "{live}"
    );
    a.expect(&format!("release {id} 9 0"), "RELEASED");
    let (got, _) = b.reserve();
    assert_eq!(got, id);
    let conn_b = holder(&api, id);
    assert_ne!(conn_a, conn_b);
    b.expect(&format!("delete {id}"), "DELETED");
    b.expect(&format!("stats-job {id}"), "NOT_FOUND");

    let (s, r) = api.get(&format!("/jobs/{id}?body=full"));
    assert_eq!(s, 200, "the deleted job's record: {r}");
    assert_eq!(r["state"], "deleted", "{r}");
    assert_eq!(r["id"], id);
    assert_eq!(r["tube"], "ret");
    assert_eq!(r["pri"], 9, "the priority its release gave: {r}");
    assert_eq!(r["ttr"], 60);
    assert_eq!(
        (r["reserves"].as_u64(), r["releases"].as_u64()),
        (Some(2), Some(1))
    );
    assert_eq!(r["body_size"], body.len());
    assert_eq!(r["body_kept"], true);
    assert_eq!(r["body"], body);
    let deleted_at = r["deleted_at"].as_str().unwrap();
    assert!(
        deleted_at.ends_with('Z') && deleted_at.contains('T'),
        "RFC 3339 UTC: {deleted_at}"
    );
    assert_eq!(
        events(&r),
        vec![
            ("put".into(), 0),
            ("reserve".into(), conn_a),
            ("release".into(), conn_a),
            ("reserve".into(), conn_b),
            ("delete".into(), conn_b),
        ],
        "{r}"
    );
    assert_eq!(r["history_dropped"], 0);
    let times: Vec<u64> = r["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["at_ms"].as_u64().unwrap())
        .collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
    assert_eq!(r["deleted_at_ms"].as_u64(), times.last().copied());
    let raw = agent()
        .get(&api.url(&format!("/jobs/{id}/body")))
        .call()
        .unwrap()
        .body_mut()
        .read_to_string()
        .unwrap();
    assert_eq!(raw, body);
    println!("job {id}: deleted record with history {:?}", events(&r));

    // Three more deletes, one keyed; pages of 2, newest first.
    let mut deleted = vec![id];
    for n in 0..2 {
        let j = producer.put(5, 0, 60, format!("more {n}").as_bytes());
        producer.expect(&format!("delete {j}"), "DELETED");
        deleted.push(j);
    }
    let (s, page) = api.get("/retained?limit=2");
    assert_eq!(s, 200, "{page}");
    assert_eq!(page["retention"]["on"], true);
    assert_eq!(page["retention"]["keep_ms"], 3_600_000);
    assert_eq!(page["retention"]["bodies"], true);
    assert!(page["records"].as_u64().unwrap() >= 3, "{page}");
    assert!(page["bytes"].as_u64().unwrap() > 0, "{page}");
    let mut listed = ids(page["jobs"].as_array().unwrap());
    let mut cursor = page["next_cursor"].as_str().map(str::to_string);
    while let Some(c) = cursor {
        let (s, p) = api.get(&format!("/retained?limit=2&after={c}"));
        assert_eq!(s, 200, "{p}");
        listed.extend(ids(p["jobs"].as_array().unwrap()));
        cursor = p["next_cursor"].as_str().map(str::to_string);
    }
    let mut newest_first = deleted.clone();
    newest_first.reverse();
    assert_eq!(listed, newest_first, "every record once, newest first");
    let (s, by_tube) = api.get("/retained?tube=ret&limit=50");
    assert_eq!(s, 200);
    assert_eq!(ids(by_tube["jobs"].as_array().unwrap()), newest_first);
    let (s, none) = api.get("/retained?tube=elsewhere");
    assert_eq!((s, none["jobs"].as_array().unwrap().len()), (200, 0));
    let (s, bad) = api.get("/retained?key=order-77");
    assert_eq!(s, 400, "key needs tube: {bad}");
    let (s, gone) = api.get("/jobs/999999");
    assert_eq!(s, 404, "{gone}");

    assert!(metric(&api, "redstalk_retained_records ") >= 3);
    assert!(metric(&api, "redstalk_retained_bytes ") > 0);

    // The CLI: the record and its timeline; the list.
    let (code, out) = ctl(&api, &["job", &id.to_string()]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("deleted"), "{out}");
    assert!(out.contains("history:"), "{out}");
    for needle in ["put", "reserve", "release", "delete", &conn_b.to_string()] {
        assert!(out.contains(needle), "{needle} in {out}");
    }
    assert!(out.contains(body), "{out}");
    println!("redstalkctl job {id}:\n{out}");
    let (code, out) = ctl(&api, &["--json", "job", "show", &id.to_string()]);
    assert_eq!(code, 0, "{out}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(events(&v), events(&r));
    let (code, out) = ctl(&api, &["retained", "list", "--tube", "ret"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("retention: keep 1h"), "{out}");
    for j in &deleted {
        assert!(out.contains(&j.to_string()), "{j} in {out}");
    }
    let (code, out) = ctl(&api, &["--json", "retained", "list", "--limit", "1"]);
    assert_eq!(code, 0, "{out}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["jobs"].as_array().unwrap().len(), 1, "{v}");
    assert!(v["next_cursor"].is_string(), "{v}");
}

#[test]
fn keyed_records_are_found_by_key() {
    let _serial = serial();
    let (srv, api) = Home::Memory.launch(&["--retain", "1h"]);
    let mut c = Client::connect(srv.addr, "keyed");
    c.use_tube("orders");
    let put = c.try_call(b"put 5 0 60 5 idp:order-77:600\r\nfirst\r\n", HTTP_TIMEOUT);
    let reply = put.unwrap().id().expect("INSERTED");
    c.expect(&format!("delete {reply}"), "DELETED");
    let (s, page) = api.get("/retained?tube=orders&key=order-77");
    assert_eq!(s, 200, "{page}");
    assert_eq!(ids(page["jobs"].as_array().unwrap()), vec![reply], "{page}");
    assert_eq!(page["jobs"][0]["key"], "order-77");
    let (s, found) = api.get("/tubes/orders/keys/order-77");
    assert_eq!(s, 200, "{found}");
    assert_eq!(found["id"], reply);
    assert_eq!(found["state"], "deleted");
    assert!(
        found["deleted_at"].is_string(),
        "the record, not the window: {found}"
    );
    assert_eq!(
        events(&found).last().map(|e| e.0.clone()),
        Some("delete".to_string())
    );
    let (s, none) = api.get("/retained?tube=orders&key=order-78");
    assert_eq!((s, none["jobs"].as_array().unwrap().len()), (200, 0));
}

#[test]
fn retention_off_changes_nothing() {
    let _serial = serial();
    let (srv, api) = Home::Memory.launch(&[]);
    let mut c = Client::connect(srv.addr, "plain");
    c.use_tube("plain");
    let id = c.put(1, 0, 60, b"x");
    let (s, live) = api.get(&format!("/jobs/{id}"));
    assert_eq!(s, 200, "{live}");
    assert!(live.get("history").is_none(), "no history when off: {live}");
    assert!(live.get("history_dropped").is_none(), "{live}");
    c.expect(&format!("delete {id}"), "DELETED");
    let (s, gone) = api.get(&format!("/jobs/{id}"));
    assert_eq!(s, 404, "{gone}");
    let (s, page) = api.get("/retained");
    assert_eq!(s, 200, "{page}");
    assert_eq!(page["retention"]["on"], false);
    assert_eq!(
        (page["records"].as_u64(), page["bytes"].as_u64()),
        (Some(0), Some(0))
    );
    assert!(page["jobs"].as_array().unwrap().is_empty());
    let text = metrics_text(&api);
    assert!(
        !text.contains("redstalk_retained"),
        "no retention family when off"
    );
    let (code, out) = ctl(&api, &["retained", "list"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("retention is off"), "{out}");
}

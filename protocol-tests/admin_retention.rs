//! Retention through the protocol and the operator API (docs/RETENTION.md), on every
//! mode (a part of `admin.rs`, sharing its launcher):
//! - `deleted_jobs_keep_their_record_in_every_mode` — with `--retain 1h
//!   --retain-bodies`, a job put, reserved and released by one connection, reserved,
//!   buried, kicked, reserved and deleted by another answers `/jobs/{id}` after its
//!   delete with `"state": "deleted"`, its events in order with the connections that
//!   made them (the ids `/clients` gives them) and its body, while the protocol answers
//!   `NOT_FOUND` as beanstalkd does; a keyed job's record is found by tube and key
//!   through `/retained`; after `kill -9` and a restart (`-b`: same directory; leader:
//!   a new leader; shared: a new instance) the records are still answered.
//! - `without_retention_nothing_is_kept` — the same job without the flag: `/jobs/{id}`
//!   is 404 after the delete, and a live job's JSON has no `history`.

use super::*;

/// The connection id the server gave `c` (from `/clients`, once it lists `c`).
fn conn_id(api: &Api, c: &Client) -> u64 {
    wait_entry(api, c, Option::is_some)
        .and_then(|e| e["id"].as_u64())
        .unwrap_or_else(|| panic!("{} is not in /clients", c.socket().local_addr().unwrap()))
}

/// A record's or a job's events as (event, conn).
fn events(job: &Value) -> Vec<(String, u64)> {
    job["history"]
        .as_array()
        .unwrap_or_else(|| panic!("no history in {job}"))
        .iter()
        .map(|e| {
            (
                e["event"].as_str().unwrap_or("?").to_string(),
                e["conn"].as_u64().unwrap_or(u64::MAX),
            )
        })
        .collect()
}

fn ev(pairs: &[(&str, u64)]) -> Vec<(String, u64)> {
    pairs.iter().map(|(e, c)| (e.to_string(), *c)).collect()
}

#[test]
fn deleted_jobs_keep_their_record_in_every_mode() {
    let _serial = serial();
    let flags = [
        "--admin-token",
        TOKEN,
        "--extensions",
        "on",
        "--retain",
        "1h",
        "--retain-bodies",
    ];
    for home in Home::all() {
        let (mut srv, api) = home.launch(&flags);
        let mut a = Client::connect(srv.addr, "a");
        let mut b = Client::connect(srv.addr, "b");
        let (ca, cb) = (conn_id(&api, &a), conn_id(&api, &b));
        a.use_tube("orders");
        let id = a.put(5, 0, 60, b"<img src=x onerror=alert(1)>");
        assert_eq!(a.cmd("watch orders").word(), "WATCHING");
        assert_eq!(a.cmd("reserve-with-timeout 0").word(), "RESERVED");
        a.expect(&format!("release {id} 5 0"), "RELEASED");
        assert_eq!(b.cmd(&format!("reserve-job {id}")).word(), "RESERVED");
        b.expect(&format!("bury {id} 5"), "BURIED");
        b.expect(&format!("kick-job {id}"), "KICKED");
        assert_eq!(b.cmd(&format!("reserve-job {id}")).word(), "RESERVED");
        let (s, live) = api.get(&format!("/jobs/{id}"));
        assert_eq!(s, 200, "{live}");
        let so_far = ev(&[
            ("put", 0),
            ("reserve", ca),
            ("release", ca),
            ("reserve", cb),
            ("bury", cb),
            ("kick", 0),
            ("reserve", cb),
        ]);
        assert_eq!(events(&live), so_far, "{}: {live}", home.name());
        let mut all = so_far;
        all.extend(ev(&[("delete", cb)]));
        b.expect(&format!("delete {id}"), "DELETED");
        b.expect(&format!("stats-job {id}"), "NOT_FOUND");
        b.expect(&format!("peek {id}"), "NOT_FOUND");
        b.use_tube("orders");
        let keyed = b.cmd("put 1 0 60 3 idp:order-1234\r\nabc");
        assert_eq!(keyed.word(), "INSERTED", "{}", home.name());
        let keyed_id: u64 = keyed
            .line
            .split_whitespace()
            .nth(1)
            .unwrap()
            .parse()
            .unwrap();
        b.expect(&format!("delete {keyed_id}"), "DELETED");

        let check = |api: &Api, when: &str| {
            let (s, rec) = api.get(&format!("/jobs/{id}"));
            assert_eq!(s, 200, "{} {when}: {rec}", home.name());
            assert_eq!(rec["state"], "deleted", "{rec}");
            assert_eq!(rec["tube"], "orders", "{rec}");
            assert_eq!(events(&rec), all, "{} {when}: {rec}", home.name());
            assert!(rec["deleted_at"].is_string(), "{rec}");
            assert_eq!(rec["body"], "<img src=x onerror=alert(1)>", "{rec}");
            let (s, found) = api.get("/retained?tube=orders&key=order-1234");
            assert_eq!(s, 200, "{found}");
            let ids: Vec<u64> = found["jobs"]
                .as_array()
                .unwrap_or_else(|| panic!("{found}"))
                .iter()
                .filter_map(|j| j["id"].as_u64())
                .collect();
            assert_eq!(ids, [keyed_id], "{} {when}: {found}", home.name());
            let (_, all) = api.get("/retained");
            let newest: Vec<u64> = all["jobs"]
                .as_array()
                .unwrap_or_else(|| panic!("{all}"))
                .iter()
                .filter_map(|j| j["id"].as_u64())
                .collect();
            assert_eq!(newest, [keyed_id, id], "{} {when}: {all}", home.name());
        };
        check(&api, "before the restart");
        if matches!(home, Home::Memory) {
            continue;
        }
        drop((a, b));
        signal_pid(srv.pid(), "KILL");
        assert!(
            srv.wait_exit(Duration::from_secs(5)).is_some(),
            "survived kill -9"
        );
        let (_srv2, api2) = home.launch(&flags);
        check(&api2, "after kill -9 and a restart");
        println!("{}: deleted jobs' records kept across kill -9", home.name());
    }
}

#[test]
fn without_retention_nothing_is_kept() {
    let _serial = serial();
    let (srv, api) = Home::Memory.launch(&["--admin-token", TOKEN]);
    let mut c = Client::connect(srv.addr, "c");
    let id = c.put(5, 0, 60, b"x");
    let (s, live) = api.get(&format!("/jobs/{id}"));
    assert_eq!(s, 200, "{live}");
    assert!(live.get("history").is_none(), "{live}");
    c.expect(&format!("delete {id}"), "DELETED");
    let (s, gone) = api.get(&format!("/jobs/{id}"));
    assert_eq!(s, 404, "{gone}");
}

//! Tube policies through the operator API and the protocol (docs/POLICIES.md), on every
//! mode (a part of `admin.rs`, sharing its launcher):
//! - `policies_bury_dead_letters_back_off_and_persist` — `PUT /policies/{tubes}` sets a
//!   dead letter rule and a backoff (401 without the token, 400 for a bad pattern or
//!   rule); a job released as often as the rule allows is buried: `stats-job` shows it
//!   buried with one bury more, in exactly the fields and order of a job its holder
//!   buried, and `/jobs/{id}` gives the reason; a release with delay 0 in the backoff
//!   tube is delayed by the rule's base, a tube without a rule is untouched; after
//!   `kill -9` and a restart (`-b`: same directory; leader: a new leader; shared: a new
//!   instance) the rules and the reason are there and still apply; `DELETE` removes a
//!   rule (404 the second time) and the tube behaves as beanstalkd again.
//! - `the_policies_file_is_read_at_start` — `--policies FILE` (TOML) gives its rules;
//!   a file with a bad rule stops the start, naming it.
//! - `a_change_reaches_every_shared_instance` — shared mode: a rule set through one
//!   instance is applied by another within seconds (figure printed), and its removal.

use super::*;

fn put_policy(api: &Api, tubes: &str, rule: Value) -> (u16, Value) {
    let auth = format!("Bearer {TOKEN}");
    let (s, v, _) = api.send(
        "PUT",
        &format!("/policies/{tubes}"),
        Some(rule.to_string()),
        &[
            ("authorization", &auth),
            ("content-type", "application/json"),
        ],
    );
    (s, v)
}

fn delete_policy(api: &Api, tubes: &str) -> u16 {
    let auth = format!("Bearer {TOKEN}");
    api.send(
        "DELETE",
        &format!("/policies/{tubes}"),
        None,
        &[("authorization", &auth)],
    )
    .0
}

/// Reserve job `id` (of `tube`) and release it with delay 0.
fn fail_once(c: &mut Client, tube: &str, id: u64) {
    assert_eq!(
        c.cmd(&format!("reserve-job {id}")).word(),
        "RESERVED",
        "reserve-job {id} of {tube}"
    );
    c.expect(&format!("release {id} 7 0"), "RELEASED");
}

fn keys_of(c: &mut Client, id: u64) -> Vec<String> {
    c.dict(&format!("stats-job {id}"))
        .into_iter()
        .map(|(k, _)| k)
        .collect()
}

#[test]
fn policies_bury_dead_letters_back_off_and_persist() {
    let _serial = serial();
    for home in Home::all() {
        let (mut srv, api) = home.launch(&["--admin-token", TOKEN]);
        let dead_letter = json!({"dead_letter": {"reserves": 2}});
        let backoff = json!({"backoff": {"base_ms": 30000, "factor": 2.0, "max_ms": 600000}});
        assert_eq!(put_policy(&api, "dl*", dead_letter.clone()).0, 200);
        let (s, rule) = put_policy(&api, "bo", backoff);
        assert_eq!((s, rule["tubes"].as_str()), (200, Some("bo")), "{rule}");
        let (s, e) = put_policy(&api, "a%20b", dead_letter.clone());
        assert_eq!(
            (s, e["error"]["code"].as_str()),
            (400, Some("bad_request")),
            "{e}"
        );
        let (s, e) = put_policy(&api, "x", json!({"dead_letter": {"reserves": 0}}));
        assert_eq!(s, 400, "{e}");
        let (s, _, _) = api.send(
            "PUT",
            "/policies/y",
            Some(dead_letter.to_string()),
            &[("content-type", "application/json")],
        );
        assert_eq!(s, 401, "a change needs the token");
        let (s, list) = api.get("/policies");
        assert_eq!(s, 200, "{list}");
        let tubes = support::policies::patterns(&list);
        assert_eq!(tubes, ["bo", "dl*"], "most specific first");
        assert_eq!(list["persisted"], !matches!(home, Home::Memory), "{list}");

        let mut c = Client::connect(srv.addr, "c");
        c.use_tube("dl-1");
        let dead = c.put(5, 0, 60, b"poison");
        fail_once(&mut c, "dl-1", dead);
        assert_eq!(
            stats_job(&mut c, dead)["state"],
            "ready",
            "one reserve of two"
        );
        fail_once(&mut c, "dl-1", dead);
        let sj = stats_job(&mut c, dead);
        assert_eq!(
            (
                sj["state"].as_str(),
                sj["buries"].as_str(),
                sj["pri"].as_str()
            ),
            ("buried", "1", "7"),
            "{}: the second failure buries it",
            home.name()
        );
        // Its holder's bury, for the fields `stats-job` shows of a buried job.
        c.use_tube("plain");
        let plain = c.put(5, 0, 60, b"plain");
        assert_eq!(c.cmd(&format!("reserve-job {plain}")).word(), "RESERVED");
        c.expect(&format!("bury {plain} 7"), "BURIED");
        assert_eq!(
            keys_of(&mut c, dead),
            keys_of(&mut c, plain),
            "stats-job unchanged"
        );
        let (s, job) = api.get(&format!("/jobs/{dead}"));
        assert_eq!(s, 200, "{job}");
        assert_eq!(
            job["dead_letter"],
            json!({"cause": "reserves", "count": 2, "limit": 2, "reason": "reserved 2 times (limit 2)"}),
            "{job}"
        );
        let (_, job) = api.get(&format!("/jobs/{plain}"));
        assert!(job.get("dead_letter").is_none(), "{job}");
        // Released over and over in a tube without a rule: ready every time.
        c.expect(&format!("kick-job {plain}"), "KICKED");
        for _ in 0..3 {
            fail_once(&mut c, "plain", plain);
        }
        assert_eq!(stats_job(&mut c, plain)["state"], "ready");
        // Backoff: a release with delay 0 waits the base.
        c.use_tube("bo");
        let slow = c.put(5, 0, 60, b"slow");
        fail_once(&mut c, "bo", slow);
        let sj = stats_job(&mut c, slow);
        assert_eq!(
            (sj["state"].as_str(), sj["delay"].as_str()),
            ("delayed", "30"),
            "{}: backoff's base",
            home.name()
        );

        let (srv, api, mut c) = if matches!(home, Home::Memory) {
            (srv, api, c)
        } else {
            drop(c);
            signal_pid(srv.pid(), "KILL");
            assert!(
                srv.wait_exit(Duration::from_secs(5)).is_some(),
                "survived kill -9"
            );
            let (srv2, api2) = home.launch(&["--admin-token", TOKEN]);
            let c2 = Client::connect(srv2.addr, "c2");
            (srv2, api2, c2)
        };
        let (_, list) = api.get("/policies");
        assert_eq!(list["policies"].as_array().map(Vec::len), Some(2), "{list}");
        let (_, job) = api.get(&format!("/jobs/{dead}"));
        assert_eq!(
            job["dead_letter"]["cause"],
            "reserves",
            "{}: {job}",
            home.name()
        );
        // A kick gives it two more reserves and clears the reason.
        c.expect(&format!("kick-job {dead}"), "KICKED");
        let (_, job) = api.get(&format!("/jobs/{dead}"));
        assert!(job.get("dead_letter").is_none(), "{job}");
        fail_once(&mut c, "dl-1", dead);
        assert_eq!(stats_job(&mut c, dead)["state"], "ready");
        fail_once(&mut c, "dl-1", dead);
        assert_eq!(stats_job(&mut c, dead)["state"], "buried");
        // The backoff's next step: base × 2 (the job was released once before).
        c.expect(&format!("kick-job {slow}"), "KICKED");
        fail_once(&mut c, "bo", slow);
        assert_eq!(stats_job(&mut c, slow)["delay"], "60", "{}", home.name());

        assert_eq!(delete_policy(&api, "bo"), 200);
        assert_eq!(delete_policy(&api, "bo"), 404);
        c.expect(&format!("kick-job {slow}"), "KICKED");
        fail_once(&mut c, "bo", slow);
        let sj = stats_job(&mut c, slow);
        assert_eq!(
            (sj["state"].as_str(), sj["delay"].as_str()),
            ("ready", "0"),
            "{}: no rule, no backoff",
            home.name()
        );
        println!("{}: policies applied and kept", home.name());
        drop(srv);
    }
}

#[test]
fn the_policies_file_is_read_at_start() {
    let _serial = serial();
    let dir = fresh_dir();
    let file = dir.join("policies.toml");
    std::fs::write(
        &file,
        "[[policy]]\ntubes = \"mail*\"\ndead_letter = { reserves = 3, timeouts = 1 }\n",
    )
    .unwrap();
    let (_srv, api) = Home::Memory.launch(&["--policies", file.to_str().unwrap()]);
    let (s, list) = api.get("/policies");
    assert_eq!(s, 200, "{list}");
    assert_eq!(
        list["policies"],
        json!([{"tubes": "mail*", "dead_letter": {"reserves": 3, "timeouts": 1}}]),
        "{list}"
    );
    std::fs::write(&file, "[[policy]]\ntubes = \"a b\"\n").unwrap();
    let out = std::process::Command::new(support::redstalk_path())
        .args([
            "--policies",
            file.to_str().unwrap(),
            "-l",
            "127.0.0.1",
            "-p",
            "0",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a bad file stops the start");
    assert!(err.contains("policies") && err.contains("a b"), "{err}");
}

/// Shared mode: a policy set through one instance applies on another within about a
/// second (each reads the Redis hash each second), and so does its removal.
#[test]
fn a_change_reaches_every_shared_instance() {
    let _serial = serial();
    let Some(redis) = private_redis(&[], "shared-mode policy tests") else {
        return;
    };
    let home = Home::Shared(redis);
    let (a, api_a) = home.launch(&["--admin-token", TOKEN]);
    let (b, api_b) = home.launch(&["--admin-token", TOKEN]);
    let rules = |api: &Api| {
        api.get("/policies").1["policies"]
            .as_array()
            .map_or(0, Vec::len)
    };
    let wait = |api: &Api, n: usize| {
        let start = Instant::now();
        while rules(api) != n {
            assert!(
                start.elapsed() < Duration::from_secs(15),
                "never saw {n} rules"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        start.elapsed()
    };
    assert_eq!(
        put_policy(&api_a, "fan*", json!({"dead_letter": {"reserves": 1}})).0,
        200
    );
    let took = wait(&api_b, 1);
    println!("shared: set through one instance, the other had it after {took:?}");
    let mut c = Client::connect(b.addr, "b");
    c.use_tube("fan-1");
    let id = c.put(1, 0, 60, b"x");
    fail_once(&mut c, "fan-1", id);
    assert_eq!(
        stats_job(&mut c, id)["state"],
        "buried",
        "the other instance applies it"
    );
    assert_eq!(delete_policy(&api_b, "fan*"), 200);
    let took = wait(&api_a, 0);
    println!("shared: removed through one instance, the other followed after {took:?}");
    let mut c = Client::connect(a.addr, "a");
    c.use_tube("fan-1");
    let id = c.put(1, 0, 60, b"y");
    fail_once(&mut c, "fan-1", id);
    assert_eq!(stats_job(&mut c, id)["state"], "ready");
}

//! The operator API (`/api/v1`, docs/API.md) against the real binary, on every mode
//! that serves it (memory, `-b DIR`, Redis leader and shared mode, each with a private
//! `redis-server`),
//! with a real HTTP client (ureq) beside a beanstalk client. Every wait is bounded.
//!
//! What the tests prove:
//! - `listing_order_is_the_order_jobs_are_taken` — a property over seeded random queues
//!   (priorities with ties, delays, buries in random order), listed page by page with
//!   random page sizes: the ready listing is the order `reserve` takes the jobs, the
//!   buried listing the order `kick 1` takes them, the delayed listing the order of their
//!   due times (time-left never decreases; `kick` takes them so).
//! - `edits_keep_id_and_counters_and_survive_kill_9` — move (ready, delayed, buried), pri,
//!   delay and bury answer the job with the same id and counters; a reserved job is
//!   refused (409); after `kill -9` and a restart (`-b`: same directory; leader: a new
//!   leader on the same Redis; shared: a new instance on the same Redis) every change is there (tube, state, pri, counters), the
//!   old tube lists nothing, and `reserve` on the new tube hands out the moved job.
//! - `bulk_dry_run_counts_what_the_real_run_changes` — a dry run's `matched` equals the
//!   real run's `changed`, with and without a body filter and a limit.
//! - `flush_route_deletes_the_states_named` — on every mode, `POST /tubes/{tube}/flush`
//!   deletes the states named (`{"states": ["buried"]}`), then everything (no states),
//!   in more than one step (2,500 jobs), and answers how many; a tube that does not
//!   exist flushes 0 and is not made.
//! - `a_job_is_found_and_deleted_by_its_key` — on every mode, a keyed job's JSON has
//!   its `key` (an unkeyed job's none), in `/jobs/{id}` and a listing;
//!   `/tubes/{tube}/keys/{key}` answers the job, `.../delay`, `.../kick` and
//!   `.../bury` (priority kept; `stats-job` agrees) change it (409 in a state that
//!   does not take the change), `DELETE` deletes it (401 without
//!   the token, 409 while reserved), then the key answers `{"id", "state": "deleted"}`
//!   inside its window; an unknown key is 404, a malformed one 400.
//! - `a_deep_page_costs_what_the_first_does` — page 20 of 20,000 tied jobs costs about
//!   what page 1 does (figures printed); a reserved job names its holder.
//! - `a_standby_forwards_the_api_to_the_leader` — leader mode: a listing and changes
//!   through a standby's HTTP port act on the leader, which decides access; a standby of
//!   a leader without HTTP, or whose published API address does not answer, answers
//!   503 `unavailable` with the reason.
//! - `stats_json_has_the_yaml_figures` — `/stats` and `/tubes/{tube}` have the keys and
//!   values of `stats` and `stats-tube`.
//! - `clients_lists_what_the_protocol_did` — on every mode, `/clients` (a read under
//!   `--admin-read-auth`: 401 without the token) shows two beanstalk clients by their
//!   address: one using and watching its tubes and holding a reserved job (with its
//!   time left), one blocked in `reserve-with-timeout` (since, until, tubes); once they
//!   disconnect they are gone.
//! - `every_error_is_the_documented_json_on_a_leader_and_a_standby` — memory mode, a
//!   leader and its standby (whose forwarder reads the body itself): `PUT /jobs/1` is
//!   405 `method_not_allowed` with `Allow` (401 without the token: the guard answers
//!   first), a 300 KiB body 413 `payload_too_large` while 200 KiB is taken, an unknown
//!   route 404, a bad parameter, path or JSON body 400 — each the API's JSON error.
//! - `refusals` — on every mode: no token / wrong token 401 (`WWW-Authenticate`), no
//!   token configured 401 for changes but reads served, read-only 403 `read_only`,
//!   cross-origin (`Origin`, `Sec-Fetch-Site`) 403 `forbidden`, `--admin-read-auth`
//!   reads 401 without the token; 404, 409 and 400 as the contract says.
//! - tube policies (`/policies`, dead letters, backoff, `--policies`): `admin_policies.rs`.
//! - retention (a deleted job's record in `/jobs/{id}` and `/retained`, every mode,
//!   across kill -9): `admin_retention.rs`; its answers' shape, `/retained`'s pages,
//!   `/metrics` and the CLI (memory mode): `admin_retention_api.rs`.

// A test reports failure by panicking: unwrap and expect are how it says so.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::client::Client;
use support::redis::{RedisServer, private_redis};
use support::rng::Rng;
use support::{ServerKind, ServerProc, TEST_LEASE_MS, fresh_dir, serial, signal_pid};

mod admin_policies;
mod admin_retention;
mod admin_retention_api;
mod admin_schedule_counts;
mod admin_schedules;

const TOKEN: &str = "t0k3n-for-tests";
const HTTP_TIMEOUT: Duration = Duration::from_secs(15);

/// Where a mode keeps its jobs across restarts.
enum Home {
    Memory,
    Binlog(PathBuf),
    Leader(RedisServer),
    /// Redis shared mode (a script per command).
    Shared(RedisServer),
}

impl Home {
    fn name(&self) -> &'static str {
        match self {
            Home::Memory => "memory",
            Home::Binlog(_) => "binlog",
            Home::Leader(_) => "leader",
            Home::Shared(_) => "shared",
        }
    }

    /// Every mode this run can serve (leader and shared only with redis-server).
    fn all() -> Vec<Home> {
        let mut homes = vec![Home::Memory, Home::Binlog(fresh_dir())];
        if let Some(r) = private_redis(&[], "leader-mode admin API tests") {
            homes.push(Home::Leader(r));
        }
        if let Some(r) = private_redis(&[], "shared-mode admin API tests") {
            homes.push(Home::Shared(r));
        }
        homes
    }

    /// A redstalk on this home with the API on a free port and `extra` flags (in
    /// leader mode, once it leads).
    fn launch(&self, extra: &[&str]) -> (ServerProc, Api) {
        self.launch_as(extra, "leader")
    }

    /// [`Home::launch`], waiting (in leader mode) until `/whoami` says `role`.
    fn launch_as(&self, extra: &[&str], role: &str) -> (ServerProc, Api) {
        for _ in 0..5 {
            let http: SocketAddr = ([127, 0, 0, 1], support::free_port()).into();
            let mut args = vec!["--http".to_string(), http.to_string()];
            args.extend(extra.iter().map(|s| s.to_string()));
            let started = match self {
                Home::Memory => ServerProc::start(ServerKind::Memory, &args).map(|s| s.unwrap()),
                Home::Binlog(dir) => {
                    args.extend(["-b".to_string(), dir.display().to_string()]);
                    ServerProc::start(ServerKind::Memory, &args).map(|s| s.unwrap())
                }
                Home::Leader(redis) => {
                    args.extend(["--redis-lease".to_string(), TEST_LEASE_MS.to_string()]);
                    ServerProc::start_on_redis_as(ServerKind::Leader, &redis.url(), "adm", &args)
                }
                Home::Shared(redis) => {
                    ServerProc::start_on_redis_as(ServerKind::Redis, &redis.url(), "adm", &args)
                }
            };
            match started {
                Ok(mut srv) => {
                    let log = srv.capture_stderr();
                    support::wait_served(srv.addr, Duration::from_secs(20), &log);
                    let api = Api { http };
                    let deadline = Instant::now() + Duration::from_secs(20);
                    while api.whoami().0 != 200 || !self.has_role(&api, role) {
                        assert!(Instant::now() < deadline, "API not served\n{}", log.tail());
                        std::thread::sleep(Duration::from_millis(50));
                    }
                    return (srv, api);
                }
                Err(e) => eprintln!("start {}: {e}; retrying", self.name()),
            }
        }
        panic!("could not start redstalk ({})", self.name());
    }

    /// Whether the instance has `role` (`any`: either leader or standby).
    fn has_role(&self, api: &Api, role: &str) -> bool {
        let now = api.whoami().1["role"].clone();
        !matches!(self, Home::Leader(_)) || now == role || (role == "any" && now.is_string())
    }
}

struct Api {
    http: SocketAddr,
}

/// The whole `/metrics` exposition.
pub(crate) fn metrics_text(api: &Api) -> String {
    agent()
        .get(&format!("http://{}/metrics", api.http))
        .call()
        .unwrap()
        .body_mut()
        .read_to_string()
        .unwrap()
}

/// The value of the `/metrics` sample whose line starts with `prefix`.
pub(crate) fn metric(api: &Api, prefix: &str) -> u64 {
    let text = metrics_text(api);
    text.lines()
        .find_map(|l| l.strip_prefix(prefix))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {prefix:?} in /metrics:\n{text}"))
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .timeout_global(Some(HTTP_TIMEOUT))
        .http_status_as_error(false)
        .build()
        .into()
}

type Reply = Result<ureq::http::Response<ureq::Body>, ureq::Error>;

/// Status, JSON body (`Null` when not JSON) and `WWW-Authenticate`.
fn answer(r: Reply) -> (u16, Value, String) {
    answer_with(r, "www-authenticate")
}

/// Status, JSON body (`Null` when not JSON) and the header `name`.
fn answer_with(r: Reply, name: &str) -> (u16, Value, String) {
    let mut r = r.unwrap();
    let status = r.status().as_u16();
    let header = r
        .headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let text = r.body_mut().read_to_string().unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::Null),
        header,
    )
}

impl Api {
    fn url(&self, path: &str) -> String {
        format!("http://{}/api/v1{path}", self.http)
    }

    /// `/whoami`, with the token (for a server whose reads need it).
    fn whoami(&self) -> (u16, Value) {
        let (s, v, _) = self.get_with("/whoami", &[("authorization", &format!("Bearer {TOKEN}"))]);
        (s, v)
    }

    fn get(&self, path: &str) -> (u16, Value) {
        let (s, v, _) = answer(agent().get(&self.url(path)).call());
        (s, v)
    }

    fn get_with(&self, path: &str, headers: &[(&str, &str)]) -> (u16, Value, String) {
        let mut req = agent().get(&self.url(path));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        answer(req.call())
    }

    /// A change with the token.
    fn post(&self, path: &str, body: Value) -> (u16, Value) {
        let (s, v, _) =
            self.post_with(path, body, &[("authorization", &format!("Bearer {TOKEN}"))]);
        (s, v)
    }

    fn post_with(&self, path: &str, body: Value, headers: &[(&str, &str)]) -> (u16, Value, String) {
        let mut req = agent()
            .post(&self.url(path))
            .header("content-type", "application/json");
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        answer(req.send(body.to_string()))
    }

    /// Any request: status, JSON body (`Null` when not JSON), `Allow`.
    fn send(
        &self,
        method: &str,
        path: &str,
        body: Option<String>,
        headers: &[(&str, &str)],
    ) -> (u16, Value, String) {
        let request = ureq::http::Request::builder()
            .method(method)
            .uri(self.url(path));
        let request = headers
            .iter()
            .fold(request, |r, (k, v)| r.header(*k, *v))
            .body(body.unwrap_or_default())
            .unwrap();
        answer_with(agent().run(request), "allow")
    }

    /// Every job of `tube` in `state`, page by page of `limit`.
    fn list_all(&self, tube: &str, state: &str, limit: impl FnMut() -> usize) -> Vec<Value> {
        let mut limit = limit;
        let mut out = Vec::new();
        let mut cursor = String::new();
        loop {
            let (s, v) = self.get(&format!(
                "/tubes/{tube}/jobs?state={state}&limit={}&cursor={cursor}",
                limit()
            ));
            assert_eq!(s, 200, "{v}");
            out.extend(v["jobs"].as_array().unwrap().iter().cloned());
            match v["next_cursor"].as_str() {
                Some(c) => cursor = c.to_string(),
                None => return out,
            }
        }
    }
}

fn ids(jobs: &[Value]) -> Vec<u64> {
    jobs.iter().map(|j| j["id"].as_u64().unwrap()).collect()
}

/// A random queue in tube `tube`: ready jobs with tied priorities, delayed jobs, and
/// buried jobs buried in random order. Returns how many of each.
fn random_queue(c: &mut Client, rng: &mut Rng, tube: &str) -> (usize, usize, usize) {
    c.use_tube(tube);
    c.watch_only(tube);
    let (mut ready, mut delayed, mut to_bury) = (0, 0, Vec::new());
    for _ in 0..rng.range(20, 60) {
        let pri = rng.below(5) as u32 * 100;
        match rng.below(4) {
            0 => {
                c.put(pri, rng.range(100, 200) as u32, 60, b"delayed");
                delayed += 1;
            }
            1 => to_bury.push(c.put(pri, 0, 60, b"to bury")),
            _ => {
                c.put(pri, 0, 60, b"ready");
                ready += 1;
            }
        }
    }
    while !to_bury.is_empty() {
        let id = to_bury.swap_remove(rng.index(to_bury.len()));
        assert_eq!(c.cmd(&format!("reserve-job {id}")).word(), "RESERVED");
        c.expect(&format!("bury {id} {}", rng.below(3) * 7), "BURIED");
        to_bury.retain(|&x| x != id);
    }
    let buried = c.stat_u64("current-jobs-buried") as usize;
    (ready, delayed, buried)
}

#[test]
fn listing_order_is_the_order_jobs_are_taken() {
    let _serial = serial();
    for home in Home::all() {
        let (srv, api) = home.launch(&["--admin-token", TOKEN]);
        for seed in 1..=3u64 {
            let mut rng = Rng::new(seed * 7919 + 1);
            let tube = format!("prop{seed}");
            let mut c = Client::connect(srv.addr, "c");
            let (ready, delayed, buried) = random_queue(&mut c, &mut rng, &tube);
            let mut page = Rng::new(seed);
            let listed_ready = ids(&api.list_all(&tube, "ready", || page.range(1, 8) as usize));
            let listed_buried = ids(&api.list_all(&tube, "buried", || page.range(1, 8) as usize));
            let delayed_jobs = api.list_all(&tube, "delayed", || page.range(1, 8) as usize);
            assert_eq!(
                (listed_ready.len(), listed_buried.len(), delayed_jobs.len()),
                (ready, buried, delayed)
            );
            let lefts: Vec<u64> = delayed_jobs
                .iter()
                .map(|j| j["time-left"].as_u64().unwrap())
                .collect();
            assert!(
                lefts.windows(2).all(|w| w[0] <= w[1]),
                "delayed by due time: {lefts:?}"
            );
            // Ready: the order reserve takes them (each kept reserved).
            let mut reserved = Vec::new();
            while let Some((id, _)) = c.reserve_timeout(0) {
                reserved.push(id);
            }
            assert_eq!(
                listed_ready,
                reserved,
                "{}: ready listing vs reserve",
                home.name()
            );
            let held = ids(&api.list_all(&tube, "reserved", || 50));
            assert_eq!(held.len(), reserved.len());
            // Buried, then delayed: the order kick takes them.
            let mut kicked = Vec::new();
            for _ in 0..buried + delayed {
                c.expect("kick 1", "KICKED 1");
                let (id, _) = c.reserve_timeout(0).expect("the kicked job");
                kicked.push(id);
            }
            let mut want = listed_buried.clone();
            want.extend(ids(&delayed_jobs));
            assert_eq!(
                kicked,
                want,
                "{}: buried+delayed listing vs kick",
                home.name()
            );
            println!(
                "{} seed {seed}: {ready} ready, {delayed} delayed, {buried} buried listed in take order",
                home.name()
            );
        }
        drop(srv);
    }
}

/// Page 20 of a 20,000-job tube whose jobs all share one priority (the worst case for
/// finding a cursor's place) costs about what page 1 costs; a reserved job names its
/// holder.
#[test]
fn a_deep_page_costs_what_the_first_does() {
    let _serial = serial();
    const JOBS: usize = 20_000;
    for home in Home::all() {
        let (srv, api) = home.launch(&["--admin-token", TOKEN]);
        let mut c = Client::connect(srv.addr, "c");
        c.use_tube("deep");
        c.watch_only("deep");
        for _ in 0..JOBS / 500 {
            for _ in 0..500 {
                c.send_put(1024, 0, 60, b"same priority");
            }
            for _ in 0..500 {
                assert_eq!(c.reply().word(), "INSERTED");
            }
        }
        // Every page's cursor, then page 1 and the last page timed three times each
        // (the fastest of each counts: a loaded machine slows single requests, not the
        // work a page does).
        let (mut cursor, mut cursors) = (String::new(), Vec::new());
        for _ in 0..JOBS / 1000 {
            cursors.push(cursor.clone());
            let (s, v) = api.get(&format!(
                "/tubes/deep/jobs?state=ready&limit=1000&cursor={cursor}"
            ));
            assert_eq!((s, v["jobs"].as_array().map(Vec::len)), (200, Some(1000)));
            cursor = v["next_cursor"].as_str().unwrap_or_default().to_string();
        }
        assert!(cursor.is_empty(), "the last page says there is no more");
        let fastest = |cursor: &str| {
            (0..3)
                .map(|_| {
                    let t = Instant::now();
                    let (s, _) = api.get(&format!(
                        "/tubes/deep/jobs?state=ready&limit=1000&cursor={cursor}"
                    ));
                    assert_eq!(s, 200);
                    t.elapsed()
                })
                .min()
                .unwrap()
        };
        let (first, deep) = (fastest(&cursors[0]), fastest(&cursors[cursors.len() - 1]));
        println!(
            "{}: page 1 of {JOBS} jobs {first:?}, page {} {deep:?} (fastest of 3)",
            home.name(),
            cursors.len()
        );
        // Scanning from the start would make page 20 cost about 20 pages.
        assert!(
            deep < first * 4 + Duration::from_millis(200),
            "{}: page 1 {first:?}, deep page {deep:?}",
            home.name()
        );
        let (id, _) = c.reserve_timeout(0).expect("a job");
        let (s, v) = api.get("/tubes/deep/jobs?state=reserved");
        let held = &v["jobs"][0];
        assert_eq!((s, held["id"].as_u64()), (200, Some(id)), "{v}");
        assert!(
            held["holder"]["conn"].as_u64().is_some() && held["holder"]["instance"].is_string(),
            "{}: holder {held}",
            home.name()
        );
        drop(srv);
    }
}

/// A standby forwards `/api/v1` to the leader's HTTP listener (published in Redis with
/// the lease): a listing and a change through the standby's port act on the leader,
/// the leader decides access; a standby whose leader serves no HTTP answers 503.
#[test]
fn a_standby_forwards_the_api_to_the_leader() {
    let _serial = serial();
    let Some(redis) = private_redis(&[], "standby API forwarding") else {
        return;
    };
    let home = Home::Leader(redis);
    let (leader, _leader_api) = home.launch(&["--admin-token", TOKEN]);
    let (_standby, api) = home.launch_as(&["--admin-token", TOKEN], "standby");
    let mut c = Client::connect(leader.addr, "c");
    c.use_tube("fwd");
    let ids: Vec<u64> = (0..5).map(|i| c.put(100 + i, 0, 60, b"fwd")).collect();
    let t = Instant::now();
    let listed = api.list_all("fwd", "ready", || 2);
    println!(
        "standby: {} jobs listed through it in pages of 2 in {:?}",
        listed.len(),
        t.elapsed()
    );
    assert_eq!(
        self::ids(&listed),
        ids,
        "the leader's jobs, through the standby"
    );
    let (s, j) = api.post(&format!("/jobs/{}/pri", ids[4]), json!({"pri": 1}));
    assert_eq!((s, j["pri"].as_u64()), (200, Some(1)), "{j}");
    assert_eq!(
        stats_job(&mut c, ids[4])["pri"],
        "1",
        "changed on the leader"
    );
    let (s, j) = api.post(&format!("/jobs/{}/move", ids[0]), json!({"tube": "fwd2"}));
    assert_eq!((s, j["tube"].as_str()), (200, Some("fwd2")), "{j}");
    assert_eq!(stats_job(&mut c, ids[0])["tube"], "fwd2");
    // The leader decides access: no token, 401 from it.
    let (s, v, www) = api.post_with(&format!("/jobs/{}/pri", ids[1]), json!({"pri": 2}), &[]);
    assert_eq!(
        (s, v["error"]["code"].as_str(), www.as_str()),
        (401, Some("unauthorized"), "Bearer")
    );
    assert_eq!(api.get("/jobs/999999").0, 404);
    assert_eq!(
        api.whoami().1["role"],
        "standby",
        "whoami is the standby's own"
    );
    drop(c);
    drop(_standby);
    drop(leader);

    // A leader without an HTTP listener publishes no API address; one whose published
    // address does not answer cannot be reached. Either way: 503 with the reason.
    let Home::Leader(redis) = &home else {
        unreachable!()
    };
    let closed = support::ClosedPort::new();
    let dead = closed.addr.to_string();
    for (flags, reason) in [
        (vec![], "publishes no API address"),
        (vec!["--http-advertise", dead.as_str()], "cannot connect"),
    ] {
        let mut args = vec!["--redis-lease".to_string(), TEST_LEASE_MS.to_string()];
        args.extend(flags.iter().map(|f| f.to_string()));
        let bare =
            ServerProc::start_on_redis_as(ServerKind::Leader, &redis.url(), "adm", &args).unwrap();
        // The standby is started only once the bare leader holds the lease: started
        // earlier, it could win the lease itself when the killed leader's lapses.
        let took = support::lease::wait_for_holder(
            &mut support::namespace::redis_conn(redis),
            "adm",
            &bare.addr.to_string(),
            Duration::from_secs(60),
        );
        println!("bare leader {flags:?} holds the lease after {took:?}");
        let msg = standby_refusal(&home, reason);
        println!("standby of a leader {flags:?}: 503 {msg}");
        drop(bare);
    }
}

/// The 503 message of a new standby's `/tubes` once it says `reason`.
fn standby_refusal(home: &Home, reason: &str) -> String {
    let (_srv, api) = home.launch_as(&["--admin-token", TOKEN], "standby");
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        let (s, v) = api.get("/tubes");
        let msg = v["error"]["message"].as_str().unwrap_or_default();
        if s == 503 && msg.contains(reason) {
            assert_eq!(v["error"]["code"], "unavailable");
            return msg.to_string();
        }
        assert!(
            Instant::now() < deadline,
            "no 503 saying {reason:?} within 40 s; last {s} {v}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `/stats` and `/tubes/{tube}` carry exactly the keys of `stats` and `stats-tube`,
/// with the same values (numbers as numbers, `draining` a boolean).
#[test]
fn stats_json_has_the_yaml_figures() {
    let _serial = serial();
    for home in Home::all() {
        let (srv, api) = home.launch(&["--admin-token", TOKEN]);
        let mut c = Client::connect(srv.addr, "c");
        c.use_tube("figs");
        c.put(1, 0, 60, b"x");
        c.put(2000, 30, 60, b"y");
        for (yaml_cmd, path) in [("stats", "/stats"), ("stats-tube figs", "/tubes/figs")] {
            let yaml: std::collections::BTreeMap<String, String> =
                c.dict(yaml_cmd).into_iter().collect();
            let (s, v) = api.get(path);
            assert_eq!(s, 200, "{v}");
            let json = v.as_object().unwrap();
            let keys = |m: Vec<&String>| {
                let mut k: Vec<String> = m.into_iter().cloned().collect();
                k.sort();
                k
            };
            assert_eq!(
                keys(json.keys().collect()),
                keys(yaml.keys().collect()),
                "{path}"
            );
            for (k, want) in &yaml {
                // Figures that move between the two reads.
                if k.starts_with("cmd-")
                    || k.starts_with("rusage")
                    || k.contains("connections")
                    || k == "uptime"
                {
                    continue;
                }
                let got = match &json[k] {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                assert_eq!(&got, want.trim_matches('"'), "{} {path} {k}", home.name());
            }
            assert!(json.values().filter(|v| v.is_number()).count() >= 10);
        }
        assert!(api.get("/stats").1["draining"].is_boolean());
        println!(
            "{}: /stats and /tubes/figs match stats and stats-tube",
            home.name()
        );
        drop(srv);
    }
}

fn stats_job(c: &mut Client, id: u64) -> std::collections::HashMap<String, String> {
    c.dict(&format!("stats-job {id}")).into_iter().collect()
}

#[test]
fn edits_keep_id_and_counters_and_survive_kill_9() {
    let _serial = serial();
    for home in Home::all() {
        let (mut srv, api) = home.launch(&["--admin-token", TOKEN]);
        let mut c = Client::connect(srv.addr, "c");
        c.use_tube("src");
        c.watch_only("src");
        let a = c.put(50, 0, 60, b"moved ready");
        // Reserved and released once: counters to keep.
        assert_eq!(c.cmd(&format!("reserve-job {a}")).word(), "RESERVED");
        c.expect(&format!("release {a} 50 0"), "RELEASED");
        let b = c.put(60, 0, 60, b"repriced");
        let d = c.put(70, 0, 60, b"redelayed");
        let e = c.put(80, 0, 60, b"buried in place");
        let f = c.put(90, 300, 60, b"moved delayed");
        let g = c.put(95, 0, 60, b"moved buried");
        assert_eq!(c.cmd(&format!("reserve-job {g}")).word(), "RESERVED");
        c.expect(&format!("bury {g} 95"), "BURIED");
        let h = c.put(99, 0, 60, b"held");
        assert_eq!(c.cmd(&format!("reserve-job {h}")).word(), "RESERVED");

        let (s, j) = api.post(&format!("/jobs/{a}/move"), json!({"tube": "dst"}));
        assert_eq!(s, 200, "{j}");
        assert_eq!(
            (j["id"].as_u64(), j["tube"].as_str(), j["pri"].as_u64()),
            (Some(a), Some("dst"), Some(50))
        );
        assert_eq!(
            (j["reserves"].as_u64(), j["releases"].as_u64()),
            (Some(1), Some(1))
        );
        let (s, j) = api.post(&format!("/jobs/{b}/pri"), json!({"pri": 3}));
        assert_eq!((s, j["pri"].as_u64()), (200, Some(3)));
        let (s, j) = api.post(&format!("/jobs/{d}/delay"), json!({"delay": 500}));
        assert_eq!(
            (s, j["state"].as_str(), j["delay"].as_u64()),
            (200, Some("delayed"), Some(500))
        );
        let (s, j) = api.post(&format!("/jobs/{e}/bury"), json!({}));
        assert_eq!(
            (s, j["state"].as_str(), j["buries"].as_u64()),
            (200, Some("buried"), Some(1))
        );
        let (s, j) = api.post(&format!("/jobs/{f}/move"), json!({"tube": "dst"}));
        let left = j["time-left"].as_u64().unwrap();
        assert_eq!((s, j["state"].as_str()), (200, Some("delayed")));
        assert!((290..=300).contains(&left), "remaining delay kept: {left}");
        let (s, j) = api.post(&format!("/jobs/{g}/move"), json!({"tube": "dst"}));
        assert_eq!(
            (s, j["state"].as_str(), j["buries"].as_u64()),
            (200, Some("buried"), Some(1))
        );
        let (s, j) = api.post(&format!("/jobs/{h}/move"), json!({"tube": "dst"}));
        assert_eq!(
            (s, j["error"]["code"].as_str()),
            (409, Some("conflict")),
            "{j}"
        );

        if matches!(home, Home::Memory) {
            drop(srv);
            continue;
        }
        drop(c);
        signal_pid(srv.pid(), "KILL");
        assert!(
            srv.wait_exit(Duration::from_secs(5)).is_some(),
            "survived kill -9"
        );
        let (srv2, api2) = home.launch(&["--admin-token", TOKEN]);
        let mut c = Client::connect(srv2.addr, "c2");
        let sj = stats_job(&mut c, a);
        assert_eq!(
            (
                sj["tube"].as_str(),
                sj["state"].as_str(),
                sj["pri"].as_str(),
                sj["reserves"].as_str(),
                sj["releases"].as_str()
            ),
            ("dst", "ready", "50", "1", "1"),
            "{}: moved job after kill -9",
            home.name()
        );
        assert_eq!(stats_job(&mut c, b)["pri"], "3");
        let sj = stats_job(&mut c, d);
        assert_eq!(
            (sj["state"].as_str(), sj["delay"].as_str()),
            ("delayed", "500")
        );
        let sj = stats_job(&mut c, e);
        assert_eq!(
            (sj["state"].as_str(), sj["buries"].as_str()),
            ("buried", "1")
        );
        let sj = stats_job(&mut c, f);
        assert_eq!(
            (sj["tube"].as_str(), sj["state"].as_str()),
            ("dst", "delayed")
        );
        assert!(sj["time-left"].parse::<u64>().unwrap() > 250);
        let sj = stats_job(&mut c, g);
        assert_eq!(
            (sj["tube"].as_str(), sj["state"].as_str()),
            ("dst", "buried")
        );
        let src_ready = ids(&api2.list_all("src", "ready", || 100));
        assert!(
            !src_ready.contains(&a),
            "{}: the old tube still lists it",
            home.name()
        );
        assert_eq!(ids(&api2.list_all("dst", "buried", || 100)), vec![g]);
        c.watch_only("dst");
        let (id, body) = c.reserve_timeout(1).expect("the moved job");
        assert_eq!((id, body.as_slice()), (a, b"moved ready".as_slice()));
        println!("{}: move/pri/delay/bury survived kill -9", home.name());
    }
}

#[test]
fn bulk_dry_run_counts_what_the_real_run_changes() {
    let _serial = serial();
    for home in Home::all() {
        let (srv, api) = home.launch(&["--admin-token", TOKEN]);
        let mut c = Client::connect(srv.addr, "c");
        c.use_tube("bulk");
        for i in 0..60 {
            let body: &[u8] = if i % 3 == 0 {
                b"order x-match"
            } else {
                b"order"
            };
            c.put(10, 0, 60, body);
        }
        let filter = |contains: Option<&str>, limit: u64| {
            let mut f = json!({"tube": "bulk", "state": "ready", "limit": limit});
            if let Some(s) = contains {
                f["contains"] = json!(s);
            }
            f
        };
        for (contains, limit, to) in [(Some("x-match"), 1000, "matched"), (None, 7, "seven")] {
            let req = |dry: bool| json!({"action": "move", "filter": filter(contains, limit), "args": {"tube": to}, "dry_run": dry});
            let (s, dry) = api.post("/bulk", req(true));
            assert_eq!(s, 200, "{dry}");
            assert_eq!(dry["changed"], 0);
            let (s, real) = api.post("/bulk", req(false));
            assert_eq!(s, 200, "{real}");
            assert_eq!(
                dry["matched"],
                real["changed"],
                "{}: dry {dry} real {real}",
                home.name()
            );
            let moved = api.list_all(to, "ready", || 1000).len() as u64;
            assert_eq!(Some(moved), real["changed"].as_u64());
            println!(
                "{}: bulk {contains:?} limit {limit}: dry run {dry}, real {real}",
                home.name()
            );
        }
        assert_eq!(api.list_all("matched", "ready", || 1000).len(), 20);
        assert_eq!(api.list_all("seven", "ready", || 1000).len(), 7);
        drop(srv);
    }
}

#[test]
fn flush_route_deletes_the_states_named() {
    let _serial = serial();
    for home in Home::all() {
        let (srv, api) = home.launch(&["--admin-token", TOKEN]);
        let mut c = Client::connect(srv.addr, "c");
        c.use_tube("fl");
        c.expect("watch fl", "WATCHING 2");
        for _ in 0..2_500 {
            c.put(10, 0, 60, b"x");
        }
        let (id, _) = c.reserve_timeout(0).expect("a job");
        c.expect(&format!("bury {id} 0"), "BURIED");
        let (s, done) = api.post("/tubes/fl/flush", json!({"states": ["buried"]}));
        assert_eq!((s, done["flushed"].as_u64()), (200, Some(1)), "{done}");
        let (s, done) = api.post("/tubes/fl/flush", json!({}));
        assert_eq!((s, done["flushed"].as_u64()), (200, Some(2_499)), "{done}");
        assert!(api.list_all("fl", "ready", || 1000).is_empty());
        let (s, done) = api.post("/tubes/nothing/flush", json!({"states": ["ready"]}));
        assert_eq!((s, done["flushed"].as_u64()), (200, Some(0)), "{done}");
        assert_eq!(api.get("/tubes/nothing").0, 404, "not made");
        println!("{}: flush route ok", home.name());
        drop(srv);
    }
}

#[test]
fn a_job_is_found_and_deleted_by_its_key() {
    let _serial = serial();
    for home in Home::all() {
        let (srv, api) = home.launch(&["--admin-token", TOKEN]);
        let mut c = Client::connect(srv.addr, "c");
        c.use_tube("ky");
        let reply = c.try_call(b"put 5 0 60 1 idp:order-1:600\r\nx\r\n", HTTP_TIMEOUT);
        let keyed = reply.unwrap().id().expect("INSERTED");
        let plain = c.put(5, 0, 60, b"y");
        let (s, job) = api.get(&format!("/jobs/{keyed}"));
        assert_eq!((s, job["key"].as_str()), (200, Some("order-1")), "{job}");
        let (_, job) = api.get(&format!("/jobs/{plain}"));
        assert!(job.get("key").is_none(), "an unkeyed job has no key: {job}");
        let listed = api.list_all("ky", "ready", || 10);
        assert_eq!(listed[0]["key"].as_str(), Some("order-1"), "{listed:?}");
        let (s, found) = api.get("/tubes/ky/keys/order-1");
        assert_eq!((s, found["id"].as_u64()), (200, Some(keyed)), "{found}");
        assert_eq!(found["state"], "ready", "{found}");
        // Kick and re-delay by key, refused (409) in a state that does not take them.
        let (s, e) = api.post("/tubes/ky/keys/order-1/kick", json!({}));
        assert_eq!(
            (s, e["error"]["code"].as_str()),
            (409, Some("conflict")),
            "{e}"
        );
        let (s, job) = api.post("/tubes/ky/keys/order-1/delay", json!({"delay": 100}));
        assert_eq!((s, job["state"].as_str()), (200, Some("delayed")), "{job}");
        assert_eq!(job["key"], "order-1", "{job}");
        let (s, job) = api.post("/tubes/ky/keys/order-1/kick", json!({}));
        assert_eq!(
            (s, job["state"].as_str(), job["kicks"].as_u64()),
            (200, Some("ready"), Some(1)),
            "{job}"
        );
        let (s, e) = api.post("/tubes/ky/keys/nothing/kick", json!({}));
        assert_eq!(s, 404, "{e}");
        // Bury by key keeps the priority; a buried job takes no second bury.
        let (s, job) = api.post("/tubes/ky/keys/order-1/bury", json!({}));
        assert_eq!(
            (s, job["state"].as_str(), job["buries"].as_u64()),
            (200, Some("buried"), Some(1)),
            "{job}"
        );
        assert_eq!(job["pri"].as_u64(), Some(5), "{job}");
        let seen = stats_job(&mut c, keyed);
        assert_eq!(
            (seen["state"].as_str(), seen["buries"].as_str()),
            ("buried", "1")
        );
        let (s, e) = api.post("/tubes/ky/keys/order-1/bury", json!({}));
        assert_eq!(
            (s, e["error"]["code"].as_str()),
            (409, Some("conflict")),
            "{e}"
        );
        let (s, job) = api.post("/tubes/ky/keys/order-1/kick", json!({}));
        assert_eq!((s, job["state"].as_str()), (200, Some("ready")), "{job}");
        let auth = format!("Bearer {TOKEN}");
        let del =
            |headers: &[(&str, &str)]| api.send("DELETE", "/tubes/ky/keys/order-1", None, headers);
        assert_eq!(del(&[]).0, 401, "a change needs the token");
        // A reserved job is its holder's (409), as `DELETE /jobs/{id}` says.
        c.watch_only("ky");
        assert_eq!(c.reserve_timeout(0).map(|(id, _)| id), Some(keyed));
        let (s, e, _) = del(&[("authorization", &auth)]);
        assert_eq!(
            (s, e["error"]["code"].as_str()),
            (409, Some("conflict")),
            "{e}"
        );
        c.expect(&format!("release {keyed} 5 0"), "RELEASED");
        let (s, done, _) = del(&[("authorization", &auth)]);
        assert_eq!((s, done["deleted"].as_u64()), (200, Some(keyed)), "{done}");
        // Inside its window the key names the deleted job, as `find-key` does.
        let (s, window) = api.get("/tubes/ky/keys/order-1");
        assert_eq!(window, json!({"id": keyed, "state": "deleted"}), "{s}");
        c.expect("find-key order-1", &format!("FOUND_KEY {keyed} DELETED"));
        let (s, e, _) = del(&[("authorization", &auth)]);
        assert_eq!(
            (s, e["error"]["code"].as_str()),
            (404, Some("not_found")),
            "{e}"
        );
        let (s, e) = api.get("/tubes/ky/keys/nothing");
        assert_eq!(
            (s, e["error"]["code"].as_str()),
            (404, Some("not_found")),
            "{e}"
        );
        let (s, e) = api.get("/tubes/ky/keys/-bad");
        assert_eq!(
            (s, e["error"]["code"].as_str()),
            (400, Some("bad_request")),
            "{e}"
        );
        println!("{}: by key ok", home.name());
        drop(srv);
    }
}

/// The API's errors, each asked of `api` (a server with [`TOKEN`] and `-z` above 200
/// KiB), as `name` answers them: all JSON, with the code and status docs/API.md gives.
fn errors_are_json(name: &str, api: &Api) {
    let auth = format!("Bearer {TOKEN}");
    let with_token = [("authorization", auth.as_str())];
    let code = |v: &Value| {
        v["error"]["code"]
            .as_str()
            .unwrap_or("(not JSON)")
            .to_string()
    };
    let (s, v, allow) = api.send("PUT", "/jobs/1", None, &with_token);
    println!("{name}: PUT /jobs/1: {s} {v} (Allow: {allow})");
    assert_eq!(
        (s, code(&v).as_str()),
        (405, "method_not_allowed"),
        "{name}"
    );
    assert!(
        allow.contains("GET") && allow.contains("DELETE"),
        "{name}: Allow {allow:?}"
    );
    let (s, v, _) = api.send("PUT", "/jobs/1", None, &[]);
    assert_eq!((s, code(&v).as_str()), (401, "unauthorized"), "{name}: {v}");

    let body = |kib: usize| Some(json!({"body": "x".repeat(kib * 1024)}).to_string());
    let (s, v, _) = api.send("POST", "/tubes/big/jobs", body(300), &with_token);
    println!("{name}: a 300 KiB body: {s} {v}");
    assert_eq!((s, code(&v).as_str()), (413, "payload_too_large"), "{name}");
    let (s, v, _) = api.send("POST", "/tubes/big/jobs", body(200), &with_token);
    assert_eq!(s, 201, "{name}: a 200 KiB body is taken: {v}");

    for (method, path, body, want) in [
        ("GET", "/nope", None, (404, "not_found")),
        ("GET", "/tubes?limit=0", None, (400, "bad_request")),
        (
            "GET",
            "/tubes/big/jobs?state=gone",
            None,
            (400, "bad_request"),
        ),
        ("GET", "/jobs/seven", None, (400, "bad_request")),
        (
            "GET",
            "/tubes/big/jobs?cursor=bm90LWEta2V5",
            None,
            (400, "bad_request"),
        ),
        (
            "POST",
            "/jobs/1/pri",
            Some("{".to_string()),
            (400, "bad_request"),
        ),
        (
            "POST",
            "/jobs/1/pri",
            Some("{}".to_string()),
            (400, "bad_request"),
        ),
        ("GET", "/jobs/999999", None, (404, "not_found")),
    ] {
        let (s, v, _) = api.send(method, path, body, &with_token);
        assert_eq!((s, code(&v).as_str()), want, "{name}: {method} {path}: {v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "{name}: {v}"
        );
    }
}

#[test]
fn every_error_is_the_documented_json_on_a_leader_and_a_standby() {
    let _serial = serial();
    let flags = ["--admin-token", TOKEN, "-z", "300000"];
    let (memory, api) = Home::Memory.launch(&flags);
    errors_are_json("memory", &api);
    drop(memory);
    let Some(redis) = private_redis(&[], "API errors on a leader and a standby") else {
        return;
    };
    let home = Home::Leader(redis);
    let (_leader, leader_api) = home.launch(&flags);
    let (_standby, standby_api) = home.launch_as(&flags, "standby");
    errors_are_json("leader", &leader_api);
    errors_are_json("standby", &standby_api);
}

#[test]
fn refusals() {
    let _serial = serial();
    for home in Home::all() {
        let (srv, api) = home.launch(&["--admin-token", TOKEN]);
        let mut c = Client::connect(srv.addr, "c");
        let id = c.put(1, 0, 60, b"x");
        let path = format!("/jobs/{id}/pri");
        let (s, v, www) = api.post_with(&path, json!({"pri": 2}), &[]);
        assert_eq!(
            (s, v["error"]["code"].as_str(), www.as_str()),
            (401, Some("unauthorized"), "Bearer")
        );
        let (s, _, _) = api.post_with(
            &path,
            json!({"pri": 2}),
            &[("authorization", "Bearer nope")],
        );
        assert_eq!(s, 401);
        let auth = format!("Bearer {TOKEN}");
        for origin in [
            ("origin", "http://evil.example"),
            ("sec-fetch-site", "cross-site"),
        ] {
            let (s, v, _) = api.post_with(
                &path,
                json!({"pri": 2}),
                &[("authorization", &auth), origin],
            );
            assert_eq!(
                (s, v["error"]["code"].as_str()),
                (403, Some("forbidden")),
                "{origin:?}"
            );
        }
        let same = format!("http://{}", api.http);
        let (s, _, _) = api.post_with(
            &path,
            json!({"pri": 2}),
            &[("authorization", &auth), ("origin", &same)],
        );
        assert_eq!(s, 200, "same origin is served");
        assert_eq!(api.get("/jobs/999999").0, 404);
        assert_eq!(api.get("/tubes/default/jobs?limit=1001").0, 400);
        c.expect(&format!("reserve-job {id}"), &format!("RESERVED {id} 1"));
        let (s, _) = api.post(&format!("/jobs/{id}/move"), json!({"tube": "x"}));
        assert_eq!(s, 409);
        drop(c);
        drop(srv);

        let (srv, api) = home.launch(&[]);
        let (s, v, _) = api.post_with(
            "/tubes/t/jobs",
            json!({"body": "x"}),
            &[("authorization", "Bearer anything")],
        );
        assert_eq!(s, 401, "no token configured: {v}");
        assert_eq!(api.get("/whoami").1["changes_allowed"], false);
        assert_eq!(api.get("/tubes").0, 200, "reads are served");
        drop(srv);

        let (srv, api) = home.launch(&["--admin-token", TOKEN, "--admin-read-only"]);
        let (s, v) = api.post("/tubes/t/jobs", json!({"body": "x"}));
        assert_eq!((s, v["error"]["code"].as_str()), (403, Some("read_only")));
        drop(srv);

        let (srv, api) = home.launch(&["--admin-token", TOKEN, "--admin-read-auth"]);
        assert_eq!(api.get("/tubes").0, 401);
        assert_eq!(api.get_with("/tubes", &[("authorization", &auth)]).0, 200);
        drop(srv);
        println!("{}: refusals as the contract says", home.name());
    }
}

/// The `/clients` entry of the connection whose local address is `c`'s, if listed.
fn client_entry(api: &Api, c: &Client) -> Option<Value> {
    let me = c.socket().local_addr().unwrap().to_string();
    let auth = format!("Bearer {TOKEN}");
    let (s, v, _) = api.get_with("/clients?limit=1000", &[("authorization", &auth)]);
    assert_eq!(s, 200, "{v}");
    v["clients"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["peer"].as_str() == Some(&me))
        .cloned()
}

/// Wait (bounded) until `c`'s entry satisfies `ok`; the entry (`None`: gone).
fn wait_entry(api: &Api, c: &Client, ok: impl Fn(&Option<Value>) -> bool) -> Option<Value> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let e = client_entry(api, c);
        if ok(&e) {
            return e;
        }
        assert!(Instant::now() < deadline, "clients listing: {e:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn clients_lists_what_the_protocol_did() {
    let _serial = serial();
    for home in Home::all() {
        let (srv, api) = home.launch(&["--admin-token", TOKEN, "--admin-read-auth"]);
        assert_eq!(
            api.get("/clients").0,
            401,
            "{}: a read under read auth",
            home.name()
        );
        let mut a = Client::connect(srv.addr, "a");
        a.use_tube("cl-jobs");
        a.watch_only("cl-jobs");
        a.watch("cl-more");
        let id = a.put(0, 0, 120, b"held");
        let (got, _) = a.reserve();
        assert_eq!(got, id);
        let mut b = Client::connect(srv.addr, "b");
        b.watch("cl-wait");
        b.send_line("reserve-with-timeout 90");
        let eb = wait_entry(&api, &b, |e| {
            e.as_ref().is_some_and(|e| e["blocked"].is_object())
        })
        .unwrap();
        let ea = client_entry(&api, &a).expect("a is listed");
        println!("{}: a {ea}\n{}: b {eb}", home.name(), home.name());
        assert_eq!(ea["using"], "cl-jobs");
        assert_eq!(ea["watching"], json!(["cl-jobs", "cl-more"]));
        assert_eq!(ea["watching_count"], 2);
        assert_eq!(
            (ea["producer"].as_bool(), ea["worker"].as_bool()),
            (Some(true), Some(true))
        );
        assert_eq!(ea["held_count"], 1, "{}: {ea}", home.name());
        assert_eq!(ea["held"][0]["id"].as_u64(), Some(id));
        assert_eq!(ea["held"][0]["tube"], "cl-jobs");
        let left = ea["held"][0]["time_left"].as_u64().unwrap();
        assert!((100..=120).contains(&left), "time left {left}");
        assert!(ea["blocked"].is_null());
        assert_eq!(ea["last_command"]["command"], "reserve");
        assert_eq!(eb["using"], "default");
        assert_eq!(eb["held_count"], 0);
        assert_eq!(eb["blocked"]["tubes"], json!(["default", "cl-wait"]));
        let (since, until) = (&eb["blocked"]["since"], &eb["blocked"]["until"]);
        let wait_ms = until.as_u64().unwrap() - since.as_u64().unwrap();
        assert_eq!(wait_ms, 90_000, "{}: {eb}", home.name());
        assert_eq!(eb["last_command"]["command"], "reserve-with-timeout");
        drop(a);
        drop(b);
        let fresh = Client::connect(srv.addr, "probe");
        // The closed connections leave the listing (their address may be reused by
        // another, so the id decides).
        let gone = |c: &Value| {
            let deadline = Instant::now() + Duration::from_secs(20);
            let auth = format!("Bearer {TOKEN}");
            loop {
                let (_, v, _) = api.get_with("/clients?limit=1000", &[("authorization", &auth)]);
                let ids: Vec<_> = v["clients"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|c| c["id"].clone())
                    .collect();
                if !ids.contains(&c["id"]) {
                    return;
                }
                assert!(
                    Instant::now() < deadline,
                    "{}: still listed: {v}",
                    home.name()
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        };
        gone(&ea);
        gone(&eb);
        assert!(
            client_entry(&api, &fresh).is_some(),
            "a new connection is listed"
        );
        drop(srv);
    }
}

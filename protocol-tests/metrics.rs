//! The HTTP listener's metrics and probes (`--http ADDR`) against the real `redstalk`
//! binary, with a
//! real HTTP client (ureq) and, on the Redis engine, a private `redis-server` per test
//! (never the Redis on 6379). Every wait is bounded, so a hung server fails a test
//! rather than hanging it.
//!
//! What the tests prove:
//! - `metrics_agree_with_stats_on_{memory,redis}` — after puts, reserves (reserve,
//!   reserve-with-timeout, reserve-job), deletes, buries, a kick and a release in two
//!   tubes, every numeric `stats` figure equals its metric and every `stats-tube`
//!   figure of every listed tube equals its per-tube metric (the exposition is parsed
//!   properly: HELP/TYPE before samples, escaped labels); `pid` and the constant
//!   binlog figures are the only numeric keys not exported, and the test fails if a new
//!   key is neither. The wait histogram counts exactly the reserves done, its buckets
//!   are cumulative and monotonic with `+Inf` = `_count`, and the one job reserved
//!   200 ms or more after its put lands above 0.1 s (and under 1 s).
//! - `batch_stages_count_a_leaders_batches` — in leader mode, after puts and deletes,
//!   every stage of `redstalk_batch_stage_seconds` (wait, build, write, settle, wake)
//!   and `redstalk_batch_jobs` have counts, cumulative buckets and `+Inf` = `_count`;
//!   the in-memory engine has the families and no samples.
//! - `readyz_follows_redis` — `/healthz` 200 and `/readyz` 200; with the test's
//!   redis-server killed, `/readyz` turns 503 (with a reason) within a few seconds,
//!   `/metrics` answers 503 promptly and `/healthz` stays 200; with Redis restarted on
//!   the same port, `/readyz` is 200 again without restarting redstalk, and `/metrics`
//!   says where the namespace lives (`redstalk_redis_info{topology="standalone",...,
//!   primary="127.0.0.1:PORT"}`, no slot).
//! - `http_errors_and_limits` — `GET /` redirects to the console (303, `Location:
//!   /console/`); unknown paths 404, non-GET 405 (with `Allow: GET`); an
//!   oversized request head gets 431 and a firehose of header bytes does not grow the
//!   process (RSS) or stop it answering; a request head that never ends is answered 408
//!   and closed after the read timeout; meanwhile beanstalk commands answer at once.
//! - `scrapes_of_many_tubes_leave_beanstalk_serving` — with 20,000 tubes, 16 clients
//!   scraping back to back beside a beanstalk client doing put/reserve/delete cycles:
//!   the cycles go on (at least 20/s, p99 under 1 s; both figures printed with and
//!   without the scrapers), RSS stays under 300 MB, concurrent scrapes share their
//!   expositions (at most one new one a second), and only the first 1,000 tubes by name
//!   have series, `redstalk_tubes_omitted` counting the others.
//! - `metrics_tubes_caps_the_per_tube_series` — `--metrics-tubes` 2, 0 and 10.
//! - `healthz_answers_beside_slowloris_connections` — 300 connections (more than the
//!   listener keeps) sending a request head a header at a time and reopened when
//!   closed: 20 `/healthz` probes meanwhile are all answered.
//!
//! Without `redis-server` the Redis tests are skipped with a notice, unless
//! `REDSTALK_REQUIRE_ORACLE=1`.

// A test reports failure by panicking: unwrap and expect are how it says so.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use support::client::Client;
use support::{ServerKind, ServerProc};

/// Bound on every HTTP exchange.
const HTTP_TIMEOUT: Duration = Duration::from_secs(15);

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .timeout_global(Some(HTTP_TIMEOUT))
        .http_status_as_error(false)
        .build()
        .into()
}

/// A redstalk of `kind` serving metrics on a free port; `None` when skipped.
fn start(kind: ServerKind) -> Option<(ServerProc, SocketAddr)> {
    start_with(kind, &[])
}

fn wait_until(what: &str, timeout: Duration, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !ok() {
        assert!(Instant::now() < deadline, "{what}: not within {timeout:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

struct HttpReply {
    status: u16,
    content_type: String,
    allow: String,
    body: String,
}

fn http(method: &str, addr: SocketAddr, path: &str) -> HttpReply {
    let url = format!("http://{addr}{path}");
    let a = agent();
    let result = match method {
        "GET" => a.get(&url).call(),
        "POST" => a.post(&url).send_empty(),
        "DELETE" => a.delete(&url).call(),
        "HEAD" => a.head(&url).call(),
        other => panic!("no helper for {other}"),
    };
    let mut resp = result.unwrap_or_else(|e| panic!("{method} {url}: {e}"));
    let header = |name: &str| {
        resp.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string()
    };
    let (content_type, allow) = (header("content-type"), header("allow"));
    let status = resp.status().as_u16();
    let body = resp
        .body_mut()
        .read_to_string()
        .unwrap_or_else(|e| panic!("{method} {url}: body: {e}"));
    HttpReply {
        status,
        content_type,
        allow,
        body,
    }
}

// ---- the exposition format, parsed as a scraper would ----

#[derive(Clone, Debug)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

struct Exposition {
    samples: Vec<Sample>,
    types: HashMap<String, String>,
}

impl Exposition {
    /// Parse `text`, checking the format's rules as it goes (panics on a violation).
    fn parse(text: &str) -> Exposition {
        let mut helps = BTreeSet::new();
        let mut types = HashMap::new();
        let mut samples = Vec::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# HELP ") {
                let (name, _) = rest.split_once(' ').expect("HELP has a text");
                assert!(helps.insert(name.to_string()), "two HELP lines for {name}");
            } else if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').expect("TYPE has a kind");
                assert!(
                    ["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind),
                    "{line}"
                );
                assert!(
                    types.insert(name.to_string(), kind.to_string()).is_none(),
                    "two TYPE lines for {name}"
                );
            } else if line.starts_with('#') || line.is_empty() {
                continue;
            } else {
                let s = parse_sample(line);
                let family = family_of(&s.name, &types);
                assert!(
                    types.contains_key(&family) && helps.contains(&family),
                    "{line}: sample before its HELP and TYPE"
                );
                if types[&family] == "counter" {
                    assert!(
                        s.name.ends_with("_total"),
                        "counter {} lacks _total",
                        s.name
                    );
                }
                samples.push(s);
            }
        }
        Exposition { samples, types }
    }

    /// The one sample named `name` with exactly `labels`.
    fn get(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let want: BTreeMap<String, String> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let found: Vec<&Sample> = self
            .samples
            .iter()
            .filter(|s| s.name == name && s.labels == want)
            .collect();
        assert_eq!(found.len(), 1, "{name}{want:?}: {} samples", found.len());
        found[0].value
    }

    fn named(&self, name: &str) -> impl Iterator<Item = &Sample> {
        self.samples.iter().filter(move |s| s.name == name)
    }
}

fn family_of(name: &str, types: &HashMap<String, String>) -> String {
    for suffix in ["_bucket", "_sum", "_count"] {
        if let Some(f) = name.strip_suffix(suffix)
            && types.get(f).is_some_and(|k| k == "histogram")
        {
            return f.to_string();
        }
    }
    name.to_string()
}

/// `name{k="v",...} value`, with the format's escapes in label values.
fn parse_sample(line: &str) -> Sample {
    let name_end = line.find(['{', ' ']).expect("sample has a value");
    let name = &line[..name_end];
    assert!(
        !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
        "bad metric name in {line:?}"
    );
    let mut labels = BTreeMap::new();
    let mut rest = &line[name_end..];
    if let Some(after) = rest.strip_prefix('{') {
        let mut chars = after.char_indices().peekable();
        let mut end = None;
        while let Some(&(i, c)) = chars.peek() {
            if c == '}' {
                end = Some(i + 1);
                break;
            }
            if c == ',' {
                chars.next();
                continue;
            }
            let mut key = String::new();
            for (_, c) in chars.by_ref() {
                if c == '=' {
                    break;
                }
                key.push(c);
            }
            assert_eq!(chars.next().map(|(_, c)| c), Some('"'), "{line:?}");
            let mut value = String::new();
            loop {
                match chars.next().map(|(_, c)| c) {
                    Some('"') => break,
                    Some('\\') => match chars.next().map(|(_, c)| c) {
                        Some('n') => value.push('\n'),
                        Some('\\') => value.push('\\'),
                        Some('"') => value.push('"'),
                        other => panic!("bad escape {other:?} in {line:?}"),
                    },
                    Some(c) => value.push(c),
                    None => panic!("unterminated label value in {line:?}"),
                }
            }
            assert!(
                labels.insert(key, value).is_none(),
                "repeated label: {line:?}"
            );
        }
        let end = end.unwrap_or_else(|| panic!("unterminated labels in {line:?}"));
        rest = &after[end..];
    }
    let value = rest
        .strip_prefix(' ')
        .unwrap_or_else(|| panic!("no space before the value: {line:?}"));
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v
            .parse()
            .unwrap_or_else(|_| panic!("bad value in {line:?}")),
    };
    Sample {
        name: name.to_string(),
        labels,
        value,
    }
}

fn scrape(addr: SocketAddr) -> Exposition {
    let r = http("GET", addr, "/metrics");
    assert_eq!(r.status, 200, "/metrics: {}", r.body);
    assert!(
        r.content_type.starts_with("text/plain; version=0.0.4"),
        "content type {:?}",
        r.content_type
    );
    Exposition::parse(&r.body)
}

// ---- figures: metrics against stats and stats-tube ----

/// `stats` keys that are deliberately not metrics: the pid (an identity, not a
/// measurement) and beanstalkd's binlog figures (constants: redstalk has no binlog).
const NOT_EXPORTED: [&str; 6] = [
    "pid",
    "binlog-oldest-index",
    "binlog-current-index",
    "binlog-records-migrated",
    "binlog-records-written",
    "binlog-max-size",
];

/// The metric (name, labels) that carries `stats` key `key`, if it is a plain number.
fn stats_metric(key: &str) -> Option<(&'static str, Vec<(&'static str, String)>)> {
    if let Some(state) = key.strip_prefix("current-jobs-") {
        return Some(("redstalk_jobs", vec![("state", state.to_string())]));
    }
    if let Some(cmd) = key.strip_prefix("cmd-") {
        return Some((
            "redstalk_commands_total",
            vec![("command", cmd.to_string())],
        ));
    }
    let name = match key {
        "job-timeouts" => "redstalk_job_timeouts_total",
        "total-jobs" => "redstalk_jobs_created_total",
        "max-job-size" => "redstalk_max_job_size_bytes",
        "current-tubes" => "redstalk_tubes",
        "current-connections" => "redstalk_connections",
        "current-producers" => "redstalk_producers",
        "current-workers" => "redstalk_workers",
        "current-waiting" => "redstalk_waiting",
        "total-connections" => "redstalk_connections_accepted_total",
        _ => return None,
    };
    Some((name, Vec::new()))
}

/// The per-tube metric (name, extra labels) that carries `stats-tube` key `key`.
fn tube_metric(key: &str) -> Option<(&'static str, Option<(&'static str, String)>)> {
    if let Some(state) = key.strip_prefix("current-jobs-") {
        return Some(("redstalk_tube_jobs", Some(("state", state.to_string()))));
    }
    let name = match key {
        "total-jobs" => "redstalk_tube_jobs_created_total",
        "current-using" => "redstalk_tube_using",
        "current-watching" => "redstalk_tube_watching",
        "current-waiting" => "redstalk_tube_waiting",
        "cmd-delete" => "redstalk_tube_deletes_total",
        "cmd-pause-tube" => "redstalk_tube_pauses_total",
        "pause" => "redstalk_tube_pause_seconds",
        "pause-time-left" => "redstalk_tube_pause_time_left_seconds",
        _ => return None,
    };
    Some((name, None))
}

fn number(key: &str, v: &str) -> f64 {
    v.parse()
        .unwrap_or_else(|_| panic!("{key}: {v:?} is not a number"))
}

/// Drive a workload with a known number of reserves; returns that number.
fn workload(p: &mut Client, w: &mut Client) -> u64 {
    let mut reserves = 0;
    // The timed job first, alone, so it is the only wait above 0.1 s.
    p.use_tube("alpha");
    let timed = p.put(0, 0, 60, b"timed");
    w.watch("alpha");
    w.watch("beta");
    w.ignore("default");
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(w.reserve().0, timed);
    reserves += 1;
    w.expect(&format!("delete {timed}"), "DELETED");

    for (i, pri) in [10u32, 2000, 5].iter().enumerate() {
        p.put(*pri, 0, 60, format!("a{i}").as_bytes());
    }
    p.use_tube("beta");
    let b0 = p.put(100, 0, 60, b"b0");
    let b1 = p.put(3000, 0, 60, b"b1");
    p.put(1, 100, 60, b"delayed");

    let (first, _) = w.reserve(); // alpha pri 5
    reserves += 1;
    w.expect(&format!("delete {first}"), "DELETED");
    let (second, _) = w.reserve(); // alpha pri 10
    reserves += 1;
    w.expect(&format!("bury {second} 50"), "BURIED");
    let r = w.cmd("reserve-with-timeout 0"); // beta pri 100
    assert_eq!(r.id(), Some(b0), "{r:?}");
    reserves += 1;
    w.expect(&format!("release {b0} 100 0"), "RELEASED");
    let r = w.cmd(&format!("reserve-job {b1}"));
    assert_eq!(r.id(), Some(b1), "{r:?}");
    reserves += 1;
    p.use_tube("alpha");
    p.expect("kick 10", "KICKED 1");
    let (kicked, _) = w.reserve(); // the kicked one, pri 50
    assert_eq!(kicked, second);
    reserves += 1;
    let r = w.cmd("reserve-with-timeout 1"); // beta b0 again, released
    assert_eq!(r.id(), Some(b0), "{r:?}");
    reserves += 1;
    // Leave some of everything: reserved (b1 and the kicked job), ready (alpha pri
    // 2000), delayed (beta), buried (b0).
    w.expect(&format!("bury {b0} 7"), "BURIED");
    reserves
}

fn metrics_agree_with_stats(kind: ServerKind) {
    let Some((srv, maddr)) = start(kind) else {
        return;
    };
    let mut p = Client::connect(srv.addr, "producer");
    let mut w = Client::connect(srv.addr, "worker");
    let reserves = workload(&mut p, &mut w);

    // stats-tube of every tube, then stats, then the scrape with nothing in between:
    // every command counter (cmd-stats included: stats counts itself) must be equal.
    let tubes = p.list("list-tubes");
    let mut sorted = tubes.clone();
    sorted.sort();
    assert_eq!(sorted, ["alpha", "beta", "default"]);
    let tube_stats: Vec<(String, Vec<(String, String)>)> = tubes
        .iter()
        .map(|t| (t.clone(), p.dict(&format!("stats-tube {t}"))))
        .collect();
    let stats = p.dict("stats");
    let m = scrape(maddr);

    let mut compared = 0;
    for (key, value) in &stats {
        if let Some((name, labels)) = stats_metric(key) {
            let labels: Vec<(&str, &str)> = labels.iter().map(|(k, v)| (*k, v.as_str())).collect();
            assert_eq!(
                m.get(name, &labels),
                number(key, value),
                "stats {key} vs {name}{labels:?}"
            );
            compared += 1;
            continue;
        }
        match key.as_str() {
            "uptime" => {
                let diff = m.get("redstalk_uptime_seconds", &[]) - number(key, value);
                assert!((0.0..=1.0).contains(&diff), "uptime differs by {diff}");
            }
            "rusage-utime" | "rusage-stime" => {
                let mode = if key == "rusage-utime" {
                    "user"
                } else {
                    "system"
                };
                let diff =
                    m.get("redstalk_cpu_seconds_total", &[("mode", mode)]) - number(key, value);
                // Read a moment later, by the same process: never less.
                assert!((0.0..1.0).contains(&diff), "{key} differs by {diff}");
            }
            "draining" => assert_eq!(
                m.get("redstalk_draining", &[]),
                if value == "true" { 1.0 } else { 0.0 }
            ),
            "version" | "id" | "hostname" => {
                let label = if key == "version" {
                    "protocol_version"
                } else {
                    key.as_str()
                };
                let info: Vec<&Sample> = m.named("redstalk_info").collect();
                assert_eq!(info.len(), 1);
                assert_eq!(info[0].labels.get(label), Some(value), "info {label}");
            }
            "os" | "platform" => {}
            k if NOT_EXPORTED.contains(&k) => {}
            k => panic!("stats {k} = {value} is neither exported nor listed as not exported"),
        }
    }
    assert!(compared >= 35, "only {compared} stats figures compared");
    assert_eq!(
        m.named("redstalk_info")
            .next()
            .and_then(|s| s.labels.get("engine")),
        Some(&kind.name().to_string())
    );

    // Per tube: the metrics list exactly the tubes, with every stats-tube figure.
    let metric_tubes: BTreeSet<&String> = m
        .named("redstalk_tube_jobs")
        .filter_map(|s| s.labels.get("tube"))
        .collect();
    assert_eq!(metric_tubes, tubes.iter().collect());
    for (tube, figures) in &tube_stats {
        for (key, value) in figures {
            if key == "name" {
                assert_eq!(value, tube);
                continue;
            }
            let (name, extra) =
                tube_metric(key).unwrap_or_else(|| panic!("stats-tube {key} is not exported"));
            let mut labels = vec![("tube", tube.as_str())];
            if let Some((k, v)) = &extra {
                labels.push((k, v.as_str()));
            }
            assert_eq!(
                m.get(name, &labels),
                number(key, value),
                "stats-tube {tube} {key} vs {name}"
            );
        }
    }
    // Spot-check the workload's own figures, so a shared error cannot hide.
    assert_eq!(
        m.get(
            "redstalk_tube_jobs",
            &[("tube", "beta"), ("state", "delayed")]
        ),
        1.0
    );
    assert_eq!(m.get("redstalk_jobs", &[("state", "reserved")]), 2.0);
    assert_eq!(m.get("redstalk_jobs", &[("state", "buried")]), 1.0);

    // The wait histogram.
    assert_eq!(
        m.types.get("redstalk_job_wait_seconds").map(String::as_str),
        Some("histogram")
    );
    let mut buckets: Vec<(f64, f64)> = m
        .named("redstalk_job_wait_seconds_bucket")
        .map(|s| {
            let le = s.labels.get("le").expect("bucket has le");
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().expect("le is a number")
            };
            (le, s.value)
        })
        .collect();
    let listed: Vec<f64> = buckets.iter().map(|b| b.0).collect();
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    assert_eq!(
        listed,
        buckets.iter().map(|b| b.0).collect::<Vec<_>>(),
        "le in order"
    );
    assert_eq!(buckets.first().map(|b| b.0), Some(0.001));
    assert!(buckets.iter().any(|b| b.0 >= 3600.0 && b.0.is_finite()));
    assert_eq!(buckets.last().map(|b| b.0), Some(f64::INFINITY));
    assert!(
        buckets.windows(2).all(|w| w[0].1 <= w[1].1),
        "buckets not cumulative: {buckets:?}"
    );
    let count = m.get("redstalk_job_wait_seconds_count", &[]);
    assert_eq!(count, reserves as f64, "one observation per reserve");
    assert_eq!(buckets.last().map(|b| b.1), Some(count), "+Inf = count");
    let at = |le: f64| {
        buckets
            .iter()
            .find(|b| b.0 == le)
            .map(|b| b.1)
            .unwrap_or_else(|| panic!("no bucket le={le}"))
    };
    // It waited at least 200 ms by construction; how much more depends on how busy the
    // machine is (seen at 0.25–0.5 s on a loaded CI), so the upper bound is loose.
    assert_eq!(
        at(1.0) - at(0.1),
        1.0,
        "the job reserved 200 ms or more after its put is in (0.1, 1]: {buckets:?}"
    );
    assert_eq!(
        at(0.1),
        count - 1.0,
        "every other wait is short: {buckets:?}"
    );
    let sum = m.get("redstalk_job_wait_seconds_sum", &[]);
    assert!((0.2..0.25 + 0.1 * count).contains(&sum), "sum {sum}");
    println!(
        "{}: {compared} stats figures and {} tubes agree; {reserves} reserves, wait sum {sum:.3} s",
        kind.name(),
        tubes.len()
    );
}

#[test]
fn metrics_agree_with_stats_on_memory() {
    metrics_agree_with_stats(ServerKind::Memory);
}

#[test]
fn metrics_agree_with_stats_on_redis() {
    metrics_agree_with_stats(ServerKind::Redis);
}

/// The stage histograms of the group commit: after 20 puts and their deletes in
/// leader mode each stage has counts, each histogram's buckets are cumulative with
/// `+Inf` = `_count`, and the batches carried at least the 20 jobs; the in-memory
/// engine has the families but no samples (it has no batches).
#[test]
fn batch_stages_count_a_leaders_batches() {
    let Some((srv, maddr)) = start(ServerKind::Leader) else {
        return;
    };
    let mut p = Client::connect(srv.addr, "producer");
    for i in 0..20 {
        let id = p.put(0, 0, 60, format!("s{i}").as_bytes());
        p.expect(&format!("delete {id}"), "DELETED");
    }
    let m = scrape(maddr);
    let check = |name: &str, labels: &[(&str, &str)]| -> f64 {
        let count = m.get(&format!("{name}_count"), labels);
        let buckets: Vec<f64> = m
            .named(&format!("{name}_bucket"))
            .filter(|s| {
                labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k) == Some(&v.to_string()))
            })
            .map(|s| s.value)
            .collect();
        assert!(
            buckets.windows(2).all(|w| w[0] <= w[1]),
            "{name}{labels:?}: {buckets:?}"
        );
        assert_eq!(
            buckets.last().copied(),
            Some(count),
            "{name}{labels:?}: +Inf is _count"
        );
        count
    };
    for stage in ["wait", "build", "write", "settle", "wake"] {
        let n = check("redstalk_batch_stage_seconds", &[("stage", stage)]);
        let sum = m.get("redstalk_batch_stage_seconds_sum", &[("stage", stage)]);
        println!("stage {stage}: {n} observations, {sum:.6} s");
        assert!(n >= 1.0, "stage {stage} has no count");
        assert!(sum < 60.0, "stage {stage}: sum {sum}");
    }
    let batches = check("redstalk_batch_jobs", &[]);
    let jobs = m.get("redstalk_batch_jobs_sum", &[]);
    println!("{batches} batches, {jobs} jobs");
    assert!(
        batches >= 1.0 && jobs >= 20.0,
        "{batches} batches of {jobs} jobs"
    );
    drop(srv);

    let Some((_mem, maddr)) = start(ServerKind::Memory) else {
        return;
    };
    let m = scrape(maddr);
    assert_eq!(
        m.types
            .get("redstalk_batch_stage_seconds")
            .map(String::as_str),
        Some("histogram")
    );
    assert_eq!(m.named("redstalk_batch_stage_seconds_count").count(), 0);
    assert_eq!(m.named("redstalk_batch_jobs_count").count(), 0);
}

// ---- health and readiness ----

#[test]
fn readyz_follows_redis() {
    let Some((mut srv, maddr)) = start(ServerKind::Redis) else {
        return;
    };
    let h = http("GET", maddr, "/healthz");
    assert_eq!((h.status, h.body.as_str()), (200, "ok\n"));
    assert_eq!(http("GET", maddr, "/readyz").status, 200);
    let redis = srv.redis.as_mut().expect("the test's own redis-server");
    redis.kill();
    let down = Instant::now();
    let mut last = String::new();
    wait_until("/readyz turns 503", Duration::from_secs(5), || {
        let r = http("GET", maddr, "/readyz");
        last = r.body;
        r.status == 503
    });
    assert!(last.starts_with("not ready"), "reason: {last:?}");
    println!(
        "/readyz 503 {:?} after Redis died: {}",
        down.elapsed(),
        last.trim()
    );
    let asked = Instant::now();
    let m = http("GET", maddr, "/metrics");
    assert_eq!(m.status, 503, "{}", m.body);
    assert!(
        asked.elapsed() < Duration::from_secs(5),
        "scrape took {:?}",
        asked.elapsed()
    );
    assert_eq!(
        http("GET", maddr, "/healthz").status,
        200,
        "alive while Redis is down"
    );

    let redis = srv.redis.as_mut().expect("the test's own redis-server");
    redis.spawn().expect("restart redis-server");
    let up = Instant::now();
    wait_until("/readyz is 200 again", Duration::from_secs(10), || {
        http("GET", maddr, "/readyz").status == 200
    });
    println!("/readyz 200 {:?} after Redis came back", up.elapsed());
    // The restarted Redis is empty; what matters is that a scrape works again.
    assert!(scrape(maddr).named("redstalk_tubes").count() == 1);
    // Where the namespace lives: a standalone Redis, no slot.
    let port = srv.redis.as_ref().map(|r| r.port).unwrap_or_default();
    let body = http("GET", maddr, "/metrics").body;
    let info = body
        .lines()
        .find(|l| l.starts_with("redstalk_redis_info{"))
        .unwrap_or_default();
    assert!(
        info.contains("topology=\"standalone\"")
            && info.contains(&format!("primary=\"127.0.0.1:{port}\"}} 1"))
            && !info.contains("slot="),
        "{info:?}"
    );
    println!("/metrics on standalone Redis: {info}");
}

#[test]
fn healthz_and_readyz_on_memory() {
    let Some((_srv, maddr)) = start(ServerKind::Memory) else {
        return;
    };
    assert_eq!(http("GET", maddr, "/healthz").status, 200);
    let r = http("GET", maddr, "/readyz");
    assert_eq!((r.status, r.body.as_str()), (200, "ready\n"));
    assert_eq!(
        http("GET", maddr, "/healthz?probe=1").status,
        200,
        "query ignored"
    );
}

// ---- HTTP errors and limits ----

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

/// Send `head` on a raw connection and read until the server closes (bounded).
fn raw_exchange(addr: SocketAddr, head: &[u8]) -> String {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(15)))
        .expect("timeout");
    s.set_write_timeout(Some(Duration::from_secs(15)))
        .expect("timeout");
    let _ = s.write_all(head);
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

#[test]
fn http_errors_and_limits() {
    let Some((srv, maddr)) = start(ServerKind::Memory) else {
        return;
    };
    let r = http("GET", maddr, "/nope");
    assert_eq!(r.status, 404);
    // Someone who opens the port in a browser finds the console.
    let home = raw_exchange(
        maddr,
        b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    assert!(
        home.starts_with("HTTP/1.1 303 ")
            && home
                .to_ascii_lowercase()
                .contains("\r\nlocation: /console/\r\n"),
        "{home:?}"
    );
    for method in ["POST", "DELETE", "HEAD"] {
        let r = http(method, maddr, "/metrics");
        assert_eq!(r.status, 405, "{method}");
        assert_eq!(r.allow, "GET");
    }

    // 16 KiB of header: refused with 431, the connection closed.
    let mut head = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: ".to_vec();
    head.extend(std::iter::repeat_n(b'a', 16 * 1024));
    head.extend_from_slice(b"\r\n\r\n");
    let reply = raw_exchange(maddr, &head);
    assert!(reply.starts_with("HTTP/1.1 431 "), "{reply:?}");

    // A firehose of header bytes that never ends the head: the server reads a bounded
    // amount and closes; it does not grow.
    let pid = srv.pid();
    let before = rss_kib(pid);
    let started = Instant::now();
    let mut s = TcpStream::connect_timeout(&maddr, Duration::from_secs(5)).expect("connect");
    s.set_write_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let chunk = vec![b'a'; 64 * 1024];
    let _ = s.write_all(b"GET /metrics HTTP/1.1\r\nX-Big: ");
    let mut sent = 0usize;
    while sent < 32 << 20 {
        match s.write(&chunk) {
            Ok(n) => sent += n,
            Err(_) => break,
        }
    }
    drop(s);
    let after = rss_kib(pid);
    println!(
        "firehose: {} KiB accepted before the server closed, in {:?}; RSS {before} -> {after} KiB",
        sent / 1024,
        started.elapsed()
    );
    assert!(sent < 32 << 20, "the server kept reading an endless head");
    assert!(
        after < before + 4096,
        "RSS grew from {before} to {after} KiB"
    );
    assert_eq!(http("GET", maddr, "/healthz").status, 200);

    // A head that never ends: answered 408 and closed after the read timeout, while
    // the beanstalk listener answers at once (the runtime is not held).
    let slow = std::thread::spawn(move || {
        let asked = Instant::now();
        let reply = raw_exchange(maddr, b"GET /healthz HTTP/1.1\r\n");
        (reply, asked.elapsed())
    });
    std::thread::sleep(Duration::from_millis(200));
    let mut c = Client::connect(srv.addr, "beanstalk");
    let asked = Instant::now();
    assert_eq!(c.stat_u64("current-connections"), 1);
    assert!(
        asked.elapsed() < Duration::from_secs(1),
        "stats took {:?}",
        asked.elapsed()
    );
    assert_eq!(
        http("GET", maddr, "/healthz").status,
        200,
        "others are served meanwhile"
    );
    let (reply, took) = slow.join().expect("slow client");
    assert!(reply.starts_with("HTTP/1.1 408 "), "{reply:?}");
    assert!(
        (Duration::from_secs(4)..Duration::from_secs(12)).contains(&took),
        "closed after {took:?}"
    );
}

// ---- cost and availability under hostile use ----

/// A redstalk of `kind` serving HTTP on a free port with `extra` flags.
fn start_with(kind: ServerKind, extra: &[&str]) -> Option<(ServerProc, SocketAddr)> {
    for _ in 0..5 {
        let maddr: SocketAddr = ([127, 0, 0, 1], support::free_port()).into();
        let mut args = vec!["--http".to_string(), maddr.to_string()];
        args.extend(extra.iter().map(|a| a.to_string()));
        match ServerProc::start(kind, &args) {
            Ok(Some(srv)) => {
                wait_until("the metrics port listens", Duration::from_secs(10), || {
                    support::is_listening(maddr.port())
                });
                return Some((srv, maddr));
            }
            Ok(None) => return None,
            // The metrics port may have been taken between choosing and binding it.
            Err(err) => eprintln!("start {}: {err}; retrying", kind.name()),
        }
    }
    panic!("could not start redstalk ({}) with {extra:?}", kind.name());
}

/// Watch `count` tubes `t0`, `t1`, … on `c` (pipelined), so that they exist while `c`
/// stays open.
fn watch_many(c: &mut Client, count: usize) {
    for batch in (0..count).collect::<Vec<_>>().chunks(2000) {
        let mut req = Vec::new();
        for i in batch {
            req.extend_from_slice(format!("watch t{i}\r\n").as_bytes());
        }
        c.send(&req);
        for _ in batch {
            let r = c.reply();
            assert!(r.line.starts_with("WATCHING"), "{:?}", r.line);
        }
    }
}

/// What a beanstalk client saw doing put/reserve/delete cycles.
struct Cycles {
    count: usize,
    per_sec: f64,
    p50: Duration,
    p99: Duration,
    max: Duration,
}

impl std::fmt::Display for Cycles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} cycles, {:.0}/s, p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
            self.count,
            self.per_sec,
            self.p50.as_secs_f64() * 1e3,
            self.p99.as_secs_f64() * 1e3,
            self.max.as_secs_f64() * 1e3
        )
    }
}

/// put, reserve, delete on `c` (watching only its own tube) for `length`.
fn cycles(c: &mut Client, length: Duration) -> Cycles {
    let started = Instant::now();
    let mut took = Vec::new();
    while started.elapsed() < length {
        let t = Instant::now();
        let id = c.put(0, 0, 60, b"cycle");
        let (got, _) = c.reserve_timeout(30).expect("the job just put");
        assert_eq!(got, id);
        c.expect(&format!("delete {id}"), "DELETED");
        took.push(t.elapsed());
    }
    let q = support::quantiles(&took, &[0.5, 0.99, 1.0]);
    Cycles {
        count: took.len(),
        per_sec: took.len() as f64 / started.elapsed().as_secs_f64(),
        p50: q[0],
        p99: q[1],
        max: q[2],
    }
}

/// What the scrapers saw.
#[derive(Default)]
struct Scraped {
    ok: usize,
    failed: usize,
    bytes: usize,
    slowest: Duration,
    /// Hashes of the distinct bodies served.
    distinct: BTreeSet<u64>,
}

/// `n` threads scraping `/metrics` back to back until `stop`.
fn scrapers(
    maddr: SocketAddr,
    n: usize,
    stop: &std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> Vec<std::thread::JoinHandle<Scraped>> {
    use std::hash::{Hash, Hasher};
    (0..n)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let agent: ureq::Agent = ureq::Agent::config_builder()
                    .timeout_global(Some(Duration::from_secs(30)))
                    .http_status_as_error(false)
                    .build()
                    .into();
                let url = format!("http://{maddr}/metrics");
                let mut seen = Scraped::default();
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let t = Instant::now();
                    let body = agent.get(&url).call().ok().and_then(|mut r| {
                        (r.status() == 200)
                            .then(|| {
                                r.body_mut()
                                    .with_config()
                                    .limit(64 << 20)
                                    .read_to_string()
                                    .ok()
                            })
                            .flatten()
                    });
                    seen.slowest = seen.slowest.max(t.elapsed());
                    match body {
                        Some(b) => {
                            seen.ok += 1;
                            seen.bytes = b.len();
                            let mut h = std::collections::hash_map::DefaultHasher::new();
                            b.hash(&mut h);
                            seen.distinct.insert(h.finish());
                        }
                        None => {
                            seen.failed += 1;
                            std::thread::sleep(Duration::from_millis(50));
                        }
                    }
                }
                seen
            })
        })
        .collect()
}

/// CPU time (user + system) the process `pid` has used so far (USER_HZ is 100).
fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("proc stat");
    // Fields after the command name (which is in parentheses and may hold spaces).
    let f: Vec<&str> = stat[stat.rfind(')').expect("comm") + 2..]
        .split(' ')
        .collect();
    let ticks: u64 = f[11].parse::<u64>().expect("utime") + f[12].parse::<u64>().expect("stime");
    Duration::from_millis(ticks * 10)
}

/// The largest RSS of `pid` sampled every 20 ms until `stop`, in KiB.
fn rss_peak(
    pid: u32,
    stop: &std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<u64> {
    let stop = stop.clone();
    std::thread::spawn(move || {
        let mut peak = 0;
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            peak = peak.max(rss_kib(pid));
            std::thread::sleep(Duration::from_millis(20));
        }
        peak
    })
}

/// 20,000 tubes, then 16 clients scraping `/metrics` back to back while a beanstalk
/// client does put/reserve/delete cycles: the beanstalk port keeps serving, memory
/// stays bounded, concurrent scrapes share their expositions, and the per-tube series
/// are capped (the default 1,000, the first by name) with the rest counted.
#[test]
fn scrapes_of_many_tubes_leave_beanstalk_serving() {
    let _serial = support::serial();
    const TUBES: usize = 20_000;
    const SCRAPERS: usize = 16;
    let Some((srv, maddr)) = start(ServerKind::Memory) else {
        return;
    };
    let mut many = Client::connect(srv.addr, "many tubes");
    many.timeout = Duration::from_secs(60);
    let made = Instant::now();
    watch_many(&mut many, TUBES);
    eprintln!("{TUBES} tubes made in {:?}", made.elapsed());
    let mut c = Client::connect(srv.addr, "cycles");
    c.timeout = Duration::from_secs(60);
    c.use_tube("cycle");
    c.watch_only("cycle");

    let alone = cycles(&mut c, Duration::from_secs(2));
    let rss_before = rss_kib(srv.pid());
    eprintln!("beanstalk alone: {alone}; RSS {} MiB", rss_before / 1024);

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let rss = rss_peak(srv.pid(), &stop);
    let threads = scrapers(maddr, SCRAPERS, &stop);
    let scraping = Instant::now();
    let cpu_before = cpu_time(srv.pid());
    std::thread::sleep(Duration::from_millis(300));
    let beside = cycles(&mut c, Duration::from_secs(4));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut all = Scraped::default();
    for t in threads {
        let s = t.join().expect("scraper");
        all.ok += s.ok;
        all.failed += s.failed;
        all.bytes = all.bytes.max(s.bytes);
        all.slowest = all.slowest.max(s.slowest);
        all.distinct.extend(s.distinct);
    }
    let scraped_for = scraping.elapsed();
    let cpu = (cpu_time(srv.pid()) - cpu_before).as_secs_f64() / scraped_for.as_secs_f64();
    let peak = rss.join().expect("rss sampler");
    eprintln!(
        "beside {SCRAPERS} scrapers: {beside}; scrapes {} ok ({} distinct expositions, {} KiB each, slowest {:?}), {} failed, in {:?}; redstalk CPU {:.0}% of a core; RSS peak {} MiB",
        all.ok,
        all.distinct.len(),
        all.bytes / 1024,
        all.slowest,
        all.failed,
        scraped_for,
        cpu * 100.0,
        peak / 1024
    );

    assert!(
        beside.per_sec >= 20.0 && beside.p99 < Duration::from_secs(1),
        "the beanstalk port stalled beside the scrapers: {beside} (alone: {alone})"
    );
    assert!(
        peak < 300 * 1024,
        "RSS peaked at {} MiB during the scrapes",
        peak / 1024
    );
    assert!(all.ok >= SCRAPERS, "only {} scrapes answered", all.ok);
    assert!(
        all.distinct.len() as u64 <= scraped_for.as_secs() + 2,
        "{} distinct expositions in {scraped_for:?}: concurrent scrapes were not shared",
        all.distinct.len()
    );

    // The cap: the first 1,000 tubes by name have series, the others are counted.
    let m = scrape(maddr);
    let total = m.get("redstalk_tubes", &[]);
    assert_eq!(total, (TUBES + 2) as f64, "t0.., default and cycle");
    let listed: BTreeSet<String> = m
        .named("redstalk_tube_jobs")
        .filter_map(|s| s.labels.get("tube").cloned())
        .collect();
    let mut names: Vec<String> = (0..TUBES).map(|i| format!("t{i}")).collect();
    names.extend(["default".to_string(), "cycle".to_string()]);
    names.sort();
    names.truncate(1000);
    assert_eq!(listed, names.into_iter().collect::<BTreeSet<_>>());
    assert_eq!(m.get("redstalk_tubes_omitted", &[]), total - 1000.0);
    drop(many);
}

/// `--metrics-tubes N` keeps the first N tubes by name; 0 keeps none.
#[test]
fn metrics_tubes_caps_the_per_tube_series() {
    for (cap, want) in [
        ("2", vec!["alpha", "beta"]),
        ("0", vec![]),
        ("10", vec!["alpha", "beta", "default", "gamma"]),
    ] {
        let Some((srv, maddr)) = start_with(ServerKind::Memory, &["--metrics-tubes", cap]) else {
            return;
        };
        let mut c = Client::connect(srv.addr, "tubes");
        for t in ["gamma", "beta", "alpha"] {
            c.watch(t);
        }
        let m = scrape(maddr);
        for family in ["redstalk_tube_jobs", "redstalk_tube_using"] {
            let tubes: BTreeSet<&str> = m
                .named(family)
                .filter_map(|s| s.labels.get("tube").map(String::as_str))
                .collect();
            assert_eq!(tubes, want.iter().copied().collect(), "{family}, cap {cap}");
        }
        assert_eq!(
            m.get("redstalk_tubes_omitted", &[]),
            (4 - want.len()) as f64,
            "cap {cap}"
        );
        assert_eq!(m.get("redstalk_tubes", &[]), 4.0);
    }
}

/// 300 slowloris connections to the metrics port (each sends a request head a header
/// at a time and never ends it, and comes back when closed): 20 `/healthz` probes
/// meanwhile are all answered, whatever the listener's connection limit.
#[test]
fn healthz_answers_beside_slowloris_connections() {
    let _serial = support::serial();
    const SLOW: usize = 300;
    const PROBES: usize = 20;
    let Some((_srv, maddr)) = start(ServerKind::Memory) else {
        return;
    };
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let opened = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let loris = {
        let (stop, opened) = (stop.clone(), opened.clone());
        std::thread::spawn(move || {
            let open = || -> Option<TcpStream> {
                let mut s = TcpStream::connect_timeout(&maddr, Duration::from_secs(2)).ok()?;
                s.set_write_timeout(Some(Duration::from_millis(200))).ok()?;
                s.set_nonblocking(false).ok()?;
                s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n").ok()?;
                opened.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                Some(s)
            };
            let mut socks: Vec<Option<TcpStream>> = (0..SLOW).map(|_| open()).collect();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                for s in socks.iter_mut() {
                    let alive = s
                        .as_mut()
                        .is_some_and(|s| s.write_all(b"X-Slow: 1\r\n").is_ok());
                    if !alive {
                        *s = open();
                    }
                }
                std::thread::sleep(Duration::from_millis(300));
            }
            socks.iter().filter(|s| s.is_some()).count()
        })
    };
    wait_until(
        "the slow connections are open",
        Duration::from_secs(30),
        || opened.load(std::sync::atomic::Ordering::Relaxed) >= SLOW,
    );
    std::thread::sleep(Duration::from_millis(500));

    let probe_agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(5)))
        .http_status_as_error(false)
        .build()
        .into();
    let url = format!("http://{maddr}/healthz");
    let (mut answered, mut slowest) = (0, Duration::ZERO);
    for _ in 0..PROBES {
        let t = Instant::now();
        let ok = probe_agent
            .get(&url)
            .header("Connection", "close")
            .call()
            .is_ok_and(|r| r.status() == 200);
        if ok {
            answered += 1;
            slowest = slowest.max(t.elapsed());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let open_at_end = loris.join().expect("slowloris thread");
    eprintln!(
        "{SLOW} slowloris connections ({} opened in all, {open_at_end} open at the end): {answered} of {PROBES} /healthz probes answered, slowest {slowest:?}",
        opened.load(std::sync::atomic::Ordering::Relaxed)
    );
    assert_eq!(
        answered, PROBES,
        "probes not answered beside slow connections"
    );
}

//! The web console (`/console/`, docs/CONSOLE.md) in headless Debian chromium, driven
//! through chromedriver with fantoccini, against the real binary with `--http` and
//! `--admin-token`, in memory mode and in Redis leader mode (a private redis-server from
//! the test support; skipped loudly without one): one chromedriver, a browser session
//! per server. Every wait is bounded; figures are printed.
//!
//! What the test proves (`console_in_a_browser`), in each mode:
//! - the overview lists a tube (61 tubes: in pages of 50); a job put by a beanstalk client shows up within 2 s
//!   without reload (the Server-Sent Events stream);
//! - the tube page pages through 10,000 jobs with the API's cursors: each next page
//!   shows later ids, and the pages hold every job once;
//! - moving a job from the tube page shows it in the other tube with the same id;
//! - hostile bodies (`<script>`, an `onerror` attribute, invalid UTF-8, 1 MiB) render as
//!   text: `window.__pwned` stays undefined and the body holds no element;
//! - a keyed job's key (`$ ( ) ; /` in it) shows as text in the tube's list and on the job's page, and the tube page's
//!   find-by-key box links to the job;
//! - acting by key: a job put with a key by a beanstalk client is found by its key on
//!   the tube page, delayed, kicked, buried and deleted (after a confirmation) through
//!   the box's buttons (each state checked with `stats-job`), and the key then says
//!   "deleted, window open"; a refusal (409) and a hostile key (400) show the API's
//!   message as text; an unknown key says "not found"; a keyed job's page acts by key;
//! - the policies page: a tube policy set through its form shows in its table (and in
//!   the API); a job its dead letter rule buried (a beanstalk client reserved and
//!   released it twice) is marked in the tube's buried list and its page gives the
//!   reason; the tube page names the rule that governs it (picked as the server does);
//!   a hostile-looking pattern is refused and the API's message shows as text; a
//!   removal asks first, and the table ends empty;
//! - the schedules page: a schedule made through the API is listed with its next tick
//!   (local time, its zone's offset); one made through the form shows in the table
//!   and is deleted through its button (after a confirmation); a hostile-looking name
//!   is refused and the API's message shows as text; the schedule's page shows its
//!   next 5 ticks, "Run now" puts its job (a beanstalk client reserves it), and its
//!   Pause button pauses it (its state says paused, and so does the API);
//! - the login sets an HttpOnly cookie that is not the token; a change from another
//!   origin (`Origin: http://evil.example`) is refused 403, with the token or the cookie;
//! - with `--admin-read-only` an action is refused and the page shows the error; with
//!   `--admin-read-auth` the console opens on its login page and reads after the login;
//! - leader mode, through a standby (a second instance on the namespace, whose API
//!   forwards to the leader's): the overview loads, a job put shows up within 2 s, the
//!   event stream's snapshots arrive one by one (not buffered by the forwarder), and a
//!   session made on the standby changes things on the leader;
//! - screenshots of each page, light and dark (memory mode), go under `target/`;
//!   `REDSTALK_REFRESH_SCREENSHOTS=1` writes them to docs/console/*.png instead.
//!
//! `console_retained_jobs` (`--retain 1h --retain-bodies`): a job's history as a
//! timeline while it lives and after its delete, on the deleted job's page (which
//! still opens, its hostile body inert text); "Find by key" links a deleted keyed
//! job's record; the Retained page lists the records (screenshots `retained-job`,
//! `retained`).
//!
//! `login_guessing_is_bounded`: after `--admin-login-limit` wrong tokens the login (and,
//! counted the same way, the API's `Authorization: Bearer`)
//! answers 429 with `Retry-After`, the right token included, and takes the token again
//! once the (shortened) window has passed.
//!
//! Needs `chromium` and `chromedriver` (Debian: `chromium chromium-driver`; .ci/test
//! installs them); without them the test fails, saying so.

// A test reports failure by panicking: unwrap and expect are how it says so.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client as Browser, ClientBuilder, Locator};
use serde_json::{Value, json};
use support::client::Client;
use support::{ServerKind, ServerProc};

const TOKEN: &str = "console-t0ken";
const WAIT: Duration = Duration::from_secs(20);
const HOSTILE: &str = r#"<script>window.__pwned=1</script><img src=x onerror="window.__pwned=1">"#;

/// Where the console's server keeps its jobs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Memory,
    /// Redis leader mode on a private redis-server (spawned by the test support).
    Leader,
}

impl Mode {
    /// Memory mode, and leader mode when redis-server is installed (a loud skip else,
    /// a failure under `REDSTALK_REQUIRE_ORACLE=1`).
    fn all() -> Vec<Mode> {
        let mut modes = vec![Mode::Memory];
        if support::redis::redis_server_path().is_some() {
            modes.push(Mode::Leader);
        } else {
            assert!(
                !support::oracle_required(),
                "redis-server is required (REDSTALK_REQUIRE_ORACLE=1) but not installed"
            );
            eprintln!("!!! redis-server is not installed: the console in leader mode is SKIPPED.");
        }
        modes
    }
}

/// A redstalk with its HTTP listener.
struct Server {
    proc: ServerProc,
    http: SocketAddr,
    mode: Mode,
}

impl Server {
    fn start(extra: &[&str]) -> Server {
        Server::start_as(Mode::Memory, extra)
    }

    /// A server of `mode` with the console's flags and `extra`; in leader mode, once it
    /// leads (on a redis-server of its own).
    fn start_as(mode: Mode, extra: &[&str]) -> Server {
        Server::launch(mode, extra, None, "leader")
    }

    /// A second leader-mode instance on `leader`'s Redis namespace, once it says it is
    /// a standby: its API forwards to the leader's.
    fn standby_of(leader: &Server) -> Server {
        let redis = leader.proc.redis.as_ref().expect("a leader-mode server");
        Server::launch(Mode::Leader, &[], Some(redis.url()), "standby")
    }

    fn launch(mode: Mode, extra: &[&str], on_redis: Option<String>, role: &str) -> Server {
        for _ in 0..5 {
            let http: SocketAddr = ([127, 0, 0, 1], support::free_port()).into();
            let mut args: Vec<String> = ["--http", &http.to_string(), "--admin-token", TOKEN]
                .iter()
                .map(|s| s.to_string())
                .collect();
            args.extend(["-z".to_string(), "6000000".to_string()]);
            args.extend(extra.iter().map(|s| s.to_string()));
            let started = match (mode, &on_redis) {
                (Mode::Memory, _) => ServerProc::start(ServerKind::Memory, &args),
                (Mode::Leader, None) => ServerProc::start(ServerKind::Leader, &args),
                // The namespace ServerProc::start gives a leader-mode server.
                (Mode::Leader, Some(url)) => {
                    ServerProc::start_on_redis_as(ServerKind::Leader, url, "t", &args).map(Some)
                }
            };
            let Ok(Some(mut proc)) = started else {
                continue;
            };
            let log = proc.capture_stderr();
            support::wait_served(proc.addr, WAIT, &log);
            let deadline = Instant::now() + WAIT;
            // 401 with --admin-read-auth: served all the same.
            loop {
                let (status, body) = http_get_auth(http, "/api/v1/whoami");
                let has_role = mode == Mode::Memory || body.contains(&format!("\"{role}\""));
                if (status == 200 && has_role) || status == 401 {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "API not served as {role}\n{}",
                    log.tail()
                );
                std::thread::sleep(Duration::from_millis(50));
            }
            return Server { proc, http, mode };
        }
        panic!("could not start redstalk ({mode:?})");
    }

    fn url(&self, page: &str) -> String {
        format!("http://{}/console/{page}", self.http)
    }

    fn client(&self) -> Client {
        Client::connect(self.proc.addr, "console-test")
    }
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .timeout_global(Some(WAIT))
        .http_status_as_error(false)
        .build()
        .into()
}

fn http_get(http: SocketAddr, path: &str) -> (u16, String) {
    match agent().get(format!("http://{http}{path}")).call() {
        Ok(mut r) => (r.status().as_u16(), r.body_mut().read_to_string().unwrap()),
        Err(_) => (0, String::new()),
    }
}

/// [`http_get`] with the token.
fn http_get_auth(http: SocketAddr, path: &str) -> (u16, String) {
    let r = agent()
        .get(format!("http://{http}{path}"))
        .header("Authorization", &format!("Bearer {TOKEN}"))
        .call();
    match r {
        Ok(mut r) => (r.status().as_u16(), r.body_mut().read_to_string().unwrap()),
        Err(_) => (0, String::new()),
    }
}

/// chromedriver on a free port, killed on drop.
struct Driver {
    child: Child,
    url: String,
}

impl Driver {
    fn start() -> Driver {
        let path = support::find_program("CHROMEDRIVER", "chromedriver")
            .expect("chromedriver is required (Debian: apt-get install chromium chromium-driver)");
        let port = support::free_port();
        let child = Command::new(path)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let deadline = Instant::now() + WAIT;
        while !support::is_listening(port) {
            assert!(Instant::now() < deadline, "chromedriver did not listen");
            std::thread::sleep(Duration::from_millis(50));
        }
        Driver {
            child,
            url: format!("http://127.0.0.1:{port}"),
        }
    }

    /// A headless chromium session, light or dark.
    async fn browser(&self, dark: bool) -> Browser {
        let scheme = if dark { 0 } else { 1 };
        let mut args = vec![
            "--headless=new".to_string(),
            "--no-sandbox".into(),
            "--disable-gpu".into(),
            "--disable-dev-shm-usage".into(),
            "--window-size=1280,900".into(),
            format!("--blink-settings=preferredColorScheme={scheme}"),
        ];
        if dark {
            args.push("--force-dark-mode".into());
        }
        let mut opts = json!({"args": args});
        if let Some(bin) = support::find_program("CHROMIUM", "chromium") {
            opts["binary"] = json!(bin.display().to_string());
        }
        let mut caps = serde_json::Map::new();
        caps.insert("goog:chromeOptions".into(), opts);
        ClientBuilder::rustls()
            .unwrap()
            .capabilities(caps)
            .connect(&self.url)
            .await
            .expect("a chromium session")
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Poll `script` (a JS expression) until it is truthy; its value and how long it took.
async fn until(b: &Browser, script: &str) -> (Value, Duration) {
    let start = Instant::now();
    loop {
        let v = b.execute(&format!("return ({script});"), vec![]).await;
        if let Ok(v) = v
            && !(v.is_null() || v == json!(false) || v == json!("") || v == json!(0))
        {
            return (v, start.elapsed());
        }
        assert!(start.elapsed() < WAIT, "timed out waiting for {script}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

async fn js(b: &Browser, script: &str) -> Value {
    b.execute(&format!("return ({script});"), vec![])
        .await
        .unwrap()
}

/// Open `url` and wait for the console's start (its session known, its first page
/// routed): a hash changed before would be routed again under the next step.
async fn go(b: &Browser, url: &str) {
    b.goto(url).await.unwrap();
    until(
        b,
        "document.readyState === 'complete' && document.getElementById('main') \
         && typeof who !== 'undefined' && who?.logged_in !== undefined",
    )
    .await;
}

/// Where the screenshots go: under `target/` on every run, so a test run leaves the
/// tracked files alone; into `docs/console/` only when asked to refresh them
/// (`REDSTALK_REFRESH_SCREENSHOTS=1`, the command docs/CONSOLE.md gives).
fn screens_dir() -> PathBuf {
    if std::env::var_os("REDSTALK_REFRESH_SCREENSHOTS").is_some_and(|v| v == "1") {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/console")
    } else {
        Path::new(env!("CARGO_TARGET_TMPDIR")).join("console-screenshots")
    }
}

async fn screenshot(b: &Browser, name: &str) {
    // Let the live figures arrive and the page settle.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let png = b.screenshot().await.unwrap();
    let dir = screens_dir();
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{name}.png"));
    std::fs::write(&path, &png).unwrap();
    println!("screenshot {}: {} bytes", path.display(), png.len());
}

async fn login(b: &Browser, s: &Server) {
    go(b, &s.url("#/login")).await;
    let input = b.wait().for_element(Locator::Id("token")).await.unwrap();
    input.send_keys(TOKEN).await.unwrap();
    b.find(Locator::Id("login-submit"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    until(b, "!document.getElementById('logout').hidden").await;
}

/// Click `id` (an element of the page).
async fn click(b: &Browser, id: &str) {
    click_at(b, Locator::Id(id)).await;
}

/// Click the element `at` finds.
async fn click_at(b: &Browser, at: Locator<'_>) {
    b.find(at).await.unwrap().click().await.unwrap();
}

/// The ids of the job rows shown on the tube page.
async fn shown_ids(b: &Browser) -> Vec<u64> {
    let v = js(
        b,
        "[...document.querySelectorAll('#jobs-body tr[data-id]')].map(t => Number(t.dataset.id))",
    )
    .await;
    serde_json::from_value(v).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_in_a_browser() {
    // fantoccini's rustls needs a provider: redstalk's own (ring).
    let _ = rustls::crypto::ring::default_provider().install_default();
    // One chromedriver for every mode; a fresh browser session per server.
    let driver = Driver::start();
    for mode in Mode::all() {
        println!("== {mode:?} mode");
        let server = Server::start_as(mode, &[]);
        let b = driver.browser(false).await;
        let mut c = server.client();
        c.use_tube("emails");
        let first = c.put(1024, 0, 60, b"hello");

        overview_and_live(&b, &server, &mut c).await;
        sparklines(&b).await;
        login(&b, &server).await;
        cookie_and_origin(&b, &server).await;
        paging(&b, &server, &mut c).await;
        moving(&b, &server, first).await;
        let hostile = hostile_bodies(&b, &server, &mut c).await;
        keyed(&b, &server, &mut c).await;
        keys_page(&b, &server, &mut c).await;
        search(&b, &server).await;
        clients_page(&b, &server).await;
        policies_page(&b, &server, &mut c).await;
        schedules_page(&b, &server).await;
        many_tabs(&b, &server, &mut c).await;
        through_a_standby(&b, &server, &mut c).await;
        if mode == Mode::Memory {
            screenshots(&b, &server, hostile, "light").await;
        }
        b.close().await.unwrap();
        if mode == Mode::Memory {
            dark_screenshots(&driver, &server, hostile).await;
        }
        read_only(&driver, mode).await;
    }
}

/// The pages in dark mode, screenshotted (once: from memory mode).
async fn dark_screenshots(driver: &Driver, server: &Server, hostile: u64) {
    let dark = driver.browser(true).await;
    go(&dark, &server.url("")).await;
    let is_dark = js(&dark, "matchMedia('(prefers-color-scheme: dark)').matches").await;
    assert_eq!(is_dark, json!(true), "the dark session prefers dark");
    login(&dark, server).await;
    screenshots(&dark, server, hostile, "dark").await;
    dark.close().await.unwrap();
}

/// Leader mode: the console opened on a standby (a second instance on the namespace)
/// whose API forwards to the leader's: the overview loads, the live updates arrive
/// through the forwarder (the event stream streamed, not buffered), and a session made
/// on the standby changes things on the leader.
async fn through_a_standby(b: &Browser, leader: &Server, c: &mut Client) {
    if leader.mode != Mode::Leader {
        return;
    }
    let standby = Server::standby_of(leader);
    live_put(b, &standby, c, "live-standby").await;
    until(b, "document.getElementById('live').textContent === 'live'").await;
    let gaps = event_stream(&standby, 3);
    assert!(
        gaps.iter().all(|g| *g < Duration::from_secs(3)),
        "the events come one by one through the forwarder: {gaps:?}"
    );
    // A session made on the standby: its cookie travels to the leader as the token.
    login(b, &standby).await;
    let cookie = b.get_named_cookie("redstalk_session").await.unwrap();
    let status = agent()
        .post(format!(
            "http://{}/api/v1/tubes/live-standby/pause",
            standby.http
        ))
        .header("Cookie", &format!("redstalk_session={}", cookie.value()))
        .send_json(json!({"delay": 1}))
        .unwrap()
        .status()
        .as_u16();
    assert_eq!(status, 200, "a change with the standby's session");
    let paused = c.cmd("stats-tube live-standby");
    assert!(paused.text().contains("pause: 1"), "{}", paused.text());
    println!("standby: a change with the standby's session applied on the leader");
}

async fn overview_and_live(b: &Browser, s: &Server, c: &mut Client) {
    live_put(b, s, c, "live-1").await;
}

/// `s`'s overview (opened in `b`) shows tube emails; a job put now in `tube` (by `c`,
/// on the leader) reaches the open page through the event stream within 2 s.
async fn live_put(b: &Browser, s: &Server, c: &mut Client, tube: &str) {
    go(b, &s.url("")).await;
    let (_, t) = until(
        b,
        "document.querySelector('#tubes-body tr[data-tube=\"emails\"]')",
    )
    .await;
    println!("{}: the overview shows tube emails after {t:?}", s.http);
    c.use_tube(tube);
    c.put(1024, 0, 60, b"live");
    let start = Instant::now();
    until(
        b,
        &format!("document.querySelector('#tubes-body tr[data-tube=\"{tube}\"] td[data-k=\"current-jobs-ready\"]')?.textContent === '1'"),
    )
    .await;
    let took = start.elapsed();
    println!(
        "{}: a job put by a beanstalk client shown on the overview after {took:?} (no reload)",
        s.http
    );
    assert!(took < Duration::from_secs(2), "live update took {took:?}");
    c.use_tube("emails");
}

/// The overview draws each tube's last hour as inline SVG, labelled with its figures.
async fn sparklines(b: &Browser) {
    let (label, t) = until(
        b,
        "document.querySelector('#tubes-body tr[data-tube=\"emails\"] td.sparks svg.spark.counts')?.getAttribute('aria-label')",
    )
    .await;
    println!("overview sparkline of emails after {t:?}: {label}");
    let label = label.as_str().unwrap_or_default().to_string();
    assert!(
        label.contains("puts") && label.contains("reserves"),
        "{label}"
    );
    let lines = js(b, "document.querySelectorAll('#tubes-body tr[data-tube=\"emails\"] svg.spark polyline').length").await;
    assert_eq!(lines, json!(4), "puts, reserves, deletes and the wait");
}

async fn cookie_and_origin(b: &Browser, s: &Server) {
    let cookie = b.get_named_cookie("redstalk_session").await.unwrap();
    let value = cookie.value().to_string();
    assert_eq!(cookie.http_only(), Some(true));
    assert!(
        !value.contains(TOKEN) && value.len() == 64,
        "an HMAC, not the token"
    );
    let evil = |auth: (&str, String)| {
        let r = agent()
            .post(format!("http://{}/api/v1/tubes/emails/pause", s.http))
            .header("Origin", "http://evil.example")
            .header(auth.0, &auth.1)
            .send_json(json!({"delay": 1}))
            .unwrap();
        r.status().as_u16()
    };
    assert_eq!(evil(("Authorization", format!("Bearer {TOKEN}"))), 403);
    assert_eq!(evil(("Cookie", format!("redstalk_session={value}"))), 403);
    // The same cookie from the same origin (a plain client sends no Origin) is the token.
    let r = agent()
        .get(format!("http://{}/console/session", s.http))
        .header("Cookie", &format!("redstalk_session={value}"))
        .call()
        .unwrap()
        .body_mut()
        .read_to_string()
        .unwrap();
    assert!(r.contains("\"logged_in\":true"), "{r}");
    let (_, page) = http_get(s.http, "/console/");
    let head = agent()
        .get(format!("http://{}/console/", s.http))
        .call()
        .unwrap();
    let csp = head.headers()["content-security-policy"].to_str().unwrap();
    assert!(csp.contains("default-src 'self'") && csp.contains("frame-ancestors 'none'"));
    assert_eq!(head.headers()["x-content-type-options"], "nosniff");
    assert!(!page.contains("<script>"), "no inline script");
    println!("cross-origin changes refused (token and cookie): 403; CSP {csp:?}");
    event_stream(s, 1);
    let (_, metrics) = http_get(s.http, "/metrics");
    let computed = metrics
        .lines()
        .find_map(|l| l.strip_prefix("redstalk_console_snapshots_total "))
        .and_then(|v| v.parse::<u64>().ok());
    assert!(computed.is_some_and(|n| n > 0), "{computed:?}");
    println!("/metrics: {computed:?} console snapshots computed so far");
}

/// `GET /api/v1/events` answers an event stream whose first event is a snapshot; reads
/// `events` of them and returns the time before each (the first: since the request).
fn event_stream(s: &Server, events: usize) -> Vec<Duration> {
    use std::io::Read;
    let mut start = Instant::now();
    let mut r = agent()
        .get(format!("http://{}/api/v1/events", s.http))
        .call()
        .unwrap();
    assert_eq!(r.status().as_u16(), 200, "the event stream");
    assert_eq!(r.headers()["content-type"], "text/event-stream");
    let mut reader = r.body_mut().as_reader();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let mut gaps = Vec::new();
    while gaps.len() < events {
        let n = reader.read(&mut buf).unwrap();
        assert!(n > 0, "the stream ended after {} snapshots", gaps.len());
        got.extend_from_slice(&buf[..n]);
        let seen = String::from_utf8_lossy(&got)
            .matches("\"tube_count\"")
            .count();
        while gaps.len() < seen.min(events) {
            gaps.push(start.elapsed());
            start = Instant::now();
        }
    }
    let text = String::from_utf8_lossy(&got);
    // The first event asks for a reconnection after a second and carries a snapshot.
    let first = text.split("\n\n").next().unwrap_or_default();
    let lines: Vec<&str> = first.lines().collect();
    assert!(lines.contains(&"retry: 1000"), "{text}");
    assert!(lines.iter().any(|l| l.starts_with("data: {")), "{text}");
    println!("event stream of {}: snapshots after {gaps:?}", s.http);
    gaps
}

async fn paging(b: &Browser, s: &Server, c: &mut Client) {
    c.use_tube("bulk");
    let start = Instant::now();
    let ids: Vec<u64> = (0..10_000)
        .map(|i| c.put(1024, 0, 60, format!("job {i}").as_bytes()))
        .collect();
    println!("put 10,000 jobs in {:?}", start.elapsed());
    go(b, &s.url("#/tube/bulk")).await;
    until(
        b,
        "document.querySelectorAll('#jobs-body tr[data-id]').length === 50",
    )
    .await;
    let page1 = shown_ids(b).await;
    assert_eq!(page1, ids[..50]);
    click(b, "jobs-next").await;
    until(
        b,
        &format!(
            "document.querySelector('#jobs-body tr[data-id]')?.dataset.id != '{}'",
            page1[0]
        ),
    )
    .await;
    let page2 = shown_ids(b).await;
    assert!(page2[0] > page1[49], "the next page shows later ids");
    // All 10,000 by pages of 1,000.
    b.find(Locator::Id("page-size"))
        .await
        .unwrap()
        .select_by_value("1000")
        .await
        .unwrap();
    until(
        b,
        "document.querySelectorAll('#jobs-body tr[data-id]').length === 1000",
    )
    .await;
    let mut seen: Vec<u64> = Vec::new();
    let start = Instant::now();
    loop {
        let after = seen.last().copied().unwrap_or(0);
        until(
            b,
            &format!(
                "Number(document.querySelector('#jobs-body tr[data-id]')?.dataset.id) > {after}"
            ),
        )
        .await;
        seen.extend(shown_ids(b).await);
        if js(b, "document.getElementById('jobs-next').disabled").await == json!(true) {
            break;
        }
        click(b, "jobs-next").await;
    }
    println!(
        "paged through {} jobs by 1,000 in {:?}",
        seen.len(),
        start.elapsed()
    );
    assert!(
        seen == ids,
        "every job once, in order: {} shown",
        seen.len()
    );
    c.use_tube("emails");
}

async fn moving(b: &Browser, s: &Server, id: u64) {
    go(b, &s.url("#/tube/emails")).await;
    let row = format!("#jobs-body tr[data-id=\"{id}\"] input.sel");
    until(b, &format!("document.querySelector('{row}')")).await;
    click_at(b, Locator::Css(&row)).await;
    b.find(Locator::Id("move-tube"))
        .await
        .unwrap()
        .send_keys("other")
        .await
        .unwrap();
    click(b, "act-move").await;
    until(
        b,
        &format!("!document.querySelector('#jobs-body tr[data-id=\"{id}\"]')"),
    )
    .await;
    go(b, &s.url("#/tube/other")).await;
    let (_, t) = until(
        b,
        &format!("document.querySelector('#jobs-body tr[data-id=\"{id}\"]')"),
    )
    .await;
    println!("job {id} moved to tube other, shown there after {t:?}");
}

/// Hostile bodies render as text; returns the id of the `<script>` one.
async fn hostile_bodies(b: &Browser, s: &Server, c: &mut Client) -> u64 {
    let id = c.put(1024, 0, 60, HOSTILE.as_bytes());
    go(b, &s.url(&format!("#/job/{id}"))).await;
    let (text, _) = until(b, "document.getElementById('job-body')?.textContent").await;
    assert_eq!(text, json!(HOSTILE));
    assert_eq!(js(b, "typeof window.__pwned").await, json!("undefined"));
    // An unkeyed job: no actions by key, and nothing but elements in the page's main.
    let main = js(
        b,
        "!document.getElementById('key-actions') \
         && [...document.getElementById('main').childNodes].every(n => n.nodeType === 1)",
    )
    .await;
    assert_eq!(main, json!(true));
    assert_eq!(
        js(b, "document.querySelectorAll('#job-body *').length").await,
        json!(0)
    );
    assert_eq!(
        js(b, "document.querySelectorAll('img').length").await,
        json!(0)
    );
    let bad = c.put(1024, 0, 60, b"\xff\xfe<b>not utf-8</b>\"'><svg onload=x>");
    go(b, &s.url(&format!("#/job/{bad}"))).await;
    let (note, _) = until(b, "document.getElementById('body-note')?.textContent").await;
    assert!(note.as_str().unwrap().contains("not valid UTF-8"), "{note}");
    assert_eq!(
        js(b, "document.querySelectorAll('#job-body *').length").await,
        json!(0)
    );
    let big = format!("{}{HOSTILE}", "x".repeat(1024 * 1024 - HOSTILE.len()));
    let big_id = c.put(1024, 0, 60, big.as_bytes());
    go(b, &s.url(&format!("#/job/{big_id}"))).await;
    let (note, t) = until(b, "document.getElementById('body-note')?.textContent").await;
    println!("1 MiB body shown in {t:?}: {note}");
    assert_eq!(js(b, "typeof window.__pwned").await, json!("undefined"));
    click(b, "view-hex").await;
    until(
        b,
        "document.getElementById('job-body').textContent.startsWith('00000000  78 78')",
    )
    .await;
    // Beyond 4 MiB the page fetches a 64 KiB preview, not the whole body.
    let huge = c.put(1024, 0, 60, &vec![b'y'; 5 * 1024 * 1024]);
    go(b, &s.url(&format!("#/job/{huge}"))).await;
    let (note, t) = until(b, "document.getElementById('body-note')?.textContent").await;
    assert_eq!(note, json!("first 64.0 KiB of 5.0 MiB"));
    println!("5 MiB body previewed in {t:?}");
    println!("hostile bodies inert: window.__pwned undefined, no element in the body view");
    id
}

/// A keyed job's key in the tube's list and on its page, and the find-by-key box. A
/// key may hold `$ ( ) ; /` (never `<` or a quote: the protocol refuses them), shown as
/// the text it is.
async fn keyed(b: &Browser, s: &Server, c: &mut Client) {
    let key = "a$(b);c/d";
    c.use_tube("emails");
    // Priority 0: first on the tube's first page, ahead of the paging test's jobs.
    let put = format!("put 0 0 60 1 idp:{key}\r\nk\r\n");
    let id = c.try_call(put.as_bytes(), WAIT).unwrap().id().unwrap();
    go(b, &s.url("#/tube/emails")).await;
    let cell =
        format!("document.querySelector('#jobs-body tr[data-id=\"{id}\"] td.key')?.textContent");
    let (shown, _) = until(b, &cell).await;
    assert_eq!(shown, json!(key));
    b.find(Locator::Id("find-key"))
        .await
        .unwrap()
        .send_keys(key)
        .await
        .unwrap();
    click(b, "find-key-submit").await;
    let (_, t) = until(
        b,
        &format!("document.getElementById('key-job')?.getAttribute('href') === '#/job/{id}'"),
    )
    .await;
    click(b, "key-job").await;
    until(b, &format!("location.hash === '#/job/{id}'")).await;
    let (shown, _) = until(
        b,
        "document.querySelector('td[data-k=\"Key\"]')?.textContent",
    )
    .await;
    assert_eq!(shown, json!(key));
    c.expect(&format!("delete {id}"), "DELETED");
    println!("job {id}'s key shown in the list and on its page; found by key in {t:?}");
}

/// The text of the tube page's find-by-key result once it says `state` (the
/// `data-state` of `#key-state`: a job's state, `deleted` or `unknown`).
async fn key_state(b: &Browser, state: &str) -> String {
    let (text, _) = until(
        b,
        &format!(
            "document.getElementById('key-state')?.dataset.state === '{state}' \
             && document.getElementById('key-state').textContent"
        ),
    )
    .await;
    text.as_str().unwrap().to_string()
}

/// Type `key` into the tube page's find-by-key box and find it.
async fn find_key(b: &Browser, key: &str) {
    js(
        b,
        "document.getElementById('key-result').replaceChildren() || 1",
    )
    .await;
    fill(b, "find-key", key).await;
    click(b, "find-key-submit").await;
}

/// The API's refusal, once shown: it starts with `prefix` and is text only (no element
/// in the error box, no image or script in the page, `window.__pwned` undefined).
async fn refusal(b: &Browser, prefix: &str) -> String {
    let (err, _) = until(
        b,
        "!document.getElementById('error').hidden && document.getElementById('error').textContent",
    )
    .await;
    let err = err.as_str().unwrap().to_string();
    assert!(err.starts_with(prefix), "{err}");
    assert_eq!(js(b, "typeof window.__pwned").await, json!("undefined"));
    assert_eq!(
        js(
            b,
            "document.querySelectorAll('#error *, #main img, #main script').length"
        )
        .await,
        json!(0)
    );
    err
}

/// Acting by key (docs/API.md, *keys*): a job put with `idp:order-7` (a 600 s dedupe
/// window) by a beanstalk client is found by its key on the tube page, delayed (the
/// seconds asked for), kicked, buried and deleted (after a confirmation, dismissed once)
/// through the box's buttons, each state checked against `stats-job`; the key then
/// says "deleted, window open". A second bury is refused (409) and the API's message
/// shows as text; an unknown key says "not found"; a hostile key is refused by the API
/// (400) and shown as text only. On a keyed job's page the same actions by key.
async fn keys_page(b: &Browser, s: &Server, c: &mut Client) {
    c.use_tube("keys");
    let put = b"put 5 0 60 1 idp:order-7:600\r\nx\r\n";
    let id = c.try_call(put, WAIT).unwrap().id().unwrap();
    let state = |c: &mut Client| c.dict_value(&format!("stats-job {id}"), "state");
    go(b, &s.url("#/tube/keys")).await;
    find_key(b, "order-7").await;
    let text = key_state(b, "ready").await;
    assert_eq!(text, format!("key order-7: job {id}, ready"));
    let href = js(b, "document.getElementById('key-job').getAttribute('href')").await;
    assert_eq!(href, json!(format!("#/job/{id}")));
    click(b, "key-delay").await;
    b.send_alert_text("300").await.unwrap();
    b.accept_alert().await.unwrap();
    key_state(b, "delayed").await;
    assert_eq!(state(c), "delayed");
    let left: u64 = c
        .dict_value(&format!("stats-job {id}"), "time-left")
        .parse()
        .unwrap();
    assert!((290..=300).contains(&left), "delayed 300 s: {left} s left");
    click(b, "key-kick").await;
    key_state(b, "ready").await;
    assert_eq!(state(c), "ready");
    click(b, "key-bury").await;
    let (_, t) = until(
        b,
        &format!(
            "document.getElementById('key-state')?.dataset.state === 'buried' \
             && document.querySelector('#jobs-body tr[data-id=\"{id}\"]') === null"
        ),
    )
    .await;
    assert_eq!(state(c), "buried");
    println!("by key: job {id} delayed, kicked and buried from the tube page ({t:?})");
    if s.mode == Mode::Memory {
        screenshot(b, "keys").await;
    }
    // A second bury: the API's 409, as text.
    click(b, "key-bury").await;
    let err = refusal(b, "bury by key failed: conflict: ").await;
    println!("by key: a second bury refused: {err}");
    // Delete asks first: dismissed, the job stays.
    click(b, "key-delete").await;
    b.dismiss_alert().await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(state(c), "buried");
    click(b, "key-delete").await;
    b.accept_alert().await.unwrap();
    let text = key_state(b, "deleted").await;
    assert_eq!(text, format!("key order-7: job {id} deleted, window open"));
    assert_eq!(
        js(b, "document.querySelectorAll('#key-result button').length").await,
        json!(0)
    );
    c.expect(&format!("stats-job {id}"), "NOT_FOUND");
    let found = c.cmd("find-key order-7");
    assert_eq!(found.line, format!("FOUND_KEY {id} DELETED"), "{found:?}");
    // An unknown key.
    find_key(b, "no-such-key").await;
    assert_eq!(key_state(b, "unknown").await, "key no-such-key: not found");
    // A hostile key: refused by the API, its message put in as text.
    find_key(b, HOSTILE).await;
    let err = refusal(b, "find by key failed: bad_request: ").await;
    assert_eq!(
        js(b, "document.getElementById('key-result').textContent").await,
        json!("")
    );
    println!("by key: deleted, window open; unknown: not found; hostile key refused: {err}");
    // A keyed job's page acts by key too.
    let put = b"put 5 0 60 1 idp:order-8\r\ny\r\n";
    let id = c.try_call(put, WAIT).unwrap().id().unwrap();
    go(b, &s.url(&format!("#/job/{id}"))).await;
    until(
        b,
        "document.querySelector('#key-actions code')?.textContent === 'order-8'",
    )
    .await;
    click(b, "key-bury").await;
    until(
        b,
        "document.querySelector('td[data-k=\"State\"]')?.textContent === 'buried'",
    )
    .await;
    assert_eq!(c.dict_value(&format!("stats-job {id}"), "state"), "buried");
    click(b, "key-kick").await;
    until(
        b,
        "document.querySelector('td[data-k=\"State\"]')?.textContent === 'ready'",
    )
    .await;
    click(b, "key-delete").await;
    b.accept_alert().await.unwrap();
    until(b, "location.hash === '#/tube/keys'").await;
    c.expect(&format!("stats-job {id}"), "NOT_FOUND");
    println!("by key: job {id}'s page buried, kicked and deleted it by its key");
    c.use_tube("emails");
}

async fn search(b: &Browser, s: &Server) {
    go(b, &s.url("#/search?q=__pwned")).await;
    let (n, t) = until(b, "document.querySelectorAll('#search-body tr').length").await;
    println!("search for __pwned found {n} jobs in {t:?}");
}

async fn screenshots(b: &Browser, s: &Server, job: u64, scheme: &str) {
    for (page, hash) in [
        ("overview", String::new()),
        ("tube", "#/tube/emails".to_string()),
        ("job", format!("#/job/{job}")),
        ("search", "#/search?q=job%209".to_string()),
        ("clients", "#/clients".to_string()),
        ("login", "#/login".to_string()),
    ] {
        go(b, &s.url(&hash)).await;
        screenshot(b, &format!("{page}-{scheme}")).await;
    }
}

/// The clients page lists the beanstalk client's connection with its used tube (a
/// link to the tube page), and a new connection after a reload.
async fn clients_page(b: &Browser, s: &Server) {
    let mut other = s.client();
    other.use_tube("clients-page-tube");
    go(b, &s.url("#/clients")).await;
    let (_, t) = until(
        b,
        "[...document.querySelectorAll('#clients-body td.using a')]\
         .some(a => a.textContent === 'emails' && a.getAttribute('href') === '#/tube/emails')",
    )
    .await;
    click(b, "clients-refresh").await;
    until(
        b,
        "[...document.querySelectorAll('#clients-body td.using')]\
         .some(td => td.textContent === 'clients-page-tube')",
    )
    .await;
    println!("clients page shows the connections' used tubes in {t:?}");
}

/// 60 more tubes: the overview shows 50, the next page the rest (from the API's cursor).
async fn tube_paging(b: &Browser, c: &mut Client) {
    for i in 0..60 {
        c.use_tube(&format!("t-{i:03}"));
        c.put(1024, 0, 60, b"x");
    }
    c.use_tube("default");
    until(b, "document.querySelectorAll('#tubes-body tr').length === 50 && !document.getElementById('tubes-next').disabled").await;
    click(b, "tubes-next").await;
    let (last, _) = until(b, "document.querySelectorAll('#tubes-body tr').length === 11 && document.querySelector('#tubes-body tr:last-child').dataset.tube").await;
    assert_eq!(last, json!("t-059"));
    println!("overview: 61 tubes in pages of 50");
}

async fn read_only(driver: &Driver, mode: Mode) {
    let server = Server::start_as(mode, &["--admin-read-only", "--admin-read-auth"]);
    let mut c = server.client();
    let id = c.put(1024, 0, 60, b"keep me");
    let b = driver.browser(false).await;
    // Reads need the token too: the console opens on its login page.
    go(&b, &server.url("")).await;
    until(
        &b,
        "location.hash === '#/login' && document.getElementById('token')",
    )
    .await;
    login(&b, &server).await;
    until(
        &b,
        "document.querySelector('#tubes-body tr[data-tube=\"default\"]')",
    )
    .await;
    until(&b, "document.getElementById('live').textContent === 'live'").await;
    tube_paging(&b, &mut c).await;
    go(&b, &server.url("#/tube/default")).await;
    let row = format!("#jobs-body tr[data-id=\"{id}\"] input.sel");
    until(&b, &format!("document.querySelector('{row}')")).await;
    click_at(&b, Locator::Css(&row)).await;
    click(&b, "act-delete").await;
    // The page asks before deleting.
    b.accept_alert().await.unwrap();
    let (err, _) = until(
        &b,
        "!document.getElementById('error').hidden && document.getElementById('error').textContent",
    )
    .await;
    assert!(err.as_str().unwrap().contains("read_only"), "{err}");
    assert!(c.cmd(&format!("peek {id}")).line.starts_with("FOUND"));
    println!("read-only: the delete is refused and the page says {err}");
    b.close().await.unwrap();
}

/// A response's status and its `Retry-After` (seconds), if any.
fn status_and_retry<B>(r: &ureq::http::Response<B>) -> (u16, Option<u64>) {
    let retry = r
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok()?.parse().ok());
    (r.status().as_u16(), retry)
}

/// `POST /console/login` with `token`: status, `Retry-After`.
fn post_login(s: &Server, token: &str) -> (u16, Option<u64>) {
    let r = agent()
        .post(format!("http://{}/console/login", s.http))
        .send_json(json!({ "token": token }))
        .unwrap();
    status_and_retry(&r)
}

/// `POST /api/v1/tubes/default/pause` (delay 0) with `Authorization: Bearer token`:
/// status, `Retry-After`.
fn post_bearer(s: &Server, token: &str) -> (u16, Option<u64>) {
    let r = agent()
        .post(format!("http://{}/api/v1/tubes/default/pause", s.http))
        .header("Authorization", &format!("Bearer {token}"))
        .send_json(json!({ "delay": 0 }))
        .unwrap();
    status_and_retry(&r)
}

/// The login, and the API's `Authorization: Bearer`, take `--admin-login-limit` wrong
/// tokens per address per window, then answer 429 with `Retry-After` (the right token
/// too), and take the token again once the window (shortened for the test) has passed.
/// Before, the API took any number of guesses.
#[test]
fn login_guessing_is_bounded() {
    const WINDOW: Duration = Duration::from_millis(1500);
    let window_ms = WINDOW.as_millis().to_string();
    let s = Server::start(&[
        "--admin-login-limit",
        "3",
        "--admin-login-window-ms",
        &window_ms,
    ]);
    guessing_is_bounded(&s, "login", WINDOW, post_login);
    guessing_is_bounded(&s, "API bearer", WINDOW, post_bearer);
}

fn guessing_is_bounded(
    s: &Server,
    path: &str,
    window: Duration,
    send: fn(&Server, &str) -> (u16, Option<u64>),
) {
    const LIMIT: usize = 3;
    // A loaded machine may stall past the window mid-sequence (which resets the
    // counts): the sequence is then tried again.
    for attempt in 1..=5 {
        let start = Instant::now();
        let wrong: Vec<u16> = (0..LIMIT).map(|_| send(s, "guess").0).collect();
        let limited = send(s, "guess");
        let right = send(s, TOKEN);
        let took = start.elapsed();
        if took >= window {
            println!("{path}: attempt {attempt} took {took:?}, past the window: again");
            std::thread::sleep(window);
            continue;
        }
        assert_eq!(
            wrong,
            vec![401; LIMIT],
            "{path}: wrong tokens are 401 up to the limit"
        );
        assert_eq!(limited.0, 429, "{path}: the next wrong token");
        assert_eq!(right.0, 429, "{path}: the right token too, while limited");
        let retry = limited.1.expect("Retry-After");
        assert!((1..=2).contains(&retry), "Retry-After {retry}");
        let limited_at = Instant::now();
        let deadline = limited_at + WAIT;
        while send(s, TOKEN).0 == 429 {
            assert!(
                Instant::now() < deadline,
                "{path}: still limited after {WAIT:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        println!(
            "{path}: {LIMIT} wrong tokens 401, then 429 (Retry-After {retry} s); \
             the token taken again {:?} later (window {window:?})",
            limited_at.elapsed()
        );
        assert_eq!(send(s, TOKEN).0, 200);
        return;
    }
    panic!("{path}: the machine never ran the sequence within the window");
}

/// Nine console tabs in one browser stay usable and live. A browser opens at most six
/// HTTP/1.1 connections to a server and an event stream holds one for its life: with a
/// stream per tab the seventh tab's page never loaded. The tabs share one stream (one
/// tab streams and relays over a BroadcastChannel), so the last tab loads, goes live,
/// and the server sees one stream, or two for a moment while tabs hand it over.
async fn many_tabs(b: &Browser, s: &Server, c: &mut Client) {
    let home = b.window().await.unwrap();
    go(b, &s.url("")).await;
    let mut opened = Vec::new();
    let start = Instant::now();
    for i in 0..8 {
        let w = b.new_window(true).await.unwrap();
        b.switch_to_window(w.handle.clone()).await.unwrap();
        opened.push(w.handle);
        tokio::time::timeout(WAIT, go(b, &s.url("")))
            .await
            .unwrap_or_else(|_| panic!("tab {} of one browser did not load in {WAIT:?}", i + 2));
    }
    until(b, "document.getElementById('live').textContent === 'live'").await;
    println!(
        "9 tabs in one browser: all loaded and the last live after {:?}",
        start.elapsed()
    );
    live_put(b, s, c, "tabs-live").await;
    let (_, metrics) = http_get(s.http, "/metrics");
    let streams = metrics
        .lines()
        .find_map(|l| l.strip_prefix("redstalk_console_event_streams "))
        .and_then(|v| v.parse::<u64>().ok());
    println!("9 tabs in one browser: {streams:?} event streams open on the server");
    assert!(streams.is_some_and(|n| (1..=2).contains(&n)), "{streams:?}");
    for w in opened {
        b.switch_to_window(w).await.unwrap();
        b.close_window().await.unwrap();
    }
    b.switch_to_window(home).await.unwrap();
}

/// Replace the value of field `id` with `text`.
async fn fill(b: &Browser, id: &str, text: &str) {
    let input = b.find(Locator::Id(id)).await.unwrap();
    input.clear().await.unwrap();
    if !text.is_empty() {
        input.send_keys(text).await.unwrap();
    }
}

/// Set the rule of `tubes` through the policies page's form: `fields` are (field id,
/// value), every other field emptied.
async fn set_rule(b: &Browser, tubes: &str, fields: &[(&str, &str)]) {
    fill(b, "pol-tubes", tubes).await;
    for id in [
        "pol-reserves",
        "pol-timeouts",
        "pol-base",
        "pol-factor",
        "pol-max",
        "pol-jitter",
    ] {
        let value = fields
            .iter()
            .find(|(f, _)| *f == id)
            .map_or("", |(_, v)| *v);
        fill(b, id, value).await;
    }
    click(b, "pol-submit").await;
}

/// Click the Remove button of `tubes`'s row; the confirmation accepted or dismissed.
async fn remove_rule(b: &Browser, tubes: &str, accept: bool) {
    let button = format!("#policies-body tr[data-tubes=\"{tubes}\"] button.remove");
    click_at(b, Locator::Css(&button)).await;
    if accept {
        b.accept_alert().await.unwrap();
    } else {
        b.dismiss_alert().await.unwrap();
    }
}

/// The policies page (`#/policies`): a rule set through the form (dead letter after 2
/// reserves for `pc*`) shows in the table; a job of `pc-1` reserved and released twice
/// by a beanstalk client is buried, marked in the tube's buried list, and its page
/// gives the reason; the tube page names the governing rule; a bad pattern
/// (hostile-looking) shows the API's message as text; a removal asks first, and once
/// accepted the table is empty.
async fn policies_page(b: &Browser, s: &Server, c: &mut Client) {
    go(b, &s.url("#/policies")).await;
    until(
        b,
        "document.getElementById('nav-policies').hasAttribute('aria-current') \
         && document.getElementById('policies-persisted')?.textContent",
    )
    .await;
    let persisted = js(
        b,
        "document.getElementById('policies-persisted').textContent",
    )
    .await;
    let lasts = persisted
        .as_str()
        .unwrap()
        .contains("while this process runs");
    assert_eq!(lasts, s.mode == Mode::Memory, "{persisted}");
    // A bad pattern (tube names have no `<`, `"` or space): the API's message, as text.
    let hostile = r#"<img src=x onerror="window.__pwned=1">*"#;
    set_rule(b, hostile, &[("pol-reserves", "2")]).await;
    let err = refusal(b, "set policy failed: bad_request: ").await;
    println!("policies: a hostile pattern refused, shown as text: {err}");
    // The rule of pc*, and one with every field for mail*.
    set_rule(b, "pc*", &[("pol-reserves", "2")]).await;
    let (_, t) = until(
        b,
        "document.querySelector('#policies-body tr[data-tubes=\"pc*\"] td[data-k=\"reserves\"]')?.textContent === '2' \
         && document.getElementById('error').hidden",
    )
    .await;
    println!("policies: pc* set through the form, in the table after {t:?}");
    set_rule(
        b,
        "mail*",
        &[
            ("pol-timeouts", "3"),
            ("pol-base", "1500"),
            ("pol-factor", "2.5"),
            ("pol-max", "60000"),
            ("pol-jitter", "0.2"),
        ],
    )
    .await;
    let (row, _) = until(
        b,
        "[...document.querySelectorAll('#policies-body tr[data-tubes=\"mail*\"] td[data-k]')]\
         .map(td => td.textContent).join('|')",
    )
    .await;
    assert_eq!(row, json!("mail*|–|3|1.5 s|2.5|1 min 0 s|20%"));
    let (_, api) = http_get_auth(s.http, "/api/v1/policies");
    let api: Value = serde_json::from_str(&api).unwrap();
    assert_eq!(
        api["policies"],
        json!([
            {"tubes": "mail*", "dead_letter": {"timeouts": 3},
             "backoff": {"base_ms": 1500, "factor": 2.5, "max_ms": 60000, "jitter": 0.2}},
            {"tubes": "pc*", "dead_letter": {"reserves": 2}},
        ]),
        "{api}"
    );
    // The governing rule, as the server picks it.
    let picks = js(
        b,
        "(() => { const rules = [{tubes: '*'}, {tubes: 'pc*'}, {tubes: 'pc-*'}, {tubes: 'pc-1'}];\
           return ['pc-1', 'pc-2', 'pc', 'other'].map(t => governingRule(rules, t)?.tubes); })()",
    )
    .await;
    assert_eq!(picks, json!(["pc-1", "pc-*", "pc*", "*"]));
    // Failing twice in pc-1 buries the job.
    c.use_tube("pc-1");
    let id = c.put(1024, 0, 60, b"fails");
    for _ in 0..2 {
        assert_eq!(c.cmd(&format!("reserve-job {id}")).word(), "RESERVED");
        c.expect(&format!("release {id} 1 0"), "RELEASED");
    }
    assert_eq!(c.dict_value(&format!("stats-job {id}"), "state"), "buried");
    go(b, &s.url("#/tube/pc-1?state=buried")).await;
    until(
        b,
        "document.getElementById('tube-policy')?.dataset.tubes === 'pc*'",
    )
    .await;
    let (title, _) = until(
        b,
        &format!("document.querySelector('#jobs-body tr[data-id=\"{id}\"] .badge.dead')?.title"),
    )
    .await;
    assert_eq!(title, json!("dead letter: reserved 2 times (limit 2)"));
    if s.mode == Mode::Memory {
        screenshot(b, "policies-tube").await;
    }
    go(b, &s.url(&format!("#/job/{id}"))).await;
    let (reason, _) = until(
        b,
        "document.querySelector('td[data-k=\"Dead letter\"]')?.textContent",
    )
    .await;
    assert_eq!(reason, json!("reserved 2 times (limit 2)"));
    if s.mode == Mode::Memory {
        screenshot(b, "policies-job").await;
    }
    println!("policies: job {id} buried by pc*; its page says {reason}");
    go(b, &s.url("#/tube/other-tube")).await;
    let (line, _) = until(
        b,
        "document.getElementById('tube-policy')?.dataset.tubes === '' \
         && document.getElementById('tube-policy').textContent",
    )
    .await;
    assert!(line.as_str().unwrap().starts_with("No policy"), "{line}");
    go(b, &s.url("#/policies")).await;
    until(
        b,
        "document.querySelectorAll('#policies-body tr[data-tubes]').length === 2",
    )
    .await;
    if s.mode == Mode::Memory {
        screenshot(b, "policies").await;
    }
    // Edit fills the form with a row's rule.
    click_at(
        b,
        Locator::Css("#policies-body tr[data-tubes=\"mail*\"] button.edit"),
    )
    .await;
    let form = js(
        b,
        "['pol-tubes', 'pol-reserves', 'pol-timeouts', 'pol-base', 'pol-factor', 'pol-max', 'pol-jitter']\
         .map(id => document.getElementById(id).value).join('|')",
    )
    .await;
    assert_eq!(form, json!("mail*||3|1500|2.5|60000|0.2"));
    // Removal asks first: dismissed, the rule stays.
    remove_rule(b, "pc*", false).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        js(
            b,
            "document.querySelectorAll('#policies-body tr[data-tubes]').length"
        )
        .await,
        json!(2)
    );
    remove_rule(b, "pc*", true).await;
    until(
        b,
        "document.querySelectorAll('#policies-body tr[data-tubes]').length === 1",
    )
    .await;
    remove_rule(b, "mail*", true).await;
    let (_, t) = until(
        b,
        "document.querySelectorAll('#policies-body tr[data-tubes]').length === 0 \
         && document.getElementById('policies-body').textContent === 'no rules'",
    )
    .await;
    let (_, api) = http_get_auth(s.http, "/api/v1/policies");
    assert!(api.contains("\"policies\":[]"), "{api}");
    println!("policies: removed through the page (after a confirmation), table empty after {t:?}");
    c.use_tube("emails");
}

/// [`http_get_auth`]'s change: `method` on `path` with the token and a JSON `body`.
fn http_send_auth(http: SocketAddr, method: &str, path: &str, body: &str) -> (u16, String) {
    let request = ureq::http::Request::builder()
        .method(method)
        .uri(format!("http://{http}{path}"))
        .header("Authorization", format!("Bearer {TOKEN}"))
        .header("Content-Type", "application/json")
        .body(body.to_string())
        .unwrap();
    match agent().run(request) {
        Ok(mut r) => (r.status().as_u16(), r.body_mut().read_to_string().unwrap()),
        Err(_) => (0, String::new()),
    }
}

/// The schedules pages (`#/schedules`, `#/schedules/NAME`; docs/SCHEDULES.md).
async fn schedules_page(b: &Browser, s: &Server) {
    let doc = json!({"tube": "reports", "cron": "0 3 * * *", "tz": "Europe/Berlin",
        "body": "<script>window.__pwned=1</script>", "key": "nightly"});
    let (status, text) =
        http_send_auth(s.http, "PUT", "/api/v1/schedules/nightly", &doc.to_string());
    assert_eq!(status, 200, "{text}");
    go(b, &s.url("#/schedules")).await;
    let (next, t) = until(
        b,
        "document.getElementById('nav-schedules').hasAttribute('aria-current') \
         && document.querySelector('#schedules-body tr[data-name=\"nightly\"] td[data-k=\"next\"]')?.textContent",
    )
    .await;
    let next = next.as_str().unwrap().to_string();
    assert!(next.contains("T03:00:00+0"), "3 am in Berlin: {next}");
    let (row, _) = until(
        b,
        "[...document.querySelectorAll('#schedules-body tr[data-name=\"nightly\"] td[data-k]')]\
         .map(td => td.textContent).join('|')",
    )
    .await;
    assert_eq!(
        row,
        json!(format!(
            "nightly|reports|cron 0 3 * * *|Europe/Berlin|{next}|–|active|0|0|0"
        ))
    );
    println!("schedules: one made through the API listed after {t:?}, next {next}");

    // A hostile-looking name: the API's message, as text.
    fill(b, "sch-name", r#"<img src=x onerror="window.__pwned=1">"#).await;
    fill(b, "sch-tube", "beats").await;
    fill(b, "sch-every", "3600").await;
    click(b, "sch-submit").await;
    let err = refusal(b, "save schedule failed: bad_request: ").await;
    println!("schedules: a hostile name refused, shown as text: {err}");
    fill(b, "sch-name", "beat").await;
    click(b, "sch-submit").await;
    until(
        b,
        "document.querySelector('#schedules-body tr[data-name=\"beat\"] td[data-k=\"spec\"]')?.textContent === 'every 1 h 0 min' \
         && document.getElementById('error').hidden",
    )
    .await;
    let (_, api) = http_get_auth(s.http, "/api/v1/schedules/beat");
    let api: Value = serde_json::from_str(&api).unwrap();
    assert_eq!(
        (&api["tube"], &api["every_ms"]),
        (&json!("beats"), &json!(3_600_000)),
        "{api}"
    );
    click_at(
        b,
        Locator::Css("#schedules-body tr[data-name=\"beat\"] button.remove"),
    )
    .await;
    b.accept_alert().await.unwrap();
    until(
        b,
        "document.querySelectorAll('#schedules-body tr[data-name]').length === 1",
    )
    .await;
    assert_eq!(http_get_auth(s.http, "/api/v1/schedules/beat").0, 404);
    if s.mode == Mode::Memory {
        screenshot(b, "schedules").await;
    }

    // Its page: the next ticks, Run now, Pause.
    click_at(
        b,
        Locator::Css("#schedules-body tr[data-name=\"nightly\"] a.schedule"),
    )
    .await;
    until(
        b,
        "document.getElementById('schedule-name')?.textContent === 'nightly' \
         && document.querySelectorAll('#schedule-next tr').length === 5",
    )
    .await;
    let mut w = s.client();
    w.watch_only("reports");
    click_at(b, Locator::Css("#schedule-actions button.run")).await;
    let (notice, _) = until(
        b,
        "document.getElementById('notice').textContent.startsWith('put job') \
         && document.getElementById('notice').textContent",
    )
    .await;
    let (id, body) = w.reserve_timeout(5).expect("the run's job");
    assert_eq!(notice, json!(format!("put job {id}")));
    assert_eq!(body, b"<script>window.__pwned=1</script>");
    w.expect(&format!("delete {id}"), "DELETED");
    click_at(b, Locator::Css("#schedule-actions button.pause")).await;
    let (_, t) = until(
        b,
        "document.getElementById('schedule-state')?.textContent === 'paused' \
         && document.querySelector('#schedule-actions button.resume') \
         && document.getElementById('schedule-next').textContent === 'paused: no ticks'",
    )
    .await;
    let (_, api) = http_get_auth(s.http, "/api/v1/schedules/nightly");
    assert!(api.contains("\"paused\":true"), "{api}");
    assert_eq!(js(b, "typeof window.__pwned").await, json!("undefined"));
    if s.mode == Mode::Memory {
        screenshot(b, "schedule").await;
    }
    println!("schedules: run put job {id}; paused through its page after {t:?}");
    let (status, _) = http_send_auth(s.http, "DELETE", "/api/v1/schedules/nightly", "");
    assert_eq!(status, 200);
}

/// Retention's pages (`--retain 1h --retain-bodies`, memory mode): a job's page shows
/// its history as a timeline while it lives; once deleted by a beanstalk client its
/// page still opens, says "deleted", draws the timeline (put, reserve, release,
/// reserve, delete, in order) and shows the kept body — a hostile one as inert text
/// (`window.__pwned` undefined, no element in the body view, no image); the tube
/// page's "Find by key" links a deleted keyed job's record; the Retained link shows
/// and its page lists the records. Screenshots: `retained-job`, `retained`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_retained_jobs() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let driver = Driver::start();
    let server = Server::start(&["--retain", "1h", "--retain-bodies"]);
    let b = driver.browser(false).await;
    let mut c = server.client();
    c.use_tube("kept");
    c.watch_only("kept");
    let id = c.put(1024, 0, 60, HOSTILE.as_bytes());
    let (got, _) = c.reserve();
    assert_eq!(got, id);

    // Alive: the timeline so far.
    go(&b, &server.url(&format!("#/job/{id}"))).await;
    let (n, _) = until(
        &b,
        "document.querySelectorAll('#job-history li[data-event]').length",
    )
    .await;
    assert_eq!(n, json!(2), "put and reserve");

    c.expect(&format!("release {id} 1024 0"), "RELEASED");
    let (got, _) = c.reserve();
    assert_eq!(got, id);
    c.expect(&format!("delete {id}"), "DELETED");

    // Deleted: the record's page (by way of another page: opening the URL the
    // browser shows already would not route again).
    go(&b, &server.url("")).await;
    go(&b, &server.url(&format!("#/job/{id}"))).await;
    let (state, t) = until(&b, "document.getElementById('job-state')?.textContent").await;
    assert_eq!(state, json!("deleted"));
    println!("deleted job {id}'s page in {t:?}");
    let kinds = js(
        &b,
        "[...document.querySelectorAll('#job-history li[data-event]')].map(li => li.dataset.event)",
    )
    .await;
    assert_eq!(
        kinds,
        json!(["put", "reserve", "release", "reserve", "delete"])
    );
    let (text, _) = until(&b, "document.getElementById('job-body')?.textContent").await;
    assert_eq!(text, json!(HOSTILE));
    assert_eq!(js(&b, "typeof window.__pwned").await, json!("undefined"));
    assert_eq!(
        js(&b, "document.querySelectorAll('#job-body *').length").await,
        json!(0)
    );
    assert_eq!(
        js(&b, "document.querySelectorAll('img').length").await,
        json!(0)
    );
    screenshot(&b, "retained-job").await;

    // Find by key: a deleted keyed job's record.
    let put = c.try_call(b"put 5 0 60 1 idp:order-9:600\r\nk\r\n", WAIT);
    let keyed = put.unwrap().id().expect("INSERTED");
    c.expect(&format!("delete {keyed}"), "DELETED");
    go(&b, &server.url("#/tube/kept")).await;
    until(&b, "document.getElementById('find-key')").await;
    find_key(&b, "order-9").await;
    let (href, _) = until(
        &b,
        "document.getElementById('key-job')?.getAttribute('href')",
    )
    .await;
    assert_eq!(href, json!(format!("#/job/{keyed}")));
    let said = js(&b, "document.getElementById('key-state').textContent").await;
    assert!(said.as_str().unwrap().contains("retained"), "{said}");

    // The Retained page, from its link.
    until(&b, "!document.getElementById('nav-retained').hidden").await;
    go(&b, &server.url("#/retained")).await;
    let (rows, _) = until(
        &b,
        "document.querySelectorAll('#retained-body tr[data-id]').length",
    )
    .await;
    assert_eq!(rows, json!(2));
    let summary = js(
        &b,
        "document.getElementById('retained-summary').textContent",
    )
    .await;
    assert!(summary.as_str().unwrap().contains("2 records"), "{summary}");
    screenshot(&b, "retained").await;
    b.close().await.unwrap();
}

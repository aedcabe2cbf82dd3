//! For unit tests: a private `redis-server` on a unix socket in a temporary directory
//! (no port taken, nothing persisted), killed when dropped, and the check that Lua
//! scripts load into it. Tests never touch a Redis that may run on 6379.
//!
//! A missing `redis-server` skips the test loudly, or fails it under
//! `REDSTALK_REQUIRE_ORACLE=1` (`.ci/test` sets it), as the protocol tests do.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A private `redis-server`, killed (and its directory removed) when dropped.
pub(crate) struct PrivateRedis {
    child: Child,
    dir: PathBuf,
    /// The TCP port it also listens on ([`PrivateRedis::start_tcp`]).
    port: Option<u16>,
}

impl PrivateRedis {
    /// Start one, or `None` (said loudly, naming `what`) when redis-server is not
    /// installed and not required.
    pub(crate) fn start(what: &str) -> Option<PrivateRedis> {
        PrivateRedis::spawn(what, None)
    }

    /// [`PrivateRedis::start`], listening on a free port of 127.0.0.1 as well (for code
    /// that connects by URL, as a server does; never 6379).
    pub(crate) fn start_tcp(what: &str) -> Option<PrivateRedis> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        PrivateRedis::spawn(what, Some(port))
    }

    /// `redis://127.0.0.1:<port>/0` of one started by [`PrivateRedis::start_tcp`].
    pub(crate) fn url(&self) -> Option<String> {
        self.port.map(|p| format!("redis://127.0.0.1:{p}/0"))
    }

    fn spawn(what: &str, port: Option<u16>) -> Option<PrivateRedis> {
        let program = std::env::var_os("REDIS_SERVER")
            .map(PathBuf::from)
            .or_else(|| find_on_path("redis-server"));
        let Some(program) = program else {
            assert!(
                std::env::var("REDSTALK_REQUIRE_ORACLE").as_deref() != Ok("1"),
                "redis-server is required (REDSTALK_REQUIRE_ORACLE=1) but not installed"
            );
            eprintln!("!!! redis-server is not installed: {what} SKIPPED.");
            return None;
        };
        let dir = std::env::temp_dir().join(format!(
            "redstalk-unit-redis-{}-{}",
            std::process::id(),
            rand::random::<u64>()
        ));
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        let port_arg = port.unwrap_or(0).to_string();
        let child = Command::new(program)
            .args(["--bind", "127.0.0.1", "--port", &port_arg, "--unixsocket"])
            .arg(dir.join("redis.sock"))
            .args(["--save", "", "--appendonly", "no", "--dir"])
            .arg(&dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn redis-server");
        let redis = PrivateRedis { child, dir, port };
        let started = Instant::now();
        while redis.connection().is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "redis-server did not answer on {} within 10 s",
                redis.socket().display()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        Some(redis)
    }

    fn socket(&self) -> PathBuf {
        self.dir.join("redis.sock")
    }

    /// A plain (blocking) connection.
    pub(crate) fn connection(&self) -> redis::RedisResult<redis::Connection> {
        let url = format!("redis+unix://{}", self.socket().display());
        redis::Client::open(url)?.get_connection()
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// Load every Redis Function library of `libraries` (name, text) into a private Redis
/// with FUNCTION LOAD, which compiles each and runs its top level (where a library
/// that reads a call's KEYS, or calls Redis, fails): each failure named with Redis'
/// message. Skipped (loudly) without redis-server, as [`PrivateRedis::start`].
pub(crate) fn assert_libraries_load(what: &str, libraries: &[(&str, &str)]) {
    assert_each_loads(what, "libraries", libraries, |conn, name, text| {
        redis::cmd("FUNCTION")
            .arg("LOAD")
            .arg(text)
            .query::<String>(conn)
            .map(|loaded| assert!(text.contains(&loaded), "{name}: loaded as {loaded}"))
    });
}

/// Load every script of `scripts` (name, text) into a private Redis with SCRIPT LOAD,
/// which compiles it: a script that does not compile fails the test, each named with
/// Redis' message. Skipped (loudly) without redis-server, as [`PrivateRedis::start`].
pub(crate) fn assert_scripts_load(what: &str, scripts: &[(&str, &str)]) {
    assert_each_loads(what, "scripts", scripts, |conn, name, text| {
        let script = redis::Script::new(text);
        script
            .load(conn)
            .map(|sha| assert_eq!(sha, script.get_hash(), "{name}: Redis' SHA"))
    });
}

/// `load` each of `items` (name, text) on one private Redis; fails naming every item
/// Redis refused, with its message.
fn assert_each_loads(
    what: &str,
    kind: &str,
    items: &[(&str, &str)],
    load: impl Fn(&mut redis::Connection, &str, &str) -> redis::RedisResult<()>,
) {
    let Some(redis) = PrivateRedis::start(what) else {
        return;
    };
    let mut conn = redis
        .connection()
        .expect("a connection to the private Redis");
    let failed: Vec<String> = items
        .iter()
        .filter_map(|(name, text)| {
            load(&mut conn, name, text)
                .err()
                .map(|e| format!("{name}: {e}"))
        })
        .collect();
    assert!(
        failed.is_empty(),
        "{kind} Redis cannot load:\n{}",
        failed.join("\n")
    );
    eprintln!("{what}: {} {kind} loaded into redis-server", items.len());
}

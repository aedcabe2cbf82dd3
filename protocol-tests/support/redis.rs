//! A private `redis-server` for one test: on a free port, in a temporary directory,
//! persisting nothing unless asked, killed when dropped. Tests never touch the Redis
//! that may run on 6379.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{free_port, is_listening_by};

/// Path of `redis-server`: `$REDIS_SERVER` or the first on PATH.
pub fn redis_server_path() -> Option<PathBuf> {
    super::find_program("REDIS_SERVER", "redis-server")
}

/// A private Redis started with `extra` arguments, or `None` (the caller skips, after a
/// loud notice naming `what`) when redis-server is missing and not required.
pub fn private_redis(extra: &[&str], what: &str) -> Option<RedisServer> {
    if redis_server_path().is_none() {
        assert!(
            !super::oracle_required(),
            "redis-server is required (REDSTALK_REQUIRE_ORACLE=1) but not installed"
        );
        eprintln!("!!! redis-server is not installed: the {what} are SKIPPED.");
        return None;
    }
    Some(RedisServer::start_with(extra).expect("start redis-server"))
}

pub struct RedisServer {
    pub port: u16,
    child: Option<Child>,
    dir: PathBuf,
    extra: Vec<String>,
    /// Listens with TLS only (`--port 0`, `--tls-port` = [`RedisServer::port`]).
    tls_only: bool,
}

impl RedisServer {
    /// Start one with no persistence.
    pub fn start() -> Result<RedisServer, String> {
        Self::start_with(&[])
    }

    /// Start one with extra `redis-server` arguments (e.g. `--appendonly yes`).
    pub fn start_with(extra: &[&str]) -> Result<RedisServer, String> {
        Self::start_listening(extra, false)
    }

    /// Start one that listens with TLS only, on [`RedisServer::port`]; `extra` names its
    /// certificates (`--tls-cert-file`...).
    pub fn start_tls_only(extra: &[&str]) -> Result<RedisServer, String> {
        Self::start_listening(extra, true)
    }

    fn start_listening(extra: &[&str], tls_only: bool) -> Result<RedisServer, String> {
        let dir = std::env::temp_dir().join(format!(
            "redstalk-test-redis-{}-{}",
            std::process::id(),
            free_port()
        ));
        std::fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
        let mut server = RedisServer {
            port: 0,
            child: None,
            dir,
            extra: extra.iter().map(|s| s.to_string()).collect(),
            tls_only,
        };
        server.spawn()?;
        Ok(server)
    }

    /// (Re)start the process: on a new free port the first time, on the same port (and
    /// data directory) after [`RedisServer::kill`].
    pub fn spawn(&mut self) -> Result<(), String> {
        let program = redis_server_path().ok_or("redis-server is not installed")?;
        let first_start = self.port == 0;
        for _ in 0..5 {
            if self.port == 0 {
                self.port = free_port();
            }
            let mut cmd = Command::new(&program);
            if self.tls_only {
                cmd.args(["--port", "0", "--tls-port"]);
            } else {
                cmd.arg("--port");
            }
            cmd.arg(self.port.to_string());
            cmd.args(["--bind", "127.0.0.1", "--save", ""]);
            cmd.arg("--dir").arg(&self.dir);
            // Its own words, for the error below when it never listens.
            cmd.arg("--logfile").arg(self.dir.join("redis.log"));
            if !self.extra.iter().any(|a| a == "--appendonly") {
                cmd.args(["--appendonly", "no"]);
            }
            cmd.args(&self.extra);
            cmd.stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            let mut child = cmd
                .spawn()
                .map_err(|e| format!("spawn redis-server: {e}"))?;
            let started = Instant::now();
            while started.elapsed() < Duration::from_secs(5) {
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                if is_listening_by(child.id(), self.port) {
                    self.child = Some(child);
                    return Ok(());
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            let _ = child.kill();
            let _ = child.wait();
            if first_start {
                // The port was taken meanwhile: try another.
                self.port = 0;
            } else {
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        Err(format!(
            "redis-server did not start (5 attempts); its log ends:\n{}",
            self.log_tail(8)
        ))
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// Stop the process (SIGKILL); `spawn` brings it back on the same port and data
    /// directory.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// The last `n` lines of its log (`redis.log` in its directory).
    pub fn log_tail(&self, n: usize) -> String {
        let text = std::fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

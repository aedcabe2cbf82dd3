//! A private replicated Redis for one test: a primary, one replica and three sentinels
//! (`redis-server --sentinel` with a generated configuration), all on free ports, with
//! short sentinel timeouts so a failover takes a few seconds. Killed when dropped.
//! Tests never touch the Redis that may run on 6379.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::free_port;
use super::redis::{RedisServer, redis_server_path};

/// The name the sentinels monitor the primary under.
pub const MASTER: &str = "redstalk";
/// How long a primary may not answer before a sentinel thinks it down. Not shorter: with
/// 1 s, a sentinel on the loaded 2-core CI machine once took a primary promoted a second
/// earlier for down, and failed over back to the old primary just restarted empty.
const DOWN_AFTER_MS: u64 = 3000;

/// The whole set; `servers[0]` starts as primary, `servers[1]` as its replica.
pub struct Sentinels {
    pub servers: Vec<RedisServer>,
    sentinels: Vec<(u16, Child)>,
    dir: PathBuf,
}

/// One `redis-cli` command against 127.0.0.1:`port`: its output, or `None` when it
/// failed (the server is down).
pub fn cli(port: u16, args: &[&str]) -> Option<String> {
    cli_output(
        Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &port.to_string()])
            .args(args),
    )
}

/// Run `cmd` (a `redis-cli` command line) with no input: its output, or `None` when it
/// failed.
pub fn cli_output(cmd: &mut Command) -> Option<String> {
    let out = cmd
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Poll `cond` every 20 ms for up to `timeout`; panics naming `what`.
pub fn wait_for(what: &str, timeout: Duration, mut cond: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < timeout, "{what}: not within {timeout:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    start.elapsed()
}

impl Sentinels {
    /// Start the primary, its replica (in sync) and three sentinels that know both and
    /// each other; `None` (after a notice) when redis-server is missing and not
    /// required.
    pub fn start() -> Option<Sentinels> {
        Self::start_with(&[])
    }

    /// [`Sentinels::start`] with `primary_extra` arguments for the primary (its
    /// `--dir`, its persistence...).
    pub fn start_with(primary_extra: &[&str]) -> Option<Sentinels> {
        let primary = super::redis::private_redis(primary_extra, "sentinel tests")?;
        let port = primary.port.to_string();
        let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &port])
            .expect("start the replica");
        let dir = std::env::temp_dir().join(format!(
            "redstalk-test-sentinels-{}-{}",
            std::process::id(),
            free_port()
        ));
        std::fs::create_dir_all(&dir).expect("sentinel directory");
        let mut set = Sentinels {
            servers: vec![primary, replica],
            sentinels: Vec::new(),
            dir,
        };
        set.wait_replica_synced(1);
        for i in 0..3 {
            set.sentinels.push(set.spawn_sentinel(i));
        }
        // Each sentinel must know the replica and the two other sentinels before a
        // failover can elect one of them and promote the replica.
        for &(port, _) in &set.sentinels {
            wait_for(
                "a sentinel knows the replica and the other sentinels",
                Duration::from_secs(20),
                || {
                    cli(port, &["INFO", "sentinel"])
                        .is_some_and(|i| i.contains("slaves=1,sentinels=3"))
                },
            );
        }
        Some(set)
    }

    fn spawn_sentinel(&self, i: usize) -> (u16, Child) {
        let program = redis_server_path().expect("redis-server");
        let port = free_port();
        let conf = self.dir.join(format!("sentinel-{i}.conf"));
        std::fs::write(
            &conf,
            format!(
                "port {port}\nbind 127.0.0.1\ndir {dir}\nlogfile {log}\n\
                 sentinel monitor {MASTER} 127.0.0.1 {primary} 2\n\
                 sentinel down-after-milliseconds {MASTER} {DOWN_AFTER_MS}\n\
                 sentinel failover-timeout {MASTER} 3000\n\
                 sentinel parallel-syncs {MASTER} 1\n",
                dir = self.dir.display(),
                log = self.log_path(i).display(),
                primary = self.servers[0].port,
            ),
        )
        .expect("write the sentinel configuration");
        let child = Command::new(program)
            .arg(&conf)
            .arg("--sentinel")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn a sentinel");
        wait_for("a sentinel listens", Duration::from_secs(5), || {
            super::is_listening_by(child.id(), port)
        });
        (port, child)
    }

    fn log_path(&self, i: usize) -> PathBuf {
        self.dir.join(format!("sentinel-{i}.log"))
    }

    /// What to print beside a failure: the last lines of each sentinel's log (a sentinel
    /// in TILT mode, after its timer ran late on a loaded machine, acts on nothing for
    /// 30 s) and each server's replication role.
    pub fn diagnostics(&self) -> String {
        let mut out = String::new();
        for i in 0..self.sentinels.len() {
            let log = std::fs::read_to_string(self.log_path(i)).unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            out.push_str(&format!("--- sentinel {i}, last lines of its log:\n"));
            for line in &lines[lines.len().saturating_sub(25)..] {
                out.push_str(line);
                out.push('\n');
            }
        }
        for s in &self.servers {
            let role = cli(s.port, &["ROLE"]).unwrap_or_else(|| "(no answer)".into());
            out.push_str(&format!(
                "--- server {}: ROLE {}\n",
                s.port,
                role.replace('\n', " ")
            ));
        }
        out
    }

    /// `redis+sentinel://` naming the three sentinels.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .sentinels
            .iter()
            .map(|(p, _)| format!("127.0.0.1:{p}"))
            .collect();
        format!("redis+sentinel://{}/{MASTER}", hosts.join(","))
    }

    /// The port of the primary the sentinels name now.
    pub fn primary_port(&self) -> Option<u16> {
        let (port, _) = self.sentinels.first()?;
        let out = cli(*port, &["SENTINEL", "get-master-addr-by-name", MASTER])?;
        out.lines().nth(1)?.trim().parse().ok()
    }

    /// Whether server `i` is a replica with its link to the primary up.
    pub fn is_synced_replica(&self, i: usize) -> bool {
        cli(self.servers[i].port, &["INFO", "replication"])
            .is_some_and(|i| i.contains("role:slave") && i.contains("master_link_status:up"))
    }

    /// Wait until server `i` is a replica in sync with the primary.
    pub fn wait_replica_synced(&self, i: usize) {
        wait_for("the replica is in sync", Duration::from_secs(20), || {
            self.is_synced_replica(i)
        });
    }

    /// SIGKILL the server on `port` (the primary); its index.
    pub fn kill_server(&mut self, port: u16) -> usize {
        let i = self
            .servers
            .iter()
            .position(|s| s.port == port)
            .expect("a server of the set");
        self.servers[i].kill();
        i
    }
}

impl Drop for Sentinels {
    fn drop(&mut self) {
        for (_, c) in &mut self.sentinels {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

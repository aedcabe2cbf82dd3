//! Command-line flags: beanstalkd's own (same letters, same meaning, bundled `-VV` and
//! attached `-p11300` forms), plus long options for what beanstalkd does not have,
//! each with a `REDSTALK_*` environment fallback.
//!
//! beanstalkd's binlog flags (`-b`, `-f`, `-F`, `-s`) are accepted by the parser only
//! so that [`Cli::validate`] can refuse them with a message that names `--redis`.

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, Parser};

use crate::protocol::codec::{DEFAULT_MAX_JOB_SIZE, MAX_JOB_SIZE_LIMIT};
use crate::server::ListenAddr;

/// The reference's exit code for a usage error.
pub const EXIT_USAGE: u8 = 5;

#[derive(Parser, Debug, Clone)]
#[command(
    name = "redstalk",
    about = "A beanstalkd-compatible job queue server.",
    disable_help_flag = true,
    disable_version_flag = true
)]
pub struct Cli {
    /// Listen on ADDR (default 0.0.0.0), or on a unix socket with `unix:/path`.
    #[arg(short = 'l', value_name = "ADDR", default_value = "0.0.0.0")]
    pub listen: String,

    /// Listen on PORT (default 11300).
    #[arg(short = 'p', value_name = "PORT", default_value_t = 11300)]
    pub port: u16,

    /// Maximum job size in bytes (default 65535, at most 1073741824).
    #[arg(short = 'z', value_name = "BYTES", default_value_t = u64::from(DEFAULT_MAX_JOB_SIZE))]
    pub max_job_size: u64,

    /// Become USER after binding the socket.
    #[arg(short = 'u', value_name = "USER")]
    pub user: Option<String>,

    /// More output (repeatable): -V logs connections, -VV every command and reply.
    #[arg(short = 'V', action = ArgAction::Count)]
    pub verbose: u8,

    /// Print the version and exit.
    #[arg(short = 'v', action = ArgAction::SetTrue)]
    pub version: bool,

    /// Print this help and exit.
    #[arg(short = 'h', long = "help", action = ArgAction::SetTrue)]
    pub help: bool,

    /// beanstalkd's binlog directory (not supported: use --redis).
    #[arg(short = 'b', value_name = "DIR", hide = true)]
    pub binlog_dir: Option<String>,

    /// beanstalkd's fsync interval (not supported: use --redis).
    #[arg(short = 'f', value_name = "MS", hide = true)]
    pub fsync_ms: Option<String>,

    /// beanstalkd's "never fsync" (not supported: use --redis).
    #[arg(short = 'F', action = ArgAction::SetTrue, hide = true)]
    pub no_fsync: bool,

    /// beanstalkd's binlog file size (not supported: use --redis).
    #[arg(short = 's', value_name = "BYTES", hide = true)]
    pub binlog_size: Option<String>,

    /// Removed in beanstalkd; accepted with a warning, as beanstalkd does.
    #[arg(short = 'c', action = ArgAction::SetTrue, hide = true)]
    pub compact: bool,

    /// Removed in beanstalkd; accepted with a warning, as beanstalkd does.
    #[arg(short = 'n', action = ArgAction::SetTrue, hide = true)]
    pub no_compact: bool,

    /// Keep jobs in Redis at URL (redis://HOST:PORT/DB): durable, and shared by every
    /// redstalk instance with the same URL and prefix. Without it, jobs live in memory.
    #[arg(long, env = "REDSTALK_REDIS", value_name = "URL")]
    pub redis: Option<String>,

    /// Namespace of every Redis key, so several deployments (or test runs) can share
    /// one Redis.
    #[arg(
        long,
        env = "REDSTALK_REDIS_PREFIX",
        value_name = "NAME",
        default_value = "redstalk"
    )]
    pub redis_prefix: String,

    /// Close new connections beyond this many open ones.
    #[arg(
        long,
        env = "REDSTALK_MAX_CONNECTIONS",
        value_name = "N",
        default_value_t = 65_536
    )]
    pub max_connections: usize,

    /// Serve Prometheus metrics (GET /metrics) and health checks (GET /healthz,
    /// /readyz) over HTTP on ADDR (HOST:PORT, e.g. 127.0.0.1:9100). Off by default.
    #[arg(long, env = "REDSTALK_METRICS", value_name = "ADDR")]
    pub metrics: Option<String>,

    /// On SIGTERM/SIGINT, wait this many seconds for connections to finish.
    #[arg(
        long,
        env = "REDSTALK_SHUTDOWN_GRACE",
        value_name = "SECS",
        default_value_t = 5
    )]
    pub shutdown_grace: u64,
}

/// A configuration that cannot run; the message says what to do instead.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error(
        "-{flag} configures beanstalkd's binlog, which redstalk does not have; to keep jobs \
         across restarts, run redstalk with --redis redis://HOST:PORT/DB"
    )]
    Binlog { flag: char },
    #[error("cannot resolve listen address {0:?}")]
    Resolve(String),
    #[error("--metrics {0:?} is not HOST:PORT that resolves (for example 127.0.0.1:9100)")]
    Metrics(String),
}

/// Settings derived from the flags.
#[derive(Clone, Debug)]
pub struct Settings {
    pub listen: ListenAddr,
    /// `None`: the in-memory engine.
    pub redis: Option<crate::store::RedisConfig>,
    pub max_job_size: u32,
    pub user: Option<String>,
    pub verbose: u8,
    pub max_connections: usize,
    pub shutdown_grace: Duration,
    /// Where to serve metrics over HTTP; `None`: not served.
    pub metrics: Option<SocketAddr>,
    pub warnings: Vec<String>,
}

impl Cli {
    pub fn validate(&self) -> Result<Settings, CliError> {
        let binlog = [
            ('b', self.binlog_dir.is_some()),
            ('f', self.fsync_ms.is_some()),
            ('F', self.no_fsync),
            ('s', self.binlog_size.is_some()),
        ];
        if let Some((flag, _)) = binlog.iter().find(|(_, set)| *set) {
            return Err(CliError::Binlog { flag: *flag });
        }
        let mut warnings = Vec::new();
        if self.compact || self.no_compact {
            warnings.push("-c and -n have no effect (as in beanstalkd)".to_string());
        }
        let max_job_size = if self.max_job_size > u64::from(MAX_JOB_SIZE_LIMIT) {
            warnings.push(format!(
                "maximum job size was set to {}, which is too large; using {MAX_JOB_SIZE_LIMIT}",
                self.max_job_size
            ));
            MAX_JOB_SIZE_LIMIT
        } else {
            self.max_job_size as u32
        };
        Ok(Settings {
            listen: self.listen_addr()?,
            redis: self.redis.as_ref().map(|url| crate::store::RedisConfig {
                url: url.clone(),
                prefix: self.redis_prefix.clone(),
            }),
            max_job_size,
            user: self.user.clone(),
            verbose: self.verbose,
            max_connections: self.max_connections.max(1),
            shutdown_grace: Duration::from_secs(self.shutdown_grace),
            metrics: self.metrics_addr()?,
            warnings,
        })
    }

    fn metrics_addr(&self) -> Result<Option<SocketAddr>, CliError> {
        let Some(addr) = &self.metrics else {
            return Ok(None);
        };
        addr.to_socket_addrs()
            .ok()
            .and_then(|mut addrs| addrs.next())
            .map(Some)
            .ok_or_else(|| CliError::Metrics(addr.clone()))
    }

    fn listen_addr(&self) -> Result<ListenAddr, CliError> {
        if let Some(path) = self.listen.strip_prefix("unix:") {
            return Ok(ListenAddr::Unix(PathBuf::from(path)));
        }
        if let Ok(ip) = self.listen.parse::<IpAddr>() {
            return Ok(ListenAddr::Tcp(SocketAddr::new(ip, self.port)));
        }
        (self.listen.as_str(), self.port)
            .to_socket_addrs()
            .ok()
            .and_then(|mut addrs| addrs.next())
            .map(ListenAddr::Tcp)
            .ok_or_else(|| CliError::Resolve(self.listen.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Cli {
        Cli::try_parse_from(std::iter::once("redstalk").chain(args.iter().copied())).unwrap()
    }

    #[test]
    fn bundled_and_attached_forms() {
        let c = parse(&["-VV", "-p1234", "-l127.0.0.1", "-z", "10"]);
        assert_eq!(c.verbose, 2);
        let s = c.validate().unwrap();
        assert_eq!(s.listen, ListenAddr::Tcp("127.0.0.1:1234".parse().unwrap()));
        assert_eq!(s.max_job_size, 10);
        let c = parse(&["-Vp", "99"]);
        assert_eq!((c.verbose, c.port), (1, 99));
    }

    #[test]
    fn unix_socket_and_clamp() {
        let s = parse(&["-l", "unix:/tmp/x.sock", "-z", "9999999999"])
            .validate()
            .unwrap();
        assert_eq!(s.listen, ListenAddr::Unix("/tmp/x.sock".into()));
        assert_eq!(s.max_job_size, MAX_JOB_SIZE_LIMIT);
        assert_eq!(s.warnings.len(), 1);
    }

    #[test]
    fn metrics_address_is_host_and_port() {
        let s = parse(&["--metrics", "127.0.0.1:9100"]).validate().unwrap();
        assert_eq!(s.metrics, Some("127.0.0.1:9100".parse().unwrap()));
        assert!(parse(&[]).validate().unwrap().metrics.is_none());
        let err = parse(&["--metrics", "9100"]).validate().unwrap_err();
        assert!(err.to_string().contains("HOST:PORT"));
    }

    #[test]
    fn binlog_flags_name_redis() {
        let err = parse(&["-b", "/var/lib/beanstalkd"])
            .validate()
            .unwrap_err();
        assert!(err.to_string().contains("--redis"));
        assert!(parse(&["-F"]).validate().is_err());
    }
}

//! Command-line flags: beanstalkd's own (same letters, same meaning, bundled `-VV` and
//! attached `-p11300` forms), plus long options for what beanstalkd does not have,
//! each with a `REDSTALK_*` environment fallback.
//!
//! beanstalkd's binlog flags (`-b DIR`, `-f MS`, `-F`, `-s BYTES`) keep their meaning:
//! the memory engine with a local write-ahead log (`crate::persist::binlog`); `-b` with
//! `--redis` is refused (jobs live in one place).

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, Parser};

use crate::access::{AccessConfig, Secret};
use crate::persist::binlog::{BinlogConfig, DEFAULT_FILE_SIZE, DEFAULT_FSYNC_MS, Fsync};
use crate::protocol::codec::{DEFAULT_MAX_JOB_SIZE, MAX_JOB_SIZE_LIMIT};
use crate::server::ListenAddr;
use crate::server::policy::{AuthMode, ListenerSpec, SpecAddr};
use crate::server::security::{DEFAULT_AUTH_TIMEOUT, DEFAULT_MAX_PENDING};
use crate::server::tls::CertFiles;

/// The reference's exit code for a usage error.
pub const EXIT_USAGE: u8 = 5;

#[derive(Parser, Debug, Clone)]
#[command(
    name = "redstalk",
    about = "A beanstalkd-compatible job queue server.",
    long_about = "A beanstalkd-compatible job queue server: it speaks the beanstalkd text \
        protocol byte for byte, so beanstalk clients work with it unchanged.\n\n\
        Jobs live in memory (the default, as beanstalkd without -b), in a local \
        write-ahead log (-b DIR, as beanstalkd's binlog), or in Redis (--redis URL), where \
        several instances serve one queue: in leader mode one instance serves from memory \
        and writes every change to Redis before acknowledging it while the others relay \
        to it and take over when it dies; in shared mode every command is one Lua script \
        in Redis. With --http it also serves Prometheus metrics, health checks, a JSON \
        operator API and a web console.",
    version = crate::build_info::VERSION,
    disable_help_flag = true,
    disable_version_flag = true
)]
pub struct Cli {
    /// Listen on ADDR (default 0.0.0.0), or on a unix socket with `unix:/path`.
    #[arg(short = 'l', value_name = "ADDR")]
    pub listen: Option<String>,

    /// Listen on PORT (default 11300).
    #[arg(short = 'p', value_name = "PORT")]
    pub port: Option<u16>,

    /// Another listener (repeatable): ADDRESS[,tls][,auth=MODE][,role=ROLE], ADDRESS
    /// being HOST:PORT, unix:/path or fd:NAME (a socket systemd passed), MODE none,
    /// token, cert, token-or-cert or relay. Given without -l or -p, it replaces the
    /// default listener. See docs/SECURITY.md.
    #[arg(
        long = "listen",
        env = "REDSTALK_LISTEN",
        value_name = "SPEC",
        value_delimiter = ' '
    )]
    pub listeners: Vec<ListenerSpec>,

    /// The certificate (PEM, with its chain) of every TLS listener.
    #[arg(long, env = "REDSTALK_TLS_CERT", value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,

    /// The key (PEM) of --tls-cert.
    #[arg(long, env = "REDSTALK_TLS_KEY", value_name = "FILE")]
    pub tls_key: Option<PathBuf>,

    /// The CA (PEM) client certificates must chain to (auth=cert, auth=token-or-cert).
    #[arg(long, env = "REDSTALK_TLS_CLIENT_CA", value_name = "FILE")]
    pub tls_client_ca: Option<PathBuf>,

    /// The roles file (TOML): roles scoped to tubes, and the tokens and client
    /// certificates that have them, for the beanstalk port and the HTTP API; read
    /// again on SIGHUP. See docs/SECURITY.md.
    #[arg(long, env = "REDSTALK_ROLES", value_name = "FILE")]
    pub roles: Option<PathBuf>,

    /// Seconds a client of a token listener has to send `auth` (after its TLS
    /// handshake, which has 10 s of its own).
    #[arg(
        long,
        env = "REDSTALK_AUTH_TIMEOUT",
        value_name = "SECS",
        default_value_t = DEFAULT_AUTH_TIMEOUT.as_secs()
    )]
    pub auth_timeout: u64,

    /// Connections handshaking or not yet authenticated at most, all TLS and token
    /// listeners together; more are closed at accept.
    #[arg(
        long,
        env = "REDSTALK_MAX_PENDING",
        value_name = "N",
        default_value_t = DEFAULT_MAX_PENDING
    )]
    pub max_pending: usize,

    /// Leader mode: the instance secret (the file's first line), the same on every
    /// instance: a standby proves it before the leader serves a client it relays
    /// under that client's role. Needed with any authenticating listener or roles.
    #[arg(long, env = "REDSTALK_RELAY_SECRET_FILE", value_name = "FILE")]
    pub relay_secret_file: Option<PathBuf>,

    /// Maximum job size in bytes (default 65535, at most 1073741824).
    // Read as the reference reads it (`sscanf("%zu")`), so `-z -5` is a value, not a flag.
    #[arg(
        short = 'z',
        value_name = "BYTES",
        default_value_t = u64::from(DEFAULT_MAX_JOB_SIZE),
        value_parser = parse_size,
        allow_hyphen_values = true
    )]
    pub max_job_size: u64,

    /// Become USER after binding the socket.
    #[arg(short = 'u', value_name = "USER")]
    pub user: Option<String>,

    /// More output (repeatable): -V logs connections, -VV every command and reply.
    #[arg(short = 'V', action = ArgAction::Count)]
    pub verbose: u8,

    /// Print the version and exit (with -V: the commit too; -VV: the compiler).
    #[arg(short = 'v', action = ArgAction::SetTrue)]
    pub version: bool,

    /// Print this help and exit.
    #[arg(short = 'h', long = "help", action = ArgAction::SetTrue)]
    pub help: bool,

    /// Write the man page and the shell completions under DIR and exit (the Debian
    /// package's build runs it: src/manual/).
    #[arg(long, value_name = "DIR", hide = true)]
    pub write_manual: Option<PathBuf>,

    /// Keep jobs across restarts in a write-ahead log in DIR (beanstalkd's -b).
    #[arg(short = 'b', value_name = "DIR")]
    pub binlog_dir: Option<PathBuf>,

    /// With -b: fsync at most every MS milliseconds (default 50; 0: before every
    /// acknowledgement).
    #[arg(short = 'f', value_name = "MS")]
    pub fsync_ms: Option<u64>,

    /// With -b: never fsync (the OS writes the log back when it likes).
    #[arg(short = 'F', action = ArgAction::SetTrue)]
    pub no_fsync: bool,

    /// With -b: start a new log file every BYTES bytes (default 10485760).
    #[arg(short = 's', value_name = "BYTES", value_parser = parse_size)]
    pub binlog_size: Option<u64>,

    /// Removed in beanstalkd; accepted with a warning, as beanstalkd does.
    #[arg(short = 'c', action = ArgAction::SetTrue, hide = true)]
    pub compact: bool,

    /// Removed in beanstalkd; accepted with a warning, as beanstalkd does.
    #[arg(short = 'n', action = ArgAction::SetTrue, hide = true)]
    pub no_compact: bool,

    /// Keep jobs in Redis at URL: durable, and shared by every redstalk instance with
    /// the same URL and prefix. Without it, jobs live in memory. URL:
    /// redis://[USER:PASSWORD@]HOST:PORT[/DB], rediss://... (TLS);
    /// redis+sentinel://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...]/MASTER_NAME[/DB]
    /// (rediss+sentinel:// with TLS): the primary the sentinels name, followed across
    /// failovers, the credentials the data nodes'; or
    /// redis+cluster://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...] (rediss+cluster://
    /// with TLS): a Redis Cluster, from any of its nodes.
    #[arg(long, env = "REDSTALK_REDIS", value_name = "URL")]
    pub redis: Option<String>,

    /// The sentinels' own password (requirepass of the sentinels), when they have one.
    #[arg(
        long,
        env = "REDSTALK_REDIS_SENTINEL_PASSWORD",
        value_name = "PASSWORD"
    )]
    pub redis_sentinel_password: Option<String>,

    /// With rediss://: trust only this CA (PEM) for Redis' (and the sentinels')
    /// certificates, instead of the system's roots.
    #[arg(long, env = "REDSTALK_REDIS_TLS_CA", value_name = "FILE")]
    pub redis_tls_ca: Option<std::path::PathBuf>,

    /// With rediss://: a client certificate (PEM), for a Redis that asks for one; give
    /// its key with --redis-tls-key.
    #[arg(long, env = "REDSTALK_REDIS_TLS_CERT", value_name = "FILE")]
    pub redis_tls_cert: Option<std::path::PathBuf>,

    /// The key (PEM) of --redis-tls-cert.
    #[arg(long, env = "REDSTALK_REDIS_TLS_KEY", value_name = "FILE")]
    pub redis_tls_key: Option<std::path::PathBuf>,

    /// Namespace of every Redis key, so several deployments (or test runs) can share
    /// one Redis.
    #[arg(
        long,
        env = "REDSTALK_REDIS_PREFIX",
        value_name = "NAME",
        default_value = "redstalk"
    )]
    pub redis_prefix: String,

    /// How instances share a Redis namespace. `leader` (the default: several times the
    /// throughput): one instance (holder of a lease in Redis) serves from memory and
    /// writes every change to Redis in batches before acknowledging it; the others relay
    /// their clients to it and take over when its lease lapses. `shared`: every instance
    /// runs each command as one Lua script in Redis (no failover gap; more Redis work
    /// per job).
    #[arg(
        long,
        env = "REDSTALK_REDIS_MODE",
        value_name = "MODE",
        value_enum,
        default_value = "leader"
    )]
    pub redis_mode: RedisMode,

    /// Leader mode: how long the leader's lease lasts (milliseconds). A standby takes
    /// over this long after a leader dies; the leader renews it every quarter of it.
    #[arg(
        long,
        env = "REDSTALK_REDIS_LEASE",
        value_name = "MS",
        default_value_t = 3000
    )]
    pub redis_lease: u64,

    /// Leader mode: the HOST:PORT at which other instances reach this one to relay
    /// their clients (default: the listen address, or this host's name when listening
    /// on all addresses; none when listening on a unix socket only).
    #[arg(long, env = "REDSTALK_ADVERTISE", value_name = "HOST:PORT")]
    pub advertise: Option<String>,

    /// Leader mode: the HOST:PORT at which other instances reach this one's HTTP
    /// listener to forward operator API requests while it leads (default: the
    /// --http address, or --advertise's host with that port when it listens
    /// on all addresses; none without an HTTP listener).
    #[arg(long, env = "REDSTALK_HTTP_ADVERTISE", value_name = "HOST:PORT")]
    pub http_advertise: Option<String>,

    /// Acknowledge a change only once this many Redis replicas have it (Redis WAIT):
    /// in leader mode one WAIT per batch, in shared mode one pipelined behind each
    /// script. Not confirmed in time: INTERNAL_ERROR (the change may exist).
    #[arg(
        long,
        env = "REDSTALK_REDIS_WAIT_REPLICAS",
        value_name = "N",
        default_value_t = 0
    )]
    pub redis_wait_replicas: u32,

    /// How long to wait for the replicas (milliseconds) before answering INTERNAL_ERROR.
    #[arg(
        long,
        env = "REDSTALK_REDIS_WAIT_TIMEOUT",
        value_name = "MS",
        default_value_t = 1000
    )]
    pub redis_wait_timeout: u64,

    /// Run even when Redis may evict keys (a `maxmemory-policy` other than
    /// `noeviction`), warning on every check instead of refusing to start: evicted
    /// jobs are lost.
    #[arg(long, env = "REDSTALK_REDIS_ALLOW_EVICTION")]
    pub redis_allow_eviction: bool,

    /// Answer puts OUT_OF_MEMORY once the process's memory nears BYTES (85% of it in
    /// use), rather than be killed at a container's limit. Default: the memory limit of
    /// the cgroup redstalk runs in, if it has one.
    #[arg(long, env = "REDSTALK_MEMORY_LIMIT", value_name = "BYTES", value_parser = parse_size)]
    pub memory_limit: Option<u64>,

    /// Close new connections beyond this many open ones (default: as many as the file
    /// descriptor limit allows, at most 65536; a client relayed to the leader takes two
    /// descriptors).
    #[arg(long, env = "REDSTALK_MAX_CONNECTIONS", value_name = "N")]
    pub max_connections: Option<usize>,

    /// Serve HTTP on ADDR (HOST:PORT, e.g. 127.0.0.1:9100): Prometheus metrics (GET
    /// /metrics), health checks (GET /healthz, /readyz), the operator API (/api/v1)
    /// and the web console (/console/). Off by default. Also spelled --metrics, and
    /// REDSTALK_METRICS.
    #[arg(long, alias = "metrics", env = "REDSTALK_HTTP", value_name = "ADDR")]
    pub http: Option<String>,

    /// REDSTALK_METRICS, the older name of REDSTALK_HTTP (read when --http and
    /// REDSTALK_HTTP are not given).
    #[arg(long, hide = true, env = "REDSTALK_METRICS", value_name = "ADDR")]
    pub metrics_env: Option<String>,

    /// The operator API's token (docs/API.md): changes need it, sent as
    /// `Authorization: Bearer TOKEN`. Without one, the API only reads.
    #[arg(
        long,
        env = "REDSTALK_ADMIN_TOKEN",
        value_name = "TOKEN",
        hide_env_values = true
    )]
    pub admin_token: Option<String>,

    /// Read the operator API's token from this file (its first line).
    #[arg(long, env = "REDSTALK_ADMIN_TOKEN_FILE", value_name = "PATH")]
    pub admin_token_file: Option<PathBuf>,

    /// The operator API's reads need the token too.
    #[arg(long, env = "REDSTALK_ADMIN_READ_AUTH")]
    pub admin_read_auth: bool,

    /// The operator API refuses every change.
    #[arg(long, env = "REDSTALK_ADMIN_READ_ONLY")]
    pub admin_read_only: bool,

    /// The console's login, the API's Authorization: Bearer and the beanstalk port's
    /// `auth` take at most N wrong tokens per client address a minute (ten times N from
    /// all addresses), then refuse every token (429, UNAUTHORIZED) until the minute
    /// ends. 0: no bound.
    #[arg(
        long,
        env = "REDSTALK_ADMIN_LOGIN_LIMIT",
        value_name = "N",
        default_value_t = crate::access::DEFAULT_PER_PEER
    )]
    pub admin_login_limit: u32,

    /// The login limit's window in milliseconds (for tests).
    #[arg(long, value_name = "MS", default_value_t = 60_000, hide = true)]
    pub admin_login_window_ms: u64,

    /// In /metrics, give per-tube series (redstalk_tube_*) to at most N tubes, the
    /// first by name; redstalk_tubes_omitted counts the others. 0: none.
    #[arg(
        long,
        env = "REDSTALK_METRICS_TUBES",
        value_name = "N",
        default_value_t = 1000
    )]
    pub metrics_tubes: usize,

    /// Answer as beanstalkd VERSION does: 1.13, or 1.12 for clients written against
    /// it (YAML string values unquoted, reserve-with-timeout's number read with strtol;
    /// see docs/COMPAT.md).
    #[arg(long, env = "REDSTALK_COMPAT", value_name = "VERSION", default_value_t)]
    pub compat: crate::protocol::Dialect,

    /// Speak redstalk's protocol extensions (docs/EXTENSIONS.md: `list-extensions`
    /// and the families it names) besides beanstalkd's commands, or not: `off` answers
    /// every extension line exactly as beanstalkd does.
    #[arg(
        long,
        env = "REDSTALK_EXTENSIONS",
        value_name = "on|off",
        value_enum,
        default_value = "on"
    )]
    pub extensions: Switch,

    /// The longest dedupe window a keyed put may ask for, in seconds (a longer one is
    /// cut to it; docs/EXTENSIONS.md, *Keys*).
    #[arg(
        long,
        env = "REDSTALK_KEY_WINDOW_MAX",
        value_name = "SECS",
        default_value_t = 86_400
    )]
    pub key_window_max: u32,

    /// The most dedupe windows open at once; beyond it the window nearest its end
    /// ends early (counted in redstalk_key_windows_evicted_total).
    #[arg(
        long,
        env = "REDSTALK_KEY_WINDOWS_MAX",
        value_name = "N",
        default_value_t = 1_000_000
    )]
    pub key_windows_max: u64,

    /// Tube policies (TOML: dead letters, release backoff) written at start into where
    /// this mode keeps them (`-b DIR`'s policies.json, the Redis namespace, or this
    /// process), replacing the rules kept for the same tubes. See docs/POLICIES.md.
    #[arg(long, env = "REDSTALK_POLICIES", value_name = "FILE")]
    pub policies: Option<PathBuf>,

    /// Schedules (TOML `[[schedule]]`: a job put into a tube at each tick of a cron
    /// expression or an interval) written at start into where this mode keeps them,
    /// replacing the schedules kept under the same names. See docs/SCHEDULES.md.
    #[arg(long, env = "REDSTALK_SCHEDULES", value_name = "FILE")]
    pub schedules: Option<PathBuf>,

    /// Keep each deleted job's record (its figures, its history and, with
    /// --retain-bodies, its body) this long: `90s`, `30m`, `24h`, `7d`; 0 (the
    /// default) keeps nothing. See docs/RETENTION.md.
    #[arg(
        long,
        env = "REDSTALK_RETAIN",
        value_name = "DURATION",
        value_parser = parse_duration_ms,
        default_value = "0"
    )]
    pub retain: u64,

    /// The most deleted jobs' records kept; the oldest go first.
    #[arg(
        long,
        env = "REDSTALK_RETAIN_JOBS",
        value_name = "N",
        default_value_t = 100_000
    )]
    pub retain_jobs: usize,

    /// The most bytes the kept records may take (their own accounting: figures,
    /// history, names and bodies); `K`, `M`, `G` suffixes are binary.
    #[arg(
        long,
        env = "REDSTALK_RETAIN_BYTES",
        value_name = "BYTES",
        value_parser = parse_bytes,
        default_value = "64M"
    )]
    pub retain_bytes: u64,

    /// Keep deleted jobs' bodies in their records too (counted in --retain-bytes).
    #[arg(long, env = "REDSTALK_RETAIN_BODIES")]
    pub retain_bodies: bool,

    /// On SIGTERM/SIGINT, wait this many seconds for connections to finish.
    #[arg(
        long,
        env = "REDSTALK_SHUTDOWN_GRACE",
        value_name = "SECS",
        default_value_t = 5
    )]
    pub shutdown_grace: u64,
}

/// The largest `-z` the Redis engines take. Measured on loopback (release build): a
/// put of 128 MiB took 1.2 s and 256 MiB exceeded the 1 s command timeout; half of what
/// worked leaves room for a loaded machine.
pub const REDIS_MAX_JOB_SIZE: u32 = 64 << 20;

/// An option that is on or off (`--extensions`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Switch {
    On,
    Off,
}

/// How redstalk instances share a Redis namespace (see `--redis-mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum RedisMode {
    Leader,
    Shared,
}

/// Everything about Redis, when jobs live there.
#[derive(Clone, Debug)]
pub struct RedisSettings {
    pub config: crate::redis::RedisConfig,
    pub mode: RedisMode,
    pub lease: Duration,
    /// Leader mode: where other instances reach this one (empty: nowhere; listening on
    /// a unix socket only).
    pub advertise: String,
    /// Leader mode: where other instances forward operator API requests (empty:
    /// nowhere; no HTTP listener).
    pub http_advertise: String,
    pub wait_replicas: u32,
    pub wait_timeout: Duration,
    /// Run on a Redis that may evict keys, warning instead of refusing.
    pub allow_eviction: bool,
}

/// A configuration that cannot run; the message says what to do instead.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error("-b keeps jobs in a local log and --redis keeps them in Redis: give one of the two")]
    BinlogAndRedis,
    #[error("cannot resolve listen address {0:?}")]
    Resolve(String),
    #[error("--admin-token-file {0}: cannot read it: {1}")]
    TokenFile(String, String),
    #[error("--relay-secret-file {0}: cannot read it: {1}")]
    SecretFile(String, String),
    #[error("{0}")]
    Listeners(String),
    #[error("--http {0:?} is not HOST:PORT that resolves (for example 127.0.0.1:9100)")]
    Http(String),
    #[error("--redis-lease {0} is too short: give at least 300 (milliseconds)")]
    Lease(u64),
    #[error(
        "-z {0}: with --redis, jobs may be at most {REDIS_MAX_JOB_SIZE} bytes (64 MiB): a \
         larger body cannot reach Redis within the 1 s every Redis command is given; give \
         -z {REDIS_MAX_JOB_SIZE} or less"
    )]
    RedisJobSize(u32),
    #[error(transparent)]
    Prefix(#[from] crate::redis::keys::PrefixError),
    #[error(transparent)]
    RedisUrl(#[from] crate::redis::TargetError),
}

/// Settings derived from the flags.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The default listener's address (`-l`, `-p`).
    pub listen: ListenAddr,
    /// Whether the default listener is served (not when only `--listen` is given).
    pub default_listener: bool,
    /// `--listen`.
    pub listeners: Vec<ListenerSpec>,
    /// The TLS files of TLS listeners (`None`: there are none).
    pub tls: Option<CertFiles>,
    /// Roles, tokens and the guessing bound.
    pub access_config: AccessConfig,
    pub auth_timeout: Duration,
    pub max_pending: usize,
    /// Leader mode's instance secret.
    pub relay_secret: Option<Secret>,
    /// `None`: the in-memory engine.
    pub redis: Option<RedisSettings>,
    /// `-b DIR`: the memory engine with a write-ahead log.
    pub binlog: Option<BinlogConfig>,
    pub max_job_size: u32,
    pub user: Option<String>,
    pub verbose: u8,
    /// `--max-connections`, when given (else the file descriptor limit decides).
    pub max_connections: Option<usize>,
    /// `--memory-limit`, when given (else the cgroup's limit, if any).
    pub memory_limit: Option<u64>,
    pub shutdown_grace: Duration,
    /// The beanstalkd release whose replies to give (`--compat`).
    pub dialect: crate::protocol::Dialect,
    /// Whether connections speak the protocol extensions (`--extensions`).
    pub extensions: bool,
    /// `--key-window-max`, `--key-windows-max`.
    pub keys: crate::store::KeyLimits,
    /// `--policies`: the tube policies to write at start.
    pub policies: Option<PathBuf>,
    /// `--schedules`: the schedules to write at start.
    pub schedules: Option<PathBuf>,
    /// `--retain`, `--retain-jobs`, `--retain-bytes`, `--retain-bodies`.
    pub retention: crate::store::retention::RetentionLimits,
    /// Where the HTTP listener serves (metrics, probes, the API, the console); `None`:
    /// not served.
    pub http: Option<SocketAddr>,
    /// Tubes with per-tube series in /metrics.
    pub metrics_tubes: usize,
    /// The operator API's own settings.
    pub access: crate::http::auth::Access,
    pub warnings: Vec<String>,
}

impl Cli {
    pub fn validate(&self) -> Result<Settings, CliError> {
        let mut warnings = Vec::new();
        let binlog = self.binlog_config(&mut warnings)?;
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
        let listen = self.listen_addr()?;
        let redis = match &self.redis {
            None => None,
            Some(url) => Some(self.redis_settings(url, &listen, &mut warnings)?),
        };
        if redis.is_some() && max_job_size > REDIS_MAX_JOB_SIZE {
            return Err(CliError::RedisJobSize(max_job_size));
        }
        let tls = self.tls_files(&mut warnings)?;
        Ok(Settings {
            default_listener: self.listeners.is_empty()
                || self.listen.is_some()
                || self.port.is_some(),
            listeners: self.listeners.clone(),
            tls,
            access_config: self.access_config()?,
            auth_timeout: Duration::from_secs(self.auth_timeout.max(1)),
            max_pending: self.max_pending.max(1),
            relay_secret: self.relay_secret()?,
            listen,
            redis,
            binlog,
            max_job_size,
            user: self.user.clone(),
            verbose: self.verbose,
            max_connections: self.max_connections.map(|n| n.max(1)),
            memory_limit: self.memory_limit,
            shutdown_grace: Duration::from_secs(self.shutdown_grace),
            dialect: self.compat,
            extensions: self.extensions == Switch::On,
            policies: self.policies.clone(),
            schedules: self.schedules.clone(),
            retention: crate::store::retention::RetentionLimits {
                keep_ms: self.retain,
                max_jobs: self.retain_jobs,
                max_bytes: usize::try_from(self.retain_bytes).unwrap_or(usize::MAX),
                bodies: self.retain_bodies,
            },
            keys: crate::store::KeyLimits {
                window_max_ms: crate::time::secs_as_ms(self.key_window_max),
                windows_max: self.key_windows_max,
            },
            http: self.http_addr()?,
            metrics_tubes: self.metrics_tubes,
            access: self.access(),
            warnings,
        })
    }

    /// `-b`, `-f`, `-F`, `-s` as beanstalkd reads them; without `-b` the others do
    /// nothing (as in beanstalkd).
    fn binlog_config(&self, warnings: &mut Vec<String>) -> Result<Option<BinlogConfig>, CliError> {
        let Some(dir) = &self.binlog_dir else {
            if self.fsync_ms.is_some() || self.no_fsync || self.binlog_size.is_some() {
                warnings.push("-f, -F and -s have no effect without -b".to_string());
            }
            return Ok(None);
        };
        if self.redis.is_some() {
            return Err(CliError::BinlogAndRedis);
        }
        let fsync = match (self.no_fsync, self.fsync_ms.unwrap_or(DEFAULT_FSYNC_MS)) {
            (true, _) => Fsync::Never,
            (false, 0) => Fsync::Always,
            (false, ms) => Fsync::Every(Duration::from_millis(ms)),
        };
        Ok(Some(BinlogConfig {
            dir: dir.clone(),
            fsync,
            file_size: self.binlog_size.unwrap_or(DEFAULT_FILE_SIZE).max(1),
        }))
    }

    fn redis_settings(
        &self,
        url: &str,
        listen: &ListenAddr,
        warnings: &mut Vec<String>,
    ) -> Result<RedisSettings, CliError> {
        if self.redis_lease < 300 {
            return Err(CliError::Lease(self.redis_lease));
        }
        crate::redis::keys::check_prefix(&self.redis_prefix)?;
        crate::redis::target::check_cluster_url(url, self.redis_sentinel_password.is_some())?;
        // Where standbys relay: the default listener, else the first plain TCP
        // `--listen` that instances may relay to (auth=none or relay).
        let relay_to = if self.listeners.is_empty() || self.listen.is_some() || self.port.is_some()
        {
            Some(listen.clone())
        } else {
            self.listeners.iter().find_map(|l| match &l.addr {
                SpecAddr::Tcp(a)
                    if !l.policy.tls
                        && matches!(l.policy.auth, AuthMode::None | AuthMode::Relay) =>
                {
                    Some(ListenAddr::Tcp(*a))
                }
                _ => None,
            })
        };
        let advertise = match (&self.advertise, &relay_to) {
            (Some(a), _) => a.clone(),
            (None, Some(ListenAddr::Tcp(sa))) if !sa.ip().is_unspecified() => sa.to_string(),
            (None, Some(ListenAddr::Tcp(sa))) => format!("{}:{}", hostname(), sa.port()),
            // A single instance needs none; others cannot relay to it (they say so).
            (None, Some(ListenAddr::Unix(_)) | None) => String::new(),
        };
        if advertise.is_empty() && self.redis_mode == RedisMode::Leader {
            warnings.push(
                "leader mode on a unix socket without --advertise: other instances cannot \
                 relay their clients to this one while it leads (they close them and say \
                 so in /readyz); give --advertise HOST:PORT to run several instances"
                    .to_string(),
            );
        }
        Ok(RedisSettings {
            config: crate::redis::RedisConfig {
                url: url.to_string(),
                prefix: self.redis_prefix.clone(),
                tls: crate::redis::TlsFiles {
                    ca: self.redis_tls_ca.clone(),
                    cert: self.redis_tls_cert.clone(),
                    key: self.redis_tls_key.clone(),
                },
                sentinel_password: self.redis_sentinel_password.clone(),
                wait_replicas: self.redis_wait_replicas,
                wait_timeout: Duration::from_millis(self.redis_wait_timeout),
                leader_lease: (self.redis_mode == RedisMode::Leader)
                    .then(|| Duration::from_millis(self.redis_lease)),
                // The process's one: every connector is made from these options.
                lookups: crate::redis::Lookups::default(),
            },
            mode: self.redis_mode,
            lease: Duration::from_millis(self.redis_lease),
            http_advertise: self.http_advertise_addr(&advertise)?,
            advertise,
            wait_replicas: self.redis_wait_replicas,
            wait_timeout: Duration::from_millis(self.redis_wait_timeout),
            allow_eviction: self.redis_allow_eviction,
        })
    }

    /// The TLS files every TLS listener needs; what is missing is said here.
    fn tls_files(&self, warnings: &mut Vec<String>) -> Result<Option<CertFiles>, CliError> {
        let any_tls = self.listeners.iter().any(|l| l.policy.tls);
        let wants_ca = self
            .listeners
            .iter()
            .any(|l| matches!(l.policy.auth, AuthMode::Cert | AuthMode::TokenOrCert));
        if !any_tls {
            if self.tls_cert.is_some() || self.tls_key.is_some() || self.tls_client_ca.is_some() {
                warnings.push(
                    "--tls-cert, --tls-key and --tls-client-ca have no effect without a TLS \
                     --listen"
                        .to_string(),
                );
            }
            return Ok(None);
        }
        let (Some(cert), Some(key)) = (&self.tls_cert, &self.tls_key) else {
            return Err(CliError::Listeners(
                "a TLS --listen needs --tls-cert FILE and --tls-key FILE (PEM)".into(),
            ));
        };
        if wants_ca && self.tls_client_ca.is_none() {
            return Err(CliError::Listeners(
                "auth=cert and auth=token-or-cert need --tls-client-ca FILE: the CA (PEM) \
                 client certificates must chain to"
                    .into(),
            ));
        }
        Ok(Some(CertFiles {
            cert: cert.clone(),
            key: key.clone(),
            client_ca: self.tls_client_ca.clone(),
        }))
    }

    /// The instance secret of `--relay-secret-file` (its first line).
    fn relay_secret(&self) -> Result<Option<Secret>, CliError> {
        let Some(path) = &self.relay_secret_file else {
            return Ok(None);
        };
        let text = std::fs::read_to_string(path)
            .map_err(|e| CliError::SecretFile(path.display().to_string(), e.to_string()))?;
        let secret = text.lines().next().unwrap_or_default().trim().to_string();
        if secret.len() < 16 {
            return Err(CliError::SecretFile(
                path.display().to_string(),
                "the secret (its first line) must be at least 16 characters".into(),
            ));
        }
        Ok(Some(Secret::new(secret)))
    }

    /// Who holds which token: the roles file, and `--admin-token` (flag, variable or
    /// file) as an identity of the role `admin`.
    fn access_config(&self) -> Result<AccessConfig, CliError> {
        let token = match (&self.admin_token, &self.admin_token_file) {
            (Some(t), _) => Some(t.clone()),
            (None, Some(path)) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| CliError::TokenFile(path.display().to_string(), e.to_string()))?;
                Some(text.lines().next().unwrap_or_default().trim().to_string())
            }
            (None, None) => None,
        };
        Ok(AccessConfig {
            roles_file: self.roles.clone(),
            admin_token: token.filter(|t| !t.is_empty()).map(Secret::new),
            login_limit: self.admin_login_limit,
            login_window: Duration::from_millis(self.admin_login_window_ms),
        })
    }

    /// The API's own settings.
    fn access(&self) -> crate::http::auth::Access {
        crate::http::auth::Access {
            reads_need_token: self.admin_read_auth,
            read_only: self.admin_read_only,
        }
    }

    /// `--http-advertise`, or what the HTTP listener's address says: itself when it
    /// names one address, else `advertise`'s host (this host's name without one) with
    /// its port.
    fn http_advertise_addr(&self, advertise: &str) -> Result<String, CliError> {
        if let Some(a) = &self.http_advertise {
            return Ok(a.clone());
        }
        let Some(http) = self.http_addr()? else {
            return Ok(String::new());
        };
        if !http.ip().is_unspecified() {
            return Ok(http.to_string());
        }
        let host = advertise
            .rsplit_once(':')
            .map(|(h, _)| h.to_string())
            .filter(|h| !h.is_empty())
            .unwrap_or_else(hostname);
        Ok(format!("{host}:{}", http.port()))
    }

    /// The HTTP listener's address: `--http` (or `--metrics`, or `REDSTALK_HTTP`), else
    /// `REDSTALK_METRICS`.
    fn http_addr(&self) -> Result<Option<SocketAddr>, CliError> {
        let Some(addr) = self.http.as_ref().or(self.metrics_env.as_ref()) else {
            return Ok(None);
        };
        addr.to_socket_addrs()
            .ok()
            .and_then(|mut addrs| addrs.next())
            .map(Some)
            .ok_or_else(|| CliError::Http(addr.clone()))
    }

    fn listen_addr(&self) -> Result<ListenAddr, CliError> {
        let host = self.listen.as_deref().unwrap_or("0.0.0.0");
        let port = self.port.unwrap_or(11300);
        if let Some(path) = host.strip_prefix("unix:") {
            return Ok(ListenAddr::Unix(PathBuf::from(path)));
        }
        if let Ok(ip) = host.parse::<IpAddr>() {
            return Ok(ListenAddr::Tcp(SocketAddr::new(ip, port)));
        }
        (host, port)
            .to_socket_addrs()
            .ok()
            .and_then(|mut addrs| addrs.next())
            .map(ListenAddr::Tcp)
            .ok_or_else(|| CliError::Resolve(host.to_string()))
    }
}

/// This host's name, for the address other instances reach it at.
fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most `buf.len()` bytes into the buffer it is given.
    #[allow(unsafe_code)]
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "localhost".to_string();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// A duration: whole seconds, or a number with `s`, `m`, `h` or `d` (`--retain`), in ms.
fn parse_duration_ms(s: &str) -> Result<u64, String> {
    let invalid = || format!("invalid duration: {s} (e.g. 90s, 30m, 24h, 7d)");
    let (digits, unit_ms) = match s.as_bytes().last() {
        Some(b's') => (&s[..s.len() - 1], 1_000),
        Some(b'm') => (&s[..s.len() - 1], 60_000),
        Some(b'h') => (&s[..s.len() - 1], 3_600_000),
        Some(b'd') => (&s[..s.len() - 1], 86_400_000),
        _ => (s, 1_000),
    };
    let n: u64 = digits.parse().map_err(|_| invalid())?;
    n.checked_mul(unit_ms).ok_or_else(invalid)
}

/// A byte count with an optional binary `K`, `M` or `G` (`--retain-bytes`).
fn parse_bytes(s: &str) -> Result<u64, String> {
    let invalid = || format!("invalid size: {s} (e.g. 65536, 512K, 64M, 1G)");
    let (digits, unit) = match s.as_bytes().last() {
        Some(b'K' | b'k') => (&s[..s.len() - 1], 1u64 << 10),
        Some(b'M' | b'm') => (&s[..s.len() - 1], 1 << 20),
        Some(b'G' | b'g') => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    let n: u64 = digits.parse().map_err(|_| invalid())?;
    n.checked_mul(unit).ok_or_else(invalid)
}

/// A size as the reference's `parse_size_t` reads it with `sscanf("%zu%c")`: leading
/// white space, an optional sign, decimal digits, nothing after. A value too large for
/// 64 bits saturates and a negative one wraps (`-5` is 2^64 - 5), as `strtoull` does;
/// either is then clamped to the maximum job size with a warning.
fn parse_size(s: &str) -> Result<u64, String> {
    let invalid = || format!("invalid size: {s}");
    let t = s.trim_start_matches([' ', '\t', '\n', '\r', '\x0b', '\x0c']);
    let (negative, digits) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid());
    }
    let value = digits.bytes().try_fold(0u64, |n, d| {
        n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    });
    Ok(match value {
        None => u64::MAX,
        Some(n) if negative => n.wrapping_neg(),
        Some(n) => n,
    })
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
        assert_eq!((c.verbose, c.port), (1, Some(99)));
    }

    #[test]
    fn the_api_is_advertised_where_the_http_listener_is_reached() {
        let http = |args: &[&str]| {
            let mut all = vec!["--redis", "redis://127.0.0.1:1/0"];
            all.extend_from_slice(args);
            parse(&all)
                .validate()
                .unwrap()
                .redis
                .unwrap()
                .http_advertise
        };
        assert_eq!(http(&[]), "");
        assert_eq!(http(&["--metrics", "127.0.0.1:9100"]), "127.0.0.1:9100");
        assert_eq!(
            http(&["--metrics", "0.0.0.0:9100", "--advertise", "10.0.0.5:11300"]),
            "10.0.0.5:9100"
        );
        assert_eq!(
            http(&[
                "--http",
                "0.0.0.0:9100",
                "--http-advertise",
                "api.example:80"
            ]),
            "api.example:80"
        );
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

    /// Each value checked against beanstalkd 1.12 (`beanstalkd -z VALUE`, then the
    /// `max-job-size` of `stats`, or exit 5).
    #[test]
    fn z_is_read_as_the_reference_reads_it() {
        let max = |args: &[&str]| parse(args).validate().unwrap().max_job_size;
        for (z, want) in [
            ("-5", MAX_JOB_SIZE_LIMIT),
            (" -3", MAX_JOB_SIZE_LIMIT),
            ("18446744073709551616", MAX_JOB_SIZE_LIMIT),
            ("-18446744073709551616", MAX_JOB_SIZE_LIMIT),
            ("4294967297", MAX_JOB_SIZE_LIMIT),
            ("-18446744073709551615", 1),
            ("-0", 0),
            ("+7", 7),
            (" 9", 9),
            ("\t7", 7),
            ("00012", 12),
        ] {
            assert_eq!(max(&["-z", z]), want, "-z {z:?}");
        }
        assert_eq!(max(&["-z-5"]), MAX_JOB_SIZE_LIMIT);
        let clamped = parse(&["-z", "-5"]).validate().unwrap();
        assert_eq!(clamped.warnings.len(), 1, "{:?}", clamped.warnings);
        for z in ["5x", "5 ", "", "-", "+", "+-5", "0x10"] {
            let args = ["redstalk", "-z", z];
            assert!(Cli::try_parse_from(args).is_err(), "-z {z:?} accepted");
        }
    }

    #[test]
    fn a_prefix_that_cannot_be_a_hash_tag_is_a_usage_error() {
        let validate = |prefix: &str| {
            parse(&["--redis", "redis://127.0.0.1:1/0", "--redis-prefix", prefix]).validate()
        };
        for bad in ["", "{orders}", "a}b"] {
            let err = validate(bad).expect_err(bad);
            assert!(matches!(err, CliError::Prefix(_)), "{bad}: {err}");
            println!("--redis-prefix {bad:?}: {err}");
        }
        assert!(validate("orders:eu").is_ok());
        // Without --redis the prefix names nothing.
        assert!(parse(&["--redis-prefix", ""]).validate().is_ok());
    }

    #[test]
    fn leader_mode_starts_on_a_unix_socket_without_advertise() {
        let s = parse(&["-l", "unix:/tmp/x.sock", "--redis", "redis://127.0.0.1:1/0"])
            .validate()
            .unwrap();
        assert_eq!(s.redis.unwrap().advertise, "");
        assert_eq!(s.warnings.len(), 1, "{:?}", s.warnings);
        assert!(s.warnings[0].contains("--advertise"));
    }

    #[test]
    fn help_says_how_often_the_lease_is_renewed() {
        use clap::CommandFactory;
        let help = Cli::command().render_help().to_string();
        let help = help.split_whitespace().collect::<Vec<_>>().join(" ");
        // keep_lease renews every quarter of the lease.
        assert!(help.contains("every quarter of it"), "{help}");
        assert!(!help.contains("third"), "{help}");
    }

    #[test]
    fn the_http_address_is_host_and_port_under_either_name() {
        let s = parse(&["--http", "127.0.0.1:9100"]).validate().unwrap();
        assert_eq!(s.http, Some("127.0.0.1:9100".parse().unwrap()));
        let s = parse(&["--metrics", "127.0.0.1:9101"]).validate().unwrap();
        assert_eq!(s.http, Some("127.0.0.1:9101".parse().unwrap()), "the alias");
        // REDSTALK_METRICS, as clap reads it, when --http is not given.
        let s = parse(&["--metrics-env", "127.0.0.1:9102"])
            .validate()
            .unwrap();
        assert_eq!(s.http, Some("127.0.0.1:9102".parse().unwrap()));
        let s = parse(&[
            "--metrics-env",
            "127.0.0.1:9102",
            "--http",
            "127.0.0.1:9103",
        ])
        .validate()
        .unwrap();
        assert_eq!(
            s.http,
            Some("127.0.0.1:9103".parse().unwrap()),
            "--http first"
        );
        assert!(parse(&[]).validate().unwrap().http.is_none());
        let err = parse(&["--http", "9100"]).validate().unwrap_err();
        assert!(err.to_string().contains("--http") && err.to_string().contains("HOST:PORT"));
    }

    #[test]
    fn redis_refuses_jobs_larger_than_it_can_carry() {
        let redis = ["--redis", "redis://127.0.0.1:1/0", "--redis-mode", "shared"];
        let at = REDIS_MAX_JOB_SIZE.to_string();
        let above = (REDIS_MAX_JOB_SIZE + 1).to_string();
        assert!(
            parse(&[&redis[..], &["-z", &at]].concat())
                .validate()
                .is_ok()
        );
        let err = parse(&[&redis[..], &["-z", &above]].concat())
            .validate()
            .unwrap_err();
        assert!(err.to_string().contains(&at), "{err}");
        assert!(
            parse(&["-z", &above]).validate().is_ok(),
            "memory: no limit"
        );
    }

    #[test]
    fn listeners_need_their_files_and_replace_the_default_only_when_alone() {
        let s = parse(&[]).validate().unwrap();
        assert!(s.default_listener && s.listeners.is_empty() && s.tls.is_none());
        let tls = ["--listen", "127.0.0.1:11301,tls,auth=token"];
        let err = parse(&tls).validate().unwrap_err();
        assert!(err.to_string().contains("--tls-cert"), "{err}");
        let files = ["--tls-cert", "c.pem", "--tls-key", "k.pem"];
        let s = parse(&[&tls[..], &files[..]].concat()).validate().unwrap();
        assert!(!s.default_listener, "--listen alone replaces -l/-p");
        assert!(s.tls.is_some_and(|t| t.client_ca.is_none()));
        let s = parse(&[&tls[..], &files[..], &["-p", "11300"]].concat())
            .validate()
            .unwrap();
        assert!(s.default_listener, "-p keeps it beside --listen");
        let cert = ["--listen", "127.0.0.1:11302,auth=cert"];
        let err = parse(&[&cert[..], &files[..]].concat())
            .validate()
            .unwrap_err();
        assert!(err.to_string().contains("--tls-client-ca"), "{err}");
        // Leader mode advertises the listener instances relay to.
        let s = parse(&[
            "--listen",
            "10.0.0.5:11310,auth=relay",
            "--redis",
            "redis://127.0.0.1:1/0",
        ])
        .validate()
        .unwrap();
        assert_eq!(s.redis.unwrap().advertise, "10.0.0.5:11310");
    }

    #[test]
    fn binlog_flags_keep_beanstalkds_meaning() {
        let b = |args: &[&str]| parse(args).validate().unwrap().binlog.unwrap();
        let c = b(&["-b", "/var/lib/beanstalkd"]);
        assert_eq!(c.dir, PathBuf::from("/var/lib/beanstalkd"));
        assert_eq!(c.fsync, Fsync::Every(Duration::from_millis(50)));
        assert_eq!(c.file_size, DEFAULT_FILE_SIZE);
        assert_eq!(b(&["-b", "d", "-f", "0"]).fsync, Fsync::Always);
        assert_eq!(
            b(&["-b", "d", "-f", "200"]).fsync,
            Fsync::Every(Duration::from_millis(200))
        );
        assert_eq!(b(&["-bd", "-F"]).fsync, Fsync::Never);
        assert_eq!(b(&["-b", "d", "-s", "1000"]).file_size, 1000);
        let without = parse(&["-F"]).validate().unwrap();
        assert!(without.binlog.is_none());
        assert_eq!(without.warnings.len(), 1);
        let err = parse(&["-b", "d", "--redis", "redis://127.0.0.1:1/0"])
            .validate()
            .unwrap_err();
        assert!(err.to_string().contains("--redis"), "{err}");
    }

    #[test]
    fn retention_is_off_unless_asked_and_reads_units() {
        let off = parse(&[]).validate().unwrap().retention;
        assert!(!off.is_on());
        let on = parse(&["--retain", "24h", "--retain-bytes", "8M", "--retain-bodies"])
            .validate()
            .unwrap()
            .retention;
        assert_eq!(on.keep_ms, 86_400_000);
        assert_eq!(on.max_bytes, 8 << 20);
        assert_eq!(on.max_jobs, 100_000);
        assert!(on.bodies && on.is_on());
        assert_eq!(parse(&["--retain", "90"]).retain, 90_000);
        assert_eq!(parse(&["--retain", "7d"]).retain, 7 * 86_400_000);
        for bad in ["x", "5w", "-1s", "99999999999999999999d"] {
            assert!(
                Cli::try_parse_from(["redstalk", "--retain", bad]).is_err(),
                "{bad}"
            );
        }
        assert!(Cli::try_parse_from(["redstalk", "--retain-bytes", "1T"]).is_err());
    }
}

//! Command-line flags: beanstalkd's own (same letters, same meaning, bundled `-VV` and
//! attached `-p11300` forms), plus long options for what beanstalkd does not have,
//! each with a `REDSTALK_*` environment fallback.
//!
//! beanstalkd's binlog flags (`-b DIR`, `-f MS`, `-F`, `-s BYTES`) keep their meaning:
//! the memory engine with a local write-ahead log (`crate::persist::binlog`); `-b` with
//! `--redis` is refused (jobs live in one place).
//!
//! This file holds the flags themselves; `settings.rs` turns them into the
//! [`Settings`] a server runs with (refusing what cannot run), `values.rs` reads the
//! values beanstalkd's way and redstalk's own.

mod settings;
#[cfg(test)]
mod tests;
mod values;

use std::path::PathBuf;

use clap::{ArgAction, Parser};

use crate::protocol::codec::DEFAULT_MAX_JOB_SIZE;
use crate::server::policy::ListenerSpec;
use crate::server::security::{DEFAULT_AUTH_TIMEOUT, DEFAULT_MAX_PENDING};

pub use settings::{CliError, REDIS_MAX_JOB_SIZE, RedisMode, RedisSettings, Settings, Switch};
use values::{parse_bytes, parse_duration_ms, parse_size};

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

//! What the flags mean: [`Cli::validate`] turns them into the [`Settings`] a server
//! runs with, and refuses a combination that cannot run ([`CliError`], whose message says
//! what to give instead); warnings for what runs but was probably not meant.

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

use crate::access::{AccessConfig, Secret};
use crate::persist::binlog::{BinlogConfig, DEFAULT_FILE_SIZE, DEFAULT_FSYNC_MS, Fsync};
use crate::protocol::codec::MAX_JOB_SIZE_LIMIT;
use crate::server::ListenAddr;
use crate::server::policy::{AuthMode, ListenerSpec, SpecAddr};
use crate::server::tls::CertFiles;

use super::Cli;
use super::values::hostname;

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

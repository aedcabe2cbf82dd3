//! The `redstalk` binary: parse beanstalkd-style flags, bind, and serve until SIGTERM.
//!
//! Exit status: 0 after a clean shutdown (SIGTERM, SIGINT), and `--help`, `-v`;
//! [`EXIT_USAGE`] (5, beanstalkd's) when the command line or the configuration it
//! names cannot run (an unknown flag, a value out of range, an unreadable token file):
//! fix the flags, restarting will not help; 1 when redstalk could not start or stopped
//! on a failure (a port taken, Redis unreachable at start, a log that cannot be read),
//! after printing why: a supervisor may restart it once the cause is fixed.
//!
//! Logging (stderr): warnings and errors always; `-V` adds startup (version, engine,
//! addresses), shutdown and each connection opened or closed with its peer; `-VV` adds
//! every request and reply. `REDSTALK_LOG` (an `EnvFilter`) overrides the level.

use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use redstalk::access::Control;
use redstalk::build_info;
use redstalk::cli::{Cli, EXIT_USAGE, RedisMode, RedisSettings, Settings};
use redstalk::cluster::{Cluster, ClusterConfig, ClusterError};
use redstalk::engine::{Engine, EngineConfig};
use redstalk::http::api::types::Mode;
use redstalk::http::{self, HttpConfig, HttpListener};
use redstalk::manual::{self, Section};
use redstalk::persist::binlog::{self, BinlogConfig};
use redstalk::persist::books::{Books, Homes};
use redstalk::persist::engine::Persisted;
use redstalk::redis::policy::PolicyError;
use redstalk::redis::schema::Lapse;
use redstalk::server::activation::Inherited;
use redstalk::server::policy::AuthMode;
use redstalk::server::tls::Tls;
use redstalk::server::{
    self, Direct, Listener, Security, ServerConfig, activation, limits, signals,
};
use redstalk::store::{AnyStore, Clock, MemoryStore, RedisStore};
use redstalk::util::memory::{self, LimitSource, MemoryBudget};

fn main() -> ExitCode {
    // The TLS provider for Redis connections, chosen here rather than left to rustls'
    // features: when a build enables both of its providers (the console test's WebDriver
    // client brings aws-lc-rs into `cargo test` builds), rustls picks none and every TLS
    // connection panics. Err: one is installed already.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => {
            let _ = err.print();
            return ExitCode::from(EXIT_USAGE);
        }
    };
    if cli.help {
        use clap::CommandFactory;
        let _ = Cli::command().print_help();
        return ExitCode::SUCCESS;
    }
    if cli.version {
        println!("{}", build_info::version_line(cli.verbose));
        return ExitCode::SUCCESS;
    }
    if let Some(dir) = &cli.write_manual {
        use clap::CommandFactory;
        return match manual::write_manual(Cli::command(), MAN_SECTIONS, dir) {
            Ok(_) => ExitCode::SUCCESS,
            Err(err) => {
                eprintln!("redstalk: --write-manual {}: {err}", dir.display());
                ExitCode::FAILURE
            }
        };
    }
    let settings = match cli.validate() {
        Ok(s) => s,
        Err(err) => {
            eprintln!("redstalk: {err}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    init_logging(settings.verbose);
    for w in &settings.warnings {
        tracing::warn!("{w}");
    }
    match run(settings) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("redstalk: {err:#}");
            ExitCode::FAILURE
        }
    }
}

/// What `man redstalk` says after the options (the options come from the flags).
const MAN_SECTIONS: &[Section] = &[
    Section {
        title: "ENVIRONMENT",
        paragraphs: &[
            "Each long option also reads the variable its description names ([env: ...]); \
             the flag wins when both are given.",
            "REDSTALK_LOG\tA log filter (tracing's EnvFilter syntax, e.g. \
             redstalk=debug,warn); it overrides -V and -VV. Logs go to stderr.",
            "LISTEN_FDS, LISTEN_PID\tSockets passed by systemd (socket activation, as \
             redstalk.socket does): redstalk serves every one of them and ignores -l and -p.",
        ],
    },
    Section {
        title: "SIGNALS",
        paragraphs: &[
            "SIGTERM, SIGINT\tStop accepting, let each connection finish the command it is \
             running (at most --shutdown-grace seconds), exit 0.",
            "SIGUSR1\tDrain mode, as in beanstalkd: puts answer DRAINING.",
        ],
    },
    Section {
        title: "EXIT STATUS",
        paragraphs: &[
            "0\tA clean shutdown, or -h, -v.",
            "1\tredstalk could not start or stopped on a failure (a port taken, Redis \
             unreachable at start, a log that cannot be read), after saying why.",
            "5\tThe command line cannot run (an unknown flag, a value out of range), as \
             beanstalkd: restarting will not help.",
        ],
    },
    Section {
        title: "FILES",
        paragraphs: &[
            "/etc/default/redstalk\tThe settings redstalk.service passes (the Debian package).",
            "/var/lib/redstalk\tThe service's state directory: give -b /var/lib/redstalk \
             to keep jobs there across restarts.",
            "/lib/systemd/system/redstalk.service, redstalk.socket\tThe units.",
            "/usr/share/doc/redstalk/\tREADME.md and the guides (OPERATIONS.md, BINLOG.md, \
             LEADER.md, REDIS.md, API.md, CLI.md).",
        ],
    },
    Section {
        title: "SEE ALSO",
        paragraphs: &["redstalkctl(1), redstalk-namespace(1), beanstalkd(1)"],
    },
];

fn init_logging(verbose: u8) {
    let level = match verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("REDSTALK_LOG")
        // rustls warns of what clients send (an IP address as SNI, say): a client must
        // not be able to fill the log; its errors still show.
        .unwrap_or_else(|_| {
            tracing_subscriber::EnvFilter::new(format!("redstalk={level},rustls=error,warn"))
        });
    // Colour codes only on a terminal: logs sent to a file or journal stay plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .init();
}

/// What serves clients: one engine (memory, Redis shared mode), one engine whose store
/// a committer persists (`-b`), or leader mode's roles.
enum Serving {
    Engine(Arc<Engine>),
    Persisted(Persisted),
    Cluster(Arc<Cluster>),
}

impl Serving {
    /// Which engine serves, for the start line.
    fn engine_name(&self) -> &'static str {
        match self {
            Serving::Engine(e) => e.store_name(),
            Serving::Persisted(p) => p.engine().store_name(),
            Serving::Cluster(_) => "redis-leader",
        }
    }

    /// What serves clients, as the HTTP listener and the drain handler see it.
    fn source(&self) -> http::Source {
        match self {
            Serving::Engine(engine) => http::Source::Engine(engine.clone()),
            Serving::Persisted(persisted) => http::Source::Engine(persisted.engine().clone()),
            Serving::Cluster(cluster) => http::Source::Cluster(cluster.clone()),
        }
    }
}

/// `-b DIR`: replay the log into a memory store, and serve it with every change
/// written to the log (by the group-commit committer) before it is acknowledged.
fn start_binlog(config: &BinlogConfig, engine_config: EngineConfig) -> anyhow::Result<Serving> {
    let started = std::time::Instant::now();
    let opened = binlog::open(config.clone()).context("cannot start with -b")?;
    let jobs = opened.snapshot.jobs.len();
    let read_ms = started.elapsed().as_millis() as u64;
    let (files, bytes, records) = (opened.files, opened.bytes, opened.records);
    let persisted = Persisted::start(opened.into_parts(Clock::new()), engine_config);
    tracing::info!(
        dir = %config.dir.display(),
        fsync = ?config.fsync,
        files,
        bytes,
        records,
        jobs,
        read_ms,
        replay_ms = started.elapsed().as_millis() as u64,
        "binlog replayed"
    );
    Ok(Serving::Persisted(persisted))
}

/// Start what serves clients. Everything that must work before a client can connect
/// happens here, so that "listening" means "ready" (and a SIGUSR1 sent then is not
/// fatal).
async fn start_serving(settings: &Settings) -> anyhow::Result<(Serving, Books)> {
    let memory = MemoryBudget::configure(settings.memory_limit).map(|b| {
        let source = match b.source() {
            LimitSource::Option => "--memory-limit",
            LimitSource::Cgroup => "the cgroup's memory limit",
        };
        tracing::info!(
            limit = b.limit(),
            source,
            "memory budget: puts answer OUT_OF_MEMORY once {:.0}% of it is in use",
            memory::ADMIT_SHARE * 100.0
        );
        Arc::new(b)
    });
    let engine_config = EngineConfig {
        max_job_size: settings.max_job_size,
        memory,
        dialect: settings.dialect,
        extensions: settings.extensions,
        keys: settings.keys,
        policies: None,
        schedules: None,
        retention: settings.retention,
    };
    if let Some(config) = &settings.binlog {
        std::fs::create_dir_all(&config.dir).with_context(|| {
            format!(
                "cannot start with -b: cannot create {}",
                config.dir.display()
            )
        })?;
        let books = open_books(settings, Homes::Dir(config.dir.clone())).await?;
        let engine_config = books.engine_config(engine_config);
        return Ok((start_binlog(config, engine_config)?, books));
    }
    let Some(redis) = &settings.redis else {
        let books = open_books(settings, Homes::Process).await?;
        let engine_config = books.engine_config(engine_config);
        let store = AnyStore::Memory(MemoryStore::new());
        return Ok((Serving::Engine(Engine::start(store, engine_config)), books));
    };
    // Both modes, before anything else touches the namespace: its key layout. A leader
    // of the previous version is waited for in leader mode (a rolling upgrade).
    let lapse = match redis.mode {
        RedisMode::Shared => Lapse::Refuse,
        RedisMode::Leader => Lapse::Wait,
    };
    redstalk::redis::schema::prepare(&redis.config, lapse)
        .await
        .map_err(|err| {
            if err.is_refusal() {
                anyhow::anyhow!("cannot start: {err}")
            } else {
                anyhow::Error::new(err).context(unreachable(redis))
            }
        })?;
    let conn = redis
        .config
        .connector()
        .map_err(anyhow::Error::new)
        .with_context(|| unreachable(redis))?
        .managed("definitions", std::time::Duration::from_secs(5))
        .await
        .with_context(|| unreachable(redis))?;
    let homes = Homes::Redis {
        conn,
        prefix: redis.config.prefix.clone(),
    };
    let books = open_books(settings, homes).await?;
    let engine_config = books.engine_config(engine_config);
    let serving = match redis.mode {
        RedisMode::Shared => start_shared(redis, engine_config).await,
        RedisMode::Leader => start_leader(redis, settings, engine_config).await,
    }?;
    Ok((serving, books))
}

/// The tube policies and the schedules of this mode's home, with the `--policies` and
/// `--schedules` files' written in.
async fn open_books(settings: &Settings, homes: Homes) -> anyhow::Result<Books> {
    let now_ms = redstalk::time::Clock::new().now() / 1_000_000;
    Books::open(
        &homes,
        settings.policies.as_deref(),
        settings.schedules.as_deref(),
        now_ms,
    )
    .await
    .context("cannot start: cannot read the tube policies or the schedules")
}

/// Why a start that could not use Redis failed; the reason follows (`{err:#}` prints
/// the chain): no answer, a refused password (WRONGPASS/NOAUTH), a certificate not
/// trusted...; the URL without credentials.
fn unreachable(redis: &RedisSettings) -> String {
    format!(
        "cannot start: cannot use Redis at {} (start Redis or fix --redis / \
         REDSTALK_REDIS and its options, then start redstalk again; once running, \
         redstalk rides out Redis outages by itself)",
        redstalk::redis::redact(&redis.config.url)
    )
}

/// Redis shared mode: an engine over the Redis store, once no leader mode runs on the
/// namespace and the eviction policy is safe.
async fn start_shared(
    redis: &RedisSettings,
    engine_config: EngineConfig,
) -> anyhow::Result<Serving> {
    redstalk::cluster::refuse_if_leader_mode(&redis.config)
        .await
        .map_err(|err| match err {
            ClusterError::Lease(mode) => anyhow::anyhow!("cannot start: {mode}"),
            other => anyhow::Error::new(other).context(unreachable(redis)),
        })?;
    let store = RedisStore::connect(&redis.config)
        .await
        .with_context(|| unreachable(redis))?;
    store
        .check_eviction_policy(redis.allow_eviction)
        .await
        .map_err(|err| anyhow::anyhow!("cannot start: {err}"))?;
    Ok(Serving::Engine(Engine::start(
        AnyStore::Redis(store),
        engine_config,
    )))
}

/// Redis leader mode: this instance joins the cluster (it leads or stands by).
async fn start_leader(
    redis: &RedisSettings,
    settings: &Settings,
    engine_config: EngineConfig,
) -> anyhow::Result<Serving> {
    let cluster = Cluster::connect(ClusterConfig {
        redis: redis.config.clone(),
        advertise: redis.advertise.clone(),
        http_advertise: redis.http_advertise.clone(),
        lease: redis.lease,
        engine: engine_config,
        wait_replicas: redis.wait_replicas,
        wait_timeout: redis.wait_timeout,
        allow_eviction: redis.allow_eviction,
        relay_secret: settings.relay_secret.clone(),
    })
    .await
    .map_err(|err| match err {
        ClusterError::Lease(mode) => anyhow::anyhow!("cannot start: {mode}"),
        ClusterError::Policy(policy @ PolicyError::Evicting(_)) => {
            anyhow::anyhow!("cannot start: {policy}")
        }
        other => anyhow::Error::new(other).context(unreachable(redis)),
    })?;
    Ok(Serving::Cluster(cluster))
}

/// Raise the open files limit to its hard limit, and derive the connection limits from
/// it (a standby of leader mode relays each client over a second descriptor).
fn connection_limits(settings: &Settings) -> limits::Budget {
    let relays = matches!(&settings.redis, Some(r) if r.mode == RedisMode::Leader);
    let open_files = match limits::raise_nofile() {
        Ok(lim) => {
            if let Some(from) = lim.raised_from {
                tracing::info!(
                    from,
                    to = lim.soft,
                    "raised the open files limit (RLIMIT_NOFILE) to its hard limit"
                );
            }
            lim.soft
        }
        Err(err) => {
            tracing::warn!(%err, "cannot read the open files limit (RLIMIT_NOFILE); assuming 1024");
            1024
        }
    };
    let budget = limits::budget(open_files, settings.max_connections, relays);
    for w in &budget.warnings {
        tracing::warn!("{w}");
    }
    tracing::info!(
        open_files,
        max_connections = budget.max_connections,
        descriptors_for_connections = budget.max_descriptors,
        "connection limits"
    );
    budget
}

fn run(settings: Settings) -> anyhow::Result<()> {
    // Before the runtime starts any thread: this also removes the variables from the
    // environment, which is sound only while the process has a single thread.
    let inherited = activation::take_from_env().context("socket activation")?;
    let budget = connection_limits(&settings);
    // One thread, like beanstalkd's event loop: events are handled in the order the
    // kernel reports them (a hang-up before another connection's next command).
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(serve(settings, inherited, budget))
}

/// Start, bind, serve until SIGTERM, stop: each step a function.
async fn serve(
    settings: Settings,
    inherited: Vec<Inherited>,
    budget: limits::Budget,
) -> anyhow::Result<()> {
    let security = security(&settings)?;
    let (serving, books) = start_serving(&settings).await?;
    let books_stop = CancellationToken::new();
    let following = books.follow(&books_stop);
    let shutdown = install_signals(&serving, &security)?;
    let listener = bind_beanstalk(&settings, inherited)?;
    // Bound before the privileges go (a port below 1024), served after.
    let http_listener = settings.http.map(HttpListener::bind).transpose()?;
    if let Some(user) = &settings.user {
        server::privileges::become_user(user)?;
    }
    let http = http_listener
        .map(|l| start_http(l, &settings, &serving, &security, listener.ports(), &books));
    tracing::info!(
        version = build_info::VERSION,
        commit = build_info::COMMIT,
        pid = std::process::id(),
        engine = serving.engine_name(),
        listen = %listener.describe(),
        http = http.as_ref().map_or("off", |h| h.addr.as_str()),
        "redstalk started"
    );
    let config = ServerConfig {
        max_connections: budget.max_connections,
        max_descriptors: budget.max_descriptors,
        shutdown_grace: settings.shutdown_grace,
        security,
    };
    serve_until_shutdown(serving, listener, config, shutdown).await;
    if let Some(http) = http {
        http.stop().await;
    }
    books_stop.cancel();
    for task in following {
        let _ = task.await;
    }
    tracing::info!("redstalk stopped");
    Ok(())
}

/// SIGUSR1 enters drain mode; SIGHUP reloads the roles and TLS files (when there
/// are any); the future that resolves on SIGTERM or SIGINT.
fn install_signals(
    serving: &Serving,
    security: &Arc<Security>,
) -> anyhow::Result<impl Future<Output = ()> + use<>> {
    let drained = serving.source();
    signals::spawn_drain_handler(move || match &drained {
        http::Source::Engine(engine) => engine.enter_drain_mode(),
        http::Source::Cluster(cluster) => cluster.enter_drain_mode(),
    })
    .context("installing the SIGUSR1 handler")?;
    if security.tls.is_some() || security.control.config().roles_file.is_some() {
        let security = security.clone();
        signals::spawn_reload_handler(move || security.reload())
            .context("installing the SIGHUP handler")?;
    }
    signals::shutdown_signal().context("installing the SIGTERM handler")
}

/// Who may connect: the roles file, the TLS files, the pending bound. A file that
/// cannot be used stops the start, saying why.
fn security(settings: &Settings) -> anyhow::Result<Arc<Security>> {
    let control = Control::new(settings.access_config.clone())?;
    if let Some(path) = &settings.access_config.roles_file
        && let Some(warning) = redstalk::access::readable_by_others(path)
    {
        tracing::warn!("{warning}");
    }
    let roles = control.roles();
    for spec in &settings.listeners {
        if let Some(role) = &spec.policy.role
            && roles.role(role).is_none()
        {
            anyhow::bail!(
                "--listen {}: role={role} is not defined in the roles file (--roles)",
                spec.addr
            );
        }
        if spec.policy.auth.takes_tokens() && roles.tokens().is_empty() {
            tracing::warn!(
                listener = %spec.addr,
                "a token listener, but no token is configured (--roles with [[token]], or \
                 --admin-token): every auth is refused"
            );
        }
        if spec.policy.auth == AuthMode::Cert
            && settings.access_config.roles_file.is_some()
            && !roles.has_certs()
        {
            tracing::warn!(
                listener = %spec.addr,
                "a certificate listener, but the roles file names no [[cert]]: every client \
                 certificate is refused"
            );
        }
    }
    let leader_mode = matches!(&settings.redis, Some(r) if r.mode == RedisMode::Leader);
    let relays = settings
        .listeners
        .iter()
        .any(|l| l.policy.auth == AuthMode::Relay);
    if relays && !leader_mode {
        anyhow::bail!("auth=relay listeners are for leader mode's instances (--redis-mode leader)");
    }
    let restricted = settings.access_config.roles_file.is_some()
        || settings.listeners.iter().any(|l| !l.policy.is_open());
    if leader_mode && restricted && settings.relay_secret.is_none() {
        anyhow::bail!(
            "leader mode with authenticating listeners or a roles file needs \
             --relay-secret-file FILE (the same on every instance): a standby proves it \
             before the leader serves a client it relays under that client's role"
        );
    }
    let tls = settings.tls.clone().map(Tls::load).transpose()?;
    Ok(Security::new(
        control,
        tls,
        settings.max_pending,
        settings.auth_timeout,
        settings.relay_secret.clone(),
    ))
}

/// The beanstalk listeners: `-l`/`-p` (or, as beanstalkd, the sockets handed over by
/// systemd in their place) and every `--listen`.
fn bind_beanstalk(settings: &Settings, inherited: Vec<Inherited>) -> anyhow::Result<Listener> {
    if !inherited.is_empty() {
        tracing::info!(
            sockets = inherited.len(),
            names = ?inherited.iter().filter_map(|i| i.name.as_deref()).collect::<Vec<_>>(),
            ignored = %settings.listen,
            "serving the sockets passed by systemd (LISTEN_FDS); -l and -p are not used"
        );
    }
    let default = settings.default_listener.then_some(&settings.listen);
    Ok(Listener::bind_all(default, &settings.listeners, inherited)?)
}

/// How this process keeps its jobs, as the HTTP API's `/whoami` says it.
fn mode(settings: &Settings) -> Mode {
    match (&settings.binlog, &settings.redis) {
        (Some(_), _) => Mode::Binlog,
        (None, Some(r)) if r.mode == RedisMode::Leader => Mode::Leader,
        (None, Some(_)) => Mode::Shared,
        (None, None) => Mode::Memory,
    }
}

/// The HTTP listener, serving on a task of its own until stopped.
struct HttpServing {
    /// Where it listens, for the start line.
    addr: String,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl HttpServing {
    /// Stop accepting; its connections end within about a second.
    async fn stop(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }
}

fn start_http(
    listener: HttpListener,
    settings: &Settings,
    serving: &Serving,
    security: &Arc<Security>,
    ports: Vec<Arc<server::listen::Port>>,
    books: &Books,
) -> HttpServing {
    let addr = listener
        .local_addr()
        .map_or_else(|_| "on".to_string(), |a| a.to_string());
    let config = HttpConfig {
        metrics_tubes: settings.metrics_tubes,
        access: settings.access.clone(),
        security: security.clone(),
        ports,
        mode: mode(settings),
        placements: settings
            .redis
            .as_ref()
            .map(|r| r.config.lookups.placements().clone())
            .unwrap_or_default(),
        books: books.clone(),
    };
    let stop = CancellationToken::new();
    let task = tokio::spawn(http::serve(
        serving.source(),
        listener,
        config,
        stop.clone(),
    ));
    HttpServing { addr, stop, task }
}

/// Serve clients until `shutdown`, then end what serves them: an engine's tasks and
/// store, a persisted engine's last writes, or leader mode's roles (the leadership
/// writes its last batches and gives the lease up).
async fn serve_until_shutdown(
    serving: Serving,
    listener: Listener,
    config: ServerConfig,
    shutdown: impl Future<Output = ()>,
) {
    let stop = CancellationToken::new();
    match serving {
        Serving::Engine(engine) => {
            let router = Direct::new(engine.clone(), stop.clone());
            server::run(router, listener, config, stop, shutdown).await;
            engine.shutdown().await;
            engine.close_store().await;
        }
        Serving::Persisted(persisted) => {
            let engine = persisted.engine().clone();
            let router = Direct::new(engine.clone(), stop.clone());
            server::run(router, listener, config, stop, shutdown).await;
            persisted.finish().await;
            engine.close_store().await;
        }
        Serving::Cluster(cluster) => {
            let roles = tokio::spawn(cluster.clone().run(stop.clone()));
            server::run(cluster.clone(), listener, config, stop, shutdown).await;
            cluster.connections_finished();
            let _ = roles.await;
        }
    }
}

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

use redstalk::cli::{Cli, EXIT_USAGE, RedisMode, Settings};
use redstalk::cluster::{Cluster, ClusterConfig, ClusterError};
use redstalk::engine::{Engine, EngineConfig};
use redstalk::http::api::types::Mode;
use redstalk::http::{self, HttpConfig, HttpListener};
use redstalk::persist::binlog::{self, BinlogConfig};
use redstalk::persist::engine::Persisted;
use redstalk::redis::policy::PolicyError;
use redstalk::server::activation::Inherited;
use redstalk::server::{self, Direct, Listener, ServerConfig, activation, limits, signals};
use redstalk::store::{AnyStore, Clock, MemoryStore, RedisStore};

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
        println!(
            "redstalk {} (beanstalkd protocol 1.13)",
            env!("CARGO_PKG_VERSION")
        );
        return ExitCode::SUCCESS;
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

fn init_logging(verbose: u8) {
    let level = match verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("REDSTALK_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(format!("redstalk={level},warn")));
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
async fn start_serving(settings: &Settings) -> anyhow::Result<Serving> {
    let engine_config = EngineConfig {
        max_job_size: settings.max_job_size,
        dialect: settings.dialect,
    };
    if let Some(config) = &settings.binlog {
        return start_binlog(config, engine_config);
    }
    let Some(redis) = &settings.redis else {
        let store = AnyStore::Memory(MemoryStore::new());
        return Ok(Serving::Engine(Engine::start(store, engine_config)));
    };
    // The reason follows (`{err:#}` prints the chain): no answer, a refused password
    // (WRONGPASS/NOAUTH), a certificate not trusted...; the URL without credentials.
    let unreachable = || {
        format!(
            "cannot start: cannot use Redis at {} (start Redis or fix --redis / \
             REDSTALK_REDIS and its options, then start redstalk again; once running, \
             redstalk rides out Redis outages by itself)",
            redstalk::redis::redact(&redis.config.url)
        )
    };
    // Both modes, before anything else touches the namespace: its key layout.
    redstalk::redis::schema::prepare(&redis.config)
        .await
        .map_err(|err| {
            if err.is_refusal() {
                anyhow::anyhow!("cannot start: {err}")
            } else {
                anyhow::Error::new(err).context(unreachable())
            }
        })?;
    match redis.mode {
        RedisMode::Shared => {
            redstalk::cluster::refuse_if_leader_mode(&redis.config)
                .await
                .map_err(|err| match err {
                    ClusterError::Lease(mode) => anyhow::anyhow!("cannot start: {mode}"),
                    other => anyhow::Error::new(other).context(unreachable()),
                })?;
            let store = RedisStore::connect(&redis.config)
                .await
                .with_context(unreachable)?;
            store
                .check_eviction_policy(redis.allow_eviction)
                .await
                .map_err(|err| anyhow::anyhow!("cannot start: {err}"))?;
            Ok(Serving::Engine(Engine::start(
                AnyStore::Redis(store),
                engine_config,
            )))
        }
        RedisMode::Leader => {
            let cluster = Cluster::connect(ClusterConfig {
                redis: redis.config.clone(),
                advertise: redis.advertise.clone(),
                http_advertise: redis.http_advertise.clone(),
                lease: redis.lease,
                engine: engine_config,
                wait_replicas: redis.wait_replicas,
                wait_timeout: redis.wait_timeout,
                allow_eviction: redis.allow_eviction,
            })
            .await
            .map_err(|err| match err {
                ClusterError::Lease(mode) => anyhow::anyhow!("cannot start: {mode}"),
                ClusterError::Policy(policy @ PolicyError::Evicting(_)) => {
                    anyhow::anyhow!("cannot start: {policy}")
                }
                other => anyhow::Error::new(other).context(unreachable()),
            })?;
            Ok(Serving::Cluster(cluster))
        }
    }
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
    let serving = start_serving(&settings).await?;
    let shutdown = install_signals(&serving)?;
    let listener = bind_beanstalk(&settings, inherited)?;
    // Bound before the privileges go (a port below 1024), served after.
    let http_listener = settings.http.map(HttpListener::bind).transpose()?;
    if let Some(user) = &settings.user {
        server::privileges::become_user(user)?;
    }
    let http = http_listener.map(|l| start_http(l, &settings, &serving));
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
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
    };
    serve_until_shutdown(serving, listener, config, shutdown).await;
    if let Some(http) = http {
        http.stop().await;
    }
    tracing::info!("redstalk stopped");
    Ok(())
}

/// SIGUSR1 enters drain mode; the future that resolves on SIGTERM or SIGINT.
fn install_signals(serving: &Serving) -> anyhow::Result<impl Future<Output = ()> + use<>> {
    let drained = serving.source();
    signals::spawn_drain_handler(move || match &drained {
        http::Source::Engine(engine) => engine.enter_drain_mode(),
        http::Source::Cluster(cluster) => cluster.enter_drain_mode(),
    })
    .context("installing the SIGUSR1 handler")?;
    signals::shutdown_signal().context("installing the SIGTERM handler")
}

/// The beanstalk listener: `-l`/`-p`, or, as beanstalkd, the sockets handed over by
/// systemd in their place.
fn bind_beanstalk(settings: &Settings, inherited: Vec<Inherited>) -> anyhow::Result<Listener> {
    if inherited.is_empty() {
        return Ok(Listener::bind(&settings.listen)?);
    }
    tracing::info!(
        sockets = inherited.len(),
        names = ?inherited.iter().filter_map(|i| i.name.as_deref()).collect::<Vec<_>>(),
        ignored = %settings.listen,
        "serving the sockets passed by systemd (LISTEN_FDS); -l and -p are not used"
    );
    Ok(Listener::inherited(inherited)?)
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

fn start_http(listener: HttpListener, settings: &Settings, serving: &Serving) -> HttpServing {
    let addr = listener
        .local_addr()
        .map_or_else(|_| "on".to_string(), |a| a.to_string());
    let config = HttpConfig {
        metrics_tubes: settings.metrics_tubes,
        access: settings.access.clone(),
        mode: mode(settings),
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

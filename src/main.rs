//! The `redstalk` binary: parse beanstalkd-style flags, bind, and serve until SIGTERM.
//!
//! Logging (stderr): warnings and errors always; `-V` adds startup (version, engine,
//! addresses), shutdown and each connection opened or closed with its peer; `-VV` adds
//! every request and reply. `REDSTALK_LOG` (an `EnvFilter`) overrides the level.

use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;

use redstalk::cli::{Cli, EXIT_USAGE, Settings};
use redstalk::engine::{Engine, EngineConfig};
use redstalk::metrics::{self, MetricsListener};
use redstalk::server::{self, Listener, ServerConfig, signals};
use redstalk::store::{AnyStore, MemoryStore, RedisStore};

fn main() -> ExitCode {
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

fn run(settings: Settings) -> anyhow::Result<()> {
    // One thread, like beanstalkd's event loop: events are handled in the order the
    // kernel reports them (a hang-up before another connection's next command).
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async move {
        // Everything that must work before a client can connect comes first, so that
        // "listening" means "ready" (and a SIGUSR1 sent then is not fatal).
        let store = match &settings.redis {
            None => AnyStore::Memory(MemoryStore::new()),
            Some(config) => {
                let redis = RedisStore::connect(config).await.with_context(|| {
                    format!(
                        "cannot start: Redis at {} did not answer (start Redis or fix --redis / \
                         REDSTALK_REDIS, then start redstalk again; once running, redstalk \
                         rides out Redis outages by itself)",
                        config.url
                    )
                })?;
                AnyStore::Redis(redis)
            }
        };
        let engine = Engine::start(
            store,
            EngineConfig {
                max_job_size: settings.max_job_size,
            },
        );
        signals::spawn_drain_handler(engine.clone()).context("installing the SIGUSR1 handler")?;
        let shutdown = signals::shutdown_signal().context("installing the SIGTERM handler")?;
        let listener = Listener::bind(&settings.listen)?;
        let metrics_listener = settings.metrics.map(MetricsListener::bind).transpose()?;
        if let Some(user) = &settings.user {
            server::privileges::become_user(user)?;
        }
        let metrics_addr = match &metrics_listener {
            Some(m) => m
                .local_addr()
                .map_or_else(|_| "on".to_string(), |a| a.to_string()),
            None => "off".to_string(),
        };
        let stop_metrics = tokio_util::sync::CancellationToken::new();
        if let Some(m) = metrics_listener {
            tokio::spawn(metrics::serve(engine.clone(), m, stop_metrics.clone()));
        }
        tracing::info!(
            version = env!("CARGO_PKG_VERSION"),
            pid = std::process::id(),
            engine = engine.store_name(),
            listen = %listener.describe(),
            metrics = %metrics_addr,
            "redstalk started"
        );
        let config = ServerConfig {
            max_connections: settings.max_connections,
            shutdown_grace: settings.shutdown_grace,
        };
        server::run(engine, listener, config, shutdown).await;
        stop_metrics.cancel();
        tracing::info!("redstalk stopped");
        Ok(())
    })
}

//! Process signals: SIGUSR1 enters drain mode (as in the reference); SIGTERM and SIGINT
//! start a graceful shutdown. (The reference dies at once on SIGTERM; stopping cleanly
//! is never worse for a client: replies in flight are still written.) SIGHUP reloads
//! the roles file and the TLS files, when there are any (else it ends the process, as
//! it ends beanstalkd).

use tokio::signal::unix::{SignalKind, signal};

/// Spawn the SIGUSR1 handler; `drain` puts whatever serves clients in drain mode.
pub fn spawn_drain_handler(drain: impl Fn() + Send + 'static) -> std::io::Result<()> {
    let mut usr1 = signal(SignalKind::user_defined1())?;
    tokio::spawn(async move {
        while usr1.recv().await.is_some() {
            tracing::info!("SIGUSR1: entering drain mode; puts are refused from now on");
            drain();
        }
    });
    Ok(())
}

/// Spawn the SIGHUP handler; `reload` reads the roles and TLS files again.
pub fn spawn_reload_handler(reload: impl Fn() + Send + 'static) -> std::io::Result<()> {
    let mut hup = signal(SignalKind::hangup())?;
    tokio::spawn(async move {
        while hup.recv().await.is_some() {
            tracing::info!("SIGHUP: reloading the roles file and the TLS certificates");
            reload();
        }
    });
    Ok(())
}

/// Resolves at the first SIGTERM or SIGINT.
pub fn shutdown_signal() -> std::io::Result<impl std::future::Future<Output = ()>> {
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
            _ = int.recv() => tracing::info!("SIGINT: shutting down"),
        }
    })
}

//! The whole server in this process, for tests: an engine, the accept loop and one task
//! per connection on 127.0.0.1 at a free port, reached over real sockets, without
//! building or spawning the binary (as mini-redis' tests do).
//!
//! Ownership: the [`TestServer`] owns the server task. Dropping it, or
//! [`TestServer::shutdown`], shuts the server down as SIGTERM does (connections end,
//! the engine's tasks stop); `shutdown` also waits until that is done.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::{Direct, ListenAddr, Listener, ServerConfig};
use crate::engine::{Engine, EngineConfig};
use crate::store::{AnyStore, MemoryStore};

/// The reference's default job size limit.
const MAX_JOB_SIZE: u32 = 65_535;

/// A running in-process server.
#[derive(Debug)]
pub struct TestServer {
    addr: SocketAddr,
    engine: Arc<Engine>,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

impl TestServer {
    /// Serve a fresh memory store on 127.0.0.1 at a free port.
    pub async fn start() -> std::io::Result<TestServer> {
        TestServer::start_with(AnyStore::Memory(MemoryStore::new())).await
    }

    /// Serve `store` on 127.0.0.1 at a free port.
    pub async fn start_with(store: AnyStore) -> std::io::Result<TestServer> {
        let listener = Listener::bind(&ListenAddr::Tcp((Ipv4Addr::LOCALHOST, 0).into()))
            .map_err(std::io::Error::other)?;
        let addr: SocketAddr = listener.describe().parse().map_err(std::io::Error::other)?;
        let engine = Engine::start(
            store,
            EngineConfig {
                max_job_size: MAX_JOB_SIZE,
                memory: None,
                dialect: Default::default(),
                extensions: true,
                keys: Default::default(),
                policies: None,
                schedules: None,
                retention: Default::default(),
            },
        );
        let config = ServerConfig {
            max_connections: 1024,
            max_descriptors: 2048,
            shutdown_grace: Duration::from_secs(1),
            security: super::Security::open(),
        };
        let (stop, stopped) = oneshot::channel::<()>();
        // Shut down when told, or when the handle is dropped.
        let shutdown = async move {
            let _ = stopped.await;
        };
        let stop_all = CancellationToken::new();
        let router = Direct::new(engine.clone(), stop_all.clone());
        let serving = engine.clone();
        let task = tokio::spawn(async move {
            super::run(router, listener, config, stop_all, shutdown).await;
            serving.shutdown().await;
        });
        Ok(TestServer {
            addr,
            engine,
            stop: Some(stop),
            task,
        })
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The server's engine (to inspect state without a client).
    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    /// Shut down gracefully and wait until the server has stopped.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = (&mut self.task).await;
    }
}

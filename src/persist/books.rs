//! The process's books of definitions (`book.rs`): the tube policies and the
//! schedules, opened together in the home of the storage mode, seeded from the
//! `--policies` and `--schedules` files, handed to each engine, and followed (a Redis
//! home) until the process stops.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::book::{Book, Home, HomeError, Kept};
use super::policies::{self, PolicyBook};
use super::schedules::{self, ScheduleBook};
use crate::engine::EngineConfig;
use crate::redis::RedisConn;
use crate::schedule::Schedules;
use crate::store::Policies;

/// Where a storage mode keeps its books.
pub enum Homes {
    /// This process (memory mode).
    Process,
    /// Files in `-b DIR`.
    Dir(PathBuf),
    /// The Redis namespace with this prefix.
    Redis { conn: RedisConn, prefix: String },
}

impl Homes {
    fn home<K: Kept>(&self) -> Home {
        match self {
            Homes::Process => Home::Process,
            Homes::Dir(dir) => Home::file::<K>(dir),
            Homes::Redis { conn, prefix } => Home::redis::<K>(conn.clone(), prefix),
        }
    }
}

/// The policies and the schedules of this process.
#[derive(Clone, Debug)]
pub struct Books {
    pub policies: Arc<PolicyBook>,
    pub schedules: Arc<ScheduleBook>,
}

impl Books {
    /// Open both books in `homes`, writing in the seed files' definitions
    /// (`policies_file`, `schedules_file`; `now_ms`: when new schedules count from).
    pub async fn open(
        homes: &Homes,
        policies_file: Option<&Path>,
        schedules_file: Option<&Path>,
        now_ms: u64,
    ) -> Result<Books, HomeError> {
        let policy_seed = policies_file.map(policies::read_seed).transpose()?;
        let schedule_seed = schedules_file
            .map(|path| schedules::read_seed(path, now_ms))
            .transpose()?;
        let policies = open::<Policies>(homes, policy_seed.unwrap_or_default()).await?;
        let schedules = open::<Schedules>(homes, schedule_seed.unwrap_or_default()).await?;
        Ok(Books {
            policies,
            schedules,
        })
    }

    /// Books with nothing in them and no home (tests, tools).
    pub fn empty() -> Books {
        Books {
            policies: Book::empty(),
            schedules: Book::empty(),
        }
    }

    /// `config` with this process's policies and schedules followed by its engine.
    pub fn engine_config(&self, config: EngineConfig) -> EngineConfig {
        EngineConfig {
            policies: Some(self.policies.subscribe()),
            schedules: Some(self.schedules.subscribe()),
            ..config
        }
    }

    /// With a Redis home, follow both books until `stop`.
    pub fn follow(&self, stop: &CancellationToken) -> Vec<JoinHandle<()>> {
        [
            self.policies.clone().follow(stop.clone()),
            self.schedules.clone().follow(stop.clone()),
        ]
        .into_iter()
        .flatten()
        .collect()
    }
}

async fn open<K: Kept>(
    homes: &Homes,
    seed: Vec<(String, K::Entry)>,
) -> Result<Arc<Book<K>>, HomeError> {
    let book = Book::<K>::open(homes.home::<K>(), seed).await?;
    let kept = book.current().entries().len();
    if kept > 0 {
        tracing::info!(
            what = K::WHAT,
            kept,
            persisted = book.persisted(),
            "definitions"
        );
    }
    Ok(book)
}

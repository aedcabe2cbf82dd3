//! A set of named definitions an operator keeps (the tube policies, the schedules),
//! where it is kept, and how a change reaches everything that applies it: a [`Book`],
//! one per kind per process.
//!
//! Homes, by storage mode:
//! - memory: this process (nothing persists, as with its jobs);
//! - `-b DIR`: one JSON file in `DIR`, rewritten whole on each change (a new file,
//!   synced, then renamed over the old one, the directory synced), so a crash leaves
//!   the old set or the new, never a torn one;
//! - Redis (both modes): a hash, a field per definition (its name, its JSON), so two
//!   instances that change two definitions at once both land. A change also
//!   increments a version counter (one script: both or neither); every instance reads
//!   that counter each [`FOLLOW_PERIOD`] and the hash when it moved, so a change made
//!   through any instance reaches the others within that period, and a quiet second
//!   costs Redis one GET.
//!
//! A seed (a `--policies` or `--schedules` file) is written into the home at start,
//! replacing the home's definitions of the same names; the home's others stay.
//!
//! Invariants: the current set is a `watch` value; a change is persisted before it is
//! published, and changes through this process are serialized (a lock held across the
//! write: the home's write is the one `.await` under it, and nothing else takes that
//! lock); a definition in a home that does not parse is skipped with a warning, never
//! fatal to the others.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::redis::RedisConn;
use crate::redis::keys::Keys;

/// How often an instance with a Redis home reads the definitions again.
pub const FOLLOW_PERIOD: Duration = Duration::from_secs(1);

/// A set of named definitions a [`Book`] keeps.
pub trait Kept: Default + PartialEq + Send + Sync + Sized + 'static {
    /// One definition, as its home keeps it (JSON).
    type Entry: Serialize + DeserializeOwned + Send + Sync + 'static;
    /// Why a definition was refused (said to whoever asked: a 400).
    type Refused: std::error::Error + Send + Sync + 'static;
    /// For log lines and errors: "policies", "schedules".
    const WHAT: &'static str;
    /// The `-b` home's file name, in the log's directory.
    const FILE_NAME: &'static str;

    /// The Redis home's hash and version counter.
    fn redis_keys(keys: &Keys) -> (String, String);
    /// The set with `name` defined as `entry` (replacing what it had).
    fn with(&self, name: &str, entry: Self::Entry) -> Result<Self, Self::Refused>;
    /// The set without `name`; `None` when it has no such definition.
    fn without(&self, name: &str) -> Option<Self>;
    /// `name`'s definition as kept (after [`Kept::with`] made it canonical).
    fn entry(&self, name: &str) -> Option<Self::Entry>;
    /// Every definition with its name.
    fn entries(&self) -> Vec<(String, Self::Entry)>;
    /// A set of kept definitions; each one not valid is passed to `skipped` and left out.
    fn from_kept(
        entries: Vec<(String, Self::Entry)>,
        skipped: impl FnMut(&str, Self::Refused),
    ) -> Self;
    /// The set with each of `seed` defined as [`Kept::with`] would (those refused
    /// passed to `refused`); a kind with many definitions does it in one step.
    fn seeded(
        self,
        seed: Vec<(String, Self::Entry)>,
        mut refused: impl FnMut(&str, Self::Refused),
    ) -> Self {
        let mut set = self;
        for (name, entry) in seed {
            match set.with(&name, entry) {
                Ok(next) => set = next,
                Err(e) => refused(&name, e),
            }
        }
        set
    }
    /// The file home's whole text.
    fn file_text(&self) -> Vec<u8>;
    /// The definitions a file home's text holds.
    fn from_file_text(bytes: &[u8]) -> Result<Vec<(String, Self::Entry)>, serde_json::Error>;
}

/// Where the definitions are kept.
pub enum Home {
    /// This process only (memory mode).
    Process,
    /// A file (in `-b DIR`).
    File(PathBuf),
    /// A hash in Redis (either Redis mode), and the counter each change increments.
    Redis {
        conn: RedisConn,
        key: String,
        version: String,
    },
}

impl Home {
    /// The Redis home of `K` in the namespace with `prefix`.
    pub fn redis<K: Kept>(conn: RedisConn, prefix: &str) -> Home {
        let (key, version) = K::redis_keys(&Keys::new(prefix));
        Home::Redis { conn, key, version }
    }

    /// The file home of `K` in the log directory `dir`.
    pub fn file<K: Kept>(dir: &Path) -> Home {
        Home::File(dir.join(K::FILE_NAME))
    }
}

/// Why the definitions could not be read or kept.
#[derive(Debug, thiserror::Error)]
pub enum HomeError {
    /// The file could not be read or written (the OS's words are the source).
    #[error("{what}: cannot {action} {path}")]
    Io {
        what: &'static str,
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The file is not a list this version reads: fix or remove it.
    #[error("{what}: {path} does not parse: {why}")]
    Damaged {
        what: &'static str,
        path: PathBuf,
        why: String,
    },
    /// Redis did not answer as it should; try again once it is reachable.
    #[error("{what}: Redis {command}")]
    Redis {
        what: &'static str,
        command: &'static str,
        #[source]
        source: redis::RedisError,
    },
}

/// Why a change was not made.
#[derive(Debug, thiserror::Error)]
pub enum ChangeError<R: std::error::Error + 'static> {
    /// The definition itself is wrong: the caller says so to whoever asked (a 400).
    #[error(transparent)]
    Refused(R),
    /// It could not be persisted: nothing changed; the caller may try again.
    #[error(transparent)]
    Home(#[from] HomeError),
}

/// The process's definitions of one kind, their home, and their subscribers.
pub struct Book<K: Kept> {
    home: Home,
    current: watch::Sender<Arc<K>>,
    /// Serializes this process's changes (each is a read, a change and a write).
    changing: tokio::sync::Mutex<()>,
}

impl<K: Kept> std::fmt::Debug for Book<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Book")
            .field("what", &K::WHAT)
            .field("persisted", &self.persisted())
            .finish_non_exhaustive()
    }
}

impl<K: Kept> Book<K> {
    /// Read the definitions from `home`, then write `seed`'s into it (a file home is
    /// written once, however long the seed).
    pub async fn open(home: Home, seed: Vec<(String, K::Entry)>) -> Result<Arc<Self>, HomeError> {
        let changed: Vec<String> = seed.iter().map(|(name, _)| name.clone()).collect();
        // A seed's definitions parsed; one the set refuses (too many, say) is said
        // here and the others kept.
        let set = load::<K>(&home).await?.seeded(seed, |name, e| {
            tracing::warn!(what = K::WHAT, %name, err = %e, "seed: not kept");
        });
        match &home {
            Home::File(_) if !changed.is_empty() => save::<K>(&home, &set, "").await?,
            _ => {
                for name in &changed {
                    save::<K>(&home, &set, name).await?;
                }
            }
        }
        Ok(Self::holding(home, set))
    }

    /// A book with no home and nothing in it (tests, tools).
    pub fn empty() -> Arc<Self> {
        Self::holding(Home::Process, K::default())
    }

    fn holding(home: Home, set: K) -> Arc<Self> {
        let (current, _) = watch::channel(Arc::new(set));
        Arc::new(Book {
            home,
            current,
            changing: tokio::sync::Mutex::new(()),
        })
    }

    /// Every new set, from the current one on.
    pub fn subscribe(&self) -> watch::Receiver<Arc<K>> {
        self.current.subscribe()
    }

    pub fn current(&self) -> Arc<K> {
        self.current.borrow().clone()
    }

    /// Whether the definitions persist (`false`: this process only).
    pub fn persisted(&self) -> bool {
        !matches!(self.home, Home::Process)
    }

    /// Define `name` as `entry`, replacing what it had; persisted, then published.
    pub async fn set(
        &self,
        name: &str,
        entry: K::Entry,
    ) -> Result<Arc<K>, ChangeError<K::Refused>> {
        self.change(name, |set| set.with(name, entry).map(Some))
            .await
            .map(|next| next.unwrap_or_else(|| self.current()))
    }

    /// Remove `name`'s definition; `false` when there was none.
    pub async fn remove(&self, name: &str) -> Result<bool, HomeError> {
        let removed = self
            .change::<std::convert::Infallible>(name, |set| Ok(set.without(name)))
            .await;
        match removed {
            Ok(next) => Ok(next.is_some()),
            Err(ChangeError::Home(e)) => Err(e),
            Err(ChangeError::Refused(never)) => match never {},
        }
    }

    /// Change `name` as `f` decides from the current set (its answer: the next set,
    /// or `None` for no change), persisted, then published; the set published.
    pub async fn change<R: std::error::Error + 'static>(
        &self,
        name: &str,
        f: impl FnOnce(&K) -> Result<Option<K>, R>,
    ) -> Result<Option<Arc<K>>, ChangeError<R>> {
        let _one = self.changing.lock().await;
        let Some(next) = f(&self.current()).map_err(ChangeError::Refused)? else {
            return Ok(None);
        };
        save::<K>(&self.home, &next, name).await?;
        let next = Arc::new(next);
        self.current.send_replace(next.clone());
        Ok(Some(next))
    }

    /// With a Redis home, read the definitions each [`FOLLOW_PERIOD`] until `stop`,
    /// publishing any change another instance made (a failed read is logged once and
    /// retried).
    pub fn follow(self: Arc<Self>, stop: CancellationToken) -> Option<tokio::task::JoinHandle<()>> {
        if !matches!(self.home, Home::Redis { .. }) {
            return None;
        }
        Some(tokio::spawn(async move {
            let mut failing = false;
            let mut seen = None;
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(FOLLOW_PERIOD) => {}
                }
                // Not under `changing`: a change of this process publishes what it
                // wrote, and a read racing it publishes the same or is corrected by the
                // next read (the counter, read before the hash, has moved again).
                let read = match redis_version::<K>(&self.home).await {
                    Ok(v) if Some(v) == seen => continue,
                    Ok(v) => load::<K>(&self.home).await.map(|set| (v, set)),
                    Err(e) => Err(e),
                };
                match read {
                    Ok((version, set)) => {
                        seen = Some(version);
                        if failing {
                            tracing::info!(what = K::WHAT, "reading them from Redis again");
                            failing = false;
                        }
                        if *self.current() != set {
                            self.current.send_replace(Arc::new(set));
                        }
                    }
                    Err(err) if !failing => {
                        let source = std::error::Error::source(&err).map(ToString::to_string);
                        tracing::warn!(what = K::WHAT, %err, ?source,
                            "cannot read them from Redis; keeping the last ones");
                        failing = true;
                    }
                    Err(_) => {}
                }
            }
        }))
    }
}

/// A Redis home's change counter (0 before the first change; other homes: 0).
async fn redis_version<K: Kept>(home: &Home) -> Result<u64, HomeError> {
    let Home::Redis { conn, version, .. } = home else {
        return Ok(0);
    };
    let v: Option<u64> = redis::cmd("GET")
        .arg(version)
        .query_async(&mut conn.clone())
        .await
        .map_err(|source| HomeError::Redis {
            what: K::WHAT,
            command: "GET version",
            source,
        })?;
    Ok(v.unwrap_or(0))
}

/// Set (`ARGV[2]` non-empty: its JSON) or remove (empty) one definition and count the
/// change, in one step.
const SAVE: &str = "\
if ARGV[2] == '' then redis.call('HDEL', KEYS[1], ARGV[1]) \
else redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) end \
return redis.call('INCR', KEYS[2])";

async fn load<K: Kept>(home: &Home) -> Result<K, HomeError> {
    let entries = match home {
        Home::Process => return Ok(K::default()),
        Home::File(path) => match std::fs::read(path) {
            Ok(bytes) => K::from_file_text(&bytes).map_err(|e| HomeError::Damaged {
                what: K::WHAT,
                path: path.clone(),
                why: e.to_string(),
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(source) => {
                return Err(HomeError::Io {
                    what: K::WHAT,
                    action: "read",
                    path: path.clone(),
                    source,
                });
            }
        },
        Home::Redis { conn, key, .. } => {
            let fields: Vec<(String, String)> = redis::cmd("HGETALL")
                .arg(key)
                .query_async(&mut conn.clone())
                .await
                .map_err(|source| HomeError::Redis {
                    what: K::WHAT,
                    command: "HGETALL",
                    source,
                })?;
            fields
                .into_iter()
                .filter_map(|(name, json)| match serde_json::from_str(&json) {
                    Ok(entry) => Some((name, entry)),
                    Err(e) => {
                        tracing::warn!(what = K::WHAT, %name, err = %e,
                            "a definition in Redis does not parse; skipped");
                        None
                    }
                })
                .collect()
        }
    };
    Ok(K::from_kept(entries, |name, err| {
        tracing::warn!(what = K::WHAT, %name, %err, "a kept definition is not valid; skipped");
    }))
}

/// Persist the change of `name` (its definition in `set`, or gone from it); `set` is
/// the whole set after it (what a file home writes).
async fn save<K: Kept>(home: &Home, set: &K, name: &str) -> Result<(), HomeError> {
    match home {
        Home::Process => Ok(()),
        Home::File(path) => {
            let path = path.clone();
            let text = set.file_text();
            tokio::task::spawn_blocking(move || write_file(K::WHAT, &path, &text))
                .await
                .map_err(|e| HomeError::Io {
                    what: K::WHAT,
                    action: "write",
                    path: PathBuf::new(),
                    source: std::io::Error::other(e),
                })?
        }
        Home::Redis { conn, key, version } => {
            // An entry is plain values: it always serializes.
            let json = set
                .entry(name)
                .and_then(|e| serde_json::to_string(&e).ok())
                .unwrap_or_default();
            let _: u64 = redis::Script::new(SAVE)
                .key(key)
                .key(version)
                .arg(name)
                .arg(json)
                .invoke_async(&mut conn.clone())
                .await
                .map_err(|source| HomeError::Redis {
                    what: K::WHAT,
                    command: "the save script",
                    source,
                })?;
            Ok(())
        }
    }
}

/// Write `text` to `path` whole: a new file beside it, synced, renamed over it, the
/// directory synced.
fn write_file(what: &'static str, path: &Path, text: &[u8]) -> Result<(), HomeError> {
    use std::io::Write;
    let io = |action, p: &Path| {
        let p = p.to_path_buf();
        move |source| HomeError::Io {
            what,
            action,
            path: p,
            source,
        }
    };
    let tmp = path.with_extension("json.new");
    let mut f = std::fs::File::create(&tmp).map_err(io("create", &tmp))?;
    f.write_all(text).map_err(io("write", &tmp))?;
    f.sync_all().map_err(io("sync", &tmp))?;
    std::fs::rename(&tmp, path).map_err(io("rename into place", path))?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io("sync", dir))?;
    }
    Ok(())
}

/// A seed file's text that does not parse.
pub fn damaged(what: &'static str, path: &Path, why: String) -> HomeError {
    HomeError::Damaged {
        what,
        path: path.into(),
        why,
    }
}

/// Read a seed file's text.
pub fn read_text(what: &'static str, path: &Path) -> Result<String, HomeError> {
    std::fs::read_to_string(path).map_err(|source| HomeError::Io {
        what,
        action: "read",
        path: path.into(),
        source,
    })
}

//! Where the tube policies (store/policy.rs, docs/POLICIES.md) are kept, and how a
//! change reaches every store that applies them: the [`PolicyBook`], one per process.
//!
//! Homes, by storage mode:
//! - memory: this process (nothing persists, as with its jobs);
//! - `-b DIR`: `DIR/policies.json`, rewritten whole on each change (a new file, synced,
//!   then renamed over the old one, the directory synced), so a crash leaves the old
//!   set or the new, never a torn one;
//! - Redis (both modes): the hash `{P}:policies`, a field per rule (its tubes pattern,
//!   its policy as JSON), so two instances that change two rules at once both land.
//!   A change also increments `{P}:policies:version` (one script: both or neither);
//!   every instance reads that counter each [`FOLLOW_PERIOD`] and the hash when it
//!   moved, so a change made through any instance reaches the others (shared mode's
//!   scripts, a standby that takes the lead) within that period, and a quiet second
//!   costs Redis one GET.
//!
//! `--policies FILE` (TOML, [`PolicyFile`]) is read at start and its rules written into
//! the home, replacing the rules the home had for the same tubes; the home's other
//! rules stay.
//!
//! Invariants: the current set is a `watch` value (each engine's store gets every new
//! set: `Engine::start` follows it); a change is persisted before it is published, and
//! changes through this process are serialized (a lock held across the write: the
//! home's write is the one `.await` under it, and nothing else takes that lock); a rule
//! in a home that does not parse is skipped with a warning, never fatal to the others.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::redis::RedisConn;
use crate::redis::keys::Keys;
use crate::store::policy::{Policies, Policy, PolicyError, PolicyFile, Rule};

/// How often an instance with a Redis home reads the rules again.
pub const FOLLOW_PERIOD: Duration = Duration::from_secs(1);

/// The `-b` home's file name, in the log's directory.
pub const FILE_NAME: &str = "policies.json";

/// Where the rules are kept.
pub enum Home {
    /// This process only (memory mode).
    Process,
    /// A file (`-b DIR`'s `policies.json`).
    File(PathBuf),
    /// A hash in Redis (either Redis mode), and the counter each change increments.
    Redis {
        conn: RedisConn,
        key: String,
        version: String,
    },
}

impl Home {
    /// The Redis home of the namespace with `prefix`.
    pub fn redis(conn: RedisConn, prefix: &str) -> Home {
        let keys = Keys::new(prefix);
        Home::Redis {
            key: keys.policies(),
            version: keys.policies_version(),
            conn,
        }
    }
}

/// Why the rules could not be read or kept.
#[derive(Debug, thiserror::Error)]
pub enum HomeError {
    /// The file could not be read or written (the OS's words are the source).
    #[error("policies: cannot {action} {path}")]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The file is not a rule list this version reads: fix or remove it.
    #[error("policies: {path} does not parse: {why}")]
    Damaged { path: PathBuf, why: String },
    /// Redis did not answer as it should; try again once it is reachable.
    #[error("policies: Redis {command}")]
    Redis {
        command: &'static str,
        #[source]
        source: redis::RedisError,
    },
}

/// Why a change was not made.
#[derive(Debug, thiserror::Error)]
pub enum ChangeError {
    /// The rule itself is wrong: the caller says so to whoever asked (a 400).
    #[error(transparent)]
    Rule(#[from] PolicyError),
    /// It could not be persisted: nothing changed; the caller may try again.
    #[error(transparent)]
    Home(#[from] HomeError),
}

/// The process's rules, their home, and every store's subscription.
pub struct PolicyBook {
    home: Home,
    current: watch::Sender<Arc<Policies>>,
    /// Serializes this process's changes (each is a read, a change and a write).
    changing: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for PolicyBook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PolicyBook")
            .field("rules", &self.current().rules().len())
            .field("persisted", &self.persisted())
            .finish_non_exhaustive()
    }
}

impl PolicyBook {
    /// Read the rules from `home`, then write `seed`'s (the `--policies` file) into it.
    pub async fn open(home: Home, seed: Option<Policies>) -> Result<Arc<PolicyBook>, HomeError> {
        let mut set = load(&home).await?;
        if let Some(seed) = seed {
            for rule in seed.rules() {
                // A seed's rules are valid (they parsed), and its count is bounded as
                // any set's; a home full of other rules refuses the rest, said here.
                match set.with(&rule.tubes, rule.policy) {
                    Ok(next) => {
                        save_rule(&home, &next, &rule.tubes, Some(&rule.policy)).await?;
                        set = next;
                    }
                    Err(e) => tracing::warn!(tubes = %rule.tubes, err = %e,
                        "--policies: rule not kept"),
                }
            }
        }
        let (current, _) = watch::channel(Arc::new(set));
        Ok(Arc::new(PolicyBook {
            home,
            current,
            changing: tokio::sync::Mutex::new(()),
        }))
    }

    /// A book with no home and no rules (tests, tools).
    pub fn empty() -> Arc<PolicyBook> {
        let (current, _) = watch::channel(Arc::new(Policies::default()));
        Arc::new(PolicyBook {
            home: Home::Process,
            current,
            changing: tokio::sync::Mutex::new(()),
        })
    }

    /// Every new set, from the current one on.
    pub fn subscribe(&self) -> watch::Receiver<Arc<Policies>> {
        self.current.subscribe()
    }

    pub fn current(&self) -> Arc<Policies> {
        self.current.borrow().clone()
    }

    /// Whether the rules persist (`false`: this process only).
    pub fn persisted(&self) -> bool {
        !matches!(self.home, Home::Process)
    }

    /// Set `policy` for `tubes`, replacing the rule it had; persisted, then applied.
    pub async fn set(&self, tubes: &str, policy: Policy) -> Result<Arc<Policies>, ChangeError> {
        let _one = self.changing.lock().await;
        let next = self.current().with(tubes, policy)?;
        let rule = next.rule_for_pattern(tubes);
        save_rule(&self.home, &next, tubes, rule.as_ref()).await?;
        Ok(self.publish(next))
    }

    /// Remove the rule for `tubes`; `false` when there was none.
    pub async fn remove(&self, tubes: &str) -> Result<bool, HomeError> {
        let _one = self.changing.lock().await;
        let Some(next) = self.current().without(tubes) else {
            return Ok(false);
        };
        save_rule(&self.home, &next, tubes, None).await?;
        self.publish(next);
        Ok(true)
    }

    fn publish(&self, set: Policies) -> Arc<Policies> {
        let set = Arc::new(set);
        self.current.send_replace(set.clone());
        set
    }

    /// With a Redis home, read the rules each [`FOLLOW_PERIOD`] until `stop`, publishing
    /// any change another instance made (a failed read is logged once and retried).
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
                let read = match redis_version(&self.home).await {
                    Ok(v) if Some(v) == seen => continue,
                    Ok(v) => load(&self.home).await.map(|set| (v, set)),
                    Err(e) => Err(e),
                };
                match read {
                    Ok((version, set)) => {
                        seen = Some(version);
                        if failing {
                            tracing::info!("policies: reading them from Redis again");
                            failing = false;
                        }
                        if *self.current() != set {
                            self.publish(set);
                        }
                    }
                    Err(err) if !failing => {
                        let source = std::error::Error::source(&err).map(ToString::to_string);
                        tracing::warn!(%err, ?source,
                            "policies: cannot read them from Redis; keeping the last ones");
                        failing = true;
                    }
                    Err(_) => {}
                }
            }
        }))
    }
}

/// The `--policies` file's rules.
pub fn read_seed(path: &Path) -> Result<Policies, HomeError> {
    let text = std::fs::read_to_string(path).map_err(|source| HomeError::Io {
        action: "read",
        path: path.into(),
        source,
    })?;
    PolicyFile::parse(&text).map_err(|why| HomeError::Damaged {
        path: path.into(),
        why,
    })
}

/// A Redis home's change counter (0 before the first change; other homes: 0).
async fn redis_version(home: &Home) -> Result<u64, HomeError> {
    let Home::Redis { conn, version, .. } = home else {
        return Ok(0);
    };
    let v: Option<u64> = redis::cmd("GET")
        .arg(version)
        .query_async(&mut conn.clone())
        .await
        .map_err(|source| HomeError::Redis {
            command: "GET policies:version",
            source,
        })?;
    Ok(v.unwrap_or(0))
}

/// Set (`rule` non-empty: its JSON) or remove (empty) one pattern's rule and count the
/// change, in one step.
const SAVE_RULE: &str = "\
if ARGV[2] == '' then redis.call('HDEL', KEYS[1], ARGV[1]) \
else redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) end \
return redis.call('INCR', KEYS[2])";

async fn load(home: &Home) -> Result<Policies, HomeError> {
    let rules: Vec<Rule> = match home {
        Home::Process => return Ok(Policies::default()),
        Home::File(path) => match std::fs::read(path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| HomeError::Damaged {
                path: path.clone(),
                why: e.to_string(),
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(source) => {
                return Err(HomeError::Io {
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
                    command: "HGETALL policies",
                    source,
                })?;
            fields
                .into_iter()
                .filter_map(|(tubes, json)| match serde_json::from_str::<Policy>(&json) {
                    Ok(policy) => Some(Rule { tubes, policy }),
                    Err(e) => {
                        tracing::warn!(%tubes, err = %e, "policies: a rule in Redis does not parse; skipped");
                        None
                    }
                })
                .collect()
        }
    };
    Ok(Policies::from_kept(rules, |rule, err| {
        tracing::warn!(tubes = %rule.tubes, %err, "policies: a kept rule is not valid; skipped");
    }))
}

/// Persist the change of the rule for `tubes` (`None`: removed); `set` is the whole
/// set after it (what a file home writes).
async fn save_rule(
    home: &Home,
    set: &Policies,
    tubes: &str,
    policy: Option<&Policy>,
) -> Result<(), HomeError> {
    match home {
        Home::Process => Ok(()),
        Home::File(path) => {
            let path = path.clone();
            let rules = set.rules();
            tokio::task::spawn_blocking(move || write_file(&path, &rules))
                .await
                .map_err(|e| HomeError::Io {
                    action: "write",
                    path: PathBuf::new(),
                    source: std::io::Error::other(e),
                })?
        }
        Home::Redis { conn, key, version } => {
            let json = policy.map(policy_json).unwrap_or_default();
            let _: u64 = redis::Script::new(SAVE_RULE)
                .key(key)
                .key(version)
                .arg(tubes)
                .arg(json)
                .invoke_async(&mut conn.clone())
                .await
                .map_err(|source| HomeError::Redis {
                    command: "the policies script",
                    source,
                })?;
            Ok(())
        }
    }
}

fn policy_json(p: &Policy) -> String {
    // A Policy is plain numbers and options: it always serializes.
    serde_json::to_string(p).unwrap_or_default()
}

/// Write `rules` to `path` whole: a new file beside it, synced, renamed over it, the
/// directory synced.
fn write_file(path: &Path, rules: &[Rule]) -> Result<(), HomeError> {
    use std::io::Write;
    let io = |action, p: &Path| {
        let p = p.to_path_buf();
        move |source| HomeError::Io {
            action,
            path: p,
            source,
        }
    };
    let tmp = path.with_extension("json.new");
    let text = serde_json::to_vec_pretty(rules).unwrap_or_default();
    let mut f = std::fs::File::create(&tmp).map_err(io("create", &tmp))?;
    f.write_all(&text).map_err(io("write", &tmp))?;
    f.sync_all().map_err(io("sync", &tmp))?;
    std::fs::rename(&tmp, path).map_err(io("rename into place", path))?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io("sync", dir))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::policy::DeadLetter;

    fn dl(n: u32) -> Policy {
        Policy {
            dead_letter: Some(DeadLetter {
                reserves: Some(n),
                timeouts: None,
            }),
            backoff: None,
        }
    }

    #[tokio::test]
    async fn a_file_home_keeps_changes_and_the_seed_replaces_its_tubes() {
        let dir = std::env::temp_dir().join(format!("rs-policies-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(FILE_NAME);
        let _ = std::fs::remove_file(&path);
        let book = PolicyBook::open(Home::File(path.clone()), None)
            .await
            .unwrap();
        let mut rx = book.subscribe();
        book.set("a*", dl(3)).await.unwrap();
        book.set("b", dl(4)).await.unwrap();
        assert!(rx.has_changed().unwrap());
        assert_eq!(rx.borrow_and_update().rules().len(), 2);
        assert!(book.remove("b").await.unwrap());
        assert!(!book.remove("b").await.unwrap());

        let seed = Policies::default()
            .with("a*", dl(9))
            .unwrap()
            .with("c", dl(1))
            .unwrap();
        let again = PolicyBook::open(Home::File(path.clone()), Some(seed))
            .await
            .unwrap();
        let rules = again.current().rules();
        let got: Vec<(String, u32)> = rules
            .iter()
            .map(|r| {
                (
                    r.tubes.clone(),
                    r.policy.dead_letter.unwrap().reserves.unwrap(),
                )
            })
            .collect();
        assert_eq!(got, [("c".to_string(), 1), ("a*".to_string(), 9)]);
        let third = PolicyBook::open(Home::File(path.clone()), None)
            .await
            .unwrap();
        assert_eq!(*third.current(), *again.current(), "the seed was kept");

        std::fs::write(&path, b"{not json").unwrap();
        assert!(matches!(
            PolicyBook::open(Home::File(path), None).await,
            Err(HomeError::Damaged { .. })
        ));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
